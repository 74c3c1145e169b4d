//! A training run's full configuration (task, data, model, optimisation) and the presets.

use std::path::Path;
use std::str::FromStr;

use ropelab_model::kernel::Precision;
use ropelab_model::{Head, ModelConfig, Objective, PositionEncoding};
use ropelab_tasks::{language, Language, Layout, Negatives, Task, TaskKind};
use serde::{Deserialize, Serialize};

use crate::{Result, TrainError};

/// Dataset sizes per split (samples of the task, see ropelab-tasks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// Training samples (the order repeats after one epoch).
    pub train: usize,
    /// Validation samples evaluated every `eval_every` steps.
    pub val: usize,
    /// Test samples used by `eval`.
    pub test: usize,
}

/// Optimisation and bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimConfig {
    /// Optimizer steps.
    pub steps: usize,
    /// Sequences per step.
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// AdamW beta1.
    pub beta1: f64,
    /// AdamW beta2.
    pub beta2: f64,
    /// AdamW epsilon.
    #[serde(default = "default_eps")]
    pub eps: f64,
    /// Decoupled weight decay (not applied to biases and LayerNorm weights).
    pub weight_decay: f64,
    /// Linear warm-up steps, then linear decay to 0 at `steps`.
    pub warmup: usize,
    /// Evaluate on the validation split every this many steps (and at the end).
    pub eval_every: usize,
    /// Save a checkpoint every this many steps (and at step 0 and the end).
    pub save_every: usize,
    /// Log the training loss every this many steps.
    pub log_every: usize,
    /// Checkpoints kept on disk (default: every saved one, as `score` reads them all).
    #[serde(default, skip_serializing_if = "Retention::keeps_all")]
    pub keep: Retention,
}

/// Which saved checkpoints stay on disk: step 0, the latest (to resume from), the last `last`,
/// and every step that is a multiple of `every`; both unset keeps all of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// The most recent checkpoints kept (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<usize>,
    /// Checkpoints whose step is a multiple of this are kept too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<usize>,
}

impl Retention {
    /// Whether every checkpoint is kept.
    pub fn keeps_all(&self) -> bool {
        self.last.is_none() && self.every.is_none()
    }

    /// Whether checkpoint `step` stays, given every saved step (ascending).
    pub fn keeps(&self, step: usize, steps: &[usize]) -> bool {
        if self.keeps_all() || step == 0 || steps.last() == Some(&step) {
            return true;
        }
        let recent = self
            .last
            .is_some_and(|k| steps.iter().rev().take(k).any(|&s| s == step));
        let periodic = self.every.is_some_and(|m| m > 0 && step.is_multiple_of(m));
        recent || periodic
    }
}

fn default_eps() -> f64 {
    ADAM_EPS
}

/// AdamW's beta1 of the experiments (the papers' models use 0.95: the presets say so).
pub const ADAM_BETA1: f64 = 0.9;

/// AdamW's beta2 of every run ropelab trains by default.
pub const ADAM_BETA2: f64 = 0.999;

/// AdamW's epsilon of every run ropelab trains by default.
pub const ADAM_EPS: f64 = 1e-8;

/// Checks a peak learning rate: positive and finite (`what` names it in the error; a huge one
/// trains until its loss is no number, which stops the run).
pub fn check_lr(what: &str, lr: f64) -> Result<()> {
    if lr.is_finite() && lr > 0.0 {
        Ok(())
    } else {
        Err(TrainError::Config(format!(
            "{what} must be positive and finite, got {}",
            ropelab_model::number_text(lr)
        )))
    }
}

impl OptimConfig {
    /// The experiments' schedule: AdamW with betas ([`ADAM_BETA1`], [`ADAM_BETA2`]) and
    /// [`ADAM_EPS`], no weight decay, a tenth of the steps (at most 1,000) of linear warm-up,
    /// validation and a checkpoint every quarter of the steps, the loss logged 100 times, and
    /// only the latest checkpoint kept.
    pub fn adamw(steps: usize, batch_size: usize, lr: f64) -> Self {
        let quarter = (steps / 4).max(1);
        OptimConfig {
            steps,
            batch_size,
            lr,
            beta1: ADAM_BETA1,
            beta2: ADAM_BETA2,
            eps: ADAM_EPS,
            weight_decay: 0.0,
            warmup: (steps / 10).min(1000),
            eval_every: quarter,
            save_every: quarter,
            log_every: (steps / 100).max(1),
            keep: Retention {
                last: Some(1),
                every: None,
            },
        }
    }
}

/// The formal language a `task = "language"` run learns (docs/tasks.md#formal-languages).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanguageData {
    /// The language (`aa-star`, `ab-star`, `a-sigma`, `sigma-a`, `sigma-ab-sigma`, `parity`,
    /// or its pattern).
    pub name: Language,
    /// Shortest and longest training string (without BOS and EOS); each batch has one length,
    /// drawn uniformly from this range.
    pub lengths: [usize; 2],
    /// How negatives are drawn: `uniform` or `near-miss`.
    #[serde(default)]
    pub negatives: Negatives,
}

