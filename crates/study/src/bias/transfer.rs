//! The bias experiment's transfer stage (docs/bias.md, "Transfer"): the biases that moved the
//! ambiguous task toward content, applied to the main paper's number and letter tasks, each
//! trained beside the unbiased model and tested at longer inputs; and the discrepancy points
//! (a model's weakest pure head's discrepancy at the training length against the length at which
//! its accuracy first falls below 0.9) of these runs and of a study's models.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ropelab_analysis::claims::{head_grid, RunFiles};
use ropelab_analysis::lens::purity::HeadKind;
use ropelab_analysis::measure::lengthgen::{LengthOptions, LengthRow};
use ropelab_analysis::measure::pure_heads::{row_of, ModelRow};
use ropelab_analysis::StudyDir;
use ropelab_sweep::measure::GAMMA;
use ropelab_sweep::{Job, MeasureOptions};
use ropelab_tasks::TaskKind;
use ropelab_train::{Preset, RunConfig, EVAL_MEMORY};
use serde::{Deserialize, Serialize};
use toml::Value;

use super::{mean_sd, Bias, Experiment, MechanismRow, MOVE};
use crate::{grid, Progress};

/// Accuracy below which a model counts as failed at a length (the claim's 0.9).
pub const FAIL: f64 = 0.9;

/// The transfer stage's model and tests: the quick preset (6 layers x 1 head, d_model 64) of
/// the number and letter tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferSettings {
    /// Optimizer steps per run.
    pub steps: usize,
    /// Extension tokens of the length test (0: the training length, 17 tokens).
    pub extras: Vec<usize>,
    /// Test samples per length.
    pub samples: usize,
}

impl TransferSettings {
    /// The full grid's: 3,000 steps (the quick preset's), tested at 17 .. 529 tokens with 256
    /// samples each.
    pub fn full() -> Self {
        Self {
            steps: 3000,
            extras: vec![0, 16, 32, 64, 128, 256, 512],
            samples: 256,
        }
    }

    /// The quick grid's: 300 steps, tested at 17, 33 and 81 tokens with 64 samples each.
    pub fn quick() -> Self {
        Self {
            steps: 300,
            extras: vec![0, 16, 64],
            samples: 64,
        }
    }
}

/// The tasks the stage trains.
pub const TASKS: [TaskKind; 2] = [TaskKind::Number, TaskKind::Letter];

/// The biases whose mean symbolic fraction on the conflict split is at least the unbiased
/// model's + [`MOVE`] (none when the grid lacks `none`), in the experiment's order.
pub fn movers(experiment: &Experiment, rows: &[MechanismRow]) -> Vec<Bias> {
    let mean = |b: &Bias| {
        let name = b.to_string();
        let v: Vec<f64> = rows
            .iter()
            .filter(|r| r.bias == name)
            .map(|r| r.symbolic)
            .collect();
        (!v.is_empty()).then(|| mean_sd(&v).0)
    };
    let Some(none) = mean(&Bias::None) else {
        return vec![];
    };
    experiment
        .biases
        .iter()
        .filter(|b| **b != Bias::None && mean(b).is_some_and(|m| m - none >= MOVE))
        .copied()
        .collect()
}

/// The run config of one transfer run: the quick preset of `task` with `bias` applied, `steps`
/// steps, a checkpoint at the end only (its swap scores give the head types).
pub fn run_config(
    t: &TransferSettings,
    bias: Bias,
    task: TaskKind,
    seed: u64,
) -> Result<RunConfig> {
    let mut c = Preset::Quick.config(task);
    c.seed = seed;
    c.optim.steps = t.steps;
    c.optim.warmup = t.steps / 10;
    c.optim.eval_every = (t.steps / 10).max(1);
    c.optim.save_every = t.steps;
    c.optim.log_every = (t.steps / 10).max(1);
    c.data.train = t.steps.saturating_mul(c.optim.batch_size);
    c.data.test = t.samples.max(256);
    c.position_shift = bias.apply(&mut c.model)?;
    c.check()
        .with_context(|| format!("transfer run {bias} on the {task} task"))?;
    Ok(c)
}

/// The run directory of one transfer run.
pub fn run_dir(out: &Path, bias: Bias, task: TaskKind, seed: u64) -> PathBuf {
    let name = bias.to_string().replace([':', '@'], "-");
    out.join("transfer")
        .join(task.as_str())
        .join(name)
        .join(format!("seed-{seed}"))
}

