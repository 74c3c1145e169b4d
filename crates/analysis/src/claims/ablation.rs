//! What the trained models need, tested by knocking heads out (docs/ablation.md): the main
//! paper's "the number task requires both positional and symbolic heads, whereas the letter
//! task requires only symbolic heads", read from each model's `ablation.csv` (mean ablation
//! decides; zero ablation is shown beside it).

use super::multi_hop::{learned_grid, missing};
use super::{
    per_seed, seed_claim, wilson, Claim, Measure, Outcome, RunFiles, StudyFiles, Thresholds,
};
use crate::measure::ablation::{groups, overall, Knockout, NON_SYMBOLIC};
use crate::measure::dynamics::HeadKind;

/// Whether a claim says the model needs a group, or does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Knocking the group out must leave the accuracy below `needed_accuracy`.
    Needed,
    /// Knocking it out must leave the accuracy at or above `kept_accuracy`.
    NotNeeded,
}

/// The outcome of knocking out `group` (named `what` in the text) of a learned model `r`
/// whose heads have the types `grid`, against `want`.
fn knockout(
    r: &RunFiles,
    grid: &[Vec<HeadKind>],
    group: &str,
    what: &str,
    want: Want,
    t: &Thresholds,
) -> Measure {
    let Some(g) = groups(grid).into_iter().find(|g| g.name == group) else {
        return (
            format!("no {what}"),
            Outcome::undetermined(format!(
                "no {what} to knock out (gamma {}): necessity cannot be tested",
                t.gamma
            )),
        );
    };
    let all_heads: usize = grid.iter().map(Vec::len).sum();
    if want == Want::Needed && g.heads.len() == all_heads {
        return (
            format!("every head is a {what}"),
            Outcome::undetermined(format!(
                "every head of the model is a {what}: knocking them all out tests the need for \
                 attention, not for {what}s in particular"
            )),
        );
    }
    if r.ablation.is_empty() {
        return missing("no ablation", "no ablation.csv");
    }
    let (Some(mean), Some(intact)) = (
        overall(&r.ablation, group, Knockout::Mean),
        overall(&r.ablation, "none", Knockout::None),
    ) else {
        return missing(
            "ablation without this group",
            &format!("ablation.csv has no mean ablation of the {group} group"),
        );
    };
    let heads: Vec<String> = g.heads.iter().map(|(l, h)| format!("{l}.{h}")).collect();
    if mean.heads != heads.join(" ") {
        return (
            format!("ablation.csv's {group} group is {}", mean.heads),
            Outcome::undetermined(format!(
                "ablation.csv's {group} heads ({}) are not the heads typed at gamma {} ({})",
                mean.heads,
                t.gamma,
                heads.join(" ")
            )),
        );
    }
    let zero = overall(&r.ablation, group, Knockout::Zero).map_or_else(
        || "not measured".to_string(),
        |z| format!("{:.3}", z.accuracy),
    );
    let (lo, hi) = wilson(mean.correct, mean.n);
    let text = format!(
        "{what} ({}) mean-ablated: {:.3} (95% {lo:.3}-{hi:.3}, n {}; zero-ablated {zero}), intact {:.3}",
        mean.heads, mean.accuracy, mean.n, intact.accuracy
    );
    let outcome = match want {
        Want::Needed if hi < t.needed_accuracy => Outcome::Holds,
        Want::Needed if lo >= t.needed_accuracy => Outcome::Fails,
        Want::Needed => Outcome::undetermined(format!(
            "the knocked-out accuracy's 95% interval {lo:.3}-{hi:.3} straddles {}",
            t.needed_accuracy
        )),
        Want::NotNeeded if lo >= t.kept_accuracy => Outcome::Holds,
        Want::NotNeeded if hi < t.kept_accuracy => Outcome::Fails,
        Want::NotNeeded => Outcome::undetermined(format!(
            "the knocked-out accuracy's 95% interval {lo:.3}-{hi:.3} straddles {}",
            t.kept_accuracy
        )),
    };
    (text, outcome)
}

