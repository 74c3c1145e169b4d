//! The ambiguous task (docs/tasks.md, "The ambiguous task"): an answer that can be found both by
//! position and by content, so that which mechanism a model picks can be measured.
//!
//! A sequence is `items` letter-value tokens (`c3`: letter c, value 3), then one query token
//! (`?c5`: letter c, offset 5), last. The **positional** target is the item `offset` positions
//! back from the query (as in the number task); the **symbolic** target is the one item whose
//! letter is the query's (as in the letter task). Both rules read the last token alone, so
//! either can be carried out by one attention layer: the task's structure favours neither. The
//! answer is the target's **value** (`=3`), not the whole item: an answer naming the item could
//! be read off the bag of items without attending to the match (docs/tasks.md, "Canonical
//! tasks"), and a value binds to its letter only through the item token.
//!
//! - **agree** samples (train, val, test): both rules point to the same item, so either solves
//!   the task; the query letter appears on no other item.
//! - **conflict** samples: the two rules point to different items (the item at the offset has
//!   another letter and another value), so the model's answer says which rule it follows: the
//!   positional value, the symbolic value, or neither.
//! - **length** samples: agree samples with `extra` more items inserted before the others (none
//!   with the query letter), the offset still within the training range: longer inputs, same
//!   answer by either rule.
//!
//! Worked examples (4 items, letters a..h, values 1..4; positions 0..4, the query last):
//! `b2 c3 a1 d4 ?c3` agrees: 4 - 3 = 1 holds `c3`, the item of letter c; the answer is `=3`.
//! `b2 c3 a1 d4 ?c2` is a conflict: 4 - 2 = 2 holds `a1` (positional answer `=1`), the item of
//! letter c is `c3` at 1 (symbolic answer `=3`).
//!
//! Sequences are deterministic per (seed, kind, extra, index); the target position, the query
//! letter and every value are uniform, other items' letters uniform over the letters other than
//! the query's.

use rand::Rng;

use crate::error::{Invalid, TaskError};
use crate::rng::stream;
use crate::{Split, Vocab, PAD};

/// Letters of the default layout.
pub const LETTERS: usize = 16;
/// The most values per letter, and items per sequence, a task may have (a vocabulary of up to
/// 26 x 2 x 4096 + 4096 tokens).
pub const MAX_SIZE: usize = 4096;

/// Values per letter of the default layout (chance is 1 / 8).
pub const VALUES: usize = 8;
/// Items of a training sequence in the default layout.
pub const ITEMS: usize = 16;

/// Which rule set a sample follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Both rules point to the same item (training and in-distribution test).
    Agree(Split),
    /// The rules point to different items.
    Conflict,
    /// An agree sample with `extra` more items before the others.
    Length(usize),
}

impl Kind {
    fn tag(self) -> u64 {
        match self {
            Kind::Agree(split) => split as u64,
            Kind::Conflict => 0x10,
            Kind::Length(extra) => 0x20 ^ ((extra as u64) << 8),
        }
    }
}

/// One sample: its ids, and the positions both rules point to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmbiguousSample {
    /// Token ids: items, the query letter, the offset (last).
    pub ids: Vec<u32>,
    /// Position of the item the offset points to.
    pub positional: usize,
    /// Position of the item with the query letter.
    pub symbolic: usize,
}

impl AmbiguousSample {
    /// The answer id (a value token) under each rule: (positional, symbolic); equal on agree
    /// samples, different on conflict samples.
    pub fn answers(&self, task: &AmbiguousTask) -> (u32, u32) {
        let answer = |pos: usize| task.answer_id(task.value_of(self.ids[pos]));
        (answer(self.positional), answer(self.symbolic))
    }
}

/// What a model's answer to a conflict sample says about its mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// It answered the item the offset points to.
    Positional,
    /// It answered the item with the query letter.
    Symbolic,
    /// Something else.
    Neither,
}

/// Generator and checker of the ambiguous task.
#[derive(Debug, Clone)]
pub struct AmbiguousTask {
    letters: usize,
    values: usize,
    items: usize,
    vocab: Vocab,
}

fn letter_name(l: usize) -> String {
    crate::letter_names(l + 1).pop().unwrap_or_default()
}

