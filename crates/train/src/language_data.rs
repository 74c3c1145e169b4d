//! Batches and validation of a formal-language run (docs/tasks.md#formal-languages): labelled
//! `BOS w EOS` strings, one string length per batch (no padding), the class read at EOS.

use std::collections::BTreeMap;

use candle_core::Tensor;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_model::{argmax_last, ops::cross_entropy, GptJ, Hooks};
use ropelab_tasks::{LanguageSamples, Split};

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
        self.strings(Split::Train, n, rows)
    }

    /// Validation: `val` strings spread evenly over the training lengths (string i has length
    /// `lo + i mod count`); accuracy and mean cross-entropy overall and per length, in
    /// batches whose forward pass stays within `memory` bytes.
    pub fn evaluate(&self, model: &GptJ, memory: usize) -> Result<Accuracy> {
        let model = &model.clone().frozen();
        let [lo, hi] = self.lengths;
        let count = hi - lo + 1;
        let (mut n_all, mut right_all, mut loss_sum) = (0usize, 0usize, 0f64);
        let mut per_length = BTreeMap::new();
        for (k, n) in (lo..=hi).enumerate() {
            let total = self.val / count + usize::from(k < self.val % count);
            if total == 0 {
                continue;
            }
            let batch = batch_for_budget(model.config(), n + 2, memory);
            let mut right = 0;
            for start in (0..total).step_by(batch) {
                let rows = (start..total.min(start + batch)).map(|j| j as u64);
                let (ids, labels) = self.strings(Split::Val, n, rows);
                let b = labels.len();
                let ids = Tensor::from_vec(ids, (b, n + 2), model.device())?;
                let logits = model.forward_last(&ids, &mut Hooks::new(), None)?; // [b, 2]
                let targets = Tensor::from_vec(labels.clone(), b, model.device())?;
                let loss: f32 = cross_entropy(&logits, &targets)?.to_scalar()?;
                loss_sum += f64::from(loss) * b as f64;
                let predicted = argmax_last(&logits)?;
                right += predicted
                    .iter()
                    .zip(&labels)
                    .filter(|(p, l)| p == l)
                    .count();
            }
            per_length.insert(n, right as f64 / total as f64);
            (n_all, right_all) = (n_all + total, right_all + right);
        }
        Ok(Accuracy {
            n: n_all,
            accuracy: right_all as f64 / n_all.max(1) as f64,
            loss: loss_sum / n_all.max(1) as f64,
            per_hop: BTreeMap::new(),
            token_accuracy: None,
            per_length,
        })
    }

    /// Strings `rows` of length `n` in `split` as flat ids and labels.
    fn strings(
        &self,
        split: Split,
        n: usize,
        rows: impl Iterator<Item = u64>,
    ) -> (Vec<u32>, Vec<u32>) {
        let mut ids = Vec::new();
        let mut labels = Vec::new();
        for index in rows {
            let s = self.samples.sample(split, n, index);
            ids.extend_from_slice(&s.ids);
            labels.push(s.label);
        }
        (ids, labels)
    }
}
