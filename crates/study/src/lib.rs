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

pub mod canonical;
pub mod config;
pub mod datasets;
pub mod job;
pub mod languages;
pub mod offset;
pub mod pretrained;
pub mod resources;
pub mod run;
pub mod summary;
pub mod theory;

pub use config::StudyConfig;
pub use run::{reproduce, Milestone};

/// Where a long stage reports progress (the command line draws a bar per stage).
pub trait Progress: Sync {
    /// A stage of `total` units starts (`label`, e.g. "train s0 number"); dropping the returned
    /// handle ends it.
    fn stage(&self, label: &str, total: u64) -> Box<dyn Stage + '_>;
}

/// A running stage.
pub trait Stage {
    /// Units done so far.
    fn set(&self, done: u64);
    /// The total, when it is learned late.
    fn set_total(&self, total: u64);
    /// A short status message (e.g. the current loss).
    fn message(&self, message: String);
}

/// Progress that goes nowhere (tests, quiet runs).
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn stage(&self, _: &str, _: u64) -> Box<dyn Stage + '_> {
        Box::new(Quiet)
    }
}

impl Stage for Quiet {
    fn set(&self, _: u64) {}
    fn set_total(&self, _: u64) {}
    fn message(&self, _: String) {}
}
