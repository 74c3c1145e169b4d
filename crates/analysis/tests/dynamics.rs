//! Scoring a whole (tiny) run: one line per (step, layer, head), consistent fields, and clear
//! errors on bad input.

use candle_core::Device;
use ropelab_analysis::lens::swap::Tau;
use ropelab_analysis::measure::dynamics::{
    score_run, summarize_heads, Gamma, HeadKind, QueryMode, ScoreOptions,
};
use ropelab_tasks::TaskKind;
use ropelab_train::{Preset, Trainer};

#[test]
fn every_checkpoint_head_is_scored() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("run");
    let mut config = Preset::Tiny.config(TaskKind::Number);
    config.optim.steps = 20;
    let mut trainer = Trainer::start(&root, config, &Device::Cpu).unwrap();
    trainer.run(|_| {}).unwrap();
    drop(trainer); // the trainer holds the run directory's lock while it lives
    for query in [QueryMode::Last, QueryMode::Hops, QueryMode::At(9)] {
        let blocks = (query == QueryMode::Last).then_some(4);
        let options = ScoreOptions {
            samples: 12,
            query,
            eval_samples: 30,
            blocks,
            planes: true,
            ..ScoreOptions::default()
        };
        let scored = score_run(&root, &options, &Device::Cpu, |_, _| {}).unwrap();
        // Checkpoints 0, 10, 20 x 2 layers x 2 heads.
        assert_eq!(scored.lines.len(), 3 * 2 * 2);
        for l in &scored.lines {
            assert!((0.0..=1.0 + 1e-9).contains(&l.s_pos), "{l:?}");
            assert!((0.0..=1.0 + 1e-9).contains(&l.s_sym), "{l:?}");
            assert!((0.0..=1.0).contains(&l.entropy_norm));
            assert!(l.entropy > 0.0 && l.entropy <= (17f64).ln() + 1e-9);
            assert_eq!(l.freq_use.len(), 4);
            assert_eq!(l.accuracy_per_hop.len(), 4);
            assert_eq!(l.planes.len(), 4);
            assert_eq!(l.block.is_some(), blocks.is_some());
        }
        let text = std::fs::read_to_string(root.join("scores.jsonl")).unwrap();
        assert_eq!(text.lines().count(), 12);
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        for key in [
            "step",
            "layer",
            "head",
            "s_pos",
            "s_sym",
            "entropy",
            "entropy_norm",
            "pure_0_1",
            "pure_0_05",
            "freq_mean_plane",
        ] {
            assert!(first.get(key).is_some(), "{key} missing");
        }
        // At initialisation attention is near uniform: both scores high, no head pure.
        let init: Vec<_> = scored.lines.iter().filter(|l| l.step == 0).collect();
        assert!(
            init.iter().all(|l| l.s_pos > 0.5 && l.s_sym > 0.5),
            "{init:?}"
        );
        let heads = summarize_heads(&scored.lines, Gamma::DEFAULT).unwrap();
        assert_eq!(heads.len(), 4);
        assert!(heads
            .iter()
            .all(|h| (h.kind == HeadKind::Mixed) == h.pure_from.is_none()));
    }
}

#[test]
fn bad_scoring_input_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = score_run(
        dir.path(),
        &ScoreOptions::default(),
        &Device::Cpu,
        |_, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("config.toml"), "{err}");

    let root = dir.path().join("run");
    let mut config = Preset::Tiny.config(TaskKind::Letter);
    config.optim.steps = 1;
    Trainer::start(&root, config, &Device::Cpu).unwrap();
    std::fs::remove_dir_all(root.join("checkpoints")).unwrap();
    let err = score_run(&root, &ScoreOptions::default(), &Device::Cpu, |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("no checkpoints"), "{err}");

    // A bad temperature cannot even be built (the type carries the check).
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = Tau::new(bad).unwrap_err().to_string();
        assert!(err.contains("tau"), "{err}");
    }
    assert!("0".parse::<Tau>().is_err() && "1e-3".parse::<Tau>().is_ok());
    assert!("0"
        .parse::<QueryMode>()
        .unwrap_err()
        .to_string()
        .contains("query position 0"));
    assert!("1".parse::<QueryMode>().is_err());
    assert!("first".parse::<QueryMode>().is_err());
    for gamma in [0.0, 0.5, -1.0, 0.7] {
        assert!(Gamma::new(gamma).is_err(), "{gamma}");
    }
    assert!(Gamma::new(0.05).is_ok());
}
