//! MOD-predicate heads (docs/languages.md, "Heads"): does a trained head put its attention on
//! BOS at the positions i = r (mod m) and elsewhere at the others, as the hand-built periodic
//! RoPE head MOD_m^r of the theory lab does (`ropelab theory periodic`)?
//!
//! A head's BOS curve is its attention weight on the BOS key (position 0) at every query
//! position i >= 1, averaged over a batch. Its MOD_m^r contrast over a set of positions is the
//! mean weight at the positions i = r (mod m) minus the mean at the other positions: 1 for the
//! exact MOD head, 0 for a head whose BOS weight does not depend on i mod m, and negative
//! when the head avoids BOS at residue r.

use std::ops::RangeInclusive;

use candle_core::{Tensor, D};
use ropelab_model::{GptJ, HookKind, HookPoint, Hooks};
use serde::{Deserialize, Serialize};

use crate::{AnalysisError, Result};

/// The contrast at which we call a head a MOD_m^r head, on both the training positions and
/// the positions beyond them: half of the exact head's 1.
pub const MOD_THRESHOLD: f64 = 0.5;

/// Each head's BOS curve: `[layer][head][i]` is the mean attention weight on position 0 from
/// query position `i` over the batch `ids` [batch, pos] (`[..][..][0]` is 1, BOS on itself).
pub fn bos_curves(model: &GptJ, ids: &Tensor) -> Result<Vec<Vec<Vec<f64>>>> {
    let n_layers = model.config().n_layers;
    let points: Vec<HookPoint> = (0..n_layers)
        .map(|l| HookPoint::new(l, HookKind::Pattern))
        .collect();
    let mut hooks = Hooks::new().capture(points.iter().copied());
    model.trunk(ids, &mut hooks, None)?;
    points
        .iter()
        .map(|&p| {
            // [batch, heads, q_pos, k_pos] -> [heads, q_pos]: the BOS column, batch mean.
            let pattern = hooks
                .get(p)
                .ok_or_else(|| AnalysisError::Invalid(format!("hook {p} was not captured")))?;
            let bos = pattern
                .narrow(D::Minus1, 0, 1)?
                .squeeze(D::Minus1)?
                .mean(0)?;
            let rows: Vec<Vec<f32>> = bos.to_vec2()?;
            Ok(rows
                .into_iter()
                .map(|r| r.into_iter().map(f64::from).collect())
                .collect())
        })
        .collect()
}

/// The MOD_m^r contrast of a BOS curve over the query positions `positions` (each >= 1 and
/// inside the curve): mean weight at i = r (mod m) minus mean weight at the rest. `None`
/// when either group is empty or the arguments are out of range.
pub fn mod_contrast(
    bos: &[f64],
    positions: RangeInclusive<usize>,
    m: usize,
    r: usize,
) -> Option<f64> {
    if m < 2 || r >= m || *positions.start() == 0 || *positions.end() >= bos.len() {
        return None;
    }
    let (mut hit, mut n_hit, mut rest, mut n_rest) = (0.0, 0usize, 0.0, 0usize);
    for i in positions {
        if i % m == r {
            hit += bos[i];
            n_hit += 1;
        } else {
            rest += bos[i];
            n_rest += 1;
        }
    }
    (n_hit > 0 && n_rest > 0).then(|| hit / n_hit as f64 - rest / n_rest as f64)
}

/// The residue of the largest MOD_m^r contrast over `positions`, and that contrast.
pub fn best_residue(
    bos: &[f64],
    positions: RangeInclusive<usize>,
    m: usize,
) -> Option<(usize, f64)> {
    (0..m)
        .filter_map(|r| mod_contrast(bos, positions.clone(), m, r).map(|c| (r, c)))
        .fold(None, |best: Option<(usize, f64)>, (r, c)| match best {
            Some((_, b)) if b >= c => best,
            _ => Some((r, c)),
        })
}

/// One row of `heads.csv`: how closely one head of one run follows MOD_m^r, with the residue
/// chosen on the training positions and kept for the positions beyond them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModHeadRow {
    /// Language name.
    pub language: String,
    /// Position-encoding kind.
    pub pe: String,
    /// Its base.
    pub base: Option<f64>,
    /// Seed.
    pub seed: u64,
    /// Learning rate.
    pub lr: f64,
    /// Layer.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// Period m.
    pub period: usize,
    /// Residue r (best on the training positions).
    pub residue: usize,
    /// Contrast over the query positions of training strings (1 ..= longest training length + 1).
    pub contrast_train: f64,
    /// Contrast over the query positions beyond them (up to the longest tested string).
    pub contrast_test: f64,
    /// Mean BOS weight over all query positions >= 1.
    pub bos_weight: f64,
}

