//! The related papers' tasks beside the number and letter tasks: formal languages, fixed-offset
//! retrieval, the canonical tasks and the ambiguous task. Each takes its sizes from a JSON
//! object of parameters (missing ones take the task's defaults), generates samples as JSON
//! records, and validates a record by recomputing its answer from the tokens alone.

use std::str::FromStr;

use serde_json::{json, Value};

use ropelab_tasks::ambiguous::{self, Kind};
use ropelab_tasks::{language, AmbiguousTask, CanonicalKind, CanonicalTask, Language};
use ropelab_tasks::{LanguageSamples, Negatives, OffsetTask, Split};

/// A task error as text (the caller raises it).
type Result<T> = std::result::Result<T, String>;

/// The parameters of a task.
struct Params(Value);

impl Params {
    fn parse(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("parameters: {e}"))?;
        if !v.is_object() {
            return Err("parameters must be a JSON object".into());
        }
        Ok(Self(v))
    }

    fn usize_or(&self, key: &str, default: Option<usize>) -> Result<usize> {
        match self.0.get(key) {
            None | Some(Value::Null) => {
                default.ok_or_else(|| format!("parameter {key} is missing"))
            }
            Some(v) => v
                .as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| format!("parameter {key} is not a non-negative integer: {v}")),
        }
    }

    fn str_or<'a>(&'a self, key: &str, default: Option<&'a str>) -> Result<&'a str> {
        match self.0.get(key) {
            None | Some(Value::Null) => {
                default.ok_or_else(|| format!("parameter {key} is missing"))
            }
            Some(v) => v
                .as_str()
                .ok_or_else(|| format!("parameter {key} is not a string: {v}")),
        }
    }
}

/// The ambiguous task's sample kind: `agree` (in `split`), `conflict` or `length` (with
/// `extra` more items).
fn ambiguous_kind(p: &Params, split: Split) -> Result<Kind> {
    match p.str_or("kind", Some("agree"))? {
        "agree" => Ok(Kind::Agree(split)),
        "conflict" => Ok(Kind::Conflict),
        "length" => Ok(Kind::Length(p.usize_or("extra", None)?)),
        other => Err(format!(
            "parameter kind {other:?} is not agree, conflict or length"
        )),
    }
}

fn ambiguous_task(p: &Params) -> Result<AmbiguousTask> {
    AmbiguousTask::new(
        p.usize_or("letters", Some(ambiguous::LETTERS))?,
        p.usize_or("values", Some(ambiguous::VALUES))?,
        p.usize_or("items", Some(ambiguous::ITEMS))?,
    )
    .map_err(|e| e.to_string())
}

fn canonical_task(p: &Params) -> Result<CanonicalTask> {
    let kind = CanonicalKind::from_str(p.str_or("kind", None)?).map_err(|e| e.to_string())?;
    let len = p.usize_or("len", None)?;
    CanonicalTask::new(
        kind,
        len,
        p.usize_or("symbols", Some(len))?,
        p.usize_or(
            "attributes",
            Some(if kind == CanonicalKind::Index { 1 } else { 2 }),
        )?,
    )
    .map_err(|e| e.to_string())
}

fn offset_only(p: &Params) -> Result<OffsetTask> {
    OffsetTask::new(p.usize_or("vocab", None)?, p.usize_or("k", None)?).map_err(|e| e.to_string())
}

fn offset_task(p: &Params) -> Result<(OffsetTask, usize)> {
    let task = offset_only(p)?;
    let length = p.usize_or("length", None)?;
    task.check_length(length).map_err(|e| e.to_string())?;
    Ok((task, length))
}

fn language_of(p: &Params) -> Result<Language> {
    Language::from_str(p.str_or("language", None)?).map_err(|e| e.to_string())
}

fn language_samples(p: &Params, seed: u64) -> Result<(LanguageSamples, usize)> {
    let language = language_of(p)?;
    let negatives =
        Negatives::from_str(p.str_or("negatives", Some("uniform"))?).map_err(|e| e.to_string())?;
    let length = p.usize_or("length", None)?;
    if !language.has_members(length) && !language.has_non_members(length) {
        return Err(format!("{language} has no string of length {length}"));
    }
    Ok((
        LanguageSamples {
            language,
            negatives,
            seed,
        },
        length,
    ))
}

