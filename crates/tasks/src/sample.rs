//! One generated task instance and the answer found by following its chain.

use serde::Serialize;

use crate::Vocab;

/// A labelled instance: the input ids (query last) and the answer the chain leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Input token ids, `extra + target_window + pre_window + 1` of them, query last.
    pub ids: Vec<u32>,
    /// Id of the answer token (the token at `target_pos`).
    pub answer_id: u32,
    /// Number of jumps from the query to the answer.
    pub hops: usize,
    /// Index in `ids` of the position the chain ends at.
    pub target_pos: usize,
}

/// Where a chain ends and how many jumps it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Solution {
    /// Position of the target-type token the chain lands on.
    pub answer_pos: usize,
    /// Number of jumps from the query.
    pub hops: usize,
}

/// The JSON Lines form of a sample written by `ropelab gen`.
#[derive(Debug, Serialize)]
pub struct SampleRecord<'a> {
    /// Index of the sample in its dataset (with the seed and split, it regenerates the sample).
    pub index: usize,
    /// Input tokens as strings.
    pub tokens: Vec<&'a str>,
    /// Input token ids.
    pub ids: &'a [u32],
    /// Answer token string.
    pub answer: &'a str,
    /// Answer token id.
    pub answer_id: u32,
    /// Hop count.
    pub hops: usize,
    /// Index of the answer's position in `tokens`.
    pub target_pos: usize,
}

impl<'a> SampleRecord<'a> {
    /// The record of `sample` (dataset index `index`), with strings from `vocab`.
    pub fn new(index: usize, sample: &'a Sample, vocab: &'a Vocab) -> Self {
        let name = |id| vocab.token(id).unwrap_or("<unk>");
        Self {
            index,
            tokens: sample.ids.iter().map(|&id| name(id)).collect(),
            ids: &sample.ids,
            answer: name(sample.answer_id),
            answer_id: sample.answer_id,
            hops: sample.hops,
            target_pos: sample.target_pos,
        }
    }
}
