//! A study per head count (`[train] n_heads = [2, 4]`, docs/multihead.md): each count runs as
//! its own complete study in `DIR/heads-H/` (its own config, claims and report), one after
//! another; then `DIR/heads.csv` compares them model by model and `DIR/report.html` shows the
//! comparison, every count's claims and its head-type grids.

use std::path::Path;

use anyhow::{Context, Result};
use ropelab_analysis::claims::{Claim, StudyFiles};
use ropelab_analysis::measure::multihead::{rows, HeadCountRow};
use ropelab_analysis::StudyDir;
use ropelab_io::{write_atomic, DirLock};

use crate::run::{reproduce, Milestone, Options};
use crate::{Progress, StudyConfig};

/// What a study per head count found: each count's verdicts, and the comparison rows
/// (`heads.csv`).
#[derive(Debug, Clone)]
pub struct HeadsOutcome {
    /// (head count, its study's verdicts), in the config's order.
    pub verdicts: Vec<(usize, Vec<Claim>)>,
    /// One row per (head count, seed, task).
    pub rows: Vec<HeadCountRow>,
}

/// Runs the study of every head count of `config` (which lists several) in `out/heads-H/`,
/// reporting each one's milestones with its head count, then writes `out/heads.csv` and
/// `out/report.html`. Locks `out` and refuses one that holds another config before writing
/// anything. Returns each count's verdicts and the comparison rows.
pub fn reproduce_heads(
    config: &StudyConfig,
    out: &Path,
    options: &Options,
    progress: &dyn Progress,
    mut report: impl FnMut(usize, Milestone<'_>) -> Result<()>,
) -> Result<HeadsOutcome> {
    let counts = config
        .head_counts()
        .context("reproduce_heads needs a study that lists several head counts")?;
    let study = StudyDir::new(out);
    let _lock = DirLock::acquire(out)?;
    config.check_matches_existing(out)?;
    ropelab_analysis::claims::files::refuse_planned_arrays(out, "study")?;
    // Pending until every head count's claims are written, as a single study's config is
    // (a rerun that fails before then leaves it unvouched).
    let config_key = crate::run::config_pending(config, out)?;
    let mut verdicts = vec![];
    let mut table = vec![];
    for &h in &counts {
        let sub = study.heads(h);
        let claims = reproduce(&config.for_heads(h), sub.root(), options, progress, |m| {
            report(h, m)
        })?;
        let files = StudyFiles::load_expecting(
            sub.root(),
            &config.seeds,
            &crate::job::expected_files(&config.for_heads(h)),
        )?;
        table.extend(rows(
            &files,
            h,
            config.claims.gamma,
            config.claims.length_accuracy,
        ));
        verdicts.push((h, claims));
    }
    crate::run::config_vouched(out, &config_key)?;
    // Recorded in the study's ledger: the report reads the comparison only as written here.
    let csv = ropelab_io::csv_rows::to_csv(&table)?;
    ropelab_analysis::claims::files::record_table(&study.heads_csv(), "heads", csv.as_bytes())
        .with_context(|| format!("cannot write {}", study.heads_csv().display()))?;
    let html = ropelab_report::report(out, &options.command)?;
    write_atomic(&study.report(), html.as_bytes())
        .with_context(|| format!("cannot write {}", study.report().display()))?;
    Ok(HeadsOutcome {
        verdicts,
        rows: table,
    })
}
