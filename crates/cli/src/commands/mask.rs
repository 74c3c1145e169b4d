//! `ropelab mask`: a trained number/letter model evaluated with some layers restricted to a band
//! of rotary planes; the accuracy drop per hop count (docs/canonical.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use crate::output::write_csv;
use anyhow::Result;
use candle_core::Device;
use clap::Args;
use ropelab_analysis::measure::band::Band;
use ropelab_analysis::measure::mask::{
    layer_groups, mask_run, MaskOptions, MaskRow, DEFAULT_BANDS,
};
use ropelab_io::resources::bytes;
use ropelab_io::{Align::Left, Align::Right, Table};
use ropelab_train::{forward_flops, inference_need, RunDir, EVAL_MEMORY};

use super::{progress, Guard};
use crate::output::parse_memory_mib;

/// Arguments of `ropelab mask`.
#[derive(Debug, Args)]
pub struct MaskArgs {
    /// Run directory written by `ropelab train` (number or letter task).
    #[arg(long)]
    pub run: PathBuf,
    /// Checkpoint step (default: the latest).
    #[arg(long)]
    pub step: Option<usize>,
    /// Layers masked together, e.g. `1-3` or `0,4`; `each` (every layer alone, the default) or
    /// `all`. Repeat for several groups.
    #[arg(long = "layers")]
    pub layers: Vec<String>,
    /// Band the layers keep: all, high, low, planes=LIST, or no-BAND (every plane but those;
    /// docs/canonical.md). Repeat for several (default: no-high and no-low).
    #[arg(long = "band")]
    pub bands: Vec<String>,
    /// Test samples (default: the run's test split).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: Option<u64>,
    /// Memory budget of one forward pass in MiB.
    #[arg(long = "memory-mb", default_value_t = EVAL_MEMORY >> 20, value_parser = parse_memory_mib)]
    pub memory: usize,
    /// CSV output (default: RUN/mask.csv).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `ropelab mask`.
pub fn run(args: MaskArgs, guard: Guard) -> Result<()> {
    let (_, config) = RunDir::open(&args.run)?;
    let specs = if args.layers.is_empty() {
        vec!["each".to_string()]
    } else {
        args.layers.clone()
    };
    let mut groups = vec![];
    for s in &specs {
        groups.extend(layer_groups(s, config.model.n_layers)?);
    }
    let bands: Vec<Band> = if args.bands.is_empty() {
        DEFAULT_BANDS
            .iter()
            .map(|b| b.parse())
            .collect::<Result<_, _>>()?
    } else {
        args.bands
            .iter()
            .map(|b| b.parse())
            .collect::<Result<_, _>>()?
    };
    super::each_once("--layers", &groups)?;
    super::each_once(
        "--band",
        &bands.iter().map(ToString::to_string).collect::<Vec<_>>(),
    )?;
    // Checked before the work: another run's file is refused (seventh pass, p3).
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.run.join("mask.csv"));
    ropelab_io::refuse_owned(&args.run, &out, None)?;
    let n = config
        .test_samples(args.n.map_or(config.data.test, |n| n as usize), "--n")
        .map_err(anyhow::Error::msg)?;
    let passes = bytes(&[groups.len(), bands.len()]).saturating_add(1);
    let need = inference_need(&config.model, config.layout.core_len(), args.memory).compute(
        forward_flops(&config.model, n, config.layout.core_len()).saturating_mul(passes),
        format!("{passes} evaluations of {n} samples"),
    );
    guard.check("mask", &need)?;
    let options = MaskOptions {
        step: args.step,
        groups,
        bands,
        n: args.n.map(|n| n as usize),
        memory: args.memory,
    };
    let bar = progress(
        (options.groups.len() * options.bands.len() + 1) as u64,
        "mask",
    );
    let start = Instant::now();
    let report = mask_run(&args.run, &options, &Device::Cpu, |done, _| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    let hops: Vec<String> = report
        .baseline
        .per_hop
        .iter()
        .map(|(h, a)| format!("{h}:{a:.3}"))
        .collect();
    println!(
        "step {}, {} test samples of {} tokens; unmasked accuracy {:.4} ({})",
        report.step,
        report.baseline.n,
        report.seq_len,
        report.baseline.accuracy,
        hops.join(" ")
    );
    print!("{}", table(&report.rows));
    write_csv(&out, &report.rows)?;
    println!(
        "{} evaluations in {:.1} s; wrote {}",
        options.groups.len() * options.bands.len() + 1,
        start.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// One line per layer group and band: planes kept, accuracy, and the drop per hop count.
pub fn table(rows: &[MaskRow]) -> Table {
    let mut table = Table::new(&[
        ("layers", Left),
        ("band", Left),
        ("planes", Right),
        ("accuracy", Right),
        ("drop", Right),
        ("drop per hop", Left),
    ]);
    let mut lines: Vec<(&MaskRow, BTreeMap<&str, f64>)> = vec![];
    for r in rows {
        if r.hop == "all" {
            lines.push((r, BTreeMap::new()));
        } else if let Some(last) = lines.last_mut() {
            last.1.insert(&r.hop, r.drop);
        }
    }
    for (r, drops) in lines {
        let drops: Vec<String> = drops.iter().map(|(h, d)| format!("{h}:{d:+.3}")).collect();
        table.row([
            r.layers.clone(),
            r.band.clone(),
            format!("{}/{}", r.planes_kept, r.planes_total),
            format!("{:.4}", r.accuracy),
            format!("{:+.4}", r.drop),
            drops.join(" "),
        ]);
    }
    table
}
