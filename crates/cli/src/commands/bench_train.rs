//! `ropelab bench train`: steps/s of a training preset, with the time split into forward,
//! backward and optimizer, and the achieved model FLOP/s.

use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use clap::Args;
use ropelab_model::ops::{cross_entropy, Dropout};
use ropelab_model::{GptJ, Hooks, ModelConfig};
use ropelab_tasks::{Dataset, Split, Task, TaskKind};
use ropelab_train::data::batch;
use ropelab_train::optim::{lr_at, AdamW};
use ropelab_train::Preset;

/// Arguments of `ropelab bench train`.
#[derive(Debug, Args)]
pub struct BenchTrainArgs {
    /// Preset to measure (`paper`, `quick` or `tiny`).
    #[arg(long, default_value = "paper", value_parser = |s: &str| s.parse::<Preset>().map_err(|e| e.to_string()))]
    pub preset: Preset,
    /// Task whose batches are used.
    #[arg(long, default_value = "number")]
    pub task: TaskKind,
    /// Measured steps (after `--warmup` unmeasured ones).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Unmeasured steps first.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
}

/// Matmul FLOPs of one training step (forward x 3: backward costs about twice the forward).
pub fn step_flops(model: &ModelConfig, batch: usize, seq: usize) -> f64 {
    let (d, m, t) = (model.d_model as f64, model.d_mlp as f64, seq as f64);
    let per_token = 2.0 * (4.0 * d * d + 2.0 * d * m) + 2.0 * 2.0 * t * d;
    let forward =
        batch as f64 * (t * per_token * model.n_layers as f64 + 2.0 * d * model.vocab_size as f64);
    3.0 * forward
}

/// Runs `ropelab bench train`.
pub fn run(args: BenchTrainArgs) -> Result<()> {
    let config = args.preset.config(args.task);
    let device = Device::Cpu;
    let model = GptJ::new(config.model.clone(), config.seed, &device)?;
    let vars = model.named_vars();
    let mut optimizer = AdamW::new(&vars, &config.optim)?;
    let task = Task::new(config.task, config.layout.clone())?;
    let data = Dataset::new(task, config.seed, Split::Train, config.data.train, 0)?;
    let b = config.optim.batch_size;
    let (mut fwd, mut bwd, mut opt) = (0f64, 0f64, 0f64);
    let total = args.warmup + args.steps;
    let mut wall = Instant::now();
    for step in 1..=total as usize {
        if step == args.warmup as usize + 1 {
            (fwd, bwd, opt) = (0.0, 0.0, 0.0);
            wall = Instant::now();
        }
        let indices: Vec<usize> = (0..b).map(|j| ((step - 1) * b + j) % data.len()).collect();
        let batch = batch(&data, &indices, &device)?;
        let mut dropout = (config.model.dropout > 0.0).then(|| {
            Dropout::new(
                config.model.dropout,
                rand::SeedableRng::seed_from_u64(step as u64),
            )
        });
        let t0 = Instant::now();
        let logits = model.forward_last(&batch.ids, &mut Hooks::new(), dropout.as_mut())?;
        let loss = cross_entropy(&logits, &batch.targets)?;
        let _: f32 = loss.to_scalar()?;
        let t1 = Instant::now();
        let grads = loss.backward()?;
        let t2 = Instant::now();
        optimizer.step(&vars, &grads, lr_at(step, &config.optim))?;
        let t3 = Instant::now();
        fwd += (t1 - t0).as_secs_f64();
        bwd += (t2 - t1).as_secs_f64();
        opt += (t3 - t2).as_secs_f64();
    }
    let seconds = wall.elapsed().as_secs_f64();
    let n = args.steps as f64;
    let flops = step_flops(&config.model, b, config.layout.core_len());
    println!(
        "ropelab bench train: {} preset, {} task, batch {b}, seq {}, {} parameters, {} threads",
        config.preset,
        config.task,
        config.layout.core_len(),
        config.model.n_params(),
        candle_core::utils::get_num_threads()
    );
    println!("{:.3} steps/s", n / seconds);
    println!(
        "ms/step: {:.1} total = forward {:.1} + backward {:.1} + optimizer {:.1} (+ batching {:.1})",
        1e3 * seconds / n,
        1e3 * fwd / n,
        1e3 * bwd / n,
        1e3 * opt / n,
        1e3 * (seconds - fwd - bwd - opt) / n
    );
    println!(
        "{:.1} GFLOP/s (model matmul FLOPs: {:.2} GFLOP per step)",
        flops * n / seconds / 1e9,
        flops / 1e9
    );
    Ok(())
}
