//! The training loop: last-token cross-entropy, AdamW with warm-up and decay, periodic
//! validation, metrics lines, checkpoints, exact resume, and a stop on a non-finite loss.

use std::path::Path;

use candle_core::Device;
use ropelab_model::{GptJ, Objective};
use ropelab_tasks::{Dataset, Split, Task};
use serde::Serialize;

use ropelab_io::DirLock;

use crate::ambiguous_data::AmbiguousBatches;
use crate::canonical_data::CanonicalBatches;
use crate::data::{batch_targets, evaluate_objective, Accuracy, EVAL_MEMORY};
use crate::language_data::LanguageBatches;
use crate::offset_data::OffsetBatches;
use crate::optim::{lr_at, AdamW};
use crate::run_dir::{CheckpointState, RunDir};
use crate::step::{batch_indices, step_dropout, step_start, Engine, Stepper};
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
    /// The run that logged the line ([`RunConfig::identity`] of its `config.toml`; set by the
    /// trainer; empty in runs begun before lines named their run), so a log copied from
    /// another run is refused by name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub run: String,
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

/// A training run bound to its directory, which it holds locked (one writer) for its life.
pub struct Trainer {
    _lock: DirLock,
    dir: RunDir,
    config: RunConfig,
    model: GptJ,
    optimizer: AdamW,
    data: Data,
    state: CheckpointState,
    /// The latest validation (restored from `metrics.jsonl` on resume).
    last_val: Option<Accuracy>,
    engine: Engine,
}

/// What a run trains and validates on.
enum Data {
    /// A multi-hop task's training and validation datasets.
    Tasks {
        train: Box<Dataset>,
        val: Box<Dataset>,
    },
    /// Fixed-offset retrieval's batches.
    Offset(OffsetBatches),
    /// A canonical task's batches.
    Canonical(CanonicalBatches),
    /// A formal language's batches.
    Language(LanguageBatches),
    /// The ambiguous task's batches.
    Ambiguous(AmbiguousBatches),
}

impl Data {
    fn new(config: &RunConfig) -> Result<Self> {
        if let Some(task) = &config.canonical {
            let (train, val) = (config.data.train, config.data.val);
            return Ok(Data::Canonical(CanonicalBatches::new(
                *task,
                config.seed,
                train,
                val,
            )?));
        }
        if let Some(task) = &config.ambiguous {
            let (train, val) = (config.data.train, config.data.val);
            return Ok(Data::Ambiguous(AmbiguousBatches::new(
                task,
                config.seed,
                train,
                val,
            )?));
        }
        if let Some(offset) = &config.offset {
            let (train, val) = (config.data.train, config.data.val);
            return Ok(Data::Offset(OffsetBatches::new(
                offset,
                config.seed,
                train,
                val,
            )?));
        }
        if let Some(language) = &config.language {
            let (train, val) = (config.data.train, config.data.val);
            return Ok(Data::Language(LanguageBatches::new(
                language,
                config.seed,
                train,
                val,
            )));
        }
        let task = Task::new(config.task, config.layout.clone())?;
        let (seed, sizes) = (config.seed, &config.data);
        let train = Dataset::new(task.clone(), seed, Split::Train, sizes.train, 0)?;
        let val = Dataset::new(task, seed, Split::Val, sizes.val, 0)?;
        Ok(Data::Tasks {
            train: Box::new(train),
            val: Box::new(val),
        })
    }

    /// Update `step`'s flat ids, targets and row count.
    fn step_batch(
        &self,
        step: usize,
        batch: usize,
        objective: Objective,
    ) -> Result<(Vec<u32>, Vec<u32>, usize)> {
        Ok(match self {
            Data::Tasks { train, .. } => {
                let indices = batch_indices(step, batch, train.len());
                let (ids, targets) = batch_targets(train, &indices, objective)?;
                (ids, targets, indices.len())
            }
            Data::Language(l) => {
                let (ids, labels) = l.step_batch(step, batch);
                (ids, labels, batch)
            }
            Data::Offset(o) => {
                let (ids, targets) = o.step_batch(step, batch, objective);
                (ids, targets, batch)
            }
            Data::Canonical(c) => {
                let (ids, answers) = c.step_batch(step, batch);
                (ids, answers, batch)
            }
            Data::Ambiguous(a) => {
                let (ids, answers) = a.step_batch(step, batch);
                (ids, answers, batch)
            }
        })
    }

    /// The validation accuracy of `model`.
    fn validate(&self, model: &GptJ, objective: Objective) -> Result<Accuracy> {
        match self {
            Data::Tasks { val, .. } => evaluate_objective(model, val, EVAL_MEMORY, objective),
            Data::Language(l) => l.evaluate(model, EVAL_MEMORY),
            Data::Offset(o) => o.evaluate(model, EVAL_MEMORY),
            Data::Canonical(c) => c.evaluate(model, EVAL_MEMORY),
            Data::Ambiguous(a) => a.evaluate(model, EVAL_MEMORY),
        }
    }
}

