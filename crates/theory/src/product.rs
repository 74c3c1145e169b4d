//! The RoPE score S(m) = q^T R(m) k = sum_n a_n cos(m theta_n + phi_n): by explicit rotation
//! (the reference) and as a whole curve m = 0 .. M - 1 by complex recurrence (the fast path).

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// One plane's coefficient c_n = a_n e^{i phi_n}, with a_n cos phi_n = q_n . k_n and
/// a_n sin phi_n = q_n0 k_n1 - q_n1 k_n0, so that S(m) = Re sum_n c_n e^{i m theta_n}.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coefficient {
    /// Real part a_n cos phi_n.
    pub re: f64,
    /// Imaginary part a_n sin phi_n.
    pub im: f64,
}

impl Coefficient {
    /// Amplitude a_n = |q_n| |k_n|.
    pub fn amplitude(&self) -> f64 {
        self.re.hypot(self.im)
    }
}

/// The plane coefficients of a (q, k) pair; plane n is dims (2n, 2n + 1).
pub fn coefficients(q: &[f64], k: &[f64]) -> Vec<Coefficient> {
    q.chunks_exact(2)
        .zip(k.chunks_exact(2))
        .map(|(q, k)| Coefficient {
            re: q[0] * k[0] + q[1] * k[1],
            im: q[0] * k[1] - q[1] * k[0],
        })
        .collect()
}

/// S(m) by rotating each plane of k by m theta_n and taking the dot product with q.
pub fn score_direct(q: &[f64], k: &[f64], freqs: &[f64], m: f64) -> f64 {
    q.chunks_exact(2)
        .zip(k.chunks_exact(2))
        .zip(freqs)
        .map(|((q, k), theta)| {
            let (s, c) = (m * theta).sin_cos();
            q[0] * (k[0] * c - k[1] * s) + q[1] * (k[0] * s + k[1] * c)
        })
        .sum()
}

/// Steps between exact re-seeds of the recurrence (bounds its rounding drift).
const RESEED: usize = 512;

/// S(m) for m = 0 .. len - 1, O(len h): the phasors advance by complex multiplication and are
/// recomputed exactly every 512 steps.
pub fn score_curve(coeffs: &[Coefficient], freqs: &[f64], len: usize) -> Vec<f64> {
    let h = coeffs.len();
    let (mut zr, mut zi) = (vec![0.0; h], vec![0.0; h]);
    let (wr, wi): (Vec<f64>, Vec<f64>) = freqs.iter().map(|t| (t.cos(), t.sin())).unzip();
    let mut out = Vec::with_capacity(len);
    for start in (0..len).step_by(RESEED) {
        for n in 0..h {
            let (s, c) = (start as f64 * freqs[n]).sin_cos();
            zr[n] = coeffs[n].re * c - coeffs[n].im * s;
            zi[n] = coeffs[n].re * s + coeffs[n].im * c;
        }
        for _ in start..(start + RESEED).min(len) {
            out.push(lane_sum(&zr));
            // Advance every phasor by one position (independent lanes: vectorises).
            for (((r, i), &a), &b) in zr.iter_mut().zip(zi.iter_mut()).zip(&wr).zip(&wi) {
                let next_r = *r * a - *i * b;
                *i = *r * b + *i * a;
                *r = next_r;
            }
        }
    }
    out
}

/// Sum with eight independent accumulators (a plain fold is one dependency chain that the
/// compiler may not reorder).
fn lane_sum(values: &[f64]) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = values.chunks_exact(8);
    let rest: f64 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f64>() + rest
}

/// A standard normal vector of length `d`.
pub fn normal_vector(rng: &mut ChaCha8Rng, d: usize) -> Vec<f64> {
    (0..d).map(|_| StandardNormal.sample(rng)).collect()
}

/// A key correlated with `q`: rho q + sqrt(1 - rho^2) noise (rho = 0: independent).
pub fn correlated(rng: &mut ChaCha8Rng, q: &[f64], rho: f64) -> Vec<f64> {
    let scale = (1.0 - rho * rho).max(0.0).sqrt();
    q.iter()
        .map(|&x| {
            let e: f64 = StandardNormal.sample(rng);
            rho * x + scale * e
        })
        .collect()
}

/// A uniform integer in 0..n (re-exported helper for experiments).
pub fn uniform(rng: &mut ChaCha8Rng, n: usize) -> usize {
    rng.random_range(0..n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Schedule;
    use rand::SeedableRng;

    #[test]
    fn curve_matches_explicit_rotations() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for (d, base) in [(8, 10.0), (128, 10_000.0), (64, 500_000.0)] {
            let q = normal_vector(&mut rng, d);
            let k = normal_vector(&mut rng, d);
            let freqs = Schedule::Plain { base }.frequencies(d / 2).unwrap();
            let curve = score_curve(&coefficients(&q, &k), &freqs, 5000);
            for m in [0usize, 1, 7, 511, 512, 513, 1999, 4999] {
                let direct = score_direct(&q, &k, &freqs, m as f64);
                assert!(
                    (curve[m] - direct).abs() < 1e-9,
                    "d {d} m {m}: {} vs {direct}",
                    curve[m]
                );
            }
        }
    }

    #[test]
    fn amplitude_phase_form() {
        // S(m) = sum a_n cos(m theta_n + phi_n).
        let q = [1.0, 2.0, -0.5, 0.3];
        let k = [0.7, -1.1, 2.0, 0.4];
        let freqs = [0.9, 0.05];
        let c = coefficients(&q, &k);
        for m in [0.0, 3.0, 17.0] {
            let form: f64 = c
                .iter()
                .zip(freqs)
                .map(|(c, t)| c.amplitude() * (m * t + c.im.atan2(c.re)).cos())
                .sum();
            assert!((form - score_direct(&q, &k, &freqs, m)).abs() < 1e-12);
        }
    }
}
