//! Test-split evaluation of a checkpoint, optionally on length-extended inputs.

use std::path::Path;

use candle_core::Device;
use ropelab_tasks::{Dataset, Split, Task};
use serde::Serialize;

use crate::data::{evaluate, Accuracy};
use crate::{Result, RunDir};

/// The result of `ropelab eval`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalReport {
    /// Checkpoint step.
    pub step: usize,
    /// Extension tokens inserted before the target window.
    pub extra: usize,
    /// Input length.
    pub seq_len: usize,
    /// Test accuracy.
    #[serde(flatten)]
    pub accuracy: Accuracy,
    /// The identity of the run evaluated ([`crate::RunConfig::identity`]): a file copied into
    /// another run is told by it.
    pub run: String,
}

impl EvalReport {
    /// The report's file name in `RUN/eval/`: `step-S-extra-E.json` for the whole test split,
    /// `step-S-extra-E-nN.json` for its first N samples, so a partial evaluation never replaces
    /// the full one.
    pub fn file_name(&self, whole_split: bool) -> String {
        let base = format!("step-{:06}-extra-{}", self.step, self.extra);
        if whole_split {
            format!("{base}.json")
        } else {
            format!("{base}-n{}.json", self.accuracy.n)
        }
    }
}

/// Evaluates checkpoint `step` (default: the latest) of the run in `root` on `n` test samples
/// (default: the config's test size) with `extra` extension tokens, in batches whose forward
/// pass stays within `memory` bytes (see [`crate::batch_for_budget`]).
pub fn eval_checkpoint(
    root: &Path,
    step: Option<usize>,
    extra: usize,
    n: Option<usize>,
    memory: usize,
    device: &Device,
) -> Result<EvalReport> {
    let (dir, config) = RunDir::open(root)?;
    let step = dir.checkpoint_or_latest(step)?;
    let model = dir.load_model(step, &config, device)?;
    let task = Task::new(config.task, config.layout.clone())?;
    let n = config
        .test_samples(n.unwrap_or(config.data.test), "the evaluation")
        .map_err(|m| crate::TrainError::run_dir(root, m))?;
    let data = Dataset::new(task, config.seed, Split::Test, n, extra)?;
    let accuracy = evaluate(&model, &data, memory)?;
    Ok(EvalReport {
        step,
        extra,
        seq_len: config.layout.core_len() + extra,
        accuracy,
        run: config.identity(),
    })
}
