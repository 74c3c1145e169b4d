//! RoPE frequency schedules: theta_n for the h planes of a head.

use serde::Serialize;

use crate::{invalid, Result};

/// How plane frequencies are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Schedule {
    /// theta_n = base^(-n / h), n = 0 .. h - 1.
    Plain {
        /// Frequency base B.
        base: f64,
    },
    /// Llama 3's scaling of the plain schedule: long wavelengths divided by `factor`, short
    /// ones kept, a smooth blend between (wavelength thresholds original_max / low_freq_factor
    /// and original_max / high_freq_factor).
    Llama3 {
        /// Frequency base B.
        base: f64,
        /// Scale factor for low frequencies (8 in Llama 3.1).
        factor: f64,
        /// Low-frequency factor (1).
        low_freq_factor: f64,
        /// High-frequency factor (4).
        high_freq_factor: f64,
        /// Original context length (8192).
        original_max_position: f64,
    },
}

impl Schedule {
    /// Llama 3.1's settings around `base`.
    pub fn llama3(base: f64) -> Self {
        Schedule::Llama3 {
            base,
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8192.0,
        }
    }

    /// The frequency base.
    pub fn base(&self) -> f64 {
        match *self {
            Schedule::Plain { base } | Schedule::Llama3 { base, .. } => base,
        }
    }

    /// theta_n for n = 0 .. h - 1 (radians per position).
    pub fn frequencies(&self, h: usize) -> Result<Vec<f64>> {
        let base = self.base();
        // Beyond the range every position encoding accepts, base^(-2n/d) overflows or leaves
        // f64's precision (1e-300 gives infinite frequencies).
        let (lo, hi) = ropelab_model::BASE_RANGE;
        if !(base.is_finite() && (lo..=hi).contains(&base)) {
            return invalid(format!(
                "base must lie in [{lo:e}, {hi:e}], got {}",
                ropelab_model::number_text(base)
            ));
        }
        if h == 0 {
            return invalid("a head needs at least one plane (h >= 1)");
        }
        // theta_n = B^(-n / h) = B^(-2n / d): the model's RoPE frequencies, from one home.
        let plain = ropelab_model::rope::frequencies(base, 2 * h).into_iter();
        Ok(match *self {
            Schedule::Plain { .. } => plain.collect(),
            Schedule::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
                ..
            } => {
                let low_wavelen = original_max_position / low_freq_factor;
                let high_wavelen = original_max_position / high_freq_factor;
                plain
                    .map(|f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original_max_position / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_llama3_frequencies() {
        let plain = Schedule::Plain { base: 10_000.0 }.frequencies(64).unwrap();
        assert_eq!(plain[0], 1.0);
        assert!((plain[32] - 0.01).abs() < 1e-12);
        let scaled = Schedule::llama3(500_000.0).frequencies(64).unwrap();
        let plain = Schedule::Plain { base: 500_000.0 }.frequencies(64).unwrap();
        // Fast planes (wavelength < 2048) are kept, slow ones (> 8192) divided by 8.
        assert_eq!(scaled[0], plain[0]);
        assert!((scaled[63] - plain[63] / 8.0).abs() < 1e-18);
        assert!(scaled.iter().zip(&plain).all(|(s, p)| s <= p));
        assert!(Schedule::Plain { base: 0.0 }.frequencies(4).is_err());
        assert!(Schedule::Plain { base: -1.0 }.frequencies(4).is_err());
    }
}
