//! The files of the expressivity experiment (docs/languages.md): N* of a run's accuracy per
//! length, and the rows of `nstar.csv` and `accuracy.csv` (written by `ropelab languages`,
//! read by the report).

use ropelab_train::language_data::LengthAccuracy;
use serde::{Deserialize, Serialize};

/// One row of `nstar.csv`: a run's N* and its mean accuracy over the test lengths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NStarRow {
    /// Language name.
    pub language: String,
    /// Position-encoding kind.
    pub pe: String,
    /// Its base (empty for nope and the periodic kinds).
    pub base: Option<f64>,
    /// Seed.
    pub seed: u64,
    /// Learning rate.
    pub lr: f64,
    /// Mean accuracy over the training lengths (tested on fresh strings).
    pub train_accuracy: f64,
    /// Mean accuracy over the test lengths (beyond training).
    pub accuracy: f64,
    /// The longest test length up to which every test length is 100% correct; the longest
    /// training length when the shortest test length is not ([`n_star`]).
    pub n_star: usize,
    /// The longest tested length.
    pub max_len: usize,
}

impl NStarRow {
    /// Column names of [`NStarRow::cells`] for a table.
    pub const HEADER: [&'static str; 9] = [
        "language",
        "pe",
        "base",
        "seed",
        "lr",
        "train accuracy",
        "test accuracy",
        "N*",
        "max length",
    ];

    /// The row as table cells (a missing base as `-`, rates in scientific notation).
    pub fn cells(&self) -> Vec<String> {
        vec![
            self.language.clone(),
            self.pe.clone(),
            self.base.map_or("-".into(), |b| format!("{b:e}")),
            self.seed.to_string(),
            format!("{:e}", self.lr),
            format!("{:.4}", self.train_accuracy),
            format!("{:.4}", self.accuracy),
            self.n_star.to_string(),
            self.max_len.to_string(),
        ]
    }
}

/// One row of `accuracy.csv`: a run's accuracy at one length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthRow {
    /// Language name.
    pub language: String,
    /// Position-encoding kind.
    pub pe: String,
    /// Its base.
    pub base: Option<f64>,
    /// Seed.
    pub seed: u64,
    /// Learning rate.
    pub lr: f64,
    /// String length.
    pub length: usize,
    /// Strings tested.
    pub n: usize,
    /// Fraction classified correctly.
    pub accuracy: f64,
    /// Whether the length was a training length.
    pub trained: bool,
}

/// N* of per-length results sorted by length, for a model trained on lengths up to
/// `train_max`: the longest test length (beyond `train_max`) up to which every test length is
/// 100% correct, or `train_max` when the shortest test length is not. Whether the training
/// lengths themselves are perfect is the separate `train_accuracy` of a run.
pub fn n_star(rows: &[LengthAccuracy], train_max: usize) -> usize {
    rows.iter()
        .filter(|r| r.length > train_max)
        .take_while(|r| r.correct == r.n)
        .last()
        .map_or(train_max, |r| r.length)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(length: usize, n: usize, correct: usize) -> LengthAccuracy {
        LengthAccuracy {
            length,
            n,
            correct,
            loss: 0.0,
        }
    }

    #[test]
    fn n_star_is_the_end_of_the_first_perfect_run_of_test_lengths() {
        let rows = [
            row(1, 4, 3),
            row(40, 4, 4),
            row(41, 4, 4),
            row(50, 4, 3),
            row(60, 4, 4),
        ];
        assert_eq!(n_star(&rows, 40), 41, "training lengths do not count");
        assert_eq!(
            n_star(&[row(1, 4, 4), row(41, 4, 3), row(42, 4, 4)], 40),
            40
        );
        assert_eq!(n_star(&[row(41, 4, 4), row(500, 4, 4)], 40), 500);
        assert_eq!(n_star(&[], 40), 40);
    }
}
