//! `ropelab bias`: the bias experiment (docs/bias.md): small RoPE models trained on the
//! ambiguous task under one training bias each, several seeds each; which rule each follows on
//! the conflict split, its heads, its accuracy on longer inputs, and the claims' verdicts.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use ropelab_io::{Align, Table};
use ropelab_study::bias::{run, run_shard, summary_rows, write_report, Bias, Experiment};

use super::{Bars, Guard};

/// Arguments of `ropelab bias`.
#[derive(Debug, Args)]
pub struct BiasArgs {
    /// The small grid tests use: three biases (none, keep-high:16, nope:0), two seeds, 1,000
    /// steps (minutes on 2 cores).
    #[arg(long)]
    pub quick: bool,
    /// Biases, comma-separated, in place of the grid's: none, base:B, keep-high:K,
    /// keep-high:K@LAYER, partial:D, nope:LAYER, shift:N.
    #[arg(long, value_delimiter = ',', value_parser = |s: &str| s.parse::<Bias>())]
    pub biases: Option<Vec<Bias>>,
    /// Seeds, comma-separated, in place of the grid's.
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Optimizer steps per run, in place of the grid's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: Option<u64>,
    /// Skip the transfer stage (the content-moving biases on the number and letter tasks).
    #[arg(long)]
    pub no_transfer: bool,
    /// Optimizer steps per transfer run, in place of the grid's (3,000; --quick 300).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "no_transfer")]
    pub transfer_steps: Option<u64>,
    /// A study directory (`ropelab reproduce --out`) whose number and letter models join the
    /// discrepancy claim's rank correlation; repeatable.
    #[arg(long)]
    pub study: Vec<PathBuf>,
    /// Runs trained at the same time, each on its own share of the cores (default: one per
    /// core). Results do not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub jobs: Option<u64>,
    /// Output directory (runs/, mechanism.csv, accuracy.csv, heads.csv, claims.csv,
    /// report.html).
    #[arg(long, default_value = "runs/bias")]
    pub out: PathBuf,
    /// Run only shard I of N of the grid (I/N; jobs i with i mod N = I) and write no table:
    /// a Slurm array task's part. Run without it afterwards to collect.
    #[arg(long, value_parser = super::sweep::parse_shard)]
    pub shard: Option<(usize, usize)>,
    /// Write the grid as a Slurm job array (`OUT/bias.sbatch`, one array task per shard);
    /// run the same command without `--slurm` once it finished to collect the tables.
    #[arg(long, conflicts_with = "shard")]
    pub slurm: bool,
    /// With --slurm: submit it with `sbatch`.
    #[arg(long, requires = "slurm")]
    pub submit: bool,
    /// With --slurm: array tasks (default one per run).
    #[arg(long, requires = "slurm", value_parser = clap::value_parser!(u64).range(1..))]
    pub shards: Option<u64>,
    /// With --slurm: partition.
    #[arg(long, requires = "slurm", value_parser = ropelab_sweep::slurm::parse_partition)]
    pub partition: Option<String>,
    /// With --slurm: time limit per array task (e.g. 01:00:00).
    #[arg(long, requires = "slurm", value_parser = ropelab_sweep::slurm::parse_time)]
    pub time: Option<String>,
    /// With --slurm: CPUs per array task.
    #[arg(long, requires = "slurm", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub cpus_per_task: u64,
}

/// The grid's arguments as the array tasks repeat them (everything but the Slurm options).
fn grid_args(args: &BiasArgs, out: &std::path::Path) -> Vec<String> {
    let mut a = vec!["bias".to_string()];
    if args.quick {
        a.push("--quick".into());
    }
    if let Some(b) = &args.biases {
        let names: Vec<String> = b.iter().map(|b| b.to_string()).collect();
        a.extend(["--biases".into(), names.join(",")]);
    }
    if let Some(s) = &args.seeds {
        let seeds: Vec<String> = s.iter().map(|s| s.to_string()).collect();
        a.extend(["--seeds".into(), seeds.join(",")]);
    }
    if let Some(n) = args.steps {
        a.extend(["--steps".into(), n.to_string()]);
    }
    a.extend(["--out".into(), out.display().to_string()]);
    a
}

