//! The whole study in one call: what `ropelab reproduce` runs. Each stage writes its files and
//! then hands its rows to `report`, which the command line prints.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ropelab_analysis::claims::{self, Claim, StudyFiles};
use ropelab_analysis::StudyDir;
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
    /// The pretrained-model stage (`pretrained/`).
    Pretrained(&'a PretrainedStage),
    /// The self-contained HTML report (`report.html`).
    Report(&'a Path),
}

/// What became of the pretrained-model stage.
#[derive(Debug, Clone, PartialEq)]
pub enum PretrainedStage {
    /// The config has no `[pretrained]` table, or the caller skipped it.
    Skipped,
    /// It could not run (the model could not be fetched, ...): why. The study still stands and
    /// the report says so.
    NotRun(String),
    /// The files it wrote (or reused).
    Written(Vec<PathBuf>),
}

/// How [`reproduce`] runs the study.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Models trained at once (default: one per core). Results do not depend on it.
    pub parallel: Option<usize>,
    /// Skip the pretrained-model stage even when the config has a `[pretrained]` table.
    pub no_pretrained: bool,
    /// The command line the report names as the one that made it.
    pub command: String,
}

/// Runs the study described by `config` in `out`: locks the directory, refuses one that holds a
/// study with another config (before writing anything), then datasets, one job per (seed, task)
/// (`options.parallel` at a time; default one per core), the summary over seeds, the theory
/// part, the implicit-bias and canonical experiments (when configured), the verdict per claim,
/// the pretrained-model stage (when configured and not skipped) and the report. Returns the
/// verdicts.
pub fn reproduce(
    config: &StudyConfig,
    out: &Path,
    options: &Options,
    progress: &dyn Progress,
    mut report: impl FnMut(Milestone<'_>) -> Result<()>,
) -> Result<Vec<Claim>> {
    let study = StudyDir::new(out);
    let _lock = DirLock::acquire(out)?;
    config.check_matches_existing(out)?;
    ropelab_analysis::claims::files::refuse_planned_arrays(out, "study")?;
    // A model directory replaced by another config's run is refused before anything is
    // written (the plan, the datasets); the grid checks again before it trains.
    crate::grid::refuse_stale(&job::sweep_jobs(config, &job::jobs(config))?, out)?;
    report(Milestone::Start)?;
    let config_key = config_pending(config, out)?;

    let rows = datasets::generate(config, out, progress)?;
    write_json(
        &study.tasks(),
        serde_json::to_string_pretty(&rows)?.as_bytes(),
    )?;
    report(Milestone::Datasets(&rows))?;
    let invalid = datasets::invalid(&rows);
    anyhow::ensure!(
        invalid == 0,
        "{invalid} generated samples failed validation"
    );

    let jobs = job::jobs(config);
    let parallel = options.parallel;
    let trained = job::run_jobs(config, &jobs, out, parallel, progress)?;
    write_json(
        &study.training(),
        serde_json::to_string_pretty(&trained)?.as_bytes(),
    )?;
    report(Milestone::Trained(&trained))?;
    crate::compose::run(config, out, parallel, progress)?;
    report(Milestone::OverSeeds(&over_seeds(
        &trained,
        config.claims.gamma,
    )?))?;

    let theory = crate::theory::run(config, out, progress)?;
    report(Milestone::Theory(&theory))?;

    if let Some(plan) = &config.offset {
        let experiment = plan.experiment()?;
        let outcome = crate::offset::run(&experiment, &study.offset(), parallel, progress)?;
        report(Milestone::Offset(&experiment, &outcome))?;
    }

    if let Some(plan) = &config.canonical {
        let mut done = vec![];
        for experiment in plan.experiments()? {
            let dir = study.canonical(experiment.task.kind);
            let summary = crate::canonical::run(&experiment, &dir, parallel, progress)?;
            done.push((experiment, summary));
        }
        report(Milestone::Canonical(&done))?;
    }

    // The verdicts read only what the study measured (each model's ledger was checked when
    // its files were read back after training; StudyFiles::load verifies them again).
    let files = StudyFiles::load_expecting(out, &config.seeds, &job::expected_files(config))?;
    let verdicts = claims::verdicts(&files, &config.claims);
    // Recorded in the study's ledger: the report shows these verdicts only while they are the
    // ones written here (a hand edit is refused by name).
    ropelab_analysis::claims::files::record_table(
        &study.claims(),
        "claims",
        serde_json::to_string_pretty(&verdicts)?.as_bytes(),
    )?;
    config_vouched(out, &config_key)?;
    report(Milestone::Claims(&verdicts))?;

    let pretrained = match (&config.pretrained, options.no_pretrained) {
        // The real model is fetched with pip: without it the study still stands, and the
        // report says why this part was not run.
        (Some(plan), false) => match crate::pretrained::run(out, plan, progress) {
            Ok(files) => PretrainedStage::Written(files),
            Err(e) => PretrainedStage::NotRun(format!("{e:#}")),
        },
        _ => PretrainedStage::Skipped,
    };
    report(Milestone::Pretrained(&pretrained))?;

    let page = study.report();
    let html = ropelab_report::report(out, &options.command)?;
    write_atomic(&page, html.as_bytes())
        .with_context(|| format!("cannot write {}", page.display()))?;
    report(Milestone::Report(&page))?;
    Ok(verdicts)
}

fn write_json(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// Writes the study config `config` into `out`, recorded in its ledger as pending unless the
/// ledger already vouches for these very bytes; returns its ledger key. It is vouched for by
/// [`config_vouched`] once the claims are written: the report shows it only while it is the
/// config the study ran (fifteenth pass, S-2), and a rerun that fails before its claims
/// leaves it pending, never vouched for (eighteenth pass, S2).
pub(crate) fn config_pending(config: &StudyConfig, out: &Path) -> Result<String> {
    let study = StudyDir::new(out);
    let config_key = ropelab_analysis::measure::keys::study_table("config");
    let text = config.to_toml();
    let unchanged = std::fs::read(study.config()).is_ok_and(|b| b == text.as_bytes())
        && ropelab_io::Ledger::check(out, "config.toml", &config_key)
            .is_ok_and(|s| s == ropelab_io::Standing::Own);
    if !unchanged {
        ropelab_io::Ledger::begin(out, "config.toml", &config_key)
            .with_context(|| format!("cannot record {}", study.config().display()))?;
        write_json(&study.config(), text.as_bytes())?;
    }
    Ok(config_key)
}

/// Vouches for the config [`config_pending`] wrote into `out` under `key`.
pub(crate) fn config_vouched(out: &Path, key: &str) -> Result<()> {
    ropelab_io::Ledger::finish(out, "config.toml", key)
        .with_context(|| format!("cannot record {}", StudyDir::new(out).config().display()))
}

/// Checks that a finished study's `claims.json` (in `out`) is what its config and measured
/// files give now: the verdicts are computed again from them and must match it byte for byte.
/// A verdict edited together with its ledger entry passes every checksum but not this
/// (twenty-fifth pass, A-S9). Nothing to check (Ok) where `out` holds no `claims.json` or no
/// `config.toml` (a run, sweep or unfinished study), or lacks a listed seed's folder (the
/// report says what is missing).
pub fn claims_current(out: &Path) -> Result<()> {
    let study = StudyDir::new(out);
    let (claims, config) = (study.claims(), study.config());
    if !claims.is_file() || !config.is_file() {
        return Ok(());
    }
    let config = StudyConfig::load(&config)?;
    // A study of several head counts has its verdicts in each heads-H/ study; one whose
    // listed seed has lost its folder is reported as lacking it.
    let present = study.seeds().unwrap_or_default();
    if config.head_counts().is_some() || config.seeds.iter().any(|s| !present.contains(s)) {
        return Ok(());
    }
    let files = StudyFiles::load_expecting(out, &config.seeds, &job::expected_files(&config))
        .with_context(|| {
            format!(
                "{} cannot be checked against the files it was computed from",
                claims.display()
            )
        })?;
    let verdicts = claims::verdicts(&files, &config.claims);
    let now = serde_json::to_string_pretty(&verdicts)?;
    let written = std::fs::read_to_string(&claims)
        .with_context(|| format!("cannot read {}", claims.display()))?;
    anyhow::ensure!(
        written == now,
        "{} is not what the study's config and measured files give now (a verdict edited, or \
         files measured again since): run `ropelab reproduce` on the study again, which computes \
         its verdicts anew",
        claims.display()
    );
    Ok(())
}
