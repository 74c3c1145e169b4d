//! The shape of a task instance: window sizes and the hop counts the generator balances over.

use serde::{Deserialize, Serialize};

use crate::TaskError;

/// Window sizes and hop counts. A core instance is `target_window` target-type tokens, then
/// `pre_window` pre-target tokens, then one query token (`8 + 8 + 1 = 17` in the paper).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Layout {
    /// Number of target-type tokens the answer can sit in (paper: 8).
    pub target_window: usize,
    /// Number of pre-target tokens that can hold intermediate hops (paper: 8).
    pub pre_window: usize,
    /// Hop counts, balanced in equal shares (paper: 1, 2, 3, 4).
    pub hops: Vec<usize>,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            target_window: 8,
            pre_window: 8,
            hops: vec![1, 2, 3, 4],
        }
    }
}

impl Layout {
    /// Length of a core instance (without length extension).
    pub fn core_len(&self) -> usize {
        self.target_window + self.pre_window + 1
    }

    /// Position of the query token in a core instance.
    pub fn query_pos(&self) -> usize {
        self.target_window + self.pre_window
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
    }
}
