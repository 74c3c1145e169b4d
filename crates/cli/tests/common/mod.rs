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
