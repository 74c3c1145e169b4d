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
