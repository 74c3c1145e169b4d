//! Joint knock-outs of layers (docs/multihead.md, "Layer sets"): how many layers must move
//! information for a number model to answer chains of j hops.
//!
//! A layer is *held* when every head's attention is replaced by the identity pattern (each
//! query attends only its own position, through the pattern hook): the layer still runs, but
//! nothing moves between positions in it. With one hop per layer, a position learns one more
//! token of its chain per moving layer, so the token at hop j (the answer of a j-hop chain)
//! needs j moving layers. A model that answers j-hop chains with fewer moving layers reads
//! further than one hop per layer allows: it composes hops (or follows a route other than the
//! chain). Every set of fewer moving layers than the largest hop count is tried, the intact
//! model included when it has fewer layers than hops.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use ropelab_model::{HookKind, HookPoint, Hooks, Intervention};
use ropelab_tasks::Dataset;
use ropelab_train::data::{batch, Tally};
use serde::{Deserialize, Serialize};

use super::hops::{number_run, Routed};
use crate::Result;

/// The file a run keeps them in.
pub const LAYER_SETS_FILE: &str = "layer_sets.csv";

/// Test samples per set by default.
pub const DEFAULT_SAMPLES: usize = 512;

/// Accuracy at which a set of moving layers *answers* a hop count.
pub const ANSWER_ACCURACY: f64 = 0.9;

/// One line of `layer_sets.csv`: one set of moving layers (every other layer held) and one hop
/// count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerSetRow {
    /// The layers left moving, `0+2`, or `none`.
    pub moving: String,
    /// How many.
    pub size: usize,
    /// Hop count of the samples.
    pub hop: usize,
    /// Samples of that hop count.
    pub n: usize,
    /// Answered correctly.
    pub correct: usize,
    /// correct / n.
    pub accuracy: f64,
}

/// The name of a set of layers: `0+2`, or `none`.
pub fn set_name(layers: &[usize]) -> String {
    if layers.is_empty() {
        "none".into()
    } else {
        layers
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join("+")
    }
}

/// Every set of at most `largest` of `layers` layers, smallest first (subsets in lexicographic
/// order within a size).
fn sets(layers: usize, largest: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = (0u64..1 << layers)
        .map(|mask| {
            (0..layers)
                .filter(|l| mask >> l & 1 == 1)
                .collect::<Vec<_>>()
        })
        .filter(|s| s.len() <= largest)
        .collect();
    out.sort_by(|a, b| a.len().cmp(&b.len()).then(a.cmp(b)));
    out
}

/// The identity pattern [batch, heads, pos, pos].
fn identity(b: usize, heads: usize, t: usize, device: &Device) -> Result<Tensor> {
    Ok(Tensor::eye(t, DType::F32, device)?
        .reshape((1, 1, t, t))?
        .broadcast_as((b, heads, t, t))?
        .contiguous()?)
}

/// How many layer sets [`layer_sets`] runs on a model of `layers` layers answering up to
/// `max_hop` hops (each one forward over every sample), for the estimate made before.
pub fn set_count(layers: usize, max_hop: usize) -> usize {
    sets(layers, max_hop.saturating_sub(1).min(layers)).len()
}

/// Every set of fewer moving layers than `max_hop` (the largest hop count the model answers)
/// on `data`, each other layer held: accuracy per hop count; `progress(done, total)` after each
/// set. A trained model should come [`ropelab_model::GptJ::frozen`].
pub fn layer_sets(
    model: &impl Routed,
    data: &Dataset,
    max_hop: usize,
    memory: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<LayerSetRow>> {
    let (layers, heads) = (model.layers(), model.heads());
    let size = model.batch_size(data.seq_len(), memory).max(1);
    let all = sets(layers, max_hop.saturating_sub(1).min(layers));
    let mut rows = vec![];
    for (done, moving) in all.iter().enumerate() {
        let mut tally = Tally::default();
        for start in (0..data.len()).step_by(size) {
            let indices: Vec<usize> = (start..data.len().min(start + size)).collect();
            let b = batch(data, &indices, model.device())?;
            let (n, t) = b.ids.dims2()?;
            let held = identity(n, heads, t, model.device())?;
            let mut hooks = Hooks::new();
            for l in (0..layers).filter(|l| !moving.contains(l)) {
                hooks = hooks.intervene(Intervention::Replace {
                    hook: HookPoint::new(l, HookKind::Pattern),
                    value: held.clone(),
                });
            }
            let logits = model.last_logits(&b.ids, &mut hooks)?;
            tally.add(&logits, &b)?;
        }
        let counts: BTreeMap<usize, (usize, usize)> = tally.per_hop_counts().clone();
        for (hop, (correct, n)) in counts {
            rows.push(LayerSetRow {
                moving: set_name(moving),
                size: moving.len(),
                hop,
                n,
                correct,
                accuracy: if n > 0 {
                    correct as f64 / n as f64
                } else {
                    f64::NAN
                },
            });
        }
        progress(done + 1, all.len());
    }
    Ok(rows)
}

/// What the layer sets say: the hop counts answered with fewer moving layers than hops.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSetRoute {
    /// Sets that answer a hop count j > their size (at >= [`ANSWER_ACCURACY`]): (set, j,
    /// accuracy), fewest layers first.
    pub beyond: Vec<(String, usize, usize, f64)>,
    /// Per hop count: the largest set size tried below it.
    pub tried: BTreeMap<usize, usize>,
    /// Per hop count j: the best accuracy of a set of fewer than j moving layers, and the set.
    pub best_below: BTreeMap<usize, (f64, String)>,
    /// The answer threshold.
    pub threshold: f64,
}

