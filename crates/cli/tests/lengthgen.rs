//! `ropelab lengthgen` and `eval` at long lengths: the CSV, bounded memory, one-line errors.

mod common;

use common::{ok, ropelab};
use std::path::Path;
use std::process::Output;

fn one_line_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains(needle), "{needle:?} not in {err:?}");
    assert!(!err.contains("panicked"), "{err}");
}

fn tiny_run(root: &Path, task: &str) -> String {
    let run = root.join(task).to_str().unwrap().to_owned();
    ok(ropelab(&[
        "train", "--task", task, "--preset", "tiny", "--steps", "4", "--out", &run,
    ]));
    run
}

/// The "peak RSS N MiB" an `eval` or `lengthgen` run reports.
fn peak(stdout: &str) -> f64 {
    let at = stdout.find("peak RSS ").expect("peak RSS reported") + "peak RSS ".len();
    stdout[at..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn lengthgen_writes_accuracy_and_discrepancy_per_length() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path(), "number");
    let stdout = ok(ropelab(&[
        "lengthgen",
        "--run",
        &run,
        "--extras",
        "0,7,30",
        "--n",
        "12",
    ]));
    assert!(stdout.contains("lengths/s"), "{stdout}");
    let csv = std::fs::read_to_string(Path::new(&run).join("lengthgen.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "step,extra,length,n,accuracy,loss,hop_1,hop_2,hop_3,hop_4,\
         margin_L0H0,margin_L0H1,margin_L1H0,margin_L1H1,\
         top_weight_L0H0,top_weight_L0H1,top_weight_L1H0,top_weight_L1H1,run"
    );
    assert_eq!(lines.len(), 4);
    assert!(lines[3].starts_with("4,30,47,12,"), "{}", lines[3]);
    // The same file on a rerun; the same numbers to rounding with one sample per batch.
    let out = dir.path().join("again.csv");
    let again = |memory: &str| {
        ok(ropelab(&[
            "lengthgen",
            "--run",
            &run,
            "--extras",
            "0,7,30",
            "--n",
            "12",
            "--out",
            out.to_str().unwrap(),
            "--memory-mb",
            memory,
        ]));
        std::fs::read_to_string(&out).unwrap()
    };
    assert_eq!(again("256"), csv);
    let batched = again("1");
    let cells = |t: &str| -> Vec<f64> {
        t.lines()
            .skip(1)
            .flat_map(|l| {
                // Every column but the last, the run's identity.
                let cells: Vec<&str> = l.split(',').collect();
                cells[..cells.len() - 1]
                    .iter()
                    .map(|c| c.parse::<f64>().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    for (a, b) in cells(&batched).iter().zip(cells(&csv)) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
    }
    ok(ropelab(&[
        "lengthgen",
        "--run",
        &run,
        "--extras",
        "3",
        "--n",
        "2",
        "--step",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .starts_with("0,3,20,2,"));
}

#[test]
fn lengthgen_rejects_bad_input_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path(), "letter");
    for (extras, needle) in [("-5", "-5"), ("8,x", "\"x\""), ("", "\"\""), ("1.5", "1.5")] {
        let out = ropelab(&["lengthgen", "--run", &run, "--extras", extras]);
        one_line_error(&out, needle);
    }
    one_line_error(
        &ropelab(&["lengthgen", "--run", &run, "--step", "3"]),
        "no checkpoint at step 3",
    );
    one_line_error(&ropelab(&["lengthgen", "--run", &run, "--n", "0"]), "--n");
    let missing = dir.path().join("missing");
    one_line_error(
        &ropelab(&["lengthgen", "--run", missing.to_str().unwrap()]),
        "missing",
    );
    // A run without checkpoints.
    std::fs::remove_dir_all(Path::new(&run).join("checkpoints")).unwrap();
    one_line_error(&ropelab(&["lengthgen", "--run", &run]), "checkpoint");
    // A run of another task layout: its config asks for hops its windows cannot hold.
    let other = tiny_run(dir.path(), "number");
    let config = Path::new(&other).join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("pre_window = 8", "pre_window = 1")).unwrap();
    one_line_error(&ropelab(&["lengthgen", "--run", &other]), "config.toml");
    assert!(!Path::new(&other).join("lengthgen.csv").exists());
}

#[test]
fn eval_peak_memory_does_not_grow_with_the_number_of_samples() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path(), "number");
    // Length 417: one sequence's forward pass is about 7 MB in this model.
    let eval = |n: &str, memory: &str| {
        peak(&ok(ropelab(&[
            "eval",
            "--run",
            &run,
            "--extra",
            "400",
            "--n",
            n,
            "--memory-mb",
            memory,
        ])))
    };
    let (small, large) = (eval("24", "8"), eval("48", "8"));
    assert!(
        large < small + 12.0,
        "batched: {small} MiB for 24, {large} MiB for 48"
    );
    // The check can fail: one batch of everything grows with n.
    let (small, large) = (eval("24", "4096"), eval("48", "4096"));
    assert!(
        large > small + 60.0,
        "one batch: {small} MiB for 24, {large} MiB for 48"
    );
}
