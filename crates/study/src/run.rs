//! The whole study in one call: what `ropelab reproduce` runs. Each stage writes its files and
//! then hands its rows to `report`, which the command line prints.

use std::path::Path;

use anyhow::{Context, Result};
use ropelab_analysis::claims::{self, Claim, StudyFiles};
use ropelab_io::{write_atomic, DirLock};

use crate::datasets::{self, DatasetRow};
use crate::job::{self, Trained};
use crate::summary::{over_seeds, TaskOverSeeds};
use crate::theory::TheoryResults;
use crate::{Progress, StudyConfig};

/// A finished stage of the study, in order.
#[derive(Debug)]
pub enum Milestone<'a> {
    /// The study starts (after its directory is locked and checked).
    Start,
    /// Every seed's datasets, generated and re-validated (`tasks.json`).
    Datasets(&'a [DatasetRow]),
    /// Every model trained, evaluated, scored and length-tested (`training.json`).
    Trained(&'a [Trained]),
    /// Accuracy and head types over seeds.
    OverSeeds(&'a [TaskOverSeeds]),
    /// The theory lab's curves and failure table (`theory/*.csv`).
    Theory(&'a TheoryResults),
    /// The implicit-bias experiment (`offset/`), when the study has one.
    Offset(&'a crate::offset::Experiment, &'a crate::offset::Outcome),
    /// Frequency-band training on the canonical tasks (`canonical/<task>/`), per task.
    Canonical(
        &'a [(
            crate::canonical::Experiment,
            Vec<crate::canonical::BandSummary>,
        )],
    ),
    /// The verdict per claim (`claims.json`).
    Claims(&'a [Claim]),
}

/// Runs the study described by `config` in `out`: locks the directory, refuses one that holds a
/// study with another config (before writing anything), then datasets, one job per (seed, task)
/// (`parallel` at a time; default one per core), the summary over seeds, the theory part, the
/// implicit-bias experiment (when configured) and the verdict per claim. Returns the verdicts.
pub fn reproduce(
    config: &StudyConfig,
    out: &Path,
    parallel: Option<usize>,
    progress: &dyn Progress,
    mut report: impl FnMut(Milestone<'_>) -> Result<()>,
) -> Result<Vec<Claim>> {
    let _lock = DirLock::acquire(out)?;
    config.check_matches_existing(out)?;
    report(Milestone::Start)?;
    write_json(&out.join("config.toml"), config.to_toml().as_bytes())?;

    let rows = datasets::generate(config, out, progress)?;
    write_json(
        &out.join("tasks.json"),
        serde_json::to_string_pretty(&rows)?.as_bytes(),
    )?;
    report(Milestone::Datasets(&rows))?;
    let invalid = datasets::invalid(&rows);
    anyhow::ensure!(
        invalid == 0,
        "{invalid} generated samples failed validation"
    );

    let jobs = job::jobs(config);
    let trained = job::run_jobs(config, &jobs, out, parallel, progress)?;
    write_json(
        &out.join("training.json"),
        serde_json::to_string_pretty(&trained)?.as_bytes(),
    )?;
    report(Milestone::Trained(&trained))?;
    report(Milestone::OverSeeds(&over_seeds(
        &trained,
        config.claims.gamma,
    )?))?;

    let theory = crate::theory::run(config, out, progress)?;
    report(Milestone::Theory(&theory))?;

    if let Some(plan) = &config.offset {
        let experiment = plan.experiment()?;
        let outcome = crate::offset::run(&experiment, &out.join("offset"), parallel, progress)?;
        report(Milestone::Offset(&experiment, &outcome))?;
    }

    if let Some(plan) = &config.canonical {
        let mut done = vec![];
        for experiment in plan.experiments()? {
            let dir = out.join("canonical").join(experiment.task.kind.name());
            let summary = crate::canonical::run(&experiment, &dir, parallel, progress)?;
            done.push((experiment, summary));
        }
        report(Milestone::Canonical(&done))?;
    }

    // The verdicts read only what the study measured (each model's ledger was checked when
    // its files were read back after training; StudyFiles::load verifies them again).
    let files = StudyFiles::load(out, &config.seeds)?;
    let verdicts = claims::verdicts(&files, &config.claims);
    write_json(
        &out.join("claims.json"),
        serde_json::to_string_pretty(&verdicts)?.as_bytes(),
    )?;
    report(Milestone::Claims(&verdicts))?;
    Ok(verdicts)
}

fn write_json(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}
