//! `ropelab reproduce`: the study end to end from one config (docs/study.md). For every seed:
//! generate and validate both tasks' datasets, train one model per task, evaluate it on the
//! test split, score every head at every checkpoint and measure length generalisation; then the
//! theory lab's curves, a summary over seeds, and the verdict per claim (`claims.json`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::Device;
use clap::Args;
use indicatif::MultiProgress;
use ropelab_analysis::claims::{self, StudyFiles};
use ropelab_analysis::dynamics::{score_run, summarize_heads, HeadKind, HeadStep, ScoreOptions};
use ropelab_analysis::lengthgen::{length_generalisation, to_csv, LengthOptions, LengthRow};
use ropelab_tasks::{summarize, write_jsonl, Dataset, Split, Summary, Task, TaskKind};
use ropelab_train::eval::{eval_checkpoint, EvalReport};
use ropelab_train::{RunDir, Trainer, EVAL_MEMORY};
use serde::Serialize;

use super::score::head_table;
use super::{progress, progress_in};
use crate::config::StudyConfig;
use crate::output::{write_atomic, Output};

/// Arguments of `ropelab reproduce`.
#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// Run the full-scale study of the paper instead of the quick default.
    #[arg(long)]
    pub paper: bool,
    /// Run the study described by this TOML file (see configs/quick.toml).
    #[arg(long, conflicts_with = "paper")]
    pub config: Option<PathBuf>,
    /// Seeds to run, comma-separated (default: the config's `seeds`).
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Models trained at the same time, each on its own share of the cores (default: one per
    /// core, at most one per model). Results do not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub jobs: Option<u64>,
    /// Run directory for every result.
    #[arg(long, default_value = "runs/reproduce")]
    pub out: PathBuf,
}

/// One row of the dataset summary.
#[derive(Debug, Serialize)]
struct Row {
    seed: u64,
    task: TaskKind,
    split: Split,
    #[serde(flatten)]
    summary: Summary,
    seconds: f64,
}

