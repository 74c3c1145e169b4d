//! Fixed-offset mechanisms on random-weight models: the first layer of a rotary (or
//! position-free) model is equivariant to f32 rounding and a learned absolute one is not; the
//! carrier and the target weight match logits and weights recomputed in f64 from the captured
//! q and k.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_analysis::measure::offset::{carrier, equivariance_deviation, mechanisms};
use ropelab_analysis::Captured;
use ropelab_model::{Beyond, GptJ, ModelConfig, PositionEncoding, RopeLayout};
use ropelab_tasks::{OffsetTask, Split};

fn model(position: PositionEncoding, heads: usize, seed: u64) -> GptJ {
    let config = ModelConfig {
        vocab_size: 8,
        n_heads: heads,
        d_model: 32,
        d_mlp: 64,
        mlp: false,
        ..ModelConfig::tiny(position)
    };
    let model = GptJ::new(config, seed, &Device::Cpu).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (_, var) in model.named_vars() {
        let t = var.as_tensor();
        let noise: Vec<f32> = (0..t.elem_count())
            .map(|_| rng.random_range(-0.6..0.6))
            .collect();
        var.set(&(t + Tensor::from_vec(noise, t.shape(), t.device()).unwrap()).unwrap())
            .unwrap();
    }
    model
}

#[test]
fn a_rotary_first_layer_depends_on_the_offset_alone_and_a_learned_absolute_one_does_not() {
    let task = OffsetTask::new(8, 3).unwrap();
    for heads in [1, 4] {
        let d_head = 32 / heads;
        for base in [10.0, 1e4] {
            let rope = model(
                PositionEncoding::rope(base, d_head, RopeLayout::Interleaved),
                heads,
                heads as u64,
            );
            let dev = equivariance_deviation(&rope, &task, 0, 24, 17, 6).unwrap();
            assert!(dev < 2e-5, "rope {base} x{heads}: {dev}");
        }
        let nope = model(PositionEncoding::None, heads, 5);
        let dev = equivariance_deviation(&nope, &task, 0, 24, 17, 6).unwrap();
        assert!(dev < 2e-6, "nope: {dev}");
        let ape = model(
            PositionEncoding::Learned {
                max_len: 64,
                beyond: Beyond::Error,
            },
            heads,
            6,
        );
        let dev = equivariance_deviation(&ape, &task, 0, 24, 17, 6).unwrap();
        assert!(dev > 1e-2, "ape: {dev}");
    }
}

#[test]
fn the_carrier_and_target_weight_match_a_recomputation_in_f64() {
    let task = OffsetTask::new(8, 2).unwrap();
    let m = model(
        PositionEncoding::rope(100.0, 8, RopeLayout::Interleaved),
        4,
        9,
    );
    let (n, rows) = (20, 5);
    let s = carrier(&m, &task, 3, n, rows).unwrap();
    let ids: Vec<u32> = (0..rows as u64)
        .flat_map(|i| task.sequence(3, Split::Test, n, i))
        .collect();
    let ids = Tensor::from_vec(ids, (rows, n), &Device::Cpu).unwrap();
    let captured = Captured::run(&m, &ids, false).unwrap();
    let found = mechanisms(&m, &task, 3, &[12, n], rows).unwrap();
    assert_eq!(found.carrier, s);
    assert_eq!(s.len(), 4);
    for (h, carrier) in s.iter().enumerate() {
        assert_eq!(carrier.len(), n);
        let (mut weight, mut want_s, mut short) = (0.0, vec![0.0; n], 0.0);
        for b in 0..rows {
            let logits = captured.head_view(0, b, h, n - 1).unwrap().logits();
            for r in 0..n {
                want_s[r] += logits[n - 1 - r] / rows as f64;
            }
            // The law per sequence at length 12: this sequence's offsets r < 12 only.
            let by_offset: Vec<f64> = (0..12).map(|r| logits[n - 1 - r]).collect();
            let z12: f64 = by_offset.iter().map(|x| x.exp()).sum();
            short += by_offset[2].exp() / z12 / rows as f64;
            let top = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = logits.iter().map(|x| (x - top).exp()).sum();
            weight += (logits[n - 1 - 2] - top).exp() / z / rows as f64;
        }
        for r in 0..n {
            assert!((carrier[r] - want_s[r]).abs() < 1e-4, "head {h} r {r}");
        }
        let row = found
            .rows
            .iter()
            .find(|x| x.head == h && x.test_len == n)
            .unwrap();
        assert!((row.target_weight - weight).abs() < 1e-5, "head {h}");
        // At the longest length the per-sequence law reads the measured sequences themselves.
        assert!((row.per_sequence_weight - weight).abs() < 1e-5, "head {h}");
        let row12 = found
            .rows
            .iter()
            .find(|x| x.head == h && x.test_len == 12)
            .unwrap();
        assert!((row12.per_sequence_weight - short).abs() < 1e-5, "head {h}");
        // Histograms count every sequence once per length and head.
        for len in [12, n] {
            let total: usize = found
                .pins
                .iter()
                .filter(|p| p.head == h && p.test_len == len)
                .map(|p| p.count)
                .sum();
            assert_eq!(total, rows);
        }
        assert!(row.predicted_weight > 0.0 && row.predicted_weight < 1.0);
    }
}

