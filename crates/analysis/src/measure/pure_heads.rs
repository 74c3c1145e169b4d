//! Pure heads and successful learning across models (`ropelab pure-heads`, docs/study.md,
//! "Pure heads and successful learning"): the main paper's "successful learning is associated
//! with the emergence of pure heads", tested on every number/letter model found in a
//! directory (study seeds, held-out seeds, sweeps, the bias experiment's transfer runs).
//!
//! Per model, at its last scored checkpoint: the share of its heads that are pure (positional
//! or symbolic at tolerance gamma) and its test accuracy; the step from which its pure share
//! stays at its final value and the step its validation accuracy first reaches
//! [`RISE_ACCURACY`] (reported, not judged: `pure_before_accuracy_peak` judges the timing).
//! Per task (pooling tasks would let the task make the correlation), Spearman's rho of the
//! pure share against the test accuracy with its 95% interval. A model found twice (the same
//! final weights, e.g. a copied study) counts once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::claims::files::RunFiles;
use crate::claims::{spearman, spearman_interval, Outcome};
use crate::measure::dynamics::{pure_counts, Gamma};
use crate::{AnalysisError, Result};

/// Validation accuracy at which a model's accuracy has *risen*.
pub const RISE_ACCURACY: f64 = 0.9;

/// Test accuracy at which a model *learned* its task (the study's `learned_accuracy`).
pub const LEARNED: f64 = 0.99;

/// Rank correlation the association must reach (as the bias experiment's length claim).
pub const RHO: f64 = 0.5;

/// Models per task below which the association is not judged.
pub const MIN_MODELS: usize = 6;

/// The file `ropelab pure-heads` writes.
pub const FILE: &str = "pure_heads.csv";

/// One model: one line of `pure_heads.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRow {
    /// The run directory, relative to the searched directory.
    pub run: String,
    /// `number` or `letter`.
    pub task: String,
    /// The last scored checkpoint.
    pub step: usize,
    /// Heads in the model.
    pub heads: usize,
    /// Pure positional heads at that checkpoint.
    pub positional: usize,
    /// Pure symbolic heads.
    pub symbolic: usize,
    /// (positional + symbolic) / heads.
    pub pure_share: f64,
    /// Test accuracy of the last checkpoint (the last validation accuracy when the run has no
    /// test evaluation).
    pub accuracy: f64,
    /// Whether `accuracy` is the test split's (else validation).
    pub tested: bool,
    /// The first checkpoint from which the pure share stays at its final value (empty when no
    /// head ends pure).
    pub pure_step: Option<usize>,
    /// The first validation step at which the accuracy reaches [`RISE_ACCURACY`] (empty when
    /// never).
    pub rise_step: Option<usize>,
}

