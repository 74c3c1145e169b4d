//! Discrepancy measured on trained heads (main paper, definition 3.1): at the query, the largest
//! attention logit minus the second largest, per layer and head, averaged over test inputs, as
//! a function of input length (the tasks' length extension).

use candle_core::{Device, Tensor};
use ropelab_tasks::{Dataset, Split, Task};
use ropelab_train::RunDir;
use serde::Serialize;

use crate::capture::Captured;
use crate::{AnalysisError, Result};

/// Mean logit margin of one head at one input length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MarginRow {
    /// Extension tokens.
    pub extra: usize,
    /// Input length.
    pub length: usize,
    /// Block index.
    pub layer: usize,
    /// Head index.
    pub head: usize,
    /// Mean (largest - second largest) logit at the query.
    pub margin: f64,
    /// Mean attention weight on the top key.
    pub top_weight: f64,
}

/// Largest minus second-largest of a row of logits.
pub fn top_gap(logits: &[f64]) -> f64 {
    let (mut a, mut b) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for &x in logits {
        if x > a {
            b = a;
            a = x;
        } else if x > b {
            b = x;
        }
    }
    a - b
}

/// Margins of every head of checkpoint `step` (default: latest) of the run in `root`, on
/// `samples` test inputs for each extension length in `extras`.
pub fn margins(
    root: &std::path::Path,
    step: Option<usize>,
    extras: &[usize],
    samples: usize,
    device: &Device,
) -> Result<Vec<MarginRow>> {
    if samples == 0 || extras.is_empty() {
        return Err(AnalysisError::Invalid(
            "give at least one sample and one length".into(),
        ));
    }
    let (dir, config) = RunDir::open(root)?;
    let step = match step {
        Some(s) => s,
        None => dir.latest_checkpoint()?,
    };
    let model = dir.load_model(step, &config, device)?;
    let task = Task::new(config.task, config.layout.clone())?;
    let mut rows = vec![];
    for &extra in extras {
        let data = Dataset::new(task.clone(), config.seed, Split::Test, samples, extra)?;
        let length = config.layout.core_len() + extra;
        let mut ids = Vec::with_capacity(samples * length);
        for i in 0..samples {
            ids.extend(data.sample(i)?.ids);
        }
        let ids = Tensor::from_vec(ids, (samples, length), device)?;
        let cap = Captured::run(&model, &ids, false)?;
        let (_, heads, _, _) = cap.dims();
        let n = length - 1;
        for layer in 0..model.config().n_layers {
            for head in 0..heads {
                let (mut margin, mut top) = (0.0, 0.0);
                for b in 0..samples {
                    let view = cap.head_view(layer, b, head, n)?;
                    margin += top_gap(&view.logits());
                    top += cap
                        .pattern_row(layer, b, head, n)?
                        .into_iter()
                        .fold(0.0, f64::max);
                }
                rows.push(MarginRow {
                    extra,
                    length,
                    layer,
                    head,
                    margin: margin / samples as f64,
                    top_weight: top / samples as f64,
                });
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_gap_by_hand() {
        assert_eq!(top_gap(&[1.0, 3.0, 2.5]), 0.5);
        assert_eq!(top_gap(&[2.0, 2.0]), 0.0);
    }
}
