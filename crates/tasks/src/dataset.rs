//! Balanced, seeded datasets with disjoint splits; sample i depends only on (task, layout,
//! seed, split, i), so any sample can be regenerated alone.
//!
//! Balancing: the dataset of n samples holds every combination (slot x answer x hop count)
//! floor(n / C) times plus n mod C distinct combinations, in an order shuffled by the seed. The
//! remainder is drawn round-robin over hop counts, so hop counts stay in equal shares (to within
//! one) at any n. The shuffle is a keyed permutation of the indices (see [`Permutation`]), so
//! sample i needs no list.
//!
//! Splits never overlap: a core instance belongs to the split given by a hash of its tokens
//! (three buckets); a split's generator redraws a sample until its core hashes into its bucket.
//! Disjointness therefore holds by construction, for any sizes and seeds.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::rng::{hash_words, mix64, stream, Permutation};
use crate::{Sample, Task, TaskError};

/// Attempts per sample before a layout is declared too small for disjoint splits; with three
/// buckets a content-rich layout fails with probability (2/3)^256.
const MAX_ATTEMPTS: u32 = 256;

/// Which part of the data: training, validation or test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Training data.
    Train,
    /// Validation data (evaluated during training).
    Val,
    /// Held-out test data.
    Test,
}

impl Split {
    /// All splits in order.
    pub const ALL: [Split; 3] = [Split::Train, Split::Val, Split::Test];

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
            Split::Test => "test",
        }
    }

    fn bucket(self) -> u64 {
        match self {
            Split::Train => 0,
            Split::Val => 1,
            Split::Test => 2,
        }
    }

    /// The split a core instance (ids of the last `core_len` positions) belongs to.
    pub fn of_core(core: &[u32]) -> Split {
        match hash_words(core.iter().map(|&id| u64::from(id))) % 3 {
            0 => Split::Train,
            1 => Split::Val,
            _ => Split::Test,
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Split {
    type Err = TaskError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "train" => Ok(Split::Train),
            "val" | "validation" => Ok(Split::Val),
            "test" => Ok(Split::Test),
            other => Err(TaskError::UnknownSplit(other.to_owned())),
        }
    }
}

/// A seeded, balanced dataset of one task, split and size.
#[derive(Debug, Clone)]
pub struct Dataset {
    task: Task,
    seed: u64,
    split: Split,
    len: usize,
    extra: usize,
    order: Permutation,
    /// Per hop count, a permutation of the combinations with that hop count.
    remainder: Vec<Permutation>,
}

impl Dataset {
    /// `len` samples of `task` in `split`, each with `extra` extension tokens.
    pub fn new(
        task: Task,
        seed: u64,
        split: Split,
        len: usize,
        extra: usize,
    ) -> Result<Self, TaskError> {
        if len == 0 {
            return Err(TaskError::EmptyDataset);
        }
        let key = mix64(seed ^ mix64(task.kind() as u64 + 1) ^ mix64(split.bucket() + 11));
        let n_hops = task.layout().hops.len() as u64;
        let per_hop = task.n_combos() as u64 / n_hops;
        Ok(Self {
            order: Permutation::new(len as u64, key),
            remainder: (0..n_hops)
                .map(|h| Permutation::new(per_hop, mix64(key ^ 0xBA1A_4CED ^ h)))
                .collect(),
            task,
            seed,
            split,
            len,
            extra,
        })
    }

    /// The task.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The split.
    pub fn split(&self) -> Split {
        self.split
    }

    /// The dataset seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Extension tokens per sample.
    pub fn extra(&self) -> usize {
        self.extra
    }

    /// Tokens per sample: the layout's core length plus the extension.
    pub fn seq_len(&self) -> usize {
        self.task.layout().core_len() + self.extra
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: datasets hold at least one sample.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The combination sample `index` instantiates.
    pub fn combo(&self, index: usize) -> usize {
        let n_combos = self.task.n_combos() as u64;
        let full = (self.len as u64 / n_combos) * n_combos;
        let slot = self.order.apply(index as u64);
        // Combination c has hop count index c % n_hops (see the tasks' combination decoding).
        let combo = if slot < full {
            slot % n_combos
        } else {
            let r = slot - full;
            let n_hops = self.remainder.len() as u64;
            let hop = r % n_hops;
            self.remainder[hop as usize].apply(r / n_hops) * n_hops + hop
        };
        combo as usize
    }

    /// Sample `index` (deterministic in seed, split and index).
    pub fn sample(&self, index: usize) -> Result<Sample, TaskError> {
        if index >= self.len {
            return Err(TaskError::IndexOutOfRange {
                index,
                len: self.len,
            });
        }
        let combo = self.combo(index);
        let core_len = self.task.layout().core_len();
        let tags = |attempt: u32| {
            [
                self.seed,
                (self.task.kind() as u64) << 8 | self.split.bucket(),
                index as u64,
                u64::from(attempt),
            ]
        };
        for attempt in 0..MAX_ATTEMPTS {
            let sample = self
                .task
                .draw(combo, self.extra, &mut stream(tags(attempt)));
            let core = &sample.ids[sample.ids.len() - core_len..];
            if Split::of_core(core) == self.split {
                return Ok(sample);
            }
        }
        Err(TaskError::SplitExhausted {
            index,
            split: self.split.as_str(),
            attempts: MAX_ATTEMPTS,
        })
    }

    /// All samples in index order.
    pub fn iter(&self) -> impl Iterator<Item = Result<Sample, TaskError>> + '_ {
        (0..self.len).map(|i| self.sample(i))
    }
}

/// Counts over a generated dataset, every sample validated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub samples: usize,
    /// Samples that passed `validate`.
    pub valid: usize,
    /// Samples per hop count.
    pub per_hop: BTreeMap<usize, usize>,
    /// Sequence length of every sample.
    pub seq_len: usize,
    /// Vocabulary size (padding included).
    pub vocab_size: usize,
}

/// Generates and validates every sample of `dataset`, calling `tick` after each.
pub fn summarize(dataset: &Dataset, mut tick: impl FnMut()) -> Result<Summary, TaskError> {
    let task = dataset.task();
    let mut summary = Summary {
        seq_len: task.layout().core_len() + dataset.extra(),
        vocab_size: task.vocab().len(),
        ..Summary::default()
    };
    for sample in dataset.iter() {
        let sample = sample?;
        summary.samples += 1;
        summary.valid += usize::from(task.validate(&sample).is_ok());
        *summary.per_hop.entry(sample.hops).or_default() += 1;
        tick();
    }
    Ok(summary)
}
