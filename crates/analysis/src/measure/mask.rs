//! Evaluation-time frequency masking of a trained number/letter model (`ropelab mask`,
//! docs/canonical.md): every head of some layers restricted to a band of its rotary planes
//! (the other dims of q and k zeroed by the `RestrictPlanes` intervention), and the test
//! accuracy per hop count beside the unmasked model's.

use std::path::Path;

use candle_core::Device;
use ropelab_model::{Intervention, ModelConfig};
use ropelab_tasks::{Dataset, Split, Task};
use ropelab_train::{evaluate_intervened, Accuracy, RunDir};
use serde::{Deserialize, Serialize};

use crate::measure::band::Band;
use crate::{AnalysisError, Result};

/// The bands `ropelab mask` keeps when none is named: high frequencies removed, then low ones.
pub const DEFAULT_BANDS: [&str; 2] = ["no-high", "no-low"];

/// What `ropelab mask` evaluates.
#[derive(Debug, Clone)]
pub struct MaskOptions {
    /// Checkpoint step (default: the latest).
    pub step: Option<usize>,
    /// Groups of layers; each group is masked on its own, every layer of it at once.
    pub groups: Vec<Vec<usize>>,
    /// Bands each group is restricted to.
    pub bands: Vec<Band>,
    /// Test samples (default: the run's test split).
    pub n: Option<usize>,
    /// Memory budget of one forward pass in bytes.
    pub memory: usize,
}

/// One line of `mask.csv`: a layer group restricted to a band, at one hop count (or `all`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MaskRow {
    /// Layers masked, e.g. `1-3` or `0,4`.
    pub layers: String,
    /// The band they keep.
    pub band: String,
    /// Planes kept per head (of `planes_total`).
    pub planes_kept: usize,
    /// Planes per head.
    pub planes_total: usize,
    /// Hop count, or `all`.
    pub hop: String,
    /// Test samples behind the accuracies.
    pub n: usize,
    /// Accuracy of the unmasked model.
    pub baseline: f64,
    /// Accuracy with the layers masked.
    pub accuracy: f64,
    /// `baseline - accuracy`.
    pub drop: f64,
}

/// The result of masking one run.
#[derive(Debug, Clone)]
pub struct MaskReport {
    /// Checkpoint step.
    pub step: usize,
    /// Input length (the context the band edges are computed over).
    pub seq_len: usize,
    /// The unmasked model's accuracy.
    pub baseline: Accuracy,
    /// One row per group, band and hop count (`all` first).
    pub rows: Vec<MaskRow>,
}

/// The rates of layer `layer`'s planes, fastest first, unrotated dims as rate-0 planes after
/// them; an error when the layer rotates nothing or not at constant rates.
pub fn layer_rates(config: &ModelConfig, layer: usize) -> Result<Vec<f64>> {
    let position = config.layer_position(layer);
    let rates = position.rotation().and_then(|r| r.rates()).ok_or_else(|| {
        AnalysisError::Invalid(format!(
            "layer {layer} has no constant-rate rotary planes to mask (position encoding {})",
            position.kind()
        ))
    })?;
    let mut rates = rates;
    rates.resize(config.d_head() / 2, 0.0);
    Ok(rates)
}

/// Parses layer groups: `each` (every layer alone), `all` (one group of every layer), or a list
/// such as `0-2,5` (one group). An error names a layer the model does not have.
pub fn layer_groups(spec: &str, n_layers: usize) -> Result<Vec<Vec<usize>>> {
    let spec = spec.trim();
    match spec {
        "each" => return Ok((0..n_layers).map(|l| vec![l]).collect()),
        "all" => return Ok(vec![(0..n_layers).collect()]),
        _ => {}
    }
    let invalid = |m: String| AnalysisError::Invalid(format!("--layers {spec:?}: {m}"));
    let num = |t: &str| -> Result<usize> {
        t.trim()
            .parse()
            .map_err(|_| invalid(format!("{t:?} is not a layer number")))
    };
    let mut group = vec![];
    for part in spec.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(invalid(format!("{part:?} runs backwards")));
                }
                group.extend(a..=b);
            }
            None => group.push(num(part)?),
        }
    }
    if let Some(l) = group.iter().find(|&&l| l >= n_layers) {
        return Err(invalid(format!(
            "layer {l} does not exist (the model has layers 0-{})",
            n_layers.saturating_sub(1)
        )));
    }
    group.sort_unstable();
    if let Some(w) = group.windows(2).find(|w| w[0] == w[1]) {
        return Err(invalid(format!(
            "layer {} is given twice (a repeated value or overlapping ranges)",
            w[0]
        )));
    }
    Ok(vec![group])
}

