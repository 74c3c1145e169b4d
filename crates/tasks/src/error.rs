//! Errors of the task crate: bad settings and why a sample failed validation.

/// A setting or request the task generators cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// The window sizes or hop counts cannot produce the task.
    #[error("impossible layout: {0}")]
    Layout(String),
    /// A dataset (or prompt set) of zero samples was requested.
    #[error("the number of samples must be at least 1")]
    EmptyDataset,
    /// A task name that is not `number`, `letter`, `language`, `offset`, `canonical` or
    /// `ambiguous`.
    #[error(
        "unknown task {0:?} (expected `number`, `letter`, `language`, `offset`, `canonical` or \
         `ambiguous`)"
    )]
    UnknownTask(String),
    /// A multi-hop generator or analysis was asked for a formal-language or offset run.
    #[error("the {0} task has no multi-hop layout (this needs a number or letter task)")]
    NotMultiHop(crate::TaskKind),
    /// A language name that is none of the formal languages.
    #[error(
        "unknown language {0:?} (expected aa-star, ab-star, a-sigma, sigma-a, sigma-ab-sigma or \
         parity, or the pattern: (aa)*, (ab)*, a Sigma*, Sigma* a, Sigma* ab Sigma*, PARITY)"
    )]
    UnknownLanguage(String),
    /// A negative-sampling name that is neither `uniform` nor `near-miss`.
    #[error("unknown negatives {0:?} (expected `uniform` or `near-miss`)")]
    UnknownNegatives(String),
    /// A split name that is not `train`, `val` or `test`.
    #[error("unknown split {0:?} (expected `train`, `val` or `test`)")]
    UnknownSplit(String),
    /// A sample index at or past the dataset size.
    #[error("sample index {index} is out of range for a dataset of {len} samples")]
    IndexOutOfRange { index: usize, len: usize },
    /// The layout is so small that a combination has no content in the requested split.
    #[error(
        "could not draw sample {index} in the {split} split after {attempts} attempts: \
         the layout is too small to keep the splits disjoint"
    )]
    SplitExhausted {
        index: usize,
        split: &'static str,
        attempts: u32,
    },
    /// A canonical-task setting or sample that is not valid.
    #[error("canonical task: {0}")]
    Canonical(String),
    /// A fixed-offset retrieval setting that cannot produce the task.
    #[error("fixed-offset retrieval: {0}")]
    Offset(String),
    /// A prompt window size the prompt version cannot build.
    #[error("impossible prompt: {0}")]
    Prompt(String),
}

/// Why a token sequence (or a labelled sample) is not a valid task instance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The sequence is empty.
    #[error("empty sequence")]
    Empty,
    /// A token id outside the vocabulary, or the padding token.
    #[error("position {pos}: token id {id} is not a task token")]
    BadId { pos: usize, id: u32 },
    /// A token of the wrong type for its window (e.g. a letter in the pre-target window).
    #[error("position {pos}: token {token:?} has the wrong type for its window")]
    WrongType { pos: usize, token: String },
    /// The sequence length does not match the layout.
    #[error("length {got} does not match the layout's {expected}")]
    Length { got: usize, expected: usize },
    /// A number-task offset that jumps before the start of the (effective) window.
    #[error("position {pos}: offset {offset} leaves the sequence")]
    OffsetOutOfRange { pos: usize, offset: usize },
    /// A letter-task step whose letter starts no earlier token.
    #[error("position {pos}: no earlier token starts with {letter:?}")]
    DeadEnd { pos: usize, letter: char },
    /// A letter-task step whose letter starts more than one earlier token.
    #[error("position {pos}: {count} earlier tokens start with {letter:?}")]
    Ambiguous {
        pos: usize,
        letter: char,
        count: usize,
    },
    /// The chain lands outside the effective target window.
    #[error("the chain lands at position {pos}, outside the target window")]
    LandsOutside { pos: usize },
    /// The label disagrees with the answer found by following the chain.
    #[error("label says {field} = {label}, the chain gives {found}")]
    Label {
        field: &'static str,
        label: String,
        found: String,
    },
    /// A hop count the layout does not allow.
    #[error("{hops} hops is not one of the layout's hop counts")]
    HopCount { hops: usize },
}
