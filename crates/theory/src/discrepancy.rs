//! Discrepancy (main paper, definition 3.1 and theorem 3.2): the logit margin of the hand-built
//! heads of theorem 3.1 with a single RoPE angle theta, computed EXACTLY over every input.
//!
//! Setting: the query sits at position n and attends to keys at positions 0..=n (distance
//! d = n - j from 0 to n). The margin of an input is the target key's logit minus the best other
//! logit (for the Index head the target always has the top logit 1, so this is "largest minus
//! second largest"). For each n two numbers are reported:
//! - `delta`: the worst input's margin (min over inputs), the margin the head can count on;
//! - `delta_max`: the best input's margin (max over inputs).
//!
//! Index: logits cos((d - s) theta) for a query holding integer s (s = 0 for a letter query,
//! which attends to itself). With u = d - s ranging over [-s, n - s], the margin is
//! 1 - max_{1 <= u <= max(s, n - s)} cos(u theta): worst for s in {0, n} (u up to n), best for a
//! centred s (u up to ceil(n / 2)). Pigeonhole on u = 0..U gives margin <= 2 pi^2 / (U + 1)^2, so
//! `delta` <= min(1 - cos theta, 2 pi^2 / n^2) (the theorem) while `delta_max` only obeys the same
//! bound with U = ceil(n / 2), about four times larger: the theorem's O(1/n^2) holds for the
//! worst input, not for every input.
//!
//! Retrieval: omega = 2 pi / |ALPH|; the key with first symbol L at distance d scores
//! cos((phi(L) - phi(R)) omega + d theta) against a query `LR`. The matching key (difference 0)
//! sits at some d in 1..=n, every other key (the query itself at d = 0 included) has a
//! difference in 1..|ALPH| - 1. Worst input: match far, competitors as close as they can be;
//! best input: competitors as far as they can be.

use std::fmt;
use std::str::FromStr;

use ropelab_io::csv_rows::sci;
use serde::{Deserialize, Serialize};

use crate::{invalid, Result};

/// Which hand-built head of theorem 3.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mechanism {
    /// Positional selection: copy the token n - i.
    Index,
    /// Symbolic selection: copy the token whose first symbol matches the query's.
    Retrieval,
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mechanism::Index => "index",
            Mechanism::Retrieval => "retrieval",
        })
    }
}

impl FromStr for Mechanism {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "index" => Ok(Mechanism::Index),
            "retrieval" => Ok(Mechanism::Retrieval),
            _ => Err(format!("{s:?} is not a mechanism: index or retrieval")),
        }
    }
}

/// The margins at one query position n and the theorem's bound (one CSV row; the margins are
/// written in scientific notation, as they span many decades).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DiscrepancyRow {
    /// Query position (keys 0..=n).
    pub n: usize,
    /// Worst input's margin (min over inputs).
    #[serde(serialize_with = "sci")]
    pub delta: f64,
    /// The theorem's bound for `delta`.
    #[serde(serialize_with = "sci")]
    pub bound: f64,
    /// Best input's margin (max over inputs).
    #[serde(serialize_with = "sci")]
    pub delta_max: f64,
    /// The head the row is of (none in files written before it was recorded), so that a
    /// reader drawing one head's curve can refuse the other's (eighth pass, PL01).
    #[serde(default)]
    pub mechanism: Option<Mechanism>,
}

/// The smallest Index angle whose margins f64 holds (theta^2 / 2 above its smallest normal
/// number, 2.2e-308).
pub const MIN_THETA: f64 = 1e-150;

/// Default alphabet size |ALPH| of the Retrieval head.
pub const DEFAULT_ALPHABET: usize = 8;

/// Default largest query position of a curve.
pub const DEFAULT_MAX_N: usize = 1000;

/// The discrepancy curve of `mechanism` for n = 1..=max_n: [`index`] with angle `theta`, or
/// [`retrieval`] with angle `theta` over an alphabet of `alphabet` letters.
pub fn curve(
    mechanism: Mechanism,
    theta: f64,
    alphabet: usize,
    max_n: usize,
) -> Result<Vec<DiscrepancyRow>> {
    match mechanism {
        Mechanism::Index => index(theta, max_n),
        Mechanism::Retrieval => retrieval(theta, alphabet, max_n),
    }
}

/// Largest query position a curve is computed to (the Retrieval curve is exact over every
/// input, O(n0^2 |ALPH|) work; this keeps it to seconds).
pub const MAX_QUERY_POSITION: usize = 20_000;

/// Largest Retrieval alphabet.
pub const MAX_ALPHABET: usize = 1 << 12;

fn check_n(max_n: usize) -> Result<()> {
    if !(1..=MAX_QUERY_POSITION).contains(&max_n) {
        return invalid(format!(
            "the largest query position n0 (`--max-n`, or a study's `[theory] max_n`) must be \
             between 1 and {MAX_QUERY_POSITION}, got {max_n}"
        ));
    }
    Ok(())
}

