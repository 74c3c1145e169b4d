//! One model of the study per (seed, task), run as a sweep job (`ropelab_sweep`, the code path
//! of `ropelab sweep`): trained (or resumed, or reused), evaluated on the test split, scored at
//! every checkpoint, tested on longer inputs, its attention on one test input kept for the
//! report and (number models) its hop map measured; each result reused when its file exists, the job's `result.json` written last. Jobs
//! run side by side, each on a rayon pool of its share of the cores, and their files do not
//! depend on how many run at once.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ropelab_analysis::claims::RunFiles;
use ropelab_analysis::measure::dynamics::HeadStep;
use ropelab_analysis::measure::lengthgen::LengthRow;
use ropelab_analysis::StudyDir;
use ropelab_sweep::measure::MeasureOptions;
use ropelab_sweep::Job;
use ropelab_tasks::TaskKind;
use ropelab_train::eval::EvalReport;
use serde::Serialize;

use crate::{Progress, StudyConfig};

pub use ropelab_sweep::local::train_with_progress;
pub use ropelab_sweep::measure::read_scores;

/// One trained model of the study (a row of `training.json`).
#[derive(Debug, Serialize)]
pub struct Trained {
    /// Seed.
    pub seed: u64,
    /// Task.
    pub task: TaskKind,
    /// Its run directory.
    pub run: String,
    /// Optimizer steps.
    pub steps: usize,
    /// Wall time of training (of the attempt that finished the job).
    pub train_seconds: f64,
    /// Wall time of scoring (0 when its file was reused).
    pub score_seconds: f64,
    /// Wall time of length generalisation (0 when its file was reused).
    pub lengthgen_seconds: f64,
    /// Test accuracy of the last checkpoint.
    pub test: EvalReport,
    /// Scores of every head at every checkpoint.
    #[serde(skip)]
    pub scores: Vec<HeadStep>,
    /// Length generalisation of the last checkpoint.
    #[serde(skip)]
    pub lengths: Vec<LengthRow>,
}

/// Every (seed, task) pair of the study, seed by seed.
pub fn jobs(config: &StudyConfig) -> Vec<(u64, TaskKind)> {
    config
        .seeds
        .iter()
        .flat_map(|&s| TaskKind::ALL.map(|k| (s, k)))
        .collect()
}

pub use crate::grid::workers;

/// The run directory of the model of `kind` and `seed`, relative to the study's directory.
pub fn run_dir(seed: u64, kind: TaskKind) -> PathBuf {
    StudyDir::model_relative(seed, kind)
}

/// The sweep job of each (seed, task) pair: parameters `seed` and `task`, the study's run
/// config, its run directory `seed-S/<task>`.
pub fn sweep_jobs(config: &StudyConfig, jobs: &[(u64, TaskKind)]) -> Result<Vec<Job>> {
    jobs.iter()
        .map(|&(seed, kind)| {
            let params = vec![
                ("seed".to_string(), toml::Value::Integer(seed as i64)),
                (
                    "task".to_string(),
                    toml::Value::String(kind.as_str().into()),
                ),
            ];
            let run = config.train.run_config(kind, seed, &config.tasks)?;
            Ok(Job::in_run_dir(params, run, run_dir(seed, kind)))
        })
        .collect()
}

/// What every study job measures: the config's scoring and length test, the attention
/// viewer's file, the number models' hop map (256 test samples), probes (2,048) and layer sets
/// (512 per set), and every model's head-group ablations (`[ablation] samples`).
pub fn measure_options(config: &StudyConfig) -> MeasureOptions {
    MeasureOptions {
        score: config.score_options(),
        length: config.length_options(),
        attention_view: true,
        hop_samples: Some(ropelab_analysis::measure::hops::DEFAULT_SAMPLES),
        ablation_samples: Some(config.ablation.samples),
        route_samples: Some((
            ropelab_analysis::measure::probe::DEFAULT_SAMPLES,
            ropelab_analysis::measure::layer_sets::DEFAULT_SAMPLES,
        )),
        gamma: config.claims.gamma,
        ..MeasureOptions::default()
    }
}

