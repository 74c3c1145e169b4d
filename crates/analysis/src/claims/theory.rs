//! The hand-built heads' checks (theory): the Index head's discrepancy stays under theorem
//! 3.2's bound, the Retrieval head's does not decay over the paper's range. Both are exact
//! checks of a construction ([`Category::ExactCheck`]): they fail only through a bug, so they
//! are counted apart from the empirical claims.

use super::{Category, Claim, Curve, Measure, Outcome, StudyFiles, Tally, Thresholds};

/// A curve's one measurement as a tally.
fn single(m: Option<Measure>) -> Tally {
    let mut t = Tally::default();
    match m {
        Some((text, outcome)) => t.push("", text, outcome),
        None => t.push(
            "",
            "no theory CSV".into(),
            Outcome::undetermined("not measured: the theory CSV is missing"),
        ),
    }
    t
}

/// The least-squares slope of log y against log x over the points with y > 0 (None with fewer
/// than two).
fn log_log_slope(points: &[(f64, f64)]) -> Option<f64> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.0 > 0.0 && p.1 > 0.0)
        .map(|p| (p.0.ln(), p.1.ln()))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The upper envelope of a curve's positive discrepancies from n = 10 on (the largest Delta at
/// n or beyond), as (n, envelope) points.
fn envelope(c: &Curve) -> Vec<(f64, f64)> {
    let mut rows: Vec<(usize, f64)> = c.iter().filter(|r| r.0 >= 10).map(|r| (r.0, r.1)).collect();
    rows.sort_by_key(|r| r.0);
    let mut out = vec![];
    let mut running = f64::NEG_INFINITY;
    for &(n, d) in rows.iter().rev() {
        running = running.max(d);
        out.push((n as f64, running));
    }
    out.reverse();
    out
}

/// The discrepancy of curve `c` at n (None when n is not on it).
fn at(c: &Curve, n: usize) -> Option<f64> {
    c.iter().find(|r| r.0 == n).map(|r| r.1)
}

/// `index_discrepancy_decays`: The hand-built Index head's discrepancy under theorem 3.2's
/// bound (an exact check of the bound; the fitted rate is reported, not judged).
pub fn index_discrepancy_decays(files: &StudyFiles) -> Claim {
    Claim::new(
        "index_discrepancy_decays",
        Category::ExactCheck,
        "The hand-built Index head's discrepancy decays like 1/n^2 (theorem 3.2: Delta(n) <= \
         min(1 - cos theta, 2 pi^2 / n^2)).",
        "checks the bound, not the rate: Delta(n) <= min(1 - cos theta, 2 pi^2 / n^2) at every \
         n of the curve (relative slack 1e-9); the least-squares log-log slope of Delta for \
         n >= 10 (with its t interval, descriptive only: the curve is exact, not sampled) and \
         that of the curve's upper envelope are reported beside it (the 1/n^2 rate is -2)"
            .into(),
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
            let slope = log_log_slope(&envelope(c))
                .map_or("no positive envelope".into(), |s| format!("{s:.2}"));
            let fit =
                super::decay::curve_rate(c, 10).map_or("too few points".into(), |f| f.to_string());
            (
                format!(
                    "{}; largest Delta / bound {worst:.3}; fitted slope of Delta (n >= 10) \
                     {fit}; envelope slope (n >= 10) {slope}",
                    pick.join(", ")
                ),
                Outcome::of(worst <= 1.0 + 1e-9),
            )
        })),
        1,
    )
}

/// `retrieval_discrepancy_holds`: The hand-built Retrieval head's discrepancy stays up (an
/// exact check of the construction).
pub fn retrieval_discrepancy_holds(files: &StudyFiles, t: &Thresholds) -> Claim {
    Claim::new(
        "retrieval_discrepancy_holds",
        Category::ExactCheck,
        "The hand-built Retrieval head's discrepancy does not decay with n (it stays near 1 - \
         cos omega while n theta is small).",
        format!(
            "Delta(n) >= {} x Delta(1) for every n <= {} (the paper's plotted range)",
            t.retrieval_fraction, t.retrieval_n
        ),
        single(files.retrieval.as_ref().map(|c| {
            let Some(d1) = at(c, 1) else {
                return (
                    "the curve has no n = 1".into(),
                    Outcome::undetermined("the curve has no n = 1"),
                );
            };
            let in_range: Vec<_> = c.iter().filter(|r| r.0 <= t.retrieval_n).collect();
            if in_range.iter().map(|r| r.0).max() != Some(t.retrieval_n) {
                let why = format!("the curve stops before n = {}", t.retrieval_n);
                return (why.clone(), Outcome::Undetermined(why));
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
            (text, Outcome::of(min >= t.retrieval_fraction * d1))
        })),
        1,
    )
}