/// Runs `ropelab reproduce`.
pub fn run(args: ReproduceArgs) -> Result<()> {
    let start = Instant::now();
    let mut config = match &args.config {
        Some(path) => StudyConfig::load(path)?,
        None => StudyConfig::embedded(args.paper),
    };
    if let Some(seeds) = &args.seeds {
        let mut seen = std::collections::BTreeSet::new();
        anyhow::ensure!(!seeds.is_empty(), "--seeds: give at least one seed");
        for s in seeds {
            anyhow::ensure!(seen.insert(s), "--seeds: seed {s} is listed twice");
        }
        config.seeds = seeds.clone();
    }
    println!(
        "ropelab reproduce: study {:?}, seeds {:?}, run directory {}",
        config.name,
        config.seeds,
        args.out.display()
    );
    write_atomic(&args.out.join("config.toml"), config.to_toml().as_bytes())?;

    let rows = datasets(&config, &args.out)?;
    println!("{}", table(&rows));
    write_atomic(
        &args.out.join("tasks.json"),
        serde_json::to_string_pretty(&rows)?.as_bytes(),
    )?;
    let invalid: usize = rows
        .iter()
        .map(|r| r.summary.samples - r.summary.valid)
        .sum();
    anyhow::ensure!(
        invalid == 0,
        "{invalid} generated samples failed validation"
    );

    let jobs: Vec<(u64, TaskKind)> = config
        .seeds
        .iter()
        .flat_map(|&s| TaskKind::ALL.map(|k| (s, k)))
        .collect();
    let trained = run_jobs(&config, &jobs, &args.out, args.jobs.map(|j| j as usize))?;
    println!("{}", training_table(&trained));
    write_atomic(
        &args.out.join("training.json"),
        serde_json::to_string_pretty(&trained)?.as_bytes(),
    )?;
    for t in &trained {
        println!(
            "\nseed {} {} task: heads at the last checkpoint ({})",
            t.seed,
            t.task,
            Path::new(&t.run).join("scores.jsonl").display()
        );
        println!("{}", head_table(&t.scores, config.claims.gamma)?);
        println!(
            "length generalisation ({}):",
            Path::new(&t.run).join("lengthgen.csv").display()
        );
        println!("{}", super::lengthgen::table(&t.lengths));
    }
    println!("\n{}", seed_summary(&trained, config.claims.gamma)?);

    theory(&config, &args.out)?;

    let files = StudyFiles::load(&args.out, &config.seeds)?;
    let verdicts = claims::verdicts(&files, &config.claims);
    println!("\nclaims of the paper, as measured by this study:");
    println!("{}", claims::table(&verdicts));
    let path = args.out.join("claims.json");
    write_atomic(&path, serde_json::to_string_pretty(&verdicts)?.as_bytes())?;
    let holding = verdicts
        .iter()
        .filter(|c| c.verdict == claims::Verdict::Holds)
        .count();
    println!(
        "{holding} of {} claims hold; wrote {} ({:.0} s in all)",
        verdicts.len(),
        path.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Generates every seed's datasets, re-validates every sample and writes the test splits.
fn datasets(config: &StudyConfig, out: &Path) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &seed in &config.seeds {
        for kind in TaskKind::ALL {
            let task = Task::new(kind, config.tasks.layout())?;
            for (split, n) in [
                (Split::Train, config.tasks.train),
                (Split::Val, config.tasks.val),
                (Split::Test, config.tasks.test),
            ] {
                let data = Dataset::new(task.clone(), seed, split, n, 0)?;
                let start = Instant::now();
                let bar = progress(n as u64, &format!("{kind} {split}"));
                let summary = summarize(&data, || bar.inc(1))?;
                bar.finish_and_clear();
                let seconds = start.elapsed().as_secs_f64();
                if split == Split::Test {
                    let path = out.join(format!("seed-{seed}/data/{kind}-test.jsonl"));
                    let mut file = Output::create(&path)?;
                    write_jsonl(&data, &mut file, || {})
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    file.commit()?;
                }
                rows.push(Row {
                    seed,
                    task: kind,
                    split,
                    summary,
                    seconds,
                });
            }
        }
    }
    Ok(rows)
}

/// One trained model of the study.
#[derive(Debug, Serialize)]
struct Trained {
    seed: u64,
    task: TaskKind,
    run: String,
    steps: usize,
    train_seconds: f64,
    score_seconds: f64,
    lengthgen_seconds: f64,
    test: EvalReport,
    #[serde(skip)]
    scores: Vec<HeadStep>,
    #[serde(skip)]
    lengths: Vec<LengthRow>,
}

/// Runs every (seed, task) job, `jobs` at a time (default: one per core), each on a rayon pool
/// of its share of the cores; results come back in job order.
fn run_jobs(
    config: &StudyConfig,
    jobs: &[(u64, TaskKind)],
    out: &Path,
    parallel: Option<usize>,
) -> Result<Vec<Trained>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = parallel.unwrap_or(cores).clamp(1, jobs.len().max(1));
    let threads = (cores / workers).max(1);
    let pools = (0..workers)
        .map(|_| rayon::ThreadPoolBuilder::new().num_threads(threads).build())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let bars = MultiProgress::new();
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<Result<Trained>>>> =
        jobs.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for pool in &pools {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&(seed, kind)) = jobs.get(i) else {
                        break;
                    };
                    let r = pool.install(|| run_job(config, seed, kind, out, &bars));
                    if r.is_err() {
                        // Stop handing out jobs; the error is reported below.
                        next.store(jobs.len(), Ordering::SeqCst);
                    }
                    *results[i].lock().expect("no poisoned lock") = Some(r);
                }
            });
        }
    });
    let mut trained = vec![];
    for (slot, &(seed, kind)) in results.into_iter().zip(jobs) {
        match slot.into_inner().expect("no poisoned lock") {
            Some(Ok(t)) => trained.push(t),
            Some(Err(e)) => return Err(e.context(format!("seed {seed}, {kind} task"))),
            None => {}
        }
    }
    anyhow::ensure!(trained.len() == jobs.len(), "a job did not run");
    Ok(trained)
}

