//! `ropelab theory ...`: theorems turned into computations, each printing a short table and
//! writing CSV.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use ropelab_theory::discrepancy::{self, DiscrepancyRow};
use ropelab_theory::failures::{failure_table, trade_off, FailureConfig, FailureRow};
use ropelab_theory::format::NumberFormat;

use super::progress;
use crate::output::write_atomic;

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
    pub mechanism: Mechanism,
    /// RoPE angle (Index default 0.866; Retrieval default omega / (4 * long)).
    #[arg(long)]
    pub theta: Option<f64>,
    /// Letters (Index: letters; Retrieval: the alphabet).
    #[arg(long, default_value_t = 3)]
    pub letters: usize,
    /// Longest input checked exhaustively.
    #[arg(long, default_value_t = 5)]
    pub n0: usize,
    /// Length of the random inputs checked beyond n0.
    #[arg(long, default_value_t = 64)]
    pub long: usize,
    /// Random inputs of length --long.
    #[arg(long, default_value_t = 1000)]
    pub samples: usize,
}

/// Arguments of `ropelab theory periodic`.
#[derive(Debug, Args)]
pub struct PeriodicArgs {
    /// Periods m (each at least 2), comma-separated; every residue r in 0..m is checked.
    #[arg(long, value_delimiter = ',', default_value = "2,3,5")]
    pub m: Vec<usize>,
    /// Number formats, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "f32,bf16", value_parser = |s: &str| s.parse::<NumberFormat>().map_err(|e| e.to_string()))]
    pub formats: Vec<NumberFormat>,
    /// Positions checked, 1..=len.
    #[arg(long, default_value_t = 1_000_000)]
    pub len: usize,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab theory offset-range`.
#[derive(Debug, Args)]
pub struct OffsetRangeArgs {
    /// Rotations g per position (radians), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,0.5,0.1")]
    pub g: Vec<f64>,
    /// The offset k the head looks back.
    #[arg(long, default_value_t = 4)]
    pub k: usize,
    /// Multiples of the minimal scale 2 f_large / (1 - cos g), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    pub scales: Vec<f64>,
    /// Number format.
    #[arg(long, default_value = "f32", value_parser = |s: &str| s.parse::<NumberFormat>().map_err(|e| e.to_string()))]
    pub format: NumberFormat,
    /// Longest range searched.
    #[arg(long, default_value_t = 10_000_000)]
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
    #[arg(long, value_delimiter = ',', default_value = "0,8,32,128,512")]
    pub extras: Vec<usize>,
    /// Test inputs per length.
    #[arg(long, default_value_t = 50)]
    pub samples: usize,
    /// Memory budget of one forward pass in MiB (samples run in batches that fit it).
    #[arg(long = "memory-mb", default_value = "256", value_parser = crate::output::parse_memory_mib)]
    pub memory: usize,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Which hand-built head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mechanism {
    /// Positional selection (copy the token n - i).
    Index,
    /// Symbolic selection (copy the token whose first symbol matches).
    Retrieval,
}

/// Arguments of `ropelab theory discrepancy`.
#[derive(Debug, Args)]
pub struct DiscrepancyArgs {
    /// The head.
    #[arg(long, value_enum)]
    pub mechanism: Mechanism,
    /// RoPE angle theta per position (Index: > 0; Retrieval: >= 0).
    #[arg(long)]
    pub theta: f64,
    /// Alphabet size |ALPH| of the Retrieval head.
    #[arg(long, default_value_t = 8)]
    pub alphabet: usize,
    /// Largest query position n0.
    #[arg(long, default_value_t = 1000)]
    pub max_n: usize,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab theory rope-stats`.
#[derive(Debug, Args)]
pub struct RopeStatsArgs {
    /// Head dimension d (h = d / 2 planes).
    #[arg(long, default_value_t = 128)]
    pub d: usize,
    /// Frequency bases B, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,10000,500000")]
    pub bases: Vec<f64>,
    /// Context lengths M, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "256,2048,16384")]
    pub lengths: Vec<usize>,
    /// (q, k1, k2) draws per (B, M).
    #[arg(long, default_value_t = 100)]
    pub draws: usize,
    /// Seed of the draws.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Correlation of the keys with the query (0: i.i.d.).
    #[arg(long, default_value_t = 0.0)]
    pub rho: f64,
    /// Number format for the aliasing events: f64, f32, bf16 or f16.
    #[arg(long, default_value = "bf16", value_parser = |s: &str| s.parse::<NumberFormat>().map_err(|e| e.to_string()))]
    pub format: NumberFormat,
    /// Scale the frequencies as Llama 3 does.
    #[arg(long)]
    pub llama3: bool,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs a theory subcommand.
pub fn run(cmd: TheoryCommand) -> Result<()> {
    match cmd {
        TheoryCommand::Discrepancy(a) => {
            let rows = discrepancy_rows(a.mechanism, a.theta, a.alphabet, a.max_n)?;
            println!("{}", discrepancy_table(&rows));
            write_atomic(&a.out, discrepancy_csv(&rows).as_bytes())?;
            println!("wrote {}", a.out.display());
            Ok(())
        }
        TheoryCommand::RopeStats(a) => {
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
            rope_stats(&config, &a.out)
        }
        TheoryCommand::Construct(a) => construct(&a),
        TheoryCommand::Periodic(a) => {
            use ropelab_theory::periodic::check_mod;
            let mut csv = String::from("m,r,format,c,len,first_failure\n");
            println!(
                "{:>4} {:>4} {:>6} {:>10} {:>9}  exact",
                "m", "r", "format", "C", "positions"
            );
            for &format in &a.formats {
                for &m in &a.m {
                    for r in 0..m.max(1) {
                        let c = check_mod(m, r, format, a.len)?;
                        let fail = c.first_failure.map_or(String::new(), |f| f.to_string());
                        let _ = writeln!(csv, "{},{},{},{},{},{}", m, r, format, c.c, c.len, fail);
                        println!(
                            "{:>4} {:>4} {:>6} {:>10.2} {:>9}  {}",
                            m,
                            r,
                            format,
                            c.c,
                            c.len,
                            c.first_failure
                                .map_or("yes, at every position".to_owned(), |f| format!(
                                    "NO: fails at {f}"
                                ))
                        );
                    }
                }
            }
            write_atomic(&a.out, csv.as_bytes())?;
            println!("wrote {}", a.out.display());
            Ok(())
        }
        TheoryCommand::OffsetRange(a) => {
            use ropelab_theory::periodic::{f_large, offset_range};
            let fl = f_large(a.format);
            let mut csv = String::from("g,k,c,format,certified_range\n");
            println!("f_large({}) = {fl:.3}", a.format);
            println!(
                "{:>8} {:>4} {:>12} {:>16}",
                "g", "k", "C", "certified range"
            );
            for &g in &a.g {
                for &scale in &a.scales {
                    let c = scale * 2.0 * fl / (1.0 - g.cos());
                    let range = offset_range(g, c, a.k, a.format, a.cap)?;
                    let shown = range.map_or(format!(">= {}", a.cap), |l| l.to_string());
                    let _ = writeln!(
                        csv,
                        "{},{},{},{},{}",
                        g,
                        a.k,
                        c,
                        a.format,
                        range.map_or(String::new(), |l| l.to_string())
                    );
                    println!("{g:>8} {:>4} {c:>12.1} {shown:>16}", a.k);
                }
            }
            write_atomic(&a.out, csv.as_bytes())?;
            println!("wrote {}", a.out.display());
            Ok(())
        }
        TheoryCommand::Margins(a) => {
            let rows = ropelab_analysis::margin::margins(
                &a.run,
                a.step,
                &a.extras,
                a.samples,
                a.memory,
                &candle_core::Device::Cpu,
            )?;
            let mut csv = String::from("extra,length,layer,head,margin,top_weight\n");
            println!(
                "{:>6} {:>6} {:>5} {:>4} {:>10} {:>10}",
                "extra", "length", "layer", "head", "margin", "top weight"
            );
            for r in &rows {
                let _ = writeln!(
                    csv,
                    "{},{},{},{},{},{}",
                    r.extra, r.length, r.layer, r.head, r.margin, r.top_weight
                );
                println!(
                    "{:>6} {:>6} {:>5} {:>4} {:>10.4} {:>10.4}",
                    r.extra, r.length, r.layer, r.head, r.margin, r.top_weight
                );
            }
            write_atomic(&a.out, csv.as_bytes())?;
            println!("wrote {}", a.out.display());
            Ok(())
        }
    }
}

/// Margins of a mechanism.
pub fn discrepancy_rows(
    mechanism: Mechanism,
    theta: f64,
    alphabet: usize,
    max_n: usize,
) -> Result<Vec<DiscrepancyRow>> {
    Ok(match mechanism {
        Mechanism::Index => discrepancy::index(theta, max_n)?,
        Mechanism::Retrieval => discrepancy::retrieval(theta, alphabet, max_n)?,
    })
}

/// A few rows of a discrepancy curve.
pub fn discrepancy_table(rows: &[DiscrepancyRow]) -> String {
    let mut s = format!(
        "{:>6} {:>12} {:>12} {:>12}\n",
        "n", "delta", "bound", "delta_max"
    );
    for r in rows
        .iter()
        .filter(|r| [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000].contains(&r.n) || r.n == rows.len())
    {
        let _ = writeln!(
            s,
            "{:>6} {:>12.4e} {:>12.4e} {:>12.4e}",
            r.n, r.delta, r.bound, r.delta_max
        );
    }
    s.trim_end().to_owned()
}

/// The CSV of a discrepancy curve.
pub fn discrepancy_csv(rows: &[DiscrepancyRow]) -> String {
    let mut s = String::from("n,delta,bound,delta_max\n");
    for r in rows {
        let _ = writeln!(s, "{},{:e},{:e},{:e}", r.n, r.delta, r.bound, r.delta_max);
    }
    s
}

/// Runs the failure experiment, prints the tables and writes the CSV.
pub fn rope_stats(config: &FailureConfig, out: &Path) -> Result<()> {
    let start = Instant::now();
    let bar = progress(config.bases.len() as u64, "rope-stats");
    let rows = failure_table(config, |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    println!(
        "RoPE failure rates, d {}, {} draws (rho {}), aliasing in {}{}: {:.1} s",
        config.d,
        config.draws,
        config.rho,
        config.format,
        if config.llama3 {
            ", llama3 scaling"
        } else {
            ""
        },
        start.elapsed().as_secs_f64()
    );
    println!("{}", failure_text(&rows));
    println!("{:<20} {:>10} {:>10}", "event", "M grows", "B grows");
    for (event, by_m, by_b) in trade_off(&rows) {
        println!("{event:<20} {by_m:>10} {by_b:>10}");
    }
    write_atomic(out, failure_csv(&rows).as_bytes())?;
    println!("wrote {}", out.display());
    Ok(())
}

fn failure_text(rows: &[FailureRow]) -> String {
    let mut s = format!(
        "{:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}\n",
        "base",
        "M",
        "pos.inv",
        "pos.alias",
        "tok.inv",
        "tok.alias",
        "mu",
        "mu_emp",
        "sigma",
        "sig_emp"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:>9.0e} {:>7} {:>9.4} {:>9.4} {:>9.4} {:>9.4} {:>8.3} {:>8.3} {:>8.3} {:>8.3}",
            r.base,
            r.length,
            r.position_inversion,
            r.position_aliasing,
            r.token_inversion,
            r.token_aliasing,
            r.mu_approx,
            r.mu_empirical,
            r.sigma_approx,
            r.sigma_empirical
        );
    }
    s.trim_end().to_owned()
}

fn failure_csv(rows: &[FailureRow]) -> String {
    let mut s = String::from(
        "base,length,position_inversion,position_aliasing,position_alias_pairs,token_inversion,token_aliasing,mu_approx,mu_empirical,sigma_approx,sigma_empirical\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{}",
            r.base,
            r.length,
            r.position_inversion,
            r.position_aliasing,
            r.position_alias_pairs,
            r.token_inversion,
            r.token_aliasing,
            r.mu_approx,
            r.mu_empirical,
            r.sigma_approx,
            r.sigma_empirical
        );
    }
    s
}

