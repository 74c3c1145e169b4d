//! Necessity by ablation (`ropelab ablate`, docs/ablation.md): a trained number/letter
//! model's test accuracy, overall and per hop count, with groups of heads knocked out: every
//! pure positional head, every pure symbolic head, every head of neither type, each layer
//! alone, and each head alone when a layer has several. A head is knocked out by **mean
//! ablation** (its output `hook_z` replaced, at every position, by its mean over the evaluated
//! test samples, computed in a first pass) and by **zero ablation** (its output replaced by
//! zeros).

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use ropelab_model::{GptJ, HookKind, HookPoint, Hooks, Intervention};
use ropelab_tasks::{Dataset, Split, Task};
use ropelab_train::{batch, batch_for_budget, tally_intervened, RunDir};
use serde::{Deserialize, Serialize};

use crate::measure::dynamics::HeadKind;
use crate::{AnalysisError, Result};

/// The file a run's ablations are written to.
pub const ABLATION_FILE: &str = "ablation.csv";

/// Test samples a study model is ablated on when the config names none.
pub const DEFAULT_SAMPLES: usize = 1024;

/// A group of heads knocked out together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its name: `positional`, `symbolic`, `mixed`, `layer L` or `head L.H`.
    pub name: String,
    /// Its (layer, head) pairs, in order.
    pub heads: Vec<(usize, usize)>,
}

/// How a group's heads are knocked out (`none`: the intact model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Knockout {
    /// Nothing knocked out: the baseline row.
    None,
    /// The head's output replaced by its mean over the evaluated samples.
    Mean,
    /// The head's output replaced by zeros.
    Zero,
}

impl Knockout {
    /// Its name in `ablation.csv`.
    pub fn as_str(self) -> &'static str {
        match self {
            Knockout::None => "none",
            Knockout::Mean => "mean",
            Knockout::Zero => "zero",
        }
    }
}

/// One line of `ablation.csv`: a group knocked out one way, at one hop count (or `all`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AblationRow {
    /// The group (`none` for the intact model).
    pub group: String,
    /// Its heads as `L.H`, space-separated (empty for `none`).
    pub heads: String,
    /// How they were knocked out.
    pub ablation: Knockout,
    /// Hop count, or `all`.
    pub hop: String,
    /// Test samples behind the accuracy.
    pub n: usize,
    /// Of them answered correctly.
    pub correct: usize,
    /// `correct / n`.
    pub accuracy: f64,
}

/// What [`ablate_run`] found at one checkpoint.
#[derive(Debug, Clone)]
pub struct AblationReport {
    /// Checkpoint step.
    pub step: usize,
    /// The intact model first (`none`), then every group's mean and zero ablation; each with
    /// its `all` row before its per-hop rows.
    pub rows: Vec<AblationRow>,
}

/// The group of every head that is not pure symbolic (when the model has both pure positional
/// heads and heads of neither type; otherwise it is one of those groups).
pub const NON_SYMBOLIC: &str = "non-symbolic";