/// Every run directory under `dir` (itself included) that has a `config.toml` and a
/// `scores.jsonl`, in path order; checkpoint folders are not searched.
pub fn find_runs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if d.join("config.toml").is_file() && d.join("scores.jsonl").is_file() {
            out.push(d.clone());
        }
        let entries = std::fs::read_dir(&d).map_err(|e| AnalysisError::Io {
            path: d.clone(),
            source: e,
        })?;
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name();
            if p.is_dir() && name != "checkpoints" && !e.file_type().is_ok_and(|t| t.is_symlink()) {
                stack.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The row of the run in `dir` (named `name`) at tolerance `gamma`; None for a run of another
/// task than number or letter, or one without scores or accuracy.
pub fn model_row(dir: &Path, name: &str, gamma: Gamma) -> Result<Option<ModelRow>> {
    let (_, config) = ropelab_train::RunDir::open(dir)?;
    let task = config.task.to_string();
    if task != "number" && task != "letter" {
        return Ok(None);
    }
    let files = RunFiles::load(dir)?;
    let row = row_of(&files, &task, name, gamma);
    if row.is_none() {
        if let Some(last) = files.scores.iter().map(|l| l.step).max() {
            return Err(AnalysisError::Invalid(format!(
                "{}: no test or validation accuracy at step {last}, its last scored checkpoint \
                 (score the latest checkpoint, or evaluate this one)",
                dir.display()
            )));
        }
    }
    Ok(row)
}

/// One model's row from its files (None without scores or an accuracy).
pub fn row_of(files: &RunFiles, task: &str, name: &str, gamma: Gamma) -> Option<ModelRow> {
    let last = files.scores.iter().map(|l| l.step).max()?;
    // The accuracy of the checkpoint whose heads are counted: a run extended after it was
    // scored has later evaluations, which belong to other weights (tenth pass, S1).
    let val_at_last = files.val.iter().rev().find(|(s, _)| *s == last);
    let accuracy = match (&files.test, val_at_last) {
        (Some(t), _) if files.test_step == Some(last) => (t.accuracy, true),
        (_, Some((_, v))) => (v.accuracy, false),
        _ => return None,
    };
    // The pure counts of every checkpoint, in step order.
    let shares = pure_counts(&files.scores, gamma);
    let (heads, positional, symbolic) = shares[&last];
    let pure = positional + symbolic;
    let pure_step = (pure > 0)
        .then(|| {
            shares
                .iter()
                .rev()
                .take_while(|(_, s)| s.1 + s.2 == pure)
                .map(|(&step, _)| step)
                .last()
        })
        .flatten();
    let rise_step = files
        .val
        .iter()
        .find(|(_, a)| a.accuracy >= RISE_ACCURACY)
        .map(|(s, _)| *s);
    Some(ModelRow {
        run: name.to_string(),
        task: task.to_string(),
        step: last,
        heads,
        positional,
        symbolic,
        pure_share: pure as f64 / heads.max(1) as f64,
        accuracy: accuracy.0,
        tested: accuracy.1,
        pure_step,
        rise_step,
    })
}

/// Every model under `dir` ([`find_runs`], [`model_row`]); a model whose final weights equal
/// one already found is skipped (its path is returned beside, with the one it copies), and so is
/// a run that cannot be read (with the reason).
pub fn collect(dir: &Path, gamma: Gamma) -> Result<Collected> {
    let mut out = Collected::default();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut runs: BTreeMap<String, String> = BTreeMap::new();
    for run in find_runs(dir)? {
        let name = run.strip_prefix(dir).unwrap_or(&run).display().to_string();
        let name = if name.is_empty() { ".".into() } else { name };
        let row = match model_row(&run, &name, gamma) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                out.skipped.push((name, e.to_string()));
                continue;
            }
        };
        if let Some(id) = weights_id(&run, row.step)? {
            if let Some(first) = seen.get(&id) {
                out.copies.push((name, first.clone()));
                continue;
            }
            seen.insert(id, name.clone());
        }
        // One run (one config.toml, seed included) trained further in a copy is still one
        // model's training: counted once (twelfth pass, S4).
        if let Ok((_, config)) = ropelab_train::RunDir::open(&run) {
            let identity = config.identity();
            if let Some(first) = runs.get(&identity) {
                out.same_run.push((name, first.clone()));
                continue;
            }
            runs.insert(identity, name.clone());
        }
        out.rows.push(row);
    }
    Ok(out)
}

/// What [`collect`] found.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    /// One row per distinct model.
    pub rows: Vec<ModelRow>,
    /// (run, the run it copies): the same final weights.
    pub copies: Vec<(String, String)>,
    /// (run, the run it continues or is continued by): one config.toml, trained to another
    /// length in a copy.
    pub same_run: Vec<(String, String)>,
    /// (run, why it was not read).
    pub skipped: Vec<(String, String)>,
}

/// The identity of a run's weights at `step`: the SHA-256 of that checkpoint's
/// `model.safetensors` recorded in its manifest, or None without one.
pub fn weights_id(run: &Path, step: usize) -> Result<Option<String>> {
    let path = ropelab_train::RunDir::new(run)
        .checkpoint_dir(step)
        .join("manifest.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(AnalysisError::Io { path, source: e }),
    };
    let manifest: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| AnalysisError::Invalid(format!("{}: {e}", path.display())))?;
    Ok(manifest["sha256"]["model.safetensors"]
        .as_str()
        .map(str::to_string))
}