/// Every transfer run (`none` and each of `biases`, each task, each seed) as a sweep job.
pub fn jobs(experiment: &Experiment, t: &TransferSettings, biases: &[Bias]) -> Result<Vec<Job>> {
    let mut all = vec![Bias::None];
    all.extend(biases.iter().copied().filter(|b| *b != Bias::None));
    let mut out = vec![];
    for task in TASKS {
        for &bias in &all {
            for &seed in &experiment.seeds {
                let params = [
                    ("task", Value::String(task.as_str().into())),
                    ("bias", Value::String(bias.to_string())),
                    ("seed", Value::Integer(seed as i64)),
                ];
                let config = run_config(t, bias, task, seed)?;
                out.push(grid::job(
                    &params,
                    config,
                    run_dir(Path::new(""), bias, task, seed),
                ));
            }
        }
    }
    Ok(out)
}

/// What every transfer job measures: its final swap scores and the length test.
pub fn measure_options(t: &TransferSettings) -> MeasureOptions {
    MeasureOptions {
        length: LengthOptions {
            extras: t.extras.clone(),
            samples: Some(t.samples),
            step: None,
            memory: EVAL_MEMORY,
        },
        ..MeasureOptions::default()
    }
}

/// One transfer run (a row of `transfer.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferRow {
    /// Task.
    pub task: String,
    /// The bias.
    pub bias: String,
    /// Seed.
    pub seed: u64,
    /// Test accuracy at the training length.
    pub test_accuracy: f64,
    /// Head types at the last checkpoint, one letter per layer.
    pub types: String,
    /// The first tested length (tokens) with accuracy below [`FAIL`]; empty when none is.
    pub first_below: Option<usize>,
    /// Discrepancy at the training length of the model's weakest pure head (every head when
    /// none is pure).
    pub margin: f64,
    /// Seconds of training.
    pub train_seconds: f64,
}

/// One transfer run's accuracy at one length (a row of `transfer_lengths.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferLength {
    /// Task.
    pub task: String,
    /// The bias.
    pub bias: String,
    /// Seed.
    pub seed: u64,
    /// Input length in tokens.
    pub length: usize,
    /// Samples tested.
    pub n: usize,
    /// Accuracy.
    pub accuracy: f64,
}

/// A model's point of the discrepancy claim.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPoint {
    /// Discrepancy at the training length of the weakest head the answer depends on.
    pub margin: f64,
    /// The first tested length with accuracy below [`FAIL`] (None: none is).
    pub first_below: Option<usize>,
    /// Head types at the last checkpoint.
    pub types: String,
    /// Accuracy per tested length.
    pub lengths: Vec<LengthRow>,
}

/// Reads a number/letter model's `lengthgen.csv` and `scores.jsonl` into its point: the heads
/// the answer depends on are its pure heads (P or S at gamma 0.1) at the last checkpoint, every
/// head when none is, and the point's discrepancy is the smallest of theirs at the shortest
/// tested length (the training length). The files are read as the verdicts read them
/// ([`RunFiles::load`]): a measured run's files only when its ledger vouches for them, so a
/// replaced or foreign file is refused by name.
pub fn model_point(run: &Path) -> Result<ModelPoint> {
    let files = RunFiles::load(run)?;
    model_point_of(run, &files)
}

/// [`model_point`] of files already read.
fn model_point_of(run: &Path, files: &RunFiles) -> Result<ModelPoint> {
    let path = run.join("lengthgen.csv");
    anyhow::ensure!(
        !files.lengths.is_empty(),
        "{} is missing or has no rows",
        path.display()
    );
    anyhow::ensure!(
        !files.scores.is_empty(),
        "{} is missing or empty",
        run.join("scores.jsonl").display()
    );
    let lengths = &files.lengths;
    let scores = &files.scores;
    let grid = head_grid(scores, GAMMA);
    let types = ropelab_analysis::claims::layer_types(scores, GAMMA);
    let shortest = lengths
        .iter()
        .min_by_key(|r| r.length)
        .with_context(|| format!("{} has no rows", path.display()))?;
    let pure = |layer: usize, head: usize| {
        grid.get(layer)
            .and_then(|h| h.get(head))
            .is_some_and(|k| *k != HeadKind::Mixed)
    };
    let any_pure = shortest.heads.iter().any(|h| pure(h.layer, h.head));
    let margin = shortest
        .heads
        .iter()
        .filter(|h| !any_pure || pure(h.layer, h.head))
        .map(|h| h.margin)
        .fold(f64::INFINITY, f64::min);
    let mut sorted = lengths.clone();
    sorted.sort_by_key(|r| r.length);
    let first_below = sorted.iter().find(|r| r.accuracy < FAIL).map(|r| r.length);
    Ok(ModelPoint {
        margin,
        first_below,
        types,
        lengths: sorted,
    })
}