/// The groups of a model whose heads have the types `grid[layer][head]` (at the study's
/// gamma): the pure positional heads, the pure symbolic heads and the heads of neither type
/// (each only when it has a head), [`NON_SYMBOLIC`] when there are both positional and neither
/// heads, then every layer, then every head when a layer has several.
pub fn groups(grid: &[Vec<HeadKind>]) -> Vec<Group> {
    let heads_of = |kind: HeadKind| -> Vec<(usize, usize)> {
        grid.iter()
            .enumerate()
            .flat_map(|(l, heads)| {
                heads
                    .iter()
                    .enumerate()
                    .filter(move |&(_, &k)| k == kind)
                    .map(move |(h, _)| (l, h))
            })
            .collect()
    };
    let mut out = vec![];
    for (name, kind) in [
        ("positional", HeadKind::Positional),
        ("symbolic", HeadKind::Symbolic),
        ("mixed", HeadKind::Mixed),
    ] {
        let heads = heads_of(kind);
        if !heads.is_empty() {
            out.push(Group {
                name: name.into(),
                heads,
            });
        }
    }
    // Every head that is not pure symbolic, when that is neither group alone.
    let (p, m) = (heads_of(HeadKind::Positional), heads_of(HeadKind::Mixed));
    if !p.is_empty() && !m.is_empty() {
        let mut heads = [p, m].concat();
        heads.sort_unstable();
        out.push(Group {
            name: NON_SYMBOLIC.into(),
            heads,
        });
    }
    for (l, heads) in grid.iter().enumerate() {
        out.push(Group {
            name: format!("layer {l}"),
            heads: (0..heads.len()).map(|h| (l, h)).collect(),
        });
    }
    if grid.iter().any(|heads| heads.len() > 1) {
        for (l, heads) in grid.iter().enumerate() {
            for h in 0..heads.len() {
                out.push(Group {
                    name: format!("head {l}.{h}"),
                    heads: vec![(l, h)],
                });
            }
        }
    }
    out
}

/// Every head's mean output over `data`: `means[layer]` is [heads, pos, d_head] (f32), summed
/// batch by batch in f64 so the result does not depend on the batch size.
pub fn split_means(model: &GptJ, data: &Dataset, memory: usize) -> Result<Vec<Tensor>> {
    let c = model.config();
    let points: Vec<HookPoint> = (0..c.n_layers)
        .map(|l| HookPoint::new(l, HookKind::Z))
        .collect();
    let batch_size = batch_for_budget(c, data.seq_len(), memory);
    let mut sums: Vec<Option<Tensor>> = vec![None; c.n_layers];
    for start in (0..data.len()).step_by(batch_size) {
        let chunk: Vec<usize> = (start..data.len().min(start + batch_size)).collect();
        let b = batch(data, &chunk, model.device())?;
        let mut hooks = Hooks::new().capture(points.iter().copied());
        model.trunk(&b.ids, &mut hooks, None)?;
        for (l, sum) in sums.iter_mut().enumerate() {
            let z = hooks.get(points[l]).ok_or_else(|| {
                AnalysisError::Invalid(format!("layer {l}'s head outputs were not captured"))
            })?;
            let part = z.to_dtype(DType::F64)?.sum(0)?; // [heads, pos, d_head]
            *sum = Some(match sum.take() {
                Some(s) => (s + part)?,
                None => part,
            });
        }
    }
    let n = data.len().max(1) as f64;
    sums.into_iter()
        .map(|s| {
            let s = s.ok_or_else(|| AnalysisError::Invalid("no test samples to average".into()))?;
            Ok((s / n)?.to_dtype(DType::F32)?)
        })
        .collect()
}

/// The interventions that knock out `group` in `model` (mean ablation reads `means`, from
/// [`split_means`]).
pub fn knockouts(group: &Group, how: Knockout, means: &[Tensor]) -> Result<Vec<Intervention>> {
    group
        .heads
        .iter()
        .filter(|_| how != Knockout::None)
        .map(|&(layer, head)| {
            Ok(match how {
                Knockout::Mean => Intervention::SetHead {
                    layer,
                    head,
                    value: means
                        .get(layer)
                        .ok_or_else(|| {
                            AnalysisError::Invalid(format!("no mean output of layer {layer}"))
                        })?
                        .get(head)?, // [pos, d_head]
                },
                _ => Intervention::AblateHead {
                    layer,
                    head,
                    ablation: ropelab_model::Ablation::Zero,
                },
            })
        })
        .collect()
}

/// (correct, n) per hop count of `model` on `data` with `interventions`, in batches within
/// `memory` bytes.
pub fn tally(
    model: &GptJ,
    data: &Dataset,
    memory: usize,
    interventions: &[Intervention],
) -> Result<BTreeMap<usize, (usize, usize)>> {
    Ok(tally_intervened(model, data, memory, interventions)?
        .per_hop_counts()
        .clone())
}

