//! `ropelab sweep` and `collect` on this machine: a 4-job sweep killed with SIGKILL mid-way and
//! started again ends with the same table as an uninterrupted run; shards run only their jobs;
//! a failing job is retried by running the command again; bad input is one line.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{collected_table, ok, refused, ropelab};

/// Four jobs (two seeds x two learning rates) of the tiny number model, long enough to kill.
const SPEC: &str = "name = \"t\"\npreset = \"tiny\"\ntask = \"number\"\n\
    [base]\noptim.steps = 300\noptim.save_every = 50\ndata.train = 4000\ndata.test = 64\n\
    [[axis]]\nkey = \"seed\"\nvalues = [0, 1]\n\
    [[axis]]\nkey = \"optim.lr\"\nvalues = [0.003, 0.01]\n";

#[test]
fn a_killed_sweep_resumes_to_the_same_table() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("sweep.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let spec = spec.to_str().unwrap();

    let whole = dir.path().join("whole");
    ok(ropelab(&[
        "sweep",
        spec,
        "--out",
        whole.to_str().unwrap(),
        "--jobs",
        "2",
    ]));
    let expected = collected_table(&whole);
    assert_eq!(expected.lines().count(), 4, "{expected}");

    // Kill the same sweep once some job has written a checkpoint past step 0.
    let killed = dir.path().join("killed");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ropelab"))
        .args([
            "sweep",
            spec,
            "--out",
            killed.to_str().unwrap(),
            "--jobs",
            "2",
        ])
        .spawn()
        .unwrap();
    let start = Instant::now();
    let checkpointed = || {
        std::fs::read_dir(killed.join("jobs")).is_ok_and(|jobs| {
            jobs.flatten()
                .any(|j| j.path().join("run/checkpoints/step-000050").exists())
        })
    };
    while !checkpointed() && start.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let results = |d: &Path| {
        std::fs::read_dir(d.join("jobs"))
            .unwrap()
            .flatten()
            .filter(|j| j.path().join("result.json").exists())
            .count()
    };
    assert!(
        results(&killed) < 4,
        "the sweep finished before it was killed"
    );
    let listed = ok(ropelab(&[
        "sweep",
        spec,
        "--out",
        killed.to_str().unwrap(),
        "--list",
    ]));
    assert!(
        listed.contains("started") || listed.contains("to do"),
        "{listed}"
    );
    let again = ok(ropelab(&[
        "sweep",
        spec,
        "--out",
        killed.to_str().unwrap(),
        "--jobs",
        "2",
    ]));
    assert!(
        again.contains("already done") && again.contains("0 failed"),
        "{again}"
    );
    assert_eq!(collected_table(&killed), expected);
    let header = std::fs::read_to_string(killed.join("collected/jobs.csv")).unwrap();
    assert!(
        header
            .lines()
            .next()
            .unwrap()
            .ends_with(",length_17,length_33,length_81,length_273"),
        "{header}"
    );
    let report = std::fs::read_to_string(killed.join("report.html")).unwrap();
    assert!(report.contains("Sweep: every configuration over its seeds"));
    assert!(report.contains("optim.lr=0.003"));

    // A finished job whose final checkpoint is gone is trained to its end again, not
    // measured at an earlier step under its old result (eighth pass, a182).
    let mut jobs: Vec<_> = std::fs::read_dir(whole.join("jobs"))
        .unwrap()
        .flatten()
        .map(|j| j.path())
        .collect();
    jobs.sort();
    let last = jobs[0].join("run/checkpoints/step-000300");
    std::fs::remove_dir_all(&last).unwrap();
    let rerun = ok(ropelab(&["sweep", spec, "--out", whole.to_str().unwrap()]));
    assert!(rerun.contains("0 failed"), "{rerun}");
    assert!(last.is_dir(), "the final checkpoint is made again");
    assert_eq!(collected_table(&whole), expected);
}

