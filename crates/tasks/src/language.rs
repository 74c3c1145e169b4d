//! Formal languages over the alphabet {a, b} for the expressivity experiments
//! (docs/tasks.md#formal-languages): membership predicates, generators of members and
//! non-members at any length, and labelled `BOS w EOS` samples for an EOS classifier.
//!
//! Negatives come in two kinds ([`Negatives`]): uniform strings that fail the predicate, and
//! near-misses (a member with one symbol flipped). Every draw is deterministic per
//! (seed, split, length, index).

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::rng::stream;
use crate::{Split, TaskError, Vocab, PAD};

/// Beginning-of-sequence token (position 0 of every sample).
pub const BOS: &str = "<bos>";
/// End-of-sequence token: the classifier reads the last position, which holds it.
pub const EOS: &str = "<eos>";
/// Id of [`BOS`] in [`vocab`].
pub const BOS_ID: u32 = 1;
/// Id of [`EOS`] in [`vocab`].
pub const EOS_ID: u32 = 2;
/// Id of the symbol `a` in [`vocab`] (`b` is the next id).
pub const A_ID: u32 = 3;

/// The token vocabulary of every language: padding, BOS, EOS, `a`, `b`.
pub fn vocab() -> Vocab {
    Vocab::new([PAD, BOS, EOS, "a", "b"].map(String::from).to_vec())
}

/// One of the six languages of the periodic-RoPE paper (PARITY is the control).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Language {
    /// `(aa)*` over the one-letter alphabet {a}: `a^n` with n even. Its strings are only
    /// `a^n` (see [`Language::alphabet`]), so the label is the parity of the length.
    EvenA,
    /// `(ab)*`: `ab` repeated.
    AbStar,
    /// `a Sigma*`: starts with a.
    StartsA,
    /// `Sigma* a`: ends with a.
    EndsA,
    /// `Sigma* ab Sigma*`: contains the factor ab.
    ContainsAb,
    /// PARITY: an odd number of a's.
    Parity,
}

impl Language {
    /// Every language, in the paper's order.
    pub const ALL: [Language; 6] = [
        Language::EvenA,
        Language::AbStar,
        Language::StartsA,
        Language::EndsA,
        Language::ContainsAb,
        Language::Parity,
    ];

