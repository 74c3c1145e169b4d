//! `ropelab canonical` end to end on a tiny run, `ropelab mask` on a tiny GPT-J run, and their
//! bad input as one-line errors.

mod common;

use common::{ok, refused as one_line_error, ropelab};

#[test]
fn a_tiny_band_sweep_prints_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("canonical");
    let sweep = || {
        ropelab(&[
            "canonical",
            "--task",
            "index",
            "--band",
            "sweep",
            "--window",
            "4",
            "--d-model",
            "16",
            "--len",
            "8",
            "--steps",
            "5",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let text = ok(sweep());
    // all, high, low, and windows 0-3, 2-5, 4-7 of the 8 planes.
    for band in [
        "all",
        "high",
        "low",
        "planes=0,1,2,3",
        "planes=2,3,4,5",
        "planes=4,5,6,7",
    ] {
        assert!(text.contains(band), "{band} not in {text}");
    }
    assert!(
        text.contains("s_pos") && text.contains("centre theta"),
        "{text}"
    );
    assert!(out.join("summary.json").exists() && out.join("per_position.csv").exists());
    let o = out.to_str().unwrap();
    for kind in ["canonical-positions", "canonical-wmax", "canonical-sweep"] {
        let svg = dir.path().join("figure.svg");
        ok(ropelab(&[
            "plot",
            kind,
            "--dir",
            o,
            "--out",
            svg.to_str().unwrap(),
        ]));
        assert!(
            std::fs::read_to_string(&svg).unwrap().starts_with("<svg"),
            "{kind}"
        );
    }
    // A run's head report holding a swap score above 1, its ledger recorded again over the
    // edit, is refused when the experiment collects it (twenty-second pass, S5).
    let run = out.join("runs/index/all/seed-0");
    let head = run.join("head.json");
    let mut report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&head).unwrap()).unwrap();
    report["s_pos"] = serde_json::json!(7.5);
    std::fs::write(&head, report.to_string()).unwrap();
    ropelab_io::Ledger::finish(
        &run,
        "head.json",
        &ropelab_analysis::measure::keys::run_table("head.json"),
    )
    .unwrap();
    let rerun = sweep();
    let err = String::from_utf8_lossy(&rerun.stderr);
    assert!(
        !rerun.status.success() && err.contains("lies outside [0, 1]"),
        "{err}"
    );
}

#[test]
fn bad_input_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let o = out.to_str().unwrap();
    one_line_error(
        &[
            "canonical",
            "--task",
            "index",
            "--band",
            "planes=40",
            "--out",
            o,
        ],
        "plane 40 does not exist",
    );
    one_line_error(
        &["canonical", "--task", "copy", "--out", o],
        "unknown canonical task",
    );
    one_line_error(
        &["canonical", "--task", "index", "--band", "mid", "--out", o],
        "unknown band",
    );
    one_line_error(
        &[
            "canonical",
            "--task",
            "retrieval",
            "--symbols",
            "4",
            "--out",
            o,
        ],
        "distinct symbols",
    );
    one_line_error(
        &["canonical", "--task", "index", "--len", "1", "--out", o],
        "at least 2 items",
    );
    // Two names for one set of planes train one model twice (twenty-third pass, CB13).
    one_line_error(
        &[
            "canonical",
            "--task",
            "index",
            "--d-model",
            "16",
            "--band",
            "all",
            "--band",
            "planes=0-7",
            "--out",
            o,
        ],
        "keep the same planes",
    );
    assert!(!out.exists(), "a refused experiment wrote nothing");
}

#[test]
fn mask_writes_the_drop_per_hop_and_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("number");
    let run = run.to_str().unwrap();
    common::ok(common::ropelab(&[
        "train", "--task", "number", "--preset", "tiny", "--steps", "4", "--out", run,
    ]));
    let stdout = common::ok(common::ropelab(&[
        "mask", "--run", run, "--layers", "each", "--layers", "0-1", "--band", "no-high", "--band",
        "low", "--n", "16",
    ]));
    assert!(stdout.contains("unmasked accuracy"), "{stdout}");
    let csv = std::fs::read_to_string(std::path::Path::new(run).join("mask.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "layers,band,planes_kept,planes_total,hop,n,baseline,accuracy,drop"
    );
    // 3 groups x 2 bands x (all + 4 hops).
    assert_eq!(lines.len(), 1 + 3 * 2 * 5);
    assert!(
        lines[1].starts_with("0,no-high,3,4,all,16,"),
        "{}",
        lines[1]
    );
    assert!(lines.iter().any(|l| l.starts_with("0-1,low,")), "{csv}");
    // Each hop's rows count that hop's samples: together the 16 (seventeenth pass, SILENT-6).
    let per_hop: usize = lines[2..6]
        .iter()
        .map(|l| l.split(',').nth(5).unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(per_hop, 16, "{csv}");
    common::refused(
        &["mask", "--run", run, "--layers", "2"],
        "layer 2 does not exist",
    );
    common::refused(
        &["mask", "--run", run, "--band", "planes=7"],
        "plane 7 does not exist",
    );
    common::refused(&["mask", "--run", run, "--band", "middle"], "unknown band");
    let missing = dir.path().join("none");
    common::refused(&["mask", "--run", missing.to_str().unwrap()], "none");
}
