//! Natural-language 1-hop versions of both tasks for pretrained language models
//! (main paper, appendix H): a short instruction, two solved examples, then the question.
//!
//! - Number: `a z b y c x d w 5 -> y` (the last token n says: move n positions to the left).
//! - Letter: `a4 b3 c2 d1 fc -> c2` (the query's second character starts exactly one earlier
//!   token; that token is the answer).
//!
//! The question has `size` target-window tokens; prompt `index` of a seed is deterministic.

use rand::Rng;
use serde::Serialize;

use crate::rng::stream;
use crate::{TaskError, TaskKind};

/// Largest supported target window for prompts.
pub const MAX_SIZE: usize = 100_000;
const PROMPT_STREAM: u64 = 0x5052_4F4D_5054 << 8;

/// One prompt and the answer string it expects (a single token of the window).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Prompt {
    /// The full prompt text; it ends with `" ->"` after the question.
    pub prompt: String,
    /// The expected answer, e.g. `y` or `k7`.
    pub answer: String,
    /// The question line alone (window tokens and query, space-separated).
    pub question: String,
    /// Target-window size of the question.
    pub size: usize,
}

const NUMBER_INSTRUCTION: &str = "Each line is a list of tokens. The last token is a number n. \
Starting from the last token, move n positions to the left and output the token you land on. \
Output that token only.";
const NUMBER_EXAMPLES: [(&str, &str); 2] = [("a z b y c x d w 5", "y"), ("q r s t u v 2", "u")];

const LETTER_INSTRUCTION: &str = "Each line is a list of tokens. Take the last token and look \
at its second character. Find the unique earlier token that starts with that character and \
output that token. Output that token only.";
const LETTER_EXAMPLES: [(&str, &str); 2] = [
    ("a4 b3 c2 d1 fc", "c2"),
    ("w9 t7 l5 g1 n4 l6 u9 k7 m5 p8 gk", "k7"),
];

fn lower(i: usize) -> char {
    (b'a' + i as u8) as char
}

/// Prompt `index` of `seed` for `kind` with a `size`-token target window.
pub fn prompt(kind: TaskKind, size: usize, seed: u64, index: usize) -> Result<Prompt, TaskError> {
    if size == 0 || size > MAX_SIZE {
        return Err(TaskError::Prompt(format!(
            "the target window size must be in 1..={MAX_SIZE}, got {size}"
        )));
    }
    let mut rng = stream([seed, PROMPT_STREAM | kind as u64, index as u64, 0]);
    let (instruction, examples, question, answer) = match kind {
        TaskKind::Number => {
            let letters: Vec<char> = (0..size).map(|_| lower(rng.random_range(0..26))).collect();
            let n = rng.random_range(1..=size);
            let mut question: Vec<String> = letters.iter().map(char::to_string).collect();
            question.push(n.to_string());
            let answer = letters[size - n].to_string();
            (NUMBER_INSTRUCTION, NUMBER_EXAMPLES, question, answer)
        }
        TaskKind::Letter => {
            let slot = rng.random_range(0..size);
            let key = rng.random_range(0..26);
            let mut question: Vec<String> = (0..size)
                .map(|p| {
                    let first = if p == slot {
                        key
                    } else {
                        (key + rng.random_range(1..26)) % 26
                    };
                    format!("{}{}", lower(first), rng.random_range(1..=9))
                })
                .collect();
            let answer = question[slot].clone();
            question.push(format!("{}{}", lower(rng.random_range(0..26)), lower(key)));
            (LETTER_INSTRUCTION, LETTER_EXAMPLES, question, answer)
        }
        TaskKind::Language | TaskKind::Offset | TaskKind::Canonical | TaskKind::Ambiguous => {
            return Err(TaskError::NotMultiHop(kind))
        }
    };
    let question = question.join(" ");
    let mut text = format!("{instruction}\n\n");
    for (input, output) in examples {
        text.push_str(&format!("{input} -> {output}\n"));
    }
    text.push_str(&format!("{question} ->"));
    Ok(Prompt {
        prompt: text,
        answer,
        question,
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{letter, number};

    fn tokens(line: &str) -> Vec<&str> {
        line.split(' ').collect()
    }

    #[test]
    fn examples_in_the_instructions_are_correct() {
        for (input, output) in NUMBER_EXAMPLES {
            let t = tokens(input);
            let s = number::solve(&t).unwrap();
            assert_eq!((t[s.answer_pos], s.hops), (output, 1));
        }
        for (input, output) in LETTER_EXAMPLES {
            let t = tokens(input);
            let s = letter::solve(&t).unwrap();
            assert_eq!((t[s.answer_pos], s.hops), (output, 1));
        }
    }

    #[test]
    fn a_language_has_no_prompt_version() {
        let err = prompt(TaskKind::Language, 4, 0, 0).unwrap_err();
        assert_eq!(err, TaskError::NotMultiHop(TaskKind::Language));
    }

    #[test]
    fn questions_solve_to_their_answers_at_every_size() {
        for kind in TaskKind::ALL {
            for size in [1, 2, 12, 16, 24, 32, 48, 64, 80, 100, 150, 200, 300] {
                for index in 0..20 {
                    let p = prompt(kind, size, 3, index).unwrap();
                    let t = tokens(&p.question);
                    assert_eq!(t.len(), size + 1);
                    let s = match kind {
                        TaskKind::Number => number::solve(&t),
                        TaskKind::Letter => letter::solve(&t),
                        TaskKind::Language
                        | TaskKind::Offset
                        | TaskKind::Canonical
                        | TaskKind::Ambiguous => {
                            unreachable!("TaskKind::ALL is multi-hop")
                        }
                    }
                    .unwrap_or_else(|e| panic!("{kind} size {size}: {e}: {}", p.question));
                    assert_eq!(t[s.answer_pos], p.answer);
                    assert_eq!(s.hops, 1);
                    assert!(p.prompt.ends_with(&format!("{} ->", p.question)));
                }
            }
        }
    }

    #[test]
    fn prompts_are_deterministic_and_vary_with_seed() {
        let a = prompt(TaskKind::Letter, 32, 1, 0).unwrap();
        assert_eq!(a, prompt(TaskKind::Letter, 32, 1, 0).unwrap());
        assert_ne!(a, prompt(TaskKind::Letter, 32, 2, 0).unwrap());
        assert_ne!(a, prompt(TaskKind::Letter, 32, 1, 1).unwrap());
    }

    #[test]
    fn bad_sizes_are_rejected() {
        assert!(prompt(TaskKind::Number, 0, 0, 0).is_err());
        assert!(prompt(TaskKind::Number, MAX_SIZE + 1, 0, 0).is_err());
    }
}
