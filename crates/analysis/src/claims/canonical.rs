//! The frequency paper's claims (docs/canonical.md) as verdicts of a study's `canonical/`
//! summaries: Index needs high frequencies and Retrieval low ones, the trained heads take the
//! expected types, and Partial Induction's head uses two kinds of planes.

use std::path::Path;

use super::{Category, Claim, Outcome, Tally, Thresholds};
use crate::lens::purity::{purity, HeadKind};
use crate::lens::swap::SwapScores;
use crate::measure::canonical::BandSummary;
use crate::{AnalysisError, Result};

/// The `summary.json` of each canonical task a study ran (`canonical/<task>/`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CanonicalFiles {
    /// (task, its bands).
    pub tasks: Vec<(String, Vec<BandSummary>)>,
}

impl CanonicalFiles {
    /// Reads `dir/{index,retrieval,partial}/summary.json` where present; `None` when none is.
    pub fn load(dir: &Path) -> Result<Option<Self>> {
        let mut tasks = vec![];
        for task in ["index", "retrieval", "partial"] {
            let path = dir.join(task).join("summary.json");
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(AnalysisError::Io { path, source: e }),
            };
            let bands: Vec<BandSummary> = serde_json::from_str(&text).map_err(|e| {
                AnalysisError::Invalid(format!("{}: not a band summary: {e}", path.display()))
            })?;
            tasks.push((task.to_string(), bands));
        }
        Ok((!tasks.is_empty()).then_some(Self { tasks }))
    }

    fn band(&self, task: &str, band: &str) -> Option<&BandSummary> {
        self.tasks
            .iter()
            .find(|(t, _)| t == task)?
            .1
            .iter()
            .find(|b| b.band == band)
    }
}

/// The margin of scores to the purity boundaries at tolerance `gamma`, for a head expected to
/// be of `kind`: positive inside that kind's region (a pure kind) or outside both pure regions
/// (neither), negative on the wrong side; its size is the distance to the nearest boundary.
pub fn purity_margin(s: SwapScores, gamma: f64, kind: HeadKind) -> f64 {
    let pos = (s.s_pos - (1.0 - gamma)).min(gamma - s.s_sym);
    let sym = (s.s_sym - (1.0 - gamma)).min(gamma - s.s_pos);
    match kind {
        HeadKind::Positional => pos,
        HeadKind::Symbolic => sym,
        HeadKind::Mixed => -pos.max(sym),
    }
}