impl Default for LanguageData {
    fn default() -> Self {
        Self {
            name: Language::AbStar,
            lengths: [1, 40],
            negatives: Negatives::Uniform,
        }
    }
}

/// The fixed-offset retrieval a `task = "offset"` run learns
/// (docs/tasks.md#fixed-offset-retrieval).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffsetData {
    /// Number of token symbols (the model's vocabulary is at least this).
    pub vocab: usize,
    /// The offset k: the target at position i is the token at i - k.
    pub k: usize,
    /// Shortest and longest training sequence; each batch has one length, drawn uniformly
    /// from this range (both longer than k).
    pub lengths: [usize; 2],
}

impl Default for OffsetData {
    fn default() -> Self {
        Self {
            vocab: 16,
            k: 2,
            lengths: [8, 16],
        }
    }
}

/// The largest `position_shift` plus one (2^24).
pub const MAX_POSITION_SHIFT: usize = 1 << 24;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The sizes of a `task = "ambiguous"` run's task (docs/tasks.md, "The ambiguous task").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmbiguousData {
    /// Letters (query symbols), at least 2.
    pub letters: usize,
    /// Values per letter (the answers; chance is 1 / values), at least 2.
    pub values: usize,
    /// Items of a training sequence (it has items + 1 tokens), at least 2.
    pub items: usize,
}

impl Default for AmbiguousData {
    fn default() -> Self {
        Self {
            letters: ropelab_tasks::ambiguous::LETTERS,
            values: ropelab_tasks::ambiguous::VALUES,
            items: ropelab_tasks::ambiguous::ITEMS,
        }
    }
}

impl AmbiguousData {
    /// The task of these sizes, or why they are impossible.
    pub fn task(&self) -> Result<ropelab_tasks::AmbiguousTask> {
        Ok(ropelab_tasks::AmbiguousTask::new(
            self.letters,
            self.values,
            self.items,
        )?)
    }
}

/// The canonical task a preset's `task = "canonical"` run learns: Index over 16 items of 16
/// symbols.
pub fn default_canonical() -> ropelab_tasks::CanonicalTask {
    ropelab_tasks::CanonicalTask {
        kind: ropelab_tasks::CanonicalKind::Index,
        len: 16,
        symbols: 16,
        attributes: 1,
    }
}

/// The names a run config's `preset` may give: the presets, the experiments that write run
/// configs of their own, and `custom` for a config written by hand.
pub const CONFIG_ORIGINS: [&str; 8] = [
    "paper",
    "quick",
    "tiny",
    "bias",
    "languages",
    "canonical",
    "offset",
    "custom",
];

/// Everything that determines a run; saved as `config.toml` in the run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Name of the preset or experiment this config came from (one of [`CONFIG_ORIGINS`]; a
    /// label, printed with the run: the tables below say what is trained).
    pub preset: String,
    /// Which task.
    pub task: TaskKind,
    /// Seed: fixes data order, initialisation and dropout.
    pub seed: u64,
    /// What a step predicts and scores (docs/model.md#objectives): `last_token` (the answer at
    /// the query), `every_position` (next-token cross-entropy at every position, the answer
    /// last) or `eos_class` (a class at the last position; needs a labelled task).
    #[serde(default)]
    pub objective: Objective,
    /// Task layout (number and letter tasks; a language run ignores it).
    #[serde(default)]
    pub layout: Layout,
    /// The language of a `task = "language"` run (absent for the multi-hop tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<LanguageData>,
    /// The retrieval of a `task = "offset"` run (absent for the other tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<OffsetData>,
    /// The task of a `task = "canonical"` run (absent for the other tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical: Option<ropelab_tasks::CanonicalTask>,
    /// The task of a `task = "ambiguous"` run (absent for the other tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ambiguous: Option<AmbiguousData>,
    /// Randomised positions (docs/bias.md): each training batch's positions start at an offset
    /// drawn uniformly from `0..=position_shift` (fixed by the seed and the step), so absolute
    /// angles carry no information; validation and tests run at offset 0. 0 (the default)
    /// trains at positions 0.. as usual.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub position_shift: usize,
    /// Precision of the fused engine's matrix products (docs/performance.md#bf16-products):
    /// `f32` (the default, left out of the file) or `bf16` (bf16 operands, f32 accumulation;
    /// weights, optimizer state, norms, softmax and the loss stay f32).
    #[serde(default, skip_serializing_if = "Precision::is_f32")]
    pub precision: Precision,
    /// Dataset sizes.
    pub data: DataConfig,
    /// Model architecture.
    pub model: ModelConfig,
    /// Optimisation.
    pub optim: OptimConfig,
}

/// A named starting configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// The paper's model and schedule (docs/model.md).
    Paper,
    /// The default study's model and schedule: 6 layers x 1 head, d_model 64, the paper's dropout
    /// and betas at 10x its learning rate; learns both tasks in minutes on 2 cores
    /// (docs/study.md).
    Quick,
    /// A few steps of a minute model, for tests.
    Tiny,
}