impl AmbiguousTask {
    /// The task over `letters` letters, `values` values and `items` items per training
    /// sequence; ids: PAD 0, items `1..=letters*values` (letter-major), queries (letter-major,
    /// offsets `1..=items`), answers `=1..=values`.
    pub fn new(letters: usize, values: usize, items: usize) -> Result<Self, TaskError> {
        let bad = |m: String| Err(TaskError::Layout(format!("ambiguous task: {m}")));
        if !(2..=crate::number::ALPHABET).contains(&letters) {
            return bad(format!(
                "letters = {letters}: needs 2..={} (a conflict needs a second letter)",
                crate::number::ALPHABET
            ));
        }
        if values < 2 {
            return bad(format!(
                "values = {values}: needs at least 2 (a conflict needs two values)"
            ));
        }
        if items < 2 {
            return bad(format!(
                "items = {items}: needs at least 2 (a conflict needs two items)"
            ));
        }
        // Every value and item is a token of each letter: beyond these the vocabulary alone
        // would take gigabytes before any estimate could refuse it (seventh pass, f26).
        for (key, n) in [("values", values), ("items", items)] {
            if n > MAX_SIZE {
                return bad(format!("{key} = {n}: at most {MAX_SIZE}"));
            }
        }
        let mut tokens = vec![PAD.to_owned()];
        for l in 0..letters {
            tokens.extend((1..=values).map(|v| format!("{}{v}", letter_name(l))));
        }
        for l in 0..letters {
            tokens.extend((1..=items).map(|o| format!("?{}{o}", letter_name(l))));
        }
        tokens.extend((1..=values).map(|v| format!("={v}")));
        Ok(Self {
            letters,
            values,
            items,
            vocab: Vocab::new(tokens),
        })
    }

