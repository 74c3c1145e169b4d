//! One training update, shared by the trainer and `bench train`: which batch and which dropout
//! masks update `step` uses, and the [`Stepper`] that computes the loss, the gradients (fused
//! kernel or candle autograd) and the AdamW update.

use std::collections::hash_map::{Entry, HashMap};
use std::time::Instant;

use candle_core::{Device, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use ropelab_model::kernel::{FlatParams, FusedStep, Precision};
use ropelab_model::ops::Dropout;
use ropelab_model::{GptJ, Hooks, Objective};

use crate::optim::AdamW;
use crate::{Result, TrainError};

/// How a training step is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The fused CPU kernel ([`FusedStep`]): same function, same dropout masks, hand-written
    /// backward; the default on the CPU.
    Fused,
    /// candle ops and autograd (any device; the reference the fused kernel is tested against).
    Composed,
}

impl std::str::FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "fused" => Ok(Engine::Fused),
            "composed" => Ok(Engine::Composed),
            other => Err(format!(
                "unknown engine {other:?} (expected fused or composed)"
            )),
        }
    }
}

impl Engine {
    /// The default for `device`: fused on the CPU, composed elsewhere.
    pub fn default_for(device: &Device) -> Self {
        if device.is_cpu() {
            Engine::Fused
        } else {
            Engine::Composed
        }
    }
}

/// Indices of the training samples of update `step` (1-based): `batch_size` consecutive
/// samples, wrapping around the `n` samples of the split.
pub fn batch_indices(step: usize, batch_size: usize, n: usize) -> Vec<usize> {
    (0..batch_size)
        .map(|j| ((step - 1) * batch_size + j) % n)
        .collect()
}

/// The dropout of update `step` of a run seeded `seed` (None when `p` is 0): its masks depend
/// only on (seed, step), so both engines and a resumed run draw the same ones.
pub fn step_dropout(p: f32, seed: u64, step: usize) -> Option<Dropout> {
    (p > 0.0).then(|| {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&(step as u64).to_le_bytes());
        key[16] = 0xD7;
        Dropout::new(p, ChaCha8Rng::from_seed(key))
    })
}

/// The position of the first token of update `step`'s batch in a run seeded `seed` with
/// randomised positions up to `shift` (docs/bias.md): uniform in `0..=shift`, fixed by
/// (seed, step) so both engines and a resumed run draw the same one; 0 when `shift` is 0.
pub fn step_start(shift: usize, seed: u64, step: usize) -> usize {
    if shift == 0 {
        return 0;
    }
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&(step as u64).to_le_bytes());
    key[16] = 0x5A;
    rand::Rng::random_range(&mut ChaCha8Rng::from_seed(key), 0..=shift)
}

/// Wall time of one update's parts, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepTimes {
    /// The forward pass (and the loss).
    pub forward: f64,
    /// The backward pass.
    pub backward: f64,
    /// The AdamW update.
    pub optimizer: f64,
}

/// Computes updates with one engine. The fused engine keeps the parameters in a flat buffer
/// between updates; [`Stepper::sync`] writes them back into the model.
#[derive(Debug)]
pub struct Stepper {
    engine: Engine,
    precision: Precision,
    params: Option<FlatParams>,
    /// One fused kernel per batch shape seen (length-bucketed batches change `seq`).
    kernels: HashMap<(usize, usize, Objective), FusedStep>,
}

impl Stepper {
    /// A stepper for `model` with f32 products (the fused engine copies its parameters).
    pub fn new(engine: Engine, model: &GptJ) -> Result<Self> {
        Self::with_precision(engine, Precision::F32, model)
    }

    /// A stepper whose matrix products run in `precision`; bf16 needs the fused engine
    /// ([`engine_computes`]).
    pub fn with_precision(engine: Engine, precision: Precision, model: &GptJ) -> Result<Self> {
        engine_computes(engine, precision)?;
        let params = match engine {
            Engine::Fused => Some(FlatParams::from_model(model)?),
            Engine::Composed => None,
        };
        Ok(Self {
            engine,
            precision,
            params,
            kernels: HashMap::new(),
        })
    }

