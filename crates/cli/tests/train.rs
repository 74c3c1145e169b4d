//! `ropelab train` / `eval` end to end on the tiny preset: determinism, kill -9 and resume,
//! divergence, and bad input.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ropelab_tasks::TaskKind;
use ropelab_train::Preset;

mod common;
use common::train_tiny;

fn ropelab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ropelab"))
        .args(args)
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .expect("the binary runs")
}

fn ok(out: Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn one_line_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected a failure");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(needle), "{needle:?} not in {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `ropelab train --task TASK --preset tiny --steps STEPS --out OUT`, then `more` flags.
fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fused kernel and candle's composed ops train the same model: the logged losses and
/// validation accuracies of a 300-step tiny run (dropout on) agree to float tolerance.
#[test]
fn fused_and_composed_engines_give_the_same_loss_curve() {
    let dir = tempfile::tempdir().unwrap();
    let run = |engine: &str| {
        let out = dir.path().join(engine);
        ok(ropelab(&[
            "train",
            "--task",
            "number",
            "--preset",
            "tiny",
            "--steps",
            "300",
            "--engine",
            engine,
            "--out",
            out.to_str().unwrap(),
        ]));
        let text = String::from_utf8(read(&out.join("metrics.jsonl"))).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    let (fused, composed) = (run("fused"), run("composed"));
    assert_eq!(fused.len(), composed.len());
    let (mut worst, mut first, mut last) = (0f64, 0f64, 0f64);
    for (f, c) in fused.iter().zip(&composed) {
        assert_eq!(f["step"], c["step"]);
        if let (Some(lf), Some(lc)) = (f["loss"].as_f64(), c["loss"].as_f64()) {
            worst = worst.max((lf - lc).abs() / lc.abs());
            (first, last) = (if first == 0.0 { lc } else { first }, lc);
        }
        if let (Some(af), Some(ac)) = (f["val"]["loss"].as_f64(), c["val"]["loss"].as_f64()) {
            assert!((af - ac).abs() <= 1e-3 * ac, "val loss {af} vs {ac}");
        }
    }
    assert!(worst < 1e-4, "largest relative loss difference {worst}");
    // The comparison means something only if training moved the model.
    assert!(
        last < first - 0.05,
        "the run must learn: loss {first} -> {last}"
    );
    eprintln!("largest relative loss difference {worst:e}");
}

#[test]
fn same_seed_gives_identical_metrics_and_weights() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, seed: &str| {
        let out = dir.path().join(name);
        ok(ropelab(&[
            "train",
            "--task",
            "letter",
            "--preset",
            "tiny",
            "--seed",
            seed,
            "--out",
            out.to_str().unwrap(),
        ]));
        out
    };
    let (a, b, c) = (run("a", "1"), run("b", "1"), run("c", "2"));
    let weights = "checkpoints/step-000040/model.safetensors";
    assert_eq!(
        read(&a.join("metrics.jsonl")),
        read(&b.join("metrics.jsonl"))
    );
    assert_eq!(read(&a.join(weights)), read(&b.join(weights)));
    assert_ne!(read(&a.join(weights)), read(&c.join(weights)));
    for file in [
        "config.json",
        "ropelab.json",
        "state.json",
        "optimizer.safetensors",
    ] {
        assert!(
            a.join("checkpoints/step-000040").join(file).is_file(),
            "{file}"
        );
    }
    let hf: serde_json::Value =
        serde_json::from_slice(&read(&a.join("checkpoints/step-000040/config.json"))).unwrap();
    assert_eq!(hf["model_type"], "gptj");
    assert_eq!(hf["vocab_size"], 129);

    let text = ok(ropelab(&[
        "eval",
        "--run",
        a.to_str().unwrap(),
        "--extra",
        "3",
        "--n",
        "50",
    ]));
    assert!(text.contains("accuracy"), "{text}");
    let report: serde_json::Value =
        serde_json::from_slice(&read(&a.join("eval/step-000040-extra-3-n50.json"))).unwrap();
    assert_eq!(report["seq_len"], 20);
    assert_eq!(report["n"], 50);
    // The whole test split and a part of it are kept apart.
    ok(ropelab(&[
        "eval",
        "--run",
        a.to_str().unwrap(),
        "--extra",
        "3",
    ]));
    ok(ropelab(&[
        "eval",
        "--run",
        a.to_str().unwrap(),
        "--extra",
        "3",
        "--n",
        "8",
    ]));
    let whole: serde_json::Value =
        serde_json::from_slice(&read(&a.join("eval/step-000040-extra-3.json"))).unwrap();
    let part: serde_json::Value =
        serde_json::from_slice(&read(&a.join("eval/step-000040-extra-3-n8.json"))).unwrap();
    assert_eq!(part["n"], 8);
    assert!(whole["n"].as_u64().unwrap() > 8, "{whole}");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&read(
            &a.join("eval/step-000040-extra-3-n50.json")
        ))
        .unwrap()["n"],
        50
    );
}

