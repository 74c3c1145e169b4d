//! # ropelab-theory
//!
//! Theorems of the seed papers turned into computations (spec/theory.md), without tensors:
//! - [`discrepancy`]: the logit margin of the hand-built Index (positional) and Retrieval
//!   (symbolic) heads, computed exactly over every input of a length, against the theorem's
//!   bounds;
//! - [`schedule`], [`product`], [`stats`], [`failures`]: RoPE's score S(m) = q^T R(m) k for
//!   plain and llama3-scaled frequency schedules, its normal approximation, and the four failure
//!   events (position and token inversion and aliasing) under f32 / bf16 / f16 rounding.

pub mod discrepancy;
pub mod failures;
pub mod format;
pub mod periodic;
pub mod product;
pub mod schedule;
pub mod stats;

/// A parameter the theory computations cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TheoryError {
    /// The parameter, its value and why it is wrong.
    #[error("{0}")]
    Invalid(String),
}

/// Result alias of the theory crate.
pub type Result<T> = std::result::Result<T, TheoryError>;

pub(crate) fn invalid<T>(message: impl Into<String>) -> Result<T> {
    Err(TheoryError::Invalid(message.into()))
}
