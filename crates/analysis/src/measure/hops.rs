//! The hop map of a number-task model (`ropelab hops`, docs/multihead.md, "Hop map"): for every
//! layer and head, the attention mass each query position puts on the position j hops along its
//! own chain (j = 1..4), from the last token only and from every position whose chain is
//! defined; and, causally, the test accuracy with that edge knocked out (its attention weight
//! zeroed and the row renormalised, through the model's `hook_pattern`).

use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use ropelab_model::{GptJ, HookKind, HookPoint, Hooks, Intervention};
use ropelab_tasks::{Dataset, Split, Task, TaskKind};
use ropelab_train::data::{batch, Tally};
use ropelab_train::{batch_for_budget, Accuracy, RunConfig, RunDir};
use serde::{Deserialize, Serialize};

use crate::{AnalysisError, Result};

/// Hops along a chain the map measures: j = 1..=MAX_HOP.
pub const MAX_HOP: usize = 4;

/// Test samples `ropelab hops` reads by default.
pub const DEFAULT_SAMPLES: usize = 256;

/// The settings a run's `hops.csv` is recorded under in its ledger (`measured.json`): a study
/// job and `ropelab hops` write the same key for the same map.
pub fn ledger_key(step: usize, samples: usize) -> String {
    super::keys::hop_map(step, samples)
}

/// Where the edges start: the query (last token) only, or every position with a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The last token.
    Last,
    /// Every position whose own chain reaches j hops.
    Every,
}

impl Source {
    /// Both, last first.
    pub const ALL: [Source; 2] = [Source::Last, Source::Every];
}

/// One line of `hops.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HopRow {
    /// Block.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// Where the edges start.
    #[serde(rename = "from")]
    pub source: Source,
    /// Hops along the query position's own chain.
    pub j: usize,
    /// Edges measured (query positions with a j-th hop, over the samples).
    pub edges: usize,
    /// Mean attention weight on hop_j over those edges.
    pub mass: f64,
    /// The model's test accuracy (last token) on the samples.
    pub accuracy: f64,
    /// The accuracy with these edges knocked out in this head.
    pub knockout_accuracy: f64,
    /// The knocked-out accuracy per hop count of the sample, `h:acc` joined by spaces.
    pub knockout_per_hop: String,
}

/// What `ropelab hops` measures.
#[derive(Debug, Clone)]
pub struct HopOptions {
    /// Checkpoint step (default: the latest).
    pub step: Option<usize>,
    /// Test samples.
    pub n: usize,
    /// Memory budget of one forward pass in bytes.
    pub memory: usize,
}

impl Default for HopOptions {
    fn default() -> Self {
        Self {
            step: None,
            n: DEFAULT_SAMPLES,
            memory: ropelab_train::EVAL_MEMORY,
        }
    }
}

/// The hop map of one run.
#[derive(Debug, Clone)]
pub struct HopReport {
    /// Checkpoint step.
    pub step: usize,
    /// The model's accuracy on the samples, with nothing knocked out.
    pub baseline: Accuracy,
    /// One row per (layer, head, from, j).
    pub rows: Vec<HopRow>,
}

/// hop_j(p) of every position of a number-task token sequence, `out[p][j - 1]`: the position j
/// backward offsets along p's own chain, None where p or an intermediate hop is not an integer
/// (the chain ended on a letter) or an offset leaves the sequence.
pub fn hop_targets(tokens: &[&str]) -> Vec<[Option<usize>; MAX_HOP]> {
    let next = |p: usize| -> Option<usize> {
        let offset: usize = tokens[p].parse().ok()?;
        p.checked_sub(offset).filter(|_| offset > 0)
    };
    (0..tokens.len())
        .map(|p| {
            let mut out = [None; MAX_HOP];
            let mut at = Some(p);
            for slot in out.iter_mut() {
                at = at.and_then(next);
                *slot = at;
            }
            out
        })
        .collect()
}

/// hop_j of one position, j = 1 ..= MAX_HOP ([`hop_targets`]).
pub type Hops = [Option<usize>; MAX_HOP];

