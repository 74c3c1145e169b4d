//! The fused CPU training kernel against candle's autograd on the composed path: the same
//! loss, logits and gradient of every parameter, on several shapes (odd sequence lengths,
//! partial rotary dims, both layouts, explicit angles, NoPE layers, tied embeddings, one
//! layer, one position) with and without dropout.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::Distribution;
use ropelab_model::kernel::{FlatParams, FusedStep};
use ropelab_model::objective::{self, IGNORE};
use ropelab_model::ops::{cross_entropy, Dropout};
use ropelab_model::{
    AttentionKind, Beyond, GptJ, Head, Hooks, ModelConfig, Objective, PeriodicTables,
    PositionEncoding, RopeLayout,
};

fn config(
    n_layers: usize,
    n_heads: usize,
    d_model: usize,
    position: PositionEncoding,
) -> ModelConfig {
    ModelConfig {
        vocab_size: 23,
        n_layers,
        n_heads,
        d_model,
        d_mlp: 3 * d_model / 2,
        ..ModelConfig::tiny(position)
    }
}

/// Moves every parameter off its init (LayerNorm weights away from 1, biases from 0).
fn perturb(model: &GptJ, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let normal = rand_distr::Normal::new(0.0f32, 0.3).unwrap();
    for (_, var) in model.named_vars() {
        let t = var.as_tensor();
        let noise: Vec<f32> = (0..t.elem_count())
            .map(|_| normal.sample(&mut rng))
            .collect();
        let noise = Tensor::from_vec(noise, t.shape(), t.device()).unwrap();
        var.set(&(t + noise).unwrap()).unwrap();
    }
}

/// Compares loss, logits and all gradients of the two paths on one batch (last-token loss).
fn check(c: &ModelConfig, batch: usize, seq: usize, dropout: f32, seed: u64) {
    check_objective(c, Objective::LastToken, batch, seq, dropout, seed);
}

/// [`check`] at positions `start .. start + seq` (randomised positions): the composed model
/// [`GptJ::starting_at`] against the fused step's [`FusedStep::set_start`].
fn check_at(c: &ModelConfig, batch: usize, seq: usize, dropout: f32, seed: u64, start: usize) {
    check_shifted(c, Objective::LastToken, (batch, seq), dropout, seed, start);
}

/// [`check_shifted`] at positions 0.
fn check_objective(
    c: &ModelConfig,
    objective: Objective,
    batch: usize,
    seq: usize,
    dropout: f32,
    seed: u64,
) {
    check_shifted(c, objective, (batch, seq), dropout, seed, 0);
}

/// [`check`] for any objective (every-position targets include unscored positions) at
/// positions `start ..`.
fn check_shifted(
    c: &ModelConfig,
    objective: Objective,
    (batch, seq): (usize, usize),
    dropout: f32,
    seed: u64,
    start: usize,
) {
    let dev = Device::Cpu;
    let model = GptJ::new(c.clone(), seed, &dev).unwrap();
    perturb(&model, seed + 1);
    let model = model.starting_at(start);
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 2);
    let vocab = c.vocab_size as u32;
    let ids: Vec<u32> = (0..batch * seq)
        .map(|_| rng.random_range(0..vocab))
        .collect();
    let out = c.out_dim() as u32;
    let targets: Vec<u32> = (0..objective.targets_len(batch, seq))
        .map(|i| {
            if objective.every_position() && i % 3 == 1 {
                IGNORE
            } else {
                rng.random_range(0..out)
            }
        })
        .collect();
    let drop = |p: f32| (p > 0.0).then(|| Dropout::new(p, ChaCha8Rng::seed_from_u64(seed + 3)));

    // Composed candle ops + autograd.
    let ids_t = Tensor::from_vec(ids.clone(), (batch, seq), &dev).unwrap();
    let mut d1 = drop(dropout);
    let logits = if objective.every_position() {
        model.forward(&ids_t, &mut Hooks::new(), d1.as_mut())
    } else {
        model.forward_last(&ids_t, &mut Hooks::new(), d1.as_mut())
    }
    .unwrap();
    let loss = objective::loss(objective, &logits, &targets).unwrap();
    if objective == Objective::LastToken {
        // The masked loss without masks is the plain cross-entropy.
        let targets_t = Tensor::from_vec(targets.clone(), batch, &dev).unwrap();
        let plain: f32 = cross_entropy(&logits, &targets_t)
            .unwrap()
            .to_scalar()
            .unwrap();
        let masked: f32 = loss.to_scalar().unwrap();
        assert!((plain - masked).abs() <= 1e-6 * plain.abs().max(1.0));
    }
    let grads = loss.backward().unwrap();
    let want_loss: f32 = loss.to_scalar().unwrap();
    let want_logits: Vec<f32> = logits.flatten_all().unwrap().to_vec1().unwrap();

    // Fused kernel, twice (the second call reuses every buffer).
    let params = FlatParams::from_model(&model).unwrap();
    let mut step = FusedStep::for_objective(c, batch, seq, objective).unwrap();
    step.set_start(start).unwrap();
    for round in 0..2 {
        let mut d2 = drop(dropout);
        let got_logits = step.forward(&params, &ids, d2.as_mut()).unwrap().to_vec();
        let max_logit = want_logits.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (g, w) in got_logits.iter().zip(&want_logits) {
            assert!(
                (g - w).abs() <= 2e-5 * max_logit.max(1.0),
                "logit {g} vs {w}"
            );
        }
        let mut d2 = drop(dropout);
        let got_loss = step
            .loss_and_grads(&params, &ids, &targets, d2.as_mut())
            .unwrap();
        assert!(
            (got_loss - want_loss).abs() <= 1e-5 * want_loss.abs().max(1.0),
            "round {round}: loss {got_loss} vs {want_loss}"
        );
        for (i, (name, var)) in model.named_vars().iter().enumerate() {
            let want: Vec<f32> = grads
                .get(var.as_tensor())
                .map(|g| g.flatten_all().unwrap().to_vec1().unwrap())
                .unwrap_or_else(|| vec![0.0; var.elem_count()]);
            let got = step.grads().param(i);
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-3);
            let err = got
                .iter()
                .zip(&want)
                .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
            assert!(
                err <= 2e-4 * scale,
                "{name}: max |fused - composed| {err:e}, max |grad| {scale:e} \
                 (batch {batch}, seq {seq}, dropout {dropout})"
            );
        }
    }
}

