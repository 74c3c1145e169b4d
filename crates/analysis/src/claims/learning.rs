//! `pure_heads_with_learning`: the main paper's "successful learning is associated with the
//! emergence of pure heads", across the study's models (docs/study.md). The same measure runs
//! over any directory of models in `ropelab pure-heads` and over the bias experiment's transfer
//! models, where some models fail (docs/bias.md).

use super::files::StudyFiles;
use super::{Category, Claim, Outcome, Thresholds, Verdict};
use crate::measure::pure_heads::{combined, row_of, threshold_text, Association, ModelRow};

/// The association's claim row from `rows` (number and letter models; any others are ignored),
/// judged within each task and combined ([`combined`]).
pub fn association_claim(rows: &[ModelRow], paper: &str) -> Claim {
    let per_task: Vec<Association> = ["number", "letter"]
        .iter()
        .map(|task| Association::of(rows, task))
        .collect();
    let count = |f: fn(&Outcome) -> bool| per_task.iter().filter(|a| f(&a.outcome)).count();
    let (verdict, reason) = match combined(&per_task) {
        Outcome::Holds => (Verdict::Holds, None),
        Outcome::Fails => (Verdict::DoesNotHold, None),
        Outcome::Undetermined(why) => (Verdict::Undetermined, Some(why)),
    };
    Claim {
        id: "pure_heads_with_learning".into(),
        category: Category::Empirical,
        paper: paper.into(),
        threshold: threshold_text(),
        measured: per_task.iter().map(Association::text).collect(),
        n: per_task.len(),
        holding: count(|o| *o == Outcome::Holds),
        failing: count(|o| *o == Outcome::Fails),
        undetermined: count(|o| matches!(o, Outcome::Undetermined(_))),
        verdict,
        reason,
    }
}

/// What the paper says.
pub const PAPER: &str = "Successful learning is associated with the emergence of pure heads.";

/// `pure_heads_with_learning` over the study's own models: every seed's number and letter
/// model, its pure-head share at its last scored checkpoint against its test accuracy. The
/// default study's models all learn, so it is undetermined there by its own rule (success does
/// not vary); `ropelab pure-heads` and the bias experiment judge it where models fail.
pub fn pure_heads_with_learning(files: &StudyFiles, t: &Thresholds) -> Claim {
    let mut rows = vec![];
    for s in &files.seeds {
        for (task, run) in [("number", &s.number), ("letter", &s.letter)] {
            let name = format!("seed-{}/{task}", s.seed);
            if let Some(row) = run.as_ref().and_then(|r| row_of(r, task, &name, t.gamma)) {
                rows.push(row);
            }
        }
    }
    association_claim(&rows, PAPER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::pure_heads::tests::row;

    #[test]
    fn the_row_counts_tasks_and_takes_the_combined_verdict() {
        // Number models whose accuracy rises with their pure share, letter models all learned.
        let mut rows: Vec<ModelRow> = (0..8)
            .map(|i| row("number", i as f64 / 8.0, 0.3 + 0.1 * i as f64))
            .collect();
        rows.extend((0..8).map(|_| row("letter", 1.0, 0.999)));
        let c = association_claim(&rows, PAPER);
        assert_eq!(c.verdict, Verdict::Holds, "{c:#?}");
        assert_eq!((c.n, c.holding, c.failing, c.undetermined), (2, 1, 0, 1));
        assert!(
            c.measured[0].starts_with("number: 8 models, 1 learned"),
            "{c:#?}"
        );
        // Reversed on the number task: does not hold.
        for r in rows.iter_mut().filter(|r| r.task == "number") {
            r.pure_share = 1.0 - r.pure_share;
        }
        let c = association_claim(&rows, PAPER);
        assert_eq!(c.verdict, Verdict::DoesNotHold, "{c:#?}");
        // Only learned models: undetermined, saying why.
        let learned: Vec<ModelRow> = rows.into_iter().filter(|r| r.accuracy >= 0.99).collect();
        let c = association_claim(&learned, PAPER);
        assert_eq!(c.verdict, Verdict::Undetermined);
        assert!(c.reason.unwrap().contains("fewer than the 6"));
    }
}
