//! The hop map's causal knock-out: zeroing a head's weight on the hop edges and renormalising
//! (through `hook_pattern`) gives the same logits as a re-run with those edges' scores set to
//! -inf by hand (through `hook_attn_scores`, so softmax renormalises), on a random model.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_analysis::measure::hops::{edges, hop_map, hop_targets, knocked_logits, Source};
use ropelab_model::{
    GptJ, HookKind, HookPoint, Hooks, Intervention, ModelConfig, PositionEncoding,
};
use ropelab_tasks::{Dataset, Layout, Split, Task, TaskKind};
use ropelab_train::data::batch;

/// A random number-task model with weights far from the init (sharp attention).
fn random_model(seed: u64) -> GptJ {
    let vocab = Task::new(TaskKind::Number, Layout::default())
        .unwrap()
        .vocab()
        .len();
    let config = ModelConfig {
        vocab_size: vocab,
        n_heads: 2,
        d_model: 16,
        d_mlp: 24,
        ..ModelConfig::tiny(PositionEncoding::gptj(8))
    };
    let model = GptJ::new(config, seed, &Device::Cpu).unwrap().frozen();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (_, var) in model.named_vars() {
        let t = var.as_tensor();
        let noise: Vec<f32> = (0..t.elem_count())
            .map(|_| rng.random_range(-0.5..0.5))
            .collect();
        let noise = Tensor::from_vec(noise, t.shape(), t.device()).unwrap();
        var.set(&(t + noise).unwrap()).unwrap();
    }
    model
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar()
        .unwrap()
}

#[test]
fn a_knocked_out_edge_equals_a_rerun_without_it() {
    let model = random_model(3);
    let task = Task::new(TaskKind::Number, Layout::default()).unwrap();
    let data = Dataset::new(task, 0, Split::Test, 24, 0).unwrap();
    let b = batch(&data, &(0..24).collect::<Vec<_>>(), &Device::Cpu).unwrap();
    let vocab = data.task().vocab();
    let targets: Vec<_> = (0..24)
        .map(|i| {
            let s = data.sample(i).unwrap();
            let t: Vec<&str> = s.ids.iter().map(|&id| vocab.token(id).unwrap()).collect();
            hop_targets(&t)
        })
        .collect();
    let (layer, head) = (1, 1);
    let (pattern, scores) = (
        HookPoint::new(layer, HookKind::Pattern),
        HookPoint::new(layer, HookKind::AttnScores),
    );
    let mut hooks = Hooks::new().capture([pattern, scores]);
    let clean = model.forward_last(&b.ids, &mut hooks, None).unwrap();
    let clean_pattern = hooks.get(pattern).unwrap().clone();
    let clean_scores = hooks.get(scores).unwrap().clone();
    for source in Source::ALL {
        for j in [1, 2, 4] {
            let e = edges(&targets, source, j);
            assert!(!e.is_empty());
            let knocked = knocked_logits(&model, &b.ids, layer, head, &e, &clean_pattern).unwrap();
            // By hand: -inf on the edges' scores, the rest as computed.
            let (bs, h, t, k) = clean_scores.dims4().unwrap();
            let mut s: Vec<f32> = clean_scores.flatten_all().unwrap().to_vec1().unwrap();
            for &(bi, q, key) in &e {
                s[((bi * h + head) * t + q) * k + key] = f32::NEG_INFINITY;
            }
            let value = Tensor::from_vec(s, (bs, h, t, k), &Device::Cpu).unwrap();
            let mut by_hand = Hooks::new().intervene(Intervention::Replace {
                hook: scores,
                value,
            });
            let rerun = model.forward_last(&b.ids, &mut by_hand, None).unwrap();
            let d = max_diff(&knocked, &rerun);
            assert!(d < 1e-4, "{source:?} j {j}: {d}");
            assert!(
                max_diff(&knocked, &clean) > 1e-3,
                "{source:?} j {j}: nothing changed"
            );
        }
    }
    // No edge knocked out: the clean logits.
    let none = knocked_logits(&model, &b.ids, layer, head, &[], &clean_pattern).unwrap();
    assert!(max_diff(&none, &clean) < 1e-6);
}

#[test]
fn the_map_has_a_row_per_layer_head_source_and_hop() {
    let model = random_model(4);
    let task = Task::new(TaskKind::Number, Layout::default()).unwrap();
    let data = Dataset::new(task, 0, Split::Test, 40, 0).unwrap();
    let (baseline, rows) = hop_map(&model, &data, 1 << 20, |_, _| {}).unwrap();
    assert_eq!(rows.len(), 2 * 2 * 2 * 4);
    for r in &rows {
        assert_eq!(r.accuracy, baseline.accuracy);
        assert!(r.edges > 0 && (0.0..=1.0).contains(&r.mass), "{r:?}");
        assert!(r.knockout_per_hop.starts_with("1:"), "{r:?}");
    }
    // From the last token, j = 1 has one edge per sample; from every position, more.
    let last = rows
        .iter()
        .find(|r| r.source == Source::Last && r.j == 1)
        .unwrap();
    assert_eq!(last.edges, 40);
    let every = rows
        .iter()
        .find(|r| r.source == Source::Every && r.j == 1)
        .unwrap();
    assert!(every.edges > 40 * 8, "{every:?}");
}
