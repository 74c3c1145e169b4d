//! The files of the expressivity experiment (docs/languages.md): N* of a run's accuracy per
//! length, and the rows of `nstar.csv` and `accuracy.csv` (written by `ropelab languages`,
//! read by the report).

use std::fmt;
use std::str::FromStr;

use ropelab_model::{PeriodicTables, PositionEncoding};
use ropelab_train::lengths::LengthAccuracy;
use serde::{Deserialize, Serialize};

use crate::{AnalysisError, Result};

/// The periods of the periodic encodings' planes (uniform tables, T_m(s) = 2 pi s / m): period
/// 2 gives the parity of a position (enough for `(aa)*` and `(ab)*`), and 2, 3, 5, 7 together
/// tell positions apart modulo 210.
pub const PERIODS: [usize; 4] = [2, 3, 5, 7];

/// The shortest longest-tested length at which the MOD heads of a run trained on strings up to
/// `hi` can be scored: the positions beyond training must hold every residue of the longest
/// period (a head's residue is chosen on the training positions and its contrast read beyond
/// them), so at least 7 of them.
pub fn mod_heads_need(hi: usize) -> usize {
    hi + PERIODS[PERIODS.len() - 1]
}

/// One position encoding of the experiment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pe {
    /// No position encoding.
    Nope,
    /// Conventional RoPE at a base, on every dim of each head.
    Rope(f64),
    /// Sinusoidal absolute encoding at a base.
    Sipe(f64),
    /// Periodic RoPE: the planes of [`PERIODS`] (the rest of each head passes unrotated).
    RopePeriodic,
    /// Periodic sinusoidal absolute encoding with [`PERIODS`].
    SipePeriodic,
}

impl Pe {
    /// The kind without its base (`nope`, `rope`, `sipe`, `rope-periodic`, `sipe-periodic`).
    pub fn kind(&self) -> &'static str {
        match self {
            Pe::Nope => "nope",
            Pe::Rope(_) => "rope",
            Pe::Sipe(_) => "sipe",
            Pe::RopePeriodic => "rope-periodic",
            Pe::SipePeriodic => "sipe-periodic",
        }
    }

    /// The base of a conventional encoding.
    pub fn base(&self) -> Option<f64> {
        match self {
            Pe::Rope(b) | Pe::Sipe(b) => Some(*b),
            _ => None,
        }
    }

    /// The model's encoding for heads of `d_head` dims.
    pub fn encoding(&self, d_head: usize) -> PositionEncoding {
        let layout = ropelab_model::RopeLayout::Interleaved;
        match *self {
            Pe::Nope => PositionEncoding::None,
            Pe::Rope(base) => PositionEncoding::rope(base, d_head, layout),
            Pe::Sipe(base) => PositionEncoding::Sinusoidal { base },
            Pe::RopePeriodic => PositionEncoding::Periodic {
                periods: PERIODS.to_vec(),
                tables: PeriodicTables::default(),
                layout,
                planes: Default::default(),
            },
            Pe::SipePeriodic => PositionEncoding::PeriodicSinusoidal {
                periods: PERIODS.to_vec(),
                tables: PeriodicTables::default(),
            },
        }
    }
}

impl Pe {
    /// The encoding of a language run's model (`None` for one the experiment does not train:
    /// learned, fixed angles).
    pub fn of(position: &PositionEncoding) -> Option<Self> {
        match position {
            PositionEncoding::None => Some(Pe::Nope),
            PositionEncoding::Rope { base, .. } => Some(Pe::Rope(*base)),
            PositionEncoding::Sinusoidal { base } => Some(Pe::Sipe(*base)),
            PositionEncoding::Periodic { .. } => Some(Pe::RopePeriodic),
            PositionEncoding::PeriodicSinusoidal { .. } => Some(Pe::SipePeriodic),
            _ => None,
        }
    }
}

impl fmt::Display for Pe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.base() {
            Some(b) => write!(f, "{}:{b:e}", self.kind()),
            None => f.write_str(self.kind()),
        }
    }
}

impl FromStr for Pe {
    type Err = AnalysisError;
    /// `nope`, `rope:BASE`, `sipe:BASE`, `rope-periodic` or `sipe-periodic`.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let base = |text: &str| -> Result<f64> {
            match text.parse::<f64>() {
                Err(_) => Err(AnalysisError::Invalid(format!(
                    "position encoding {s:?}: {text:?} is not a number"
                ))),
                Ok(b)
                    if !(b.is_finite()
                        && (ropelab_model::BASE_RANGE.0..=ropelab_model::BASE_RANGE.1)
                            .contains(&b)) =>
                {
                    Err(AnalysisError::Invalid(format!(
                        "position encoding {s:?}: the base must lie in [1e-12, 1e12], got {}",
                        ropelab_model::number_text(b)
                    )))
                }
                Ok(b) => Ok(b),
            }
        };
        Ok(match s.split_once(':') {
            Some(("rope", b)) => Pe::Rope(base(b)?),
            Some(("sipe", b)) => Pe::Sipe(base(b)?),
            None if s == "nope" => Pe::Nope,
            None if s == "rope-periodic" => Pe::RopePeriodic,
            None if s == "sipe-periodic" => Pe::SipePeriodic,
            _ => {
                return Err(AnalysisError::Invalid(format!(
                    "unknown position encoding {s:?} (expected nope, rope:BASE, sipe:BASE, \
                     rope-periodic or sipe-periodic)"
                )))
            }
        })
    }
}

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

