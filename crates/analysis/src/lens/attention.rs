//! The attention of every head on one test input, for the report's attention viewer: the
//! tokens, each head's attention pattern (row q over keys 0..=q) and the swap scores of that
//! input at its query. Written as `attention/step-S-sample-I.json` in the run directory.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use ropelab_model::{argmax_last, Hooks};
use ropelab_tasks::{Dataset, Split, Task};
use ropelab_train::RunDir;
use serde::{Deserialize, Serialize};

use crate::lens::capture::Captured;
use crate::lens::heads::score_captured;
use crate::lens::purity::{purity, Gamma, HeadKind};
use crate::lens::swap::{SwapScores, Tau};
use crate::{AnalysisError, Result};

/// One head's attention on the input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadAttention {
    /// Block index.
    pub layer: usize,
    /// Head index.
    pub head: usize,
    /// Attention weights, row q over keys 0..=q (causal: row q has q + 1 entries).
    pub pattern: Vec<Vec<f32>>,
    /// Swap scores of this input at its query (the last position).
    pub scores: SwapScores,
    /// The head's type on this input at gamma 0.1.
    pub kind: HeadKind,
}

/// Every head's attention on one test input of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttentionView {
    /// The run's task ("number" or "letter").
    pub task: String,
    /// Checkpoint step.
    pub step: usize,
    /// Index of the input in the test split.
    pub sample: usize,
    /// The input tokens, query last.
    pub tokens: Vec<String>,
    /// The positions the chain visits, query first, answer last.
    pub chain: Vec<usize>,
    /// The correct answer.
    pub answer: String,
    /// The model's greedy answer at the query.
    pub predicted: String,
    /// Hop count of the input.
    pub hops: usize,
    /// Every head, layer-major.
    pub heads: Vec<HeadAttention>,
    /// The identity of the run (empty in files written before it was recorded): a view copied
    /// into another run is told by it.
    #[serde(default)]
    pub run: String,
}

impl AttentionView {
    /// The file name of this view inside a run directory's `attention/` folder.
    pub fn file_name(step: usize, sample: usize) -> String {
        format!("step-{step}-sample-{sample}.json")
    }
}

/// The attention of every head of checkpoint `step` (default: the latest) of the run in `root`
/// on test input `sample`.
pub fn attention_view(
    root: &Path,
    step: Option<usize>,
    sample: usize,
    device: &Device,
) -> Result<AttentionView> {
    let (dir, config) = RunDir::open(root)?;
    let step = dir.checkpoint_or_latest(step)?;
    let task = Task::new(config.task, config.layout.clone())?;
    let data = Dataset::new(task.clone(), config.seed, Split::Test, config.data.test, 0)?;
    if sample >= data.len() {
        return Err(AnalysisError::Invalid(format!(
            "sample {sample} is past the test split ({} samples)",
            data.len()
        )));
    }
    let s = data.sample(sample)?;
    let vocab = task.vocab();
    let name = |id: u32| vocab.token(id).unwrap_or("<unk>").to_owned();
    let tokens: Vec<String> = s.ids.iter().map(|&id| name(id)).collect();
    let strs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let chain = task
        .chain(&strs)
        .map_err(|e| AnalysisError::Invalid(e.to_string()))?;

    let model = dir.load_model(step, &config, device)?;
    let len = s.ids.len();
    let ids = Tensor::from_vec(s.ids.clone(), (1, len), device)?; // [1, pos]
    let cap = Captured::run(&model, &ids, false)?;
    let predicted = argmax_last(&model.forward_last(&ids, &mut Hooks::new(), None)?)?;
    let query = len - 1;
    let scores = score_captured(&cap, &[vec![query]], Tau::default(), None, false)?;
    let mut heads = vec![];
    for h in scores {
        let pattern = (0..len)
            .map(|q| {
                cap.pattern_row(h.layer, 0, h.head, q)
                    .map(|row| row.into_iter().map(|w| w as f32).collect())
            })
            .collect::<Result<Vec<Vec<f32>>>>()?;
        heads.push(HeadAttention {
            layer: h.layer,
            head: h.head,
            pattern,
            scores: h.scores,
            kind: purity(h.scores, Gamma::DEFAULT),
        });
    }
    Ok(AttentionView {
        task: config.task.as_str().to_owned(),
        step,
        sample,
        tokens,
        chain,
        answer: name(s.answer_id),
        predicted: predicted.first().map_or_else(String::new, |&id| name(id)),
        hops: s.hops,
        heads,
        run: config.identity(),
    })
}

/// Writes `view` to `root/attention/step-S-sample-I.json` (atomically) and returns the path.
pub fn write_view(root: &Path, view: &AttentionView) -> Result<PathBuf> {
    let dir = root.join("attention");
    let path = dir.join(AttentionView::file_name(view.step, view.sample));
    let io = |path: &Path, source| AnalysisError::Io {
        path: path.to_owned(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    let text = serde_json::to_vec(view).expect("attention views serialise");
    ropelab_io::write_atomic(&path, &text).map_err(|e| io(&path, e))?;
    Ok(path)
}