/// The association within one task.
#[derive(Debug, Clone, PartialEq)]
pub struct Association {
    /// `number` or `letter`.
    pub task: String,
    /// Models.
    pub n: usize,
    /// Of which learned (accuracy >= [`LEARNED`]).
    pub learned: usize,
    /// Spearman's rho of pure share against accuracy, with its 95% interval.
    pub rho: Option<(f64, f64, f64)>,
    /// Mean pure share of the models that learned and of those that did not.
    pub share: (Option<f64>, Option<f64>),
    /// The verdict.
    pub outcome: Outcome,
}

impl Association {
    /// The association of `rows` of `task`: holds when rho >= [`RHO`] and its interval excludes
    /// 0; does not hold when the interval lies below [`RHO`]; undetermined with fewer than
    /// [`MIN_MODELS`] models, when every model learned or none did (success does not vary, so
    /// nothing can be associated with it), or when the interval reaches [`RHO`] from below.
    pub fn of(rows: &[ModelRow], task: &str) -> Self {
        let rows: Vec<&ModelRow> = rows.iter().filter(|r| r.task == task).collect();
        let n = rows.len();
        let learned = rows.iter().filter(|r| r.accuracy >= LEARNED).count();
        let mean = |learned_side: bool| {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| (r.accuracy >= LEARNED) == learned_side)
                .map(|r| r.pure_share)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let points: Vec<(f64, f64)> = rows.iter().map(|r| (r.pure_share, r.accuracy)).collect();
        let rho = spearman(&points).map(|rho| {
            let (lo, hi) = spearman_interval(rho, n);
            (rho, lo, hi)
        });
        let outcome = if n < MIN_MODELS {
            Outcome::undetermined(format!(
                "{task}: {n} models, fewer than the {MIN_MODELS} needed"
            ))
        } else if learned == 0 || learned == n {
            Outcome::undetermined(format!(
                "{task}: {} of the {n} models learned: success does not vary, so nothing can be \
                 associated with it",
                if learned == 0 { "none" } else { "all" }
            ))
        } else {
            match rho {
                None => Outcome::undetermined(format!(
                    "{task}: every model has the same pure share: rho undefined"
                )),
                Some((rho, lo, _)) if rho >= RHO && lo > 0.0 => Outcome::Holds,
                Some((_, _, hi)) if hi < RHO => Outcome::Fails,
                Some((rho, lo, hi)) => Outcome::undetermined(format!(
                    "{task}: rho {rho:+.3} on {n} models, its interval [{lo:+.3}, {hi:+.3}] \
                     cannot separate it from {RHO} and 0"
                )),
            }
        };
        Self {
            task: task.to_string(),
            n,
            learned,
            rho,
            share: (mean(true), mean(false)),
            outcome,
        }
    }

    /// One sentence of what was measured.
    pub fn text(&self) -> String {
        let share = |s: Option<f64>| s.map_or_else(|| "-".into(), |v| format!("{v:.2}"));
        let rho = match self.rho {
            Some((r, lo, hi)) => format!("rho {r:+.3}, 95% interval [{lo:+.3}, {hi:+.3}]"),
            None => "rho undefined".into(),
        };
        format!(
            "{}: {} models, {} learned (test accuracy >= {LEARNED}); mean pure share {} \
             (learned) against {} (not); {rho}",
            self.task,
            self.n,
            self.learned,
            share(self.share.0),
            share(self.share.1)
        )
    }
}

/// The association over tasks, judged within each ([`Association::of`]): it does not hold when
/// one task's does not; it holds when one task's holds and none fails; otherwise (no task can
/// judge, e.g. every model learned) it is undetermined, with each task's reason.
pub fn combined(per_task: &[Association]) -> Outcome {
    if per_task.iter().any(|a| a.outcome == Outcome::Fails) {
        return Outcome::Fails;
    }
    if per_task.iter().any(|a| a.outcome == Outcome::Holds) {
        return Outcome::Holds;
    }
    let why: Vec<String> = per_task
        .iter()
        .filter_map(|a| match &a.outcome {
            Outcome::Undetermined(w) => Some(w.clone()),
            _ => None,
        })
        .collect();
    Outcome::Undetermined(if why.is_empty() {
        "no number or letter model was found".into()
    } else {
        why.join("; ")
    })
}

