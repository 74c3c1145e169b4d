//! The study configuration `reproduce` runs: an embedded default (`configs/quick.toml`), the
//! paper-scale one (`configs/paper.toml`), or a user's TOML file.

use std::path::Path;

use anyhow::{Context, Result};
use ropelab_analysis::claims::Thresholds;
use ropelab_tasks::Layout;
use ropelab_theory::discrepancy::{self, Mechanism};
use ropelab_theory::failures::FailureConfig;
use serde::{Deserialize, Serialize};

/// The embedded default study: minutes on 2 CPU cores.
pub const QUICK: &str = include_str!("../../../configs/quick.toml");
/// The embedded full-scale study of the paper.
pub const PAPER: &str = include_str!("../../../configs/paper.toml");

/// A whole study, as `reproduce` runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyConfig {
    /// Name of the study (used in reports).
    pub name: String,
    /// Seeds: each fixes one replicate's data, initialisation and order; every finding is
    /// reported as holding in k of n seeds.
    pub seeds: Vec<u64>,
    /// Dataset sizes and task layout.
    pub tasks: TasksConfig,
    /// Training of one model per task and seed.
    pub train: StudyTrain,
    /// Scoring of every checkpoint.
    #[serde(default)]
    pub score: StudyScore,
    /// Length generalisation of every final model.
    pub lengthgen: StudyLengthgen,
    /// Necessity by ablation of every final model's head groups.
    #[serde(default)]
    pub ablation: StudyAblation,
    /// The theory lab's experiments.
    pub theory: StudyTheory,
    /// Thresholds of the verdict per claim.
    #[serde(default)]
    pub claims: Thresholds,
    /// The implicit-bias experiment on fixed-offset retrieval (absent: not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<crate::offset::StudyOffset>,
    /// Frequency-band training on the canonical tasks (absent: not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical: Option<crate::canonical::StudyCanonical>,
    /// Number models with fewer layers than hops, beside the one-hop-per-layer ones (absent:
    /// not run; docs/multihead.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compose: Option<crate::compose::StudyCompose>,
    /// The same lens on the pretrained SmolLM2-135M (absent: no pretrained stage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pretrained: Option<crate::pretrained::PretrainedPlan>,
}

/// How every checkpoint is scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyScore {
    /// Test samples each checkpoint is scored on.
    pub samples: usize,
}

impl Default for StudyScore {
    fn default() -> Self {
        Self {
            samples: ropelab_analysis::measure::dynamics::ScoreOptions::default().samples,
        }
    }
}

/// Necessity by ablation (docs/ablation.md): every final model's head groups (pure
/// positional, pure symbolic, neither, each layer, each head of a multi-head layer) knocked out
/// by mean and by zero ablation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyAblation {
    /// Test samples each knock-out is evaluated on (the first of the test split).
    pub samples: usize,
}

impl Default for StudyAblation {
    fn default() -> Self {
        Self {
            samples: ropelab_analysis::measure::ablation::DEFAULT_SAMPLES,
        }
    }
}

/// Length generalisation: the final checkpoint on length-extended test inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyLengthgen {
    /// Extension tokens before the target window (0 = the training length).
    pub extras: Vec<usize>,
    /// Test samples per length.
    pub samples: usize,
}

/// The theory part of the study: discrepancy curves and the RoPE failure table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyTheory {
    /// Largest query position of the discrepancy curves.
    pub max_n: usize,
    /// Head dimension of the RoPE statistics.
    pub d: usize,
    /// Frequency bases.
    pub bases: Vec<f64>,
    /// Context lengths.
    pub lengths: Vec<usize>,
    /// (q, k1, k2) draws per (base, length).
    pub draws: usize,
    /// Correlation of keys with the query.
    pub rho: f64,
    /// Rotation angle of the hand-built Index head (default g_2 of d = 128, base 10,000).
    #[serde(default = "default_index_theta")]
    pub index_theta: f64,
    /// Rotation angle of the hand-built Retrieval head (default g_42).
    #[serde(default = "default_retrieval_theta")]
    pub retrieval_theta: f64,
    /// Alphabet size of the Retrieval head.
    #[serde(default = "default_alphabet")]
    pub alphabet: usize,
}

fn default_index_theta() -> f64 {
    ropelab_theory::construct::INDEX_THETA
}

fn default_retrieval_theta() -> f64 {
    0.0027
}

fn default_alphabet() -> usize {
    8
}

