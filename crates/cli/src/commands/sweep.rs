//! `ropelab sweep` and `ropelab collect`: a sweep file's jobs run here (in parallel, by shard,
//! resumable), listed, or written as a Slurm job array; and their results merged
//! (docs/sweeps.md).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use ropelab_io::{write_atomic, Align, Table};
use ropelab_sweep::collect::{collect, not_finished, summarise, unfinished, UNFINISHED};
use ropelab_sweep::estimate::{estimate, TIMED_STEPS};
use ropelab_sweep::need::jobs_need;
use ropelab_sweep::plan::{Plan, PLAN as PLAN_FILE};
use ropelab_sweep::slurm::{script, SlurmOptions};
use ropelab_sweep::spec::shard;
use ropelab_sweep::Sweep;
use ropelab_sweep::{job_state_measured, run_jobs, JobState, Pool};

use super::{Bars, Guard};

/// Arguments of `ropelab sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The sweep file (TOML: a base run config and axes; docs/sweeps.md).
    pub spec: PathBuf,
    /// Output directory (`jobs/<id>/` per job, `collected/` after `collect`).
    #[arg(long)]
    pub out: PathBuf,
    /// Jobs run at once here, the machine's threads split between them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub jobs: u64,
    /// Run only shard I of N (`I/N`, 0 <= I < N): every N-th job of the id-sorted list.
    #[arg(long, value_parser = parse_shard)]
    pub shard: Option<(usize, usize)>,
    /// Print the plan (job id, parameters, state) and run nothing.
    #[arg(long)]
    pub list: bool,
    /// Write a Slurm job array (`OUT/sweep.sbatch`) instead of running here.
    #[arg(long, conflicts_with_all = ["shard", "list"])]
    pub slurm: bool,
    /// With --slurm: submit it with `sbatch`.
    #[arg(long, requires = "slurm")]
    pub submit: bool,
    /// With --slurm: array tasks (shards; default one per job).
    #[arg(long, requires = "slurm", value_parser = clap::value_parser!(u64).range(1..))]
    pub shards: Option<u64>,
    /// With --slurm: array tasks running at once.
    #[arg(long, requires = "slurm", value_parser = clap::value_parser!(u64).range(1..))]
    pub array_limit: Option<u64>,
    /// With --slurm: partition.
    #[arg(long, requires = "slurm", value_parser = ropelab_sweep::slurm::parse_partition)]
    pub partition: Option<String>,
    /// With --slurm: time limit per array task (e.g. 01:00:00).
    #[arg(long, requires = "slurm", value_parser = ropelab_sweep::slurm::parse_time)]
    pub time: Option<String>,
    /// With --slurm: CPUs per array task.
    #[arg(long, requires = "slurm", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub cpus_per_task: u64,
    /// With --slurm: GPUs per array task.
    #[arg(long, requires = "slurm", value_parser = clap::value_parser!(u64).range(1..))]
    pub gpus: Option<u64>,
}

/// Parses `I/N`.
pub(crate) fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("{s:?} is not a shard: write I/N with 0 <= I < N (e.g. 0/4)");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// Arguments of `ropelab collect`.
#[derive(Debug, Args)]
pub struct CollectArgs {
    /// A sweep's output directory.
    pub dir: PathBuf,
}