    /// The default layout: 16 letters, 8 values, 16 items.
    pub fn default_layout() -> Self {
        Self::new(LETTERS, VALUES, ITEMS).expect("the default layout is valid")
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// Items of a training sequence.
    pub fn items(&self) -> usize {
        self.items
    }

    fn item_id(&self, letter: usize, value: usize) -> u32 {
        (1 + letter * self.values + value) as u32
    }

    /// The query of `letter` and `offset` (1..=items).
    fn query_id(&self, letter: usize, offset: usize) -> u32 {
        (1 + self.letters * self.values + letter * self.items + offset - 1) as u32
    }

    /// The id of the answer naming value `value` (0-based).
    pub fn answer_id(&self, value: usize) -> u32 {
        (1 + self.letters * (self.values + self.items) + value) as u32
    }

    /// The value (0-based) of item id `id`.
    fn value_of(&self, id: u32) -> usize {
        (id as usize - 1) % self.values
    }

    /// Sample `index` of `kind` for `seed` (see the module docs).
    pub fn sample(&self, seed: u64, kind: Kind, index: u64) -> AmbiguousSample {
        let extra = match kind {
            Kind::Length(e) => e,
            _ => 0,
        };
        let mut rng = stream([seed, 0x414D_4247 ^ kind.tag(), extra as u64, index]);
        let n = self.items + extra;
        let query = rng.random_range(0..self.letters);
        // The positional target lies among the last `items` items, so the offset stays within
        // the training range at any length.
        let positional = extra + rng.random_range(0..self.items);
        let symbolic = match kind {
            Kind::Conflict => {
                let other = rng.random_range(0..self.items - 1);
                let other = extra + other;
                if other >= positional {
                    other + 1
                } else {
                    other
                }
            }
            _ => positional,
        };
        let other_letter = |rng: &mut rand_chacha::ChaCha8Rng| {
            let l = rng.random_range(0..self.letters - 1);
            if l >= query {
                l + 1
            } else {
                l
            }
        };
        let mut ids = Vec::with_capacity(n + 1);
        let mut values: Vec<usize> = (0..n).map(|_| rng.random_range(0..self.values)).collect();
        if symbolic != positional && values[positional] == values[symbolic] {
            // A conflict's two answers differ: shift the positional value by a uniform step.
            values[positional] =
                (values[symbolic] + rng.random_range(1..self.values)) % self.values;
        }
        for (p, &value) in values.iter().enumerate() {
            let letter = if p == symbolic {
                query
            } else {
                other_letter(&mut rng)
            };
            ids.push(self.item_id(letter, value));
        }
        ids.push(self.query_id(query, n - positional));
        AmbiguousSample {
            ids,
            positional,
            symbolic,
        }
    }

    /// Re-derives both targets from the tokens alone: (positional, symbolic) positions; an
    /// error when the sequence is not an instance (wrong token type, offset out of the
    /// sequence, a query letter on no item or on several).
    pub fn check(&self, ids: &[u32]) -> Result<(usize, usize), Invalid> {
        let t = ids.len();
        if t < 3 {
            return Err(Invalid::Empty);
        }
        let n_items = (self.letters * self.values) as u32;
        let wrong = |pos: usize| Invalid::WrongType {
            pos,
            token: self.vocab.token(ids[pos]).unwrap_or("<unk>").to_owned(),
        };
        for (pos, &id) in ids[..t - 1].iter().enumerate() {
            if id == 0 || id > n_items {
                return Err(wrong(pos));
            }
        }
        let q = ids[t - 1]
            .checked_sub(n_items + 1)
            .map(|q| q as usize)
            .filter(|&q| q < self.letters * self.items)
            .ok_or_else(|| wrong(t - 1))?;
        let (query, offset) = (q / self.items, q % self.items + 1);
        let positional = (t - 1).checked_sub(offset).ok_or_else(|| wrong(t - 1))?;
        let letter_of = |id: u32| (id as usize - 1) / self.values;
        let mut with_query = (0..t - 1).filter(|&p| letter_of(ids[p]) == query);
        let symbolic = with_query.next().ok_or_else(|| wrong(t - 1))?;
        if with_query.next().is_some() {
            return Err(wrong(t - 1));
        }
        Ok((positional, symbolic))
    }

    /// The mechanism an answer id `predicted` to the conflict sample `sample` shows.
    pub fn mechanism(&self, sample: &AmbiguousSample, predicted: u32) -> Mechanism {
        let (p, s) = sample.answers(self);
        if predicted == p {
            Mechanism::Positional
        } else if predicted == s {
            Mechanism::Symbolic
        } else {
            Mechanism::Neither
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(task: &AmbiguousTask, s: &str) -> Vec<u32> {
        s.split(' ').map(|t| task.vocab().id(t).unwrap()).collect()
    }

    #[test]
    fn the_worked_examples() {
        let task = AmbiguousTask::new(8, 4, 4).unwrap();
        // 5 - 3 = 2 holds a1, the c item is at 1: a conflict.
        let ids = tokens(&task, "b2 c3 a1 d4 ?c2");
        assert_eq!(task.check(&ids), Ok((2, 1)));
        let s = AmbiguousSample {
            ids,
            positional: 2,
            symbolic: 1,
        };
        let answer = |t: &str| task.vocab().id(t).unwrap();
        assert_eq!(s.answers(&task), (answer("=1"), answer("=3")));
        let ids = tokens(&task, "b2 c3 a1 d4 ?c3");
        assert_eq!(task.check(&ids), Ok((1, 1)));
        // Two items of the query letter, or none, are not instances.
        assert!(task.check(&tokens(&task, "c2 c3 a1 d4 ?c3")).is_err());
        assert!(task.check(&tokens(&task, "b2 e3 a1 d4 ?c3")).is_err());
        // Offset 4 reaches the first item, offset 1 the item just before the query.
        assert_eq!(task.check(&tokens(&task, "b2 c3 a1 d4 ?c4")), Ok((0, 1)));
        assert_eq!(task.check(&tokens(&task, "b2 c3 a1 d4 ?c1")), Ok((3, 1)));
        // Offsets beyond the sequence are not instances: 2 items, offset 3.
        assert!(task.check(&tokens(&task, "c3 a1 ?c3")).is_err());
        // Longer inputs keep the training range of offsets: 6 items, offset 4 -> position 2.
        assert_eq!(
            task.check(&tokens(&task, "e1 f1 b2 c3 a1 d4 ?c4")),
            Ok((2, 3))
        );
        // A query in an item slot, an item in the query slot.
        assert!(task.check(&tokens(&task, "b2 ?c1 a1 d4 ?c3")).is_err());
        assert!(task.check(&tokens(&task, "b2 c3 a1 d4 c3")).is_err());
    }

    #[test]
    fn every_kind_validates_and_its_rules_agree_or_conflict() {
        let task = AmbiguousTask::default_layout();
        for i in 0..500 {
            for (kind, agree) in [
                (Kind::Agree(Split::Train), true),
                (Kind::Conflict, false),
                (Kind::Length(48), true),
            ] {
                let s = task.sample(3, kind, i);
                assert_eq!(
                    task.check(&s.ids),
                    Ok((s.positional, s.symbolic)),
                    "{kind:?}"
                );
                let (p, q) = s.answers(&task);
                assert_eq!(p == q, agree, "{kind:?} {s:?}");
                let extra = if let Kind::Length(e) = kind { e } else { 0 };
                assert_eq!(s.ids.len(), ITEMS + extra + 1);
                // The offset stays within the training range.
                assert!(s.ids.len() - 1 - s.positional <= ITEMS);
            }
        }
        assert_eq!(
            task.sample(3, Kind::Conflict, 7),
            task.sample(3, Kind::Conflict, 7)
        );
        assert_ne!(
            task.sample(3, Kind::Conflict, 7),
            task.sample(4, Kind::Conflict, 7)
        );
        assert_ne!(
            task.sample(3, Kind::Agree(Split::Train), 7),
            task.sample(3, Kind::Agree(Split::Test), 7)
        );
    }

    #[test]
    fn targets_are_uniform_over_positions() {
        // Neither the target position nor its distance from the conflict's other item is
        // fixed: every position is a positional target about 1/16 of the time (5 sigma).
        let task = AmbiguousTask::default_layout();
        let mut counts = [0usize; ITEMS];
        let draws = 16_000;
        for i in 0..draws {
            counts[task.sample(0, Kind::Conflict, i).positional] += 1;
        }
        for c in counts {
            let f = c as f64 / draws as f64;
            assert!(
                (f - 1.0 / 16.0).abs() < 5.0 * (0.0586f64 / draws as f64).sqrt(),
                "{counts:?}"
            );
        }
    }

    #[test]
    fn no_statistic_but_the_two_rules_gives_the_answer() {
        // The answer's value is uniform given the query token: a lookup table
        // fitted on 8,000 samples scores chance (1/8) on 8,000 others. The bag of items is a
        // weak prior only: the answer is one of the values present, so guessing the most
        // frequent value among the items scores about 0.26 (measured), far below what a rule
        // gives (1.0); this is why the experiment counts mechanisms on the conflict split,
        // where both candidate values are present, rather than reading accuracy alone.
        let task = AmbiguousTask::default_layout();
        let train = |i| task.sample(0, Kind::Agree(Split::Train), i);
        let mut table = std::collections::HashMap::<u32, [usize; VALUES]>::new();
        for i in 0..8000 {
            let s = train(i);
            let t = s.ids.len();
            let (answer, _) = s.answers(&task);
            let value = (answer - task.answer_id(0)) as usize;
            table.entry(s.ids[t - 1]).or_default()[value] += 1;
        }
        let (mut lookup, mut majority) = (0usize, 0usize);
        let n = 8000;
        for i in 0..n {
            let s = task.sample(0, Kind::Agree(Split::Test), i);
            let t = s.ids.len();
            let (answer, _) = s.answers(&task);
            let value = (answer - task.answer_id(0)) as usize;
            let guess = table
                .get(&s.ids[t - 1])
                .map_or(0, |c| (0..VALUES).max_by_key(|&v| c[v]).unwrap_or(0));
            lookup += usize::from(guess == value);
            let mut counts = [0usize; VALUES];
            for &id in &s.ids[..t - 1] {
                counts[task.value_of(id)] += 1;
            }
            let most = (0..VALUES).max_by_key(|&v| counts[v]).unwrap_or(0);
            majority += usize::from(most == value);
        }
        // 5 sigma of a binomial at 1/8 over 8,000 samples: 0.018.
        let lookup = lookup as f64 / n as f64;
        assert!((lookup - 0.125).abs() < 0.03, "query lookup: {lookup}");
        let majority = majority as f64 / n as f64;
        assert!((0.2..0.32).contains(&majority), "bag majority: {majority}");
    }

    #[test]
    fn mechanisms_follow_the_answer() {
        let task = AmbiguousTask::default_layout();
        let s = task.sample(1, Kind::Conflict, 0);
        let (p, q) = s.answers(&task);
        assert_eq!(task.mechanism(&s, p), Mechanism::Positional);
        assert_eq!(task.mechanism(&s, q), Mechanism::Symbolic);
        assert_eq!(task.mechanism(&s, 0), Mechanism::Neither);
        assert_eq!(
            task.vocab().token(p).map(|t| t.starts_with('=')),
            Some(true)
        );
    }

    #[test]
    fn bad_layouts_are_one_line_errors() {
        for (l, v, n, key) in [
            (1, 4, 16, "letters"),
            (8, 1, 16, "values"),
            (8, 4, 1, "items"),
            // Sizes whose vocabulary alone would exhaust memory (seventh pass, f26).
            (
                8,
                1_000_000_000_000,
                16,
                "values = 1000000000000: at most 4096",
            ),
            (8, 4, 100_000_000, "items = 100000000: at most 4096"),
        ] {
            let e = AmbiguousTask::new(l, v, n).unwrap_err().to_string();
            assert!(e.contains(key) && !e.contains('\n'), "{e}");
        }
    }
}