#[test]
fn shards_run_their_jobs_and_a_failed_job_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("sweep.toml");
    std::fs::write(
        &spec,
        SPEC.replace("300", "20")
            .replace("save_every = 50", "save_every = 20"),
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let listed = ok(ropelab(&["sweep", spec, "--out", out, "--list"]));
    let ids: Vec<String> = listed
        .lines()
        .filter(|l| l.starts_with('j') && !l.starts_with("job "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 4, "{listed}");
    // Shard 1 of 2: the second and fourth jobs of the sorted list; job ids[1] fails once.
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ropelab"))
            .args(["sweep", spec, "--out", out])
            .args(extra)
            .env("ROPELAB_SWEEP_FAIL_ONCE", &ids[1])
            .output()
            .unwrap()
    };
    let first = run(&["--shard", "1/2"]);
    assert!(!first.status.success());
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(
        err.contains(&format!("{}: job {}: failed on purpose", ids[1], ids[1])),
        "{err}"
    );
    let done = |id: &str| {
        Path::new(out)
            .join("jobs")
            .join(id)
            .join("result.json")
            .exists()
    };
    assert!(!done(&ids[0]) && !done(&ids[1]) && done(&ids[3]) && !done(&ids[2]));
    // A sweep not yet collected is named so by the report (twentieth pass, U6).
    refused(&["report", out], "is a sweep whose jobs are not collected");
    let second = run(&["--shard", "1/2"]);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(done(&ids[1]));
    ok(run(&["--shard", "0/2"]));
    assert!(ids.iter().all(|i| done(i)));

    refused(
        &["sweep", spec, "--out", out, "--shard", "2/2"],
        "not a shard",
    );
    refused(&["sweep", "missing.toml", "--out", out], "missing.toml");
    refused(
        &["collect", dir.path().to_str().unwrap()],
        "holds no finished job",
    );
    // A job far too large for this machine is refused before anything runs.
    let huge = dir.path().join("huge.toml");
    std::fs::write(
        &huge,
        "name = \"h\"\ntask = \"number\"\n[base]\nmodel.d_model = 65536\nmodel.d_mlp = 262144\n\
         model.position.rotary_dim = 8\n",
    )
    .unwrap();
    let big = dir.path().join("big");
    refused(
        &[
            "sweep",
            huge.to_str().unwrap(),
            "--out",
            big.to_str().unwrap(),
        ],
        "sweep would need about",
    );
    assert!(!big.join("jobs").exists());
}

#[test]
fn slurm_scripts_call_one_shard_per_array_task() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("sweep.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let out = dir.path().join("out");
    let said = ok(ropelab(&[
        "sweep",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--slurm",
        "--shards",
        "2",
        "--array-limit",
        "1",
    ]));
    assert!(said.contains("4 jobs in 2 array tasks"), "{said}");
    let script = std::fs::read_to_string(out.join("sweep.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --array=0-1%1"), "{script}");
    assert!(
        script.contains("--shard \"$SLURM_ARRAY_TASK_ID/2\""),
        "{script}"
    );
}

/// A sweep over each experiment task: what a job measures follows its task.
#[test]
fn experiment_jobs_measure_what_their_task_asks() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = [
        ("language", "language.lengths = [1, 8]\n"),
        ("offset", "offset.lengths = [4, 8]\n"),
        ("canonical", ""),
    ];
    for (task, extra) in tasks {
        let spec = dir.path().join(format!("{task}.toml"));
        std::fs::write(
            &spec,
            format!(
                "name = \"{task}\"\ntask = \"{task}\"\n[base]\noptim.steps = 5\n{extra}\
                 [[axis]]\nkey = \"seed\"\nvalues = [0, 1]\n"
            ),
        )
        .unwrap();
        let out = dir.path().join(task);
        ok(ropelab(&[
            "sweep",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]));
        ok(ropelab(&["collect", out.to_str().unwrap()]));
        let text = std::fs::read_to_string(out.join("collected/jobs.jsonl")).unwrap();
        let results: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(results.len(), 2);
        for r in &results {
            let accuracy = r["test_accuracy"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&accuracy), "{r}");
            let lengths: Vec<&String> = r["length_accuracy"].as_object().unwrap().keys().collect();
            match task {
                // N* is read over every length up to twice the longest training string; the
                // table keeps the longest training length and three beyond it.
                "language" => {
                    let n_star = r["n_star"].as_u64().unwrap();
                    assert!((8..=16).contains(&n_star), "{r}");
                    assert_eq!(lengths, ["10", "12", "16", "8"], "{r}");
                    let rows = std::fs::read_to_string(
                        out.join("jobs")
                            .join(r["id"].as_str().unwrap())
                            .join("run/lengths.csv"),
                    )
                    .unwrap();
                    assert_eq!(rows.lines().count(), 1 + 16, "{rows}");
                }
                "offset" => assert_eq!(lengths, ["16", "32", "64", "8"], "{r}"),
                _ => assert!(lengths.is_empty(), "{r}"),
            }
        }
        let summary = std::fs::read_to_string(out.join("collected/summary.csv")).unwrap();
        let star = summary.lines().nth(1).unwrap().split(',').nth(5).unwrap();
        assert_eq!(!star.is_empty(), task == "language", "{summary}");
    }
}

