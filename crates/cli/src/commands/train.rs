//! `ropelab train`: train a model on a task; `--resume` continues a run from its latest
//! checkpoint.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use clap::Args;
use ropelab_model::kernel::Precision;
use ropelab_tasks::TaskKind;
use ropelab_train::Retention;
use ropelab_train::{training_need, Engine, Preset, RunConfig, RunDir, Trainer};

use super::{progress, Guard};

/// Arguments of `ropelab train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Task: `number`, `letter` or `language` (a formal language, docs/tasks.md; not needed
    /// with --resume or --config).
    #[arg(long, required_unless_present_any = ["resume", "config"])]
    pub task: Option<TaskKind>,
    /// Preset: `paper` (the paper's 12-layer model), `quick` (minutes on 2 cores) or `tiny`.
    #[arg(long, default_value = "quick", value_parser = parse_preset)]
    pub preset: Preset,
    /// A full run config in TOML (as written to RUN_DIR/config.toml); replaces the preset.
    #[arg(long, conflicts_with_all = ["task", "preset"])]
    pub config: Option<PathBuf>,
    /// Number of optimizer steps (overrides the preset; with --resume, extends the run).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: Option<u64>,
    /// Seed for data order, initialisation and dropout.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Save a checkpoint every K steps.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub save_every: Option<u64>,
    /// Run directory (config.toml, metrics.jsonl, checkpoints/).
    #[arg(long)]
    pub out: PathBuf,
    /// Keep only the last K checkpoints on disk (plus step 0 and those kept by --keep-every;
    /// default: every checkpoint, as `score` reads them all).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_last: Option<u64>,
    /// Also keep every checkpoint whose step is a multiple of M.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_every: Option<u64>,
    /// Continue the run in --out from its latest checkpoint.
    #[arg(long, conflicts_with_all = ["task", "preset", "config", "seed", "save_every", "keep_last", "keep_every"])]
    pub resume: bool,
    /// `fused` (the CPU training kernel, default) or `composed` (candle ops and autograd: the
    /// reference path, slower; same function, same dropout masks).
    #[arg(long, default_value = "fused", value_parser = |s: &str| s.parse::<Engine>())]
    pub engine: Engine,
    /// Precision of the fused engine's matrix products: `f32` or `bf16` (bf16 operands, f32
    /// accumulation; docs/performance.md#bf16-products). Overrides the config's `precision`;
    /// not with --resume (a run keeps the precision it started with).
    #[arg(long, conflicts_with = "resume", value_parser = |s: &str| s.parse::<Precision>())]
    pub precision: Option<Precision>,
}

fn parse_preset(s: &str) -> Result<Preset, String> {
    s.parse()
        .map_err(|e: ropelab_train::TrainError| e.to_string())
}

