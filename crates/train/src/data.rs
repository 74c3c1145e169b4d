//! Batches of task samples as tensors.

use std::collections::BTreeMap;

use candle_core::{Device, Tensor};
use ropelab_model::{argmax_last, ops::cross_entropy, GptJ, Hooks};
use ropelab_tasks::Dataset;
use serde::{Deserialize, Serialize};

use crate::Result;

/// A batch: input ids, answer ids and hop counts.
#[derive(Debug)]
pub struct Batch {
    /// Input ids [batch, pos] (u32).
    pub ids: Tensor,
    /// Answer ids [batch] (u32).
    pub targets: Tensor,
    /// Hop count of each row.
    pub hops: Vec<usize>,
}

/// The samples at `indices` of `dataset` as one batch (all samples have the same length).
pub fn batch(dataset: &Dataset, indices: &[usize], device: &Device) -> Result<Batch> {
    let mut ids = Vec::new();
    let mut targets = Vec::with_capacity(indices.len());
    let mut hops = Vec::with_capacity(indices.len());
    let mut len = 0;
    for &i in indices {
        let s = dataset.sample(i)?;
        len = s.ids.len();
        ids.extend_from_slice(&s.ids);
        targets.push(s.answer_id);
        hops.push(s.hops);
    }
    Ok(Batch {
        ids: Tensor::from_vec(ids, (indices.len(), len), device)?,
        targets: Tensor::from_vec(targets, indices.len(), device)?,
        hops,
    })
}

/// The samples at `indices` as flat input ids [batch * pos] and answer ids [batch].
pub fn batch_ids(dataset: &Dataset, indices: &[usize]) -> Result<(Vec<u32>, Vec<u32>)> {
    let mut ids = Vec::new();
    let mut targets = Vec::with_capacity(indices.len());
    for &i in indices {
        let s = dataset.sample(i)?;
        ids.extend_from_slice(&s.ids);
        targets.push(s.answer_id);
    }
    Ok((ids, targets))
}

/// Accuracy of last-token prediction, overall and per hop count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Samples evaluated.
    pub n: usize,
    /// Fraction whose argmax at the query equals the answer.
    pub accuracy: f64,
    /// Mean cross-entropy at the query.
    pub loss: f64,
    /// Accuracy per hop count.
    pub per_hop: BTreeMap<usize, f64>,
}

/// Evaluates `model` on every sample of `dataset` (batches of `batch_size`, no dropout).
pub fn evaluate(model: &GptJ, dataset: &Dataset, batch_size: usize) -> Result<Accuracy> {
    let mut correct = 0usize;
    let mut loss_sum = 0f64;
    let mut per_hop: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let indices: Vec<usize> = (0..dataset.len()).collect();
    for chunk in indices.chunks(batch_size.max(1)) {
        let b = batch(dataset, chunk, model.device())?;
        let logits = model.forward_last(&b.ids, &mut Hooks::new(), None)?;
        let loss: f32 = cross_entropy(&logits, &b.targets)?.to_scalar()?;
        loss_sum += f64::from(loss) * chunk.len() as f64;
        let predicted = argmax_last(&logits)?;
        let targets: Vec<u32> = b.targets.to_vec1()?;
        for ((p, t), h) in predicted.iter().zip(&targets).zip(&b.hops) {
            let entry = per_hop.entry(*h).or_default();
            entry.1 += 1;
            if p == t {
                correct += 1;
                entry.0 += 1;
            }
        }
    }
    let n = dataset.len();
    Ok(Accuracy {
        n,
        accuracy: correct as f64 / n as f64,
        loss: loss_sum / n as f64,
        per_hop: per_hop
            .into_iter()
            .map(|(h, (c, t))| (h, c as f64 / t as f64))
            .collect(),
    })
}
