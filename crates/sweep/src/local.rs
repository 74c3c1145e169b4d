//! Running jobs on this machine: one job trains (or resumes) its run (`OUT/jobs/<id>/run` in a
//! sweep, `OUT/seed-S/<task>` in the study), measures it ([`crate::measure`]) and writes
//! `result.json` last, so a job with that file is done and skipped, and an interrupted one
//! resumes from its latest checkpoint. `reproduce` runs its models through the same code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use candle_core::Device;
use ropelab_io::{write_atomic, Progress, LEDGER};
use ropelab_train::eval::EvalReport;
use ropelab_train::{Accuracy, RunDir, Trainer};
use serde::{Deserialize, Serialize};

use crate::measure::{measure, MeasureOptions};
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
    /// Seconds of scoring (part of `eval_seconds`; 0 when reused or not measured).
    #[serde(default)]
    pub score_seconds: f64,
    /// Seconds of the length test (part of `eval_seconds`).
    #[serde(default)]
    pub length_seconds: f64,
    /// Last validation accuracy (from the run's metrics).
    pub val_accuracy: Option<f64>,
    /// Test accuracy of the last checkpoint (number and letter tasks).
    pub test_accuracy: Option<f64>,
    /// Test accuracy per hop count.
    pub per_hop: BTreeMap<usize, f64>,
    /// Layer types at the last checkpoint (P, S, - per layer; number and letter tasks).
    pub layer_types: Option<String>,
    /// Accuracy of the last checkpoint per input length (see [`crate::measure`]).
    #[serde(default)]
    pub length_accuracy: BTreeMap<usize, f64>,
    /// N* of a language job.
    #[serde(default)]
    pub n_star: Option<usize>,
    /// The test-split evaluation of a number/letter job (its `eval/` file).
    #[serde(default)]
    pub test: Option<TestEval>,
    /// SHA-256 of the resolved run config that made this result ([`ropelab_train::RunConfig::digest`]): a
    /// rerun whose job has another config is refused, never answered with this result.
    #[serde(default)]
    pub config_sha256: Option<String>,
    /// The measurement settings that made this result ([`MeasureOptions::settings`]): a rerun
    /// that asks for others measures the trained run again (absent in results from before
    /// this key: measured again, reusing every file the run's ledger vouches for).
    #[serde(default)]
    pub measure: Option<BTreeMap<String, String>>,
    /// The [`RESULTS_VERSION`] of the ropelab that made this result: a result of another
    /// version is refused, never reused (absent in results from before this key: version 1).
    #[serde(default = "first_version")]
    pub results_version: u32,
}

/// The version of what a job measures and how: raised by hand with every change of code that
/// changes a number a job reports for the same run config and measurement settings (a new
/// estimator, a fixed bug, another sampling of test data), never for speed or messages. A
/// result made by another version is refused by [`job_state`] (docs/sweeps.md, "Stale results").
pub const RESULTS_VERSION: u32 = 1;

fn first_version() -> u32 {
    1
}

/// A test-split evaluation as a job's result keeps it: [`EvalReport`] with its accuracy as a
/// nested object (serde cannot read back integer map keys, the per-hop accuracy, from a
/// flattened one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestEval {
    /// Checkpoint step.
    pub step: usize,
    /// Extension tokens.
    pub extra: usize,
    /// Input length.
    pub seq_len: usize,
    /// Test accuracy.
    pub accuracy: Accuracy,
    /// The identity of the run evaluated (empty in results written before it was recorded).
    #[serde(default)]
    pub run: String,
}

impl From<EvalReport> for TestEval {
    fn from(r: EvalReport) -> Self {
        Self {
            step: r.step,
            extra: r.extra,
            seq_len: r.seq_len,
            accuracy: r.accuracy,
            run: r.run,
        }
    }
}

impl From<TestEval> for EvalReport {
    fn from(t: TestEval) -> Self {
        Self {
            step: t.step,
            extra: t.extra,
            seq_len: t.seq_len,
            accuracy: t.accuracy,
            run: t.run,
        }
    }
}

/// Where job `id` of a sweep lives in `out` (the directory of [`Job::new`]).
pub fn job_dir(out: &Path, id: &str) -> PathBuf {
    out.join("jobs").join(id)
}

/// Test-only fault switch: a job whose id is in this environment variable fails once (before
/// training), leaving a marker in its directory, and runs normally when started again.
pub const FAIL_ONCE_ENV: &str = "ROPELAB_SWEEP_FAIL_ONCE";

