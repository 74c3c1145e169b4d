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

/// Why `view` is not a view [`attention_view`] makes of the run with `config` (None when it
/// is): the input's tokens, chain, answer and hop count are those of test input `sample`; every
/// head of the model appears once, layer-major; each pattern row is a causal distribution over
/// its keys; scores lie in [0, 1] and each head's type is the one its scores give. Only the
/// model's greedy answer (`predicted`) needs the model to check, and is checked against the
/// vocabulary alone.
pub fn view_mismatch(view: &AttentionView, config: &ropelab_train::RunConfig) -> Option<String> {
    if view.task != config.task.as_str() {
        return Some(format!(
            "its task is {:?}, the run's is {}",
            view.task, config.task
        ));
    }
    let task = Task::new(config.task, config.layout.clone()).ok()?;
    let data = Dataset::new(task.clone(), config.seed, Split::Test, config.data.test, 0).ok()?;
    if view.sample >= data.len() {
        return Some(format!(
            "sample {} is past the run's test split ({} samples)",
            view.sample,
            data.len()
        ));
    }
    let s = data.sample(view.sample).ok()?;
    let vocab = task.vocab();
    let name = |id: u32| vocab.token(id).unwrap_or("<unk>").to_owned();
    let tokens: Vec<String> = s.ids.iter().map(|&id| name(id)).collect();
    if view.tokens != tokens {
        return Some(format!(
            "its tokens are not those of test input {} of the run",
            view.sample
        ));
    }
    let strs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    if task.chain(&strs).ok().as_ref() != Some(&view.chain) {
        return Some(format!("its chain {:?} is not the input's", view.chain));
    }
    if view.answer != name(s.answer_id) || view.hops != s.hops {
        return Some(format!(
            "answer {:?} at {} hops, where test input {} has answer {:?} at {} hops",
            view.answer,
            view.hops,
            view.sample,
            name(s.answer_id),
            s.hops
        ));
    }
    if !(0..vocab.len()).any(|id| vocab.token(id as u32) == Some(view.predicted.as_str())) {
        return Some(format!(
            "predicted {:?} is no token of the task",
            view.predicted
        ));
    }
    let (layers, heads) = (config.model.n_layers, config.model.n_heads);
    let order: Vec<(usize, usize)> = view.heads.iter().map(|h| (h.layer, h.head)).collect();
    let expected: Vec<(usize, usize)> = (0..layers)
        .flat_map(|l| (0..heads).map(move |h| (l, h)))
        .collect();
    if order != expected {
        return Some(format!(
            "its heads are not the model's {layers} layers x {heads} heads, each once and \
             layer-major"
        ));
    }
    for h in &view.heads {
        let at = |why: String| Some(format!("layer {} head {}: {why}", h.layer, h.head));
        if h.pattern.len() != tokens.len() {
            return at(format!(
                "{} pattern rows for {} tokens",
                h.pattern.len(),
                tokens.len()
            ));
        }
        for (q, row) in h.pattern.iter().enumerate() {
            if row.len() != q + 1 {
                return at(format!(
                    "row {q} has {} weights; a causal row has {}",
                    row.len(),
                    q + 1
                ));
            }
            let sum: f64 = row.iter().map(|&w| f64::from(w)).sum();
            if row.iter().any(|w| !(0.0..=1.0).contains(w)) || (sum - 1.0).abs() > 1e-3 {
                return at(format!(
                    "row {q} is no attention distribution (weights in [0, 1] summing to 1; \
                     they sum to {sum})"
                ));
            }
        }
        let s = h.scores;
        if !((0.0..=1.0).contains(&s.s_pos) && (0.0..=1.0).contains(&s.s_sym)) {
            return at(format!(
                "scores ({}, {}) are not in [0, 1]",
                s.s_pos, s.s_sym
            ));
        }
        if h.kind != purity(s, Gamma::DEFAULT) {
            return at(format!(
                "its type {:?} is not the one its scores give",
                h.kind
            ));
        }
    }
    None
}
