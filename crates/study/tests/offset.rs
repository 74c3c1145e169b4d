//! The implicit-bias experiment end to end on a tiny grid: files, accuracy rows per run and
//! length, mechanisms for softmax runs, and a rerun that reuses every result.

use ropelab_model::AttentionKind;
use ropelab_study::offset::{run, run_dir, Experiment, OffsetPe};
use ropelab_study::Quiet;

#[test]
fn a_tiny_grid_writes_its_tables_and_reruns_from_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let e = Experiment {
        pes: vec![OffsetPe::Rope(1e4), OffsetPe::Ape],
        attentions: vec![AttentionKind::Softmax, AttentionKind::Linear],
        ks: vec![1, 3],
        seeds: vec![5],
        train_len: 8,
        test_lens: vec![8, 16, 24],
        per_length: 16,
        steps: 20,
        batch: 8,
        ..Experiment::default()
    };
    let outcome = run(&e, dir.path(), None, &Quiet).unwrap();
    assert_eq!(outcome.accuracy.len(), 8 * 3);
    assert_eq!(outcome.runs.len(), 8);
    // Softmax runs: one line per test length (one head).
    assert_eq!(outcome.mechanisms.len(), 4 * 3);
    for r in &outcome.accuracy {
        assert!((0.0..=1.0).contains(&r.accuracy) && r.n == 16 && r.train_len == 8);
    }
    for r in &outcome.runs {
        let rotary = r.pe == "rope";
        assert_eq!(r.equivariance < 1e-4, rotary, "{r:?}");
        assert_eq!(
            r.dilution_error.is_some(),
            rotary && r.attention == "softmax",
            "{r:?}"
        );
        assert_eq!(r.mode_key.is_some(), r.attention == "softmax");
    }
    for m in &outcome.mechanisms {
        let acc = outcome
            .accuracy
            .iter()
            .find(|a| {
                a.pe == m.pe && a.k == m.k && a.attention == m.attention && a.test_len == m.test_len
            })
            .unwrap();
        assert_eq!(m.accuracy, acc.accuracy);
        assert!(m.mode_key < m.test_len && (0.0..=1.0).contains(&m.target_weight));
    }
    for name in ["accuracy.csv", "runs.csv", "mechanism.csv"] {
        assert!(dir.path().join(name).exists(), "{name}");
    }
    let run0 = run_dir(
        dir.path(),
        OffsetPe::Rope(1e4),
        AttentionKind::Softmax,
        1,
        5,
    );
    for name in [
        "lengths.csv",
        "run.csv",
        "mechanism.csv",
        "pinning.csv",
        "carrier.csv",
        "config.toml",
    ] {
        assert!(run0.join(name).exists(), "{name}");
    }
    // A rerun reads the runs' files and gives the same outcome.
    let stamp = std::fs::metadata(run0.join("run.csv"))
        .unwrap()
        .modified()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(run(&e, dir.path(), None, &Quiet).unwrap(), outcome);
    assert_eq!(
        std::fs::metadata(run0.join("run.csv"))
            .unwrap()
            .modified()
            .unwrap(),
        stamp
    );
}
