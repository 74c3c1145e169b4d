//! `ropelab probe`: linear probes on a number-task model's residual stream (docs/multihead.md,
//! "Where each hop lives"): after each layer, can the token at hop_j, or its distance, be read at every
//! position whose own chain reaches j hops; and the verdict that follows (one hop per layer,
//! composition, or undetermined).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use clap::Args;
use ropelab_analysis::measure::hops::{Source, MAX_HOP};
use ropelab_analysis::measure::keys;
use ropelab_analysis::measure::layer_sets::{
    layer_sets_run, LayerSetRoute, LayerSetRow, ANSWER_ACCURACY, DEFAULT_SAMPLES as SET_SAMPLES,
    LAYER_SETS_FILE,
};
use ropelab_analysis::measure::probe::{
    probe_run, stream_name, ProbeRoute, ProbeRow, ProbeVerdict, Target, DEFAULT_SAMPLES,
    PROBES_FILE, READ_ACCURACY,
};
use ropelab_io::resources::bytes;
use ropelab_io::{Align::Left, Align::Right, Table};
use ropelab_train::{forward_flops, inference_need, RunDir, EVAL_MEMORY};

use super::{progress, write_run_csv, Guard};
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
    /// Test samples of each joint layer knock-out (every set of fewer moving layers than hops).
    #[arg(long = "set-samples", default_value_t = SET_SAMPLES as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub set_samples: u64,
    /// CSV output of the layer sets (default: RUN/layer_sets.csv).
    #[arg(long = "sets-out")]
    pub sets_out: Option<PathBuf>,
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
    // The probes hold every sample's residual stream after each layer; the ids come first.
    let len = config.layout.core_len();
    let need = need
        .memory(
            bytes(&[n, len, m.n_layers + 1, m.d_model, 4]),
            format!("the residual streams of {n} samples"),
        )
        .memory(bytes(&[n, len, 16]), format!("the ids of {n} samples"));
    // The layer sets: one forward over --set-samples samples per set (tenth pass, S3).
    let sets = args.set_samples as usize;
    let max_hop = config.layout.hops.iter().copied().max().unwrap_or(1);
    let count = ropelab_analysis::measure::layer_sets::set_count(m.n_layers, max_hop);
    let need = need
        .compute(
            forward_flops(m, sets, len).saturating_mul(count as u64),
            format!("{count} layer sets over {sets} samples each"),
        )
        .memory(
            bytes(&[sets, len, 16]),
            format!("the ids of {sets} layer-set samples"),
        );
    guard.check("probe", &need)?;
    // The two tables go to two files.
    let probes_out = args
        .out
        .clone()
        .unwrap_or_else(|| args.run.join(PROBES_FILE));
    let sets_out = args
        .sets_out
        .clone()
        .unwrap_or_else(|| args.run.join(LAYER_SETS_FILE));
    anyhow::ensure!(
        std::path::absolute(&probes_out)? != std::path::absolute(&sets_out)?,
        "--out and --sets-out both name {}: the probes and the layer sets are two tables",
        probes_out.display()
    );
    // A target that is not the run's own table is checked now, before the computation: a file
    // ropelab keeps or another ledger lists is refused whatever would be written.
    for (path, own) in [(&probes_out, PROBES_FILE), (&sets_out, LAYER_SETS_FILE)] {
        if std::path::absolute(path)? != std::path::absolute(args.run.join(own))? {
            ropelab_io::refuse_listed(path, None)?;
        }
    }
    // The run's own tables, measured by a study with other settings, are refused now too, not
    // after the computation (fifteenth pass).
    if let Ok(latest) = RunDir::new(&args.run).latest_checkpoint() {
        super::refuse_measured(
            &args.run,
            &probes_out,
            PROBES_FILE,
            &keys::probes(latest, n),
        )?;
        super::refuse_measured(
            &args.run,
            &sets_out,
            LAYER_SETS_FILE,
            &keys::layer_sets(latest, sets),
        )?;
    }

    let bar = progress(m.n_layers as u64 + 1, "probe");
    let start = Instant::now();
    let (step_probes, rows) = probe_run(&args.run, n, args.memory, &Device::Cpu, |done, _| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    println!(
        "step {step_probes}, {n} test samples (half fit, half score); a probe reads when its held-out \
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
    let probes_seconds = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let bar = progress(0, "layer sets");
    let (step, set_rows) = layer_sets_run(&args.run, sets, args.memory, &Device::Cpu, |d, t| {
        bar.set_length(t as u64);
        bar.set_position(d as u64)
    })?;
    bar.finish_and_clear();
    println!(
        "layer sets ({sets} test samples each; the other layers' attention held on each \
         query's own position): accuracy per hop count"
    );
    print!("{}", sets_table(&set_rows));
    println!("{}", LayerSetRoute::of(&set_rows, ANSWER_ACCURACY).text());
    // Both tables are checked before either is written: a refused --sets-out leaves no --out.
    ropelab_io::refuse_owned(
        &args.run,
        &sets_out,
        Some(ropelab_io::to_csv_stamped(&set_rows, step, &config.identity())?.as_bytes()),
    )?;
    write_run_csv(
        &args.run,
        &probes_out,
        PROBES_FILE,
        &keys::probes(step_probes, n),
        step_probes,
        &rows,
    )?;
    println!(
        "{} probes in {probes_seconds:.1} s; wrote {}",
        rows.len(),
        probes_out.display()
    );
    let out = sets_out;
    write_run_csv(
        &args.run,
        &out,
        LAYER_SETS_FILE,
        &keys::layer_sets(step, sets),
        step,
        &set_rows,
    )?;
    println!(
        "{} sets in {:.1} s; wrote {}",
        set_rows.len(),
        start.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// One line per set of moving layers: its accuracy per hop count.
pub fn sets_table(rows: &[LayerSetRow]) -> Table {
    let hops: Vec<usize> = {
        let mut h: Vec<usize> = rows.iter().map(|r| r.hop).collect();
        h.sort_unstable();
        h.dedup();
        h
    };
    let names: Vec<String> = hops.iter().map(|j| format!("{j} hops")).collect();
    let mut cols = vec![("moving layers", Left)];
    cols.extend(names.iter().map(|n| (n.as_str(), Right)));
    let mut table = Table::new(&cols);
    let mut sets: Vec<&str> = vec![];
    for r in rows {
        if !sets.contains(&r.moving.as_str()) {
            sets.push(&r.moving);
        }
    }
    for set in sets {
        let mut cells = vec![set.to_string()];
        cells.extend(hops.iter().map(|&j| {
            rows.iter()
                .find(|r| r.moving == set && r.hop == j)
                .map_or_else(|| "-".into(), |r| format!("{:.3}", r.accuracy))
        }));
        table.row(cells);
    }
    table
}

/// A probe verdict in words.
pub fn verdict_text(v: &ProbeVerdict) -> String {
    match v {
        ProbeVerdict::Composes(b) => {
            let (what, earliest) = match b.target {
                Target::Token => ("the token at", b.j),
                Target::Distance => ("the distance to", b.j - 1),
            };
            format!(
                "composes: {what} hop {} is read {} at {:.3} (its control, what one hop per \
                 layer knows there: {:.3}), before the {earliest} layer(s) one hop per layer \
                 needs",
                b.j,
                stream_name(b.stream),
                b.accuracy,
                b.control
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
