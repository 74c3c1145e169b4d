//! JSON Lines output of a dataset: one [`SampleRecord`] per line.

use std::io::{self, Write};

use crate::{Dataset, SampleRecord};

/// Failure while writing a dataset: a sample could not be drawn, or the writer failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The dataset could not produce a sample.
    #[error(transparent)]
    Task(#[from] crate::TaskError),
    /// The writer failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Fixed part of a line: the field names, index, answer id, hops, target position, braces.
const LINE_OVERHEAD: u64 = 160;

/// The work of generating and validating one training or validation sample, counted as
/// arithmetic for the time estimate: 200,000 operations, 1 microsecond at the assumed rate, a
/// lower bound (measured: the default study's 192,000 training samples of one task and seed in
/// 0.59 s on 2 cores, 3 microseconds each).
pub const SAMPLE_WORK: u64 = 200_000;

/// The arithmetic a time estimate counts for drawing `dataset`'s samples: [`SAMPLE_WORK`] per
/// sample of up to 64 tokens, in proportion beyond. Saturating.
pub fn samples_work(dataset: &Dataset, samples: u64) -> u64 {
    let per = SAMPLE_WORK.saturating_mul((dataset.seq_len() as u64).div_ceil(64).max(1));
    per.saturating_mul(samples)
}

/// Upper estimate of the bytes of one line `write_jsonl` writes for `dataset`: per input
/// token its string (the vocabulary's longest, quoted) and its id (the largest id's digits),
/// plus the answer and the fixed fields. Saturating; computed without drawing a sample.
pub fn line_bytes(dataset: &Dataset) -> u64 {
    let vocab = dataset.task().vocab();
    let longest = vocab.tokens().iter().map(String::len).max().unwrap_or(0) as u64;
    let digits = vocab.len().max(1).to_string().len() as u64;
    let per_token = (longest + 3) + (digits + 1);
    (dataset.seq_len() as u64)
        .saturating_mul(per_token)
        .saturating_add(LINE_OVERHEAD + longest)
}

/// Upper estimate of the memory one sample takes while it is drawn and written: its ids and
/// its tokens' string slices (about 24 bytes a token), rounded up to 32.
pub fn sample_bytes(dataset: &Dataset) -> u64 {
    (dataset.seq_len() as u64).saturating_mul(32)
}

/// Writes every sample of `dataset` as one JSON object per line, calling `tick` after each.
pub fn write_jsonl(
    dataset: &Dataset,
    mut out: impl Write,
    mut tick: impl FnMut(),
) -> Result<(), WriteError> {
    let vocab = dataset.task().vocab();
    for index in 0..dataset.len() {
        let sample = dataset.sample(index)?;
        serde_json::to_writer(&mut out, &SampleRecord::new(index, &sample, vocab))
            .map_err(io::Error::from)?;
        out.write_all(b"\n")?;
        tick();
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Layout, Split, Task, TaskKind};

    /// The estimate bounds every written line from above, and is not loose by more than 2x.
    #[test]
    fn line_estimates_bound_the_written_lines() {
        for kind in [TaskKind::Number, TaskKind::Letter] {
            for extra in [0, 37] {
                let task = Task::new(kind, Layout::default()).unwrap();
                let data = Dataset::new(task, 3, Split::Val, 40, extra).unwrap();
                let mut out = vec![];
                write_jsonl(&data, &mut out, || {}).unwrap();
                let text = String::from_utf8(out).unwrap();
                let longest = text.lines().map(str::len).max().unwrap() as u64;
                let estimate = line_bytes(&data);
                assert!(
                    longest < estimate,
                    "{kind} +{extra}: {longest} vs {estimate}"
                );
                assert!(
                    estimate < 2 * longest,
                    "{kind} +{extra}: {longest} vs {estimate}"
                );
            }
        }
    }
}