/// Runs `ropelab train`.
pub fn run(args: TrainArgs, guard: Guard) -> Result<()> {
    let device = Device::Cpu;
    let steps = args.steps.map(|s| s as usize);
    let mut trainer = if args.resume {
        // A job of a study, sweep or experiment is trained by it (its ledger and plan record
        // the steps it was measured at): extending it here would stale the whole directory.
        if let Some(owner) = super::nested_in(&args.out)? {
            anyhow::bail!(
                "{} is a job of {owner}, which trains it itself: change that directory's config \
                 and rerun it instead of resuming the job",
                args.out.display()
            );
        }
        // A run measured by a sweep, study or experiment has its training log in its ledger:
        // resuming it would change a measured file (twenty-fourth pass, S8).
        if ropelab_io::Ledger::load(&args.out)
            .ok()
            .flatten()
            .is_some_and(|l| l.files.contains_key("metrics.jsonl"))
        {
            anyhow::bail!(
                "{} was measured (its measured.json records its training log, metrics.jsonl): \
                 resuming would change a measured file; to train it further, copy the run \
                 without its measured.json and resume the copy",
                args.out.display()
            );
        }
        // The estimate of the rest of the run; a directory that cannot be read is reported by
        // `Trainer::resume` itself.
        if let Ok((dir, mut config)) = RunDir::open(&args.out) {
            let from = dir.latest_checkpoint().unwrap_or(0);
            config.optim.steps = steps.unwrap_or(config.optim.steps);
            guard.check(
                "train --resume",
                &training_need(&config, &args.out, from, args.engine),
            )?;
        }
        let t = Trainer::resume(&args.out, steps, &device)?;
        println!(
            "resuming {} at step {} of {}",
            args.out.display(),
            t.step(),
            t.config().optim.steps
        );
        t
    } else {
        let mut config =
            match &args.config {
                Some(path) => RunConfig::load(path)?,
                None => args.preset.config(args.task.ok_or_else(|| {
                    anyhow::anyhow!("--task is needed without --config or --resume")
                })?),
            };
        if let Some(s) = steps {
            config.optim.steps = s;
        }
        if let Some(seed) = args.seed {
            config.seed = seed;
        }
        if let Some(k) = args.save_every {
            config.optim.save_every = k as usize;
        }
        if let Some(p) = args.precision {
            config.precision = p;
        }
        if args.keep_last.is_some() || args.keep_every.is_some() {
            config.optim.keep = Retention {
                last: args.keep_last.map(|k| k as usize),
                every: args.keep_every.map(|m| m as usize),
            };
        }
        // Announced once the run has started: a refused one prints only its error.
        let announce = format!(
            "training {} on the {} task ({} preset): {} layers x {} heads, d_model {}, {} parameters, {} steps of {}",
            args.out.display(),
            config.task,
            config.preset,
            config.model.n_layers,
            config.model.n_heads,
            config.model.d_model,
            config.model.n_params(),
            config.optim.steps,
            config.optim.batch_size
        ) + &switched_off(&config.model)
            + &short_of_warmup(&config);
        config.check()?;
        ropelab_train::step::engine_computes(args.engine, config.precision)?;
        super::check_out_dir(&args.out, false)?;
        guard.check("train", &training_need(&config, &args.out, 0, args.engine))?;
        let t = Trainer::start(&args.out, config, &device)?;
        println!("{announce}");
        t
    };
    trainer.set_engine(args.engine)?;
    let start = Instant::now();
    let first = trainer.step();
    let total = trainer.config().optim.steps;
    let bar = progress(total as u64, "train");
    bar.set_position(first as u64);
    let result = trainer.run(|p| {
        bar.set_position(p.step as u64);
        if p.step % 10 == 0 {
            let val = p.val_accuracy.map_or("-".into(), |a| format!("{a:.3}"));
            bar.set_message(format!("loss {:.3} val {val}", p.loss));
        }
    });
    bar.finish_and_clear();
    let last = result?;
    let seconds = start.elapsed().as_secs_f64();
    let done = trainer.step() - first;
    println!(
        "{done} steps in {seconds:.1} s ({:.2} steps/s, {} engine, {} products, {} threads)",
        done as f64 / seconds.max(1e-9),
        match args.engine {
            Engine::Fused => "fused",
            Engine::Composed => "composed",
        },
        match trainer.config().precision {
            Precision::F32 => "f32".to_owned(),
            Precision::Bf16 => format!(
                "bf16 ({})",
                ropelab_model::kernel::Bf16Path::detect().name()
            ),
        },
        rayon::current_num_threads()
    );
    if let Some(acc) = last {
        let join = |m: &std::collections::BTreeMap<usize, f64>| -> String {
            let parts: Vec<String> = m.iter().map(|(k, a)| format!("{k}:{a:.3}")).collect();
            parts.join(" ")
        };
        let detail = if !acc.per_length.is_empty() {
            let worst = acc
                .per_length
                .iter()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .map_or(String::new(), |(n, a)| {
                    format!("; lowest {a:.3} at length {n}")
                });
            format!(" over lengths {}{worst}", join_range(&acc.per_length))
        } else if !acc.per_position.is_empty() {
            let worst = acc
                .per_position
                .iter()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .map_or(String::new(), |(p, a)| format!("{a:.3} at position {p}"));
            format!(" (lowest per answer position: {worst})")
        } else {
            format!(" (per hop {})", join(&acc.per_hop))
        };
        let token = acc
            .token_accuracy
            .map_or(String::new(), |t| format!(", token accuracy {t:.4}"));
        println!(
            "validation accuracy {:.4}{detail}{token}, loss {:.4}",
            acc.accuracy, acc.loss
        );
    }
    Ok(())
}

/// "lo-hi" of a per-length map's keys.
fn join_range(m: &std::collections::BTreeMap<usize, f64>) -> String {
    match (m.keys().next(), m.keys().last()) {
        (Some(lo), Some(hi)) => format!("{lo}-{hi}"),
        _ => String::new(),
    }
}

/// What the banner adds for a block part switched off, naming the setting it leaves unread
/// (a config keeps `d_mlp` and `ln_eps` so that a sweep can switch the part on and off).
fn switched_off(model: &ropelab_model::ModelConfig) -> String {
    let mut parts = vec![];
    if !model.mlp {
        parts.push(format!(
            "; attention-only blocks (mlp = false: d_mlp = {} unused)",
            model.d_mlp
        ));
    }
    if !model.layer_norm {
        parts.push(format!(
            "; no LayerNorm (layer_norm = false: ln_eps = {} unused)",
            model.ln_eps
        ));
    }
    parts.concat()
}

/// What the banner adds when the run ends inside its warm-up: the learning rate never reaches
/// the config's `lr` (a short test run may mean it; a long one rarely does).
fn short_of_warmup(config: &RunConfig) -> String {
    let o = &config.optim;
    if o.warmup >= o.steps {
        format!(
            "; warmup {} >= {} steps: the learning rate never reaches lr = {}",
            o.warmup,
            o.steps,
            ropelab_model::number_text(o.lr)
        )
    } else {
        String::new()
    }
}