/// The threshold text of a "needs" claim.
fn needs_threshold(task: &str, what: &str, t: &Thresholds) -> String {
    format!(
        "in a {task} model that learned its task (test accuracy >= {}), at the last checkpoint: \
         every {what} (gamma {}) mean-ablated together (its output replaced by its mean over the \
         evaluated test samples) leaves a test accuracy whose 95% Wilson interval lies below {} \
         (does not hold: at or above it; a model without such a head, or whose every head is \
         one, is undetermined: knocking out every head tests the need for attention, not for \
         that type)",
        t.learned_accuracy, t.gamma, t.needed_accuracy
    )
}

/// A "needs" claim of one task and head type.
fn needs(
    files: &StudyFiles,
    t: &Thresholds,
    (id, paper): (&str, &str),
    (task, group, what): (&str, &str, &str),
) -> Claim {
    let is_number = task == "number";
    seed_claim(
        id,
        paper,
        needs_threshold(task, what, t),
        per_seed(files, |s| {
            let run = if is_number { &s.number } else { &s.letter };
            let (grid, r) = match (learned_grid(run, task, t), run.as_ref()) {
                (Ok(g), Some(r)) => (g, r),
                (Err(m), _) => return m,
                (Ok(_), None) => return missing("no run", "the run is missing"),
            };
            knockout(r, &grid, group, what, Want::Needed, t)
        }),
        t,
    )
}

/// `number_needs_positional`: the number model needs its pure positional heads.
pub fn number_needs_positional(files: &StudyFiles, t: &Thresholds) -> Claim {
    needs(
        files,
        t,
        (
            "number_needs_positional",
            "The number task requires positional heads: without them the model fails.",
        ),
        ("number", "positional", "pure positional head"),
    )
}

/// `number_needs_symbolic`: the number model needs its pure symbolic heads.
pub fn number_needs_symbolic(files: &StudyFiles, t: &Thresholds) -> Claim {
    needs(
        files,
        t,
        (
            "number_needs_symbolic",
            "The number task requires symbolic heads too: without them the model fails.",
        ),
        ("number", "symbolic", "pure symbolic head"),
    )
}

/// `letter_needs_symbolic`: the letter model needs its pure symbolic heads.
pub fn letter_needs_symbolic(files: &StudyFiles, t: &Thresholds) -> Claim {
    needs(
        files,
        t,
        (
            "letter_needs_symbolic",
            "The letter task requires symbolic heads: without them the model fails.",
        ),
        ("letter", "symbolic", "pure symbolic head"),
    )
}

/// `letter_needs_only_symbolic`: the letter model keeps its accuracy without every head that
/// is not pure symbolic.
pub fn letter_needs_only_symbolic(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "letter_needs_only_symbolic",
        "The letter task requires only symbolic heads.",
        format!(
            "in a letter model that learned its task (test accuracy >= {}), at the last \
             checkpoint: every head that is not pure symbolic (gamma {}) mean-ablated together \
             leaves a test accuracy whose 95% Wilson interval lies at or above {} (does not \
             hold: below it); a model whose heads are all pure symbolic is undetermined (no \
             other head to test)",
            t.learned_accuracy, t.gamma, t.kept_accuracy
        ),
        per_seed(files, |s| {
            let (grid, r) = match (learned_grid(&s.letter, "letter", t), s.letter.as_ref()) {
                (Ok(g), Some(r)) => (g, r),
                (Err(m), _) => return m,
                (Ok(_), None) => return missing("no run", "the letter run is missing"),
            };
            let has = |k: HeadKind| grid.iter().flatten().any(|&h| h == k);
            let (group, what) = match (has(HeadKind::Positional), has(HeadKind::Mixed)) {
                (false, false) => {
                    return (
                        "every head is pure symbolic: nothing else to knock out".into(),
                        Outcome::undetermined(
                            "every head is pure symbolic: there is no other head whose need \
                             could be tested",
                        ),
                    )
                }
                (true, true) => (NON_SYMBOLIC, "non-symbolic head"),
                (true, false) => ("positional", "pure positional head"),
                (false, true) => ("mixed", "head of neither type"),
            };
            knockout(r, &grid, group, what, Want::NotNeeded, t)
        }),
        t,
    )
}