#[test]
fn carrier_planes_rebuild_the_mean_content_logit_at_every_offset() {
    use ropelab_analysis::measure::offset::{carrier_planes, carrier_summary};
    use ropelab_analysis::HeadView;
    let task = OffsetTask::new(8, 3).unwrap();
    let position = PositionEncoding::rope(30.0, 16, RopeLayout::Interleaved);
    let m = model(position.clone(), 2, 4);
    let (n, rows) = (16, 3);
    let planes = carrier_planes(&m, &task, 1, n, rows).unwrap();
    assert_eq!(
        planes.len(),
        2 * 4 * 2,
        "2 heads x (8 rotated planes of 16 dims: 4 per head)"
    );
    let ids: Vec<u32> = (0..rows as u64)
        .flat_map(|i| task.sequence(1, Split::Test, n, i))
        .collect();
    let ids = Tensor::from_vec(ids, (rows, n), &Device::Cpu).unwrap();
    let captured = Captured::run(&m, &ids, false).unwrap();
    for head in 0..2 {
        // Mean pre-rotation q and k over every sequence and position, from the capture.
        let (mut q, mut k) = (vec![0.0; 16], vec![0.0; 16]);
        for b in 0..rows {
            let view = captured.head_view(0, b, head, n - 1).unwrap();
            for i in 0..n {
                let qi = captured.head_view(0, b, head, i).unwrap().q;
                for d in 0..16 {
                    q[d] += qi[d] / (rows * n) as f64;
                    k[d] += view.keys[i][d] / (rows * n) as f64;
                }
            }
        }
        // The head's logits for that q against that k at every key position, by HeadView's
        // own rotation, against the planes' cosines.
        let view = HeadView {
            q,
            keys: vec![k; 40],
            encoding: position.clone(),
            scale: 1.0 / 4.0,
            dims: None,
        };
        let logits = view.logits();
        let mine: Vec<_> = planes.iter().filter(|p| p.head == head).collect();
        for r in 0..40 {
            let rebuilt: f64 = mine
                .iter()
                .map(|p| p.amplitude * (p.theta * r as f64 + p.phase).cos())
                .sum();
            assert!(
                (rebuilt - logits[39 - r]).abs() < 1e-4,
                "head {head} r {r}: {rebuilt} vs {}",
                logits[39 - r]
            );
        }
        let (rank, alignment) =
            carrier_summary(&mine.into_iter().cloned().collect::<Vec<_>>()).unwrap();
        assert!((1.0..=8.0).contains(&rank) && (-1.0..=1.0).contains(&alignment));
    }
    // No rotation, no planes.
    assert!(
        carrier_planes(&model(PositionEncoding::None, 2, 4), &task, 1, n, rows)
            .unwrap()
            .is_empty()
    );
}