/// How `reproduce` trains its models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyTrain {
    /// Training preset (`paper`, `quick` or `tiny`); data sizes, layout and seed come from
    /// the study.
    pub preset: String,
    /// Optimizer steps (default: the preset's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<usize>,
    /// Blocks (default: the preset's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_layers: Option<usize>,
    /// Heads per block (d_head = d_model / n_heads): one count, or a list of counts, each run
    /// as its own study in `DIR/heads-H/` (docs/multihead.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_heads: Option<HeadCounts>,
    /// Residual width (RoPE rotates every dimension of each head).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_model: Option<usize>,
    /// MLP width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_mlp: Option<usize>,
    /// Dropout on embeddings, attention weights and residual branches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropout: Option<f64>,
    /// Peak learning rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    /// AdamW beta1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta1: Option<f64>,
    /// AdamW beta2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta2: Option<f64>,
    /// Linear warm-up steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<usize>,
    /// Sequences per step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<usize>,
    /// Validation every this many steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_every: Option<usize>,
    /// Checkpoint (and score) every this many steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save_every: Option<usize>,
    /// Precision of the matrix products (`f32`, the default, or `bf16`;
    /// docs/performance.md#bf16-products).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<ropelab_model::kernel::Precision>,
}

/// Heads per block in a study's `[train]` table: `n_heads = 2`, or `n_heads = [2, 4]` for one
/// study per count.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum HeadCounts {
    /// One count: the study itself.
    One(usize),
    /// Several counts: one study per count, in `DIR/heads-H/`.
    Many(Vec<usize>),
}

impl<'de> Deserialize<'de> for HeadCounts {
    /// One count or a list of counts, else an error saying so (not serde's "did not match any
    /// variant of untagged enum"; twenty-third pass, UNCLEAR).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            One(usize),
            Many(Vec<usize>),
        }
        Either::deserialize(d)
            .map(|e| match e {
                Either::One(h) => HeadCounts::One(h),
                Either::Many(h) => HeadCounts::Many(h),
            })
            .map_err(|_| {
                serde::de::Error::custom(
                    "n_heads: expected a whole number of heads (n_heads = 2) or a list of them \
                     (n_heads = [1, 2, 4])",
                )
            })
    }
}

impl StudyTrain {
    /// The run config of `task` and `seed`: the preset with this table's overrides, and the
    /// study's layout and data sizes; an error for a list of head counts (a study per count:
    /// [`StudyConfig::for_heads`]).
    pub fn run_config(
        &self,
        task: ropelab_tasks::TaskKind,
        seed: u64,
        tasks: &TasksConfig,
    ) -> Result<ropelab_train::RunConfig> {
        let n_heads = match &self.n_heads {
            None => None,
            Some(HeadCounts::One(h)) => Some(*h),
            Some(HeadCounts::Many(_)) => anyhow::bail!(
                "n_heads lists several head counts: each runs as its own study (for_heads)"
            ),
        };
        let preset: ropelab_train::Preset = self.preset.parse()?;
        let mut run = preset.config(task);
        let m = &mut run.model;
        m.n_layers = self.n_layers.unwrap_or(m.n_layers);
        m.n_heads = n_heads.unwrap_or(m.n_heads);
        m.d_model = self.d_model.unwrap_or(m.d_model);
        m.d_mlp = self.d_mlp.unwrap_or(m.d_mlp);
        m.dropout = self.dropout.map_or(m.dropout, |p| p as f32);
        if self.d_model.is_some() || n_heads.is_some() {
            m.position = ropelab_model::PositionEncoding::gptj(m.d_model / m.n_heads.max(1));
        }
        let o = &mut run.optim;
        o.steps = self.steps.unwrap_or(o.steps);
        o.lr = self.lr.unwrap_or(o.lr);
        o.beta1 = self.beta1.unwrap_or(o.beta1);
        o.beta2 = self.beta2.unwrap_or(o.beta2);
        o.warmup = self.warmup.unwrap_or(o.warmup);
        o.batch_size = self.batch_size.unwrap_or(o.batch_size);
        o.eval_every = self.eval_every.unwrap_or(o.eval_every);
        o.save_every = self.save_every.unwrap_or(o.save_every);
        run.precision = self.precision.unwrap_or_default();
        Ok(run.with_data(seed, tasks.layout(), tasks.data())?)
    }
}

/// Dataset sizes per split and the task layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksConfig {
    /// Training samples per task.
    pub train: usize,
    /// Validation samples per task.
    pub val: usize,
    /// Test samples per task.
    pub test: usize,
    /// Target-type tokens the answer can sit in.
    pub target_window: usize,
    /// Pre-target tokens that can hold intermediate hops.
    pub pre_window: usize,
    /// Hop counts, in equal shares.
    pub hops: Vec<usize>,
    /// Number task: distinct offsets (default target_window + pre_window; docs/tasks.md,
    /// "Vocabulary size").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offsets: Option<usize>,
    /// Letter task: distinct letters (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub letters: Option<usize>,
    /// Letter task: distinct numbers (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numbers: Option<usize>,
}

