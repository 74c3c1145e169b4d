//! The study configuration `reproduce` runs: an embedded default (`configs/quick.toml`), the
//! paper-scale one (`configs/paper.toml`), or a user's TOML file.

use std::path::Path;

use anyhow::{Context, Result};
use ropelab_tasks::Layout;
use serde::{Deserialize, Serialize};

/// The embedded default study: minutes on 2 CPU cores.
pub const QUICK: &str = include_str!("../../../configs/quick.toml");
/// The embedded full-scale study of the paper.
pub const PAPER: &str = include_str!("../../../configs/paper.toml");

/// A whole study, as `reproduce` runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyConfig {
    /// Name of the study (used in reports).
    pub name: String,
    /// Master seed: fixes data, initialisation and order.
    pub seed: u64,
    /// Dataset sizes and task layout.
    pub tasks: TasksConfig,
    /// Training of one model per task.
    pub train: StudyTrain,
    /// The theory lab's experiments.
    pub theory: StudyTheory,
}

/// The theory part of the study: discrepancy curves and the RoPE failure table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyTheory {
    /// Largest query position of the discrepancy curves.
    pub max_n: usize,
    /// Head dimension of the RoPE statistics.
    pub d: usize,
    /// Frequency bases.
    pub bases: Vec<f64>,
    /// Context lengths.
    pub lengths: Vec<usize>,
    /// (q, k1, k2) draws per (base, length).
    pub draws: usize,
    /// Correlation of keys with the query.
    pub rho: f64,
}

/// How `reproduce` trains its models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyTrain {
    /// Training preset (`paper`, `quick` or `tiny`); data sizes, layout and seed come from
    /// the study.
    pub preset: String,
    /// Optimizer steps (default: the preset's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<usize>,
}

/// Dataset sizes per split and the task layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksConfig {
    /// Training samples per task.
    pub train: usize,
    /// Validation samples per task.
    pub val: usize,
    /// Test samples per task.
    pub test: usize,
    /// Target-type tokens the answer can sit in.
    pub target_window: usize,
    /// Pre-target tokens that can hold intermediate hops.
    pub pre_window: usize,
    /// Hop counts, in equal shares.
    pub hops: Vec<usize>,
}

impl TasksConfig {
    /// The split sizes as a training data config.
    pub fn data(&self) -> ropelab_train::DataConfig {
        ropelab_train::DataConfig {
            train: self.train,
            val: self.val,
            test: self.test,
        }
    }

    /// The task layout these settings describe.
    pub fn layout(&self) -> Layout {
        Layout {
            target_window: self.target_window,
            pre_window: self.pre_window,
            hops: self.hops.clone(),
        }
    }
}

impl StudyConfig {
    /// Parses a TOML study; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let config: Self =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{origin}: {}", e.message()))?;
        config
            .tasks
            .layout()
            .check()
            .with_context(|| format!("{origin}: [tasks]"))?;
        config
            .train
            .preset
            .parse::<ropelab_train::Preset>()
            .with_context(|| format!("{origin}: [train] preset"))?;
        anyhow::ensure!(
            config.train.steps != Some(0),
            "{origin}: [train] steps must be at least 1"
        );
        for (split, n) in [
            ("train", config.tasks.train),
            ("val", config.tasks.val),
            ("test", config.tasks.test),
        ] {
            anyhow::ensure!(n > 0, "{origin}: [tasks] {split} must be at least 1");
        }
        Ok(config)
    }

    /// Reads a TOML study from a file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The embedded default or paper study.
    pub fn embedded(paper: bool) -> Self {
        let (text, origin) = if paper {
            (PAPER, "configs/paper.toml")
        } else {
            (QUICK, "configs/quick.toml")
        };
        Self::parse(text, origin).expect("embedded configs are tested")
    }

    /// The resolved config as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a study config always serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_configs_parse_and_round_trip() {
        for paper in [false, true] {
            let c = StudyConfig::embedded(paper);
            assert_eq!(StudyConfig::parse(&c.to_toml(), "round trip").unwrap(), c);
        }
        let paper = StudyConfig::embedded(true);
        assert_eq!(
            (paper.tasks.train, paper.tasks.val, paper.tasks.test),
            (432_000, 2_400, 45_600)
        );
    }

    #[test]
    fn bad_configs_name_the_file_and_the_problem() {
        let err = StudyConfig::parse("name = 1", "my.toml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("my.toml:"), "{err}");
        let text = QUICK.replace("hops = [1, 2, 3, 4]", "hops = [1, 12]");
        let err = format!("{:#}", StudyConfig::parse(&text, "my.toml").unwrap_err());
        assert!(err.contains("my.toml") && err.contains("12 hops"), "{err}");
        let text = QUICK.replace("preset = \"quick\"", "preset = \"huge\"");
        let err = format!("{:#}", StudyConfig::parse(&text, "my.toml").unwrap_err());
        assert!(err.contains("unknown preset"), "{err}");
        let text = QUICK.replace("seed = 0", "seed = 0\ncolour = \"red\"");
        let err = StudyConfig::parse(&text, "my.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("colour"), "{err}");
    }
}
