//! The three-valued verdict (docs/study.md, "The verdict per claim"): a claim holds, does not
//! hold, or is undetermined, and an undetermined claim says what is missing. One measurement
//! (a seed, a run, a curve) has an [`Outcome`]; [`decide`] turns a claim's outcomes into its
//! [`Verdict`] by one rule for every claim.

use serde::{Deserialize, Serialize};

/// A claim's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every measurement meets the threshold, and there are enough of them.
    Holds,
    /// At least one measurement is a determined counterexample.
    DoesNotHold,
    /// The evidence cannot decide: a file is missing, a length was not tested, too few seeds
    /// or samples, a model that did not learn its task, a measure that cannot see the
    /// mechanism. The claim's `reason` says which.
    Undetermined,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "does not hold",
            Verdict::Undetermined => "undetermined",
        })
    }
}

/// What a claim is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// A measurement of trained models: it can come out either way.
    Empirical,
    /// An exact check of a hand-built construction or a theorem's bound: it fails only through
    /// a bug, so it is counted apart from the empirical claims.
    ExactCheck,
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Category::Empirical => "empirical",
            Category::ExactCheck => "exact check",
        })
    }
}

/// One measurement's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It meets the threshold.
    Holds,
    /// It does not.
    Fails,
    /// It cannot decide, and why.
    Undetermined(String),
}

impl Outcome {
    /// Holds when `ok`, fails otherwise.
    pub fn of(ok: bool) -> Self {
        if ok {
            Outcome::Holds
        } else {
            Outcome::Fails
        }
    }

    /// Undetermined, for `why`.
    pub fn undetermined(why: impl Into<String>) -> Self {
        Outcome::Undetermined(why.into())
    }
}

/// A claim's measurements tallied: what each measured, the outcome counts and the reasons of
/// the undetermined ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// What each measurement found, in words (`seed 0: ...`).
    pub measured: Vec<String>,
    /// Measurements meeting the threshold.
    pub holding: usize,
    /// Measurements failing it.
    pub failing: usize,
    /// Why each undetermined measurement could not decide (`seed 1: ...`).
    pub undetermined: Vec<String>,
}

impl Tally {
    /// Adds one measurement, labelled `label` (`seed 0`; empty for a single measurement).
    pub fn push(&mut self, label: &str, text: String, outcome: Outcome) {
        let labelled = |s: String| {
            if label.is_empty() {
                s
            } else {
                format!("{label}: {s}")
            }
        };
        self.measured.push(labelled(text));
        match outcome {
            Outcome::Holds => self.holding += 1,
            Outcome::Fails => self.failing += 1,
            Outcome::Undetermined(why) => self.undetermined.push(labelled(why)),
        }
    }

    /// Measurements in all.
    pub fn n(&self) -> usize {
        self.holding + self.failing + self.undetermined.len()
    }
}

/// The verdict of a tally, with the reason when undetermined, for a claim that needs at least
/// `min_n` measurements: any failing measurement makes it not hold (a determined
/// counterexample); otherwise any undetermined one, or fewer than `min_n` holding, makes it
/// undetermined; otherwise it holds.
pub fn decide(tally: &Tally, min_n: usize) -> (Verdict, Option<String>) {
    if tally.failing > 0 {
        return (Verdict::DoesNotHold, None);
    }
    if !tally.undetermined.is_empty() {
        return (Verdict::Undetermined, Some(tally.undetermined.join("; ")));
    }
    if tally.holding < min_n.max(1) {
        return (
            Verdict::Undetermined,
            Some(format!(
                "too few measurements: {} where the claim needs at least {}",
                tally.holding,
                min_n.max(1)
            )),
        );
    }
    (Verdict::Holds, None)
}