#[test]
fn interleaved_partial_rotary_odd_lengths() {
    let c = config(3, 2, 16, PositionEncoding::gptj(4)); // rotary 4 of d_head 8
    check(&c, 3, 7, 0.0, 1);
    check(&c, 2, 17, 0.0, 2);
}

#[test]
fn half_split_full_rotary_with_dropout() {
    let pos = PositionEncoding::rope(100.0, 8, RopeLayout::HalfSplit);
    let mut c = config(2, 1, 8, pos);
    c.dropout = 0.2;
    check(&c, 4, 9, 0.2, 3);
    check(&c, 5, 5, 0.0, 4);
}

#[test]
fn mixed_layers_angles_nope_and_tied_embeddings() {
    let mut c = config(3, 2, 12, PositionEncoding::None);
    c.layer_positions = vec![
        PositionEncoding::angles(vec![0.9, 0.01], RopeLayout::Interleaved),
        PositionEncoding::None,
        PositionEncoding::rope(10_000.0, 2, RopeLayout::HalfSplit),
    ];
    c.tied_embeddings = true;
    c.dropout = 0.1;
    check(&c, 3, 11, 0.1, 5);
}

#[test]
fn plane_masks_and_periodic_tables() {
    let mut c = config(3, 2, 16, PositionEncoding::None);
    c.layer_positions = vec![
        PositionEncoding::Rope {
            base: 100.0,
            rotary_dim: 8,
            layout: RopeLayout::Interleaved,
            planes: "RZKR".parse().unwrap(),
        },
        PositionEncoding::Periodic {
            periods: vec![2, 3, 5],
            tables: PeriodicTables::default(),
            layout: RopeLayout::HalfSplit,
            planes: "RRZ".parse().unwrap(),
        },
        PositionEncoding::Periodic {
            periods: vec![3, 1],
            tables: PeriodicTables::Explicit(vec![vec![0.1, 2.0, -1.0], vec![0.7]]),
            layout: RopeLayout::Interleaved,
            planes: Default::default(),
        },
    ];
    check(&c, 3, 9, 0.0, 11);
    c.dropout = 0.1;
    check(&c, 2, 7, 0.1, 12);
}

#[test]
fn absolute_encodings_sinusoidal_periodic_and_learned() {
    let absolute = [
        PositionEncoding::Sinusoidal { base: 10_000.0 },
        PositionEncoding::PeriodicSinusoidal {
            periods: vec![2, 7, 3],
            tables: PeriodicTables::default(),
        },
        PositionEncoding::Learned {
            max_len: 9,
            beyond: Beyond::Error,
        },
        PositionEncoding::Learned {
            max_len: 4,
            beyond: Beyond::Clamp,
        },
    ];
    for (i, position) in absolute.into_iter().enumerate() {
        let mut c = config(2, 2, 16, position);
        // The blocks may still rotate: NoPE and RoPE layers on top of the absolute encoding.
        c.layer_positions = vec![PositionEncoding::None, PositionEncoding::gptj(4)];
        check(&c, 3, 9, 0.0, 20 + i as u64);
        c.dropout = 0.2;
        check(&c, 2, 5, 0.2, 30 + i as u64);
    }
}

