//! The theory lab's part of the study: the hand-built heads' discrepancy curves and RoPE's
//! failure table, written to `out/theory/`.

use std::path::Path;

use anyhow::Result;
use ropelab_analysis::claims::files::record_table;
use ropelab_theory::discrepancy::{curve, DiscrepancyRow, Mechanism};
use ropelab_theory::failures::{failure_table, FailureConfig, FailureRow};

use crate::{Progress, StudyConfig};

/// What the theory part measured.
#[derive(Debug, Clone)]
pub struct TheoryResults {
    /// (head, its angle theta, its curve) for Index and Retrieval.
    pub curves: Vec<(Mechanism, f64, Vec<DiscrepancyRow>)>,
    /// The failure table's settings.
    pub failures_config: FailureConfig,
    /// The failure rates per (base, length).
    pub failures: Vec<FailureRow>,
}

/// Computes both curves (`theory/discrepancy-{index,retrieval}.csv`) and the failure table
/// (`theory/rope-failures.csv`, aliasing in bf16, draws seeded by the study's first seed).
pub fn run(config: &StudyConfig, out: &Path, progress: &dyn Progress) -> Result<TheoryResults> {
    let t = &config.theory;
    let mut curves = vec![];
    for (mechanism, theta) in [
        (Mechanism::Index, t.index_theta),
        (Mechanism::Retrieval, t.retrieval_theta),
    ] {
        let rows = curve(mechanism, theta, t.alphabet, t.max_n)?;
        // The curves the verdicts read are recorded in the ledger of `theory/`.
        record_table(
            &out.join(format!("theory/discrepancy-{mechanism}.csv")),
            "theory",
            ropelab_io::to_csv(&rows)?.as_bytes(),
        )?;
        curves.push((mechanism, theta, rows));
    }
    let failures_config = config.failure_config();
    let stage = progress.stage("rope-stats", t.bases.len() as u64);
    let failures = failure_table(&failures_config, |done, _| stage.set(done as u64))?;
    drop(stage);
    // The report draws it: recorded too, so no other command's table takes its place.
    record_table(
        &out.join("theory/rope-failures.csv"),
        "theory",
        ropelab_io::to_csv(&failures)?.as_bytes(),
    )?;
    Ok(TheoryResults {
        curves,
        failures_config,
        failures,
    })
}