impl TasksConfig {
    /// The split sizes as a training data config.
    pub fn data(&self) -> ropelab_train::DataConfig {
        ropelab_train::DataConfig {
            train: self.train,
            val: self.val,
            test: self.test,
        }
    }

    /// The task layout these settings describe.
    pub fn layout(&self) -> Layout {
        Layout {
            target_window: self.target_window,
            pre_window: self.pre_window,
            hops: self.hops.clone(),
            offsets: self.offsets,
            letters: self.letters,
            numbers: self.numbers,
        }
    }
}

impl StudyConfig {
    /// Replaces the seeds (e.g. from `--seeds`): at least one, none twice.
    pub fn set_seeds(&mut self, seeds: &[u64]) -> Result<()> {
        anyhow::ensure!(!seeds.is_empty(), "--seeds: give at least one seed");
        let mut seen = std::collections::BTreeSet::new();
        for s in seeds {
            anyhow::ensure!(seen.insert(s), "--seeds: seed {s} is listed twice");
        }
        self.seeds = seeds.to_vec();
        // The [compose] models pair with the study's number models of their seeds.
        if let Some(plan) = &self.compose {
            plan.check(self)
                .map_err(|e| anyhow::anyhow!("--seeds {seeds:?}: [compose]: {e}"))?;
        }
        Ok(())
    }

