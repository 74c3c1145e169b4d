//! Batches and validation of a canonical-task run (docs/tasks.md#canonical-tasks): fixed-length
//! samples (`len` items and a query), the answer scored at the query; accuracy overall and per
//! answer position.

use std::collections::BTreeMap;

use candle_core::Tensor;
use ropelab_model::{argmax_last, ops::cross_entropy, GptJ, Hooks};
use ropelab_tasks::{CanonicalTask, Split};
use serde::{Deserialize, Serialize};

use crate::data::{batch_for_budget, Accuracy};
use crate::Result;

/// The training stream and validation set of one canonical run.
#[derive(Debug, Clone)]
pub struct CanonicalBatches {
    task: CanonicalTask,
    seed: u64,
    train: usize,
    val: usize,
}

impl CanonicalBatches {
    /// The task with the run's `seed`, `train` samples per epoch and `val` validation samples.
    pub fn new(task: CanonicalTask, seed: u64, train: usize, val: usize) -> Result<Self> {
        task.check()?;
        Ok(Self {
            task,
            seed,
            train,
            val,
        })
    }

    /// Update `step`'s batch (`step >= 1`): flat ids `[batch * (len + 1)]` and the answers
    /// `[batch]`; batch j of an epoch of `train / batch` batches holds samples
    /// j * batch .. (j + 1) * batch, so an epoch repeats exactly.
    pub fn step_batch(&self, step: usize, batch: usize) -> (Vec<u32>, Vec<u32>) {
        let per_epoch = (self.train / batch).max(1);
        let j = (step - 1) % per_epoch;
        let (mut ids, mut answers) = (vec![], vec![]);
        for r in 0..batch {
            let s = self
                .task
                .sample(self.seed, Split::Train, (j * batch + r) as u64);
            ids.extend(s.ids);
            answers.push(s.answer);
        }
        (ids, answers)
    }

    /// Validation on `val` samples: accuracy and mean cross-entropy overall and per answer
    /// position.
    pub fn evaluate(&self, model: &GptJ, memory: usize) -> Result<Accuracy> {
        let rows =
            accuracy_by_position(model, &self.task, self.seed, Split::Val, self.val, memory)?;
        let n: usize = rows.iter().map(|r| r.n).sum();
        let correct: usize = rows.iter().map(|r| r.correct).sum();
        let loss: f64 = rows.iter().map(|r| r.loss * r.n as f64).sum();
        Ok(Accuracy {
            n,
            accuracy: correct as f64 / n.max(1) as f64,
            loss: loss / n.max(1) as f64,
            per_position: rows
                .iter()
                .map(|r| (r.position, r.correct as f64 / r.n.max(1) as f64))
                .collect::<BTreeMap<_, _>>(),
            ..Accuracy::default()
        })
    }
}

/// Accuracy at one answer position.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PositionAccuracy {
    /// Answer position (0 .. len).
    pub position: usize,
    /// Samples.
    pub n: usize,
    /// Answered correctly.
    pub correct: usize,
    /// Mean cross-entropy.
    pub loss: f64,
}

/// Samples 0..n of `split` (seed `seed`) answered by `model` (frozen), per answer position,
/// in batches whose forward pass stays within `memory` bytes.
pub fn accuracy_by_position(
    model: &GptJ,
    task: &CanonicalTask,
    seed: u64,
    split: Split,
    n: usize,
    memory: usize,
) -> Result<Vec<PositionAccuracy>> {
    let model = &model.clone().frozen();
    let seq = task.seq_len();
    let batch = batch_for_budget(model.config(), seq, memory);
    let mut rows: Vec<PositionAccuracy> = (0..task.len)
        .map(|position| PositionAccuracy {
            position,
            n: 0,
            correct: 0,
            loss: 0.0,
        })
        .collect();
    for start in (0..n).step_by(batch) {
        let samples: Vec<_> = (start..n.min(start + batch))
            .map(|i| task.sample(seed, split, i as u64))
            .collect();
        let b = samples.len();
        let ids: Vec<u32> = samples.iter().flat_map(|s| s.ids.iter().copied()).collect();
        let answers: Vec<u32> = samples.iter().map(|s| s.answer).collect();
        let ids = Tensor::from_vec(ids, (b, seq), model.device())?;
        let logits = model.forward_last(&ids, &mut Hooks::new(), None)?; // [b, vocab]
        let predicted = argmax_last(&logits)?;
        for (i, s) in samples.iter().enumerate() {
            let one = logits.narrow(0, i, 1)?;
            let t = Tensor::from_vec(vec![s.answer], 1, model.device())?;
            let loss: f32 = cross_entropy(&one, &t)?.to_scalar()?;
            let row = &mut rows[s.answer_pos];
            row.n += 1;
            row.correct += usize::from(predicted[i] == answers[i]);
            row.loss += f64::from(loss);
        }
    }
    for r in &mut rows {
        r.loss /= r.n.max(1) as f64;
    }
    Ok(rows)
}
