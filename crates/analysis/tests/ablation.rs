//! Necessity by ablation, checked against independent paths: zero ablation equals the model
//! with the heads' columns of the output projection zeroed in its weights; the split means
//! (batch by batch) equal a per-sample average; mean ablation of one layer's heads equals the
//! forward pass's own batch-mean ablation on the whole split in one batch; bad input is a
//! one-line error.

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use ropelab_analysis::measure::ablation::{
    ablate_run, groups, knockouts, split_means, tally, AblationOptions, Knockout,
};
use ropelab_analysis::measure::dynamics::HeadKind::{Mixed as M, Positional as P, Symbolic as S};
use ropelab_model::checkpoint::load_tensors;
use ropelab_model::{Ablation, GptJ, HookKind, HookPoint, Hooks, Intervention};
use ropelab_tasks::{Dataset, Split, Task, TaskKind};
use ropelab_train::{batch, Preset, RunConfig, RunDir, Trainer};

const N: usize = 96;

fn trained(root: &std::path::Path) -> RunConfig {
    let mut config = Preset::Tiny.config(TaskKind::Number);
    config.optim.steps = 200;
    config.optim.lr = 1e-2;
    config.optim.save_every = 200;
    let mut trainer = Trainer::start(root, config.clone(), &Device::Cpu).unwrap();
    trainer.run(|_| {}).unwrap();
    config
}

/// The checkpoint with the output-projection columns of `heads` zeroed.
fn zeroed_model(root: &std::path::Path, config: &RunConfig, heads: &[(usize, usize)]) -> GptJ {
    let (run, _) = RunDir::open(root).unwrap();
    let path = run.checkpoint_dir(200).join("model.safetensors");
    let mut named: HashMap<String, Tensor> = load_tensors(&path, &Device::Cpu).unwrap();
    let d_head = config.model.d_head();
    for &(layer, head) in heads {
        let name = format!("transformer.h.{layer}.attn.out_proj.weight");
        let w = named[&name].clone(); // [d_model, heads * d_head]
        let (rows, cols) = w.dims2().unwrap();
        let mut mask = vec![1f32; rows * cols];
        for r in 0..rows {
            for c in head * d_head..(head + 1) * d_head {
                mask[r * cols + c] = 0.0;
            }
        }
        let mask = Tensor::from_vec(mask, (rows, cols), &Device::Cpu).unwrap();
        named.insert(name, (w * mask).unwrap());
    }
    GptJ::from_named(config.model.clone(), named, &path, &Device::Cpu)
        .unwrap()
        .frozen()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar()
        .unwrap()
}

