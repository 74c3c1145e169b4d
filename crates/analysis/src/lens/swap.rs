//! Swap scores (docs/metric.md, "Swap scores"): how a head's attention row at the query responds when the
//! contents of two earlier positions (or two blocks of positions) are exchanged.
//!
//! With d the unpermuted row and d' the row after swap (i j):
//! alpha = softmax over swaps of |d_i - d_j| / tau,
//! s_POS = sum alpha cos((d'_i, d'_j), (d_i, d_j)), s_SYM = sum alpha cos((d'_i, d'_j), (d_j, d_i)).

use serde::{Deserialize, Serialize};

use crate::lens::head::HeadView;
use crate::AnalysisError;

/// Positional and symbolic scores of one head on one input.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SwapScores {
    /// Positional score s_POS in [0, 1].
    pub s_pos: f64,
    /// Symbolic score s_SYM in [0, 1].
    pub s_sym: f64,
}

/// One swap's effect: the two swapped units' weights before (d) and after (d') the swap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwapEffect {
    /// (d_i, d_j) before.
    pub before: (f64, f64),
    /// (d'_i, d'_j) after.
    pub after: (f64, f64),
}

/// Cosine similarity of two 2-vectors; two zero vectors count as identical, one zero vector as
/// orthogonal to anything else.
pub fn cos2(u: (f64, f64), v: (f64, f64)) -> f64 {
    let nu = u.0.hypot(u.1);
    let nv = v.0.hypot(v.1);
    match (nu == 0.0, nv == 0.0) {
        (true, true) => 1.0,
        (true, false) | (false, true) => 0.0,
        // Normalise first: the product of two tiny norms can underflow to 0.
        _ => (u.0 / nu) * (v.0 / nv) + (u.1 / nu) * (v.1 / nv),
    }
}

/// The temperature of the swap weights: positive and finite, checked once where it is built,
/// so every function that takes a `Tau` can rely on it.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Tau(f64);

impl Tau {
    /// The metric's default temperature (1e-4: a swap counts when it moves the logit gap by
    /// more than about 1e-4).
    pub const DEFAULT: Tau = Tau(1e-4);

