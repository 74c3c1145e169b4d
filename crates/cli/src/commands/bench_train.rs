//! `ropelab bench train`: steps/s of a training preset with either engine, with the time split
//! into forward, backward and optimizer, the achieved model FLOP/s, and the machine's peak f32
//! matmul throughput measured in the same run.

use std::time::Instant;

use anyhow::{bail, Result};
use candle_core::Device;
use clap::Args;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_model::kernel::{matmul_in, Bf16Path, Precision, View};
use ropelab_model::{GptJ, Head, ModelConfig, Objective, PositionEncoding};
use ropelab_tasks::{Dataset, Split, Task, TaskKind};
use ropelab_train::data::batch_ids;
use ropelab_train::optim::{lr_at, AdamW};
use ropelab_train::step::{batch_indices, step_dropout, Engine, Stepper};
use ropelab_train::Preset;

/// The model shapes `bench train` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchModel {
    /// The GPT-J of the paper's tasks (the preset's shape, last-token loss).
    Gptj,
    /// The expressivity paper's formal-language classifier: 5 layers, d_model 64, 8 heads, MLP
    /// 256, batch 128, lengths 9..=40 by bucketing (each batch one length, cycling), EOS
    /// classification.
    Formal,
    /// The canonical-task toy: 1 attention-only layer without LayerNorm, d_model 64, 1 head,
    /// length 64, batch 256, cross-entropy at every position.
    Toy,
}

impl BenchModel {
    /// The name `--model` takes.
    fn name(self) -> &'static str {
        match self {
            BenchModel::Gptj => "gptj",
            BenchModel::Formal => "formal",
            BenchModel::Toy => "toy",
        }
    }

    /// The length of step `step`'s batch: the formal model's bucketed lengths cycle through
    /// 9..=40 (`40 - 7 step mod 32`, the same formula as bench/torch_reference.py).
    fn seq(self, step: usize, fixed: usize) -> usize {
        match self {
            BenchModel::Formal => 40 - (7 * step) % 32,
            _ => fixed,
        }
    }
}

/// Arguments of `ropelab bench train`.
#[derive(Debug, Args)]
pub struct BenchTrainArgs {
    /// Which model shape: `gptj` (the preset's), `formal` or `toy` (the model zoo's).
    #[arg(long, value_enum, default_value = "gptj")]
    pub model: BenchModel,
    /// Preset to measure (`paper`, `quick` or `tiny`; default `paper`); `--model gptj` only (the
    /// formal and toy shapes are fixed).
    #[arg(long, value_parser = |s: &str| s.parse::<Preset>().map_err(|e| e.to_string()))]
    pub preset: Option<Preset>,
    /// Task whose batches are used (default `number`); `--model gptj` only (the formal and toy
    /// models read random tokens of their own shape).
    #[arg(long)]
    pub task: Option<TaskKind>,
    /// `fused` (the CPU kernel training uses) or `composed` (candle ops and autograd).
    #[arg(long, default_value = "fused", value_parser = |s: &str| s.parse::<Engine>())]
    pub engine: Engine,
    /// Measured steps (after `--warmup` unmeasured ones).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Unmeasured steps first.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Override the preset's number of layers.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub layers: Option<u64>,
    /// Override the preset's number of heads (rotary_dim shrinks to d_head if needed).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub heads: Option<u64>,
    /// Sequence length: random tokens of this length instead of the task's samples.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub seq: Option<u64>,
    /// Skip the peak-matmul measurement.
    #[arg(long)]
    pub no_peak: bool,
    /// Precisions of the matrix products to measure, side by side in this run (`f32`, `bf16`;
    /// comma-separated: `f32,bf16`). bf16 needs the fused engine.
    #[arg(long, value_delimiter = ',', default_value = "f32", value_parser = |s: &str| s.parse::<Precision>())]
    pub precision: Vec<Precision>,
    /// The bf16 path to use instead of the fastest this CPU has (`amx`, `avx512-bf16` or
    /// `emulated`).
    #[arg(long, value_parser = |s: &str| s.parse::<Bf16Path>())]
    pub bf16_path: Option<Bf16Path>,
}