/// Checks the settings of a curve without computing it (e.g. a study config, before any
/// training): the same errors as [`curve`] would give.
pub fn check(mechanism: Mechanism, theta: f64, alphabet: usize, max_n: usize) -> Result<()> {
    check_n(max_n)?;
    curve(mechanism, theta, alphabet, 1).map(|_| ())
}

/// Index-head margins for n = 1..=max_n with angle `theta` (> 0).
pub fn index(theta: f64, max_n: usize) -> Result<Vec<DiscrepancyRow>> {
    // Below 1e-150 the margins (about theta^2 / 2) underflow f64 to 0 (ninth pass, S8).
    if theta.is_finite() && theta > 0.0 && theta < MIN_THETA {
        return invalid(format!(
            "theta {} is below {MIN_THETA:e}: its margins (about theta^2 / 2) underflow f64 to 0",
            ropelab_model::number_text(theta)
        ));
    }
    if !(theta.is_finite() && theta > 0.0 && theta < std::f64::consts::TAU) {
        return invalid(format!(
            "theta must lie in (0, 2 pi) (angles repeat every turn: 2 pi is 0), got {}",
            ropelab_model::number_text(theta)
        ));
    }
    check_n(max_n)?;
    // max_{1 <= t <= u} cos(t theta) is cos of the smallest distance from some t theta to a
    // whole turn: closest[u] = min_{1 <= t <= u} that distance (in [0, pi], where cos falls).
    // 1 - cos x is computed as 2 sin^2(x / 2), exact for a tiny x where 1 - cos x rounds to 0
    // (theta = 1e-9 has margins of about 5e-19, not 0; eighth pass, X016).
    let mut closest = vec![f64::INFINITY; max_n + 1];
    for u in 1..=max_n {
        let angle = u as f64 * theta;
        let off = (angle - std::f64::consts::TAU * (angle / std::f64::consts::TAU).round()).abs();
        closest[u] = closest[u - 1].min(off);
    }
    let one_minus_cos = |x: f64| 2.0 * (x / 2.0).sin().powi(2);
    let pi2 = std::f64::consts::PI.powi(2);
    Ok((1..=max_n)
        .map(|n| DiscrepancyRow {
            n,
            delta: one_minus_cos(closest[n]),
            bound: one_minus_cos(theta).min(2.0 * pi2 / (n * n) as f64),
            delta_max: one_minus_cos(closest[n.div_ceil(2)]),
            mechanism: Some(Mechanism::Index),
        })
        .collect())
}

/// The bound the best input's Index margin obeys: min(1 - cos theta, 2 pi^2 / (ceil(n/2) + 1)^2).
pub fn index_bound_best_input(theta: f64, n: usize) -> f64 {
    let u = (n.div_ceil(2) + 1) as f64;
    (2.0 * (theta / 2.0).sin().powi(2)).min(2.0 * std::f64::consts::PI.powi(2) / (u * u))
}

