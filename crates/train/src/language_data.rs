//! Batches and validation of a formal-language run (docs/tasks.md#formal-languages): labelled
//! `BOS w EOS` strings, one string length per batch (no padding), the class read at EOS.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_model::GptJ;
use ropelab_tasks::{LanguageSamples, Split};

use crate::config::LanguageData;
use crate::data::Accuracy;
use crate::lengths::{accuracy_at_lengths, spread, summarise, LengthSource};
use crate::Result;

/// The training stream and validation set of one language run.
#[derive(Debug, Clone)]
pub struct LanguageBatches {
    samples: LanguageSamples,
    lengths: [usize; 2],
    train: usize,
    val: usize,
}

impl LanguageBatches {
    /// The language of `data` with the run's `seed`, `train` strings per epoch and `val`
    /// validation strings.
    pub fn new(data: &LanguageData, seed: u64, train: usize, val: usize) -> Self {
        Self {
            samples: LanguageSamples {
                language: data.name,
                negatives: data.negatives,
                seed,
            },
            lengths: data.lengths,
            train,
            val,
        }
    }

    /// Update `step`'s batch (`step >= 1`): flat ids `[batch * (n + 2)]` of one string length n
    /// and the labels `[batch]`. Batch k of an epoch of `train / batch` batches draws its length
    /// uniformly from the training lengths (fixed by the seed and k) and its strings as
    /// indices k * batch .. (k + 1) * batch of that length, so an epoch repeats exactly.
    pub fn step_batch(&self, step: usize, batch: usize) -> (Vec<u32>, Vec<u32>) {
        let per_epoch = (self.train / batch).max(1);
        let k = (step - 1) % per_epoch;
        let [lo, hi] = self.lengths;
        let seed = self.samples.seed;
        let mut rng = ChaCha8Rng::seed_from_u64(seed.rotate_left(17) ^ (k as u64) ^ 0x1E46_7A5B);
        let n = rng.random_range(lo..=hi);
        let rows = (0..batch).map(|j| (k * batch + j) as u64);
        strings(&self.samples, Split::Train, n, rows)
    }

    /// Validation: `val` strings spread evenly over the training lengths (string i has length
    /// `lo + i mod count`); accuracy and mean cross-entropy overall and per length, in
    /// batches whose forward pass stays within `memory` bytes.
    pub fn evaluate(&self, model: &GptJ, memory: usize) -> Result<Accuracy> {
        let plan = spread(self.lengths, self.val);
        let source = LanguageInputs {
            samples: self.samples,
            split: Split::Val,
        };
        Ok(summarise(&accuracy_at_lengths(
            model, &source, &plan, memory,
        )?))
    }
}

/// The strings of a language in one split, as inputs of [`accuracy_at_lengths`]: `BOS w EOS`,
/// labelled with w's class.
#[derive(Debug, Clone, Copy)]
pub struct LanguageInputs {
    /// The language, its negatives and seed.
    pub samples: LanguageSamples,
    /// The split.
    pub split: Split,
}

impl LengthSource for LanguageInputs {
    fn tokens(&self, n: usize) -> usize {
        n + 2
    }

    fn input(&self, n: usize, index: u64) -> (Vec<u32>, u32) {
        let s = self.samples.sample(self.split, n, index);
        (s.ids, s.label)
    }
}

/// Strings `rows` of length `n` in `split` as flat ids and labels.
fn strings(
    samples: &LanguageSamples,
    split: Split,
    n: usize,
    rows: impl Iterator<Item = u64>,
) -> (Vec<u32>, Vec<u32>) {
    let mut ids = Vec::new();
    let mut labels = Vec::new();
    for index in rows {
        let s = samples.sample(split, n, index);
        ids.extend_from_slice(&s.ids);
        labels.push(s.label);
    }
    (ids, labels)
}
