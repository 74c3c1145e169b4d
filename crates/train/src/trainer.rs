//! The training loop: last-token cross-entropy, AdamW with warm-up and decay, periodic
//! validation, metrics lines, checkpoints, exact resume, and a stop on a non-finite loss.

use std::path::Path;

use candle_core::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use ropelab_model::kernel::{FlatParams, FusedStep};
use ropelab_model::ops::{cross_entropy, Dropout};
use ropelab_model::{GptJ, Hooks};
use ropelab_tasks::{Dataset, Split, Task};
use serde::Serialize;

use crate::data::{batch, batch_ids, evaluate, Accuracy, EVAL_MEMORY};
use crate::optim::{lr_at, AdamW};
use crate::run_dir::{CheckpointState, RunDir};
use crate::{Result, RunConfig, TrainError};

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, Serialize)]
pub struct MetricsLine {
    /// Optimizer steps done.
    pub step: usize,
    /// Learning rate of the last update.
    pub lr: f64,
    /// Mean training loss since the previous line (absent at step 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// Validation accuracy and loss, on evaluation steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val: Option<Accuracy>,
}

/// What the loop reports after each step.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Steps done.
    pub step: usize,
    /// Steps in the run.
    pub total: usize,
    /// This step's training loss.
    pub loss: f32,
    /// The latest validation accuracy.
    pub val_accuracy: Option<f64>,
}

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

/// The fused engine's state during [`Trainer::run`].
struct FusedState {
    params: FlatParams,
    kernel: Option<FusedStep>,
}

/// A training run bound to its directory.
pub struct Trainer {
    dir: RunDir,
    config: RunConfig,
    model: GptJ,
    optimizer: AdamW,
    train: Dataset,
    val: Dataset,
    state: CheckpointState,
    last_val: Option<f64>,
    engine: Engine,
}

fn datasets(config: &RunConfig) -> Result<(Dataset, Dataset)> {
    let task = Task::new(config.task, config.layout.clone())?;
    Ok((
        Dataset::new(
            task.clone(),
            config.seed,
            Split::Train,
            config.data.train,
            0,
        )?,
        Dataset::new(task, config.seed, Split::Val, config.data.val, 0)?,
    ))
}

impl Trainer {
    /// Starts a new run in `root`: writes `config.toml`, initialises the model from the seed,
    /// evaluates it and saves checkpoint 0.
    pub fn start(root: &Path, config: RunConfig, device: &Device) -> Result<Self> {
        config.check()?;
        let dir = RunDir::create(root, &config)?;
        let model = GptJ::new(config.model.clone(), config.seed, device)?;
        let optimizer = AdamW::new(model.layout().params(), &config.optim);
        let (train, val) = datasets(&config)?;
        let mut trainer = Self {
            engine: Engine::default_for(device),
            dir,
            config,
            model,
            optimizer,
            train,
            val,
            state: CheckpointState {
                step: 0,
                adam_updates: 0,
                pending_loss_sum: 0.0,
                pending_loss_count: 0,
            },
            last_val: None,
        };
        let val = evaluate(&trainer.model, &trainer.val, EVAL_MEMORY)?;
        trainer.last_val = Some(val.accuracy);
        trainer.dir.append_metrics(&MetricsLine {
            step: 0,
            lr: 0.0,
            loss: None,
            val: Some(val),
        })?;
        trainer.save()?;
        Ok(trainer)
    }

    /// Resumes the run in `root` from its latest checkpoint; `steps` may extend the run.
    pub fn resume(root: &Path, steps: Option<usize>, device: &Device) -> Result<Self> {
        let (dir, mut config) = RunDir::open(root)?;
        if let Some(steps) = steps {
            config.optim.steps = steps;
            config.check()?;
        }
        let step = dir.latest_checkpoint()?;
        let (model, optimizer, state) = dir.load_training_state(step, &config, device)?;
        dir.truncate_metrics(step)?;
        let (train, val) = datasets(&config)?;
        Ok(Self {
            engine: Engine::default_for(device),
            dir,
            config,
            model,
            optimizer,
            train,
            val,
            state,
            last_val: None,
        })
    }

    /// Continues the run in `root` when it holds one with exactly `config` (from its latest
    /// checkpoint), or starts it there; a run with another config is an error naming the
    /// directory, so a study never mixes two runs.
    pub fn start_or_resume(root: &Path, config: RunConfig, device: &Device) -> Result<Self> {
        let dir = RunDir::new(root);
        if !dir.config_path().exists() {
            return Self::start(root, config, device);
        }
        let (_, existing) = RunDir::open(root)?;
        if existing != config {
            return Err(TrainError::Config(format!(
                "{} holds a run with another config; delete it or choose another directory",
                root.display()
            )));
        }
        Self::resume(root, None, device)
    }

    /// The model in its current state.
    pub fn model(&self) -> &GptJ {
        &self.model
    }

    /// The run's configuration.
    pub fn config(&self) -> &RunConfig {
        &self.config
    }

