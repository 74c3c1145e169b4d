//! The layout of a study directory (`ropelab reproduce --out DIR`, docs/study.md), in one
//! place: every stage that writes a part of it and every reader (the claims, the report, the
//! command line) asks this type where that part lives.
//!
//! ```text
//! DIR/config.toml  tasks.json  training.json  claims.json  report.html
//! DIR/seed-S/data/<task>-test.jsonl   DIR/seed-S/<task>/   (one run directory per model)
//! DIR/theory/*.csv   DIR/offset/   DIR/canonical/<kind>/   DIR/pretrained/
//! ```
//!
//! A study that lists several head counts (`n_heads = [2, 4]`) holds one such study per count
//! in `DIR/heads-H/`, beside `DIR/config.toml`, `DIR/heads.csv` and `DIR/report.html`.

use std::path::{Path, PathBuf};

use ropelab_tasks::{CanonicalKind, TaskKind};

/// A study directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StudyDir {
    root: PathBuf,
}

impl StudyDir {
    /// The study directory at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The study's config, as it ran (`config.toml`).
    pub fn config(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// Every seed's datasets, validated (`tasks.json`).
    pub fn tasks(&self) -> PathBuf {
        self.root.join("tasks.json")
    }

    /// Every model's training and test summary (`training.json`).
    pub fn training(&self) -> PathBuf {
        self.root.join("training.json")
    }

    /// The verdict per claim (`claims.json`).
    pub fn claims(&self) -> PathBuf {
        self.root.join("claims.json")
    }

    /// The self-contained HTML report (`report.html`).
    pub fn report(&self) -> PathBuf {
        self.root.join("report.html")
    }

    /// The run directory of the model of `task` and `seed`, relative to the study directory
    /// (`seed-S/<task>`).
    pub fn model_relative(seed: u64, task: TaskKind) -> PathBuf {
        Path::new(&format!("seed-{seed}")).join(task.as_str())
    }

    /// The run directory of the model of `task` and `seed`.
    pub fn model(&self, seed: u64, task: TaskKind) -> PathBuf {
        self.root.join(Self::model_relative(seed, task))
    }

    /// The number model of `seed` with fewer layers than hops (`seed-S/compose`), relative to
    /// the study directory: the study's `[compose]` stage (docs/multihead.md).
    pub fn compose_relative(seed: u64) -> PathBuf {
        Path::new(&format!("seed-{seed}")).join("compose")
    }

    /// The number model of `seed` with fewer layers than hops.
    pub fn compose(&self, seed: u64) -> PathBuf {
        self.root.join(Self::compose_relative(seed))
    }

    /// The test split of `task` for `seed` (`seed-S/data/<task>-test.jsonl`).
    pub fn test_data(&self, seed: u64, task: TaskKind) -> PathBuf {
        self.root
            .join(format!("seed-{seed}/data/{task}-test.jsonl"))
    }

    /// A file of the theory part (`theory/<file>`).
    pub fn theory(&self, file: &str) -> PathBuf {
        self.root.join("theory").join(file)
    }

    /// The implicit-bias experiment's directory (`offset/`).
    pub fn offset(&self) -> PathBuf {
        self.root.join("offset")
    }

    /// The canonical experiments' directory (`canonical/`).
    pub fn canonical_root(&self) -> PathBuf {
        self.root.join("canonical")
    }

    /// The canonical experiment of one task (`canonical/<kind>/`).
    pub fn canonical(&self, kind: CanonicalKind) -> PathBuf {
        self.canonical_root().join(kind.name())
    }

    /// The pretrained-model stage's directory (`pretrained/`).
    pub fn pretrained(&self) -> PathBuf {
        self.root.join("pretrained")
    }

    /// The study of `n_heads` heads per block inside a study that lists several head counts
    /// (`heads-H/`, docs/multihead.md).
    pub fn heads(&self, n_heads: usize) -> StudyDir {
        StudyDir::new(self.root.join(format!("heads-{n_heads}")))
    }

    /// The comparison of a study per head count (`heads.csv`).
    pub fn heads_csv(&self) -> PathBuf {
        self.root.join("heads.csv")
    }

    /// The head counts of the `heads-H/` studies present, ascending (none when the directory
    /// cannot be read).
    pub fn head_counts(&self) -> Vec<usize> {
        let mut counts: Vec<usize> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("heads-"))
                    .and_then(|s| s.parse().ok())
            })
            .collect();
        counts.sort_unstable();
        counts
    }

    /// The seeds of the `seed-S/` folders present, ascending (none when the directory cannot
    /// be read).
    pub fn seeds(&self) -> std::io::Result<Vec<u64>> {
        let mut seeds: Vec<u64> = std::fs::read_dir(&self.root)?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("seed-"))
                    .and_then(|s| s.parse().ok())
            })
            .collect();
        seeds.sort_unstable();
        Ok(seeds)
    }

    /// The seeds the study's `config.toml` lists (`seeds = [...]`); None without a readable
    /// config or a `seeds` key. A `seed-S/` folder of another seed was left by a run with
    /// other seeds: no model of this study.
    pub fn listed_seeds(&self) -> Option<Vec<u64>> {
        let text = std::fs::read_to_string(self.config()).ok()?;
        let value = text.parse::<toml::Table>().ok()?;
        let seeds = value.get("seeds")?.as_array()?;
        Some(
            seeds
                .iter()
                .filter_map(|s| s.as_integer().and_then(|s| u64::try_from(s).ok()))
                .collect(),
        )
    }

    /// Whether the directory holds a study: a `claims.json` or `seed-S/` folders.
    pub fn is_study(&self) -> bool {
        self.claims().exists() || self.seeds().is_ok_and(|s| !s.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_live_where_the_docs_say_and_seeds_are_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let study = StudyDir::new(dir.path());
        assert!(!study.is_study());
        assert_eq!(
            study.model(3, TaskKind::Letter),
            dir.path().join("seed-3/letter")
        );
        assert_eq!(
            study.test_data(3, TaskKind::Number),
            dir.path().join("seed-3/data/number-test.jsonl")
        );
        assert_eq!(
            study.canonical(CanonicalKind::Partial),
            dir.path().join("canonical/partial")
        );
        for s in ["seed-10", "seed-2", "seed-x", "offset"] {
            std::fs::create_dir(dir.path().join(s)).unwrap();
        }
        assert_eq!(study.seeds().unwrap(), vec![2, 10]);
        assert!(study.is_study());
    }
}
