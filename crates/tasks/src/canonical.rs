//! The three canonical tasks of the frequency paper (docs/tasks.md#canonical-tasks), each
//! solved by one attention head that copies the token it attends to:
//! - **Index** (purely positional): `len` symbols, then a query naming a position p; the
//!   answer is the symbol at p.
//! - **Retrieval** (purely symbolic): `len` items (symbol, attribute) with distinct symbols,
//!   then a query naming a symbol; the answer is the attribute bound to it.
//! - **Partial Induction** (neither): items whose symbols repeat, then a query naming a symbol;
//!   the answer is the attribute of the **last** item holding it (match the symbol, prefer the
//!   most recent).
//!
//! One vocabulary serves all three: item tokens `symbol * attributes + attribute`
//! (ids 0 .. S·A), then the query tokens (Index: one per position; the others: one per
//! symbol), then (Retrieval and Partial Induction) one answer token per attribute. Index
//! answers with the item (its symbol); the others with the attribute token, so the answer is
//! bound to the symbol only through attention (an answer naming the whole item could be read
//! off the bag of items without attending). The answer is read at the last (query) position.
//! The answer's position is uniform over 0 .. len (a sample's index fixes it: index mod len),
//! so accuracy per answer position is measured on equal shares.

use std::fmt;
use std::str::FromStr;

use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::dataset::Split;
use crate::error::TaskError;
use crate::rng::stream;

/// Which canonical task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CanonicalKind {
    /// The symbol at a given position.
    Index,
    /// The item holding a given symbol (symbols distinct).
    Retrieval,
    /// The last item holding a given symbol (symbols repeat).
    Partial,
}

impl CanonicalKind {
    /// Every kind.
    pub const ALL: [CanonicalKind; 3] = [
        CanonicalKind::Index,
        CanonicalKind::Retrieval,
        CanonicalKind::Partial,
    ];

    /// The name (`index`, `retrieval`, `partial`).
    pub fn name(self) -> &'static str {
        match self {
            CanonicalKind::Index => "index",
            CanonicalKind::Retrieval => "retrieval",
            CanonicalKind::Partial => "partial",
        }
    }
}

impl fmt::Display for CanonicalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CanonicalKind {
    type Err = TaskError;
    fn from_str(s: &str) -> Result<Self, TaskError> {
        CanonicalKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                TaskError::Canonical(format!(
                    "unknown canonical task {s:?} (expected index, retrieval or partial)"
                ))
            })
    }
}

/// A canonical task: its kind, context length and vocabulary sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CanonicalTask {
    /// Which task.
    pub kind: CanonicalKind,
    /// Items before the query.
    pub len: usize,
    /// Symbols.
    pub symbols: usize,
    /// Attributes per symbol (Index: 1, the items are the symbols).
    pub attributes: usize,
}

/// One sample: the tokens, the answer and where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalSample {
    /// `len` item tokens then the query token.
    pub ids: Vec<u32>,
    /// The answer token id (Index: the item; the others: the attribute's answer token).
    pub answer: u32,
    /// The position of the answer's item (0 .. len).
    pub answer_pos: usize,
}

impl CanonicalTask {
    /// The task, or why its sizes cannot produce it.
    pub fn new(
        kind: CanonicalKind,
        len: usize,
        symbols: usize,
        attributes: usize,
    ) -> Result<Self, TaskError> {
        let t = Self {
            kind,
            len,
            symbols,
            attributes,
        };
        t.check()?;
        Ok(t)
    }

    /// Checks the sizes: at least 2 items and 2 symbols; Index with 1 attribute; Retrieval with
    /// as many symbols as items (they are distinct); Partial with at least 2 attributes (a
    /// repeated symbol must be able to change its item).
    pub fn check(&self) -> Result<(), TaskError> {
        let bad = |m: String| Err(TaskError::Canonical(m));
        if self.len < 2 || self.symbols < 2 {
            return bad(format!(
                "{} needs at least 2 items and 2 symbols, got len {} and {} symbols",
                self.kind, self.len, self.symbols
            ));
        }
        if self.attributes == 0 {
            return bad("attributes must be at least 1".into());
        }
        match self.kind {
            CanonicalKind::Index if self.attributes != 1 => bad(format!(
                "index has no attributes (set attributes = 1, got {})",
                self.attributes
            )),
            CanonicalKind::Retrieval if self.symbols < self.len => bad(format!(
                "retrieval needs distinct symbols: {} symbols cannot fill {} items",
                self.symbols, self.len
            )),
            CanonicalKind::Partial if self.attributes < 2 => {
                bad("partial induction needs at least 2 attributes".into())
            }
            _ if self.vocab() > u32::MAX as usize / 2 => bad(format!(
                "len {}, symbols {} and attributes {} give a vocabulary of {} tokens, more \
                     than {} (make them smaller)",
                self.len,
                self.symbols,
                self.attributes,
                self.vocab(),
                u32::MAX / 2
            )),
            _ => Ok(()),
        }
    }