#[test]
fn a_learned_table_refuses_longer_inputs_unless_it_clamps() {
    let c = config(
        1,
        1,
        8,
        PositionEncoding::Learned {
            max_len: 4,
            beyond: Beyond::Error,
        },
    );
    let err = FusedStep::new(&c, 2, 5).unwrap_err().to_string();
    assert!(
        err.contains("position 4") && err.contains("max_len 4"),
        "{err}"
    );
    let model = GptJ::new(c, 0, &Device::Cpu).unwrap();
    let ids = Tensor::from_vec(vec![1u32; 5], (1, 5), &Device::Cpu).unwrap();
    let err = model
        .forward(&ids, &mut Hooks::new(), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("beyond the learned position encoding"),
        "{err}"
    );
    let short = Tensor::from_vec(vec![1u32; 4], (1, 4), &Device::Cpu).unwrap();
    assert!(model.forward(&short, &mut Hooks::new(), None).is_ok());
}

#[test]
fn linear_attention_attention_only_blocks_and_no_layer_norm() {
    let variants = [
        (AttentionKind::Linear, true, true),
        (AttentionKind::Softmax, false, true),
        (AttentionKind::Softmax, true, false),
        (AttentionKind::Linear, false, false),
    ];
    for (i, (attention, mlp, layer_norm)) in variants.into_iter().enumerate() {
        let mut c = config(3, 2, 16, PositionEncoding::gptj(4));
        (c.attention, c.mlp, c.layer_norm) = (attention, mlp, layer_norm);
        c.layer_positions = vec![
            PositionEncoding::gptj(4),
            PositionEncoding::None,
            PositionEncoding::rope(100.0, 8, RopeLayout::HalfSplit),
        ];
        check(&c, 3, 9, 0.0, 40 + i as u64);
        c.dropout = 0.2;
        check(&c, 2, 6, 0.2, 50 + i as u64);
    }
    // The attention-only toy of the canonical-task experiments: one layer, one head.
    let mut toy = config(1, 1, 16, PositionEncoding::gptj(16));
    (toy.mlp, toy.layer_norm) = (false, false);
    check(&toy, 4, 12, 0.0, 60);
}

#[test]
fn every_position_loss_and_eos_classification() {
    for (i, (mlp, layer_norm)) in [(true, true), (false, false)].into_iter().enumerate() {
        let mut c = config(2, 2, 16, PositionEncoding::gptj(8));
        (c.mlp, c.layer_norm) = (mlp, layer_norm);
        let seed = 70 + 10 * i as u64;
        check_objective(&c, Objective::EveryPosition, 3, 7, 0.0, seed);
        c.dropout = 0.1;
        check_objective(&c, Objective::EveryPosition, 2, 5, 0.1, seed + 1);
        check_objective(&c, Objective::EveryPosition, 2, 1, 0.1, seed + 2);
        c.head = Head::Classifier { classes: 2 };
        check_objective(&c, Objective::EosClass, 4, 9, 0.1, seed + 3);
        c.dropout = 0.0;
        check_objective(&c, Objective::EosClass, 3, 6, 0.0, seed + 4);
    }
    // Longer rows (every position a query, rows split across threads) with interleaved and
    // half-split rotations.
    let long = config(2, 2, 16, PositionEncoding::gptj(8));
    check_objective(&long, Objective::EveryPosition, 4, 40, 0.0, 95);
    let mut half = config(
        1,
        2,
        16,
        PositionEncoding::rope(10_000.0, 8, RopeLayout::HalfSplit),
    );
    (half.mlp, half.layer_norm) = (false, false);
    check_objective(&half, Objective::EveryPosition, 3, 37, 0.0, 96);
    // The formal-language classifier's shape: 5 layers, 8 heads, sinusoidal positions.
    let mut formal = config(5, 8, 32, PositionEncoding::Sinusoidal { base: 10_000.0 });
    formal.head = Head::Classifier { classes: 2 };
    check_objective(&formal, Objective::EosClass, 3, 11, 0.0, 99);
}

#[test]
fn one_layer_and_one_position() {
    let c = config(1, 4, 32, PositionEncoding::gptj(8));
    check(&c, 2, 13, 0.0, 6);
    check(&c, 3, 1, 0.0, 7);
    let deep = config(2, 1, 32, PositionEncoding::gptj(32));
    check(&deep, 6, 1, 0.3, 8);
}

