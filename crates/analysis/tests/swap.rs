//! Swap scores: hand-built heads with known answers, and the fast path against the brute-force
//! re-run of the block on random models, lengths and query positions.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_analysis::lens::reference::reference_effects;
use ropelab_analysis::lens::swap::{block_swap_effects, blocks, scores, Tau};
use ropelab_analysis::{block_swap_scores, swap_scores, Captured, HeadView};
use ropelab_model::{GptJ, ModelConfig, PositionEncoding, RopeLayout};

const TAU: Tau = Tau::DEFAULT;

/// A 2-dim head with one RoPE plane of angle 1 rad per position and all keys equal: logits
/// depend on position only. A large query norm makes attention sharp.
fn positional_head(n: usize, sharpness: f64) -> HeadView {
    HeadView {
        q: vec![sharpness, 0.0],
        keys: vec![vec![1.0, 0.0]; n + 1],
        encoding: PositionEncoding::rope(1.0, 2, RopeLayout::Interleaved),
        scale: 1.0,
        dims: None,
    }
}

#[test]
fn a_rope_head_with_equal_keys_is_positional() {
    let s = swap_scores(&positional_head(16, 30.0), TAU);
    assert!(s.s_pos > 0.999, "{s:?}");
    assert!(s.s_sym < 0.01, "{s:?}");
}

#[test]
fn a_nope_head_matching_content_is_symbolic() {
    // One-hot keys; the query matches the content at position 5 strongly.
    let n = 16;
    let keys: Vec<Vec<f64>> = (0..=n)
        .map(|p| (0..=n).map(|d| if d == p { 1.0 } else { 0.0 }).collect())
        .collect();
    let mut q = vec![0.0; n + 1];
    q[5] = 40.0;
    let head = HeadView {
        q,
        keys,
        encoding: PositionEncoding::None,
        scale: 1.0,
        dims: None,
    };
    let s = swap_scores(&head, TAU);
    assert!(s.s_pos < 0.01, "{s:?}");
    assert!(s.s_sym > 0.999, "{s:?}");
}

#[test]
fn uniform_attention_scores_one_one() {
    // Zero query: every logit is 0, attention is uniform.
    let mut head = positional_head(16, 0.0);
    head.keys = (0..=16).map(|p| vec![p as f64, 1.0]).collect();
    let s = swap_scores(&head, TAU);
    assert!(
        (s.s_pos - 1.0).abs() < 1e-12 && (s.s_sym - 1.0).abs() < 1e-12,
        "{s:?}"
    );
}

#[test]
fn scores_by_hand_for_two_swappable_keys() {
    // n = 2: one swap (0 1). d = softmax(l0, l1, l2); after the swap the logits at 0 and 1 are
    // the cross logits. NoPE with keys (1, 0) and (0, 1), query (a, b).
    let (a, b) = (2.0f64, 0.5f64);
    let head = HeadView {
        q: vec![a, b],
        keys: vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.0, 0.0]],
        encoding: PositionEncoding::None,
        scale: 1.0,
        dims: None,
    };
    let z = a.exp() + b.exp() + 1.0;
    let (d0, d1) = (a.exp() / z, b.exp() / z);
    // Without positions, swapping the two keys swaps their weights exactly.
    let effects = block_swap_effects(&head, &blocks(2, 2).unwrap());
    assert_eq!(effects.len(), 1);
    assert!((effects[0].before.0 - d0).abs() < 1e-15);
    assert!((effects[0].after.0 - d1).abs() < 1e-15);
    assert!((effects[0].after.1 - d0).abs() < 1e-15);
    let s = scores(&effects, TAU);
    let cos_pos = (d1 * d0 + d0 * d1) / (d0.hypot(d1) * d1.hypot(d0));
    assert!(
        (s.s_pos - cos_pos).abs() < 1e-12 && (s.s_sym - 1.0).abs() < 1e-12,
        "{s:?}"
    );
}

