//! Random mutations of the study config TOML and of the files a finished study directory
//! holds (`scores.jsonl`, `lengthgen.csv`, the eval JSON, `metrics.jsonl`, the theory CSVs,
//! `tasks.json`, `training.json`), through every reader: the config parser, the claims' loader
//! and verdicts, and the scores reader. Whatever the bytes: Ok or an error, never a panic.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use ropelab_analysis::claims::{verdicts, StudyFiles};
use ropelab_study::job::read_scores;
use ropelab_study::{reproduce, StudyConfig};

const SMALL_STUDY: &str = "name = \"small\"\nseeds = [3]\n[tasks]\ntrain = 500\nval = 20\n\
     test = 40\ntarget_window = 8\npre_window = 8\nhops = [1, 2, 3, 4]\n\
     [train]\npreset = \"tiny\"\nsteps = 5\n\
     [score]\nsamples = 10\n\
     [lengthgen]\nextras = [0, 20]\nsamples = 8\n\
     [theory]\nmax_n = 50\nd = 8\nbases = [100.0]\nlengths = [64]\ndraws = 2\nrho = 0.5\n";

/// A finished small study, made once per test process.
fn template() -> &'static Path {
    static STUDY: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = STUDY.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("study");
        let config = StudyConfig::parse(SMALL_STUDY, "small.toml").unwrap();
        let options = ropelab_study::Options {
            parallel: Some(1),
            ..Default::default()
        };
        reproduce(&config, &out, &options, &ropelab_study::Quiet, |_| Ok(())).unwrap();
        (dir, out)
    });
    path
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Byte edits: (position, new byte), then an optional cut.
fn mutate(
    bytes: &mut Vec<u8>,
    edits: &[(prop::sample::Index, u8)],
    cut: Option<prop::sample::Index>,
) {
    for (i, b) in edits {
        if !bytes.is_empty() {
            let at = i.index(bytes.len());
            bytes[at] = *b;
        }
    }
    if let Some(c) = cut {
        let at = c.index(bytes.len() + 1);
        bytes.truncate(at);
    }
}

/// The files of the study that its readers parse.
const FILES: [&str; 9] = [
    "seed-3/number/scores.jsonl",
    "seed-3/letter/scores.jsonl",
    "seed-3/number/lengthgen.csv",
    "seed-3/number/eval/step-000005-extra-0.json",
    "seed-3/letter/metrics.jsonl",
    "theory/discrepancy-index.csv",
    "theory/rope-failures.csv",
    "tasks.json",
    "training.json",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// The study config parser (and the resource estimate of what it accepts).
    #[test]
    fn mutated_study_configs_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut bytes = SMALL_STUDY.as_bytes().to_vec();
        mutate(&mut bytes, &edits, cut);
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(config) = StudyConfig::parse(&text, "small.toml") {
            let _ = ropelab_study::resources::need(&config, Path::new("out"), Some(1));
        }
    }

    /// Every result file of a study, mutated, through the claims' loader and the verdicts.
    #[test]
    fn mutated_study_files_never_panic(
        file in 0usize..FILES.len(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
        keep_ledgers in any::<bool>(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("study");
        copy_dir(template(), &root);
        if !keep_ledgers {
            // Without the models' ledgers the parsers read the mutated bytes themselves (with
            // them, a changed measurement file is refused by its checksum first).
            remove_ledgers(&root);
        }
        let path = root.join(FILES[file]);
        let mut bytes = std::fs::read(&path).unwrap();
        mutate(&mut bytes, &edits, cut);
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(files) = StudyFiles::load(&root, &[3]) {
            let config = StudyConfig::parse(SMALL_STUDY, "small.toml").unwrap();
            let _ = verdicts(&files, &config.claims);
        }
        let _ = read_scores(&root.join("seed-3/number/scores.jsonl"));
    }
}

/// The unmutated study loads, and a damaged scores line is an error naming file and line.
#[test]
fn a_damaged_scores_line_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("study");
    copy_dir(template(), &root);
    assert!(StudyFiles::load(&root, &[3]).is_ok());
    let path = root.join("seed-3/number/scores.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("\"s_pos\"", "\"s_pos\" x", 1)).unwrap();
    // The ledger catches the change first, naming the file.
    let err = StudyFiles::load(&root, &[3]).unwrap_err().to_string();
    assert!(
        err.contains("seed-3/number/scores.jsonl") && err.contains("replaced"),
        "{err}"
    );
    // Without it, the parser names the file and the line.
    remove_ledgers(&root);
    let err = StudyFiles::load(&root, &[3]).unwrap_err().to_string();
    assert!(
        err.contains("scores.jsonl") && err.contains("line 1"),
        "{err}"
    );
}

/// Removes the ledgers (`measured.json`) of the study's models.
fn remove_ledgers(root: &Path) {
    for task in ["number", "letter"] {
        std::fs::remove_file(root.join("seed-3").join(task).join("measured.json")).unwrap();
    }
}
