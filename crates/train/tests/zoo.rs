//! Every position encoding of the model zoo trains from a TOML run config on a tiny task, shows
//! every option in the run's `config.toml`, and reloads exactly from its checkpoint; bad values
//! are one-line errors naming the file and the key.

use std::path::Path;

use candle_core::{Device, Tensor};
use ropelab_model::Hooks;
use ropelab_tasks::TaskKind;
use ropelab_train::{Engine, Preset, RunConfig, RunDir, Trainer};

/// The `[model.position]` tables under test (the user-facing TOML form), and the extra lines
/// each must show in the run's `config.toml`.
const VARIANTS: [(&str, &str); 8] = [
    (
        "masked rope, base 1e12",
        "kind = \"rope\"\nbase = 1e12\nrotary_dim = 8\nlayout = \"half_split\"\nplanes = \"RZKR\"",
    ),
    (
        "rope, base 1e-12",
        "kind = \"rope\"\nbase = 1e-12\nrotary_dim = 8\nlayout = \"interleaved\"",
    ),
    (
        "periodic, uniform tables",
        "kind = \"periodic\"\nperiods = [2, 3, 5]\nlayout = \"interleaved\"\nplanes = \"rrk\"",
    ),
    (
        "periodic, explicit tables",
        "kind = \"periodic\"\nperiods = [2, 1]\ntables = [[0.0, 3.0], [1.0]]\nlayout = \"half_split\"",
    ),
    ("sinusoidal", "kind = \"sinusoidal\"\nbase = 10000.0"),
    (
        "periodic sinusoidal",
        "kind = \"periodic_sinusoidal\"\nperiods = [2, 3, 4, 5]",
    ),
    ("learned", "kind = \"learned\"\nmax_len = 512"),
    (
        "learned, clamped",
        "kind = \"learned\"\nmax_len = 8\nbeyond = \"clamp\"",
    ),
];

/// The tiny number-task config with its `[model.position]` table replaced by `position`.
fn config_text(position: &str) -> String {
    let mut base = Preset::Tiny.config(TaskKind::Number);
    base.optim.steps = 12;
    base.optim.eval_every = 6;
    base.optim.save_every = 6;
    let text = base.to_toml();
    let start = text.find("[model.position]").unwrap();
    let end = start + text[start..].find("\n\n").unwrap();
    format!(
        "{}[model.position]\n{position}{}",
        &text[..start],
        &text[end..]
    )
}

#[test]
fn every_position_encoding_trains_from_toml_and_reloads_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::Cpu;
    for (i, (name, position)) in VARIANTS.iter().enumerate() {
        let file = dir.path().join(format!("{i}.toml"));
        let config = RunConfig::from_toml(&config_text(position), &file)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for engine in [Engine::Fused, Engine::Composed] {
            let root = dir.path().join(format!("{i}-{engine:?}"));
            let mut trainer = Trainer::start(&root, config.clone(), &device).unwrap();
            trainer.set_engine(engine).unwrap();
            trainer
                .run(|_| {})
                .unwrap_or_else(|e| panic!("{name}: {e}"));

            // Every option is written to the run's config.toml.
            let written = std::fs::read_to_string(root.join("config.toml")).unwrap();
            for line in position.lines() {
                let key = line.split(" = ").next().unwrap();
                assert!(
                    written.contains(&format!("\n{key} = ")),
                    "{name}: {key} not written"
                );
            }
            let (run, reread) = RunDir::open(&root).unwrap();
            assert_eq!(reread.model, config.model, "{name}");

            // The checkpoint reloads to exactly the trained model.
            let step = run.latest_checkpoint().unwrap();
            assert_eq!(step, 12);
            let loaded = run.load_model(step, &reread, &device).unwrap();
            let ids: Vec<u32> = (0..2 * 20).map(|j| 1 + (j * 7) % 100).collect();
            let ids = Tensor::from_vec(ids, (2, 20), &device).unwrap();
            let logits = |m: &ropelab_model::GptJ| -> Vec<f32> {
                m.forward(&ids, &mut Hooks::new(), None)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1()
                    .unwrap()
            };
            assert_eq!(
                logits(trainer.model()),
                logits(&loaded),
                "{name} ({engine:?})"
            );
        }
    }
}