#[test]
fn a_killed_run_resumes_to_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let steps = "3000";
    let killed = dir.path().join("killed");
    let whole = dir.path().join("whole");
    let args = |out: &Path| {
        vec![
            "train".to_owned(),
            "--task".into(),
            "number".into(),
            "--preset".into(),
            "tiny".into(),
            "--steps".into(),
            steps.into(),
            "--save-every".into(),
            "25".into(),
            "--out".into(),
            out.to_str().unwrap().to_owned(),
        ]
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_ropelab"))
        .args(args(&killed))
        .env("RAYON_NUM_THREADS", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let marker = killed.join("checkpoints/step-000050/state.json");
    let start = Instant::now();
    while !marker.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(
        !killed.join("checkpoints/step-003000").exists(),
        "the run finished before it was killed"
    );

    let out = ropelab(&["train", "--resume", "--out", killed.to_str().unwrap()]);
    let text = ok(out);
    assert!(text.contains("resuming"), "{text}");
    let args_whole = args(&whole);
    ok(ropelab(
        &args_whole.iter().map(String::as_str).collect::<Vec<_>>(),
    ));

    let weights = "checkpoints/step-003000/model.safetensors";
    assert_eq!(read(&killed.join(weights)), read(&whole.join(weights)));
    assert_eq!(
        read(&killed.join("metrics.jsonl")),
        read(&whole.join("metrics.jsonl"))
    );
}

#[test]
fn a_diverging_run_stops_and_keeps_its_last_good_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Preset::Tiny.config(TaskKind::Number);
    config.optim.lr = 1e30;
    let path = dir.path().join("diverge.toml");
    std::fs::write(&path, config.to_toml()).unwrap();
    let run = dir.path().join("run");
    let out = ropelab(&[
        "train",
        "--config",
        path.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ]);
    one_line_error(&out, "the training loss became");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("step-000000"), "{err}");
    assert!(run
        .join("checkpoints/step-000000/model.safetensors")
        .is_file());

    // Saved every step and evaluated every step: the validation loss of step 1 is already no
    // number, so training stops there, before logging or saving it; saved every step but not
    // evaluated, the checkpoint of step 1 (whose weights gave step 2 its NaN loss) is no good
    // checkpoint, and analyses refuse it (twenty-first pass, N1).
    config.optim.lr = 1e12;
    config.optim.warmup = 0;
    config.optim.save_every = 1;
    for (eval_every, says) in [(1, "the validation loss became NaN at step 1"), (10, "")] {
        config.optim.eval_every = eval_every;
        std::fs::write(&path, config.to_toml()).unwrap();
        let run = dir.path().join(format!("run-{eval_every}"));
        let r = run.to_str().unwrap();
        let out = ropelab(&["train", "--config", path.to_str().unwrap(), "--out", r]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success() && err.contains(says), "{err}");
        assert!(
            err.contains("The last good checkpoint is") && err.contains("step-000000"),
            "{err}"
        );
        let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap_or_default();
        assert!(!metrics.contains("null"), "{metrics}");
        if run.join("checkpoints/step-000001").exists() {
            one_line_error(
                &ropelab(&["hops", "--run", r, "--n", "4"]),
                "its weights compute no finite logits",
            );
            // Nor is training resumed from them (twenty-third pass, TRn3).
            one_line_error(
                &ropelab(&["train", "--resume", "--out", r, "--steps", "1"]),
                "its weights compute no finite logits",
            );
        }
    }
}

