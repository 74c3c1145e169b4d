//! The shape of a task instance: window sizes and the hop counts the generator balances over.

use serde::{Deserialize, Serialize};

use crate::TaskError;

/// Window sizes, hop counts and vocabulary sizes. A core instance is `target_window`
/// target-type tokens, then `pre_window` pre-target tokens, then one query token (`8 + 8 + 1 =
/// 17` in the paper). The vocabulary sizes (docs/tasks.md, "Vocabulary size") default to the
/// paper's: offsets up to `target_window + pre_window` (number task), 8 letters and 8 numbers
/// (letter task); unset, they are not written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Layout {
    /// Number of target-type tokens the answer can sit in (paper: 8).
    pub target_window: usize,
    /// Number of pre-target tokens that can hold intermediate hops (paper: 8).
    pub pre_window: usize,
    /// Hop counts, balanced in equal shares (paper: 1, 2, 3, 4).
    pub hops: Vec<usize>,
    /// Number task: distinct offset tokens `1..=offsets` (default and minimum:
    /// `target_window + pre_window`, the longest jump a core instance needs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offsets: Option<usize>,
    /// Letter task: distinct letters `a..` (default 8, at most 26).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub letters: Option<usize>,
    /// Letter task: distinct numbers `1..=numbers` (default 8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numbers: Option<usize>,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            target_window: 8,
            pre_window: 8,
            hops: vec![1, 2, 3, 4],
            offsets: None,
            letters: None,
            numbers: None,
        }
    }
}

/// The letter task's default number of letters (the paper's `a`..`h`).
pub const DEFAULT_LETTERS: usize = 8;
/// The letter task's default number of numbers (the paper's `1`..`8`).
pub const DEFAULT_NUMBERS: usize = 8;
/// The most letters the letter task has (`a`..`z`: one character each).
pub const MAX_LETTERS: usize = 26;

impl Layout {
    /// This layout as task `kind` reads it: the other task's vocabulary sizes dropped (a
    /// study's `[tasks]` table sizes both tasks' vocabularies, and each model reads its own).
    pub fn for_task(&self, kind: crate::TaskKind) -> Layout {
        let mut l = self.clone();
        match kind {
            crate::TaskKind::Number => (l.letters, l.numbers) = (None, None),
            crate::TaskKind::Letter => l.offsets = None,
            _ => {}
        }
        l
    }

    /// Refuses a vocabulary size of the other task than `kind` that is not that task's default:
    /// one task's layout (a run's `[layout]`, `ropelab gen`'s flags) would ignore it silently.
    /// The default is let through, so a sweep varying the task on one axis may carry it.
    pub fn check_for(&self, kind: crate::TaskKind) -> Result<(), TaskError> {
        let query = self.target_window + self.pre_window;
        let other: Vec<(&str, Option<usize>, usize, &str)> = match kind {
            crate::TaskKind::Number => vec![
                ("letters", self.letters, DEFAULT_LETTERS, "letter"),
                ("numbers", self.numbers, DEFAULT_NUMBERS, "letter"),
            ],
            crate::TaskKind::Letter => vec![("offsets", self.offsets, query, "number")],
            _ => vec![],
        };
        for (key, value, default, owner) in other {
            if let Some(v) = value.filter(|&v| v != default) {
                return Err(TaskError::Layout(format!(
                    "layout.{key} = {v} sizes the {owner} task's vocabulary; the {kind} task does \
                     not read it (drop it, or give its default {default})"
                )));
            }
        }
        Ok(())
    }

    /// Length of a core instance (without length extension).
    pub fn core_len(&self) -> usize {
        self.target_window + self.pre_window + 1
    }

    /// Position of the query token in a core instance.
    pub fn query_pos(&self) -> usize {
        self.target_window + self.pre_window
    }

    /// The number task's offset tokens: `1..=offsets()`.
    pub fn offsets(&self) -> usize {
        self.offsets.unwrap_or(self.query_pos())
    }

    /// The letter task's letters.
    pub fn letters(&self) -> usize {
        self.letters.unwrap_or(DEFAULT_LETTERS)
    }

