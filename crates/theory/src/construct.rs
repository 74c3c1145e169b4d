//! The hand-built heads of theorem 3.1 as real one-layer, one-head models: one-hot embeddings
//! E(s) = (onehot(s), 1), so every linear map W E(s) is a per-token row (the constant coordinate
//! is the bias); 2-D RoPE with a single angle theta; softmax at inverse temperature beta; run
//! through the same attention code as trained models (`ropelab_model::attention::attend`).
//!
//! - Index: keys v = (0, 1) for every token; queries v for letters and rho(theta)^(-s) v for an
//!   integer s; values 2 onehot(s) on letters, 0 on integers; residual F = x + a. At an integer
//!   s it copies the token at n - s if that is a letter, else keeps its own token.
//! - Retrieval: omega = 2 pi / |ALPH|; keys rho(omega)^(-phi(L)) v for a token with first
//!   symbol L; queries rho(omega)^(-phi(R)) v for a letter-letter token LR (and
//!   rho(omega)^(-phi(L)) v otherwise); values identity; F = a. At LR it copies the earlier
//!   token whose first symbol is R.
//! - Partial Induction (docs/canonical.md), two planes: plane 0 never turns (angle 0) and
//!   matches content, keys rho(omega)^(-phi(s)) v for an item of symbol s and queries the same
//!   for a query of s (the query's own key is 0 there); plane 1 turns by theta per position
//!   with q = k = v on every token, so its logit cos(theta d) falls with the distance d: a
//!   recency bias. Logit = content x plane 0 + recency x plane 1; values one-hot on the item's
//!   attribute answer; F = a. At a query of s it copies the attribute of the last item of s.

use candle_core::{DType, Device, Tensor, D};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_model::attention::attend;
use ropelab_model::{AttentionKind, Hooks, PositionEncoding, RopeLayout};
use serde::Serialize;

use crate::{invalid, Result};

/// What a token of a construction's vocabulary is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symbol {
    /// A letter (Index) with its index in ALPH.
    Letter(usize),
    /// An integer offset (Index).
    Integer(usize),
    /// A letter-number token (Retrieval): first symbol index, number.
    LetterNumber(usize, usize),
    /// A letter-letter token (Retrieval): first and second symbol indices.
    LetterLetter(usize, usize),
    /// An item (Partial Induction): symbol, attribute.
    Item(usize, usize),
    /// A query for a symbol (Partial Induction).
    Query(usize),
    /// An answer naming an attribute (Partial Induction).
    Answer(usize),
}

/// A one-layer, one-head model with per-token query, key and value rows.
#[derive(Debug, Clone)]
pub struct HandHead {
    /// The vocabulary.
    pub vocab: Vec<Symbol>,
    q: Tensor,      // [vocab, 2 planes]
    k: Tensor,      // [vocab, 2 planes]
    v: Tensor,      // [vocab, vocab]
    residual: bool, // F = x + a (Index) or F = a (Retrieval)
    position: PositionEncoding,
    beta: f64,
}

fn rot(angle: f64) -> [f64; 2] {
    // rho(angle) applied to v = (0, 1).
    [-angle.sin(), angle.cos()]
}

fn rows<const W: usize>(values: Vec<[f64; W]>, device: &Device) -> Result<Tensor> {
    let n = values.len();
    Ok(Tensor::from_vec(values.concat(), (n, W), device)?)
}

impl HandHead {
    /// The Index head over `letters` letters and integers 1..=`max_int`.
    pub fn index(letters: usize, max_int: usize, theta: f64, beta: f64) -> Result<Self> {
        if !(theta.is_finite() && theta > 0.0 && theta < std::f64::consts::TAU) {
            return invalid(format!(
                "theta must lie in (0, 2 pi) (angles repeat every turn: 2 pi is 0), got {}",
                ropelab_model::number_text(theta)
            ));
        }
        // With one letter every letter position holds the same symbol: reading the wrong
        // one could not be seen.
        if letters < 2 {
            return invalid(format!(
                "the Index head needs at least 2 letters, got {letters}"
            ));
        }
        let vocab: Vec<Symbol> = (0..letters)
            .map(Symbol::Letter)
            .chain((1..=max_int).map(Symbol::Integer))
            .collect();
        let q = vocab
            .iter()
            .map(|s| match s {
                Symbol::Integer(i) => rot(-(*i as f64) * theta),
                _ => rot(0.0),
            })
            .collect();
        let n = vocab.len();
        let mut v = vec![0.0; n * n];
        for (i, s) in vocab.iter().enumerate() {
            if matches!(s, Symbol::Letter(_)) {
                v[i * n + i] = 2.0;
            }
        }
        let (q, k) = (
            rows(q, &Device::Cpu)?,
            rows(vec![rot(0.0); n], &Device::Cpu)?,
        );
        Self::build(vocab, q, k, v, true, vec![theta], beta)
    }

