//! Frequency-band training on the canonical tasks (docs/canonical.md): one-layer,
//! attention-only RoPE models trained on Index, Retrieval or Partial Induction with their
//! head restricted to a band of planes, and what each learns: accuracy overall and per answer
//! position, the head's swap scores, per-plane projection scores, and the largest weight it
//! puts on each key position.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use ropelab_analysis::lens::swap::{swap_scores, Tau};
use ropelab_io::write_atomic;
use ropelab_model::{AttentionKind, Head, ModelConfig, Objective, PositionEncoding, RopeLayout};
pub use ropelab_sweep::measure::canonical::{HeadReport, PlaneScore};
use ropelab_sweep::{Job, MeasureOptions};
use ropelab_tasks::{CanonicalKind, CanonicalTask, Layout, Split, TaskKind};
use ropelab_train::canonical_data::PositionAccuracy;
use ropelab_train::{DataConfig, OptimConfig, RunConfig};
use serde::{Deserialize, Serialize};
use toml::Value;

pub use ropelab_analysis::measure::band::{split, sweep, Band};
pub use ropelab_analysis::measure::canonical::{BandSummary, PerPositionRow};
pub use ropelab_analysis::measure::partial::HandReport;
use ropelab_analysis::measure::partial::{
    hand_head, hand_view, plane_margins, PlaneMargin, TwoAngles,
};
use ropelab_theory::construct::{check, HandHead};

use crate::{grid, Progress};

/// Items before the query, by default.
pub const DEFAULT_LEN: usize = 16;

/// Planes per window of a band sweep, by default.
pub const DEFAULT_WINDOW: usize = 8;

/// The default (symbols, attributes) of a task with `len` items: Index 16 symbols (no
/// attributes); Retrieval 2 x len symbols (distinct ones fill the items with room to spare) x 4
/// attributes; Partial Induction 4 symbols (so they repeat) x 4 attributes.
pub fn default_sizes(kind: ropelab_tasks::CanonicalKind, len: usize) -> (usize, usize) {
    match kind {
        ropelab_tasks::CanonicalKind::Index => (16, 1),
        ropelab_tasks::CanonicalKind::Retrieval => (2 * len, 4),
        ropelab_tasks::CanonicalKind::Partial => (4, 4),
    }
}

/// The widest head a canonical experiment takes (its planes' rates are computed before the
/// memory estimate, so the width is bounded first).
pub const MAX_D_MODEL: usize = 1 << 16;

/// One experiment: a task, bands, seeds and the model and training settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    /// The task.
    pub task: CanonicalTask,
    /// Bands.
    pub bands: Vec<Band>,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Model width (one head of this size).
    pub d_model: usize,
    /// RoPE base.
    pub base: f64,
    /// Optimizer steps.
    pub steps: usize,
    /// Samples per batch.
    pub batch: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Test samples (an equal share per answer position).
    pub test: usize,
    /// Test samples the head's swap scores and weights are read on.
    pub score_samples: usize,
}

impl Experiment {
    /// The defaults for `task`: one 64-dim head (32 planes), base 10,000, 1,500 steps of 64 at
    /// lr 3e-3, 2,048 test samples, 64 scored.
    pub fn new(task: CanonicalTask, bands: Vec<Band>, seeds: Vec<u64>) -> Self {
        Experiment {
            task,
            bands,
            seeds,
            d_model: 64,
            base: ropelab_model::rope::DEFAULT_BASE,
            steps: 1500,
            batch: 64,
            lr: 3e-3,
            test: 2048,
            score_samples: 64,
        }
    }

    /// The plane rates of the head.
    pub fn rates(&self) -> Vec<f64> {
        ropelab_model::rope::frequencies(self.base, self.d_model)
    }

