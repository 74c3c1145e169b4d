//! The letter task (symbolic): from the query pair `xy`, jump to the unique earlier token whose
//! FIRST letter is `y`, and repeat until a letter-number token is reached.
//!
//! Paper layout: eight letter-number tokens (`c5`), eight letter-letter tokens (`fc`), and a
//! letter-letter query, over letters `a`..`h` and numbers `1`..`8`. Worked example:
//! `C2 B1 A3 FA EC DE HF GD IG`: IG -> GD -> DE -> EC -> C2 (4 hops). The layout's `letters`
//! and `numbers` change the alphabets (docs/tasks.md, "Vocabulary size"): with 16 numbers a
//! target token can read `c12`.

use rand::seq::index;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::{Invalid, Layout, Sample, Solution, TaskError, Vocab, PAD};

/// Generator and checker of the letter task for one layout.
#[derive(Debug, Clone)]
pub struct LetterTask {
    layout: Layout,
    vocab: Vocab,
    /// Letters `a..` (the layout's `letters`).
    letters: usize,
    /// Numbers `1..=numbers` (the layout's `numbers`).
    numbers: usize,
}

fn letter_char(l: usize) -> char {
    (b'a' + l as u8) as char
}

impl LetterTask {
    /// The task for `layout`; ids: PAD 0, letter-number pairs `1..=L*N` (letter-major),
    /// letter-letter pairs after them (paper, L = N = 8: 1..=64 and 65..=128).
    pub fn new(layout: Layout) -> Result<Self, TaskError> {
        layout.check()?;
        let (letters, numbers) = (layout.letters(), layout.numbers());
        if let Some(&h) = layout.hops.iter().find(|&&h| h >= letters) {
            return Err(TaskError::Layout(format!(
                "{h} hops need {h} distinct chain letters plus one free letter, \
                 the letter task has {letters} letters (at most {} hops; raise letters)",
                letters - 1
            )));
        }
        let mut tokens = vec![PAD.to_owned()];
        for l in 0..letters {
            tokens.extend((1..=numbers).map(|n| format!("{}{n}", letter_char(l))));
        }
        for l in 0..letters {
            tokens.extend((0..letters).map(|m| format!("{}{}", letter_char(l), letter_char(m))));
        }
        Ok(Self {
            layout,
            vocab: Vocab::new(tokens),
            letters,
            numbers,
        })
    }