/// A sweep and an experiment keep to their own directories (sixth pass): an experiment into a
/// sweep's directory, a sweep into an experiment's, and a Slurm script into another sweep's
/// directory are refused before anything is written (A3, A4).
#[test]
fn sweeps_and_experiments_keep_to_their_own_directories() {
    let dir = tempfile::tempdir().unwrap();
    let small = "name = \"t\"\npreset = \"tiny\"\ntask = \"number\"\n[base]\noptim.steps = 2\n\
                 data.train = 64\ndata.test = 16\n";
    let spec = dir.path().join("sweep.toml");
    std::fs::write(&spec, small).unwrap();
    let other = dir.path().join("other.toml");
    std::fs::write(&other, small.replace("name = \"t\"", "name = \"o\"")).unwrap();
    let sw = dir.path().join("sw");
    let (spec, other, s) = (
        spec.to_str().unwrap(),
        other.to_str().unwrap(),
        sw.to_str().unwrap(),
    );
    ok(ropelab(&["sweep", spec, "--out", s, "--jobs", "1"]));
    refused(
        &common::tiny_offset("1", s),
        "holds the jobs of a sweep or study (plan.json): choose another --out",
    );
    refused(
        &["sweep", other, "--out", s, "--slurm"],
        "holds the jobs of sweep \"t\", not of sweep \"o\"",
    );
    assert!(!sw.join("sweep.sbatch").exists());
    let ox = dir.path().join("ox");
    let o = ox.to_str().unwrap();
    ok(ropelab(&common::tiny_offset("1", o)));
    refused(
        &["sweep", spec, "--out", o, "--jobs", "1"],
        "holds an experiment's tables (measured.json lists them)",
    );
    assert!(!ox.join("plan.json").exists());
}

/// A collected table edited by hand is not drawn as measured: `collect` records its tables
/// and `report` refuses one changed since (sixth pass, A2).
#[test]
fn an_edited_collected_table_is_refused_by_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("sweep.toml");
    std::fs::write(
        &spec,
        "name = \"t\"\npreset = \"tiny\"\ntask = \"number\"\n[base]\noptim.steps = 2\n\
         data.train = 64\ndata.test = 16\n",
    )
    .unwrap();
    let sw = dir.path().join("sw");
    let s = sw.to_str().unwrap();
    ok(ropelab(&[
        "sweep",
        spec.to_str().unwrap(),
        "--out",
        s,
        "--jobs",
        "1",
    ]));
    ok(ropelab(&["collect", s]));
    let html = dir.path().join("r.html");
    let h = html.to_str().unwrap();
    ok(ropelab(&["report", s, "--out", h]));
    let summary = sw.join("collected/summary.csv");
    let text = std::fs::read_to_string(&summary).unwrap();
    let edited = text.replacen('\n', "\n ", 1).replacen("\n ", "\n", 1) + "\n";
    assert_ne!(edited, text, "the edit changes the file");
    std::fs::write(&summary, edited).unwrap();
    refused(
        &["report", s, "--out", h],
        "is not as `ropelab collect` wrote it",
    );
    ok(ropelab(&["collect", s]));
    ok(ropelab(&["report", s, "--out", h]));
    // Without its ledger, or with a table it lists gone, neither is trusted (seventh pass,
    // kx1, kx2).
    std::fs::remove_file(sw.join("collected/lengths.csv")).unwrap();
    refused(&["report", s, "--out", h], "is missing, though");
    ok(ropelab(&["collect", s]));
    std::fs::remove_file(sw.join("collected/measured.json")).unwrap();
    refused(&["report", s, "--out", h], "has no");
    ok(ropelab(&["collect", s]));
    ok(ropelab(&["report", s, "--out", h]));
    // Tables of other results than the jobs' now (a job's result gone since collect) are
    // stale (seventh pass, h4).
    let result = std::fs::read_dir(&sw)
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .map(|j| j.path().join("result.json"))
        .find(|p| p.is_file())
        .expect("the job's result.json");
    std::fs::remove_file(result).unwrap();
    refused(
        &["report", s, "--out", h],
        "is not what the finished jobs of",
    );
}
