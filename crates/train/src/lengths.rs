//! Accuracy per input length of a last-position classifier (formal languages: the class at EOS;
//! fixed-offset retrieval: the token k back): one evaluation loop for every task whose inputs
//! of one length are drawn by index, each length in batches sized to a memory budget.

use candle_core::Tensor;
use ropelab_model::{argmax_last, ops::cross_entropy, GptJ, Hooks};
use serde::{Deserialize, Serialize};

use crate::data::{batch_for_budget, Accuracy};
use crate::Result;

/// The classifier's accuracy at one input length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LengthAccuracy {
    /// Input length (a language string's, without BOS and EOS).
    pub length: usize,
    /// Inputs classified.
    pub n: usize,
    /// Inputs classified correctly.
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

/// Labelled inputs of a given length, drawn by index (a split and seed fixed by the source).
pub trait LengthSource {
    /// Tokens of an input of length `n` (a language string adds BOS and EOS).
    fn tokens(&self, n: usize) -> usize;
    /// Refuses a length the task cannot draw.
    fn check_length(&self, _n: usize) -> Result<()> {
        Ok(())
    }
    /// Input `index` of length `n`: its ids and the label read at the last position.
    fn input(&self, n: usize, index: u64) -> (Vec<u32>, u32);
}

/// Classifies inputs 0..count of each (length, count) of `plan` from `source` with `model`
/// (frozen, no dropout), in batches whose forward pass stays within `memory` bytes.
pub fn accuracy_at_lengths(
    model: &GptJ,
    source: &impl LengthSource,
    plan: &[(usize, usize)],
    memory: usize,
) -> Result<Vec<LengthAccuracy>> {
    let model = &model.clone().frozen();
    let mut out = Vec::with_capacity(plan.len());
    for &(n, total) in plan {
        source.check_length(n)?;
        let seq = source.tokens(n);
        let batch = batch_for_budget(model.config(), seq, memory);
        let (mut correct, mut loss_sum) = (0, 0f64);
        for start in (0..total).step_by(batch) {
            let (mut ids, mut labels) = (vec![], vec![]);
            for row in start..total.min(start + batch) {
                let (input, label) = source.input(n, row as u64);
                ids.extend(input);
                labels.push(label);
            }
            let b = labels.len();
            let ids = Tensor::from_vec(ids, (b, seq), model.device())?;
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

/// `total` validation inputs spread evenly over the lengths `lo..=hi` (input i has length
/// `lo + i mod count`), as a plan for [`accuracy_at_lengths`].
pub fn spread(lengths: [usize; 2], total: usize) -> Vec<(usize, usize)> {
    let [lo, hi] = lengths;
    let count = hi - lo + 1;
    (lo..=hi)
        .enumerate()
        .map(|(k, n)| (n, total / count + usize::from(k < total % count)))
        .filter(|&(_, total)| total > 0)
        .collect()
}

/// Overall accuracy and loss of per-length rows, with the accuracy per length.
pub fn summarise(rows: &[LengthAccuracy]) -> Accuracy {
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
