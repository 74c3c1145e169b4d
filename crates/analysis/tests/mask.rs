//! Evaluation-time masking: restricting every layer to a band by intervention computes the
//! same function as the model built with that band as its plane mask (the training-time path),
//! the `all` band is the unmasked model, and bad input is a one-line error.

use candle_core::Device;
use ropelab_analysis::measure::band::Band;
use ropelab_analysis::measure::mask::{layer_groups, layer_rates, mask_run, MaskOptions};
use ropelab_model::checkpoint::load_weights;
use ropelab_model::PositionEncoding;
use ropelab_tasks::{Dataset, Split, Task, TaskKind};
use ropelab_train::{evaluate, Preset, RunDir, Trainer};

#[test]
fn masking_by_intervention_equals_a_plane_masked_model() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("run");
    let mut config = Preset::Tiny.config(TaskKind::Number);
    config.optim.steps = 200;
    config.optim.lr = 1e-2;
    config.optim.save_every = 200;
    let mut trainer = Trainer::start(&root, config.clone(), &Device::Cpu).unwrap();
    trainer.run(|_| {}).unwrap();
    drop(trainer);

    let bands: Vec<Band> = ["all", "low", "no-high", "planes=1"]
        .iter()
        .map(|b| b.parse().unwrap())
        .collect();
    let options = MaskOptions {
        step: None,
        groups: layer_groups("all", 2).unwrap(),
        bands: bands.clone(),
        n: Some(96),
        memory: 1 << 20,
    };
    let mut calls = 0;
    let report = mask_run(&root, &options, &Device::Cpu, |_, _| calls += 1).unwrap();
    assert_eq!(calls, 1 + bands.len());
    assert_eq!(report.step, 200);
    // One `all` row and one row per hop count, per band.
    assert_eq!(report.rows.len(), bands.len() * 5);
    let overall: Vec<_> = report.rows.iter().filter(|r| r.hop == "all").collect();
    assert_eq!(overall[0].accuracy, report.baseline.accuracy);
    assert_eq!(overall[0].planes_kept, 4);

    // The same bands as the model's own plane mask, evaluated without interventions.
    let task = Task::new(TaskKind::Number, config.layout.clone()).unwrap();
    let data = Dataset::new(task, config.seed, Split::Test, 96, 0).unwrap();
    let (run, _) = RunDir::open(&root).unwrap();
    let weights = run.checkpoint_dir(200).join("model.safetensors");
    let rates = layer_rates(&config.model, 0).unwrap();
    let mut losses = vec![];
    for band in &bands {
        let mut model_config = config.model.clone();
        let PositionEncoding::Rope { planes, .. } = &mut model_config.position else {
            panic!("the tiny preset uses RoPE");
        };
        *planes = band.mask(&rates, data.seq_len()).unwrap();
        let model = load_weights(model_config, &weights, &Device::Cpu).unwrap();
        let plain = evaluate(&model, &data, 1 << 20).unwrap();
        let masked = report
            .rows
            .iter()
            .find(|r| r.hop == "all" && r.band == band.to_string())
            .unwrap();
        assert_eq!(masked.accuracy, plain.accuracy, "{band}");
        losses.push(plain.loss);
        for (h, a) in &plain.per_hop {
            let row = report
                .rows
                .iter()
                .find(|r| r.band == band.to_string() && r.hop == h.to_string())
                .unwrap();
            assert_eq!(row.accuracy, *a, "{band} hop {h}");
            assert!((row.drop - (report.baseline.per_hop[h] - a)).abs() < 1e-12);
        }
    }
    // Masking changes the function (else the comparison above says nothing).
    assert!(
        losses[1..].iter().all(|l| (l - losses[0]).abs() > 1e-4),
        "{losses:?}"
    );

    // Bad input: a plane or a layer the model does not have.
    let bad = MaskOptions {
        bands: vec!["planes=9".parse().unwrap()],
        ..options.clone()
    };
    let err = mask_run(&root, &bad, &Device::Cpu, |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("plane 9 does not exist (the head has planes 0-3)"),
        "{err}"
    );
    let bad = MaskOptions {
        groups: vec![vec![2]],
        ..options
    };
    let err = mask_run(&root, &bad, &Device::Cpu, |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("layer 2 does not exist (the model has layers 0-1)"),
        "{err}"
    );
    assert!(!err.contains('\n'));
}
