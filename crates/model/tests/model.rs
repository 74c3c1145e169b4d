//! Model behaviour: gradients (finite differences, every parameter reached), hooks and
//! interventions, checkpoints, determinism.

use candle_core::{backprop::GradStore, DType, Device, Tensor, Var};
use ropelab_model::checkpoint::{hf_config, load_weights, save_weights};
use ropelab_model::ops::{cross_entropy, Dropout};
use ropelab_model::{
    Ablation, AttentionKind, Beyond, GptJ, Head, HookKind, HookPoint, Hooks, Intervention,
    ModelConfig, Objective, PeriodicTables, PositionEncoding, RopeLayout,
};

/// Reductions the tests read as plain numbers.
trait Abs {
    /// max |x| over all elements.
    fn max_abs(&self) -> f32;
    /// sum |x| over all elements.
    fn sum_abs(&self) -> f32;
}

impl Abs for Tensor {
    fn max_abs(&self) -> f32 {
        self.abs().unwrap().max_all().unwrap().to_scalar().unwrap()
    }
    fn sum_abs(&self) -> f32 {
        self.abs().unwrap().sum_all().unwrap().to_scalar().unwrap()
    }
}

fn tiny(position: PositionEncoding) -> ModelConfig {
    ModelConfig::tiny(position)
}

fn ids(batch: usize, len: usize, vocab: u32, dev: &Device) -> Tensor {
    let v: Vec<u32> = (0..batch * len)
        .map(|i| 1 + (i as u32 * 7 + 3) % (vocab - 1))
        .collect();
    Tensor::from_vec(v, (batch, len), dev).unwrap()
}

fn loss(model: &GptJ, ids: &Tensor, targets: &Tensor) -> Tensor {
    let logits = model.forward_last(ids, &mut Hooks::new(), None).unwrap();
    cross_entropy(&logits, targets).unwrap()
}

/// Perturbs every parameter (seeded) so LayerNorm weights and biases are not at their init.
fn perturb(model: &GptJ, scale: f64) {
    use rand_distr::Distribution;
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(99);
    let normal = rand_distr::Normal::new(0.0, scale).unwrap();
    for (_, var) in model.named_vars() {
        let t = var.as_tensor();
        let noise: Vec<f64> = (0..t.elem_count())
            .map(|_| normal.sample(&mut rng))
            .collect();
        let noise = Tensor::from_vec(noise, t.shape(), t.device())
            .unwrap()
            .to_dtype(t.dtype())
            .unwrap();
        var.set(&(t + noise).unwrap()).unwrap();
    }
}

#[test]
fn gradients_match_finite_differences_in_f64() {
    let dev = Device::Cpu;
    let configs = [
        tiny(PositionEncoding::gptj(2)),
        tiny(PositionEncoding::rope(100.0, 4, RopeLayout::HalfSplit)),
        tiny(PositionEncoding::None),
        tiny(PositionEncoding::Rope {
            base: 10.0,
            rotary_dim: 4,
            layout: RopeLayout::Interleaved,
            planes: "ZR".parse().unwrap(),
        }),
        tiny(PositionEncoding::Periodic {
            periods: vec![3, 2],
            tables: PeriodicTables::default(),
            layout: RopeLayout::HalfSplit,
            planes: "RK".parse().unwrap(),
        }),
        tiny(PositionEncoding::Sinusoidal { base: 100.0 }),
        tiny(PositionEncoding::PeriodicSinusoidal {
            periods: vec![4],
            tables: PeriodicTables::Explicit(vec![vec![0.0, 1.0, 2.5, -0.5]]),
        }),
        tiny(PositionEncoding::Learned {
            max_len: 4,
            beyond: Beyond::Clamp,
        }),
        ModelConfig {
            attention: AttentionKind::Linear,
            ..tiny(PositionEncoding::gptj(4))
        },
        ModelConfig {
            mlp: false,
            layer_norm: false,
            ..tiny(PositionEncoding::gptj(2))
        },
        ModelConfig {
            attention: AttentionKind::Linear,
            mlp: false,
            ..tiny(PositionEncoding::None)
        },
    ];
    for config in configs {
        let model = GptJ::new(config.clone(), 3, &dev)
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap();
        perturb(&model, 0.3);
        let x = ids(3, 6, 11, &dev);
        let y = Tensor::new(&[1u32, 5, 9], &dev).unwrap();
        let grads: GradStore = loss(&model, &x, &y).backward().unwrap();
        let mut checked = 0;
        for (name, var) in model.named_vars() {
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{name}: no grad"));
            let g: Vec<f64> = g.flatten_all().unwrap().to_vec1().unwrap();
            let base: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
            // A few coordinates per parameter, spread over the tensor.
            for idx in [0, base.len() / 3, base.len() - 1] {
                let eps = 1e-6;
                let at = |delta: f64| {
                    let mut v = base.clone();
                    v[idx] += delta;
                    var.set(&Tensor::from_vec(v, var.as_tensor().shape(), &dev).unwrap())
                        .unwrap();
                    let l: f64 = loss(&model, &x, &y).to_scalar().unwrap();
                    l
                };
                let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
                var.set(&Tensor::from_vec(base.clone(), var.as_tensor().shape(), &dev).unwrap())
                    .unwrap();
                let tol = 1e-6 + 1e-5 * numeric.abs().max(g[idx].abs());
                assert!(
                    (numeric - g[idx]).abs() < tol,
                    "{name}[{idx}] ({:?}): analytic {} numeric {numeric}",
                    config.position,
                    g[idx]
                );
                checked += 1;
            }
        }
        assert_eq!(
            checked,
            3 * ropelab_model::GptjLayout::new(&config).params().len()
        );
    }
}