/// Trains (or resumes, or reuses) the model of `kind` and `seed` in `out/seed-S/<task>`,
/// evaluates its last checkpoint on the test split, scores every checkpoint and measures
/// length generalisation (each reused when its file exists).
fn run_job(
    config: &StudyConfig,
    seed: u64,
    kind: TaskKind,
    out: &Path,
    bars: &MultiProgress,
) -> Result<Trained> {
    let device = Device::Cpu;
    let run = config.train.run_config(kind, seed, &config.tasks)?;
    let dir = out.join(format!("seed-{seed}")).join(kind.as_str());
    let mut trainer = if dir.join("config.toml").exists() {
        let (_, existing) = RunDir::open(&dir)?;
        anyhow::ensure!(
            existing == run,
            "{} holds a run with another config; delete it or choose another --out",
            dir.display()
        );
        Trainer::resume(&dir, None, &device)?
    } else {
        Trainer::start(&dir, run, &device)?
    };
    let label = format!("s{seed} {kind}");
    let start = Instant::now();
    let total = trainer.config().optim.steps;
    let bar = progress_in(bars, total as u64, &format!("train {label}"));
    bar.set_position(trainer.step() as u64);
    trainer.run(|p| {
        bar.set_position(p.step as u64);
        if p.step % 10 == 0 {
            bar.set_message(format!("train {label} {:.3}", p.loss));
        }
    })?;
    bar.finish_and_clear();
    bars.remove(&bar);
    let train_seconds = start.elapsed().as_secs_f64();
    let test = eval_checkpoint(&dir, None, 0, None, EVAL_MEMORY, &device)?;
    let eval_path = dir
        .join("eval")
        .join(format!("step-{:06}-extra-0.json", test.step));
    write_atomic(&eval_path, serde_json::to_string_pretty(&test)?.as_bytes())?;

    let start = Instant::now();
    let scores_path = dir.join("scores.jsonl");
    let scores: Vec<HeadStep> = if scores_path.exists() {
        read_scores(&scores_path)?
    } else {
        let bar = progress_in(bars, 0, &format!("score {label}"));
        let options = ScoreOptions {
            samples: config.score.samples,
            ..ScoreOptions::default()
        };
        let scored = score_run(&dir, &options, &device, |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        })?;
        bar.finish_and_clear();
        bars.remove(&bar);
        scored.lines
    };
    let score_seconds = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let lengths_path = dir.join("lengthgen.csv");
    let lengths = if lengths_path.exists() {
        let text = std::fs::read_to_string(&lengths_path)
            .with_context(|| format!("cannot read {}", lengths_path.display()))?;
        ropelab_analysis::lengthgen::from_csv(&text, &lengths_path.display().to_string())?
    } else {
        let options = LengthOptions {
            extras: config.lengthgen.extras.clone(),
            samples: Some(config.lengthgen.samples),
            step: None,
            memory: EVAL_MEMORY,
        };
        let bar = progress_in(
            bars,
            options.extras.len() as u64,
            &format!("length {label}"),
        );
        let rows = length_generalisation(&dir, &options, &device, |done, _| {
            bar.set_position(done as u64)
        })?;
        bar.finish_and_clear();
        bars.remove(&bar);
        write_atomic(&lengths_path, to_csv(&rows).as_bytes())?;
        rows
    };
    Ok(Trained {
        seed,
        task: kind,
        run: dir.display().to_string(),
        steps: total,
        train_seconds,
        score_seconds,
        lengthgen_seconds: start.elapsed().as_secs_f64(),
        test,
        scores,
        lengths,
    })
}

