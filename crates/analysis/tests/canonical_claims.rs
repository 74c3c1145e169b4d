//! The canonical claims' verdicts flip with the numbers in the study's `canonical/` files.

use ropelab_analysis::claims::canonical::{verdicts, CanonicalFiles};
use ropelab_analysis::claims::{Thresholds, Verdict};
use ropelab_analysis::measure::canonical::BandSummary;
use ropelab_analysis::measure::partial::TwoAngles;

fn band(task: &str, band: &str, accuracy: f64, s: (f64, f64)) -> BandSummary {
    BandSummary {
        task: task.into(),
        band: band.into(),
        planes: vec![0],
        centre: 0.1,
        accuracy,
        s_pos: s.0,
        s_sym: s.1,
        per_seed: vec![accuracy],
        two_angles: None,
    }
}

fn write(dir: &std::path::Path, task: &str, bands: &[BandSummary]) {
    std::fs::create_dir_all(dir.join(task)).unwrap();
    std::fs::write(
        dir.join(task).join("summary.json"),
        serde_json::to_string(bands).unwrap(),
    )
    .unwrap();
}

fn angles(recency_theta: f64) -> TwoAngles {
    TwoAngles {
        content: 20.0,
        recency: 5.0,
        content_theta: 0.001,
        recency_theta,
        content_mean_theta: 0.02,
        recency_mean_theta: recency_theta,
    }
}

#[test]
fn canonical_verdicts_follow_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let t = Thresholds::default();
    assert!(CanonicalFiles::load(dir.path()).unwrap().is_none());
    let none = verdicts(None, &t);
    assert_eq!(none.len(), 4);
    assert!(none.iter().all(|c| c.verdict == Verdict::Undetermined));

    let (pos, sym, mixed) = ((1.0, 0.0), (0.0, 1.0), (0.15, 0.85));
    write(
        dir.path(),
        "index",
        &[
            band("index", "all", 1.0, pos),
            band("index", "high", 1.0, pos),
            band("index", "low", 0.75, pos),
        ],
    );
    write(
        dir.path(),
        "retrieval",
        &[
            band("retrieval", "all", 0.995, sym),
            band("retrieval", "high", 0.73, sym),
            band("retrieval", "low", 1.0, sym),
        ],
    );
    let mut partial = band("partial", "all", 1.0, mixed);
    partial.two_angles = Some(angles(0.16));
    write(dir.path(), "partial", &[partial.clone()]);
    let files = CanonicalFiles::load(dir.path()).unwrap().unwrap();
    let v = verdicts(Some(&files), &t);
    assert!(v.iter().all(|c| c.verdict == Verdict::Holds), "{v:#?}");

    // Low planes solving Index, a symbolic Partial head, recency on slow planes: each flips.
    write(
        dir.path(),
        "index",
        &[
            band("index", "all", 1.0, pos),
            band("index", "high", 1.0, pos),
            band("index", "low", 0.97, pos),
        ],
    );
    partial.s_pos = 0.05;
    partial.s_sym = 0.95;
    partial.two_angles = Some(angles(0.05));
    write(dir.path(), "partial", &[partial]);
    let files = CanonicalFiles::load(dir.path()).unwrap().unwrap();
    let v = verdicts(Some(&files), &t);
    let of = |id: &str| v.iter().find(|c| c.id == id).unwrap().verdict;
    assert_eq!(of("index_needs_high_frequencies"), Verdict::DoesNotHold);
    assert_eq!(of("retrieval_needs_low_frequencies"), Verdict::Holds);
    assert_eq!(of("canonical_head_types"), Verdict::DoesNotHold);
    assert_eq!(of("partial_two_angles"), Verdict::DoesNotHold);

    // A malformed summary is an error naming the file.
    std::fs::write(dir.path().join("index/summary.json"), "{").unwrap();
    let err = CanonicalFiles::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("index/summary.json"), "{err}");
}