/// What the transfer stage measured.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TransferOutcome {
    /// The biases carried over (those that moved the ambiguous task toward content).
    pub biases: Vec<String>,
    /// Per run (`transfer.csv`).
    pub runs: Vec<TransferRow>,
    /// Per run and length (`transfer_lengths.csv`).
    pub lengths: Vec<TransferLength>,
    /// The studies' models read for the discrepancy claim.
    pub study: Vec<StudyPoint>,
    /// Every transfer model's pure-head share and test accuracy, for the association claim
    /// (the studies' are in `study`).
    pub pure: Vec<ModelRow>,
}

/// A study model's point of the discrepancy claim.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyPoint {
    /// The study directory.
    pub study: String,
    /// Task.
    pub task: String,
    /// Seed.
    pub seed: u64,
    /// Discrepancy at the training length of its weakest pure head.
    pub margin: f64,
    /// The first tested length below [`FAIL`] (None: none is).
    pub first_below: Option<usize>,
    /// Test accuracy of its last checkpoint (None: the study has no test evaluation).
    pub test_accuracy: Option<f64>,
    /// Its pure-head share and accuracy, for the association claim (None without them).
    pub pure: Option<ModelRow>,
    /// The SHA-256 of its latest checkpoint's weights (None without a manifest): a copy of a
    /// study given beside it would count the same models twice.
    pub weights: Option<String>,
}

/// Trains (or reuses) every transfer run in `out/transfer/...`, measures each, and writes
/// `out/transfer.csv` and `out/transfer_lengths.csv`.
pub fn run(
    experiment: &Experiment,
    t: &TransferSettings,
    biases: &[Bias],
    out: &Path,
    parallel: Option<usize>,
    progress: &dyn Progress,
) -> Result<TransferOutcome> {
    let jobs = jobs(experiment, t, biases)?;
    let results = grid::run(&jobs, out, &measure_options(t), parallel, progress)?;
    let mut o = TransferOutcome {
        biases: biases.iter().map(|b| b.to_string()).collect(),
        ..TransferOutcome::default()
    };
    for (job, result) in jobs.iter().zip(&results) {
        let dir = out.join(&job.run);
        let files = RunFiles::load(&dir)?;
        let point = model_point_of(&dir, &files)?;
        let text = |k: &str| {
            job.params
                .iter()
                .find(|(key, _)| key == k)
                .and_then(|(_, v)| v.as_str().map(str::to_string))
                .unwrap_or_default()
        };
        let (task, bias) = (text("task"), text("bias"));
        let name = job.run.display().to_string();
        o.pure.extend(row_of(&files, &task, &name, GAMMA));
        let seed = job.config.seed;
        o.lengths
            .extend(point.lengths.iter().map(|r| TransferLength {
                task: task.clone(),
                bias: bias.clone(),
                seed,
                length: r.length,
                n: r.n,
                accuracy: r.accuracy,
            }));
        o.runs.push(TransferRow {
            task,
            bias,
            seed,
            test_accuracy: result.test_accuracy.unwrap_or(f64::NAN),
            types: point.types,
            first_below: point.first_below,
            margin: point.margin,
            train_seconds: result.train_seconds,
        });
    }
    crate::record_csv(&out.join("transfer.csv"), "bias", &o.runs)?;
    crate::record_csv(&out.join("transfer_lengths.csv"), "bias", &o.lengths)?;
    Ok(o)
}

/// The points of every study of `studies` ([`study_points`]): a model found twice (a study
/// given beside its own copy) is refused, not counted twice in the claims' model counts (tenth
/// pass, S2).
pub fn studies_points(studies: &[PathBuf]) -> Result<Vec<StudyPoint>> {
    let mut seen: std::collections::BTreeMap<String, String> = Default::default();
    let mut out = vec![];
    for study in studies {
        for point in study_points(study)? {
            let name = format!("{}/seed-{}/{}", point.study, point.seed, point.task);
            if let Some(weights) = &point.weights {
                if let Some(first) = seen.insert(weights.clone(), name.clone()) {
                    anyhow::bail!(
                        "{name} holds the same final weights as {first}: a copy of a study \
                         would count its models twice (give each study once)"
                    );
                }
            }
            out.push(point);
        }
    }
    Ok(out)
}