fn random_model(position: PositionEncoding, n_heads: usize, seed: u64) -> GptJ {
    let config = ModelConfig {
        vocab_size: 23,
        n_heads,
        d_model: 16,
        d_mlp: 24,
        ..ModelConfig::tiny(position)
    };
    let model = GptJ::new(config, seed, &Device::Cpu).unwrap();
    // Larger weights than the N(0, 0.02) init so attention is far from uniform.
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (_, var) in model.named_vars() {
        let t = var.as_tensor();
        let noise: Vec<f32> = (0..t.elem_count())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let noise = Tensor::from_vec(noise, t.shape(), t.device()).unwrap();
        var.set(&(t + noise).unwrap()).unwrap();
    }
    model
}

#[test]
fn fast_path_agrees_with_rerunning_the_block() {
    // The model zoo's encodings too: a plane mask, periodic tables, absolute ones.
    let zoo = |toml: &str| -> PositionEncoding { toml::from_str(toml).unwrap() };
    let encodings = [
        PositionEncoding::gptj(8),
        PositionEncoding::rope(37.0, 4, RopeLayout::HalfSplit),
        PositionEncoding::None,
        zoo("kind = 'rope'\nbase = 100.0\nrotary_dim = 8\nlayout = 'interleaved'\nplanes = 'RZKR'"),
        zoo("kind = 'periodic'\nperiods = [2, 3]\nlayout = 'half_split'"),
        zoo("kind = 'sinusoidal'\nbase = 10000.0"),
        zoo("kind = 'learned'\nmax_len = 32"),
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut compared = 0;
    for (e, encoding) in encodings.into_iter().enumerate() {
        for n_heads in [1, 2] {
            let model = random_model(encoding.clone(), n_heads, e as u64 * 10 + n_heads as u64);
            for len in [3, 9, 17] {
                let ids: Vec<u32> = (0..2 * len).map(|_| rng.random_range(1..23)).collect();
                let ids = Tensor::from_vec(ids, (2, len), &Device::Cpu).unwrap();
                let cap = Captured::run(&model, &ids, true).unwrap();
                for layer in 0..2 {
                    for b in 0..2 {
                        for head in 0..n_heads {
                            for n in [len - 1, len / 2, 2] {
                                let view = cap.head_view(layer, b, head, n).unwrap();
                                // The fast row equals the model's own pattern row.
                                let row = cap.pattern_row(layer, b, head, n).unwrap();
                                let fast_row = ropelab_analysis::lens::swap::row(
                                    &view.cross_logits(),
                                    view.self_logit(),
                                );
                                for (x, y) in row.iter().zip(&fast_row) {
                                    assert!((x - y).abs() < 1e-5, "encoding {e}: row {x} vs {y}");
                                }
                                let cross = view.cross_logits();
                                for (a, l) in view.logits().iter().enumerate().take(n) {
                                    assert!((l - cross[a][a]).abs() < 1e-9);
                                }
                                let resid = cap.resid_pre[layer].get(b).unwrap();
                                let mut block_counts = vec![n];
                                if n % 2 == 0 && n > 2 {
                                    block_counts.push(2);
                                }
                                for m in block_counts {
                                    let bl = blocks(n, m).unwrap();
                                    let fast = block_swap_effects(&view, &bl);
                                    let slow =
                                        reference_effects(&model, layer, head, &resid, n, &bl)
                                            .unwrap();
                                    assert_eq!(fast.len(), slow.len());
                                    for (f, s) in fast.iter().zip(&slow) {
                                        for (x, y) in [
                                            (f.before.0, s.before.0),
                                            (f.before.1, s.before.1),
                                            (f.after.0, s.after.0),
                                            (f.after.1, s.after.1),
                                        ] {
                                            assert!(
                                                (x - y).abs() < 1e-5,
                                                "{encoding:?} len {len} n {n} m {m}: {x} vs {y}"
                                            );
                                        }
                                    }
                                    let (sf, ss) = (
                                        scores(&fast, Tau::new(1e-2).unwrap()),
                                        scores(&slow, Tau::new(1e-2).unwrap()),
                                    );
                                    assert!(
                                        (sf.s_pos - ss.s_pos).abs() < 1e-4
                                            && (sf.s_sym - ss.s_sym).abs() < 1e-4,
                                        "{sf:?} vs {ss:?}"
                                    );
                                    compared += fast.len();
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(compared > 5000, "{compared}");
}

#[test]
fn block_scores_need_equal_blocks() {
    let head = positional_head(16, 10.0);
    assert!(block_swap_scores(&head, 4, TAU).is_ok());
    assert!(block_swap_scores(&head, 5, TAU).is_err());
    assert!(block_swap_scores(&head, 0, TAU).is_err());
}

#[test]
fn projection_heads_see_one_plane() {
    // Plane 0 carries position (rotating, equal keys), plane 1 carries content (keys differ,
    // unrotated when the rotary dims stop at 2): the head as a whole is mixed, each plane pure.
    let n = 16;
    let mut keys = vec![];
    for p in 0..=n {
        keys.push(vec![1.0, 0.0, if p == 3 { 1.0 } else { 0.0 }, 0.0]);
    }
    let head = HeadView {
        q: vec![30.0, 0.0, 30.0, 0.0],
        keys,
        encoding: PositionEncoding::rope(1.0, 2, RopeLayout::Interleaved),
        scale: 1.0,
        dims: None,
    };
    let positional = swap_scores(&head.plane(0), TAU);
    let symbolic = swap_scores(&head.plane(1), TAU);
    assert!(
        positional.s_pos > 0.999 && positional.s_sym < 0.01,
        "{positional:?}"
    );
    assert!(
        symbolic.s_sym > 0.999 && symbolic.s_pos < 0.01,
        "{symbolic:?}"
    );
    let contributions = head.plane_contributions(3, 3);
    assert!((contributions[1] - 30.0).abs() < 1e-12, "{contributions:?}");
}

/// Swap effects recomputed naively: every swapped logit vector in full, softmax by
/// log-sum-exp.
fn naive_effects(head: &HeadView) -> Vec<ropelab_analysis::lens::swap::SwapEffect> {
    let cross = head.cross_logits();
    let n = cross.len();
    let softmax = |l: &[f64]| {
        let m = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = l.iter().map(|v| (v - m).exp()).sum();
        l.iter().map(|v| (v - m).exp() / z).collect::<Vec<f64>>()
    };
    let original: Vec<f64> = (0..n)
        .map(|a| cross[a][a])
        .chain([head.self_logit()])
        .collect();
    let before = softmax(&original);
    let mut out = vec![];
    for i in 0..n {
        for j in i + 1..n {
            let mut l = original.clone();
            l[i] = cross[i][j];
            l[j] = cross[j][i];
            let after = softmax(&l);
            out.push(ropelab_analysis::lens::swap::SwapEffect {
                before: (before[i], before[j]),
                after: (after[i], after[j]),
            });
        }
    }
    out
}

#[test]
fn a_hard_head_needing_content_and_position_has_finite_scores() {
    // Partial Induction's hand-built head at inverse temperature 200: swapping its answer away
    // leaves every other key's weight below f64's range relative to the old maximum, the case
    // where a normaliser taken against that maximum is 0 / 0.
    use ropelab_analysis::measure::partial::{hand_head, hand_view};
    use ropelab_tasks::{CanonicalKind, CanonicalTask, Split};
    let task = CanonicalTask::new(CanonicalKind::Partial, 16, 4, 4).unwrap();
    let head = hand_head(&task).unwrap();
    for i in 0..20 {
        let sample = task.sample(0, Split::Test, i);
        let view = hand_view(&head, &sample.ids).unwrap();
        let fast = swap_scores(&view, TAU);
        let naive = scores(&naive_effects(&view), TAU);
        assert!(
            fast.s_pos.is_finite() && fast.s_sym.is_finite(),
            "{i}: {fast:?}"
        );
        assert!(
            (fast.s_pos - naive.s_pos).abs() < 1e-9 && (fast.s_sym - naive.s_sym).abs() < 1e-9,
            "{i}: {fast:?} vs {naive:?}"
        );
    }
}
