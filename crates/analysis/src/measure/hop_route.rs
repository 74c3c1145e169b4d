//! The hop map's verdict (docs/multihead.md, "Hop map"): which layer carries which hop, and
//! whether a layer composes hops.
//!
//! A layer *reads* hop j when its heads together put at least [`CARRY_MASS`] of every
//! position's attention on that position's own hop_j (the `every` rows, mass summed over the
//! layer's heads: two heads that split the read between them still read it). To attend hop_j a
//! position must know where it is, that is the offsets at hops 0..j-1. Its own token gives
//! hop_1; each layer that reads adds (at least) one hop to what every position knows, since the
//! position it reads carries what that position's own lower layers read. With one hop per
//! layer the furthest hop a layer can read is therefore 1 + the number of reading layers below
//! it (its *reach*), and the reading layers *account* for one hop each. A layer that reads past
//! its reach **composes** hops (pointer doubling reads hop_1, hop_2, then hop_4). The causal
//! side is each layer's largest knock-out drop in accuracy.

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
    /// Hops j the layer reads from every position, with the mass its heads put on each
    /// (summed over the layer's heads).
    pub reads: Vec<(usize, f64)>,
    /// Hops j the layer reads from the last token, with the summed mass on each.
    pub reads_last: Vec<(usize, f64)>,
    /// The furthest hop one-hop-per-layer reading allows here (1 + the reading layers below).
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
                // The mass on each hop summed over the layer's heads, kept where it reaches
                // the threshold.
                let reads_from = |source: Source| {
                    let mut sum: BTreeMap<usize, f64> = BTreeMap::new();
                    for r in rows.iter().filter(|r| r.source == source) {
                        *sum.entry(r.j).or_insert(0.0) += r.mass;
                    }
                    sum.into_iter()
                        .filter(|&(_, m)| m >= threshold)
                        .collect::<Vec<_>>()
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
                // A reading layer adds one hop to what every position knows; a composing
                // layer (reading past its reach) tells the position where the hop after the
                // one it read is.
                if let Some(&(j, _)) = reads.last() {
                    reach = (reach + 1).max(j + 1);
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

    /// The hops that one hop per reading layer accounts for: the number of layers that read a
    /// hop from every position.
    pub fn accounted(&self) -> usize {
        self.layers.iter().filter(|l| !l.reads.is_empty()).count()
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
                    "; no layer reads past one hop per layer (furthest hop read: {j}; {} \
                     reading layers): no composition detected",
                    self.accounted()
                ),
                None => write!(s, "; no layer reads any hop: no composition detected"),
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
        // Each reading layer adds one hop: three layers account for three hops, and the fourth
        // layer could read hop 4.
        assert_eq!(route.layers[3].reach, 4);
        assert_eq!(route.accounted(), 3);
        assert_eq!(route.layers[0].drop.3, 4, "the largest drop is found");
        assert!(route.summary().contains("furthest hop read: 1"));
    }

    #[test]
    fn a_read_past_the_reach_composes() {
        // Hop 3 right after hop 1: the key at hop_1 must have told the query two offsets.
        let route = HopRoute::of(&map(&[Some(1), Some(3)]), CARRY_MASS);
        assert_eq!(route.composing(), vec![(1, 3, 2)]);
        // Hop 2 after hop 1 is within one hop per layer, and so is hop 3 after two reads.
        assert!(!HopRoute::of(&map(&[Some(1), Some(2)]), CARRY_MASS).composes());
        assert!(!HopRoute::of(&map(&[Some(1), Some(1), Some(3)]), CARRY_MASS).composes());
        // Pointer doubling: hop 4 in the third layer is past its reach of 3.
        assert_eq!(
            HopRoute::of(&map(&[Some(1), Some(2), Some(4)]), CARRY_MASS).composing(),
            vec![(2, 4, 3)]
        );
        // Hop 2 in the first layer cannot be reached from the own token alone.
        assert_eq!(
            HopRoute::of(&map(&[Some(2)]), CARRY_MASS).composing(),
            vec![(0, 2, 1)]
        );
        assert!(HopRoute::of(&map(&[None, None]), CARRY_MASS)
            .summary()
            .contains("no layer reads any hop"));
    }

    #[test]
    fn a_read_split_over_a_layers_heads_is_summed() {
        // Two heads put 0.3 each on hop 1: neither alone reads it, the layer does.
        let mut rows = vec![];
        for head in 0..2 {
            for j in 1..=4 {
                let mass = if j == 1 { 0.3 } else { 0.05 };
                let mut r = row(0, Source::Every, j, mass, 1.0);
                r.head = head;
                rows.push(r);
            }
        }
        let route = HopRoute::of(&rows, CARRY_MASS);
        assert_eq!(route.reads_text(), "L0:1");
        assert!((route.layers[0].reads[0].1 - 0.6).abs() < 1e-12);
        assert_eq!(route.accounted(), 1);
        // Below the threshold together, nothing is read.
        assert_eq!(HopRoute::of(&rows[..4], CARRY_MASS).reads_text(), "L0:-");
    }
}
