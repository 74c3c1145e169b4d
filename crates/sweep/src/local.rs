//! Running jobs on this machine: one job trains (or resumes) its run in `OUT/jobs/<id>/run`,
//! tests and scores its last checkpoint, and writes `result.json` last, so a job with that file
//! is done and skipped, and an interrupted one resumes from its latest checkpoint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use candle_core::Device;
use ropelab_analysis::claims::layer_types;
use ropelab_analysis::dynamics::{score_run, ScoreOptions};
use ropelab_analysis::lengthgen::{length_generalisation, LengthOptions};
use ropelab_io::write_atomic;
use ropelab_train::eval::eval_checkpoint;
use ropelab_train::{Trainer, EVAL_MEMORY};
use serde::{Deserialize, Serialize};

use crate::spec::{value_text, Job};
use crate::{Result, SweepError};

/// What one finished job measured (`OUT/jobs/<id>/result.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    /// Job id.
    pub id: String,
    /// Its parameters, `key -> value` as text.
    pub params: BTreeMap<String, String>,
    /// Task of the run.
    pub task: String,
    /// Optimizer steps.
    pub steps: usize,
    /// Seconds from the job's start to its first step (start-up, data generation).
    pub setup_seconds: f64,
    /// Seconds of training (this attempt).
    pub train_seconds: f64,
    /// Seconds of testing, scoring and the length test.
    pub eval_seconds: f64,
    /// Last validation accuracy (from the run's metrics).
    pub val_accuracy: Option<f64>,
    /// Test accuracy of the last checkpoint (number and letter tasks).
    pub test_accuracy: Option<f64>,
    /// Test accuracy per hop count.
    pub per_hop: BTreeMap<usize, f64>,
    /// Layer types at the last checkpoint (P, S, - per layer; number and letter tasks).
    pub layer_types: Option<String>,
    /// Accuracy of the last checkpoint per input length (number and letter tasks: the
    /// training length and [`LENGTH_EXTRAS`] tokens longer, [`LENGTH_SAMPLES`] test samples
    /// each).
    #[serde(default)]
    pub length_accuracy: BTreeMap<usize, f64>,
}

/// Extension tokens of the length-generalisation test of every number/letter job.
pub const LENGTH_EXTRAS: [usize; 4] = [0, 16, 64, 256];

/// Test samples per length of that test.
pub const LENGTH_SAMPLES: usize = 256;

/// Where job `id` lives in `out`.
pub fn job_dir(out: &Path, id: &str) -> PathBuf {
    out.join("jobs").join(id)
}

/// The purity tolerance of the layer types in results.
pub const GAMMA: f64 = 0.1;

/// Test-only fault switch: a job whose id is in this environment variable fails once (before
/// training), leaving a marker in its directory, and runs normally when started again.
pub const FAIL_ONCE_ENV: &str = "ROPELAB_SWEEP_FAIL_ONCE";

