//! An ambiguous job's measurement (docs/bias.md): accuracy on the agree test split at the
//! training length and on the length split (`lengths.csv`), the mechanism its answers to the
//! conflict split show (`conflict.csv`), and with `heads` every head's swap scores and type on
//! agree test samples (`heads.csv`).

use std::path::Path;

use candle_core::{Device, Tensor};
use ropelab_analysis::claims::grid_letters;
use ropelab_analysis::lens::heads::score_heads;
use ropelab_analysis::lens::purity::HeadKind;
use ropelab_analysis::lens::purity::{purity, Gamma};
use ropelab_analysis::lens::swap::Tau;
use ropelab_model::GptJ;
use ropelab_tasks::ambiguous::Kind;
use ropelab_tasks::Split;
use ropelab_train::ambiguous_data::{conflict_mechanisms, AmbiguousInputs, MechanismFractions};
use ropelab_train::lengths::{accuracy_at_lengths, LengthAccuracy};
use ropelab_train::{RunConfig, EVAL_MEMORY};
use serde::{Deserialize, Serialize};

use super::{write_lengths, write_run_csv, MeasureOptions, Measured};
use crate::Result;

/// The length split's default sizes: 1, 2, 4 and 8 x the training items.
pub const AMBIGUOUS_SCALES: [usize; 4] = [1, 2, 4, 8];

/// Agree test samples the heads are scored on.
pub const HEAD_ROWS: usize = 64;

/// One head of an ambiguous run (a row of `heads.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AmbiguousHead {
    /// Layer.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// Mean positional swap score at the last position.
    pub s_pos: f64,
    /// Mean symbolic swap score.
    pub s_sym: f64,
    /// Its type at the paper's tolerance 0.1 (`positional`, `symbolic`, `none`).
    pub kind: HeadKind,
}

/// Tests an ambiguous run: `options.per_length` agree test samples at each length of
/// `options.lengths` (items; by default [`AMBIGUOUS_SCALES`] x the training items) and as many
/// conflict samples; with `options.heads`, scores its heads.
pub fn measure(
    model: &GptJ,
    config: &RunConfig,
    options: &MeasureOptions,
    run: &Path,
) -> Result<Measured> {
    let data = config
        .ambiguous
        .as_ref()
        .expect("a checked ambiguous run has [ambiguous]");
    let task = data.task()?;
    let items = task.items();
    let plan = plan(items, options.per_length, options.lengths.as_deref());
    let inputs = AmbiguousInputs {
        task: task.clone(),
        seed: config.seed,
        split: Split::Test,
    };
    let rows = accuracy_at_lengths(model, &inputs, &plan, EVAL_MEMORY)?;
    write_lengths(run, &rows)?;
    let conflict = conflict_mechanisms(model, &task, config.seed, options.per_length, EVAL_MEMORY)?;
    write_run_csv(run, "conflict.csv", &[conflict])?;
    let mut heads = None;
    if options.heads {
        let scored = score(model, &task, config.seed)?;
        write_run_csv(run, "heads.csv", &scored)?;
        heads = Some(scored);
    }
    Ok(summary(&rows, items, heads.as_deref()))
}

/// The (length, samples) an ambiguous job tests: `per_length` agree samples at each of
/// `lengths` (items; default [`AMBIGUOUS_SCALES`] x the training `items`).
pub fn plan(items: usize, per_length: usize, lengths: Option<&[usize]>) -> Vec<(usize, usize)> {
    let lengths: Vec<usize> = match lengths {
        Some(l) => l.to_vec(),
        None => AMBIGUOUS_SCALES.iter().map(|s| s * items).collect(),
    };
    lengths.iter().map(|&n| (n, per_length)).collect()
}

/// What an ambiguous job's result records of its `lengths.csv` rows (`items` its training
/// length) and, when measured, its `heads.csv`: test accuracy at the training length, the
/// accuracy at every tested length and the heads' types in letters.
pub fn summary(rows: &[LengthAccuracy], items: usize, heads: Option<&[AmbiguousHead]>) -> Measured {
    Measured {
        test_accuracy: rows
            .iter()
            .find(|r| r.length == items)
            .map(|r| r.accuracy()),
        length_accuracy: rows.iter().map(|r| (r.length, r.accuracy())).collect(),
        layer_types: heads.map(letters),
        ..Measured::default()
    }
}