    /// The Retrieval head over `letters` letters (alphabet) and numbers 1..=`numbers`.
    pub fn retrieval(letters: usize, numbers: usize, theta: f64, beta: f64) -> Result<Self> {
        if !((0.0..=std::f64::consts::TAU).contains(&theta)) {
            return invalid(format!(
                "theta must lie in [0, 2 pi] (angles repeat every turn), got {}",
                ropelab_model::number_text(theta)
            ));
        }
        if letters < 2 {
            return invalid(format!(
                "the alphabet needs at least 2 letters, got {letters}"
            ));
        }
        let omega = 2.0 * std::f64::consts::PI / letters as f64;
        let phi = |l: usize| (l + 1) as f64;
        let vocab: Vec<Symbol> = (0..letters)
            .flat_map(|l| (1..=numbers).map(move |d| Symbol::LetterNumber(l, d)))
            .chain((0..letters).flat_map(|l| (0..letters).map(move |r| Symbol::LetterLetter(l, r))))
            .collect();
        let first = |s: &Symbol| match *s {
            Symbol::LetterNumber(l, _) | Symbol::LetterLetter(l, _) | Symbol::Letter(l) => l,
            _ => 0,
        };
        let q = vocab
            .iter()
            .map(|s| match *s {
                Symbol::LetterLetter(_, r) => rot(-phi(r) * omega),
                other => rot(-phi(first(&other)) * omega),
            })
            .collect();
        let k = vocab.iter().map(|s| rot(-phi(first(s)) * omega)).collect();
        let n = vocab.len();
        let mut v = vec![0.0; n * n];
        for i in 0..n {
            v[i * n + i] = 1.0;
        }
        let (q, k) = (rows(q, &Device::Cpu)?, rows(k, &Device::Cpu)?);
        Self::build(vocab, q, k, v, false, vec![theta], beta)
    }

    /// The Partial Induction head over `symbols` symbols x `attributes` attributes, in the
    /// canonical task's token order (items s x attributes + a, then one query per symbol, then
    /// one answer per attribute): plane 0 at angle 0 weighted by `content`, plane 1 at `theta`
    /// weighted by `recency` (either weight may be 0, to see what the other plane does alone).
    pub fn partial(
        symbols: usize,
        attributes: usize,
        theta: f64,
        content: f64,
        recency: f64,
        beta: f64,
    ) -> Result<Self> {
        if symbols < 2 || attributes < 2 {
            return invalid(format!(
                "Partial Induction needs at least 2 symbols and 2 attributes, got {symbols} x {attributes}"
            ));
        }
        if !((0.0..=std::f64::consts::TAU).contains(&theta)) {
            return invalid(format!(
                "theta must lie in [0, 2 pi] (angles repeat every turn), got {}",
                ropelab_model::number_text(theta)
            ));
        }
        if !(content.is_finite() && recency.is_finite() && content >= 0.0 && recency >= 0.0) {
            return invalid(format!(
                "the plane weights must be non-negative, got {content} and {recency}"
            ));
        }
        let omega = 2.0 * std::f64::consts::PI / symbols as f64;
        let vocab: Vec<Symbol> = (0..symbols)
            .flat_map(|s| (0..attributes).map(move |a| Symbol::Item(s, a)))
            .chain((0..symbols).map(Symbol::Query))
            .chain((0..attributes).map(Symbol::Answer))
            .collect();
        let match_row = |s: usize| rot(-(s as f64) * omega);
        let recent = rot(0.0);
        let (mut q, mut k) = (vec![], vec![]);
        for sym in &vocab {
            let (qc, kc) = match *sym {
                Symbol::Item(s, _) => ([0.0; 2], match_row(s)),
                Symbol::Query(s) => (match_row(s), [0.0; 2]),
                _ => ([0.0; 2], [0.0; 2]),
            };
            q.push([
                content * qc[0],
                content * qc[1],
                recency * recent[0],
                recency * recent[1],
            ]);
            k.push([kc[0], kc[1], recent[0], recent[1]]);
        }
        let n = vocab.len();
        let answer = |a: usize| symbols * attributes + symbols + a;
        let mut v = vec![0.0; n * n];
        for (i, sym) in vocab.iter().enumerate() {
            if let Symbol::Item(_, a) = *sym {
                v[i * n + answer(a)] = 1.0;
            }
        }
        let (q, k) = (rows(q, &Device::Cpu)?, rows(k, &Device::Cpu)?);
        Self::build(vocab, q, k, v, false, vec![0.0, theta], beta)
    }