/// Trains `trainer` to its last step with a "train LABEL" stage showing the steps and the loss.
pub fn train_with_progress(
    trainer: &mut Trainer,
    label: &str,
    progress: &dyn Progress,
) -> ropelab_train::Result<Option<f64>> {
    let total = trainer.config().optim.steps;
    let stage = progress.stage(&format!("train {label}"), total as u64);
    stage.set(trainer.step() as u64);
    let val = trainer.run(|p| {
        stage.set(p.step as u64);
        if p.step % 10 == 0 {
            stage.message(format!("train {label} {:.3}", p.loss));
        }
    })?;
    Ok(val.map(|a| a.accuracy))
}

/// Runs `job` in `out` (or returns its result when it is already done): trains or resumes its
/// run, measures it ([`measure`]) and writes `result.json` last. The bool says whether it ran
/// now.
pub fn run_job(
    job: &Job,
    out: &Path,
    options: &MeasureOptions,
    progress: &dyn Progress,
) -> Result<(JobResult, bool)> {
    let dir = out.join(&job.dir);
    let result_path = dir.join("result.json");
    match job_state_measured(job, out, options)? {
        JobState::Done(done) => return Ok((*done, false)),
        JobState::Stale(why) => {
            return Err(SweepError::Stale {
                id: job.id.clone(),
                message: why,
            })
        }
        JobState::Started | JobState::ToDo => {}
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
    let run = out.join(&job.run);
    let label = job.label();
    let start = Instant::now();
    let mut trainer = Trainer::start_or_resume(&run, job.config.clone(), &Device::Cpu)?;
    let setup_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let val_accuracy = train_with_progress(&mut trainer, &label, progress)?;
    drop(trainer); // releases the run directory's lock for the measurements below
    let train_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let m = measure(&run, &job.config, options, &label, progress)?;
    let result = JobResult {
        id: job.id.clone(),
        params,
        task: job.config.task.as_str().to_string(),
        steps: job.config.optim.steps,
        setup_seconds,
        train_seconds,
        eval_seconds: start.elapsed().as_secs_f64(),
        score_seconds: m.score_seconds,
        length_seconds: m.length_seconds,
        val_accuracy,
        test_accuracy: m.test_accuracy,
        per_hop: m.per_hop,
        layer_types: m.layer_types,
        length_accuracy: m.length_accuracy,
        n_star: m.n_star,
        test: m.test.map(TestEval::from),
        config_sha256: Some(job.config.digest()),
        measure: Some(options.settings()),
        results_version: RESULTS_VERSION,
    };
    write_atomic(
        &result_path,
        serde_json::to_string_pretty(&result)?.as_bytes(),
    )
    .map_err(io(&result_path))?;
    ropelab_io::Ledger::finish(&dir, RESULT, RESULT_KEY).map_err(io(&dir.join(LEDGER)))?;
    Ok((result, true))
}

/// A job's result file, in its job directory.
pub const RESULT: &str = "result.json";

/// The ledger key of a job's `result.json` (recorded in the job directory's ledger when it is
/// written, so a result edited afterwards is measured again by a rerun and refused by
/// [`crate::collect`]).
pub const RESULT_KEY: &str = "job result";

/// Whether the ledger of job directory `dir` vouches for its `result.json` (listed, and
/// unchanged since the job wrote it).
pub fn result_vouched(dir: &Path) -> Result<bool> {
    let ledger = ropelab_io::Ledger::load(dir).map_err(|e| SweepError::Io {
        path: dir.join(LEDGER),
        source: e,
    })?;
    Ok(ledger.is_some_and(|l| {
        matches!(
            l.vouch(dir, RESULT, ropelab_io::Expect::Key(RESULT_KEY)),
            Ok(true)
        )
    }))
}

/// Where a job stands in its output directory.
#[derive(Debug, Clone, PartialEq)]
pub enum JobState {
    /// Finished, by this job's config: its result.
    Done(Box<JobResult>),
    /// Finished or started with another run config: why, naming the first setting that
    /// differs (its result is never reused).
    Stale(String),
    /// Its run directory exists, with no result yet.
    Started,
    /// Nothing of it exists.
    ToDo,
}

/// The state of `job` in `out` measured with `options`: [`job_state`], and a finished job
/// whose result was measured with other settings (or records none) goes back to its
/// measurement (`Started`): its training is kept, every measured file the run's ledger vouches
/// for under the new settings is reused, and one measured under other settings is refused by
/// name.
pub fn job_state_measured(job: &Job, out: &Path, options: &MeasureOptions) -> Result<JobState> {
    Ok(match job_state(job, out)? {
        JobState::Done(r) if r.measure.as_ref() != Some(&options.settings()) => JobState::Started,
        other => other,
    })
}

/// The state of `job` in `out`: a result counts as this job's only when the run config that
/// made it (its `config_sha256`, or for a result from before that key the run directory's
/// `config.toml`) is the job's own, and it was made by this [`RESULTS_VERSION`].
pub fn job_state(job: &Job, out: &Path) -> Result<JobState> {
    let run = out.join(&job.run);
    let result = read_result(&out.join(&job.dir).join("result.json"))?;
    let digest = job.config.digest();
    if let Some(r) = result
        .as_ref()
        .filter(|r| r.results_version != RESULTS_VERSION)
    {
        return Ok(JobState::Stale(format!(
            "{} was made by results version {} of ropelab, this one is version {RESULTS_VERSION} \
             (it measures differently): its results are not reused; remove the job's directory \
             or choose another --out",
            out.join(&job.dir).display(),
            r.results_version
        )));
    }
    if let Some(r) = &result {
        if r.config_sha256.as_deref() == Some(digest.as_str()) {
            // The run directory's own config must still be the one that ran: an edit after
            // the job finished is refused by name (fifth pass), as `eval` refuses it.
            if RunDir::new(&run).config_path().exists() {
                let (_, existing) = RunDir::open(&run)?;
                if let Some((key, now, was)) = job.config.difference(&existing) {
                    return Ok(JobState::Stale(format!(
                        "{}/config.toml says {key} = {was}, but the job that ran gives {key} = \
                         {now} (edited after it ran): its results are not reused; remove the \
                         job's directory or choose another --out",
                        run.display()
                    )));
                }
            }
            // Done while its ledger vouches for every file it measured; a file moved away or
            // replaced sends the job back to its measurement (which remeasures a missing file
            // and refuses a replaced one by name).
            // A run whose final checkpoint is gone (deleted, or moved away) goes back to its
            // training, which makes it again, rather than being measured at an earlier step
            // under its old result (eighth pass, a182).
            let finished =
                RunDir::new(&run).latest_checkpoint().ok() == Some(job.config.optim.steps);
            // A result whose numbers its run's files do not give (edited, its ledger entry
            // re-sealed) is measured again, never reused (twenty-third pass, SWr).
            let agrees = |r: &JobResult| -> Result<bool> {
                let settings = r.measure.clone().unwrap_or_default();
                Ok(r.contradiction(&run, &settings)?.is_none())
            };
            return Ok(
                if finished
                    && measurement_intact(&run)?
                    && result_vouched(&out.join(&job.dir))?
                    && agrees(r)?
                {
                    JobState::Done(Box::new(r.clone()))
                } else {
                    JobState::Started
                },
            );
        }
    }
    if !RunDir::new(&run).config_path().exists() {
        return Ok(match result {
            None => JobState::ToDo,
            Some(_) => JobState::Stale(format!(
                "{} holds a result of another run config (its run directory is gone); remove \
                 the job's directory or choose another --out",
                out.join(&job.dir).display()
            )),
        });
    }
    let (_, existing) = RunDir::open(&run)?;
    if let Some((key, now, was)) = job.config.difference(&existing) {
        return Ok(JobState::Stale(format!(
            "{} was run with {key} = {was}, but the job now asks for {key} = {now} (set by the \
             sweep file, the study config or the command's flags, or derived from them: an \
             experiment's data sizes follow its --steps and --per-length): its results are not \
             reused; remove the job's directory or choose another --out",
            run.display()
        )));
    }
    Ok(match result {
        Some(r) if r.config_sha256.is_none() => JobState::Done(Box::new(r)),
        Some(_) => JobState::Stale(format!(
            "{}: its result.json records another run config than its run directory; remove the \
             job's directory or choose another --out",
            out.join(&job.dir).display()
        )),
        None => JobState::Started,
    })
}

/// Whether every file in the run's ledger is there and unchanged, and the ledger records the
/// training log (`metrics.jsonl`) the verdicts read (true without a ledger). A run measured
/// before the log was recorded goes back to its measurement, which records it.
fn measurement_intact(run: &Path) -> Result<bool> {
    let io = |e| SweepError::Io {
        path: run.join(ropelab_io::LEDGER),
        source: e,
    };
    let Some(ledger) = ropelab_io::Ledger::load(run).map_err(io)? else {
        return Ok(true);
    };
    let log_recorded =
        !run.join("metrics.jsonl").exists() || ledger.files.contains_key("metrics.jsonl");
    Ok(log_recorded
        && ledger
            .files
            .keys()
            .all(|f| matches!(ledger.vouch(run, f, ropelab_io::Expect::Any), Ok(true))))
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
    /// How many of those failed because their directory holds another run config
    /// ([`SweepError::Stale`]): running again does not retry them.
    pub stale: usize,
    /// The finished jobs' results, in job order.
    pub results: Vec<JobResult>,
}

/// Where a worker leaves a job's outcome (its result, and whether it ran now).
type Slot = Mutex<Option<Result<(JobResult, bool)>>>;

/// How jobs share this machine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pool {
    /// Jobs at once.
    pub parallel: usize,
    /// Threads of the machine, split between them (each job gets `threads / parallel`, at
    /// least 1).
    pub threads: usize,
    /// Stop handing out jobs after the first failure (the study); a sweep runs the others.
    pub fail_fast: bool,
}

