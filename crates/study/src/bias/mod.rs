//! The bias experiment (docs/bias.md): small RoPE models trained on the ambiguous task under
//! one training bias each (RoPE base, planes kept unrotated, partial rotary dims, NoPE layers,
//! randomised positions), several seeds each; which rule each model follows on the conflict
//! split, its heads' swap scores and types, and its accuracy on longer inputs.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, ensure, Result};
use ropelab_analysis::claims::{decide, welch_difference, Outcome as Judged, Tally, Verdict};
use ropelab_io::read_csv_file;
use ropelab_model::{Head, ModelConfig, PlaneMask, PositionEncoding, RopeLayout};
use ropelab_sweep::measure::ambiguous::{letters, read_conflict, AmbiguousHead};
use ropelab_sweep::{Job, MeasureOptions};
use ropelab_tasks::{Layout, TaskKind};
use ropelab_train::lengths::LengthAccuracy;
use ropelab_train::{AmbiguousData, DataConfig, OptimConfig, RunConfig, MAX_POSITION_SHIFT};
use serde::{Deserialize, Serialize};
use toml::Value;

use crate::{grid, Progress};

pub mod transfer;

/// One training bias: what changes in the default model of the experiment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bias {
    /// The default model: RoPE, base 10,000, every dim rotated, no shift.
    None,
    /// RoPE base B (`base:B`).
    Base(f64),
    /// The K highest-frequency planes pass through unrotated (`keep-high:K`, every layer;
    /// `keep-high:K@L`, layer L only): frequency masking's `K` planes.
    KeepHigh {
        /// Planes (from plane 0, the fastest).
        planes: usize,
        /// The only layer masked (None: every layer).
        layer: Option<usize>,
    },
    /// Only the first D dims of a head rotate (`partial:D`).
    Partial(usize),
    /// Layer L has no position encoding (`nope:L`), the others RoPE.
    Nope(usize),
    /// Randomised positions: each batch starts at a position drawn from 0..=N (`shift:N`).
    Shift(usize),
}

impl fmt::Display for Bias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bias::None => write!(f, "none"),
            Bias::Base(b) => write!(f, "base:{b:e}"),
            Bias::KeepHigh {
                planes,
                layer: None,
            } => write!(f, "keep-high:{planes}"),
            Bias::KeepHigh {
                planes,
                layer: Some(l),
            } => write!(f, "keep-high:{planes}@{l}"),
            Bias::Partial(d) => write!(f, "partial:{d}"),
            Bias::Nope(l) => write!(f, "nope:{l}"),
            Bias::Shift(n) => write!(f, "shift:{n}"),
        }
    }
}

impl FromStr for Bias {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (name, arg) = s.split_once(':').unwrap_or((s, ""));
        let number = |what: &str| -> std::result::Result<usize, String> {
            arg.parse()
                .map_err(|_| format!("bias {s:?}: {what} {arg:?} is not a whole number"))
        };
        match name {
            "none" if arg.is_empty() => Ok(Bias::None),
            "base" => match arg.parse::<f64>() {
                // The model's own bound on a RoPE base, named here (twenty-first pass, N7).
                Ok(b) if b.is_finite() && b > 1.0 && b <= 1e12 => Ok(Bias::Base(b)),
                _ => Err(format!(
                    "bias {s:?}: the base must be a number above 1 and at most 1e12 (base:100, \
                     base:1e6)"
                )),
            },
            "keep-high" => {
                let (planes, layer) = match arg.split_once('@') {
                    Some((p, l)) => (p, Some(l)),
                    None => (arg, None),
                };
                let planes = planes.parse::<usize>().ok().filter(|&p| p >= 1);
                let layer = layer.map(|l| l.parse::<usize>());
                match (planes, layer) {
                    (Some(planes), None) => Ok(Bias::KeepHigh {
                        planes,
                        layer: None,
                    }),
                    (Some(planes), Some(Ok(l))) => Ok(Bias::KeepHigh {
                        planes,
                        layer: Some(l),
                    }),
                    _ => Err(format!(
                        "bias {s:?}: write keep-high:K or keep-high:K@LAYER with K >= 1"
                    )),
                }
            }
            "partial" => Ok(Bias::Partial(number("the rotary dims")?)),
            "nope" => Ok(Bias::Nope(number("the layer")?)),
            "shift" => Ok(Bias::Shift(number("the shift")?)),
            _ => Err(format!(
                "unknown bias {s:?} (expected none, base:B, keep-high:K, keep-high:K@L, \
                 partial:D, nope:L or shift:N)"
            )),
        }
    }
}

impl Bias {
    /// Applies the bias to `model`'s position encodings (RoPE on every layer, no per-layer
    /// encodings yet) and returns the training position shift (0 but for `shift:N`); a bias the
    /// model cannot take is a one-line error.
    pub fn apply(self, model: &mut ModelConfig) -> Result<usize> {
        let PositionEncoding::Rope {
            base,
            rotary_dim,
            layout,
            ..
        } = model.position.clone()
        else {
            bail!("bias {self}: the model must use RoPE");
        };
        ensure!(
            model.layer_positions.is_empty(),
            "bias {self}: the model already sets per-layer position encodings"
        );
        let layers = model.n_layers;
        let d_head = model.d_model / model.n_heads.max(1);
        let planes = rotary_dim / 2;
        let in_layer = |l: usize, other: PositionEncoding, all: &PositionEncoding| {
            (0..layers)
                .map(|i| if i == l { other.clone() } else { all.clone() })
                .collect::<Vec<_>>()
        };
        match self {
            Bias::None => {}
            Bias::Base(b) => model.position = PositionEncoding::rope(b, rotary_dim, layout),
            Bias::KeepHigh { planes: k, layer } => {
                ensure!(
                    k <= planes,
                    "bias {self}: a head has {planes} planes, not {k}"
                );
                let mask: PlaneMask = format!("{}{}", "K".repeat(k), "R".repeat(planes - k))
                    .parse()
                    .map_err(anyhow::Error::msg)?;
                let masked = PositionEncoding::Rope {
                    base,
                    rotary_dim,
                    layout,
                    planes: mask,
                };
                match layer {
                    None => model.position = masked,
                    Some(l) => {
                        ensure!(l < layers, "bias {self}: the model has {layers} layers");
                        model.layer_positions = in_layer(l, masked, &model.position);
                    }
                }
            }
            Bias::Partial(d) => {
                ensure!(
                    d >= 2 && d % 2 == 0 && d <= d_head,
                    "bias {self}: rotary dims must be even, 2..={d_head}"
                );
                model.position = PositionEncoding::rope(base, d, layout);
            }
            Bias::Nope(l) => {
                ensure!(l < layers, "bias {self}: the model has {layers} layers");
                model.layer_positions = in_layer(l, PositionEncoding::None, &model.position);
            }
            Bias::Shift(n) => {
                ensure!(
                    (1..MAX_POSITION_SHIFT).contains(&n),
                    "bias {self}: the shift must be 1..{MAX_POSITION_SHIFT}"
                );
                return Ok(n);
            }
        }
        Ok(0)
    }
}