    /// The pre-rotation query and key rows of `token` (`2 x planes` dims each).
    pub fn query_key(&self, token: usize) -> Result<(Vec<f64>, Vec<f64>)> {
        Ok((self.q.get(token)?.to_vec1()?, self.k.get(token)?.to_vec1()?))
    }

    /// The head's position encoding (explicit plane angles).
    pub fn position(&self) -> &PositionEncoding {
        &self.position
    }

    /// The softmax's inverse temperature (the logit scale).
    pub fn beta(&self) -> f64 {
        self.beta
    }

    fn build(
        vocab: Vec<Symbol>,
        q: Tensor,
        k: Tensor,
        v: Vec<f64>,
        residual: bool,
        thetas: Vec<f64>,
        beta: f64,
    ) -> Result<Self> {
        if !(beta.is_finite() && beta > 0.0) {
            return invalid(format!(
                "the inverse temperature beta must be positive, got {beta}"
            ));
        }
        let n = vocab.len();
        Ok(Self {
            q,
            k,
            v: Tensor::from_vec(v, (n, n), &Device::Cpu)?,
            vocab,
            residual,
            position: PositionEncoding::angles(thetas, RopeLayout::Interleaved),
            beta,
        })
    }

    /// Read-out logits at the last position: ids [batch, pos] -> [batch, vocab] (f64).
    pub fn readout_last(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let flat = ids.flatten_all()?;
        let heads = |table: &Tensor, width: usize| -> Result<Tensor> {
            Ok(table.index_select(&flat, 0)?.reshape((b, 1, t, width))?) // [batch, 1, pos, width]
        };
        let n = self.vocab.len();
        let width = self.q.dim(1)?;
        let z = attend(
            0,
            heads(&self.q, width)?,
            heads(&self.k, width)?,
            &heads(&self.v, n)?,
            &self.position,
            AttentionKind::Softmax,
            self.beta,
            &mut Hooks::new(),
            None,
        )?; // [batch, 1, pos, vocab]
        let a = z.squeeze(1)?.narrow(1, t - 1, 1)?.squeeze(1)?; // [batch, vocab]
        if !self.residual {
            return Ok(a);
        }
        let last = ids.narrow(1, t - 1, 1)?.squeeze(1)?;
        let onehot = Tensor::eye(n, DType::F64, ids.device())?.index_select(&last, 0)?;
        Ok((a + onehot)?)
    }

