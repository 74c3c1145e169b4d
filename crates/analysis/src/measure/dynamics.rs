//! The learning dynamics of a run (the scoring driver): every checkpoint scored on one fixed
//! set of test samples, one line per (step, layer, head) in `scores.jsonl`, plus accuracy per
//! hop at each step, and the per-head summary of a scored run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use ropelab_io::resources::{bytes, Need};
use ropelab_tasks::{Dataset, Split, Task};
use ropelab_train::{evaluate, inference_need, RunConfig, RunDir, EVAL_MEMORY};
use serde::{Deserialize, Serialize};

pub use crate::lens::heads::{capture_bytes, mean_plane, score_captured, score_heads, HeadScores};
pub use crate::lens::purity::{purity, Gamma, HeadKind};
pub use crate::lens::query::QueryMode;
use crate::lens::swap::{SwapScores, Tau};
use crate::{AnalysisError, Result};

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
    /// Where the lines go (default: `scores.jsonl` in the run directory).
    pub out: Option<PathBuf>,
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
            out: None,
        }
    }
}

/// Upper estimate of one `scores.jsonl` line without per-plane scores; each plane adds
/// [`PLANE_LINE_BYTES`].
const LINE_BYTES: usize = 1024;

/// Upper estimate of one plane's share of a `scores.jsonl` line (its frequency use, and its
/// swap scores with `planes`).
const PLANE_LINE_BYTES: usize = 96;

