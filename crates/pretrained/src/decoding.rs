//! The rules a greedy continuation ([`crate::llama::Llama::generate`]) obeys beside the
//! logits: the ids that end it, and what a Hugging Face `generation_config.json` asks of greedy
//! decoding (tokens never emitted, a repetition penalty, no repeated n-grams, a least length).
//! transformers' `generate` applies each of these to greedy search; a key that changes greedy
//! decoding and that ropelab does not apply is refused naming it, and sampling or beam settings
//! (which greedy decoding has none of) are listed in [`Decoding::not_applied`] for the command
//! to say so, never dropped in silence (twenty-fifth pass, B-S2).

use std::path::Path;

use serde_json::Value;

use crate::{PretrainedError, Result};

/// What a greedy continuation obeys beside the logits.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoding {
    /// Ids that end the continuation (not emitted).
    pub stops: Vec<u32>,
    /// Ids never emitted (`suppress_tokens`).
    pub suppress: Vec<u32>,
    /// Ids not emitted as the first new token (`begin_suppress_tokens`).
    pub begin_suppress: Vec<u32>,
    /// Token sequences never completed (`bad_words_ids`): the last id of each is not emitted
    /// after the others.
    pub bad_words: Vec<Vec<u32>>,
    /// `repetition_penalty`: the logit of every id already in prompt or continuation is divided
    /// by it when positive, multiplied when negative (1 = none).
    pub repetition_penalty: f32,
    /// `no_repeat_ngram_size`: no n-gram of this size appears twice (0 = no rule).
    pub no_repeat_ngram: usize,
    /// `min_new_tokens`: no stop id before this many new tokens.
    pub min_new: usize,
    /// `min_length`: no stop id while prompt and continuation are shorter than this.
    pub min_length: usize,
    /// Settings of `generation_config.json` greedy decoding has no use for (sampling, beams),
    /// for the command to name as not applied.
    pub not_applied: Vec<String>,
    /// `max_new_tokens`: new tokens when the command gives no count.
    pub max_new_tokens: Option<usize>,
    /// `max_length`: prompt and new tokens together when the command gives no count (and
    /// `max_new_tokens` is absent).
    pub max_length: Option<usize>,
}

impl Default for Decoding {
    fn default() -> Self {
        Self::greedy(vec![])
    }
}

/// Keys of `generation_config.json` that change greedy decoding and are not applied: refused.
const REFUSED: [&str; 8] = [
    "forced_bos_token_id",
    "forced_eos_token_id",
    "forced_decoder_ids",
    "sequence_bias",
    "exponential_decay_length_penalty",
    "encoder_repetition_penalty",
    "encoder_no_repeat_ngram_size",
    "guidance_scale",
];

/// Keys of sampling and beam search, which greedy decoding does not use (named as not applied
/// when they ask for anything but greedy decoding).
const SAMPLING: [&str; 14] = [
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "epsilon_cutoff",
    "eta_cutoff",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "penalty_alpha",
    "length_penalty",
    "num_return_sequences",
];

impl Decoding {
    /// Plain greedy decoding ending at any of `stops`.
    pub fn greedy(stops: Vec<u32>) -> Self {
        Self {
            stops,
            suppress: vec![],
            begin_suppress: vec![],
            bad_words: vec![],
            repetition_penalty: 1.0,
            no_repeat_ngram: 0,
            min_new: 0,
            min_length: 0,
            not_applied: vec![],
            max_new_tokens: None,
            max_length: None,
        }
    }

    /// New tokens to generate after a prompt of `prompt` tokens when the command gives no
    /// count: `max_new_tokens`, else what `max_length` leaves (at least 1), else `fallback`
    /// (transformers' order).
    pub fn default_max_new(&self, prompt: usize, fallback: usize) -> usize {
        match (self.max_new_tokens, self.max_length) {
            (Some(n), _) => n,
            (None, Some(total)) => total.saturating_sub(prompt).max(1),
            (None, None) => fallback,
        }
    }

