//! # ropelab-sweep
//!
//! Sweeps (docs/sweeps.md): a base run config and axes, expanded to jobs with stable ids
//! ([`spec`]) and priced by a measured steps/s ([`estimate`]); run on this machine, in parallel, by shard, skipping finished jobs and resuming
//! interrupted ones ([`local`]), each measured as its task asks ([`measure`]); or as a Slurm job array ([`slurm`]); and merged into one table
//! with means over seeds ([`collect`]).

pub mod collect;
mod consistent;
pub mod estimate;
pub mod local;
pub mod measure;
pub mod need;
pub mod plan;
pub mod slurm;
pub mod spec;

pub use local::{
    job_state, job_state_measured, run_job, run_jobs, JobResult, JobState, Pool, RunSummary,
};
pub use measure::MeasureOptions;
pub use spec::{Job, Sweep};

/// What can go wrong in a sweep.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A bad sweep file.
    #[error("{origin}: {message}")]
    Spec {
        /// The file.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A job's directory holds a result or run of another run config: not reused, and not
    /// retried by running again (the message says what to change).
    #[error("job {id}: {message}")]
    Stale {
        /// The job id.
        id: String,
        /// What differs and what to do.
        message: String,
    },
    /// A job failed.
    #[error("job {id}: {message}")]
    Job {
        /// The job id.
        id: String,
        /// What went wrong.
        message: String,
    },
    /// Training or a run directory.
    #[error(transparent)]
    Train(#[from] ropelab_train::TrainError),
    /// Scoring.
    #[error(transparent)]
    Analysis(#[from] ropelab_analysis::AnalysisError),
    /// JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A CSV file.
    #[error(transparent)]
    Csv(#[from] ropelab_io::CsvError),
    /// A file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Result alias of the sweep crate.
pub type Result<T> = std::result::Result<T, SweepError>;
