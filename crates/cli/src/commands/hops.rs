//! `ropelab hops`: the hop map of a number-task model (docs/multihead.md, "Hop map"): per layer
//! and head, the attention mass on the position j hops along the query position's own chain
//! (from the last token and from every position), the accuracy with that edge knocked out, and
//! the verdict: which layer reads which hop, and whether a layer composes hops.

use std::path::PathBuf;
use std::time::Instant;

use crate::output::write_csv;
use anyhow::Result;
use candle_core::Device;
use clap::Args;
use ropelab_analysis::measure::hop_chain::{HopChain, Route};
use ropelab_analysis::measure::hop_route::{HopRoute, CARRY_MASS};
use ropelab_analysis::measure::hops::{
    hop_map, hop_run, ledger_key, HopOptions, HopRow, Routed, Source, DEFAULT_SAMPLES, MAX_HOP,
};
use ropelab_io::resources::bytes;
use ropelab_io::{Align::Left, Align::Right, Ledger, Table};
use ropelab_tasks::{Dataset, Layout, Split, Task, TaskKind};
use ropelab_train::{forward_flops, inference_need, RunDir, EVAL_MEMORY};

use super::{progress, Guard};
use crate::output::parse_memory_mib;

/// Arguments of `ropelab hops`.
#[derive(Debug, Args)]
pub struct HopsArgs {
    /// Run directory of a number-task model (`ropelab train`, or `seed-S/number` of a study).
    #[arg(long, required_unless_present = "hand", conflicts_with = "hand")]
    pub run: Option<PathBuf>,
    /// Map a hand-built model with a known route instead (the verdict's check, on the default
    /// number task): `one-hop` (layer l reads hop l+1) or `doubling` (hops 1, 2, 4).
    #[arg(long, value_enum)]
    pub hand: Option<HandRoute>,
    /// Checkpoint step (default: the latest).
    #[arg(long, conflicts_with = "hand")]
    pub step: Option<usize>,
    /// Test samples.
    #[arg(long, default_value_t = DEFAULT_SAMPLES as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// Memory budget of one forward pass in MiB.
    #[arg(long = "memory-mb", default_value_t = EVAL_MEMORY >> 20, value_parser = parse_memory_mib)]
    pub memory: usize,
    /// CSV output (default: RUN/hops.csv; `hops-<route>.csv` here with --hand).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The hand-built routes of `--hand`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HandRoute {
    /// One hop per layer: layer l reads the token at hop l+1 (4 layers).
    OneHop,
    /// Pointer doubling: layer l reads the state of hop 2^l (3 layers).
    Doubling,
}