    /// The decoding of a Hugging Face model directory: [`crate::hf::stop_tokens`] and the
    /// rules of its `generation_config.json` when present. Every token id must be below
    /// `vocab`; a key given twice, a value of another type, or a key that changes greedy
    /// decoding and is not applied here is refused naming the file.
    pub fn from_hf_dir(dir: &Path, vocab: usize) -> Result<Self> {
        let mut d = Self::greedy(crate::hf::stop_tokens(dir, vocab)?);
        let path = dir.join("generation_config.json");
        if !crate::hf::regular_file(&path)? {
            return Ok(d);
        }
        let text = crate::json_text(&path, crate::SMALL_JSON_BYTES)?;
        crate::hf::unique_keys(&path, text.as_bytes(), "")?;
        let json: Value = serde_json::from_str(&text)
            .map_err(|e| PretrainedError::gguf(&path, format!("not JSON: {e}")))?;
        let bad = |why: String| PretrainedError::gguf(&path, why);
        let Some(map) = json.as_object() else {
            return Err(bad(format!(
                "is {}, not a JSON object",
                crate::hf::shown_json(&json)
            )));
        };
        let id = |key: &str, v: &Value| -> Result<u32> {
            v.as_u64()
                .filter(|&i| (i as usize) < vocab)
                .map(|i| i as u32)
                .ok_or_else(|| {
                    bad(format!(
                        "{key} holds {}, not a token id of the model's {vocab}",
                        crate::hf::shown_json(v)
                    ))
                })
        };
        let ids = |key: &str, v: &Value| -> Result<Vec<u32>> {
            match v {
                Value::Null => Ok(vec![]),
                Value::Array(items) => items.iter().map(|i| id(key, i)).collect(),
                one => Ok(vec![id(key, one)?]),
            }
        };
        let number = |key: &str, v: &Value| -> Result<f64> {
            v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
                bad(format!(
                    "{key} is {}, not a finite number",
                    crate::hf::shown_json(v)
                ))
            })
        };
        let count = |key: &str, v: &Value| -> Result<usize> {
            match v {
                Value::Null => Ok(0),
                _ => v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| {
                        bad(format!(
                            "{key} is {}, not a whole count",
                            crate::hf::shown_json(v)
                        ))
                    }),
            }
        };
        for (key, v) in map {
            match key.as_str() {
                "bos_token_id" | "pad_token_id" | "decoder_start_token_id" => {
                    ids(key, v)?;
                }
                "suppress_tokens" => d.suppress = ids(key, v)?,
                "begin_suppress_tokens" => d.begin_suppress = ids(key, v)?,
                "bad_words_ids" => {
                    let Value::Array(words) = v else {
                        return Err(bad(format!(
                            "bad_words_ids is {}, not a list of token id lists",
                            crate::hf::shown_json(v)
                        )));
                    };
                    for w in words {
                        let seq = match w {
                            Value::Array(_) => ids(key, w)?,
                            _ => vec![],
                        };
                        if seq.is_empty() {
                            return Err(bad(format!(
                                "bad_words_ids holds {}, not a list of token ids",
                                crate::hf::shown_json(w)
                            )));
                        }
                        d.bad_words.push(seq);
                    }
                }
                "repetition_penalty" => {
                    let p = number(key, v)?;
                    if p <= 0.0 {
                        return Err(bad(format!(
                            "repetition_penalty is {p}: it must be positive (1 = none)"
                        )));
                    }
                    d.repetition_penalty = p as f32;
                }
                "no_repeat_ngram_size" => d.no_repeat_ngram = count(key, v)?,
                "min_new_tokens" => d.min_new = count(key, v)?,
                "min_length" => d.min_length = count(key, v)?,
                "max_new_tokens" | "max_length" => {
                    let n = match v {
                        Value::Null => None,
                        _ => Some(count(key, v)?)
                            .filter(|&n| n > 0)
                            .map(Some)
                            .ok_or_else(|| {
                                bad(format!("{key} is 0: generate at least one token"))
                            })?,
                    };
                    match key.as_str() {
                        "max_new_tokens" => d.max_new_tokens = n,
                        _ => d.max_length = n,
                    }
                }
                k if REFUSED.contains(&k) => {
                    let inert = match v {
                        Value::Null => true,
                        Value::Number(n) => k.contains("penalty") && n.as_f64() == Some(1.0),
                        Value::Array(a) => a.is_empty(),
                        Value::Object(o) => o.is_empty(),
                        _ => false,
                    };
                    if !inert {
                        return Err(bad(format!(
                            "{k} is {}: it changes greedy decoding, and ropelab's generate does \
                             not apply it (remove it to generate without it)",
                            crate::hf::shown_json(v)
                        )));
                    }
                }
                k if SAMPLING.contains(&k) => {
                    let greedy = match (k, v) {
                        (_, Value::Null) => true,
                        ("do_sample", Value::Bool(b)) => !b,
                        ("num_beams" | "num_beam_groups" | "num_return_sequences", n) => {
                            n.as_u64() == Some(1)
                        }
                        _ => false,
                    };
                    if !greedy {
                        d.not_applied.push(format!("{k} = {v}"));
                    }
                }
                _ => {}
            }
        }
        Ok(d)
    }

    /// Whether only the stop ids apply (the logits' argmax is the next token).
    pub fn is_plain(&self) -> bool {
        self.suppress.is_empty()
            && self.begin_suppress.is_empty()
            && self.bad_words.is_empty()
            && self.repetition_penalty == 1.0
            && self.no_repeat_ngram == 0
            && self.min_new == 0
            && self.min_length == 0
    }

    /// The next token: the argmax (the first, on ties) of `logits` (one per vocabulary id)
    /// after this decoding's rules, given the ids so far (`context`: prompt then `new` new
    /// tokens). Every id may be ruled out: the argmax of what is left, else of `logits`.
    pub fn choose(&self, logits: &mut [f32], context: &[u32], new: usize) -> u32 {
        let ban = |logits: &mut [f32], id: u32| {
            if let Some(l) = logits.get_mut(id as usize) {
                *l = f32::NEG_INFINITY;
            }
        };
        if self.repetition_penalty != 1.0 {
            let mut seen: Vec<u32> = context.to_vec();
            seen.sort_unstable();
            seen.dedup();
            for id in seen {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = if *l < 0.0 {
                        *l * self.repetition_penalty
                    } else {
                        *l / self.repetition_penalty
                    };
                }
            }
        }
        let n = self.no_repeat_ngram;
        if n > 0 && context.len() + 1 >= n {
            let prefix = &context[context.len() + 1 - n..];
            for start in 0..=(context.len() - n) {
                if context[start..start + n - 1] == *prefix {
                    ban(logits, context[start + n - 1]);
                }
            }
        }
        for word in &self.bad_words {
            let (last, before) = word.split_last().expect("bad words are not empty");
            if context.ends_with(before) {
                ban(logits, *last);
            }
        }
        for &id in &self.suppress {
            ban(logits, id);
        }
        if new == 0 {
            for &id in &self.begin_suppress {
                ban(logits, id);
            }
        }
        if new < self.min_new || context.len() < self.min_length {
            for &id in &self.stops {
                ban(logits, id);
            }
        }
        argmax(logits)
    }
}

