//! No stale or foreign result is reused silently: a sweep whose `[base]` changed refuses its
//! old results, a job resumed after its last checkpoint writes the same result as one that was
//! never interrupted, weights follow the umask, and a finished run is never shortened by
//! `--resume --steps`.

mod common;

use std::path::Path;

use common::{collected_table, ok, refused, ropelab};

/// One job of the tiny number model.
fn spec(steps: usize) -> String {
    format!(
        "name = \"s\"\npreset = \"tiny\"\ntask = \"number\"\n\
         [base]\noptim.steps = {steps}\noptim.save_every = 20\ndata.train = 2000\ndata.test = 64\n\
         [[axis]]\nkey = \"seed\"\nvalues = [0]\n"
    )
}

fn sweep(spec: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "sweep",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ropelab(&args)
}

/// The only job directory of a one-job sweep.
fn job_dir(out: &Path) -> std::path::PathBuf {
    let mut jobs: Vec<_> = std::fs::read_dir(out.join("jobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    jobs.pop().unwrap()
}

/// The wall-time fields of a job's result.
const TIMES: [&str; 5] = [
    "setup_seconds",
    "train_seconds",
    "eval_seconds",
    "score_seconds",
    "length_seconds",
];

/// A JSON result without its wall-time fields.
fn without_times(text: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
    for key in TIMES {
        v.as_object_mut().unwrap().remove(key);
    }
    v
}

/// A result.json without its wall-time fields.
fn timeless(path: &Path) -> serde_json::Value {
    without_times(&std::fs::read_to_string(path).unwrap())
}

#[test]
fn a_sweep_whose_base_changed_refuses_its_old_result() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sweep.toml");
    let out = dir.path().join("out");
    std::fs::write(&file, spec(40)).unwrap();
    ok(sweep(&file, &out, &[]));
    let before = std::fs::read(job_dir(&out).join("result.json")).unwrap();
    let plan = std::fs::read(out.join("plan.json")).unwrap();

    std::fs::write(&file, spec(80)).unwrap();
    let rerun = sweep(&file, &out, &[]);
    let err = String::from_utf8_lossy(&rerun.stderr);
    assert!(!rerun.status.success(), "a stale result was reused: {err}");
    assert!(
        err.contains("optim.steps = 40") && err.contains("optim.steps = 80"),
        "{err}"
    );
    // A stale job is not helped by a rerun, and the refusal does not say it would be.
    assert!(
        !err.contains("run the same command again to retry") && err.contains("will not help"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // The plan its result was made by is kept (issue 55, third pass).
    assert_eq!(std::fs::read(out.join("plan.json")).unwrap(), plan);
    let listed = ok(sweep(&file, &out, &["--list"]));
    assert!(listed.contains("stale"), "{listed}");
    assert!(!listed.contains(" done "), "{listed}");
    // Nothing of the old job was touched.
    assert_eq!(
        std::fs::read(job_dir(&out).join("result.json")).unwrap(),
        before
    );
}

#[test]
fn a_job_resumed_after_its_last_checkpoint_writes_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sweep.toml");
    std::fs::write(&file, spec(40)).unwrap();
    let whole = dir.path().join("whole");
    ok(sweep(&file, &whole, &[]));
    let expected_table = collected_table(&whole);
    let expected = timeless(&job_dir(&whole).join("result.json"));
    assert!(
        expected["val_accuracy"].is_number(),
        "no validation accuracy: {expected}"
    );

    // A job killed after its last checkpoint (training done, measurement not written): only
    // the run directory is left.
    let resumed = dir.path().join("resumed");
    ok(sweep(&file, &resumed, &[]));
    let job = job_dir(&resumed);
    for leftover in ["result.json", "run/scores.jsonl", "run/lengthgen.csv"] {
        std::fs::remove_file(job.join(leftover)).unwrap();
    }
    std::fs::remove_dir_all(job.join("run/eval")).unwrap();
    std::fs::remove_file(job.join("run/measured.json")).ok();
    ok(sweep(&file, &resumed, &[]));
    assert_eq!(timeless(&job.join("result.json")), expected);
    assert_eq!(collected_table(&resumed), expected_table);
    let jsonl = |d: &Path| {
        std::fs::read_to_string(d.join("collected/jobs.jsonl"))
            .unwrap()
            .lines()
            .map(without_times)
            .collect::<Vec<_>>()
    };
    assert_eq!(jsonl(&resumed), jsonl(&whole));
}

/// Weights, optimizer state and every other file of a job follow the umask (a collaborator or
/// a cluster job under another user can read them), like a file this process creates.
#[cfg(unix)]
#[test]
fn every_file_of_a_job_follows_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sweep.toml");
    std::fs::write(&file, spec(20)).unwrap();
    let out = dir.path().join("out");
    ok(sweep(&file, &out, &[]));
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"x").unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let want = mode(&plain);
    let mut files = vec![];
    let mut stack = vec![out.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    assert!(
        files.iter().any(|p| p.ends_with("model.safetensors"))
            && files.iter().any(|p| p.ends_with("optimizer.safetensors")),
        "{files:?}"
    );
    for f in &files {
        assert_eq!(mode(f), want, "{} has mode {:o}", f.display(), mode(f));
    }
}

#[test]
fn resume_never_shortens_a_run_silently() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let run = run.to_str().unwrap();
    let out = ropelab(&["train", "--resume", "--steps", "20", "--out", run]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "shortened silently");
    assert!(
        err.contains("is at step 30") && err.contains("--steps 20"),
        "{err}"
    );
    // A refused start prints its error alone, not "training ..." first.
    let huge = dir.path().join("huge");
    let out = ropelab(&[
        "train",
        "--task",
        "number",
        "--preset",
        "paper",
        "--steps",
        "100000000000",
        "--out",
        huge.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "a refused run announced itself"
    );
}

/// A training log with the line of `step` changed by `edit`.
fn log_edited(text: &str, step: u64, edit: impl Fn(&mut serde_json::Value)) -> String {
    text.lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            if v["step"] == step {
                edit(&mut v);
            }
            format!("{v}\n")
        })
        .collect()
}

/// A finished 30-step run of the tiny number model (checkpoints every 10 steps) in `dir/run`.
fn tiny_run(dir: &Path) -> std::path::PathBuf {
    let run = dir.join("run");
    ok(ropelab(&[
        "train",
        "--task",
        "number",
        "--preset",
        "tiny",
        "--steps",
        "30",
        "--save-every",
        "10",
        "--out",
        run.to_str().unwrap(),
    ]));
    run
}

/// A torn last metrics line is restored on resume from the checkpoint that recorded it; a
/// garbage line in the middle is an error naming the file and the line, never dropped.
#[test]
fn metrics_lines_are_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let run_s = run.to_str().unwrap();
    let metrics = run.join("metrics.jsonl");
    let whole = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        whole.lines().last().unwrap().contains("\"step\":30"),
        "{whole}"
    );
    // Torn: the last line loses its end (and its newline).
    std::fs::write(&metrics, &whole[..whole.len() - 7]).unwrap();
    ok(ropelab(&["train", "--resume", "--out", run_s]));
    assert_eq!(std::fs::read_to_string(&metrics).unwrap(), whole);

    let mut lines: Vec<&str> = whole.lines().collect();
    lines[1] = "{not json";
    std::fs::write(&metrics, lines.join("\n") + "\n").unwrap();
    let out = ropelab(&["train", "--resume", "--out", run_s]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("metrics.jsonl") && err.contains("line 2 is not a metrics line"),
        "{err}"
    );
}

/// A small study: one seed, tiny models, no offset or canonical part.
const STUDY: &str = "name = \"small\"\nseeds = [3]\n[tasks]\ntrain = 500\nval = 20\n\
     test = 40\ntarget_window = 8\npre_window = 8\nhops = [1, 2, 3, 4]\n\
     [train]\npreset = \"tiny\"\nsteps = 5\n\
     [score]\nsamples = 10\n\
     [lengthgen]\nextras = [0, 20]\nsamples = 8\n\
     [theory]\nmax_n = 50\nd = 8\nbases = [100.0]\nlengths = [64]\ndraws = 2\nrho = 0.5\n";