    /// Parses a TOML study; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let config: Self = toml::from_str(text).map_err(|e| {
            anyhow::anyhow!("{origin}: {}", ropelab_io::toml_error::describe(text, &e))
        })?;
        config
            .tasks
            .layout()
            .check()
            .with_context(|| format!("{origin}: [tasks]"))?;
        anyhow::ensure!(
            !config.seeds.is_empty(),
            "{origin}: seeds must list at least one seed"
        );
        let mut seen = std::collections::BTreeSet::new();
        for s in &config.seeds {
            anyhow::ensure!(seen.insert(s), "{origin}: seed {s} is listed twice");
        }
        config
            .train
            .preset
            .parse::<ropelab_train::Preset>()
            .with_context(|| format!("{origin}: [train] preset"))?;
        anyhow::ensure!(
            config.train.steps != Some(0),
            "{origin}: [train] steps must be at least 1"
        );
        // The sample counts are the run configs' data.*, but the study's key is [tasks]'s
        // (thirteenth pass, t1).
        for (key, n) in [
            ("train", config.tasks.train),
            ("val", config.tasks.val),
            ("test", config.tasks.test),
        ] {
            anyhow::ensure!(n >= 1, "{origin}: [tasks] {key} must be at least 1");
        }
        if let Some(HeadCounts::Many(counts)) = &config.train.n_heads {
            anyhow::ensure!(
                !counts.is_empty(),
                "{origin}: [train] n_heads must list at least one head count"
            );
            let mut seen = std::collections::BTreeSet::new();
            for h in counts {
                anyhow::ensure!(seen.insert(h), "{origin}: [train] n_heads lists {h} twice");
            }
        }
        for sub in config.studies() {
            for kind in ropelab_tasks::TaskKind::ALL {
                let run = sub
                    .train
                    .run_config(kind, config.seeds[0], &config.tasks)
                    // The model of [train] on the tasks of [tasks]: either may be the cause
                    // (twenty-fourth pass, U4: a [tasks] layout was blamed on [train]).
                    .with_context(|| format!("{origin}: [train] on the [tasks] layout"))?;
                // A threshold no model of this depth can meet would make its claim a foregone
                // "does not hold".
                anyhow::ensure!(
                    config.claims.min_positional_layers <= run.model.n_layers,
                    "{origin}: [claims] min_positional_layers = {} can never hold on the \
                     study's {}-layer models",
                    config.claims.min_positional_layers,
                    run.model.n_layers
                );
                // A head "reads" a hop at a mass a uniform attention over the sequence already
                // gives every position (seventh pass, r11).
                let uniform = 1.0 / run.layout.core_len().max(1) as f64;
                let mass = config.claims.hop_mass;
                anyhow::ensure!(
                    !(mass > 0.0 && mass <= uniform),
                    "{origin}: [claims] hop_mass = {mass} is at or below the mass uniform \
                     attention puts on every position of the {kind} task's {} tokens ({uniform:.4}): \
                     every head would read every hop",
                    run.layout.core_len()
                );
                // An accuracy that counts as learned must beat a uniform guess over the
                // model's outputs, or a model that learned nothing would meet it.
                let chance = 1.0 / run.model.out_dim() as f64;
                for (key, v) in [
                    ("learned_accuracy", config.claims.learned_accuracy),
                    ("hop_accuracy", config.claims.hop_accuracy),
                    ("length_accuracy", config.claims.length_accuracy),
                    ("kept_accuracy", config.claims.kept_accuracy),
                ] {
                    // (0 and NaN are out of range, which the [claims] check below says.)
                    anyhow::ensure!(
                        !(v > 0.0 && v <= chance),
                        "{origin}: [claims] {key} = {v} is at or below chance on the {} task \
                         (1/{} = {chance:.4}, a uniform guess over the model's outputs): a model \
                         that learned nothing would meet it",
                        kind,
                        run.model.out_dim()
                    );
                }
            }
        }
        anyhow::ensure!(
            config.score.samples > 0,
            "{origin}: [score] samples must be at least 1"
        );
        anyhow::ensure!(
            !config.lengthgen.extras.is_empty() && config.lengthgen.samples > 0,
            "{origin}: [lengthgen] needs at least one extra and one sample"
        );
        anyhow::ensure!(
            config.lengthgen.extras.windows(2).all(|w| w[0] < w[1]),
            "{origin}: [lengthgen] extras must be ascending, each once, got {:?}",
            config.lengthgen.extras
        );
        anyhow::ensure!(
            config.ablation.samples > 0,
            "{origin}: [ablation] samples must be at least 1"
        );
        for (split, n) in [
            ("train", config.tasks.train),
            ("val", config.tasks.val),
            ("test", config.tasks.test),
        ] {
            anyhow::ensure!(n > 0, "{origin}: [tasks] {split} must be at least 1");
        }
        // The theory part runs last: its settings are checked now, before any training.
        let t = &config.theory;
        for (mechanism, theta) in [
            (Mechanism::Index, t.index_theta),
            (Mechanism::Retrieval, t.retrieval_theta),
        ] {
            discrepancy::check(mechanism, theta, t.alphabet, t.max_n)
                .with_context(|| format!("{origin}: [theory] ({mechanism} head)"))?;
        }
        config
            .failure_config()
            .check()
            .with_context(|| format!("{origin}: [theory]"))?;
        if let Some(plan) = &config.offset {
            plan.experiment()
                .with_context(|| format!("{origin}: [offset]"))?;
        }
        if let Some(plan) = &config.canonical {
            plan.experiments()
                .with_context(|| format!("{origin}: [canonical]"))?;
        }
        if let Some(plan) = &config.compose {
            plan.check(&config)
                .with_context(|| format!("{origin}: [compose]"))?;
        }
        if let Some(plan) = &config.pretrained {
            plan.check()
                .with_context(|| format!("{origin}: [pretrained]"))?;
        }
        // The verdicts come last: their thresholds are checked now, before any training.
        config
            .claims
            .check()
            .map_err(|m| anyhow::anyhow!("{origin}: [claims] {m}"))?;
        Ok(config)
    }

    /// The head counts of a study that lists several (`n_heads = [2, 4]`), in order; `None`
    /// for a single study.
    pub fn head_counts(&self) -> Option<Vec<usize>> {
        match &self.train.n_heads {
            Some(HeadCounts::Many(counts)) => Some(counts.clone()),
            _ => None,
        }
    }

    /// This study with `n_heads` heads per block (the study of one head count).
    pub fn for_heads(&self, n_heads: usize) -> Self {
        let mut out = self.clone();
        out.train.n_heads = Some(HeadCounts::One(n_heads));
        out
    }

    /// The studies this config runs: itself, or one per listed head count.
    pub fn studies(&self) -> Vec<Self> {
        match self.head_counts() {
            Some(counts) => counts.iter().map(|&h| self.for_heads(h)).collect(),
            None => vec![self.clone()],
        }
    }

    /// How every model of the study is scored.
    pub fn score_options(&self) -> ropelab_analysis::measure::dynamics::ScoreOptions {
        ropelab_analysis::measure::dynamics::ScoreOptions {
            samples: self.score.samples,
            ..Default::default()
        }
    }

    /// How every model's length generalisation is measured (latest checkpoint).
    pub fn length_options(&self) -> ropelab_analysis::measure::lengthgen::LengthOptions {
        ropelab_analysis::measure::lengthgen::LengthOptions {
            extras: self.lengthgen.extras.clone(),
            samples: Some(self.lengthgen.samples),
            step: None,
            memory: ropelab_train::EVAL_MEMORY,
        }
    }

    /// The settings of the study's RoPE failure table (aliasing in bf16, draws seeded by the
    /// first seed).
    pub fn failure_config(&self) -> FailureConfig {
        let t = &self.theory;
        FailureConfig {
            d: t.d,
            bases: t.bases.clone(),
            llama3: false,
            lengths: t.lengths.clone(),
            draws: t.draws,
            seed: self.seeds[0],
            rho: t.rho,
            format: ropelab_theory::format::NumberFormat::Bf16,
        }
    }

    /// Reads a TOML study from a file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Fails when `out` already holds a study whose config differs from this one in anything
    /// but its seeds (adding seeds to a study reuses the finished ones; dropping one is refused).
    /// Checked before the
    /// study writes anything, so a refused rerun leaves the existing study untouched.
    pub fn check_matches_existing(&self, out: &Path) -> Result<()> {
        // A sweep's directory is not a study's: its plan would pool sweep jobs with models.
        if let Some(plan) = ropelab_sweep::plan::Plan::load(out)? {
            anyhow::ensure!(
                plan.origin.starts_with("reproduce"),
                "{} holds the jobs of {}, not a study: choose another --out",
                out.display(),
                plan.origin
            );
        }
        let path = out.join("config.toml");
        if !path.exists() {
            return Ok(());
        }
        // The config the study ran is vouched for by its ledger: one edited since (say, its
        // seeds cut down) is not the study's config, and a rerun would drop its models
        // unannounced (twenty-fifth pass, A-S5).
        // A config being rewritten when a rerun was killed is pending: its rerun goes on.
        let key = ropelab_analysis::measure::keys::study_table("config");
        let listed = ropelab_io::Ledger::load(out)?.is_some();
        if let (true, ropelab_io::Standing::Foreign(why)) =
            (listed, ropelab_io::Ledger::check(out, "config.toml", &key)?)
        {
            anyhow::bail!(
                "{why}: it is no longer the config the study ran; restore it (a study of \
                 another config is reproduced into a new --out)"
            );
        }
        let mut existing = Self::load(&path)?;
        // Every seed the study planned and trained a model for is one of its seeds, whatever
        // config.toml says.
        if let Some(plan) = ropelab_sweep::plan::Plan::load(out)? {
            for (dir, job) in &plan.jobs {
                let seed = job.params.get("seed").and_then(|s| s.parse::<u64>().ok());
                if let Some(seed) = seed {
                    if out.join(dir).exists() && !existing.seeds.contains(&seed) {
                        existing.seeds.push(seed);
                    }
                }
            }
            existing.seeds.sort_unstable();
        }
        // Seeds may be added, never dropped: the study's claims and its collected tables would
        // then cover other seeds than the models it holds (twenty-fourth pass).
        let dropped: Vec<u64> = existing
            .seeds
            .iter()
            .filter(|s| !self.seeds.contains(s))
            .copied()
            .collect();
        anyhow::ensure!(
            dropped.is_empty(),
            "{} holds a study of seeds {:?}; these seeds {:?} would leave out {:?}, whose models \
             it holds: give every seed it has (more may be added), or choose another --out",
            out.display(),
            existing.seeds,
            self.seeds,
            dropped
        );
        existing.seeds = self.seeds.clone();
        if existing == *self {
            return Ok(());
        }
        let value = |c: &Self| toml::Value::try_from(c).expect("a study config serialises");
        let what = match first_difference(&value(&existing), &value(self), "") {
            Some((key, was, now)) => format!(": {key} was {was}, the config now gives {now}"),
            None => String::new(),
        };
        anyhow::bail!(
            "{} holds a study with another config{what}; delete it or choose another --out",
            out.display()
        )
    }

    /// The embedded default or paper study.
    pub fn embedded(paper: bool) -> Self {
        let (text, origin) = if paper {
            (PAPER, "configs/paper.toml")
        } else {
            (QUICK, "configs/quick.toml")
        };
        Self::parse(text, origin).expect("embedded configs are tested")
    }

    /// The resolved config as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a study config always serialises")
    }
}