/// The four verdicts (undetermined when the study has no `canonical/`).
pub fn verdicts(files: Option<&CanonicalFiles>, t: &Thresholds) -> Vec<Claim> {
    let empty = CanonicalFiles::default();
    let f = files.unwrap_or(&empty);
    let acc = |task: &str, band: &str| f.band(task, band).map(|b| b.accuracy);
    let pct = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.4}"));
    let not_run = |task: &str| {
        Outcome::undetermined(format!(
            "not measured: canonical/{task} has no run of the bands needed"
        ))
    };
    let needs = |task: &str, own: &str, wrong: &str| {
        let (all, mine, other) = (acc(task, "all"), acc(task, own), acc(task, wrong));
        let outcome = match (all, mine, other) {
            (Some(a), _, _) if a < t.learned_accuracy => Outcome::undetermined(format!(
                "the all-planes {task} head did not learn its task ({a:.4} < {})",
                t.learned_accuracy
            )),
            (Some(_), Some(m), Some(o)) => {
                Outcome::of(m >= t.learned_accuracy && o < t.canonical_fail_accuracy)
            }
            _ => not_run(task),
        };
        let mut tally = Tally::default();
        tally.push(
            "",
            format!(
                "{task}: all {}, {own} {}, {wrong} {}",
                pct(all),
                pct(mine),
                pct(other)
            ),
            outcome,
        );
        tally
    };
    let mut out = vec![];
    out.push(Claim::new(
        "index_needs_high_frequencies",
        Category::Empirical,
        "Index is solvable with high RoPE frequencies and not with low ones only.",
        format!(
            "Index accuracy >= {} with all and with high planes, < {} with low planes \
             (undetermined when the all-planes head did not learn)",
            t.learned_accuracy, t.canonical_fail_accuracy
        ),
        needs("index", "high", "low"),
        1,
    ));
    out.push(Claim::new(
        "retrieval_needs_low_frequencies",
        Category::Empirical,
        "Retrieval is solvable with low RoPE frequencies and not with high ones only.",
        format!(
            "Retrieval accuracy >= {} with all and with low planes, < {} with high planes \
             (undetermined when the all-planes head did not learn)",
            t.learned_accuracy, t.canonical_fail_accuracy
        ),
        needs("retrieval", "low", "high"),
        1,
    ));
    let expected = [
        ("index", HeadKind::Positional),
        ("retrieval", HeadKind::Symbolic),
        ("partial", HeadKind::Mixed),
    ];
    let mut types = Tally::default();
    for (task, want) in expected {
        match f.band(task, "all") {
            Some(b) => {
                let scores = SwapScores {
                    s_pos: b.s_pos,
                    s_sym: b.s_sym,
                };
                let kind = purity(scores, t.gamma);
                let margin = purity_margin(scores, t.gamma.get(), want);
                let outcome = if b.accuracy < t.learned_accuracy {
                    Outcome::undetermined(format!(
                        "the {task} head did not learn its task (accuracy {:.4} < {}): an \
                         unlearned head is neither",
                        b.accuracy, t.learned_accuracy
                    ))
                } else {
                    Outcome::of(kind == want)
                };
                types.push(
                    "",
                    format!(
                        "{task}: s_pos {:.3}, s_sym {:.3} ({kind}; margin to gamma {margin:+.3}, \
                         accuracy {:.4}, {} seeds)",
                        b.s_pos,
                        b.s_sym,
                        b.accuracy,
                        b.per_seed.len()
                    ),
                    outcome,
                );
            }
            None => types.push("", format!("{task}: not run"), not_run(task)),
        }
    }
    out.push(Claim::new(
        "canonical_head_types",
        Category::Empirical,
        "Trained Index heads are positional, Retrieval heads symbolic, Partial Induction heads \
         neither.",
        format!(
            "the all-planes head's swap scores (mean over seeds) at gamma {}, in a head that \
             learned its task (accuracy >= {}); the margin to gamma is the distance to the \
             nearest purity boundary (positive on the expected side)",
            t.gamma, t.learned_accuracy
        ),
        types,
        expected.len(),
    ));
    let partial = f.band("partial", "all");
    let mut two = Tally::default();
    match partial {
        Some(b) if b.accuracy < t.learned_accuracy => two.push(
            "",
            format!("partial: accuracy {:.4}", b.accuracy),
            Outcome::undetermined(format!(
                "the Partial Induction head did not learn its task ({:.4} < {})",
                b.accuracy, t.learned_accuracy
            )),
        ),
        Some(b) => match &b.two_angles {
            Some(a) => two.push(
                "",
                format!(
                    "content {:.2} at theta {:.4}, recency {:.2} at theta {:.4}",
                    a.content, a.content_mean_theta, a.recency, a.recency_mean_theta
                ),
                Outcome::of(a.holds()),
            ),
            None => two.push(
                "",
                "no two-angle measurement".into(),
                Outcome::undetermined("not measured: the summary has no two-angle measurement"),
            ),
        },
        None => two.push(
            "",
            "no Partial Induction run with all planes".into(),
            not_run("partial"),
        ),
    }
    out.push(Claim::new(
        "partial_two_angles",
        Category::Empirical,
        "Partial Induction needs a head with a near-zero angle (content) and a moderate angle \
         (recency).",
        format!(
            "in a head that learned the task (accuracy >= {}): content and recency margins > 0, \
             recency on planes >= {}x faster than content (margin-weighted mean angles, all \
             planes, mean over seeds)",
            t.learned_accuracy,
            crate::measure::partial::TWO_ANGLE_RATIO
        ),
        two,
        1,
    ));
    out
}
