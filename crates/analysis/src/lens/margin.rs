//! Discrepancy measured on trained heads (main paper, definition 3.1): at the query, the largest
//! attention logit minus the second largest, per layer and head, averaged over test inputs, as
//! a function of input length (the tasks' length extension).

use candle_core::{Device, Tensor};
use ropelab_model::GptJ;
use serde::Serialize;

use crate::lens::capture::Captured;
use crate::measure::lengthgen::{length_generalisation, LengthOptions};
use crate::{AnalysisError, Result};

/// Default extension lengths of `theory margins` (extra tokens before the target window).
pub const DEFAULT_EXTRAS: [usize; 5] = [0, 8, 32, 128, 512];

/// Default test inputs per length of `theory margins`.
pub const DEFAULT_SAMPLES: usize = 50;

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
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub margin: f64,
    /// Mean attention weight on the top key.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
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
/// `samples` test inputs for each extension length in `extras`, in batches whose forward pass
/// stays within `memory` bytes (computed by [`crate::measure::lengthgen::measure`]).
pub fn margins(
    root: &std::path::Path,
    step: Option<usize>,
    extras: &[usize],
    samples: usize,
    memory: usize,
    device: &Device,
) -> Result<Vec<MarginRow>> {
    if samples == 0 || extras.is_empty() {
        return Err(AnalysisError::Invalid(
            "give at least one sample and one length".into(),
        ));
    }
    let options = LengthOptions {
        extras: extras.to_vec(),
        samples: Some(samples),
        step,
        memory,
    };
    let rows = length_generalisation(root, &options, device, |_, _| {})?;
    Ok(rows
        .into_iter()
        .flat_map(|r| {
            r.heads.into_iter().map(move |h| MarginRow {
                extra: r.extra,
                length: r.length,
                layer: h.layer,
                head: h.head,
                margin: h.margin,
                top_weight: h.top_weight,
            })
        })
        .collect())
}

/// The reference for [`margins`] on one batch: full captures (every query row of every layer)
/// and each head's logits recomputed in f64 from its pre-rotation q and k ([`crate::HeadView`]).
/// Returns (margin, top weight) per (layer, head), averaged over the rows of `ids` [batch, pos].
pub fn margins_reference(model: &GptJ, ids: &Tensor) -> Result<Vec<(f64, f64)>> {
    let cap = Captured::run(model, ids, false)?;
    let (batch, heads, pos, _) = cap.dims();
    let n = pos - 1;
    let mut out = vec![];
    for layer in 0..model.config().n_layers {
        for head in 0..heads {
            let (mut margin, mut top) = (0.0, 0.0);
            for b in 0..batch {
                margin += top_gap(&cap.head_view(layer, b, head, n)?.logits());
                top += cap
                    .pattern_row(layer, b, head, n)?
                    .into_iter()
                    .fold(0.0, f64::max);
            }
            out.push((margin / batch as f64, top / batch as f64));
        }
    }
    Ok(out)
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