impl FromStr for Preset {
    type Err = TrainError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "paper" => Ok(Preset::Paper),
            "quick" => Ok(Preset::Quick),
            "tiny" => Ok(Preset::Tiny),
            other => Err(TrainError::Config(format!(
                "unknown preset {other:?} (expected paper, quick or tiny)"
            ))),
        }
    }
}

impl Preset {
    /// The preset's name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Paper => "paper",
            Preset::Quick => "quick",
            Preset::Tiny => "tiny",
        }
    }

    /// The full run configuration of this preset for `task` (a language run learns
    /// [`LanguageData::default`] with an EOS classifier).
    pub fn config(self, task: TaskKind) -> RunConfig {
        let layout = Layout::default();
        let vocab_size = match (task, Task::new(task, layout.clone())) {
            (_, Ok(t)) => t.vocab().len(),
            (TaskKind::Offset, _) => OffsetData::default().vocab,
            (TaskKind::Canonical, _) => default_canonical().vocab(),
            (TaskKind::Ambiguous, _) => AmbiguousData::default()
                .task()
                .map_or(0, |t| t.vocab().len()),
            _ => language::vocab().len(),
        };
        let (model, optim, data) = match self {
            Preset::Paper => (
                ModelConfig {
                    vocab_size,
                    n_layers: 12,
                    n_heads: 1,
                    d_model: 128,
                    d_mlp: 512,
                    ln_eps: 1e-5,
                    dropout: 0.1,
                    tied_embeddings: false,
                    position: PositionEncoding::gptj(128),
                    layer_positions: vec![],
                    attention: ropelab_model::AttentionKind::Softmax,
                    mlp: true,
                    layer_norm: true,
                    head: ropelab_model::Head::Lm,
                },
                OptimConfig {
                    steps: 6000,
                    batch_size: 64,
                    lr: 1e-4,
                    beta1: 0.95,
                    beta2: ADAM_BETA2,
                    eps: ADAM_EPS,
                    weight_decay: 1e-4,
                    warmup: 750,
                    eval_every: 500,
                    save_every: 500,
                    log_every: 50,
                    keep: Retention::default(),
                },
                DataConfig {
                    train: 432_000,
                    val: 2_400,
                    test: 45_600,
                },
            ),
            Preset::Quick => (
                ModelConfig {
                    vocab_size,
                    n_layers: 6,
                    n_heads: 1,
                    d_model: 64,
                    d_mlp: 256,
                    ln_eps: 1e-5,
                    dropout: 0.1,
                    tied_embeddings: false,
                    position: PositionEncoding::gptj(64),
                    layer_positions: vec![],
                    attention: ropelab_model::AttentionKind::Softmax,
                    mlp: true,
                    layer_norm: true,
                    head: ropelab_model::Head::Lm,
                },
                OptimConfig {
                    steps: 3000,
                    batch_size: 64,
                    lr: 1e-3,
                    beta1: 0.95,
                    beta2: ADAM_BETA2,
                    eps: ADAM_EPS,
                    weight_decay: 1e-4,
                    warmup: 300,
                    eval_every: 100,
                    save_every: 150,
                    log_every: 25,
                    keep: Retention::default(),
                },
                DataConfig {
                    train: 432_000,
                    val: 1_024,
                    test: 4_096,
                },
            ),
            Preset::Tiny => (
                ModelConfig {
                    vocab_size,
                    n_layers: 2,
                    n_heads: 2,
                    d_model: 16,
                    d_mlp: 32,
                    ln_eps: 1e-5,
                    dropout: 0.1,
                    tied_embeddings: false,
                    position: PositionEncoding::gptj(8),
                    layer_positions: vec![],
                    attention: ropelab_model::AttentionKind::Softmax,
                    mlp: true,
                    layer_norm: true,
                    head: ropelab_model::Head::Lm,
                },
                OptimConfig {
                    steps: 40,
                    batch_size: 8,
                    lr: 3e-3,
                    beta1: ADAM_BETA1,
                    beta2: ADAM_BETA2,
                    eps: ADAM_EPS,
                    weight_decay: 1e-4,
                    warmup: 5,
                    eval_every: 10,
                    save_every: 10,
                    log_every: 5,
                    keep: Retention::default(),
                },
                DataConfig {
                    train: 4_096,
                    val: 64,
                    test: 128,
                },
            ),
        };
        let mut config = RunConfig {
            preset: self.name().to_owned(),
            task,
            seed: 0,
            objective: Objective::LastToken,
            layout,
            language: None,
            offset: None,
            canonical: None,
            ambiguous: None,
            position_shift: 0,
            precision: Default::default(),
            data,
            model,
            optim,
        };
        if task == TaskKind::Ambiguous {
            config.ambiguous = Some(AmbiguousData::default());
        }
        if task == TaskKind::Offset {
            config.offset = Some(OffsetData::default());
        }
        if task == TaskKind::Canonical {
            config.canonical = Some(default_canonical());
        }
        if task == TaskKind::Language {
            config.language = Some(LanguageData::default());
            config.objective = Objective::EosClass;
            config.model.head = Head::Classifier { classes: 2 };
        }
        config
    }
}