    /// Checks the settings and every band.
    pub fn check(&self) -> Result<()> {
        self.task.check()?;
        ensure!(
            !self.bands.is_empty(),
            "the experiment needs at least one band"
        );
        ensure!(
            !self.seeds.is_empty(),
            "the experiment needs at least one seed"
        );
        ensure!(
            self.d_model >= 2 && self.d_model.is_multiple_of(2) && self.d_model <= MAX_D_MODEL,
            "d_model must be even and in 2..={MAX_D_MODEL}, got {}",
            self.d_model
        );
        ensure!(
            self.base.is_finite() && self.base > 0.0,
            "the RoPE base must be positive, got {}",
            self.base
        );
        ensure!(
            self.steps >= 1 && self.batch >= 1 && self.test >= 1 && self.score_samples >= 1,
            "steps, batch, test and scored samples must be at least 1"
        );
        let rates = self.rates();
        let kept = self
            .bands
            .iter()
            .map(|b| b.planes(&rates, self.task.len))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        grid::each_once("the bands", self.bands.iter().map(|b| b.to_string()))?;
        // Two bands keeping the same planes (`all` and `planes=0-31`, or a sweep window that is
        // the whole head) would train one model twice under two names (twenty-third pass,
        // CB13; a study's `[canonical]` table too, twenty-seventh pass).
        for (i, planes) in kept.iter().enumerate() {
            if let Some(j) = kept[..i].iter().position(|p| p == planes) {
                anyhow::bail!(
                    "bands {} and {} keep the same planes: one model would be trained twice \
                     under two names (give one)",
                    self.bands[j],
                    self.bands[i]
                );
            }
        }
        grid::each_once("the seeds", self.seeds.iter().map(|s| s.to_string()))?;
        Ok(())
    }

    /// The run config of one band and seed.
    pub fn run_config(&self, band: &Band, seed: u64) -> Result<RunConfig> {
        let planes = band.mask(&self.rates(), self.task.len)?;
        let model = ModelConfig {
            vocab_size: self.task.vocab(),
            n_layers: 1,
            n_heads: 1,
            d_model: self.d_model,
            d_mlp: 4 * self.d_model,
            ln_eps: 1e-5,
            dropout: 0.0,
            tied_embeddings: false,
            position: PositionEncoding::Rope {
                base: self.base,
                rotary_dim: self.d_model,
                layout: RopeLayout::Interleaved,
                planes,
            },
            layer_positions: vec![],
            attention: AttentionKind::Softmax,
            mlp: false,
            layer_norm: true,
            head: Head::Lm,
        };
        let config = RunConfig {
            preset: "canonical".into(),
            task: TaskKind::Canonical,
            seed,
            objective: Objective::LastToken,
            layout: Layout::default(),
            language: None,
            offset: None,
            canonical: Some(self.task),
            ambiguous: None,
            position_shift: 0,
            precision: Default::default(),
            data: DataConfig {
                train: self.steps.saturating_mul(self.batch),
                val: 8 * self.task.len,
                test: self.test,
            },
            model,
            optim: OptimConfig {
                save_every: self.steps,
                log_every: (self.steps / 50).max(1),
                ..OptimConfig::adamw(self.steps, self.batch, self.lr)
            },
        };
        config.check()?;
        Ok(config)
    }
}

/// The canonical part of a study (its `[canonical]` table): which tasks, bands and seeds,
/// each task with its default sizes and the experiment's other defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyCanonical {
    /// Tasks (`index`, `retrieval`, `partial`), each in `canonical/<task>/`.
    pub tasks: Vec<String>,
    /// Bands (`all`, `high`, `low`, `planes=LIST`, `no-BAND`).
    pub bands: Vec<String>,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Optimizer steps per run.
    pub steps: usize,
}

impl StudyCanonical {
    /// The experiments this table describes, one per task, checked.
    pub fn experiments(&self) -> Result<Vec<Experiment>> {
        ensure!(!self.tasks.is_empty(), "tasks must name at least one task");
        crate::grid::each_once("tasks", self.tasks.iter().cloned())?;
        let bands = self
            .bands
            .iter()
            .map(|b| b.parse::<Band>().map_err(anyhow::Error::from))
            .collect::<Result<Vec<_>>>()?;
        self.tasks
            .iter()
            .map(|t| {
                let kind: CanonicalKind = t.parse()?;
                let (symbols, attributes) = default_sizes(kind, DEFAULT_LEN);
                let task = CanonicalTask::new(kind, DEFAULT_LEN, symbols, attributes)?;
                let mut e = Experiment::new(task, bands.clone(), self.seeds.clone());
                e.steps = self.steps;
                e.check()?;
                Ok(e)
            })
            .collect()
    }
}