    /// A temperature; an error unless `tau` is finite and at least the smallest normal f64
    /// (below it, 1 / tau overflows and every score is NaN; tenth pass, S4).
    pub fn new(tau: f64) -> Result<Self, AnalysisError> {
        if tau.is_finite() && tau >= f64::MIN_POSITIVE {
            Ok(Tau(tau))
        } else {
            Err(AnalysisError::Invalid(format!(
                "tau must be finite and at least {:e} (the smallest normal f64), got {tau:e}",
                f64::MIN_POSITIVE
            )))
        }
    }

    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Default for Tau {
    fn default() -> Self {
        Tau::DEFAULT
    }
}

impl std::fmt::Display for Tau {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Tau {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
        Tau::new(t).map_err(|e| e.to_string())
    }
}

/// s_POS and s_SYM from the effects of every swap.
pub fn scores(effects: &[SwapEffect], tau: Tau) -> SwapScores {
    let tau = tau.get();
    if effects.is_empty() {
        // No two keys to swap (query at position 0 or 1): nothing distinguishes the head.
        return SwapScores {
            s_pos: 1.0,
            s_sym: 1.0,
        };
    }
    let gaps: Vec<f64> = effects
        .iter()
        .map(|e| (e.before.0 - e.before.1).abs() / tau)
        .collect();
    let max = gaps.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = gaps.iter().map(|g| (g - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    let (mut s_pos, mut s_sym) = (0.0, 0.0);
    for (e, w) in effects.iter().zip(&weights) {
        let a = w / total;
        s_pos += a * cos2(e.after, e.before);
        s_sym += a * cos2(e.after, (e.before.1, e.before.0));
    }
    // Both are convex combinations of squared cosines, in [0, 1]; rounding can carry a sum a
    // few ulps past 1 (twenty-fourth pass, B-S10), which no score is.
    SwapScores {
        s_pos: s_pos.clamp(0.0, 1.0),
        s_sym: s_sym.clamp(0.0, 1.0),
    }
}

/// The unpermuted attention row over keys 0..=n from cross logits and the self logit.
pub fn row(cross: &[Vec<f64>], self_logit: f64) -> Vec<f64> {
    let logits: Vec<f64> = (0..cross.len())
        .map(|a| cross[a][a])
        .chain(std::iter::once(self_logit))
        .collect();
    let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let z: f64 = e.iter().sum();
    e.into_iter().map(|v| v / z).collect()
}

/// Contiguous blocks of the n keys before the query: m blocks of n / m positions each.
pub fn blocks(n: usize, m: usize) -> Result<Vec<std::ops::Range<usize>>, AnalysisError> {
    if m == 0 || !n.is_multiple_of(m) {
        return Err(AnalysisError::Invalid(format!(
            "{n} keys before the query do not split into {m} equal blocks"
        )));
    }
    let size = n / m;
    Ok((0..m).map(|b| b * size..(b + 1) * size).collect())
}

/// Fast path: the effect of every swap of two blocks of positions (single positions when each
/// block holds one), computed from the cross logits alone. Block A's contents move to B's
/// positions in order and vice versa; only their logits change. O(1) per single swap.
pub fn block_swap_effects(head: &HeadView, blocks: &[std::ops::Range<usize>]) -> Vec<SwapEffect> {
    effects(&head.cross_logits(), head.self_logit(), blocks)
}

/// [`block_swap_effects`] from precomputed cross logits and self logit.
pub fn effects(
    cross: &[Vec<f64>],
    self_logit: f64,
    blocks: &[std::ops::Range<usize>],
) -> Vec<SwapEffect> {
    let n = cross.len();
    let original: Vec<f64> = (0..n).map(|a| cross[a][a]).chain([self_logit]).collect();
    let max = original.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = original.iter().map(|l| (l - max).exp()).collect();
    let z: f64 = exp.iter().sum();
    let mass = |r: &std::ops::Range<usize>| r.clone().map(|p| exp[p]).sum::<f64>() / z;
    let mut effects = Vec::with_capacity(blocks.len() * blocks.len().saturating_sub(1) / 2);
    for (x, a) in blocks.iter().enumerate() {
        for b in &blocks[x + 1..] {
            // New logits: position a_t holds content b_t and vice versa.
            let new_a: Vec<f64> = a.clone().zip(b.clone()).map(|(p, c)| cross[p][c]).collect();
            let new_b: Vec<f64> = b.clone().zip(a.clone()).map(|(p, c)| cross[p][c]).collect();
            let removed: f64 = a.clone().chain(b.clone()).map(|p| exp[p]).sum();
            // The new softmax's normaliser, relative to the new largest logit. When the
            // swapped keys hold most of the mass, z - removed cancels (and a hard softmax's
            // other keys may underflow relative to the old maximum): sum the rest afresh
            // against the largest logit left.
            let (rest, new_max) = if removed > 0.5 * z {
                let others = (0..=n).filter(|p| !a.contains(p) && !b.contains(p));
                let rest_max = others
                    .clone()
                    .map(|p| original[p])
                    .fold(f64::NEG_INFINITY, f64::max);
                let new_max = new_a.iter().chain(&new_b).cloned().fold(rest_max, f64::max);
                let rest: f64 = others.map(|p| (original[p] - new_max).exp()).sum();
                (rest, new_max)
            } else {
                let new_max = new_a.iter().chain(&new_b).cloned().fold(max, f64::max);
                ((z - removed) * (max - new_max).exp(), new_max)
            };
            let ea: f64 = new_a.iter().map(|l| (l - new_max).exp()).sum();
            let eb: f64 = new_b.iter().map(|l| (l - new_max).exp()).sum();
            let z_new = rest + ea + eb;
            effects.push(SwapEffect {
                before: (mass(a), mass(b)),
                after: (ea / z_new, eb / z_new),
            });
        }
    }
    effects
}

/// Fast-path swap scores of a head at its query, over all single-position swaps i < j < n.
pub fn swap_scores(head: &HeadView, tau: Tau) -> SwapScores {
    let n = head.n();
    let singles: Vec<_> = (0..n).map(|p| p..p + 1).collect();
    scores(&block_swap_effects(head, &singles), tau)
}

/// Fast-path block-swap scores with the keys before the query split into `m` blocks.
pub fn block_swap_scores(head: &HeadView, m: usize, tau: Tau) -> Result<SwapScores, AnalysisError> {
    let blocks = blocks(head.n(), m)?;
    Ok(scores(&block_swap_effects(head, &blocks), tau))
}

/// Attention entropy (nats) of a row of weights.
pub fn entropy(row: &[f64]) -> f64 {
    -row.iter()
        .filter(|&&p| p > 0.0)
        .map(|p| p * p.ln())
        .sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unchanged rows score 1 for s_pos however many swaps are averaged, never a few ulps
    /// above (twenty-fourth pass, B-S10).
    #[test]
    fn scores_stay_within_zero_and_one() {
        for n in [3usize, 7, 10, 33, 1000] {
            let effects: Vec<SwapEffect> = (0..n)
                .map(|i| {
                    let d = (
                        0.1 + (i as f64 * 0.37).sin().abs(),
                        0.2 + (i as f64).cos().abs(),
                    );
                    SwapEffect {
                        before: d,
                        after: d,
                    }
                })
                .collect();
            let s = scores(&effects, Tau::DEFAULT);
            assert!((0.0..=1.0).contains(&s.s_pos), "{n}: {}", s.s_pos);
            assert!((0.0..=1.0).contains(&s.s_sym), "{n}: {}", s.s_sym);
            assert!((s.s_pos - 1.0).abs() < 1e-12, "{n}: {}", s.s_pos);
        }
    }
}