/// The first setting (dotted key, in key order) whose value differs between `was` and `now`,
/// with both values as TOML (`(absent)` for a missing key).
fn first_difference(
    was: &toml::Value,
    now: &toml::Value,
    prefix: &str,
) -> Option<(String, String, String)> {
    use toml::Value::Table;
    if let (Table(a), Table(b)) = (was, now) {
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for k in keys {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match (a.get(k), b.get(k)) {
                (Some(x), Some(y)) => {
                    if let Some(d) = first_difference(x, y, &key) {
                        return Some(d);
                    }
                }
                (x, y) => {
                    let show =
                        |v: Option<&toml::Value>| v.map_or("(absent)".into(), |v| v.to_string());
                    return Some((key, show(x), show(y)));
                }
            }
        }
        return None;
    }
    (was != now).then(|| (prefix.to_string(), was.to_string(), now.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_may_be_added_to_a_study_never_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut study = StudyConfig::embedded(false);
        study.seeds = vec![0, 1];
        std::fs::write(dir.path().join("config.toml"), study.to_toml()).unwrap();
        let with = |seeds: &[u64]| {
            let mut c = study.clone();
            c.seeds = seeds.to_vec();
            c.check_matches_existing(dir.path())
        };
        assert!(with(&[0, 1]).is_ok());
        assert!(with(&[0, 1, 2]).is_ok());
        let err = with(&[1]).unwrap_err().to_string();
        assert!(err.contains("would leave out [0]"), "{err}");
        assert!(with(&[1, 2]).is_err());
        // Twenty-fifth pass, A-S5: a config.toml cut down to seed 0 by hand, its ledger not
        // re-sealed, is refused; so is dropping a seed whose planned model is on disk.
        let key = ropelab_analysis::measure::keys::study_table("config");
        ropelab_io::Ledger::finish(dir.path(), "config.toml", &key).unwrap();
        assert!(with(&[0, 1]).is_ok());
        let mut cut = study.clone();
        cut.seeds = vec![0];
        std::fs::write(dir.path().join("config.toml"), cut.to_toml()).unwrap();
        let err = with(&[0]).unwrap_err().to_string();
        assert!(err.contains("no longer the config the study ran"), "{err}");
        ropelab_io::Ledger::finish(dir.path(), "config.toml", &key).unwrap();
        assert!(with(&[0]).is_ok());
        let planned = |seed: &str| ropelab_sweep::plan::Planned {
            id: format!("j{seed}"),
            params: [("seed".to_owned(), seed.to_owned())].into(),
            config_sha256: String::new(),
            measure: Default::default(),
            run: None,
        };
        ropelab_sweep::plan::Plan {
            origin: "reproduce".into(),
            jobs: [
                ("seed-0/number".to_owned(), planned("0")),
                ("seed-1/number".to_owned(), planned("1")),
            ]
            .into(),
        }
        .write(dir.path())
        .unwrap();
        std::fs::create_dir_all(dir.path().join("seed-1/number")).unwrap();
        let err = with(&[0]).unwrap_err().to_string();
        assert!(err.contains("would leave out [1]"), "{err}");
    }

    /// A study's `[canonical]` bands keeping the same planes are refused at parse, as the
    /// `canonical` command refuses them (twenty-seventh pass).
    #[test]
    fn canonical_bands_keeping_the_same_planes_are_refused() {
        let mut c = StudyConfig::embedded(false);
        let table = |bands: &[&str]| crate::canonical::StudyCanonical {
            tasks: vec!["partial".into()],
            bands: bands.iter().map(|b| b.to_string()).collect(),
            seeds: vec![0],
            steps: 5,
        };
        c.canonical = Some(table(&["all", "high"]));
        assert!(StudyConfig::parse(&c.to_toml(), "t").is_ok());
        let planes = table(&["all"]).experiments().unwrap()[0].rates().len();
        let every = format!("planes=0-{}", planes - 1);
        c.canonical = Some(table(&["all", &every]));
        let err = format!("{:#}", StudyConfig::parse(&c.to_toml(), "t").unwrap_err());
        assert!(err.contains("keep the same planes"), "{err}");
    }

    #[test]
    fn the_first_changed_setting_is_named() {
        let v = |t: &str| t.parse::<toml::Table>().map(toml::Value::Table).unwrap();
        let was = v("a = 1\n[t]\nx = [1, 2]\ny = \"s\"");
        assert_eq!(first_difference(&was, &was, ""), None);
        assert_eq!(
            first_difference(&was, &v("a = 1\n[t]\nx = [1, 3]\ny = \"s\""), ""),
            Some(("t.x".into(), "[1, 2]".into(), "[1, 3]".into()))
        );
        assert_eq!(
            first_difference(
                &was,
                &v("a = 1\n[t]\nx = [1, 2]\ny = \"s\"\n[u]\nz = 1"),
                ""
            ),
            Some(("u".into(), "(absent)".into(), "{ z = 1 }".into()))
        );
    }

    #[test]
    fn embedded_configs_parse_and_round_trip() {
        for paper in [false, true] {
            let c = StudyConfig::embedded(paper);
            assert_eq!(StudyConfig::parse(&c.to_toml(), "round trip").unwrap(), c);
        }
        let paper = StudyConfig::embedded(true);
        assert_eq!(
            (paper.tasks.train, paper.tasks.val, paper.tasks.test),
            (432_000, 2_400, 45_600)
        );
    }

    #[test]
    fn the_compose_table_is_checked_against_the_study() {
        let compose = |table: &str| format!("{QUICK}\n[compose]\n{table}\n");
        let ok = StudyConfig::parse(&compose("layers = 3\nseeds = [0, 2]"), "c.toml").unwrap();
        // --seeds cannot drop the study's number model a compose model pairs with.
        let err = ok.clone().set_seeds(&[0]).unwrap_err().to_string();
        assert!(
            err.contains("seed 2 is not one of the study's seeds [0]"),
            "{err}"
        );
        let plan = ok.compose.clone().unwrap();
        let jobs = plan.jobs(&ok).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[1].run, std::path::Path::new("seed-2/compose"));
        assert_eq!(jobs[1].config.model.n_layers, 3);
        // A study model with fewer layers than hops gives no hop its own layer: the same
        // comparison would set one composing model against another (seventh pass, c11).
        let shallow = compose("layers = 1\nseeds = [0]")
            .replace("steps = 3000", "steps = 3000\nn_layers = 2");
        let err = format!("{:#}", StudyConfig::parse(&shallow, "c.toml").unwrap_err());
        assert!(
            err.contains("the study's number model has 2 layers, fewer than the task's 4 hops"),
            "{err}"
        );
        // Everything else is the study's number model of that seed.
        let mut six = ok
            .train
            .run_config(ropelab_tasks::TaskKind::Number, 2, &ok.tasks)
            .unwrap();
        six.model.n_layers = 3;
        assert_eq!(jobs[1].config, six);
        for (table, needle) in [
            ("layers = 4\nseeds = [0]", "fewer than the task's 4 hops"),
            ("layers = 0\nseeds = [0]", "needs 1 to 3 layers"),
            (
                "layers = 3\nseeds = [7]",
                "seed 7 is not one of the study's seeds",
            ),
            ("layers = 3\nseeds = [1, 1]", "seed 1 is listed twice"),
            ("layers = 3\nseeds = []", "at least one seed"),
            ("layers = 3", "missing field `seeds`"),
        ] {
            let err = format!(
                "{:#}",
                StudyConfig::parse(&compose(table), "c.toml").unwrap_err()
            );
            assert!(
                err.contains("c.toml") && err.contains(needle),
                "{table}: {err}"
            );
        }
    }

    #[test]
    fn bad_configs_name_the_file_and_the_problem() {
        let err = StudyConfig::parse("name = 1", "my.toml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("my.toml:"), "{err}");
        let text = QUICK.replace("hops = [1, 2, 3, 4]", "hops = [1, 12]");
        let err = format!("{:#}", StudyConfig::parse(&text, "my.toml").unwrap_err());
        assert!(err.contains("my.toml") && err.contains("12 hops"), "{err}");
        let text = QUICK.replace("preset = \"quick\"", "preset = \"huge\"");
        let err = format!("{:#}", StudyConfig::parse(&text, "my.toml").unwrap_err());
        assert!(err.contains("unknown preset"), "{err}");
        let text = QUICK.replace("seeds = [0, 1, 2]", "seeds = [0, 1, 2]\ncolour = \"red\"");
        let err = StudyConfig::parse(&text, "my.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("colour"), "{err}");
        for (from, to, needle) in [
            ("seeds = [0, 1, 2]", "seeds = []", "at least one seed"),
            (
                "seeds = [0, 1, 2]",
                "seeds = [4, 4]",
                "seed 4 is listed twice",
            ),
            ("lr = 0.0003", "lr = -1.0", "lr"),
            ("dropout = 0.1", "n_heads = 3\ndropout = 0.1", "[train]"),
            // The sample counts are named by their study key (thirteenth pass, t1).
            ("test = 4096", "test = 0", "[tasks] test must be at least 1"),
            (
                "extras = [0, 16, 32, 64, 128, 256, 512, 783, 833, 850]",
                "extras = []",
                "[lengthgen]",
            ),
            ("gamma = 0.1", "gamma = 0.1\nbogus = 2", "bogus"),
            // The verdicts' thresholds are checked at parse time too, naming the key.
            (
                "gamma = 0.1",
                "gamma = 0.7",
                "[claims] gamma: gamma must be in (0, 0.5), got 0.7",
            ),
            (
                "gamma = 0.1",
                "gamma = nan",
                "[claims] gamma: gamma must be in (0, 0.5), got NaN",
            ),
            (
                "length_ratio = 4.0",
                "length_ratio = -1.0",
                "[claims] length_ratio = -1 is out of range: it must be a finite number above 0",
            ),
            (
                "length_ratio = 4.0",
                "length_ratio = 4.0\ncompose_drop = 2.0",
                "[claims] compose_drop = 2 is out of range: it must be in (0, 1]",
            ),
            // Thresholds that decide a claim whatever is measured (fifth pass).
            (
                "learned_accuracy = 0.99",
                "learned_accuracy = 0.0",
                "[claims] learned_accuracy = 0 is out of range: it must be in (0, 1]",
            ),
            (
                "min_positional_layers = 2",
                "min_positional_layers = 0",
                "[claims] min_positional_layers must be at least 1",
            ),
            (
                "learned_accuracy = 0.99",
                "learned_accuracy = nan",
                "[claims] learned_accuracy = NaN is out of range",
            ),
            (
                "letter_length = 800",
                "letter_length = 0",
                "[claims] letter_length",
            ),
            (
                "min_positional_layers = 2",
                "min_positional_layers = 100000",
                "[claims] min_positional_layers = 100000 can never hold on the study's 6-layer",
            ),
            // A mass uniform attention gives every position, and needed above kept (seventh
            // pass, r11, r12).
            (
                "needed_accuracy = 0.5",
                "needed_accuracy = 0.5\nhop_mass = 1e-9",
                "[claims] hop_mass = 0.000000001 is at or below the mass uniform attention",
            ),
            (
                "needed_accuracy = 0.5",
                "needed_accuracy = 0.95",
                "[claims] needed_accuracy = 0.95 is above kept_accuracy = 0.9",
            ),
            // An accuracy a uniform guess meets counts nothing as learned (sixth pass).
            (
                "learned_accuracy = 0.99",
                "learned_accuracy = 1e-9",
                "[claims] learned_accuracy = 0.000000001 is at or below chance on the number task",
            ),
            // The theory part runs last; its settings are refused before any training.
            ("d = 128", "d = 7", "head dimension d must be even"),
            (
                "max_n = 1000",
                "max_n = 10000000000",
                "largest query position",
            ),
            ("alphabet = 8", "alphabet = 1", "alphabet"),
            (
                "index_theta = 0.866",
                "index_theta = -1.0",
                "theta must lie in (0, 2 pi)",
            ),
            ("sizes = [12, 32]", "sizes = [0, 32]", "[pretrained]"),
            (
                "sizes = [12, 32]",
                "sizes = [12, 100000]",
                "beyond SmolLM2-135M's context",
            ),
            // Within the context as a size, beyond it as a prompt (issue 55, d13).
            (
                "sizes = [12, 32]",
                "sizes = [12, 8190]",
                "sizes: 8190 gives number prompts of at least",
            ),
            // Refused when read, not after the models were trained (issue 55).
            ("samples = 1024", "samples = 0", "[ablation] samples"),
            (
                "extras = [0, 16, 32, 64, 128, 256, 512, 783, 833, 850]",
                "extras = [16, 0]",
                "ascending, each once",
            ),
            ("runs = 3", "runs = 0", "must be at least 1"),
            ("prompts = 5", "prompts = 5\nmodel = \"gpt2\"", "model"),
        ] {
            assert!(QUICK.contains(from), "{from}");
            let err = format!(
                "{:#}",
                StudyConfig::parse(&QUICK.replace(from, to), "my.toml").unwrap_err()
            );
            assert!(
                err.contains("my.toml") && err.contains(needle),
                "{to}: {err}"
            );
        }
    }

    #[test]
    fn train_overrides_reach_the_run_config() {
        let quick = StudyConfig::embedded(false);
        let run = quick
            .train
            .run_config(ropelab_tasks::TaskKind::Letter, 7, &quick.tasks)
            .unwrap();
        assert_eq!(run.seed, 7);
        assert_eq!(run.data.train, quick.tasks.train);
        assert_eq!(
            (
                run.optim.steps,
                run.optim.lr,
                run.optim.beta1,
                run.optim.warmup
            ),
            (3000, 3e-4, 0.95, 300)
        );
        assert_eq!((run.optim.eval_every, run.optim.save_every), (100, 150));
        assert_eq!(
            (
                run.model.n_layers,
                run.model.d_model,
                run.model.d_mlp,
                run.model.dropout
            ),
            (6, 128, 512, 0.1)
        );
        let text = QUICK.replace("d_model = 128", "d_model = 32\nn_heads = 2");
        let c = StudyConfig::parse(&text, "x.toml").unwrap();
        let run = c
            .train
            .run_config(ropelab_tasks::TaskKind::Number, 0, &c.tasks)
            .unwrap();
        assert_eq!((run.model.d_model, run.model.n_heads), (32, 2));
        assert_eq!(
            run.model.position,
            ropelab_model::PositionEncoding::gptj(16)
        );
        // The paper study is the paper preset, untouched.
        let paper = StudyConfig::embedded(true);
        let run = paper
            .train
            .run_config(ropelab_tasks::TaskKind::Number, 0, &paper.tasks)
            .unwrap();
        let mut preset = ropelab_train::Preset::Paper.config(ropelab_tasks::TaskKind::Number);
        preset.data = run.data.clone();
        assert_eq!(run, preset);
    }
}
