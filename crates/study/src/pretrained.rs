//! The study's optional pretrained-model stage (`reproduce --pretrained`): the same lens on
//! SmolLM2-135M, written to `pretrained/` in the study directory as the `ropelab pretrained`
//! commands write it: every head's swap scores on both tasks' prompt versions
//! (`score-{task}.jsonl`), both prompt tasks' accuracy per window size (`tasks-{task}.csv`) and
//! the RoPE failure events of the model's own q and k (`rope-stats.csv`). Each file is reused
//! when it exists.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use candle_core::Device;
use ropelab_analysis::lens::pretrained::{
    model_rope_failures, score_prompts, ModelRopeOptions, PromptScoreOptions,
};
use ropelab_analysis::lens::swap::Tau;
use ropelab_pretrained::tasks::accuracy_table;
use ropelab_tasks::TaskKind;

use crate::Progress;

/// How much of the pretrained model the stage measures (the study config's `[pretrained]`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PretrainedPlan {
    /// Prompts whose head scores are averaged, per task.
    pub score_prompts: usize,
    /// Target-window sizes of the prompt tasks.
    pub sizes: Vec<usize>,
    /// Runs (dataset seeds) per size.
    pub runs: usize,
    /// Prompts per run and size.
    pub prompts: usize,
    /// Context lengths M of the RoPE failure statistics: the model reads a text of the longest
    /// (about 90 s at 8,192 tokens on 2 cores). Default: `pretrained rope-stats`'s.
    #[serde(default = "default_rope_lengths")]
    pub rope_lengths: Vec<usize>,
}

fn default_rope_lengths() -> Vec<usize> {
    ModelRopeOptions::default().lengths
}

impl PretrainedPlan {
    /// Every count is at least 1, there is at least one window size of at least 1, and no
    /// size or length is given twice.
    pub fn check(&self) -> Result<()> {
        anyhow::ensure!(
            self.score_prompts > 0 && self.runs > 0 && self.prompts > 0,
            "score_prompts, runs and prompts must be at least 1"
        );
        anyhow::ensure!(
            !self.sizes.is_empty() && self.sizes.iter().all(|&s| s > 0),
            "sizes must list at least one window size, each at least 1"
        );
        anyhow::ensure!(
            !self.rope_lengths.is_empty() && self.rope_lengths.iter().all(|&m| m >= 2),
            "rope_lengths must list at least one context length, each at least 2"
        );
        // The model reads prompts and texts only within its context (a window of s items is a
        // prompt of more than s tokens).
        for (what, values) in [("sizes", &self.sizes), ("rope_lengths", &self.rope_lengths)] {
            if let Some(v) = values.iter().find(|&&v| v > SMOLLM2_CONTEXT) {
                anyhow::bail!(
                    "{what}: {v} is beyond SmolLM2-135M's context of {SMOLLM2_CONTEXT} tokens"
                );
            }
        }
        // A window of s items is a prompt of more than s tokens: at least one token per
        // whitespace-separated word (SmolLM2's byte-level BPE splits words before merging),
        // so a size whose prompt has more words than the context is refused here, before the
        // study trains anything, not when the stage meets it.
        for &size in &self.sizes {
            for task in TaskKind::ALL {
                let p = ropelab_tasks::prompt::prompt(task, size, 0, 0)
                    .with_context(|| format!("sizes: {size}"))?;
                let words = p.prompt.split_whitespace().count() + 1; // + the answer
                anyhow::ensure!(
                    words <= SMOLLM2_CONTEXT,
                    "sizes: {size} gives {task} prompts of at least {words} tokens (one per \
                     word), beyond SmolLM2-135M's context of {SMOLLM2_CONTEXT} tokens"
                );
            }
        }
        // A repeated value repeats its work and gives two rows one key.
        for (what, values) in [("sizes", &self.sizes), ("rope_lengths", &self.rope_lengths)] {
            if let Some(v) = values
                .iter()
                .enumerate()
                .find_map(|(i, v)| values[..i].contains(v).then_some(v))
            {
                anyhow::bail!("{what}: {v} is given twice; give each value once");
            }
        }
        Ok(())
    }