/// The difference of means `mean(b) - mean(a)` with its Welch 95% interval: standard error
/// sqrt(s_a^2 / n_a + s_b^2 / n_b) (sample variances), Welch-Satterthwaite degrees of freedom
/// rounded down, Student's t. (d, low, high); None when a side has fewer than 2 values. Equal
/// values on both sides give a zero-width interval.
pub fn welch_difference(a: &[f64], b: &[f64]) -> Option<(f64, f64, f64)> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let moments = |v: &[f64]| {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var / n, n - 1.0)
    };
    let ((ma, va, dfa), (mb, vb, dfb)) = (moments(a), moments(b));
    let d = mb - ma;
    let se = (va + vb).sqrt();
    if se == 0.0 {
        return Some((d, d, d));
    }
    let df = (va + vb).powi(2) / (va * va / dfa + vb * vb / dfb);
    let half = crate::measure::decay::t_975(df.floor().max(1.0) as usize) * se;
    Some((d, d - half, d + half))
}

/// The Wilson score interval of `k` successes in `n` trials at 95% (z = 1.96): (low, high);
/// (0, 1) when n is 0.
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let (k, n) = (k.min(n) as f64, n as f64);
    let p = k / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Whether an accuracy measured on `n` samples is at or above `threshold`, decided by its 95%
/// Wilson interval: holds when the interval lies at or above the threshold, fails when it lies
/// below, undetermined (naming the interval) when the samples cannot separate the two.
pub fn accuracy_at_least(accuracy: f64, n: usize, threshold: f64) -> Outcome {
    let k = (accuracy * n as f64).round() as usize;
    let (lo, hi) = wilson(k, n);
    if lo >= threshold {
        Outcome::Holds
    } else if hi < threshold {
        Outcome::Fails
    } else {
        Outcome::undetermined(format!(
            "accuracy {accuracy:.3} on {n} samples: its 95% interval [{lo:.3}, {hi:.3}] \
             contains the threshold {threshold}"
        ))
    }
}

/// Spearman's rank correlation of `(x, y)` (ties get their mean rank); None with fewer than 3
/// points or a constant side.
pub fn spearman(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let rx = ranks(&points.iter().map(|p| p.0).collect::<Vec<_>>());
    let ry = ranks(&points.iter().map(|p| p.1).collect::<Vec<_>>());
    let n = rx.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    (vx > 0.0 && vy > 0.0).then(|| cov / (vx * vy).sqrt())
}

/// The 95% interval of Spearman's rho on `n` points: Fisher's z with the variance 1.06 / (n - 3)
/// of Fieller, Hartley and Pearson (1957); (-1, 1) with 4 or fewer points.
pub fn spearman_interval(rho: f64, n: usize) -> (f64, f64) {
    if n <= 4 {
        return (-1.0, 1.0);
    }
    let z = rho.clamp(-0.999_999, 0.999_999).atanh();
    let half = 1.959_963_984_540_054 * (1.06 / (n as f64 - 3.0)).sqrt();
    ((z - half).tanh(), (z + half).tanh())
}

