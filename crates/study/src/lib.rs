//! # ropelab-study
//!
//! The study `ropelab reproduce` runs (docs/study.md), as a library: the [`config`] (an
//! embedded quick default, the paper-scale study, or a user's TOML), the [`datasets`] of every
//! seed, one [`job`] per (seed, task) (train or resume, test evaluation, scores at every
//! checkpoint, length generalisation; jobs side by side on their own thread pools), the
//! [`summary`] over seeds, and the theory lab's part ([`theory`]). Beside it, the related
//! papers' training experiments: [`languages`] (formal languages, N*). The verdict per claim is
//! `ropelab_analysis::claims`, computed from the files these write. Progress is reported
//! through [`Progress`], so the command line draws bars and tests draw nothing.

pub mod bias;
pub mod canonical;
pub mod compose;
pub mod config;
pub mod datasets;
pub mod grid;
pub mod heads;
pub mod job;
pub mod languages;
pub mod offset;
pub mod pretrained;
pub mod resources;
pub mod run;
pub mod summary;
pub mod theory;

pub use config::StudyConfig;
pub use heads::reproduce_heads;
pub use run::{reproduce, Milestone, Options, PretrainedStage};

pub use ropelab_io::progress::{Progress, Quiet, Stage};

/// Writes `rows` to the CSV table `path`, recorded in the ledger of its directory under
/// `stage` (docs/study.md): no other command's `--out` may then replace it, and a reader
/// refuses it once it is changed by hand.
pub(crate) fn record_csv<T: serde::Serialize>(
    path: &std::path::Path,
    stage: &str,
    rows: &[T],
) -> anyhow::Result<()> {
    ropelab_analysis::claims::files::record_table(
        path,
        stage,
        ropelab_io::to_csv(rows)?.as_bytes(),
    )?;
    Ok(())
}
