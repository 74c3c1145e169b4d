//! Fixed-offset retrieval (docs/tasks.md#fixed-offset-retrieval), the task of the implicit-bias
//! experiment: i.i.d. uniform tokens over a vocabulary of `vocab` symbols; the target at query
//! position i (0-based) is the token at i - k. The query is the last position, or every
//! position i >= k (the full-sequence variant). A sequence of length n needs n > k.
//!
//! Sequences are deterministic per (seed, split, length, index), so a test set at any length is
//! fixed by the seed; the splits draw from separate streams (with `vocab^n` possible sequences,
//! short lengths may repeat a string across splits, as i.i.d. data does).

use crate::dataset::Split;
use crate::error::TaskError;
use crate::rng::stream;
use rand::Rng;

/// The fixed-offset retrieval task: a vocabulary size and an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetTask {
    /// Number of token symbols (ids 0 .. vocab).
    pub vocab: usize,
    /// The offset k looked back.
    pub k: usize,
}

impl OffsetTask {
    /// The task for `vocab` >= 2 symbols and offset `k` >= 1.
    pub fn new(vocab: usize, k: usize) -> Result<Self, TaskError> {
        if vocab < 2 {
            return Err(TaskError::Offset(format!(
                "the vocabulary needs at least 2 symbols, got {vocab}"
            )));
        }
        if vocab > u32::MAX as usize {
            return Err(TaskError::Offset(format!(
                "a vocabulary of {vocab} is too large"
            )));
        }
        if k == 0 {
            return Err(TaskError::Offset("the offset k must be at least 1".into()));
        }
        Ok(Self { vocab, k })
    }

    /// Checks that sequences of length `n` have a query: n > k.
    pub fn check_length(&self, n: usize) -> Result<(), TaskError> {
        if n <= self.k {
            return Err(TaskError::Offset(format!(
                "a sequence of length {n} has no position {} to look back {} from (lengths must \
                 be longer than the offset)",
                self.k, self.k
            )));
        }
        Ok(())
    }

    /// Sequence `index` of length `n` in `split` for `seed`: n i.i.d. uniform token ids.
    pub fn sequence(&self, seed: u64, split: Split, n: usize, index: u64) -> Vec<u32> {
        let mut rng = stream([seed, 0x4F46_4653 ^ split as u64, n as u64, index]);
        (0..n)
            .map(|_| rng.random_range(0..self.vocab as u32))
            .collect()
    }

    /// The target at the last position: the token k before it (`None` when ids.len() <= k).
    pub fn last_target(&self, ids: &[u32]) -> Option<u32> {
        ids.len().checked_sub(self.k + 1).map(|i| ids[i])
    }

    /// The target at every position: the token k before it, `None` at the first k positions.
    pub fn targets(&self, ids: &[u32]) -> Vec<Option<u32>> {
        (0..ids.len())
            .map(|i| i.checked_sub(self.k).map(|j| ids[j]))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_look_back_k_positions() {
        let t = OffsetTask::new(5, 2).unwrap();
        let ids = [4, 0, 3, 1, 2];
        assert_eq!(t.last_target(&ids), Some(3));
        assert_eq!(t.targets(&ids), vec![None, None, Some(4), Some(0), Some(3)]);
        assert_eq!(t.last_target(&[1, 2]), None);
        assert!(t.check_length(2).is_err());
        assert!(t.check_length(3).is_ok());
    }

    #[test]
    fn sequences_are_fixed_by_seed_split_length_and_index_and_uniform() {
        let t = OffsetTask::new(8, 1).unwrap();
        let a = t.sequence(3, Split::Test, 50, 7);
        assert_eq!(a, t.sequence(3, Split::Test, 50, 7));
        assert_ne!(a, t.sequence(4, Split::Test, 50, 7));
        assert_ne!(a, t.sequence(3, Split::Train, 50, 7));
        assert_ne!(a, t.sequence(3, Split::Test, 50, 8));
        assert_ne!(a[..20], t.sequence(3, Split::Test, 20, 7)[..]);
        // Every symbol about 1/8 of 80,000 draws (5 sigma: 1/8 +- 0.006).
        let mut counts = [0usize; 8];
        for i in 0..1000 {
            for id in t.sequence(0, Split::Train, 80, i) {
                counts[id as usize] += 1;
            }
        }
        for c in counts {
            let f = c as f64 / 80_000.0;
            assert!((f - 0.125).abs() < 0.006, "{counts:?}");
        }
    }

    #[test]
    fn bad_settings_are_errors() {
        assert!(OffsetTask::new(1, 1)
            .unwrap_err()
            .to_string()
            .contains("at least 2"));
        assert!(OffsetTask::new(4, 0)
            .unwrap_err()
            .to_string()
            .contains("offset k"));
    }
}
