//! `ropelab pure-heads`: every scored number/letter run under a directory, one row per distinct
//! model (a copied run counted once), a verdict per task, and bad input as one-line errors.

mod common;

use common::{ok, refused, ropelab};

#[test]
fn pure_heads_finds_each_model_once_and_judges_each_task() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let train = |name: &str, task: &str| {
        let path = runs.join(name).to_str().unwrap().to_owned();
        ok(ropelab(&[
            "train", "--task", task, "--preset", "tiny", "--steps", "4", "--out", &path,
        ]));
        ok(ropelab(&["score", "--run", &path, "--samples", "8"]));
        path
    };
    let number = train("a/number", "number");
    train("a/letter", "letter");
    // A copy of the number run: the same final weights.
    let copy = runs.join("b/number");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    let status = std::process::Command::new("cp")
        .args(["-r", &number, copy.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = ok(ropelab(&["pure-heads", "--dir", runs.to_str().unwrap()]));
    assert!(
        out.contains("b/number: the same final weights as a/number, counted once"),
        "{out}"
    );
    // One model per task: too few to judge.
    assert!(out.contains("number: 1 models"), "{out}");
    assert!(out.contains("fewer than the 6 needed"), "{out}");
    let csv = std::fs::read_to_string(runs.join("pure_heads.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "run,task,step,heads,positional,symbolic,pure_share,accuracy,tested,pure_step,rise_step"
    );
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[1].starts_with("a/letter,letter,4,"), "{csv}");
    let svg = std::fs::read_to_string(runs.join("pure_heads.svg")).unwrap();
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{svg}");
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    refused(
        &["pure-heads", "--dir", empty.to_str().unwrap()],
        "no scored number or letter run",
    );
    refused(
        &[
            "pure-heads",
            "--dir",
            dir.path().join("none").to_str().unwrap(),
        ],
        "no such directory",
    );
    refused(
        &[
            "pure-heads",
            "--dir",
            runs.to_str().unwrap(),
            "--gamma",
            "0.7",
        ],
        "0.7",
    );
}

/// A run extended after it was scored is counted at its scored checkpoint with that
/// checkpoint's accuracy, not a later one's (tenth pass, S1); a directory whose only run cannot
/// be read says why (U1).
#[test]
fn a_model_is_counted_at_the_step_it_was_scored() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("runs/a");
    let path = run.to_str().unwrap();
    // Seed 1: validation accuracy 0.015625 at step 20, 0 at step 30.
    ok(common::train_tiny("number", "20", &run, &["--seed", "1"]));
    ok(ropelab(&["score", "--run", path, "--samples", "8"]));
    ok(ropelab(&[
        "train", "--resume", "--steps", "30", "--out", path,
    ]));
    let runs = dir.path().join("runs");
    ok(ropelab(&["pure-heads", "--dir", runs.to_str().unwrap()]));
    let csv = std::fs::read_to_string(runs.join("pure_heads.csv")).unwrap();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(row[2], "20", "{csv}");
    // The validation accuracy logged at step 20.
    let log = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let at_20: serde_json::Value = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["step"] == 20 && v.get("val").is_some())
        .unwrap();
    let want = at_20["val"]["accuracy"].as_f64().unwrap();
    assert_eq!(want, 0.015625, "the seed no longer tells the steps apart");
    assert_eq!(row[7].parse::<f64>().unwrap(), want, "{csv}");
    assert_eq!(row[8], "false", "{csv}");
    // Its log replaced by another run's: refused, and the reason is given.
    let other = dir.path().join("other");
    ok(common::train_tiny("number", "20", &other, &["--seed", "5"]));
    std::fs::copy(other.join("metrics.jsonl"), run.join("metrics.jsonl")).unwrap();
    refused(
        &["pure-heads", "--dir", runs.to_str().unwrap()],
        "was measured on another run",
    );
}

/// One run found in two folders, trained to two lengths, is one model's training: counted
/// once (twelfth pass, S4).
#[test]
fn a_run_and_its_continuation_count_once() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let (x, y) = (runs.join("x"), runs.join("y"));
    ok(common::train_tiny("number", "4", &x, &[]));
    ok(ropelab(&[
        "score",
        "--run",
        x.to_str().unwrap(),
        "--samples",
        "8",
    ]));
    let copied = std::process::Command::new("cp")
        .args(["-r", x.to_str().unwrap(), y.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(copied.success());
    let y_path = y.to_str().unwrap();
    ok(ropelab(&[
        "train", "--resume", "--steps", "8", "--out", y_path,
    ]));
    ok(ropelab(&["score", "--run", y_path, "--samples", "8"]));
    let out = ok(ropelab(&["pure-heads", "--dir", runs.to_str().unwrap()]));
    assert!(out.contains("y: the same run as x"), "{out}");
    assert!(out.contains("number: 1 models"), "{out}");
}

/// A sweep job's test evaluation edited and its ledger entry re-sealed passes the checksum, but
/// says another accuracy than the job's `result.json`: the run is not read, and says why
/// (twenty-third pass, PH3).
#[test]
fn a_run_whose_evaluation_contradicts_its_result_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sweep.toml");
    std::fs::write(
        &file,
        "name = \"s\"\npreset = \"tiny\"\ntask = \"number\"\n[base]\noptim.steps = 8\n\
         data.train = 2000\ndata.test = 64\n[[axis]]\nkey = \"seed\"\nvalues = [0]\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    ok(ropelab(&[
        "sweep",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]));
    let before = ok(ropelab(&["pure-heads", "--dir", out.to_str().unwrap()]));
    assert!(!before.contains("not read"), "{before}");
    let job = std::fs::read_dir(out.join("jobs"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let run = job.join("run");
    let name = "eval/step-000008-extra-0.json";
    let path = run.join(name);
    let mut eval: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // Forged consistently with itself: every hop and the whole split at one value.
    let was = eval["accuracy"].as_f64().unwrap();
    let forged = if was > 0.5 { 0.0 } else { 1.0 };
    eval["accuracy"] = forged.into();
    for (_, v) in eval["per_hop"].as_object_mut().unwrap() {
        *v = forged.into();
    }
    std::fs::write(&path, serde_json::to_string_pretty(&eval).unwrap()).unwrap();
    let key = ropelab_io::Ledger::load(&run).unwrap().unwrap().files[name]
        .key
        .clone();
    ropelab_io::Ledger::finish(&run, name, &key).unwrap();
    let got = ropelab(&["pure-heads", "--dir", out.to_str().unwrap()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(text.contains("contradicts its run's files"), "{text}");
    assert!(!text.contains(&format!("{forged:.4}")), "{text}");
}