/// Matmul FLOPs of one training step (forward x 3: backward costs about twice the forward),
/// counted for the full model at every position, as PyTorch computes it; the output layer at
/// the last position, or at every position for the every-position objective.
pub fn step_flops(model: &ModelConfig, batch: usize, seq: usize, objective: Objective) -> f64 {
    let (d, t) = (model.d_model as f64, seq as f64);
    let m = if model.mlp { model.d_mlp as f64 } else { 0.0 };
    let per_token = 2.0 * (4.0 * d * d + 2.0 * d * m) + 2.0 * 2.0 * t * d;
    let out_rows = if objective.every_position() { t } else { 1.0 };
    let forward = batch as f64
        * (t * per_token * model.n_layers as f64 + out_rows * 2.0 * d * model.out_dim() as f64);
    3.0 * forward
}

/// The model zoo's benchmark shapes (the GPT-J shape comes from the preset).
fn zoo_model(kind: BenchModel, base: &ModelConfig) -> (ModelConfig, usize, usize, Objective) {
    let mut m = base.clone();
    m.dropout = 0.0;
    m.layer_positions = vec![];
    m.tied_embeddings = false;
    match kind {
        BenchModel::Gptj => (m, 0, 0, Objective::LastToken),
        BenchModel::Formal => {
            // PAD, BOS, EOS and two letters.
            (m.vocab_size, m.n_layers, m.n_heads, m.d_model, m.d_mlp) = (5, 5, 8, 64, 256);
            m.position = PositionEncoding::gptj(8);
            m.head = Head::Classifier { classes: 2 };
            (m, 128, 40, Objective::EosClass)
        }
        BenchModel::Toy => {
            (m.vocab_size, m.n_layers, m.n_heads, m.d_model, m.d_mlp) = (64, 1, 1, 64, 1);
            (m.mlp, m.layer_norm) = (false, false);
            m.position = PositionEncoding::gptj(64);
            m.head = Head::Lm;
            (m, 256, 64, Objective::EveryPosition)
        }
    }
}

/// The machine's matmul throughput in `precision` in GFLOP/s: the best of a few 1536^3
/// products through the kernel's matmul (all threads).
pub fn peak_gflops(precision: Precision) -> f64 {
    let n = 1536;
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.1).collect();
    let mut c = vec![0f32; n * n];
    let v = View::dense(0, n, n);
    let mut best = f64::INFINITY;
    for _ in 0..4 {
        let t = Instant::now();
        matmul_in(precision, &mut c, v, &a, v, &a, v, false);
        best = best.min(t.elapsed().as_secs_f64());
    }
    2.0 * (n * n * n) as f64 / best / 1e9
}

/// The batches of the benchmark: the trainer's batches of task samples, or random tokens of a
/// given length with random targets of the objective's shape.
struct Batches {
    data: Option<Dataset>,
    vocab: u32,
    out: u32,
    batch: usize,
    objective: Objective,
}

