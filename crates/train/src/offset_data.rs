//! Batches and validation of a fixed-offset retrieval run (docs/tasks.md#fixed-offset-retrieval):
//! i.i.d. uniform tokens, one sequence length per batch (no padding); the target at a query
//! position i is the token at i - k, scored at the last position (`last_token`) or at every
//! position i >= k (`every_position`, the full-sequence variant). Accuracy is always read at the
//! last position, the farthest query of a sequence.

use candle_core::Tensor;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_model::objective::IGNORE;
use ropelab_model::{argmax_last, ops::cross_entropy, GptJ, Hooks, Objective};
use ropelab_tasks::{OffsetTask, Split};

use crate::config::OffsetData;
use crate::data::{batch_for_budget, Accuracy};
use crate::language_data::{summarise, LengthAccuracy};
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
        let [lo, hi] = self.lengths;
        let count = hi - lo + 1;
        let plan: Vec<(usize, usize)> = (lo..=hi)
            .enumerate()
            .map(|(i, n)| (n, self.val / count + usize::from(i < self.val % count)))
            .filter(|&(_, total)| total > 0)
            .collect();
        let rows =
            last_accuracy_at_lengths(model, &self.task, self.seed, Split::Val, &plan, memory)?;
        Ok(summarise(&rows))
    }
}

/// Accuracy at the last position on sequences 0..count of each (length, count) of `plan`
/// (seeded by `seed`, in `split`) with `model` (frozen, no dropout), in batches whose forward
/// pass stays within `memory` bytes.
pub fn last_accuracy_at_lengths(
    model: &GptJ,
    task: &OffsetTask,
    seed: u64,
    split: Split,
    plan: &[(usize, usize)],
    memory: usize,
) -> Result<Vec<LengthAccuracy>> {
    let model = &model.clone().frozen();
    let mut out = Vec::with_capacity(plan.len());
    for &(n, total) in plan {
        task.check_length(n)?;
        let batch = batch_for_budget(model.config(), n, memory);
        let (mut correct, mut loss_sum) = (0, 0f64);
        for start in (0..total).step_by(batch) {
            let (mut ids, mut targets) = (vec![], vec![]);
            for row in start..total.min(start + batch) {
                let seq = task.sequence(seed, split, n, row as u64);
                targets.push(task.last_target(&seq).unwrap_or(0));
                ids.extend(seq);
            }
            let b = targets.len();
            let ids = Tensor::from_vec(ids, (b, n), model.device())?;
            let logits = model.forward_last(&ids, &mut Hooks::new(), None)?; // [b, vocab]
            let t = Tensor::from_vec(targets.clone(), b, model.device())?;
            let loss: f32 = cross_entropy(&logits, &t)?.to_scalar()?;
            loss_sum += f64::from(loss) * b as f64;
            let predicted = argmax_last(&logits)?;
            correct += predicted
                .iter()
                .zip(&targets)
                .filter(|(p, t)| p == t)
                .count();
        }
        out.push(LengthAccuracy {
            length: n,
            n: total,
            correct,
            loss: loss_sum / total.max(1) as f64,
        });
    }
    Ok(out)
}
