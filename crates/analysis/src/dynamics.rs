//! Learning dynamics of a run: every checkpoint scored on one fixed set of test samples, one
//! line per (step, layer, head) in `scores.jsonl`, plus accuracy per hop at each step.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use candle_core::{Device, Tensor};
use ropelab_model::GptJ;
use ropelab_tasks::{Dataset, Split, Task};
use ropelab_train::{evaluate, forward_bytes, RunDir, EVAL_MEMORY};
use serde::{Deserialize, Serialize};

use crate::capture::Captured;
use crate::swap::{blocks, effects, entropy, row, scores, SwapScores, Tau};
use crate::{AnalysisError, Result};

/// Which query positions a head is scored at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryMode {
    /// The last input position (the task's query).
    Last,
    /// Every position on the chain that jumps: the query and the intermediate hops.
    Hops,
    /// A fixed position (at least 2, so that two earlier keys can be swapped).
    At(usize),
}

impl FromStr for QueryMode {
    type Err = AnalysisError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "last" => Ok(QueryMode::Last),
            "hops" => Ok(QueryMode::Hops),
            other => match other.parse::<usize>() {
                Ok(p) if p >= 2 => Ok(QueryMode::At(p)),
                Ok(p) => Err(AnalysisError::Invalid(format!(
                    "query position {p} has fewer than two earlier keys to swap (use 2 or more)"
                ))),
                Err(_) => Err(AnalysisError::Invalid(format!(
                    "unknown query {other:?} (expected last, hops or a position)"
                ))),
            },
        }
    }
}

/// Settings of a scoring pass.
#[derive(Debug, Clone)]
pub struct ScoreOptions {
    /// Test samples every checkpoint is scored on.
    pub samples: usize,
    /// Query positions.
    pub query: QueryMode,
    /// Temperature of the swap weights.
    pub tau: Tau,
    /// Test samples for the accuracy at each step.
    pub eval_samples: usize,
    /// Also score block swaps with the keys before the query split into this many blocks.
    pub blocks: Option<usize>,
    /// Also score every plane of every head alone (projection heads).
    pub planes: bool,
    /// Memory budget of one captured batch, in bytes (see [`capture_bytes`]).
    pub memory: usize,
}

impl Default for ScoreOptions {
    fn default() -> Self {
        Self {
            samples: 100,
            query: QueryMode::Last,
            tau: Tau::DEFAULT,
            eval_samples: 512,
            blocks: None,
            planes: false,
            memory: EVAL_MEMORY,
        }
    }
}

/// The paper's purity tolerance: a head is pure positional when s_POS >= 1 - GAMMA and
/// s_SYM <= GAMMA (and the other way round for symbolic).
pub const GAMMA: f64 = 0.1;

/// The stricter tolerance also written to scores.jsonl.
pub const GAMMA_STRICT: f64 = 0.05;

/// A head's type at a purity tolerance gamma.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeadKind {
    /// Neither pure type (written "none" in run files).
    #[serde(rename = "none")]
    Mixed,
    /// s_POS >= 1 - gamma and s_SYM <= gamma.
    Positional,
    /// s_SYM >= 1 - gamma and s_POS <= gamma.
    Symbolic,
}

/// The purity of scores at tolerance `gamma` (in (0, 0.5)).
pub fn purity(s: SwapScores, gamma: f64) -> HeadKind {
    if s.s_pos >= 1.0 - gamma && s.s_sym <= gamma {
        HeadKind::Positional
    } else if s.s_sym >= 1.0 - gamma && s.s_pos <= gamma {
        HeadKind::Symbolic
    } else {
        HeadKind::Mixed
    }
}

/// Checks a purity tolerance.
pub fn check_gamma(gamma: f64) -> Result<()> {
    if gamma > 0.0 && gamma < 0.5 {
        Ok(())
    } else {
        Err(AnalysisError::Invalid(format!(
            "gamma must be in (0, 0.5), got {gamma}"
        )))
    }
}

/// The scores of one head at one step, averaged over the sample set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadStep {
    /// Checkpoint step.
    pub step: usize,
    /// Block index.
    pub layer: usize,
    /// Head index.
    pub head: usize,
    /// Mean positional score.
    pub s_pos: f64,
    /// Mean symbolic score.
    pub s_sym: f64,
    /// Mean attention entropy at the query (nats).
    pub entropy: f64,
    /// Entropy min-max normalised over the run's steps, per layer and head.
    pub entropy_norm: f64,
    /// Head type at gamma = 0.1.
    pub pure_0_1: HeadKind,
    /// Head type at gamma = 0.05.
    pub pure_0_05: HeadKind,
    /// Mean |logit contribution| of each plane at the attended key.
    pub freq_use: Vec<f64>,
    /// Plane id averaged with weights `freq_use` (low = high frequency).
    pub freq_mean_plane: f64,
    /// Test accuracy at this step.
    pub accuracy: f64,
    /// Test accuracy per hop count at this step.
    pub accuracy_per_hop: BTreeMap<usize, f64>,
    /// Block-swap scores (with `--blocks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<SwapScores>,
    /// Scores of each plane alone (with `--planes`), plane order as `freq_use`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planes: Vec<SwapScores>,
}

