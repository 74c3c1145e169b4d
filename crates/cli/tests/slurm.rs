//! Sweeps on a real Slurm cluster (started by `.ci/run` with ci/slurm/start.sh): a 4-job sweep
//! submitted as a job array with one array task failing on its first attempt, resubmitted,
//! collected and compared with the same sweep run here.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{collected_table, ok, ropelab};

const SPEC: &str = "name = \"slurm-test\"\npreset = \"tiny\"\ntask = \"number\"\n\
    [base]\noptim.steps = 30\ndata.train = 2000\ndata.test = 64\n\
    [[axis]]\nkey = \"seed\"\nvalues = [0, 1]\n\
    [[axis]]\nkey = \"optim.lr\"\nvalues = [0.003, 0.01]\n";

/// Submits the sweep's array (with `fail` as the fault switch) and waits for it to leave the
/// queue, at most `limit`.
fn submit_and_wait(spec: &str, out: &str, fail: &str, limit: Duration) {
    let said = Command::new(env!("CARGO_BIN_EXE_ropelab"))
        .args([
            "sweep",
            spec,
            "--out",
            out,
            "--slurm",
            "--submit",
            "--cpus-per-task",
            "1",
        ])
        .env("ROPELAB_SWEEP_FAIL_ONCE", fail)
        .output()
        .unwrap();
    let text = ok(said);
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("Submitted batch job "))
        .unwrap_or_else(|| panic!("no job id in {text}"))
        .trim()
        .to_string();
    let start = Instant::now();
    loop {
        let q = Command::new("squeue")
            .args(["-h", "-j", &id])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&q.stdout).trim().is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "array job {id} still queued after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
#[ignore = "needs a Slurm cluster (ci/slurm/start.sh); run by .ci/run"]
fn a_sweep_runs_as_a_slurm_job_array_and_a_failed_task_is_resubmitted() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("sweep.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let spec = spec.to_str().unwrap();

    let local = dir.path().join("local");
    ok(ropelab(&[
        "sweep",
        spec,
        "--out",
        local.to_str().unwrap(),
        "--jobs",
        "2",
    ]));
    let expected = collected_table(&local);

    let listed = ok(ropelab(&["sweep", spec, "--out", "unused", "--list"]));
    let victim = listed
        .lines()
        .find(|l| l.starts_with('j') && !l.starts_with("job "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string();
    let cluster = dir.path().join("cluster");
    let out = cluster.to_str().unwrap();
    let limit = Duration::from_secs(300);
    submit_and_wait(spec, out, &victim, limit);
    let done = |id: &str| cluster.join("jobs").join(id).join("result.json").exists();
    let finished = std::fs::read_dir(cluster.join("jobs"))
        .unwrap()
        .flatten()
        .filter(|j| j.path().join("result.json").exists())
        .count();
    assert_eq!(
        finished, 3,
        "three array tasks finish, one fails on purpose"
    );
    assert!(!done(&victim));
    // Resubmitting the same array re-runs only the failed job.
    submit_and_wait(spec, out, "", limit);
    assert!(done(&victim));
    assert_eq!(collected_table(&cluster), expected);
}

#[test]
#[ignore = "needs a Slurm cluster (ci/slurm/start.sh); run by .ci/run"]
fn the_bias_experiment_runs_as_a_job_array_and_collects_as_it_runs_here() {
    let dir = tempfile::tempdir().unwrap();
    let grid = ["bias", "--quick", "--steps", "40"];
    let local = dir.path().join("local");
    let mut args = grid.to_vec();
    args.extend(["--out", local.to_str().unwrap()]);
    ok(ropelab(&args));
    let cluster = dir.path().join("cluster");
    let out = cluster.to_str().unwrap();
    let mut args = grid.to_vec();
    args.extend([
        "--out",
        out,
        "--slurm",
        "--submit",
        "--shards",
        "3",
        "--cpus-per-task",
        "1",
    ]);
    let text = ok(ropelab(&args));
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("Submitted batch job "))
        .unwrap_or_else(|| panic!("no job id in {text}"))
        .trim()
        .to_string();
    let start = Instant::now();
    while !String::from_utf8_lossy(
        &Command::new("squeue")
            .args(["-h", "-j", &id])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .is_empty()
    {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "array {id} still queued"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Every run was trained by the array: collecting here trains nothing and finds the same
    // numbers as the local run.
    let mut args = grid.to_vec();
    args.extend(["--out", out]);
    ok(ropelab(&args));
    for file in ["mechanism.csv", "accuracy.csv", "heads.csv"] {
        assert_eq!(
            std::fs::read_to_string(cluster.join(file)).unwrap(),
            std::fs::read_to_string(local.join(file)).unwrap(),
            "{file}"
        );
    }
    assert!(cluster.join("slurm").read_dir().unwrap().count() >= 3);
}