impl Batches {
    fn get(&self, step: usize, seq: usize) -> Result<(Vec<u32>, Vec<u32>)> {
        if let Some(data) = &self.data {
            let idx = batch_indices(step, self.batch, data.len());
            return Ok(batch_ids(data, &idx)?);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(step as u64);
        let ids = (0..self.batch * seq)
            .map(|_| rng.random_range(1..self.vocab))
            .collect();
        let targets = (0..self.objective.targets_len(self.batch, seq))
            .map(|_| rng.random_range(0..self.out))
            .collect();
        Ok((ids, targets))
    }
}

/// Runs `ropelab bench train`.
pub fn run(args: BenchTrainArgs, guard: super::Guard) -> Result<()> {
    super::each_once("--precision", &args.precision)?;
    // A bf16 path with no bf16 measured would do nothing (twenty-first pass, S-D).
    if let Some(path) = args.bf16_path {
        anyhow::ensure!(
            args.precision.contains(&Precision::Bf16),
            "--bf16-path {} applies to a bf16 measurement; --precision lists none (give \
             --precision bf16 or f32,bf16)",
            path.name()
        );
    }
    if args.model != BenchModel::Gptj {
        // A setting the zoo's fixed shapes would not read is refused, not dropped.
        for (flag, given) in [
            ("--preset", args.preset.is_some()),
            ("--task", args.task.is_some()),
        ] {
            if given {
                bail!(
                    "bench train: {flag} applies to --model gptj only (the {} model's shape and \
                     data are fixed)",
                    args.model.name()
                );
            }
        }
    }
    let mut config = args
        .preset
        .unwrap_or(Preset::Paper)
        .config(args.task.unwrap_or(TaskKind::Number));
    let (zoo, zoo_batch, zoo_seq, objective) = zoo_model(args.model, &config.model);
    if args.model != BenchModel::Gptj {
        if args.model == BenchModel::Formal && args.seq.is_some() {
            bail!("bench train: --seq does not apply to --model formal (its lengths are bucketed 9..=40)");
        }
        (config.model, config.optim.batch_size) = (zoo, zoo_batch);
    }
    if let Some(l) = args.layers {
        config.model.n_layers = l as usize;
    }
    if let Some(h) = args.heads {
        config.model.n_heads = h as usize;
        let d_head = config.model.d_model / config.model.n_heads.max(1);
        if let PositionEncoding::Rope { rotary_dim, .. } = &mut config.model.position {
            *rotary_dim = (*rotary_dim).min(d_head);
        }
    }
    if let Err(e) = config.model.check() {
        bail!("bench train: {e}");
    }
    let fixed_seq = match args.model {
        BenchModel::Gptj => args.seq.map_or(config.layout.core_len(), |s| s as usize),
        _ => args.seq.map_or(zoo_seq, |s| s as usize),
    };
    let seqs: std::collections::BTreeSet<usize> =
        (0..64).map(|s| args.model.seq(s, fixed_seq)).collect();
    let seqs: Vec<usize> = seqs.into_iter().collect();
    // Every listed precision runs the warm-up and the measured steps (a step: a forward and a
    // backward pass, about three forwards' arithmetic).
    let longest = seqs.iter().copied().max().unwrap_or(1);
    let steps = args
        .warmup
        .saturating_add(args.steps)
        .saturating_add(32)
        .saturating_mul(args.precision.len() as u64);
    let need =
        ropelab_train::training_memory(&config.model, config.optim.batch_size, &seqs, args.engine)
            .compute(
                ropelab_train::resources::forward_flops(
                    &config.model,
                    config.optim.batch_size,
                    longest,
                )
                .saturating_mul(3)
                .saturating_mul(steps),
                format!("{steps} training steps"),
            );
    guard.check("bench train", &need)?;
    let device = Device::Cpu;
    let model = GptJ::new(config.model.clone(), config.seed, &device)?;
    let b = config.optim.batch_size;
    let batches = Batches {
        data: match (args.seq, args.model) {
            (Some(_), _) | (_, BenchModel::Formal | BenchModel::Toy) => None,
            (None, BenchModel::Gptj) => {
                let task = Task::new(config.task, config.layout.clone())?;
                Some(Dataset::new(
                    task,
                    config.seed,
                    Split::Train,
                    config.data.train,
                    0,
                )?)
            }
        },
        vocab: config.model.vocab_size as u32,
        out: config.model.out_dim() as u32,
        batch: b,
        objective,
    };
    if let Some(path) = args.bf16_path {
        if let Err(why) = path.force() {
            bail!("bench train: --bf16-path {}: {why}", path.name());
        }
    }
    let c = &config.model;
    let shape = match args.model {
        BenchModel::Gptj => format!("{} preset", config.preset),
        BenchModel::Formal => "formal-language classifier".to_owned(),
        BenchModel::Toy => "attention-only toy".to_owned(),
    };
    let seq = match args.model {
        BenchModel::Formal => "9..=40 (bucketed)".to_owned(),
        _ => fixed_seq.to_string(),
    };
    println!(
        "ropelab bench train: {shape} ({} layers x {} heads, d_model {}), {} objective, {} engine, batch {b}, seq {seq}, {} parameters, {} threads",
        c.n_layers,
        c.n_heads,
        c.d_model,
        objective.name(),
        match args.engine {
            Engine::Fused => "fused",
            Engine::Composed => "composed",
        },
        c.n_params(),
        rayon::current_num_threads()
    );
    let mut rates = Vec::new();
    for &precision in &args.precision {
        let bench = Bench {
            args: &args,
            config: &config,
            model: &model,
            batches: &batches,
            objective,
            fixed_seq,
        };
        rates.push((precision, bench.measure(precision)?));
    }
    if let (Some((_, f32_rate)), Some((_, bf16_rate))) = (
        rates.iter().find(|(p, _)| *p == Precision::F32),
        rates.iter().find(|(p, _)| *p == Precision::Bf16),
    ) {
        println!(
            "bf16 / f32: {:.2}x steps/s ({})",
            bf16_rate / f32_rate,
            Bf16Path::detect().name()
        );
    }
    Ok(())
}

/// What one measurement reads.
struct Bench<'a> {
    args: &'a BenchTrainArgs,
    config: &'a ropelab_train::RunConfig,
    model: &'a GptJ,
    batches: &'a Batches,
    objective: Objective,
    fixed_seq: usize,
}

