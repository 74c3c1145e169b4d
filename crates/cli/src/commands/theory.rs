//! `ropelab theory ...`: theorems turned into computations, each printing a short table and
//! writing CSV.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::output::write_csv;
use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use ropelab_analysis::lens::margin;
use ropelab_io::{Align::Left, Align::Right, Table};
use ropelab_theory::construct::{verify, ConstructOptions};
use ropelab_theory::discrepancy::{self, DiscrepancyRow, Mechanism};
use ropelab_theory::failures::{failure_table, trade_off, FailureConfig, FailureRow};
use ropelab_theory::format::NumberFormat;
use ropelab_theory::periodic::{f_large, mod_defaults, mod_table, offset_defaults, offset_table};
use ropelab_train::data::EVAL_MEMORY;

use super::{progress, Guard};

/// Theory subcommands.
#[derive(Debug, Subcommand)]
pub enum TheoryCommand {
    /// Exact logit margins of the hand-built Index / Retrieval heads for n = 1..max-n, with the
    /// theorem's bound (CSV columns n, delta, bound, delta_max).
    Discrepancy(DiscrepancyArgs),
    /// RoPE score statistics: normal approximation and the four failure events versus context
    /// length M and base B (CSV), plus the base trade-off directions.
    RopeStats(RopeStatsArgs),
    /// The hand-built Index / Retrieval heads of theorem 3.1 as real one-layer models, checked
    /// on every input up to --n0 and on random inputs of length --long.
    Construct(ConstructArgs),
    /// Discrepancy of a trained model's heads (largest minus second-largest logit at the query)
    /// per layer versus input length, via the tasks' length extension (CSV).
    Margins(MarginsArgs),
    /// Periodic RoPE: checks that the MOD_m^r head outputs exactly [i = r mod m] at every
    /// position up to --len in a number format (CSV).
    Periodic(PeriodicArgs),
    /// Certified look-back range of a fixed-offset head on a conventional rotation g, by brute
    /// force over realised scores (CSV).
    OffsetRange(OffsetRangeArgs),
}

/// Arguments of `ropelab theory construct`.
#[derive(Debug, Args)]
pub struct ConstructArgs {
    /// The head.
    #[arg(long, value_enum)]
    pub mechanism: MechanismArg,
    /// RoPE angle (Index default 0.866; Retrieval default omega / (4 * long)).
    #[arg(long, allow_hyphen_values = true)]
    pub theta: Option<f64>,
    /// Letters (Index: letters; Retrieval: the alphabet).
    #[arg(long, default_value_t = ConstructOptions::default().letters)]
    pub letters: usize,
    /// Longest input checked exhaustively.
    #[arg(long, default_value_t = ConstructOptions::default().n0)]
    pub n0: usize,
    /// Length of the random inputs checked beyond n0.
    #[arg(long, default_value_t = ConstructOptions::default().long)]
    pub long: usize,
    /// Random inputs of length --long.
    #[arg(long, default_value_t = ConstructOptions::default().samples)]
    pub samples: usize,
}

