//! The 1-hop prompt versions of both tasks (docs/tasks.md, "Prompt versions") on the pretrained model:
//! accuracy per target-window size over several runs (dataset seed = run number).
//!
//! A prompt counts as answered when greedy decoding after the prompt produces the answer (with
//! its leading space) as its first tokens. This is checked in one forward by teacher forcing:
//! feed the prompt and the answer's tokens, and require the argmax at every answer position to
//! be the next answer token, which is exactly what greedy decoding would emit.

use candle_core::{Tensor, D};
use ropelab_model::Hooks;
use ropelab_tasks::{prompt::prompt, TaskKind};
use serde::{Deserialize, Serialize};

use crate::llama::{KvCache, Llama, PREFILL_CHUNK};
use crate::tokenizer::GgufTokenizer;
use crate::{PretrainedError, Result};

/// Defaults of `pretrained tasks` (the prompt-task table).
pub mod table_defaults {
    /// Target-window sizes.
    pub const SIZES: [usize; 11] = [12, 16, 24, 32, 48, 64, 80, 100, 150, 200, 300];
    /// Runs (dataset seed = run number).
    pub const RUNS: usize = 5;
    /// Prompts per run and size.
    pub const PROMPTS: usize = 20;
}

/// Defaults of `pretrained index-task`.
pub mod index_defaults {
    /// Array lengths.
    pub const LENGTHS: [usize; 4] = [8, 32, 128, 512];
    /// Prompts per length.
    pub const PROMPTS: usize = 20;
}

/// Accuracy at one window size (one CSV row; the runs' accuracies joined by `;`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeRow {
    /// Task.
    pub task: TaskKind,
    /// Target-window size.
    pub size: usize,
    /// Prompt length in tokens (first prompt of run 0).
    pub prompt_tokens: usize,
    /// Mean over runs.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub mean: f64,
    /// Standard deviation over runs (population).
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub sd: f64,
    /// Accuracy of each run.
    #[serde(serialize_with = "joined", deserialize_with = "split")]
    pub runs: Vec<f64>,
}

fn joined<S: serde::Serializer>(runs: &[f64], s: S) -> std::result::Result<S::Ok, S::Error> {
    let cells: Vec<String> = runs.iter().map(f64::to_string).collect();
    s.serialize_str(&cells.join(";"))
}

/// Reads the runs' accuracies joined by `;` (the inverse of `joined`).
fn split<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<f64>, D::Error> {
    let text = String::deserialize(d)?;
    text.split(';')
        .filter(|c| !c.is_empty())
        .map(|c| c.trim().parse().map_err(serde::de::Error::custom))
        .collect()
}

/// Accuracy on the index-in-array prompt at one array length (one CSV row).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IndexRow {
    /// Array length.
    pub length: usize,
    /// Prompt length in tokens (last prompt).
    pub prompt_tokens: usize,
    /// Fraction answered (chance 0.25).
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub accuracy: f64,
}

/// Whether greedy decoding of `model` after `prompt` starts with `answer` (` ` + answer).
pub fn answers(
    model: &Llama,
    tokenizer: &GgufTokenizer,
    prompt: &str,
    answer: &str,
) -> Result<(bool, usize)> {
    let ids = tokenizer.encode(prompt)?;
    let full = tokenizer.encode(&format!("{prompt} {answer}"))?;
    if full.len() <= ids.len() || full[..ids.len()] != ids[..] {
        return Err(PretrainedError::Tokenizer(format!(
            "the answer {answer:?} does not tokenize as a continuation of the prompt"
        )));
    }
    let input = Tensor::from_vec(
        full[..full.len() - 1].to_vec(),
        (1, full.len() - 1),
        model.device(),
    )?;
    let logits = model.forward(&input, &mut Hooks::new())?.squeeze(0)?; // [pos, vocab]
    let predicted: Vec<u32> = logits.argmax(D::Minus1)?.to_vec1()?;
    let ok = (ids.len()..full.len()).all(|p| predicted[p - 1] == full[p]);
    Ok((ok, ids.len()))
}

/// Teacher-forced answers with the keys and values of shared prompt heads computed once: every
/// prompt of a task opens with the same instructions and solved examples, so the head (the text
/// up to the prompt's last line break) is run once and each prompt runs only its last line and
/// answer. The result is [`answers`]' (a test checks it); a head that does not tokenize as a
/// prefix of its prompt is not shared.
pub struct SharedHeads<'a> {
    model: &'a Llama,
    tokenizer: &'a GgufTokenizer,
    /// (head text, its ids, the cache after it) of the last head seen.
    head: Option<(String, Vec<u32>, KvCache)>,
}

impl<'a> SharedHeads<'a> {
    /// No head computed yet.
    pub fn new(model: &'a Llama, tokenizer: &'a GgufTokenizer) -> Self {
        Self {
            model,
            tokenizer,
            head: None,
        }
    }