/// The rows of one (group, knockout): `all` first, then each hop count.
fn rows_of(
    group: &str,
    heads: &[(usize, usize)],
    how: Knockout,
    counts: &BTreeMap<usize, (usize, usize)>,
) -> Vec<AblationRow> {
    let heads = heads
        .iter()
        .map(|(l, h)| format!("{l}.{h}"))
        .collect::<Vec<_>>()
        .join(" ");
    let row = |hop: String, (correct, n): (usize, usize)| AblationRow {
        group: group.into(),
        heads: heads.clone(),
        ablation: how,
        hop,
        n,
        correct,
        accuracy: correct as f64 / n.max(1) as f64,
    };
    let total = counts
        .values()
        .fold((0, 0), |(c, n), &(dc, dn)| (c + dc, n + dn));
    let mut out = vec![row("all".into(), total)];
    out.extend(counts.iter().map(|(h, &c)| row(h.to_string(), c)));
    out
}

/// What [`ablate_run`] evaluates.
#[derive(Debug, Clone)]
pub struct AblationOptions {
    /// Test samples (the first `samples` of the run's test split).
    pub samples: usize,
    /// Memory budget of one forward pass in bytes.
    pub memory: usize,
}

/// Ablates the latest checkpoint of the number/letter run in `run`, whose heads have the types
/// `grid[layer][head]`, on the first `options.samples` test samples: the intact model, then
/// every group of [`groups`] by mean and by zero ablation. `progress(done, total)` follows the
/// evaluations.
pub fn ablate_run(
    run: &Path,
    grid: &[Vec<HeadKind>],
    options: &AblationOptions,
    device: &Device,
    mut progress: impl FnMut(usize, usize),
) -> Result<AblationReport> {
    let (dir, config) = RunDir::open(run)?;
    let step = dir.latest_checkpoint()?;
    let c = &config.model;
    let shape: Vec<usize> = grid.iter().map(Vec::len).collect();
    if shape != vec![c.n_heads; c.n_layers] {
        return Err(AnalysisError::Invalid(format!(
            "{}: head types for layers of {shape:?} heads, the model has {} layers x {} heads",
            run.display(),
            c.n_layers,
            c.n_heads
        )));
    }
    if options.samples == 0 {
        return Err(AnalysisError::Invalid(
            "ablation needs at least one test sample".into(),
        ));
    }
    let model = dir.load_model(step, &config, device)?.frozen();
    let task = Task::new(config.task, config.layout.clone())?;
    let samples = config
        .test_samples(options.samples, "the ablation")
        .map_err(AnalysisError::Invalid)?;
    let data = Dataset::new(task, config.seed, Split::Test, samples, 0)?;
    let groups = groups(grid);
    let total = 2 + 2 * groups.len();
    let means = split_means(&model, &data, options.memory)?;
    progress(1, total);
    let mut rows = rows_of(
        "none",
        &[],
        Knockout::None,
        &tally(&model, &data, options.memory, &[])?,
    );
    progress(2, total);
    let mut done = 2;
    for group in &groups {
        for how in [Knockout::Mean, Knockout::Zero] {
            let interventions = knockouts(group, how, &means)?;
            let counts = tally(&model, &data, options.memory, &interventions)?;
            rows.extend(rows_of(&group.name, &group.heads, how, &counts));
            done += 1;
            progress(done, total);
        }
    }
    Ok(AblationReport { step, rows })
}

/// The `all` row of `group` under `how` (None when the file has none).
pub fn overall<'a>(rows: &'a [AblationRow], group: &str, how: Knockout) -> Option<&'a AblationRow> {
    rows.iter()
        .find(|r| r.group == group && r.ablation == how && r.hop == "all")
}