#[test]
fn bad_training_input_gives_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let o = out_dir.to_str().unwrap();
    one_line_error(
        &ropelab(&["train", "--task", "number", "--preset", "huge", "--out", o]),
        "unknown preset",
    );
    one_line_error(
        &ropelab(&["train", "--resume", "--out", o]),
        "no such directory",
    );
    one_line_error(&ropelab(&["eval", "--run", o]), "no such directory");
    std::fs::create_dir_all(&out_dir).unwrap();
    one_line_error(&ropelab(&["train", "--resume", "--out", o]), "config.toml");

    let mut config = Preset::Tiny.config(TaskKind::Letter);
    for (field, value, needle) in [
        ("n_layers = 2", "n_layers = 0", "n_layers"),
        ("d_model = 16", "d_model = 17", "multiple of n_heads"),
        ("rotary_dim = 8", "rotary_dim = 9", "even"),
        ("rotary_dim = 8", "rotary_dim = 12", "larger than d_head"),
    ] {
        let path = dir.path().join("bad.toml");
        let text = config.to_toml().replace(field, value);
        assert_ne!(text, config.to_toml(), "{field} not found");
        std::fs::write(&path, text).unwrap();
        let run = dir.path().join("never");
        let out = ropelab(&[
            "train",
            "--config",
            path.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
        ]);
        one_line_error(&out, needle);
        one_line_error(&out, "bad.toml");
        assert!(!run.exists(), "a rejected config created {}", run.display());
    }
    config.optim.steps = 3;
    let path = dir.path().join("ok.toml");
    std::fs::write(&path, config.to_toml()).unwrap();
    let run = dir.path().join("twice");
    ok(ropelab(&[
        "train",
        "--config",
        path.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ]));
    let again = ropelab(&[
        "train",
        "--config",
        path.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ]);
    one_line_error(&again, "already holds a run");
    one_line_error(
        &ropelab(&["eval", "--run", run.to_str().unwrap(), "--step", "7"]),
        "no checkpoint at step 7",
    );
}

