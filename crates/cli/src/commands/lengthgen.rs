//! `ropelab lengthgen`: accuracy of a checkpoint on length-extended test inputs, overall and per
//! hop count, with every head's discrepancy at the query (main paper, Fig. 5B).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use clap::Args;
use ropelab_analysis::measure::lengthgen::{
    length_generalisation, to_csv, LengthOptions, LengthRow, PAPER_EXTRAS,
};
use ropelab_io::{Align::Left, Align::Right, Table};
use ropelab_train::{RunDir, EVAL_MEMORY};

use super::{progress, Guard};
use crate::output::{parse_memory_mib, peak_rss_mib, write_atomic};

/// Arguments of `ropelab lengthgen`.
#[derive(Debug, Args)]
pub struct LengthgenArgs {
    /// Run directory written by `ropelab train`.
    #[arg(long)]
    pub run: PathBuf,
    /// Checkpoint step (default: the latest).
    #[arg(long)]
    pub step: Option<usize>,
    /// Extra target-type tokens inserted before the target window, comma-separated
    /// (non-negative whole numbers; 0 is the training length).
    #[arg(long, default_value_t = Extras(PAPER_EXTRAS.to_vec()), value_parser = parse_extras)]
    pub extras: Extras,
    /// Test samples per length (default: the run's test split).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: Option<u64>,
    /// Memory budget of one forward pass in MiB: samples run in batches that fit it, so peak
    /// memory does not grow with --n.
    #[arg(long = "memory-mb", default_value_t = EVAL_MEMORY >> 20, value_parser = parse_memory_mib)]
    pub memory: usize,
    /// CSV output (default: RUN/lengthgen.csv).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// A list of extension lengths.
#[derive(Debug, Clone, PartialEq)]
pub struct Extras(pub Vec<usize>);

impl std::fmt::Display for Extras {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cells: Vec<String> = self.0.iter().map(usize::to_string).collect();
        f.write_str(&cells.join(","))
    }
}

/// Parses `0,16,32`: non-negative whole numbers, at least one, each at most 1,000,000.
pub fn parse_extras(s: &str) -> Result<Extras, String> {
    let mut out = vec![];
    for part in s.split(',') {
        let part = part.trim();
        match part.parse::<usize>() {
            Ok(v) if v <= 1_000_000 => out.push(v),
            Ok(v) => return Err(format!("extra {v} is too long (at most 1000000)")),
            Err(_) => {
                return Err(format!(
                    "{part:?} is not an extension length: give non-negative whole numbers, \
                     comma-separated (e.g. 0,16,32)"
                ))
            }
        }
    }
    if !out.windows(2).all(|w| w[0] < w[1]) {
        return Err(format!(
            "extras {out:?} must be ascending, each once (a repeated length repeats the work)"
        ));
    }
    Ok(Extras(out))
}

/// Runs `ropelab lengthgen`.
pub fn run(args: LengthgenArgs, guard: Guard) -> Result<()> {
    // The bound every measurement shares, before the estimate speaks of the work.
    if let Some(n) = args.n {
        let most = ropelab_train::MAX_TEST_SAMPLES;
        anyhow::ensure!(
            n <= most as u64,
            "the length test asks for {n} test samples, more than ropelab measures ({most} at \
             most)"
        );
    }
    let options = LengthOptions {
        extras: args.extras.0.clone(),
        samples: args.n.map(|n| n as usize),
        step: args.step,
        memory: args.memory,
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.run.join("lengthgen.csv"));
    ropelab_io::refuse_owned(&args.run, &out, None)?;
    if let Ok((_, config)) = RunDir::open(&args.run) {
        guard.check("lengthgen", &options.need(&config))?;
    }
    let start = Instant::now();
    let rows = measure_with_progress(&args.run, &options)?;
    let seconds = start.elapsed().as_secs_f64();
    println!("{}", table(&rows));
    write_atomic(&out, to_csv(&rows)?.as_bytes())?;
    let samples: usize = rows.iter().map(|r| r.n).sum();
    let tokens: usize = rows.iter().map(|r| r.n * r.length).sum();
    print!(
        "{} lengths in {seconds:.1} s ({:.2} lengths/s, {:.0} sequences/s, {:.0} tokens/s)",
        rows.len(),
        rows.len() as f64 / seconds,
        samples as f64 / seconds,
        tokens as f64 / seconds
    );
    match peak_rss_mib() {
        Some(peak) => println!("; peak RSS {peak:.1} MiB"),
        None => println!(),
    }
    println!("wrote {}", out.display());
    Ok(())
}

/// Measures with a progress bar on standard error.
pub fn measure_with_progress(run: &Path, options: &LengthOptions) -> Result<Vec<LengthRow>> {
    let bar = progress(options.extras.len() as u64, "lengthgen");
    let rows = length_generalisation(run, options, &Device::Cpu, |done, _| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    Ok(rows)
}

/// Accuracy per length and hop, and each layer's mean discrepancy over its heads.
pub fn table(rows: &[LengthRow]) -> String {
    let mut table = Table::new(&[
        ("extra", Right),
        ("length", Right),
        ("n", Right),
        ("accuracy", Right),
        ("per hop", Left),
        ("seconds", Right),
        ("discrepancy per layer", Left),
    ]);
    for r in rows {
        let hops: Vec<String> = r
            .per_hop
            .iter()
            .map(|(h, a)| format!("{h}:{a:.3}"))
            .collect();
        let margins: Vec<String> = r.heads.iter().map(|m| format!("{:.2}", m.margin)).collect();
        table.row([
            r.extra.to_string(),
            r.length.to_string(),
            r.n.to_string(),
            format!("{:.4}", r.accuracy),
            hops.join(" "),
            // Rows read back from lengthgen.csv carry no time (the study's training table has
            // each model's total).
            if r.seconds > 0.0 {
                format!("{:.2}", r.seconds)
            } else {
                "-".into()
            },
            margins.join(" "),
        ]);
    }
    table.to_string().trim_end().to_owned()
}