/// The plane id averaged with weights `freq_use` (0 when every weight is 0).
pub fn mean_plane(freq_use: &[f64]) -> f64 {
    let total: f64 = freq_use.iter().sum();
    if total > 0.0 {
        freq_use
            .iter()
            .enumerate()
            .map(|(p, f)| p as f64 * f)
            .sum::<f64>()
            / total
    } else {
        0.0
    }
}

/// One head's scores averaged over a sample set.
#[derive(Debug, Clone)]
pub struct HeadScores {
    /// Block index.
    pub layer: usize,
    /// Head index.
    pub head: usize,
    /// Mean swap scores.
    pub scores: SwapScores,
    /// Mean attention entropy at the query (nats).
    pub entropy: f64,
    /// Mean |logit contribution| per plane at the attended key.
    pub freq_use: Vec<f64>,
    /// Mean block-swap scores (when blocks were asked for).
    pub block: Option<SwapScores>,
    /// Mean scores of each plane alone (when asked for).
    pub planes: Vec<SwapScores>,
}

fn mean_scores(sum: (f64, f64), count: f64) -> SwapScores {
    SwapScores {
        s_pos: sum.0 / count,
        s_sym: sum.1 / count,
    }
}

/// Bytes the score path keeps per sequence of `seq_len` tokens: a forward pass plus the captured
/// q, k (f32) and attention pattern of every layer.
pub fn capture_bytes(config: &ropelab_model::ModelConfig, seq_len: usize) -> usize {
    let per_layer = 2 * seq_len * config.d_model + config.n_heads * seq_len * seq_len;
    forward_bytes(config, seq_len) + 4 * config.n_layers * per_layer
}

/// Scores every head of `model` on `ids` [samples, pos] at the query positions of each row
/// (optionally also `n_blocks` block swaps and every plane alone). Rows are captured in batches
/// whose capture stays within `memory` bytes (see [`capture_bytes`]); the result is the mean over
/// every (row, query) pair, whatever the batching.
#[allow(clippy::too_many_arguments)]
pub fn score_heads(
    model: &GptJ,
    ids: &Tensor,
    queries: &[Vec<usize>],
    tau: Tau,
    n_blocks: Option<usize>,
    planes: bool,
    memory: usize,
) -> Result<Vec<HeadScores>> {
    let (rows, len) = ids.dims2()?;
    let batch = (memory / capture_bytes(model.config(), len).max(1)).clamp(1, rows.max(1));
    let mut parts = vec![];
    for start in (0..rows).step_by(batch) {
        let size = batch.min(rows - start);
        let cap = Captured::run(model, &ids.narrow(0, start, size)?, false)?;
        let chunk = &queries[start..start + size];
        let count: usize = chunk.iter().map(Vec::len).sum();
        parts.push((count, score_captured(&cap, chunk, tau, n_blocks, planes)?));
    }
    Ok(merge_weighted(parts))
}

/// The mean of per-batch head scores, weighted by each batch's number of queries.
fn merge_weighted(parts: Vec<(usize, Vec<HeadScores>)>) -> Vec<HeadScores> {
    let total: usize = parts.iter().map(|p| p.0).sum();
    if parts.len() == 1 || total == 0 {
        return parts.into_iter().next().map(|p| p.1).unwrap_or_default();
    }
    let mut iter = parts.into_iter();
    let (w0, mut acc) = iter.next().expect("at least two parts");
    let scale = |x: SwapScores, w: f64| SwapScores {
        s_pos: x.s_pos * w,
        s_sym: x.s_sym * w,
    };
    let add = |a: SwapScores, b: SwapScores| SwapScores {
        s_pos: a.s_pos + b.s_pos,
        s_sym: a.s_sym + b.s_sym,
    };
    let w0 = w0 as f64 / total as f64;
    for h in acc.iter_mut() {
        h.scores = scale(h.scores, w0);
        h.entropy *= w0;
        h.freq_use.iter_mut().for_each(|f| *f *= w0);
        h.block = h.block.map(|b| scale(b, w0));
        h.planes.iter_mut().for_each(|p| *p = scale(*p, w0));
    }
    for (w, part) in iter {
        let w = w as f64 / total as f64;
        for (a, h) in acc.iter_mut().zip(part) {
            a.scores = add(a.scores, scale(h.scores, w));
            a.entropy += h.entropy * w;
            for (f, g) in a.freq_use.iter_mut().zip(&h.freq_use) {
                *f += g * w;
            }
            a.block = match (a.block, h.block) {
                (Some(x), Some(y)) => Some(add(x, scale(y, w))),
                (x, _) => x,
            };
            for (p, q) in a.planes.iter_mut().zip(&h.planes) {
                *p = add(*p, scale(*q, w));
            }
        }
    }
    acc
}

