//! `ropelab score`: the learning dynamics of a run, one line per (step, layer, head).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use clap::Args;
use ropelab_analysis::lens::swap::Tau;
use ropelab_analysis::measure::dynamics::{
    score_run, summarize_heads, Gamma, HeadStep, QueryMode, RunScores, ScoreOptions,
};
use ropelab_io::{Align::Left, Align::Right, Table};
use ropelab_train::RunDir;

use super::{progress, Guard};

/// Arguments of `ropelab score`.
#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Run directory written by `ropelab train`.
    #[arg(long)]
    pub run: PathBuf,
    /// Test samples every checkpoint is scored on.
    #[arg(long, default_value_t = ScoreOptions::default().samples as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub samples: u64,
    /// Query positions: `last` (the task's query), `hops` (every jumping chain position) or a
    /// position (at least 2).
    #[arg(long, default_value = "last", value_parser = |s: &str| s.parse::<QueryMode>().map_err(|e| e.to_string()))]
    pub query: QueryMode,
    /// Temperature of the swap weights alpha (positive).
    #[arg(long, default_value_t = Tau::DEFAULT)]
    pub tau: Tau,
    /// Also score block swaps: the keys before the query in this many equal blocks.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub blocks: Option<u64>,
    /// Also score every RoPE plane of every head alone (projection heads).
    #[arg(long)]
    pub planes: bool,
    /// Purity tolerance of the summary table, in (0, 0.5) (scores.jsonl has 0.1 and 0.05).
    #[arg(long, default_value_t = Gamma::DEFAULT)]
    pub gamma: Gamma,
    /// Memory budget of one captured batch in MiB (samples run in batches that fit it).
    #[arg(long = "memory-mb", default_value_t = ropelab_train::data::EVAL_MEMORY >> 20, value_parser = crate::output::parse_memory_mib)]
    pub memory: usize,
    /// Output file (default: RUN/scores.jsonl; a study's or sweep job's own file is never
    /// replaced).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `ropelab score`.
pub fn run(args: ScoreArgs, guard: Guard) -> Result<()> {
    let options = ScoreOptions {
        samples: args.samples as usize,
        query: args.query,
        tau: args.tau,
        blocks: args.blocks.map(|m| m as usize),
        planes: args.planes,
        memory: args.memory,
        out: args.out.clone(),
        ..ScoreOptions::default()
    };
    let target = args
        .out
        .clone()
        .unwrap_or_else(|| args.run.join("scores.jsonl"));
    // Before the work: a directory, or a file ropelab keeps, is no --out.
    super::check_out_file(&target)?;
    ropelab_io::refuse_owned(&args.run, &target, None)?;
    if let Ok((dir, config)) = RunDir::open(&args.run) {
        let checkpoints = dir.checkpoints().map_or(1, |c| c.len());
        let need = options.need(&config, &args.run, checkpoints);
        guard.check(&format!("score --samples {}", args.samples), &need)?;
    }
    let start = Instant::now();
    let scored = score_with_progress(&args.run, &options)?;
    println!("{}", head_table(&scored.lines, args.gamma)?);
    println!(
        "scored {} lines in {:.1} s; wrote {}",
        scored.lines.len(),
        start.elapsed().as_secs_f64(),
        scored.path.display()
    );
    Ok(())
}

/// Scores a run with a progress bar.
pub fn score_with_progress(run: &Path, options: &ScoreOptions) -> Result<RunScores> {
    let bar = progress(0, "score");
    let scored = score_run(run, options, &Device::Cpu, |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    Ok(scored)
}

/// The per-head table: final scores and type, and the step from which each head stays pure.
pub fn head_table(lines: &[HeadStep], gamma: Gamma) -> Result<String> {
    let mut heads = summarize_heads(lines, gamma)?;
    let mut table = Table::new(&[
        ("layer", Left),
        ("head", Left),
        ("s_pos", Right),
        ("s_sym", Right),
        ("type", Left),
        ("pure from", Right),
    ]);
    for h in &heads {
        table.row([
            h.layer.to_string(),
            h.head.to_string(),
            format!("{:.3}", h.s_pos),
            format!("{:.3}", h.s_sym),
            h.kind.to_string(),
            h.pure_from.map_or("-".into(), |p| p.to_string()),
        ]);
    }
    let mut s = table.to_string();
    heads.retain(|h| h.pure_from.is_some());
    heads.sort_by_key(|h| (h.pure_from, h.layer, h.head));
    let order: Vec<String> = heads
        .iter()
        .map(|h| format!("L{}H{}@{}", h.layer, h.head, h.pure_from.unwrap_or(0)))
        .collect();
    s.push_str(&format!(
        "order in which heads became pure (gamma {gamma}): {}",
        order.join(" ")
    ));
    Ok(s)
}
