//! MOD-predicate heads on a real model: the BOS curves the fast path reads from the pattern
//! hook match a softmax recomputed in f64 from the captured q and k, for periodic and
//! conventional RoPE.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_analysis::measure::modular::bos_curves;
use ropelab_analysis::Captured;
use ropelab_model::{GptJ, ModelConfig, PeriodicTables, PositionEncoding, RopeLayout};

fn model(position: PositionEncoding, seed: u64) -> GptJ {
    let config = ModelConfig {
        vocab_size: 5,
        d_model: 16,
        d_mlp: 24,
        head: ropelab_model::Head::Classifier { classes: 2 },
        ..ModelConfig::tiny(position)
    };
    let model = GptJ::new(config, seed, &Device::Cpu).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (_, var) in model.named_vars() {
        let t = var.as_tensor();
        let noise: Vec<f32> = (0..t.elem_count())
            .map(|_| rng.random_range(-0.7..0.7))
            .collect();
        var.set(&(t + Tensor::from_vec(noise, t.shape(), t.device()).unwrap()).unwrap())
            .unwrap();
    }
    model
}

#[test]
fn bos_curves_match_a_softmax_recomputed_from_q_and_k() {
    let encodings = [
        PositionEncoding::Periodic {
            periods: vec![2, 3],
            tables: PeriodicTables::default(),
            layout: RopeLayout::Interleaved,
            planes: Default::default(),
        },
        PositionEncoding::rope(1.0, 8, RopeLayout::Interleaved),
    ];
    for (e, position) in encodings.into_iter().enumerate() {
        let model = model(position, 7 + e as u64);
        let (batch, pos) = (3, 23);
        let mut rng = ChaCha8Rng::seed_from_u64(e as u64);
        let ids: Vec<u32> = (0..batch * pos)
            .map(|i| {
                if i % pos == 0 {
                    1
                } else {
                    rng.random_range(3..5)
                }
            })
            .collect();
        let ids = Tensor::from_vec(ids, (batch, pos), &Device::Cpu).unwrap();
        let curves = bos_curves(&model, &ids).unwrap();
        let captured = Captured::run(&model, &ids, false).unwrap();
        assert_eq!(curves.len(), 2);
        for (l, heads) in curves.iter().enumerate() {
            assert_eq!(heads.len(), 2);
            for (h, curve) in heads.iter().enumerate() {
                assert_eq!(curve.len(), pos);
                for (i, &got) in curve.iter().enumerate() {
                    let mut want = 0.0;
                    for b in 0..batch {
                        let logits = captured.head_view(l, b, h, i).unwrap().logits();
                        let top = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let z: f64 = logits.iter().map(|x| (x - top).exp()).sum();
                        want += (logits[0] - top).exp() / z / batch as f64;
                    }
                    assert!(
                        (got - want).abs() < 1e-4,
                        "encoding {e} L{l}H{h} i {i}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
