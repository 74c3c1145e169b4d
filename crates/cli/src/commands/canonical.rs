//! `ropelab canonical`: frequency-band training on the canonical tasks (docs/canonical.md):
//! one-layer attention-only RoPE models on Index, Retrieval or Partial Induction with the head
//! restricted to a band of planes; accuracy overall and per answer position, swap scores and
//! the largest weight per key position, in `DIR/summary.json` and `DIR/per_position.csv`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use ropelab_analysis::measure::partial::{TwoAngles, TWO_ANGLE_RATIO};
use ropelab_io::{Align, Table};
use ropelab_study::canonical::{
    default_sizes, read_hand, run, split, sweep, Band, BandSummary, Experiment, DEFAULT_LEN,
    DEFAULT_WINDOW,
};
use ropelab_tasks::{CanonicalKind, CanonicalTask};

use super::{Bars, Guard};

/// Arguments of `ropelab canonical`.
#[derive(Debug, Args)]
pub struct CanonicalArgs {
    /// The task: index, retrieval or partial.
    #[arg(long, value_parser = |s: &str| s.parse::<CanonicalKind>().map_err(|e| e.to_string()))]
    pub task: CanonicalKind,
    /// Bands, one per flag: all, high, low, planes=LIST (e.g. planes=0-3,8), or sweep (all,
    /// high, low and sliding windows of --window planes).
    #[arg(long, default_value = "all")]
    pub band: Vec<String>,
    /// Planes per window of `--band sweep` (default 8), at least 1 and at most the planes.
    #[arg(long)]
    pub window: Option<usize>,
    /// Seeds, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub seeds: Vec<u64>,
    /// Items before the query.
    #[arg(long, default_value_t = DEFAULT_LEN)]
    pub len: usize,
    /// Symbols (default: index 16, retrieval 2 x len, partial 4).
    #[arg(long)]
    pub symbols: Option<usize>,
    /// Attributes per symbol (default: index 1, the others 4).
    #[arg(long)]
    pub attributes: Option<usize>,
    /// Model width = the head's size (its planes are half of it; default 64).
    #[arg(long)]
    pub d_model: Option<usize>,
    /// Optimizer steps per run (default 1,500).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Runs trained at the same time, each on its own share of the cores (default: one per
    /// core, at most one per run). Results do not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub jobs: Option<u64>,
    /// Output directory (runs/, per_position.csv, summary.json).
    #[arg(long, default_value = "runs/canonical")]
    pub out: PathBuf,
}

