//! Batches and validation of a formal-language run (docs/tasks.md#formal-languages): labelled
//! `BOS w EOS` strings, one string length per batch (no padding), the class read at EOS.

use candle_core::Tensor;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_model::{argmax_last, ops::cross_entropy, GptJ, Hooks};
use ropelab_tasks::{LanguageSamples, Split};
use serde::{Deserialize, Serialize};

use crate::config::LanguageData;
use crate::data::{batch_for_budget, Accuracy};
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
        let [lo, hi] = self.lengths;
        let count = hi - lo + 1;
        let plan: Vec<(usize, usize)> = (lo..=hi)
            .enumerate()
            .map(|(k, n)| (n, self.val / count + usize::from(k < self.val % count)))
            .filter(|&(_, total)| total > 0)
            .collect();
        let rows = accuracy_at_lengths(model, &self.samples, Split::Val, &plan, memory)?;
        Ok(summarise(&rows))
    }
}

/// The classifier's accuracy at one string length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LengthAccuracy {
    /// String length (without BOS and EOS).
    pub length: usize,
    /// Strings classified.
    pub n: usize,
    /// Strings classified correctly.
    pub correct: usize,
    /// Mean cross-entropy.
    pub loss: f64,
}

impl LengthAccuracy {
    /// The fraction classified correctly.
    pub fn accuracy(&self) -> f64 {
        self.correct as f64 / self.n.max(1) as f64
    }
}

/// Classifies strings 0..count of each (length, count) of `plan` from `samples` in `split`
/// with `model` (frozen, no dropout), in batches whose forward pass stays within `memory`
/// bytes.
pub fn accuracy_at_lengths(
    model: &GptJ,
    samples: &LanguageSamples,
    split: Split,
    plan: &[(usize, usize)],
    memory: usize,
) -> Result<Vec<LengthAccuracy>> {
    let model = &model.clone().frozen();
    let mut out = Vec::with_capacity(plan.len());
    for &(n, total) in plan {
        let batch = batch_for_budget(model.config(), n + 2, memory);
        let (mut correct, mut loss_sum) = (0, 0f64);
        for start in (0..total).step_by(batch) {
            let rows = (start..total.min(start + batch)).map(|j| j as u64);
            let (ids, labels) = strings(samples, split, n, rows);
            let b = labels.len();
            let ids = Tensor::from_vec(ids, (b, n + 2), model.device())?;
            let logits = model.forward_last(&ids, &mut Hooks::new(), None)?; // [b, classes]
            let targets = Tensor::from_vec(labels.clone(), b, model.device())?;
            let loss: f32 = cross_entropy(&logits, &targets)?.to_scalar()?;
            loss_sum += f64::from(loss) * b as f64;
            let predicted = argmax_last(&logits)?;
            correct += predicted
                .iter()
                .zip(&labels)
                .filter(|(p, l)| p == l)
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

/// Overall accuracy and loss of per-length rows, with the accuracy per length.
pub(crate) fn summarise(rows: &[LengthAccuracy]) -> Accuracy {
    let n: usize = rows.iter().map(|r| r.n).sum();
    let correct: usize = rows.iter().map(|r| r.correct).sum();
    let loss: f64 = rows.iter().map(|r| r.loss * r.n as f64).sum();
    Accuracy {
        n,
        accuracy: correct as f64 / n.max(1) as f64,
        loss: loss / n.max(1) as f64,
        per_length: rows.iter().map(|r| (r.length, r.accuracy())).collect(),
        ..Accuracy::default()
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
