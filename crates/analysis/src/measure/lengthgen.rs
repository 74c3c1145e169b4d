//! Length generalisation (main paper, Fig. 5B; docs/study.md): a checkpoint's accuracy, overall
//! and per hop count, on test inputs lengthened by extra target-type tokens before the target
//! window, with every head's discrepancy at the query (largest minus second-largest attention
//! logit, definition 3.1) beside it.
//!
//! One forward pass per batch gives both: the attention scores and pattern are captured for the
//! last query row only, so memory grows with the batch's tokens, not with their square per
//! layer, and batches are sized from a memory budget (peak memory does not grow with the number
//! of samples).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use candle_core::Device;
use ropelab_io::resources::{bytes, Need};
use ropelab_model::{GptJ, HookKind, HookPoint, Hooks};
use ropelab_tasks::{Dataset, Split, Task};
use ropelab_train::data::Tally;
use ropelab_train::{batch_for_budget, forward_flops, inference_need, RunConfig, RunDir};
use serde::{Deserialize, Serialize};

use crate::lens::margin::top_gap;
use crate::{AnalysisError, Result};

/// What `lengthgen` measures.
#[derive(Debug, Clone, PartialEq)]
pub struct LengthOptions {
    /// Extension tokens per tested length (0 is the training length).
    pub extras: Vec<usize>,
    /// Test samples per length (default: the run's test split).
    pub samples: Option<usize>,
    /// Checkpoint step (default: the latest).
    pub step: Option<usize>,
    /// Memory budget of one forward pass, in bytes.
    pub memory: usize,
}

impl LengthOptions {
    /// Memory of this measurement on a run with `config` (see [`ropelab_train::inference_need`]):
    /// the weights and one batch at the longest length, with the last query rows it captures.
    pub fn need(&self, config: &RunConfig) -> Need {
        let longest = self.extras.iter().max().copied().unwrap_or(0);
        let len = config.layout.core_len().saturating_add(longest);
        let m = &config.model;
        let batch = batch_for_budget(m, len, self.memory);
        let samples = self.samples.unwrap_or(config.data.test);
        let flops = self
            .extras
            .iter()
            .map(|&e| forward_flops(m, samples, config.layout.core_len().saturating_add(e)))
            .fold(0u64, u64::saturating_add);
        inference_need(m, len, self.memory)
            .memory(
                bytes(&[4, 2, m.n_layers, batch, m.n_heads, len]),
                "the captured query rows",
            )
            .compute(
                flops,
                format!("{samples} samples at {} lengths", self.extras.len()),
            )
    }
}

/// The paper's lengths (Fig. 5B): extension tokens 0 .. 1,000 (inputs of 17 .. 1,017 tokens).
pub const PAPER_EXTRAS: [usize; 9] = [0, 16, 32, 64, 128, 256, 512, 850, 1000];

/// One head's discrepancy at the query, averaged over the samples of one length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HeadMargin {
    /// Block index.
    pub layer: usize,
    /// Head index.
    pub head: usize,
    /// Mean (largest - second largest) scaled attention logit at the query, keys 0..=query.
    pub margin: f64,
    /// Mean attention weight on the top key.
    pub top_weight: f64,
}

/// Accuracy and discrepancies at one input length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthRow {
    /// Checkpoint step.
    pub step: usize,
    /// Extension tokens.
    pub extra: usize,
    /// Input length (core length + extra).
    pub length: usize,
    /// Samples evaluated.
    pub n: usize,
    /// Fraction answered correctly (argmax at the query).
    pub accuracy: f64,
    /// Mean cross-entropy at the query.
    pub loss: f64,
    /// Accuracy per hop count.
    pub per_hop: BTreeMap<usize, f64>,
    /// Every head's discrepancy at the query.
    pub heads: Vec<HeadMargin>,
    /// Wall time of this length (seconds; not part of the CSV).
    #[serde(skip)]
    pub seconds: f64,
    /// The run the row was measured on ([`ropelab_train::RunConfig::identity`]; the CSV's
    /// last column, `run`); empty in files written before it was recorded.
    #[serde(default)]
    pub run: String,
}

