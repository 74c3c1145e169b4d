//! Batches of task samples as tensors.

use std::collections::BTreeMap;

use candle_core::{Device, Tensor};
use ropelab_io::resources::bytes;
use ropelab_model::objective::{cross_entropy_masked, IGNORE};
use ropelab_model::{
    argmax_last, ops::cross_entropy, GptJ, Hooks, Intervention, ModelConfig, Objective,
};
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

/// The samples at `indices` as flat input ids [batch * pos] and the targets `objective`
/// scores: the answers [batch] (last token), or every position's next token with the answer
/// last [batch * pos] (every position; a padding token as the next token is not scored).
pub fn batch_targets(
    dataset: &Dataset,
    indices: &[usize],
    objective: Objective,
) -> Result<(Vec<u32>, Vec<u32>)> {
    let (ids, answers) = batch_ids(dataset, indices)?;
    if !objective.every_position() {
        return Ok((ids, answers));
    }
    Ok((ids.clone(), next_tokens(&ids, &answers)))
}

/// Every position's next token, the answer at each sequence's last position; a padding next
/// token (id 0) is [`IGNORE`]d. `ids` [batch * pos], `answers` [batch].
fn next_tokens(ids: &[u32], answers: &[u32]) -> Vec<u32> {
    let t = ids.len() / answers.len().max(1);
    ids.chunks_exact(t)
        .zip(answers)
        .flat_map(|(row, &answer)| {
            row[1..]
                .iter()
                .map(|&next| if next == 0 { IGNORE } else { next })
                .chain(std::iter::once(answer))
        })
        .collect()
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
    /// Every-position runs: the fraction of scored positions whose next token is predicted
    /// (and `loss` is the mean cross-entropy over them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_accuracy: Option<f64>,
    /// Language runs: accuracy per string length (without BOS and EOS).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_length: BTreeMap<usize, f64>,
    /// Canonical-task runs: accuracy per answer position.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_position: BTreeMap<usize, f64>,
}

/// Most sequences in one evaluation batch.
pub const EVAL_BATCH: usize = 512;

/// Default memory budget of one evaluation forward pass, in bytes (activations only).
pub const EVAL_MEMORY: usize = 256 << 20;

/// Estimated peak activation bytes of one inference forward pass over one sequence of
/// `seq_len` tokens (f32, no autograd graph): the residual stream and q/k/v and their rotations
/// (about 12 x pos x d_model), the MLP's hidden layer before and after GELU (3 x pos x d_mlp),
/// and the attention scores, masked scores, softmax and pattern (5 x heads x pos^2).
/// Saturating: an absurd length gives a huge estimate, never an overflow.
pub fn forward_bytes(config: &ModelConfig, seq_len: usize) -> u64 {
    let t = seq_len;
    [
        bytes(&[4, 12, t, config.d_model]),
        bytes(&[4, 3, t, config.d_mlp]),
        bytes(&[4, 5, config.n_heads, t, t]),
    ]
    .into_iter()
    .fold(0, u64::saturating_add)
}

/// Sequences per inference batch so that one forward pass stays within `budget` bytes:
/// between 1 and [`EVAL_BATCH`]. Peak memory therefore does not grow with the number of
/// samples evaluated.
pub fn batch_for_budget(config: &ModelConfig, seq_len: usize, budget: usize) -> usize {
    let fit = budget as u64 / forward_bytes(config, seq_len).max(1);
    usize::try_from(fit)
        .unwrap_or(EVAL_BATCH)
        .clamp(1, EVAL_BATCH)
}

/// [`evaluate`] for a run trained on `objective`: every position adds the token accuracy and
/// reports the loss over every scored position (the answer accuracy stays the headline).
pub fn evaluate_objective(
    model: &GptJ,
    dataset: &Dataset,
    memory: usize,
    objective: Objective,
) -> Result<Accuracy> {
    if !objective.every_position() {
        return evaluate(model, dataset, memory);
    }
    let model = &model.clone().frozen();
    let c = model.config();
    let t = dataset.seq_len();
    // The logits at every position (and their log-softmax) come on top of the activations.
    let per_seq = forward_bytes(c, t).saturating_add(bytes(&[4, 3, t, c.out_dim()]));
    let batch_size = usize::try_from(memory as u64 / per_seq.max(1))
        .unwrap_or(EVAL_BATCH)
        .clamp(1, EVAL_BATCH);
    let mut tally = Tally::default();
    let (mut scored, mut right, mut loss_sum) = (0usize, 0usize, 0f64);
    for start in (0..dataset.len()).step_by(batch_size) {
        let chunk: Vec<usize> = (start..dataset.len().min(start + batch_size)).collect();
        let b = batch(dataset, &chunk, model.device())?;
        let logits = model.forward(&b.ids, &mut Hooks::new(), None)?; // [batch, pos, out]
        let (rows, pos, out) = logits.dims3()?;
        tally.add(&logits.narrow(1, pos - 1, 1)?.squeeze(1)?, &b)?;
        let ids: Vec<u32> = b.ids.flatten_all()?.to_vec1()?;
        let targets = next_tokens(&ids, &b.targets.to_vec1()?);
        let flat = logits.reshape((rows * pos, out))?;
        let n = targets.iter().filter(|&&t| t != IGNORE).count();
        let loss: f32 = cross_entropy_masked(&flat, &targets)?.to_scalar()?;
        loss_sum += f64::from(loss) * n as f64;
        scored += n;
        for (p, t) in argmax_last(&flat)?.iter().zip(&targets) {
            right += usize::from(p == t);
        }
    }
    let mut acc = tally.finish();
    acc.loss = loss_sum / scored.max(1) as f64;
    acc.token_accuracy = Some(right as f64 / scored.max(1) as f64);
    Ok(acc)
}

