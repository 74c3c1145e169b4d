//! # ropelab-analysis
//!
//! The lens of ropelab (docs/metric.md) and what it measures, by role:
//! - [`lens`]: positional / symbolic swap scores of every attention head, computed exactly from
//!   a head's cached q and k (the fast path) and checked against a brute-force re-run of the
//!   block (the reference path); block swaps, per-plane projection heads, frequency use,
//!   purity, attention entropy; the same lens on a pretrained model;
//! - [`measure`]: the experiments' measurements from their runs and files (the learning
//!   dynamics of a run, length generalisation, seeds, languages, offset, canonical tasks);
//! - [`claims`]: the verdict per claim, from the files a study wrote;
//! - [`StudyDir`]: the layout of a study directory.

pub mod claims;
pub mod lens;
pub mod measure;
pub mod study_dir;

pub use lens::capture::Captured;
pub use lens::head::HeadView;
pub use lens::swap::{block_swap_scores, swap_scores, SwapScores};
pub use study_dir::StudyDir;

/// What can go wrong scoring heads.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    /// A bad argument (query position, tau, gamma, block count).
    #[error("{0}")]
    Invalid(String),
    /// A model error.
    #[error(transparent)]
    Model(#[from] ropelab_model::ModelError),
    /// A training-side error (run directory, checkpoints).
    #[error(transparent)]
    Train(#[from] ropelab_train::TrainError),
    /// A task error.
    #[error(transparent)]
    Task(#[from] ropelab_tasks::TaskError),
    /// A pretrained-model error (fetching, GGUF, tokenizer).
    #[error(transparent)]
    Pretrained(#[from] ropelab_pretrained::PretrainedError),
    /// A theory-lab error.
    #[error(transparent)]
    Theory(#[from] ropelab_theory::TheoryError),
    /// A tensor op failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Result alias of the analysis crate.
pub type Result<T> = std::result::Result<T, AnalysisError>;