    /// The precision of the matrix products.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The engine.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// One update on `batch` sequences `ids` `[batch, seq]` at positions `start .. start + seq`
    /// (0 but for randomised positions) scored by `objective` against
    /// `targets` (`[batch]`, or `[batch * seq]` for every position) at learning rate `lr`.
    /// Returns the loss before the update and the time of each part; a non-finite loss is
    /// returned without updating anything.
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &mut self,
        model: &GptJ,
        optimizer: &mut AdamW,
        objective: Objective,
        batch: usize,
        (ids, start): (&[u32], usize),
        targets: &[u32],
        dropout: Option<&mut Dropout>,
        lr: f64,
    ) -> Result<(f32, StepTimes)> {
        let b = batch;
        let seq = ids.len() / b.max(1);
        let t0 = Instant::now();
        if let Some(params) = self.params.as_mut() {
            let kernel = match self.kernels.entry((b, seq, objective)) {
                Entry::Occupied(k) => k.into_mut(),
                Entry::Vacant(slot) => {
                    let shape = (b, seq);
                    let p = self.precision;
                    slot.insert(FusedStep::with_precision(
                        model.config(),
                        shape,
                        objective,
                        p,
                    )?)
                }
            };
            kernel.set_start(start)?;
            kernel.forward(params, ids, dropout)?;
            let t1 = Instant::now();
            let loss = kernel.backward(params, targets)?;
            let t2 = Instant::now();
            if loss.is_finite() {
                optimizer.step_flat(&mut params.values, &kernel.grads().values, lr)?;
            }
            return Ok((loss, times(t0, t1, t2)));
        }
        let device: &Device = model.device();
        ropelab_model::objective::check_targets(
            objective,
            targets,
            b,
            seq,
            model.config().out_dim(),
        )?;
        let ids = Tensor::from_slice(ids, (b, seq), device)?;
        let shifted = model.clone().starting_at(start);
        let model = &shifted;
        let logits = if objective.every_position() {
            model.forward(&ids, &mut Hooks::new(), dropout)?
        } else {
            model.forward_last(&ids, &mut Hooks::new(), dropout)?
        };
        let loss = ropelab_model::objective::loss(objective, &logits, targets)?;
        let value: f32 = loss.to_scalar()?;
        let t1 = Instant::now();
        if !value.is_finite() {
            return Ok((value, times(t0, t1, t1)));
        }
        let grads = loss.backward()?;
        let t2 = Instant::now();
        optimizer.step(&model.named_vars(), &grads, lr)?;
        Ok((value, times(t0, t1, t2)))
    }

    /// Writes the fused engine's parameters into `model` (nothing to do for the composed one,
    /// which updates the model in place).
    pub fn sync(&self, model: &GptJ) -> Result<()> {
        if let Some(p) = &self.params {
            p.write_to(model)?;
        }
        Ok(())
    }
}

fn times(t0: Instant, t1: Instant, t2: Instant) -> StepTimes {
    StepTimes {
        forward: (t1 - t0).as_secs_f64(),
        backward: (t2 - t1).as_secs_f64(),
        optimizer: t2.elapsed().as_secs_f64(),
    }
}

/// Refuses an engine that cannot train in `precision` (bf16 is the fused CPU kernel's): checked
/// before a run directory is made, so a refused run leaves none.
pub fn engine_computes(engine: Engine, precision: Precision) -> Result<()> {
    if engine == Engine::Composed && precision == Precision::Bf16 {
        return Err(TrainError::Config(
            "precision bf16 is computed by the fused engine (the CPU kernel); the composed \
             engine trains in f32"
                .into(),
        ));
    }
    Ok(())
}
