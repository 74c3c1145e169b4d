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