/// Everything one experiment runs: the biases, the seeds, the model and the tests.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    /// The biases, `none` first when present (the reference the claims compare against).
    pub biases: Vec<Bias>,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Layers of the model.
    pub layers: usize,
    /// Width (one head of `d_model` dims per layer).
    pub d_model: usize,
    /// Optimizer steps per run.
    pub steps: usize,
    /// Sequences per batch.
    pub batch: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Tested lengths, in items (the first is the training length).
    pub lengths: Vec<usize>,
    /// Test and conflict samples per length.
    pub per_length: usize,
    /// The transfer stage (none: skipped).
    pub transfer: Option<transfer::TransferSettings>,
    /// Studies whose number and letter models join the discrepancy claim's rank correlation.
    pub studies: Vec<PathBuf>,
}

impl Experiment {
    /// The full grid: the default model and nine biases, seeds 0, 1 and 2, 2,000 steps.
    pub fn full() -> Self {
        let parse = |s: &str| s.parse::<Bias>().expect("the default biases parse");
        Experiment {
            biases: [
                "none",
                "base:100",
                "base:1e6",
                "keep-high:8",
                "keep-high:16",
                "keep-high:16@1",
                "partial:16",
                "nope:0",
                "nope:1",
                "shift:1024",
            ]
            .map(parse)
            .to_vec(),
            seeds: vec![0, 1, 2],
            layers: 2,
            d_model: 64,
            steps: 2000,
            batch: 64,
            lr: 1e-3,
            lengths: vec![16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
            per_length: 256,
            transfer: Some(transfer::TransferSettings::full()),
            studies: vec![],
        }
    }

    /// The quick grid tests use: three biases, two seeds, 1,000 steps, lengths to 128 items
    /// with 128 samples each, the quick transfer stage.
    pub fn quick() -> Self {
        let parse = |s: &str| s.parse::<Bias>().expect("the quick biases parse");
        Experiment {
            biases: ["none", "keep-high:16", "nope:0"].map(parse).to_vec(),
            seeds: vec![0, 1],
            steps: 1000,
            lengths: vec![16, 32, 64, 128],
            per_length: 128,
            transfer: Some(transfer::TransferSettings::quick()),
            ..Self::full()
        }
    }

    /// Checks the grid; every run config is also checked.
    pub fn check(&self) -> Result<()> {
        ensure!(!self.biases.is_empty(), "the experiment needs a bias");
        ensure!(!self.seeds.is_empty(), "the experiment needs a seed");
        ensure!(
            self.lengths.first() == Some(&ropelab_tasks::ambiguous::ITEMS),
            "the first tested length must be the training length, {} items",
            ropelab_tasks::ambiguous::ITEMS
        );
        ensure!(
            self.lengths.windows(2).all(|w| w[0] < w[1]),
            "tested lengths must be ascending"
        );
        for (i, b) in self.biases.iter().enumerate() {
            if self.biases[..i].contains(b) {
                bail!("bias {b} is listed twice");
            }
            self.run_config(*b, self.seeds[0])?.check()?;
        }
        crate::grid::each_once("the seeds", self.seeds.iter().map(|s| s.to_string()))?;
        // The studies join the transfer stage's claims: a missing one is refused now, before
        // any training, and without a transfer stage there is nothing to join.
        ensure!(
            self.studies.is_empty() || self.transfer.is_some(),
            "a study given without the transfer stage would be read by nothing: drop \
             --no-transfer or the --study"
        );
        for study in &self.studies {
            ensure!(
                ropelab_analysis::StudyDir::new(study).is_study(),
                "{} is not a study directory (no config.toml with models)",
                study.display()
            );
        }
        // The studies' models are read now too, before any training: a model copied in from
        // another study, or a study given beside its copy, is refused up front (tenth pass).
        transfer::studies_points(&self.studies)?;
        Ok(())
    }

    /// The run config of one grid point; a bias the model cannot take is a one-line error.
    pub fn run_config(&self, bias: Bias, seed: u64) -> Result<RunConfig> {
        let d_head = self.d_model;
        let position = PositionEncoding::rope(
            ropelab_model::rope::DEFAULT_BASE,
            d_head,
            RopeLayout::Interleaved,
        );
        let data = AmbiguousData::default();
        let vocab_size = data.task()?.vocab().len();
        let model = ModelConfig {
            vocab_size,
            n_layers: self.layers,
            n_heads: 1,
            d_model: self.d_model,
            d_mlp: 4 * self.d_model,
            ln_eps: 1e-5,
            dropout: 0.0,
            tied_embeddings: false,
            position,
            layer_positions: vec![],
            attention: ropelab_model::AttentionKind::Softmax,
            mlp: true,
            layer_norm: true,
            head: Head::Lm,
        };
        let mut model = model;
        let position_shift = bias.apply(&mut model)?;
        Ok(RunConfig {
            preset: "bias".into(),
            task: TaskKind::Ambiguous,
            seed,
            objective: ropelab_model::Objective::LastToken,
            layout: Layout::default(),
            language: None,
            offset: None,
            canonical: None,
            ambiguous: Some(data),
            position_shift,
            precision: Default::default(),
            data: DataConfig {
                train: self.steps.saturating_mul(self.batch),
                val: 512,
                test: self.per_length,
            },
            model,
            optim: OptimConfig {
                eval_every: (self.steps / 10).max(1),
                ..OptimConfig::adamw(self.steps, self.batch, self.lr)
            },
        })
    }

    /// Every grid point, bias-major.
    pub fn grid(&self) -> Vec<(Bias, u64)> {
        self.biases
            .iter()
            .flat_map(|&b| self.seeds.iter().map(move |&s| (b, s)))
            .collect()
    }

    /// Every grid point as a sweep job in its run directory (relative to the experiment's).
    pub fn jobs(&self) -> Result<Vec<Job>> {
        self.grid()
            .into_iter()
            .map(|(bias, seed)| {
                let params = [
                    ("bias", Value::String(bias.to_string())),
                    ("seed", Value::Integer(seed as i64)),
                ];
                let config = self.run_config(bias, seed)?;
                Ok(grid::job(
                    &params,
                    config,
                    run_dir(Path::new(""), bias, seed),
                ))
            })
            .collect()
    }

    /// What running the experiment in `out` needs, `parallel` jobs at a time: its grid, then
    /// (with a transfer stage) the transfer runs of every bias (those that move content are
    /// known only after the grid, so all are counted): the one estimate every entry point
    /// (flags, `--transfer-steps`, Slurm) checks.
    pub fn need(&self, out: &Path, parallel: Option<usize>) -> Result<ropelab_io::Need> {
        let mut need = grid::need(&self.jobs()?, out, &self.measure_options(), parallel);
        if let Some(t) = &self.transfer {
            let jobs = transfer::jobs(self, t, &self.biases)?;
            need = need.then(grid::need(
                &jobs,
                out,
                &transfer::measure_options(t),
                parallel,
            ));
        }
        Ok(need)
    }

    /// What every job measures: the tested lengths, the conflict split, the heads.
    pub fn measure_options(&self) -> MeasureOptions {
        MeasureOptions {
            lengths: Some(self.lengths.clone()),
            per_length: self.per_length,
            heads: true,
            ..MeasureOptions::default()
        }
    }
}

/// The run directory of one grid point.
pub fn run_dir(out: &Path, bias: Bias, seed: u64) -> PathBuf {
    let name = bias.to_string().replace([':', '@'], "-");
    out.join("runs").join(name).join(format!("seed-{seed}"))
}

/// One run's mechanism and length accuracy (a row of `mechanism.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MechanismRow {
    /// The bias.
    pub bias: String,
    /// Seed.
    pub seed: u64,
    /// Fraction of conflict samples answered by position.
    pub positional: f64,
    /// Fraction answered by content.
    pub symbolic: f64,
    /// Fraction answered with neither.
    pub neither: f64,
    /// Accuracy on agree samples of the longest tested length.
    pub length_accuracy: f64,
}