fn construct(a: &ConstructArgs) -> Result<()> {
    use ropelab_theory::construct::{all_sequences, check, random_sequences, HandHead};
    anyhow::ensure!(a.n0 >= 1, "n0 must be at least 1, got {}", a.n0);
    anyhow::ensure!(a.long >= 2, "--long must be at least 2");
    // One head per check: the Index vocabulary holds integers up to the input length.
    let head = |n: usize| -> Result<HandHead> {
        Ok(match a.mechanism {
            Mechanism::Index => {
                let theta = a.theta.unwrap_or(0.866);
                let margin = discrepancy::index(theta, n)?[n - 1].delta;
                anyhow::ensure!(margin > 0.0, "theta {theta} gives no margin at length {n}");
                HandHead::index(a.letters, n - 1, theta, 40.0 / margin)?
            }
            Mechanism::Retrieval => {
                let n_max = a.n0.max(a.long);
                let omega = 2.0 * std::f64::consts::PI / a.letters.max(2) as f64;
                let theta = a.theta.unwrap_or(omega / (4.0 * n_max as f64));
                let margin = discrepancy::retrieval(theta, a.letters, n)?[n - 1].delta;
                anyhow::ensure!(margin > 0.0, "theta {theta} gives no margin at length {n}");
                HandHead::retrieval(a.letters, 2, theta, 40.0 / margin)?
            }
        })
    };
    let short = head(a.n0)?;
    anyhow::ensure!(
        (short.vocab.len() as f64).powi(a.n0 as i32) <= 5e6,
        "{} tokens up to length {} is too many inputs to enumerate; lower --n0",
        short.vocab.len(),
        a.n0
    );
    let long = head(a.long)?;
    for (what, h, inputs) in [
        (
            format!("every input up to length {}", a.n0),
            &short,
            all_sequences(short.vocab.len(), a.n0),
        ),
        (
            format!("{} random inputs of length {}", a.samples, a.long),
            &long,
            random_sequences(&long, a.long, a.samples, 0),
        ),
    ] {
        let c = check(h, &inputs)?;
        println!(
            "{:?} head, {what}: {} of {} in the domain correct, smallest decoding gap {:.4}",
            a.mechanism, c.correct, c.inputs, c.min_gap
        );
        anyhow::ensure!(
            c.correct == c.inputs,
            "the construction failed on {} inputs",
            c.inputs - c.correct
        );
    }
    Ok(())
}