    /// The letter task's numbers.
    pub fn numbers(&self) -> usize {
        self.numbers.unwrap_or(DEFAULT_NUMBERS)
    }

    /// Checks what every task needs: a target window, hop counts that are distinct, at least 1
    /// and fit in the pre-target window (h hops use h - 1 pre-target positions).
    pub fn check(&self) -> Result<(), TaskError> {
        if self.target_window == 0 {
            return Err(TaskError::Layout("target_window must be at least 1".into()));
        }
        if self.hops.is_empty() {
            return Err(TaskError::Layout(
                "hops must list at least one hop count".into(),
            ));
        }
        let mut sorted = self.hops.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != self.hops.len() {
            return Err(TaskError::Layout(format!(
                "hop counts {:?} repeat a value",
                self.hops
            )));
        }
        for &h in &self.hops {
            if h == 0 {
                return Err(TaskError::Layout("a hop count must be at least 1".into()));
            }
            if h - 1 > self.pre_window {
                return Err(TaskError::Layout(format!(
                    "{h} hops need {} pre-target positions, the pre-target window has {}",
                    h - 1,
                    self.pre_window
                )));
            }
        }
        // Keep token ids and positions comfortably inside u32 and memory.
        if self.core_len() > 1 << 20 {
            return Err(TaskError::Layout(format!(
                "a core length of {} is larger than the supported 1048576",
                self.core_len()
            )));
        }
        self.check_vocabulary()
    }

    /// Checks the vocabulary sizes (each message names its key).
    fn check_vocabulary(&self) -> Result<(), TaskError> {
        let need = self.query_pos();
        if let Some(v) = self.offsets {
            if v < need {
                return Err(TaskError::Layout(format!(
                    "offsets = {v}: the query must reach the target window, which needs offsets \
                     up to {need} (target_window + pre_window)"
                )));
            }
            if v > 1 << 20 {
                return Err(TaskError::Layout(format!(
                    "offsets = {v} is larger than the supported 1048576"
                )));
            }
        }
        if let Some(l) = self.letters {
            if !(2..=MAX_LETTERS).contains(&l) {
                return Err(TaskError::Layout(format!(
                    "letters = {l}: the letter task has between 2 and {MAX_LETTERS} letters (a..z)"
                )));
            }
        }
        if let Some(n) = self.numbers {
            if !(1..=1 << 16).contains(&n) {
                return Err(TaskError::Layout(format!(
                    "numbers = {n}: the letter task has between 1 and 65536 numbers"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_layout_is_17_tokens() {
        let l = Layout::default();
        assert_eq!(l.core_len(), 17);
        assert_eq!(l.query_pos(), 16);
        l.check().unwrap();
    }

    #[test]
    fn impossible_layouts_are_rejected() {
        let bad = |target_window, pre_window, hops: &[usize]| {
            Layout {
                target_window,
                pre_window,
                hops: hops.to_vec(),
                ..Layout::default()
            }
            .check()
            .unwrap_err()
            .to_string()
        };
        assert!(bad(8, 2, &[4]).contains("4 hops need 3 pre-target positions"));
        assert!(bad(0, 8, &[1]).contains("target_window"));
        assert!(bad(8, 8, &[]).contains("at least one"));
        assert!(bad(8, 8, &[0]).contains("at least 1"));
        assert!(bad(8, 8, &[2, 2]).contains("repeat"));
        let vocab = |offsets, letters, numbers| {
            Layout {
                offsets,
                letters,
                numbers,
                ..Layout::default()
            }
            .check()
            .map_err(|e| e.to_string())
        };
        assert!(vocab(Some(8), None, None)
            .unwrap_err()
            .contains("offsets = 8"));
        assert!(vocab(Some(16), None, None).is_ok() && vocab(Some(32), None, None).is_ok());
        assert!(vocab(None, Some(27), None)
            .unwrap_err()
            .contains("letters = 27"));
        assert!(vocab(None, Some(1), None)
            .unwrap_err()
            .contains("letters = 1"));
        assert!(vocab(None, None, Some(0))
            .unwrap_err()
            .contains("numbers = 0"));
        assert!(vocab(None, Some(16), Some(16)).is_ok());
    }
}
