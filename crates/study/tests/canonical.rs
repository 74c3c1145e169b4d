//! Frequency-band training end to end on a tiny grid: files, per-position rows that add up to
//! the test set, scores in range, a rerun that reuses every result, and bad bands as errors.

use ropelab_study::canonical::{run, Band, Experiment};
use ropelab_study::Quiet;
use ropelab_tasks::{CanonicalKind, CanonicalTask};

#[test]
fn a_tiny_band_grid_writes_its_files_and_reruns_from_them() {
    let dir = tempfile::tempdir().unwrap();
    let task = CanonicalTask::new(CanonicalKind::Retrieval, 6, 8, 2).unwrap();
    let mut e = Experiment::new(
        task,
        vec![Band::All, Band::High, Band::Planes(vec![1, 3])],
        vec![2],
    );
    e.d_model = 16;
    e.steps = 10;
    e.batch = 8;
    e.test = 60;
    e.score_samples = 6;
    let summary = run(&e, dir.path(), None, &Quiet).unwrap();
    assert_eq!(summary.len(), 3);
    assert_eq!(summary[0].planes, (0..8).collect::<Vec<_>>());
    assert_eq!(summary[2].planes, vec![1, 3]);
    for b in &summary {
        assert!((0.0..=1.0).contains(&b.accuracy));
        assert!((0.0..=1.0).contains(&b.s_pos) && (0.0..=1.0).contains(&b.s_sym));
        assert_eq!(b.per_seed.len(), 1);
    }
    let rows = std::fs::read_to_string(dir.path().join("per_position.csv")).unwrap();
    assert_eq!(
        rows.lines().next().unwrap(),
        "task,band,seed,position,n,accuracy,w_max"
    );
    // 3 bands x 6 answer positions, 10 test samples each (60 / 6); n is the third column from
    // the end (a band with commas is quoted).
    assert_eq!(rows.lines().count(), 1 + 3 * 6);
    assert!(
        rows.lines()
            .skip(1)
            .all(|l| l.rsplit(',').nth(2) == Some("10")),
        "{rows}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap())
            .unwrap();
    for key in ["accuracy", "s_pos", "s_sym"] {
        assert!(json[0][key].is_number(), "{key}");
    }
    let again = run(&e, dir.path(), None, &Quiet).unwrap();
    assert_eq!(again, summary);
    // A band naming a plane the 16-dim head (8 planes) does not have.
    e.bands = vec![Band::Planes(vec![8])];
    let err = run(&e, dir.path(), None, &Quiet).unwrap_err().to_string();
    assert!(err.contains("plane 8 does not exist"), "{err}");
}