    /// The token the task says the head must output at the last position, or `None` when the
    /// input is outside the head's domain.
    pub fn expected(&self, seq: &[usize]) -> Option<usize> {
        let last = *seq.last()?;
        match self.vocab[last] {
            Symbol::Letter(_) => Some(last),
            Symbol::Integer(s) => {
                let target = (seq.len() - 1).checked_sub(s)?;
                match self.vocab[seq[target]] {
                    Symbol::Letter(_) => Some(seq[target]),
                    _ => Some(last),
                }
            }
            Symbol::LetterLetter(l, r) => {
                if l == r {
                    return None; // the query would match itself
                }
                let first = |i: usize| match self.vocab[i] {
                    Symbol::LetterNumber(f, _) | Symbol::LetterLetter(f, _) => f,
                    _ => usize::MAX,
                };
                let mut hits = seq[..seq.len() - 1].iter().filter(|&&t| first(t) == r);
                match (hits.next(), hits.next()) {
                    (Some(&t), None) => Some(t),
                    _ => None,
                }
            }
            Symbol::Query(s) => {
                let answer = |a: usize| self.vocab.iter().position(|&x| x == Symbol::Answer(a));
                seq[..seq.len() - 1]
                    .iter()
                    .rev()
                    .find_map(|&t| match self.vocab[t] {
                        Symbol::Item(x, a) if x == s => Some(answer(a)),
                        _ => None,
                    })
                    .flatten()
            }
            Symbol::LetterNumber(..) | Symbol::Item(..) | Symbol::Answer(_) => None,
        }
    }
}

/// Result of checking a head on a set of inputs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ConstructCheck {
    /// Inputs in the head's domain that were checked.
    pub inputs: usize,
    /// Inputs whose read-out argmax is the expected token.
    pub correct: usize,
    /// Smallest decoding gap (expected token's read-out minus the best other).
    pub min_gap: f64,
}

/// Checks `head` on `sequences` (token ids, query last), in batches of one length.
pub fn check(head: &HandHead, sequences: &[Vec<usize>]) -> Result<ConstructCheck> {
    let mut out = ConstructCheck {
        inputs: 0,
        correct: 0,
        min_gap: f64::INFINITY,
    };
    let mut by_len: std::collections::BTreeMap<usize, Vec<(&Vec<usize>, usize)>> =
        Default::default();
    for s in sequences {
        if let Some(want) = head.expected(s) {
            by_len.entry(s.len()).or_default().push((s, want));
        }
    }
    for (len, group) in by_len {
        for chunk in group.chunks(4096) {
            let ids: Vec<u32> = chunk
                .iter()
                .flat_map(|(s, _)| s.iter().map(|&t| t as u32))
                .collect();
            let ids = Tensor::from_vec(ids, (chunk.len(), len), &Device::Cpu)?;
            let logits: Vec<Vec<f64>> = head.readout_last(&ids)?.to_vec2()?;
            let argmax: Vec<u32> = head.readout_last(&ids)?.argmax(D::Minus1)?.to_vec1()?;
            for ((_, want), (row, top)) in chunk.iter().zip(logits.iter().zip(argmax)) {
                out.inputs += 1;
                if top as usize == *want {
                    out.correct += 1;
                }
                let rival = row
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i != want)
                    .map(|(_, v)| *v)
                    .fold(f64::NEG_INFINITY, f64::max);
                out.min_gap = out.min_gap.min(row[*want] - rival);
            }
        }
    }
    Ok(out)
}

/// Every sequence of length 1..=max_len over a vocabulary of `vocab` tokens.
pub fn all_sequences(vocab: usize, max_len: usize) -> Vec<Vec<usize>> {
    let mut out = vec![];
    let mut layer: Vec<Vec<usize>> = vec![vec![]];
    for _ in 0..max_len {
        layer = layer
            .iter()
            .flat_map(|s| {
                (0..vocab).map(move |t| {
                    let mut next = s.clone();
                    next.push(t);
                    next
                })
            })
            .collect();
        out.extend(layer.iter().cloned());
    }
    out
}

