//! # ropelab-tasks
//!
//! The two structurally equal multi-hop tasks of the main paper (docs/tasks.md):
//! - the **number** task (positional): integers are backward offsets;
//! - the **letter** task (symbolic): a token is found by its first letter.
//!
//! Generators are deterministic per (seed, split, index), balanced over every combination of
//! answer slot, answer token and hop count, and each sample re-validates from its tokens alone.
//! [`language`] adds the formal languages of the expressivity experiments (labelled strings for
//! an EOS classifier), [`offset`] the fixed-offset retrieval of the implicit-bias experiment.
//! [`canonical`] holds the frequency paper's Index, Retrieval and Partial Induction tasks;
//! [`ambiguous`] a task both a positional and a symbolic rule solve, to measure which one a
//! model picks.
//! [`prompt`] builds the natural-language 1-hop versions for pretrained models.
//! This crate has no tensor dependency.

pub mod ambiguous;
pub mod canonical;
mod dataset;
mod error;
mod jsonl;
pub mod language;
mod layout;
pub mod letter;
pub mod number;
pub mod offset;
pub mod prompt;
mod rng;
mod sample;
mod task;
mod vocab;

pub use ambiguous::{AmbiguousSample, AmbiguousTask};
pub use canonical::{CanonicalKind, CanonicalSample, CanonicalTask};
pub use dataset::{summarize, Dataset, Split, Summary};
pub use error::{Invalid, TaskError};
pub use jsonl::{line_bytes, sample_bytes, samples_work, write_jsonl, WriteError, SAMPLE_WORK};
pub use language::{Labelled, Language, LanguageSamples, Negatives};
pub use layout::Layout;
pub use letter::LetterTask;
pub use number::NumberTask;
pub use offset::OffsetTask;
pub use rng::Permutation;
pub use sample::{Sample, SampleRecord, Solution};
pub use task::{Task, TaskKind};
pub use vocab::{letter_names, Vocab, PAD};
