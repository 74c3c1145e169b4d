//! `ropelab reproduce`: the study end to end from one config (docs/study.md). For every seed:
//! generate and validate both tasks' datasets, train one model per task, evaluate it on the
//! test split, score every head at every checkpoint and measure length generalisation; then the
//! theory lab's curves, a summary over seeds, and the verdict per claim (`claims.json`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use ropelab_analysis::measure::multihead::HeadCountRow;
use ropelab_analysis::{claims, StudyDir};
use ropelab_io::{Align::Left, Align::Right, Table};
use ropelab_study::datasets::DatasetRow;
use ropelab_study::job::Trained;
use ropelab_study::summary::TaskOverSeeds;
use ropelab_study::{Milestone, PretrainedStage, StudyConfig};

use super::score::head_table;
use super::Bars;

/// Arguments of `ropelab reproduce`.
#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// Run the full-scale study of the paper instead of the quick default.
    #[arg(long)]
    pub paper: bool,
    /// Run the study described by this TOML file (see configs/quick.toml).
    #[arg(long, conflicts_with = "paper")]
    pub config: Option<PathBuf>,
    /// Seeds to run, comma-separated (default: the config's `seeds`).
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Models trained at the same time, each on its own share of the cores (default: one per
    /// core, at most one per model). Results do not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub jobs: Option<u64>,
    /// Run directory for every result.
    #[arg(long, default_value = "runs/reproduce")]
    pub out: PathBuf,
    /// Skip the study's pretrained-model stage (its `[pretrained]` table: SmolLM2-135M's head
    /// types on both tasks' prompts, prompt-task accuracy per window size and RoPE failures of
    /// its own q and k, in DIR/pretrained/).
    #[arg(long)]
    pub no_pretrained: bool,
    /// Precision of the training products, `f32` or `bf16` (overrides the config's
    /// `[train] precision`; docs/performance.md#bf16-products).
    #[arg(long, value_parser = |s: &str| s.parse::<ropelab_model::kernel::Precision>())]
    pub precision: Option<ropelab_model::kernel::Precision>,
}