/// `count` random sequences of length `len` in the head's domain, drawn directly: for Index a
/// uniform sequence whose query is a letter or an integer pointing inside; for Retrieval a
/// query LR (L != R), exactly one earlier token starting with R, the others starting elsewhere.
pub fn random_sequences(head: &HandHead, len: usize, count: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let first = |s: &Symbol| match *s {
        Symbol::LetterNumber(f, _) | Symbol::LetterLetter(f, _) => Some(f),
        _ => None,
    };
    let pick = |rng: &mut ChaCha8Rng, ok: &dyn Fn(&Symbol) -> bool| -> Option<usize> {
        let choices: Vec<usize> = (0..head.vocab.len())
            .filter(|&i| ok(&head.vocab[i]))
            .collect();
        (!choices.is_empty()).then(|| choices[rng.random_range(0..choices.len())])
    };
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let s = match head.vocab.first() {
            Some(Symbol::Letter(_)) | Some(Symbol::Integer(_)) => {
                let mut s: Vec<usize> = (0..len - 1)
                    .map(|_| rng.random_range(0..head.vocab.len()))
                    .collect();
                let query = pick(&mut rng, &|x| match x {
                    Symbol::Integer(i) => *i < len,
                    _ => true,
                });
                s.push(query.expect("letters are always allowed"));
                s
            }
            _ => {
                let Some(query) = pick(
                    &mut rng,
                    &|x| matches!(x, Symbol::LetterLetter(l, r) if l != r),
                ) else {
                    return out;
                };
                let Symbol::LetterLetter(_, r) = head.vocab[query] else {
                    unreachable!()
                };
                let hit = rng.random_range(0..len - 1);
                let mut s: Vec<usize> = (0..len - 1)
                    .map(|p| {
                        let want_r = p == hit;
                        pick(&mut rng, &|x| (first(x) == Some(r)) == want_r)
                            .expect("every first symbol has tokens")
                    })
                    .collect();
                s.push(query);
                s
            }
        };
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discrepancy;

    #[test]
    fn index_head_computes_index_on_every_input_up_to_length_6() {
        let theta = 0.866;
        let n0 = 6;
        let margin = discrepancy::index(theta, n0).unwrap()[n0 - 1].delta;
        let head = HandHead::index(3, n0 - 1, theta, 40.0 / margin).unwrap();
        let inputs = all_sequences(head.vocab.len(), n0);
        let c = check(&head, &inputs).unwrap();
        assert!(c.inputs > 100_000, "{c:?}");
        assert_eq!(c.correct, c.inputs, "{c:?}");
        assert!(c.min_gap > 0.99, "{c:?}");
    }

    #[test]
    fn retrieval_head_computes_retrieval_on_every_input_up_to_length_4() {
        let (letters, numbers, n0) = (3, 2, 4);
        let omega = 2.0 * std::f64::consts::PI / letters as f64;
        let theta = omega / (4.0 * n0 as f64);
        let margin = discrepancy::retrieval(theta, letters, n0).unwrap()[n0 - 1].delta;
        let head = HandHead::retrieval(letters, numbers, theta, 40.0 / margin).unwrap();
        let c = check(&head, &all_sequences(head.vocab.len(), n0)).unwrap();
        assert!(c.inputs > 1000, "{c:?}");
        assert_eq!(c.correct, c.inputs, "{c:?}");
        assert!(c.min_gap > 0.99, "{c:?}");
    }

    #[test]
    fn both_heads_hold_on_long_random_inputs() {
        let n = 64;
        let margin = discrepancy::index(0.866, n).unwrap()[n - 1].delta;
        let index = HandHead::index(5, n - 1, 0.866, 40.0 / margin).unwrap();
        let c = check(&index, &random_sequences(&index, n, 2000, 1)).unwrap();
        assert_eq!((c.correct, c.inputs), (2000, 2000), "{c:?}");
        let omega = 2.0 * std::f64::consts::PI / 8.0;
        let theta = omega / (4.0 * n as f64);
        let margin = discrepancy::retrieval(theta, 8, n).unwrap()[n - 1].delta;
        let retrieval = HandHead::retrieval(8, 8, theta, 40.0 / margin).unwrap();
        let c = check(&retrieval, &random_sequences(&retrieval, n, 500, 2)).unwrap();
        assert_eq!((c.correct, c.inputs), (500, 500), "{c:?}");
    }

    #[test]
    fn partial_head_needs_both_of_its_planes() {
        // Every input up to length 5 over 2 symbols x 2 attributes (8 tokens) whose last token
        // is a query with an earlier item of its symbol.
        let n0 = 5;
        let theta = std::f64::consts::PI / (2.0 * n0 as f64);
        let head = HandHead::partial(2, 2, theta, 1.0, 0.5, 200.0).unwrap();
        assert_eq!(head.vocab.len(), 8);
        assert_eq!(head.vocab[5], Symbol::Query(1));
        let inputs = all_sequences(head.vocab.len(), n0);
        let both = check(&head, &inputs).unwrap();
        assert!(both.inputs > 5_000, "{both:?}");
        assert_eq!(both.correct, both.inputs, "{both:?}");
        // Worked example: items (1,0) (0,1) (1,1), query "symbol 1": attribute 1 (answer id 7).
        assert_eq!(head.expected(&[2, 1, 3, 5]), Some(7));
        // Content alone cannot tell two items of the queried symbol apart; recency alone
        // picks the last item whatever its symbol.
        for (content, recency) in [(1.0, 0.0), (0.0, 0.5)] {
            let one = HandHead::partial(2, 2, theta, content, recency, 200.0).unwrap();
            let c = check(&one, &inputs).unwrap();
            assert!(
                c.correct < c.inputs && c.min_gap <= 0.0,
                "{content} {recency}: {c:?}"
            );
        }
        assert!(HandHead::partial(1, 2, theta, 1.0, 0.5, 1.0).is_err());
        assert!(HandHead::partial(2, 2, theta, -1.0, 0.5, 1.0).is_err());
    }

    #[test]
    fn a_cold_softmax_breaks_the_index_head() {
        // beta far too small for the margin at length 6: the head no longer selects sharply.
        let head = HandHead::index(3, 5, 0.866, 0.5).unwrap();
        let c = check(&head, &all_sequences(head.vocab.len(), 6)).unwrap();
        assert!(c.correct < c.inputs, "{c:?}");
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(HandHead::index(3, 5, 0.0, 10.0).is_err());
        assert!(HandHead::index(3, 5, 0.5, 0.0).is_err());
        assert!(HandHead::retrieval(1, 2, 0.1, 10.0).is_err());
    }
}