/// Two `train` processes started together on one run directory: one trains, the other is
/// refused with one line naming the holder's pid, and the run is the winner's alone. While
/// it trains, `train --resume` and `score` on the same directory are refused too; after it
/// exits (its lock released by the OS), they run.
#[test]
fn one_writer_per_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let spawn = |seed: &str| {
        Command::new(env!("CARGO_BIN_EXE_ropelab"))
            .args([
                "train",
                "--task",
                "number",
                "--preset",
                "tiny",
                "--steps",
                "1500",
                "--seed",
                seed,
                "--out",
                out.to_str().unwrap(),
            ])
            .env("RAYON_NUM_THREADS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("1"), spawn("2"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let (won, lost) = match (a.status.success(), b.status.success()) {
        (true, false) => ("1", b),
        (false, true) => ("2", a),
        other => panic!("exactly one train must succeed, got {other:?}"),
    };
    let err = String::from_utf8_lossy(&lost.stderr);
    assert!(
        err.contains("in use by another ropelab process (pid ")
            || err.contains("already holds a run"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let config = String::from_utf8_lossy(&read(&out.join("config.toml"))).into_owned();
    assert!(config.contains(&format!("seed = {won}")), "{config}");
    let metrics = String::from_utf8_lossy(&read(&out.join("metrics.jsonl"))).into_owned();
    let steps: Vec<u64> = metrics
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]),
        "steps out of order: {steps:?}"
    );

    // A run that is training refuses a second writer; a finished one does not.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ropelab"))
        .args([
            "train",
            "--resume",
            "--steps",
            "4000",
            "--out",
            out.to_str().unwrap(),
        ])
        .env("RAYON_NUM_THREADS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let lock = out.join(".ropelab.lock");
    let holder = child.id().to_string();
    while String::from_utf8_lossy(&read(&lock)).trim() != holder {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the resume never took the lock"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let refused = ropelab(&["score", "--run", out.to_str().unwrap(), "--samples", "4"]);
    one_line_error(&refused, &format!("pid {holder}"));
    let refused = ropelab(&["train", "--resume", "--out", out.to_str().unwrap()]);
    one_line_error(&refused, &format!("pid {holder}"));
    child.kill().unwrap(); // a dead holder's lock must not block
    child.wait().unwrap();
    ok(ropelab(&[
        "score",
        "--run",
        out.to_str().unwrap(),
        "--samples",
        "4",
    ]));
}

/// A run stopped before its step-0 checkpoint (config.toml and an empty checkpoints/ are all
/// there is) is started again by `--resume` and ends exactly like an uninterrupted run.
#[test]
fn a_run_stopped_before_its_first_checkpoint_resumes_from_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let (stopped, whole) = (dir.path().join("stopped"), dir.path().join("whole"));
    let args = |out: &Path| {
        vec![
            "train".to_owned(),
            "--task".into(),
            "letter".into(),
            "--preset".into(),
            "tiny".into(),
            "--steps".into(),
            "20".into(),
            "--out".into(),
            out.to_str().unwrap().to_owned(),
        ]
    };
    for out in [&stopped, &whole] {
        ok(ropelab(
            &args(out).iter().map(String::as_str).collect::<Vec<_>>(),
        ));
    }
    // What a kill during model set-up leaves behind.
    std::fs::remove_dir_all(stopped.join("checkpoints")).unwrap();
    std::fs::create_dir(stopped.join("checkpoints")).unwrap();
    // Checkpoints removed under a log of trained steps: refused, the log kept (issue 55).
    let logged = read(&stopped.join("metrics.jsonl"));
    let refused = ropelab(&["train", "--resume", "--out", stopped.to_str().unwrap()]);
    one_line_error(&refused, "up to step 20");
    assert_eq!(read(&stopped.join("metrics.jsonl")), logged);
    std::fs::write(stopped.join("metrics.jsonl"), "").unwrap();
    // And what a kill during a checkpoint save or a file write leaves (removed on resume).
    std::fs::create_dir(stopped.join("checkpoints/.tmp-step-x1y2")).unwrap();
    std::fs::write(stopped.join(".ropelab-abc123"), b"half").unwrap();
    let fresh = ropelab(
        &args(&stopped)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    one_line_error(&fresh, "--resume");
    ok(ropelab(&[
        "train",
        "--resume",
        "--out",
        stopped.to_str().unwrap(),
    ]));
    assert!(!stopped.join("checkpoints/.tmp-step-x1y2").exists());
    assert!(!stopped.join(".ropelab-abc123").exists());
    let weights = "checkpoints/step-000020/model.safetensors";
    assert_eq!(read(&stopped.join(weights)), read(&whole.join(weights)));
    assert_eq!(
        read(&stopped.join("metrics.jsonl")),
        read(&whole.join("metrics.jsonl"))
    );
}

/// A checkpoint describes itself: an edited config.toml (another RoPE base) is refused by
/// `eval` and `train --resume` in one line naming the setting and both values, and a state.json
/// whose step disagrees with its folder is not a resume point.
#[test]
fn an_edited_run_config_or_a_misplaced_state_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    ok(train_tiny("number", "10", &out, &[]));
    let config_path = out.join("config.toml");
    let original = String::from_utf8_lossy(&read(&config_path)).into_owned();
    assert!(original.contains("base = 10000.0"), "{original}");
    std::fs::write(
        &config_path,
        original.replace("base = 10000.0", "base = 10.0"),
    )
    .unwrap();
    for args in [
        vec!["eval", "--run", out.to_str().unwrap()],
        vec![
            "train",
            "--resume",
            "--steps",
            "20",
            "--out",
            out.to_str().unwrap(),
        ],
    ] {
        let refused = ropelab(&args);
        one_line_error(
            &refused,
            "base = 10 but checkpoint step-000010 was trained with",
        );
        assert!(String::from_utf8_lossy(&refused.stderr).contains("10000"));
    }
    std::fs::write(&config_path, &original).unwrap();
    let state = out.join("checkpoints/step-000010/state.json");
    let text = String::from_utf8_lossy(&read(&state)).into_owned();
    std::fs::write(&state, text.replace("\"step\": 10", "\"step\": 7")).unwrap();
    let resume = [
        "train",
        "--resume",
        "--steps",
        "20",
        "--out",
        out.to_str().unwrap(),
    ];
    // The manifest catches the edit first; without one the checkpoint is refused as
    // unverified, and with --force (a checkpoint from before manifests) the step check does.
    one_line_error(&ropelab(&resume), "state.json does not match its checksum");
    std::fs::remove_file(out.join("checkpoints/step-000010/manifest.json")).unwrap();
    one_line_error(
        &ropelab(&resume),
        "checkpoint is unverified: it has no manifest.json",
    );
    let mut forced = resume.to_vec();
    forced.push("--force");
    one_line_error(
        &ropelab(&forced),
        "records step 7 but sits in the folder of step 10",
    );
    // A sealed checkpoint folder renamed to another step is refused by the readers too, not
    // measured under the folder's step (eighth pass, K014-K016).
    let moved = dir.path().join("moved");
    ok(train_tiny("number", "10", &moved, &[]));
    std::fs::rename(
        moved.join("checkpoints/step-000010"),
        moved.join("checkpoints/step-000025"),
    )
    .unwrap();
    for args in [
        vec!["eval", "--run", moved.to_str().unwrap(), "--n", "8"],
        vec!["score", "--run", moved.to_str().unwrap(), "--samples", "4"],
    ] {
        one_line_error(
            &ropelab(&args),
            "records step 10 but sits in the folder of step 25",
        );
    }
    assert!(!moved.join("eval").exists() && !moved.join("scores.jsonl").exists());
}