/// The settings the verdicts expect each model's measured files were made with: the keys of
/// [`measure_options`] (so a file measured by hand with other settings is refused by name).
pub fn expected_files(config: &StudyConfig) -> ropelab_analysis::claims::files::Expected {
    use ropelab_analysis::measure::keys;
    let m = measure_options(config);
    ropelab_analysis::claims::files::Expected {
        scores: Some(keys::scores(&m.score)),
        lengths: Some(keys::lengths(&m.length)),
        hop_samples: m.hop_samples,
        ablation: m.ablation_samples.map(|n| (n, m.gamma.get())),
        route: m.route_samples,
        tables_recorded: true,
    }
}

/// Runs every (seed, task) job through the sweep runner, `parallel` at a time (default: one
/// per core), each on a rayon pool of its share of the cores; results come back in job order.
/// The first failure stops handing out jobs and is returned with its seed and task.
pub fn run_jobs(
    config: &StudyConfig,
    jobs: &[(u64, TaskKind)],
    out: &Path,
    parallel: Option<usize>,
    progress: &dyn Progress,
) -> Result<Vec<Trained>> {
    let sweep = sweep_jobs(config, jobs)?;
    // The plan `ropelab collect` pools the models by (beside the compose stage's).
    crate::grid::refuse_stale(&sweep, out)?;
    let refs: Vec<&Job> = sweep.iter().collect();
    ropelab_sweep::plan::Plan::of("reproduce", &refs, &measure_options(config)).merge_into(out)?;
    let results = crate::grid::run(&sweep, out, &measure_options(config), parallel, progress)?;
    results
        .into_iter()
        .zip(&sweep)
        .zip(jobs)
        .map(|((result, job), &(seed, kind))| {
            let dir = out.join(&job.run);
            // A job finished by an older ropelab lacks the hop map: measured now (reused
            // when the ledger vouches for it).
            if let Some(n) = measure_options(config).hop_samples {
                let label = format!("seed {seed} {kind}");
                ropelab_sweep::measure::multi_hop::hop_map_file(
                    &dir,
                    n,
                    &label,
                    progress,
                    &candle_core::Device::Cpu,
                )?;
            }
            // ... and the probes and layer sets.
            if let Some((p, s)) = measure_options(config).route_samples {
                ropelab_sweep::measure::multi_hop::route_files(
                    &dir,
                    p,
                    s,
                    &format!("seed {seed} {kind}"),
                    progress,
                    &candle_core::Device::Cpu,
                )?;
            }
            // Everything the study reports and judges is read only from the files that the
            // model's ledger vouches for (a file another command wrote, or one replaced since,
            // is refused by name).
            anyhow::ensure!(
                ropelab_io::Ledger::load(&dir)?.is_some(),
                "{} has no {} (measured before ropelab kept one, or not by this study): its \
                 files cannot be vouched for; rerun reproduce into a new --out",
                dir.display(),
                ropelab_io::LEDGER
            );
            let files = RunFiles::load(&dir)?;
            anyhow::ensure!(
                !files.scores.is_empty() && !files.lengths.is_empty(),
                "{}: the measurement's scores.jsonl or lengthgen.csv is missing",
                dir.display()
            );
            // A job finished by an older ropelab lacks the ablations: measured now (reused
            // when the ledger vouches for them).
            let m = measure_options(config);
            if let Some(n) = m.ablation_samples {
                ropelab_sweep::measure::multi_hop::ablation_file(
                    &dir,
                    &files.scores,
                    n,
                    m.gamma,
                    &format!("seed {seed} {kind}"),
                    progress,
                    &candle_core::Device::Cpu,
                )?;
            }
            let (scores, lengths) = (files.scores, files.lengths);
            let test = result.test.map(EvalReport::from).with_context(|| {
                format!("{}: the job's result has no test evaluation", dir.display())
            })?;
            Ok(Trained {
                seed,
                task: kind,
                run: dir.display().to_string(),
                steps: result.steps,
                train_seconds: result.train_seconds,
                score_seconds: result.score_seconds,
                lengthgen_seconds: result.length_seconds,
                test,
                scores,
                lengths,
            })
        })
        .collect()
}