/// Runs `job` in `out` (or returns its result when it is already done).
pub fn run_job(job: &Job, out: &Path) -> Result<(JobResult, bool)> {
    let dir = job_dir(out, &job.id);
    let result_path = dir.join("result.json");
    if let Some(done) = read_result(&result_path)? {
        return Ok((done, false));
    }
    let io = |path: &Path| {
        let path = path.to_owned();
        move |e: std::io::Error| SweepError::Io { path, source: e }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let params: BTreeMap<String, String> = job
        .params
        .iter()
        .map(|(k, v)| (k.clone(), value_text(v)))
        .collect();
    write_atomic(
        &dir.join("job.json"),
        serde_json::to_string_pretty(&params)?.as_bytes(),
    )
    .map_err(io(&dir.join("job.json")))?;
    if std::env::var(FAIL_ONCE_ENV).is_ok_and(|ids| ids.split(',').any(|i| i == job.id)) {
        let marker = dir.join("failed-once");
        if !marker.exists() {
            write_atomic(&marker, b"1").map_err(io(&marker))?;
            return Err(SweepError::Job {
                id: job.id.clone(),
                message: format!("failed on purpose ({FAIL_ONCE_ENV})"),
            });
        }
    }
    let device = Device::Cpu;
    let run = dir.join("run");
    let start = Instant::now();
    let mut trainer = Trainer::start_or_resume(&run, job.config.clone(), &device)?;
    let setup_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let val = trainer.run(|_| {})?.map(|a| a.accuracy);
    drop(trainer); // releases the run directory's lock for the scoring below
    let train_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let (mut test_accuracy, mut per_hop, mut types) = (None, BTreeMap::new(), None);
    let mut length_accuracy = BTreeMap::new();
    if job.config.task.is_multi_hop() {
        let test = eval_checkpoint(&run, None, 0, None, EVAL_MEMORY, &device)?;
        test_accuracy = Some(test.accuracy.accuracy);
        per_hop = test.accuracy.per_hop.clone();
        let scores = score_run(&run, &ScoreOptions::default(), &device, |_, _| {})?;
        types = Some(layer_types(&scores.lines, GAMMA));
        let options = LengthOptions {
            extras: LENGTH_EXTRAS.to_vec(),
            samples: Some(LENGTH_SAMPLES),
            step: None,
            memory: EVAL_MEMORY,
        };
        for row in length_generalisation(&run, &options, &device, |_, _| {})? {
            length_accuracy.insert(row.length, row.accuracy);
        }
    }
    let result = JobResult {
        id: job.id.clone(),
        params,
        task: job.config.task.as_str().to_string(),
        steps: job.config.optim.steps,
        setup_seconds,
        train_seconds,
        eval_seconds: start.elapsed().as_secs_f64(),
        val_accuracy: val,
        test_accuracy,
        per_hop,
        layer_types: types,
        length_accuracy,
    };
    write_atomic(
        &result_path,
        serde_json::to_string_pretty(&result)?.as_bytes(),
    )
    .map_err(io(&result_path))?;
    Ok((result, true))
}

/// A job's result, when it has one.
pub fn read_result(path: &Path) -> Result<Option<JobResult>> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| SweepError::Job {
                id: path.display().to_string(),
                message: format!("not a job result: {e}"),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SweepError::Io {
            path: path.to_owned(),
            source: e,
        }),
    }
}

/// What a local run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSummary {
    /// Jobs run now.
    pub ran: usize,
    /// Jobs already done (skipped).
    pub skipped: usize,
    /// (job id, error) of the jobs that failed.
    pub failed: Vec<(String, String)>,
}

/// Runs `jobs` in `out`, `parallel` at a time with the machine's threads split between them
/// (each job in its own thread pool of `threads / parallel`, at least 1); `done(id, ran)` after
/// each. Failed jobs are reported, not fatal to the others.
pub fn run_jobs(
    jobs: &[&Job],
    out: &Path,
    parallel: usize,
    threads: usize,
    done: &(dyn Fn(&str, bool) + Sync),
) -> Result<RunSummary> {
    let parallel = parallel.clamp(1, jobs.len().max(1));
    let per_job = (threads / parallel).max(1);
    let next = AtomicUsize::new(0);
    let summary = Mutex::new(RunSummary::default());
    let pools = (0..parallel)
        .map(|_| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(per_job)
                .build()
                .map_err(|e| SweepError::Job {
                    id: "-".into(),
                    message: format!("cannot start a thread pool: {e}"),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    std::thread::scope(|s| {
        for pool in &pools {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(job) = jobs.get(i) else { break };
                let outcome = pool.install(|| run_job(job, out));
                let mut sum = summary.lock().expect("no job panics while holding it");
                match outcome {
                    Ok((_, ran)) => {
                        if ran {
                            sum.ran += 1;
                        } else {
                            sum.skipped += 1;
                        }
                        drop(sum);
                        done(&job.id, ran);
                    }
                    Err(e) => sum.failed.push((job.id.clone(), e.to_string())),
                }
            });
        }
    });
    Ok(summary.into_inner().expect("the workers have finished"))
}
