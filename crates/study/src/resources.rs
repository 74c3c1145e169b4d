//! The study's up-front resource estimate: computed from its config before anything is
//! written (see [`ropelab_io::resources`]).

use std::path::{Path, PathBuf};

use anyhow::Result;
use ropelab_io::Need;
use ropelab_tasks::{line_bytes, Dataset, Split, Task};
use ropelab_train::resources::kept_checkpoints;
use ropelab_train::{training_need, Engine};

use crate::job::{jobs, run_dir, workers};
use crate::StudyConfig;
use ropelab_analysis::StudyDir;

/// Memory and disk of `reproduce` with `config` in `out`, `parallel` models at a time
/// (default: one per core). Memory: the largest model's training, scoring or length pass (they
/// run one after another within a job) times the models trained at once, or the theory part
/// if larger. Disk: every model's checkpoints, metrics and scores, and the test datasets.
pub fn need(config: &StudyConfig, out: &Path, parallel: Option<usize>) -> Result<Need> {
    // A study per head count runs one after another, each in its own directory.
    let studies: Vec<(StudyConfig, PathBuf)> = match config.head_counts() {
        Some(counts) => counts
            .iter()
            .map(|&h| {
                (
                    config.for_heads(h),
                    StudyDir::new(out).heads(h).root().to_path_buf(),
                )
            })
            .collect(),
        None => vec![(config.clone(), out.to_path_buf())],
    };
    let at_once = workers(parallel, jobs(config).len()) as u64;
    let (mut job_memory, mut largest) = (0u64, String::new());
    let mut need = Need::new();
    for (study, root) in &studies {
        for &(seed, kind) in &jobs(study) {
            let run = study.train.run_config(kind, seed, &study.tasks)?;
            let dir = root.join(run_dir(seed, kind));
            let train = training_need(&run, &dir, 0, Engine::Fused);
            let score = study
                .score_options()
                .need(&run, &dir, kept_checkpoints(&run, 0));
            let lengths = study.length_options().need(&run);
            for (bytes, what) in [
                (train.memory_bytes(), "training"),
                (score.memory_bytes(), "scoring"),
                (lengths.memory_bytes(), "length generalisation"),
            ] {
                if bytes > job_memory {
                    (job_memory, largest) = (bytes, format!("{what} of the {kind} model"));
                }
            }
            need = need
                .disk(root, train.disk_bytes(), format!("seed {seed} {kind} run"))
                .disk(
                    root,
                    score.disk_bytes(),
                    format!("seed {seed} {kind} scores"),
                );
            let task = Task::new(kind, study.tasks.layout())?;
            let test = Dataset::new(task, seed, Split::Test, study.tasks.data().test, 0)?;
            let lines = study.tasks.data().test as u64;
            need = need.disk(
                root,
                line_bytes(&test).saturating_mul(lines),
                format!("seed {seed} {kind} test data"),
            );
        }
    }
    let theory = config.failure_config().need();
    let memory = job_memory.saturating_mul(at_once);
    Ok(if theory.memory_bytes() > memory {
        need.memory(theory.memory_bytes(), "the RoPE failure table")
    } else {
        need.memory(memory, format!("{at_once} x {largest} at once"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_study_fits_a_laptop_and_a_giant_one_does_not() {
        let out = Path::new("runs/reproduce");
        let quick = StudyConfig::embedded(false);
        let need = need(&quick, out, Some(2)).unwrap();
        assert!(need.memory_bytes() < 2 << 30, "{need:?}");
        assert!(need.disk_bytes() < 4 << 30, "{need:?}");

        let mut giant = quick.clone();
        giant.train.n_layers = Some(100);
        giant.train.d_model = Some(4096);
        giant.train.n_heads = Some(crate::config::HeadCounts::One(32));
        giant.train.d_mlp = Some(16384);
        let big = super::need(&giant, out, Some(2)).unwrap();
        assert!(big.memory_bytes() > 100 << 30, "{big:?}");
        // Two models at once need about twice one.
        let one = super::need(&giant, out, Some(1)).unwrap();
        assert!(big.memory_bytes() >= 2 * one.memory_bytes() - 1);
    }
}
