//! The summary over seeds: mean and standard deviation of each task's test accuracy, and of
//! each head's final scores, with the number of seeds in which the head ends pure of each type.

use anyhow::Result;
use ropelab_analysis::measure::dynamics::{summarize_heads, Gamma, HeadKind};
use ropelab_tasks::TaskKind;

use crate::job::Trained;

use ropelab_analysis::measure::seeds::mean_sd;

/// One head over seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadOverSeeds {
    /// Block.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// Mean and sd of the final s_pos.
    pub s_pos: (f64, f64),
    /// Mean and sd of the final s_sym.
    pub s_sym: (f64, f64),
    /// Seeds in which the head ends pure positional.
    pub positional: usize,
    /// Seeds in which the head ends pure symbolic.
    pub symbolic: usize,
    /// Seeds.
    pub seeds: usize,
}

/// One task over seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOverSeeds {
    /// Task.
    pub task: TaskKind,
    /// Seeds.
    pub seeds: usize,
    /// Mean and sd of the test accuracy.
    pub accuracy: (f64, f64),
    /// Every head.
    pub heads: Vec<HeadOverSeeds>,
}

/// The summary of every task that has runs, at purity tolerance `gamma`.
pub fn over_seeds(rows: &[Trained], gamma: Gamma) -> Result<Vec<TaskOverSeeds>> {
    let mut out = vec![];
    for task in TaskKind::ALL {
        let runs: Vec<&Trained> = rows.iter().filter(|r| r.task == task).collect();
        if runs.is_empty() {
            continue;
        }
        let acc: Vec<f64> = runs.iter().map(|r| r.test.accuracy.accuracy).collect();
        let summaries = runs
            .iter()
            .map(|r| summarize_heads(&r.scores, gamma))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let heads = summaries.first().map_or(vec![], |first| {
            first
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    let heads: Vec<_> = summaries.iter().filter_map(|v| v.get(i)).collect();
                    let count = |k| heads.iter().filter(|h| h.kind == k).count();
                    HeadOverSeeds {
                        layer: h.layer,
                        head: h.head,
                        s_pos: mean_sd(&heads.iter().map(|h| h.s_pos).collect::<Vec<_>>()),
                        s_sym: mean_sd(&heads.iter().map(|h| h.s_sym).collect::<Vec<_>>()),
                        positional: count(HeadKind::Positional),
                        symbolic: count(HeadKind::Symbolic),
                        seeds: heads.len(),
                    }
                })
                .collect()
        });
        out.push(TaskOverSeeds {
            task,
            seeds: runs.len(),
            accuracy: mean_sd(&acc),
            heads,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_sd() {
        let (m, sd) = mean_sd(&[1.0, 2.0, 3.0]);
        assert!((m - 2.0).abs() < 1e-12 && (sd - 1.0).abs() < 1e-12);
        assert_eq!(mean_sd(&[0.5]), (0.5, 0.0));
    }
}
