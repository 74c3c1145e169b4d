//! The implicit-bias paper's claims (docs/offset.md) as verdicts of a study's `offset/` tables:
//! rotary attention extrapolates where a learned absolute encoding does not, the dilution law
//! predicts the rotary target weight, and linear attention fails out of range.

use std::path::Path;

use super::{accuracy_at_least, Category, Claim, Outcome, Tally, Thresholds};
use crate::measure::offset::{OffsetAccuracyRow, OffsetRunRow};
use crate::{AnalysisError, Result};

/// The tables of `ropelab offset` (or a study's `offset/`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OffsetFiles {
    /// `accuracy.csv`.
    pub accuracy: Vec<OffsetAccuracyRow>,
    /// `runs.csv`.
    pub runs: Vec<OffsetRunRow>,
}

impl OffsetFiles {
    /// Reads `dir/accuracy.csv` and `dir/runs.csv`; `None` when `dir/runs.csv` is absent.
    pub fn load(dir: &Path) -> Result<Option<Self>> {
        let runs_path = dir.join("runs.csv");
        if !runs_path.exists() {
            return Ok(None);
        }
        Ok(Some(Self {
            accuracy: read_file(&dir.join("accuracy.csv"))?,
            runs: read_file(&runs_path)?,
        }))
    }

    /// A run's accuracy at `times` x its training length, with its samples.
    fn accuracy_at(
        &self,
        pe: &str,
        attention: &str,
        k: usize,
        seed: u64,
        times: usize,
    ) -> Option<(f64, usize)> {
        self.accuracy
            .iter()
            .find(|r| {
                r.pe == pe
                    && r.attention == attention
                    && r.k == k
                    && r.seed == seed
                    && r.test_len == times * r.train_len
            })
            .map(|r| (r.accuracy, r.n))
    }

    /// The (k, seed) pairs of the runs, in file order, each once.
    fn pairs(&self) -> Vec<(usize, u64)> {
        let mut out = vec![];
        for r in &self.runs {
            if !out.contains(&(r.k, r.seed)) {
                out.push((r.k, r.seed));
            }
        }
        out
    }
}

/// The rows of one CSV file, as an analysis error.
fn read_file<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    ropelab_io::read_csv_file(path).map_err(|e| AnalysisError::Invalid(e.to_string()))
}

/// An accuracy at most `threshold`, decided by its 95% Wilson interval (the mirror of
/// [`accuracy_at_least`]).
fn accuracy_at_most(accuracy: f64, n: usize, threshold: f64) -> Outcome {
    match accuracy_at_least(1.0 - accuracy, n, 1.0 - threshold) {
        Outcome::Undetermined(_) => {
            let (lo, hi) = super::wilson((accuracy * n as f64).round() as usize, n);
            Outcome::undetermined(format!(
                "accuracy {accuracy:.3} on {n} samples: its 95% interval [{lo:.3}, {hi:.3}] \
                 contains the threshold {threshold}"
            ))
        }
        o => o,
    }
}

/// Tallies labelled measurements; a claim with none is undetermined, naming `none`.
fn tally(items: impl IntoIterator<Item = (String, Outcome)>, none: &str) -> Tally {
    let mut t = Tally::default();
    for (text, outcome) in items {
        t.push("", text, outcome);
    }
    if t.n() == 0 {
        t.push(
            "",
            none.into(),
            Outcome::undetermined(format!("not measured: {none}")),
        );
    }
    t
}