impl Trainer {
    /// Starts a new run in `root`: writes `config.toml`, initialises the model from the seed,
    /// evaluates it and saves checkpoint 0.
    pub fn start(root: &Path, config: RunConfig, device: &Device) -> Result<Self> {
        config.check()?;
        let existed = root.exists();
        let had_metrics = root.join("metrics.jsonl").exists();
        let lock = DirLock::acquire(root)?;
        let dir = RunDir::create(root, &config)?;
        // A run refused at its start (a model its data does not fit, step 0's evaluation
        // failing) leaves nothing behind: a config.toml and checkpoints/ would make a
        // resumable run of a refused command (sixth pass, A5).
        Self::initialise(lock, dir, config, device).inspect_err(|_| {
            if existed {
                let _ = std::fs::remove_file(root.join("config.toml"));
                if !had_metrics {
                    let _ = std::fs::remove_file(root.join("metrics.jsonl"));
                }
                let _ = std::fs::remove_dir_all(root.join("checkpoints"));
                let _ = std::fs::remove_file(root.join(ropelab_io::lock::LOCK_FILE));
            } else {
                let _ = std::fs::remove_dir_all(root);
            }
        })
    }

    /// Step 0 of a run whose directory holds its config: the model from the seed, its
    /// evaluation, checkpoint 0.
    fn initialise(lock: DirLock, dir: RunDir, config: RunConfig, device: &Device) -> Result<Self> {
        // The run is its config.toml (a resumed `--steps` restart trains longer, same run).
        let config_identity = dir.identity()?;
        let model = GptJ::new(config.model.clone(), config.seed, device)?;
        let optimizer = AdamW::new(model.layout().params(), &config.optim);
        let data = Data::new(&config)?;
        let mut trainer = Self {
            _lock: lock,
            engine: Engine::default_for(device),
            dir,
            config,
            model,
            optimizer,
            data,
            state: CheckpointState {
                step: 0,
                adam_updates: 0,
                pending_loss_sum: 0.0,
                pending_loss_count: 0,
                metrics_line: None,
                run: config_identity,
                log_sha256: None,
            },
            last_val: None,
        };
        let val = trainer
            .data
            .validate(&trainer.model, trainer.config.objective)?;
        trainer.last_val = Some(val.clone());
        trainer.log(&MetricsLine {
            step: 0,
            lr: 0.0,
            loss: None,
            val: Some(val),
            run: String::new(),
        })?;
        trainer.save()?;
        Ok(trainer)
    }

