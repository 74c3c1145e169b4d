//! Studies that differ only in heads per block (`n_heads = [2, 4]`, docs/multihead.md): one row
//! per (head count, seed, task) with the test accuracy, the head types at the last checkpoint
//! and the length at which accuracy first falls below the claims' threshold, as `heads.csv`.

use ropelab_tasks::TaskKind;
use serde::{Deserialize, Serialize};

use crate::claims::{grid_letters, head_grid, heads_of, layers_with, StudyFiles};
use crate::measure::dynamics::{Gamma, HeadKind};
use crate::measure::lengthgen::first_length_below;

/// One model of a study of `heads` heads per block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadCountRow {
    /// Heads per block.
    pub heads: usize,
    /// Seed.
    pub seed: u64,
    /// Task.
    pub task: TaskKind,
    /// Test accuracy of the last checkpoint (empty: not evaluated).
    pub test_accuracy: Option<f64>,
    /// Head types at the last checkpoint, one letter per head (P, S, -), layers separated by
    /// `|` when a layer has several heads.
    pub types: String,
    /// Pure positional heads.
    pub positional_heads: usize,
    /// Layers holding a pure positional head.
    pub positional_layers: usize,
    /// Pure symbolic heads.
    pub symbolic_heads: usize,
    /// Layers holding both a pure positional and a pure symbolic head.
    pub shared_layers: usize,
    /// The first tested length whose accuracy is below `length_accuracy` (empty: none).
    pub first_below: Option<usize>,
    /// The longest tested length.
    pub longest: Option<usize>,
}

impl HeadCountRow {
    /// The columns of [`HeadCountRow::cells`], as the CLI and the report print them.
    pub const HEADER: [&'static str; 10] = [
        "heads",
        "seed",
        "task",
        "test accuracy",
        "head types",
        "positional heads",
        "positional layers",
        "symbolic heads",
        "layers with both",
        "first length below threshold",
    ];

    /// The row as printed: accuracy to 4 places, `-` where not measured, `never (to L)` where
    /// accuracy never fell below the threshold up to the longest tested length L.
    pub fn cells(&self) -> Vec<String> {
        vec![
            self.heads.to_string(),
            self.seed.to_string(),
            self.task.to_string(),
            self.test_accuracy.map_or("-".into(), |a| format!("{a:.4}")),
            self.types.clone(),
            self.positional_heads.to_string(),
            self.positional_layers.to_string(),
            self.symbolic_heads.to_string(),
            self.shared_layers.to_string(),
            match (self.first_below, self.longest) {
                (Some(l), _) => l.to_string(),
                (None, Some(l)) => format!("never (to {l})"),
                (None, None) => "-".into(),
            },
        ]
    }
}

/// The rows of the study of `heads` heads per block read into `files`, at purity tolerance
/// `gamma`, with lengths failing below `length_accuracy`.
pub fn rows(
    files: &StudyFiles,
    heads: usize,
    gamma: Gamma,
    length_accuracy: f64,
) -> Vec<HeadCountRow> {
    let mut out = vec![];
    for seed in &files.seeds {
        for task in [TaskKind::Number, TaskKind::Letter] {
            let Some(run) = seed.run(task) else { continue };
            let grid = head_grid(&run.scores, gamma);
            let p = layers_with(&grid, HeadKind::Positional);
            let s = layers_with(&grid, HeadKind::Symbolic);
            out.push(HeadCountRow {
                heads,
                seed: seed.seed,
                task,
                test_accuracy: run.test.as_ref().map(|a| a.accuracy),
                types: grid_letters(&grid),
                positional_heads: heads_of(&grid, HeadKind::Positional),
                positional_layers: p.len(),
                symbolic_heads: heads_of(&grid, HeadKind::Symbolic),
                shared_layers: p.iter().filter(|l| s.contains(l)).count(),
                first_below: first_length_below(&run.lengths, length_accuracy),
                longest: run.lengths.iter().map(|l| l.length).max(),
            });
        }
    }
    out
}
