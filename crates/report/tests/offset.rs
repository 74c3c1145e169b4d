//! The fixed-offset experiment's figures and report section on hand-made rows: a line per
//! (encoding, attention kind) averaged over offsets and seeds, the dilution law beside the
//! measured weight, the pinned argmax, and the report of a directory holding the tables.

use ropelab_analysis::measure::offset::{MechanismLine, OffsetAccuracyRow, OffsetRunRow};
use ropelab_report::offset::{accuracy_vs_length, dilution, pinning};

fn acc(
    pe: &str,
    attention: &str,
    k: usize,
    seed: u64,
    test_len: usize,
    accuracy: f64,
) -> OffsetAccuracyRow {
    OffsetAccuracyRow {
        pe: pe.into(),
        attention: attention.into(),
        k,
        seed,
        train_len: 16,
        test_len,
        n: 64,
        accuracy,
        loss: 0.1,
    }
}

fn line(pe: &str, k: usize, seed: u64, test_len: usize, mode_key: usize) -> MechanismLine {
    MechanismLine {
        pe: pe.into(),
        attention: "softmax".into(),
        k,
        seed,
        test_len,
        head: 0,
        target_weight: 0.9,
        predicted_weight: 0.95,
        per_sequence_weight: Some(0.91),
        argmax_on_target: 1.0,
        mode_key,
        mode_fraction: 1.0,
        accuracy: 1.0,
    }
}

/// The polylines' point counts and the y pixel of their first point, by stroke colour index.
fn polylines(svg: &str) -> Vec<(String, usize)> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .map(|n| {
            (
                n.attribute("stroke").unwrap_or_default().to_owned(),
                n.attribute("points").unwrap().split_whitespace().count(),
            )
        })
        .collect()
}

#[test]
fn figures_draw_a_line_per_series() {
    let mut rows = vec![];
    for seed in [0, 1] {
        for (k, n, a) in [
            (1, 16, 1.0),
            (1, 32, 1.0),
            (1, 64, 0.9),
            (2, 16, 1.0),
            (2, 32, 0.8),
            (2, 64, 0.7),
        ] {
            rows.push(acc("rope", "softmax", k, seed, n, a));
            rows.push(acc("rope", "linear", k, seed, n, a / 2.0));
            rows.push(acc(
                "ape",
                "softmax",
                k,
                seed,
                n,
                if n == 16 { 1.0 } else { 0.06 },
            ));
        }
    }
    let svg = accuracy_vs_length(&rows);
    for name in [
        "rope softmax",
        "rope linear",
        "ape softmax",
        "training length",
    ] {
        assert!(svg.contains(name), "{name}");
    }
    // Three lines of 3 test lengths each (the dashed one drawn in segments).
    let lines = polylines(&svg);
    assert!(lines.iter().filter(|l| l.1 == 3).count() >= 2, "{lines:?}");

    let lines_in = vec![
        line("rope", 1, 0, 16, 14),
        line("rope", 1, 0, 64, 62),
        line("ape", 1, 0, 16, 14),
        line("ape", 1, 0, 64, 14),
    ];
    let d = dilution(&lines_in);
    assert!(d.contains("k 1: measured w_L") && d.contains("k 1: predicted p_L"));
    assert!(!d.contains("ape"), "the law is drawn for rotary runs only");
    let p = pinning(&lines_in);
    assert!(p.contains("rope k 1") && p.contains("ape k 1"));
}

#[test]
fn an_offset_directory_gets_its_own_report() {
    let dir = tempfile::tempdir().unwrap();
    let accuracy = vec![
        acc("rope", "softmax", 2, 0, 16, 1.0),
        acc("rope", "softmax", 2, 0, 32, 0.97),
    ];
    ropelab_io::write_csv(&dir.path().join("accuracy.csv"), &accuracy).unwrap();
    let runs = vec![OffsetRunRow {
        pe: "rope".into(),
        attention: "softmax".into(),
        k: 2,
        seed: 0,
        equivariance: 7.5e-7,
        dilution_error: Some(0.0123),
        per_sequence_error: Some(0.0045),
        repeak_offset: Some(58),
        repeak_margin: Some(2.0),
        mode_key: Some(29),
        mode_fraction: Some(0.97),
        carrier_rank: Some(4.1),
        carrier_alignment: Some(0.93),
    }];
    ropelab_io::write_csv(&dir.path().join("runs.csv"), &runs).unwrap();
    ropelab_io::write_csv(
        &dir.path().join("mechanism.csv"),
        &[line("rope", 2, 0, 32, 29)],
    )
    .unwrap();
    ledgered(dir.path(), &["accuracy.csv", "runs.csv", "mechanism.csv"]);
    let html = ropelab_report::report(dir.path(), "ropelab offset").unwrap();
    assert!(html.contains("Fixed-offset retrieval: rotary, learned absolute, none"));
    assert!(html.contains("fixed-offset experiment"));
    for cell in [
        "<td>7.5e-7</td>",
        "<td>0.012</td>",
        "<td>29</td>",
        "<td>4.10</td>",
    ] {
        assert!(html.contains(cell), "{cell}");
    }
    assert!(!html.contains("config.toml is missing"));
    std::fs::write(dir.path().join("runs.csv"), "pe\nx").unwrap();
    let err = ropelab_report::report(dir.path(), "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("runs.csv"), "{err}");
}

/// Records `files` of `dir` in its ledger, as the experiment command does when it writes them
/// (a directory of experiment tables without its ledger is refused).
fn ledgered(dir: &std::path::Path, files: &[&str]) {
    for file in files {
        ropelab_io::Ledger::finish(dir, file, "experiment table").unwrap();
    }
}