impl Bench<'_> {
    /// Trains a fresh copy of the model in `precision`, prints the timings and returns
    /// steps/s.
    fn measure(&self, precision: Precision) -> Result<f64> {
        let (args, config, batches) = (self.args, self.config, self.batches);
        let (objective, fixed_seq) = (self.objective, self.fixed_seq);
        let model = self.model;
        let b = config.optim.batch_size;
        let mut optimizer = AdamW::new(model.layout().params(), &config.optim);
        let mut stepper = Stepper::with_precision(args.engine, precision, model)?;
        let mut flops = 0.0;
        let (mut fwd, mut bwd, mut opt) = (0f64, 0f64, 0f64);
        // The formal model's warm-up covers one cycle of lengths, so every bucket's kernel exists
        // before the clock starts.
        let warmup = match args.model {
            BenchModel::Formal => args.warmup.max(32),
            _ => args.warmup,
        };
        let total = warmup + args.steps;
        let mut wall = Instant::now();
        for step in 1..=total as usize {
            if step == warmup as usize + 1 {
                (fwd, bwd, opt) = (0.0, 0.0, 0.0);
                wall = Instant::now();
            }
            let seq = args.model.seq(step, fixed_seq);
            if step > warmup as usize {
                flops += step_flops(&config.model, b, seq, objective);
            }
            let (ids, targets) = batches.get(step, seq)?;
            let mut dropout = step_dropout(config.model.dropout, config.seed, step);
            let lr = lr_at(step, &config.optim);
            let (_, t) = stepper.step(
                model,
                &mut optimizer,
                objective,
                b,
                (&ids, 0),
                &targets,
                dropout.as_mut(),
                lr,
            )?;
            fwd += t.forward;
            bwd += t.backward;
            opt += t.optimizer;
        }
        let seconds = wall.elapsed().as_secs_f64();
        let n = args.steps as f64;
        let flops = flops / n;
        let path = match precision {
            Precision::F32 => "f32 (gemm crate)".to_owned(),
            Precision::Bf16 => format!("bf16 on {}", Bf16Path::detect().name()),
        };
        println!("[{path}] {:.3} steps/s", n / seconds);
        println!(
            "[{path}] ms/step: {:.1} total = forward {:.1} + backward {:.1} + optimizer {:.1} (+ batching {:.1})",
            1e3 * seconds / n,
            1e3 * fwd / n,
            1e3 * bwd / n,
            1e3 * opt / n,
            1e3 * (seconds - fwd - bwd - opt) / n
        );
        let achieved = flops * n / seconds / 1e9;
        println!(
            "[{path}] {achieved:.1} GFLOP/s (model matmul FLOPs: {:.2} GFLOP per step on average)",
            flops / 1e9
        );
        if !args.no_peak {
            let peak = peak_gflops(precision);
            println!(
                "[{path}] peak {precision} matmul: {peak:.1} GFLOP/s (1536^3); the step reaches {:.0}% of it",
                100.0 * achieved / peak
            );
        }
        Ok(n / seconds)
    }
}