impl LayerSetRoute {
    /// The route of `rows` at answer threshold `threshold`.
    pub fn of(rows: &[LayerSetRow], threshold: f64) -> Self {
        let mut beyond: Vec<(String, usize, usize, f64)> = rows
            .iter()
            .filter(|r| r.hop > r.size && r.n > 0 && r.accuracy >= threshold)
            .map(|r| (r.moving.clone(), r.size, r.hop, r.accuracy))
            .collect();
        beyond.sort_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)));
        let mut tried: BTreeMap<usize, usize> = BTreeMap::new();
        let mut best_below: BTreeMap<usize, (f64, String)> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.hop > r.size && r.n > 0) {
            let e = tried.entry(r.hop).or_insert(0);
            *e = (*e).max(r.size);
            let b = best_below
                .entry(r.hop)
                .or_insert((f64::NEG_INFINITY, String::new()));
            if r.accuracy > b.0 {
                *b = (r.accuracy, r.moving.clone());
            }
        }
        Self {
            beyond,
            tried,
            best_below,
            threshold,
        }
    }

    /// One sentence.
    pub fn text(&self) -> String {
        match self.beyond.first() {
            Some((set, size, hop, acc)) => format!(
                "{hop}-hop chains answered at {acc:.3} with {size} moving layer(s) ({set}), \
                 fewer than one hop per layer needs"
            ),
            None => {
                let best: Vec<String> = self
                    .best_below
                    .iter()
                    .map(|(j, (a, set))| {
                        format!(
                            "{j} hops at most {a:.3} with {} moving ({set})",
                            self.tried.get(j).copied().unwrap_or(0)
                        )
                    })
                    .collect();
                format!(
                    "no set of fewer moving layers than hops answers its chains at >= {}; the \
                     best: {}",
                    self.threshold,
                    best.join(", ")
                )
            }
        }
    }
}

/// The layer sets of the number-task run in `root` at its latest checkpoint on `n` test
/// samples; an error naming the run for another task.
pub fn layer_sets_run(
    root: &Path,
    n: usize,
    memory: usize,
    device: &Device,
    progress: impl FnMut(usize, usize),
) -> Result<(usize, Vec<LayerSetRow>)> {
    let (step, config, data, model) =
        number_run(root, None, n, device, "the layer sets count hops along")?;
    let max_hop = config.layout.hops.iter().copied().max().unwrap_or(1);
    let rows = layer_sets(&model, &data, max_hop, memory, progress)?;
    Ok((step, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_are_every_subset_up_to_a_size() {
        let s = sets(3, 2);
        assert_eq!(s.len(), 1 + 3 + 3);
        assert_eq!(s[0], Vec::<usize>::new());
        assert_eq!(s[1..4], [vec![0], vec![1], vec![2]]);
        assert_eq!(s[4..], [vec![0, 1], vec![0, 2], vec![1, 2]]);
        assert_eq!(sets(6, 3).len(), 1 + 6 + 15 + 20);
        assert_eq!(set_name(&[0, 2]), "0+2");
        assert_eq!(set_name(&[]), "none");
    }

    #[test]
    fn the_route_reports_a_hop_answered_with_fewer_layers() {
        let row = |moving: &str, size, hop, accuracy| LayerSetRow {
            moving: moving.into(),
            size,
            hop,
            n: 100,
            correct: (accuracy * 100.0) as usize,
            accuracy,
        };
        let rows = vec![
            row("0+1", 2, 2, 1.0), // hop 2 with 2 layers: allowed, not beyond
            row("0+1", 2, 3, 0.2),
            row("0+1+2", 3, 4, 0.95),
        ];
        let r = LayerSetRoute::of(&rows, 0.9);
        assert_eq!(r.beyond, vec![("0+1+2".to_string(), 3, 4, 0.95)]);
        assert!(r.text().contains("4-hop chains answered at 0.950 with 3"));
        let r = LayerSetRoute::of(&rows[..2], 0.9);
        assert!(r.beyond.is_empty());
        assert_eq!(r.tried, BTreeMap::from([(3, 2)]));
        assert_eq!(
            r.best_below,
            BTreeMap::from([(3, (0.2, "0+1".to_string()))])
        );
        assert!(r
            .text()
            .contains("3 hops at most 0.200 with 2 moving (0+1)"));
    }
}
