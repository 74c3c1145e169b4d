//! RoPE's four failure events (the "RoPE distinguishes neither positions nor tokens" paper),
//! measured exactly on whole score curves:
//! - position inversion: S(m1) < S(m2) for m1 uniform in [0, M/2), m2 in [M/2, M) (a nearer key
//!   scores lower than a farther one), counted over all pairs by sorting;
//! - position aliasing: distances whose score rounds (in a number format) to the same value as
//!   another distance's, counted by sorting;
//! - token inversion: two keys whose order at distance m differs from their order at distance 0;
//! - token aliasing: two different keys whose scores round to the same value at a distance.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use ropelab_io::csv_rows::display;
use serde::Serialize;

use crate::format::NumberFormat;
use crate::product::{coefficients, correlated, normal_vector, score_curve};
use crate::schedule::Schedule;
use crate::stats::moments;
use crate::{invalid, Result, TheoryError};

/// P[S(m1) < S(m2)] over m1 in the first half of `curve`, m2 in the second (ties count half).
pub fn position_inversion(curve: &[f64]) -> f64 {
    let half = curve.len() / 2;
    let mut near = curve[..half].to_vec();
    let mut far = curve[half..].to_vec();
    near.sort_by(f64::total_cmp);
    far.sort_by(f64::total_cmp);
    // For each near value (ascending), count far values above it and equal to it.
    let (mut below_or_equal, mut below) = (0usize, 0usize);
    let mut count = 0.0;
    for &a in &near {
        while below < far.len() && far[below] < a {
            below += 1;
        }
        while below_or_equal < far.len() && far[below_or_equal] <= a {
            below_or_equal += 1;
        }
        let greater = far.len() - below_or_equal;
        let equal = below_or_equal - below;
        count += greater as f64 + 0.5 * equal as f64;
    }
    count / (near.len() as f64 * far.len() as f64)
}

/// Aliasing among values after rounding to `format`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Aliasing {
    /// Pairs of distinct entries with equal rounded values.
    pub pairs: u64,
    /// Fraction of entries that share their rounded value with another entry.
    pub with_partner: f64,
}

/// Counts equal rounded values by sorting.
pub fn aliasing(values: &[f64], format: NumberFormat) -> Aliasing {
    let mut rounded: Vec<f64> = values.iter().map(|&v| format.round(v)).collect();
    rounded.sort_by(f64::total_cmp);
    let (mut pairs, mut shared) = (0u64, 0usize);
    let mut start = 0;
    while start < rounded.len() {
        let mut end = start + 1;
        while end < rounded.len() && rounded[end] == rounded[start] {
            end += 1;
        }
        let g = (end - start) as u64;
        if g > 1 {
            pairs += g * (g - 1) / 2;
            shared += end - start;
        }
        start = end;
    }
    Aliasing {
        pairs,
        with_partner: shared as f64 / values.len().max(1) as f64,
    }
}

/// Fraction of distances m in 1..M where two keys' order differs from their order at m = 0.
pub fn token_inversion(s1: &[f64], s2: &[f64]) -> f64 {
    let sign0 = (s1[0] - s2[0]).signum();
    let flipped = (1..s1.len())
        .filter(|&m| (s1[m] - s2[m]).signum() != sign0)
        .count();
    flipped as f64 / (s1.len() - 1).max(1) as f64
}

/// Fraction of distances where two keys' scores round to the same value.
pub fn token_aliasing(s1: &[f64], s2: &[f64], format: NumberFormat) -> f64 {
    let same = s1
        .iter()
        .zip(s2)
        .filter(|(a, b)| format.round(**a) == format.round(**b))
        .count();
    same as f64 / s1.len().max(1) as f64
}

/// A failure experiment: seeded draws of (q, k1, k2) for every base and context length.
#[derive(Debug, Clone)]
pub struct FailureConfig {
    /// Head dimension d = 2h.
    pub d: usize,
    /// Frequency bases B.
    pub bases: Vec<f64>,
    /// Use llama3-style scaling of each base.
    pub llama3: bool,
    /// Context lengths M (each at least 2).
    pub lengths: Vec<usize>,
    /// (q, k1, k2) draws per (B, M).
    pub draws: usize,
    /// Seed of the draws.
    pub seed: u64,
    /// Correlation of each key with the query (0: i.i.d. standard normal).
    pub rho: f64,
    /// Format for the aliasing events.
    pub format: NumberFormat,
}