impl ModHeadRow {
    /// Whether both contrasts reach [`MOD_THRESHOLD`].
    pub fn is_mod_head(&self) -> bool {
        self.contrast_train >= MOD_THRESHOLD && self.contrast_test >= MOD_THRESHOLD
    }

    /// Column names of [`ModHeadRow::cells`] for a table.
    pub const HEADER: [&'static str; 10] = [
        "language",
        "pe",
        "base",
        "seed",
        "lr",
        "head",
        "MOD_m^r",
        "contrast train",
        "contrast beyond",
        "MOD head",
    ];

    /// The row as table cells (a missing base as `-`).
    pub fn cells(&self) -> Vec<String> {
        vec![
            self.language.clone(),
            self.pe.clone(),
            self.base.map_or("-".into(), |b| format!("{b:e}")),
            self.seed.to_string(),
            format!("{:e}", self.lr),
            format!("L{}H{}", self.layer, self.head),
            format!("{}^{}", self.period, self.residue),
            format!("{:.3}", self.contrast_train),
            format!("{:.3}", self.contrast_test),
            (if self.is_mod_head() { "yes" } else { "no" }).into(),
        ]
    }

    /// The weaker of the two contrasts (how a run's heads are ranked).
    pub fn strength(&self) -> f64 {
        self.contrast_train.min(self.contrast_test)
    }
}

/// Who a row belongs to: language, encoding kind, base, seed and learning rate.
#[derive(Debug, Clone, PartialEq)]
pub struct RunLabel {
    /// Language name.
    pub language: String,
    /// Position-encoding kind.
    pub pe: String,
    /// Its base.
    pub base: Option<f64>,
    /// Seed.
    pub seed: u64,
    /// Learning rate.
    pub lr: f64,
}

/// Every head's fit to every period in `periods` from its BOS curve (`curves` from
/// [`bos_curves`] over strings of the longest tested length), with query positions
/// `1..=train_end` as the training positions and the rest beyond them.
pub fn mod_head_rows(
    run: &RunLabel,
    curves: &[Vec<Vec<f64>>],
    periods: &[usize],
    train_end: usize,
) -> Result<Vec<ModHeadRow>> {
    let mut rows = vec![];
    for (layer, heads) in curves.iter().enumerate() {
        for (head, bos) in heads.iter().enumerate() {
            let last = bos.len().saturating_sub(1);
            if train_end + 2 > last {
                return Err(AnalysisError::Invalid(format!(
                    "BOS curves of {} positions leave too few beyond the training positions \
                     1..={train_end}",
                    bos.len()
                )));
            }
            for &m in periods {
                let bad = || AnalysisError::Invalid(format!("period {m} cannot be scored"));
                let (residue, contrast_train) =
                    best_residue(bos, 1..=train_end, m).ok_or_else(bad)?;
                let contrast_test =
                    mod_contrast(bos, train_end + 1..=last, m, residue).ok_or_else(bad)?;
                rows.push(ModHeadRow {
                    language: run.language.clone(),
                    pe: run.pe.clone(),
                    base: run.base,
                    seed: run.seed,
                    lr: run.lr,
                    layer,
                    head,
                    period: m,
                    residue,
                    contrast_train,
                    contrast_test,
                    bos_weight: bos[1..].iter().sum::<f64>() / last as f64,
                });
            }
        }
    }
    Ok(rows)
}

