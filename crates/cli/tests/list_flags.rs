//! Every flag that takes a list refuses a value given twice, in one line, with nothing
//! written: a repeated value repeats its work and gives a table two rows for one key (issue
//! 55, third pass). The list of flags is checked against the command tree by a unit test of
//! the binary, so a new list flag fails until it is added here.

mod common;

// `PARSED_LISTS` is read by the binary's unit test only.
#[allow(dead_code)]
#[path = "common/list_flags.rs"]
mod list_flags;

use common::{ok, ropelab};

#[test]
fn every_list_flag_refuses_a_value_given_twice() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run = run.to_str().unwrap();
    ok(ropelab(&[
        "train", "--task", "number", "--preset", "tiny", "--steps", "2", "--out", run,
    ]));
    let mut failures = vec![];
    for (i, (command, flag, args)) in list_flags::LIST_FLAGS.iter().enumerate() {
        let out = dir.path().join(format!("out-{i}"));
        let out = out.to_str().unwrap();
        let args: Vec<String> = args
            .iter()
            .map(|a| a.replace("{run}", run).replace("{out}", out))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let got = ropelab(&args);
        let err = String::from_utf8_lossy(&got.stderr);
        let refused = !got.status.success()
            && ["twice", "repeat", "each once", "ascending"]
                .iter()
                .any(|w| err.contains(w))
            && err.trim_end().lines().count() == 1
            && !std::path::Path::new(out).exists();
        if !refused {
            failures.push(format!(
                "{command} {flag}: status {:?}, wrote {}: {err}",
                got.status.code(),
                std::path::Path::new(out).exists()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Values that leave nothing to check are refused in one line, naming the flag's meaning,
/// instead of a table that claims a result for no input (issue 55, third pass).
#[test]
fn values_that_leave_nothing_to_check_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.csv");
    let out = out.to_str().unwrap();
    for (args, needle) in [
        (
            vec![
                "theory",
                "construct",
                "--mechanism",
                "index",
                "--letters",
                "0",
            ],
            "at least 1 letters",
        ),
        (
            vec![
                "theory",
                "construct",
                "--mechanism",
                "retrieval",
                "--letters",
                "1",
            ],
            "at least 2 letters",
        ),
        (
            vec!["theory", "offset-range", "--k", "0", "--out", out],
            "at least 1",
        ),
        (
            vec![
                "theory",
                "offset-range",
                "--k",
                "3",
                "--cap",
                "3",
                "--out",
                out,
            ],
            "must exceed",
        ),
        (
            vec![
                "canonical",
                "--task",
                "index",
                "--band",
                "sweep",
                "--window",
                "0",
                "--out",
                out,
            ],
            "--window 0",
        ),
        (
            vec![
                "canonical",
                "--task",
                "index",
                "--band",
                "sweep",
                "--window",
                "33",
                "--out",
                out,
            ],
            "--window 33",
        ),
        (
            vec![
                "canonical",
                "--task",
                "index",
                "--window",
                "4",
                "--out",
                out,
            ],
            "no --band sweep",
        ),
        // Random inputs no longer than the exhaustive ones check nothing new (fifth pass).
        (
            vec![
                "theory",
                "construct",
                "--mechanism",
                "index",
                "--n0",
                "5",
                "--long",
                "3",
            ],
            "must exceed --n0 5",
        ),
        // The zoo's fixed shapes read no preset and no task (issue 55, fourth pass).
        (
            vec!["bench", "train", "--model", "toy", "--preset", "tiny"],
            "--preset applies to --model gptj only",
        ),
        (
            vec!["bench", "train", "--model", "formal", "--task", "letter"],
            "--task applies to --model gptj only",
        ),
        // A bf16 path without a bf16 measurement would do nothing (twenty-first pass, S-D).
        (
            vec![
                "bench",
                "train",
                "--preset",
                "tiny",
                "--bf16-path",
                "emulated",
            ],
            "--bf16-path emulated applies to a bf16 measurement",
        ),
    ] {
        let got = ropelab(&args);
        let err = String::from_utf8_lossy(&got.stderr);
        assert!(!got.status.success(), "{args:?} ran");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!std::path::Path::new(out).exists(), "{args:?} wrote");
    }
}

/// A theory or pretrained table's `--out` that is a directory or a model's file is refused
/// before the work (nothing printed, nothing written), a model's shard index and a GGUF file
/// without its extension included; and a context length past the model's is said in a note
/// (issue 55, fifth pass).
#[test]
fn a_tables_out_is_checked_before_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rope_models/llama");
    let model = dir.path().join("model");
    std::fs::create_dir_all(&model).unwrap();
    for f in std::fs::read_dir(&fixture).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, model.join(f.file_name().unwrap())).unwrap();
    }
    std::fs::write(model.join("model.safetensors.index.json"), b"{}").unwrap();
    let gguf = dir.path().join("weights.bin");
    std::fs::write(&gguf, b"GGUF\x03\0\0\0").unwrap();
    let m = model.to_str().unwrap();
    let index = model.join("model.safetensors.index.json");
    let rope_stats = |out| {
        vec![
            "pretrained",
            "rope-stats",
            "--model",
            m,
            "--lengths",
            "64",
            "--draws",
            "5",
            "--out",
            out,
        ]
    };
    for (args, needle) in [
        (
            vec![
                "theory",
                "discrepancy",
                "--mechanism",
                "index",
                "--theta",
                "0.5",
                "--max-n",
                "5",
                "--out",
                dir.path().to_str().unwrap(),
            ],
            "it is a directory",
        ),
        (
            rope_stats(index.to_str().unwrap()),
            "in the model directory",
        ),
        (rope_stats(gguf.to_str().unwrap()), "a model's weights"),
    ] {
        let got = ropelab(&args);
        let err = String::from_utf8_lossy(&got.stderr);
        assert!(!got.status.success(), "{args:?} ran");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(got.stdout.is_empty(), "{args:?} worked first");
    }
    assert_eq!(std::fs::read(&index).unwrap(), b"{}");
    assert_eq!(std::fs::read(&gguf).unwrap(), b"GGUF\x03\0\0\0");
    // (An index beside the single file would be refused as two sets of weights.)
    std::fs::remove_file(&index).unwrap();
    let out = dir.path().join("rope.csv");
    let got = ropelab(&[
        "pretrained",
        "rope-stats",
        "--model",
        m,
        "--lengths",
        "64,1000",
        "--draws",
        "5",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(got.status.success(), "{err}");
    assert!(
        err.contains("M = 1000 beyond the model's context of 128"),
        "{err}"
    );
}
