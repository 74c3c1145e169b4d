//! The discrepancy law on the trained models (docs/theory.md, "Trained heads"): the pure
//! positional heads' discrepancy falls with the input length faster than the pure symbolic
//! heads', each rate a log-log slope fitted over the length test with its 95% interval
//! ([`crate::measure::decay`]).

use super::multi_hop::{learned_grid, missing};
use super::{per_seed, seed_claim, Claim, Outcome, RunFiles, StudyFiles, Thresholds};
use crate::measure::decay::{log_log_fit, SlopeFit};
use crate::measure::dynamics::HeadKind;

/// The fitted slope of the discrepancy of `r`'s heads of `kind` (typed by `grid`) against the
/// input length over its length test's last checkpoint; Err names what is missing.
fn rate_of(
    r: &RunFiles,
    grid: &[Vec<HeadKind>],
    kind: HeadKind,
) -> std::result::Result<(SlopeFit, Vec<String>), String> {
    let heads: Vec<(usize, usize)> = grid
        .iter()
        .enumerate()
        .flat_map(|(l, hs)| {
            hs.iter()
                .enumerate()
                .filter(move |&(_, &k)| k == kind)
                .map(move |(h, _)| (l, h))
        })
        .collect();
    let name = match kind {
        HeadKind::Positional => "pure positional",
        HeadKind::Symbolic => "pure symbolic",
        HeadKind::Mixed => "mixed",
    };
    if heads.is_empty() {
        return Err(format!("no {name} head"));
    }
    let last = r.lengths.iter().map(|row| row.step).max();
    let typed = r.scores.iter().map(|l| l.step).max();
    if last != typed {
        return Err(format!(
            "the length test is of step {last:?}, the head types of step {typed:?}"
        ));
    }
    let groups: Vec<Vec<(f64, f64)>> = heads
        .iter()
        .map(|&(l, h)| {
            r.lengths
                .iter()
                .filter(|row| Some(row.step) == last)
                .filter_map(|row| {
                    row.heads
                        .iter()
                        .find(|m| m.layer == l && m.head == h)
                        .map(|m| (row.length as f64, m.margin))
                })
                .collect()
        })
        .collect();
    let fit = log_log_fit(&groups).ok_or_else(|| {
        format!("too few tested lengths with a positive discrepancy to fit the {name} heads' rate")
    })?;
    Ok((
        fit,
        heads.iter().map(|(l, h)| format!("L{l}H{h}")).collect(),
    ))
}

/// `discrepancy_rates`: positional heads lose their discrepancy with length faster than
/// symbolic heads.
pub fn discrepancy_rates(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "discrepancy_rates",
        "Positional selection's discrepancy decays with the input length (like 1/n^2 for a \
         hand-built Index head); symbolic selection's does not.",
        format!(
            "in the models that learned their task (test accuracy >= {}): the slope of \
             log(discrepancy) against log(input length) over the length test, fitted over the \
             number model's pure positional heads and over the letter model's pure symbolic \
             heads (gamma {}; one intercept per head, 95% t interval treating the tested \
             lengths as independent points): holds when the positional interval lies entirely \
             below the symbolic one and the symbolic interval reaches 0 or above (no detected \
             decay); does not hold when the symbolic interval lies below 0 or the positional \
             one lies entirely at or above the symbolic one; undetermined when they overlap \
             (the theorem's rate for the worst input of a hand-built Index head, -2, is printed \
             beside it, not judged: a trained head's mean margin is not that worst input)",
            t.learned_accuracy, t.gamma
        ),
        per_seed(files, |s| {
            let mut fits = vec![];
            for (run, task, kind) in [
                (&s.number, "number", HeadKind::Positional),
                (&s.letter, "letter", HeadKind::Symbolic),
            ] {
                let (grid, r) = match (learned_grid(run, task, t), run.as_ref()) {
                    (Ok(g), Some(r)) => (g, r),
                    (Err(m), _) => return m,
                    (Ok(_), None) => return missing("no run", "a run is missing"),
                };
                if r.lengths.is_empty() {
                    return missing("no length test", "no lengthgen.csv");
                }
                match rate_of(r, &grid, kind) {
                    Ok(f) => fits.push(f),
                    Err(why) => {
                        return (
                            format!("{task}: {why}"),
                            Outcome::undetermined(format!("{task}: {why}")),
                        )
                    }
                }
            }
            let ((p, p_heads), (s, s_heads)) = (&fits[0], &fits[1]);
            let text = format!(
                "positional (number {}): {p}; symbolic (letter {}): {s}; theorem's worst-input \
                 Index rate -2",
                p_heads.join(" "),
                s_heads.join(" ")
            );
            let outcome = if s.hi < 0.0 {
                // The symbolic heads' discrepancy decays detectably.
                Outcome::Fails
            } else if p.hi < s.lo {
                Outcome::Holds
            } else if p.lo >= s.hi {
                Outcome::Fails
            } else {
                Outcome::undetermined("the positional and symbolic slopes' intervals overlap")
            };
            (text, outcome)
        }),
        t,
    )
}

/// The fitted log-log slope of a theory curve's positive discrepancies from n = `from` on.
pub(crate) fn curve_rate(curve: &super::Curve, from: usize) -> Option<SlopeFit> {
    let points: Vec<(f64, f64)> = curve
        .iter()
        .filter(|r| r.0 >= from)
        .map(|r| (r.0 as f64, r.1))
        .collect();
    log_log_fit(&[points])
}
