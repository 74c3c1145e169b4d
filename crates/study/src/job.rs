//! One model of the study per (seed, task): trained (or resumed, or reused), evaluated on the
//! test split, scored at every checkpoint, tested on longer inputs and its attention on one
//! test input kept for the report; each result reused when
//! its file exists. Jobs run side by side, each on a rayon pool of its share of the cores, and
//! their files do not depend on how many run at once.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::Device;
use ropelab_analysis::attention::{attention_view, write_view, AttentionView};
use ropelab_analysis::dynamics::{score_run, HeadStep};
use ropelab_analysis::lengthgen::{from_csv, length_generalisation, to_csv, LengthRow};
use ropelab_io::write_atomic;
use ropelab_tasks::TaskKind;
use ropelab_train::eval::{eval_checkpoint, EvalReport};
use ropelab_train::{Trainer, EVAL_MEMORY};
use serde::Serialize;

use crate::{Progress, StudyConfig};

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
    /// Wall time of training (0 when reused).
    pub train_seconds: f64,
    /// Wall time of scoring.
    pub score_seconds: f64,
    /// Wall time of length generalisation.
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

/// Models trained at once for `jobs` jobs: `parallel`, default one per core, at most one per
/// job.
pub fn workers(parallel: Option<usize>, jobs: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    parallel.unwrap_or(cores).clamp(1, jobs.max(1))
}

/// Runs every (seed, task) job, `parallel` at a time (default: one per core), each on a rayon
/// pool of its share of the cores; results come back in job order. The first failure stops
/// handing out jobs and is returned with its seed and task.
pub fn run_jobs(
    config: &StudyConfig,
    jobs: &[(u64, TaskKind)],
    out: &Path,
    parallel: Option<usize>,
    progress: &dyn Progress,
) -> Result<Vec<Trained>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = workers(parallel, jobs.len());
    let threads = (cores / workers).max(1);
    let pools = (0..workers)
        .map(|_| rayon::ThreadPoolBuilder::new().num_threads(threads).build())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<Result<Trained>>>> =
        jobs.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for pool in &pools {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(seed, kind)) = jobs.get(i) else {
                    break;
                };
                let r = pool.install(|| run_job(config, seed, kind, out, progress));
                if r.is_err() {
                    // Stop handing out jobs; the error is reported below.
                    next.store(jobs.len(), Ordering::SeqCst);
                }
                if let Ok(mut slot) = results[i].lock() {
                    *slot = Some(r);
                }
            });
        }
    });
    let mut trained = vec![];
    for (slot, &(seed, kind)) in results.into_iter().zip(jobs) {
        let slot = slot
            .into_inner()
            .map_err(|_| anyhow::anyhow!("a job panicked"))?;
        match slot {
            Some(Ok(t)) => trained.push(t),
            Some(Err(e)) => return Err(e.context(format!("seed {seed}, {kind} task"))),
            None => {}
        }
    }
    anyhow::ensure!(trained.len() == jobs.len(), "a job did not run");
    Ok(trained)
}

/// Runs `trainer` to its last step with a "train LABEL" stage showing the steps and the loss.
pub fn train_with_progress(
    trainer: &mut Trainer,
    label: &str,
    progress: &dyn Progress,
) -> Result<()> {
    let total = trainer.config().optim.steps;
    let stage = progress.stage(&format!("train {label}"), total as u64);
    stage.set(trainer.step() as u64);
    trainer.run(|p| {
        stage.set(p.step as u64);
        if p.step % 10 == 0 {
            stage.message(format!("train {label} {:.3}", p.loss));
        }
    })?;
    Ok(())
}

/// Trains (or resumes, or reuses) the model of `kind` and `seed` in `out/seed-S/<task>`,
/// evaluates its last checkpoint on the test split, scores every checkpoint and measures
/// length generalisation (each reused when its file exists).
pub fn run_job(
    config: &StudyConfig,
    seed: u64,
    kind: TaskKind,
    out: &Path,
    progress: &dyn Progress,
) -> Result<Trained> {
    let device = Device::Cpu;
    let run = config.train.run_config(kind, seed, &config.tasks)?;
    let dir = out.join(format!("seed-{seed}")).join(kind.as_str());
    let mut trainer = Trainer::start_or_resume(&dir, run, &device)?;
    let label = format!("s{seed} {kind}");
    let start = Instant::now();
    let total = trainer.config().optim.steps;
    train_with_progress(&mut trainer, &label, progress)?;
    drop(trainer); // releases the run directory's lock for the scoring below
    let train_seconds = start.elapsed().as_secs_f64();
    let test = eval_checkpoint(&dir, None, 0, None, EVAL_MEMORY, &device)?;
    let eval_path = dir.join("eval").join(test.file_name(true));
    write_atomic(&eval_path, serde_json::to_string_pretty(&test)?.as_bytes())
        .with_context(|| format!("cannot write {}", eval_path.display()))?;

    let start = Instant::now();
    let scores_path = dir.join("scores.jsonl");
    let scores: Vec<HeadStep> = if scores_path.exists() {
        read_scores(&scores_path)?
    } else {
        let stage = progress.stage(&format!("score {label}"), 0);
        let options = config.score_options();
        score_run(&dir, &options, &device, |done, total| {
            stage.set_total(total as u64);
            stage.set(done as u64);
        })?
        .lines
    };
    let score_seconds = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let lengths_path = dir.join("lengthgen.csv");
    let lengths = if lengths_path.exists() {
        let text = std::fs::read_to_string(&lengths_path)
            .with_context(|| format!("cannot read {}", lengths_path.display()))?;
        from_csv(&text, &lengths_path.display().to_string())?
    } else {
        let options = config.length_options();
        let stage = progress.stage(&format!("length {label}"), options.extras.len() as u64);
        let rows =
            length_generalisation(&dir, &options, &device, |done, _| stage.set(done as u64))?;
        write_atomic(&lengths_path, to_csv(&rows)?.as_bytes())
            .with_context(|| format!("cannot write {}", lengths_path.display()))?;
        rows
    };
    let lengthgen_seconds = start.elapsed().as_secs_f64();
    // The report's attention viewer: every head on the first test input, last checkpoint.
    let last = test.step;
    let view_path = dir
        .join("attention")
        .join(AttentionView::file_name(last, 0));
    if !view_path.exists() {
        let view = attention_view(&dir, Some(last), 0, &device)?;
        write_view(&dir, &view)?;
    }
    Ok(Trained {
        seed,
        task: kind,
        run: dir.display().to_string(),
        steps: total,
        train_seconds,
        score_seconds,
        lengthgen_seconds,
        test,
        scores,
        lengths,
    })
}

/// Reads a run's `scores.jsonl`.
pub fn read_scores(path: &Path) -> Result<Vec<HeadStep>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}: line {} is not a score line", path.display(), i + 1))
        })
        .collect()
}