/// Arguments of `ropelab theory periodic`.
#[derive(Debug, Args)]
pub struct PeriodicArgs {
    /// Periods m (each at least 2), comma-separated; every residue r in 0..m is checked.
    #[arg(long, value_delimiter = ',', default_values_t = mod_defaults::PERIODS)]
    pub m: Vec<usize>,
    /// Number formats, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = mod_defaults::FORMATS, value_parser = |s: &str| s.parse::<NumberFormat>().map_err(|e| e.to_string()))]
    pub formats: Vec<NumberFormat>,
    /// Positions checked, 1..=len.
    #[arg(long, default_value_t = mod_defaults::LEN)]
    pub len: usize,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab theory offset-range`.
#[derive(Debug, Args)]
pub struct OffsetRangeArgs {
    /// Rotations g per position (radians), comma-separated.
    #[arg(long, allow_hyphen_values = true, value_delimiter = ',', default_values_t = offset_defaults::ROTATIONS)]
    pub g: Vec<f64>,
    /// The offset k the head looks back.
    #[arg(long, default_value_t = offset_defaults::K)]
    pub k: usize,
    /// Multiples of the minimal scale 2 f_large / (1 - cos g), comma-separated.
    #[arg(long, allow_hyphen_values = true, value_delimiter = ',', default_values_t = offset_defaults::SCALES)]
    pub scales: Vec<f64>,
    /// Number format.
    #[arg(long, default_value_t = offset_defaults::FORMAT, value_parser = |s: &str| s.parse::<NumberFormat>().map_err(|e| e.to_string()))]
    pub format: NumberFormat,
    /// Longest range searched.
    #[arg(long, default_value_t = offset_defaults::CAP)]
    pub cap: usize,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab theory margins`.
#[derive(Debug, Args)]
pub struct MarginsArgs {
    /// Run directory written by `ropelab train`.
    #[arg(long)]
    pub run: PathBuf,
    /// Checkpoint step (default: the latest).
    #[arg(long)]
    pub step: Option<usize>,
    /// Extension lengths (extra tokens before the target window), comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = margin::DEFAULT_EXTRAS)]
    pub extras: Vec<usize>,
    /// Test inputs per length.
    #[arg(long, default_value_t = margin::DEFAULT_SAMPLES)]
    pub samples: usize,
    /// Memory budget of one forward pass in MiB (samples run in batches that fit it).
    #[arg(long = "memory-mb", default_value_t = EVAL_MEMORY >> 20, value_parser = crate::output::parse_memory_mib)]
    pub memory: usize,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Which hand-built head (the command-line face of [`Mechanism`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MechanismArg {
    /// Positional selection (copy the token n - i).
    Index,
    /// Symbolic selection (copy the token whose first symbol matches).
    Retrieval,
}

impl From<MechanismArg> for Mechanism {
    fn from(m: MechanismArg) -> Self {
        match m {
            MechanismArg::Index => Mechanism::Index,
            MechanismArg::Retrieval => Mechanism::Retrieval,
        }
    }
}

/// Arguments of `ropelab theory discrepancy`.
#[derive(Debug, Args)]
pub struct DiscrepancyArgs {
    /// The head.
    #[arg(long, value_enum)]
    pub mechanism: MechanismArg,
    /// RoPE angle theta per position (Index: > 0; Retrieval: >= 0).
    #[arg(long, allow_hyphen_values = true)]
    pub theta: f64,
    /// Alphabet size |ALPH| of the Retrieval head (default 8; the Index head has none).
    #[arg(long)]
    pub alphabet: Option<usize>,
    /// Largest query position n0.
    #[arg(long, default_value_t = discrepancy::DEFAULT_MAX_N)]
    pub max_n: usize,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab theory rope-stats`.
#[derive(Debug, Args)]
pub struct RopeStatsArgs {
    /// Head dimension d (h = d / 2 planes).
    #[arg(long, default_value_t = FailureConfig::default().d)]
    pub d: usize,
    /// Frequency bases B, comma-separated.
    #[arg(long, allow_hyphen_values = true, value_delimiter = ',', default_values_t = FailureConfig::default().bases)]
    pub bases: Vec<f64>,
    /// Context lengths M, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = FailureConfig::default().lengths)]
    pub lengths: Vec<usize>,
    /// (q, k1, k2) draws per (B, M).
    #[arg(long, default_value_t = FailureConfig::default().draws)]
    pub draws: usize,
    /// Seed of the draws.
    #[arg(long, default_value_t = FailureConfig::default().seed)]
    pub seed: u64,
    /// Correlation of the keys with the query (0: i.i.d.).
    #[arg(long, allow_hyphen_values = true, default_value_t = FailureConfig::default().rho)]
    pub rho: f64,
    /// Number format for the aliasing events: f64, f32, bf16 or f16.
    #[arg(long, default_value_t = FailureConfig::default().format, value_parser = |s: &str| s.parse::<NumberFormat>().map_err(|e| e.to_string()))]
    pub format: NumberFormat,
    /// Scale the frequencies as Llama 3 does.
    #[arg(long)]
    pub llama3: bool,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs a theory subcommand.
pub fn run(cmd: TheoryCommand, guard: Guard) -> Result<()> {
    match cmd {
        TheoryCommand::Discrepancy(a) => {
            super::table_on_stdout(&a.out);
            // The Index head reads positions only: an alphabet would be ignored.
            anyhow::ensure!(
                a.alphabet.is_none() || a.mechanism == MechanismArg::Retrieval,
                "--alphabet sizes the Retrieval head's alphabet; the Index head has none"
            );
            let alphabet = a.alphabet.unwrap_or(discrepancy::DEFAULT_ALPHABET);
            let rows = discrepancy::curve(a.mechanism.into(), a.theta, alphabet, a.max_n)?;
            say!("{}", discrepancy_table(&rows));
            write_csv(&a.out, &rows)?;
            sayln!("wrote {}", a.out.display());
            Ok(())
        }
        TheoryCommand::RopeStats(a) => {
            super::table_on_stdout(&a.out);
            let config = FailureConfig {
                d: a.d,
                bases: a.bases,
                llama3: a.llama3,
                lengths: a.lengths,
                draws: a.draws,
                seed: a.seed,
                rho: a.rho,
                format: a.format,
            };
            config.check()?;
            guard.check("theory rope-stats", &config.need())?;
            rope_stats(&config, &a.out)
        }
        TheoryCommand::Construct(a) => {
            let options = ConstructOptions {
                mechanism: a.mechanism.into(),
                theta: a.theta,
                letters: a.letters,
                n0: a.n0,
                long: a.long,
                samples: a.samples,
            };
            options.check()?;
            guard.check("theory construct", &options.need())?;
            for r in verify(&options)? {
                let c = r.check;
                sayln!(
                    "{} head, {}: {} of {} in the domain correct, smallest decoding gap {:.4}",
                    options.mechanism,
                    r.inputs,
                    c.correct,
                    c.inputs,
                    c.min_gap
                );
                anyhow::ensure!(
                    c.correct == c.inputs,
                    "the construction failed on {} inputs",
                    c.inputs - c.correct
                );
            }
            Ok(())
        }
        TheoryCommand::Periodic(a) => {
            super::table_on_stdout(&a.out);
            super::each_once("--m", &a.m)?;
            super::each_once("--formats", &a.formats)?;
            // Every residue of every period in every format is checked at up to --len
            // positions: about 28 ns (some 5,600 of the estimate's FLOP) each on 2 cores.
            let residues = a.m.iter().fold(0usize, |s, &m| s.saturating_add(m));
            let need = ropelab_io::Need::new().compute(
                ropelab_io::resources::bytes(&[a.formats.len(), residues, a.len, 5_600]),
                format!(
                    "{} formats x {residues} residues x {} positions",
                    a.formats.len(),
                    a.len
                ),
            );
            guard.check("theory periodic", &need)?;
            let rows = mod_table(&a.m, &a.formats, a.len)?;
            let mut table = Table::new(&[
                ("m", Right),
                ("r", Right),
                ("format", Right),
                ("C", Right),
                ("positions", Right),
                ("exact", Left),
            ]);
            for c in &rows {
                table.row([
                    c.m.to_string(),
                    c.r.to_string(),
                    c.format.to_string(),
                    format!("{:.2}", c.c),
                    c.len.to_string(),
                    c.first_failure
                        .map_or("yes, at every position".to_owned(), |f| {
                            format!("NO: fails at {f}")
                        }),
                ]);
            }
            say!("{table}");
            write_csv(&a.out, &rows)?;
            sayln!("wrote {}", a.out.display());
            Ok(())
        }
        TheoryCommand::OffsetRange(a) => {
            super::table_on_stdout(&a.out);
            super::each_once("--g", &a.g)?;
            super::each_once("--scales", &a.scales)?;
            let rows = offset_table(&a.g, a.k, &a.scales, a.format, a.cap)?;
            sayln!("f_large({}) = {:.3}", a.format, f_large(a.format));
            let mut table = Table::new(&[
                ("g", Right),
                ("k", Right),
                ("C", Right),
                ("certified range", Right),
            ]);
            for r in &rows {
                table.row([
                    r.g.to_string(),
                    r.k.to_string(),
                    format!("{:.1}", r.c),
                    // A range below k certifies no query (the head fails at the first,
                    // i = k): said so, not shown as a length (twenty-second pass, N4).
                    r.certified_range
                        .map_or(format!(">= {}", a.cap), |l| match l < a.k {
                            true => format!("none (fails at i = k = {})", a.k),
                            false => l.to_string(),
                        }),
                ]);
            }
            say!("{table}");
            write_csv(&a.out, &rows)?;
            sayln!("wrote {}", a.out.display());
            Ok(())
        }
        TheoryCommand::Margins(a) => {
            super::table_on_stdout(&a.out);
            super::each_once("--extras", &a.extras)?;
            // The table is the run's: beside it, or outside every ropelab directory (not in
            // another run's, a study's, a model's or a pretrained folder; fourteenth pass, S-F).
            super::out_of_others(&a.run, &a.out)?;
            if let Ok((_, config)) = ropelab_train::RunDir::open(&a.run) {
                let options = ropelab_analysis::measure::lengthgen::LengthOptions {
                    extras: a.extras.clone(),
                    samples: Some(a.samples),
                    step: a.step,
                    memory: a.memory,
                };
                guard.check("theory margins", &options.need(&config))?;
            }
            let rows = ropelab_analysis::lens::margin::margins(
                &a.run,
                a.step,
                &a.extras,
                a.samples,
                a.memory,
                &candle_core::Device::Cpu,
            )?;
            let mut table = Table::new(&[
                ("extra", Right),
                ("length", Right),
                ("layer", Right),
                ("head", Right),
                ("margin", Right),
                ("top weight", Right),
            ]);
            for r in &rows {
                table.row([
                    r.extra.to_string(),
                    r.length.to_string(),
                    r.layer.to_string(),
                    r.head.to_string(),
                    format!("{:.4}", r.margin),
                    format!("{:.4}", r.top_weight),
                ]);
            }
            say!("{table}");
            // Each row names the checkpoint and the run measured, as a run's tables do.
            let (dir, config) = ropelab_train::RunDir::open(&a.run)?;
            let step = dir.checkpoint_or_latest(a.step)?;
            let text = ropelab_io::to_csv_stamped(&rows, step, &config.identity())?;
            crate::output::write_atomic(&a.out, text.as_bytes())?;
            sayln!("wrote {}", a.out.display());
            Ok(())
        }
    }
}

/// A few rows of a discrepancy curve (n = 1, 2, 5, 10, ... and the last).
pub fn discrepancy_table(rows: &[DiscrepancyRow]) -> Table {
    let mut table = Table::new(&[
        ("n", Right),
        ("delta", Right),
        ("bound", Right),
        ("delta_max", Right),
    ]);
    for r in rows
        .iter()
        .filter(|r| [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000].contains(&r.n) || r.n == rows.len())
    {
        table.row([
            r.n.to_string(),
            format!("{:.4e}", r.delta),
            format!("{:.4e}", r.bound),
            format!("{:.4e}", r.delta_max),
        ]);
    }
    table
}

/// Runs the failure experiment, prints the tables and writes the CSV.
pub fn rope_stats(config: &FailureConfig, out: &Path) -> Result<()> {
    let start = Instant::now();
    let bar = progress(config.bases.len() as u64, "rope-stats");
    let rows = failure_table(config, |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    sayln!("({:.1} s)", start.elapsed().as_secs_f64());
    print_failures(config, &rows);
    write_csv(out, &rows)?;
    sayln!("wrote {}", out.display());
    Ok(())
}

/// Prints the failure rates per (base, length) and the directions of the base trade-off.
pub fn print_failures(config: &FailureConfig, rows: &[FailureRow]) {
    sayln!(
        "RoPE failure rates, d {}, {} draws (rho {}), aliasing in {}{}:",
        config.d,
        config.draws,
        config.rho,
        config.format,
        if config.llama3 {
            ", llama3 scaling"
        } else {
            ""
        },
    );
    let mut table = Table::new(&[
        ("base", Right),
        ("M", Right),
        ("pos.inv", Right),
        ("pos.alias", Right),
        ("tok.inv", Right),
        ("tok.alias", Right),
        ("mu", Right),
        ("mu_emp", Right),
        ("sigma", Right),
        ("sig_emp", Right),
    ]);
    for r in rows {
        table.row([
            format!("{:.0e}", r.base),
            r.length.to_string(),
            format!("{:.4}", r.position_inversion),
            format!("{:.4}", r.position_aliasing),
            format!("{:.4}", r.token_inversion),
            format!("{:.4}", r.token_aliasing),
            format!("{:.3}", r.mu_approx),
            format!("{:.3}", r.mu_empirical),
            format!("{:.3}", r.sigma_approx),
            format!("{:.3}", r.sigma_empirical),
        ]);
    }
    say!("{table}");
    let mut directions = Table::new(&[("event", Left), ("M grows", Right), ("B grows", Right)]);
    for (event, by_m, by_b) in trade_off(rows) {
        directions.row([event, by_m, by_b]);
    }
    say!("{directions}");
}