/// The discrepancy points of a study's number and letter models (every seed; for a study of
/// several head counts, every count's), for the claim's rank correlation.
pub fn study_points(study: &Path) -> Result<Vec<StudyPoint>> {
    let root = StudyDir::new(study);
    // A study per head count is a study too: its models are in heads-H/ (twenty-third pass,
    // BIm1).
    anyhow::ensure!(
        root.is_study() || !root.head_counts().is_empty(),
        "{} is not a study directory (no config.toml with models)",
        study.display()
    );
    // Its models are the ones its plan made (not a model copied in from another study).
    ropelab_sweep::plan::Plan::check_models(study)?;
    let counts = root.head_counts();
    let dirs: Vec<StudyDir> = if counts.is_empty() {
        vec![root]
    } else {
        counts.iter().map(|&h| root.heads(h)).collect()
    };
    let mut out = vec![];
    for dir in dirs {
        let present = dir
            .seeds()
            .with_context(|| format!("cannot list {}", dir.root().display()))?;
        // Only the seeds the study's config lists are its models (its report says the same of
        // a folder another --seeds left; fifteenth pass, F10).
        let listed = dir.listed_seeds();
        let (seeds, left): (Vec<u64>, Vec<u64>) = present
            .into_iter()
            .partition(|s| listed.as_ref().is_none_or(|l| l.contains(s)));
        if !left.is_empty() {
            eprintln!(
                "note: {}: {} not listed by its config.toml (seeds = {:?}): not counted",
                dir.root().display(),
                left.iter()
                    .map(|s| format!("seed-{s}/"))
                    .collect::<Vec<_>>()
                    .join(", "),
                listed.clone().unwrap_or_default()
            );
        }
        for seed in seeds {
            for task in TASKS {
                let model = dir.model(seed, task);
                if !model.join("lengthgen.csv").exists() {
                    continue;
                }
                // A study's model is read through its ledger: one whose ledger is gone has
                // nothing vouched for (twenty-first pass, N5).
                anyhow::ensure!(
                    ropelab_io::Ledger::load(&model)
                        .with_context(|| format!("cannot read {}", model.display()))?
                        .is_some(),
                    "{} is missing: a study's model is read only through the ledger its \
                     measurement wrote (rerun the study into a new --out)",
                    model.join(ropelab_io::LEDGER).display()
                );
                let files = RunFiles::load(&model)?;
                let p = model_point_of(&model, &files)?;
                out.push(StudyPoint {
                    study: dir.root().display().to_string(),
                    task: task.as_str().to_string(),
                    seed,
                    margin: p.margin,
                    first_below: p.first_below,
                    test_accuracy: files.test.as_ref().map(|a| a.accuracy),
                    pure: row_of(&files, task.as_str(), &model.display().to_string(), GAMMA),
                    weights: match ropelab_train::RunDir::new(&model).latest_checkpoint() {
                        Ok(step) => {
                            ropelab_analysis::measure::pure_heads::weights_id(&model, step)?
                        }
                        Err(_) => None,
                    },
                });
            }
        }
    }
    anyhow::ensure!(
        !out.is_empty(),
        "{} has no number or letter model with a lengthgen.csv",
        study.display()
    );
    Ok(out)
}

