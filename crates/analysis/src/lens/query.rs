//! Which query positions a head is scored at.

use std::str::FromStr;

use crate::{AnalysisError, Result};

/// Which query positions a head is scored at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryMode {
    /// The last input position (the task's query).
    Last,
    /// Every position on the chain that jumps: the query and the intermediate hops.
    Hops,
    /// A fixed position (at least 2, so that two earlier keys can be swapped).
    At(usize),
}

impl FromStr for QueryMode {
    type Err = AnalysisError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "last" => Ok(QueryMode::Last),
            "hops" => Ok(QueryMode::Hops),
            other => match other.parse::<usize>() {
                Ok(p) if p >= 2 => Ok(QueryMode::At(p)),
                Ok(p) => Err(AnalysisError::Invalid(format!(
                    "query position {p} has fewer than two earlier keys to swap (use 2 or more)"
                ))),
                Err(_) => Err(AnalysisError::Invalid(format!(
                    "unknown query {other:?} (expected last, hops or a position)"
                ))),
            },
        }
    }
}