/// Retrieval-head margins for n = 1..=max_n with angle `theta` (>= 0; 0 is no position
/// encoding) and an alphabet of `alphabet` symbols (>= 2). The bound column is
/// 1 - cos(omega - n theta).
pub fn retrieval(theta: f64, alphabet: usize, max_n: usize) -> Result<Vec<DiscrepancyRow>> {
    if !((0.0..=std::f64::consts::TAU).contains(&theta)) {
        return invalid(format!(
            "theta must lie in [0, 2 pi] for the Retrieval head (angles repeat every turn), got {}",
            ropelab_model::number_text(theta)
        ));
    }
    if !(2..=MAX_ALPHABET).contains(&alphabet) {
        return invalid(format!(
            "the alphabet needs between 2 and {MAX_ALPHABET} symbols, got {alphabet}"
        ));
    }
    check_n(max_n)?;
    let omega = 2.0 * std::f64::consts::PI / alphabet as f64;
    // Best and worst logit a non-matching key can have at distance d.
    let (closest, farthest): (Vec<f64>, Vec<f64>) = (0..=max_n)
        .map(|d| {
            let values = (1..alphabet).map(|k| (k as f64 * omega + d as f64 * theta).cos());
            values.fold((f64::NEG_INFINITY, f64::INFINITY), |(hi, lo), v| {
                (hi.max(v), lo.min(v))
            })
        })
        .unzip();
    let mut rows = Vec::with_capacity(max_n);
    for n in 1..=max_n {
        // Prefix and suffix maxima over d in 0..=n of `closest` and of `farthest`.
        let prefix = |v: &[f64]| {
            let mut p = vec![f64::NEG_INFINITY; n + 2];
            for d in 0..=n {
                p[d + 1] = p[d].max(v[d]);
            }
            p
        };
        let suffix = |v: &[f64]| {
            let mut s = vec![f64::NEG_INFINITY; n + 2];
            for d in (0..=n).rev() {
                s[d] = s[d + 1].max(v[d]);
            }
            s
        };
        let (pc, sc, pf, sf) = (
            prefix(&closest),
            suffix(&closest),
            prefix(&farthest),
            suffix(&farthest),
        );
        let (mut worst, mut best) = (f64::INFINITY, f64::NEG_INFINITY);
        for dm in 1..=n {
            let target = (dm as f64 * theta).cos();
            let rival_close = pc[dm].max(sc[dm + 1]);
            let rival_far = pf[dm].max(sf[dm + 1]);
            worst = worst.min(target - rival_close);
            best = best.max(target - rival_far);
        }
        rows.push(DiscrepancyRow {
            n,
            delta: worst,
            bound: 1.0 - (omega - n as f64 * theta).cos(),
            delta_max: best,
            mechanism: Some(Mechanism::Retrieval),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force for the Index head: every query value s in 0..=n, every key.
    fn index_slow(theta: f64, n: usize) -> (f64, f64) {
        let (mut worst, mut best) = (f64::INFINITY, f64::NEG_INFINITY);
        for s in 0..=n {
            let logits: Vec<f64> = (0..=n)
                .map(|d| ((d as f64 - s as f64) * theta).cos())
                .collect();
            let top = logits[s];
            let rival = (0..=n)
                .filter(|&d| d != s)
                .map(|d| logits[d])
                .fold(f64::NEG_INFINITY, f64::max);
            worst = worst.min(top - rival);
            best = best.max(top - rival);
        }
        (worst, best)
    }

    /// Brute force for the Retrieval head: every match distance, every symbol of every other key
    /// (exhaustive over all inputs for tiny n and alphabets).
    fn retrieval_slow(theta: f64, alphabet: usize, n: usize) -> (f64, f64) {
        let omega = 2.0 * std::f64::consts::PI / alphabet as f64;
        let (mut worst, mut best) = (f64::INFINITY, f64::NEG_INFINITY);
        for dm in 1..=n {
            let others: Vec<usize> = (0..=n).filter(|&d| d != dm).collect();
            let combos = (alphabet - 1).pow(others.len() as u32);
            for code in 0..combos {
                let mut c = code;
                let mut rival = f64::NEG_INFINITY;
                for &d in &others {
                    let k = 1 + c % (alphabet - 1);
                    c /= alphabet - 1;
                    rival = rival.max((k as f64 * omega + d as f64 * theta).cos());
                }
                let margin = (dm as f64 * theta).cos() - rival;
                worst = worst.min(margin);
                best = best.max(margin);
            }
        }
        (worst, best)
    }

    #[test]
    fn exact_margins_match_brute_force() {
        for theta in [0.3, 0.866, 1.7, 3.0] {
            let rows = index(theta, 30).unwrap();
            for r in &rows {
                let (w, b) = index_slow(theta, r.n);
                assert!(
                    (r.delta - w).abs() < 1e-12 && (r.delta_max - b).abs() < 1e-12,
                    "{theta} {r:?}"
                );
            }
        }
        for (theta, alphabet) in [(0.05, 3), (0.2, 4), (0.0, 3), (0.7, 5)] {
            for r in retrieval(theta, alphabet, 5).unwrap() {
                let (w, b) = retrieval_slow(theta, alphabet, r.n);
                assert!(
                    (r.delta - w).abs() < 1e-12 && (r.delta_max - b).abs() < 1e-12,
                    "{theta} {alphabet} {r:?}"
                );
            }
        }
    }

    /// A tiny angle has tiny margins, not zeros: 1 - cos(1e-9) rounds to 0 in f64, 2 sin^2
    /// does not (eighth pass, X016).
    #[test]
    fn a_tiny_angle_keeps_its_margins() {
        let rows = index(1e-9, 5).unwrap();
        for r in &rows {
            // The best rival is one step away: margin 1 - cos(theta) = theta^2 / 2.
            assert!((r.delta / 5e-19 - 1.0).abs() < 1e-6, "{r:?}");
            assert!(r.bound > 0.0 && r.delta_max > 0.0, "{r:?}");
        }
        assert!(index_bound_best_input(1e-9, 3) > 0.0);
        // Below 1e-150 the margins underflow: refused, not a table of zeros (ninth pass, S8).
        let err = index(1e-300, 5).unwrap_err().to_string();
        assert!(err.contains("underflow") && err.contains("1e-300"), "{err}");
    }

    #[test]
    fn small_inputs_by_hand() {
        // n = 1: keys at distance 0 and 1, the only rival is cos(theta) away from 1.
        let r = index(0.5, 1).unwrap()[0];
        assert!((r.delta - (1.0 - 0.5f64.cos())).abs() < 1e-15);
        // Retrieval without position encoding: margin 1 - cos(omega) for every n.
        for r in retrieval(0.0, 8, 50).unwrap() {
            let m = 1.0 - (std::f64::consts::PI / 4.0).cos();
            assert!(
                (r.delta - m).abs() < 1e-12 && (r.delta_max - 2.0).abs() < 1e-12,
                "{r:?}"
            );
        }
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(index(0.0, 10).is_err());
        assert!(index(-1.0, 10).is_err());
        assert!(index(0.5, 0).unwrap_err().to_string().contains("n0"));
        assert!(retrieval(-0.1, 8, 10).is_err());
        assert!(retrieval(0.1, 1, 10).is_err());
    }
}