/// The index of the largest value (the first on ties; NaN never wins); 0 for no value.
pub fn argmax(values: &[f32]) -> u32 {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in values.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map_or(0, |(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoding(json: &str, vocab: usize) -> std::result::Result<Decoding, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), r#"{"eos_token_id": 2}"#).unwrap();
        std::fs::write(dir.path().join("generation_config.json"), json).unwrap();
        Decoding::from_hf_dir(dir.path(), vocab).map_err(|e| e.to_string())
    }

    #[test]
    fn generation_config_rules_are_read_or_refused_by_name() {
        let d = decoding(
            r#"{"eos_token_id": [2, 3], "suppress_tokens": [5], "begin_suppress_tokens": [6],
                "bad_words_ids": [[7], [1, 8]], "repetition_penalty": 1.5,
                "no_repeat_ngram_size": 2, "min_new_tokens": 1, "do_sample": true,
                "temperature": 0.6, "num_beams": 1, "bos_token_id": 1}"#,
            10,
        )
        .unwrap();
        assert_eq!(d.stops, vec![2, 3]);
        assert_eq!(
            (d.suppress.clone(), d.begin_suppress.clone()),
            (vec![5], vec![6])
        );
        assert_eq!(d.bad_words, vec![vec![7], vec![1, 8]]);
        assert_eq!(
            (d.repetition_penalty, d.no_repeat_ngram, d.min_new),
            (1.5, 2, 1)
        );
        assert_eq!(d.not_applied, vec!["do_sample = true", "temperature = 0.6"]);
        for (json, says) in [
            (r#"{"eos_token_id": 2, "eos_token_id": 0}"#, "eos_token_id"),
            (r#"{"pad_token_id": 300}"#, "pad_token_id holds 300"),
            (r#"{"bos_token_id": 300}"#, "bos_token_id holds 300"),
            (r#"{"suppress_tokens": [10]}"#, "suppress_tokens holds 10"),
            (r#"{"bad_words_ids": [[]]}"#, "bad_words_ids holds []"),
            (r#"{"repetition_penalty": -1}"#, "must be positive"),
            (r#"{"forced_bos_token_id": 1}"#, "forced_bos_token_id is 1"),
            (r#"[1]"#, "not a JSON object"),
        ] {
            let err = decoding(json, 10).unwrap_err();
            assert!(err.contains(says), "{json}: {err}");
        }
        assert!(decoding(r#"{"forced_bos_token_id": null}"#, 10).is_ok());
        // The count of new tokens when the command gives none, in transformers' order.
        let d = decoding(r#"{"max_new_tokens": 3, "max_length": 20}"#, 10).unwrap();
        assert_eq!(d.default_max_new(8, 16), 3);
        let d = decoding(r#"{"max_length": 20}"#, 10).unwrap();
        assert_eq!(
            (d.default_max_new(8, 16), d.default_max_new(30, 16)),
            (12, 1)
        );
        assert_eq!(Decoding::default().default_max_new(8, 16), 16);
        assert!(decoding(r#"{"max_new_tokens": 0}"#, 10)
            .unwrap_err()
            .contains("is 0"));
    }

    /// Each rule worked by hand on a five-token vocabulary.
    #[test]
    fn each_rule_changes_the_greedy_choice_as_transformers_does() {
        let logits = [1.0f32, 4.0, 3.0, -0.5, 2.0];
        let choose =
            |d: &Decoding, context: &[u32], new: usize| d.choose(&mut logits.clone(), context, new);
        let plain = Decoding::greedy(vec![1]);
        assert_eq!(choose(&plain, &[0], 0), 1);
        // min_new_tokens: the stop id 1 is not chosen before one new token.
        let d = Decoding {
            min_new: 1,
            ..plain.clone()
        };
        assert_eq!((choose(&d, &[0], 0), choose(&d, &[0], 1)), (2, 1));
        // suppress and begin_suppress.
        let d = Decoding {
            suppress: vec![1],
            ..plain.clone()
        };
        assert_eq!(choose(&d, &[0], 3), 2);
        let d = Decoding {
            begin_suppress: vec![1, 2],
            ..plain.clone()
        };
        assert_eq!((choose(&d, &[0], 0), choose(&d, &[0], 1)), (4, 1));
        // repetition_penalty 3: id 1 (4.0 -> 1.33) and id 2 (3.0 -> 1.0) seen: id 4 wins.
        let d = Decoding {
            repetition_penalty: 3.0,
            ..plain.clone()
        };
        assert_eq!(choose(&d, &[1, 2], 0), 4);
        // no_repeat_ngram_size 2: after "... 0 1 ... 0", 1 would repeat the bigram (0, 1).
        let d = Decoding {
            no_repeat_ngram: 2,
            ..plain.clone()
        };
        assert_eq!(
            (choose(&d, &[0, 1, 3, 0], 0), choose(&d, &[0, 1, 3], 0)),
            (2, 1)
        );
        // bad_words_ids [[1]] always; [[3, 2]] only after 3.
        let d = Decoding {
            bad_words: vec![vec![1], vec![3, 2]],
            ..plain.clone()
        };
        assert_eq!((choose(&d, &[3], 0), choose(&d, &[0], 0)), (4, 2));
        // Everything ruled out: the argmax of what is left is the first -inf.
        assert_eq!(argmax(&[f32::NEG_INFINITY; 3]), 0);
        assert_eq!(argmax(&[f32::NAN, 1.0, 1.0]), 1);
    }
}
