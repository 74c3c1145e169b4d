//! Number formats a score can be stored in, with round-to-nearest-even emulation.

use std::fmt;
use std::str::FromStr;

use crate::TheoryError;

/// A floating-point format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberFormat {
    /// IEEE double.
    F64,
    /// IEEE single.
    F32,
    /// bfloat16 (8 exponent bits, 7 mantissa bits).
    Bf16,
    /// IEEE half (5 exponent bits, 10 mantissa bits).
    F16,
}

impl NumberFormat {
    /// `x` rounded to this format (round to nearest, ties to even), back as f64.
    pub fn round(self, x: f64) -> f64 {
        match self {
            NumberFormat::F64 => x,
            NumberFormat::F32 => f64::from(x as f32),
            NumberFormat::Bf16 => half::bf16::from_f64(x).to_f64(),
            NumberFormat::F16 => half::f16::from_f64(x).to_f64(),
        }
    }

    /// The name (`f64`, `f32`, `bf16`, `f16`).
    pub fn name(self) -> &'static str {
        match self {
            NumberFormat::F64 => "f64",
            NumberFormat::F32 => "f32",
            NumberFormat::Bf16 => "bf16",
            NumberFormat::F16 => "f16",
        }
    }
}

impl fmt::Display for NumberFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl FromStr for NumberFormat {
    type Err = TheoryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f64" => Ok(NumberFormat::F64),
            "f32" => Ok(NumberFormat::F32),
            "bf16" => Ok(NumberFormat::Bf16),
            "f16" => Ok(NumberFormat::F16),
            other => Err(TheoryError::Invalid(format!(
                "unknown number format {other:?} (expected f64, f32, bf16 or f16)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_has_the_format_resolution() {
        // bf16 keeps 8 significant bits: 1 + 2^-8 rounds to 1 (tie to even), 1 + 2^-7 stays.
        assert_eq!(NumberFormat::Bf16.round(1.0 + 2f64.powi(-8)), 1.0);
        assert_eq!(
            NumberFormat::Bf16.round(1.0 + 2f64.powi(-7)),
            1.0 + 2f64.powi(-7)
        );
        assert_eq!(NumberFormat::F16.round(1.0 + 2f64.powi(-11)), 1.0);
        assert_eq!(
            NumberFormat::F16.round(1.0 + 2f64.powi(-10)),
            1.0 + 2f64.powi(-10)
        );
        assert_eq!(NumberFormat::F32.round(1.0 + 2f64.powi(-24)), 1.0);
        assert!("fp8"
            .parse::<NumberFormat>()
            .unwrap_err()
            .to_string()
            .contains("unknown number format"));
    }
}
