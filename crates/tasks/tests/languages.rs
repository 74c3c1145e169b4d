//! The formal languages against independent recognisers: one DFA transition table per
//! language, run on every string over {a, b} up to length 12; the generators' labels, kinds
//! and determinism at every length up to 40.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use ropelab_tasks::language::{encode, vocab, A_ID, BOS_ID, EOS_ID};
use ropelab_tasks::{Language, LanguageSamples, Negatives, Split};

/// A DFA: transitions `[state][symbol]` (symbol 0 = a, 1 = b), start state 0, accepting set.
struct Dfa {
    next: &'static [[usize; 2]],
    accept: &'static [usize],
}

impl Dfa {
    fn accepts(&self, w: &[u8]) -> bool {
        let end = w
            .iter()
            .fold(0, |q, &s| self.next[q][usize::from(s == b'b')]);
        self.accept.contains(&end)
    }
}

/// The recogniser of each language, written from its regular expression (state 2 or the last
/// state is a sink where one exists).
fn dfa(l: Language) -> Dfa {
    match l {
        // 0: even a's (accept), 1: odd a's, 2: saw b.
        Language::EvenA => Dfa {
            next: &[[1, 2], [0, 2], [2, 2]],
            accept: &[0],
        },
        // 0: expecting a (accept), 1: expecting b, 2: dead.
        Language::AbStar => Dfa {
            next: &[[1, 2], [2, 0], [2, 2]],
            accept: &[0],
        },
        // 0: start, 1: began with a (accept), 2: began with b.
        Language::StartsA => Dfa {
            next: &[[1, 2], [1, 1], [2, 2]],
            accept: &[1],
        },
        // 0: last symbol not a, 1: last symbol a (accept).
        Language::EndsA => Dfa {
            next: &[[1, 0], [1, 0]],
            accept: &[1],
        },
        // 0: no pending a, 1: pending a, 2: saw ab (accept).
        Language::ContainsAb => Dfa {
            next: &[[1, 0], [1, 2], [2, 2]],
            accept: &[2],
        },
        // 0: even a's, 1: odd a's (accept).
        Language::Parity => Dfa {
            next: &[[1, 0], [0, 1]],
            accept: &[1],
        },
    }
}

/// Every string over {a, b} of length `n`.
fn all_strings(n: usize) -> impl Iterator<Item = Vec<u8>> {
    (0..1u32 << n).map(move |bits| {
        (0..n)
            .map(|i| if bits >> i & 1 == 0 { b'a' } else { b'b' })
            .collect()
    })
}

/// Every string of length `n` over the language's alphabet.
fn strings_of(l: Language, n: usize) -> Vec<Vec<u8>> {
    all_strings(n)
        .filter(|w| w.iter().all(|s| l.alphabet().contains(s)))
        .collect()
}

#[test]
fn membership_matches_the_dfa_on_every_string_up_to_length_12() {
    for l in Language::ALL {
        let d = dfa(l);
        for n in 0..=12 {
            for w in all_strings(n) {
                let want = d.accepts(&w);
                assert_eq!(
                    l.contains(&w),
                    want,
                    "{l} on {:?}",
                    String::from_utf8_lossy(&w)
                );
            }
            // The kinds present among the strings the generators draw from.
            let (mut members, mut others) = (0, 0);
            for w in strings_of(l, n) {
                if d.accepts(&w) {
                    members += 1;
                } else {
                    others += 1;
                }
            }
            assert_eq!(l.has_members(n), members > 0, "{l} at length {n}");
            assert_eq!(l.has_non_members(n), others > 0, "{l} at length {n}");
        }
    }
}

#[test]
fn generators_give_the_kind_asked_for_at_every_length() {
    for l in Language::ALL {
        let d = dfa(l);
        for n in 0..=40 {
            for seed in 0..8 {
                let rng = &mut ChaCha8Rng::seed_from_u64(seed * 100 + n as u64);
                let member = l.member(n, rng);
                assert_eq!(member.is_some(), l.has_members(n), "{l} member at {n}");
                if let Some(w) = member {
                    assert_eq!(w.len(), n);
                    assert!(w.iter().all(|s| l.alphabet().contains(s)));
                    assert!(
                        d.accepts(&w),
                        "{l}: member {:?}",
                        String::from_utf8_lossy(&w)
                    );
                }
                for w in [l.non_member(n, rng), l.near_miss(n, rng)] {
                    assert_eq!(w.is_some(), l.has_non_members(n), "{l} non-member at {n}");
                    if let Some(w) = w {
                        assert_eq!(w.len(), n);
                        assert!(w.iter().all(|s| l.alphabet().contains(s)));
                        assert!(!d.accepts(&w), "{l}: non-member {:?}", w);
                    }
                }
            }
        }
    }
}