/// The run directory of one band and seed.
pub fn run_dir(out: &Path, task: &CanonicalTask, band: &Band, seed: u64) -> PathBuf {
    out.join("runs")
        .join(task.kind.name())
        .join(band.to_string().replace([',', '='], "-"))
        .join(format!("seed-{seed}"))
}

/// Reads `out/hand_head.json` (written by [`run`] for Partial Induction).
pub fn read_hand(out: &Path) -> Result<HandReport> {
    let path = out.join("hand_head.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a hand-head report", path.display()))
}

/// The plane margins of `reports` averaged over seeds (`None` without margins).
fn mean_margins(reports: &[HeadReport]) -> Option<Vec<PlaneMargin>> {
    let first = reports.first().filter(|r| !r.margins.is_empty())?;
    let n = reports.len() as f64;
    Some(
        first
            .margins
            .iter()
            .enumerate()
            .map(|(i, m)| PlaneMargin {
                content: reports.iter().map(|r| r.margins[i].content).sum::<f64>() / n,
                recency: reports.iter().map(|r| r.margins[i].recency).sum::<f64>() / n,
                ..m.clone()
            })
            .collect(),
    )
}

/// The hand-built two-angle head (docs/canonical.md) on `test` test samples of Partial
/// Induction, with each of its planes alone, and its scores and margins on `scored` of them.
pub fn hand_report(
    task: &CanonicalTask,
    seed: u64,
    test: usize,
    scored: usize,
) -> Result<HandReport> {
    let head = hand_head(task)?;
    let thetas = match head.position() {
        PositionEncoding::Angles { thetas, .. } => thetas.clone(),
        _ => vec![],
    };
    let samples: Vec<_> = (0..test as u64)
        .map(|i| task.sample(seed, Split::Test, i))
        .collect();
    let sequences: Vec<Vec<usize>> = samples
        .iter()
        .map(|s| s.ids.iter().map(|&t| t as usize).collect())
        .collect();
    let accuracy = |h: &HandHead| -> Result<f64> {
        let c = check(h, &sequences)?;
        Ok(c.correct as f64 / c.inputs.max(1) as f64)
    };
    let (theta, beta) = (thetas.get(1).copied().unwrap_or(0.0), head.beta());
    let content_only = HandHead::partial(task.symbols, task.attributes, theta, 1.0, 0.0, beta)?;
    let recency_only = HandHead::partial(task.symbols, task.attributes, theta, 0.0, 0.5, beta)?;
    let mut views = vec![];
    let (mut s_pos, mut s_sym) = (0.0, 0.0);
    let scored = scored.min(samples.len()).max(1);
    for s in samples.iter().take(scored) {
        let view = hand_view(&head, &s.ids)?;
        let sc = swap_scores(&view, Tau::DEFAULT);
        s_pos += sc.s_pos / scored as f64;
        s_sym += sc.s_sym / scored as f64;
        views.push((view, s.ids.clone()));
    }
    Ok(HandReport {
        n: samples.len(),
        accuracy: accuracy(&head)?,
        content_only: accuracy(&content_only)?,
        recency_only: accuracy(&recency_only)?,
        s_pos,
        s_sym,
        margins: plane_margins(&views, task, &thetas)?,
        thetas,
    })
}

impl Experiment {
    /// Every band and seed as a sweep job in its run directory ([`run_dir`], relative to the
    /// experiment's directory).
    pub fn jobs(&self) -> Result<Vec<Job>> {
        let mut jobs = vec![];
        for band in &self.bands {
            for &seed in &self.seeds {
                let params = [
                    ("task", Value::String(self.task.kind.name().into())),
                    ("band", Value::String(band.to_string())),
                    ("seed", Value::Integer(seed as i64)),
                ];
                let run = run_dir(Path::new(""), &self.task, band, seed);
                jobs.push(grid::job(&params, self.run_config(band, seed)?, run));
            }
        }
        Ok(jobs)
    }

    /// What running the experiment in `out` needs (its jobs trained and measured, `parallel`
    /// at a time): the one estimate every entry point checks.
    pub fn need(&self, out: &Path, parallel: Option<usize>) -> Result<ropelab_io::Need> {
        Ok(grid::need(
            &self.jobs()?,
            out,
            &self.measure_options(),
            parallel,
        ))
    }

