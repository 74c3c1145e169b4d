//! `ropelab offset` end to end on a tiny grid, and its bad input as one-line errors.

mod common;

use common::{ok, refused as one_line_error, ropelab};

#[test]
fn a_tiny_experiment_prints_its_tables_and_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("offset");
    let text = ok(ropelab(&[
        "offset",
        "--pe",
        "rope,ape,nope",
        "--attention",
        "softmax,linear",
        "--k",
        "2",
        "--seeds",
        "0",
        "--train-len",
        "8",
        "--steps",
        "5",
        "--per-length",
        "8",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert!(text.contains("6 runs"), "{text}");
    // --train-len 8 sets the test lengths to 1 .. 8 x 8.
    for needle in [
        "8 (1x)",
        "12 (1.5x)",
        "64 (8x)",
        "equivariance",
        "dilution law",
        "ape",
    ] {
        assert!(text.contains(needle), "{needle} not in {text}");
    }
    let accuracy = std::fs::read_to_string(out.join("accuracy.csv")).unwrap();
    assert_eq!(
        accuracy.lines().next().unwrap(),
        "pe,attention,k,seed,train_len,test_len,n,accuracy,loss"
    );
    assert_eq!(accuracy.lines().count(), 1 + 6 * 7);
    assert!(out.join("runs.csv").exists() && out.join("mechanism.csv").exists());
    let o = out.to_str().unwrap();
    for kind in ["offset-accuracy", "offset-dilution", "offset-pinning"] {
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
    let html = dir.path().join("report.html");
    ok(ropelab(&["report", o, "--out", html.to_str().unwrap()]));
    assert!(std::fs::read_to_string(&html)
        .unwrap()
        .contains("Fixed-offset retrieval"));
}

#[test]
fn bad_input_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let o = out.to_str().unwrap();
    one_line_error(
        &["offset", "--k", "16", "--out", o],
        "offset 16 is not shorter than the training length 16",
    );
    one_line_error(
        &["offset", "--ape-beyond", "error", "--out", o],
        "beyond the learned position table of 16 rows",
    );
    one_line_error(
        &["offset", "--pe", "alibi", "--out", o],
        "unknown position encoding",
    );
    one_line_error(
        &["offset", "--pe", "rope:-1", "--out", o],
        "the base must lie in",
    );
    one_line_error(
        &["offset", "--attention", "flash", "--out", o],
        "unknown attention",
    );
    one_line_error(&["offset", "--test-lens", "64,32", "--out", o], "ascending");
    one_line_error(&["offset", "--k", "0", "--out", o], "at least 1");
    assert!(!out.exists(), "a refused experiment wrote nothing");
}

/// An experiment's directory is its own (sixth pass): a rerun with another grid says which of
/// its tables it replaced (A404); another experiment is refused there, before it trains; and
/// its tables, recorded in the directory's ledger, are no other command's `--out`.
#[test]
fn an_experiments_tables_are_replaced_aloud_and_by_no_other_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("offset");
    let o = out.to_str().unwrap();
    let offset = |k: &str| ropelab(&common::tiny_offset(k, o));
    let first = offset("2");
    assert!(first.status.success());
    assert!(!String::from_utf8_lossy(&first.stderr).contains("note: replaced"));
    let same = offset("2");
    assert!(same.status.success());
    assert!(
        !String::from_utf8_lossy(&same.stderr).contains("note: replaced"),
        "a rerun of the same grid replaces nothing"
    );
    let other = offset("3");
    assert!(other.status.success());
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(
        err.contains("note: replaced accuracy.csv, runs.csv, mechanism.csv in")
            && err.contains("another grid"),
        "{err}"
    );
    one_line_error(
        &["languages", "--steps", "1", "--out", o],
        "which measured.json lists as offset tables, not as languages tables",
    );
    assert!(!out.join("runs/ab-star").exists(), "nothing was trained");
    let table = out.join("accuracy.csv");
    let before = std::fs::read(&table).unwrap();
    one_line_error(
        &[
            "theory",
            "rope-stats",
            "--d",
            "16",
            "--bases",
            "100",
            "--lengths",
            "64",
            "--draws",
            "2",
            "--out",
            table.to_str().unwrap(),
        ],
        "accuracy.csv",
    );
    assert_eq!(std::fs::read(&table).unwrap(), before, "the table is kept");
    // A table changed by hand is not drawn by the report (seventh pass, t1).
    let mut edited = before.clone();
    edited.extend_from_slice(b"rope,softmax,9,0,8,8,2,1.0,0.0\n");
    std::fs::write(&table, edited).unwrap();
    let html = dir.path().join("r.html");
    one_line_error(
        &["report", o, "--out", html.to_str().unwrap()],
        "replaced after it was measured",
    );
    // Nor with its ledger removed: nothing there can be vouched for (twentieth pass, S1).
    std::fs::remove_file(out.join("measured.json")).unwrap();
    one_line_error(
        &["report", o, "--out", html.to_str().unwrap()],
        "measured.json is missing",
    );
    let svg = dir.path().join("a.svg");
    one_line_error(
        &[
            "plot",
            "offset-accuracy",
            "--dir",
            o,
            "--out",
            svg.to_str().unwrap(),
        ],
        "measured.json is missing",
    );
    // A run's own table edited by hand is never collected into the experiment's tables: its
    // job recorded it in the run's ledger, and the rerun measures it again (twenty-first pass,
    // N4).
    let lengths = out.join("runs/rope-softmax/k-3/seed-0/lengths.csv");
    let text = std::fs::read_to_string(&lengths).unwrap();
    let edited = format!("{text}{}\n", text.lines().last().unwrap());
    std::fs::write(&lengths, &edited).unwrap();
    assert!(offset("3").status.success());
    assert_eq!(std::fs::read_to_string(&lengths).unwrap(), text);
    // The collector itself refuses a table its run's ledger does not vouch for.
    std::fs::write(&lengths, &edited).unwrap();
    let err = ropelab_sweep::measure::read_run_csv::<ropelab_train::lengths::LengthAccuracy>(
        lengths.parent().unwrap(),
        "lengths.csv",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("lengths.csv") && err.contains("ledger vouches"),
        "{err}"
    );
    // Vouched for by a ledger recorded again over the edit, a row no measurement gives (more
    // correct than inputs) is still refused (twenty-second pass, S3).
    let mut rows: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect();
    let (n, correct) = (rows[1][1].clone(), rows[1][2].clone());
    assert!(correct.parse::<usize>().is_ok(), "{text}");
    rows[1][2] = (n.parse::<usize>().unwrap() + 3).to_string();
    let forged: String = rows.iter().map(|r| r.join(",") + "\n").collect();
    std::fs::write(&lengths, forged).unwrap();
    ropelab_io::Ledger::finish(
        lengths.parent().unwrap(),
        "lengths.csv",
        &ropelab_analysis::measure::keys::run_table("lengths.csv"),
    )
    .unwrap();
    // Its job's result no longer says what its files give, so a rerun measures the job again
    // (twenty-third pass, SWr) and the table holds what was measured.
    let err = ropelab_sweep::measure::read_run_lengths(lengths.parent().unwrap(), None, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("which no measurement gives"), "{err}");
    let rerun = offset("3");
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert_eq!(std::fs::read_to_string(&lengths).unwrap(), text);
}