/// Writes (and with `--submit` submits) the job array of the grid.
fn slurm(args: &BiasArgs, runs: usize) -> Result<()> {
    use anyhow::{bail, Context};
    use ropelab_sweep::slurm::{array_script, SlurmOptions};
    let shards = args.shards.map_or(runs, |s| (s as usize).min(runs)).max(1);
    let options = SlurmOptions {
        shards,
        throttle: None,
        partition: args.partition.clone(),
        time: args.time.clone(),
        cpus_per_task: args.cpus_per_task as usize,
        gpus: None,
    };
    let logs = args.out.join("slurm");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let out = std::fs::canonicalize(&args.out)
        .with_context(|| format!("cannot resolve {}", args.out.display()))?;
    let exe = std::env::current_exe().context("cannot find the ropelab binary")?;
    let mut command = vec![exe.display().to_string()];
    command.extend(grid_args(args, &out));
    let text = array_script("ropelab-bias", &command, &out, &options);
    let path = args.out.join("bias.sbatch");
    ropelab_io::write_atomic(&path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!(
        "wrote {} ({runs} runs in {shards} array tasks); when it has finished, run the same \
         command without --slurm to collect the tables",
        path.display()
    );
    if args.submit {
        let said = std::process::Command::new("sbatch")
            .arg(&path)
            .output()
            .context("cannot run sbatch (is Slurm installed here?)")?;
        if !said.status.success() {
            bail!(
                "sbatch refused {}: {}",
                path.display(),
                String::from_utf8_lossy(&said.stderr).trim()
            );
        }
        println!("{}", String::from_utf8_lossy(&said.stdout).trim());
    }
    Ok(())
}

/// Runs `ropelab bias`.
pub fn run_command(args: BiasArgs, guard: Guard) -> Result<()> {
    super::check_out_dir(&args.out, true)?;
    ropelab_analysis::claims::files::refuse_other_tables(&args.out, "bias")?;
    let studies = args
        .study
        .iter()
        .map(|s| ropelab_io::resolved(s))
        .collect::<std::io::Result<Vec<_>>>()?;
    super::each_once("--study", &studies)?;
    let mut e = if args.quick {
        Experiment::quick()
    } else {
        Experiment::full()
    };
    if let Some(b) = args.biases.clone() {
        e.biases = b;
    }
    if let Some(s) = args.seeds.clone() {
        e.seeds = s;
    }
    if let Some(n) = args.steps {
        e.steps = n as usize;
    }
    if args.no_transfer {
        e.transfer = None;
    }
    if let (Some(t), Some(n)) = (e.transfer.as_mut(), args.transfer_steps) {
        t.steps = n as usize;
    }
    e.studies = args.study.clone();
    e.check()?;
    let grid = e.grid();
    let need = e.need(&args.out, args.jobs.map(|j| j as usize))?;
    if args.slurm {
        return slurm(&args, grid.len());
    }
    guard.check("bias", &need)?;
    if let Some((index, count)) = args.shard {
        let bars = Bars::default();
        let n = run_shard(
            &e,
            &args.out,
            (index, count),
            args.jobs.map(|j| j as usize),
            &bars,
        )?;
        drop(bars);
        println!(
            "shard {index}/{count}: {n} of {} runs done in {}",
            grid.len(),
            args.out.display()
        );
        return Ok(());
    }
    println!(
        "{} runs ({} biases x {} seeds): {} layers x 1 head, d_model {}, {} steps of {}; \
         tested at {:?} items with {} samples each, and on {} conflict samples",
        grid.len(),
        e.biases.len(),
        e.seeds.len(),
        e.layers,
        e.d_model,
        e.steps,
        e.batch,
        e.lengths,
        e.per_length,
        e.per_length
    );
    let start = Instant::now();
    let bars = Bars::default();
    let before = super::TablesBefore::take(
        &args.out,
        &[
            "mechanism.csv",
            "accuracy.csv",
            "heads.csv",
            "claims.csv",
            "transfer.csv",
            "transfer_lengths.csv",
        ],
    );
    let outcome = run(&e, &args.out, args.jobs.map(|j| j as usize), &bars)?;
    drop(bars);
    if !outcome.remeasured.is_empty() {
        println!(
            "{} runs had been measured with other lengths or sample counts: measured again \
             (training kept)",
            outcome.remeasured.len()
        );
    }
    let claims = write_report(&e, &outcome, &args.out)?;
    before.note();
    let mut t = Table::new(&[
        ("bias", Align::Left),
        ("positional", Align::Right),
        ("symbolic", Align::Right),
        ("neither", Align::Right),
        ("length acc", Align::Right),
        ("head types", Align::Left),
    ]);
    for row in summary_rows(&outcome) {
        t.row(row);
    }
    println!(
        "Conflict split (fractions) and accuracy at {} items, mean ± sd over seeds:\n{}",
        e.lengths.last().copied().unwrap_or(0),
        t.to_string().trim_end()
    );
    if let Some(t) = &outcome.transfer {
        let mut table = Table::new(&[
            ("task", Align::Left),
            ("bias", Align::Left),
            ("seed", Align::Right),
            ("test acc", Align::Right),
            ("first < 0.9", Align::Right),
            ("discrepancy", Align::Right),
            ("types", Align::Left),
        ]);
        for r in &t.runs {
            table.row(vec![
                r.task.clone(),
                r.bias.clone(),
                r.seed.to_string(),
                format!("{:.4}", r.test_accuracy),
                r.first_below.map_or("never".into(), |n| n.to_string()),
                format!("{:.2}", r.margin),
                r.types.clone(),
            ]);
        }
        println!(
            "Transfer ({}; first tested length in tokens below 0.9):\n{}",
            if t.biases.is_empty() {
                "no bias moved the ambiguous task toward content".to_string()
            } else {
                format!("biases {}", t.biases.join(", "))
            },
            table.to_string().trim_end()
        );
    }
    for c in &claims {
        println!("{}: {} ({}; {})", c.id, c.verdict, c.threshold, c.measured);
    }
    println!(
        "{:.0} s; wrote mechanism.csv, accuracy.csv, heads.csv, {}claims.csv and report.html in {}",
        start.elapsed().as_secs_f64(),
        if outcome.transfer.is_some() {
            "transfer.csv, transfer_lengths.csv, "
        } else {
            ""
        },
        args.out.display()
    );
    Ok(())
}