/// Runs `ropelab sweep`.
pub fn run(args: SweepArgs, guard: Guard) -> Result<()> {
    super::check_out_dir(&args.out, true)?;
    // An experiment's directory (its tables listed in its ledger, no plan): a sweep there
    // would hide them from its report, and its report would replace theirs (sixth pass, A4).
    if args.out.join(ropelab_io::LEDGER).is_file() && !args.out.join(PLAN_FILE).is_file() {
        anyhow::bail!(
            "--out {} holds an experiment's tables ({} lists them): choose another --out",
            args.out.display(),
            ropelab_io::LEDGER
        );
    }
    let sweep = Sweep::load(&args.spec)?;
    let jobs = sweep.jobs()?;
    let (index, count) = args.shard.unwrap_or((0, 1));
    let mine = shard(&jobs, index, count);
    if args.list {
        return list(&sweep, &jobs, &mine, &args.out, guard);
    }
    if args.slurm {
        // The script goes where the jobs will: a directory of another sweep's or a study's
        // jobs is refused now, not when the array runs (sixth pass, A3).
        let all: Vec<&ropelab_sweep::Job> = jobs.iter().collect();
        Plan::of(&format!("sweep {:?}", sweep.name), &all, &sweep.measure)
            .check_owner(&args.out)?;
        return slurm(&args, &sweep, jobs.len());
    }
    // Training and measuring every job of this shard ([measure] included), args.jobs at once.
    let need = jobs_need(&mine, &args.out, &sweep.measure, args.jobs as usize);
    guard.check("sweep", &need)?;
    // A job whose directory holds another config's run is refused before the plan is
    // rewritten, so the directory keeps the plan its results were made by.
    for job in &mine {
        if let ropelab_sweep::JobState::Stale(why) = ropelab_sweep::job_state(job, &args.out)? {
            anyhow::bail!(
                "job {} in {}: {why}; rerunning will not help: move it away to run the new config \
                 (nothing was written)",
                job.id,
                args.out.display()
            );
        }
    }
    // Every shard records the whole plan (the same file), which `collect` pools by; a plan
    // another shard wrote with another sweep file is refused, not replaced.
    let all: Vec<&ropelab_sweep::Job> = jobs.iter().collect();
    let plan = Plan::of(&format!("sweep {:?}", sweep.name), &all, &sweep.measure);
    plan.check_unchanged(&args.out)?;
    plan.write(&args.out)?;
    // The global pool's size: the machine's cores, or RAYON_NUM_THREADS (Slurm's CPUs).
    let threads = rayon::current_num_threads();
    println!(
        "sweep {}: {} jobs{}, {} at a time, {} threads each, in {}",
        sweep.name,
        mine.len(),
        if count > 1 {
            format!(" (shard {index}/{count} of {})", jobs.len())
        } else {
            String::new()
        },
        args.jobs.min(mine.len().max(1) as u64),
        (threads / args.jobs as usize).max(1),
        args.out.display()
    );
    let bars = Bars::default();
    let bar = bars.overall(mine.len() as u64, "jobs");
    let start = Instant::now();
    let pool = Pool {
        parallel: args.jobs as usize,
        threads,
        fail_fast: false,
    };
    let summary = run_jobs(&mine, &args.out, pool, &sweep.measure, &bars, &|_, _| {
        bar.inc(1)
    })?;
    bar.finish_and_clear();
    println!(
        "{} run, {} already done, {} failed in {:.1} s",
        summary.ran,
        summary.skipped,
        summary.failed.len(),
        start.elapsed().as_secs_f64()
    );
    if !summary.failed.is_empty() {
        let lines: Vec<String> = summary
            .failed
            .iter()
            .map(|(id, e)| format!("{id}: {e}"))
            .collect();
        // A job whose directory holds another run config stays failed on a rerun: only the
        // others are worth running again.
        let hint = if summary.stale == summary.failed.len() {
            "each says what to change; running the same command again alone will not help"
        } else {
            "run the same command again to retry those that failed while running; a job \
             holding another run config says what to change"
        };
        bail!(
            "{} job(s) failed ({hint}): {}",
            summary.failed.len(),
            lines.join("; ")
        );
    }
    Ok(())
}

fn list(
    sweep: &Sweep,
    jobs: &[ropelab_sweep::Job],
    mine: &[&ropelab_sweep::Job],
    out: &Path,
    guard: Guard,
) -> Result<()> {
    let mut t = Table::new(&[
        ("job", Align::Left),
        ("state", Align::Left),
        ("task", Align::Left),
        ("steps", Align::Right),
        ("steps/s", Align::Right),
        ("est. training", Align::Right),
        ("parameters", Align::Left),
    ]);
    let states = mine
        .iter()
        .map(|j| job_state_measured(j, out, &sweep.measure))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let done = |s: &JobState| matches!(s, JobState::Done(_));
    let todo: Vec<&ropelab_sweep::Job> = mine
        .iter()
        .zip(&states)
        .filter(|(_, s)| !done(s))
        .map(|(j, _)| *j)
        .collect();
    // Timing a job trains a few steps of its model: a model beyond this machine is refused
    // before it is built.
    let mut timing = ropelab_io::Need::new();
    if let Some((j, bytes)) = todo
        .iter()
        .map(|j| {
            let need =
                ropelab_train::training_need(&j.config, out, 0, ropelab_train::Engine::Fused);
            (j, need.memory_bytes())
        })
        .max_by_key(|(_, b)| *b)
    {
        timing = timing.memory(bytes, format!("timing the training of job {}", j.id));
    }
    guard.check("sweep --list", &timing)?;
    let estimates = estimate(&todo).context("cannot measure the jobs' training speed")?;
    let mut left = 0.0;
    let mut next = estimates.iter();
    let mut stale = vec![];
    for (j, s) in mine.iter().zip(&states) {
        let state = match s {
            JobState::Done(_) => "done",
            JobState::Stale(why) => {
                stale.push(format!("{}: {why}", j.id));
                "stale"
            }
            JobState::Started => "started",
            JobState::ToDo => "to do",
        };
        let (rate, cost) = match (done(s), next.next()) {
            (false, Some(e)) => {
                left += e.train_seconds;
                (
                    format!("{:.1}", e.steps_per_second),
                    duration(e.train_seconds),
                )
            }
            _ => ("-".into(), "-".into()),
        };
        t.row(vec![
            j.id.clone(),
            state.into(),
            j.config.task.as_str().into(),
            j.config.optim.steps.to_string(),
            rate,
            cost,
            j.param_text().join(" "),
        ]);
    }
    println!(
        "sweep {} ({}): {} of {} jobs",
        sweep.name,
        sweep.origin,
        mine.len(),
        jobs.len()
    );
    print!("{t}");
    for line in &stale {
        println!("stale {line}");
    }
    println!(
        "training left: about {} one job at a time on {} threads (steps/s measured here now over \
         {TIMED_STEPS} steps per model shape; scoring and tests come on top)",
        duration(left),
        rayon::current_num_threads()
    );
    Ok(())
}

