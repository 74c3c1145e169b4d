//! The hand-built heads' claims (theory): the Index head's discrepancy decays under theorem
//! 3.2's bound, the Retrieval head's does not.

use super::{claim, Claim, Curve, Measure, StudyFiles, Thresholds};

/// A curve's one measurement as a claim's measured values: (texts, holding, measured).
fn single(m: Option<Measure>) -> (Vec<String>, usize, usize) {
    match m {
        Some((text, Some(ok))) => (vec![text], usize::from(ok), 1),
        Some((text, None)) => (vec![text], 0, 0),
        None => (vec!["no theory CSV".into()], 0, 0),
    }
}

/// The discrepancy of curve `c` at n (None when n is not on it).
fn at(c: &Curve, n: usize) -> Option<f64> {
    c.iter().find(|r| r.0 == n).map(|r| r.1)
}

/// `index_discrepancy_decays`: The hand-built Index head's discrepancy under theorem 3.2's bound.
pub fn index_discrepancy_decays(files: &StudyFiles) -> Claim {
    claim(
        "index_discrepancy_decays",
        "The hand-built Index head's discrepancy decays like 1/n^2 (theorem 3.2: Delta(n) <= \
         min(1 - cos theta, 2 pi^2 / n^2)).",
        "Delta(n) <= the theorem's bound at every n of the curve (relative slack 1e-9)".into(),
        single(files.index.as_ref().map(|c| {
            let worst = c
                .iter()
                .map(|r| r.1 / r.2)
                .fold(f64::NEG_INFINITY, f64::max);
            let max_n = c.iter().map(|r| r.0).max().unwrap_or(0);
            let pick: Vec<String> = [1, 10, 100, max_n]
                .iter()
                .filter_map(|&n| at(c, n).map(|d| format!("Delta({n}) = {d:.3e}")))
                .collect();
            (
                format!("{}; largest Delta / bound {worst:.3}", pick.join(", ")),
                Some(worst <= 1.0 + 1e-9),
            )
        })),
        1,
    )
}

/// `retrieval_discrepancy_holds`: The hand-built Retrieval head's discrepancy stays up.
pub fn retrieval_discrepancy_holds(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "retrieval_discrepancy_holds",
        "The hand-built Retrieval head's discrepancy does not decay with n (it stays near 1 - \
         cos omega while n theta is small).",
        format!(
            "Delta(n) >= {} x Delta(1) for every n <= {} (the paper's plotted range)",
            t.retrieval_fraction, t.retrieval_n
        ),
        single(files.retrieval.as_ref().map(|c| {
            let Some(d1) = at(c, 1) else {
                return ("the curve has no n = 1".into(), None);
            };
            let in_range: Vec<_> = c.iter().filter(|r| r.0 <= t.retrieval_n).collect();
            if in_range.iter().map(|r| r.0).max() != Some(t.retrieval_n) {
                return (
                    format!("the curve stops before n = {}", t.retrieval_n),
                    None,
                );
            }
            let min = in_range.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
            let fails = c.iter().find(|r| r.1 <= 0.0).map(|r| r.0);
            let text = format!(
                "Delta(1) = {d1:.3}, min over n <= {} = {min:.3} ({:.2} x Delta(1)); {}",
                t.retrieval_n,
                min / d1,
                match fails {
                    Some(n) => format!("Delta first <= 0 at n = {n} (n theta passes omega / 2)"),
                    None => "Delta > 0 over the whole curve".into(),
                }
            );
            (text, Some(min >= t.retrieval_fraction * d1))
        })),
        1,
    )
}
