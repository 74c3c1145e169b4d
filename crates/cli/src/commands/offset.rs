//! `ropelab offset`: the implicit-bias experiment (docs/offset.md): small attention models
//! trained on fixed-offset retrieval at short lengths with rotary, learned absolute or no
//! position encoding and softmax or linear attention, tested at up to 8 x the training
//! length; accuracy per test length in `DIR/accuracy.csv`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use ropelab_io::{Align, Table};
use ropelab_model::{AttentionKind, Beyond};
use ropelab_study::offset::{
    parse_attention, run, summary, Experiment, MechanismLine, OffsetPe, OffsetRunRow, Outcome,
};

use super::{Bars, Guard};

/// Arguments of `ropelab offset`.
#[derive(Debug, Args)]
pub struct OffsetArgs {
    /// Position encodings, comma-separated: rope (base 10,000), rope:BASE, ape, nope.
    #[arg(long, value_delimiter = ',', value_parser = |s: &str| s.parse::<OffsetPe>().map_err(|e| e.to_string()))]
    pub pe: Option<Vec<OffsetPe>>,
    /// Attention kinds, comma-separated: softmax, linear.
    #[arg(long, value_delimiter = ',', value_parser = |s: &str| parse_attention(s).map_err(|e| e.to_string()))]
    pub attention: Option<Vec<AttentionKind>>,
    /// Offsets k, comma-separated (each at least 1, below the training length).
    #[arg(long, value_delimiter = ',')]
    pub k: Option<Vec<usize>>,
    /// Seeds, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Longest training sequence (training lengths are k + 1 to this; the APE table's rows).
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=4096))]
    pub train_len: Option<u64>,
    /// Test lengths, comma-separated and ascending (default: 1, 1.5, 2, 3, 4, 6 and 8 x the
    /// training length).
    #[arg(long, value_delimiter = ',')]
    pub test_lens: Option<Vec<usize>>,
    /// Sequences per test length.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub per_length: Option<u64>,
    /// Optimizer steps per run.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: Option<u64>,
    /// Layers (1 for the single-head comparison; e.g. 2 for the transfer).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub layers: Option<u64>,
    /// Heads per layer.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub heads: Option<u64>,
    /// Score every position i >= k (the full-sequence variant), not only the last.
    #[arg(long)]
    pub full_sequence: bool,
    /// What APE does at a position beyond its table: clamp (reuse the last row; the default)
    /// or error.
    #[arg(long, value_parser = ["clamp", "error"])]
    pub ape_beyond: Option<String>,
    /// Runs trained at the same time, each on its own share of the cores (default: one per
    /// core, at most one per run). Results do not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub jobs: Option<u64>,
    /// Output directory (runs/, accuracy.csv).
    #[arg(long, default_value = "runs/offset")]
    pub out: PathBuf,
}