/// The ids of sample `i` of the number-task dataset `data` and hop_j of each of its positions
/// ([`hop_targets`]).
pub fn sample_hops(data: &Dataset, i: usize) -> Result<(Vec<u32>, Vec<Hops>)> {
    let vocab = data.task().vocab();
    let s = data.sample(i)?;
    let tokens: Vec<&str> = s
        .ids
        .iter()
        .map(|&id| vocab.token(id).unwrap_or_default())
        .collect();
    let hops = hop_targets(&tokens);
    Ok((s.ids, hops))
}

/// The edges (sample, query position, key position) of hop `j` from `from` in a batch whose
/// samples have the hop targets `targets[b]`.
pub fn edges(
    targets: &[Vec<[Option<usize>; MAX_HOP]>],
    from: Source,
    j: usize,
) -> Vec<(usize, usize, usize)> {
    let mut out = vec![];
    for (b, t) in targets.iter().enumerate() {
        let last = t.len().saturating_sub(1);
        for (p, hops) in t.iter().enumerate() {
            if from == Source::Last && p != last {
                continue;
            }
            if let Some(k) = hops[j - 1] {
                out.push((b, p, k));
            }
        }
    }
    out
}

/// `pattern` [batch, heads, q_pos, k_pos] with head `head`'s weight on every edge set to 0 and
/// each changed row renormalised to sum 1 (a row left with no weight stays zero).
pub fn knock_out(pattern: &Tensor, head: usize, edges: &[(usize, usize, usize)]) -> Result<Tensor> {
    let (b, h, t, k) = pattern.dims4()?;
    let mut w: Vec<f32> = pattern.flatten_all()?.to_vec1()?;
    let row = |bi: usize, q: usize| ((bi * h + head) * t + q) * k;
    let mut rows = std::collections::BTreeSet::new();
    for &(bi, q, key) in edges {
        w[row(bi, q) + key] = 0.0;
        rows.insert((bi, q));
    }
    for (bi, q) in rows {
        let r = &mut w[row(bi, q)..row(bi, q) + k];
        let sum: f32 = r.iter().sum();
        if sum > 0.0 {
            r.iter_mut().for_each(|v| *v /= sum);
        }
    }
    Ok(Tensor::from_vec(w, (b, h, t, k), pattern.device())?)
}

/// Last-token logits of `model` on `ids` [batch, pos] with head `head` of `layer`'s `edges`
/// knocked out; `clean` is that layer's pattern on the same ids with nothing changed.
pub fn knocked_logits(
    model: &impl Routed,
    ids: &Tensor,
    layer: usize,
    head: usize,
    edges: &[(usize, usize, usize)],
    clean: &Tensor,
) -> Result<Tensor> {
    let value = knock_out(clean, head, edges)?;
    let hook = HookPoint::new(layer, HookKind::Pattern);
    let mut hooks = Hooks::new().intervene(Intervention::Replace { hook, value });
    model.last_logits(ids, &mut hooks)
}

/// A model the hop map can read: a stack of attention layers whose patterns
/// (`HookKind::Pattern`, [batch, heads, q_pos, k_pos]) [`Hooks`] captures and replaces. A
/// trained [`GptJ`] is one; so are the hand-built chains of [`super::hop_chain`].
pub trait Routed {
    /// Attention layers.
    fn layers(&self) -> usize;
    /// Heads per layer.
    fn heads(&self) -> usize;
    /// Samples per forward pass at `seq_len` tokens within `memory` bytes.
    fn batch_size(&self, seq_len: usize, memory: usize) -> usize;
    /// The device its inputs live on.
    fn device(&self) -> &Device;
    /// Last-token logits [batch, vocab] of ids [batch, pos], through `hooks`.
    fn last_logits(&self, ids: &Tensor, hooks: &mut Hooks) -> Result<Tensor>;
    /// The residual stream of ids [batch, pos] at every layer boundary, as what comes next
    /// reads it: `layers() + 1` tensors [batch, pos, width], the first before layer 0, the
    /// last after the last layer.
    fn residual(&self, ids: &Tensor) -> Result<Vec<Tensor>>;
}

impl Routed for GptJ {
    fn layers(&self) -> usize {
        self.config().n_layers
    }

    fn heads(&self) -> usize {
        self.config().n_heads
    }

