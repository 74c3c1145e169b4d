//! Token vocabularies: id <-> string, with the padding token at id 0.

use std::collections::HashMap;

/// The padding token's string (id 0 in every task vocabulary).
pub const PAD: &str = "<pad>";

/// A fixed vocabulary: token strings indexed by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocab {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Vocab {
    /// A vocabulary whose id i is `tokens[i]`; token strings must be distinct.
    pub fn new(tokens: Vec<String>) -> Self {
        let ids = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect::<HashMap<_, _>>();
        assert_eq!(
            ids.len(),
            tokens.len(),
            "vocabulary tokens must be distinct"
        );
        Self { tokens, ids }
    }

    /// Number of ids, padding included.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the vocabulary has no tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The string of token `id`, or `None` past the end.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of a token string.
    pub fn id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    /// All token strings in id order.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// Decode ids to strings; unknown ids decode to `"<unk:ID>"`.
    pub fn decode(&self, ids: &[u32]) -> Vec<String> {
        ids.iter()
            .map(|&id| {
                self.token(id)
                    .map_or_else(|| format!("<unk:{id}>"), str::to_owned)
            })
            .collect()
    }
}

/// The first `n` names of the number task's letter alphabet: `a`..`z`, then the bigrams
/// `aa`, `ab`, .. in lexicographic order (the paper's 120 letters end at `dp`).
pub fn letter_names(n: usize) -> Vec<String> {
    let singles = (b'a'..=b'z').map(|c| (c as char).to_string());
    let pairs = (b'a'..=b'z')
        .flat_map(|a| (b'a'..=b'z').map(move |b| format!("{}{}", a as char, b as char)));
    singles.chain(pairs).take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_alphabet_ends_at_dp() {
        let names = letter_names(120);
        assert_eq!(names[0], "a");
        assert_eq!(names[25], "z");
        assert_eq!(names[26], "aa");
        assert_eq!(names[119], "dp");
    }

    #[test]
    fn decode_round_trips() {
        let v = Vocab::new(vec![PAD.into(), "x".into(), "y".into()]);
        assert_eq!(v.id("y"), Some(2));
        assert_eq!(v.decode(&[1, 2, 9]), vec!["x", "y", "<unk:9>"]);
    }
}
