//! Errors of the training crate.

use std::path::PathBuf;

/// What can go wrong configuring, running, checkpointing or evaluating a training run.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A bad configuration value.
    #[error("invalid training config: {0}")]
    Config(String),
    /// A config file that does not parse.
    #[error("{path}: {message}")]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The run directory is missing, empty or inconsistent.
    #[error("run directory {path}: {message}")]
    RunDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The loss stopped being finite.
    #[error(
        "the {which} loss became {loss} at step {step}; stopped. The last good checkpoint is {last_good}"
    )]
    Diverged {
        /// Which loss: "training" or "validation".
        which: &'static str,
        /// The step whose loss was not finite.
        step: usize,
        /// The loss value (NaN or inf).
        loss: f32,
        /// The last checkpoint written before the divergence.
        last_good: String,
    },
    /// A model error (bad config, tensor op, checkpoint file).
    #[error(transparent)]
    Model(#[from] ropelab_model::ModelError),
    /// A task error (bad layout, dataset size).
    #[error(transparent)]
    Task(#[from] ropelab_tasks::TaskError),
    /// A tensor op failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// Another process is writing the run directory.
    #[error(transparent)]
    Lock(#[from] ropelab_io::LockError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Result alias of the training crate.
pub type Result<T> = std::result::Result<T, TrainError>;

impl TrainError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TrainError::Io {
            path: path.into(),
            source,
        }
    }

    /// A run-directory error.
    pub fn run_dir(path: impl Into<PathBuf>, message: impl std::fmt::Display) -> Self {
        TrainError::RunDir {
            path: path.into(),
            message: message.to_string(),
        }
    }
}