/// The statement and test of the association claim, as the study's and the bias experiment's
/// claim rows give them.
pub fn threshold_text() -> String {
    format!(
        "within each task, Spearman's rho of a model's pure-head share (positional or symbolic \
         at the study's gamma, last scored checkpoint) against its test accuracy, 95% interval \
         (Fisher z, variance 1.06 / (n - 3)): holds when rho >= {RHO} and the interval excludes \
         0, does not hold when the interval lies below {RHO}, undetermined with fewer than \
         {MIN_MODELS} models or when every model learned (test accuracy >= {LEARNED}) or none \
         did; the claim does not hold when a task does not, holds when a task holds"
    )
}

/// The tasks present in `rows`, in order.
pub fn tasks(rows: &[ModelRow]) -> Vec<String> {
    rows.iter()
        .map(|r| r.task.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A model row of `task` with pure share `share` and test accuracy `accuracy`.
    pub(crate) fn row(task: &str, share: f64, accuracy: f64) -> ModelRow {
        ModelRow {
            run: format!("{task}-{share}-{accuracy}"),
            task: task.into(),
            step: 100,
            heads: 6,
            positional: 0,
            symbolic: (share * 6.0).round() as usize,
            pure_share: share,
            accuracy,
            tested: true,
            pure_step: None,
            rise_step: None,
        }
    }

    #[test]
    fn the_association_has_three_outcomes() {
        // More pure heads, higher accuracy, over 12 models: holds.
        let up: Vec<ModelRow> = (0..12)
            .map(|i| row("number", i as f64 / 12.0, 0.5 + 0.05 * i as f64))
            .collect();
        let a = Association::of(&up, "number");
        assert_eq!(a.outcome, Outcome::Holds, "{a:?}");
        assert_eq!((a.n, a.learned), (12, 2));
        // Reversed: does not hold.
        let down: Vec<ModelRow> = (0..12)
            .map(|i| row("number", 1.0 - i as f64 / 12.0, 0.5 + 0.05 * i as f64))
            .collect();
        assert_eq!(Association::of(&down, "number").outcome, Outcome::Fails);
        // Every model learned: undetermined, however the shares vary.
        let all: Vec<ModelRow> = (0..12)
            .map(|i| row("letter", i as f64 / 12.0, 0.995 + 0.0004 * i as f64))
            .collect();
        let a = Association::of(&all, "letter");
        assert!(
            matches!(&a.outcome, Outcome::Undetermined(w) if w.contains("all of the 12")),
            "{a:?}"
        );
        // Five models: too few.
        assert!(matches!(
            Association::of(&up[..5], "number").outcome,
            Outcome::Undetermined(_)
        ));
        // Rows of another task are not counted.
        assert_eq!(Association::of(&up, "letter").n, 0);
    }

    #[test]
    fn tasks_combine_as_stated() {
        let up: Vec<ModelRow> = (0..12)
            .map(|i| row("number", i as f64 / 12.0, 0.5 + 0.05 * i as f64))
            .collect();
        let down: Vec<ModelRow> = (0..12)
            .map(|i| row("number", 1.0 - i as f64 / 12.0, 0.5 + 0.05 * i as f64))
            .collect();
        let all: Vec<ModelRow> = (0..12)
            .map(|i| row("letter", i as f64 / 12.0, 0.995))
            .collect();
        let of = |rows: &[ModelRow], task| Association::of(rows, task);
        // A task that cannot judge (every letter model learned) leaves the other to decide.
        assert_eq!(
            combined(&[of(&up, "number"), of(&all, "letter")]),
            Outcome::Holds
        );
        assert_eq!(
            combined(&[of(&down, "number"), of(&all, "letter")]),
            Outcome::Fails
        );
        let Outcome::Undetermined(why) = combined(&[of(&all, "letter")]) else {
            panic!("decided with no task able to judge")
        };
        assert!(why.contains("letter"), "{why}");
        assert!(matches!(combined(&[]), Outcome::Undetermined(_)));
    }
}