/// The stage's page section: one row per (task, bias) with its seeds' test accuracy, first
/// length below 0.9, weakest pure head's discrepancy and head types, and one length-curve
/// figure per task.
pub fn report_section(e: &Experiment, t: &TransferOutcome) -> ropelab_report::html::Section {
    use ropelab_report::bias::{length_curves, LengthLine};
    let mut s = ropelab_report::html::Section::new(
        "bias-transfer",
        "Transfer: the content-moving biases on the number and letter tasks",
    );
    let settings = e.transfer.clone().unwrap_or_else(TransferSettings::full);
    s.text(&format!(
        "Biases carried over (mean symbolic fraction on the conflict split >= none's + {MOVE}): \
         {}. Each trained beside the unbiased model on the quick preset (6 layers x 1 head, \
         d_model 64), {} steps, seeds {:?}; tested at {:?} extra tokens with {} samples each. \
         First below {FAIL}: the first tested length (tokens) with accuracy below {FAIL}, \
         `never` when none is.",
        if t.biases.is_empty() {
            "none".to_string()
        } else {
            t.biases.join(", ")
        },
        settings.steps,
        e.seeds,
        settings.extras,
        settings.samples,
    ));
    let mut groups: Vec<(String, String)> = vec![];
    for r in &t.runs {
        let g = (r.task.clone(), r.bias.clone());
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|(task, bias)| {
            let mine: Vec<&TransferRow> = t
                .runs
                .iter()
                .filter(|r| &r.task == task && &r.bias == bias)
                .collect();
            let join = |f: &dyn Fn(&TransferRow) -> String| {
                mine.iter().map(|r| f(r)).collect::<Vec<_>>().join(" / ")
            };
            vec![
                task.clone(),
                bias.clone(),
                join(&|r| format!("{:.4}", r.test_accuracy)),
                join(&|r| r.first_below.map_or("never".into(), |n| n.to_string())),
                join(&|r| format!("{:.2}", r.margin)),
                join(&|r| r.types.clone()),
            ]
        })
        .collect();
    s.table(
        &[
            "task",
            "bias",
            "test accuracy (per seed)",
            "first below 0.9",
            "weakest pure head's discrepancy",
            "head types",
        ],
        &rows,
    );
    let mut svgs = vec![];
    for task in TASKS {
        let task = task.as_str();
        let lines: Vec<LengthLine> = groups
            .iter()
            .filter(|g| g.0 == task)
            .map(|(_, bias)| {
                let mut lengths: Vec<usize> = t
                    .lengths
                    .iter()
                    .filter(|l| l.task == task && &l.bias == bias)
                    .map(|l| l.length)
                    .collect();
                lengths.sort_unstable();
                lengths.dedup();
                let points = lengths
                    .iter()
                    .map(|&n| {
                        let acc: Vec<f64> = t
                            .lengths
                            .iter()
                            .filter(|l| l.task == task && &l.bias == bias && l.length == n)
                            .map(|l| l.accuracy)
                            .collect();
                        let (m, sd) = mean_sd(&acc);
                        (n as f64, m, sd)
                    })
                    .collect();
                (bias.clone(), points)
            })
            .collect();
        if !lines.is_empty() {
            svgs.push(length_curves(
                &format!("{task} task: accuracy versus input length, per bias"),
                "tokens in the input",
                &lines,
            ));
        }
    }
    s.figures(&svgs);
    s
}