fn read_scores(path: &Path) -> Result<Vec<HeadStep>> {
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

fn training_table(rows: &[Trained]) -> String {
    let mut s = format!(
        "{:<5} {:<7} {:>6} {:>8} {:>8} {:>8} {:>9}  {}\n",
        "seed", "task", "steps", "train s", "score s", "length s", "test acc", "per hop"
    );
    for r in rows {
        let hops = r
            .test
            .accuracy
            .per_hop
            .iter()
            .map(|(h, a)| format!("{h}:{a:.4}"))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            s,
            "{:<5} {:<7} {:>6} {:>8.1} {:>8.1} {:>8.1} {:>9.4}  {hops}",
            r.seed,
            r.task,
            r.steps,
            r.train_seconds,
            r.score_seconds,
            r.lengthgen_seconds,
            r.test.accuracy.accuracy
        );
    }
    s.trim_end().to_owned()
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// Mean and standard deviation over seeds: test accuracy per task, and each head's final
/// scores with the number of seeds in which it ends pure of each type.
fn seed_summary(rows: &[Trained], gamma: f64) -> Result<String> {
    let mut s = String::new();
    for kind in TaskKind::ALL {
        let runs: Vec<&Trained> = rows.iter().filter(|r| r.task == kind).collect();
        if runs.is_empty() {
            continue;
        }
        let acc: Vec<f64> = runs.iter().map(|r| r.test.accuracy.accuracy).collect();
        let (m, sd) = mean_sd(&acc);
        let _ = writeln!(
            s,
            "{kind} task over {} seeds: test accuracy {m:.4} +- {sd:.4}",
            runs.len()
        );
        let _ = writeln!(
            s,
            "{:<6} {:<5} {:>15} {:>15}  {:>10} {:>8}",
            "layer", "head", "s_pos", "s_sym", "positional", "symbolic"
        );
        let summaries = runs
            .iter()
            .map(|r| summarize_heads(&r.scores, gamma))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let Some(first) = summaries.first() else {
            continue;
        };
        for (i, h) in first.iter().enumerate() {
            let heads: Vec<_> = summaries.iter().filter_map(|v| v.get(i)).collect();
            let (p, psd) = mean_sd(&heads.iter().map(|h| h.s_pos).collect::<Vec<_>>());
            let (q, qsd) = mean_sd(&heads.iter().map(|h| h.s_sym).collect::<Vec<_>>());
            let count = |k| heads.iter().filter(|h| h.kind == k).count();
            let _ = writeln!(
                s,
                "{:<6} {:<5} {:>7.3} +- {:.3} {:>7.3} +- {:.3}  {:>7}/{} {:>6}/{}",
                h.layer,
                h.head,
                p,
                psd,
                q,
                qsd,
                count(HeadKind::Positional),
                heads.len(),
                count(HeadKind::Symbolic),
                heads.len()
            );
        }
    }
    Ok(s.trim_end().to_owned())
}

fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<5} {:<7} {:<6} {:>8} {:>8} {:>4} {:>6}  {:<32} {:>7}\n",
        "seed", "task", "split", "samples", "valid", "len", "vocab", "per hop count", "seconds"
    );
    for r in rows {
        let hops = r
            .summary
            .per_hop
            .iter()
            .map(|(h, c)| format!("{h}:{c}"))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            s,
            "{:<5} {:<7} {:<6} {:>8} {:>8} {:>4} {:>6}  {:<32} {:>7.2}",
            r.seed,
            r.task,
            r.split,
            r.summary.samples,
            r.summary.valid,
            r.summary.seq_len,
            r.summary.vocab_size,
            hops,
            r.seconds
        );
    }
    s.trim_end().to_owned()
}

/// The theory lab's part of the study: discrepancy curves and the RoPE failure table.
fn theory(config: &StudyConfig, out: &Path) -> Result<()> {
    use super::theory::{discrepancy_table, rope_stats};
    use ropelab_theory::discrepancy::{curve, Mechanism};
    let t = &config.theory;
    for (mechanism, theta) in [
        (Mechanism::Index, t.index_theta),
        (Mechanism::Retrieval, t.retrieval_theta),
    ] {
        let rows = curve(mechanism, theta, t.alphabet, t.max_n)?;
        println!("discrepancy of the hand-built {mechanism} head (theta {theta}):");
        print!("{}", discrepancy_table(&rows));
        ropelab_io::write_csv(
            &out.join(format!("theory/discrepancy-{mechanism}.csv")),
            &rows,
        )?;
    }
    let failures = ropelab_theory::failures::FailureConfig {
        d: t.d,
        bases: t.bases.clone(),
        llama3: false,
        lengths: t.lengths.clone(),
        draws: t.draws,
        seed: config.seeds[0],
        rho: t.rho,
        format: ropelab_theory::format::NumberFormat::Bf16,
    };
    rope_stats(&failures, &out.join("theory/rope-failures.csv"))
}
