//! A head's type from its swap scores: pure positional, pure symbolic, or mixed, at a purity
//! tolerance gamma (docs/metric.md, "Purity, entropy, dynamics").

use serde::{Deserialize, Serialize};

use crate::swap::SwapScores;
use crate::{AnalysisError, Result};

/// The paper's purity tolerance: a head is pure positional when s_POS >= 1 - GAMMA and
/// s_SYM <= GAMMA (and the other way round for symbolic).
pub const GAMMA: f64 = 0.1;

/// The stricter tolerance also written to scores.jsonl.
pub const GAMMA_STRICT: f64 = 0.05;

/// A head's type at a purity tolerance gamma.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeadKind {
    /// Neither pure type (written "none" in run files).
    #[serde(rename = "none")]
    Mixed,
    /// s_POS >= 1 - gamma and s_SYM <= gamma.
    Positional,
    /// s_SYM >= 1 - gamma and s_POS <= gamma.
    Symbolic,
}

impl std::fmt::Display for HeadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HeadKind::Mixed => "mixed",
            HeadKind::Positional => "positional",
            HeadKind::Symbolic => "symbolic",
        })
    }
}

/// The purity of scores at tolerance `gamma` (in (0, 0.5)).
pub fn purity(s: SwapScores, gamma: f64) -> HeadKind {
    if s.s_pos >= 1.0 - gamma && s.s_sym <= gamma {
        HeadKind::Positional
    } else if s.s_sym >= 1.0 - gamma && s.s_pos <= gamma {
        HeadKind::Symbolic
    } else {
        HeadKind::Mixed
    }
}

/// Checks a purity tolerance.
pub fn check_gamma(gamma: f64) -> Result<()> {
    if gamma > 0.0 && gamma < 0.5 {
        Ok(())
    } else {
        Err(AnalysisError::Invalid(format!(
            "gamma must be in (0, 0.5), got {gamma}"
        )))
    }
}