    /// The layout this task was built for.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The task vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    fn target_id(&self, letter: usize, number: usize) -> u32 {
        1 + (letter * self.numbers + number) as u32
    }

    /// The first letter-letter id.
    fn first_pair_id(&self) -> u32 {
        1 + (self.letters * self.numbers) as u32
    }

    fn pair_id(&self, first: usize, second: usize) -> u32 {
        self.first_pair_id() + (first * self.letters + second) as u32
    }

    /// Number of balanced combinations: slot x answer letter x answer number x hop count.
    pub fn n_combos(&self) -> usize {
        self.layout.target_window * self.letters * self.numbers * self.layout.hops.len()
    }

    /// (slot, answer letter, answer number (0-based), hops) of a combination index.
    fn combo(&self, combo: usize) -> (usize, usize, usize, usize) {
        let n_hops = self.layout.hops.len();
        let hops = self.layout.hops[combo % n_hops];
        let rest = combo / n_hops;
        let (rest, number) = (rest / self.numbers, rest % self.numbers);
        (rest / self.letters, rest % self.letters, number, hops)
    }

    /// Hop count of a combination index.
    pub fn combo_hops(&self, combo: usize) -> usize {
        self.combo(combo).3
    }

    /// The reference generator (docs/tasks.md, "Letter task") for one combination, with `extra`
    /// letter-number tokens (free first letters) inserted before the target window. The
    /// extension is drawn last, so the core does not depend on `extra`.
    pub fn draw(&self, combo: usize, extra: usize, rng: &mut ChaCha8Rng) -> Sample {
        let (slot, answer_letter, answer_number, hops) = self.combo(combo);
        let (tw, pw) = (self.layout.target_window, self.layout.pre_window);
        let query = self.layout.query_pos();

        // 1. hop positions (decreasing) and their distinct letters, none equal to the answer's.
        let mut chain = Vec::with_capacity(hops + 1);
        chain.push(query);
        let mut middle: Vec<usize> = index::sample(rng, pw, hops - 1)
            .into_iter()
            .map(|i| tw + i)
            .collect();
        middle.sort_unstable_by(|a, b| b.cmp(a));
        chain.extend(middle);
        chain.push(slot);
        let others: Vec<usize> = (0..self.letters).filter(|&l| l != answer_letter).collect();
        let mut chain_letters = vec![usize::MAX; chain.len()]; // the query's own letter is free
        for (k, i) in index::sample(rng, others.len(), hops - 1)
            .into_iter()
            .enumerate()
        {
            chain_letters[k + 1] = others[i];
        }
        chain_letters[hops] = answer_letter;
        let free: Vec<usize> = others
            .iter()
            .copied()
            .filter(|l| !chain_letters.contains(l))
            .collect();

        // 2. first letters: free everywhere, then each chain element (not the query) its own.
        let mut first: Vec<usize> = (0..=query)
            .map(|_| free[rng.random_range(0..free.len())])
            .collect();
        for k in 1..chain.len() {
            first[chain[k]] = chain_letters[k];
        }

        // 3. second symbols: numbers in the target window, free letters before the query, and
        //    each chain element points at the next one's first letter.
        let mut second: Vec<usize> = (0..=query)
            .map(|p| {
                if p < tw {
                    rng.random_range(0..self.numbers)
                } else {
                    free[rng.random_range(0..free.len())]
                }
            })
            .collect();
        second[slot] = answer_number;
        for k in 0..hops {
            second[chain[k]] = chain_letters[k + 1];
        }
        let padding: Vec<u32> = (0..extra)
            .map(|_| {
                let l = free[rng.random_range(0..free.len())];
                self.target_id(l, rng.random_range(0..self.numbers))
            })
            .collect();

        let mut ids = padding;
        ids.extend((0..=query).map(|p| {
            if p < tw {
                self.target_id(first[p], second[p])
            } else {
                self.pair_id(first[p], second[p])
            }
        }));
        Sample {
            ids,
            answer_id: self.target_id(answer_letter, answer_number),
            hops,
            target_pos: extra + slot,
        }
    }

    /// Checks token types per window: letter-number before the pre-target window,
    /// letter-letter from it on.
    pub fn check_structure(&self, ids: &[u32], extra: usize) -> Result<(), Invalid> {
        let first_pre = extra + self.layout.target_window;
        for (pos, &id) in ids.iter().enumerate() {
            if id == 0 || id as usize >= self.vocab.len() {
                return Err(Invalid::BadId { pos, id });
            }
            if (id < self.first_pair_id()) != (pos < first_pre) {
                return Err(Invalid::WrongType {
                    pos,
                    token: self.vocab.token(id).unwrap_or_default().to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// What a token's second symbol is: a number (a target token) or a letter (a link).
enum Second {
    /// Digits: the token is a target.
    Number,
    /// One letter: the next token of the chain starts with it.
    Link(char),
}

/// A token's first letter and second symbol: a letter then a number (`c5`, `c12`), or two
/// letters (`fc`); None otherwise.
fn symbols(token: &str) -> Option<(char, Second)> {
    let mut chars = token.chars();
    let first = chars.next().filter(|c| !c.is_ascii_digit())?;
    let rest = chars.as_str();
    let mut rest_chars = rest.chars();
    match (rest_chars.next(), rest_chars.next()) {
        _ if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()) => {
            Some((first, Second::Number))
        }
        (Some(b), None) => Some((first, Second::Link(b))),
        _ => None,
    }
}

/// Follows the chain from the last token: a token whose second symbol is a number is a target
/// and ends the chain; otherwise its second symbol must start exactly one earlier token.
pub fn solve(tokens: &[&str]) -> Result<Solution, Invalid> {
    let path = chain(tokens)?;
    Ok(Solution {
        answer_pos: *path.last().expect("a chain has at least two positions"),
        hops: path.len() - 1,
    })
}

/// The positions the chain visits, from the query (last token) to the answer.
pub fn chain(tokens: &[&str]) -> Result<Vec<usize>, Invalid> {
    let last = tokens.len().checked_sub(1).ok_or(Invalid::Empty)?;
    let wrong_type = |pos: usize| Invalid::WrongType {
        pos,
        token: tokens[pos].to_owned(),
    };
    let mut pos = last;
    let mut path = vec![pos];
    loop {
        let link = match symbols(tokens[pos]).ok_or_else(|| wrong_type(pos))? {
            (_, Second::Number) if path.len() == 1 => return Err(wrong_type(pos)),
            (_, Second::Number) => return Ok(path),
            (_, Second::Link(c)) => c,
        };
        let mut matches = tokens[..pos]
            .iter()
            .enumerate()
            .filter(|(_, t)| t.starts_with(link));
        pos = match (matches.next(), matches.clone().count()) {
            (Some((j, _)), 0) => j,
            (None, _) => return Err(Invalid::DeadEnd { pos, letter: link }),
            (Some(_), more) => {
                return Err(Invalid::Ambiguous {
                    pos,
                    letter: link,
                    count: more + 1,
                })
            }
        };
        path.push(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_worked_example() {
        let tokens = "C2 B1 A3 FA EC DE HF GD IG".split(' ').collect::<Vec<_>>();
        let s = solve(&tokens).unwrap();
        assert_eq!((tokens[s.answer_pos], s.hops), ("C2", 4));
        assert_eq!(chain(&tokens).unwrap(), vec![8, 7, 5, 4, 0]);
    }

    #[test]
    fn paper_vocabulary_ids() {
        let task = LetterTask::new(Layout::default()).unwrap();
        let v = task.vocab();
        assert_eq!(v.len(), 129);
        assert_eq!(v.id("a1"), Some(1));
        assert_eq!(v.id("a8"), Some(8));
        assert_eq!(v.id("b1"), Some(9));
        assert_eq!(v.id("h8"), Some(64));
        assert_eq!(v.id("aa"), Some(65));
        assert_eq!(v.id("hh"), Some(128));
    }

    #[test]
    fn solve_rejects_bad_chains() {
        assert!(matches!(
            solve(&["a1", "b2", "cd"]),
            Err(Invalid::DeadEnd {
                pos: 2,
                letter: 'd'
            })
        ));
        assert!(matches!(
            solve(&["a1", "a2", "ca"]),
            Err(Invalid::Ambiguous { count: 2, .. })
        ));
        assert!(matches!(
            solve(&["a1", "b2"]),
            Err(Invalid::WrongType { pos: 1, .. })
        ));
    }

    #[test]
    fn a_larger_vocabulary_worked_example() {
        // 16 letters and 16 numbers (docs/tasks.md): targets read `c12`, links `pc`.
        let tokens = "c12 b1 a16 fa ec de pf gd ig"
            .split(' ')
            .collect::<Vec<_>>();
        assert_eq!(chain(&tokens).unwrap(), vec![8, 7, 5, 4, 0]);
        assert_eq!(solve(&tokens).unwrap().hops, 4);
        let layout = Layout {
            letters: Some(16),
            numbers: Some(16),
            ..Layout::default()
        };
        let task = LetterTask::new(layout).unwrap();
        let v = task.vocab();
        assert_eq!(v.len(), 1 + 16 * 16 + 16 * 16);
        assert_eq!(v.id("a1"), Some(1));
        assert_eq!(v.id("a16"), Some(16));
        assert_eq!(v.id("b1"), Some(17));
        assert_eq!(v.id("aa"), Some(257));
        assert_eq!(v.id("pp"), Some(512));
        // Five letters are the fewest that leave a free letter for 4 hops.
        let small = |letters| {
            LetterTask::new(Layout {
                letters: Some(letters),
                ..Layout::default()
            })
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        assert!(small(5).is_ok());
        assert!(small(4)
            .unwrap_err()
            .contains("4 hops need 4 distinct chain letters"));
    }

    #[test]
    fn too_many_hops_for_the_alphabet() {
        let layout = Layout {
            target_window: 8,
            pre_window: 8,
            hops: vec![8],
            ..Layout::default()
        };
        let err = LetterTask::new(layout).unwrap_err().to_string();
        assert!(err.contains("at most 7 hops"), "{err}");
    }
}
