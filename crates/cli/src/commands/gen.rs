//! `ropelab gen`: a task dataset, or its prompt version, as JSON Lines.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use ropelab_io::Need;
use ropelab_tasks::{
    line_bytes, prompt, sample_bytes, samples_work, write_jsonl, Dataset, Layout, Split, Task,
    TaskKind,
};

use super::{progress, Guard};
use crate::output::Output;

/// Arguments of `ropelab gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Task: `number` (positional offsets) or `letter` (symbolic first-letter lookup).
    pub task: TaskKind,
    /// Number of samples.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// Dataset seed: the same seed gives byte-identical output.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Split; the splits never share an instance, whatever the seeds.
    #[arg(long, default_value = "train")]
    pub split: Split,
    /// Extra target-type tokens inserted before the target window (length extension).
    #[arg(long, default_value_t = 0)]
    pub extra: usize,
    /// Target-window size (for `--prompt`: the question's window size).
    #[arg(long, default_value_t = Layout::default().target_window)]
    pub target_window: usize,
    /// Pre-target window size.
    #[arg(long, default_value_t = Layout::default().pre_window)]
    pub pre_window: usize,
    /// Hop counts, comma-separated, balanced in equal shares.
    #[arg(long, value_delimiter = ',', default_values_t = Layout::default().hops)]
    pub hops: Vec<usize>,
    /// Number task: distinct offset tokens (default: target window + pre-target window).
    #[arg(long)]
    pub offsets: Option<usize>,
    /// Letter task: distinct letters (default 8, at most 26).
    #[arg(long)]
    pub letters: Option<usize>,
    /// Letter task: distinct numbers (default 8).
    #[arg(long)]
    pub numbers: Option<usize>,
    /// Write the natural-language 1-hop prompt version (fields `prompt`, `answer`).
    #[arg(long, conflicts_with_all = ["extra", "pre_window", "hops", "split", "offsets", "letters", "numbers"])]
    pub prompt: bool,
    /// Output file (`-` for standard output); written whole or not at all.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `ropelab gen`.
pub fn run(args: GenArgs, guard: Guard) -> Result<()> {
    let n = args.n as usize;
    let to_file = args.out.as_os_str() != "-";
    if args.prompt {
        // Prompts are built in memory before the file is written: estimate both from the first.
        let first = prompt::prompt(args.task, args.target_window, args.seed, 0)?;
        let each = serde_json::to_string(&first)?.len() as u64 + 1;
        let total = each
            .saturating_mul(args.n)
            .saturating_add(each.saturating_mul(args.n) / 4);
        let mut need = Need::new()
            .memory(total, format!("{} prompts", args.n))
            .compute(
                args.n.saturating_mul(ropelab_tasks::SAMPLE_WORK),
                format!("building {} prompts", args.n),
            );
        if to_file {
            need = need.disk(&args.out, total, format!("{} prompts", args.n));
        }
        guard.check(&format!("gen --prompt --n {}", args.n), &need)?;
        // Build every prompt before touching the output, so a bad size leaves nothing behind.
        let prompts = (0..n)
            .map(|i| prompt::prompt(args.task, args.target_window, args.seed, i))
            .collect::<Result<Vec<_>, _>>()?;
        let mut out = Output::create(&args.out)?;
        for p in &prompts {
            serde_json::to_writer(&mut out, p)?;
            out.write_all(b"\n")
                .with_context(|| format!("cannot write {}", args.out.display()))?;
        }
        return out.commit();
    }
    let layout = Layout {
        target_window: args.target_window,
        pre_window: args.pre_window,
        hops: args.hops,
        offsets: args.offsets,
        letters: args.letters,
        numbers: args.numbers,
    };
    layout.check_for(args.task)?;
    let task = Task::new(args.task, layout)?;
    let data = Dataset::new(task, args.seed, args.split, n, args.extra)?;
    let mut need = Need::new()
        .memory(
            sample_bytes(&data),
            format!("one sample of {} tokens", data.seq_len()),
        )
        .compute(
            samples_work(&data, args.n),
            format!("drawing {} samples of {} tokens", args.n, data.seq_len()),
        );
    if to_file {
        need = need.disk(
            &args.out,
            line_bytes(&data).saturating_mul(args.n),
            format!("{} lines of {} tokens", args.n, data.seq_len()),
        );
    }
    guard.check(&format!("gen --n {} --extra {}", args.n, args.extra), &need)?;
    let mut out = Output::create(&args.out)?;
    let bar = progress(n as u64, &format!("{} {}", args.task, args.split));
    write_jsonl(&data, &mut out, || bar.inc(1))
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    bar.finish_and_clear();
    out.commit()
}