impl Default for FailureConfig {
    /// The RoPE-limits paper's setting: d 128, bases 100 / 10,000 / 500,000, lengths 256 /
    /// 2,048 / 16,384, 100 i.i.d. draws, aliasing in bf16.
    fn default() -> Self {
        Self {
            d: 128,
            bases: vec![100.0, 10_000.0, 500_000.0],
            llama3: false,
            lengths: vec![256, 2048, 16_384],
            draws: 100,
            seed: 0,
            rho: 0.0,
            format: NumberFormat::Bf16,
        }
    }
}

impl FailureConfig {
    /// Memory of [`failure_table`] on this config: the draws (three d-vectors each, held for
    /// one base at a time) and the score curves and their sorted copies at the longest length;
    /// and its arithmetic: every draw's score curve at every base and length, d/2 planes per
    /// position, at [`PLANE_STEP_FLOPS`] each.
    pub fn need(&self) -> ropelab_io::Need {
        use ropelab_io::resources::bytes;
        let longest = self.lengths.iter().copied().max().unwrap_or(0);
        let positions = self
            .lengths
            .iter()
            .fold(0usize, |a, &m| a.saturating_add(m));
        ropelab_io::Need::new()
            .compute(
                bytes(&[
                    self.draws,
                    self.bases.len(),
                    positions,
                    self.d / 2,
                    PLANE_STEP_FLOPS,
                ]),
                format!(
                    "{} draws x {} bases of score curves over {positions} positions",
                    self.draws,
                    self.bases.len()
                ),
            )
            .memory(
                bytes(&[self.draws, 3, 8 * self.d + 24]),
                format!("{} draws of three {}-dim vectors", self.draws, self.d),
            )
            .memory(
                bytes(&[4, 8, longest]),
                format!("score curves of {longest} positions"),
            )
    }
}

/// The arithmetic one plane of one score-curve position costs in the failure statistics, in
/// the resource estimate's FLOP (`ropelab_io::resources::ASSUMED_FLOPS` per second): measured
/// at about 5e8 plane-positions per second on one core of a 2-core EPYC, the rotations, the
/// sort and the event counts included.
pub const PLANE_STEP_FLOPS: usize = 400;

/// Longest context of the failure statistics (each score curve holds M values per draw).
pub const MAX_CONTEXT: usize = 1 << 22;

/// Largest head dimension of the failure statistics.
pub const MAX_HEAD_DIM: usize = 1 << 14;

/// Mean failure rates over the draws for one (B, M).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct FailureRow {
    /// Frequency base.
    #[serde(serialize_with = "display")]
    pub base: f64,
    /// Context length.
    pub length: usize,
    /// P[S(m1) < S(m2)], m1 < M/2 <= m2.
    #[serde(serialize_with = "display")]
    pub position_inversion: f64,
    /// Fraction of distances with an aliasing partner.
    #[serde(serialize_with = "display")]
    pub position_aliasing: f64,
    /// Aliasing pairs per draw.
    #[serde(serialize_with = "display")]
    pub position_alias_pairs: f64,
    /// Fraction of distances where two keys' order flips.
    #[serde(serialize_with = "display")]
    pub token_inversion: f64,
    /// Fraction of distances where two keys' scores alias.
    #[serde(serialize_with = "display")]
    pub token_aliasing: f64,
    /// Mean predicted mu_M.
    #[serde(serialize_with = "display")]
    pub mu_approx: f64,
    /// Mean measured mean of S.
    #[serde(serialize_with = "display")]
    pub mu_empirical: f64,
    /// Mean predicted sigma_M.
    #[serde(serialize_with = "display")]
    pub sigma_approx: f64,
    /// Mean measured standard deviation of S.
    #[serde(serialize_with = "display")]
    pub sigma_empirical: f64,
}