    /// The stage's arithmetic, a lower bound: a forward pass of SmolLM2-135M (2 FLOP per
    /// parameter per token) over every prompt it reads, counting a window of s items as s
    /// tokens (prompts are longer), and over the longest RoPE text; for the time estimate.
    pub fn need(&self) -> ropelab_io::Need {
        use ropelab_io::resources::bytes;
        let tasks = TaskKind::ALL.len();
        let score = bytes(&[tasks, self.score_prompts, PromptScoreOptions::SIZE]);
        let sizes = self.sizes.iter().fold(0usize, |a, &s| a.saturating_add(s));
        let prompts = bytes(&[tasks, self.runs, self.prompts, sizes]);
        let text = self.rope_lengths.iter().copied().max().unwrap_or(0) as u64;
        let tokens = score.saturating_add(prompts).saturating_add(text);
        ropelab_io::Need::new().compute(
            tokens.saturating_mul(2 * SMOLLM2_PARAMS),
            format!("SmolLM2-135M reading {tokens} prompt tokens"),
        )
    }
}

/// SmolLM2-135M's context length, from its GGUF header (`llama.context_length`).
pub const SMOLLM2_CONTEXT: usize = 8192;

/// SmolLM2-135M's parameters (about 135 million).
const SMOLLM2_PARAMS: u64 = 134_515_008;

/// Runs the stage into `out/pretrained/` (fetching the model if needed); returns the files.
pub fn run(out: &Path, plan: &PretrainedPlan, progress: &dyn Progress) -> Result<Vec<PathBuf>> {
    let dir = ropelab_analysis::StudyDir::new(out).pretrained();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let scores = TaskKind::ALL.map(|t| dir.join(format!("score-{t}.jsonl")));
    let tasks = TaskKind::ALL.map(|t| dir.join(format!("tasks-{t}.csv")));
    let stats = dir.join("rope-stats.csv");
    let files: Vec<PathBuf> = scores
        .iter()
        .chain(&tasks)
        .chain([&stats])
        .cloned()
        .collect();
    // Each file is recorded in the folder's ledger as it is written: the report shows the
    // study's pretrained model only from files the ledger vouches for (sixteenth pass, O17,
    // O21), and a file replaced by hand is refused here, not reused.
    let stage = "pretrained";
    let mut missing = false;
    for f in &files {
        if f.exists() {
            // A study from before the stage recorded its files has no ledger there: its files
            // are reused as they are.
            ropelab_analysis::claims::files::vouched_table(f, stage, false)?;
        } else {
            missing = true;
        }
    }
    if !missing {
        return Ok(files);
    }
    let record = |path: &Path, bytes: &[u8]| -> Result<()> {
        ropelab_analysis::claims::files::record_table(path, stage, bytes)?;
        Ok(())
    };
    let (m, tokenizer) = &ropelab_pretrained::load_smollm2(&Device::Cpu)?;
    // Every row names the model (the report refuses files of two models side by side).
    let identity = ropelab_pretrained::identity::model_identity(None)?;
    for (task, path) in TaskKind::ALL.into_iter().zip(&scores) {
        if !path.exists() {
            let stage = progress.stage(&format!("smollm2 score {task}"), plan.score_prompts as u64);
            let options = PromptScoreOptions {
                task,
                size: PromptScoreOptions::SIZE,
                prompts: plan.score_prompts,
                tau: Tau::default(),
            };
            let mut heads = score_prompts(m, tokenizer, &options, |d| stage.set(d as u64))?;
            heads.iter_mut().for_each(|h| h.model = identity.clone());
            let mut text = String::new();
            for h in &heads {
                text.push_str(&serde_json::to_string(h)?);
                text.push('\n');
            }
            record(path, text.as_bytes())?;
        }
    }
    for (task, path) in TaskKind::ALL.into_iter().zip(&tasks) {
        if !path.exists() {
            let total = plan.sizes.len() * plan.runs * plan.prompts;
            let stage = progress.stage(&format!("smollm2 {task} prompts"), total as u64);
            let mut rows = accuracy_table(
                m,
                tokenizer,
                task,
                &plan.sizes,
                plan.runs,
                plan.prompts,
                |d| stage.set(d as u64),
            )?;
            rows.iter_mut().for_each(|r| r.model = identity.clone());
            record(path, ropelab_io::to_csv(&rows)?.as_bytes())?;
        }
    }
    if !stats.exists() {
        let stage = progress.stage("smollm2 rope stats", m.config().n_layers as u64);
        let options = ModelRopeOptions {
            lengths: plan.rope_lengths.clone(),
            ..ModelRopeOptions::default()
        };
        let mut rows = model_rope_failures(m, tokenizer, &options, |d| stage.set(d as u64))?;
        rows.iter_mut().for_each(|r| r.model = identity.clone());
        record(&stats, ropelab_io::to_csv(&rows)?.as_bytes())?;
    }
    Ok(files)
}
