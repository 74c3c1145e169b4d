//! One handle over both tasks: build from a kind and a layout, draw, solve and validate.

use std::fmt;
use std::str::FromStr;

use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{letter, number, Invalid, Layout, LetterTask, NumberTask, Sample, TaskError, Vocab};

/// Which task: the positional number task, the symbolic letter task (the two multi-hop tasks),
/// or a formal language (labelled strings, [`crate::language`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    /// Integers are backward offsets (positional).
    Number,
    /// Tokens are found by their first letter (symbolic).
    Letter,
    /// Membership in a formal language, read by an EOS classifier (the run's `[language]`
    /// table says which); it has no multi-hop layout, so [`Task::new`] refuses it.
    Language,
    /// Fixed-offset retrieval (the run's `[offset]` table says the vocabulary, offset and
    /// lengths); no multi-hop layout either.
    Offset,
    /// A canonical task of the frequency paper (the run's `[canonical]` table says which);
    /// no multi-hop layout either.
    Canonical,
    /// The ambiguous task (docs/tasks.md, "The ambiguous task"): answerable by position and by
    /// content alike in training (the run's `[ambiguous]` table says its sizes); no multi-hop
    /// layout either.
    Ambiguous,
}

impl TaskKind {
    /// The two multi-hop tasks, number first.
    pub const ALL: [TaskKind; 2] = [TaskKind::Number, TaskKind::Letter];

    /// The lowercase name (`number`, `letter`, `language`, `offset`, `canonical`,
    /// `ambiguous`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Number => "number",
            TaskKind::Letter => "letter",
            TaskKind::Language => "language",
            TaskKind::Offset => "offset",
            TaskKind::Canonical => "canonical",
            TaskKind::Ambiguous => "ambiguous",
        }
    }

    /// Whether this is one of the two multi-hop tasks (number or letter).
    pub fn is_multi_hop(self) -> bool {
        matches!(self, TaskKind::Number | TaskKind::Letter)
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for TaskKind {
    type Err = TaskError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "number" => Ok(TaskKind::Number),
            "letter" => Ok(TaskKind::Letter),
            "language" => Ok(TaskKind::Language),
            "offset" => Ok(TaskKind::Offset),
            "canonical" => Ok(TaskKind::Canonical),
            "ambiguous" => Ok(TaskKind::Ambiguous),
            other => Err(TaskError::UnknownTask(other.to_owned())),
        }
    }
}

/// A task generator/checker for one layout.
#[derive(Debug, Clone)]
pub enum Task {
    /// The number task.
    Number(NumberTask),
    /// The letter task.
    Letter(LetterTask),
}

impl Task {
    /// The task of `kind` for `layout`, or why the layout is impossible for it.
    pub fn new(kind: TaskKind, layout: Layout) -> Result<Self, TaskError> {
        Ok(match kind {
            TaskKind::Number => Task::Number(NumberTask::new(layout)?),
            TaskKind::Letter => Task::Letter(LetterTask::new(layout)?),
            TaskKind::Language | TaskKind::Offset | TaskKind::Canonical | TaskKind::Ambiguous => {
                return Err(TaskError::NotMultiHop(kind))
            }
        })
    }

    /// Which task this is.
    pub fn kind(&self) -> TaskKind {
        match self {
            Task::Number(_) => TaskKind::Number,
            Task::Letter(_) => TaskKind::Letter,
        }
    }

    /// The layout the task was built for.
    pub fn layout(&self) -> &Layout {
        match self {
            Task::Number(t) => t.layout(),
            Task::Letter(t) => t.layout(),
        }
    }

    /// The task vocabulary.
    pub fn vocab(&self) -> &Vocab {
        match self {
            Task::Number(t) => t.vocab(),
            Task::Letter(t) => t.vocab(),
        }
    }

    /// Number of combinations the balanced datasets cycle through.
    pub fn n_combos(&self) -> usize {
        match self {
            Task::Number(t) => t.n_combos(),
            Task::Letter(t) => t.n_combos(),
        }
    }

    /// Hop count of combination `combo`.
    pub fn combo_hops(&self, combo: usize) -> usize {
        match self {
            Task::Number(t) => t.combo_hops(combo),
            Task::Letter(t) => t.combo_hops(combo),
        }
    }

    /// Draws one instance of combination `combo` with `extra` extension tokens.
    pub fn draw(&self, combo: usize, extra: usize, rng: &mut ChaCha8Rng) -> Sample {
        match self {
            Task::Number(t) => t.draw(combo, extra, rng),
            Task::Letter(t) => t.draw(combo, extra, rng),
        }
    }

    /// Follows the chain of a token sequence (strings), query last.
    pub fn solve(&self, tokens: &[&str]) -> Result<crate::Solution, Invalid> {
        match self {
            Task::Number(_) => number::solve(tokens),
            Task::Letter(_) => letter::solve(tokens),
        }
    }

    /// The positions the chain of a token sequence visits, query first, answer last.
    pub fn chain(&self, tokens: &[&str]) -> Result<Vec<usize>, Invalid> {
        match self {
            Task::Number(_) => number::chain(tokens),
            Task::Letter(_) => letter::chain(tokens),
        }
    }

    /// Re-follows the chain from the tokens alone and checks the sample's layout, token types,
    /// answer, answer position and hop count. The extension length is read off the length.
    pub fn validate(&self, sample: &Sample) -> Result<(), Invalid> {
        let core = self.layout().core_len();
        let extra = sample.ids.len().checked_sub(core).ok_or(Invalid::Length {
            got: sample.ids.len(),
            expected: core,
        })?;
        match self {
            Task::Number(t) => t.check_structure(&sample.ids, extra)?,
            Task::Letter(t) => t.check_structure(&sample.ids, extra)?,
        }
        let vocab = self.vocab();
        let tokens: Vec<&str> = sample
            .ids
            .iter()
            .map(|&id| vocab.token(id).unwrap_or_default())
            .collect();
        let found = self.solve(&tokens)?;
        if found.answer_pos < extra {
            return Err(Invalid::LandsOutside {
                pos: found.answer_pos,
            });
        }
        let label = |field, label: String, found: String| {
            Err(Invalid::Label {
                field,
                label,
                found,
            })
        };
        if found.answer_pos != sample.target_pos {
            return label(
                "target_pos",
                sample.target_pos.to_string(),
                found.answer_pos.to_string(),
            );
        }
        if sample.ids[found.answer_pos] != sample.answer_id {
            let name = |id| vocab.token(id).unwrap_or("<unk>").to_owned();
            return label(
                "answer",
                name(sample.answer_id),
                name(sample.ids[found.answer_pos]),
            );
        }
        if found.hops != sample.hops {
            return label("hops", sample.hops.to_string(), found.hops.to_string());
        }
        if !self.layout().hops.contains(&found.hops) {
            return Err(Invalid::HopCount { hops: found.hops });
        }
        Ok(())
    }
}