/// Reads a run's `conflict.csv`.
pub fn read_conflict(run: &Path) -> Result<MechanismFractions> {
    let path = run.join("conflict.csv");
    let rows: Vec<MechanismFractions> = super::read_run_csv(run, "conflict.csv")?;
    let row = rows
        .into_iter()
        .next()
        .ok_or_else(|| crate::SweepError::Job {
            id: run.display().to_string(),
            message: format!("{} has no row", path.display()),
        })?;
    // Every conflict answer is of one kind: the fractions are whole counts of n summing to 1
    // (twenty-fifth pass, S7).
    let parts = [row.positional, row.symbolic, row.neither];
    let n = row.n as f64;
    let counts = parts.iter().all(|f| {
        let c = f * n;
        (0.0..=1.0).contains(f) && (c - c.round()).abs() < 1e-6
    });
    if row.n == 0 || !counts || (parts.iter().sum::<f64>() - 1.0).abs() > 1e-9 {
        return Err(crate::SweepError::Job {
            id: run.display().to_string(),
            message: format!(
                "{}: fractions {parts:?} of {} answers are not whole counts summing to 1, which \
                 every conflict answer gives: a damaged or edited file",
                path.display(),
                row.n
            ),
        });
    }
    Ok(row)
}

/// Every head's swap scores at the last position, averaged over [`HEAD_ROWS`] agree test
/// samples of the training length.
fn score(
    model: &GptJ,
    task: &ropelab_tasks::AmbiguousTask,
    seed: u64,
) -> Result<Vec<AmbiguousHead>> {
    let seq = task.items() + 1;
    let ids: Vec<u32> = (0..HEAD_ROWS as u64)
        .flat_map(|i| task.sample(seed, Kind::Agree(Split::Test), i).ids)
        .collect();
    let ids = Tensor::from_vec(ids, (HEAD_ROWS, seq), &Device::Cpu)
        .map_err(ropelab_analysis::AnalysisError::from)?;
    let queries = vec![vec![seq - 1]; HEAD_ROWS];
    let scores = score_heads(
        model,
        &ids,
        &queries,
        Tau::DEFAULT,
        None,
        false,
        EVAL_MEMORY,
    )?;
    Ok(scores
        .into_iter()
        .map(|h| AmbiguousHead {
            layer: h.layer,
            head: h.head,
            s_pos: h.scores.s_pos,
            s_sym: h.scores.s_sym,
            kind: purity(h.scores, Gamma::DEFAULT),
        })
        .collect())
}

/// The heads' types in letters, one layer after another (`PS`, or `P-|SS` with several heads).
pub fn letters(heads: &[AmbiguousHead]) -> String {
    let layers = heads.iter().map(|h| h.layer + 1).max().unwrap_or(0);
    let mut grid = vec![vec![]; layers];
    for h in heads {
        grid[h.layer].push(h.kind);
    }
    grid_letters(&grid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A conflict table vouched for by its ledger must still count every answer once: whole
    /// counts summing to 1 (twenty-fifth pass, S7).
    #[test]
    fn conflict_fractions_are_whole_counts_summing_to_one() {
        let dir = tempfile::tempdir().unwrap();
        let row = |positional, symbolic, neither| MechanismFractions {
            n: 128,
            positional,
            symbolic,
            neither,
        };
        write_run_csv(dir.path(), "conflict.csv", &[row(0.5, 0.25, 0.25)]).unwrap();
        assert_eq!(read_conflict(dir.path()).unwrap(), row(0.5, 0.25, 0.25));
        for bad in [row(0.5, 0.6, 0.8046875), row(0.5, 0.3, 0.2)] {
            write_run_csv(dir.path(), "conflict.csv", &[bad]).unwrap();
            let err = read_conflict(dir.path()).unwrap_err().to_string();
            assert!(err.contains("not whole counts summing to 1"), "{err}");
        }
    }
}
