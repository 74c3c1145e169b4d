//! `ropelab reproduce`: the study end to end from one config. So far: generate and validate
//! both tasks' train/val/test datasets, write the test splits and a summary.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use ropelab_tasks::{summarize, write_jsonl, Dataset, Split, Summary, Task, TaskKind};
use serde::Serialize;

use super::progress;
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
    Ok(())
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