    /// Item tokens (ids 0 .. items).
    pub fn items(&self) -> usize {
        self.symbols * self.attributes
    }

    /// Query tokens (after the items).
    pub fn queries(&self) -> usize {
        match self.kind {
            CanonicalKind::Index => self.len,
            _ => self.symbols,
        }
    }

    /// Answer tokens after the queries (Retrieval and Partial Induction: one per attribute).
    pub fn answers(&self) -> usize {
        match self.kind {
            CanonicalKind::Index => 0,
            _ => self.attributes,
        }
    }

    /// Vocabulary size: items, queries, answers.
    pub fn vocab(&self) -> usize {
        self.items() + self.queries() + self.answers()
    }

    /// The answer token of the item `item`.
    fn answer_of(&self, item: u32) -> u32 {
        match self.kind {
            CanonicalKind::Index => item,
            _ => (self.items() + self.queries()) as u32 + item % self.attributes as u32,
        }
    }

    /// Tokens per sample (items and the query).
    pub fn seq_len(&self) -> usize {
        self.len + 1
    }

    fn item(&self, symbol: usize, attribute: usize) -> u32 {
        (symbol * self.attributes + attribute) as u32
    }

    fn symbol_of(&self, item: u32) -> usize {
        item as usize / self.attributes
    }

    /// Sample `index` of `split` for `seed`; its answer sits at position `index mod len`.
    pub fn sample(&self, seed: u64, split: Split, index: u64) -> CanonicalSample {
        let mut rng = stream([seed, 0x4341_4E4F ^ split as u64, self.kind as u64, index]);
        let p = (index % self.len as u64) as usize;
        let (s, a) = (self.symbols, self.attributes);
        let (mut ids, query) = match self.kind {
            CanonicalKind::Index => {
                let ids: Vec<u32> = (0..self.len)
                    .map(|_| rng.random_range(0..s) as u32)
                    .collect();
                (ids, self.items() + p)
            }
            CanonicalKind::Retrieval => {
                let mut symbols: Vec<usize> = (0..s).collect();
                symbols.shuffle(&mut rng);
                let ids: Vec<u32> = symbols[..self.len]
                    .iter()
                    .map(|&sym| self.item(sym, rng.random_range(0..a)))
                    .collect();
                let q = self.items() + symbols[p];
                (ids, q)
            }
            CanonicalKind::Partial => {
                // The queried symbol sits at p with attribute x, also (when p > 0) at one or
                // more earlier positions with other attributes, and never after p.
                let q = rng.random_range(0..s);
                let x = rng.random_range(0..a);
                let mut ids = vec![0u32; self.len];
                for (i, id) in ids.iter_mut().enumerate() {
                    let sym = if i > p {
                        let o = rng.random_range(0..s - 1);
                        if o >= q {
                            o + 1
                        } else {
                            o
                        }
                    } else {
                        rng.random_range(0..s)
                    };
                    *id = self.item(sym, rng.random_range(0..a));
                }
                if p > 0 {
                    let earlier = rng.random_range(0..p);
                    let other = (x + rng.random_range(1..a)) % a;
                    ids[earlier] = self.item(q, other);
                }
                ids[p] = self.item(q, x);
                (ids, self.items() + q)
            }
        };
        ids.push(query as u32);
        // By construction the answer is the item at p ([`CanonicalTask::solve`] agrees: tested).
        CanonicalSample {
            answer: self.answer_of(ids[p]),
            ids,
            answer_pos: p,
        }
    }