/// The three verdicts (undetermined when the study has no `offset/`).
pub fn verdicts(files: Option<&OffsetFiles>, t: &Thresholds) -> Vec<Claim> {
    let empty = OffsetFiles::default();
    let f = files.unwrap_or(&empty);
    let pct = |x: Option<(f64, usize)>| x.map_or("-".into(), |v| format!("{:.3}", v.0));
    let missing = "no runs of this kind in offset/";

    let extrapolates = f.pairs().into_iter().map(|(k, seed)| {
        let rope = f.accuracy_at("rope", "softmax", k, seed, t.offset_factor);
        let ape = f.accuracy_at("ape", "softmax", k, seed, 2);
        let ok = match (rope, ape) {
            (Some(r), Some(a)) => {
                let both = [
                    accuracy_at_least(r.0, r.1, t.offset_accuracy),
                    accuracy_at_most(a.0, a.1, t.offset_fail_accuracy),
                ];
                if both.contains(&Outcome::Fails) {
                    Outcome::Fails
                } else if let Some(Outcome::Undetermined(why)) =
                    both.iter().find(|o| matches!(o, Outcome::Undetermined(_)))
                {
                    Outcome::Undetermined(format!("k {k}, seed {seed}: {why}"))
                } else {
                    Outcome::Holds
                }
            }
            _ => Outcome::undetermined(format!(
                "k {k}, seed {seed}: no rotary run at {}x or no APE run at 2x",
                t.offset_factor
            )),
        };
        (
            format!(
                "k {k}, seed {seed}: rotary {} at {}x, APE {} at 2x",
                pct(rope),
                t.offset_factor,
                pct(ape)
            ),
            ok,
        )
    });
    let dilution = f
        .runs
        .iter()
        .filter(|r| r.pe == "rope" && r.attention == "softmax")
        .map(|r| {
            (
                format!(
                    "k {}, seed {}: largest |p_L - w_L| {}{}",
                    r.k,
                    r.seed,
                    r.dilution_error.map_or("-".into(), |v| format!("{v:.3}")),
                    r.per_sequence_error.map_or(String::new(), |e| format!(
                        " (the law per sequence: {e:.3}, docs/fidelity.md)"
                    ))
                ),
                r.dilution_error.map_or_else(
                    || {
                        Outcome::undetermined(format!(
                            "k {}, seed {}: no dilution measurement",
                            r.k, r.seed
                        ))
                    },
                    |e| Outcome::of(e <= t.dilution_error),
                ),
            )
        });
    let linear = f
        .runs
        .iter()
        .filter(|r| r.attention == "linear" && (r.pe == "rope" || r.pe == "ape"))
        .map(|r| {
            let inside = f.accuracy_at(&r.pe, "linear", r.k, r.seed, 1);
            let beyond = f.accuracy_at(&r.pe, "linear", r.k, r.seed, 2);
            (
                format!(
                    "{} k {}, seed {}: {} at 1x, {} at 2x",
                    r.pe,
                    r.k,
                    r.seed,
                    pct(inside),
                    pct(beyond)
                ),
                match beyond {
                    Some((b, n)) => match accuracy_at_most(b, n, t.linear_fail_accuracy) {
                        Outcome::Undetermined(why) => Outcome::Undetermined(format!(
                            "{} k {}, seed {}: {why}",
                            r.pe, r.k, r.seed
                        )),
                        o => o,
                    },
                    None => Outcome::undetermined(format!(
                        "{} k {}, seed {}: no test at 2x",
                        r.pe, r.k, r.seed
                    )),
                },
            )
        });
    let absent = "no offset/ tables (the study has no [offset] table)";
    let or_missing = |x: Tally| {
        if files.is_some() {
            x
        } else {
            tally([], absent)
        }
    };
    vec![
        Claim::new(
            "offset_rotary_extrapolates",
            Category::Empirical,
            "Fixed-offset retrieval: rotary attention trained at short lengths stays correct far \
             beyond them, while a learned absolute encoding fails right after its training range \
             (the paper: 1.00 against 0.07 at test length 48).",
            format!(
                "per (k, seed): rotary softmax accuracy >= {} at {} x the training length and APE \
                 softmax accuracy <= {} at 2 x, each decided by its 95% Wilson interval",
                t.offset_accuracy, t.offset_factor, t.offset_fail_accuracy
            ),
            or_missing(tally(extrapolates, missing)),
            1,
        ),
        Claim::new(
            "offset_dilution_law",
            Category::Empirical,
            "Rotary accuracy decays by attention dilution: with the logits fixed by training, the \
             target weight at length L is e^{s(k)} / sum_{r < L} e^{s(r)}.",
            format!(
                "per rotary softmax run: the prediction from the measured carrier s(r) within {} \
                 of the measured mean target weight at every test length",
                t.dilution_error
            ),
            or_missing(tally(dilution, missing)),
            1,
        ),
        Claim::new(
            "offset_linear_fails",
            Category::Empirical,
            "Linear attention (no softmax) learns an interpolant that does not extrapolate.",
            format!(
                "per rotary or APE linear-attention run: accuracy <= {} at 2 x the training \
                 length, decided by its 95% Wilson interval",
                t.linear_fail_accuracy
            ),
            or_missing(tally(linear, missing)),
            1,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::Verdict;

    fn acc(
        pe: &str,
        attention: &str,
        k: usize,
        seed: u64,
        test_len: usize,
        accuracy: f64,
    ) -> OffsetAccuracyRow {
        OffsetAccuracyRow {
            pe: pe.into(),
            attention: attention.into(),
            k,
            seed,
            train_len: 16,
            test_len,
            n: 100,
            accuracy,
            loss: 0.0,
        }
    }

    fn run(pe: &str, attention: &str, k: usize, seed: u64, dilution: Option<f64>) -> OffsetRunRow {
        OffsetRunRow {
            pe: pe.into(),
            attention: attention.into(),
            k,
            seed,
            equivariance: 1e-7,
            dilution_error: dilution,
            per_sequence_error: dilution.map(|d| d / 2.0),
            repeak_offset: None,
            repeak_margin: None,
            mode_key: None,
            mode_fraction: None,
            carrier_rank: None,
            carrier_alignment: None,
        }
    }

    #[test]
    fn verdicts_follow_the_thresholds() {
        let t = Thresholds::default();
        let files = OffsetFiles {
            accuracy: vec![
                acc("rope", "softmax", 1, 0, 64, 1.0),
                acc("ape", "softmax", 1, 0, 32, 0.06),
                acc("rope", "softmax", 2, 0, 64, 0.5),
                acc("ape", "softmax", 2, 0, 32, 0.05),
                acc("rope", "linear", 1, 0, 16, 0.9),
                acc("rope", "linear", 1, 0, 32, 0.2),
            ],
            runs: vec![
                run("rope", "softmax", 1, 0, Some(0.02)),
                run("ape", "softmax", 1, 0, None),
                run("rope", "softmax", 2, 0, Some(0.2)),
                run("rope", "linear", 1, 0, None),
            ],
        };
        let v = verdicts(Some(&files), &t);
        assert_eq!(v.len(), 3);
        // k 2 reaches only 0.5 at 4x: one of two pairs holds.
        assert_eq!(
            (v[0].holding, v[0].n, v[0].verdict),
            (1, 2, Verdict::DoesNotHold)
        );
        assert!(
            v[0].measured[1].contains("rotary 0.500 at 4x, APE 0.050 at 2x"),
            "{:?}",
            v[0].measured
        );
        assert_eq!((v[1].holding, v[1].n), (1, 2));
        assert_eq!((v[2].holding, v[2].n, v[2].verdict), (1, 1, Verdict::Holds));
        assert!(v[2].measured[0].contains("0.900 at 1x, 0.200 at 2x"));
        // No offset/ at all: undetermined, saying so.
        for c in verdicts(None, &t) {
            assert_eq!(c.verdict, Verdict::Undetermined);
            assert!(c.reason.unwrap().contains("no offset/ tables"));
        }
        // 0.85 of 100 at 4x: the interval [0.767, 0.907] contains 0.9.
        let mut files = files;
        files.accuracy[2].accuracy = 0.85;
        let c = &verdicts(Some(&files), &t)[0];
        assert_eq!(c.verdict, Verdict::Undetermined, "{c:?}");
        assert!(c.reason.as_ref().unwrap().contains("k 2, seed 0"), "{c:?}");
    }
}
