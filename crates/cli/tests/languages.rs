//! `ropelab languages` end to end on a tiny grid, and its bad input as one-line errors.

mod common;

use common::{ok, refused as one_line_error, ropelab};

#[test]
fn a_tiny_experiment_prints_n_star_and_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lang");
    let text = ok(ropelab(&[
        "languages",
        "--lang",
        "ab-star,(aa)*",
        "--pe",
        "rope-periodic,nope,rope:1",
        "--steps",
        "3",
        "--per-length",
        "2",
        "--test-lengths",
        "41-43,60",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert!(text.contains("6 runs"), "{text}");
    for name in [
        "ab-star",
        "aa-star",
        "rope-periodic",
        "nope",
        "N*",
        "strongest MOD_m^r head",
        "contrast beyond",
        "range at 100 C_min",
    ] {
        assert!(text.contains(name), "{name} not in {text}");
    }
    let nstar = std::fs::read_to_string(out.join("nstar.csv")).unwrap();
    assert_eq!(nstar.lines().count(), 7);
    // Base 1 turns every plane by 1 rad per position: the certified range at C_min is 6
    // (`ropelab theory offset-range --g 1 --k 1`).
    let offset = std::fs::read_to_string(out.join("offset.csv")).unwrap();
    assert_eq!(offset.lines().count(), 1 + 2 * 3, "{offset}");
    assert!(
        offset.lines().nth(1).unwrap().ends_with(",6,1000000"),
        "{offset}"
    );
    assert!(out.join("heads.csv").exists());
    // Each of its figures on its own.
    let o = out.to_str().unwrap();
    for kind in ["n-star", "mod-heads", "language-accuracy:aa-star"] {
        let svg_path = dir.path().join("figure.svg");
        let svg_s = svg_path.to_str().unwrap();
        ok(ropelab(&["plot", kind, "--dir", o, "--out", svg_s]));
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{kind}");
    }
    let absent = ropelab(&[
        "plot",
        "language-accuracy:parity",
        "--dir",
        o,
        "--out",
        "x.svg",
    ]);
    let err = String::from_utf8_lossy(&absent.stderr);
    assert!(
        !absent.status.success() && err.contains("no rows of parity"),
        "{err}"
    );
    assert!(nstar.lines().skip(1).all(|l| l.ends_with(",60")), "{nstar}");
    // Another experiment's figure names the directory's kind, not a missing column.
    let other = ropelab(&["plot", "offset-accuracy", "--dir", o, "--out", "x.svg"]);
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(
        !other.status.success()
            && err.contains("holds a formal-language experiment, not the fixed-offset"),
        "{err}"
    );
}

#[test]
fn bad_input_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let o = out.to_str().unwrap();
    one_line_error(
        &["languages", "--lang", "(abc)*", "--out", o],
        "unknown language",
    );
    one_line_error(
        &["languages", "--pe", "rope:0", "--out", o],
        "the base must lie in",
    );
    one_line_error(
        &["languages", "--pe", "rope:-1e4", "--out", o],
        "the base must lie in",
    );
    one_line_error(
        &["languages", "--pe", "alibi", "--out", o],
        "unknown position encoding",
    );
    one_line_error(
        &["languages", "--test-lengths", "20,50", "--out", o],
        "test length 20 is not longer than the training lengths",
    );
    one_line_error(
        &["languages", "--test-lengths", "50-41", "--out", o],
        "backwards",
    );
    // Too few positions beyond training for the MOD heads: refused before training, not after
    // it (sixth pass, A406).
    one_line_error(
        &["languages", "--test-lengths", "41-42", "--out", o],
        "the longest test length 42 leaves 2 positions beyond the training lengths (up to 40)",
    );
    one_line_error(
        &["languages", "--protocol", "huge", "--out", o],
        "unknown protocol",
    );
    one_line_error(&["languages", "--lrs", "0", "--out", o], "learning rate");
    assert!(!out.exists(), "a refused experiment wrote nothing");
}