/// Runs `ropelab offset`.
pub fn run_command(args: OffsetArgs, guard: Guard) -> Result<()> {
    super::check_out_dir(&args.out, true)?;
    ropelab_analysis::claims::files::refuse_other_tables(&args.out, "offset")?;
    let mut e = Experiment::default();
    if let Some(v) = args.pe {
        e.pes = v;
    }
    if let Some(v) = args.attention {
        e.attentions = v;
    }
    if let Some(v) = args.k {
        e.ks = v;
    }
    if let Some(v) = args.seeds {
        e.seeds = v;
    }
    if let Some(n) = args.train_len {
        e.train_len = n as usize;
        e.test_lens = Experiment::test_lens_for(e.train_len);
    }
    if let Some(v) = args.test_lens {
        e.test_lens = v;
    }
    if let Some(n) = args.per_length {
        e.per_length = n as usize;
    }
    if let Some(n) = args.steps {
        e.steps = n as usize;
    }
    if let Some(n) = args.layers {
        e.layers = n as usize;
    }
    if let Some(n) = args.heads {
        e.heads = n as usize;
    }
    e.full_sequence = args.full_sequence;
    if args.ape_beyond.is_some() && !e.pes.iter().any(|p| matches!(p, OffsetPe::Ape)) {
        anyhow::bail!("--ape-beyond sets what APE runs do beyond their positions; no --pe is ape");
    }
    match args.ape_beyond.as_deref() {
        Some("error") => e.ape_beyond = Beyond::Error,
        Some(_) => e.ape_beyond = Beyond::Clamp,
        None => {}
    }
    e.check()?;
    let grid = e.grid();
    guard.check("offset", &e.need(&args.out, args.jobs.map(|j| j as usize)))?;
    println!(
        "{} runs ({} encodings x {} attention kinds x {} offsets x {} seeds): {} layer(s) x {} \
         head(s), d_model {}, vocabulary {}, {} steps of {} sequences at lengths k+1-{} ({}); \
         tested at lengths {:?} with {} sequences each",
        grid.len(),
        e.pes.len(),
        e.attentions.len(),
        e.ks.len(),
        e.seeds.len(),
        e.layers,
        e.heads,
        e.d_model,
        e.vocab,
        e.steps,
        e.batch,
        e.train_len,
        if e.full_sequence {
            "every position scored"
        } else {
            "last position scored"
        },
        e.test_lens,
        e.per_length
    );
    let start = Instant::now();
    let bars = Bars::default();
    let before =
        super::TablesBefore::take(&args.out, &["accuracy.csv", "runs.csv", "mechanism.csv"]);
    let outcome = run(&e, &args.out, args.jobs.map(|j| j as usize), &bars)?;
    drop(bars);
    before.note();
    println!("{}", accuracy_table(&e, &outcome));
    println!("\n{}", mechanism_table(&outcome.runs, &outcome.mechanisms));
    println!(
        "{:.0} s; wrote accuracy.csv, runs.csv and mechanism.csv in {}",
        start.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}

/// Accuracy at the last position per (encoding, attention) and test length.
pub(crate) fn accuracy_table(e: &Experiment, outcome: &Outcome) -> String {
    let s = summary(&outcome.accuracy);
    let lens: Vec<String> = e
        .test_lens
        .iter()
        .map(|n| format!("{n} ({}x)", *n as f64 / e.train_len as f64))
        .collect();
    let mut columns: Vec<(&str, Align)> = vec![("pe", Align::Left), ("attention", Align::Left)];
    columns.extend(lens.iter().map(|l| (l.as_str(), Align::Right)));
    let mut t = Table::new(&columns);
    for (pe, attention, cells) in &s {
        let mut row = vec![pe.clone(), attention.clone()];
        row.extend(e.test_lens.iter().map(|n| {
            cells
                .iter()
                .find(|c| c.0 == *n)
                .map_or("-".into(), |c| format!("{:.3}", c.1))
        }));
        t.row(row);
    }
    format!(
        "Accuracy at the last position per test length (mean over {} offsets x {} seeds):\n{}",
        e.ks.len(),
        e.seeds.len(),
        t.to_string().trim_end()
    )
}

/// Per (encoding, attention): the largest equivariance deviation over runs, and for softmax
/// runs the dilution law's largest error and the argmax pinning at the longest length.
pub(crate) fn mechanism_table(runs: &[OffsetRunRow], lines: &[MechanismLine]) -> String {
    let mut groups: Vec<(String, String)> = vec![];
    for r in runs {
        let key = (r.pe.clone(), r.attention.clone());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    let mut t = Table::new(&[
        ("pe", Align::Left),
        ("attention", Align::Left),
        ("equivariance (max rel. dev.)", Align::Right),
        ("dilution law: max |p_L - w_L|", Align::Right),
        ("per sequence", Align::Right),
        ("argmax on target, longest", Align::Right),
        ("argmax at its mode, longest", Align::Right),
        ("carrier rank", Align::Right),
        ("carrier alignment", Align::Right),
    ]);
    for (pe, attention) in groups {
        let mine: Vec<&OffsetRunRow> = runs
            .iter()
            .filter(|r| r.pe == pe && r.attention == attention)
            .collect();
        let eq = mine.iter().map(|r| r.equivariance).fold(0f64, f64::max);
        let dil = mine
            .iter()
            .filter_map(|r| r.dilution_error)
            .fold(None, |a: Option<f64>, e| Some(a.map_or(e, |a| a.max(e))));
        let per_seq = mine
            .iter()
            .filter_map(|r| r.per_sequence_error)
            .fold(None, |a: Option<f64>, e| Some(a.map_or(e, |a| a.max(e))));
        let longest = lines.iter().map(|l| l.test_len).max();
        let last: Vec<&MechanismLine> = lines
            .iter()
            .filter(|l| l.pe == pe && l.attention == attention && Some(l.test_len) == longest)
            .collect();
        let mean = |f: &dyn Fn(&MechanismLine) -> f64| {
            (!last.is_empty()).then(|| last.iter().map(|l| f(l)).sum::<f64>() / last.len() as f64)
        };
        let cell = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
        t.row(vec![
            pe,
            attention,
            format!("{eq:.1e}"),
            cell(dil),
            cell(per_seq),
            cell(mean(&|l| l.argmax_on_target)),
            cell(mean(&|l| l.mode_fraction)),
            cell(average(mine.iter().filter_map(|r| r.carrier_rank))),
            cell(average(mine.iter().filter_map(|r| r.carrier_alignment))),
        ]);
    }
    format!(
        "Mechanisms (first layer; weights and argmax for softmax runs, means over runs):\n{}",
        t.to_string().trim_end()
    )
}

/// The mean of some numbers (None for none).
fn average(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}