pub use ropelab_analysis::claims::{spearman, spearman_interval};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_runs_take_the_bias_on_the_quick_preset() {
        let t = TransferSettings::quick();
        let plain = run_config(&t, Bias::None, TaskKind::Number, 0).unwrap();
        let nope = run_config(&t, Bias::Nope(0), TaskKind::Number, 0).unwrap();
        assert_eq!(
            nope.model.layer_position(0),
            &ropelab_model::PositionEncoding::None
        );
        assert_eq!(nope.model.layer_position(1), &plain.model.position);
        let keep: Bias = "keep-high:16".parse().unwrap();
        let k = run_config(&t, keep, TaskKind::Letter, 1).unwrap();
        assert_ne!(k.model.position, plain.model.position);
        assert_eq!(k.seed, 1);
        assert_eq!(plain.optim.steps, 300);
        // The quick preset has 32 planes per head: 40 is refused in one line.
        let err = run_config(&t, "keep-high:40".parse().unwrap(), TaskKind::Number, 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("32 planes") && !err.contains('\n'), "{err}");
    }

    #[test]
    fn movers_are_the_biases_that_raised_the_symbolic_fraction_by_move() {
        let e = Experiment::quick();
        let row = |bias: &str, symbolic| MechanismRow {
            bias: bias.into(),
            seed: 0,
            positional: 1.0 - symbolic,
            symbolic,
            neither: 0.0,
            length_accuracy: 1.0,
        };
        let rows = vec![
            row("none", 0.4),
            row("keep-high:16", 0.45),
            row("nope:0", 0.95),
        ];
        assert_eq!(movers(&e, &rows), vec![Bias::Nope(0)]);
        assert!(movers(&e, &rows[1..]).is_empty());
    }

    /// Writes a measured number model into `model` (its scores and length test, listed in
    /// its ledger when `ledgered`); returns the length table's text.
    fn measured_model(model: &std::path::Path, ledgered: bool) -> String {
        use ropelab_analysis::measure::lengthgen::{self, HeadMargin};
        std::fs::create_dir_all(model).unwrap();
        let line = ropelab_analysis::measure::dynamics::HeadStep {
            step: 100,
            layer: 0,
            head: 0,
            s_pos: 0.99,
            s_sym: 0.01,
            entropy: 1.0,
            entropy_norm: 0.5,
            pure_0_1: HeadKind::Positional,
            pure_0_05: HeadKind::Positional,
            freq_use: vec![],
            freq_mean_plane: 0.0,
            accuracy: 1.0,
            accuracy_per_hop: Default::default(),
            block: None,
            planes: vec![],
            run: String::new(),
            settings: String::new(),
        };
        let scores = serde_json::to_string(&line).unwrap() + "\n";
        std::fs::write(model.join("scores.jsonl"), scores).unwrap();
        let row = |length: usize, accuracy: f64| LengthRow {
            step: 100,
            extra: length - 17,
            length,
            n: 100,
            accuracy,
            loss: 0.1,
            per_hop: Default::default(),
            heads: vec![HeadMargin {
                layer: 0,
                head: 0,
                margin: 2.0,
                top_weight: 0.9,
            }],
            seconds: 0.0,
            run: String::new(),
        };
        let csv = lengthgen::to_csv(&[row(17, 1.0), row(33, 0.5)]).unwrap();
        std::fs::write(model.join("lengthgen.csv"), &csv).unwrap();
        if ledgered {
            ropelab_io::Ledger::finish(model, "scores.jsonl", "k").unwrap();
            ropelab_io::Ledger::finish(model, "lengthgen.csv", "k").unwrap();
        }
        csv
    }

    /// A study per head count is read as the studies in its heads-H/ folders, not refused as
    /// "not a study directory" (twenty-third pass, BIm1).
    #[test]
    fn a_study_per_head_count_is_read_through_its_head_counts() {
        let dir = tempfile::tempdir().unwrap();
        measured_model(&dir.path().join("heads-2/seed-0/number"), true);
        let points = study_points(dir.path()).unwrap();
        assert_eq!(points.len(), 1);
        assert!(points[0].study.ends_with("heads-2"), "{}", points[0].study);
    }

    #[test]
    fn another_studys_files_are_read_only_when_its_ledger_vouches_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("seed-0/number");
        let csv = measured_model(&model, false);
        // Without its ledger, nothing is vouched for: refused (twenty-first pass, N5).
        let err = format!("{:#}", study_points(dir.path()).unwrap_err());
        assert!(
            err.contains("seed-0/number/measured.json is missing"),
            "{err}"
        );
        // Under a ledger that lists only the scores, the length test is another command's:
        // refused by name, never read.
        ropelab_io::Ledger::finish(&model, "scores.jsonl", "k").unwrap();
        let err = format!("{:#}", study_points(dir.path()).unwrap_err());
        assert!(
            err.contains("seed-0/number/lengthgen.csv") && err.contains("not listed"),
            "{err}"
        );
        // Listed, then replaced: refused too.
        ropelab_io::Ledger::finish(&model, "lengthgen.csv", "k").unwrap();
        let points = study_points(dir.path()).unwrap();
        assert_eq!((points[0].margin, points[0].first_below), (2.0, Some(33)));
        assert_eq!(points[0].test_accuracy, None);
        std::fs::write(model.join("lengthgen.csv"), csv.replace(",0.5,", ",0.95,")).unwrap();
        let err = format!("{:#}", study_points(dir.path()).unwrap_err());
        assert!(
            err.contains("lengthgen.csv") && err.contains("replaced"),
            "{err}"
        );
        std::fs::write(model.join("lengthgen.csv"), &csv).unwrap();
        // A seed folder the study's config does not list is no model of the study (fifteenth
        // pass, F10); a listed one is counted.
        std::fs::write(dir.path().join("config.toml"), "seeds = [4]\n").unwrap();
        let err = format!("{:#}", study_points(dir.path()).unwrap_err());
        assert!(err.contains("has no number or letter model"), "{err}");
        std::fs::write(dir.path().join("config.toml"), "seeds = [0, 4]\n").unwrap();
        assert_eq!(study_points(dir.path()).unwrap().len(), 1);
    }
}
