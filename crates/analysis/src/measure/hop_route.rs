//! The hop map's verdict (docs/multihead.md, "Hop map"): which layer carries which hop, and
//! whether a layer composes hops.
//!
//! A layer *reads* hop j when one of its heads puts at least [`CARRY_MASS`] of every
//! position's attention on that position's own hop_j (the `every` rows). To attend hop_j a
//! position must know where it is, that is the offsets at hops 0..j-1. Its own token gives
//! hop_1; a layer that reads hop_j one token at a time adds hop_(j+1), so with one hop per
//! layer the furthest hop a layer can read is 1 + the hops its lower layers read. A layer that
//! reads further **composes** hops: the key it read below already knew more than its own
//! offset (pointer doubling reads hop_1, hop_2, then hop_4). The causal side is each layer's
//! largest knock-out drop in accuracy.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::hops::{HopRow, Source};

/// Attention mass on hop_j (from every position) at which a head reads hop j.
pub const CARRY_MASS: f64 = 0.5;

/// What one layer does along the chains.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerRoute {
    /// Block.
    pub layer: usize,
    /// Hops j a head of the layer reads from every position, with the largest mass on each.
    pub reads: Vec<(usize, f64)>,
    /// Hops j a head reads from the last token, with the largest mass on each.
    pub reads_last: Vec<(usize, f64)>,
    /// The furthest hop one-hop-per-layer reading allows here (1 + what the layers below read).
    pub reach: usize,
    /// The largest accuracy drop of one knock-out in the layer, and its (head, from, j).
    pub drop: (f64, usize, Source, usize),
}

/// The verdict of a hop map.
#[derive(Debug, Clone, PartialEq)]
pub struct HopRoute {
    /// Every layer, bottom first.
    pub layers: Vec<LayerRoute>,
    /// The mass threshold used.
    pub threshold: f64,
}

impl HopRoute {
    /// The verdict of `rows` (a whole hop map) at mass threshold `threshold`.
    pub fn of(rows: &[HopRow], threshold: f64) -> Self {
        let mut by_layer: BTreeMap<usize, Vec<&HopRow>> = BTreeMap::new();
        for r in rows {
            by_layer.entry(r.layer).or_default().push(r);
        }
        let mut reach = 1;
        let layers = by_layer
            .into_iter()
            .map(|(layer, rows)| {
                let reads_from = |source: Source| {
                    let mut best: BTreeMap<usize, f64> = BTreeMap::new();
                    for r in rows.iter().filter(|r| r.source == source) {
                        if r.mass >= threshold {
                            let m = best.entry(r.j).or_insert(r.mass);
                            *m = m.max(r.mass);
                        }
                    }
                    best.into_iter().collect::<Vec<_>>()
                };
                let reads = reads_from(Source::Every);
                let drop = rows
                    .iter()
                    .map(|r| (r.accuracy - r.knockout_accuracy, r.head, r.source, r.j))
                    .fold((f64::NEG_INFINITY, 0, Source::Last, 0), |a, b| {
                        if b.0 > a.0 {
                            b
                        } else {
                            a
                        }
                    });
                let route = LayerRoute {
                    layer,
                    reads_last: reads_from(Source::Last),
                    reach,
                    drop,
                    reads: reads.clone(),
                };
                // Reading hop j tells the position (at least) where hop j+1 is.
                if let Some(&(j, _)) = reads.last() {
                    reach = reach.max(j + 1);
                }
                route
            })
            .collect();
        Self { layers, threshold }
    }

    /// The layers that read a hop beyond their one-hop-per-layer reach: (layer, hop, reach).
    pub fn composing(&self) -> Vec<(usize, usize, usize)> {
        self.layers
            .iter()
            .flat_map(|l| {
                l.reads
                    .iter()
                    .filter(|(j, _)| *j > l.reach)
                    .map(|&(j, _)| (l.layer, j, l.reach))
            })
            .collect()
    }

    /// Whether some layer composes hops.
    pub fn composes(&self) -> bool {
        !self.composing().is_empty()
    }

    /// Which layer reads which hop (from every position), `L0:1 L1:1,2 L2:-`.
    pub fn reads_text(&self) -> String {
        self.layers
            .iter()
            .map(|l| {
                let js: Vec<String> = l.reads.iter().map(|(j, _)| j.to_string()).collect();
                let js = if js.is_empty() {
                    "-".into()
                } else {
                    js.join(",")
                };
                format!("L{}:{js}", l.layer)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// One sentence: which layers read which hop and whether any composes.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "hops read from every position (mass >= {}): {}",
            self.threshold,
            self.reads_text()
        );
        let composing = self.composing();
        if composing.is_empty() {
            let furthest = self
                .layers
                .iter()
                .flat_map(|l| l.reads.iter().map(|(j, _)| *j))
                .max();
            match furthest {
                Some(j) => write!(
                    s,
                    "; no layer reads past one hop per layer (furthest hop read: {j}): no \
                     composition"
                ),
                None => write!(s, "; no layer reads any hop: no composition"),
            }
            .ok();
        } else {
            let parts: Vec<String> = composing
                .iter()
                .map(|(l, j, r)| format!("L{l} reads hop {j} where one hop per layer reaches {r}"))
                .collect();
            write!(s, "; composes hops: {}", parts.join(", ")).ok();
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(layer: usize, source: Source, j: usize, mass: f64, knocked: f64) -> HopRow {
        HopRow {
            layer,
            head: 0,
            source,
            j,
            edges: 10,
            mass,
            accuracy: 1.0,
            knockout_accuracy: knocked,
            knockout_per_hop: String::new(),
        }
    }

    fn map(reads: &[Option<usize>]) -> Vec<HopRow> {
        let mut rows = vec![];
        for (layer, read) in reads.iter().enumerate() {
            for source in Source::ALL {
                for j in 1..=4 {
                    let mass = if *read == Some(j) { 0.9 } else { 0.1 };
                    rows.push(row(layer, source, j, mass, 1.0 - 0.01 * j as f64));
                }
            }
        }
        rows
    }

    #[test]
    fn reading_hop_1_at_every_layer_is_one_hop_per_layer() {
        // The trained models' pattern: every position reads its own hop_1, layer after layer.
        let route = HopRoute::of(&map(&[Some(1), Some(1), Some(1), None]), CARRY_MASS);
        assert_eq!(route.reads_text(), "L0:1 L1:1 L2:1 L3:-");
        assert!(!route.composes());
        assert_eq!(route.layers[3].reach, 2);
        assert_eq!(route.layers[0].drop.3, 4, "the largest drop is found");
        assert!(route.summary().contains("furthest hop read: 1"));
    }

    #[test]
    fn a_read_past_the_reach_composes() {
        // Hop 3 right after hop 1: the key at hop_1 must have told the query two offsets.
        let route = HopRoute::of(&map(&[Some(1), Some(3)]), CARRY_MASS);
        assert_eq!(route.composing(), vec![(1, 3, 2)]);
        // Hop 2 after hop 1 is within one hop per layer.
        assert!(!HopRoute::of(&map(&[Some(1), Some(2)]), CARRY_MASS).composes());
        // Hop 2 in the first layer cannot be reached from the own token alone.
        assert_eq!(
            HopRoute::of(&map(&[Some(2)]), CARRY_MASS).composing(),
            vec![(0, 2, 1)]
        );
        assert!(HopRoute::of(&map(&[None, None]), CARRY_MASS)
            .summary()
            .contains("no layer reads any hop"));
    }
}