#[test]
fn bad_inputs_are_errors() {
    let c = config(2, 1, 8, PositionEncoding::gptj(8));
    let model = GptJ::new(c.clone(), 0, &Device::Cpu).unwrap();
    let params = FlatParams::from_model(&model).unwrap();
    let mut step = FusedStep::new(&c, 2, 3).unwrap();
    let err = |r: ropelab_model::Result<f32>| r.unwrap_err().to_string();
    assert!(err(step.loss_and_grads(&params, &[1; 5], &[1, 2], None)).contains("token ids"));
    assert!(err(step.loss_and_grads(&params, &[1; 6], &[1], None)).contains("targets"));
    assert!(err(step.loss_and_grads(&params, &[99; 6], &[1, 2], None)).contains("vocabulary"));
    assert!(err(step.loss_and_grads(&params, &[1; 6], &[1, 99], None)).contains("vocabulary"));
    assert!(FusedStep::new(&c, 0, 3).is_err());
}

/// Shapes large enough that matrix products are split across threads (the quick preset's
/// model and batch).
#[test]
fn quick_preset_shapes_with_threaded_products() {
    let mut c = config(6, 1, 64, PositionEncoding::gptj(64));
    c.vocab_size = 129;
    c.d_mlp = 256;
    check(&c, 64, 17, 0.0, 9);
}

#[test]
fn randomised_positions_shift_both_engines_alike() {
    // Rotary layers (both layouts, partial dims), a NoPE layer, and absolute encodings, at
    // positions 37.. and 1000..: the fused step's shifted tables against the composed model's.
    let mut c = config(3, 2, 16, PositionEncoding::gptj(6));
    c.layer_positions = vec![
        PositionEncoding::gptj(6),
        PositionEncoding::None,
        PositionEncoding::rope(500.0, 8, RopeLayout::HalfSplit),
    ];
    check_at(&c, 2, 7, 0.0, 40, 37);
    check_at(&c, 2, 5, 0.1, 41, 1000);
    let mut s = config(2, 2, 16, PositionEncoding::Sinusoidal { base: 10_000.0 });
    s.layer_positions = vec![PositionEncoding::gptj(4), PositionEncoding::None];
    check_at(&s, 3, 6, 0.0, 42, 37);
    let l = config(
        2,
        2,
        16,
        PositionEncoding::Learned {
            max_len: 50,
            beyond: Beyond::Error,
        },
    );
    check_at(&l, 2, 9, 0.0, 43, 41);
    // A learned table without rows for the shifted positions is refused, not read past.
    let mut step = FusedStep::new(&l, 2, 9).unwrap();
    assert!(step.set_start(42).is_err());
}

/// Relative L2 distance between two vectors.
fn relative_l2(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// The bf16 step computes the f32 step's loss and gradients up to bf16 rounding: bf16 keeps 8
/// significant bits (unit roundoff 2^-8 = 0.4%); at initialisation six blocks of forward and
/// backward give 0.55% of the gradient's norm (0.35% for one block), so 2% leaves room for
/// other draws and still catches a wrong product (errors of order 1). (Weights pushed far from
/// initialisation, noise of 0.3 on every weight, sharpen the softmax and reach 4%.) The f32
/// step is bit-identical whichever way it is built, and the bf16 one really differs from it.
#[test]
fn bf16_products_give_the_f32_gradients_up_to_rounding() {
    use ropelab_model::kernel::{Bf16Path, Precision};
    eprintln!("bf16 products on the {} path", Bf16Path::detect().name());
    let mut c = config(6, 2, 64, PositionEncoding::gptj(32));
    c.vocab_size = 129;
    c.d_mlp = 256;
    let (batch, seq) = (32, 17);
    let model = GptJ::new(c.clone(), 5, &Device::Cpu).unwrap();
    let params = FlatParams::from_model(&model).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let ids: Vec<u32> = (0..batch * seq).map(|_| rng.random_range(0..129)).collect();
    let targets: Vec<u32> = (0..batch).map(|_| rng.random_range(0..129)).collect();
    let run = |precision: Option<Precision>| {
        let objective = Objective::LastToken;
        let mut step = match precision {
            None => FusedStep::new(&c, batch, seq).unwrap(),
            Some(p) => FusedStep::with_precision(&c, (batch, seq), objective, p).unwrap(),
        };
        let mut drop = Dropout::new(0.1, ChaCha8Rng::seed_from_u64(2));
        let loss = step
            .loss_and_grads(&params, &ids, &targets, Some(&mut drop))
            .unwrap();
        (loss, step.grads().values.clone())
    };
    let (loss, grads) = run(None);
    let (loss32, grads32) = run(Some(Precision::F32));
    assert_eq!(loss.to_bits(), loss32.to_bits());
    assert!(grads
        .iter()
        .zip(&grads32)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    let (loss16, grads16) = run(Some(Precision::Bf16));
    assert_ne!(grads16, grads, "bf16 products must round");
    assert!(
        ((loss16 - loss) / loss).abs() < 1e-2,
        "loss {loss16} vs {loss}"
    );
    let err = relative_l2(&grads16, &grads);
    eprintln!("relative L2 error of the bf16 gradients: {err:.4}");
    assert!(err < 0.02, "relative gradient error {err}");
}
