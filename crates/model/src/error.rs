//! Errors of the model crate.

use std::path::PathBuf;

/// What can go wrong building, running, saving or loading a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A configuration value the model cannot be built with.
    #[error("invalid model config: {0}")]
    Config(String),
    /// A tensor operation failed (shape mismatch, out-of-range id, ...).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A checkpoint file is missing, unreadable or inconsistent with its config.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The file or directory at fault.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A hook name that does not parse.
    #[error("unknown hook {0:?}")]
    UnknownHook(String),
    /// An intervention that does not fit the model (layer, head or plane out of range).
    #[error("invalid intervention: {0}")]
    Intervention(String),
}

/// Result alias of the model crate.
pub type Result<T> = std::result::Result<T, ModelError>;

impl ModelError {
    /// A checkpoint error for `path`.
    pub fn checkpoint(path: impl Into<PathBuf>, message: impl std::fmt::Display) -> Self {
        ModelError::Checkpoint {
            path: path.into(),
            message: message.to_string(),
        }
    }
}