/// Measures the checkpoint of the run in `root` at every length of `options`; `progress` is
/// called with (lengths done, lengths).
pub fn length_generalisation(
    root: &Path,
    options: &LengthOptions,
    device: &Device,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<LengthRow>> {
    if options.extras.is_empty() {
        return Err(AnalysisError::Invalid("give at least one length".into()));
    }
    if options.samples == Some(0) {
        return Err(AnalysisError::Invalid(
            "the number of samples must be at least 1".into(),
        ));
    }
    let (dir, config) = RunDir::open(root)?;
    let step = dir.checkpoint_or_latest(options.step)?;
    let model = dir.load_model(step, &config, device)?;
    let task = Task::new(config.task, config.layout.clone())?;
    let n = config
        .test_samples(
            options.samples.unwrap_or(config.data.test),
            "the length test",
        )
        .map_err(AnalysisError::Invalid)?;
    let mut rows = vec![];
    for (k, &extra) in options.extras.iter().enumerate() {
        progress(k, options.extras.len());
        let start = Instant::now();
        let data = Dataset::new(task.clone(), config.seed, Split::Test, n, extra)?;
        let mut row = measure(&model, &data, options.memory)?;
        row.step = step;
        row.run = config.identity();
        row.seconds = start.elapsed().as_secs_f64();
        rows.push(row);
    }
    progress(options.extras.len(), options.extras.len());
    Ok(rows)
}

/// Accuracy and per-head discrepancies of `model` on every sample of `data`, in batches whose
/// forward pass stays within `memory` bytes. The row's `step` is 0.
pub fn measure(model: &GptJ, data: &Dataset, memory: usize) -> Result<LengthRow> {
    let model = &model.clone().frozen();
    let c = model.config();
    let len = data.seq_len();
    let batch = batch_for_budget(c, len, memory);
    let points: Vec<HookPoint> = (0..c.n_layers)
        .flat_map(|l| {
            [
                HookPoint::new(l, HookKind::AttnScores),
                HookPoint::new(l, HookKind::Pattern),
            ]
        })
        .collect();
    let heads = c.n_heads;
    let mut margin = vec![0f64; c.n_layers * heads];
    let mut top = vec![0f64; c.n_layers * heads];
    let mut tally = Tally::default();
    for start in (0..data.len()).step_by(batch) {
        let chunk: Vec<usize> = (start..data.len().min(start + batch)).collect();
        let b = ropelab_train::data::batch(data, &chunk, model.device())?;
        let mut hooks = Hooks::new().capture_last(points.iter().copied());
        let x = model.trunk(&b.ids, &mut hooks, None)?; // [batch, pos, d_model]
        let last = x.narrow(1, len - 1, 1)?.squeeze(1)?; // [batch, d_model]
        let logits = model.unembed(&last)?; // [batch, vocab]
        tally.add(&logits, &b)?;
        for layer in 0..c.n_layers {
            let scores = last_rows(&hooks, HookPoint::new(layer, HookKind::AttnScores))?;
            let pattern = last_rows(&hooks, HookPoint::new(layer, HookKind::Pattern))?;
            for (r, (s, p)) in scores.iter().zip(&pattern).enumerate() {
                let i = layer * heads + r % heads;
                margin[i] += top_gap(s);
                top[i] += p.iter().copied().fold(0.0, f64::max);
            }
        }
    }
    let n = data.len();
    let acc = tally.finish();
    Ok(LengthRow {
        step: 0,
        extra: data.extra(),
        length: len,
        n,
        accuracy: acc.accuracy,
        loss: acc.loss,
        per_hop: acc.per_hop,
        heads: (0..c.n_layers * heads)
            .map(|i| HeadMargin {
                layer: i / heads,
                head: i % heads,
                margin: margin[i] / n as f64,
                top_weight: top[i] / n as f64,
            })
            .collect(),
        seconds: 0.0,
        run: String::new(),
    })
}

/// The captured last query rows at `point`, [batch, heads, 1, k_pos] -> one row per (b, head).
fn last_rows(hooks: &Hooks, point: HookPoint) -> Result<Vec<Vec<f64>>> {
    let t = hooks
        .get(point)
        .ok_or_else(|| AnalysisError::Invalid(format!("hook {point} was not captured")))?;
    let (b, h, _, k) = t.dims4()?;
    let flat: Vec<f32> = t.flatten_all()?.to_vec1()?;
    Ok((0..b * h)
        .map(|r| {
            flat[r * k..(r + 1) * k]
                .iter()
                .map(|&v| f64::from(v))
                .collect()
        })
        .collect())
}

/// The rows as CSV: `step,extra,length,n,accuracy,loss`, then `hop_H` per hop count, then
/// `margin_LlHh` and `top_weight_LlHh` per head.
pub fn to_csv(rows: &[LengthRow]) -> Result<String> {
    let Some(first) = rows.first() else {
        return Ok(String::new());
    };
    let mut header = vec![
        "step".to_owned(),
        "extra".into(),
        "length".into(),
        "n".into(),
        "accuracy".into(),
        "loss".into(),
    ];
    header.extend(first.per_hop.keys().map(|h| format!("hop_{h}")));
    header.extend(
        first
            .heads
            .iter()
            .map(|m| format!("margin_L{}H{}", m.layer, m.head)),
    );
    header.extend(
        first
            .heads
            .iter()
            .map(|m| format!("top_weight_L{}H{}", m.layer, m.head)),
    );
    header.push("run".into());
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells = vec![
                r.step.to_string(),
                r.extra.to_string(),
                r.length.to_string(),
                r.n.to_string(),
                r.accuracy.to_string(),
                r.loss.to_string(),
            ];
            cells.extend(r.per_hop.values().map(f64::to_string));
            cells.extend(r.heads.iter().map(|m| m.margin.to_string()));
            cells.extend(r.heads.iter().map(|m| m.top_weight.to_string()));
            cells.push(r.run.clone());
            cells
        })
        .collect();
    ropelab_io::records_to_csv(&header, &cells).map_err(|e| AnalysisError::Invalid(e.to_string()))
}