/// The study's verdicts read only its own files: other commands cannot replace them, a
/// partial evaluation is not read as the test, and a file replaced by hand is refused.
#[test]
fn a_study_reads_only_the_files_it_measured() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("small.toml");
    std::fs::write(&config, STUDY).unwrap();
    let study = dir.path().join("study");
    let reproduce = [
        "reproduce",
        "--config",
        config.to_str().unwrap(),
        "--out",
        study.to_str().unwrap(),
    ];
    ok(ropelab(&reproduce));
    // A study given where a run is expected is named as one (twenty-fourth pass, UNCLEAR).
    let s = study.to_str().unwrap();
    for args in [
        vec!["eval", "--run", s],
        vec!["score", "--run", s],
        vec!["attention", "--run", s],
    ] {
        refused(&args, "is a study's or sweep's directory");
    }
    // The config the report shows is the one the study ran: edited after it, it is refused
    // (fifteenth pass, S-2).
    let toml = std::fs::read_to_string(study.join("config.toml")).unwrap();
    assert!(toml.contains("steps = "), "{toml}");
    std::fs::write(
        study.join("config.toml"),
        toml.replacen("steps = ", "steps = 1", 1),
    )
    .unwrap();
    let out = ropelab(&["report", study.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an edited study config was reported");
    assert!(err.contains("config.toml"), "{err}");
    // Nor drawn (sixteenth pass, S-2c).
    let svg = dir.path().join("f.svg");
    let out = ropelab(&[
        "plot",
        "failures",
        "--dir",
        study.to_str().unwrap(),
        "--out",
        svg.to_str().unwrap(),
    ]);
    assert!(
        !out.status.success() && !svg.exists(),
        "an edited study was drawn"
    );
    std::fs::write(study.join("config.toml"), &toml).unwrap();
    ok(ropelab(&["report", study.to_str().unwrap()]));
    // A ledger removed (the study's, or one model's) leaves nothing vouched for: the report
    // and the figures refuse, naming it (twentieth pass, S2).
    for folder in [study.clone(), study.join("seed-3/number")] {
        let ledger = folder.join("measured.json");
        let kept = std::fs::read(&ledger).unwrap();
        std::fs::remove_file(&ledger).unwrap();
        let out = ropelab(&["report", study.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("measured.json is missing"),
            "{}: {err}",
            folder.display()
        );
        let figure = ropelab(&[
            "plot",
            "length",
            "--dir",
            study.join("seed-3/number").to_str().unwrap(),
            "--out",
            svg.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&figure.stderr);
        if folder != study {
            assert!(
                !figure.status.success() && err.contains("measured.json is missing"),
                "{err}"
            );
        }
        std::fs::write(&ledger, kept).unwrap();
    }
    ok(ropelab(&["report", study.to_str().unwrap()]));
    // A pretrained model's file dropped into the study's pretrained/ folder is no stage of
    // the study: its ledger does not list it (sixteenth pass, O17).
    let stage = study.join("pretrained");
    std::fs::create_dir_all(&stage).unwrap();
    let line = r#"{"layer":0,"head":0,"s_pos":0.9,"s_sym":0.1,"entropy":1.0,"pure_0_1":"none","pure_0_05":"none","freq_mean_plane":1.0,"model":"m sha256:00","task":"number","size":16,"prompts":1,"tau":0.1,"shape":[1,1]}"#;
    std::fs::write(stage.join("score-number.jsonl"), format!("{line}\n")).unwrap();
    let out = ropelab(&["report", study.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("score-number.jsonl") && err.contains("not listed"),
        "{err}"
    );
    std::fs::remove_dir_all(&stage).unwrap();
    let claims = std::fs::read(study.join("claims.json")).unwrap();
    let model = study.join("seed-3/number");
    let m = model.to_str().unwrap();
    let scores = std::fs::read(model.join("scores.jsonl")).unwrap();
    let lengths = std::fs::read(model.join("lengthgen.csv")).unwrap();

    // A partial evaluation gets its own file; the study's test accuracy is unchanged.
    ok(ropelab(&["eval", "--run", m, "--n", "1"]));
    // Replacing the study's files is refused in one line, before any work.
    for args in [
        vec!["score", "--run", m, "--samples", "2"],
        vec!["lengthgen", "--run", m, "--extras", "0", "--n", "4"],
    ] {
        let out = ropelab(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} replaced a study file");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("measured.json") && err.contains("--out"),
            "{err}"
        );
    }
    // eval has no --out: a listed file its result would change (here: the ledger's record
    // of it altered) is refused before its table is printed, and the refusal offers no flag
    // eval lacks.
    let ledger = model.join("measured.json");
    let kept = std::fs::read_to_string(&ledger).unwrap();
    let record: serde_json::Value = serde_json::from_str(&kept).unwrap();
    let sha = record["files"]["eval/step-000005-extra-0.json"]["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(&ledger, kept.replace(&sha, &"0".repeat(64))).unwrap();
    let out = ropelab(&["eval", "--run", m]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains("copy of the run"), "{err}");
    std::fs::write(&ledger, kept).unwrap();
    let elsewhere = dir.path().join("mine.jsonl");
    ok(ropelab(&[
        "score",
        "--run",
        m,
        "--samples",
        "2",
        "--out",
        elsewhere.to_str().unwrap(),
    ]));
    assert!(elsewhere.exists());
    assert_eq!(std::fs::read(model.join("scores.jsonl")).unwrap(), scores);
    assert_eq!(std::fs::read(model.join("lengthgen.csv")).unwrap(), lengths);

    ok(ropelab(&reproduce));
    assert_eq!(
        String::from_utf8(std::fs::read(study.join("claims.json")).unwrap()).unwrap(),
        String::from_utf8(claims).unwrap()
    );

    // A file replaced by hand is refused, naming it.
    std::fs::copy(&elsewhere, model.join("scores.jsonl")).unwrap();
    let out = ropelab(&reproduce);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a replaced scores.jsonl was read");
    assert!(
        err.contains("seed-3/number/scores.jsonl") && err.contains("replaced"),
        "{err}"
    );

    // A model copied in from another study of the same seed and task (trained for one more
    // step) is refused by the report, naming its folder (ninth pass).
    let other_config = dir.path().join("other.toml");
    std::fs::write(&other_config, STUDY.replace("steps = 5", "steps = 6")).unwrap();
    let other = dir.path().join("other");
    ok(ropelab(&[
        "reproduce",
        "--config",
        other_config.to_str().unwrap(),
        "--out",
        other.to_str().unwrap(),
    ]));
    ok(ropelab(&["report", other.to_str().unwrap()]));
    std::fs::rename(&model, dir.path().join("own-model")).unwrap();
    std::fs::rename(other.join("seed-3/number"), &model).unwrap();
    let out = ropelab(&["report", study.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a copied-in model was reported");
    assert!(
        err.contains("seed-3/number/config.toml") && err.contains("another config"),
        "{err}"
    );
    // reproduce refuses it before writing anything: the study's config, datasets table and
    // plan are not rewritten (twelfth pass).
    let written = |f: &str| {
        std::fs::metadata(study.join(f))
            .unwrap()
            .modified()
            .unwrap()
    };
    let files = ["config.toml", "tasks.json", "plan.json"];
    let before = files.map(written);
    let out = ropelab(&reproduce);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a copied-in model was reproduced");
    assert!(
        err.contains("seed=3") && err.contains("no job was run"),
        "{err}"
    );
    assert_eq!(files.map(written), before, "{err}");
    // A rerun with another config that fails before its claims leaves the study's config
    // unvouched: the report refuses it rather than show a config its measurements did not use
    // (eighteenth pass, S2).
    std::fs::rename(&model, other.join("seed-3/number")).unwrap();
    std::fs::rename(dir.path().join("own-model"), &model).unwrap();
    let toml = std::fs::read_to_string(study.join("config.toml")).unwrap();
    assert!(toml.contains("    20,\n"), "{toml}");
    std::fs::write(
        study.join("config.toml"),
        toml.replace("    20,\n", "    10,\n"),
    )
    .unwrap();
    std::fs::write(
        &config,
        STUDY.replace("extras = [0, 20]", "extras = [0, 10]"),
    )
    .unwrap();
    let out = ropelab(&reproduce);
    assert!(!out.status.success(), "a stale length table was reused");
    let out = ropelab(&["report", study.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("config.toml"),
        "a config the study did not measure with was reported: {err}"
    );
}

/// `collect` says when the table is partial (a started job has no result yet) and lists the
/// unfinished jobs; on a directory with no finished job it fails and writes nothing.
#[test]
fn collect_says_when_its_table_is_partial() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = ropelab(&["collect", empty.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no finished job"));
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "wrote into an empty directory"
    );

    let file = dir.path().join("sweep.toml");
    std::fs::write(&file, spec(20).replace("values = [0]", "values = [0, 1]")).unwrap();
    let out_dir = dir.path().join("out");
    ok(sweep(&file, &out_dir, &[]));
    let full = ok(ropelab(&["collect", out_dir.to_str().unwrap()]));
    assert!(!full.contains("partial"), "{full}");
    assert!(!out_dir.join("collected/unfinished.txt").exists());
    // One job as a running sweep leaves it: started, no result yet.
    let mut jobs: Vec<_> = std::fs::read_dir(out_dir.join("jobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    jobs.sort();
    std::fs::remove_file(jobs[1].join("result.json")).unwrap();
    let partial = ok(ropelab(&["collect", out_dir.to_str().unwrap()]));
    let id = jobs[1].file_name().unwrap().to_str().unwrap();
    assert!(
        partial.contains("partial: 1 job(s) have no result yet: 1 started") && partial.contains(id),
        "{partial}"
    );
    let listed = std::fs::read_to_string(out_dir.join("collected/unfinished.txt")).unwrap();
    assert!(listed.contains(id), "{listed}");
    // The report says so too (tenth pass, SILENT-3).
    ok(ropelab(&["report", out_dir.to_str().unwrap()]));
    let page = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(
        page.contains("Partial: 1 planned or started job"),
        "not marked partial"
    );
}

/// A shard run with an edited sweep file does not replace the plan another shard's finished
/// job was made by: refused before anything is written (thirteenth pass, S7).
#[test]
fn a_shard_of_another_sweep_file_keeps_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let two = |steps| spec(steps).replace("values = [0]", "values = [0, 1]");
    let (first, second) = (dir.path().join("a.toml"), dir.path().join("b.toml"));
    std::fs::write(&first, two(20)).unwrap();
    std::fs::write(&second, two(30)).unwrap();
    let out = dir.path().join("out");
    ok(sweep(&first, &out, &["--shard", "0/2"]));
    let plan = std::fs::read(out.join("plan.json")).unwrap();
    let refused = sweep(&second, &out, &["--shard", "1/2"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a shard of another file ran");
    assert!(
        err.contains("plan.json") && err.contains("another run config"),
        "{err}"
    );
    assert_eq!(std::fs::read(out.join("plan.json")).unwrap(), plan);
    ok(sweep(&first, &out, &["--shard", "1/2"]));
    assert!(!ok(ropelab(&["collect", out.to_str().unwrap()])).contains("partial"));
}

/// A changed `[measure]` table is not answered with the old result (issue 55, item 2): the
/// finished job goes back to its measurement, which refuses by name the length test measured
/// at the old extras (training is kept); a job whose measurement does not change is measured
/// again from the files its ledger vouches for, with the same numbers.
#[test]
fn a_changed_measure_table_is_not_answered_with_the_old_result() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sweep.toml");
    let out = dir.path().join("out");
    std::fs::write(&file, spec(20)).unwrap();
    ok(sweep(&file, &out, &[]));
    let result = job_dir(&out).join("result.json");
    let before = timeless(&result);

    std::fs::write(&file, format!("{}[measure]\nextras = [0, 32]\n", spec(20))).unwrap();
    let rerun = sweep(&file, &out, &[]);
    let text = String::from_utf8_lossy(&rerun.stdout);
    let err = String::from_utf8_lossy(&rerun.stderr);
    assert!(!rerun.status.success(), "the old lengths were kept: {text}");
    assert!(!text.contains("1 already done"), "{text}");
    assert!(
        err.contains("lengthgen.csv") && err.contains("other settings"),
        "{err}"
    );
    // The old result stays as it was (nothing is lost), and is not collected as this sweep's.
    assert_eq!(timeless(&result), before);
    let collect = ropelab(&["collect", out.to_str().unwrap()]);
    assert!(!collect.status.success());
    assert!(
        String::from_utf8_lossy(&collect.stderr).contains("measured with other settings"),
        "{}",
        String::from_utf8_lossy(&collect.stderr)
    );

    // Moved away, the length test is measured at the new extras; nothing else is redone.
    let run = job_dir(&out).join("run");
    std::fs::rename(run.join("lengthgen.csv"), dir.path().join("old.csv")).unwrap();
    let again = ok(sweep(&file, &out, &[]));
    assert!(again.contains("1 run"), "{again}");
    let after = timeless(&result);
    assert_eq!(after["test_accuracy"], before["test_accuracy"]);
    assert!(after["length_accuracy"].get("49").is_some(), "{after}");
    assert!(before["length_accuracy"].get("49").is_none(), "{before}");
    // And a rerun with nothing changed is done.
    assert!(ok(sweep(&file, &out, &[])).contains("1 already done"));
}

/// `collect` pools only the jobs of the directory's plan (issue 55, item 4): a job of another
/// config copied in under its own id, a job copied under another job's directory name, a
/// result edited by hand and a directory with no plan are each refused by name, with nothing
/// written; a sharded sweep's collection says which planned jobs never ran.
#[test]
fn collect_pools_only_the_jobs_of_one_plan() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sweep.toml");
    let two = spec(20).replace("values = [0]", "values = [0, 1]");
    std::fs::write(&file, &two).unwrap();
    let out = dir.path().join("out");
    ok(sweep(&file, &out, &[]));
    let collected = out.join("collected");
    let clean = ok(ropelab(&["collect", out.to_str().unwrap()]));
    assert!(clean.contains("| 2 |") || clean.contains(" 2 "), "{clean}");
    std::fs::remove_dir_all(&collected).unwrap();
    let refused = |needle: &str| {
        let got = ropelab(&["collect", out.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&got.stderr).into_owned();
        assert!(
            !got.status.success(),
            "collected: {}",
            String::from_utf8_lossy(&got.stdout)
        );
        assert!(err.contains(needle), "{needle:?} not in {err}");
        assert!(!collected.exists(), "collect wrote a refused table");
        err
    };
    let jobs: Vec<std::path::PathBuf> = {
        let mut j: Vec<_> = std::fs::read_dir(out.join("jobs"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        j.sort();
        j
    };

    // A 40-step job of another sweep copied in under its own id.
    let other_file = dir.path().join("other.toml");
    std::fs::write(
        &other_file,
        spec(40).replace("values = [0]", "values = [7]"),
    )
    .unwrap();
    let other = dir.path().join("other");
    ok(sweep(&other_file, &other, &[]));
    let foreign = job_dir(&other);
    let copy = out.join("jobs").join(foreign.file_name().unwrap());
    copy_dir(&foreign, &copy);
    refused("is not a job of this directory's plan");
    std::fs::remove_dir_all(&copy).unwrap();

    // A job copied under another name (its id is not its directory's).
    let twin = out.join("jobs").join("j000000000000");
    copy_dir(&jobs[0], &twin);
    refused("is not a job of this directory's plan");
    // ... even when the plan is edited to list the copy too: one job counts once.
    let plan_path = out.join("plan.json");
    let plan_text = std::fs::read_to_string(&plan_path).unwrap();
    let mut plan: serde_json::Value = serde_json::from_str(&plan_text).unwrap();
    let first = format!("jobs/{}", jobs[0].file_name().unwrap().to_str().unwrap());
    plan["jobs"]["jobs/j000000000000"] = plan["jobs"][&first].clone();
    std::fs::write(&plan_path, serde_json::to_string(&plan).unwrap()).unwrap();
    refused("found in more than one directory");
    std::fs::write(&plan_path, plan_text).unwrap();
    std::fs::remove_dir_all(&twin).unwrap();
    // ... or over another job of the plan.
    let saved = dir.path().join("saved");
    copy_dir(&jobs[1], &saved);
    std::fs::remove_dir_all(&jobs[1]).unwrap();
    copy_dir(&jobs[0], &jobs[1]);
    refused("a job copied under another directory name");
    std::fs::remove_dir_all(&jobs[1]).unwrap();
    copy_dir(&saved, &jobs[1]);

    // A result edited by hand.
    let result = jobs[0].join("result.json");
    let text = std::fs::read_to_string(&result).unwrap();
    let mut edited: serde_json::Value = serde_json::from_str(&text).unwrap();
    edited["test_accuracy"] = serde_json::json!(0.999);
    std::fs::write(&result, serde_json::to_string_pretty(&edited).unwrap()).unwrap();
    refused("is not the one its job wrote");
    std::fs::write(&result, &text).unwrap();

    // No plan.
    let plan = out.join("plan.json");
    let kept = std::fs::read(&plan).unwrap();
    std::fs::remove_file(&plan).unwrap();
    refused("has no plan.json");
    std::fs::write(&plan, kept).unwrap();
    ok(ropelab(&["collect", out.to_str().unwrap()]));

    // A sharded sweep whose second shard never ran.
    let sharded = dir.path().join("sharded");
    ok(sweep(&file, &sharded, &["--shard", "0/2"]));
    let partial = ok(ropelab(&["collect", sharded.to_str().unwrap()]));
    assert!(partial.contains("1 planned and never started"), "{partial}");
    let listed = std::fs::read_to_string(sharded.join("collected/unfinished.txt")).unwrap();
    assert_eq!(listed.lines().count(), 1, "{listed}");
}

/// Writes `text` as `dir/sweep.toml` and runs it into `dir/out`: (the file, the output).
fn swept(dir: &Path, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let file = dir.join("sweep.toml");
    std::fs::write(&file, text).unwrap();
    let out = dir.join("out");
    ok(sweep(&file, &out, &[]));
    (file, out)
}

/// A result whose ledger entry was re-sealed over an edit passes every checksum; collect still
/// refuses it when it contradicts itself, its run or the files its job measured, and a rerun
/// measures the job again instead of reusing it (twenty-third pass, SWr1-6).
#[test]
fn a_resealed_result_must_say_what_its_run_says() {
    let dir = tempfile::tempdir().unwrap();
    let (file, out) = swept(dir.path(), &spec(20));
    ok(ropelab(&["collect", out.to_str().unwrap()]));
    let job = job_dir(&out);
    let result = job.join("result.json");
    let text = std::fs::read_to_string(&result).unwrap();
    let truth: serde_json::Value = serde_json::from_str(&text).unwrap();
    let reseal = |value: &serde_json::Value| {
        std::fs::write(&result, serde_json::to_string_pretty(value).unwrap()).unwrap();
        ropelab_io::Ledger::finish(&job, "result.json", "job result").unwrap();
    };
    let accuracy = truth["test_accuracy"].as_f64().unwrap();
    let other = if accuracy > 0.5 { 0.125 } else { 0.875 };
    type Edit = fn(&mut serde_json::Value, f64);
    let edits: [(&str, Edit, &str); 9] = [
        (
            "an impossible accuracy",
            |v, _| v["val_accuracy"] = 1.5.into(),
            "which is no accuracy",
        ),
        (
            "a negative time",
            |v, _| v["train_seconds"] = (-1.0).into(),
            "which is no duration",
        ),
        (
            "test accuracy beside its own evaluation",
            |v, o| v["test_accuracy"] = o.into(),
            "its own test evaluation says",
        ),
        (
            "test accuracy and evaluation together",
            |v, o| {
                v["test_accuracy"] = o.into();
                v["test"]["accuracy"]["accuracy"] = o.into();
            },
            "the files its job measured give",
        ),
        (
            "layer types",
            |v, _| v["layer_types"] = "SS".into(),
            "layer_types",
        ),
        (
            "a length accuracy",
            |v, o| {
                let first = v["length_accuracy"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .next()
                    .unwrap()
                    .clone();
                v["length_accuracy"][first] = o.into();
            },
            "length_accuracy",
        ),
        (
            "the validation accuracy",
            |v, o| v["val_accuracy"] = o.into(),
            "metrics.jsonl ends with",
        ),
        (
            "the steps",
            |v, _| v["steps"] = 600.into(),
            "its run's config says 20",
        ),
        (
            "the parameters",
            |v, _| v["params"]["seed"] = "9".into(),
            "the plan gives job",
        ),
    ];
    for (what, edit, needle) in edits {
        let mut forged = truth.clone();
        edit(&mut forged, other);
        reseal(&forged);
        let got = ropelab(&["collect", out.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&got.stderr);
        assert!(
            !got.status.success(),
            "{what}: collected {}",
            String::from_utf8_lossy(&got.stdout)
        );
        assert!(err.contains(needle), "{what}: {needle:?} not in {err}");
    }
    // A length-test row its settings never asked for, added to lengthgen.csv with both the
    // table and the result re-sealed to match (twenty-fourth pass, S).
    let run = job.join("run");
    let table = run.join("lengthgen.csv");
    let rows = std::fs::read_to_string(&table).unwrap();
    let last = rows.lines().last().unwrap();
    let cells: Vec<&str> = last.split(',').collect();
    let mut added: Vec<String> = cells.iter().map(|c| c.to_string()).collect();
    added[1] = "32".into();
    added[2] =
        (cells[2].parse::<usize>().unwrap() - cells[1].parse::<usize>().unwrap() + 32).to_string();
    std::fs::write(&table, format!("{rows}{}\n", added.join(","))).unwrap();
    let key = ropelab_io::Ledger::load(&run).unwrap().unwrap().files["lengthgen.csv"]
        .key
        .clone();
    ropelab_io::Ledger::finish(&run, "lengthgen.csv", &key).unwrap();
    let mut forged = truth.clone();
    forged["length_accuracy"][&added[2]] = serde_json::json!(cells[4].parse::<f64>().unwrap());
    reseal(&forged);
    let got = ropelab(&["collect", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(
        !got.status.success() && err.contains("its job measures"),
        "{err}"
    );
    // A rerun measures the table again, rather than rebuilding the result from it (twenty-fifth
    // pass, S1).
    ok(sweep(&file, &out, &[]));
    assert_eq!(std::fs::read_to_string(&table).unwrap(), rows);
    ok(ropelab(&["collect", out.to_str().unwrap()]));
    // A rerun does not answer with the forged result: it measures the job again.
    let mut forged = truth.clone();
    forged["layer_types"] = "SS".into();
    reseal(&forged);
    let rerun = ok(sweep(&file, &out, &[]));
    assert!(!rerun.contains("1 already done"), "{rerun}");
    assert_eq!(timeless(&result), without_times(&text));
    ok(ropelab(&["collect", out.to_str().unwrap()]));
}

/// Copies directory `from` to `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// No `--out` may replace a file a measured run's ledger lists (issue 55, item 3), whichever
/// run the command reads: every command that writes a file the user names is refused in one
/// line naming it, and the measured file keeps its bytes.
#[test]
fn no_out_replaces_a_file_a_ledger_lists() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sweep.toml");
    std::fs::write(&file, spec(20)).unwrap();
    let out = dir.path().join("out");
    ok(sweep(&file, &out, &[]));
    let job = job_dir(&out);
    let run = job.join("run");
    let other = tiny_run(dir.path());
    let other = other.to_str().unwrap();
    // The other run scored, so every command below gets as far as writing.
    ok(ropelab(&["score", "--run", other, "--samples", "4"]));
    let targets = [
        run.join("scores.jsonl"),
        run.join("lengthgen.csv"),
        job.join("result.json"),
    ];
    // Nor the files ropelab keeps whether or not a ledger lists them: a run's config, log and
    // checkpoints, a ledger, a sweep's plan, a job's record.
    let plain = dir.path().join("plain");
    ok(ropelab(&[
        "train",
        "--task",
        "number",
        "--preset",
        "tiny",
        "--steps",
        "10",
        "--save-every",
        "10",
        "--out",
        plain.to_str().unwrap(),
    ]));
    let targets = [
        targets.to_vec(),
        vec![
            plain.join("config.toml"),
            plain.join("metrics.jsonl"),
            plain.join("checkpoints/step-000010/model.safetensors"),
            run.join("measured.json"),
            out.join("plan.json"),
            job.join("job.json"),
        ],
    ]
    .concat();
    let before: Vec<Vec<u8>> = targets.iter().map(|t| std::fs::read(t).unwrap()).collect();
    for target in &targets {
        let t = target.to_str().unwrap();
        let cases: Vec<Vec<&str>> = vec![
            vec!["score", "--run", other, "--samples", "4", "--out", t],
            vec![
                "lengthgen",
                "--run",
                other,
                "--extras",
                "0",
                "--n",
                "8",
                "--out",
                t,
            ],
            vec!["hops", "--run", other, "--n", "8", "--out", t],
            vec!["mask", "--run", other, "--n", "8", "--out", t],
            vec!["ablate", "--run", other, "--n", "8", "--out", t],
            vec!["probe", "--run", other, "--n", "64", "--out", t],
            vec![
                "theory",
                "margins",
                "--run",
                other,
                "--samples",
                "4",
                "--out",
                t,
            ],
            vec!["theory", "rope-stats", "--draws", "10", "--out", t],
            vec!["gen", "number", "--n", "2", "--out", t],
        ];
        for args in &cases {
            let got = ropelab(args);
            let err = String::from_utf8_lossy(&got.stderr);
            assert!(!got.status.success(), "{args:?} replaced {t}");
            assert!(
                err.contains(target.file_name().unwrap().to_str().unwrap())
                    && [
                        "measured.json lists it",
                        "keeps itself",
                        "another kind of file",
                        "a file of the run"
                    ]
                    .iter()
                    .any(|w| err.contains(w)),
                "{args:?}: {err}"
            );
            assert!(!err.contains("panicked"), "{args:?}: {err}");
        }
    }
    let after: Vec<Vec<u8>> = targets.iter().map(|t| std::fs::read(t).unwrap()).collect();
    assert_eq!(before, after);
    // The job is still done, its files vouched for.
    assert!(ok(sweep(&file, &out, &[])).contains("1 already done"));
}

/// A training log concatenated twice, or with a checkpoint's line edited, is refused by
/// `train --resume` (before anything is written), as the report refuses it (thirteenth pass,
/// S1).
#[test]
fn resume_refuses_a_concatenated_or_edited_log() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let r = run.to_str().unwrap();
    let metrics = run.join("metrics.jsonl");
    let whole = std::fs::read_to_string(&metrics).unwrap();
    let resume = ["train", "--resume", "--steps", "40", "--out", r];
    std::fs::write(&metrics, whole.repeat(2)).unwrap();
    refused(&resume, "step 0 after step 30");
    assert_eq!(std::fs::read_to_string(&metrics).unwrap(), whole.repeat(2));
    // The checkpoint of step 20 recorded its line: a line of that step saying otherwise is an
    // edit.
    let edited = log_edited(&whole, 20, |v| v["loss"] = serde_json::json!(0.001));
    assert_ne!(edited, whole);
    std::fs::write(&metrics, &edited).unwrap();
    refused(
        &resume,
        "step 20 differs from the line its checkpoint recorded",
    );
    std::fs::write(&metrics, &whole).unwrap();
    ok(ropelab(&resume));
}

/// Metrics lines deleted from the middle of the log are put back on resume where a checkpoint
/// holds them (issue 55, item 6): each checkpoint keeps its own step's line.
#[test]
fn a_gap_in_the_metrics_is_restored_from_the_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let metrics = run.join("metrics.jsonl");
    let whole = std::fs::read_to_string(&metrics).unwrap();
    let step = |l: &str| {
        serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
            .as_u64()
            .unwrap()
    };
    assert!(whole.lines().any(|l| step(l) == 10), "{whole}");
    // The lines of steps 10 and 20 (checkpoints) go.
    let gap: String = whole
        .lines()
        .filter(|l| step(l) != 10 && step(l) != 20)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(gap, whole);
    std::fs::write(&metrics, &gap).unwrap();
    ok(ropelab(&[
        "train",
        "--resume",
        "--out",
        run.to_str().unwrap(),
    ]));
    assert_eq!(std::fs::read_to_string(&metrics).unwrap(), whole);
}

/// A checkpoint's `config.json` (the Hugging Face description its manifest seals) edited by
/// hand is refused by name, by the commands that load the checkpoint and by `--model` reading
/// it as a GPT-J directory (issue 55, item 6).
#[test]
fn an_edited_checkpoint_config_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let checkpoint = run.join("checkpoints/step-000030");
    let config = checkpoint.join("config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    ok(ropelab(&[
        "eval",
        "--run",
        run.to_str().unwrap(),
        "--n",
        "8",
    ]));
    std::fs::write(&config, text.replace('{', "{\n  \"edited\": true,")).unwrap();
    let out = ropelab(&["eval", "--run", run.to_str().unwrap(), "--n", "8"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an edited config.json was accepted");
    assert!(
        err.contains("config.json") && err.contains("step-000030"),
        "{err}"
    );
    let out = ropelab(&[
        "pretrained",
        "rope-stats",
        "--model",
        checkpoint.to_str().unwrap(),
        "--out",
        dir.path().join("r.csv").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "--model read an edited checkpoint");
    assert!(
        err.contains("config.json") && err.contains("step-000030"),
        "{err}"
    );
    // Without its manifest, a checkpoint is read by --model only with --force, as by eval.
    std::fs::write(&config, &text).unwrap();
    std::fs::remove_file(checkpoint.join("manifest.json")).unwrap();
    let stats = dir.path().join("r.csv");
    let args = [
        "pretrained",
        "rope-stats",
        "--model",
        checkpoint.to_str().unwrap(),
        "--out",
        stats.to_str().unwrap(),
    ];
    let out = ropelab(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "--model read an unsealed checkpoint");
    assert!(
        err.contains("manifest.json") && err.contains("--force"),
        "{err}"
    );
}

/// Found by the second adversarial pass (issue 55): a plain run's table is not replaced by
/// another command's table (its own command may rewrite it); a sweep and a study do not share
/// a directory (each would orphan or pool the other's jobs); probe's two tables go to two files.
#[test]
fn tables_and_plans_of_others_are_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let r = run.to_str().unwrap();
    ok(ropelab(&["score", "--run", r, "--samples", "4"]));
    ok(ropelab(&[
        "lengthgen",
        "--run",
        r,
        "--extras",
        "0",
        "--n",
        "4",
    ]));
    let scores = std::fs::read(run.join("scores.jsonl")).unwrap();
    let lengths = std::fs::read(run.join("lengthgen.csv")).unwrap();
    for (args, file) in [
        (
            vec![
                "lengthgen",
                "--run",
                r,
                "--extras",
                "0",
                "--n",
                "4",
                "--out",
            ],
            "scores.jsonl",
        ),
        (
            vec!["ablate", "--run", r, "--n", "4", "--out"],
            "scores.jsonl",
        ),
        (
            vec!["mask", "--run", r, "--n", "4", "--out"],
            "lengthgen.csv",
        ),
    ] {
        let target = run.join(file);
        let mut args = args.clone();
        args.push(target.to_str().unwrap());
        let got = ropelab(&args);
        let err = String::from_utf8_lossy(&got.stderr);
        assert!(!got.status.success(), "{args:?} replaced {file}");
        assert!(err.contains("another kind of file"), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(run.join("scores.jsonl")).unwrap(), scores);
    assert_eq!(std::fs::read(run.join("lengthgen.csv")).unwrap(), lengths);
    // Its own command rewrites it.
    ok(ropelab(&[
        "lengthgen",
        "--run",
        r,
        "--extras",
        "0,4",
        "--n",
        "4",
    ]));

    let same = dir.path().join("both.csv");
    let s = same.to_str().unwrap();
    let got = ropelab(&["probe", "--run", r, "--n", "8", "--out", s, "--sets-out", s]);
    assert!(!got.status.success());
    assert!(String::from_utf8_lossy(&got.stderr).contains("two tables"));
    // A --sets-out ropelab keeps, or another table of the run, is refused with nothing
    // written: the first before the computation, the second before either table is written.
    for kept in ["metrics.jsonl", "scores.jsonl"] {
        let probes = dir.path().join(format!("probes-{kept}.csv"));
        let sets = run.join(kept);
        let before = std::fs::read(&sets).unwrap();
        let got = ropelab(&[
            "probe",
            "--run",
            r,
            "--n",
            "8",
            "--set-samples",
            "4",
            "--out",
            probes.to_str().unwrap(),
            "--sets-out",
            sets.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&got.stderr);
        assert!(!got.status.success(), "--sets-out {kept} ran");
        assert!(err.contains(kept), "{kept}: {err}");
        assert!(
            !probes.exists(),
            "--out was written before --sets-out {kept} was refused"
        );
        assert_eq!(std::fs::read(&sets).unwrap(), before);
    }

    // A sweep's directory and a study's do not take each other's jobs.
    let file = dir.path().join("sweep.toml");
    std::fs::write(&file, spec(20)).unwrap();
    let out = dir.path().join("out");
    ok(sweep(&file, &out, &[]));
    let other = dir.path().join("other.toml");
    std::fs::write(&other, spec(20).replace("name = \"s\"", "name = \"t\"")).unwrap();
    let plan = std::fs::read(out.join("plan.json")).unwrap();
    let got = sweep(&other, &out, &[]);
    assert!(
        !got.status.success(),
        "another sweep planned into the directory"
    );
    assert!(String::from_utf8_lossy(&got.stderr).contains("holds the jobs of"));
    assert_eq!(std::fs::read(out.join("plan.json")).unwrap(), plan);
    let config = dir.path().join("small.toml");
    std::fs::write(&config, STUDY).unwrap();
    let got = ropelab(&[
        "reproduce",
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!got.status.success(), "a study ran in a sweep's directory");
    assert!(String::from_utf8_lossy(&got.stderr).contains("not a study"));
    assert!(!out.join("config.toml").exists());
}

/// A grid axis that lists a value twice is refused when the experiment is read (two runs would
/// share one directory, and the second failed late on the first one's lock), with nothing
/// written (second adversarial pass, issue 55).
#[test]
fn a_grid_value_listed_twice_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    for (i, args) in [
        vec!["offset", "--seeds", "0,0", "--steps", "2"],
        vec!["offset", "--pe", "rope,rope", "--steps", "2"],
        vec![
            "canonical",
            "--task",
            "index",
            "--band",
            "all",
            "--band",
            "all",
        ],
        vec!["canonical", "--task", "index", "--seeds", "1,1"],
        vec!["languages", "--lang", "parity,parity", "--steps", "2"],
    ]
    .into_iter()
    .enumerate()
    {
        let out = dir.path().join(format!("o{i}"));
        let mut args = args.clone();
        args.extend(["--out", out.to_str().unwrap()]);
        let got = ropelab(&args);
        let err = String::from_utf8_lossy(&got.stderr);
        assert!(!got.status.success(), "{args:?} ran");
        assert!(err.contains("twice"), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

/// A file of a run, study or model is never replaced by another kind of file, whatever path
/// reaches it (issue 55, third pass): another command's table or JSON (written whole, streamed,
/// or by the library), a path through `..`, a study's datasets and claims, a model's weights;
/// and a study or sweep is not made inside a run or a study. Every file keeps its bytes.
#[test]
fn another_kind_of_file_never_replaces_a_ropelab_file() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let r = run.to_str().unwrap();
    ok(ropelab(&["eval", "--run", r, "--step", "10", "--n", "8"]));
    ok(ropelab(&[
        "lengthgen",
        "--run",
        r,
        "--extras",
        "0",
        "--n",
        "4",
    ]));
    ok(ropelab(&["score", "--run", r, "--samples", "5"]));
    let config = dir.path().join("small.toml");
    std::fs::write(&config, STUDY).unwrap();
    let study = dir.path().join("study");
    let st = study.to_str().unwrap();
    ok(ropelab(&[
        "reproduce",
        "--config",
        config.to_str().unwrap(),
        "--out",
        st,
        "--no-pretrained",
    ]));
    let model = dir.path().join("model.gguf");
    std::fs::write(&model, b"GGUF").unwrap();
    let kept: Vec<std::path::PathBuf> = vec![
        run.join("eval/step-000010-extra-0-n8.json"),
        run.join("lengthgen.csv"),
        run.join("scores.jsonl"),
        study.join("claims.json"),
        study.join("tasks.json"),
        study.join("seed-3/data/number-test.jsonl"),
        model.clone(),
    ];
    let read =
        |p: &std::path::Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let before: Vec<Vec<u8>> = kept.iter().map(|p| read(p)).collect();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let through_dotdot = format!("{r}/new/../metrics.jsonl");
    let cases: Vec<Vec<String>> = vec![
        vec![
            "lengthgen".into(),
            "--run".into(),
            r.into(),
            "--extras".into(),
            "0".into(),
            "--n".into(),
            "4".into(),
            "--out".into(),
            path(&kept[0]),
        ],
        vec![
            "score".into(),
            "--run".into(),
            r.into(),
            "--samples".into(),
            "5".into(),
            "--out".into(),
            path(&kept[1]),
        ],
        vec![
            "gen".into(),
            "number".into(),
            "--n".into(),
            "2".into(),
            "--out".into(),
            path(&kept[2]),
        ],
        vec!["report".into(), st.into(), "--out".into(), path(&kept[3])],
        vec![
            "gen".into(),
            "number".into(),
            "--n".into(),
            "2".into(),
            "--out".into(),
            path(&kept[4]),
        ],
        vec![
            "gen".into(),
            "number".into(),
            "--n".into(),
            "2".into(),
            "--out".into(),
            path(&kept[5]),
        ],
        vec![
            "theory".into(),
            "margins".into(),
            "--run".into(),
            r.into(),
            "--extras".into(),
            "0".into(),
            "--samples".into(),
            "2".into(),
            "--out".into(),
            path(&kept[6]),
        ],
        vec![
            "lengthgen".into(),
            "--run".into(),
            r.into(),
            "--extras".into(),
            "0".into(),
            "--n".into(),
            "4".into(),
            "--out".into(),
            through_dotdot,
        ],
        vec![
            "reproduce".into(),
            "--config".into(),
            path(&config),
            "--out".into(),
            format!("{r}/inner"),
            "--no-pretrained".into(),
        ],
        vec![
            "reproduce".into(),
            "--config".into(),
            path(&config),
            "--out".into(),
            format!("{st}/theory/inner"),
            "--no-pretrained".into(),
        ],
        vec![
            "reproduce".into(),
            "--config".into(),
            path(&config),
            "--out".into(),
            r.into(),
            "--no-pretrained".into(),
        ],
    ];
    // Another run's file of the same kind is that run's measurement (fourth pass).
    let other = dir.path().join("other");
    ok(ropelab(&[
        "train",
        "--task",
        "number",
        "--preset",
        "tiny",
        "--steps",
        "4",
        "--save-every",
        "2",
        "--seed",
        "1",
        "--out",
        other.to_str().unwrap(),
    ]));
    let o = other.to_str().unwrap();
    let mut cases = cases;
    cases.push(vec![
        "lengthgen".into(),
        "--run".into(),
        o.into(),
        "--extras".into(),
        "0".into(),
        "--n".into(),
        "4".into(),
        "--out".into(),
        path(&kept[1]),
    ]);
    cases.push(vec![
        "score".into(),
        "--run".into(),
        o.into(),
        "--samples".into(),
        "4".into(),
        "--out".into(),
        path(&kept[2]),
    ]);
    // A streamed table through a directory it would make: refused at commit, and the
    // directory made for it goes too (fourth pass).
    cases.push(vec![
        "gen".into(),
        "number".into(),
        "--n".into(),
        "2".into(),
        "--out".into(),
        format!("{r}/streamed/deeper/../../metrics.jsonl"),
    ]);
    // The study's failure table, which its report draws (fifth pass).
    cases.push(vec![
        "theory".into(),
        "rope-stats".into(),
        "--d".into(),
        "8".into(),
        "--lengths".into(),
        "16".into(),
        "--bases".into(),
        "100".into(),
        "--draws".into(),
        "2".into(),
        "--out".into(),
        format!("{st}/theory/rope-failures.csv"),
    ]);
    // A study's job is not extended behind its back, and a run's lock is kept (fifth pass).
    cases.push(vec![
        "train".into(),
        "--resume".into(),
        "--steps".into(),
        "30".into(),
        "--out".into(),
        format!("{st}/seed-3/number"),
    ]);
    cases.push(vec![
        "gen".into(),
        "number".into(),
        "--n".into(),
        "2".into(),
        "--out".into(),
        format!("{r}/.ropelab.lock"),
    ]);
    // One study named twice, spelled differently, is refused (fourth pass).
    cases.push(vec![
        "bias".into(),
        "--quick".into(),
        "--study".into(),
        st.into(),
        "--study".into(),
        format!("{st}/"),
        "--out".into(),
        path(&dir.path().join("bias")),
    ]);
    // A study and its byte copy: the same models counted twice, refused before any training
    // (tenth pass, S2).
    let copy = dir.path().join("study-copy");
    let copied = std::process::Command::new("cp")
        .args(["-r", st, copy.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(copied.success());
    common::refused(
        &[
            "bias",
            "--quick",
            "--study",
            st,
            "--study",
            copy.to_str().unwrap(),
            "--out",
            &path(&dir.path().join("bias-copy")),
        ],
        "holds the same final weights as",
    );
    assert!(!dir.path().join("bias-copy").exists());
    let metrics = std::fs::read(run.join("metrics.jsonl")).unwrap();
    for case in &cases {
        let args: Vec<&str> = case.iter().map(String::as_str).collect();
        let got = ropelab(&args);
        let err = String::from_utf8_lossy(&got.stderr);
        assert!(!got.status.success(), "{args:?} ran");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    for (p, b) in kept.iter().zip(&before) {
        assert_eq!(&std::fs::read(p).unwrap(), b, "{} changed", p.display());
    }
    assert_eq!(std::fs::read(run.join("metrics.jsonl")).unwrap(), metrics);
    assert!(!run.join("new").exists() && !run.join("inner").exists());
    assert!(
        !run.join("streamed").exists(),
        "a refused stream left its directory"
    );
    // The commands rewrite their own files.
    ok(ropelab(&[
        "lengthgen",
        "--run",
        r,
        "--extras",
        "0",
        "--n",
        "4",
    ]));
    ok(ropelab(&["report", st]));
    // A seed the config does not list is named, not mixed into the report (fifth pass).
    std::fs::create_dir_all(study.join("seed-7/number")).unwrap();
    ok(ropelab(&["report", st]));
    let html = std::fs::read_to_string(study.join("report.html")).unwrap();
    assert!(html.contains("Seeds this study does not list") && html.contains("seed-7/"));
    std::fs::remove_dir_all(study.join("seed-7")).unwrap();
    // A listed seed's folder renamed to an unlisted seed is named as such; a listed seed whose
    // folder is gone is said to be missing (seventeenth pass, SILENT-8).
    std::fs::rename(study.join("seed-3"), study.join("seed-4")).unwrap();
    let got = ropelab(&["report", st]);
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(
        !got.status.success() && err.contains("model of seed 3, not of seed 4"),
        "{err}"
    );
    let aside = dir.path().join("aside");
    std::fs::rename(study.join("seed-4"), &aside).unwrap();
    ok(ropelab(&["report", st]));
    let html = std::fs::read_to_string(study.join("report.html")).unwrap();
    assert!(html.contains("Seeds this study lists but lacks") && html.contains("seed-3/"));
    std::fs::rename(&aside, study.join("seed-3")).unwrap();
    // A hand-edited verdict is not shown as the study's (fifth pass).
    let claims = study.join("claims.json");
    let verdicts = std::fs::read_to_string(&claims).unwrap();
    let edited = verdicts.replacen("\"verdict\": \"", "\"verdict\": \"x", 1);
    assert_ne!(edited, verdicts);
    std::fs::write(&claims, &edited).unwrap();
    let got = ropelab(&["report", st]);
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(!got.status.success(), "an edited claims.json was reported");
    assert!(
        err.contains("claims.json") && err.contains("replaced"),
        "{err}"
    );
    // Nor one edited with its ledger entry re-sealed: the verdicts are computed again from
    // the study's files (twenty-fifth pass, A-S9).
    let key = ropelab_io::Ledger::load(&study).unwrap().unwrap().files["claims.json"]
        .key
        .clone();
    let swap = [
        ("holds", "undetermined"),
        ("does_not_hold", "holds"),
        ("undetermined", "holds"),
    ]
    .into_iter()
    .map(|(a, b)| {
        (
            format!("\"verdict\": \"{a}\""),
            format!("\"verdict\": \"{b}\""),
        )
    })
    .find(|(a, _)| verdicts.contains(a.as_str()))
    .unwrap();
    let forged = verdicts.replacen(&swap.0, &swap.1, 1);
    std::fs::write(&claims, &forged).unwrap();
    ropelab_io::Ledger::finish(&study, "claims.json", &key).unwrap();
    let got = ropelab(&["report", st]);
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(
        !got.status.success() && err.contains("not what the study's config and measured files"),
        "{err}"
    );
    // ... nor by collect, whose report draws the verdicts too (twenty-seventh pass).
    let got = ropelab(&["collect", st]);
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(
        !got.status.success() && err.contains("not what the study's config and measured files"),
        "{err}"
    );
    std::fs::write(&claims, &verdicts).unwrap();
    ropelab_io::Ledger::finish(&study, "claims.json", &key).unwrap();
    ok(ropelab(&["report", st]));
    // ... nor a replaced failure table (fifth pass, recheck).
    let failures = study.join("theory/rope-failures.csv");
    let table = std::fs::read_to_string(&failures).unwrap();
    let first_row = table.lines().nth(1).unwrap().to_owned();
    std::fs::write(&failures, format!("{table}{first_row}\n")).unwrap();
    let got = ropelab(&["report", st]);
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(
        !got.status.success(),
        "a replaced failure table was reported"
    );
    assert!(
        err.contains("rope-failures.csv") && err.contains("replaced"),
        "{err}"
    );
    let plotted = dir.path().join("failures.svg");
    let got = ropelab(&[
        "plot",
        "failures",
        "--dir",
        st,
        "--out",
        plotted.to_str().unwrap(),
    ]);
    assert!(!got.status.success(), "plot drew a replaced failure table");
    std::fs::write(&failures, &table).unwrap();
    ok(ropelab(&[
        "plot",
        "failures",
        "--dir",
        st,
        "--out",
        plotted.to_str().unwrap(),
    ]));
    ok(ropelab(&["report", st]));
    // A plan entry moved by hand is refused, not kept as a phantom job (fifth-pass recheck).
    let plan = study.join("plan.json");
    let planned = std::fs::read_to_string(&plan).unwrap();
    let moved = planned.replace("\"seed-3/number\": {", "\"seed-9/number\": {");
    assert_ne!(moved, planned);
    std::fs::write(&plan, &moved).unwrap();
    let rerun = [
        "reproduce",
        "--config",
        config.to_str().unwrap(),
        "--out",
        st,
        "--no-pretrained",
    ];
    let got = ropelab(&rerun);
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(!got.status.success(), "a moved plan entry was kept");
    assert!(
        err.contains("under both seed-3/number and seed-9/number"),
        "{err}"
    );
    std::fs::write(&plan, &planned).unwrap();
    ok(ropelab(&rerun));
    // A job's config.toml edited after it ran is not reused by the study (fifth pass).
    let job_config = study.join("seed-3/number/config.toml");
    let text = std::fs::read_to_string(&job_config).unwrap();
    assert!(text.contains("\nlr = "), "{text}");
    std::fs::write(&job_config, text.replace("\nlr = ", "\nlr = 0.5 #")).unwrap();
    let got = ropelab(&[
        "reproduce",
        "--config",
        config.to_str().unwrap(),
        "--out",
        st,
        "--no-pretrained",
    ]);
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(!got.status.success(), "an edited job config was reused");
    assert!(
        err.contains("config.toml says optim.lr = 0.5") && err.contains("edited after it ran"),
        "{err}"
    );
}

/// Measurements copied from another run (the test split, the ablation, the hop map, an
/// attention view) are refused by the report, naming the file, not read as this run's; an
/// accuracy no evaluation gives is refused; a hop map of an earlier checkpoint is drawn marked
/// as such (thirteenth pass, S3-S6).
#[test]
fn another_runs_tables_and_impossible_accuracies_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let train = |name: &str, seed: &str| {
        let run = dir.path().join(name);
        ok(ropelab(&[
            "train",
            "--task",
            "number",
            "--preset",
            "tiny",
            "--steps",
            "10",
            "--save-every",
            "5",
            "--seed",
            seed,
            "--out",
            run.to_str().unwrap(),
        ]));
        ok(ropelab(&[
            "score",
            "--run",
            run.to_str().unwrap(),
            "--samples",
            "4",
        ]));
        run
    };
    let (a, b) = (train("a", "1"), train("b", "2"));
    let bs = b.to_str().unwrap();
    ok(ropelab(&["ablate", "--run", bs, "--n", "16"]));
    ok(ropelab(&["hops", "--run", bs, "--n", "16"]));
    ok(ropelab(&["attention", "--run", bs]));
    ok(ropelab(&["eval", "--run", bs]));
    let attention = std::fs::read_dir(b.join("attention"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .file_name();
    let attention = format!("attention/{}", attention.to_string_lossy());
    let report = |run: &Path| {
        ropelab(&[
            "report",
            run.to_str().unwrap(),
            "--out",
            dir.path().join("page.html").to_str().unwrap(),
        ])
    };
    for (i, file) in [
        "ablation.csv",
        "hops.csv",
        "eval/step-000010-extra-0.json",
        attention.as_str(),
    ]
    .iter()
    .enumerate()
    {
        let c = dir.path().join(format!("c{i}"));
        copy_dir(&a, &c);
        std::fs::create_dir_all(c.join(file).parent().unwrap()).unwrap();
        std::fs::copy(b.join(file), c.join(file)).unwrap();
        let out = report(&c);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{file} of another run was reported");
        assert!(
            err.contains(file) && err.contains("another run"),
            "{file}: {err}"
        );
    }
    // A validation accuracy of 1.5 is no evaluation's.
    let c = dir.path().join("accuracy");
    copy_dir(&a, &c);
    let metrics = c.join("metrics.jsonl");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let edited = log_edited(&text, 10, |v| v["val"]["accuracy"] = serde_json::json!(1.5));
    assert!(edited.contains("1.5"), "{edited}");
    std::fs::write(&metrics, edited).unwrap();
    let out = report(&c);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("val.accuracy 1.5 is no accuracy"), "{err}");
    // A possible accuracy in the line its checkpoint recorded is still an edit (fourteenth
    // pass, N1); a per-hop accuracy outside [0, 1] is no evaluation's (N4).
    let edited = log_edited(&text, 10, |v| v["val"]["accuracy"] = serde_json::json!(1.0));
    std::fs::write(&metrics, edited).unwrap();
    let err = String::from_utf8_lossy(&report(&c).stderr).into_owned();
    assert!(
        err.contains("step 10 differs from the line its checkpoint recorded"),
        "{err}"
    );
    std::fs::write(&metrics, &text).unwrap();
    ok(ropelab(&["eval", "--run", c.to_str().unwrap()]));
    let eval = c.join("eval/step-000010-extra-0.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&eval).unwrap()).unwrap();
    v["per_hop"]["2"] = serde_json::json!(3.0);
    std::fs::write(&eval, v.to_string()).unwrap();
    let err = String::from_utf8_lossy(&report(&c).stderr).into_owned();
    assert!(err.contains("accuracy of hop 2 3 is no accuracy"), "{err}");
    // An accuracy of 0.999 where every hop count is answered at most 0.0625 is no evaluation's
    // (N2).
    let per_hop_max = v["per_hop"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "2")
        .map(|(_, a)| a.as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(per_hop_max < 0.9, "{v}");
    v["per_hop"]["2"] = serde_json::json!(0.0);
    v["accuracy"] = serde_json::json!(0.999);
    std::fs::write(&eval, v.to_string()).unwrap();
    let err = String::from_utf8_lossy(&report(&c).stderr).into_owned();
    assert!(
        err.contains("accuracy 0.999 is no mean of its per-hop"),
        "{err}"
    );
    // A resumed run keeps the checkpoints policy it started with: the flags are refused, not
    // ignored (N6).
    let out = ropelab(&[
        "train",
        "--resume",
        "--steps",
        "20",
        "--keep-last",
        "1",
        "--out",
        c.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
    // A row of a head the model does not have is another model's, even under this run's name
    // (N3).
    std::fs::remove_file(&eval).unwrap();
    ok(ropelab(&[
        "hops",
        "--run",
        c.to_str().unwrap(),
        "--n",
        "16",
    ]));
    let hops = c.join("hops.csv");
    let text = std::fs::read_to_string(&hops).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[1] = format!("5{}", &lines[1][1..]);
    std::fs::write(&hops, lines.join("\n") + "\n").unwrap();
    let err = String::from_utf8_lossy(&report(&c).stderr).into_owned();
    assert!(
        err.contains("layer 5 head 0 is no head of the model"),
        "{err}"
    );
    // Values no measurement gives: a hop map's mass of 2, an ablation accuracy that is not its
    // count over its samples (fifteenth pass, F2, F5).
    std::fs::write(&hops, &text).unwrap();
    let mut rows: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut cells: Vec<String> = rows[1].split(',').map(str::to_owned).collect();
    cells[5] = "2.0".into(); // mass
    rows[1] = cells.join(",");
    std::fs::write(&hops, rows.join("\n") + "\n").unwrap();
    let err = String::from_utf8_lossy(&report(&c).stderr).into_owned();
    assert!(err.contains("mass 2 is no share of attention"), "{err}");
    std::fs::write(&hops, &text).unwrap();
    ok(ropelab(&[
        "score",
        "--run",
        c.to_str().unwrap(),
        "--samples",
        "4",
    ]));
    ok(ropelab(&[
        "ablate",
        "--run",
        c.to_str().unwrap(),
        "--n",
        "16",
    ]));
    let ablation = c.join("ablation.csv");
    let own = std::fs::read_to_string(&ablation).unwrap();
    let mut rows: Vec<String> = own.lines().map(str::to_owned).collect();
    let mut cells: Vec<String> = rows[1].split(',').map(str::to_owned).collect();
    cells[6] = "0.9".into(); // accuracy, beside its count
    rows[1] = cells.join(",");
    std::fs::write(&ablation, rows.join("\n") + "\n").unwrap();
    let err = String::from_utf8_lossy(&report(&c).stderr).into_owned();
    assert!(err.contains("accuracy 0.9 is not"), "{err}");
    std::fs::remove_file(&ablation).unwrap();
    // A negative frequency use is no magnitude (F7).
    let scores = c.join("scores.jsonl");
    let own = std::fs::read_to_string(&scores).unwrap();
    let mut lines: Vec<serde_json::Value> = own
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines[0]["freq_use"][1] = serde_json::json!(-1.0);
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(&scores, text).unwrap();
    let err = String::from_utf8_lossy(&report(&c).stderr).into_owned();
    assert!(
        err.contains("freq_use of plane 1 -1 is no magnitude"),
        "{err}"
    );
    std::fs::write(&scores, own).unwrap();
    // `theory margins` writes beside its run or outside any ropelab directory, each row naming
    // the checkpoint and the run (fourteenth pass, S-F).
    let margins = |out: &Path| {
        ropelab(&[
            "theory",
            "margins",
            "--run",
            a.to_str().unwrap(),
            "--extras",
            "0",
            "--samples",
            "2",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let out = margins(&b.join("margins.csv"));
    assert!(!out.status.success(), "margins written into another run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("another ropelab directory"));
    assert!(!b.join("margins.csv").exists());
    ok(margins(&a.join("margins.csv")));
    let text = std::fs::read_to_string(a.join("margins.csv")).unwrap();
    assert!(
        text.lines().next().unwrap().ends_with(",step,run"),
        "{text}"
    );
    // The hop map of step 5 in a run trained to step 10 is marked as an earlier checkpoint's.
    let c = dir.path().join("older");
    copy_dir(&a, &c);
    ok(ropelab(&[
        "hops",
        "--run",
        c.to_str().unwrap(),
        "--step",
        "5",
        "--n",
        "16",
    ]));
    ok(report(&c));
    let html = std::fs::read_to_string(dir.path().join("page.html")).unwrap();
    assert!(
        html.contains("at step 5, older than the run&#39;s latest step 10"),
        "the older hop map is not marked"
    );
}

/// An attention view is the viewer's computation on the run's own test input: an edited input,
/// answer, chain, hop count, head list, weight row, score or type, or a step the run never
/// saved, is refused by the report naming the file (fifteenth pass, F8).
#[test]
fn an_edited_attention_view_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    ok(ropelab(&["attention", "--run", run.to_str().unwrap()]));
    let file = std::fs::read_dir(run.join("attention"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&file).unwrap();
    let report = || {
        ropelab(&[
            "report",
            run.to_str().unwrap(),
            "--out",
            dir.path().join("page.html").to_str().unwrap(),
        ])
    };
    ok(report());
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit, &str); 9] = [
        (
            "weights",
            |v| v["heads"][0]["pattern"][1] = serde_json::json!([5.0, -4.0]),
            "no attention distribution",
        ),
        (
            "row length",
            |v| v["heads"][0]["pattern"][1] = serde_json::json!([0.5, 0.25, 0.25]),
            "a causal row has 2",
        ),
        (
            "answer",
            |v| v["answer"] = serde_json::json!("7"),
            "where test input 0 has answer",
        ),
        (
            "chain",
            |v| v["chain"][0] = serde_json::json!(99),
            "is not the input's",
        ),
        ("hops", |v| v["hops"] = serde_json::json!(9), "at 9 hops"),
        (
            "extra head",
            |v| {
                let h = v["heads"][0].clone();
                let mut h = h;
                h["layer"] = serde_json::json!(5);
                v["heads"].as_array_mut().unwrap().push(h);
            },
            "each once and layer-major",
        ),
        (
            "scores",
            |v| v["heads"][0]["scores"]["s_pos"] = serde_json::json!(1.5),
            "are not in [0, 1]",
        ),
        (
            "step",
            |v| v["step"] = serde_json::json!(7),
            "not the file its name says",
        ),
        (
            "predicted",
            |v| v["predicted"] = serde_json::json!("zz"),
            "no token of the task",
        ),
    ];
    for (what, edit, says) in edits {
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        edit(&mut v);
        std::fs::write(&file, v.to_string()).unwrap();
        let out = report();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "an edited {what} was reported");
        assert!(
            err.contains("attention/") && err.contains(says),
            "{what}: {err}"
        );
    }
    // A view under another step's name is refused (sixteenth pass, F8g).
    std::fs::write(&file, &text).unwrap();
    let renamed = file.with_file_name("step-10-sample-0.json");
    std::fs::rename(&file, &renamed).unwrap();
    let err = String::from_utf8_lossy(&report().stderr).into_owned();
    assert!(err.contains("not the file its name says"), "{err}");
    std::fs::rename(&renamed, &file).unwrap();
    // The type follows the scores: a positional head relabelled symbolic is refused.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let kind = v["heads"][0]["kind"].as_str().unwrap().to_owned();
    let other = if kind == "symbolic" {
        "positional"
    } else {
        "symbolic"
    };
    v["heads"][0]["kind"] = serde_json::json!(other);
    std::fs::write(&file, v.to_string()).unwrap();
    let err = String::from_utf8_lossy(&report().stderr).into_owned();
    assert!(err.contains("is not the one its scores give"), "{err}");
}

/// A line of a step no checkpoint holds, edited, added or deleted, is told by the digest of
/// the log the next checkpoint sealed: the report and `train --resume` refuse it (fifteenth
/// pass, F4).
#[test]
fn a_log_line_between_checkpoints_is_sealed_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let metrics = run.join("metrics.jsonl");
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(text.contains("\"step\":15,"), "{text}");
    let report = || {
        ropelab(&[
            "report",
            run.to_str().unwrap(),
            "--out",
            dir.path().join("page.html").to_str().unwrap(),
        ])
    };
    let resume = || {
        ropelab(&[
            "train",
            "--resume",
            "--steps",
            "40",
            "--out",
            run.to_str().unwrap(),
        ])
    };
    let edited = log_edited(&text, 15, |v| v["loss"] = serde_json::json!(0.5));
    let deleted: String = text
        .lines()
        .filter(|l| !l.contains("\"step\":15,"))
        .map(|l| format!("{l}\n"))
        .collect();
    for (what, bad) in [("edited", edited), ("deleted", deleted)] {
        std::fs::write(&metrics, &bad).unwrap();
        for out in [report(), resume()] {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "a log with a line {what} was read");
            assert!(
                err.contains("metrics.jsonl")
                    && err.contains("through step 30 are not those checkpoint step-000030"),
                "{what}: {err}"
            );
        }
        assert_eq!(std::fs::read_to_string(&metrics).unwrap(), bad);
    }
    // The run's own log is read and resumed.
    std::fs::write(&metrics, &text).unwrap();
    ok(report());
    ok(resume());
}

/// A run's scores say what they were measured with (samples, query, tau, ...), the report
/// shows it, and a file joined from two scorings is refused (fifteenth pass, F9).
#[test]
fn scores_record_their_settings() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let rs = run.to_str().unwrap();
    let page = dir.path().join("page.html");
    let report = || ropelab(&["report", rs, "--out", page.to_str().unwrap()]);
    ok(ropelab(&[
        "score",
        "--run",
        rs,
        "--samples",
        "3",
        "--query",
        "hops",
        "--tau",
        "5",
    ]));
    let scores = run.join("scores.jsonl");
    let hops = std::fs::read_to_string(&scores).unwrap();
    ok(report());
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("Scores: samples 3, query Hops, tau 5"),
        "the report does not say how the scores were measured"
    );
    ok(ropelab(&["score", "--run", rs, "--samples", "3"]));
    let last = std::fs::read_to_string(&scores).unwrap();
    let step = |l: &&str| l.starts_with("{\"step\":0,");
    let joined: String = last
        .lines()
        .filter(step)
        .chain(hops.lines().filter(|l| !step(l)))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&scores, joined).unwrap();
    let out = report();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "scores of two settings were reported"
    );
    assert!(
        err.contains("scores.jsonl") && err.contains("other settings than line 1"),
        "{err}"
    );
    // Every checkpoint is scored, at the steps the run saved (seventeenth pass, SILENT-3).
    let moved = last.replace("{\"step\":10,", "{\"step\":15,");
    let cut: String = last
        .lines()
        .filter(|l| !step(l))
        .map(|l| format!("{l}\n"))
        .collect();
    for (bad, says) in [
        (moved, "step 15 is no step the run saves"),
        (cut, "checkpoint step 0 is not scored"),
        // An empty file is named so (nineteenth pass, U5).
        (String::new(), "it holds no scored head (an empty file)"),
    ] {
        std::fs::write(&scores, bad).unwrap();
        let err = String::from_utf8_lossy(&report().stderr).into_owned();
        assert!(err.contains(says), "{err}");
    }
    std::fs::write(&scores, &last).unwrap();
    ok(report());
}

/// A length table holds one checkpoint's rows, each of its input's length, with margins,
/// top weights and losses a model gives (seventeenth pass, SILENT-2).
#[test]
fn a_length_table_is_one_checkpoints_measurement() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let rs = run.to_str().unwrap();
    ok(ropelab(&[
        "lengthgen",
        "--run",
        rs,
        "--extras",
        "0,8",
        "--n",
        "8",
    ]));
    let path = run.join("lengthgen.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let page = dir.path().join("page.html");
    let report = || ropelab(&["report", rs, "--out", page.to_str().unwrap()]);
    ok(report());
    let edit = |line: usize, column: &str, value: &str| csv_cell_edited(&text, line, column, value);
    for (bad, says) in [
        (edit(2, "step", "10"), "one table, one checkpoint"),
        (edit(1, "top_weight_L0H0", "1.5"), "none a head gives"),
        (edit(1, "margin_L0H0", "-0.5"), "none a head gives"),
        (edit(1, "length", "40"), "is not the run's input length"),
        (edit(1, "loss", "-2"), "is no loss"),
        // Counts of the samples measured (eighteenth pass, S1).
        (edit(1, "hop_1", "0.3"), "is no share of its"),
        // Rows of two sample counts are not one curve (nineteenth pass, SILENT-1).
        (edit(2, "n", "9"), "one table, one sample count"),
    ] {
        std::fs::write(&path, &bad).unwrap();
        let out = report();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{says}: reported");
        assert!(
            err.contains("lengthgen.csv") && err.contains(says),
            "{says}: {err}"
        );
        let svg = dir.path().join("length.svg");
        let figure = ropelab(&[
            "plot",
            "length",
            "--dir",
            rs,
            "--out",
            svg.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&figure.stderr);
        assert!(
            !figure.status.success() && err.contains(says),
            "plot, {says}: {err}"
        );
    }
}

/// A hop map measures every hop it reports, and a probe's accuracy is a share of its held-out
/// positions: `hops --n 1` is refused, and edited cells are (seventeenth pass, SILENT-4, -5).
#[test]
fn hop_maps_and_probes_hold_only_measured_values() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let rs = run.to_str().unwrap();
    let out = ropelab(&["hops", "--run", rs, "--n", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no edge of hop"),
        "{err}"
    );
    assert!(!run.join("hops.csv").exists());
    ok(ropelab(&["hops", "--run", rs, "--n", "16"]));
    ok(ropelab(&[
        "probe",
        "--run",
        rs,
        "--n",
        "16",
        "--set-samples",
        "16",
    ]));
    let page = dir.path().join("page.html");
    let report = || ropelab(&["report", rs, "--out", page.to_str().unwrap()]);
    ok(report());
    let cell = |file: &str, column: &str, value: &str| {
        let path = run.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, csv_cell_edited(&text, 1, column, value)).unwrap();
        text
    };
    for (file, column, value, says) in [
        ("hops.csv", "edges", "0", "over no edge measured"),
        ("probes.csv", "accuracy", "0.3", "is no share of its"),
    ] {
        let kept = cell(file, column, value);
        let out = report();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{file}: {err}");
        std::fs::write(run.join(file), kept).unwrap();
    }
    ok(report());
}

/// A test evaluation is the count of the samples its name says: another step, extra or
/// sample count than its name, a length not its input's, a negative loss, or accuracies no
/// count of those samples gives are refused (seventeenth pass, SILENT-1).
#[test]
fn an_evaluation_is_the_count_of_the_samples_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let rs = run.to_str().unwrap();
    ok(ropelab(&["eval", "--run", rs]));
    let path = run.join("eval/step-000030-extra-0.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let page = dir.path().join("page.html");
    let report = || ropelab(&["report", rs, "--out", page.to_str().unwrap()]);
    ok(report());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let n = v["n"].as_u64().unwrap() as f64;
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let edits: Vec<(Edit, &str)> = vec![
        (
            Box::new(|v| v["step"] = 10.into()),
            "not the file its name says",
        ),
        (
            Box::new(|v| v["extra"] = 8.into()),
            "not the file its name says",
        ),
        (
            Box::new(|v| v["n"] = 1000.into()),
            "not the file its name says",
        ),
        (
            Box::new(|v| v["seq_len"] = 99.into()),
            "is not the run's input length",
        ),
        (Box::new(|v| v["loss"] = (-1.0).into()), "is no loss"),
        (
            Box::new(move |v| {
                // Half a sample more than its count, within its per-hop range.
                let a = v["accuracy"].as_f64().unwrap();
                v["accuracy"] = (a + 0.5 / n).into();
                for h in ["1", "2", "3", "4"] {
                    v["per_hop"][h] = (a + 0.5 / n).into();
                }
            }),
            "is no share of its",
        ),
    ];
    for (edit, says) in edits {
        let mut e = v.clone();
        edit(&mut e);
        std::fs::write(&path, e.to_string()).unwrap();
        let out = report();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{says}: reported");
        assert!(err.contains("eval/") && err.contains(says), "{says}: {err}");
    }
    std::fs::write(&path, &text).unwrap();
    ok(report());
}

/// CSV `text` with the cell of `column` on line `line` (0 is the header) set to `value`.
fn csv_cell_edited(text: &str, line: usize, column: &str, value: &str) -> String {
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let c = header.iter().position(|h| *h == column).unwrap();
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            let mut cells: Vec<String> = l.split(',').map(str::to_owned).collect();
            if i == line {
                cells[c] = value.to_owned();
            }
            cells.join(",") + "\n"
        })
        .collect()
}

/// Reseals checkpoint `dir`'s manifest over its files as they are now.
fn reseal_checkpoint(dir: &Path) {
    let files = [
        "model.safetensors",
        "optimizer.safetensors",
        "config.json",
        "ropelab.json",
        "state.json",
    ];
    ropelab_io::checksum::Manifest::seal(dir, &files).unwrap();
}

/// A checkpoint whose files contradict each other under a re-sealed manifest is refused: a
/// transformers config.json of another model than its ropelab.json, AdamW updates other than
/// its step, losses pending at a step whose metrics line was just written (twenty-fourth pass,
/// S4); a measured run is not resumed (S8); a run is not trained into a directory holding
/// other files (S7).
#[test]
fn a_checkpoint_that_contradicts_itself_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let r = run.to_str().unwrap();
    let checkpoint = run.join("checkpoints/step-000030");
    let config = checkpoint.join("config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["n_layer"] = serde_json::json!(json["n_layer"].as_u64().unwrap() + 1);
    std::fs::write(&config, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    reseal_checkpoint(&checkpoint);
    refused(&["eval", "--run", r, "--n", "8"], "n_layer differs");
    std::fs::write(&config, &text).unwrap();
    reseal_checkpoint(&checkpoint);
    ok(ropelab(&["eval", "--run", r, "--n", "8"]));
    let state = checkpoint.join("state.json");
    let text = std::fs::read_to_string(&state).unwrap();
    for (key, value, says) in [
        (
            "adam_updates",
            serde_json::json!(3),
            "3 AdamW updates at step 30",
        ),
        (
            "pending_loss_count",
            serde_json::json!(3),
            "which no training leaves there",
        ),
    ] {
        let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
        json[key] = value;
        std::fs::write(&state, serde_json::to_string_pretty(&json).unwrap()).unwrap();
        reseal_checkpoint(&checkpoint);
        refused(&["train", "--out", r, "--resume", "--steps", "40"], says);
    }
    std::fs::write(&state, &text).unwrap();
    reseal_checkpoint(&checkpoint);
    // Twenty-fifth pass, A-S4: a checkpoint between metrics lines of the log interval has its
    // own line, so no loss is pending in it; a forged pending sum is refused.
    let odd = dir.path().join("odd");
    let o = odd.to_str().unwrap();
    ok(common::train_tiny(
        "number",
        "13",
        &odd,
        &["--save-every", "3"],
    ));
    let steps: Vec<u64> = std::fs::read_to_string(odd.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    for s in [3, 6, 9, 12, 13] {
        assert!(
            steps.contains(&s),
            "no metrics line at checkpoint step {s}: {steps:?}"
        );
    }
    let checkpoint = odd.join("checkpoints/step-000012");
    let state = checkpoint.join("state.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(json["pending_loss_count"], serde_json::json!(0));
    json["pending_loss_count"] = serde_json::json!(2);
    json["pending_loss_sum"] = serde_json::json!(1000.0);
    std::fs::write(&state, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    reseal_checkpoint(&checkpoint);
    std::fs::remove_dir_all(odd.join("checkpoints/step-000013")).unwrap();
    refused(
        &["train", "--out", o, "--resume", "--steps", "15"],
        "which no training leaves there",
    );
    // A run a sweep measured keeps its training log: not resumed (S8).
    let (_, out) = swept(dir.path(), &spec(20));
    let copy = dir.path().join("copy");
    copy_dir(&job_dir(&out).join("run"), &copy);
    refused(
        &[
            "train",
            "--out",
            copy.to_str().unwrap(),
            "--resume",
            "--steps",
            "30",
        ],
        "resuming would change a measured file",
    );
    // Nor is a run trained into the sweep's own directory (S7).
    let before = std::fs::read(out.join("plan.json")).unwrap();
    let train_into = |dir: &Path, says: &str| {
        let d = dir.to_str().unwrap();
        refused(
            &[
                "train", "--task", "number", "--preset", "tiny", "--steps", "4", "--out", d,
            ],
            says,
        );
    };
    train_into(&out, "holds another kind of directory's files");
    assert_eq!(std::fs::read(out.join("plan.json")).unwrap(), before);
    assert!(!out.join("config.toml").exists());
    // Nor into a folder of runs nested as an experiment nests them (twenty-fifth pass, S6).
    let runs = dir.path().join("exp/runs");
    copy_dir(&run, &runs.join("rope-softmax/k-2/seed-0"));
    train_into(
        &runs,
        "holds another kind of directory's files (rope-softmax)",
    );
}

/// Measured files copied in from another job of the same sweep, or forged together with the
/// result, are refused by collect (twenty-fourth pass, S2, S3); a collected table edited under a
/// re-sealed ledger is refused by the report (S5).
#[test]
fn a_jobs_files_must_be_its_own_and_agree() {
    let dir = tempfile::tempdir().unwrap();
    let (_, out) = swept(
        dir.path(),
        &spec(20).replace("values = [0]", "values = [0, 1]"),
    );
    ok(ropelab(&["collect", out.to_str().unwrap()]));
    let mut jobs: Vec<_> = std::fs::read_dir(out.join("jobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    jobs.sort();
    let eval = "eval/step-000020-extra-0.json";
    let (a, b) = (jobs[0].join("run"), jobs[1].join("run"));
    let key = ropelab_io::Ledger::load(&b).unwrap().unwrap().files[eval]
        .key
        .clone();
    let own = std::fs::read(b.join(eval)).unwrap();
    let result = jobs[1].join("result.json");
    let truth = std::fs::read_to_string(&result).unwrap();
    let refuse = |needle: &str| {
        let got = ropelab(&["collect", out.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&got.stderr);
        assert!(
            !got.status.success() && err.contains(needle),
            "{needle:?} not in {err}"
        );
    };
    // S2: job A's evaluation in job B, B's result made to match it.
    std::fs::copy(a.join(eval), b.join(eval)).unwrap();
    ropelab_io::Ledger::finish(&b, eval, &key).unwrap();
    let theirs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(jobs[0].join("result.json")).unwrap())
            .unwrap();
    let mut forged: serde_json::Value = serde_json::from_str(&truth).unwrap();
    for k in ["test_accuracy", "per_hop", "test"] {
        forged[k] = theirs[k].clone();
    }
    std::fs::write(&result, serde_json::to_string_pretty(&forged).unwrap()).unwrap();
    ropelab_io::Ledger::finish(&jobs[1], "result.json", "job result").unwrap();
    refuse("copied in from another run");
    // S3: B's evaluation and result forged together, self-consistently, far from what its
    // length test measured on the same checkpoint.
    let mut eval_json: serde_json::Value = serde_json::from_slice(&own).unwrap();
    let was = eval_json["accuracy"].as_f64().unwrap();
    let to = if was < 0.5 { 1.0 } else { 0.0 };
    eval_json["accuracy"] = to.into();
    for (_, v) in eval_json["per_hop"].as_object_mut().unwrap() {
        *v = to.into();
    }
    std::fs::write(
        b.join(eval),
        serde_json::to_string_pretty(&eval_json).unwrap(),
    )
    .unwrap();
    ropelab_io::Ledger::finish(&b, eval, &key).unwrap();
    let mut forged: serde_json::Value = serde_json::from_str(&truth).unwrap();
    forged["test_accuracy"] = to.into();
    forged["test"]["accuracy"]["accuracy"] = to.into();
    for k in forged["per_hop"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect::<Vec<_>>()
    {
        forged["per_hop"][&k] = to.into();
        forged["test"]["accuracy"]["per_hop"][&k] = to.into();
    }
    std::fs::write(&result, serde_json::to_string_pretty(&forged).unwrap()).unwrap();
    ropelab_io::Ledger::finish(&jobs[1], "result.json", "job result").unwrap();
    refuse("z = ");
    std::fs::write(b.join(eval), &own).unwrap();
    ropelab_io::Ledger::finish(&b, eval, &key).unwrap();
    std::fs::write(&result, &truth).unwrap();
    ropelab_io::Ledger::finish(&jobs[1], "result.json", "job result").unwrap();
    ok(ropelab(&["collect", out.to_str().unwrap()]));
    // S5: a collected table edited and re-sealed is not what the jobs give.
    let collected = out.join("collected");
    let summary = collected.join("summary.csv");
    let text = std::fs::read_to_string(&summary).unwrap();
    std::fs::write(
        &summary,
        format!("{text}{}\n", text.lines().last().unwrap()),
    )
    .unwrap();
    let key = ropelab_io::Ledger::load(&collected).unwrap().unwrap().files["summary.csv"]
        .key
        .clone();
    ropelab_io::Ledger::finish(&collected, "summary.csv", &key).unwrap();
    refused(
        &["report", out.to_str().unwrap()],
        "is not what the finished jobs",
    );
    // Twenty-fifth pass, A-S10: jobs.csv, which no figure draws, is checked all the same.
    std::fs::write(&summary, &text).unwrap();
    ropelab_io::Ledger::finish(&collected, "summary.csv", &key).unwrap();
    ok(ropelab(&["report", out.to_str().unwrap()]));
    let jobs_csv = collected.join("jobs.csv");
    let table = std::fs::read_to_string(&jobs_csv).unwrap();
    std::fs::write(&jobs_csv, table.replacen(",0.", ",1.", 1)).unwrap();
    assert_ne!(std::fs::read_to_string(&jobs_csv).unwrap(), table);
    ropelab_io::Ledger::finish(&collected, "jobs.csv", &key).unwrap();
    refused(
        &["report", out.to_str().unwrap()],
        "jobs.csv is not what the finished jobs",
    );
}

/// A measurement may draw more samples than the run's test split holds, as the split is drawn,
/// written and read back alike; a file so measured leaves the run readable (twenty-sixth
/// pass, A-S1: it was written and then called damaged). Beyond ropelab's bound it is refused.
#[test]
fn a_measurement_beyond_the_test_split_continues_its_stream() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let r = run.to_str().unwrap();
    let config = ropelab_train::RunConfig::load(&run.join("config.toml")).unwrap();
    let n = config.data.test + 8;
    ok(ropelab(&["eval", "--run", r, "--n", &n.to_string()]));
    let file = run.join(format!("eval/step-000030-extra-0-n{n}.json"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(json["n"], serde_json::json!(n));
    ok(ropelab(&["report", r]));
    for command in ["eval", "mask", "lengthgen"] {
        refused(
            &[command, "--run", r, "--n", "5000000"],
            "more than ropelab measures",
        );
    }
}