fn slurm(args: &SweepArgs, sweep: &Sweep, jobs: usize) -> Result<()> {
    let shards = args.shards.map_or(jobs, |s| (s as usize).min(jobs)).max(1);
    let options = SlurmOptions {
        shards,
        throttle: args.array_limit.map(|t| t as usize),
        partition: args.partition.clone(),
        time: args.time.clone(),
        cpus_per_task: args.cpus_per_task as usize,
        gpus: args.gpus.map(|g| g as usize),
    };
    std::fs::create_dir_all(args.out.join("slurm"))
        .with_context(|| format!("cannot create {}", args.out.join("slurm").display()))?;
    let absolute = |p: &Path| {
        std::fs::canonicalize(p).with_context(|| format!("cannot resolve {}", p.display()))
    };
    let exe = std::env::current_exe().context("cannot find the ropelab binary")?;
    let text = script(
        &sweep.name,
        &exe,
        &absolute(&args.spec)?,
        &absolute(&args.out)?,
        &options,
    );
    let path = args.out.join("sweep.sbatch");
    write_atomic(&path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!(
        "wrote {} ({jobs} jobs in {shards} array tasks)",
        path.display()
    );
    if args.submit {
        let out = std::process::Command::new("sbatch")
            .arg(&path)
            .output()
            .context("cannot run sbatch (is Slurm installed here?)")?;
        let said = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            bail!("sbatch refused {}: {}", path.display(), err.trim());
        }
        println!("{}", said.trim());
    }
    Ok(())
}

/// Runs `ropelab collect`.
pub fn collect_command(args: CollectArgs) -> Result<()> {
    if !args.dir.is_dir() {
        bail!("{} is not a directory", args.dir.display());
    }
    // A study's verdicts are redrawn in the report collect writes: checked first, before any
    // table is written (twenty-seventh pass).
    ropelab_study::run::claims_current(&args.dir)?;
    let results = collect(&args.dir)?;
    let started = unfinished(&args.dir)?;
    let never: Vec<String> = not_finished(&args.dir)?
        .into_iter()
        .filter(|d| !started.contains(d))
        .collect();
    if !started.is_empty() || !never.is_empty() {
        let mut parts = vec![];
        if !started.is_empty() {
            parts.push(format!(
                "{} started and unfinished (running, killed or failed: {})",
                started.len(),
                started.join(", ")
            ));
        }
        if !never.is_empty() {
            parts.push(format!(
                "{} planned and never started (a shard not run, or a sweep stopped early)",
                never.len()
            ));
        }
        println!(
            "partial: {} job(s) have no result yet: {}; the tables count the {} finished ones \
             (the others are listed in collected/{UNFINISHED})",
            started.len() + never.len(),
            parts.join("; "),
            results.len()
        );
    }
    let summary = summarise(&results);
    let with_star = summary.iter().any(|s| s.n_star_mean.is_some());
    let mut columns = vec![
        ("configuration", Align::Left),
        ("n", Align::Right),
        ("accuracy", Align::Right),
        ("sd", Align::Right),
        ("layer types", Align::Left),
    ];
    if with_star {
        columns.push(("N*", Align::Right));
    }
    let mut t = Table::new(&columns);
    for s in summary {
        let mut row = vec![
            if s.config.is_empty() {
                "-".into()
            } else {
                s.config
            },
            s.n.to_string(),
            format!("{:.4}", s.accuracy_mean),
            s.accuracy_sd
                .map_or("n/a (1 job)".into(), |sd| format!("{sd:.4}")),
            s.layer_types,
        ];
        if with_star {
            row.push(s.n_star_mean.map_or("-".into(), |m| format!("{m:.1}")));
        }
        t.row(row);
    }
    print!("{t}");
    let setup: Vec<f64> = results.iter().map(|r| r.setup_seconds).collect();
    if !setup.is_empty() {
        println!(
            "{} jobs; start-up and data generation {:.3} s per job on average",
            results.len(),
            setup.iter().sum::<f64>() / setup.len() as f64
        );
    }
    let command = format!("ropelab collect {}", args.dir.display());
    let html = ropelab_report::report(&args.dir, &command)?;
    let report = args.dir.join("report.html");
    write_atomic(&report, html.as_bytes())
        .with_context(|| format!("cannot write {}", report.display()))?;
    println!(
        "wrote {} and {}",
        args.dir
            .join("collected/{jobs.csv,jobs.jsonl,summary.csv,lengths.csv}")
            .display(),
        report.display()
    );
    Ok(())
}

/// Seconds as `12 s`, `3.4 min` or `2.1 h`.
fn duration(seconds: f64) -> String {
    if seconds < 10.0 {
        format!("{seconds:.1} s")
    } else if seconds < 90.0 {
        format!("{seconds:.0} s")
    } else if seconds < 5400.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}