/// The Index head's default RoPE angle (radians per position).
pub const INDEX_THETA: f64 = 0.866;

/// The decoding gap, in logits, that the read-out scale beta is chosen to give at the checked
/// length: beta = DECODING_LOGITS / discrepancy (a softmax this sharp is a hard selection).
pub const DECODING_LOGITS: f64 = 40.0;

/// What `verify` checks: a hand-built head on every input up to `n0` and on random inputs of
/// length `long`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstructOptions {
    /// The head.
    pub mechanism: crate::discrepancy::Mechanism,
    /// RoPE angle; default: [`INDEX_THETA`] for Index, omega / (4 max(n0, long)) for
    /// Retrieval (omega = 2 pi / letters), small enough that rotation never beats a letter.
    pub theta: Option<f64>,
    /// Letters (Index: letters besides the integers; Retrieval: the alphabet).
    pub letters: usize,
    /// Longest input checked exhaustively.
    pub n0: usize,
    /// Length of the random inputs.
    pub long: usize,
    /// Number of random inputs.
    pub samples: usize,
}

impl Default for ConstructOptions {
    fn default() -> Self {
        Self {
            mechanism: crate::discrepancy::Mechanism::Index,
            theta: None,
            letters: 3,
            n0: 5,
            long: 64,
            samples: 1000,
        }
    }
}

impl ConstructOptions {
    /// Memory of [`verify`]: the random inputs, held together (the exhaustive inputs up to
    /// `n0` are bounded by the limits on `n0` and `letters`).
    pub fn need(&self) -> ropelab_io::Need {
        use ropelab_io::resources::bytes;
        // The head's value matrix is vocabulary x vocabulary f64: Index reads the letters and
        // the integers up to the longest input, Retrieval every letter-number (numbers 1 and 2)
        // and letter-letter pair.
        let n = self.n0.max(self.long);
        let vocab = match self.mechanism {
            crate::discrepancy::Mechanism::Index => {
                self.letters.saturating_add(n).saturating_add(1)
            }
            crate::discrepancy::Mechanism::Retrieval => {
                bytes(&[self.letters, 2 + self.letters]) as usize
            }
        };
        ropelab_io::Need::new()
            .memory(
                bytes(&[self.samples, 8 * self.long + 24]),
                format!("{} random inputs of {} tokens", self.samples, self.long),
            )
            .memory(
                bytes(&[8, vocab, vocab]),
                format!("the head's {vocab} x {vocab} value matrix"),
            )
    }
}

