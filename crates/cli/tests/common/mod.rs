//! Helpers shared by the command-line tests.
#![allow(dead_code)] // each test file uses what it needs

use std::process::{Command, Output};

/// Runs the `ropelab` binary with `args`.
pub fn ropelab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ropelab"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// `ropelab train --task TASK --preset tiny --steps STEPS --out OUT` and `more`.
pub fn train_tiny(task: &str, steps: &str, out: &std::path::Path, more: &[&str]) -> Output {
    let mut args = vec![
        "train",
        "--task",
        task,
        "--preset",
        "tiny",
        "--steps",
        steps,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(more);
    ropelab(&args)
}

/// The standard output of a run that must succeed (its standard error otherwise).
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `ropelab args`, which must be refused with one line on standard error that contains
/// `needle` (and no panic).
pub fn refused(args: &[&str], needle: &str) {
    let out = ropelab(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected a failure: {args:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(needle), "{needle:?} not in {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The collected table of a sweep directory (after `ropelab collect`) without its timing
/// columns, one line per job.
pub fn collected_table(dir: &std::path::Path) -> String {
    ok(ropelab(&["collect", dir.to_str().unwrap()]));
    let csv = std::fs::read_to_string(dir.join("collected/jobs.csv")).unwrap();
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let header = rows.headers().unwrap().clone();
    let keep: Vec<usize> = (0..header.len())
        .filter(|&i| !header[i].ends_with("_seconds"))
        .collect();
    rows.records()
        .map(|r| {
            let r = r.unwrap();
            keep.iter()
                .map(|&i| r[i].to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The arguments of a tiny `ropelab offset` grid (one rotary softmax run of offset `k`,
/// trained 2 steps at lengths up to 8) into `out`.
pub fn tiny_offset<'a>(k: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "offset",
        "--pe",
        "rope",
        "--attention",
        "softmax",
        "--k",
        k,
        "--seeds",
        "0",
        "--train-len",
        "8",
        "--steps",
        "2",
        "--per-length",
        "2",
        "--out",
        out,
    ]
}