impl FailureConfig {
    /// Checks every parameter.
    pub fn check(&self) -> Result<()> {
        if self.d < 2 || !self.d.is_multiple_of(2) {
            return invalid(format!(
                "the head dimension d must be even and at least 2, got {}",
                self.d
            ));
        }
        let (lo, hi) = ropelab_model::BASE_RANGE;
        if let Some(b) = self
            .bases
            .iter()
            .find(|b| !(b.is_finite() && (lo..=hi).contains(*b)))
        {
            return invalid(format!(
                "base must lie in [{lo:e}, {hi:e}], got {}",
                ropelab_model::number_text(*b)
            ));
        }
        if let Some(m) = self
            .lengths
            .iter()
            .find(|&&m| !(2..=MAX_CONTEXT).contains(&m))
        {
            return invalid(format!(
                "context length M must be between 2 and {MAX_CONTEXT}, got {m}"
            ));
        }
        if self.d > MAX_HEAD_DIM {
            return invalid(format!(
                "the head dimension d must be at most {MAX_HEAD_DIM}, got {}",
                self.d
            ));
        }
        if let Some(b) = self
            .bases
            .iter()
            .enumerate()
            .find_map(|(i, b)| self.bases[..i].contains(b).then_some(b))
        {
            return invalid(format!("base {b} is given twice: give each base once"));
        }
        if let Some(m) = self
            .lengths
            .iter()
            .enumerate()
            .find_map(|(i, m)| self.lengths[..i].contains(m).then_some(m))
        {
            return invalid(format!(
                "context length {m} is given twice: give each length once"
            ));
        }
        if self.bases.is_empty() || self.lengths.is_empty() {
            return invalid("give at least one base and one context length");
        }
        if self.draws == 0 {
            return invalid("draws must be at least 1");
        }
        if !(-1.0..=1.0).contains(&self.rho) {
            return invalid(format!(
                "the correlation rho must be in [-1, 1], got {}",
                ropelab_model::number_text(self.rho)
            ));
        }
        Ok(())
    }
}

/// Runs the experiment; `progress(done, total)` after each base.
pub fn failure_table(
    config: &FailureConfig,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<FailureRow>> {
    config.check()?;
    let h = config.d / 2;
    let mut rows = vec![];
    for (bi, &base) in config.bases.iter().enumerate() {
        progress(bi, config.bases.len());
        let schedule = if config.llama3 {
            Schedule::llama3(base)
        } else {
            Schedule::Plain { base }
        };
        let freqs = schedule.frequencies(h)?;
        // The same draws for every base: differences between bases are not sampling noise.
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let mut draws = room_for_draws(config.draws)?;
        draws.extend((0..config.draws).map(|_| {
            let q = normal_vector(&mut rng, config.d);
            let k1 = correlated(&mut rng, &q, config.rho);
            let k2 = correlated(&mut rng, &q, config.rho);
            Triple { q, k1, k2 }
        }));
        let rows_here = failure_rows(&draws, &freqs, base, &config.lengths, config.format);
        rows.extend(rows_here);
    }
    progress(config.bases.len(), config.bases.len());
    Ok(rows)
}

/// An empty list with room for `n` draws, or an error when the list alone cannot be held (a
/// count `--force` let past the up-front estimate): an allocation that fails is said, not an
/// abort (fourteenth pass, P1).
pub fn room_for_draws(n: usize) -> Result<Vec<Triple>> {
    let mut draws = Vec::new();
    draws.try_reserve_exact(n).map_err(|_| {
        TheoryError::Invalid(format!(
            "{n} draws do not fit in this machine's memory ({:.1e} bytes for their list alone): \
             ask for fewer",
            n as f64 * std::mem::size_of::<Triple>() as f64
        ))
    })?;
    Ok(draws)
}

/// A query and two keys (vectors of the same even length, planes = dims (2n, 2n + 1)).
#[derive(Debug, Clone)]
pub struct Triple {
    /// The query.
    pub q: Vec<f64>,
    /// First key.
    pub k1: Vec<f64>,
    /// Second key.
    pub k2: Vec<f64>,
}

/// Mean failure rates over `draws` for each context length, with frequencies `freqs` (the
/// `base` column is informational). Draws may come from a real model's q and k vectors.
pub fn failure_rows(
    draws: &[Triple],
    freqs: &[f64],
    base: f64,
    lengths: &[usize],
    format: NumberFormat,
) -> Vec<FailureRow> {
    let longest = lengths.iter().copied().max().unwrap_or(0);
    let mut sums = vec![[0.0f64; 9]; lengths.len()];
    for t in draws {
        let c1 = coefficients(&t.q, &t.k1);
        let s1 = score_curve(&c1, freqs, longest);
        let s2 = score_curve(&coefficients(&t.q, &t.k2), freqs, longest);
        for (li, &m) in lengths.iter().enumerate() {
            let (a, b) = (&s1[..m], &s2[..m]);
            let alias = aliasing(a, format);
            let mo = moments(&c1, freqs, a);
            let values = [
                position_inversion(a),
                alias.with_partner,
                alias.pairs as f64,
                token_inversion(a, b),
                token_aliasing(a, b, format),
                mo.mu_approx,
                mo.mu_empirical,
                mo.sigma_approx,
                mo.sigma_empirical,
            ];
            for (s, v) in sums[li].iter_mut().zip(values) {
                *s += v;
            }
        }
    }
    let n = draws.len().max(1) as f64;
    lengths
        .iter()
        .enumerate()
        .map(|(li, &length)| {
            let v = sums[li].map(|s| s / n);
            FailureRow {
                base,
                length,
                position_inversion: v[0],
                position_aliasing: v[1],
                position_alias_pairs: v[2],
                token_inversion: v[3],
                token_aliasing: v[4],
                mu_approx: v[5],
                mu_empirical: v[6],
                sigma_approx: v[7],
                sigma_empirical: v[8],
            }
        })
        .collect()
}

/// A failure rate read off a row.
type Rate = fn(&FailureRow) -> f64;

/// The four failure events by name.
pub const EVENTS: [(&str, Rate); 4] = [
    ("position inversion", |r| r.position_inversion),
    ("position aliasing", |r| r.position_aliasing),
    ("token inversion", |r| r.token_inversion),
    ("token aliasing", |r| r.token_aliasing),
];

/// The direction of per-group changes: `"up"` or `"down"` when every group that changes moves
/// that way, `"mixed"` when groups move both ways (twenty-fourth pass, B-S9: a sum hid it),
/// `"flat"` when none changes.
fn direction(deltas: &[f64]) -> &'static str {
    let ups = deltas.iter().any(|&d| d > 1e-9);
    let downs = deltas.iter().any(|&d| d < -1e-9);
    match (ups, downs) {
        (true, true) => "mixed",
        (true, false) => "up",
        (false, true) => "down",
        (false, false) => "flat",
    }
}

