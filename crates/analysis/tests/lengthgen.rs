//! Length generalisation and memory-bounded batching: the last-row capture gives the same
//! discrepancies as full captures recomputed in f64, results do not depend on the batch size,
//! the frozen model computes the same function, and bad input is an error.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_analysis::lens::margin::{margins, margins_reference};
use ropelab_analysis::measure::dynamics::{score_heads, score_run, ScoreOptions};
use ropelab_analysis::measure::lengthgen::{length_generalisation, measure, LengthOptions};
use ropelab_model::{GptJ, Hooks, ModelConfig, PositionEncoding};
use ropelab_tasks::{Dataset, Layout, Split, Task, TaskKind};
use ropelab_train::{evaluate, forward_bytes, Preset, Trainer};

/// A model for the number task whose weights are far from the init, so attention is sharp.
fn random_model(n_heads: usize, seed: u64) -> GptJ {
    let vocab = Task::new(TaskKind::Number, Layout::default())
        .unwrap()
        .vocab()
        .len();
    let config = ModelConfig {
        vocab_size: vocab,
        n_heads,
        d_model: 16,
        d_mlp: 24,
        ..ModelConfig::tiny(PositionEncoding::gptj(16 / n_heads))
    };
    let model = GptJ::new(config, seed, &Device::Cpu).unwrap();
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

fn data(n: usize, extra: usize) -> Dataset {
    let task = Task::new(TaskKind::Number, Layout::default()).unwrap();
    Dataset::new(task, 4, Split::Test, n, extra).unwrap()
}

fn ids_of(data: &Dataset) -> Tensor {
    let mut ids = vec![];
    for i in 0..data.len() {
        ids.extend(data.sample(i).unwrap().ids);
    }
    Tensor::from_vec(ids, (data.len(), data.seq_len()), &Device::Cpu).unwrap()
}

#[test]
fn last_row_margins_equal_full_captures_recomputed_in_f64() {
    for (heads, extra) in [(1, 0), (2, 13), (4, 40)] {
        let model = random_model(heads, 7 + extra as u64);
        let d = data(9, extra);
        let row = measure(&model, &d, 1 << 30).unwrap();
        let reference = margins_reference(&model, &ids_of(&d)).unwrap();
        assert_eq!(row.heads.len(), reference.len());
        for (m, (margin, top)) in row.heads.iter().zip(&reference) {
            assert!(
                (m.margin - margin).abs() <= 1e-4 * margin.abs().max(1.0),
                "{m:?} vs {margin}"
            );
            assert!((m.top_weight - top).abs() <= 1e-5, "{m:?} vs {top}");
        }
        // The margins are not all trivially zero.
        assert!(row.heads.iter().any(|m| m.margin > 1e-3), "{row:?}");
    }
}

#[test]
fn results_do_not_depend_on_the_memory_budget() {
    let model = random_model(2, 3);
    let d = data(23, 30);
    let one = forward_bytes(model.config(), d.seq_len()) as usize;
    let whole = measure(&model, &d, 1 << 30).unwrap();
    for budget in [1, one, 3 * one] {
        let batched = measure(&model, &d, budget).unwrap();
        assert_eq!(batched.accuracy, whole.accuracy);
        assert_eq!(batched.per_hop, whole.per_hop);
        assert!((batched.loss - whole.loss).abs() < 1e-5);
        for (a, b) in batched.heads.iter().zip(&whole.heads) {
            assert!((a.margin - b.margin).abs() < 1e-5 * b.margin.abs().max(1.0));
        }
        let acc = evaluate(&model, &d, budget).unwrap();
        assert_eq!(acc.accuracy, whole.accuracy);
        assert!((acc.loss - whole.loss).abs() < 1e-5);
    }
    // Scores averaged over batches equal scores of one batch.
    let ids = ids_of(&data(10, 0));
    let queries: Vec<Vec<usize>> = (0..10).map(|i| vec![16 - 4 * (i % 2)]).collect();
    let score = |memory| {
        let tau = ropelab_analysis::lens::swap::Tau::DEFAULT;
        score_heads(&model, &ids, &queries, tau, Some(4), true, memory).unwrap()
    };
    let (all, split) = (score(1 << 30), score(1));
    for (a, b) in all.iter().zip(&split) {
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(close(a.scores.s_pos, b.scores.s_pos) && close(a.scores.s_sym, b.scores.s_sym));
        assert!(close(a.entropy, b.entropy));
        assert!(a
            .freq_use
            .iter()
            .zip(&b.freq_use)
            .all(|(x, y)| close(*x, *y)));
        let (x, y) = (a.block.unwrap(), b.block.unwrap());
        assert!(close(x.s_pos, y.s_pos) && close(x.s_sym, y.s_sym));
        assert!(a
            .planes
            .iter()
            .zip(&b.planes)
            .all(|(x, y)| close(x.s_pos, y.s_pos)));
    }
}

#[test]
fn frozen_model_computes_the_same_logits_without_a_graph() {
    let model = random_model(2, 11);
    let ids = ids_of(&data(5, 3));
    let a = model.forward(&ids, &mut Hooks::new(), None).unwrap();
    let frozen = model.clone().frozen();
    assert!(frozen.is_frozen() && !model.is_frozen());
    let b = frozen.forward(&ids, &mut Hooks::new(), None).unwrap();
    let diff: f32 = (a - &b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar()
        .unwrap();
    assert_eq!(diff, 0.0);
    // No autograd graph: gradients of the frozen output reach no parameter.
    let grads = b.sum_all().unwrap().backward().unwrap();
    for (name, var) in frozen.named_vars() {
        assert!(
            grads.get(var.as_tensor()).is_none(),
            "{name} has a gradient"
        );
    }
}

#[test]
fn a_trained_run_is_measured_at_every_length_and_bad_input_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("run");
    let mut config = Preset::Tiny.config(TaskKind::Letter);
    config.optim.steps = 10;
    let mut trainer = Trainer::start(&root, config, &Device::Cpu).unwrap();
    trainer.run(|_| {}).unwrap();
    drop(trainer); // the trainer holds the run directory's lock while it lives
    let options = LengthOptions {
        extras: vec![0, 5, 40],
        samples: Some(16),
        step: None,
        memory: 1 << 16,
    };
    let mut calls = 0;
    let rows = length_generalisation(&root, &options, &Device::Cpu, |_, _| calls += 1).unwrap();
    assert_eq!(calls, 4);
    assert_eq!(
        rows.iter()
            .map(|r| (r.step, r.length, r.n))
            .collect::<Vec<_>>(),
        vec![(10, 17, 16), (10, 22, 16), (10, 57, 16)]
    );
    for r in &rows {
        assert_eq!(r.per_hop.len(), 4);
        assert_eq!(r.heads.len(), 2 * 2);
        assert!(r
            .heads
            .iter()
            .all(|m| m.margin >= 0.0 && m.top_weight > 0.0));
    }
    // The same numbers through `theory margins`.
    let m = margins(&root, None, &[5], 16, 1 << 16, &Device::Cpu).unwrap();
    assert_eq!(m.len(), 4);
    assert_eq!(m[3].margin, rows[1].heads[3].margin);
    // Checkpoint 0 is measured on request; a missing one is an error naming the run.
    let at0 = LengthOptions {
        step: Some(0),
        ..options.clone()
    };
    assert_eq!(
        length_generalisation(&root, &at0, &Device::Cpu, |_, _| {}).unwrap()[0].step,
        0
    );
    let bad = LengthOptions {
        step: Some(7),
        ..options.clone()
    };
    let err = length_generalisation(&root, &bad, &Device::Cpu, |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("no checkpoint at step 7"), "{err}");
    for bad in [
        LengthOptions {
            extras: vec![],
            ..options.clone()
        },
        LengthOptions {
            samples: Some(0),
            ..options.clone()
        },
    ] {
        assert!(length_generalisation(&root, &bad, &Device::Cpu, |_, _| {}).is_err());
    }
    let err = length_generalisation(&dir.path().join("none"), &options, &Device::Cpu, |_, _| {})
        .unwrap_err();
    assert!(err.to_string().contains("none"), "{err}");
    // score_run still scores every checkpoint with a tiny memory budget.
    let scored = score_run(
        &root,
        &ScoreOptions {
            samples: 6,
            eval_samples: 8,
            memory: 1,
            ..ScoreOptions::default()
        },
        &Device::Cpu,
        |_, _| {},
    )
    .unwrap();
    assert_eq!(scored.lines.len(), 2 * 2 * 2);
}