/// Scores every head of a capture (any hooked model) at the query positions of each row.
pub fn score_captured(
    cap: &Captured,
    queries: &[Vec<usize>],
    tau: Tau,
    n_blocks: Option<usize>,
    planes: bool,
) -> Result<Vec<HeadScores>> {
    let (_, heads, _, d_head) = cap.dims();
    let n_planes = d_head / 2;
    let mut out = vec![];
    for layer in 0..cap.n_layers() {
        for head in 0..heads {
            let (mut sp, mut ss, mut ent, mut count) = (0.0, 0.0, 0.0, 0usize);
            let mut freq = vec![0.0; n_planes];
            let mut block_sum = (0.0, 0.0);
            let mut plane_sums = vec![(0.0, 0.0); if planes { n_planes } else { 0 }];
            for (b, row_queries) in queries.iter().enumerate() {
                for &n in row_queries {
                    let view = cap.head_view(layer, b, head, n)?;
                    let cross = view.cross_logits();
                    let self_logit = view.self_logit();
                    let singles: Vec<_> = (0..n).map(|p| p..p + 1).collect();
                    let s = scores(&effects(&cross, self_logit, &singles), tau);
                    if let Some(m) = n_blocks {
                        let b = scores(&effects(&cross, self_logit, &blocks(n, m)?), tau);
                        block_sum.0 += b.s_pos;
                        block_sum.1 += b.s_sym;
                    }
                    for (p, sum) in plane_sums.iter_mut().enumerate() {
                        let plane = view.plane(p);
                        let ps = scores(
                            &effects(&plane.cross_logits(), plane.self_logit(), &singles),
                            tau,
                        );
                        sum.0 += ps.s_pos;
                        sum.1 += ps.s_sym;
                    }
                    let r = row(&cross, self_logit);
                    let attended = r
                        .iter()
                        .enumerate()
                        .max_by(|x, y| x.1.total_cmp(y.1))
                        .map_or(0, |(i, _)| i);
                    for (f, c) in freq
                        .iter_mut()
                        .zip(view.plane_contributions(attended, attended))
                    {
                        *f += c.abs();
                    }
                    sp += s.s_pos;
                    ss += s.s_sym;
                    ent += entropy(&r);
                    count += 1;
                }
            }
            let c = count.max(1) as f64;
            freq.iter_mut().for_each(|f| *f /= c);
            out.push(HeadScores {
                layer,
                head,
                scores: SwapScores {
                    s_pos: sp / c,
                    s_sym: ss / c,
                },
                entropy: ent / c,
                freq_use: freq,
                block: n_blocks.map(|_| mean_scores(block_sum, c)),
                planes: plane_sums.into_iter().map(|p| mean_scores(p, c)).collect(),
            });
        }
    }
    Ok(out)
}

/// The summary of a scored run.
#[derive(Debug, Clone, Serialize)]
pub struct RunScores {
    /// Every (step, layer, head) line.
    pub lines: Vec<HeadStep>,
    /// Where they were written.
    pub path: PathBuf,
}