/// The strongest head of each run (by [`ModHeadRow::strength`]), in the order runs first
/// appear in `rows`.
pub fn strongest_per_run(rows: &[ModHeadRow]) -> Vec<ModHeadRow> {
    let mut best: Vec<ModHeadRow> = vec![];
    for row in rows {
        let same = |b: &ModHeadRow| {
            (&b.language, &b.pe, b.base, b.seed, b.lr)
                == (&row.language, &row.pe, row.base, row.seed, row.lr)
        };
        match best.iter_mut().find(|b| same(b)) {
            Some(b) if b.strength() < row.strength() => *b = row.clone(),
            Some(_) => {}
            None => best.push(row.clone()),
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use ropelab_theory::format::NumberFormat;
    use ropelab_theory::periodic::ModHead;

    #[test]
    fn the_hand_built_mod_head_has_contrast_one_and_a_flat_curve_zero() {
        // The theory lab's exact MOD_m^r head (rounded to f32), as a BOS curve.
        for (m, r) in [(2, 0), (2, 1), (3, 2), (5, 1)] {
            let c = 1.02 * 2.0 * ropelab_theory::periodic::f_large(NumberFormat::F32)
                / ropelab_theory::periodic::delta(m);
            let head = ModHead::new(m, r, c, NumberFormat::F32).unwrap();
            let bos: Vec<f64> = (0..200)
                .map(|i| if i == 0 { 1.0 } else { head.output(i) })
                .collect();
            assert_eq!(best_residue(&bos, 1..=41, m), Some((r, 1.0)), "m {m} r {r}");
            assert_eq!(mod_contrast(&bos, 42..=199, m, r), Some(1.0));
            // Another residue avoids BOS where MOD_m^r attends: a negative contrast.
            let other = (r + 1) % m;
            assert!(mod_contrast(&bos, 1..=41, m, other).unwrap() < 0.0);
        }
        let flat = vec![0.3; 100];
        let (_, c) = best_residue(&flat, 1..=99, 2).unwrap();
        assert!(c.abs() < 1e-12);
        // A uniform causal head (weight 1 / (i + 1) on BOS) has no residue preference at
        // long range and only a small one (from the 1/i trend) at short range.
        let uniform: Vec<f64> = (0..500).map(|i| 1.0 / (i as f64 + 1.0)).collect();
        let (_, c) = best_residue(&uniform, 1..=41, 2).unwrap();
        assert!(c < 0.05, "{c}");
        assert!(mod_contrast(&uniform, 42..=499, 2, 1).unwrap().abs() < 1e-3);
    }

    #[test]
    fn bad_ranges_give_none() {
        let bos = vec![1.0, 0.5, 0.0, 0.5];
        assert_eq!(
            mod_contrast(&bos, 0..=3, 2, 0),
            None,
            "BOS on itself is excluded"
        );
        assert_eq!(mod_contrast(&bos, 1..=4, 2, 0), None, "past the curve");
        assert_eq!(mod_contrast(&bos, 1..=3, 1, 0), None, "period 1");
        assert_eq!(mod_contrast(&bos, 1..=3, 2, 2), None, "residue >= m");
        assert_eq!(mod_contrast(&bos, 2..=2, 2, 0), None, "one group empty");
        assert_eq!(mod_contrast(&bos, 1..=3, 2, 1), Some(0.5));
    }

    #[test]
    fn the_strongest_head_per_run_is_kept_in_run_order() {
        let run = |pe: &str| RunLabel {
            language: "aa-star".into(),
            pe: pe.into(),
            base: None,
            seed: 0,
            lr: 1e-3,
        };
        let curve = |phase: usize| -> Vec<f64> {
            (0..100)
                .map(|i| if i == 0 || i % 2 == phase { 0.9 } else { 0.1 })
                .collect()
        };
        let flat = vec![0.5; 100];
        let curves = vec![vec![flat.clone(), curve(1)], vec![curve(0), flat]];
        let a = mod_head_rows(&run("rope-periodic"), &curves, &[2, 3], 41).unwrap();
        assert_eq!(a.len(), 2 * 2 * 2);
        let b = mod_head_rows(&run("nope"), &[vec![vec![0.5; 100]]], &[2], 41).unwrap();
        let all: Vec<ModHeadRow> = a.into_iter().chain(b).collect();
        let best = strongest_per_run(&all);
        assert_eq!(best.len(), 2);
        assert_eq!(best[0].pe, "rope-periodic");
        assert_eq!((best[0].layer, best[0].head, best[0].period), (0, 1, 2));
        assert_eq!(best[0].residue, 1);
        assert!((best[0].contrast_test - 0.8).abs() < 1e-12);
        assert!(best[0].is_mod_head());
        assert!(!best[1].is_mod_head());
        assert!(mod_head_rows(&run("nope"), &[vec![vec![0.5; 42]]], &[2], 41).is_err());
    }
}
