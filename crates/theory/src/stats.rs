//! The normal approximation of S(m) for m uniform in [0, M): planes that turn many times are
//! noise (mean 0, variance a_n^2 / 2), slow planes are constant (a_n cos phi_n).

use serde::Serialize;

use crate::product::Coefficient;

/// Mean and standard deviation of S(m) over m in [0, M), predicted and measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Moments {
    /// Predicted mean mu_M (sum of the slow planes' a_n cos phi_n).
    pub mu_approx: f64,
    /// Predicted standard deviation sigma_M (sqrt of the fast planes' a_n^2 / 2).
    pub sigma_approx: f64,
    /// Mean over the curve.
    pub mu_empirical: f64,
    /// Standard deviation over the curve.
    pub sigma_empirical: f64,
    /// Planes with M theta_n > 2 pi (the split near h log_B(M / 2 pi)).
    pub fast_planes: usize,
}

/// Mean and (population) standard deviation of values.
pub fn mean_std(values: &[f64]) -> (f64, f64) {
    let n = values.len().max(1) as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// The normal approximation for context length `m_max` against the measured `curve`
/// (S(0) .. S(m_max - 1)).
pub fn moments(coeffs: &[Coefficient], freqs: &[f64], curve: &[f64]) -> Moments {
    let m_max = curve.len() as f64;
    let (mut mu, mut var, mut fast) = (0.0, 0.0, 0);
    for (c, theta) in coeffs.iter().zip(freqs) {
        if m_max * theta > 2.0 * std::f64::consts::PI {
            var += c.amplitude().powi(2) / 2.0;
            fast += 1;
        } else {
            mu += c.re;
        }
    }
    let (mu_e, sigma_e) = mean_std(curve);
    Moments {
        mu_approx: mu,
        sigma_approx: var.sqrt(),
        mu_empirical: mu_e,
        sigma_empirical: sigma_e,
        fast_planes: fast,
    }
}

/// The plane index where planes stop turning a full circle within M: h log_B(M / 2 pi).
pub fn split_index(h: usize, base: f64, m_max: f64) -> f64 {
    h as f64 * (m_max / (2.0 * std::f64::consts::PI)).ln() / base.ln()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::product::score_curve;

    #[test]
    fn a_fast_plane_is_zero_mean_noise() {
        // theta = 2 pi / 7 over M = 7000: exactly 1000 turns, mean 0, variance a^2 / 2.
        let c = [Coefficient { re: 1.2, im: -0.5 }];
        let theta = [2.0 * std::f64::consts::PI / 7.0];
        let curve = score_curve(&c, &theta, 7000);
        let m = moments(&c, &theta, &curve);
        assert_eq!(m.fast_planes, 1);
        assert!(m.mu_empirical.abs() < 1e-9, "{m:?}");
        assert!(
            (m.sigma_empirical - 1.3 / 2f64.sqrt()).abs() < 1e-9,
            "{m:?}"
        );
        assert!((m.sigma_approx - m.sigma_empirical).abs() < 1e-9);
        assert_eq!(m.mu_approx, 0.0);
    }

    #[test]
    fn a_slow_plane_is_a_constant() {
        let c = [Coefficient { re: 0.8, im: 0.6 }];
        let theta = [1e-9];
        let curve = score_curve(&c, &theta, 1000);
        let m = moments(&c, &theta, &curve);
        assert_eq!(m.fast_planes, 0);
        assert!((m.mu_empirical - 0.8).abs() < 1e-6 && m.sigma_empirical < 1e-6);
        assert_eq!((m.mu_approx, m.sigma_approx), (0.8, 0.0));
    }

    #[test]
    fn split_index_matches_the_definition() {
        // base 10,000, h 64, M = 2 pi * 100: planes n < 64 * log_10000(100) = 32 are fast.
        let s = split_index(64, 10_000.0, 200.0 * std::f64::consts::PI);
        assert!((s - 32.0).abs() < 1e-9, "{s}");
    }
}
