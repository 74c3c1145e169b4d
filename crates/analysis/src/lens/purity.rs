//! A head's type from its swap scores: pure positional, pure symbolic, or mixed, at a purity
//! tolerance gamma (docs/metric.md, "Purity, entropy, dynamics").

use serde::{Deserialize, Serialize};

use crate::lens::swap::SwapScores;
use crate::{AnalysisError, Result};

/// A purity tolerance gamma, in (0, 0.5): checked once where it is built (a config, a flag,
/// [`Gamma::new`]), so every function that takes a `Gamma` can rely on it. A head is pure
/// positional when s_POS >= 1 - gamma and s_SYM <= gamma (and the other way round for
/// symbolic). Written to files as the plain number.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Gamma(f64);

impl Gamma {
    /// The paper's tolerance, 0.1.
    pub const DEFAULT: Gamma = Gamma(0.1);

    /// The stricter tolerance also written to scores.jsonl, 0.05.
    pub const STRICT: Gamma = Gamma(0.05);

    /// A tolerance; an error unless `gamma` is in (0, 0.5).
    pub fn new(gamma: f64) -> Result<Self> {
        if gamma > 0.0 && gamma < 0.5 {
            Ok(Gamma(gamma))
        } else {
            Err(AnalysisError::Invalid(format!(
                "gamma must be in (0, 0.5), got {gamma}"
            )))
        }
    }

    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Default for Gamma {
    fn default() -> Self {
        Gamma::DEFAULT
    }
}

impl std::fmt::Display for Gamma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Gamma {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let g: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
        Gamma::new(g).map_err(|e| e.to_string())
    }
}

impl TryFrom<f64> for Gamma {
    type Error = String;

    fn try_from(g: f64) -> std::result::Result<Self, String> {
        Gamma::new(g).map_err(|e| e.to_string())
    }
}

impl From<Gamma> for f64 {
    fn from(g: Gamma) -> f64 {
        g.0
    }
}

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

/// The purity of scores at tolerance `gamma`.
pub fn purity(s: SwapScores, gamma: Gamma) -> HeadKind {
    let gamma = gamma.get();
    if s.s_pos >= 1.0 - gamma && s.s_sym <= gamma {
        HeadKind::Positional
    } else if s.s_sym >= 1.0 - gamma && s.s_pos <= gamma {
        HeadKind::Symbolic
    } else {
        HeadKind::Mixed
    }
}