    /// Resumes the run in `root` from its latest checkpoint; `steps` may extend the run.
    pub fn resume(root: &Path, steps: Option<usize>, device: &Device) -> Result<Self> {
        if !root.is_dir() {
            return Err(TrainError::run_dir(root, "no such directory"));
        }
        let lock = DirLock::acquire(root)?;
        let (dir, mut config) = RunDir::open(root)?;
        dir.remove_stale_temporaries()?;
        if let Some(steps) = steps {
            let done = dir.checkpoints()?.last().copied().unwrap_or(0);
            if steps < done {
                // Its own length: the one its latest checkpoint was trained towards.
                let own = dir.checkpoint_config(done).map_or(config.optim.steps, |c| {
                    c.optim.steps.max(config.optim.steps)
                });
                return Err(TrainError::Config(format!(
                    "{} is at step {done}: --steps {steps} would shorten it; give at least {done} (or nothing, to finish its own {own})",
                    root.display(),
                )));
            }
            config.optim.steps = steps;
            config.check()?;
        }
        if dir.checkpoints()?.is_empty() {
            // A log of trained steps without a checkpoint to go on from: the checkpoints were
            // removed, and starting again would replace that log without a word.
            if let Some(step) = dir.last_logged_step()?.filter(|&s| s > 0) {
                return Err(TrainError::run_dir(
                    root,
                    format!(
                        "has no checkpoint to resume from, but metrics.jsonl logs training up to \
                         step {step} (its checkpoints were removed): train again into another \
                         --out, or remove metrics.jsonl to restart this run from step 0"
                    ),
                ));
            }
            // Stopped before its step-0 checkpoint: nothing was trained, so start it again
            // from its own config (the metrics of the lost start are dropped).
            dir.clear_metrics()?;
            return Self::initialise(lock, dir, config, device);
        }
        let step = dir.latest_checkpoint()?;
        // A run extended by `--steps` records its new length in its checkpoints, not in
        // config.toml (whose digest keys what was measured of it): without `--steps`, a
        // resume continues to the length its latest checkpoint was trained towards.
        if steps.is_none() {
            let recorded = dir.checkpoint_config(step)?.optim.steps;
            if recorded > config.optim.steps {
                config.optim.steps = recorded;
            }
        }
        let (model, optimizer, state) = dir.load_training_state(step, &config, device)?;
        let mut restore = dir.checkpoint_metrics_lines(step)?;
        if let Some(line) = state.metrics_line.clone() {
            restore.retain(|(s, _)| *s != step);
            restore.push((step, line));
        }
        dir.truncate_metrics(step, &restore, &state.run, state.log_sha256.as_deref())?;
        let last_val = dir.last_validation()?;
        let data = Data::new(&config)?;
        Ok(Self {
            _lock: lock,
            engine: Engine::default_for(device),
            dir,
            config,
            model,
            optimizer,
            data,
            state,
            last_val,
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
        if let Some((key, ours, theirs)) = config.difference(&existing) {
            return Err(TrainError::Config(format!(
                "{} holds a run with another config ({key} = {theirs} there, {ours} asked); \
                 delete it or choose another directory",
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

    /// Steps done.
    pub fn step(&self) -> usize {
        self.state.step
    }

    /// Appends `line` to `metrics.jsonl`, and keeps its text for this step's checkpoint.
    fn log(&mut self, line: &MetricsLine) -> Result<()> {
        let line = MetricsLine {
            run: self.state.run.clone(),
            ..line.clone()
        };
        self.dir.append_metrics(&line)?;
        self.state.metrics_line = Some(serde_json::to_string(&line).expect("metrics serialise"));
        Ok(())
    }

    fn save(&mut self) -> Result<()> {
        // The log through this step, sealed with the checkpoint (an edit of any line is told).
        let path = self.dir.metrics_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(TrainError::io(path, e)),
        };
        let through = crate::run_dir::log_through(&text, self.state.step);
        self.state.log_sha256 = Some(ropelab_io::sha256_hex(through.as_bytes()));
        self.dir
            .save_checkpoint(&self.state, &self.model, &self.optimizer, &self.config)?;
        self.dir.prune_checkpoints(&self.config.optim.keep)
    }

    /// The error for a non-finite `which` loss at `step`, computed with the weights of step
    /// `bad`: the last good checkpoint is the latest before `bad` (a checkpoint of `bad` itself
    /// holds the weights whose loss this is; twenty-first pass, N1).
    fn diverged(
        &self,
        which: &'static str,
        step: usize,
        loss: f32,
        bad: usize,
    ) -> Result<TrainError> {
        let last_good = self
            .dir
            .checkpoints()?
            .into_iter()
            .rfind(|&s| s < bad)
            .map(|s| self.dir.checkpoint_dir(s).display().to_string())
            .unwrap_or_else(|| "none".into());
        Ok(TrainError::Diverged {
            which,
            step,
            loss,
            last_good,
        })
    }

    /// Trains until `optim.steps`, calling `observe` after every step. Returns the latest
    /// validation (also when no step was left to run: a resumed finished run returns the one
    /// its metrics recorded).
    pub fn run(&mut self, mut observe: impl FnMut(&Progress)) -> Result<Option<Accuracy>> {
        let o = self.config.optim.clone();
        let precision = self.config.precision;
        let mut stepper = Stepper::with_precision(self.engine, precision, &self.model)?;
        while self.state.step < o.steps {
            let step = self.state.step + 1;
            self.state.metrics_line = None;
            let mut dropout = step_dropout(self.config.model.dropout, self.config.seed, step);
            let objective = self.config.objective;
            let (ids, targets, rows) = self.data.step_batch(step, o.batch_size, objective)?;
            let lr = lr_at(step, &o);
            let (loss_value, _) = stepper.step(
                &self.model,
                &mut self.optimizer,
                objective,
                rows,
                (
                    &ids,
                    step_start(self.config.position_shift, self.config.seed, step),
                ),
                &targets,
                dropout.as_mut(),
                lr,
            )?;
            if !loss_value.is_finite() {
                // The loss of `step` is computed with the weights of step - 1.
                return Err(self.diverged("training", step, loss_value, step - 1)?);
            }
            self.state.step = step;
            self.state.adam_updates = self.optimizer.updates();
            self.state.pending_loss_sum += f64::from(loss_value);
            self.state.pending_loss_count += 1;

            let is_last = step == o.steps;
            let eval_now = step.is_multiple_of(o.eval_every) || is_last;
            let save_now = step.is_multiple_of(o.save_every) || is_last;
            if eval_now || save_now {
                stepper.sync(&self.model)?;
            }
            // Every checkpoint's step has its metrics line, so no loss is pending in a saved
            // state: a pending sum, which nothing else records, could not be checked on resume
            // (twenty-fifth pass, A-S4).
            if eval_now || save_now || step.is_multiple_of(o.log_every) {
                let val = if eval_now {
                    let acc = self.data.validate(&self.model, objective)?;
                    // A validation loss that is no number is a divergence too: stopped before
                    // it is logged or saved (twenty-first pass, N1).
                    if !acc.loss.is_finite() {
                        return Err(self.diverged("validation", step, acc.loss as f32, step)?);
                    }
                    self.last_val = Some(acc.clone());
                    Some(acc)
                } else {
                    None
                };
                let mean = self.state.pending_loss_sum / self.state.pending_loss_count as f64;
                self.log(&MetricsLine {
                    step,
                    lr,
                    loss: Some(mean),
                    val,
                    run: String::new(),
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
                val_accuracy: self.last_val.as_ref().map(|v| v.accuracy),
            });
        }
        stepper.sync(&self.model)?;
        Ok(self.last_val.clone())
    }
}