/// Samples 0..n of `task` (`language`, `offset`, `canonical`, `ambiguous`) as JSON records.
pub fn generate(task: &str, n: usize, seed: u64, split: &str, params: &str) -> Result<String> {
    let p = Params::parse(params)?;
    let split = Split::from_str(split).map_err(|e| e.to_string())?;
    let records: Vec<Value> = match task {
        "language" => {
            let (samples, length) = language_samples(&p, seed)?;
            let vocab = language::vocab();
            (0..n)
                .map(|i| {
                    let s = samples.sample(split, length, i as u64);
                    let tokens: Vec<&str> = s
                        .ids
                        .iter()
                        .map(|&id| vocab.token(id).unwrap_or("<unk>"))
                        .collect();
                    json!({"index": i, "tokens": tokens, "ids": s.ids, "label": s.label})
                })
                .collect()
        }
        "offset" => {
            let (t, length) = offset_task(&p)?;
            (0..n)
                .map(|i| {
                    let ids = t.sequence(seed, split, length, i as u64);
                    json!({"index": i, "ids": ids, "target": t.last_target(&ids)})
                })
                .collect()
        }
        "canonical" => {
            let t = canonical_task(&p)?;
            (0..n)
                .map(|i| {
                    let s = t.sample(seed, split, i as u64);
                    json!({"index": i, "ids": s.ids, "answer": s.answer, "answer_pos": s.answer_pos})
                })
                .collect()
        }
        "ambiguous" => {
            let t = ambiguous_task(&p)?;
            let kind = ambiguous_kind(&p, split)?;
            (0..n)
                .map(|i| {
                    let s = t.sample(seed, kind, i as u64);
                    let (pos_answer, sym_answer) = s.answers(&t);
                    let tokens: Vec<&str> = s
                        .ids
                        .iter()
                        .map(|&id| t.vocab().token(id).unwrap_or("<unk>"))
                        .collect();
                    json!({
                        "index": i, "tokens": tokens, "ids": s.ids,
                        "positional": s.positional, "symbolic": s.symbolic,
                        "positional_answer": pos_answer, "symbolic_answer": sym_answer,
                    })
                })
                .collect()
        }
        other => {
            return Err(format!(
            "task {other:?} is not one of number, letter, language, offset, canonical, ambiguous"
        ))
        }
    };
    serde_json::to_string(&records).map_err(|e| e.to_string())
}

/// The record's ids.
fn ids_of(record: &Value) -> Result<Vec<u32>> {
    record
        .get("ids")
        .and_then(Value::as_array)
        .ok_or("the sample has no ids")?
        .iter()
        .map(|v| {
            v.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| format!("id {v} is not a token id"))
        })
        .collect()
}

/// The record's field `key` as an unsigned integer.
fn field(record: &Value, key: &str) -> Result<u64> {
    record
        .get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("the sample has no {key}"))
}

/// Checks a record of `task` against the answer recomputed from its tokens.
pub fn validate(task: &str, record: &str, params: &str) -> Result<()> {
    let p = Params::parse(params)?;
    let r: Value = serde_json::from_str(record).map_err(|e| format!("sample: {e}"))?;
    let ids = ids_of(&r)?;
    let mismatch = |what: &str, stated: u64, truth: u64| {
        Err(format!(
            "the sample says {what} {stated}, its tokens give {truth}"
        ))
    };
    match task {
        "language" => {
            let language = language_of(&p)?;
            let inner = match ids.as_slice() {
                [language::BOS_ID, w @ .., language::EOS_ID] => w,
                _ => return Err("a language sample is BOS w EOS".into()),
            };
            let w = inner
                .iter()
                .map(|&id| match id {
                    x if x == language::A_ID => Ok(b'a'),
                    x if x == language::A_ID + 1 => Ok(b'b'),
                    x => Err(format!("id {x} is not a symbol of the language")),
                })
                .collect::<Result<Vec<u8>>>()?;
            let truth = u64::from(language.contains(&w));
            let stated = field(&r, "label")?;
            if stated != truth {
                return mismatch("label", stated, truth);
            }
        }
        "offset" => {
            let t = offset_only(&p)?;
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= t.vocab) {
                return Err(format!("id {bad} is outside the vocabulary of {}", t.vocab));
            }
            let truth = t
                .last_target(&ids)
                .ok_or("the sequence is not longer than k")?;
            let stated = field(&r, "target")?;
            if stated != u64::from(truth) {
                return mismatch("target", stated, u64::from(truth));
            }
        }
        "canonical" => {
            let t = canonical_task(&p)?;
            let (answer, pos) = t.solve(&ids).map_err(|e| e.to_string())?;
            let (stated, stated_pos) = (field(&r, "answer")?, field(&r, "answer_pos")?);
            if stated != u64::from(answer) {
                return mismatch("answer", stated, u64::from(answer));
            }
            if stated_pos != pos as u64 {
                return mismatch("answer_pos", stated_pos, pos as u64);
            }
        }
        "ambiguous" => {
            let t = ambiguous_task(&p)?;
            let (positional, symbolic) = t.check(&ids).map_err(|e| e.to_string())?;
            for (key, truth) in [("positional", positional), ("symbolic", symbolic)] {
                let stated = field(&r, key)?;
                if stated != truth as u64 {
                    return mismatch(key, stated, truth as u64);
                }
            }
        }
        other => return Err(format!("task {other:?} has no validator here")),
    }
    Ok(())
}