/// Scores every checkpoint of the run in `root` and writes `scores.jsonl` there.
pub fn score_run(
    root: &Path,
    options: &ScoreOptions,
    device: &Device,
    mut progress: impl FnMut(usize, usize),
) -> Result<RunScores> {
    if options.samples == 0 || options.eval_samples == 0 {
        return Err(AnalysisError::Invalid(
            "the number of samples must be at least 1".into(),
        ));
    }
    let (dir, config) = RunDir::open(root)?;
    let steps = dir.checkpoints()?;
    if steps.is_empty() {
        return Err(ropelab_train::TrainError::run_dir(root, "has no checkpoints to score").into());
    }
    let task = Task::new(config.task, config.layout.clone())?;
    let data = Dataset::new(task.clone(), config.seed, Split::Test, options.samples, 0)?;
    let eval = Dataset::new(
        task.clone(),
        config.seed,
        Split::Test,
        options.eval_samples,
        0,
    )?;
    let len = config.layout.core_len();
    let mut ids = Vec::with_capacity(options.samples * len);
    let mut queries = Vec::with_capacity(options.samples);
    for i in 0..options.samples {
        let s = data.sample(i)?;
        let tokens: Vec<&str> = s
            .ids
            .iter()
            .map(|&id| task.vocab().token(id).unwrap_or_default())
            .collect();
        queries.push(match options.query {
            QueryMode::Last => vec![len - 1],
            QueryMode::At(p) if p < len => vec![p],
            QueryMode::At(p) => {
                return Err(AnalysisError::Invalid(format!(
                    "query position {p} is past the last position {}",
                    len - 1
                )))
            }
            QueryMode::Hops => {
                let chain = task
                    .chain(&tokens)
                    .map_err(|e| AnalysisError::Invalid(e.to_string()))?;
                chain[..chain.len() - 1]
                    .iter()
                    .copied()
                    .filter(|&p| p >= 2)
                    .collect()
            }
        });
        ids.extend_from_slice(&s.ids);
    }
    let ids = Tensor::from_vec(ids, (options.samples, len), device)?;

    let mut lines = vec![];
    for (k, &step) in steps.iter().enumerate() {
        progress(k, steps.len());
        let model = dir.load_model(step, &config, device)?;
        let acc = evaluate(&model, &eval, EVAL_MEMORY)?;
        let heads = score_heads(
            &model,
            &ids,
            &queries,
            options.tau,
            options.blocks,
            options.planes,
            options.memory,
        )?;
        for h in heads {
            let (s, freq) = (h.scores, h.freq_use);
            let plane = mean_plane(&freq);
            lines.push(HeadStep {
                step,
                layer: h.layer,
                head: h.head,
                s_pos: s.s_pos,
                s_sym: s.s_sym,
                entropy: h.entropy,
                entropy_norm: 0.0,
                pure_0_1: purity(s, GAMMA),
                pure_0_05: purity(s, GAMMA_STRICT),
                freq_use: freq,
                freq_mean_plane: plane,
                accuracy: acc.accuracy,
                accuracy_per_hop: acc.per_hop.clone(),
                block: h.block,
                planes: h.planes,
            });
        }
    }
    progress(steps.len(), steps.len());
    normalise_entropy(&mut lines);

    let path = root.join("scores.jsonl");
    let mut text = Vec::new();
    for line in &lines {
        serde_json::to_writer(&mut text, line).expect("scores serialise");
        text.push(b'\n');
    }
    ropelab_io::write_atomic(&path, &text).map_err(|e| AnalysisError::Io {
        path: path.clone(),
        source: e,
    })?;
    Ok(RunScores { lines, path })
}

/// Min-max normalises entropy over steps, per (layer, head).
fn normalise_entropy(lines: &mut [HeadStep]) {
    let mut range: BTreeMap<(usize, usize), (f64, f64)> = BTreeMap::new();
    for l in lines.iter() {
        let r = range
            .entry((l.layer, l.head))
            .or_insert((f64::INFINITY, f64::NEG_INFINITY));
        r.0 = r.0.min(l.entropy);
        r.1 = r.1.max(l.entropy);
    }
    for l in lines.iter_mut() {
        let (lo, hi) = range[&(l.layer, l.head)];
        l.entropy_norm = if hi > lo {
            (l.entropy - lo) / (hi - lo)
        } else {
            0.0
        };
    }
}

/// Per head: its type at the last step, and the first step from which it stays pure.
#[derive(Debug, Clone, Serialize)]
pub struct HeadSummary {
    /// Block index.
    pub layer: usize,
    /// Head index.
    pub head: usize,
    /// Final scores.
    pub s_pos: f64,
    /// Final scores.
    pub s_sym: f64,
    /// Type at the last step.
    pub kind: HeadKind,
    /// First step from which the head is pure (of its final type) at every later step.
    pub pure_from: Option<usize>,
}

/// Summarises scored lines per head at purity tolerance `gamma` (in (0, 0.5)).
pub fn summarize_heads(lines: &[HeadStep], gamma: f64) -> Result<Vec<HeadSummary>> {
    check_gamma(gamma)?;
    let kind_of = |l: &HeadStep| {
        purity(
            SwapScores {
                s_pos: l.s_pos,
                s_sym: l.s_sym,
            },
            gamma,
        )
    };
    let mut per_head: BTreeMap<(usize, usize), Vec<&HeadStep>> = BTreeMap::new();
    for l in lines {
        per_head.entry((l.layer, l.head)).or_default().push(l);
    }
    Ok(per_head
        .into_iter()
        .map(|((layer, head), mut steps)| {
            steps.sort_by_key(|l| l.step);
            let last = steps.last().expect("at least one step");
            let kind = kind_of(last);
            let pure_from = (kind != HeadKind::Mixed).then(|| {
                let mut from = last.step;
                for l in steps.iter().rev() {
                    if kind_of(l) != kind {
                        break;
                    }
                    from = l.step;
                }
                from
            });
            HeadSummary {
                layer,
                head,
                s_pos: last.s_pos,
                s_sym: last.s_sym,
                kind,
                pure_from,
            }
        })
        .collect())
}