/// A checkpoint or a training log copied from another run (a longer run of the same
/// settings included), and a config.toml whose steps were lowered after training, are
/// refused by name by the readers and by `train --resume` (which otherwise finished nothing
/// and said it was done) (ninth pass).
#[test]
fn another_runs_checkpoint_or_log_and_lowered_steps_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (long, short) = (dir.path().join("long"), dir.path().join("short"));
    ok(train_tiny("number", "20", &long, &[]));
    ok(train_tiny("number", "10", &short, &[]));
    let at = |run: &Path| run.to_str().unwrap().to_owned();
    let resume = |run: &Path| ropelab(&["train", "--resume", "--out", &at(run)]);
    let eval = |run: &Path| ropelab(&["eval", "--run", &at(run), "--n", "8"]);
    // A checkpoint of the longer run, under its own step.
    let copied = short.join("checkpoints/step-000020");
    copy_dir(&long.join("checkpoints/step-000020"), &copied);
    for refused in [resume(&short), eval(&short)] {
        one_line_error(&refused, "belongs to another run");
    }
    std::fs::remove_dir_all(&copied).unwrap();
    // Its training log.
    let log = std::fs::read(short.join("metrics.jsonl")).unwrap();
    std::fs::copy(long.join("metrics.jsonl"), short.join("metrics.jsonl")).unwrap();
    one_line_error(&resume(&short), "line 1 was logged by another run");
    common::refused(&["report", &at(&short)], "was measured on another run");
    std::fs::write(short.join("metrics.jsonl"), &log).unwrap();
    // config.toml's steps lowered after training.
    let config = std::fs::read_to_string(short.join("config.toml")).unwrap();
    assert!(config.contains("steps = 10\n"), "{config}");
    std::fs::write(
        short.join("config.toml"),
        config.replace("steps = 10\n", "steps = 5\n"),
    )
    .unwrap();
    for refused in [resume(&short), eval(&short)] {
        one_line_error(
            &refused,
            "config.toml says optim.steps = 5 but the run was started with optim.steps = 10",
        );
    }
    std::fs::write(short.join("config.toml"), &config).unwrap();
    ok(resume(&short));
    ok(eval(&short));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Every checkpoint is sealed by a manifest of checksums: flipped bytes in its weights are
/// reported as corruption by `eval` (which writes nothing) and `train --resume`.
#[test]
fn corrupted_checkpoints_are_reported_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    ok(train_tiny("letter", "10", &out, &[]));
    let ckpt = out.join("checkpoints/step-000010");
    let manifest: serde_json::Value =
        serde_json::from_slice(&read(&ckpt.join("manifest.json"))).unwrap();
    assert_eq!(
        manifest["sha256"].as_object().unwrap().len(),
        5,
        "{manifest}"
    );
    let weights = ckpt.join("model.safetensors");
    let mut bytes = read(&weights);
    let at = bytes.len() - 100; // inside the tensor data
    bytes[at] ^= 0x5a;
    std::fs::write(&weights, &bytes).unwrap();
    let refused = ropelab(&["eval", "--run", out.to_str().unwrap()]);
    one_line_error(
        &refused,
        "checkpoint is corrupted: model.safetensors does not match its checksum",
    );
    assert!(!out.join("eval").exists(), "a failed eval wrote a report");
    let refused = ropelab(&[
        "train",
        "--resume",
        "--steps",
        "20",
        "--out",
        out.to_str().unwrap(),
    ]);
    one_line_error(&refused, "checkpoint is corrupted");
}