/// The most test samples one measurement takes ([`RunConfig::test_samples`]).
pub const MAX_TEST_SAMPLES: usize = 1 << 22;

impl RunConfig {
    /// `n` when ropelab measures that many test samples: `n` drawn as the run's test split is
    /// drawn (the split itself when `n` is `data.test`; another `n`, larger included, another
    /// draw of the same test distribution), at most [`MAX_TEST_SAMPLES`]. Writers and readers of measured files share the
    /// bound, so a file one writes another reads (twenty-sixth pass, A-S1). The refusal names
    /// `what` asked for them.
    pub fn test_samples(&self, n: usize, what: &str) -> std::result::Result<usize, String> {
        if n > MAX_TEST_SAMPLES {
            return Err(format!(
                "{what} asks for {n} test samples, more than ropelab measures \
                 ({MAX_TEST_SAMPLES} at most)"
            ));
        }
        Ok(n)
    }

    /// This config with another seed, layout and data sizes (the vocabulary follows the layout).
    pub fn with_data(mut self, seed: u64, layout: Layout, data: DataConfig) -> Result<Self> {
        let layout = layout.for_task(self.task);
        self.model.vocab_size = Task::new(self.task, layout.clone())?.vocab().len();
        self.seed = seed;
        self.layout = layout;
        self.data = data;
        self.check()?;
        Ok(self)
    }

    /// Checks every value; the error names the first bad one.
    pub fn check(&self) -> Result<()> {
        // The label is printed with the run: a name no preset has would claim a model it is not
        // (issue 55, eighth pass).
        if !CONFIG_ORIGINS.contains(&self.preset.as_str()) {
            return Err(TrainError::Config(format!(
                "preset {:?} is no preset or experiment of ropelab ({}; \"custom\" for a \
                 config written by hand)",
                self.preset.chars().take(40).collect::<String>(),
                CONFIG_ORIGINS[..7].join(", ")
            )));
        }
        self.model.check()?;
        if self.language.is_some() && self.task != TaskKind::Language {
            return Err(TrainError::Config(format!(
                "a [language] table belongs to task = \"language\", not the {} task",
                self.task
            )));
        }
        if self.canonical.is_some() && self.task != TaskKind::Canonical {
            return Err(TrainError::Config(format!(
                "a [canonical] table belongs to task = \"canonical\", not the {} task",
                self.task
            )));
        }
        if self.ambiguous.is_some() && self.task != TaskKind::Ambiguous {
            return Err(TrainError::Config(format!(
                "an [ambiguous] table belongs to task = \"ambiguous\", not the {} task",
                self.task
            )));
        }
        if self.offset.is_some() && self.task != TaskKind::Offset {
            return Err(TrainError::Config(format!(
                "an [offset] table belongs to task = \"offset\", not the {} task",
                self.task
            )));
        }
        // Only the multi-hop tasks read `[layout]`; another task's run keeps the default there
        // (as ropelab writes it), and a changed one would be dropped without a word.
        if !matches!(self.task, TaskKind::Number | TaskKind::Letter)
            && self.layout != Layout::default()
        {
            return Err(TrainError::Config(format!(
                "[layout] is read by the number and letter tasks only; the {} task would ignore \
                 it: drop the table (or give its defaults)",
                self.task
            )));
        }
        let vocab = match self.task {
            TaskKind::Language => {
                self.check_language()?;
                language::vocab().len()
            }
            TaskKind::Offset => self.check_offset()?,
            TaskKind::Canonical => self.check_canonical()?,
            TaskKind::Ambiguous => self.check_ambiguous()?,
            _ => {
                self.layout.check_for(self.task)?;
                Task::new(self.task, self.layout.clone())?.vocab().len()
            }
        };
        if self.model.vocab_size < vocab {
            return Err(TrainError::Config(format!(
                "model.vocab_size {} is smaller than the {} task's vocabulary of {vocab}",
                self.model.vocab_size, self.task,
            )));
        }
        match (self.objective, self.model.head) {
            _ if self.task == TaskKind::Language => {}
            (Objective::EosClass, _) => {
                return Err(TrainError::Config(format!(
                    "objective = \"eos_class\" needs a task with class labels; the {} task has \
                     none (it has an answer token: use last_token or every_position)",
                    self.task
                )));
            }
            (_, Head::Classifier { .. }) => {
                return Err(TrainError::Config(format!(
                    "model.head is a classifier, but objective = \"{}\" predicts tokens \
                     (use head kind = \"lm\")",
                    self.objective.name()
                )));
            }
            _ => {}
        }
        self.check_position_shift()?;
        let o = &self.optim;
        let positive = [
            ("optim.steps", o.steps),
            ("optim.batch_size", o.batch_size),
            ("optim.eval_every", o.eval_every),
            ("optim.save_every", o.save_every),
            ("optim.log_every", o.log_every),
            ("data.train", self.data.train),
            ("data.val", self.data.val),
            ("data.test", self.data.test),
            ("optim.keep.last", o.keep.last.unwrap_or(1)),
            ("optim.keep.every", o.keep.every.unwrap_or(1)),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(TrainError::Config(format!("{name} must be at least 1")));
        }
        check_lr("optim.lr", o.lr)?;
        for (name, b) in [("optim.beta1", o.beta1), ("optim.beta2", o.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return Err(TrainError::Config(format!(
                    "{name} must be in [0, 1), got {}",
                    ropelab_model::number_text(b)
                )));
            }
        }
        if !(o.eps.is_finite() && o.eps > 0.0) {
            return Err(TrainError::Config(format!(
                "optim.eps must be a finite positive number, got {}",
                o.eps
            )));
        }
        if !(o.weight_decay.is_finite() && o.weight_decay >= 0.0) {
            return Err(TrainError::Config(format!(
                "optim.weight_decay must be a finite number at least 0, got {}",
                o.weight_decay
            )));
        }
        Ok(())
    }

