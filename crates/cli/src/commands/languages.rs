//! `ropelab languages`: the expressivity experiment (docs/languages.md): EOS classifiers trained
//! on formal languages at lengths up to 40 with each position encoding, tested at longer
//! lengths; N* per run in `DIR/nstar.csv`, accuracy per length in `DIR/accuracy.csv`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use ropelab_analysis::measure::languages::offset_table_cells;
use ropelab_analysis::measure::modular::strongest_per_run;
use ropelab_io::{Align, Align::Left, Align::Right, Table};
use ropelab_study::languages::{
    run, Experiment, ModHeadRow, NStarRow, OffsetRow, Pe, Protocol, MOD_THRESHOLD,
};
use ropelab_tasks::Language;

use super::{Bars, Guard};

/// Arguments of `ropelab languages`.
#[derive(Debug, Args)]
pub struct LanguagesArgs {
    /// Languages, comma-separated: aa-star, ab-star, a-sigma, sigma-a, sigma-ab-sigma, parity
    /// (default: the protocol's).
    #[arg(long = "lang", value_delimiter = ',', value_parser = |s: &str| s.parse::<Language>().map_err(|e| e.to_string()))]
    pub languages: Option<Vec<Language>>,
    /// Position encodings, comma-separated: nope, rope:BASE, sipe:BASE, rope-periodic,
    /// sipe-periodic (default: the protocol's).
    #[arg(long, value_delimiter = ',', value_parser = |s: &str| s.parse::<Pe>().map_err(|e| e.to_string()))]
    pub pe: Option<Vec<Pe>>,
    /// Seeds, comma-separated (default: the protocol's).
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Peak learning rates, comma-separated (default: the protocol's).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub lrs: Option<Vec<f64>>,
    /// `quick` (about 30 minutes on 2 cores) or `paper` (cluster scale).
    #[arg(long, default_value = "quick", value_parser = |s: &str| s.parse::<Protocol>().map_err(|e| e.to_string()))]
    pub protocol: Protocol,
    /// Optimizer steps per run (default: the protocol's).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: Option<u64>,
    /// Test lengths beyond training, comma-separated numbers or ranges `A-B` (default: the
    /// protocol's).
    #[arg(long, value_parser = parse_lengths)]
    pub test_lengths: Option<Lengths>,
    /// Strings per tested length (default: the protocol's).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub per_length: Option<u64>,
    /// Runs trained at the same time, each on its own share of the cores (default: one per
    /// core, at most one per run). Results do not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub jobs: Option<u64>,
    /// Output directory (runs/, accuracy.csv, nstar.csv, heads.csv, offset.csv).
    #[arg(long, default_value = "runs/languages")]
    pub out: PathBuf,
}

/// Runs `ropelab languages`.
pub fn run_command(args: LanguagesArgs, guard: Guard) -> Result<()> {
    super::check_out_dir(&args.out, true)?;
    ropelab_analysis::claims::files::refuse_other_tables(&args.out, "languages")?;
    let mut e = Experiment::new(args.protocol, args.languages, args.pe, args.seeds, args.lrs)?;
    if let Some(s) = args.steps {
        e.steps = s as usize;
    }
    if let Some(n) = args.per_length {
        e.per_length = n as usize;
    }
    if let Some(Lengths(lengths)) = args.test_lengths {
        e.test_lengths = lengths;
    }
    e.check()?;
    let grid = e.grid();
    let longest = e.test_lengths.last().copied().unwrap_or(e.train_lengths[1]) + 2;
    guard.check(
        "languages",
        &e.need(&args.out, args.jobs.map(|j| j as usize)),
    )?;
    println!(
        "{} runs ({} languages x {} encodings x {} seeds x {} learning rates): 5 layers x 8 heads, \
         d_model 64, {} steps of {} strings at lengths {}-{}; tested at {} lengths up to {} with \
         {} strings each",
        grid.len(),
        e.languages.len(),
        e.pes.len(),
        e.seeds.len(),
        e.lrs.len(),
        e.steps,
        e.batch,
        e.train_lengths[0],
        e.train_lengths[1],
        e.test_lengths.len(),
        longest - 2,
        e.per_length
    );
    let start = Instant::now();
    let bars = Bars::default();
    let before = super::TablesBefore::take(
        &args.out,
        &["accuracy.csv", "nstar.csv", "heads.csv", "offset.csv"],
    );
    let outcome = run(&e, &args.out, args.jobs.map(|j| j as usize), &bars)?;
    drop(bars);
    before.note();
    println!("{}\n", table(&outcome.nstar));
    println!(
        "The strongest MOD_m^r head of each run (contrast: mean BOS weight at positions i = r \
         mod m minus at the others; a MOD head reaches {MOD_THRESHOLD} on both the training \
         positions and those beyond):"
    );
    println!("{}\n", heads_table(&strongest_per_run(&outcome.heads)));
    if !outcome.offsets.is_empty() {
        println!(
            "Conventional RoPE: N* beside the f32-certified range of a fixed-offset head on the \
             run's best plane (`ropelab theory offset-range`):"
        );
        println!("{}\n", offsets_table(&outcome.offsets));
    }
    println!(
        "{:.0} s; wrote nstar.csv, accuracy.csv, heads.csv and offset.csv in {}",
        start.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}

/// A list of string lengths.
#[derive(Debug, Clone, PartialEq)]
pub struct Lengths(pub Vec<usize>);

/// Parses `41-120,140,500`: whole numbers and inclusive ranges, at most 100,000 each, sorted;
/// a length given twice (repeated, or in overlapping ranges) is refused.
fn parse_lengths(s: &str) -> Result<Lengths, String> {
    let number = |t: &str| -> Result<usize, String> {
        let n: usize = t
            .trim()
            .parse()
            .map_err(|_| format!("{t:?} is not a length (a whole number)"))?;
        if n > 100_000 {
            return Err(format!("length {n} is longer than 100,000"));
        }
        Ok(n)
    };
    let mut out = vec![];
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (number(a)?, number(b)?);
                if a > b {
                    return Err(format!("range {part:?} runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(number(part)?),
        }
    }
    out.sort_unstable();
    if let Some(w) = out.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!(
            "length {} is given twice (a repeated value or overlapping ranges); give each \
             length once",
            w[0]
        ));
    }
    Ok(Lengths(out))
}

/// N* and test accuracy per run.
fn table(rows: &[NStarRow]) -> String {
    // Names and encodings left, numbers right.
    let columns: Vec<(&str, Align)> = NStarRow::HEADER
        .iter()
        .enumerate()
        .map(|(i, &h)| (h, if i < 2 { Left } else { Right }))
        .collect();
    let mut t = Table::new(&columns);
    for r in rows {
        t.row(r.cells());
    }
    t.to_string().trim_end().to_owned()
}

/// The strongest MOD head per run.
fn heads_table(rows: &[ModHeadRow]) -> String {
    let columns: Vec<(&str, Align)> = ModHeadRow::HEADER
        .iter()
        .enumerate()
        .map(|(i, &h)| (h, if i < 2 || i == 9 { Left } else { Right }))
        .collect();
    let mut t = Table::new(&columns);
    for r in rows {
        t.row(r.cells());
    }
    t.to_string().trim_end().to_owned()
}

/// N* beside the certified fixed-offset range, one line per run (a column per scale).
fn offsets_table(rows: &[OffsetRow]) -> String {
    let (header, cells) = offset_table_cells(rows);
    let columns: Vec<(&str, Align)> = header
        .iter()
        .enumerate()
        .map(|(i, h)| (h.as_str(), if i == 0 { Left } else { Right }))
        .collect();
    let mut t = Table::new(&columns);
    for row in cells {
        t.row(row);
    }
    t.to_string().trim_end().to_owned()
}
