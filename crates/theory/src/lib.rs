//! # ropelab-theory
//!
//! Theorems of the seed papers turned into computations (docs/theory.md); only [`construct`]
//! uses tensors:
//! - [`construct`]: the Index and Retrieval heads of theorem 3.1 as real one-layer models run
//!   through the model crate's attention code, verified on every input up to a length;
//! - [`discrepancy`]: the logit margin of the hand-built Index (positional) and Retrieval
//!   (symbolic) heads, computed exactly over every input of a length, against the theorem's
//!   bounds;
//! - [`schedule`], [`product`], [`stats`], [`failures`]: RoPE's score S(m) = q^T R(m) k for
//!   plain and llama3-scaled frequency schedules, its normal approximation, and the four failure
//!   events (position and token inversion and aliasing) under f32 / bf16 / f16 rounding.

pub mod construct;
pub mod discrepancy;
pub mod failures;
pub mod format;
pub mod periodic;
pub mod product;
pub mod schedule;
pub mod stats;

/// A parameter the theory computations cannot use, or a failed tensor op.
#[derive(Debug, thiserror::Error)]
pub enum TheoryError {
    /// The parameter, its value and why it is wrong.
    #[error("{0}")]
    Invalid(String),
    /// The hand-built heads run through the model's attention code.
    #[error(transparent)]
    Model(#[from] ropelab_model::ModelError),
    /// A tensor op failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// Result alias of the theory crate.
pub type Result<T> = std::result::Result<T, TheoryError>;

pub(crate) fn invalid<T>(message: impl Into<String>) -> Result<T> {
    Err(TheoryError::Invalid(message.into()))
}