/// A group's label: runs of consecutive layers as `a-b`, joined by commas.
pub fn group_label(group: &[usize]) -> String {
    let mut parts: Vec<String> = vec![];
    let mut i = 0;
    while i < group.len() {
        let mut j = i;
        while j + 1 < group.len() && group[j + 1] == group[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            group[i].to_string()
        } else {
            format!("{}-{}", group[i], group[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The interventions restricting every head of `group` to `band` (band edges over `len`
/// positions), and the number of planes kept per head (of the first layer; all layers of a
/// model share a head size).
pub fn restrictions(
    config: &ModelConfig,
    group: &[usize],
    band: &Band,
    len: usize,
) -> Result<(Vec<Intervention>, usize)> {
    let mut out = vec![];
    let mut kept = 0;
    for &layer in group {
        let planes = band.planes(&layer_rates(config, layer)?, len)?;
        kept = planes.len();
        for head in 0..config.n_heads {
            out.push(Intervention::RestrictPlanes {
                layer,
                head,
                planes: planes.clone(),
            });
        }
    }
    Ok((out, kept))
}

/// Evaluates the run in `root` unmasked and with every group restricted to every band;
/// `progress(done, total)` after each evaluation.
pub fn mask_run(
    root: &Path,
    options: &MaskOptions,
    device: &Device,
    mut progress: impl FnMut(usize, usize),
) -> Result<MaskReport> {
    let (dir, config) = RunDir::open(root)?;
    let step = dir.checkpoint_or_latest(options.step)?;
    let task = Task::new(config.task, config.layout.clone())?;
    let n = config
        .test_samples(options.n.unwrap_or(config.data.test), "the band mask")
        .map_err(AnalysisError::Invalid)?;
    let data = Dataset::new(task, config.seed, Split::Test, n, 0)?;
    let len = data.seq_len();
    let model_config = &config.model;
    // Check every group and band before the first evaluation.
    let mut plans = vec![];
    for group in &options.groups {
        if let Some(l) = group.iter().find(|&&l| l >= model_config.n_layers) {
            return Err(AnalysisError::Invalid(format!(
                "layer {l} does not exist (the model has layers 0-{})",
                model_config.n_layers.saturating_sub(1)
            )));
        }
        for band in &options.bands {
            let (interventions, kept) = restrictions(model_config, group, band, len)?;
            plans.push((group_label(group), band.to_string(), interventions, kept));
        }
    }
    // Each hop count's rows are over that hop's samples, not all of them (seventeenth pass,
    // SILENT-6).
    let mut per_hop_n: std::collections::BTreeMap<usize, usize> = Default::default();
    for i in 0..data.len() {
        *per_hop_n.entry(data.sample(i)?.hops).or_default() += 1;
    }
    let model = dir.load_model(step, &config, device)?;
    let evaluations = plans.len() + 1;
    let baseline = evaluate_intervened(&model, &data, options.memory, &[])?;
    progress(1, evaluations);
    let total = model_config.d_head() / 2;
    let mut rows = vec![];
    for (i, (layers, band, interventions, kept)) in plans.into_iter().enumerate() {
        let masked = evaluate_intervened(&model, &data, options.memory, &interventions)?;
        progress(i + 2, evaluations);
        let row = |hop: String, n: usize, base: f64, acc: f64| MaskRow {
            layers: layers.clone(),
            band: band.clone(),
            planes_kept: kept,
            planes_total: total,
            hop,
            n,
            baseline: base,
            accuracy: acc,
            drop: base - acc,
        };
        rows.push(row(
            "all".into(),
            masked.n,
            baseline.accuracy,
            masked.accuracy,
        ));
        for (h, a) in &masked.per_hop {
            let base = baseline.per_hop.get(h).copied().unwrap_or(f64::NAN);
            let n = per_hop_n.get(h).copied().unwrap_or(0);
            rows.push(row(h.to_string(), n, base, *a));
        }
    }
    Ok(MaskReport {
        step,
        seq_len: len,
        baseline,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_groups_parse_and_label() {
        assert_eq!(
            layer_groups("each", 3).unwrap(),
            vec![vec![0], vec![1], vec![2]]
        );
        assert_eq!(layer_groups("all", 3).unwrap(), vec![vec![0, 1, 2]]);
        assert_eq!(layer_groups("0-2,5", 6).unwrap(), vec![vec![0, 1, 2, 5]]);
        assert_eq!(group_label(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        let err = layer_groups("0-6", 6).unwrap_err().to_string();
        assert!(
            err.contains("layer 6 does not exist (the model has layers 0-5)"),
            "{err}"
        );
        for bad in ["x", "3-1", "", "1,,2", "0,0", "0-2,1"] {
            assert!(layer_groups(bad, 6).is_err(), "{bad}");
        }
    }
}