    /// The sequence lengths training batches have (with BOS and EOS for a language run).
    pub fn train_seq_lens(&self) -> Vec<usize> {
        if let Some(c) = &self.canonical {
            return vec![c.seq_len()];
        }
        if let Some(a) = &self.ambiguous {
            return vec![a.items + 1];
        }
        match (&self.language, &self.offset) {
            (Some(l), _) => (l.lengths[0]..=l.lengths[1]).map(|n| n + 2).collect(),
            (None, Some(o)) => (o.lengths[0]..=o.lengths[1]).collect(),
            (None, None) => vec![self.layout.core_len()],
        }
    }

    /// The task of a canonical run: the `[canonical]` table, the answer at the last position,
    /// an LM head. Returns its vocabulary size.
    fn check_canonical(&self) -> Result<usize> {
        let c = self.canonical.as_ref().ok_or_else(|| {
            TrainError::Config(
                "task = \"canonical\" needs a [canonical] table (kind, len, symbols, attributes)"
                    .into(),
            )
        })?;
        c.check()?;
        if self.objective != Objective::LastToken || self.model.head != Head::Lm {
            return Err(TrainError::Config(
                "a canonical run predicts the answer at the query: it needs objective = \
                 \"last_token\" and [model.head] kind = \"lm\""
                    .into(),
            ));
        }
        if let ropelab_model::PositionEncoding::Learned { max_len, .. } = &self.model.position {
            if *max_len < c.seq_len() {
                return Err(TrainError::Config(format!(
                    "the learned position table has {max_len} rows; samples have {} tokens",
                    c.seq_len()
                )));
            }
        }
        Ok(c.vocab())
    }

    /// Randomised positions need room: a learned table must cover the last shifted position,
    /// and the shift stays below 2^24 (where f32 angles lose whole radians).
    fn check_position_shift(&self) -> Result<()> {
        let shift = self.position_shift;
        // A learned table shorter than a training input (that does not clamp) fails on the
        // first batch: refused here, naming the key (twentieth pass, U7).
        if let ropelab_model::PositionEncoding::Learned {
            max_len,
            beyond: ropelab_model::Beyond::Error,
        } = &self.model.position
        {
            let longest = self.train_seq_lens().into_iter().max().unwrap_or(0);
            if shift == 0 && *max_len < longest {
                return Err(TrainError::Config(format!(
                    "model.position.max_len {max_len} is shorter than the longest training \
                     input of {longest} positions (give at least {longest}, or beyond = \
                     \"clamp\" to reuse the last vector)"
                )));
            }
        }
        if shift == 0 {
            return Ok(());
        }
        if shift >= MAX_POSITION_SHIFT {
            return Err(TrainError::Config(format!(
                "position_shift = {shift}: must be below {MAX_POSITION_SHIFT} (f32 angles of \
                 larger positions lose their precision)"
            )));
        }
        let longest = self.train_seq_lens().into_iter().max().unwrap_or(0);
        if let ropelab_model::PositionEncoding::Learned { max_len, .. } = &self.model.position {
            if *max_len < shift + longest {
                return Err(TrainError::Config(format!(
                    "position_shift = {shift}: the learned position table has {max_len} rows, \
                     shifted training sequences reach position {}",
                    shift + longest - 1
                )));
            }
        }
        Ok(())
    }

    /// The task of an ambiguous run: the `[ambiguous]` table, the answer at the last position,
    /// an LM head, a learned table covering a training sequence. Returns its vocabulary size.
    fn check_ambiguous(&self) -> Result<usize> {
        let a = self.ambiguous.as_ref().ok_or_else(|| {
            TrainError::Config(
                "task = \"ambiguous\" needs an [ambiguous] table (letters, values, items)".into(),
            )
        })?;
        let task = a.task()?;
        if self.objective != Objective::LastToken || self.model.head != Head::Lm {
            return Err(TrainError::Config(
                "an ambiguous run predicts the answer value at the last position: it needs \
                 objective = \"last_token\" and [model.head] kind = \"lm\""
                    .into(),
            ));
        }
        if let ropelab_model::PositionEncoding::Learned { max_len, .. } = &self.model.position {
            if *max_len < a.items + 1 {
                return Err(TrainError::Config(format!(
                    "the learned position table has {max_len} rows; samples have {} tokens",
                    a.items + 1
                )));
            }
        }
        Ok(task.vocab().len())
    }

