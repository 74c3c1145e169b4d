//! `ropelab probe`: linear probes on a number-task model's residual stream (docs/multihead.md,
//! "Probes"): after each layer, can the token at hop_j, or its distance, be read at every
//! position whose own chain reaches j hops; and the verdict that follows (one hop per layer,
//! composition, or undetermined).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::Device;
use clap::Args;
use ropelab_analysis::measure::hops::{Source, MAX_HOP};
use ropelab_analysis::measure::probe::{
    probe_run, ProbeRoute, ProbeRow, ProbeVerdict, Target, DEFAULT_SAMPLES, READ_ACCURACY,
};
use ropelab_io::{write_csv, Align::Left, Align::Right, Table};
use ropelab_train::{forward_flops, inference_need, RunDir, EVAL_MEMORY};

use super::{progress, Guard};
use crate::output::parse_memory_mib;

/// Arguments of `ropelab probe`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Run directory of a number-task model (`ropelab train`, or `seed-S/number` of a study).
    #[arg(long)]
    pub run: PathBuf,
    /// Test samples (the first half fits the probes, the second half scores them).
    #[arg(long, default_value_t = DEFAULT_SAMPLES as u64, value_parser = clap::value_parser!(u64).range(2..))]
    pub n: u64,
    /// Memory budget of one forward pass in MiB.
    #[arg(long = "memory-mb", default_value_t = EVAL_MEMORY >> 20, value_parser = parse_memory_mib)]
    pub memory: usize,
    /// CSV output (default: RUN/probes.csv).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `ropelab probe`.
pub fn run(args: ProbeArgs, guard: Guard) -> Result<()> {
    let (_, config) = RunDir::open(&args.run)?;
    let n = args.n as usize;
    let m = &config.model;
    let need = inference_need(m, config.layout.core_len(), args.memory).compute(
        forward_flops(m, n, config.layout.core_len()),
        format!("one pass over {n} samples"),
    );
    guard.check("probe", &need)?;
    let bar = progress(m.n_layers as u64 + 1, "probe");
    let start = Instant::now();
    let (step, rows) = probe_run(&args.run, n, args.memory, &Device::Cpu, |done, _| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    println!(
        "step {step}, {n} test samples (half fit, half score); a probe reads when its held-out \
         accuracy is >= {READ_ACCURACY} and >= chance + 0.1"
    );
    print!("{}", table(&rows));
    let max_hop = config.layout.hops.iter().copied().max().unwrap_or(MAX_HOP);
    for (from, what) in [
        (Source::Last, "from the last token"),
        (Source::Every, "from every position"),
    ] {
        let route = ProbeRoute::of(&rows, from, READ_ACCURACY);
        println!(
            "{what}: {}; verdict: {}",
            route.text(),
            verdict_text(&route.verdict(max_hop))
        );
    }
    let out = args.out.unwrap_or_else(|| args.run.join("probes.csv"));
    write_csv(&out, &rows).with_context(|| format!("cannot write {}", out.display()))?;
    println!(
        "{} probes in {:.1} s; wrote {}",
        rows.len(),
        start.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// A probe verdict in words.
pub fn verdict_text(v: &ProbeVerdict) -> String {
    match v {
        ProbeVerdict::Beyond(b) => {
            let (what, earliest) = match b.target {
                Target::Token => ("the token at", b.j),
                Target::Distance => ("the distance to", b.j - 1),
            };
            let at = if b.stream == 0 {
                "in the embeddings".to_string()
            } else {
                format!("after layer {}", b.stream - 1)
            };
            format!(
                "beyond one hop per layer: {what} hop {} is read {at} at {:.3} (its control, \
                 what one hop per layer knows there: {:.3}), before the {earliest} layer(s) one \
                 hop per layer needs: composition, or a route other than the chain (attention spread over \
                 several positions)",
                b.j, b.accuracy, b.control
            )
        }
        ProbeVerdict::OneHopPerLayer => {
            "one hop per layer: every hop's token is read, none before one hop per layer could \
             read it"
                .into()
        }
        ProbeVerdict::Undetermined(why) => format!("undetermined: {why}"),
    }
}

/// One line per stream and target: the held-out accuracy per hop count, with chance.
pub fn table(rows: &[ProbeRow]) -> Table {
    let names: Vec<String> = (1..=MAX_HOP).map(|j| format!("j={j}")).collect();
    let mut cols = vec![("from", Left), ("stream", Left), ("target", Left)];
    cols.extend(names.iter().map(|n| (n.as_str(), Right)));
    cols.push(("chance (j=1..)", Left));
    cols.push(("control (j=1..)", Left));
    let mut table = Table::new(&cols);
    let streams = rows.iter().map(|r| r.stream).max().map_or(0, |s| s + 1);
    for from in Source::ALL {
        for s in 0..streams {
            for target in Target::ALL {
                let of: Vec<Option<&ProbeRow>> = (1..=MAX_HOP)
                    .map(|j| {
                        rows.iter().find(|r| {
                            r.source == from && r.stream == s && r.target == target && r.j == j
                        })
                    })
                    .collect();
                if of.iter().all(Option::is_none) {
                    continue;
                }
                let mut cells = vec![
                    match from {
                        Source::Last => "last".to_string(),
                        Source::Every => "every".to_string(),
                    },
                    if s == 0 {
                        "embeddings".to_string()
                    } else {
                        format!("after layer {}", s - 1)
                    },
                    match target {
                        Target::Token => "token".into(),
                        Target::Distance => "distance".into(),
                    },
                ];
                cells.extend(
                    of.iter()
                        .map(|r| r.map_or_else(|| "-".into(), |r| format!("{:.3}", r.accuracy))),
                );
                cells.push(
                    of.iter()
                        .map(|r| r.map_or_else(|| "-".into(), |r| format!("{:.2}", r.chance)))
                        .collect::<Vec<_>>()
                        .join(" "),
                );
                cells.push(
                    of.iter()
                        .map(|r| match r.and_then(|r| r.control) {
                            Some(c) => format!("{c:.2}"),
                            None => "-".into(),
                        })
                        .collect::<Vec<_>>()
                        .join(" "),
                );
                table.row(cells);
            }
        }
    }
    table
}