/// Runs `ropelab reproduce`.
pub fn run(args: ReproduceArgs, guard: super::Guard) -> Result<()> {
    let start = Instant::now();
    super::check_out_dir(&args.out, true)?;
    let mut config = match &args.config {
        Some(path) => StudyConfig::load(path)?,
        None => StudyConfig::embedded(args.paper),
    };
    if let Some(seeds) = &args.seeds {
        config.set_seeds(seeds)?;
    }
    if let Some(p) = args.precision {
        config.train.precision = Some(p);
    }
    let parallel = args.jobs.map(|j| j as usize);
    // A skipped stage is not estimated.
    let mut estimated = config.clone();
    if args.no_pretrained {
        estimated.pretrained = None;
    }
    guard.check(
        "reproduce",
        &ropelab_study::resources::need(&estimated, &args.out, parallel)?,
    )?;
    let options = ropelab_study::Options {
        parallel,
        no_pretrained: args.no_pretrained,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let mut report = PathBuf::new();
    if let Some(counts) = config.head_counts() {
        let study = StudyDir::new(&args.out);
        let outcome = ropelab_study::reproduce_heads(
            &config,
            &args.out,
            &options,
            &Bars::default(),
            |h, stage| {
                if matches!(stage, Milestone::Start) {
                    println!("\n== {h} heads per block ==");
                }
                print_milestone(
                    stage,
                    &config.for_heads(h),
                    study.heads(h).root(),
                    &mut report,
                )
            },
        )?;
        println!(
            "\nheads per block, model by model ({}):",
            study.heads_csv().display()
        );
        println!("{}", head_count_table(&outcome.rows));
        for (h, verdicts) in &outcome.verdicts {
            println!(
                "{h} heads: {} ({})",
                claims::counts_text(verdicts),
                study.heads(*h).claims().display()
            );
        }
        println!(
            "wrote {} for head counts {counts:?} ({:.0} s in all)",
            study.report().display(),
            start.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let verdicts =
        ropelab_study::reproduce(&config, &args.out, &options, &Bars::default(), |stage| {
            print_milestone(stage, &config, &args.out, &mut report)
        })?;
    println!(
        "{}; wrote {} and {} ({:.0} s in all)",
        claims::counts_text(&verdicts),
        StudyDir::new(&args.out).claims().display(),
        report.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Prints one milestone of the study `config` running in `out`; keeps the report's path.
fn print_milestone(
    stage: Milestone<'_>,
    config: &StudyConfig,
    out: &Path,
    report: &mut PathBuf,
) -> Result<()> {
    match stage {
        Milestone::Start => {
            println!(
                "ropelab reproduce: study {:?}, seeds {:?}, run directory {}",
                config.name,
                config.seeds,
                out.display()
            );
            // A warm-up longer than the run is said, as `train` says it (thirteenth pass,
            // S2): the learning rate never reaches its peak.
            let run = config.train.run_config(
                ropelab_tasks::TaskKind::Number,
                config.seeds[0],
                &config.tasks,
            );
            if let Some(o) = run
                .as_ref()
                .ok()
                .map(|r| &r.optim)
                .filter(|o| o.warmup >= o.steps)
            {
                println!(
                    "note: [train] warmup {} >= {} steps: the learning rate never reaches lr = {}",
                    o.warmup,
                    o.steps,
                    ropelab_model::number_text(o.lr)
                );
            }
        }
        Milestone::Datasets(rows) => print!("{}", dataset_table(rows)),
        Milestone::Trained(trained) => {
            print!("{}", training_table(trained));
            for t in trained {
                println!(
                    "\nseed {} {} task: heads at the last checkpoint ({})",
                    t.seed,
                    t.task,
                    Path::new(&t.run).join("scores.jsonl").display()
                );
                println!("{}", head_table(&t.scores, config.claims.gamma)?);
                println!(
                    "length generalisation ({}):",
                    Path::new(&t.run).join("lengthgen.csv").display()
                );
                println!("{}", super::lengthgen::table(&t.lengths));
            }
            println!();
        }
        Milestone::OverSeeds(tasks) => {
            for task in tasks {
                print!("{}", seed_table(task));
            }
        }
        Milestone::Theory(theory) => {
            for (mechanism, theta, rows) in &theory.curves {
                println!("discrepancy of the hand-built {mechanism} head (theta {theta}):");
                print!("{}", super::theory::discrepancy_table(rows));
            }
            super::theory::print_failures(&theory.failures_config, &theory.failures);
        }
        Milestone::Offset(experiment, outcome) => {
            println!("\nimplicit bias: fixed-offset retrieval (offset/):");
            println!("{}", super::offset::accuracy_table(experiment, outcome));
            println!(
                "{}",
                super::offset::mechanism_table(&outcome.runs, &outcome.mechanisms)
            );
        }
        Milestone::Canonical(done) => {
            for (experiment, summary) in done.iter() {
                let kind = experiment.task.kind;
                println!(
                    "\ncanonical task {kind} (canonical/{}/): one-layer attention-only \
                     RoPE head restricted to each band",
                    kind.name()
                );
                println!(
                    "{}",
                    super::canonical::band_table(summary).to_string().trim_end()
                );
                if kind == ropelab_tasks::CanonicalKind::Partial {
                    let dir = StudyDir::new(out).canonical(kind);
                    super::canonical::print_two_angles(summary, &dir)?;
                }
            }
        }
        Milestone::Claims(verdicts) => {
            println!("\nclaims of the paper, as measured by this study:");
            println!("{}", claims::table(verdicts));
        }
        Milestone::Pretrained(PretrainedStage::Written(files)) => {
            println!("pretrained model SmolLM2-135M ({} files):", files.len());
            for f in files {
                println!("  {}", f.display());
            }
        }
        Milestone::Pretrained(PretrainedStage::NotRun(why)) => {
            eprintln!("pretrained model stage not run: {why}")
        }
        Milestone::Pretrained(PretrainedStage::Skipped) => {
            println!("pretrained model stage skipped")
        }
        Milestone::Report(page) => *report = page.to_owned(),
    }
    Ok(())
}

/// The comparison of a study per head count: one row per (head count, seed, task).
fn head_count_table(rows: &[HeadCountRow]) -> Table {
    let columns: Vec<(&str, ropelab_io::Align)> = HeadCountRow::HEADER
        .iter()
        .map(|&h| {
            (
                h,
                if matches!(h, "task" | "head types") {
                    Left
                } else {
                    Right
                },
            )
        })
        .collect();
    let mut table = Table::new(&columns);
    for r in rows {
        table.row(r.cells());
    }
    table
}

/// The dataset summary: one row per seed, task and split.
fn dataset_table(rows: &[DatasetRow]) -> Table {
    let mut table = Table::new(&[
        ("seed", Left),
        ("task", Left),
        ("split", Left),
        ("samples", Right),
        ("valid", Right),
        ("len", Right),
        ("vocab", Right),
        ("per hop count", Left),
        ("seconds", Right),
    ]);
    for r in rows {
        let hops: Vec<String> = r
            .summary
            .per_hop
            .iter()
            .map(|(h, c)| format!("{h}:{c}"))
            .collect();
        table.row([
            r.seed.to_string(),
            r.task.to_string(),
            r.split.to_string(),
            r.summary.samples.to_string(),
            r.summary.valid.to_string(),
            r.summary.seq_len.to_string(),
            r.summary.vocab_size.to_string(),
            hops.join(" "),
            format!("{:.2}", r.seconds),
        ]);
    }
    table
}

/// One row per trained model: steps, wall times, test accuracy overall and per hop.
fn training_table(rows: &[Trained]) -> Table {
    let mut table = Table::new(&[
        ("seed", Left),
        ("task", Left),
        ("steps", Right),
        ("train s", Right),
        ("score s", Right),
        ("length s", Right),
        ("test acc", Right),
        ("per hop", Left),
    ]);
    for r in rows {
        let hops: Vec<String> = r
            .test
            .accuracy
            .per_hop
            .iter()
            .map(|(h, a)| format!("{h}:{a:.4}"))
            .collect();
        table.row([
            r.seed.to_string(),
            r.task.to_string(),
            r.steps.to_string(),
            format!("{:.1}", r.train_seconds),
            format!("{:.1}", r.score_seconds),
            format!("{:.1}", r.lengthgen_seconds),
            format!("{:.4}", r.test.accuracy.accuracy),
            hops.join(" "),
        ]);
    }
    table
}

/// A task over seeds: accuracy, then each head's scores and pure counts.
fn seed_table(t: &TaskOverSeeds) -> String {
    let mut table = Table::new(&[
        ("layer", Left),
        ("head", Left),
        ("s_pos", Right),
        ("s_sym", Right),
        ("positional", Right),
        ("symbolic", Right),
    ]);
    for h in &t.heads {
        table.row([
            h.layer.to_string(),
            h.head.to_string(),
            format!("{:.3} +- {:.3}", h.s_pos.0, h.s_pos.1),
            format!("{:.3} +- {:.3}", h.s_sym.0, h.s_sym.1),
            format!("{}/{}", h.positional, h.seeds),
            format!("{}/{}", h.symbolic, h.seeds),
        ]);
    }
    format!(
        "{} task over {} seeds: test accuracy {:.4} +- {:.4}\n{table}",
        t.task, t.seeds, t.accuracy.0, t.accuracy.1
    )
}