/// Parses a CSV written by [`to_csv`]; errors name `origin` and the bad line.
pub fn from_csv(text: &str, origin: &str) -> Result<Vec<LengthRow>> {
    let bad = |line: usize, what: String| {
        AnalysisError::Invalid(format!("{origin}: line {line}: {what}"))
    };
    let (header, records) =
        ropelab_io::csv_records(text, origin).map_err(|e| AnalysisError::Invalid(e.to_string()))?;
    if header.get(..6).map(|h| h.join(",")) != Some("step,extra,length,n,accuracy,loss".into()) {
        return Err(bad(1, "not a lengthgen CSV header".into()));
    }
    let mut rows = vec![];
    for (i, cells) in records.iter().enumerate() {
        let num = |j: usize| -> Result<f64> {
            cells[j].parse::<f64>().map_err(|_| {
                bad(
                    i + 2,
                    format!("{} = {:?} is not a number", header[j], cells[j]),
                )
            })
        };
        let mut row = LengthRow {
            step: num(0)? as usize,
            extra: num(1)? as usize,
            length: num(2)? as usize,
            n: num(3)? as usize,
            accuracy: num(4)?,
            loss: num(5)?,
            per_hop: BTreeMap::new(),
            heads: vec![],
            seconds: 0.0,
            run: String::new(),
        };
        let mut tops = BTreeMap::new();
        for (j, name) in header.iter().enumerate().skip(6) {
            if name == "run" {
                row.run = cells[j].clone();
                continue;
            }
            let v = num(j)?;
            if let Some(h) = name.strip_prefix("hop_") {
                let h = h
                    .parse()
                    .map_err(|_| bad(1, format!("bad column {name}")))?;
                row.per_hop.insert(h, v);
            } else if let Some(lh) = name.strip_prefix("margin_") {
                let (layer, head) =
                    parse_head(lh).ok_or_else(|| bad(1, format!("bad column {name}")))?;
                row.heads.push(HeadMargin {
                    layer,
                    head,
                    margin: v,
                    top_weight: f64::NAN,
                });
            } else if let Some(lh) = name.strip_prefix("top_weight_") {
                let key = parse_head(lh).ok_or_else(|| bad(1, format!("bad column {name}")))?;
                tops.insert(key, v);
            } else {
                return Err(bad(1, format!("unknown column {name}")));
            }
        }
        for m in &mut row.heads {
            m.top_weight = tops.get(&(m.layer, m.head)).copied().unwrap_or(f64::NAN);
        }
        rows.push(row);
    }
    Ok(rows)
}

/// `L3H0` -> (3, 0).
fn parse_head(s: &str) -> Option<(usize, usize)> {
    let (l, h) = s.strip_prefix('L')?.split_once('H')?;
    Some((l.parse().ok()?, h.parse().ok()?))
}

/// The shortest tested length whose accuracy is below `threshold` (None when every length
/// reaches it).
pub fn first_length_below(rows: &[LengthRow], threshold: f64) -> Option<usize> {
    rows.iter()
        .filter(|r| r.accuracy < threshold)
        .map(|r| r.length)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(length: usize, accuracy: f64) -> LengthRow {
        LengthRow {
            step: 7,
            extra: length - 17,
            length,
            n: 10,
            accuracy,
            loss: 0.5,
            per_hop: [(1, 1.0), (2, 0.5)].into_iter().collect(),
            heads: vec![
                HeadMargin {
                    layer: 0,
                    head: 0,
                    margin: 1.5,
                    top_weight: 0.9,
                },
                HeadMargin {
                    layer: 1,
                    head: 0,
                    margin: 0.25,
                    top_weight: 0.4,
                },
            ],
            seconds: 0.0,
            run: String::new(),
        }
    }

    #[test]
    fn csv_round_trips() {
        let rows = vec![row(17, 1.0), row(33, 0.75)];
        let text = to_csv(&rows).unwrap();
        assert!(text.starts_with("step,extra,length,n,accuracy,loss,hop_1,hop_2,margin_L0H0"));
        assert_eq!(from_csv(&text, "x.csv").unwrap(), rows);
        let err = from_csv(&text.replace("0.75", "abc"), "x.csv").unwrap_err();
        assert!(err.to_string().contains("x.csv: line 3"), "{err}");
        assert!(from_csv("a,b\n", "x.csv").is_err());
    }

    #[test]
    fn first_drop() {
        let rows = vec![row(17, 1.0), row(33, 0.95), row(81, 0.5), row(145, 0.95)];
        assert_eq!(first_length_below(&rows, 0.9), Some(81));
        assert_eq!(first_length_below(&rows, 0.4), None);
    }
}
