//! Batches, validation and the two test splits of an ambiguous run (docs/tasks.md, "The
//! ambiguous task"): agree samples of `items` items to train and validate on, the answer value
//! scored at the last position; conflict samples to read which rule the model follows; and
//! longer agree samples (more items before the others) for length generalisation.

use candle_core::Tensor;
use ropelab_model::{argmax_last, GptJ, Hooks};
use ropelab_tasks::ambiguous::{Kind, Mechanism};
use ropelab_tasks::{AmbiguousTask, Split};
use serde::{Deserialize, Serialize};

use crate::config::AmbiguousData;
use crate::data::{batch_for_budget, Accuracy};
use crate::lengths::{accuracy_at_lengths, summarise, LengthSource};
use crate::Result;

/// The training stream and validation set of one ambiguous run.
#[derive(Debug, Clone)]
pub struct AmbiguousBatches {
    task: AmbiguousTask,
    seed: u64,
    train: usize,
    val: usize,
}

impl AmbiguousBatches {
    /// The task of `data` with the run's `seed`, `train` sequences per epoch and `val`
    /// validation sequences.
    pub fn new(data: &AmbiguousData, seed: u64, train: usize, val: usize) -> Result<Self> {
        Ok(Self {
            task: data.task()?,
            seed,
            train,
            val,
        })
    }

    /// Update `step`'s batch (`step >= 1`): flat ids `[batch * (items + 1)]` and the answers
    /// `[batch]`: training samples `(step - 1) * batch ..` modulo `train`, so an epoch repeats.
    pub fn step_batch(&self, step: usize, batch: usize) -> (Vec<u32>, Vec<u32>) {
        let (mut ids, mut answers) = (vec![], vec![]);
        for j in 0..batch {
            let index = ((step - 1) * batch + j) % self.train.max(1);
            let s = self
                .task
                .sample(self.seed, Kind::Agree(Split::Train), index as u64);
            answers.push(s.answers(&self.task).1);
            ids.extend(s.ids);
        }
        (ids, answers)
    }

    /// Validation: `val` agree samples of the validation split; accuracy and mean
    /// cross-entropy of the answer, in batches whose forward pass stays within `memory` bytes.
    pub fn evaluate(&self, model: &GptJ, memory: usize) -> Result<Accuracy> {
        let source = AmbiguousInputs {
            task: self.task.clone(),
            seed: self.seed,
            split: Split::Val,
        };
        let plan = [(self.task.items(), self.val)];
        Ok(summarise(&accuracy_at_lengths(
            model, &source, &plan, memory,
        )?))
    }
}

/// Agree samples of one split as inputs of [`accuracy_at_lengths`]: the length of an input is
/// its number of items; the training length draws the split's samples, a longer one the length
/// split's (the extra items first, the offset still within the training range).
#[derive(Debug, Clone)]
pub struct AmbiguousInputs {
    /// The task.
    pub task: AmbiguousTask,
    /// The run's seed.
    pub seed: u64,
    /// The split of training-length inputs.
    pub split: Split,
}

impl LengthSource for AmbiguousInputs {
    fn tokens(&self, n: usize) -> usize {
        n + 1
    }

    fn check_length(&self, n: usize) -> Result<()> {
        if n < self.task.items() {
            return Err(crate::TrainError::Config(format!(
                "ambiguous inputs have at least the training length's {} items, not {n}",
                self.task.items()
            )));
        }
        Ok(())
    }

    fn input(&self, n: usize, index: u64) -> (Vec<u32>, u32) {
        let extra = n - self.task.items();
        let kind = if extra == 0 {
            Kind::Agree(self.split)
        } else {
            Kind::Length(extra)
        };
        let s = self.task.sample(self.seed, kind, index);
        let answer = s.answers(&self.task).1;
        (s.ids, answer)
    }
}

/// The mechanism fractions of a model's answers on the conflict split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MechanismFractions {
    /// Conflict samples answered.
    pub n: usize,
    /// Fraction answered with the positional item's value.
    pub positional: f64,
    /// Fraction answered with the symbolic item's value.
    pub symbolic: f64,
    /// Fraction answered with neither.
    pub neither: f64,
}

/// Which rule `model` follows: its answers (argmax at the last position) to conflict samples
/// `0..count` of `task` for `seed`, as fractions, in batches whose forward pass stays within
/// `memory` bytes.
pub fn conflict_mechanisms(
    model: &GptJ,
    task: &AmbiguousTask,
    seed: u64,
    count: usize,
    memory: usize,
) -> Result<MechanismFractions> {
    let model = &model.clone().frozen();
    let seq = task.items() + 1;
    let batch = batch_for_budget(model.config(), seq, memory);
    let mut tally = [0usize; 3];
    for start in (0..count).step_by(batch.max(1)) {
        let samples: Vec<_> = (start..count.min(start + batch))
            .map(|i| task.sample(seed, Kind::Conflict, i as u64))
            .collect();
        let ids: Vec<u32> = samples.iter().flat_map(|s| s.ids.clone()).collect();
        let ids = Tensor::from_vec(ids, (samples.len(), seq), model.device())?;
        let logits = model.forward_last(&ids, &mut Hooks::new(), None)?; // [batch, vocab]
        for (s, p) in samples.iter().zip(argmax_last(&logits)?) {
            let slot = match task.mechanism(s, p) {
                Mechanism::Positional => 0,
                Mechanism::Symbolic => 1,
                Mechanism::Neither => 2,
            };
            tally[slot] += 1;
        }
    }
    let n = count.max(1) as f64;
    Ok(MechanismFractions {
        n: count,
        positional: tally[0] as f64 / n,
        symbolic: tally[1] as f64 / n,
        neither: tally[2] as f64 / n,
    })
}