    /// The short name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Language::EvenA => "aa-star",
            Language::AbStar => "ab-star",
            Language::StartsA => "a-sigma",
            Language::EndsA => "sigma-a",
            Language::ContainsAb => "sigma-ab-sigma",
            Language::Parity => "parity",
        }
    }

    /// The language as the paper writes it.
    pub fn pattern(self) -> &'static str {
        match self {
            Language::EvenA => "(aa)*",
            Language::AbStar => "(ab)*",
            Language::StartsA => "a Sigma*",
            Language::EndsA => "Sigma* a",
            Language::ContainsAb => "Sigma* ab Sigma*",
            Language::Parity => "PARITY",
        }
    }

    /// The symbols the language's strings are drawn from: `a` only for `(aa)*` (over {a, b} its
    /// non-members would almost all contain a b, and a classifier could answer "no b" without
    /// ever counting), `a` and `b` for the others.
    pub fn alphabet(self) -> &'static [u8] {
        match self {
            Language::EvenA => b"a",
            _ => b"ab",
        }
    }

    /// Whether `w` (bytes `a` and `b`) is in the language.
    pub fn contains(self, w: &[u8]) -> bool {
        let a = |s: &u8| *s == b'a';
        match self {
            Language::EvenA => w.len().is_multiple_of(2) && w.iter().all(a),
            Language::AbStar => {
                w.len().is_multiple_of(2) && w.iter().enumerate().all(|(i, &s)| s == b"ab"[i % 2])
            }
            Language::StartsA => w.first().is_some_and(a),
            Language::EndsA => w.last().is_some_and(a),
            Language::ContainsAb => w.windows(2).any(|p| p == b"ab"),
            Language::Parity => w.iter().filter(|s| a(s)).count() % 2 == 1,
        }
    }

    /// Whether some string of length `n` is in the language.
    pub fn has_members(self, n: usize) -> bool {
        match self {
            Language::EvenA | Language::AbStar => n.is_multiple_of(2),
            Language::StartsA | Language::EndsA | Language::Parity => n >= 1,
            Language::ContainsAb => n >= 2,
        }
    }

    /// Whether some string of length `n` over [`Language::alphabet`] is not in the language.
    pub fn has_non_members(self, n: usize) -> bool {
        match self {
            Language::EvenA => n % 2 == 1,
            Language::AbStar => n >= 1,
            _ => true,
        }
    }

    /// Why the lengths `lengths` cannot tell a classifier from a constant answer: every one of
    /// them has members only, or non-members only, of the same kind (e.g. only odd lengths of
    /// `(ab)*`, where every string is a non-member and "no" is always right). None when both
    /// labels occur among them (possibly at different lengths, as for `(aa)*`, whose even
    /// lengths hold members only and odd ones non-members only: there the answer needs the
    /// length's parity).
    pub fn one_label(self, lengths: impl IntoIterator<Item = usize>) -> Option<String> {
        let (mut members, mut others, mut any) = (false, false, false);
        for n in lengths {
            any = true;
            members |= self.has_members(n);
            others |= self.has_non_members(n);
        }
        match (any, members, others) {
            (false, ..) | (true, true, true) => None,
            (true, true, false) => Some(format!(
                "every string of {} at these lengths is a member: a classifier that always \
                 answers yes is always right",
                self.pattern()
            )),
            _ => Some(format!(
                "every string of {} at these lengths is a non-member: a classifier that always \
                 answers no is always right",
                self.pattern()
            )),
        }
    }

    /// A member of length `n` (None if there is none): uniform over the members for every
    /// language but `(aa)*` and `(ab)*`, which have one member per even length.
    pub fn member(self, n: usize, rng: &mut ChaCha8Rng) -> Option<Vec<u8>> {
        if !self.has_members(n) {
            return None;
        }
        Some(match self {
            Language::EvenA => vec![b'a'; n],
            Language::AbStar => (0..n).map(|i| b"ab"[i % 2]).collect(),
            Language::StartsA => fixed_end(n, rng, 0, b'a'),
            Language::EndsA => fixed_end(n, rng, n - 1, b'a'),
            Language::ContainsAb => rejection(self, true, n, rng).unwrap_or_else(|| {
                let mut w = uniform(n, rng);
                let at = rng.random_range(0..n - 1);
                w[at..at + 2].copy_from_slice(b"ab");
                w
            }),
            Language::Parity => with_parity(n, rng, 1),
        })
    }

    /// A non-member of length `n` over [`Language::alphabet`], uniform over those non-members
    /// (None if there is none).
    pub fn non_member(self, n: usize, rng: &mut ChaCha8Rng) -> Option<Vec<u8>> {
        if !self.has_non_members(n) {
            return None;
        }
        Some(match self {
            Language::EvenA => vec![b'a'; n],
            // Members are at most a quarter of the strings of length >= 1 here.
            Language::AbStar => rejection(self, false, n, rng).unwrap_or_else(|| {
                let mut w = self.member(n, rng).unwrap_or_else(|| vec![b'a'; n]);
                w[0] = b'b';
                w
            }),
            Language::StartsA if n > 0 => fixed_end(n, rng, 0, b'b'),
            Language::EndsA if n > 0 => fixed_end(n, rng, n - 1, b'b'),
            Language::StartsA | Language::EndsA => Vec::new(),
            // The strings without the factor ab are exactly b^j a^(n - j).
            Language::ContainsAb => {
                let j = rng.random_range(0..=n);
                (0..n).map(|i| if i < j { b'b' } else { b'a' }).collect()
            }
            Language::Parity => with_parity(n, rng, 0),
        })
    }

    /// A near-miss of length `n`: a member with one symbol flipped that is not a member (the
    /// flipped position is drawn uniformly among those that leave the language). Falls back to
    /// [`Language::non_member`] when length `n` has no member or no flip of the drawn member
    /// leaves the language, and for `(aa)*`, whose one-letter alphabet has no flips.
    pub fn near_miss(self, n: usize, rng: &mut ChaCha8Rng) -> Option<Vec<u8>> {
        if self.alphabet().len() == 1 {
            return self.non_member(n, rng);
        }
        if let Some(mut w) = self.member(n, rng) {
            let mut leaving: Vec<usize> = (0..n)
                .filter(|&i| {
                    w[i] = flip(w[i]);
                    let out = !self.contains(&w);
                    w[i] = flip(w[i]);
                    out
                })
                .collect();
            if !leaving.is_empty() {
                let i = leaving.swap_remove(rng.random_range(0..leaving.len()));
                w[i] = flip(w[i]);
                return Some(w);
            }
        }
        self.non_member(n, rng)
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl FromStr for Language {
    type Err = TaskError;
    /// A short name (`aa-star`) or the paper's pattern (`(aa)*`, `Sigma* ab Sigma*`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        Language::ALL
            .into_iter()
            .find(|l| {
                l.name() == s
                    || l.pattern() == s
                    || l.pattern().replace(' ', "") == s.replace(' ', "")
                    || l.pattern().to_lowercase() == s
            })
            .ok_or_else(|| TaskError::UnknownLanguage(s.to_owned()))
    }
}