/// Runs `ropelab hops`.
pub fn run(args: HopsArgs, guard: Guard) -> Result<()> {
    let Some(run_dir) = args.run.clone() else {
        return hand(&args, guard);
    };
    let (_, config) = RunDir::open(&run_dir)?;
    super::softmax_attention(&config, &run_dir, "a hop map's masses")?;
    let n = args.n as usize;
    let m = &config.model;
    let passes = bytes(&[m.n_layers, m.n_heads, 2 * MAX_HOP]).saturating_add(1);
    let need = inference_need(m, config.layout.core_len(), args.memory)
        .compute(
            forward_flops(m, n, config.layout.core_len()).saturating_mul(passes),
            format!("{passes} passes over {n} samples"),
        )
        .memory(
            bytes(&[n, config.layout.core_len(), 16]),
            format!("the ids of {n} samples"),
        );
    guard.check("hops", &need)?;
    let options = HopOptions {
        step: args.step,
        n,
        memory: args.memory,
    };
    let bar = progress(passes - 1, "hops");
    let start = Instant::now();
    let report = hop_run(&run_dir, &options, &Device::Cpu, |done, _| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    // A hop no sample reaches has no mass to give: its cells would be empty and the verdict
    // would speak of hops never measured (seventeenth pass, SILENT-5).
    if let Some(r) = report.rows.iter().find(|r| r.edges == 0) {
        anyhow::bail!(
            "--n {n}: no edge of hop {} was measured (none of the first {n} test samples has \
             {} hops): give a larger --n; nothing was written",
            r.j,
            r.j
        );
    }
    let out = args.out.unwrap_or_else(|| run_dir.join("hops.csv"));
    // A study job's hop map (listed in the run's ledger) is its verdicts' input: not replaced
    // (refused before anything is printed).
    // Each row names the checkpoint and the run it was measured on.
    let text = ropelab_io::to_csv_stamped(&report.rows, report.step, &config.identity())?;
    ropelab_io::refuse_owned(&run_dir, &out, Some(text.as_bytes()))?;
    let hops: Vec<String> = report
        .baseline
        .per_hop
        .iter()
        .map(|(h, a)| format!("{h}:{a:.3}"))
        .collect();
    println!(
        "step {}, {} test samples; accuracy {:.4} ({})",
        report.step,
        report.baseline.n,
        report.baseline.accuracy,
        hops.join(" ")
    );
    print!("{}", table(&report.rows));
    println!(
        "verdict: {}",
        HopRoute::of(&report.rows, CARRY_MASS).summary()
    );
    // In a measured run the map is recorded in its ledger, under the key a study job uses for
    // the same map, so the run's report and verdicts read it (and a study reuses it).
    let recorded = out == run_dir.join("hops.csv") && Ledger::load(&run_dir)?.is_some();
    let key = ledger_key(report.step, n);
    if recorded {
        Ledger::begin(&run_dir, "hops.csv", &key)?;
    }
    crate::output::write_atomic(&out, text.as_bytes())?;
    if recorded {
        Ledger::finish(&run_dir, "hops.csv", &key)?;
    }
    println!(
        "{} knock-outs in {:.1} s; wrote {}",
        report.rows.len(),
        start.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// `ropelab hops --hand ROUTE`: the map of a hand-built chain on the default number task.
fn hand(args: &HopsArgs, guard: Guard) -> Result<()> {
    let (route, name) = match args.hand {
        Some(HandRoute::Doubling) => (Route::Doubling, "doubling"),
        _ => (Route::OneHopPerLayer, "one-hop"),
    };
    let task = Task::new(TaskKind::Number, Layout::default())?;
    // The hand-built chain has no weights: each pass over a sample attends every pair of its
    // tokens in each of its (at most MAX_HOP) layers, a few operations per pair.
    let (n, len) = (args.n as usize, task.layout().core_len());
    let passes = bytes(&[MAX_HOP, 2 * MAX_HOP]).saturating_add(1);
    let need = ropelab_io::Need::new()
        .compute(
            bytes(&[n, len, len, MAX_HOP, 16]).saturating_mul(passes),
            format!("{passes} passes over {n} samples"),
        )
        .memory(bytes(&[n, len, 16]), format!("the ids of {n} samples"));
    guard.check("hops --hand", &need)?;
    let data = Dataset::new(task, 0, Split::Test, args.n as usize, 0)?;
    let chain = HopChain::new(route, data.task().vocab(), MAX_HOP)?;
    let start = Instant::now();
    let (baseline, rows) = hop_map(&chain, &data, args.memory, |_, _| {})?;
    println!(
        "hand-built {name} chain ({} layers), {} test samples of the default number task; \
         accuracy {:.4}",
        Routed::layers(&chain),
        baseline.n,
        baseline.accuracy
    );
    print!("{}", table(&rows));
    println!("verdict: {}", HopRoute::of(&rows, CARRY_MASS).summary());
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("hops-{name}.csv")));
    write_csv(&out, &rows)?;
    println!(
        "{} knock-outs in {:.1} s; wrote {}",
        rows.len(),
        start.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// One line per layer, head and source: the mass on hop j and the accuracy with it knocked out.
pub fn table(rows: &[HopRow]) -> Table {
    let mut cols = vec![("layer", Right), ("head", Right), ("from", Left)];
    let names: Vec<(String, String)> = (1..=MAX_HOP)
        .map(|j| (format!("mass j={j}"), format!("ko j={j}")))
        .collect();
    for (a, _) in &names {
        cols.push((a.as_str(), Right));
    }
    for (_, b) in &names {
        cols.push((b.as_str(), Right));
    }
    let mut table = Table::new(&cols);
    for chunk in rows.chunks(MAX_HOP) {
        let r = &chunk[0];
        let mut cells = vec![
            r.layer.to_string(),
            r.head.to_string(),
            match r.source {
                Source::Last => "last".into(),
                Source::Every => "every".into(),
            },
        ];
        cells.extend(chunk.iter().map(|r| format!("{:.3}", r.mass)));
        cells.extend(chunk.iter().map(|r| format!("{:.3}", r.knockout_accuracy)));
        table.row(cells);
    }
    table
}