/// Evaluates `model` on every sample of `dataset` without dropout, in batches sized so that a
/// forward pass stays within `memory` bytes (see [`batch_for_budget`]). The model runs frozen
/// (no autograd graph), whatever it was given as.
pub fn evaluate(model: &GptJ, dataset: &Dataset, memory: usize) -> Result<Accuracy> {
    evaluate_intervened(model, dataset, memory, &[])
}

/// [`evaluate`] with `interventions` applied to every forward pass (e.g. heads restricted to a
/// band of rotary planes: `ropelab mask`).
pub fn evaluate_intervened(
    model: &GptJ,
    dataset: &Dataset,
    memory: usize,
    interventions: &[Intervention],
) -> Result<Accuracy> {
    Ok(tally_intervened(model, dataset, memory, interventions)?.finish())
}

/// The running counts behind [`evaluate_intervened`] (correct answers per hop count, e.g. for
/// intervals over the samples).
pub fn tally_intervened(
    model: &GptJ,
    dataset: &Dataset,
    memory: usize,
    interventions: &[Intervention],
) -> Result<Tally> {
    let model = &model.clone().frozen();
    let batch_size = batch_for_budget(model.config(), dataset.seq_len(), memory);
    let mut tally = Tally::default();
    for start in (0..dataset.len()).step_by(batch_size) {
        let chunk: Vec<usize> = (start..dataset.len().min(start + batch_size)).collect();
        let b = batch(dataset, &chunk, model.device())?;
        let mut hooks = interventions
            .iter()
            .cloned()
            .fold(Hooks::new(), Hooks::intervene);
        let logits = model.forward_last(&b.ids, &mut hooks, None)?;
        tally.add(&logits, &b)?;
    }
    Ok(tally)
}

/// Running counts of last-token predictions: correct answers overall and per hop count, and
/// the summed cross-entropy.
#[derive(Debug, Default)]
pub struct Tally {
    n: usize,
    correct: usize,
    loss_sum: f64,
    per_hop: BTreeMap<usize, (usize, usize)>,
}

impl Tally {
    /// Adds a batch: `logits` [batch, vocab] at the query against the batch's answers.
    pub fn add(&mut self, logits: &Tensor, b: &Batch) -> Result<()> {
        let rows = b.hops.len();
        let loss: f32 = cross_entropy(logits, &b.targets)?.to_scalar()?;
        self.loss_sum += f64::from(loss) * rows as f64;
        let predicted = argmax_last(logits)?;
        let targets: Vec<u32> = b.targets.to_vec1()?;
        for ((p, t), h) in predicted.iter().zip(&targets).zip(&b.hops) {
            let entry = self.per_hop.entry(*h).or_default();
            entry.1 += 1;
            if p == t {
                self.correct += 1;
                entry.0 += 1;
            }
        }
        self.n += rows;
        Ok(())
    }

    /// (correct, samples) per hop count of everything added.
    pub fn per_hop_counts(&self) -> &BTreeMap<usize, (usize, usize)> {
        &self.per_hop
    }

    /// The accuracy of everything added.
    pub fn finish(self) -> Accuracy {
        let n = self.n.max(1) as f64;
        Accuracy {
            n: self.n,
            accuracy: self.correct as f64 / n,
            loss: self.loss_sum / n,
            per_hop: self
                .per_hop
                .into_iter()
                .map(|(h, (c, t))| (h, c as f64 / t as f64))
                .collect(),
            token_accuracy: None,
            per_length: BTreeMap::new(),
            per_position: BTreeMap::new(),
        }
    }
}