impl ScoreOptions {
    /// Memory and disk of scoring `checkpoints` checkpoints of the run `config` in `root`: the
    /// test samples' ids, one captured batch, the accuracy pass; `scores.jsonl`.
    pub fn need(&self, config: &RunConfig, root: &Path, checkpoints: usize) -> Need {
        let m = &config.model;
        let len = config.layout.core_len();
        let fit = self.memory as u64 / capture_bytes(m, len).max(1);
        let batch = usize::try_from(fit)
            .unwrap_or(usize::MAX)
            .clamp(1, self.samples.max(1));
        let planes = m.layer_position(0).rotation().map_or(0, |r| r.planes());
        let lines = bytes(&[checkpoints, m.n_layers, m.n_heads]);
        let line = LINE_BYTES + PLANE_LINE_BYTES * planes;
        inference_need(m, len, EVAL_MEMORY)
            .memory(
                bytes(&[self.samples, 4 * len + 32]),
                format!("the ids of {} samples", self.samples),
            )
            .memory(
                capture_bytes(m, len).saturating_mul(batch as u64),
                format!("captures of {batch} samples"),
            )
            .disk(
                root,
                lines.saturating_mul(line as u64),
                format!("{lines} lines of scores.jsonl"),
            )
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
    /// The run the line was measured on ([`ropelab_train::RunConfig::identity`]); empty in
    /// files written before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run: String,
    /// The settings it was scored with (samples, query, tau, accuracy samples, blocks,
    /// planes; [`crate::measure::keys::scores`]); empty in files written before they were
    /// recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub settings: String,
}

impl HeadStep {
    /// Why this line (read back from `scores.jsonl`) is not one `score` writes: a score, an
    /// accuracy or a normalised entropy outside [0, 1] (NaN included), or an entropy that is
    /// no entropy (eighth pass, R014). The types are read as written (the report's gamma
    /// retypes heads from their scores).
    pub fn defect(&self) -> Option<String> {
        let at = format!("step {} layer {} head {}", self.step, self.layer, self.head);
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        for (name, x) in [
            ("s_pos", self.s_pos),
            ("s_sym", self.s_sym),
            ("accuracy", self.accuracy),
            ("entropy_norm", self.entropy_norm),
        ] {
            if !unit(x) {
                return Some(format!("{at}: {name} {x} must lie in [0, 1]"));
            }
        }
        if let Some((hop, a)) = self.accuracy_per_hop.iter().find(|(_, a)| !unit(**a)) {
            return Some(format!(
                "{at}: accuracy at hop {hop} {a} must lie in [0, 1]"
            ));
        }
        if !(self.entropy.is_finite() && self.entropy >= 0.0) {
            return Some(format!("{at}: entropy {} is no entropy", self.entropy));
        }
        // Frequency use is a magnitude per plane (fifteenth pass, F7).
        if let Some((plane, u)) = self
            .freq_use
            .iter()
            .enumerate()
            .find(|(_, u)| !(u.is_finite() && **u >= 0.0))
        {
            return Some(format!(
                "{at}: freq_use of plane {plane} {u} is no magnitude (finite, at least 0)"
            ));
        }
        None
    }
}

/// The summary of a scored run.
#[derive(Debug, Clone, Serialize)]
pub struct RunScores {
    /// Every (step, layer, head) line.
    pub lines: Vec<HeadStep>,
    /// Where they were written.
    pub path: PathBuf,
}

/// Scores every checkpoint of the run in `root` and writes `scores.jsonl` there (or to
/// `options.out`).
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
    // One writer: scores.jsonl is not written while the run trains or is scored elsewhere.
    let _lock = ropelab_io::DirLock::acquire(root).map_err(ropelab_train::TrainError::from)?;
    let steps = dir.checkpoints()?;
    if steps.is_empty() {
        return Err(ropelab_train::TrainError::run_dir(root, "has no checkpoints to score").into());
    }
    let task = Task::new(config.task, config.layout.clone())?;
    let samples = config
        .test_samples(options.samples, "scoring")
        .map_err(AnalysisError::Invalid)?;
    let eval_samples = config
        .test_samples(options.eval_samples, "scoring's evaluation")
        .map_err(AnalysisError::Invalid)?;
    let data = Dataset::new(task.clone(), config.seed, Split::Test, samples, 0)?;
    let eval = Dataset::new(task.clone(), config.seed, Split::Test, eval_samples, 0)?;
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
                pure_0_1: purity(s, Gamma::DEFAULT),
                pure_0_05: purity(s, Gamma::STRICT),
                freq_use: freq,
                freq_mean_plane: plane,
                accuracy: acc.accuracy,
                accuracy_per_hop: acc.per_hop.clone(),
                block: h.block,
                planes: h.planes,
                run: config.identity(),
                settings: crate::measure::keys::scores(options),
            });
        }
    }
    progress(steps.len(), steps.len());
    normalise_entropy(&mut lines);
    // What the readers would refuse (a NaN score, say) is not written (tenth pass, U3).
    if let Some(why) = lines.iter().find_map(HeadStep::defect) {
        return Err(AnalysisError::Invalid(format!(
            "{}: the scores are not numbers a reader accepts ({why}); nothing was written",
            root.display()
        )));
    }

    let path = options
        .out
        .clone()
        .unwrap_or_else(|| root.join("scores.jsonl"));
    let mut text = Vec::new();
    for line in &lines {
        serde_json::to_writer(&mut text, line).expect("scores serialise");
        text.push(b'\n');
    }
    // A `--out` onto another kind of file of a run, study or sweep is refused (the run's own
    // scores are rewritten whatever their options).
    if path != root.join("scores.jsonl") {
        // The refusal names the file itself.
        ropelab_io::refuse_other_shape(&path, &text)
            .map_err(|e| AnalysisError::Invalid(e.to_string()))?;
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

/// Per scored step: (heads, pure positional, pure symbolic) at tolerance `gamma`.
pub fn pure_counts(lines: &[HeadStep], gamma: Gamma) -> BTreeMap<usize, (usize, usize, usize)> {
    let mut counts: BTreeMap<usize, (usize, usize, usize)> = BTreeMap::new();
    for l in lines {
        let c = counts.entry(l.step).or_default();
        c.0 += 1;
        match purity(
            SwapScores {
                s_pos: l.s_pos,
                s_sym: l.s_sym,
            },
            gamma,
        ) {
            HeadKind::Positional => c.1 += 1,
            HeadKind::Symbolic => c.2 += 1,
            HeadKind::Mixed => {}
        }
    }
    counts
}

/// Summarises scored lines per head at purity tolerance `gamma`.
pub fn summarize_heads(lines: &[HeadStep], gamma: Gamma) -> Result<Vec<HeadSummary>> {
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
