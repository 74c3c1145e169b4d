//! The frequency paper's claims (docs/canonical.md) as verdicts of a study's `canonical/`
//! summaries: Index needs high frequencies and Retrieval low ones, the trained heads take the
//! expected types, and Partial Induction's head uses two kinds of planes.

use std::path::Path;

use super::{claim, Claim, Thresholds};
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

/// The four verdicts (not measured when the study has no `canonical/`).
pub fn verdicts(files: Option<&CanonicalFiles>, t: &Thresholds) -> Vec<Claim> {
    let empty = CanonicalFiles::default();
    let f = files.unwrap_or(&empty);
    let acc = |task: &str, band: &str| f.band(task, band).map(|b| b.accuracy);
    let pct = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.4}"));
    let needs = |task: &str, own: &str, wrong: &str| {
        let (all, mine, other) = (acc(task, "all"), acc(task, own), acc(task, wrong));
        let ok = match (all, mine, other) {
            (Some(a), Some(m), Some(o)) => Some(
                a >= t.learned_accuracy && m >= t.learned_accuracy && o < t.canonical_fail_accuracy,
            ),
            _ => None,
        };
        (
            vec![format!(
                "{task}: all {}, {own} {}, {wrong} {}",
                pct(all),
                pct(mine),
                pct(other)
            )],
            usize::from(ok == Some(true)),
            usize::from(ok.is_some()),
        )
    };
    let mut out = vec![];
    out.push(claim(
        "index_needs_high_frequencies",
        "Index is solvable with high RoPE frequencies and not with low ones only.",
        format!(
            "Index accuracy >= {} with all and with high planes, < {} with low planes",
            t.learned_accuracy, t.canonical_fail_accuracy
        ),
        needs("index", "high", "low"),
        1,
    ));
    out.push(claim(
        "retrieval_needs_low_frequencies",
        "Retrieval is solvable with low RoPE frequencies and not with high ones only.",
        format!(
            "Retrieval accuracy >= {} with all and with low planes, < {} with high planes",
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
    let types: Vec<(String, Option<bool>)> = expected
        .iter()
        .map(|(task, want)| match f.band(task, "all") {
            Some(b) => {
                let kind = purity(
                    SwapScores {
                        s_pos: b.s_pos,
                        s_sym: b.s_sym,
                    },
                    t.gamma,
                );
                (
                    format!(
                        "{task}: s_pos {:.3}, s_sym {:.3} ({kind})",
                        b.s_pos, b.s_sym
                    ),
                    Some(kind == *want),
                )
            }
            None => (format!("{task}: not run"), None),
        })
        .collect();
    let measured = types.iter().filter(|(_, ok)| ok.is_some()).count();
    let holding = types.iter().filter(|(_, ok)| *ok == Some(true)).count();
    out.push(claim(
        "canonical_head_types",
        "Trained Index heads are positional, Retrieval heads symbolic, Partial Induction heads \
         neither.",
        format!(
            "the all-planes head's swap scores (mean over seeds) at gamma {}",
            t.gamma
        ),
        (
            types.into_iter().map(|(s, _)| s).collect(),
            holding,
            measured,
        ),
        expected.len(),
    ));
    let two = f.band("partial", "all").and_then(|b| b.two_angles.clone());
    out.push(claim(
        "partial_two_angles",
        "Partial Induction needs a head with a near-zero angle (content) and a moderate angle \
         (recency).",
        format!(
            "content and recency margins > 0, recency on planes >= {}x faster than content \
             (margin-weighted mean angles, all planes, mean over seeds)",
            crate::measure::partial::TWO_ANGLE_RATIO
        ),
        match &two {
            Some(a) => (
                vec![format!(
                    "content {:.2} at theta {:.4}, recency {:.2} at theta {:.4}",
                    a.content, a.content_mean_theta, a.recency, a.recency_mean_theta
                )],
                usize::from(a.holds()),
                1,
            ),
            None => (
                vec!["no Partial Induction run with all planes".into()],
                0,
                0,
            ),
        },
        1,
    ));
    out
}
