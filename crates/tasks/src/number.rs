//! The number task (positional): integers are backward offsets; follow them from the query
//! until a letter is reached.
//!
//! Paper layout, positions 0..16: eight letters from a 120-letter alphabet, eight integers, and
//! the integer query. Worked example (a shorter layout, positions 0..8):
//! `C B A 1 4 1 3 2 1`: 8 holds 1 -> 7 holds 2 -> 5 holds 1 -> 4 holds 4 -> 0 holds `C`, so the
//! answer is `C` after 4 hops.

use rand::seq::index;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::{letter_names, Invalid, Layout, Sample, Solution, TaskError, Vocab, PAD};

/// Size of the letter alphabet ALPH (`a`..`z`, `aa`..`dp`).
pub const ALPHABET: usize = 120;

/// Generator and checker of the number task for one layout.
#[derive(Debug, Clone)]
pub struct NumberTask {
    layout: Layout,
    vocab: Vocab,
}

impl NumberTask {
    /// The task for `layout`; ids: PAD 0, integers `1..=offsets` as themselves (default
    /// `T+P`), then the letters.
    pub fn new(layout: Layout) -> Result<Self, TaskError> {
        layout.check()?;
        let max_offset = layout.offsets();
        let mut tokens = vec![PAD.to_owned()];
        tokens.extend((1..=max_offset).map(|i| i.to_string()));
        tokens.extend(letter_names(ALPHABET));
        Ok(Self {
            layout,
            vocab: Vocab::new(tokens),
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

    fn letter_id(&self, letter: usize) -> u32 {
        (self.layout.offsets() + 1 + letter) as u32
    }

    fn is_letter_id(&self, id: u32) -> bool {
        let first = self.letter_id(0);
        (first..first + ALPHABET as u32).contains(&id)
    }

    /// Number of balanced combinations: target slot x answer letter x hop count.
    pub fn n_combos(&self) -> usize {
        self.layout.target_window * ALPHABET * self.layout.hops.len()
    }

    /// (target slot, answer letter, hop count) of a combination index.
    fn combo(&self, combo: usize) -> (usize, usize, usize) {
        let n_hops = self.layout.hops.len();
        let hops = self.layout.hops[combo % n_hops];
        let rest = combo / n_hops;
        (rest / ALPHABET, rest % ALPHABET, hops)
    }

    /// Hop count of a combination index.
    pub fn combo_hops(&self, combo: usize) -> usize {
        self.combo(combo).2
    }

    /// The reference generator (docs/tasks.md, "Number task") for one combination, with `extra`
    /// letters inserted before the target window. Draw order: hop positions, integer targets,
    /// letters, then the extension, so the core does not depend on `extra`.
    pub fn draw(&self, combo: usize, extra: usize, rng: &mut ChaCha8Rng) -> Sample {
        let (slot, answer, hops) = self.combo(combo);
        let (tw, pw) = (self.layout.target_window, self.layout.pre_window);
        let query = self.layout.query_pos();

        // 1. intermediate hop positions, visited in decreasing order: query -> hops -> slot.
        let mut chain = Vec::with_capacity(hops + 1);
        chain.push(query);
        let mut middle: Vec<usize> = index::sample(rng, pw, hops - 1)
            .into_iter()
            .map(|i| tw + i)
            .collect();
        middle.sort_unstable_by(|a, b| b.cmp(a));
        chain.extend(middle);
        chain.push(slot);

        // 2. every integer position points at a uniform earlier position, then the chain.
        let mut target: Vec<usize> = (tw..=query).map(|p| rng.random_range(0..p)).collect();
        for link in chain.windows(2) {
            target[link[0] - tw] = link[1];
        }

        // 3. letters, answer in its slot.
        let mut letters: Vec<usize> = (0..tw).map(|_| rng.random_range(0..ALPHABET)).collect();
        letters[slot] = answer;
        let padding: Vec<usize> = (0..extra).map(|_| rng.random_range(0..ALPHABET)).collect();

        let mut ids = Vec::with_capacity(extra + query + 1);
        ids.extend(padding.iter().chain(&letters).map(|&l| self.letter_id(l)));
        ids.extend((tw..=query).map(|p| (p - target[p - tw]) as u32));
        Sample {
            ids,
            answer_id: self.letter_id(answer),
            hops,
            target_pos: extra + slot,
        }
    }

    /// Checks token types per window and that offsets stay inside the core instance.
    pub fn check_structure(&self, ids: &[u32], extra: usize) -> Result<(), Invalid> {
        let first_pre = extra + self.layout.target_window;
        for (pos, &id) in ids.iter().enumerate() {
            if id == 0 || id as usize >= self.vocab.len() {
                return Err(Invalid::BadId { pos, id });
            }
            let is_letter = self.is_letter_id(id);
            if is_letter != (pos < first_pre) {
                return Err(Invalid::WrongType {
                    pos,
                    token: self.vocab.token(id).unwrap_or_default().to_owned(),
                });
            }
            if !is_letter && id as usize > pos - extra {
                return Err(Invalid::OffsetOutOfRange {
                    pos,
                    offset: id as usize,
                });
            }
        }
        Ok(())
    }
}

/// Follows the chain from the last token: a token that parses as an integer is a backward
/// offset, anything else is a letter and ends the chain.
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
    let mut pos = last;
    let mut path = vec![pos];
    while let Ok(offset) = tokens[pos].parse::<usize>() {
        if offset == 0 || offset > pos {
            return Err(Invalid::OffsetOutOfRange { pos, offset });
        }
        pos -= offset;
        path.push(pos);
    }
    if path.len() == 1 {
        return Err(Invalid::WrongType {
            pos: last,
            token: tokens[last].to_owned(),
        });
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_worked_example() {
        let tokens = "C B A 1 4 1 3 2 1".split(' ').collect::<Vec<_>>();
        let s = solve(&tokens).unwrap();
        assert_eq!((tokens[s.answer_pos], s.hops), ("C", 4));
        assert_eq!(chain(&tokens).unwrap(), vec![8, 7, 5, 4, 0]);
    }

    #[test]
    fn paper_vocabulary_ids() {
        let task = NumberTask::new(Layout::default()).unwrap();
        let v = task.vocab();
        assert_eq!(v.len(), 137);
        assert_eq!(v.id(PAD), Some(0));
        assert_eq!(v.id("1"), Some(1));
        assert_eq!(v.id("16"), Some(16));
        assert_eq!(v.id("a"), Some(17));
        assert_eq!(v.id("aa"), Some(17 + 26));
        assert_eq!(v.id("dp"), Some(136));
    }

    #[test]
    fn eight_offsets_worked_example() {
        // docs/tasks.md, "Vocabulary size": layout 4 + 4 with 8 offsets.
        let tokens = "A b c d 3 1 2 6 2".split(' ').collect::<Vec<_>>();
        assert_eq!(chain(&tokens).unwrap(), vec![8, 6, 4, 1]);
        let one = "A b c d 3 1 2 6 8".split(' ').collect::<Vec<_>>();
        assert_eq!(
            solve(&one).unwrap(),
            Solution {
                answer_pos: 0,
                hops: 1
            }
        );
        let layout = Layout {
            target_window: 4,
            pre_window: 4,
            offsets: Some(8),
            ..Layout::default()
        };
        assert_eq!(
            NumberTask::new(layout).unwrap().vocab().len(),
            1 + 8 + ALPHABET
        );
    }

    #[test]
    fn a_larger_offset_vocabulary_shifts_the_letters_only() {
        let layout = Layout {
            offsets: Some(32),
            ..Layout::default()
        };
        let task = NumberTask::new(layout).unwrap();
        let v = task.vocab();
        assert_eq!(v.len(), 1 + 32 + ALPHABET);
        assert_eq!(v.id("32"), Some(32));
        assert_eq!(v.id("a"), Some(33));
    }

    #[test]
    fn solve_rejects_bad_chains() {
        assert_eq!(solve(&[]), Err(Invalid::Empty));
        assert!(matches!(
            solve(&["a", "3"]),
            Err(Invalid::OffsetOutOfRange { pos: 1, offset: 3 })
        ));
        assert!(matches!(
            solve(&["a", "0"]),
            Err(Invalid::OffsetOutOfRange { .. })
        ));
        assert!(matches!(
            solve(&["a", "b"]),
            Err(Invalid::WrongType { pos: 1, .. })
        ));
    }
}