    /// Whether greedy decoding after `prompt` starts with ` ` + `answer`, and the prompt's
    /// length in tokens ([`answers`]).
    pub fn answers(&mut self, prompt: &str, answer: &str) -> Result<(bool, usize)> {
        let ids = self.tokenizer.encode(prompt)?;
        let full = self.tokenizer.encode(&format!("{prompt} {answer}"))?;
        if full.len() <= ids.len() || full[..ids.len()] != ids[..] {
            return Err(PretrainedError::Tokenizer(format!(
                "the answer {answer:?} does not tokenize as a continuation of the prompt"
            )));
        }
        let head_text = prompt.rfind('\n').map_or("", |i| &prompt[..=i]);
        if self.head.as_ref().is_none_or(|h| h.0 != head_text) {
            let head_ids = self.tokenizer.encode(head_text)?;
            let mut cache = KvCache::new(self.model.config().n_layers);
            if !head_ids.is_empty() {
                let input =
                    Tensor::from_vec(head_ids.clone(), (1, head_ids.len()), self.model.device())?;
                self.model.forward_cached(&input, &mut cache)?;
            }
            self.head = Some((head_text.to_owned(), head_ids, cache));
        }
        let (_, head_ids, head_cache) = self.head.as_ref().expect("set above");
        // The head is shared only when the prompt's own tokens start with it.
        let shared =
            if !head_ids.is_empty() && head_ids.len() < ids.len() && ids.starts_with(head_ids) {
                head_ids.len()
            } else {
                0
            };
        let mut cache = if shared > 0 {
            head_cache.clone()
        } else {
            KvCache::new(self.model.config().n_layers)
        };
        // Positions shared..full.len() - 1 are input, fed in chunks; the logits at positions
        // ids.len() - 1 .. full.len() - 2 predict the answer's tokens.
        let rest = &full[shared..full.len() - 1];
        let tail = full.len() - ids.len();
        let logits = self.model.prefill(rest, &mut cache, PREFILL_CHUNK, tail)?; // [tail, vocab]
        let predicted: Vec<u32> = logits.argmax(D::Minus1)?.to_vec1()?;
        let ok = (0..tail).all(|i| predicted[i] == full[ids.len() + i]);
        Ok((ok, ids.len()))
    }
}

/// Accuracy of `model` on `n` prompts per run and size.
pub fn accuracy_table(
    model: &Llama,
    tokenizer: &GgufTokenizer,
    task: TaskKind,
    sizes: &[usize],
    runs: usize,
    n: usize,
    mut progress: impl FnMut(usize),
) -> Result<Vec<SizeRow>> {
    let mut rows = vec![];
    let mut done = 0;
    let mut shared = SharedHeads::new(model, tokenizer);
    for &size in sizes {
        let mut accs = vec![];
        let mut prompt_tokens = 0;
        for run in 0..runs {
            let mut correct = 0;
            for i in 0..n {
                let p = prompt(task, size, run as u64, i)
                    .map_err(|e| PretrainedError::Tokenizer(e.to_string()))?;
                let (ok, len) = shared.answers(&p.prompt, &p.answer)?;
                if run == 0 && i == 0 {
                    prompt_tokens = len;
                }
                correct += usize::from(ok);
                done += 1;
                progress(done);
            }
            accs.push(correct as f64 / n as f64);
        }
        let mean = accs.iter().sum::<f64>() / accs.len() as f64;
        let sd = (accs.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / accs.len() as f64).sqrt();
        rows.push(SizeRow {
            task,
            size,
            runs: accs,
            mean,
            sd,
            prompt_tokens,
        });
    }
    Ok(rows)
}

/// The index-in-array prompt (the RoPE-limits paper): `arr = [..]; arr[K] =` over four
/// symbols (chance 25%), with two short solved examples first. Returns (prompt, answer).
pub fn index_prompt(len: usize, seed: u64, index: usize) -> (String, String) {
    use rand::{Rng, SeedableRng};
    const SYMBOLS: [&str; 4] = ["A", "B", "C", "D"];
    let mut rng =
        rand_chacha::ChaCha8Rng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9) ^ index as u64);
    let array: Vec<&str> = (0..len).map(|_| SYMBOLS[rng.random_range(0..4)]).collect();
    let k = rng.random_range(0..len);
    let prompt = format!(
        "arr = [B, D, A, C]; arr[2] = A\narr = [C, C, D, B, A]; arr[3] = B\narr = [{}]; arr[{k}] =",
        array.join(", ")
    );
    (prompt, array[k].to_owned())
}

/// Accuracy on the index-in-array prompt per array length (`n` prompts each, seed 0).
pub fn index_accuracy(
    model: &Llama,
    tokenizer: &GgufTokenizer,
    lengths: &[usize],
    n: usize,
    mut progress: impl FnMut(usize),
) -> Result<Vec<IndexRow>> {
    let mut out = vec![];
    let mut done = 0;
    let mut shared = SharedHeads::new(model, tokenizer);
    for &len in lengths {
        let (mut correct, mut tokens) = (0, 0);
        for i in 0..n {
            let (prompt, answer) = index_prompt(len, 0, i);
            let (ok, t) = shared.answers(&prompt, &answer)?;
            correct += usize::from(ok);
            tokens = t;
            done += 1;
            progress(done);
        }
        out.push(IndexRow {
            length: len,
            prompt_tokens: tokens,
            accuracy: correct as f64 / n as f64,
        });
    }
    Ok(out)
}