/// One run's accuracy at one tested length (a row of `accuracy.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccuracyRow {
    /// The bias.
    pub bias: String,
    /// Seed.
    pub seed: u64,
    /// Items of the tested inputs (the first tested length is the training length).
    pub items: usize,
    /// Inputs tested.
    pub n: usize,
    /// Accuracy.
    pub accuracy: f64,
}

/// One head of one run (a row of `heads.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadRow {
    /// The bias.
    pub bias: String,
    /// Seed.
    pub seed: u64,
    /// Layer.
    pub layer: usize,
    /// Positional swap score.
    pub s_pos: f64,
    /// Symbolic swap score.
    pub s_sym: f64,
    /// Type at gamma 0.1.
    pub kind: String,
}

/// What one experiment measured (each also written to `out/`).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Per run (`mechanism.csv`).
    pub mechanisms: Vec<MechanismRow>,
    /// Per run and tested length (`accuracy.csv`).
    pub accuracy: Vec<AccuracyRow>,
    /// Per run and head (`heads.csv`).
    pub heads: Vec<HeadRow>,
    /// Per run: its head types in letters, one per layer (`PS`, `--`).
    pub types: Vec<(String, u64, String)>,
    /// The transfer stage, when it ran.
    pub transfer: Option<transfer::TransferOutcome>,
    /// Grid runs measured again this time because they had been measured with other settings.
    pub remeasured: Vec<PathBuf>,
}

/// Trains (or reuses) every grid point's model in `out/runs/...` as a sweep job (`parallel`
/// at a time, default one per core), measures each (`ropelab_sweep::measure::ambiguous`), and
/// writes `out/mechanism.csv`, `out/accuracy.csv` and `out/heads.csv` from the runs' files;
/// then, with a transfer stage, trains the content-moving biases on the number and letter tasks
/// ([`transfer::run`]) and reads the studies' models for the discrepancy claim.
pub fn run(
    experiment: &Experiment,
    out: &Path,
    parallel: Option<usize>,
    progress: &dyn Progress,
) -> Result<Outcome> {
    experiment.check()?;
    let jobs = experiment.jobs()?;
    // Both stages' runs are checked before either runs: the transfer runs of every bias the
    // mechanism stage could choose (a stale one found after the mechanism grid trained would
    // leave that work beside a refusal; eleventh pass).
    grid::refuse_stale(&jobs, out)?;
    if let Some(t) = &experiment.transfer {
        grid::refuse_stale(&transfer::jobs(experiment, t, &experiment.biases)?, out)?;
    }
    let remeasured = remeasure_stale(experiment, out)?;
    grid::run(
        &jobs,
        out,
        &experiment.measure_options(),
        parallel,
        progress,
    )?;
    let mut o = collect(experiment, out)?;
    o.remeasured = remeasured;
    if let Some(t) = &experiment.transfer {
        let movers = transfer::movers(experiment, &o.mechanisms);
        let mut stage = transfer::run(experiment, t, &movers, out, parallel, progress)?;
        stage.study = transfer::studies_points(&experiment.studies)?;
        o.transfer = Some(stage);
    }
    Ok(o)
}

/// Trains and measures shard `index` of `count` of the grid (jobs i with i mod count = index,
/// as `ropelab sweep --shard`), writing no table: a Slurm array task's part. Returns the
/// number of jobs it ran or reused.
pub fn run_shard(
    experiment: &Experiment,
    out: &Path,
    (index, count): (usize, usize),
    parallel: Option<usize>,
    progress: &dyn Progress,
) -> Result<usize> {
    experiment.check()?;
    let jobs: Vec<Job> = experiment
        .jobs()?
        .into_iter()
        .enumerate()
        .filter(|(i, _)| count > 0 && i % count == index)
        .map(|(_, j)| j)
        .collect();
    if !jobs.is_empty() {
        grid::refuse_stale(&jobs, out)?;
        remeasure_stale(experiment, out)?;
        grid::run(
            &jobs,
            out,
            &experiment.measure_options(),
            parallel,
            progress,
        )?;
    }
    Ok(jobs.len())
}

/// Whether the run in `dir` was measured as `experiment` asks: its `lengths.csv` holds exactly
/// the experiment's (items, samples) and its `conflict.csv` as many samples. `None` when a file
/// is missing (the run is not measured yet).
fn measured_as_asked(experiment: &Experiment, dir: &Path) -> Result<Option<bool>> {
    let (lengths, conflict) = (dir.join("lengths.csv"), dir.join("conflict.csv"));
    if !lengths.exists() || !conflict.exists() {
        return Ok(None);
    }
    // Tables the run's ledger does not vouch for (changed by hand, or an older ropelab's) are
    // measured again, never read (twenty-first pass, N4).
    let vouched = |file| ropelab_sweep::measure::vouched_run_file(dir, file).is_ok();
    if !vouched("lengths.csv") || !vouched("conflict.csv") {
        return Ok(Some(false));
    }
    let rows: Vec<LengthAccuracy> = read_csv_file(&lengths)?;
    let tested: Vec<(usize, usize)> = rows.iter().map(|r| (r.length, r.n)).collect();
    let asked: Vec<(usize, usize)> = experiment
        .lengths
        .iter()
        .map(|&n| (n, experiment.per_length))
        .collect();
    Ok(Some(
        tested == asked && read_conflict(dir)?.n == experiment.per_length,
    ))
}

/// Finished grid runs measured with other settings (an earlier grid's lengths or sample
/// counts) are measured again: their `result.json` goes, so the sweep resumes the run at its
/// last checkpoint (no training left) and measures it anew. Training is what the run config
/// fixes (its digest is checked by the sweep); the measurement is the experiment's.
/// Returns the runs it sends back to be measured.
fn remeasure_stale(experiment: &Experiment, out: &Path) -> Result<Vec<PathBuf>> {
    let mut stale = vec![];
    for (bias, seed) in experiment.grid() {
        let dir = run_dir(out, bias, seed);
        let result = dir.join("result.json");
        if result.exists() && measured_as_asked(experiment, &dir)? == Some(false) {
            std::fs::remove_file(&result)
                .map_err(|e| anyhow::anyhow!("{}: {e}", result.display()))?;
            stale.push(dir);
        }
    }
    Ok(stale)
}