/// The every-position loss (with unscored positions) and a classifier head, against finite
/// differences in f64.
#[test]
fn objective_gradients_match_finite_differences_in_f64() {
    use ropelab_model::objective::{loss as objective_loss, IGNORE};
    let dev = Device::Cpu;
    let cases = [
        (tiny(PositionEncoding::gptj(4)), Objective::EveryPosition),
        (
            ModelConfig {
                head: Head::Classifier { classes: 2 },
                ..tiny(PositionEncoding::Sinusoidal { base: 100.0 })
            },
            Objective::EosClass,
        ),
    ];
    for (config, objective) in cases {
        let model = GptJ::new(config.clone(), 5, &dev)
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap();
        perturb(&model, 0.3);
        let x = ids(2, 5, 11, &dev);
        let targets: Vec<u32> = if objective.every_position() {
            (0..10)
                .map(|i| if i % 4 == 0 { IGNORE } else { i % 11 })
                .collect()
        } else {
            vec![1, 0]
        };
        let value = |m: &GptJ| {
            let logits = if objective.every_position() {
                m.forward(&x, &mut Hooks::new(), None)
            } else {
                m.forward_last(&x, &mut Hooks::new(), None)
            }
            .unwrap();
            objective_loss(objective, &logits, &targets).unwrap()
        };
        let grads = value(&model).backward().unwrap();
        for (name, var) in model.named_vars() {
            let g: Vec<f64> = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{name}: no grad"))
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let base: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
            let idx = base.len() / 2;
            let at = |delta: f64| {
                let mut v = base.clone();
                v[idx] += delta;
                var.set(&Tensor::from_vec(v, var.as_tensor().shape(), &dev).unwrap())
                    .unwrap();
                value(&model).to_scalar::<f64>().unwrap()
            };
            let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
            var.set(&Tensor::from_vec(base.clone(), var.as_tensor().shape(), &dev).unwrap())
                .unwrap();
            let tol = 1e-6 + 1e-5 * numeric.abs().max(g[idx].abs());
            assert!(
                (numeric - g[idx]).abs() < tol,
                "{objective:?} {name}[{idx}]: analytic {} numeric {numeric}",
                g[idx]
            );
        }
    }
}

#[test]
fn every_parameter_gets_a_nonzero_gradient() {
    let dev = Device::Cpu;
    let mut config = tiny(PositionEncoding::gptj(4));
    config.dropout = 0.1;
    let model = GptJ::new(config, 0, &dev).unwrap();
    let x = ids(4, 9, 11, &dev);
    let y = Tensor::new(&[1u32, 2, 3, 4], &dev).unwrap();
    let mut dropout = Dropout::new(0.1, rand::SeedableRng::seed_from_u64(1));
    let logits = model
        .forward_last(&x, &mut Hooks::new(), Some(&mut dropout))
        .unwrap();
    let grads = cross_entropy(&logits, &y).unwrap().backward().unwrap();
    for (name, var) in model.named_vars() {
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("{name}: no grad"));
        let norm: f32 = g.sqr().unwrap().sum_all().unwrap().to_scalar().unwrap();
        assert!(norm > 0.0, "{name}: zero gradient");
    }
}