/// Runs `jobs` in `out`, `pool.parallel` at a time, each job in its own rayon thread pool of
/// its share of the threads; `done(id, ran)` after each. A failed job is reported in the
/// summary, and the others still run unless `pool.fail_fast`. Results and files do not depend
/// on how many jobs run at once.
pub fn run_jobs(
    jobs: &[&Job],
    out: &Path,
    pool: Pool,
    options: &MeasureOptions,
    progress: &dyn Progress,
    done: &(dyn Fn(&str, bool) + Sync),
) -> Result<RunSummary> {
    let parallel = pool.parallel.clamp(1, jobs.len().max(1));
    let per_job = (pool.threads / parallel).max(1);
    let next = AtomicUsize::new(0);
    let slots: Vec<Slot> = jobs.iter().map(|_| Mutex::new(None)).collect();
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
        for rayon_pool in &pools {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(job) = jobs.get(i) else { break };
                let outcome = rayon_pool.install(|| run_job(job, out, options, progress));
                match &outcome {
                    Ok((_, ran)) => done(&job.id, *ran),
                    Err(_) if pool.fail_fast => next.store(jobs.len(), Ordering::SeqCst),
                    Err(_) => {}
                }
                *slots[i]
                    .lock()
                    .expect("no job panics while holding its slot") = Some(outcome);
            });
        }
    });
    let mut summary = RunSummary::default();
    for (slot, job) in slots.into_iter().zip(jobs) {
        match slot.into_inner().expect("the workers have finished") {
            Some(Ok((result, ran))) => {
                if ran {
                    summary.ran += 1;
                } else {
                    summary.skipped += 1;
                }
                summary.results.push(result);
            }
            Some(Err(e)) => {
                summary.stale += usize::from(matches!(e, SweepError::Stale { .. }));
                summary.failed.push((job.id.clone(), e.to_string()));
            }
            None => {}
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_with_a_test_evaluation_reads_back_as_written() {
        let mut accuracy = Accuracy {
            n: 10,
            accuracy: 0.7,
            loss: 0.5,
            ..Accuracy::default()
        };
        accuracy.per_hop.insert(1, 1.0);
        accuracy.per_hop.insert(3, 0.4);
        let result = JobResult {
            id: "j0".into(),
            params: BTreeMap::from([("seed".into(), "0".into())]),
            task: "number".into(),
            steps: 5,
            setup_seconds: 0.1,
            train_seconds: 1.0,
            eval_seconds: 2.0,
            score_seconds: 1.5,
            length_seconds: 0.5,
            val_accuracy: Some(0.6),
            test_accuracy: Some(0.7),
            per_hop: accuracy.per_hop.clone(),
            layer_types: Some("P-".into()),
            length_accuracy: BTreeMap::from([(17, 0.7), (33, 0.2)]),
            n_star: None,
            test: Some(TestEval {
                step: 5,
                extra: 0,
                seq_len: 17,
                accuracy,
                run: "sha256:ab".into(),
            }),
            config_sha256: Some("ab".into()),
            measure: Some(MeasureOptions::default().settings()),
            results_version: RESULTS_VERSION,
        };
        let text = serde_json::to_string_pretty(&result).unwrap();
        let back: JobResult = serde_json::from_str(&text).unwrap();
        assert_eq!(back, result);
        let report = EvalReport::from(back.test.unwrap());
        assert_eq!(report.accuracy.per_hop[&3], 0.4);
    }
}
