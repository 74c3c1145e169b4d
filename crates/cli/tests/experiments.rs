//! Every training experiment is a grid of sweep jobs: `ropelab sweep`, given a sweep file whose
//! base is one of an experiment's run configs, whose axis varies what the experiment's grid
//! varies and whose `[measure]` table asks for the experiment's measurement, trains the same
//! models and writes the same files as the dedicated command (`offset`, `languages`,
//! `canonical`), byte for byte.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{ok, refused, ropelab};

/// Every run directory under `root` (a directory holding `config.toml`), by the bytes of that
/// config.
fn runs_by_config(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let config = dir.join("config.toml");
        if config.exists() && dir.join("checkpoints").exists() {
            out.insert(std::fs::read_to_string(config).unwrap(), dir.clone());
            continue;
        }
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

/// Runs `sweep` (written next to the experiment's directory `experiment`) into a new
/// directory and checks that every job's run has the config of one of the experiment's runs
/// and the same `files` and last checkpoint, byte for byte; returns how many runs matched.
fn same_as_sweep(experiment: &Path, sweep: &str, files: &[&str]) -> usize {
    let root = experiment.parent().unwrap();
    let spec = root.join("sweep.toml");
    std::fs::write(&spec, sweep).unwrap();
    let out = root.join("sweep");
    ok(ropelab(&[
        "sweep",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--jobs",
        "2",
    ]));
    let theirs = runs_by_config(experiment);
    let mine = runs_by_config(&out);
    assert!(!mine.is_empty());
    for (config, run) in &mine {
        let other = theirs
            .get(config)
            .unwrap_or_else(|| panic!("{} has a config no experiment run has", run.display()));
        let last = |dir: &Path| {
            let mut steps: Vec<PathBuf> = std::fs::read_dir(dir.join("checkpoints"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            steps.sort();
            steps.pop().unwrap().join("model.safetensors")
        };
        assert_eq!(
            std::fs::read(last(run)).unwrap(),
            std::fs::read(last(other)).unwrap(),
            "{}: the trained weights differ",
            run.display()
        );
        for file in files {
            let a = std::fs::read_to_string(run.join(file))
                .unwrap_or_else(|e| panic!("{}: {e}", run.join(file).display()));
            let b = std::fs::read_to_string(other.join(file)).unwrap();
            assert_eq!(a, b, "{file} of {} differs", run.display());
        }
    }
    mine.len()
}

#[test]
fn an_offset_grid_as_a_sweep_gives_the_offset_commands_files() {
    let dir = tempfile::tempdir().unwrap();
    let experiment = dir.path().join("offset");
    ok(ropelab(&[
        "offset",
        "--pe",
        "rope,ape",
        "--attention",
        "softmax",
        "--k",
        "2",
        "--seeds",
        "0,1",
        "--train-len",
        "8",
        "--steps",
        "5",
        "--per-length",
        "8",
        "--out",
        experiment.to_str().unwrap(),
    ]));
    let base = experiment.join("runs/rope-softmax/k-2/seed-0/config.toml");
    let sweep = format!(
        "name = \"offset\"\nconfig = {base:?}\n\
         [[axis]]\nkey = \"seed\"\nvalues = [0, 1]\n\
         [[axis]]\nkey = \"model.position\"\nvalues = [\n\
         {{ kind = \"rope\", base = 10000.0, rotary_dim = 64, layout = \"interleaved\" }},\n\
         {{ kind = \"learned\", max_len = 8, beyond = \"clamp\" }},\n]\n\
         [measure]\nlengths = [8, 12, 16, 24, 32, 48, 64]\nper_length = 8\nheads = true\n"
    );
    let files = [
        "lengths.csv",
        "run.csv",
        "mechanism.csv",
        "pinning.csv",
        "carrier.csv",
    ];
    assert_eq!(same_as_sweep(&experiment, &sweep, &files), 4);
}

#[test]
fn a_languages_grid_as_a_sweep_gives_the_languages_commands_files() {
    let dir = tempfile::tempdir().unwrap();
    let experiment = dir.path().join("languages");
    ok(ropelab(&[
        "languages",
        "--lang",
        "ab-star",
        "--pe",
        "rope:1,nope",
        "--steps",
        "3",
        "--per-length",
        "2",
        "--test-lengths",
        "41-43,60",
        "--out",
        experiment.to_str().unwrap(),
    ]));
    let base = experiment.join("runs/ab-star/nope/seed-0-lr-1e-3/config.toml");
    let sweep = format!(
        "name = \"languages\"\nconfig = {base:?}\n\
         [[axis]]\nkey = \"model.position\"\nvalues = [\n\
         {{ kind = \"rope\", base = 1.0, rotary_dim = 8, layout = \"interleaved\" }},\n\
         {{ kind = \"none\" }},\n]\n\
         [measure]\nlengths = [41, 42, 43, 60]\nper_length = 2\nheads = true\n"
    );
    assert_eq!(
        same_as_sweep(&experiment, &sweep, &["lengths.csv", "heads.csv"]),
        2
    );
}

#[test]
fn a_canonical_grid_as_a_sweep_gives_the_canonical_commands_files() {
    let dir = tempfile::tempdir().unwrap();
    let experiment = dir.path().join("canonical");
    ok(ropelab(&[
        "canonical",
        "--task",
        "index",
        "--band",
        "all",
        "--band",
        "high",
        "--d-model",
        "16",
        "--len",
        "8",
        "--steps",
        "5",
        "--out",
        experiment.to_str().unwrap(),
    ]));
    let base = experiment.join("runs/index/all/seed-0/config.toml");
    let planes = |band: &str| {
        std::fs::read_to_string(experiment.join(format!("runs/index/{band}/seed-0/config.toml")))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("planes = ").map(str::to_string))
            .expect("a band lists its planes")
    };
    let rope = "kind = \"rope\", base = 10000.0, rotary_dim = 16, layout = \"interleaved\"";
    let sweep = format!(
        "name = \"canonical\"\nconfig = {base:?}\n\
         [[axis]]\nkey = \"model.position\"\nvalues = [\n\
         {{ {rope}, planes = {} }},\n{{ {rope}, planes = {} }},\n]\n\
         [measure]\nper_length = 2048\nhead_samples = 64\nheads = true\n",
        planes("all"),
        planes("high"),
    );
    assert_eq!(
        same_as_sweep(&experiment, &sweep, &["per_position.csv", "head.json"]),
        2
    );
}

#[test]
fn a_bad_measure_table_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bad.toml");
    let out = dir.path().join("out");
    let run = |measure: &str, needle: &str| {
        std::fs::write(
            &spec,
            format!("name = \"x\"\ntask = \"offset\"\n[measure]\n{measure}\n"),
        )
        .unwrap();
        refused(
            &[
                "sweep",
                spec.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            needle,
        );
    };
    run("lengths = [16, 8]", "ascending");
    run("lengths = []", "ascending");
    run("per_length = 0", "per_length must be at least 1");
    run("lenghts = [8]", "unknown field");
    run("lengths = [1, 8]", "not longer than the offset");
    assert!(!out.exists(), "a refused sweep wrote nothing");
}

/// An experiment whose grid holds a job made with other settings is refused before any job
/// runs: the jobs ahead of it are not trained under the new settings beside the old ones
/// (tenth pass, SILENT-1).
#[test]
fn a_stale_job_anywhere_in_the_grid_is_refused_before_any_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("offset");
    let o = out.to_str().unwrap();
    let offset = |pe: &str, steps: &str| {
        ropelab(&[
            "offset",
            "--pe",
            pe,
            "--attention",
            "softmax",
            "--train-len",
            "4",
            "--test-lens",
            "4,8",
            "--per-length",
            "8",
            "--k",
            "1",
            "--seeds",
            "0",
            "--steps",
            steps,
            "--jobs",
            "1",
            "--out",
            o,
        ])
    };
    ok(offset("nope", "5"));
    let refused = offset("rope,nope", "6");
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("no job was run"), "{err}");
    assert!(
        !out.join("runs/rope-softmax").exists(),
        "a job ahead of the stale one was run"
    );
}