    /// The answer and its position, recomputed from the tokens alone; an error names what is
    /// wrong (length, a token outside its range, a repeated symbol in Retrieval, a query that
    /// matches no item).
    pub fn solve(&self, ids: &[u32]) -> Result<(u32, usize), TaskError> {
        let bad = |m: String| Err(TaskError::Canonical(m));
        if ids.len() != self.seq_len() {
            return bad(format!(
                "a sample has {} tokens, the task {}",
                ids.len(),
                self.seq_len()
            ));
        }
        let (items, query) = ids.split_at(self.len);
        if let Some((i, id)) = items
            .iter()
            .enumerate()
            .find(|(_, &id)| id as usize >= self.items())
        {
            return bad(format!("position {i}: token {id} is not an item"));
        }
        let q = query[0] as usize;
        if q < self.items() || q >= self.items() + self.queries() {
            return bad(format!("the last token {q} is not a query"));
        }
        let q = q - self.items();
        match self.kind {
            CanonicalKind::Index => Ok((self.answer_of(items[q]), q)),
            CanonicalKind::Retrieval => {
                let mut seen = vec![false; self.symbols];
                for &id in items {
                    let s = self.symbol_of(id);
                    if std::mem::replace(&mut seen[s], true) {
                        return bad(format!("symbol {s} appears twice in a retrieval sample"));
                    }
                }
                match items.iter().position(|&id| self.symbol_of(id) == q) {
                    Some(p) => Ok((self.answer_of(items[p]), p)),
                    None => bad(format!("no item holds the queried symbol {q}")),
                }
            }
            CanonicalKind::Partial => match items.iter().rposition(|&id| self.symbol_of(id) == q) {
                Some(p) => Ok((self.answer_of(items[p]), p)),
                None => bad(format!("no item holds the queried symbol {q}")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_examples() {
        // docs/tasks.md: Index over 4 symbols, len 5: "2 0 3 3 1 | P3" -> 3 (position 3).
        let index = CanonicalTask::new(CanonicalKind::Index, 5, 4, 1).unwrap();
        assert_eq!(index.vocab(), 4 + 5);
        assert_eq!(index.solve(&[2, 0, 3, 3, 1, 4 + 3]).unwrap(), (3, 3));
        // Retrieval, 4 symbols x 2 attributes, len 3: items (2,1) (0,0) (3,1) = ids 5 0 7;
        // query symbol 0 (id 8 + 0) -> attribute 0 of the item at position 1, answer token
        // 8 + 4 + 0 = 12.
        let retrieval = CanonicalTask::new(CanonicalKind::Retrieval, 3, 4, 2).unwrap();
        assert_eq!(retrieval.vocab(), 8 + 4 + 2);
        assert_eq!(retrieval.solve(&[5, 0, 7, 8]).unwrap(), (12, 1));
        assert_eq!(retrieval.solve(&[5, 0, 7, 11]).unwrap(), (13, 2));
        assert!(retrieval
            .solve(&[5, 0, 7, 12])
            .unwrap_err()
            .to_string()
            .contains("not a query"));
        assert!(retrieval
            .solve(&[5, 4, 7, 8])
            .unwrap_err()
            .to_string()
            .contains("twice"));
        // Partial: items (1,0) (2,1) (1,1) (0,0) = ids 2 5 3 0; query symbol 1 (id 8 + 1) ->
        // the last item with symbol 1, (1,1) at position 2: attribute 1, answer token 13.
        let partial = CanonicalTask::new(CanonicalKind::Partial, 4, 4, 2).unwrap();
        assert_eq!(partial.solve(&[2, 5, 3, 0, 9]).unwrap(), (13, 2));
        assert!(partial.solve(&[2, 5, 3, 0]).is_err());
        assert!(partial
            .solve(&[2, 5, 3, 8, 9])
            .unwrap_err()
            .to_string()
            .contains("not an item"));
        assert!(partial
            .solve(&[0, 0, 0, 0, 9])
            .unwrap_err()
            .to_string()
            .contains("no item"));
    }

    #[test]
    fn samples_validate_and_spread_the_answer_over_every_position() {
        for (kind, s, a) in [
            (CanonicalKind::Index, 8, 1),
            (CanonicalKind::Retrieval, 12, 3),
            (CanonicalKind::Partial, 4, 3),
        ] {
            let t = CanonicalTask::new(kind, 10, s, a).unwrap();
            let mut per_pos = vec![0; 10];
            let mut earlier_same_symbol = 0;
            for i in 0..200u64 {
                let x = t.sample(7, Split::Train, i);
                assert_eq!(x.ids.len(), 11);
                assert_eq!(
                    t.solve(&x.ids).unwrap(),
                    (x.answer, x.answer_pos),
                    "{kind} {i}"
                );
                assert_eq!(x.answer_pos, (i % 10) as usize);
                per_pos[x.answer_pos] += 1;
                if kind == CanonicalKind::Partial && x.answer_pos > 0 {
                    let q = t.symbol_of(x.ids[x.answer_pos]);
                    assert!(x.ids[..x.answer_pos].iter().any(|&id| t.symbol_of(id) == q));
                    earlier_same_symbol += 1;
                }
                assert_eq!(x, t.sample(7, Split::Train, i), "deterministic");
            }
            assert!(per_pos.iter().all(|&c| c == 20), "{per_pos:?}");
            if kind == CanonicalKind::Partial {
                assert_eq!(earlier_same_symbol, 180);
            }
            assert_ne!(t.sample(7, Split::Train, 3), t.sample(7, Split::Test, 3));
        }
    }

    #[test]
    fn bad_sizes_are_errors() {
        for (kind, len, s, a, want) in [
            (CanonicalKind::Index, 1, 4, 1, "at least 2 items"),
            (CanonicalKind::Index, 4, 4, 2, "attributes = 1"),
            (CanonicalKind::Retrieval, 8, 4, 2, "distinct symbols"),
            (CanonicalKind::Partial, 8, 4, 1, "at least 2 attributes"),
        ] {
            let err = CanonicalTask::new(kind, len, s, a).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
        assert!("copy"
            .parse::<CanonicalKind>()
            .unwrap_err()
            .to_string()
            .contains("unknown canonical task"));
        assert_eq!(
            "partial".parse::<CanonicalKind>().unwrap(),
            CanonicalKind::Partial
        );
    }
}