/// Reads every grid point's files from `out/runs/...` and writes the three tables.
pub fn collect(experiment: &Experiment, out: &Path) -> Result<Outcome> {
    let mut o = Outcome {
        mechanisms: vec![],
        accuracy: vec![],
        heads: vec![],
        types: vec![],
        transfer: None,
        remeasured: vec![],
    };
    for (bias, seed) in experiment.grid() {
        let dir = run_dir(out, bias, seed);
        let name = bias.to_string();
        let conflict = read_conflict(&dir)?;
        let rows: Vec<LengthAccuracy> =
            ropelab_sweep::measure::read_run_lengths(&dir, None, false)?;
        // A run measured with other settings (an earlier grid's lengths or sample counts, whose
        // `run` was not rerun) is refused by name, never reported as this experiment's.
        ensure!(
            measured_as_asked(experiment, &dir)? == Some(true),
            "{} was measured at (items, samples) {:?} with {} conflict samples, the experiment \
             asks for items {:?} with {} samples each: rerun `ropelab bias` with these settings \
             (it measures the run again) or choose another --out",
            dir.display(),
            rows.iter().map(|r| (r.length, r.n)).collect::<Vec<_>>(),
            conflict.n,
            experiment.lengths,
            experiment.per_length
        );
        let heads: Vec<AmbiguousHead> = ropelab_sweep::measure::read_run_csv(&dir, "heads.csv")?;
        // A head's type is its scores' at the paper's tolerance, and the scores are shares:
        // a row that contradicts itself is refused (twenty-second pass, S1).
        for h in &heads {
            let scores = ropelab_analysis::lens::swap::SwapScores {
                s_pos: h.s_pos,
                s_sym: h.s_sym,
            };
            let in_range = (0.0..=1.0).contains(&h.s_pos) && (0.0..=1.0).contains(&h.s_sym);
            ensure!(
                in_range
                    && ropelab_analysis::lens::purity::purity(
                        scores,
                        ropelab_analysis::measure::dynamics::Gamma::DEFAULT
                    ) == h.kind,
                "{}: layer {} head {} is typed {} with s_pos {} and s_sym {}, which no \
                 measurement gives: a damaged or edited file",
                dir.join("heads.csv").display(),
                h.layer,
                h.head,
                h.kind,
                h.s_pos,
                h.s_sym
            );
        }
        o.mechanisms.push(MechanismRow {
            bias: name.clone(),
            seed,
            positional: conflict.positional,
            symbolic: conflict.symbolic,
            neither: conflict.neither,
            length_accuracy: rows.last().map_or(0.0, |r| r.accuracy()),
        });
        o.accuracy.extend(rows.iter().map(|r| AccuracyRow {
            bias: name.clone(),
            seed,
            items: r.length,
            n: r.n,
            accuracy: r.accuracy(),
        }));
        o.types.push((name.clone(), seed, letters(&heads)));
        o.heads.extend(heads.into_iter().map(|h| HeadRow {
            bias: name.clone(),
            seed,
            layer: h.layer,
            s_pos: h.s_pos,
            s_sym: h.s_sym,
            kind: h.kind.to_string(),
        }));
    }
    crate::record_csv(&out.join("mechanism.csv"), "bias", &o.mechanisms)?;
    crate::record_csv(&out.join("accuracy.csv"), "bias", &o.accuracy)?;
    crate::record_csv(&out.join("heads.csv"), "bias", &o.heads)?;
    Ok(o)
}