    /// What every job measures: accuracy on `test` samples and the head on `score_samples`.
    pub fn measure_options(&self) -> MeasureOptions {
        MeasureOptions {
            per_length: self.test,
            heads: true,
            head_samples: self.score_samples,
            ..MeasureOptions::default()
        }
    }
}

/// Trains (or reuses) every band and seed in `out/runs/...` as a sweep job (`parallel` at a
/// time, default one per core), each tested and its head scored
/// (`ropelab_sweep::measure::canonical`), and writes `out/per_position.csv` and
/// `out/summary.json` (and `out/hand_head.json` for Partial Induction) from the runs' files.
/// Returns the summary per band.
pub fn run(
    experiment: &Experiment,
    out: &Path,
    parallel: Option<usize>,
    progress: &dyn Progress,
) -> Result<Vec<BandSummary>> {
    experiment.check()?;
    let jobs = experiment.jobs()?;
    grid::run(
        &jobs,
        out,
        &experiment.measure_options(),
        parallel,
        progress,
    )?;
    let rates = experiment.rates();
    let task = &experiment.task;
    let mut rows = vec![];
    let mut summary = vec![];
    for band in &experiment.bands {
        let keep = band.planes(&rates, task.len)?;
        let mut reports = vec![];
        for &seed in &experiment.seeds {
            let dir = run_dir(out, task, band, seed);
            let head_path = dir.join("head.json");
            ropelab_sweep::measure::vouched_run_file(&dir, "head.json")?;
            let text = std::fs::read_to_string(&head_path)
                .with_context(|| format!("cannot read {}", head_path.display()))?;
            let report: HeadReport = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a head report", head_path.display()))?;
            let positions: Vec<PositionAccuracy> =
                ropelab_sweep::measure::read_run_csv(&dir, "per_position.csv")?;
            // Counts and shares no measurement gives are refused, ledger or not
            // (twenty-second pass, S5).
            let share = |x: f64| (0.0..=1.0).contains(&x);
            ensure!(
                share(report.accuracy) && share(report.s_pos) && share(report.s_sym),
                "{}: accuracy {}, s_pos {} or s_sym {} lies outside [0, 1]: a damaged or \
                 edited file",
                head_path.display(),
                report.accuracy,
                report.s_pos,
                report.s_sym
            );
            if let Some(p) = positions.iter().find(|p| p.n == 0 || p.correct > p.n) {
                anyhow::bail!(
                    "{}: position {} counts {} correct of {} samples, which no measurement \
                     gives: a damaged or edited file",
                    dir.join("per_position.csv").display(),
                    p.position,
                    p.correct,
                    p.n
                );
            }
            rows.extend(positions.iter().map(|p| PerPositionRow {
                task: task.kind.name().into(),
                band: band.to_string(),
                seed,
                position: p.position,
                n: p.n,
                accuracy: p.correct as f64 / p.n.max(1) as f64,
                w_max: report.w_max.get(p.position).copied().unwrap_or(f64::NAN),
            }));
            reports.push(report);
        }
        let mean = |f: &dyn Fn(&HeadReport) -> f64| {
            reports.iter().map(f).sum::<f64>() / reports.len() as f64
        };
        summary.push(BandSummary {
            task: task.kind.name().into(),
            band: band.to_string(),
            centre: keep.iter().map(|&p| rates[p]).sum::<f64>() / keep.len() as f64,
            planes: keep,
            accuracy: mean(&|r| r.accuracy),
            s_pos: mean(&|r| r.s_pos),
            s_sym: mean(&|r| r.s_sym),
            per_seed: reports.iter().map(|r| r.accuracy).collect(),
            two_angles: mean_margins(&reports).map(|m| TwoAngles::of(&m)),
        });
    }
    if task.kind == CanonicalKind::Partial {
        let hand = hand_report(
            task,
            experiment.seeds[0],
            experiment.test,
            experiment.score_samples,
        )?;
        write_atomic(
            &out.join("hand_head.json"),
            serde_json::to_string_pretty(&hand)?.as_bytes(),
        )?;
    }
    crate::record_csv(&out.join("per_position.csv"), "canonical", &rows)?;
    // The summary the verdicts read is recorded in the ledger of `out`.
    ropelab_analysis::claims::files::record_table(
        &out.join("summary.json"),
        "canonical",
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    Ok(summary)
}