/// Runs `ropelab canonical`.
pub fn run_command(args: CanonicalArgs, guard: Guard) -> Result<()> {
    super::check_out_dir(&args.out, true)?;
    ropelab_analysis::claims::files::refuse_other_tables(&args.out, "canonical")?;
    let (symbols, attributes) = default_sizes(args.task, args.len);
    let task = CanonicalTask::new(
        args.task,
        args.len,
        args.symbols.unwrap_or(symbols),
        args.attributes.unwrap_or(attributes),
    )?;
    let mut e = Experiment::new(task, vec![], args.seeds.clone());
    e.d_model = args.d_model.unwrap_or(e.d_model);
    e.steps = args.steps.unwrap_or(e.steps);
    let planes = e.d_model / 2;
    let sweeps = args.band.iter().any(|b| b == "sweep");
    anyhow::ensure!(
        sweeps || args.window.is_none(),
        "--window sets the windows of --band sweep; no --band sweep was given"
    );
    let window = args.window.unwrap_or(DEFAULT_WINDOW);
    anyhow::ensure!(
        !sweeps || (1..=planes).contains(&window),
        "--window {window}{}: a window holds between 1 and the head's {planes} planes",
        if args.window.is_none() {
            " (the default)"
        } else {
            ""
        }
    );
    let mut bands = vec![];
    for b in &args.band {
        if b == "sweep" {
            bands.extend(sweep(planes, window));
        } else {
            bands.push(b.parse::<Band>()?);
        }
    }
    super::each_once(
        "--band",
        &bands.iter().map(ToString::to_string).collect::<Vec<_>>(),
    )?;
    e.bands = bands;
    e.check()?;
    guard.check(
        "canonical",
        &e.need(&args.out, args.jobs.map(|j| j as usize))?,
    )?;
    let (high, low) = split(&e.rates(), task.len);
    println!(
        "{} on {} items ({} symbols x {} attributes): one attention-only layer, one head of {} \
         dims ({planes} planes, base {}; high = planes 0-{} turning >= pi over the context, \
         low = planes {}-{} turning < 1 rad), {} bands x {} seeds, {} steps",
        task.kind,
        task.len,
        task.symbols,
        task.attributes,
        e.d_model,
        e.base,
        high - 1,
        low,
        planes - 1,
        e.bands.len(),
        e.seeds.len(),
        e.steps
    );
    let start = Instant::now();
    let bars = Bars::default();
    let before = super::TablesBefore::take(
        &args.out,
        &["summary.json", "per_position.csv", "hand_head.json"],
    );
    let summary = run(&e, &args.out, args.jobs.map(|j| j as usize), &bars)?;
    drop(bars);
    before.note();
    let t = band_table(&summary);
    println!("{}", t.to_string().trim_end());
    if task.kind == CanonicalKind::Partial {
        print_two_angles(&summary, &args.out)?;
    }
    println!(
        "{:.0} s; wrote summary.json and per_position.csv in {}",
        start.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}

/// Partial Induction: each band's content and recency margins and the angles carrying them,
/// beside the hand-built two-angle head.
pub fn print_two_angles(summary: &[BandSummary], out: &std::path::Path) -> Result<()> {
    // The head's name and the yes/no column left, numbers right; then the angles' ratio.
    let mut columns: Vec<(&str, Align)> = std::iter::once(("head", Align::Left))
        .chain(TwoAngles::HEADER.iter().map(|&h| {
            let align = if h == "two kinds" {
                Align::Left
            } else {
                Align::Right
            };
            (h, align)
        }))
        .collect();
    columns.push(("ratio", Align::Right));
    let mut t = Table::new(&columns);
    let mut line = |name: String, a: &TwoAngles| {
        let ratio = format!("{:.1}", a.recency_mean_theta / a.content_mean_theta);
        let mut cells = vec![name];
        cells.extend(a.cells());
        cells.push(ratio);
        t.row(cells);
    };
    for b in summary {
        if let Some(a) = &b.two_angles {
            line(format!("trained, {}", b.band), a);
        }
    }
    let hand = read_hand(out)?;
    line("hand-built".into(), &TwoAngles::of(&hand.margins));
    println!(
        "plane margins at the query (logits; theta: margin-weighted mean angle, radians per \
         position; two kinds: both margins > 0 and recency on planes >= {TWO_ANGLE_RATIO}x \
         faster than content)"
    );
    println!("{}", t.to_string().trim_end());
    println!(
        "hand-built head (planes at {:.4} and {:.4} rad per position): accuracy {:.4}, content \
         plane alone {:.4}, recency plane alone {:.4}; s_pos {:.3}, s_sym {:.3}",
        hand.thetas[0],
        hand.thetas[1],
        hand.accuracy,
        hand.content_only,
        hand.recency_only,
        hand.s_pos,
        hand.s_sym
    );
    Ok(())
}

/// One line per band: centre frequency, accuracy, swap scores (means over seeds), accuracy per
/// seed.
pub fn band_table(summary: &[BandSummary]) -> Table {
    // The band and the per-seed list left, numbers right.
    let columns: Vec<(&str, Align)> = BandSummary::HEADER
        .iter()
        .map(|&h| {
            let align = if h == "band" || h == "per seed" {
                Align::Left
            } else {
                Align::Right
            };
            (h, align)
        })
        .collect();
    let mut t = Table::new(&columns);
    for b in summary {
        t.row(b.cells());
    }
    t
}
