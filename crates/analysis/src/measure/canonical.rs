//! The files of frequency-band training on the canonical tasks (docs/canonical.md): a band's
//! summary (`summary.json`) and accuracy per answer position (`per_position.csv`), written by
//! `ropelab canonical` and read by the report.

use serde::{Deserialize, Serialize};

/// One row of `per_position.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerPositionRow {
    /// Task.
    pub task: String,
    /// Band.
    pub band: String,
    /// Seed.
    pub seed: u64,
    /// Answer position.
    pub position: usize,
    /// Test samples with their answer there.
    pub n: usize,
    /// Accuracy.
    pub accuracy: f64,
    /// Largest weight the query put on that key position.
    pub w_max: f64,
}

/// One entry of `summary.json`: a band's means over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BandSummary {
    /// Task.
    pub task: String,
    /// Band.
    pub band: String,
    /// Planes that rotate.
    pub planes: Vec<usize>,
    /// Mean rate of the band's planes (its centre frequency, radians per position).
    pub centre: f64,
    /// Mean test accuracy over seeds.
    pub accuracy: f64,
    /// Mean s_pos over seeds.
    pub s_pos: f64,
    /// Mean s_sym over seeds.
    pub s_sym: f64,
    /// Test accuracy per seed.
    pub per_seed: Vec<f64>,
    /// Partial Induction: the two kinds of planes, from the plane margins averaged over seeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub two_angles: Option<crate::measure::partial::TwoAngles>,
}

impl BandSummary {
    /// Column names of [`BandSummary::cells`] for a table.
    pub const HEADER: [&'static str; 6] = [
        "band",
        "centre theta",
        "accuracy",
        "s_pos",
        "s_sym",
        "per seed",
    ];

    /// The row as table cells: the band, its centre frequency, the means over seeds, and the
    /// accuracy of each seed.
    pub fn cells(&self) -> Vec<String> {
        vec![
            self.band.clone(),
            format!("{:.3e}", self.centre),
            format!("{:.4}", self.accuracy),
            format!("{:.3}", self.s_pos),
            format!("{:.3}", self.s_sym),
            self.per_seed
                .iter()
                .map(|a| format!("{a:.3}"))
                .collect::<Vec<_>>()
                .join(" "),
        ]
    }
}
