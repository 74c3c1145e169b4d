//! The hop map and its verdict on hand-built number-task models whose routes are known:
//! a one-hop-per-layer chain (layer l reads hop l+1) and a pointer-doubling chain (layers read
//! hop 1, 2, 4). Both must solve the task exactly, the map must find each read edge with all
//! its mass, the knock-out of a read edge must break exactly the samples that need it, and the
//! verdict must call doubling composing and one hop per layer not; so must the probes of their
//! residual streams and the joint knock-outs of their layers.

use ropelab_analysis::measure::hop_chain::{HopChain, Route};
use ropelab_analysis::measure::hop_route::{HopRoute, CARRY_MASS};
use ropelab_analysis::measure::hops::{hop_map, HopRow, Routed, Source, MAX_HOP};
use ropelab_analysis::measure::layer_sets::{layer_sets, LayerSetRoute, ANSWER_ACCURACY};
use ropelab_analysis::measure::probe::{
    probe_streams, residual_streams, ProbeRoute, ProbeRow, ProbeVerdict, Target, READ_ACCURACY,
};
use ropelab_tasks::{Dataset, Layout, Split, Task, TaskKind};

fn data(n: usize) -> Dataset {
    let task = Task::new(TaskKind::Number, Layout::default()).unwrap();
    Dataset::new(task, 7, Split::Test, n, 0).unwrap()
}

fn map(route: Route) -> (f64, Vec<HopRow>) {
    let data = data(128);
    let chain = HopChain::new(route, data.task().vocab(), MAX_HOP).unwrap();
    let (baseline, rows) = hop_map(&chain, &data, 1 << 24, |_, _| {}).unwrap();
    (baseline.accuracy, rows)
}

fn row(rows: &[HopRow], layer: usize, from: Source, j: usize) -> &HopRow {
    rows.iter()
        .find(|r| r.layer == layer && r.source == from && r.j == j)
        .unwrap()
}

fn per_hop(r: &HopRow) -> Vec<(usize, f64)> {
    r.knockout_per_hop
        .split(' ')
        .map(|p| {
            let (h, a) = p.split_once(':').unwrap();
            (h.parse().unwrap(), a.parse().unwrap())
        })
        .collect()
}

#[test]
fn the_hand_built_chains_solve_the_number_task() {
    let data = data(256);
    let vocab = data.task().vocab();
    for (route, layers) in [(Route::OneHopPerLayer, 4), (Route::Doubling, 3)] {
        let chain = HopChain::new(route, vocab, MAX_HOP).unwrap();
        assert_eq!(chain.layers(), layers, "{route:?}");
        let (acc, _) = hop_map(&chain, &data, 1 << 24, |_, _| {}).unwrap();
        assert_eq!(acc.accuracy, 1.0, "{route:?}: {acc:?}");
        assert_eq!(acc.per_hop.len(), MAX_HOP, "every hop count is tested");
    }
}

#[test]
fn one_hop_per_layer_reads_hop_l_plus_1_and_does_not_compose() {
    let (acc, rows) = map(Route::OneHopPerLayer);
    assert_eq!(acc, 1.0);
    for layer in 0..4 {
        for j in 1..=MAX_HOP {
            let r = row(&rows, layer, Source::Every, j);
            if j == layer + 1 {
                assert!(r.mass > 0.99, "L{layer} j={j}: {r:?}");
            } else {
                assert!(r.mass < 0.05, "L{layer} j={j}: {r:?}");
            }
        }
    }
    let route = HopRoute::of(&rows, CARRY_MASS);
    assert_eq!(route.reads_text(), "L0:1 L1:2 L2:3 L3:4");
    assert!(!route.composes(), "{}", route.summary());
    assert!(
        route.summary().contains("no composition"),
        "{}",
        route.summary()
    );
    // Layer 2 reads hop 3 from the last token: only samples of 3 or more hops need it.
    let r = row(&rows, 2, Source::Last, 3);
    for (h, a) in per_hop(r) {
        if h < 3 {
            assert_eq!(a, 1.0, "{h} hops do not need L2's edge: {r:?}");
        } else {
            assert!(a < 0.5, "{h} hops need L2's edge: {r:?}");
        }
    }
}

#[test]
fn doubling_reads_hops_1_2_4_and_composes() {
    let (acc, rows) = map(Route::Doubling);
    assert_eq!(acc, 1.0);
    for (layer, read) in [(0, 1), (1, 2), (2, 4)] {
        for j in 1..=MAX_HOP {
            let r = row(&rows, layer, Source::Every, j);
            if j == read {
                assert!(r.mass > 0.99, "L{layer} j={j}: {r:?}");
            } else {
                assert!(r.mass < 0.05, "L{layer} j={j}: {r:?}");
            }
        }
    }
    let route = HopRoute::of(&rows, CARRY_MASS);
    assert_eq!(route.reads_text(), "L0:1 L1:2 L2:4");
    assert_eq!(route.composing(), vec![(2, 4, 3)]);
    assert!(
        route.summary().contains("composes hops"),
        "{}",
        route.summary()
    );
    // The query's hop-2 edge in layer 1 carries hops 2..4 at once (hop 3 and 4 through the
    // key's own layer-0 read): knocking it out breaks every sample of 2 or more hops.
    let r = row(&rows, 1, Source::Last, 2);
    for (h, a) in per_hop(r) {
        if h < 2 {
            assert_eq!(a, 1.0, "{r:?}");
        } else {
            assert!(a < 0.5, "{h} hops: {r:?}");
        }
    }
    // Every position's hop-1 edge in layer 0 feeds every later read.
    let r = row(&rows, 0, Source::Every, 1);
    assert!(r.knockout_accuracy < 0.5, "{r:?}");
}

