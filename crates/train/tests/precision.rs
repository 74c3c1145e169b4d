//! `precision` in a run config: bf16 products train, are recorded in config.toml, repeat
//! exactly, follow the f32 losses up to rounding, and are refused by the composed engine; f32
//! configs are written without the key (existing run directories keep their identity).

use std::path::Path;

use candle_core::Device;
use ropelab_model::kernel::Precision;
use ropelab_tasks::TaskKind;
use ropelab_train::{Engine, Preset, RunConfig, Trainer};

fn losses(root: &Path) -> Vec<f64> {
    std::fs::read_to_string(root.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"].as_f64())
        .collect()
}

fn config(precision: Precision) -> RunConfig {
    let mut c = Preset::Tiny.config(TaskKind::Number);
    c.optim.steps = 12;
    c.optim.log_every = 1;
    c.precision = precision;
    c
}

fn train(root: &Path, config: &RunConfig) -> Vec<f64> {
    let mut trainer = Trainer::start(root, config.clone(), &Device::Cpu).unwrap();
    trainer.run(|_| {}).unwrap();
    losses(root)
}

#[test]
fn bf16_runs_are_recorded_repeatable_and_close_to_f32() {
    let dir = tempfile::tempdir().unwrap();
    let f32_config = config(Precision::F32);
    assert!(!f32_config.to_toml().contains("precision"));
    let bf16_config = config(Precision::Bf16);
    assert!(bf16_config.to_toml().contains("precision = \"bf16\""));
    let parsed = RunConfig::from_toml(&bf16_config.to_toml(), Path::new("run.toml")).unwrap();
    assert_eq!(parsed.precision, Precision::Bf16);

    let a = train(&dir.path().join("f32"), &f32_config);
    let b = train(&dir.path().join("bf16"), &bf16_config);
    let b2 = train(&dir.path().join("bf16-again"), &bf16_config);
    assert_eq!(b, b2, "a bf16 run repeats exactly");
    assert_ne!(a, b, "bf16 products round");
    // Twelve steps of the tiny model: the curves stay within 2% of each other.
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 0.02 * x.abs(), "{a:?} vs {b:?}");
    }
    let written = std::fs::read_to_string(dir.path().join("bf16/config.toml")).unwrap();
    assert!(written.contains("precision = \"bf16\""));
}

#[test]
fn bad_precisions_and_the_composed_engine_are_refused() {
    let text = format!("precision = \"fp8\"\n{}", config(Precision::F32).to_toml());
    let err = RunConfig::from_toml(&text, Path::new("run.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("run.toml") && err.contains("fp8"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let mut trainer = Trainer::start(dir.path(), config(Precision::Bf16), &Device::Cpu).unwrap();
    trainer.set_engine(Engine::Composed).unwrap();
    let err = trainer.run(|_| {}).unwrap_err().to_string();
    assert!(err.contains("bf16") && err.contains("fused"), "{err}");
}