/// A near-miss is one flip away from a member whenever the length allows one (over two
/// letters; `(aa)*` has one), and uniform negatives reach strings that are not near-misses.
#[test]
fn near_misses_are_one_flip_from_a_member() {
    for l in Language::ALL
        .into_iter()
        .filter(|l| l.alphabet().len() == 2)
    {
        let d = dfa(l);
        for n in 1..=12 {
            // Whether some member of length n has a flip that leaves the language.
            let possible = all_strings(n)
                .filter(|w| d.accepts(w))
                .any(|w| (0..n).any(|i| !d.accepts(&flipped(&w, i))));
            for seed in 0..20 {
                let rng = &mut ChaCha8Rng::seed_from_u64(seed);
                let w = l.near_miss(n, rng).unwrap();
                let one_away = (0..n).any(|i| d.accepts(&flipped(&w, i)));
                if possible {
                    assert!(one_away, "{l}: {:?} is no near-miss", w);
                }
            }
        }
    }
    let rng = &mut ChaCha8Rng::seed_from_u64(3);
    let member = b"abababababab";
    let far = (0..50)
        .filter_map(|_| Language::AbStar.non_member(12, rng))
        .filter(|w| w.iter().zip(member).filter(|(x, y)| x != y).count() > 1)
        .count();
    assert!(
        far > 40,
        "uniform negatives of (ab)* are mostly far from (ab)^6: {far} of 50"
    );
    // (aa)* is the parity of the length: its only strings are a^n.
    for n in 0..=12 {
        let rng = &mut ChaCha8Rng::seed_from_u64(n as u64);
        let w = Language::EvenA
            .near_miss(n, rng)
            .or_else(|| Language::EvenA.member(n, rng));
        assert_eq!(w, Some(vec![b'a'; n]));
    }
}

fn flipped(w: &[u8], i: usize) -> Vec<u8> {
    let mut w = w.to_vec();
    w[i] = if w[i] == b'a' { b'b' } else { b'a' };
    w
}

#[test]
fn samples_are_balanced_labelled_and_deterministic() {
    let v = vocab();
    assert_eq!(v.token(BOS_ID), Some("<bos>"));
    assert_eq!(v.token(EOS_ID), Some("<eos>"));
    assert_eq!(v.token(A_ID), Some("a"));
    assert_eq!(v.token(A_ID + 1), Some("b"));
    assert_eq!(encode(b"ab"), vec![BOS_ID, A_ID, A_ID + 1, EOS_ID]);
    for l in Language::ALL {
        for negatives in [Negatives::Uniform, Negatives::NearMiss] {
            let set = LanguageSamples {
                language: l,
                negatives,
                seed: 7,
            };
            for n in [1, 2, 9, 40] {
                let samples: Vec<_> = (0..64).map(|i| set.sample(Split::Train, n, i)).collect();
                let positives = samples.iter().filter(|s| s.label == 1).count();
                let want = match (l.has_members(n), l.has_non_members(n)) {
                    (true, true) => 32,
                    (true, false) => 64,
                    _ => 0,
                };
                assert_eq!(positives, want, "{l} at length {n}");
                for (i, s) in samples.iter().enumerate() {
                    assert_eq!(s.ids.len(), n + 2);
                    assert_eq!((s.ids[0], s.ids[n + 1]), (BOS_ID, EOS_ID));
                    let w: Vec<u8> = s.ids[1..=n]
                        .iter()
                        .map(|&id| if id == A_ID { b'a' } else { b'b' })
                        .collect();
                    assert_eq!(s.label, u32::from(dfa(l).accepts(&w)));
                    assert_eq!(*s, set.sample(Split::Train, n, i as u64));
                }
                let val: Vec<_> = (0..64).map(|i| set.sample(Split::Val, n, i)).collect();
                if n >= 9 && l != Language::EvenA && l != Language::AbStar {
                    assert_ne!(samples, val, "{l}: the splits draw other strings");
                }
            }
        }
    }
}

#[test]
fn names_and_patterns_parse_and_unknown_ones_are_errors() {
    for l in Language::ALL {
        assert_eq!(l.name().parse::<Language>().unwrap(), l);
        assert_eq!(l.pattern().parse::<Language>().unwrap(), l);
    }
    assert_eq!(
        "Sigma*ab Sigma*".parse::<Language>().unwrap(),
        Language::ContainsAb
    );
    let err = "(abc)*".parse::<Language>().unwrap_err().to_string();
    assert!(err.contains("(abc)*") && err.contains("aa-star"), "{err}");
    assert!("near"
        .parse::<Negatives>()
        .unwrap_err()
        .to_string()
        .contains("near-miss"));
}

/// Lengths where every string has one label cannot tell a classifier from a constant answer
/// (issue 55, f07): odd lengths of `(ab)*` hold non-members only; `(aa)*` has one label per
/// length but both across even and odd lengths, which only the length's parity tells apart.
#[test]
fn lengths_with_one_label_are_named() {
    let why = Language::AbStar.one_label([41, 43, 45]).expect("all odd");
    assert!(why.contains("non-member") && why.contains("(ab)*"), "{why}");
    assert_eq!(Language::AbStar.one_label([41, 42]), None);
    assert!(Language::EvenA
        .one_label([42, 44])
        .unwrap()
        .contains("is a member"));
    assert_eq!(Language::EvenA.one_label([42, 43]), None);
    assert!(
        Language::ContainsAb.one_label([1]).is_some(),
        "no member of length 1"
    );
    assert_eq!(Language::Parity.one_label([1]), None);
    assert_eq!(
        Language::Parity.one_label([]),
        None,
        "no lengths: nothing to refuse"
    );
    // Where both labels occur, a sample at each length has each label a length allows.
    for l in Language::ALL {
        for n in 1..12 {
            let one = l.one_label([n]);
            assert_eq!(
                one.is_none(),
                l.has_members(n) && l.has_non_members(n),
                "{l} at {n}"
            );
        }
    }
}