/// Change of `rate` from the smallest to the largest value of `vary`, in every group of rows
/// that share the other parameter.
fn change(rows: &[FailureRow], rate: Rate, vary: Rate, fixed: Rate) -> Vec<f64> {
    let mut groups: Vec<f64> = rows.iter().map(fixed).collect();
    groups.sort_by(f64::total_cmp);
    groups.dedup();
    groups
        .into_iter()
        .map(|g| {
            let mut members: Vec<&FailureRow> = rows.iter().filter(|r| fixed(r) == g).collect();
            members.sort_by(|a, b| vary(a).total_cmp(&vary(b)));
            match (members.first(), members.last()) {
                (Some(lo), Some(hi)) => rate(hi) - rate(lo),
                _ => 0.0,
            }
        })
        .collect()
}

/// Direction of each failure rate as M grows (at each base) and as B grows (at each M):
/// `"up"`, `"down"`, `"mixed"` (some groups up, others down) or `"flat"`, comparing the
/// smallest and largest value of the parameter in each group of rows sharing the other one;
/// `"n/a"` where the rows hold one value of it (nothing was compared).
pub fn trade_off(rows: &[FailureRow]) -> Vec<(&'static str, &'static str, &'static str)> {
    let length: Rate = |r| r.length as f64;
    let base: Rate = |r| r.base;
    let varies = |vary: Rate| {
        let mut values: Vec<f64> = rows.iter().map(vary).collect();
        values.sort_by(f64::total_cmp);
        values.dedup();
        values.len() > 1
    };
    let along = |rate: Rate, vary: Rate, fixed: Rate| {
        if varies(vary) {
            direction(&change(rows, rate, vary, fixed))
        } else {
            "n/a"
        }
    };
    EVENTS
        .iter()
        .map(|&(name, rate)| (name, along(rate, length, base), along(rate, base, length)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A draw count whose list cannot be held is an error, not an abort; a small one is
    /// room with nothing in it.
    #[test]
    fn draws_that_cannot_be_held_are_an_error() {
        let err = room_for_draws(usize::MAX / 2).unwrap_err().to_string();
        assert!(err.contains("do not fit in this machine's memory"), "{err}");
        let room = room_for_draws(10).unwrap();
        assert!(room.is_empty() && room.capacity() >= 10);
    }

    /// One base or one length compares nothing: its direction is "n/a", not "flat".
    #[test]
    fn a_single_value_has_no_direction() {
        let row = |base: f64, length: usize, rate: f64| FailureRow {
            base,
            length,
            position_inversion: rate,
            position_aliasing: rate,
            token_inversion: rate,
            token_aliasing: rate,
            position_alias_pairs: 0.0,
            mu_approx: 0.0,
            mu_empirical: 0.0,
            sigma_approx: 0.0,
            sigma_empirical: 0.0,
        };
        let one = trade_off(&[row(100.0, 16, 0.1)]);
        assert!(one.iter().all(|t| t.1 == "n/a" && t.2 == "n/a"), "{one:?}");
        let by_m = trade_off(&[row(100.0, 16, 0.1), row(100.0, 64, 0.3)]);
        assert!(by_m.iter().all(|t| t.1 == "up" && t.2 == "n/a"), "{by_m:?}");
        // B grows: down at M = 64, up at M = 512: mixed, not the sign of the sum.
        let both = trade_off(&[
            row(100.0, 64, 0.5157),
            row(10000.0, 64, 0.4995),
            row(100.0, 512, 0.5008),
            row(10000.0, 512, 0.5167),
        ]);
        assert!(both.iter().all(|t| t.2 == "mixed"), "{both:?}");
    }

    /// Brute force over all pairs.
    fn inversion_slow(curve: &[f64]) -> f64 {
        let half = curve.len() / 2;
        let mut count = 0.0;
        for a in &curve[..half] {
            for b in &curve[half..] {
                count += if a < b {
                    1.0
                } else if a == b {
                    0.5
                } else {
                    0.0
                };
            }
        }
        count / (half * (curve.len() - half)) as f64
    }

    #[test]
    fn inversion_by_sorting_matches_all_pairs() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for len in [2, 3, 10, 101, 400] {
            let mut v = normal_vector(&mut rng, len);
            // Some ties.
            for x in v.iter_mut().step_by(3) {
                *x = (*x * 2.0).round() / 2.0;
            }
            assert!(
                (position_inversion(&v) - inversion_slow(&v)).abs() < 1e-12,
                "{len}"
            );
        }
    }

    #[test]
    fn aliasing_counts_by_hand() {
        let a = aliasing(&[1.0, 1.0 + 1e-9, 2.0, 3.0, 3.0, 3.0], NumberFormat::Bf16);
        assert_eq!(a.pairs, 1 + 3);
        assert!((a.with_partner - 5.0 / 6.0).abs() < 1e-12);
        let exact = aliasing(&[1.0, 1.0 + 1e-9], NumberFormat::F64);
        assert_eq!(exact.pairs, 0);
        assert_eq!(token_inversion(&[1.0, 0.0, 2.0], &[0.0, 1.0, 1.0]), 0.5);
        assert_eq!(
            token_aliasing(&[1.0, 5.0], &[1.0 + 1e-6, 4.0], NumberFormat::Bf16),
            0.5
        );
    }

    #[test]
    fn bad_parameters_are_named() {
        let ok = FailureConfig {
            d: 8,
            bases: vec![100.0],
            llama3: false,
            lengths: vec![16],
            draws: 2,
            seed: 0,
            rho: 0.0,
            format: NumberFormat::Bf16,
        };
        assert!(failure_table(&ok, |_, _| {}).is_ok());
        let err = |f: &dyn Fn(&mut FailureConfig)| {
            let mut c = ok.clone();
            f(&mut c);
            c.check().unwrap_err().to_string()
        };
        assert!(err(&|c| c.bases = vec![0.0]).contains("base"));
        assert!(err(&|c| c.bases = vec![1e300]).contains("base must lie in"));
        // In exponent form, not 301 digits (issue 55).
        assert!(err(&|c| c.bases = vec![1e300]).ends_with("got 1e300"));
        assert!(err(&|c| c.bases = vec![1e-300]).contains("base must lie in"));
        assert!(err(&|c| c.lengths = vec![1]).contains("between 2 and"));
        assert!(err(&|c| c.lengths = vec![10_000_000_000]).contains("between 2 and"));
        assert!(err(&|c| c.d = 1 << 20).contains("at most"));
        assert!(err(&|c| c.d = 7).contains("even"));
        assert!(err(&|c| c.rho = 2.0).contains("rho"));
        assert!(err(&|c| c.draws = 0).contains("draws"));
    }
}
