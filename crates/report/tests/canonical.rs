//! The canonical experiment's figures and report section on hand-made rows: a line per band
//! over the answer positions, the sweep with its marked bands, and the report of a directory
//! holding `summary.json` and `per_position.csv`.

use ropelab_analysis::measure::canonical::{BandSummary, PerPositionRow};
use ropelab_report::canonical::{accuracy_by_position, sweep, w_max_by_position};

fn row(band: &str, seed: u64, position: usize, accuracy: f64) -> PerPositionRow {
    PerPositionRow {
        task: "index".into(),
        band: band.into(),
        seed,
        position,
        n: 10,
        accuracy,
        w_max: accuracy / 2.0,
    }
}

fn band(name: &str, centre: f64, accuracy: f64) -> BandSummary {
    BandSummary {
        task: "index".into(),
        band: name.into(),
        planes: vec![0, 1],
        centre,
        accuracy,
        s_pos: 1.0,
        s_sym: 0.0,
        per_seed: vec![accuracy],
        two_angles: None,
    }
}

fn polyline_lengths(svg: &str) -> Vec<usize> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .map(|n| n.attribute("points").unwrap().split_whitespace().count())
        .collect()
}

#[test]
fn figures_draw_a_line_per_band() {
    let mut rows = vec![];
    for seed in [0, 1] {
        for p in 0..6 {
            rows.push(row("all", seed, p, 1.0));
            rows.push(row(
                "low",
                seed,
                p,
                if p == 0 || p == 5 { 1.0 } else { 0.5 },
            ));
        }
    }
    for svg in [accuracy_by_position(&rows), w_max_by_position(&rows)] {
        assert!(svg.contains("all") && svg.contains("low"));
        assert_eq!(
            polyline_lengths(&svg).iter().filter(|&&n| n == 6).count(),
            2,
            "{svg}"
        );
    }
    let summary = vec![
        band("all", 0.12, 1.0),
        band("high", 0.5, 1.0),
        band("low", 0.01, 0.8),
        band("planes=0,1", 0.6, 1.0),
        band("planes=2,3", 0.05, 0.9),
        band("planes=4,5", 0.005, 0.2),
    ];
    let s = sweep(&summary);
    // The three windows form one line; all / high / low are marked points.
    assert!(polyline_lengths(&s).contains(&3), "{s}");
    for name in ["planes= windows", "all", "high", "low", "centre frequency"] {
        assert!(s.contains(name), "{name}");
    }
}

#[test]
fn a_canonical_directory_gets_its_own_report() {
    let dir = tempfile::tempdir().unwrap();
    ropelab_io::write_csv(
        &dir.path().join("per_position.csv"),
        &[row("all", 0, 0, 1.0)],
    )
    .unwrap();
    let summary = vec![band("all", 0.125, 0.9876)];
    std::fs::write(
        dir.path().join("summary.json"),
        serde_json::to_string(&summary).unwrap(),
    )
    .unwrap();
    // Without the ledger the command writes, nothing is vouched for (twentieth pass, S1).
    let err = ropelab_report::report(dir.path(), "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("measured.json is missing"), "{err}");
    ledgered(dir.path(), &["per_position.csv", "summary.json"]);
    let html = ropelab_report::report(dir.path(), "ropelab canonical").unwrap();
    assert!(html.contains("Canonical task index: which frequency bands solve it"));
    assert!(html.contains("<td>0.9876</td>") && html.contains("<td>1.250e-1</td>"));
    assert!(!html.contains("config.toml is missing"));
    std::fs::write(dir.path().join("summary.json"), "{").unwrap();
    let err = ropelab_report::report(dir.path(), "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("summary.json"), "{err}");
}

/// Records `files` of `dir` in its ledger, as the experiment command does when it writes them
/// (a directory of experiment tables without its ledger is refused).
fn ledgered(dir: &std::path::Path, files: &[&str]) {
    for file in files {
        ropelab_io::Ledger::finish(dir, file, "experiment table").unwrap();
    }
}
