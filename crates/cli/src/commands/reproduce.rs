//! `ropelab reproduce`: the study end to end from one config. So far: generate and validate
//! both tasks' datasets, train one model per task and report its test accuracy, then score
//! every head at every checkpoint and print the per-head table.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use std::path::Path;

use anyhow::{Context, Result};
use candle_core::Device;
use clap::Args;
use ropelab_tasks::{summarize, write_jsonl, Dataset, Split, Summary, Task, TaskKind};
use ropelab_train::eval::{eval_checkpoint, EvalReport};
use ropelab_train::{Preset, RunDir, Trainer};
use serde::Serialize;

use super::progress;
use super::score::{head_table, score_with_progress};
use crate::config::StudyConfig;
use crate::output::{write_atomic, Output};
use ropelab_analysis::dynamics::ScoreOptions;

/// Arguments of `ropelab reproduce`.
#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// Run the full-scale study of the paper instead of the quick default.
    #[arg(long)]
    pub paper: bool,
    /// Run the study described by this TOML file (see configs/quick.toml).
    #[arg(long, conflicts_with = "paper")]
    pub config: Option<PathBuf>,
    /// Run directory for every result.
    #[arg(long, default_value = "runs/reproduce")]
    pub out: PathBuf,
}

/// One row of the dataset summary.
#[derive(Debug, Serialize)]
struct Row {
    task: TaskKind,
    split: Split,
    #[serde(flatten)]
    summary: Summary,
    seconds: f64,
}

/// Runs `ropelab reproduce`.
pub fn run(args: ReproduceArgs) -> Result<()> {
    let config = match &args.config {
        Some(path) => StudyConfig::load(path)?,
        None => StudyConfig::embedded(args.paper),
    };
    println!(
        "ropelab reproduce: study {:?}, seed {}, run directory {}",
        config.name,
        config.seed,
        args.out.display()
    );
    write_atomic(&args.out.join("config.toml"), config.to_toml().as_bytes())?;

    let mut rows = Vec::new();
    for kind in TaskKind::ALL {
        let task = Task::new(kind, config.tasks.layout())?;
        for (split, n) in [
            (Split::Train, config.tasks.train),
            (Split::Val, config.tasks.val),
            (Split::Test, config.tasks.test),
        ] {
            let data = Dataset::new(task.clone(), config.seed, split, n, 0)?;
            let start = Instant::now();
            let bar = progress(n as u64, &format!("{kind} {split}"));
            let summary = summarize(&data, || bar.inc(1))?;
            bar.finish_and_clear();
            let seconds = start.elapsed().as_secs_f64();
            if split == Split::Test {
                let path = args.out.join(format!("data/{kind}-test.jsonl"));
                let mut out = Output::create(&path)?;
                write_jsonl(&data, &mut out, || {})
                    .with_context(|| format!("cannot write {}", path.display()))?;
                out.commit()?;
            }
            rows.push(Row {
                task: kind,
                split,
                summary,
                seconds,
            });
        }
    }
    println!("{}", table(&rows));
    let json = serde_json::to_string_pretty(&rows)?;
    write_atomic(&args.out.join("tasks.json"), json.as_bytes())?;
    println!(
        "wrote {} and {}",
        args.out.join("tasks.json").display(),
        args.out.join("data").display()
    );
    let invalid: usize = rows
        .iter()
        .map(|r| r.summary.samples - r.summary.valid)
        .sum();
    anyhow::ensure!(
        invalid == 0,
        "{invalid} generated samples failed validation"
    );

    let mut trained = Vec::new();
    for kind in TaskKind::ALL {
        trained.push(train_task(&config, kind, &args.out)?);
    }
    println!("{}", training_table(&trained));
    let json = serde_json::to_string_pretty(&trained)?;
    write_atomic(&args.out.join("training.json"), json.as_bytes())?;

    theory(&config, &args.out)?;

    for t in &trained {
        let scored = score_with_progress(Path::new(&t.run), &ScoreOptions::default())?;
        println!(
            "{} task: heads at the last checkpoint ({} lines in {})",
            t.task,
            scored.lines.len(),
            scored.path.display()
        );
        println!("{}", head_table(&scored, 0.1)?);
    }
    Ok(())
}

/// One trained model of the study.
#[derive(Debug, Serialize)]
struct Trained {
    task: TaskKind,
    run: String,
    steps: usize,
    train_seconds: f64,
    test: EvalReport,
}

/// Trains (or resumes, or reuses) the study's model for `kind` in `out/<task>` and evaluates
/// its last checkpoint on the test split.
fn train_task(config: &StudyConfig, kind: TaskKind, out: &Path) -> Result<Trained> {
    let device = Device::Cpu;
    let preset: Preset = config.train.preset.parse()?;
    let mut run =
        preset
            .config(kind)
            .with_data(config.seed, config.tasks.layout(), config.tasks.data())?;
    if let Some(steps) = config.train.steps {
        run.optim.steps = steps;
    }
    let dir = out.join(kind.as_str());
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
    let start = Instant::now();
    let total = trainer.config().optim.steps;
    let bar = progress(total as u64, &format!("train {kind}"));
    bar.set_position(trainer.step() as u64);
    trainer.run(|p| {
        bar.set_position(p.step as u64);
        if p.step % 10 == 0 {
            bar.set_message(format!("train {kind} loss {:.3}", p.loss));
        }
    })?;
    bar.finish_and_clear();
    let train_seconds = start.elapsed().as_secs_f64();
    let test = eval_checkpoint(&dir, None, 0, None, &device)?;
    Ok(Trained {
        task: kind,
        run: dir.display().to_string(),
        steps: total,
        train_seconds,
        test,
    })
}

fn training_table(rows: &[Trained]) -> String {
    let mut s = format!(
        "{:<7} {:>6} {:>9} {:>9}  {}\n",
        "task", "steps", "seconds", "test acc", "test accuracy per hop count"
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
            "{:<7} {:>6} {:>9.1} {:>9.4}  {hops}",
            r.task, r.steps, r.train_seconds, r.test.accuracy.accuracy
        );
    }
    s.trim_end().to_owned()
}

fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<7} {:<6} {:>8} {:>8} {:>4} {:>6}  {:<32} {:>7}\n",
        "task", "split", "samples", "valid", "len", "vocab", "per hop count", "seconds"
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
            "{:<7} {:<6} {:>8} {:>8} {:>4} {:>6}  {:<32} {:>7.2}",
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
    use super::theory::{
        discrepancy_csv, discrepancy_rows, discrepancy_table, rope_stats, Mechanism,
    };
    let t = &config.theory;
    for (name, mechanism, theta) in [
        ("index", Mechanism::Index, 0.866),
        ("retrieval", Mechanism::Retrieval, 0.0027),
    ] {
        let rows = discrepancy_rows(mechanism, theta, 8, t.max_n)?;
        println!("discrepancy of the hand-built {name} head (theta {theta}):");
        println!("{}", discrepancy_table(&rows));
        let path = out.join(format!("theory/discrepancy-{name}.csv"));
        write_atomic(&path, discrepancy_csv(&rows).as_bytes())?;
    }
    let failures = ropelab_theory::failures::FailureConfig {
        d: t.d,
        bases: t.bases.clone(),
        llama3: false,
        lengths: t.lengths.clone(),
        draws: t.draws,
        seed: config.seed,
        rho: t.rho,
        format: ropelab_theory::format::NumberFormat::Bf16,
    };
    rope_stats(&failures, &out.join("theory/rope-failures.csv"))
}
