//! Every seed's datasets: generated, every sample re-validated, the test splits written.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use ropelab_io::AtomicFile;
use ropelab_tasks::{summarize, write_jsonl, Dataset, Split, Summary, Task, TaskKind};
use serde::Serialize;

use crate::{Progress, StudyConfig};

/// One split of one task and seed: its summary (samples, valid, length, hop counts).
#[derive(Debug, Clone, Serialize)]
pub struct DatasetRow {
    /// Seed.
    pub seed: u64,
    /// Task.
    pub task: TaskKind,
    /// Split.
    pub split: Split,
    /// Sizes, validity and hop counts.
    #[serde(flatten)]
    pub summary: Summary,
    /// Wall time of generation and validation.
    pub seconds: f64,
}

/// Generates every seed's datasets, re-validates every sample and writes each test split to
/// `out/seed-S/data/<task>-test.jsonl`.
pub fn generate(
    config: &StudyConfig,
    out: &Path,
    progress: &dyn Progress,
) -> Result<Vec<DatasetRow>> {
    let mut rows = Vec::new();
    for &seed in &config.seeds {
        for kind in TaskKind::ALL {
            let task = Task::new(kind, config.tasks.layout())?;
            for (split, n) in [
                (Split::Train, config.tasks.train),
                (Split::Val, config.tasks.val),
                (Split::Test, config.tasks.test),
            ] {
                let data = Dataset::new(task.clone(), seed, split, n, 0)?;
                let start = Instant::now();
                let stage = progress.stage(&format!("{kind} {split}"), n as u64);
                let mut done = 0;
                let summary = summarize(&data, || {
                    done += 1;
                    stage.set(done);
                })?;
                drop(stage);
                let seconds = start.elapsed().as_secs_f64();
                if split == Split::Test {
                    let path = ropelab_analysis::StudyDir::new(out).test_data(seed, kind);
                    let write = || -> std::io::Result<()> {
                        let mut file = AtomicFile::create(&path)?;
                        write_jsonl(&data, &mut file, || {}).map_err(std::io::Error::other)?;
                        file.commit()
                    };
                    write().with_context(|| format!("cannot write {}", path.display()))?;
                }
                rows.push(DatasetRow {
                    seed,
                    task: kind,
                    split,
                    summary,
                    seconds,
                });
            }
        }
    }
    Ok(rows)
}

/// Samples that failed validation, over all rows.
pub fn invalid(rows: &[DatasetRow]) -> usize {
    rows.iter()
        .map(|r| r.summary.samples - r.summary.valid)
        .sum()
}