    /// The retrieval of an offset run: the `[offset]` table, a token objective, lengths longer
    /// than k, and a learned absolute table covering them. Returns its vocabulary size.
    fn check_offset(&self) -> Result<usize> {
        let o = self.offset.as_ref().ok_or_else(|| {
            TrainError::Config(
                "task = \"offset\" needs an [offset] table (vocab, k, lengths)".into(),
            )
        })?;
        let task = ropelab_tasks::OffsetTask::new(o.vocab, o.k)?;
        if self.objective == Objective::EosClass || self.model.head != Head::Lm {
            return Err(TrainError::Config(
                "an offset run predicts the token k back: it needs objective = \"last_token\" \
                 or \"every_position\" and [model.head] kind = \"lm\""
                    .into(),
            ));
        }
        let [lo, hi] = o.lengths;
        if lo > hi {
            return Err(TrainError::Config(format!(
                "offset.lengths must be [shortest, longest], got [{lo}, {hi}]"
            )));
        }
        task.check_length(lo)?;
        if let ropelab_model::PositionEncoding::Learned { max_len, .. } = &self.model.position {
            if *max_len < hi {
                return Err(TrainError::Config(format!(
                    "the learned position table has {max_len} rows; training sequences reach \
                     length {hi}"
                )));
            }
        }
        Ok(o.vocab)
    }

    /// The language of a language run: the `[language]` table, an EOS classifier with two
    /// classes, and sensible lengths.
    fn check_language(&self) -> Result<()> {
        let l = self.language.as_ref().ok_or_else(|| {
            TrainError::Config(
                "task = \"language\" needs a [language] table (name, lengths)".into(),
            )
        })?;
        if self.objective != Objective::EosClass
            || self.model.head != (Head::Classifier { classes: 2 })
        {
            return Err(TrainError::Config(
                "a language run classifies membership: it needs objective = \"eos_class\" and \
                 [model.head] kind = \"classifier\", classes = 2"
                    .into(),
            ));
        }
        let [lo, hi] = l.lengths;
        if lo > hi || hi == 0 {
            return Err(TrainError::Config(format!(
                "language.lengths must be [shortest, longest] with 1 <= longest and shortest <= \
                 longest, got [{lo}, {hi}]"
            )));
        }
        if let Some(why) = l.name.one_label(lo..=hi) {
            return Err(TrainError::Config(format!(
                "language.lengths [{lo}, {hi}]: {why}; train on lengths with both labels"
            )));
        }
        Ok(())
    }

    /// Parses a TOML run config; `path` names the file in errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self> {
        let config: Self = toml::from_str(text).map_err(|e| TrainError::ConfigFile {
            path: path.to_owned(),
            message: ropelab_io::toml_error::describe(text, &e),
        })?;
        if let Some(message) = toml::from_str::<toml::Table>(text)
            .ok()
            .and_then(|t| keys_a_kind_never_reads(&t))
        {
            return Err(TrainError::ConfigFile {
                path: path.to_owned(),
                message,
            });
        }
        config.check().map_err(|e| TrainError::ConfigFile {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        Ok(config)
    }

    /// Reads a TOML run config.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::io(path, e))?;
        Self::from_toml(&text, path)
    }

    /// Which run a measurement file belongs to: `sha256:` and the first 16 hex digits of the
    /// SHA-256 of this config as TOML, its step count included (the learning rate decays over
    /// it; an extended run keeps the `config.toml` it started with, so it stays the same run).
    /// Two runs with one identity were trained alike (a seed fixes data, init and order), so
    /// their measurements agree; a file copied from a run of another task, seed, model or
    /// length is refused by name (eighth pass, a164, R002; ninth pass, n004).
    pub fn identity(&self) -> String {
        let hex = ropelab_io::checksum::sha256_hex(self.to_toml().as_bytes());
        format!("sha256:{}", &hex[..16])
    }

    /// The config as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a run config always serialises")
    }

    /// The SHA-256 (hex) of the config's TOML: the key of everything a run makes from it.
    pub fn digest(&self) -> String {
        ropelab_io::sha256_hex(self.to_toml().as_bytes())
    }

    /// The first setting (dotted key) in which `self` and `other` differ, with `self`'s value
    /// and `other`'s, or None when they are equal.
    pub fn difference(&self, other: &RunConfig) -> Option<(String, String, String)> {
        let a = serde_json::to_value(self).ok()?;
        let b = serde_json::to_value(other).ok()?;
        crate::run_dir::first_difference(&a, &b, "")
    }
}