#[test]
fn hooks_capture_what_the_forward_computes() {
    let dev = Device::Cpu;
    let config = tiny(PositionEncoding::gptj(4));
    let model = GptJ::new(config.clone(), 1, &dev).unwrap();
    perturb(&model, 0.2);
    let x = ids(2, 7, 11, &dev);
    let mut hooks = Hooks::new().capture(HookPoint::all(2));
    let logits = model.forward(&x, &mut hooks, None).unwrap();
    let plain = model.forward(&x, &mut Hooks::new(), None).unwrap();
    assert_eq!(
        logits.to_vec3::<f32>().unwrap(),
        plain.to_vec3::<f32>().unwrap(),
        "capturing changes nothing"
    );
    assert_eq!(hooks.cache().len(), 2 * HookKind::ALL.len());
    let get = |l, k| hooks.get(HookPoint::new(l, k)).unwrap().clone();
    assert_eq!(get(0, HookKind::ResidPre).dims(), &[2, 7, 8]);
    assert_eq!(get(1, HookKind::Q).dims(), &[2, 2, 7, 4]);
    assert_eq!(get(1, HookKind::Pattern).dims(), &[2, 2, 7, 7]);
    // Pattern rows sum to one and are causal.
    let p: Vec<Vec<Vec<Vec<f32>>>> = (0..2)
        .map(|b| get(0, HookKind::Pattern).get(b).unwrap().to_vec3().unwrap())
        .collect();
    for row in p
        .iter()
        .flatten()
        .flatten()
        .enumerate()
        .map(|(i, r)| (i % 7, r))
    {
        let (q, r) = row;
        assert!((r.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert!(r[q + 1..].iter().all(|&w| w == 0.0));
    }
    // z = pattern @ v; at position 0 the rotation is the identity.
    let z = get(1, HookKind::Z);
    let want = get(1, HookKind::Pattern)
        .matmul(&get(1, HookKind::V))
        .unwrap();
    let diff: f32 = (z - want).unwrap().max_abs();
    assert!(diff < 1e-6);
    let q0 = get(0, HookKind::Q).narrow(2, 0, 1).unwrap();
    let rq0 = get(0, HookKind::RotQ).narrow(2, 0, 1).unwrap();
    let diff: f32 = (q0 - rq0).unwrap().max_abs();
    assert!(diff < 1e-7);
    // The residual stream entering block 1 is block 0's input plus its two branches.
    let sum = ((get(0, HookKind::ResidPre) + get(0, HookKind::AttnOut)).unwrap()
        + get(0, HookKind::MlpOut))
    .unwrap();
    let diff: f32 = (sum - get(1, HookKind::ResidPre)).unwrap().max_abs();
    assert!(diff < 1e-6);
}

#[test]
fn interventions_change_exactly_what_they_target() {
    let dev = Device::Cpu;
    let config = tiny(PositionEncoding::gptj(4));
    let model = GptJ::new(config, 2, &dev).unwrap();
    perturb(&model, 0.2);
    let x = ids(3, 6, 11, &dev);
    let z1 = HookPoint::new(1, HookKind::Z);
    let q0 = HookPoint::new(0, HookKind::Q);

    // Zero ablation of head 1 in layer 1.
    let mut hooks = Hooks::new()
        .capture([z1])
        .intervene(Intervention::AblateHead {
            layer: 1,
            head: 1,
            ablation: Ablation::Zero,
        });
    model.forward(&x, &mut hooks, None).unwrap();
    let z = hooks.get(z1).unwrap();
    let head1: f32 = z.narrow(1, 1, 1).unwrap().sum_abs();
    let head0: f32 = z.narrow(1, 0, 1).unwrap().sum_abs();
    assert_eq!(head1, 0.0);
    assert!(head0 > 0.0);

    // Mean ablation: the head's output is the same for every batch row.
    let mut hooks = Hooks::new()
        .capture([z1])
        .intervene(Intervention::AblateHead {
            layer: 1,
            head: 0,
            ablation: Ablation::Mean,
        });
    model.forward(&x, &mut hooks, None).unwrap();
    let h0 = hooks.get(z1).unwrap().narrow(1, 0, 1).unwrap();
    let spread: f32 = h0
        .broadcast_sub(&h0.mean_keepdim(0).unwrap())
        .unwrap()
        .max_abs();
    assert!(spread < 1e-6);

    // Restricting head 0 of layer 0 to plane 1 (dims 2, 3) zeroes the other dims of q.
    let mut hooks = Hooks::new()
        .capture([q0])
        .intervene(Intervention::RestrictPlanes {
            layer: 0,
            head: 0,
            planes: vec![1],
        });
    model.forward(&x, &mut hooks, None).unwrap();
    let q: Vec<Vec<Vec<Vec<f32>>>> = (0..3)
        .map(|b| hooks.get(q0).unwrap().get(b).unwrap().to_vec3().unwrap())
        .collect();
    for row in q.iter().flat_map(|b| b[0].iter()) {
        assert_eq!((row[0], row[1]), (0.0, 0.0));
        assert!(row[2] != 0.0 && row[3] != 0.0);
    }
    for row in q.iter().flat_map(|b| b[1].iter()) {
        assert!(row.iter().all(|&v| v != 0.0), "head 1 untouched");
    }

    // Replacing the pattern with uniform causal weights changes the logits.
    let p = HookPoint::new(0, HookKind::Pattern);
    let rows: Vec<f32> = (0..3 * 2 * 6 * 6)
        .map(|i| {
            let (q, k) = ((i / 6) % 6, i % 6);
            if k <= q {
                1.0 / (q + 1) as f32
            } else {
                0.0
            }
        })
        .collect();
    let uniform = Tensor::from_vec(rows, (3, 2, 6, 6), &dev).unwrap();
    let mut hooks = Hooks::new().capture([p]).intervene(Intervention::Replace {
        hook: p,
        value: uniform.clone(),
    });
    let changed = model.forward(&x, &mut hooks, None).unwrap();
    let plain = model.forward(&x, &mut Hooks::new(), None).unwrap();
    let d: f32 = (changed - plain).unwrap().max_abs();
    assert!(d > 1e-4);
    assert_eq!(
        hooks
            .get(p)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap(),
        uniform.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );

    // Out-of-range interventions are errors, not panics.
    for bad in [
        Intervention::AblateHead {
            layer: 5,
            head: 0,
            ablation: Ablation::Zero,
        },
        Intervention::AblateHead {
            layer: 0,
            head: 2,
            ablation: Ablation::Zero,
        },
        Intervention::RestrictPlanes {
            layer: 0,
            head: 0,
            planes: vec![2],
        },
    ] {
        let mut hooks = Hooks::new().intervene(bad);
        assert!(model.forward(&x, &mut hooks, None).is_err());
    }
}

#[test]
fn checkpoints_round_trip_and_reject_mismatches() {
    let dev = Device::Cpu;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    for tied in [false, true] {
        let mut config = tiny(PositionEncoding::gptj(4));
        config.tied_embeddings = tied;
        let model = GptJ::new(config.clone(), 4, &dev).unwrap();
        perturb(&model, 0.1);
        save_weights(&model, &path).unwrap();
        let back = load_weights(config.clone(), &path, &dev).unwrap();
        let x = ids(2, 5, 11, &dev);
        let a = model.forward(&x, &mut Hooks::new(), None).unwrap();
        let b = back.forward(&x, &mut Hooks::new(), None).unwrap();
        assert_eq!(a.to_vec3::<f32>().unwrap(), b.to_vec3::<f32>().unwrap());

        let mut other = config.clone();
        other.d_mlp = 16;
        let err = load_weights(other, &path, &dev).unwrap_err().to_string();
        assert!(
            err.contains("model.safetensors") && err.contains("mlp.fc_in.weight"),
            "{err}"
        );
    }
    std::fs::write(&path, b"not a safetensors file").unwrap();
    let err = load_weights(tiny(PositionEncoding::None), &path, &dev)
        .unwrap_err()
        .to_string();
    assert!(err.contains("model.safetensors"), "{err}");
    let err = load_weights(tiny(PositionEncoding::None), &dir.path().join("nope"), &dev)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no such file"), "{err}");
    let hf = hf_config(&tiny(PositionEncoding::gptj(4)));
    assert_eq!(hf["model_type"], "gptj");
    assert_eq!(hf["rotary_dim"], 4);
    assert_eq!(hf["ropelab_exact_in_transformers"], true);
}

#[test]
fn init_is_deterministic_in_the_seed() {
    let dev = Device::Cpu;
    let config = tiny(PositionEncoding::gptj(4));
    let values = |seed| -> Vec<Vec<f32>> {
        GptJ::new(config.clone(), seed, &dev)
            .unwrap()
            .named_vars()
            .into_iter()
            .map(|(_, v): (String, &Var)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
            .collect()
    };
    assert_eq!(values(7), values(7));
    assert_ne!(values(7), values(8));
    let wte = &values(7)[0];
    assert!(wte[..8].iter().all(|&v| v == 0.0), "padding row is zero");
    let std = (wte[8..].iter().map(|v| v * v).sum::<f32>() / (wte.len() - 8) as f32).sqrt();
    assert!((std - 0.02).abs() < 0.005, "{std}");
}
