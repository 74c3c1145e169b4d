//! `ropelab eval`: test accuracy of a checkpoint, overall and per hop count.

use std::path::PathBuf;

use anyhow::Result;
use candle_core::Device;
use clap::Args;
use ropelab_io::{Align::Left, Align::Right, Table};
use ropelab_train::eval::eval_checkpoint;
use ropelab_train::{forward_flops, inference_need, RunDir};

use super::Guard;

use crate::output::{parse_memory_mib, peak_rss_mib, write_atomic};

/// Arguments of `ropelab eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Run directory written by `ropelab train`.
    #[arg(long)]
    pub run: PathBuf,
    /// Checkpoint step (default: the latest).
    #[arg(long)]
    pub step: Option<usize>,
    /// Extra target-type tokens before the target window (length generalisation).
    #[arg(long, default_value_t = 0)]
    pub extra: usize,
    /// Number of test samples (default: the run's test size).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: Option<u64>,
    /// Memory budget of one forward pass in MiB: samples run in batches sized to fit it, so
    /// peak memory does not grow with --n.
    #[arg(long = "memory-mb", default_value_t = ropelab_train::EVAL_MEMORY >> 20, value_parser = parse_memory_mib)]
    pub memory: usize,
}

/// Runs `ropelab eval`.
pub fn run(args: EvalArgs, guard: Guard) -> Result<()> {
    if let Ok((_, config)) = RunDir::open(&args.run) {
        let len = config.layout.core_len().saturating_add(args.extra);
        let n = config
            .test_samples(args.n.map_or(config.data.test, |n| n as usize), "--n")
            .map_err(anyhow::Error::msg)?;
        let need = inference_need(&config.model, len, args.memory).compute(
            forward_flops(&config.model, n, len),
            format!("{n} test samples of {len} tokens"),
        );
        guard.check(&format!("eval --extra {}", args.extra), &need)?;
    }
    let report = eval_checkpoint(
        &args.run,
        args.step,
        args.extra,
        args.n.map(|n| n as usize),
        args.memory,
        &Device::Cpu,
    )?;
    // A file the run's ledger lists is refused before anything is printed.
    let path = args
        .run
        .join("eval")
        .join(report.file_name(args.n.is_none()));
    let text = serde_json::to_string_pretty(&report)?;
    ropelab_io::refuse_owned(&args.run, &path, Some(text.as_bytes()))?;
    let hops: Vec<String> = report
        .accuracy
        .per_hop
        .iter()
        .map(|(h, a)| format!("{h}:{a:.4}"))
        .collect();
    let mut table = Table::new(&[
        ("step", Left),
        ("extra", Right),
        ("len", Right),
        ("n", Right),
        ("accuracy", Right),
        ("loss", Right),
        ("per hop", Left),
    ]);
    table.row([
        report.step.to_string(),
        report.extra.to_string(),
        report.seq_len.to_string(),
        report.accuracy.n.to_string(),
        format!("{:.4}", report.accuracy.accuracy),
        format!("{:.4}", report.accuracy.loss),
        hops.join(" "),
    ]);
    print!("{table}");
    write_atomic(&path, text.as_bytes())?;
    println!("wrote {}", path.display());
    if let Some(peak) = peak_rss_mib() {
        println!("peak RSS {peak:.1} MiB");
    }
    Ok(())
}
