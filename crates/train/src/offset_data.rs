//! Batches and validation of a fixed-offset retrieval run (docs/tasks.md#fixed-offset-retrieval):
//! i.i.d. uniform tokens, one sequence length per batch (no padding); the target at a query
//! position i is the token at i - k, scored at the last position (`last_token`) or at every
//! position i >= k (`every_position`, the full-sequence variant). Accuracy is always read at the
//! last position, the farthest query of a sequence.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_model::objective::IGNORE;
use ropelab_model::{GptJ, Objective};
use ropelab_tasks::{OffsetTask, Split};

use crate::config::OffsetData;
use crate::data::Accuracy;
use crate::lengths::{accuracy_at_lengths, spread, summarise, LengthSource};
use crate::Result;

/// The training stream and validation set of one offset run.
#[derive(Debug, Clone)]
pub struct OffsetBatches {
    task: OffsetTask,
    seed: u64,
    lengths: [usize; 2],
    train: usize,
    val: usize,
}

impl OffsetBatches {
    /// The task of `data` with the run's `seed`, `train` sequences per epoch and `val`
    /// validation sequences.
    pub fn new(data: &OffsetData, seed: u64, train: usize, val: usize) -> Result<Self> {
        Ok(Self {
            task: OffsetTask::new(data.vocab, data.k)?,
            seed,
            lengths: data.lengths,
            train,
            val,
        })
    }

    /// Update `step`'s batch (`step >= 1`): flat ids `[batch * n]` of one length n and the
    /// targets (`[batch]` at the last position, or `[batch * n]` with [`IGNORE`] at the first k
    /// positions for `every_position`). Batch j of an epoch of `train / batch` batches draws
    /// its length uniformly from the training lengths (fixed by the seed and j) and its
    /// sequences as indices j * batch .. (j + 1) * batch of that length, so an epoch repeats.
    pub fn step_batch(
        &self,
        step: usize,
        batch: usize,
        objective: Objective,
    ) -> (Vec<u32>, Vec<u32>) {
        let per_epoch = (self.train / batch).max(1);
        let j = (step - 1) % per_epoch;
        let [lo, hi] = self.lengths;
        let mut rng =
            ChaCha8Rng::seed_from_u64(self.seed.rotate_left(23) ^ (j as u64) ^ 0x0FF5_E7B4);
        let n = rng.random_range(lo..=hi);
        let (mut ids, mut targets) = (vec![], vec![]);
        for row in (0..batch).map(|r| (j * batch + r) as u64) {
            let seq = self.task.sequence(self.seed, Split::Train, n, row);
            if objective.every_position() {
                targets.extend(
                    self.task
                        .targets(&seq)
                        .into_iter()
                        .map(|t| t.unwrap_or(IGNORE)),
                );
            } else {
                targets.push(self.task.last_target(&seq).unwrap_or(IGNORE));
            }
            ids.extend(seq);
        }
        (ids, targets)
    }

    /// Validation: `val` sequences spread evenly over the training lengths; accuracy and mean
    /// cross-entropy at the last position, overall and per length, in batches whose forward
    /// pass stays within `memory` bytes.
    pub fn evaluate(&self, model: &GptJ, memory: usize) -> Result<Accuracy> {
        let plan = spread(self.lengths, self.val);
        let source = OffsetInputs {
            task: self.task,
            seed: self.seed,
            split: Split::Val,
        };
        Ok(summarise(&accuracy_at_lengths(
            model, &source, &plan, memory,
        )?))
    }
}

/// The sequences of a fixed-offset task in one split, as inputs of [`accuracy_at_lengths`]:
/// labelled with the target at the last position.
#[derive(Debug, Clone, Copy)]
pub struct OffsetInputs {
    /// The task.
    pub task: OffsetTask,
    /// The run's seed.
    pub seed: u64,
    /// The split.
    pub split: Split,
}

impl LengthSource for OffsetInputs {
    fn tokens(&self, n: usize) -> usize {
        n
    }

    fn check_length(&self, n: usize) -> Result<()> {
        Ok(self.task.check_length(n)?)
    }

    fn input(&self, n: usize, index: u64) -> (Vec<u32>, u32) {
        let seq = self.task.sequence(self.seed, self.split, n, index);
        let target = self.task.last_target(&seq).unwrap_or(0);
        (seq, target)
    }
}
