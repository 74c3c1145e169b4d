//! Every training experiment of the study as sweep jobs: a grid becomes a `Vec<Job>` (each job
//! in its experiment's own run directory), run by `ropelab_sweep::run_jobs` and measured by
//! `ropelab_sweep::measure`, the code path of `ropelab sweep`; so every experiment runs jobs
//! side by side, resumes an interrupted run and reuses a finished one the same way.

use std::path::{Path, PathBuf};

use anyhow::Result;
use ropelab_sweep::{Job, JobResult, MeasureOptions, Pool};
use ropelab_train::RunConfig;
use toml::Value;

use crate::Progress;

/// Models trained at once for `jobs` jobs: `parallel`, default one per core, at most one per
/// job.
pub fn workers(parallel: Option<usize>, jobs: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    parallel.unwrap_or(cores).clamp(1, jobs.max(1))
}

/// What running `jobs` in `out` (`parallel` at a time, as [`run`] runs them), each measured
/// with `options`, needs ([`ropelab_sweep::need::jobs_need`]).
pub fn need(
    jobs: &[Job],
    out: &Path,
    options: &MeasureOptions,
    parallel: Option<usize>,
) -> ropelab_io::Need {
    let refs: Vec<&Job> = jobs.iter().collect();
    ropelab_sweep::need::jobs_need(&refs, out, options, workers(parallel, jobs.len()))
}

/// Refuses a grid axis that lists a value twice (two jobs would share one run directory and
/// one would find the other's lock): `what` names the axis, `values` are its values as text.
pub fn each_once(what: &str, values: impl IntoIterator<Item = String>) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for v in values {
        anyhow::ensure!(
            seen.insert(v.clone()),
            "{what} lists {v} twice: each value once (two runs would share one directory)"
        );
    }
    Ok(())
}

/// One grid point as a job: its parameters (labels of progress bars and `job.json`), its run
/// config and its run directory relative to the experiment's directory.
pub fn job(params: &[(&str, Value)], config: RunConfig, run: PathBuf) -> Job {
    let params = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    Job::in_run_dir(params, config, run)
}

/// Refuses, naming the first, any of `jobs` whose directory in `out` holds a run of other
/// settings: called before any job of a stage runs (and, by an experiment of several stages,
/// for every stage's jobs before the first).
pub fn refuse_stale(jobs: &[Job], out: &Path) -> Result<()> {
    for job in jobs {
        if let ropelab_sweep::JobState::Stale(why) = ropelab_sweep::job_state(job, out)? {
            anyhow::bail!(
                "{} in {}: {why} (no job was run)",
                job.param_text().join(", "),
                out.display()
            );
        }
    }
    Ok(())
}

/// Runs `jobs` in `out` through the sweep runner, `parallel` at a time (default: one per
/// core), each on a rayon pool of its share of the cores, each measured with `options`;
/// results come back in job order. The first failure stops handing out jobs and is returned
/// with the job's parameters.
pub fn run(
    jobs: &[Job],
    out: &Path,
    options: &MeasureOptions,
    parallel: Option<usize>,
    progress: &dyn Progress,
) -> Result<Vec<JobResult>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = Pool {
        parallel: workers(parallel, jobs.len()),
        threads: cores,
        fail_fast: true,
    };
    // Every job's directory is checked before any job runs: a stale one found mid-grid
    // would leave the jobs before it trained under the new settings beside the old ones
    // (tenth pass, SILENT-1).
    refuse_stale(jobs, out)?;
    let refs: Vec<&Job> = jobs.iter().collect();
    let summary = ropelab_sweep::run_jobs(&refs, out, pool, options, progress, &|_, _| {})?;
    if let Some((id, e)) = summary.failed.first() {
        let job = jobs
            .iter()
            .find(|j| &j.id == id)
            .expect("a failed job is one of the jobs");
        anyhow::bail!("{}: {e}", job.param_text().join(", "));
    }
    anyhow::ensure!(summary.results.len() == jobs.len(), "a job did not run");
    Ok(summary.results)
}