/// One verified input set: what it was and the outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstructReport {
    /// The inputs (e.g. "every input up to length 5").
    pub inputs: String,
    /// Correct read-outs and the smallest decoding gap.
    pub check: ConstructCheck,
}

impl ConstructOptions {
    /// Fails on options no check can run with.
    pub fn check(&self) -> Result<()> {
        if self.n0 < 1 {
            return crate::invalid(format!("n0 must be at least 1, got {}", self.n0));
        }
        // Index reads a letter at each position; Retrieval matches one of the alphabet's
        // symbols against another.
        let fewest = match self.mechanism {
            crate::discrepancy::Mechanism::Index => 1,
            crate::discrepancy::Mechanism::Retrieval => 2,
        };
        let most = crate::discrepancy::MAX_ALPHABET;
        if self.letters > most {
            return crate::invalid(format!(
                "--letters {} is more than the {most} letters a hand-built head takes",
                self.letters
            ));
        }
        if self.samples == 0 {
            return crate::invalid("--samples must be at least 1 (random inputs checked)");
        }
        if self.letters < fewest {
            return crate::invalid(format!(
                "the {} head needs at least {fewest} letters, got {}",
                self.mechanism, self.letters
            ));
        }
        let max = crate::discrepancy::MAX_QUERY_POSITION;
        if !(2..=max).contains(&self.long) {
            return crate::invalid(format!(
                "the random inputs' length (--long) must be between 2 and {max}, got {}",
                self.long
            ));
        }
        if self.n0 > max {
            return crate::invalid(format!("n0 must be at most {max}, got {}", self.n0));
        }
        if self.long <= self.n0 {
            return crate::invalid(format!(
                "the random inputs' length (--long {}) must exceed --n0 {}: every input up to \
                 n0 is checked already",
                self.long, self.n0
            ));
        }
        Ok(())
    }

    /// The head checked on inputs of length up to `n`: its vocabulary holds integers up to
    /// `n`, and beta is [`DECODING_LOGITS`] over the head's discrepancy at `n`.
    pub fn head(&self, n: usize) -> Result<HandHead> {
        use crate::discrepancy::{self, Mechanism};
        match self.mechanism {
            Mechanism::Index => {
                let theta = self.theta.unwrap_or(INDEX_THETA);
                let margin = discrepancy::index(theta, n)?[n - 1].delta;
                if margin <= 0.0 {
                    return crate::invalid(format!("theta {theta} gives no margin at length {n}"));
                }
                HandHead::index(self.letters, n - 1, theta, DECODING_LOGITS / margin)
            }
            Mechanism::Retrieval => {
                let n_max = self.n0.max(self.long);
                let omega = 2.0 * std::f64::consts::PI / self.letters.max(2) as f64;
                let theta = self.theta.unwrap_or(omega / (4.0 * n_max as f64));
                let margin = discrepancy::retrieval(theta, self.letters, n)?[n - 1].delta;
                if margin <= 0.0 {
                    return crate::invalid(format!("theta {theta} gives no margin at length {n}"));
                }
                HandHead::retrieval(self.letters, 2, theta, DECODING_LOGITS / margin)
            }
        }
    }
}

/// Builds the hand-built head of `options` as a real one-layer model and checks its read-out on
/// every input up to `n0` tokens and on `samples` random inputs of length `long` (seed 0).
pub fn verify(options: &ConstructOptions) -> Result<Vec<ConstructReport>> {
    options.check()?;
    let short = options.head(options.n0)?;
    if (short.vocab.len() as f64).powi(options.n0 as i32) > 5e6 {
        return crate::invalid(format!(
            "{} tokens up to length {} is too many inputs to enumerate; lower n0",
            short.vocab.len(),
            options.n0
        ));
    }
    let long = options.head(options.long)?;
    let mut out = vec![];
    for (inputs, head, sequences) in [
        (
            format!("every input up to length {}", options.n0),
            &short,
            all_sequences(short.vocab.len(), options.n0),
        ),
        (
            format!(
                "{} random inputs of length {}",
                options.samples, options.long
            ),
            &long,
            random_sequences(&long, options.long, options.samples, 0),
        ),
    ] {
        out.push(ConstructReport {
            inputs,
            check: check(head, &sequences)?,
        });
    }
    Ok(out)
}
