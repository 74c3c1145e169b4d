//! Fuzz target: the JSONL, CSV and JSON readers of a study directory. A small study is run
//! once; each input replaces one of its files (the first byte picks it): a run's
//! `scores.jsonl`, `lengthgen.csv`, `metrics.jsonl` or eval JSON, the theory CSVs, or the
//! study's `tasks.json` / `training.json` (the top bit of that byte keeps the models' ledgers).
//! Loading the study, its verdicts and the scores
//! reader must never panic.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ropelab_analysis::claims::{verdicts, StudyFiles, Thresholds};
use ropelab_study::job::read_scores;
use ropelab_study::{reproduce, Quiet, StudyConfig};

const SMALL_STUDY: &str = "name = \"small\"\nseeds = [0]\n[tasks]\ntrain = 500\nval = 20\n\
     test = 40\ntarget_window = 8\npre_window = 8\nhops = [1, 2, 3, 4]\n\
     [train]\npreset = \"tiny\"\nsteps = 5\n[score]\nsamples = 10\n\
     [lengthgen]\nextras = [0, 20]\nsamples = 8\n\
     [theory]\nmax_n = 50\nd = 8\nbases = [100.0]\nlengths = [64]\ndraws = 2\nrho = 0.5\n";

const FILES: [&str; 9] = [
    "seed-0/number/scores.jsonl",
    "seed-0/number/lengthgen.csv",
    "seed-0/number/metrics.jsonl",
    "seed-0/number/eval/step-000005-extra-0.json",
    "seed-0/letter/scores.jsonl",
    "theory/discrepancy-index.csv",
    "theory/rope-failures.csv",
    "tasks.json",
    "training.json",
];

fn template() -> &'static Path {
    static STUDY: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = STUDY.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let out = dir.path().join("study");
        let config = StudyConfig::parse(SMALL_STUDY, "small.toml").expect("a valid study");
        let options = ropelab_study::Options {
            parallel: Some(1),
            ..Default::default()
        };
        reproduce(&config, &out, &options, &Quiet, |_| Ok(())).expect("the small study runs");
        (dir, out)
    });
    path
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("writable");
    for entry in std::fs::read_dir(from).expect("readable") {
        let entry = entry.expect("readable");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("readable").is_dir() {
            // Checkpoints are not read by the study's loaders: skip their weights.
            if entry.file_name() != "checkpoints" {
                copy_dir(&entry.path(), &target);
            }
        } else {
            std::fs::copy(entry.path(), target).expect("writable");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let root = tmp.path().join("study");
    copy_dir(template(), &root);
    let path = root.join(FILES[usize::from(pick & 0x7f) % FILES.len()]);
    std::fs::write(&path, bytes).expect("writable");
    if pick & 0x80 == 0 {
        // Without the models' ledgers the parsers read the bytes themselves (with them, a
        // replaced measurement file is refused by its checksum first).
        for task in ["number", "letter"] {
            let _ = std::fs::remove_file(root.join("seed-0").join(task).join("measured.json"));
        }
    }
    if let Ok(files) = StudyFiles::load(&root, &[0]) {
        let _ = verdicts(&files, &Thresholds::default());
    }
    let _ = read_scores(&path);
});