/// A key beside a `kind` that reads nothing else (`[model.position] kind = "none"` with a
/// `base`, `[model.head] kind = "lm"` with `classes`): serde would drop it without a word, so
/// the config is refused naming it. ropelab never writes such a key; an axis of a sweep that
/// switches the kind gives the whole table (`"model.position" = [{ kind = "none" }, ...]`).
fn keys_a_kind_never_reads(config: &toml::Table) -> Option<String> {
    let model = config.get("model")?.as_table()?;
    let mut tables: Vec<(String, &toml::Table, &str)> = vec![];
    if let Some(t) = model.get("position").and_then(|v| v.as_table()) {
        tables.push(("[model.position]".into(), t, "none"));
    }
    if let Some(list) = model.get("layer_positions").and_then(|v| v.as_array()) {
        for (i, v) in list.iter().enumerate() {
            if let Some(t) = v.as_table() {
                tables.push((format!("model.layer_positions[{i}]"), t, "none"));
            }
        }
    }
    if let Some(t) = model.get("head").and_then(|v| v.as_table()) {
        tables.push(("[model.head]".into(), t, "lm"));
    }
    for (name, table, bare) in tables {
        if table.get("kind").and_then(|k| k.as_str()) != Some(bare) {
            continue;
        }
        if let Some(key) = table.keys().find(|k| *k != "kind") {
            return Some(format!(
                "{name} has kind = \"{bare}\", which reads no `{key}`: remove `{key}` (it would \
                 be ignored)"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_keeps_step_0_the_latest_the_last_k_and_every_mth() {
        let steps: Vec<usize> = (0..=100).step_by(10).collect();
        let kept = |r: Retention| -> Vec<usize> {
            steps
                .iter()
                .copied()
                .filter(|&s| r.keeps(s, &steps))
                .collect()
        };
        assert_eq!(kept(Retention::default()), steps);
        let r = Retention {
            last: Some(2),
            every: Some(50),
        };
        assert_eq!(kept(r), vec![0, 50, 90, 100]);
        let r = Retention {
            last: None,
            every: Some(30),
        };
        assert_eq!(kept(r), vec![0, 30, 60, 90, 100]);
        // A config without the table keeps everything and writes no `keep` key.
        let c = Preset::Tiny.config(TaskKind::Number);
        assert!(!c.to_toml().contains("keep"));
    }

    /// A key beside a kind that reads nothing is refused naming it; the same config without
    /// it loads, and one with a kind that reads it too (issue 55, fourth pass).
    #[test]
    fn keys_a_kind_never_reads_are_refused() {
        let text = Preset::Tiny.config(TaskKind::Number).to_toml();
        let path = Path::new("c.toml");
        assert!(RunConfig::from_toml(&text, path).is_ok());
        let rope = "kind = \"rope\"\nbase = 10000.0\nrotary_dim = 8\nlayout = \"interleaved\"";
        assert!(text.contains(rope), "{text}");
        let bare = text.replace(rope, "kind = \"none\"");
        assert!(RunConfig::from_toml(&bare, path).is_ok());
        for (from, to, key) in [
            (rope, "kind = \"none\"\nbase = 5.0", "base"),
            (rope, "kind = \"none\"\nrotary_dim = 4", "rotary_dim"),
            (
                "[model.head]\nkind = \"lm\"",
                "[model.head]\nkind = \"lm\"\nclasses = 3",
                "classes",
            ),
        ] {
            let err = RunConfig::from_toml(&text.replace(from, to), path)
                .err()
                .unwrap_or_else(|| panic!("{key} accepted"))
                .to_string();
            assert!(
                err.contains("c.toml") && err.contains(&format!("`{key}`")),
                "{err}"
            );
        }
        // In a per-layer list too.
        let mut c = Preset::Tiny.config(TaskKind::Number);
        c.model.layer_positions = vec![ropelab_model::PositionEncoding::None; c.model.n_layers];
        let listed = c.to_toml();
        assert!(RunConfig::from_toml(&listed, path).is_ok());
        let at = listed
            .find("[[model.layer_positions]]\nkind = \"none\"")
            .unwrap();
        let mut edited = listed.clone();
        edited.insert_str(
            at + "[[model.layer_positions]]\nkind = \"none\"".len(),
            "\nbase = 3.0",
        );
        let err = RunConfig::from_toml(&edited, path).unwrap_err().to_string();
        assert!(
            err.contains("layer_positions[0]") && err.contains("`base`"),
            "{err}"
        );
    }

    /// A task that reads no `[layout]` refuses a changed one instead of dropping it (fifth
    /// pass); its default, as ropelab writes it, loads.
    #[test]
    fn a_layout_no_task_reads_is_refused() {
        let c = Preset::Tiny.config(TaskKind::Language);
        assert!(c.check().is_ok());
        let mut changed = c.clone();
        changed.layout.target_window = 3;
        let err = changed.check().unwrap_err().to_string();
        assert!(
            err.contains("[layout]") && err.contains("language"),
            "{err}"
        );
    }

    #[test]
    fn presets_are_valid_and_round_trip() {
        for preset in [Preset::Paper, Preset::Quick, Preset::Tiny] {
            for task in [
                TaskKind::Number,
                TaskKind::Letter,
                TaskKind::Language,
                TaskKind::Ambiguous,
            ] {
                let c = preset.config(task);
                c.check().unwrap();
                assert_eq!(
                    RunConfig::from_toml(&c.to_toml(), Path::new("x")).unwrap(),
                    c
                );
            }
        }
        assert!("huge"
            .parse::<Preset>()
            .unwrap_err()
            .to_string()
            .contains("unknown preset"));
        // A run config's label must be a name ropelab gives (eighth pass, a064).
        let text = Preset::Tiny.config(TaskKind::Number).to_toml();
        assert!(text.contains("preset = \"tiny\""));
        let err = RunConfig::from_toml(
            &text.replace("preset = \"tiny\"", "preset = \"huge\""),
            Path::new("h.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("h.toml") && err.contains("preset \"huge\""),
            "{err}"
        );
        RunConfig::from_toml(
            &text.replace("preset = \"tiny\"", "preset = \"custom\""),
            Path::new("c.toml"),
        )
        .unwrap();
        // A bad learning rate is named in exponent form, not 309 digits (a004).
        let err = check_lr("optim.lr", -1e308).unwrap_err().to_string();
        assert!(err.ends_with("got -1e308"), "{err}");
        check_lr("optim.lr", 1e308).unwrap();
    }

    #[test]
    fn ambiguous_runs_and_position_shifts_are_checked_in_one_line() {
        let mut c = Preset::Tiny.config(TaskKind::Ambiguous);
        c.position_shift = 1000;
        c.check().unwrap();
        assert_eq!(c.train_seq_lens(), vec![17]);
        let one_line = |c: &RunConfig, want: &str| {
            let e = c.check().unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{want}: {e}");
        };
        c.model.position = ropelab_model::PositionEncoding::Learned {
            max_len: 500,
            beyond: ropelab_model::Beyond::Error,
        };
        one_line(
            &c,
            "position_shift = 1000: the learned position table has 500 rows",
        );
        c.position_shift = MAX_POSITION_SHIFT;
        one_line(&c, "must be below");
        // A multi-hop run's learned table shorter than its input is refused up front, naming
        // the key (twentieth pass, U7); clamping it is a choice the config may make.
        let mut short = Preset::Tiny.config(TaskKind::Number);
        short.model.position = ropelab_model::PositionEncoding::Learned {
            max_len: 4,
            beyond: ropelab_model::Beyond::Error,
        };
        one_line(
            &short,
            "model.position.max_len 4 is shorter than the longest training input",
        );
        short.model.position = ropelab_model::PositionEncoding::Learned {
            max_len: 4,
            beyond: ropelab_model::Beyond::Clamp,
        };
        short.check().unwrap();
        let mut c = Preset::Tiny.config(TaskKind::Ambiguous);
        c.ambiguous = None;
        one_line(&c, "needs an [ambiguous] table");
        let mut c = Preset::Tiny.config(TaskKind::Number);
        c.ambiguous = Some(AmbiguousData::default());
        one_line(&c, "belongs to task = \"ambiguous\"");
        let mut c = Preset::Tiny.config(TaskKind::Ambiguous);
        c.objective = Objective::EveryPosition;
        one_line(&c, "last_token");
        c.objective = Objective::LastToken;
        c.ambiguous = Some(AmbiguousData {
            letters: 1,
            ..AmbiguousData::default()
        });
        one_line(&c, "letters = 1");
        // The default is absent from config.toml, so older runs' files are unchanged.
        let text = Preset::Tiny.config(TaskKind::Number).to_toml();
        assert!(!text.contains("position_shift") && !text.contains("ambiguous"));
        // Each step's start is drawn in range, fixed by (seed, step).
        use crate::step::step_start;
        let starts: Vec<usize> = (1..200).map(|s| step_start(50, 3, s)).collect();
        assert!(starts.iter().all(|&s| s <= 50));
        assert!(starts.iter().any(|&s| s > 40) && starts.iter().any(|&s| s < 10));
        assert_eq!(
            starts,
            (1..200).map(|s| step_start(50, 3, s)).collect::<Vec<_>>()
        );
        assert_eq!(step_start(0, 3, 7), 0);
    }

    #[test]
    fn bad_values_are_named_with_the_file() {
        let base = Preset::Tiny.config(TaskKind::Number).to_toml();
        let bad = base.replace("n_layers = 2", "n_layers = 0");
        let err = RunConfig::from_toml(&bad, Path::new("run.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("run.toml") && err.contains("n_layers"),
            "{err}"
        );
        let bad = base.replace("d_model = 16", "d_model = 15");
        let err = RunConfig::from_toml(&bad, Path::new("run.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("multiple of n_heads"), "{err}");
        let bad = base.replace("rotary_dim = 8", "rotary_dim = 7");
        let err = RunConfig::from_toml(&bad, Path::new("run.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("even"), "{err}");
        let bad = base.replace("rotary_dim = 8", "rotary_dim = 10");
        let err = RunConfig::from_toml(&bad, Path::new("run.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("larger than d_head"), "{err}");
        let bad = base.replace("batch_size = 8", "batch_size = 0");
        let err = RunConfig::from_toml(&bad, Path::new("run.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("batch_size"), "{err}");
        let err = RunConfig::from_toml("task = 3", Path::new("run.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("run.toml"), "{err}");
    }
}