    /// Chooses how steps are computed (the fused engine needs the CPU).
    pub fn set_engine(&mut self, engine: Engine) -> Result<()> {
        if engine == Engine::Fused && !self.model.device().is_cpu() {
            return Err(TrainError::Config(
                "the fused engine runs on the CPU; use the composed engine on a GPU".into(),
            ));
        }
        self.engine = engine;
        Ok(())
    }

    /// The engine in use.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Steps done.
    pub fn step(&self) -> usize {
        self.state.step
    }

    fn save(&self) -> Result<()> {
        self.dir
            .save_checkpoint(&self.state, &self.model, &self.optimizer, &self.config)?;
        Ok(())
    }

    /// The error for a non-finite loss at `step`, naming the last good checkpoint.
    fn diverged(&self, step: usize, loss: f32) -> Result<TrainError> {
        let last_good = self
            .dir
            .checkpoints()?
            .last()
            .map(|s| self.dir.checkpoint_dir(*s).display().to_string())
            .unwrap_or_else(|| "none".into());
        Ok(TrainError::Diverged {
            step,
            loss,
            last_good,
        })
    }

    /// One optimizer step on the batch at `indices`; returns the loss before the update.
    fn train_step(
        &mut self,
        step: usize,
        indices: &[usize],
        fused: Option<&mut FusedState>,
        mut dropout: Option<Dropout>,
    ) -> Result<f32> {
        let lr = lr_at(step, &self.config.optim);
        if let Some(f) = fused {
            let (ids, targets) = batch_ids(&self.train, indices)?;
            let kernel = match &mut f.kernel {
                Some(k) => k,
                slot => slot.insert(FusedStep::new(
                    &self.config.model,
                    indices.len(),
                    ids.len() / indices.len().max(1),
                )?),
            };
            let loss = kernel.loss_and_grads(&f.params, &ids, &targets, dropout.as_mut())?;
            if !loss.is_finite() {
                return Err(self.diverged(step, loss)?);
            }
            self.optimizer
                .step_flat(&mut f.params.values, &kernel.grads().values, lr)?;
            return Ok(loss);
        }
        let b = batch(&self.train, indices, self.model.device())?;
        let logits = self
            .model
            .forward_last(&b.ids, &mut Hooks::new(), dropout.as_mut())?;
        let loss = cross_entropy(&logits, &b.targets)?;
        let loss_value: f32 = loss.to_scalar()?;
        if !loss_value.is_finite() {
            return Err(self.diverged(step, loss_value)?);
        }
        let grads = loss.backward()?;
        self.optimizer.step(&self.model.named_vars(), &grads, lr)?;
        Ok(loss_value)
    }

    /// Trains until `optim.steps`, calling `observe` after every step. Returns the final
    /// validation accuracy.
    pub fn run(&mut self, mut observe: impl FnMut(&Progress)) -> Result<Option<Accuracy>> {
        let o = self.config.optim.clone();
        let mut fused = match self.engine {
            Engine::Fused => Some(FusedState {
                params: FlatParams::from_model(&self.model)?,
                kernel: None,
            }),
            Engine::Composed => None,
        };
        let mut last = None;
        while self.state.step < o.steps {
            let step = self.state.step + 1;
            let n = self.train.len();
            let indices: Vec<usize> = (0..o.batch_size)
                .map(|j| ((step - 1) * o.batch_size + j) % n)
                .collect();
            let dropout = (self.config.model.dropout > 0.0).then(|| {
                let mut key = [0u8; 32];
                key[..8].copy_from_slice(&self.config.seed.to_le_bytes());
                key[8..16].copy_from_slice(&(step as u64).to_le_bytes());
                key[16] = 0xD7;
                Dropout::new(self.config.model.dropout, ChaCha8Rng::from_seed(key))
            });
            let loss_value = self.train_step(step, &indices, fused.as_mut(), dropout)?;
            let lr = lr_at(step, &o);
            self.state.step = step;
            self.state.adam_updates = self.optimizer.updates();
            self.state.pending_loss_sum += f64::from(loss_value);
            self.state.pending_loss_count += 1;

            let is_last = step == o.steps;
            let eval_now = step % o.eval_every == 0 || is_last;
            let save_now = step % o.save_every == 0 || is_last;
            if let Some(f) = fused.as_ref().filter(|_| eval_now || save_now) {
                f.params.write_to(&self.model)?;
            }
            if eval_now || step % o.log_every == 0 {
                let val = if eval_now {
                    let acc = evaluate(&self.model, &self.val, EVAL_MEMORY)?;
                    self.last_val = Some(acc.accuracy);
                    last = Some(acc.clone());
                    Some(acc)
                } else {
                    None
                };
                let mean = self.state.pending_loss_sum / self.state.pending_loss_count as f64;
                self.dir.append_metrics(&MetricsLine {
                    step,
                    lr,
                    loss: Some(mean),
                    val,
                })?;
                self.state.pending_loss_sum = 0.0;
                self.state.pending_loss_count = 0;
            }
            if save_now {
                self.save()?;
            }
            observe(&Progress {
                step,
                total: o.steps,
                loss: loss_value,
                val_accuracy: self.last_val,
            });
        }
        if let Some(f) = &fused {
            f.params.write_to(&self.model)?;
        }
        Ok(last)
    }
}