/// The block variants: `[model]` keys replaced in the tiny config's TOML.
#[test]
fn every_block_variant_trains_from_toml_and_reloads_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::Cpu;
    let variants = [
        (
            "linear attention",
            "attention = \"linear\"\nmlp = true\nlayer_norm = true",
        ),
        (
            "attention-only",
            "attention = \"softmax\"\nmlp = false\nlayer_norm = true",
        ),
        (
            "no LayerNorm",
            "attention = \"softmax\"\nmlp = true\nlayer_norm = false",
        ),
        (
            "attention-only linear toy without LayerNorm",
            "attention = \"linear\"\nmlp = false\nlayer_norm = false",
        ),
    ];
    let plain = "attention = \"softmax\"\nmlp = true\nlayer_norm = true";
    let base =
        config_text("kind = \"rope\"\nbase = 10000.0\nrotary_dim = 8\nlayout = \"interleaved\"");
    assert!(
        base.contains(plain),
        "the config shows the block keys:\n{base}"
    );
    for (i, (name, keys)) in variants.iter().enumerate() {
        let text = base.replace(plain, keys);
        let config = RunConfig::from_toml(&text, Path::new("block.toml")).unwrap();
        let root = dir.path().join(i.to_string());
        let mut trainer = Trainer::start(&root, config.clone(), &device).unwrap();
        trainer
            .run(|_| {})
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let written = std::fs::read_to_string(root.join("config.toml")).unwrap();
        assert!(written.contains(keys), "{name}: not shown in config.toml");
        let (run, reread) = RunDir::open(&root).unwrap();
        let loaded = run.load_model(12, &reread, &device).unwrap();
        let ids = Tensor::from_vec((1..=30u32).collect::<Vec<_>>(), (2, 15), &device).unwrap();
        let a = trainer
            .model()
            .forward(&ids, &mut Hooks::new(), None)
            .unwrap();
        let b = loaded.forward(&ids, &mut Hooks::new(), None).unwrap();
        assert_eq!(
            a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            b.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            "{name}"
        );
    }
}

#[test]
fn bad_position_values_name_the_file_and_the_key() {
    let cases = [
        (
            "kind = \"rope\"\nbase = 100.0\nrotary_dim = 8\nlayout = \"interleaved\"\nplanes = \"RRRRR\"",
            "position.planes lists 5 planes, but the head has 4",
        ),
        (
            "kind = \"periodic\"\nperiods = [3, 0]\nlayout = \"interleaved\"",
            "position.periods[1] is 0",
        ),
        ("kind = \"learned\"\nmax_len = 0", "position.max_len must be at least 1"),
        (
            "kind = \"rope\"\nbase = 0.0\nrotary_dim = 8\nlayout = \"interleaved\"",
            "position.base must lie in",
        ),
        ("kind = \"sinusoidal\"\nbase = -inf", "position.base must lie in"),
        ("kind = \"sinusoidal\"\nbase = nan", "position.base must lie in"),
        ("kind = \"sinusoidal\"\nbase = 1e300", "position.base must lie in"),
        (
            "kind = \"angles\"\nthetas = [1e300, 1.0]\nlayout = \"interleaved\"",
            "position.thetas[0] is 1e300: every angle must lie in [-2 pi, 2 pi]",
        ),
        (
            "kind = \"angles\"\nthetas = [1.0, nan]\nlayout = \"interleaved\"",
            "position.thetas[1] is NaN",
        ),
        (
            "kind = \"rope\"\nbase = 1e-300\nrotary_dim = 8\nlayout = \"interleaved\"",
            "position.base must lie in",
        ),
        (
            "kind = \"periodic\"\nperiods = [2, 2]\ntables = [[0.0, 1.0]]\nlayout = \"interleaved\"",
            "position.tables has 1 tables for 2 periods",
        ),
        (
            "kind = \"periodic\"\nperiods = [2]\ntables = [[0.0, 1.0, 2.0]]\nlayout = \"interleaved\"",
            "position.tables[0] has 3 entries, its period is 2",
        ),
        (
            "kind = \"rope\"\nbase = 100.0\nrotary_dim = 8\nlayout = \"interleaved\"\nplanes = \"RQ\"",
            "is not R (rotate), K (keep) or Z (zero)",
        ),
        (
            "kind = \"learned\"\nmax_len = 4\nbeyond = \"wrap\"",
            "beyond = \"wrap\": expected \"error\" or \"clamp\"",
        ),
        (
            "kind = \"periodic\"\nperiods = [2]\ntables = 3\nlayout = \"interleaved\"",
            "tables: expected a table name (uniform) or one list of angles per plane",
        ),
    ];
    for (position, needle) in cases {
        let err = RunConfig::from_toml(&config_text(position), Path::new("zoo.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("zoo.toml"), "{err}");
        assert!(err.contains(needle), "{needle:?} not in {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // An absolute encoding is model-wide, not per layer.
    let mut c = Preset::Tiny.config(TaskKind::Number);
    c.model.layer_positions = vec![
        ropelab_model::PositionEncoding::Sinusoidal { base: 1e4 },
        ropelab_model::PositionEncoding::None,
    ];
    let err = RunConfig::from_toml(&c.to_toml(), Path::new("zoo.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("layer_positions[0]: a sinusoidal encoding"),
        "{err}"
    );
}