    fn batch_size(&self, seq_len: usize, memory: usize) -> usize {
        batch_for_budget(self.config(), seq_len, memory)
    }

    fn device(&self) -> &Device {
        GptJ::device(self)
    }

    fn last_logits(&self, ids: &Tensor, hooks: &mut Hooks) -> Result<Tensor> {
        Ok(self.forward_last(ids, hooks, None)?)
    }

    /// Each stream layer-normalised without the affine map (a linear map any probe absorbs):
    /// every block and the unembedding read the stream through a LayerNorm.
    fn residual(&self, ids: &Tensor) -> Result<Vec<Tensor>> {
        let points: Vec<HookPoint> = (0..self.layers())
            .map(|l| HookPoint::new(l, HookKind::ResidPre))
            .collect();
        let mut hooks = Hooks::new().capture(points.iter().copied());
        let last = self.trunk(ids, &mut hooks, None)?; // [batch, pos, d_model]
        let mut out = vec![];
        for (l, p) in points.iter().enumerate() {
            let x = hooks
                .get(*p)
                .ok_or_else(|| AnalysisError::Invalid(format!("layer {l}: no residual stream")))?;
            out.push(normalise(x)?);
        }
        out.push(normalise(&last)?);
        Ok(out)
    }
}

/// Each row of x [.., width] centred and scaled to unit variance (LayerNorm without its affine
/// map, epsilon 1e-5).
fn normalise(x: &Tensor) -> Result<Tensor> {
    let x = x.to_dtype(DType::F32)?;
    let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    Ok(centred.broadcast_div(&(var + 1e-5)?.sqrt()?)?)
}

/// One batch of the samples: ids, answers, hop counts, hop targets, clean patterns per layer.
struct Chunk {
    batch: ropelab_train::data::Batch,
    targets: Vec<Vec<[Option<usize>; MAX_HOP]>>,
    patterns: Vec<Tensor>,
}

/// Splits `data` into batches and runs each once, keeping every layer's pattern; the baseline
/// accuracy comes from the same pass.
fn chunks(model: &impl Routed, data: &Dataset, memory: usize) -> Result<(Vec<Chunk>, Accuracy)> {
    let n_layers = model.layers();
    let size = model.batch_size(data.seq_len(), memory).max(1);
    let mut out = vec![];
    let mut tally = Tally::default();
    for start in (0..data.len()).step_by(size) {
        let indices: Vec<usize> = (start..data.len().min(start + size)).collect();
        let b = batch(data, &indices, model.device())?;
        let mut targets = vec![];
        for &i in &indices {
            targets.push(sample_hops(data, i)?.1);
        }
        let points = (0..n_layers).map(|l| HookPoint::new(l, HookKind::Pattern));
        let mut hooks = Hooks::new().capture(points);
        let logits = model.last_logits(&b.ids, &mut hooks)?;
        tally.add(&logits, &b)?;
        let patterns = (0..n_layers)
            .map(|l| {
                hooks
                    .get(HookPoint::new(l, HookKind::Pattern))
                    .cloned()
                    .ok_or_else(|| AnalysisError::Invalid(format!("layer {l}: no pattern")))
            })
            .collect::<Result<Vec<_>>>()?;
        out.push(Chunk {
            batch: b,
            targets,
            patterns,
        });
    }
    Ok((out, tally.finish()))
}

/// The mean attention weight on the edges, over every chunk.
fn mass(
    chunks: &[Chunk],
    layer: usize,
    head: usize,
    from: Source,
    j: usize,
) -> Result<(usize, f64)> {
    let (mut n, mut sum) = (0usize, 0.0f64);
    for c in chunks {
        let p = &c.patterns[layer];
        let (_, h, t, k) = p.dims4()?;
        let w: Vec<f32> = p.flatten_all()?.to_vec1()?;
        for (b, q, key) in edges(&c.targets, from, j) {
            sum += f64::from(w[((b * h + head) * t + q) * k + key]);
            n += 1;
        }
    }
    Ok((n, if n > 0 { sum / n as f64 } else { f64::NAN }))
}