#[test]
fn a_hop_chain_needs_the_number_tasks_vocabulary() {
    let letter = Task::new(TaskKind::Letter, Layout::default()).unwrap();
    let err = HopChain::new(Route::Doubling, letter.vocab(), MAX_HOP);
    assert!(err.is_err());
    let number = Task::new(TaskKind::Number, Layout::default()).unwrap();
    assert!(HopChain::new(Route::Doubling, number.vocab(), 0).is_err());
}

/// The probes of a hand-built chain's residual stream (its one-hot subspaces) on `n` samples.
fn probes(route: Route, n: usize) -> Vec<ProbeRow> {
    let data = data(n);
    let chain = HopChain::new(route, data.task().vocab(), MAX_HOP).unwrap();
    let (streams, width) = residual_streams(&chain, &data, 1 << 24).unwrap();
    assert_eq!(streams.len(), chain.layers() + 1);
    probe_streams(&streams, width, &data, |_, _| {}).unwrap()
}

fn probe(rows: &[ProbeRow], from: Source, stream: usize, target: Target, j: usize) -> f64 {
    rows.iter()
        .find(|r| r.source == from && r.stream == stream && r.target == target && r.j == j)
        .unwrap()
        .accuracy
}

#[test]
fn the_probes_call_one_hop_per_layer_what_it_is() {
    let rows = probes(Route::OneHopPerLayer, 1024);
    // Layer l writes the token at hop l + 1: read exactly from stream l + 1 on, not before.
    for j in 1..=MAX_HOP {
        let at = probe(&rows, Source::Every, j, Target::Token, j);
        assert!(at >= READ_ACCURACY, "hop {j} after layer {}: {at}", j - 1);
        let before = probe(&rows, Source::Every, j - 1, Target::Token, j);
        assert!(before < 0.5, "hop {j} before layer {}: {before}", j - 1);
    }
    for from in Source::ALL {
        let route = ProbeRoute::of(&rows, from, READ_ACCURACY);
        assert_eq!(
            route.verdict(MAX_HOP),
            ProbeVerdict::OneHopPerLayer,
            "{from:?}: {route:?}"
        );
    }
}

#[test]
fn the_probes_call_doubling_composing() {
    let rows = probes(Route::Doubling, 1024);
    // After layer 1 every position knows where hop 4 is (two doublings): one hop per layer
    // knows only where hop 3 is.
    let at = probe(&rows, Source::Every, 2, Target::Distance, 4);
    assert!(at >= READ_ACCURACY, "{at}");
    let route = ProbeRoute::of(&rows, Source::Every, READ_ACCURACY);
    match route.verdict(MAX_HOP) {
        ProbeVerdict::Composes(b) => assert!(b.stream <= 2 && b.j >= 3, "{b:?}"),
        v => panic!("doubling: {v:?}"),
    }
}

#[test]
fn the_layer_sets_call_each_chain_what_it_is() {
    let data = data(128);
    let vocab = data.task().vocab();
    let one = HopChain::new(Route::OneHopPerLayer, vocab, MAX_HOP).unwrap();
    let rows = layer_sets(&one, &data, MAX_HOP, 1 << 24, |_, _| {}).unwrap();
    // Every set of fewer than 4 of the 4 layers is tried; j hops with j - 1 moving layers fail.
    assert_eq!(
        rows.iter()
            .map(|r| &r.moving)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        1 + 4 + 6 + 4
    );
    let route = LayerSetRoute::of(&rows, ANSWER_ACCURACY);
    assert!(route.beyond.is_empty(), "{route:?}");
    // The first j layers answer j hops.
    for (set, j) in [("0", 1), ("0+1", 2), ("0+1+2", 3)] {
        let r = rows.iter().find(|r| r.moving == set && r.hop == j).unwrap();
        assert_eq!(r.accuracy, 1.0, "{r:?}");
    }
    let doubling = HopChain::new(Route::Doubling, vocab, MAX_HOP).unwrap();
    let rows = layer_sets(&doubling, &data, MAX_HOP, 1 << 24, |_, _| {}).unwrap();
    let route = LayerSetRoute::of(&rows, ANSWER_ACCURACY);
    // Two doublings reach hop 3, three reach hop 4 (and up to 7).
    assert_eq!(
        route.beyond.first().map(|b| (b.0.as_str(), b.1, b.2)),
        Some(("0+1", 2, 3))
    );
    assert!(
        route.beyond.iter().any(|b| b.0 == "0+1+2" && b.2 == 4),
        "{route:?}"
    );
}
