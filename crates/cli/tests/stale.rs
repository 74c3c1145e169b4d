//! No stale or foreign result is reused silently: a sweep whose `[base]` changed refuses its
//! old results, a job resumed after its last checkpoint writes the same result as one that was
//! never interrupted, weights follow the umask, and a finished run is never shortened by
//! `--resume --steps`.

mod common;

use std::path::Path;

use common::{collected_table, ok, ropelab};

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
        partial.contains("partial: 1 started job(s)") && partial.contains(id),
        "{partial}"
    );
    let listed = std::fs::read_to_string(out_dir.join("collected/unfinished.txt")).unwrap();
    assert!(listed.contains(id), "{listed}");
}
