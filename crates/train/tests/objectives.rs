//! The trainer's objectives from a TOML run config: every-position cross-entropy on a
//! multi-hop task (validation adds token accuracy) and EOS classification of a formal language
//! (validation per string length); both engines, exact reload, and bad configs as one-line
//! errors naming the file.

use std::path::Path;

use candle_core::{Device, Tensor};
use ropelab_model::Hooks;
use ropelab_tasks::TaskKind;
use ropelab_train::{Engine, Preset, RunConfig, RunDir, Trainer};

fn metrics(root: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(root.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The training losses of a run's metrics lines.
fn losses(root: &Path) -> Vec<f64> {
    metrics(root)
        .iter()
        .filter_map(|m| m["loss"].as_f64())
        .collect()
}

fn train(root: &Path, config: &RunConfig, engine: Engine) -> Trainer {
    let mut trainer = Trainer::start(root, config.clone(), &Device::Cpu).unwrap();
    trainer.set_engine(engine).unwrap();
    trainer.run(|_| {}).unwrap();
    trainer
}

/// Both engines compute the same function: their logged losses agree closely.
fn assert_same_losses(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-3 * x.abs().max(1.0), "{a:?} vs {b:?}");
    }
}

#[test]
fn every_position_runs_log_token_accuracy() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Preset::Tiny.config(TaskKind::Letter);
    config.optim.steps = 10;
    let text = config.to_toml().replace(
        "objective = \"last_token\"",
        "objective = \"every_position\"",
    );
    let file = dir.path().join("every.toml");
    let config = RunConfig::from_toml(&text, &file).unwrap();
    assert!(config.objective.every_position());
    let mut runs = Vec::new();
    for engine in [Engine::Fused, Engine::Composed] {
        let root = dir.path().join(format!("{engine:?}"));
        train(&root, &config, engine);
        let written = std::fs::read_to_string(root.join("config.toml")).unwrap();
        assert!(written.contains("objective = \"every_position\""));
        let last = metrics(&root).pop().unwrap();
        let token = last["val"]["token_accuracy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&token));
        // The answer accuracy stays the headline.
        assert!(last["val"]["accuracy"].as_f64().is_some());
        runs.push(losses(&root));
    }
    assert_same_losses(&runs[0], &runs[1]);
}

/// A language run config in TOML: the tiny preset's model with a classifier head.
fn language_text(language: &str, steps: usize) -> String {
    let mut config = Preset::Tiny.config(TaskKind::Language);
    config.optim.steps = steps;
    config.optim.batch_size = 32;
    config.optim.warmup = 10;
    config.optim.eval_every = steps;
    config.optim.save_every = steps;
    config.data.val = 96;
    config.model.dropout = 0.0;
    let text = config.to_toml();
    let start = text.find("[language]").unwrap();
    let end = start + text[start..].find("\n\n").unwrap();
    format!("{}{language}{}", &text[..start], &text[end..])
}

#[test]
fn a_language_trains_with_an_eos_classifier_and_reloads_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lang.toml");
    let text = language_text(
        "[language]\nname = \"Sigma* a\"\nlengths = [1, 12]\nnegatives = \"near-miss\"",
        150,
    );
    let config = RunConfig::from_toml(&text, &file).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let device = Device::Cpu;
    let mut runs = Vec::new();
    for engine in [Engine::Fused, Engine::Composed] {
        let root = dir.path().join(format!("{engine:?}"));
        let trainer = train(&root, &config, engine);
        let written = std::fs::read_to_string(root.join("config.toml")).unwrap();
        for line in [
            "task = \"language\"",
            "objective = \"eos_class\"",
            "name = \"sigma-a\"",
            "negatives = \"near-miss\"",
        ] {
            assert!(written.contains(line), "{line} not in\n{written}");
        }
        // Validation covers every training length; the last token decides membership, which
        // the tiny model learns.
        let first = &metrics(&root)[0]["val"];
        let last = metrics(&root).pop().unwrap();
        let per_length = last["val"]["per_length"].as_object().unwrap();
        assert_eq!(per_length.len(), 12);
        let accuracy = last["val"]["accuracy"].as_f64().unwrap();
        assert!(
            accuracy >= 0.95,
            "{engine:?}: accuracy {accuracy} (at step 0: {first})"
        );

        let (run, reread) = RunDir::open(&root).unwrap();
        assert_eq!(reread, config);
        let loaded = run.load_model(150, &reread, &device).unwrap();
        let ids = Tensor::from_vec(vec![1u32, 3, 4, 3, 2, 1, 4, 4, 4, 2], (2, 5), &device).unwrap();
        let out = |m: &ropelab_model::GptJ| -> Vec<f32> {
            let l = m.forward_last(&ids, &mut Hooks::new(), None).unwrap();
            assert_eq!(l.dims(), [2, 2]);
            l.flatten_all().unwrap().to_vec1().unwrap()
        };
        assert_eq!(out(trainer.model()), out(&loaded));
        // The multi-hop analyses refuse a language run clearly.
        let err = ropelab_train::eval::eval_checkpoint(&root, None, 0, None, 1 << 20, &device)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("language task has no multi-hop layout"),
            "{err}"
        );
        runs.push(losses(&root));
    }
    assert_same_losses(&runs[0], &runs[1]);
}

#[test]
fn bad_objective_and_language_configs_name_the_file() {
    let file = Path::new("runs/bad.toml");
    let good = language_text("[language]\nname = \"parity\"\nlengths = [1, 8]", 5);
    RunConfig::from_toml(&good, file).unwrap();
    let number = Preset::Tiny.config(TaskKind::Number).to_toml();
    let cases = [
        (
            good.replace("name = \"parity\"", "name = \"(abc)*\""),
            "unknown language \"(abc)*\"",
        ),
        (
            good.replace("lengths = [1, 8]", "lengths = [9, 8]"),
            "language.lengths",
        ),
        (
            good.replace("objective = \"eos_class\"", "objective = \"last_token\""),
            "objective = \"eos_class\"",
        ),
        (good.replace("classes = 2", "classes = 3"), "classes = 2"),
        // Length 1 of Sigma* ab Sigma* has no member: a constant "no" learns it (issue 55).
        (
            good.replace(
                "name = \"parity\"\nlengths = [1, 8]",
                "name = \"sigma-ab-sigma\"\nlengths = [1, 1]",
            ),
            "answers no is always right",
        ),
        (
            good.replace("[language]\nname = \"parity\"\nlengths = [1, 8]\n", ""),
            "needs a [language] table",
        ),
        (
            format!("{number}\n[language]\nname = \"parity\"\nlengths = [1, 8]\n"),
            "belongs to task = \"language\"",
        ),
        (
            number.replace("objective = \"last_token\"", "objective = \"eos_class\""),
            "needs a task with class labels",
        ),
        (
            number.replace("task = \"number\"", "task = \"word\""),
            "unknown variant `word`",
        ),
    ];
    for (text, want) in cases {
        let err = RunConfig::from_toml(&text, file).unwrap_err().to_string();
        assert!(err.contains("runs/bad.toml"), "{err}");
        assert!(err.contains(want), "want {want:?} in: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