/// Ctrl-C (SIGINT) while a large file is being written removes its temporary file: nothing is
/// left behind and the target never appears half-written.
#[test]
fn an_interrupted_write_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("big.jsonl");
    let child = Command::new(env!("CARGO_BIN_EXE_ropelab"))
        .args([
            "gen",
            "number",
            "--n",
            "50000000",
            "--out",
            target.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let hidden = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".ropelab-"))
            .count()
    };
    let start = Instant::now();
    while hidden() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no temporary file appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert_eq!(hidden(), 0, "a temporary file was left behind");
    assert!(!target.exists(), "a half-written target appeared");
}

/// `--keep-last` / `--keep-every` bound the checkpoints on disk; the run still resumes.
#[test]
fn checkpoint_retention_bounds_the_disk_use() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    ok(train_tiny(
        "number",
        "100",
        &out,
        &[
            "--save-every",
            "10",
            "--keep-last",
            "2",
            "--keep-every",
            "50",
        ],
    ));
    let mut kept: Vec<String> = std::fs::read_dir(out.join("checkpoints"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(
        kept,
        ["step-000000", "step-000050", "step-000090", "step-000100"]
    );
    ok(ropelab(&[
        "train",
        "--resume",
        "--steps",
        "120",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert!(out.join("checkpoints/step-000120").is_dir());
    assert!(!out.join("checkpoints/step-000090").exists());
}

/// A new run is not made inside another run, a checkpoint or a sweep's or study's directory
/// (issue 55, third pass): nothing is written there.
#[test]
fn a_run_is_not_made_inside_another_ropelab_directory() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let r = run.to_str().unwrap();
    let tiny = [
        "train", "--task", "number", "--preset", "tiny", "--steps", "2",
    ];
    let trained = ropelab(&[&tiny[..], &["--out", r]].concat());
    assert!(trained.status.success());
    let sweep = dir.path().join("sweep");
    std::fs::create_dir(&sweep).unwrap();
    std::fs::write(sweep.join("plan.json"), "{}").unwrap();
    let checkpoint = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // A model directory (a copy of the tiny Llama fixture) is not a run's directory.
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rope_models/llama");
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture.join(f), model.join(f)).unwrap();
    }
    let got = ropelab(&[&tiny[..], &["--out", model.to_str().unwrap()]].concat());
    assert!(
        !got.status.success(),
        "a run was trained into a model directory"
    );
    assert!(String::from_utf8_lossy(&got.stderr).contains("is a model directory"));
    assert!(!model.join("config.toml").exists());
    for (inside, what) in [
        (run.join("inner"), "the run"),
        (checkpoint.join("inner"), "the checkpoint"),
        (
            sweep.join("job"),
            "the sweep, study or experiment directory",
        ),
    ] {
        let got = ropelab(&[&tiny[..], &["--out", inside.to_str().unwrap()]].concat());
        let err = String::from_utf8_lossy(&got.stderr);
        assert!(!got.status.success(), "{} was trained", inside.display());
        assert!(err.contains(what), "{err}");
        assert!(!inside.exists());
    }
}

/// A run extended with `--steps` and resumed again without it continues towards the length its
/// latest checkpoint was trained for, not config.toml's shorter one (fifth pass: "resuming at
/// step 30 of 20").
#[test]
fn an_extended_run_resumes_towards_its_extended_length() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let r = run.to_str().unwrap();
    ok(ropelab(&[
        "train",
        "--task",
        "number",
        "--preset",
        "tiny",
        "--steps",
        "20",
        "--save-every",
        "10",
        "--out",
        r,
    ]));
    // A run keeps its model: --preset with --resume is refused, not ignored (eighth pass, a088).
    let out = ropelab(&["train", "--resume", "--preset", "paper", "--out", r]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let extended = ok(ropelab(&["train", "--resume", "--steps", "30", "--out", r]));
    assert!(extended.contains("at step 20 of 30"), "{extended}");
    let again = ok(ropelab(&["train", "--resume", "--out", r]));
    assert!(again.contains("at step 30 of 30"), "{again}");
    one_line_error(
        &ropelab(&["train", "--resume", "--steps", "10", "--out", r]),
        "give at least 30 (or nothing, to finish its own 30)",
    );
    // The run's report says how long it was trained, not only config.toml's 20 (sixth pass).
    let html = dir.path().join("report.html");
    ok(ropelab(&["report", r, "--out", html.to_str().unwrap()]));
    let page = String::from_utf8(read(&html)).unwrap();
    assert!(
        page.contains("trained towards 30 steps")
            && page.contains("config.toml keeps the 20 it started with"),
        "the report does not say the run was extended"
    );
}

/// An analysis of one run may not be written as another run's file, even one that run has
/// not written yet: its report and ablation would read it as their own (sixth pass, A1).
#[test]
fn one_runs_measurement_is_not_written_into_another_run() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    ok(train_tiny("number", "2", &a, &[]));
    ok(train_tiny("number", "2", &b, &["--seed", "1"]));
    let target = a.join("scores.jsonl");
    one_line_error(
        &ropelab(&[
            "score",
            "--run",
            b.to_str().unwrap(),
            "--samples",
            "2",
            "--out",
            target.to_str().unwrap(),
        ]),
        "is a file of the run in",
    );
    assert!(!target.exists());
    // mask too, before its work (seventh pass, p3).
    let mask = a.join("mask.csv");
    one_line_error(
        &ropelab(&[
            "mask",
            "--run",
            b.to_str().unwrap(),
            "--n",
            "2",
            "--out",
            mask.to_str().unwrap(),
        ]),
        "is a file of the run in",
    );
    assert!(!mask.exists());
}

