//! `ropelab bench`: throughput of ropelab's hot paths on this machine.

use std::hint::black_box;
use std::io;
use std::time::Instant;

use anyhow::Result;
use clap::{Args, Subcommand};
use ropelab_tasks::{write_jsonl, Dataset, Layout, Split, Task, TaskKind};

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Task generation: samples/s for generating, validating and writing JSON Lines.
    Gen(BenchGenArgs),
    /// Training steps/s of a preset, split into forward, backward and optimizer.
    Train(super::bench_train::BenchTrainArgs),
}

/// Arguments of `ropelab bench gen`.
#[derive(Debug, Args)]
pub struct BenchGenArgs {
    /// Samples per task and measurement.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// Dataset seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Runs a benchmark.
pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Gen(args) => bench_gen(args),
        BenchCommand::Train(args) => super::bench_train::run(args),
    }
}

fn bench_gen(args: BenchGenArgs) -> Result<()> {
    let n = args.n as usize;
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    println!("ropelab bench gen: {n} samples per task, paper layout, train split");
    println!(
        "{:<7} {:<34} {:>9} {:>12}",
        "task", "measurement", "seconds", "samples/s"
    );
    for kind in TaskKind::ALL {
        let data = Dataset::new(
            Task::new(kind, Layout::default())?,
            args.seed,
            Split::Train,
            n,
            0,
        )?;
        let report = |what: &str, seconds: f64| {
            println!(
                "{:<7} {:<34} {:>9.3} {:>12.0}",
                kind,
                what,
                seconds,
                n as f64 / seconds
            );
        };
        let start = Instant::now();
        for i in 0..n {
            black_box(data.sample(i)?);
        }
        report("generate (1 thread)", start.elapsed().as_secs_f64());

        let start = Instant::now();
        std::thread::scope(|scope| -> Result<()> {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let data = &data;
                    scope.spawn(move || -> Result<()> {
                        for i in (t..n).step_by(threads) {
                            black_box(data.sample(i)?);
                        }
                        Ok(())
                    })
                })
                .collect();
            for w in workers {
                w.join().expect("a bench worker panicked")?;
            }
            Ok(())
        })?;
        report(
            &format!("generate ({threads} threads)"),
            start.elapsed().as_secs_f64(),
        );

        let start = Instant::now();
        for i in 0..n {
            let sample = data.sample(i)?;
            anyhow::ensure!(data.task().validate(&sample).is_ok(), "sample {i} invalid");
        }
        report(
            "generate + validate (1 thread)",
            start.elapsed().as_secs_f64(),
        );

        let start = Instant::now();
        write_jsonl(&data, io::sink(), || {})?;
        report(
            "generate + JSON Lines (1 thread)",
            start.elapsed().as_secs_f64(),
        );
    }
    Ok(())
}
