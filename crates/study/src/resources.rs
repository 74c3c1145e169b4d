//! The study's up-front resource estimate: computed from its config before anything is
//! written (see [`ropelab_io::resources`]).

use std::path::{Path, PathBuf};

use anyhow::Result;
use ropelab_io::resources::bytes;
use ropelab_io::Need;
use ropelab_tasks::{line_bytes, Dataset, Split, Task};

use crate::job::{self, jobs};
use crate::StudyConfig;
use ropelab_analysis::StudyDir;

/// Memory, disk and arithmetic of `reproduce` with `config` in `out`, `parallel` models at a
/// time (default: one per core): every stage the config asks for, one after another, each
/// estimated by the code that runs it ([`crate::grid::need`] for every grid of models: the
/// study's models, the `[compose]` models, the `[offset]` and `[canonical]` experiments; the
/// theory part's failure table). Memory: the largest stage's; disk and arithmetic: all of
/// them, and the test datasets.
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
    let mut need = Need::new();
    for (study, root) in &studies {
        let options = job::measure_options(study);
        let models = job::sweep_jobs(study, &jobs(study))?;
        need = need.then(crate::grid::need(&models, root, &options, parallel));
        // Every sample of every split is generated and validated before training.
        let data = study.tasks.data();
        let samples = bytes(&[study.seeds.len(), 2])
            .saturating_mul((data.train as u64).saturating_add(data.val as u64));
        need = need.compute(
            samples.saturating_mul(ropelab_tasks::SAMPLE_WORK),
            format!("generating and validating {samples} samples"),
        );
        for &(seed, kind) in &jobs(study) {
            let task = Task::new(kind, study.tasks.layout())?;
            let test = Dataset::new(task, seed, Split::Test, study.tasks.data().test, 0)?;
            let lines = study.tasks.data().test as u64;
            need = need.disk(
                root,
                line_bytes(&test).saturating_mul(lines),
                format!("seed {seed} {kind} test data"),
            );
        }
        if let Some(compose) = &study.compose {
            let models = compose.jobs(study)?;
            need = need.then(crate::grid::need(&models, root, &options, parallel));
        }
        let dir = StudyDir::new(root);
        if let Some(offset) = &study.offset {
            need = need.then(offset.experiment()?.need(&dir.offset(), parallel));
        }
        if let Some(canonical) = &study.canonical {
            for e in canonical.experiments()? {
                need = need.then(e.need(&dir.canonical(e.task.kind), parallel)?);
            }
        }
    }
    if let Some(pretrained) = &config.pretrained {
        need = need.then(pretrained.need());
    }
    Ok(need.then(config.failure_config().need()))
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
        assert!(big.memory_bytes() > need.memory_bytes());
        assert!(big.memory_bytes() > 100 << 30, "{big:?}");
        // Two models at once need about twice one.
        let one = super::need(&giant, out, Some(1)).unwrap();
        assert!(big.memory_bytes() >= 2 * one.memory_bytes() - 1);
    }
}

#[cfg(test)]
mod stage_tests {
    use super::*;

    /// Every stage's size knob reaches the estimate (issue 55, item 1): an absurd value in the
    /// `[offset]` or `[canonical]` table makes the study's estimate absurd, and `[compose]`
    /// models are counted.
    #[test]
    fn every_stage_of_the_config_is_in_the_estimate() {
        let out = Path::new("runs/reproduce");
        let base = StudyConfig::embedded(false);
        let normal = need(&base, out, Some(2)).unwrap().seconds();
        let year = 365.0 * 86_400.0;
        assert!(normal < 3600.0, "{normal}");
        type Set = fn(&mut StudyConfig);
        let absurd: [(&str, Set); 3] = [
            ("offset steps", |c| {
                c.offset.as_mut().unwrap().steps = 1_000_000_000_000
            }),
            ("offset per_length", |c| {
                c.offset.as_mut().unwrap().per_length = 1_000_000_000_000
            }),
            ("canonical steps", |c| {
                c.canonical.as_mut().unwrap().steps = 1_000_000_000_000
            }),
        ];
        for (what, set) in absurd {
            let mut c = base.clone();
            set(&mut c);
            let seconds = need(&c, out, Some(2)).unwrap().seconds();
            assert!(seconds > year, "{what}: {seconds} s");
        }
        // The [compose] models (sized by the study's own training) add their share.
        let mut c = base.clone();
        c.compose = Some(crate::compose::StudyCompose {
            layers: 1,
            seeds: vec![c.seeds[0]],
        });
        assert!(need(&c, out, Some(2)).unwrap().seconds() > normal);
    }
}