/// The hop map of the `model` on `data`: every (layer, head, from, j) row; `progress(done,
/// total)` after each knock-out. A trained model should come [`GptJ::frozen`].
pub fn hop_map(
    model: &impl Routed,
    data: &Dataset,
    memory: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<(Accuracy, Vec<HopRow>)> {
    let (chunks, baseline) = chunks(model, data, memory)?;
    let (n_layers, n_heads) = (model.layers(), model.heads());
    let total = n_layers * n_heads * Source::ALL.len() * MAX_HOP;
    let mut rows = vec![];
    for layer in 0..n_layers {
        for head in 0..n_heads {
            for from in Source::ALL {
                for j in 1..=MAX_HOP {
                    let (n, mass) = mass(&chunks, layer, head, from, j)?;
                    let mut tally = Tally::default();
                    for ch in &chunks {
                        let e = edges(&ch.targets, from, j);
                        let logits = knocked_logits(
                            model,
                            &ch.batch.ids,
                            layer,
                            head,
                            &e,
                            &ch.patterns[layer],
                        )?;
                        tally.add(&logits, &ch.batch)?;
                    }
                    let knocked = tally.finish();
                    rows.push(HopRow {
                        layer,
                        head,
                        source: from,
                        j,
                        edges: n,
                        mass,
                        accuracy: baseline.accuracy,
                        knockout_accuracy: knocked.accuracy,
                        knockout_per_hop: knocked
                            .per_hop
                            .iter()
                            .map(|(h, a)| format!("{h}:{a:.4}"))
                            .collect::<Vec<_>>()
                            .join(" "),
                    });
                    progress(rows.len(), total);
                }
            }
        }
    }
    Ok((baseline, rows))
}

/// A number-task run's model at checkpoint `step` (default: its latest) and `n` samples of its
/// test split: (step, the run's config, the samples, the frozen model); an error naming the
/// run for a run of another task, saying that `what` (`the hop map follows`) the number task's
/// offsets.
pub fn number_run(
    root: &Path,
    step: Option<usize>,
    n: usize,
    device: &Device,
    what: &str,
) -> Result<(usize, RunConfig, Dataset, GptJ)> {
    let (dir, config) = RunDir::open(root)?;
    if config.task != TaskKind::Number {
        return Err(AnalysisError::Invalid(format!(
            "{} is a {} task run: {what} the number task's offsets (every position's chain); \
             train a number-task model",
            root.display(),
            config.task
        )));
    }
    let step = dir.checkpoint_or_latest(step)?;
    let task = Task::new(config.task, config.layout.clone())?;
    let n = config
        .test_samples(n, "the measurement")
        .map_err(AnalysisError::Invalid)?;
    let data = Dataset::new(task, config.seed, Split::Test, n, 0)?;
    let model = dir.load_model(step, &config, device)?.frozen();
    Ok((step, config, data, model))
}

/// The hop map of the number-task run in `root` (see [`hop_map`]) on `options.n` samples of its
/// test split; an error naming the run for a run of another task.
pub fn hop_run(
    root: &Path,
    options: &HopOptions,
    device: &Device,
    progress: impl FnMut(usize, usize),
) -> Result<HopReport> {
    let (step, _, data, model) =
        number_run(root, options.step, options.n, device, "the hop map follows")?;
    let (baseline, rows) = hop_map(&model, &data, options.memory, progress)?;
    Ok(HopReport {
        step,
        baseline,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_targets_follow_each_positions_chain() {
        // The paper's worked example: 8 -> 7 -> 5 -> 4 -> 0.
        let tokens: Vec<&str> = "C B A 1 4 1 3 2 1".split(' ').collect();
        let t = hop_targets(&tokens);
        assert_eq!(t[8], [Some(7), Some(5), Some(4), Some(0)]);
        assert_eq!(t[7], [Some(5), Some(4), Some(0), None]);
        // Position 3 holds 1: -> 2, a letter; its chain ends there.
        assert_eq!(t[3], [Some(2), None, None, None]);
        assert_eq!(t[0], [None; MAX_HOP]);
        let from_last = edges(std::slice::from_ref(&t), Source::Last, 2);
        assert_eq!(from_last, vec![(0, 8, 5)]);
        let every = edges(&[t], Source::Every, 3);
        assert_eq!(every, vec![(0, 7, 0), (0, 8, 4)]);
    }
}