impl TryFrom<String> for Language {
    type Error = TaskError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Language> for String {
    fn from(l: Language) -> Self {
        l.name().to_owned()
    }
}

/// How negative samples are drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Negatives {
    /// Uniform strings of the length that fail the predicate.
    #[default]
    Uniform,
    /// A member with one symbol flipped ([`Language::near_miss`]).
    NearMiss,
}

impl FromStr for Negatives {
    type Err = TaskError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "uniform" => Ok(Negatives::Uniform),
            "near-miss" => Ok(Negatives::NearMiss),
            other => Err(TaskError::UnknownNegatives(other.to_owned())),
        }
    }
}

/// One labelled string as model input: `BOS w EOS` and whether `w` is in the language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    /// Token ids `[BOS, w..., EOS]` (length `|w| + 2`).
    pub ids: Vec<u32>,
    /// 1 for a member, 0 for a non-member (the classifier's class).
    pub label: u32,
}

/// Labelled samples of one language: deterministic per (seed, split, length, index), with
/// balanced labels at every length that has both members and non-members (even indices are
/// members, odd ones non-members); a length with one kind only gives that kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanguageSamples {
    /// The language.
    pub language: Language,
    /// How negatives are drawn.
    pub negatives: Negatives,
    /// The run's seed.
    pub seed: u64,
}

impl LanguageSamples {
    /// Sample `index` of length `n` (the string's length, without BOS and EOS) in `split`.
    pub fn sample(&self, split: Split, n: usize, index: u64) -> Labelled {
        let l = self.language;
        let mut rng = stream([self.seed, 0x4C41_4E47 ^ split as u64, n as u64, index]);
        let positive = match (l.has_members(n), l.has_non_members(n)) {
            (true, true) => index.is_multiple_of(2),
            (members, _) => members,
        };
        let w = if positive {
            l.member(n, &mut rng)
        } else if self.negatives == Negatives::NearMiss {
            l.near_miss(n, &mut rng)
        } else {
            l.non_member(n, &mut rng)
        }
        .expect("the label was chosen among the kinds length n has");
        Labelled {
            ids: encode(&w),
            label: u32::from(l.contains(&w)),
        }
    }
}

/// `BOS w EOS` as ids of [`vocab`].
pub fn encode(w: &[u8]) -> Vec<u32> {
    std::iter::once(BOS_ID)
        .chain(w.iter().map(|&s| A_ID + u32::from(s == b'b')))
        .chain(std::iter::once(EOS_ID))
        .collect()
}

fn flip(s: u8) -> u8 {
    if s == b'a' {
        b'b'
    } else {
        b'a'
    }
}

fn uniform(n: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    (0..n)
        .map(|_| if rng.random::<bool>() { b'a' } else { b'b' })
        .collect()
}

/// A uniform string with symbol `s` at `at`.
fn fixed_end(n: usize, rng: &mut ChaCha8Rng, at: usize, s: u8) -> Vec<u8> {
    let mut w = uniform(n, rng);
    w[at] = s;
    w
}

/// A uniform string of length `n >= 1` whose count of a's has parity `odd` (the last symbol
/// is chosen to make it so); the empty string when `n` is 0.
fn with_parity(n: usize, rng: &mut ChaCha8Rng, odd: usize) -> Vec<u8> {
    let mut w = uniform(n, rng);
    if let Some(last) = n.checked_sub(1) {
        let count = w[..last].iter().filter(|&&s| s == b'a').count();
        w[last] = if count % 2 == odd { b'b' } else { b'a' };
    }
    w
}

/// Up to 64 uniform draws until one has membership `member` (uniform over those strings).
fn rejection(l: Language, member: bool, n: usize, rng: &mut ChaCha8Rng) -> Option<Vec<u8>> {
    (0..64)
        .map(|_| uniform(n, rng))
        .find(|w| l.contains(w) == member)
}