/// Mean and (sample) standard deviation.
pub fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len().max(1) as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = if values.len() > 1 {
        values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// One bias's means over seeds: (bias, [(mean, sd) of positional, symbolic, neither, length
/// accuracy]), in the experiment's order.
pub fn summary(rows: &[MechanismRow]) -> Vec<(String, [(f64, f64); 4])> {
    let mut names: Vec<String> = vec![];
    for r in rows {
        if !names.contains(&r.bias) {
            names.push(r.bias.clone());
        }
    }
    names
        .into_iter()
        .map(|b| {
            let mine: Vec<&MechanismRow> = rows.iter().filter(|r| r.bias == b).collect();
            let col = |f: fn(&MechanismRow) -> f64| {
                mean_sd(&mine.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let cols = [
                col(|r| r.positional),
                col(|r| r.symbolic),
                col(|r| r.neither),
                col(|r| r.length_accuracy),
            ];
            (b, cols)
        })
        .collect()
}

/// How far a bias must move the conflict split's symbolic fraction (mean over seeds) from the
/// default model's to count as moving the choice: 0.1.
pub const MOVE: f64 = 0.1;

/// How much higher a content-moving bias's longest-length accuracy must be than the default
/// model's to count as raising it: 0.02.
pub const RAISE: f64 = 0.02;

/// Whether a content-moving bias raises the longest-length accuracy over the default model's:
/// the gain d of its mean over seeds (`bias`) over none's (`none`), with a Welch 95% interval
/// (Welch-Satterthwaite degrees of freedom, rounded down; one seed on a side leaves it
/// unbounded). Raises when d >= [`RAISE`] and the interval lies above 0; does not when the
/// interval lies below [`RAISE`]; undetermined otherwise. When none's mean is above
/// 1 - [`RAISE`] no gain of [`RAISE`] can show (the ceiling): only an interval below 0 decides
/// (does not raise), anything else is undetermined.
pub fn raises_length(none: &[f64], bias: &[f64]) -> (String, Judged) {
    let (mn, mb) = (mean_sd(none).0, mean_sd(bias).0);
    let (d, lo, hi) =
        welch_difference(none, bias).unwrap_or((mb - mn, f64::NEG_INFINITY, f64::INFINITY));
    let text = format!(
        "{mb:.3} (gain {d:+.3}, 95% interval [{lo:+.3}, {hi:+.3}], seeds {})",
        bias.len()
    );
    let ceiling = mn > 1.0 - RAISE;
    let o = if hi < if ceiling { 0.0 } else { RAISE } {
        Judged::Fails
    } else if ceiling {
        Judged::undetermined(format!(
            "none is at {mn:.3} at the longest length: no gain of {RAISE} can show (the ceiling)"
        ))
    } else if d >= RAISE && lo > 0.0 {
        Judged::Holds
    } else {
        Judged::undetermined(format!(
            "the interval [{lo:+.3}, {hi:+.3}] reaches both below 0 and above {RAISE}"
        ))
    };
    (text, o)
}

/// One claim of the experiment, computed from `mechanism.csv` (a row of `claims.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BiasClaim {
    /// Stable id.
    pub id: String,
    /// The claim as docs/bias.md states it.
    pub statement: String,
    /// The test and its threshold.
    pub threshold: String,
    /// What the run measured.
    pub measured: String,
    /// Holds, does not hold, or undetermined (the grid lacks what the claim needs, or too few
    /// models to decide).
    pub verdict: Verdict,
    /// What an undetermined claim misses (empty otherwise).
    pub reason: String,
}

impl BiasClaim {
    fn new(id: &str, statement: &str, threshold: String, measured: String, o: Judged) -> Self {
        let (verdict, reason) = match o {
            Judged::Holds => (Verdict::Holds, String::new()),
            Judged::Fails => (Verdict::DoesNotHold, String::new()),
            Judged::Undetermined(why) => (Verdict::Undetermined, why),
        };
        Self {
            id: id.into(),
            statement: statement.into(),
            threshold,
            measured,
            verdict,
            reason,
        }
    }
}

/// The smallest rank correlation the discrepancy claim accepts: 0.5.
pub const RHO: f64 = 0.5;

/// A number or letter model enters the discrepancy claim only when its test accuracy reaches
/// this (a model that never learned fails at the training length whatever its heads).
pub const LEARNED: f64 = 0.99;

/// Fewest learned models of a task for its rank correlation to be judged.
pub const MIN_MODELS: usize = 6;

/// The claims' verdicts on the ambiguous runs' `rows` and the transfer stage (docs/bias.md,
/// "Claims").
pub fn claims(
    rows: &[MechanismRow],
    transfer: Option<&transfer::TransferOutcome>,
) -> Vec<BiasClaim> {
    let s = summary(rows);
    let none = s.iter().find(|(b, _)| b == "none").map(|(_, c)| *c);
    let verdict = Judged::of;
    let mut out = vec![];
    // 1. Keeping high frequencies unrotated moves the choice toward content.
    let keep: Vec<&(String, [(f64, f64); 4])> = s
        .iter()
        .filter(|(b, _)| b.starts_with("keep-high"))
        .collect();
    let (measured, v) = match (none, keep.is_empty()) {
        (Some(n), false) => {
            let mean = keep.iter().map(|(_, c)| c[1].0).sum::<f64>() / keep.len() as f64;
            let each: Vec<String> = keep
                .iter()
                .map(|(b, c)| format!("{b} {:.3}", c[1].0))
                .collect();
            (
                format!(
                    "symbolic fraction: none {:.3}; {} (mean {mean:.3}, change {:+.3})",
                    n[1].0,
                    each.join(", "),
                    mean - n[1].0
                ),
                verdict(mean - n[1].0 >= MOVE),
            )
        }
        _ => (
            "the grid needs `none` and a keep-high bias".into(),
            Judged::undetermined("the grid needs `none` and a keep-high bias"),
        ),
    };
    out.push(BiasClaim::new(
        "high_frequencies_toward_content",
        "dropping high frequencies (planes kept unrotated) moves the ambiguous task toward the \
         content mechanism",
        format!("mean symbolic fraction of the keep-high biases >= none's + {MOVE}"),
        measured,
        v,
    ));
    // 2. A bias that moves the model toward content raises its length-split accuracy.
    let (measured, v) = match none {
        Some(n) => {
            let movers: Vec<&String> = s
                .iter()
                .filter(|(b, c)| b != "none" && c[1].0 - n[1].0 >= MOVE)
                .map(|(b, _)| b)
                .collect();
            if movers.is_empty() {
                let why = format!(
                    "no bias raised the symbolic fraction by {MOVE} over none's {:.3}",
                    n[1].0
                );
                (why.clone(), Judged::Undetermined(why))
            } else {
                let longest = |b: &str| -> Vec<f64> {
                    rows.iter()
                        .filter(|r| r.bias == b)
                        .map(|r| r.length_accuracy)
                        .collect()
                };
                let base = longest("none");
                let mut tally = Tally::default();
                for b in movers {
                    let (text, o) = raises_length(&base, &longest(b));
                    tally.push(b, text, o);
                }
                (
                    format!(
                        "longest-length accuracy, mean over seeds: none {:.3}; {}",
                        n[3].0,
                        tally.measured.join("; ")
                    ),
                    {
                        let (v, why) = decide(&tally, 1);
                        judged(v, why)
                    },
                )
            }
        }
        None => (
            "the grid needs `none`".into(),
            Judged::undetermined("the grid needs `none`"),
        ),
    };
    out.push(BiasClaim::new(
        "symbolic_bias_raises_length",
        "a bias that makes the model symbolic raises its length-split accuracy",
        format!(
            "for every bias whose symbolic fraction is >= none's + {MOVE}, the gain d of its \
             mean accuracy at the longest tested length over none's, with a Welch 95% interval \
             over seeds: raises when d >= {RAISE} and the interval lies above 0, does not raise \
             when the interval lies below {RAISE} (or below 0 when none is within {RAISE} of \
             1, where no gain of {RAISE} can show), undetermined otherwise; holds when every \
             such bias raises, does not hold when one does not"
        ),
        measured,
        v,
    ));
    out.push(discrepancy_claim(transfer));
    out.push(association_claim(transfer));
    out
}

/// `pure_heads_with_learning` on the transfer stage's models and the given studies' (the
/// study's claim, `ropelab_analysis::claims::learning`): here some models fail (keep-high
/// removes the number task's positional solution), so success varies and the association can
/// be judged.
fn association_claim(transfer: Option<&transfer::TransferOutcome>) -> BiasClaim {
    use ropelab_analysis::claims::learning::{association_claim, PAPER};
    let threshold = ropelab_analysis::measure::pure_heads::threshold_text();
    let Some(t) = transfer else {
        return BiasClaim::new(
            "pure_heads_with_learning",
            PAPER,
            threshold,
            "the transfer stage did not run".into(),
            Judged::undetermined("the transfer stage did not run"),
        );
    };
    let mut rows = t.pure.clone();
    rows.extend(t.study.iter().filter_map(|p| p.pure.clone()));
    let c = association_claim(&rows, PAPER);
    let measured = c.measured.join("; ");
    BiasClaim::new(
        "pure_heads_with_learning",
        PAPER,
        c.threshold,
        measured,
        judged(c.verdict, c.reason),
    )
}

/// A verdict and its reason as an outcome.
fn judged(verdict: Verdict, why: Option<String>) -> Judged {
    match verdict {
        Verdict::Holds => Judged::Holds,
        Verdict::DoesNotHold => Judged::Fails,
        Verdict::Undetermined => Judged::Undetermined(why.unwrap_or_default()),
    }
}

/// "The discrepancy of the heads the answer depends on, measured at the training length,
/// predicts the length at which accuracy first falls below 0.9", judged within each task on the
/// models that learned it (test accuracy >= [`LEARNED`]): pooling tasks, or counting models
/// that never learned (whose "first length below 0.9" is the training length), would let task
/// and learnability make the correlation. Per task, Spearman's rho of the transfer stage's and
/// the given studies' models (a model that never falls below 0.9 ranks above every one that
/// does, ties sharing their rank) with its 95% interval ([`transfer::spearman_interval`]):
/// the task holds when rho >= [`RHO`] and the interval excludes 0, does not hold when the
/// interval lies below [`RHO`], and is undetermined otherwise or with fewer than
/// [`MIN_MODELS`] learned models. The claim holds when both tasks hold, does not hold when
/// one does not, and is undetermined otherwise.
fn discrepancy_claim(transfer: Option<&transfer::TransferOutcome>) -> BiasClaim {
    let statement = "the discrepancy of the heads the answer depends on, measured at the \
                     training length, predicts the length at which accuracy first falls below 0.9";
    let threshold = format!(
        "within each task, over the number (or letter) models of the transfer stage and the \
         studies given that learned it (test accuracy >= {LEARNED}), Spearman's rho of the \
         weakest pure head's discrepancy at the training length against the first tested \
         length below {}: >= {RHO} with a 95% interval excluding 0 (Fisher z, variance 1.06 / \
         (n - 3)); undetermined with fewer than {MIN_MODELS} learned models or an interval \
         reaching {RHO} from below; both tasks must hold",
        transfer::FAIL
    );
    let Some(t) = transfer else {
        return BiasClaim::new(
            "discrepancy_predicts_length",
            statement,
            threshold,
            "the transfer stage did not run".into(),
            Judged::undetermined("the transfer stage did not run"),
        );
    };
    let mut parts = vec![];
    let mut outcomes = vec![];
    for task in transfer::TASKS {
        let name = task.as_str();
        // (margin, first length below, test accuracy) of every model of the task.
        let models: Vec<(f64, Option<usize>, Option<f64>)> = t
            .runs
            .iter()
            .filter(|r| r.task == name)
            .map(|r| (r.margin, r.first_below, Some(r.test_accuracy)))
            .chain(
                t.study
                    .iter()
                    .filter(|p| p.task == name)
                    .map(|p| (p.margin, p.first_below, p.test_accuracy)),
            )
            .collect();
        let learned: Vec<&(f64, Option<usize>, Option<f64>)> = models
            .iter()
            .filter(|m| m.2.is_some_and(|a| a >= LEARNED))
            .collect();
        let censored = learned.iter().filter(|m| m.1.is_none()).count();
        let points: Vec<(f64, f64)> = learned
            .iter()
            .map(|m| (m.0, m.1.map_or(f64::INFINITY, |n| n as f64)))
            .collect();
        let n = points.len();
        let head = format!(
            "{name}: {n} of {} models learned ({censored} never below {} in the tested lengths)",
            models.len(),
            transfer::FAIL
        );
        let rho = transfer::spearman(&points);
        let (text, outcome) = match rho {
            _ if n < MIN_MODELS => (
                head.clone(),
                Judged::undetermined(format!(
                    "{name}: {n} learned models, fewer than the {MIN_MODELS} needed"
                )),
            ),
            None => (
                format!("{head}; rho undefined (one side constant)"),
                Judged::undetermined(format!(
                    "{name}: the rank correlation is undefined (one side constant)"
                )),
            ),
            Some(rho) => {
                let (lo, hi) = transfer::spearman_interval(rho, n);
                let text = format!("{head}; rho {rho:+.3}, 95% interval [{lo:+.3}, {hi:+.3}]");
                let outcome = if rho >= RHO && lo > 0.0 {
                    Judged::Holds
                } else if hi < RHO {
                    Judged::Fails
                } else {
                    Judged::undetermined(format!(
                        "{name}: rho {rho:+.3} on {n} models, its interval [{lo:+.3}, \
                         {hi:+.3}] cannot separate it from {RHO} and 0"
                    ))
                };
                (text, outcome)
            }
        };
        parts.push(text);
        outcomes.push(outcome);
    }
    let outcome = if outcomes.contains(&Judged::Fails) {
        Judged::Fails
    } else if outcomes.iter().all(|o| *o == Judged::Holds) {
        Judged::Holds
    } else {
        Judged::undetermined(
            outcomes
                .iter()
                .filter_map(|o| match o {
                    Judged::Undetermined(w) => Some(w.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("; "),
        )
    };
    BiasClaim::new(
        "discrepancy_predicts_length",
        statement,
        threshold,
        parts.join("; "),
        outcome,
    )
}

/// One row per bias (the CLI's table and the report's): the bias, mean ± sd of the positional,
/// symbolic and neither fractions and of the longest-length accuracy, and each seed's head
/// types (`s0 S-, s1 --`). One seed has no spread: its cells give the mean alone, marked
/// `(1 seed)`, not `± 0.000` (ninth pass, b02).
pub fn summary_rows(o: &Outcome) -> Vec<Vec<String>> {
    summary(&o.mechanisms)
        .iter()
        .map(|(b, c)| {
            let types: Vec<String> = o
                .types
                .iter()
                .filter(|t| &t.0 == b)
                .map(|t| format!("s{} {}", t.1, t.2))
                .collect();
            let one_seed = types.len() < 2;
            let pm = |(m, sd): (f64, f64)| {
                if one_seed {
                    format!("{m:.3} (1 seed)")
                } else {
                    format!("{m:.3} ± {sd:.3}")
                }
            };
            vec![
                b.clone(),
                pm(c[0]),
                pm(c[1]),
                pm(c[2]),
                pm(c[3]),
                types.join(", "),
            ]
        })
        .collect()
}

/// The experiment's page: the table per bias, the mechanism bars, the length curves and the
/// claims (written to `out/report.html` by [`write_report`]).
pub fn report_sections(
    e: &Experiment,
    o: &Outcome,
    claims: &[BiasClaim],
) -> Vec<ropelab_report::html::Section> {
    use ropelab_report::bias::{length_curves, mechanism_bars};
    use ropelab_report::html::Section;
    let s = summary(&o.mechanisms);
    let rows = summary_rows(o);
    let mut table = Section::new("bias-table", "Mechanism and length per bias");
    table.text(&format!(
        "{} biases x {} seeds; {} layers x 1 head, d_model {}, {} steps of {}; {} conflict and \
         {} agree samples per tested length; means ± one sd over seeds. Length accuracy is at \
         {} items (training: {}). Head types at gamma 0.1 (P positional, S symbolic, - \
         neither), one letter per layer.",
        e.biases.len(),
        e.seeds.len(),
        e.layers,
        e.d_model,
        e.steps,
        e.batch,
        e.per_length,
        e.per_length,
        e.lengths.last().copied().unwrap_or(0),
        e.lengths[0],
    ));
    table.table(
        &[
            "bias",
            "positional",
            "symbolic",
            "neither",
            "length accuracy",
            "head types",
        ],
        &rows,
    );
    let bars: Vec<ropelab_report::bias::BarGroup> = s
        .iter()
        .map(|(b, c)| (b.clone(), [c[0], c[1], c[2]]))
        .collect();
    let mut curves = vec![];
    for (b, _) in &s {
        let points = e
            .lengths
            .iter()
            .map(|&n| {
                let acc: Vec<f64> = o
                    .accuracy
                    .iter()
                    .filter(|r| &r.bias == b && r.items == n)
                    .map(|r| r.accuracy)
                    .collect();
                let (m, sd) = mean_sd(&acc);
                (n as f64, m, sd)
            })
            .collect();
        curves.push((b.clone(), points));
    }
    let mut figures = Section::new("bias-figures", "Mechanism fractions and length curves");
    figures.figures(&[
        mechanism_bars(&bars),
        length_curves(
            "Length split: accuracy versus items (first point: training length)",
            "items in the input",
            &curves,
        ),
    ]);
    let mut verdicts = Section::new("bias-claims", "Claims");
    verdicts.table(
        &["claim", "verdict", "threshold", "measured"],
        &claims
            .iter()
            .map(|c| {
                vec![
                    c.statement.clone(),
                    if c.reason.is_empty() {
                        c.verdict.to_string()
                    } else {
                        format!("{} ({})", c.verdict, c.reason)
                    },
                    c.threshold.clone(),
                    c.measured.clone(),
                ]
            })
            .collect::<Vec<_>>(),
    );
    let mut sections = vec![table, figures];
    if let Some(t) = &o.transfer {
        sections.push(transfer::report_section(e, t));
    }
    sections.push(verdicts);
    sections
}

/// Writes `out/claims.csv` and `out/report.html` (self-contained) for an outcome.
pub fn write_report(e: &Experiment, o: &Outcome, out: &Path) -> Result<Vec<BiasClaim>> {
    let claims = claims(&o.mechanisms, o.transfer.as_ref());
    crate::record_csv(&out.join("claims.csv"), "bias", &claims)?;
    let html = ropelab_report::html::page(
        "ropelab: can training be biased toward symbolic solutions?",
        "The bias experiment on the ambiguous task (docs/bias.md)",
        &report_sections(e, o, &claims),
    );
    let path = out.join("report.html");
    ropelab_io::write_atomic(&path, html.as_bytes())
        .map_err(|err| anyhow::anyhow!("cannot write {}: {err}", path.display()))?;
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn biases_parse_print_and_bad_ones_are_one_line_errors() {
        for s in [
            "none",
            "base:1e2",
            "base:1e6",
            "keep-high:8",
            "keep-high:16@1",
            "partial:16",
            "nope:0",
            "shift:1024",
        ] {
            assert_eq!(s.parse::<Bias>().unwrap().to_string(), s);
        }
        for (bad, want) in [
            ("alibi", "unknown bias"),
            ("base:0.5", "above 1"),
            // The model's bound, named as the bias's (twenty-first pass, N7).
            ("base:1e300", "at most 1e12"),
            ("keep-high:0", "K >= 1"),
            ("keep-high:4@x", "keep-high:K@LAYER"),
            ("nope:x", "not a whole number"),
        ] {
            let e = bad.parse::<Bias>().unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn every_bias_changes_what_it_should() {
        let e = Experiment::full();
        e.check().unwrap();
        let none = e.run_config(Bias::None, 0).unwrap();
        let get = |b: &str| e.run_config(b.parse().unwrap(), 0).unwrap();
        let rope_of = |p: &PositionEncoding| match p {
            PositionEncoding::Rope {
                base,
                rotary_dim,
                planes,
                ..
            } => (*base, *rotary_dim, planes.to_string()),
            other => panic!("{other:?}"),
        };
        assert_eq!(rope_of(&none.model.position), (1e4, 64, String::new()));
        assert_eq!(rope_of(&get("base:100").model.position).0, 100.0);
        let keep = rope_of(&get("keep-high:8").model.position).2;
        assert_eq!(keep, format!("{}{}", "K".repeat(8), "R".repeat(24)));
        let layered = get("keep-high:16@1").model;
        assert_eq!(rope_of(layered.layer_position(0)).2, "");
        assert!(rope_of(layered.layer_position(1)).2.starts_with("KKKK"));
        assert_eq!(rope_of(&get("partial:16").model.position).1, 16);
        let nope = get("nope:1").model;
        assert_eq!(nope.layer_position(1), &PositionEncoding::None);
        assert_eq!(nope.layer_position(0), &none.model.position);
        let shifted = get("shift:1024");
        assert_eq!(shifted.position_shift, 1024);
        assert_eq!(shifted.model, none.model);
        // Nothing else differs from the default: same task, data and schedule.
        for b in &e.biases {
            let c = e.run_config(*b, 0).unwrap();
            assert_eq!(
                (c.data, c.optim, c.ambiguous),
                (none.data.clone(), none.optim.clone(), none.ambiguous)
            );
        }
        let bad = |b: &str, want: &str| {
            let e = Experiment {
                biases: vec![b.parse().unwrap()],
                ..Experiment::quick()
            };
            let err = e.check().unwrap_err().to_string();
            assert!(err.contains(want) && !err.contains('\n'), "{b}: {err}");
        };
        bad("keep-high:40", "32 planes");
        bad("partial:7", "even");
        bad("nope:2", "2 layers");
        bad("keep-high:4@5", "2 layers");
    }

    #[test]
    fn runs_measured_with_other_settings_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let e = Experiment {
            biases: vec![Bias::None],
            seeds: vec![0],
            steps: 3,
            per_length: 8,
            lengths: vec![16, 32],
            ..Experiment::quick()
        };
        let o = run(&e, dir.path(), Some(1), &crate::Quiet).unwrap();
        assert_eq!(o.mechanisms.len(), 1);
        assert_eq!(o.accuracy.len(), 2);
        for other in [
            Experiment {
                per_length: 16,
                ..e.clone()
            },
            Experiment {
                lengths: vec![16, 64],
                ..e.clone()
            },
        ] {
            let err = collect(&other, dir.path()).unwrap_err().to_string();
            assert!(
                err.contains("was measured at") && !err.contains('\n'),
                "{err}"
            );
        }
        // Running the experiment with other lengths measures the run again, keeping its
        // training (the log is untouched), and the tables then hold the new lengths.
        let log = run_dir(dir.path(), Bias::None, 0).join("metrics.jsonl");
        let before = std::fs::read(&log).unwrap();
        let longer = Experiment {
            lengths: vec![16, 32, 64],
            ..e.clone()
        };
        let o = run(&longer, dir.path(), Some(1), &crate::Quiet).unwrap();
        assert_eq!(o.remeasured, vec![run_dir(dir.path(), Bias::None, 0)]);
        assert_eq!(o.accuracy.len(), 3);
        assert_eq!(std::fs::read(&log).unwrap(), before);
        let again = run(&longer, dir.path(), Some(1), &crate::Quiet).unwrap();
        assert!(again.remeasured.is_empty());
        assert_eq!(again.accuracy, o.accuracy);
    }

    #[test]
    fn a_stale_transfer_run_is_refused_before_the_mechanism_grid_trains() {
        let dir = tempfile::tempdir().unwrap();
        let t = transfer::TransferSettings {
            steps: 2,
            extras: vec![0],
            samples: 8,
        };
        let e = Experiment {
            biases: vec![Bias::None],
            seeds: vec![0],
            steps: 2,
            per_length: 8,
            lengths: vec![16],
            transfer: Some(t.clone()),
            ..Experiment::quick()
        };
        run(&e, dir.path(), Some(1), &crate::Quiet).unwrap();
        // Another bias in the grid (a new mechanism run) and other transfer steps (the
        // existing transfer runs stale): refused before the new run is trained.
        let nope: Bias = "nope:0".parse().unwrap();
        let other = Experiment {
            biases: vec![Bias::None, nope],
            transfer: Some(transfer::TransferSettings { steps: 3, ..t }),
            ..e.clone()
        };
        let err = run(&other, dir.path(), Some(1), &crate::Quiet)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no job was run"), "{err}");
        assert!(!run_dir(dir.path(), nope, 0).exists(), "{err}");
    }

    #[test]
    fn a_length_gain_is_judged_with_its_welch_interval_and_the_ceiling() {
        use Judged::*;
        let verdict = |none: &[f64], bias: &[f64]| raises_length(none, bias).1;
        // Worked by hand: d = 0.15, se = sqrt(0.01/3 + 0.0025/3) = 0.06455, Welch df = 2.94
        // (rounded down to 2, t = 4.303): half-width 0.2778, interval [-0.128, +0.428].
        let (text, o) = raises_length(&[0.8, 0.7, 0.9], &[0.95, 1.0, 0.9]);
        assert!(
            text.contains("gain +0.150") && text.contains("[-0.128, +0.428]"),
            "{text}"
        );
        assert!(matches!(o, Undetermined(_)), "{o:?}");
        assert_eq!(verdict(&[0.6, 0.62, 0.64], &[0.99, 1.0, 1.0]), Holds);
        assert_eq!(verdict(&[0.8, 0.82, 0.78], &[0.5, 0.52, 0.48]), Fails);
        // A gain above 0 but below RAISE, known tightly: it does not raise by RAISE.
        assert_eq!(verdict(&[0.9, 0.9, 0.9], &[0.91, 0.91, 0.91]), Fails);
        // At the ceiling a bias level with none cannot show a gain: undetermined, not "fails";
        // one clearly below it still fails.
        let ceiling = [0.99, 1.0, 0.995];
        let Undetermined(why) = verdict(&ceiling, &[1.0, 1.0, 1.0]) else {
            panic!("the ceiling decided")
        };
        assert!(why.contains("ceiling"), "{why}");
        assert_eq!(verdict(&ceiling, &[0.5, 0.5, 0.52]), Fails);
        // One seed on a side leaves the interval unbounded.
        assert!(matches!(verdict(&[0.5], &[1.0, 1.0]), Undetermined(_)));
    }

    #[test]
    fn the_summary_gives_mean_and_sd_per_bias() {
        let row = |bias: &str, seed, symbolic| MechanismRow {
            bias: bias.into(),
            seed,
            positional: 1.0 - symbolic,
            symbolic,
            neither: 0.0,
            length_accuracy: 1.0,
        };
        let s = summary(&[
            row("none", 0, 0.2),
            row("none", 1, 0.4),
            row("nope:0", 0, 1.0),
        ]);
        assert_eq!(s.len(), 2);
        assert!((s[0].1[1].0 - 0.3).abs() < 1e-12);
        assert!((s[0].1[1].1 - 0.02f64.sqrt()).abs() < 1e-12);
        assert_eq!(s[1].1[1], (1.0, 0.0));
    }

    /// A transfer outcome of `(task, test accuracy, margin, first length below)` runs.
    fn transfer_of(models: &[(&str, f64, f64, Option<usize>)]) -> transfer::TransferOutcome {
        transfer::TransferOutcome {
            runs: models
                .iter()
                .enumerate()
                .map(|(i, &(task, acc, margin, first))| transfer::TransferRow {
                    task: task.into(),
                    bias: "none".into(),
                    seed: i as u64,
                    test_accuracy: acc,
                    types: String::new(),
                    first_below: first,
                    margin,
                    train_seconds: 0.0,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_discrepancy_claim_is_judged_within_each_task_on_learned_models() {
        // Within each task, eight learned models whose first failing length rises with their
        // margin (rho = 1), and three unlearned number models that would reverse it if pooled.
        let mut models: Vec<(&str, f64, f64, Option<usize>)> = vec![];
        for i in 0..8 {
            let m = i as f64;
            models.push(("number", 1.0, m, Some(17 + 16 * i)));
            models.push(("letter", 1.0, 10.0 + m, Some(273 + 16 * i)));
        }
        for i in 0..3 {
            models.push(("number", 0.1, 20.0 + i as f64, Some(17)));
        }
        let c = discrepancy_claim(Some(&transfer_of(&models)));
        assert_eq!(c.verdict, Verdict::Holds, "{c:?}");
        assert!(
            c.measured.contains("number: 8 of 11 models learned"),
            "{c:?}"
        );
        assert!(c.measured.contains("rho +1.000"), "{c:?}");
        // Pooled, task alone would correlate (letter margins and lengths are both higher):
        // within each task, 30 models with no relation (rho about 0) do not hold.
        let mut flat = vec![];
        for i in 0..30 {
            let m = i as f64;
            let first = 17 + 16 * ((i * 7) % 30);
            let scramble = if i % 2 == 0 { first } else { 500 - first };
            flat.push(("number", 1.0, m, Some(scramble)));
            flat.push(("letter", 1.0, 100.0 + m, Some(1000 + scramble)));
        }
        let pooled: Vec<(f64, f64)> = flat.iter().map(|m| (m.2, m.3.unwrap() as f64)).collect();
        assert!(transfer::spearman(&pooled).unwrap() > RHO);
        let c = discrepancy_claim(Some(&transfer_of(&flat)));
        assert_eq!(c.verdict, Verdict::DoesNotHold, "{c:?}");
        // Too few learned models, or no transfer stage: undetermined, saying why.
        let c = discrepancy_claim(Some(&transfer_of(&models[..8])));
        assert_eq!(c.verdict, Verdict::Undetermined, "{c:?}");
        assert!(
            c.reason.contains("4 learned models, fewer than the 6"),
            "{c:?}"
        );
        let c = discrepancy_claim(None);
        assert_eq!(c.verdict, Verdict::Undetermined);
        assert!(c.reason.contains("did not run"));
    }

    #[test]
    fn the_spearman_interval_narrows_with_n_and_stays_in_range() {
        let (lo, hi) = transfer::spearman_interval(0.662, 30);
        // z = atanh(0.662) = 0.7966, half-width 1.96 * sqrt(1.06 / 27) = 0.3884.
        assert!((lo - (0.7966f64 - 0.3884).tanh()).abs() < 1e-3, "{lo}");
        assert!((hi - (0.7966f64 + 0.3884).tanh()).abs() < 1e-3, "{hi}");
        let (lo8, hi8) = transfer::spearman_interval(0.662, 8);
        assert!(lo8 < lo && hi8 > hi);
        assert_eq!(transfer::spearman_interval(1.0, 4), (-1.0, 1.0));
        let (lo, hi) = transfer::spearman_interval(1.0, 10);
        assert!(lo > 0.9 && hi <= 1.0);
    }
}