#[test]
fn knockouts_match_their_twins() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("run");
    let config = trained(&root);
    // Arbitrary types for the tiny model's 2 x 2 heads: each group has a head.
    let grid = vec![vec![P, M], vec![S, P]];
    let options = AblationOptions {
        samples: N,
        memory: 1 << 16, // several batches
    };
    let mut calls = 0;
    let report = ablate_run(&root, &grid, &options, &Device::Cpu, |_, _| calls += 1).unwrap();
    let g = groups(&grid);
    assert_eq!(calls, 2 + 2 * g.len());
    assert_eq!(report.step, 200);

    let (run, _) = RunDir::open(&root).unwrap();
    let model = run.load_model(200, &config, &Device::Cpu).unwrap().frozen();
    let task = Task::new(TaskKind::Number, config.layout.clone()).unwrap();
    let data = Dataset::new(task, config.seed, Split::Test, N, 0).unwrap();
    let row = |group: &str, how: Knockout| {
        report
            .rows
            .iter()
            .find(|r| r.group == group && r.ablation == how && r.hop == "all")
            .unwrap()
            .clone()
    };
    let intact = row("none", Knockout::None);
    assert_eq!(intact.n, N);

    // Zero ablation = the heads' output-projection columns zeroed in the weights: the same
    // logits, and the same counts as the report.
    let all: Vec<usize> = (0..N).collect();
    let b = batch(&data, &all, &Device::Cpu).unwrap();
    let plain = model.forward_last(&b.ids, &mut Hooks::new(), None).unwrap();
    let means = split_means(&model, &data, 1 << 16).unwrap();
    for group in &g {
        let twin = zeroed_model(&root, &config, &group.heads);
        let ours = knockouts(group, Knockout::Zero, &means).unwrap();
        let mut hooks = ours.into_iter().fold(Hooks::new(), Hooks::intervene);
        let a = model.forward_last(&b.ids, &mut hooks, None).unwrap();
        let t = twin.forward_last(&b.ids, &mut Hooks::new(), None).unwrap();
        assert!(max_diff(&a, &t) < 1e-5, "{}", group.name);
        assert!(
            max_diff(&plain, &t) > 1e-4,
            "{}: changed nothing",
            group.name
        );
        let counts = tally(&twin, &data, 1 << 20, &[]).unwrap();
        let correct: usize = counts.values().map(|c| c.0).sum();
        assert_eq!(
            row(&group.name, Knockout::Zero).correct,
            correct,
            "{}",
            group.name
        );
        for (h, (c, n)) in &counts {
            let per_hop = report
                .rows
                .iter()
                .find(|x| {
                    x.group == group.name && x.ablation == Knockout::Zero && x.hop == h.to_string()
                })
                .unwrap();
            assert_eq!(
                (per_hop.correct, per_hop.n),
                (*c, *n),
                "{} hop {h}",
                group.name
            );
        }
    }

    // The split means, batch by batch, equal a plain per-sample average of the captured
    // outputs of the intact model.
    for (layer, mean) in means.iter().enumerate() {
        let point = HookPoint::new(layer, HookKind::Z);
        let mut sum: Option<Tensor> = None;
        for i in 0..N {
            let one = batch(&data, &[i], &Device::Cpu).unwrap();
            let mut hooks = Hooks::new().capture([point]);
            model.forward_last(&one.ids, &mut hooks, None).unwrap();
            let z = hooks.get(point).unwrap().squeeze(0).unwrap(); // [heads, pos, d_head]
            sum = Some(match sum {
                Some(s) => (s + z).unwrap(),
                None => z,
            });
        }
        let brute = (sum.unwrap() / N as f64).unwrap();
        assert!(max_diff(mean, &brute) < 1e-5, "layer {layer}");
    }
    // Mean ablation of the heads of one layer = the forward pass's own batch-mean ablation
    // with the whole split as one batch (for heads in several layers the two differ by design:
    // ours replaces each head by its mean in the intact model, the batch mean is taken after
    // the layers below were ablated).
    let mut checked = 0;
    for group in &g {
        let ours = knockouts(group, Knockout::Mean, &means).unwrap();
        let mut hooks = ours.into_iter().fold(Hooks::new(), Hooks::intervene);
        let a = model.forward_last(&b.ids, &mut hooks, None).unwrap();
        assert!(
            max_diff(&plain, &a) > 1e-4,
            "{}: mean ablation changed nothing",
            group.name
        );
        let counts = tally(
            &model,
            &data,
            1 << 20,
            &knockouts(group, Knockout::Mean, &means).unwrap(),
        )
        .unwrap();
        let correct: usize = counts.values().map(|c| c.0).sum();
        assert_eq!(row(&group.name, Knockout::Mean).correct, correct);
        if group.heads.iter().any(|h| h.0 != group.heads[0].0) {
            continue;
        }
        let mut hooks = group.heads.iter().fold(Hooks::new(), |h, &(layer, head)| {
            h.intervene(Intervention::AblateHead {
                layer,
                head,
                ablation: Ablation::Mean,
            })
        });
        let twin = model.forward_last(&b.ids, &mut hooks, None).unwrap();
        assert!(max_diff(&a, &twin) < 1e-5, "{}", group.name);
        checked += 1;
    }
    assert!(checked >= 4, "{checked} one-layer groups checked");

    // Bad input: head types of another shape, no samples, a value of the wrong shape.
    let err = ablate_run(&root, &[vec![P]], &options, &Device::Cpu, |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("the model has 2 layers x 2 heads"), "{err}");
    assert!(!err.contains('\n'));
    let none = AblationOptions {
        samples: 0,
        ..options
    };
    assert!(ablate_run(&root, &grid, &none, &Device::Cpu, |_, _| {}).is_err());
    let wrong = Intervention::SetHead {
        layer: 0,
        head: 0,
        value: Tensor::zeros((3, 3), candle_core::DType::F32, &Device::Cpu).unwrap(),
    };
    let mut hooks = Hooks::new().intervene(wrong);
    let err = model
        .forward_last(&b.ids, &mut hooks, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("has shape [3, 3]"), "{err}");
}