/// One row of `offset.csv`: a conventional-RoPE run's N* beside the certified range of the
/// fixed-offset head (`ropelab theory offset-range`) on the plane of its heads that certifies
/// the longest range, at one multiple of the minimal score scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OffsetRow {
    /// Language name.
    pub language: String,
    /// The RoPE base.
    pub base: f64,
    /// Seed.
    pub seed: u64,
    /// Learning rate.
    pub lr: f64,
    /// The run's measured N*.
    pub n_star: usize,
    /// The longest tested length.
    pub max_len: usize,
    /// The offset looked back.
    pub k: usize,
    /// Multiple of the minimal scale C_min = 2 f_large / (1 - cos g).
    pub scale: f64,
    /// Rotation per position of the best plane (radians).
    pub g: f64,
    /// The score scale C.
    pub c: f64,
    /// Certified range in f32 (empty: no failure up to `cap`).
    pub certified_range: Option<usize>,
    /// Longest range searched.
    pub cap: usize,
}

/// Offset rows as a table, one line per run (rows of one run are consecutive, one per
/// scale): the run, its N*, k, the best plane's rate at the first scale, and a certified-range
/// column per scale (`> cap` when no failure was found).
pub fn offset_table_cells(rows: &[OffsetRow]) -> (Vec<String>, Vec<Vec<String>>) {
    let mut scales: Vec<f64> = vec![];
    for r in rows {
        if !scales.contains(&r.scale) {
            scales.push(r.scale);
        }
    }
    let mut header: Vec<String> = ["language", "base", "seed", "lr", "N*", "k", "best g"]
        .map(String::from)
        .to_vec();
    header.extend(scales.iter().map(|s| format!("range at {s} C_min")));
    let cells = rows
        .chunks(scales.len().max(1))
        .map(|run| {
            let r = &run[0];
            let mut cells = vec![
                r.language.clone(),
                format!("{:e}", r.base),
                r.seed.to_string(),
                format!("{:e}", r.lr),
                r.n_star.to_string(),
                r.k.to_string(),
                format!("{:e}", r.g),
            ];
            cells.extend(run.iter().map(|r| {
                r.certified_range
                    .map_or(format!("> {}", r.cap), |l| l.to_string())
            }));
            cells
        })
        .collect();
    (header, cells)
}

/// The offset rows of a conventional-RoPE run with heads of `d_head` dims: for each multiple
/// in `scales`, the plane (rate base^(-2j / d_head)) whose fixed-offset head looking back `k`
/// positions certifies the longest range in f32 (ties: the fastest plane).
pub fn offset_rows(
    run: &NStarRow,
    base: f64,
    d_head: usize,
    k: usize,
    scales: &[f64],
    cap: usize,
) -> ropelab_theory::Result<Vec<OffsetRow>> {
    use ropelab_theory::format::NumberFormat;
    use ropelab_theory::periodic::offset_table;
    let rates = ropelab_model::rope::frequencies(base, d_head);
    let mut out = vec![];
    for &scale in scales {
        // Planes in order, fastest first; a later plane wins only with a longer range.
        let mut best: Option<ropelab_theory::periodic::OffsetRangeRow> = None;
        for row in offset_table(&rates, k, &[scale], NumberFormat::F32, cap)? {
            let longer = match (best.map(|b| b.certified_range), row.certified_range) {
                (None, _) => true,
                (Some(Some(_)), None) => true,
                (Some(Some(b)), Some(r)) => r > b,
                (Some(None), _) => false,
            };
            if longer {
                best = Some(row);
            }
        }
        if let Some(best) = best {
            out.push(OffsetRow {
                language: run.language.clone(),
                base,
                seed: run.seed,
                lr: run.lr,
                n_star: run.n_star,
                max_len: run.max_len,
                k,
                scale,
                g: best.g,
                c: best.c,
                certified_range: best.certified_range,
                cap,
            });
        }
    }
    Ok(out)
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
    fn offset_rows_pick_the_plane_with_the_longest_certified_range() {
        use ropelab_theory::format::NumberFormat;
        use ropelab_theory::periodic::{f_large, offset_range};
        let run = NStarRow {
            language: "ab-star".into(),
            pe: "rope".into(),
            base: Some(1e4),
            seed: 0,
            lr: 1e-3,
            train_accuracy: 1.0,
            accuracy: 0.7,
            n_star: 41,
            max_len: 500,
        };
        // Base 1e4 and 8 dims: planes turn by 1, 0.1, 0.01 and 0.001 rad per position; the
        // slowest plane's cosine stays near 1 the longest, and so certifies the longest range.
        let rows = offset_rows(&run, 1e4, 8, 1, &[1.0, 10.0], 100_000).unwrap();
        assert_eq!(rows.len(), 2);
        for row in &rows {
            assert!((row.g - 1e-3).abs() < 1e-12, "{row:?}");
            let c = row.scale * 2.0 * f_large(NumberFormat::F32) / (1.0 - row.g.cos());
            assert_eq!(row.c, c);
            let want = offset_range(row.g, c, 1, NumberFormat::F32, 100_000).unwrap();
            assert_eq!(row.certified_range, want);
            for g in [1.0, 0.1, 0.01] {
                let c = row.scale * 2.0 * f_large(NumberFormat::F32) / (1.0 - f64::cos(g));
                let other = offset_range(g, c, 1, NumberFormat::F32, 100_000).unwrap();
                assert!(
                    other.unwrap() <= want.unwrap(),
                    "g {g}: {other:?} vs {want:?}"
                );
            }
            assert_eq!((row.n_star, row.language.as_str()), (41, "ab-star"));
        }
        // Base 1: every plane turns by 1 rad; the range is short (a few dozen positions).
        let one = offset_rows(&run, 1.0, 8, 1, &[1.0], 100_000).unwrap();
        assert_eq!(one[0].g, 1.0);
        assert!(one[0].certified_range.unwrap() < 100);
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