/// 1-based ranks, ties sharing their mean rank.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
            j += 1;
        }
        let mean = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            r[k] = mean;
        }
        i = j + 1;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_matches_pearson_on_ranks_worked_by_hand() {
        // Monotone: +1 and -1 whatever the spacing.
        let up = [(1.0, 10.0), (2.0, 100.0), (5.0, 1000.0), (9.0, 1e4)];
        assert!((spearman(&up).unwrap() - 1.0).abs() < 1e-12);
        let down: Vec<(f64, f64)> = up.iter().map(|&(x, y)| (x, -y)).collect();
        assert!((spearman(&down).unwrap() + 1.0).abs() < 1e-12);
        // By hand: x ranks 1 2 3 4 5, y ranks 2 1 4 3 5: d^2 sum 4, rho = 1 - 6*4/(5*24) = 0.8.
        let p = [(1.0, 2.0), (2.0, 1.0), (3.0, 4.0), (4.0, 3.0), (5.0, 5.0)];
        assert!((spearman(&p).unwrap() - 0.8).abs() < 1e-12);
        // Ties take mean ranks: y = 1 1 2 -> ranks 1.5 1.5 3.
        assert_eq!(ranks(&[1.0, 1.0, 2.0]), vec![1.5, 1.5, 3.0]);
        assert_eq!(spearman(&[(1.0, 1.0), (2.0, 1.0), (3.0, 1.0)]), None);
        assert_eq!(spearman(&[(1.0, 1.0), (2.0, 2.0)]), None);
    }

    fn near(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }

    #[test]
    fn wilson_matches_the_closed_form_worked_example() {
        // 8 of 10: the textbook interval [0.490, 0.943].
        let (lo, hi) = wilson(8, 10);
        near(lo, 0.4902);
        near(hi, 0.9433);
        // 100 of 100: [0.963, 1].
        let (lo, hi) = wilson(100, 100);
        near(lo, 0.9630);
        assert_eq!(hi, 1.0);
        assert_eq!(wilson(0, 0), (0.0, 1.0));
    }

    #[test]
    fn accuracy_is_decided_only_when_the_samples_can_separate_it() {
        assert_eq!(accuracy_at_least(1.0, 100, 0.9), Outcome::Holds);
        assert_eq!(accuracy_at_least(0.5, 100, 0.9), Outcome::Fails);
        match accuracy_at_least(0.93, 100, 0.9) {
            Outcome::Undetermined(why) => assert!(why.contains("[0.863, 0.966]"), "{why}"),
            o => panic!("{o:?}"),
        }
        // The same accuracy on more samples decides.
        assert_eq!(accuracy_at_least(0.93, 4000, 0.9), Outcome::Holds);
    }

    fn tally(outcomes: &[Outcome]) -> Tally {
        let mut t = Tally::default();
        for (i, o) in outcomes.iter().enumerate() {
            t.push(&format!("seed {i}"), "x".into(), o.clone());
        }
        t
    }

    #[test]
    fn one_counterexample_fails_and_an_undecided_seed_is_named() {
        let u = || Outcome::undetermined("no file");
        assert_eq!(
            decide(&tally(&[Outcome::Holds, Outcome::Fails, u()]), 1).0,
            Verdict::DoesNotHold
        );
        let (v, why) = decide(&tally(&[Outcome::Holds, u()]), 1);
        assert_eq!(v, Verdict::Undetermined);
        assert_eq!(why.unwrap(), "seed 1: no file");
        assert_eq!(
            decide(&tally(&[Outcome::Holds, Outcome::Holds]), 2),
            (Verdict::Holds, None)
        );
        let (v, why) = decide(&tally(&[Outcome::Holds]), 3);
        assert_eq!(v, Verdict::Undetermined);
        assert!(why.unwrap().contains("at least 3"));
        assert_eq!(decide(&tally(&[]), 0).0, Verdict::Undetermined);
    }

    #[test]
    fn the_welch_interval_matches_a_hand_computation() {
        // Equal variances and sizes: se = sqrt(2 * 0.01 / 4) = 0.0707, Welch df = 6 exactly
        // (t = 2.447): d = 0.2, half-width 0.1730.
        let a = [0.4, 0.5, 0.6, 0.5];
        let b: Vec<f64> = a.iter().map(|x| x + 0.2).collect();
        let var = a.iter().map(|x| (x - 0.5f64).powi(2)).sum::<f64>() / 3.0;
        let (d, lo, hi) = welch_difference(&a, &b).unwrap();
        let half = 2.447 * (2.0 * var / 4.0).sqrt();
        assert!((d - 0.2).abs() < 1e-12);
        assert!((lo - (0.2 - half)).abs() < 1e-3 && (hi - (0.2 + half)).abs() < 1e-3);
        // Constant sides: a zero-width interval; one value on a side: none.
        assert_eq!(
            welch_difference(&[1.0, 1.0], &[0.5, 0.5]),
            Some((-0.5, -0.5, -0.5))
        );
        assert_eq!(welch_difference(&[1.0], &[0.5, 0.5]), None);
    }
}