/// A run refused at its start leaves no run directory behind to resume (sixth pass, A5): bf16
/// with the composed engine is refused before the directory is made, and a learned position
/// table too short for the task's inputs (found at step 0's evaluation) removes what it made.
#[test]
fn a_run_refused_at_its_start_leaves_nothing_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    let mut bf16 = Preset::Tiny.config(TaskKind::Number);
    bf16.precision = ropelab_model::kernel::Precision::Bf16;
    let path = dir.path().join("bf16.toml");
    std::fs::write(&path, bf16.to_toml()).unwrap();
    let run = dir.path().join("bf16");
    one_line_error(
        &ropelab(&[
            "train",
            "--config",
            path.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
            "--engine",
            "composed",
        ]),
        "precision bf16 is computed by the fused engine",
    );
    assert!(!run.exists(), "a refused run made {}", run.display());
    let mut short = Preset::Tiny.config(TaskKind::Number);
    short.model.position = ropelab_model::PositionEncoding::Learned {
        max_len: 4,
        beyond: ropelab_model::Beyond::Error,
    };
    let path = dir.path().join("short.toml");
    std::fs::write(&path, short.to_toml()).unwrap();
    for existed in [false, true] {
        let run = dir.path().join(format!("short-{existed}"));
        if existed {
            std::fs::create_dir(&run).unwrap();
        }
        one_line_error(
            &ropelab(&[
                "train",
                "--config",
                path.to_str().unwrap(),
                "--out",
                run.to_str().unwrap(),
            ]),
            "max_len 4",
        );
        let left: Vec<_> = std::fs::read_dir(&run)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "left behind: {left:?}");
        assert_eq!(
            run.exists(),
            existed,
            "the directory is kept only if it was there"
        );
    }
}

/// A start killed before its config.toml was written leaves an empty checkpoints/ (and the
/// lock file): the same command trains it again (tenth pass, UNCLEAR-1).
#[test]
fn a_start_killed_before_its_config_trains_again() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    std::fs::create_dir_all(out.join("checkpoints")).unwrap();
    std::fs::write(out.join(".ropelab.lock"), b"").unwrap();
    ok(train_tiny("number", "4", &out, &[]));
    assert!(out.join("config.toml").is_file());
}
