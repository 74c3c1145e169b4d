//! `ropelab ablate`: necessity by ablation (docs/ablation.md). A trained number/letter model's
//! test accuracy, overall and per hop count, with each group of heads knocked out (pure
//! positional, pure symbolic, neither, each layer, each head of a multi-head layer) by mean
//! and by zero ablation; the heads typed from the run's `scores.jsonl` at its last checkpoint.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use clap::Args;
use ropelab_analysis::claims::{head_grid, RunFiles};
use ropelab_analysis::measure::ablation::{
    ablate_run, group_lines, groups, hop_counts, AblationOptions, AblationRow, ABLATION_FILE,
    DEFAULT_SAMPLES,
};
use ropelab_analysis::measure::dynamics::Gamma;
use ropelab_analysis::measure::keys;
use ropelab_io::resources::bytes;
use ropelab_io::{Align::Left, Align::Right, Table};
use ropelab_train::{forward_flops, inference_need, RunDir, EVAL_MEMORY};

use super::{progress, write_run_csv, Guard};
use crate::output::parse_memory_mib;

/// Arguments of `ropelab ablate`.
#[derive(Debug, Args)]
pub struct AblateArgs {
    /// Run directory of a number or letter model, scored at its last checkpoint (`ropelab
    /// train` then `ropelab score`, or `seed-S/<task>` of a study).
    #[arg(long)]
    pub run: PathBuf,
    /// Test samples, drawn as the run's test split is drawn (the split itself at its size).
    #[arg(long, default_value_t = DEFAULT_SAMPLES as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// Purity tolerance the heads are typed at, in (0, 0.5) (default: the study's `[claims]
    /// gamma` when the run is in a study, else 0.1).
    #[arg(long)]
    pub gamma: Option<Gamma>,
    /// Memory budget of one forward pass in MiB.
    #[arg(long = "memory-mb", default_value_t = EVAL_MEMORY >> 20, value_parser = parse_memory_mib)]
    pub memory: usize,
    /// CSV output (default: RUN/ablation.csv; a study's own file is never replaced).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `ropelab ablate`.
pub fn run(args: AblateArgs, guard: Guard) -> Result<()> {
    let (dir, config) = RunDir::open(&args.run)?;
    // Heads are typed by their swap scores, which only number and letter runs have: another
    // task is named, not sent to `score`, which refuses it too (tenth pass, UNCLEAR-2).
    ropelab_tasks::Task::new(config.task, config.layout.clone())
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.run.display()))?;
    let step = dir.latest_checkpoint()?;
    let gamma = match args.gamma {
        Some(g) => g,
        None => ropelab_report::compose::configured_gamma(&args.run)?,
    };
    let files = RunFiles::load(&args.run)?;
    let last: Vec<_> = files
        .scores
        .iter()
        .filter(|l| l.step == step)
        .cloned()
        .collect();
    anyhow::ensure!(
        !last.is_empty(),
        "{}: scores.jsonl has no line of the last checkpoint (step {step}), whose heads are \
         typed for the groups; run `ropelab score --run {}` first",
        args.run.display(),
        args.run.display()
    );
    let grid = head_grid(&last, gamma);
    let n = args.n as usize;
    let m = &config.model;
    let passes = bytes(&[groups(&grid).len(), 2]).saturating_add(2);
    let need = inference_need(m, config.layout.core_len(), args.memory).compute(
        forward_flops(m, n, config.layout.core_len()).saturating_mul(passes),
        format!("{passes} passes over {n} samples"),
    );
    guard.check("ablate", &need)?;
    let bar = progress(passes, "ablate");
    let start = Instant::now();
    let options = AblationOptions {
        samples: n,
        memory: args.memory,
    };
    let report = ablate_run(&args.run, &grid, &options, &Device::Cpu, |done, _| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    println!(
        "step {}, {n} test samples; heads typed at gamma {gamma}",
        report.step
    );
    print!("{}", table(&report.rows));
    let out = args.out.unwrap_or_else(|| args.run.join(ABLATION_FILE));
    // A study job's ablations (listed in the run's ledger) are its verdicts' input: not
    // replaced by other settings' file.
    let key = keys::ablation(report.step, n, gamma.get());
    write_run_csv(
        &args.run,
        &out,
        ABLATION_FILE,
        &key,
        report.step,
        &report.rows,
    )?;
    println!(
        "{} evaluations in {:.1} s; wrote {}",
        passes,
        start.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// One line per group: its heads, the mean-ablated accuracy with its 95% interval, the
/// zero-ablated one, and the mean-ablated accuracy per hop count.
pub fn table(rows: &[AblationRow]) -> Table {
    let hops = hop_counts(rows);
    let names: Vec<String> = hops.iter().map(|h| format!("hop {h}")).collect();
    let mut cols = vec![
        ("group", Left),
        ("heads", Left),
        ("mean-ablated (95%)", Right),
        ("zero", Right),
    ];
    cols.extend(names.iter().map(|n| (n.as_str(), Right)));
    let mut table = Table::new(&cols);
    for line in group_lines(rows, &hops) {
        let mut cells = vec![line.label, line.heads, line.mean, line.zero];
        cells.extend(line.per_hop);
        table.row(cells);
    }
    table
}