/// One group's line in a table of ablations, as text.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupLine {
    /// The group (`(intact)` for the intact model).
    pub label: String,
    /// Its heads, `L.H` space-separated.
    pub heads: String,
    /// Mean-ablated accuracy with its 95% Wilson interval.
    pub mean: String,
    /// Zero-ablated accuracy (`-` when not measured).
    pub zero: String,
    /// Mean-ablated accuracy per hop count asked for.
    pub per_hop: Vec<String>,
    /// Test samples.
    pub n: usize,
}

/// One line per group of `rows` (the intact model first), with the per-hop accuracies of
/// `hops`.
pub fn group_lines(rows: &[AblationRow], hops: &[String]) -> Vec<GroupLine> {
    rows.iter()
        .filter(|r| r.hop == "all" && r.ablation != Knockout::Zero)
        .map(|r| {
            let (lo, hi) = crate::claims::wilson(r.correct, r.n);
            let find = |how: Knockout, hop: &str| {
                rows.iter()
                    .find(|x| x.group == r.group && x.ablation == how && x.hop == hop)
                    .map_or_else(|| "-".to_string(), |x| format!("{:.3}", x.accuracy))
            };
            GroupLine {
                label: if r.group == "none" {
                    "(intact)".to_string()
                } else {
                    r.group.clone()
                },
                heads: r.heads.clone(),
                mean: format!("{:.3} ({lo:.3}-{hi:.3})", r.accuracy),
                zero: find(Knockout::Zero, "all"),
                per_hop: hops.iter().map(|h| find(r.ablation, h)).collect(),
                n: r.n,
            }
        })
        .collect()
}

/// The hop counts of `rows`, in order.
pub fn hop_counts(rows: &[AblationRow]) -> Vec<String> {
    let mut h: Vec<usize> = rows.iter().filter_map(|r| r.hop.parse().ok()).collect();
    h.sort_unstable();
    h.dedup();
    h.into_iter().map(|h| h.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use HeadKind::{Mixed as M, Positional as P, Symbolic as S};

    #[test]
    fn groups_follow_the_types() {
        let g = groups(&[vec![M], vec![P], vec![P], vec![S]]);
        let names: Vec<&str> = g.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "positional",
                "symbolic",
                "mixed",
                "non-symbolic",
                "layer 0",
                "layer 1",
                "layer 2",
                "layer 3"
            ]
        );
        assert_eq!(g[0].heads, vec![(1, 0), (2, 0)]);
        assert_eq!(g[1].heads, vec![(3, 0)]);
        assert_eq!(g[3].heads, vec![(0, 0), (1, 0), (2, 0)]);
        // No symbolic head: no symbolic group; several heads per layer: one group per head.
        let g = groups(&[vec![P, M], vec![M, M]]);
        let names: Vec<&str> = g.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "positional",
                "mixed",
                "non-symbolic",
                "layer 0",
                "layer 1",
                "head 0.0",
                "head 0.1",
                "head 1.0",
                "head 1.1"
            ]
        );
        assert_eq!(g[1].heads, vec![(0, 1), (1, 0), (1, 1)]);
    }

    #[test]
    fn rows_sum_their_hops() {
        let counts = BTreeMap::from([(1, (9, 10)), (2, (5, 10))]);
        let rows = rows_of("symbolic", &[(3, 0), (4, 1)], Knockout::Mean, &counts);
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (rows[0].hop.as_str(), rows[0].correct, rows[0].n),
            ("all", 14, 20)
        );
        assert_eq!(rows[0].heads, "3.0 4.1");
        assert!((rows[0].accuracy - 0.7).abs() < 1e-12);
        assert_eq!(rows[2].accuracy, 0.5);
        assert_eq!(
            overall(&rows, "symbolic", Knockout::Mean).map(|r| r.n),
            Some(20)
        );
        assert!(overall(&rows, "symbolic", Knockout::Zero).is_none());
    }
}
