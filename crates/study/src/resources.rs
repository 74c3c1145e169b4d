//! The study's up-front resource estimate: computed from its config before anything is
//! written (see [`ropelab_io::resources`]).

use std::path::Path;

use anyhow::Result;
use ropelab_io::Need;
use ropelab_tasks::{line_bytes, Dataset, Split, Task};
use ropelab_train::resources::kept_checkpoints;
use ropelab_train::{training_need, Engine};

use crate::job::{jobs, run_dir, workers};
use crate::StudyConfig;

/// Memory and disk of `reproduce` with `config` in `out`, `parallel` models at a time
/// (default: one per core). Memory: the largest model's training, scoring or length pass (they
/// run one after another within a job) times the models trained at once, or the theory part
/// if larger. Disk: every model's checkpoints, metrics and scores, and the test datasets.
pub fn need(config: &StudyConfig, out: &Path, parallel: Option<usize>) -> Result<Need> {
    let jobs = jobs(config);
    let at_once = workers(parallel, jobs.len()) as u64;
    let (mut job_memory, mut largest) = (0u64, String::new());
    let mut need = Need::new();
    for &(seed, kind) in &jobs {
        let run = config.train.run_config(kind, seed, &config.tasks)?;
        let dir = out.join(run_dir(seed, kind));
        let train = training_need(&run, &dir, 0, Engine::Fused);
        let score = config
            .score_options()
            .need(&run, &dir, kept_checkpoints(&run, 0));
        let lengths = config.length_options().need(&run);
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
            .disk(out, train.disk_bytes(), format!("seed {seed} {kind} run"))
            .disk(
                out,
                score.disk_bytes(),
                format!("seed {seed} {kind} scores"),
            );
        let task = Task::new(kind, config.tasks.layout())?;
        let test = Dataset::new(task, seed, Split::Test, config.tasks.data().test, 0)?;
        let lines = config.tasks.data().test as u64;
        need = need.disk(
            out,
            line_bytes(&test).saturating_mul(lines),
            format!("seed {seed} {kind} test data"),
        );
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
        giant.train.n_heads = Some(32);
        giant.train.d_mlp = Some(16384);
        let big = super::need(&giant, out, Some(2)).unwrap();
        assert!(big.memory_bytes() > 100 << 30, "{big:?}");
        // Two models at once need about twice one.
        let one = super::need(&giant, out, Some(1)).unwrap();
        assert!(big.memory_bytes() >= 2 * one.memory_bytes() - 1);
    }
}
