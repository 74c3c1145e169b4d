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
    /// Prompt lengths in tokens.
    pub const LENGTHS: [usize; 4] = [64, 256, 1024, 2048];
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
    /// Prompt length in tokens: the longest prompt of the size, over every run (twenty-fourth
    /// pass, B-S3: it was the first prompt's).
    pub prompt_tokens: usize,
    /// Mean over runs.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub mean: f64,
    /// Sample standard deviation over runs; none with a single run (an empty cell),
    /// where a spread cannot be measured.
    #[serde(serialize_with = "ropelab_io::csv_rows::display_opt")]
    pub sd: Option<f64>,
    /// Accuracy of each run.
    #[serde(serialize_with = "joined", deserialize_with = "split")]
    pub runs: Vec<f64>,
    /// Prompts per run (0 in files written before it was recorded).
    #[serde(default)]
    pub n: usize,
    /// Precision of the forward's products (`f32` or `bf16`; empty in files written before it
    /// was recorded): answers can differ between the two.
    #[serde(default)]
    pub precision: String,
    /// The model that made the row (`NAME sha256:PREFIX`, see
    /// [`crate::identity::model_identity`]); empty in files written before it was
    /// recorded.
    #[serde(default)]
    pub model: String,
}

impl SizeRow {
    /// Why this row (read back from a file) is not one `pretrained tasks` writes: a size of 0,
    /// an accuracy outside [0, 1], no runs, a mean that is not the mean of its runs, a spread
    /// that is no standard deviation (or one for a single run), or a precision ropelab has not
    /// (ninth pass, S11).
    pub fn defect(&self) -> Option<String> {
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        let what = format!("{} at size {}", self.task, self.size);
        if self.size == 0 {
            return Some(format!("{what}: a window holds at least 1 item"));
        }
        if self.runs.is_empty() {
            return Some(format!("{what}: no run's accuracy"));
        }
        match self.sd {
            Some(_) if self.runs.len() < 2 => {
                return Some(format!("{what}: one run has no sd"));
            }
            Some(sd) => {
                let (_, want) = mean_and_spread(&self.runs);
                if !want.is_some_and(|w| (w - sd).abs() <= 1e-9) {
                    return Some(format!(
                        "{what}: sd {sd} is not the sample standard deviation of its runs \
                         ({})",
                        want.map_or("none".into(), |w| w.to_string())
                    ));
                }
            }
            None => {}
        }
        if !["", "f32", "bf16"].contains(&self.precision.as_str()) {
            return Some(format!(
                "{what}: precision {:?} is none of ropelab's (f32, bf16)",
                self.precision.chars().take(20).collect::<String>()
            ));
        }
        if let Some(x) = self.runs.iter().chain([&self.mean]).find(|x| !unit(**x)) {
            return Some(format!("{what}: accuracy {x} must lie in [0, 1]"));
        }
        // A run's accuracy counts whole prompts of its n (twenty-fifth pass, B-S4; n is 0 only
        // in files written before it was recorded).
        if self.n > 0 {
            let n = self.n as f64;
            if let Some(x) = self
                .runs
                .iter()
                .find(|x| ((**x * n) - (**x * n).round()).abs() > 1e-6)
            {
                return Some(format!(
                    "{what}: a run's accuracy {x} is no whole count of {} prompts",
                    self.n
                ));
            }
        }
        let mean = self.runs.iter().sum::<f64>() / self.runs.len() as f64;
        if (mean - self.mean).abs() > 1e-9 {
            return Some(format!(
                "{what}: mean {} is not the mean {mean} of its runs",
                self.mean
            ));
        }
        None
    }
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

/// Accuracy on the index-in-array prompt at one prompt length (one CSV row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexRow {
    /// Prompt length asked for, in tokens: each prompt holds the longest array that fits.
    pub length: usize,
    /// Shortest array of the prompts.
    pub min_elements: usize,
    /// Longest array of the prompts.
    pub max_elements: usize,
    /// Longest prompt in tokens.
    pub prompt_tokens: usize,
    /// Prompts asked at this length.
    pub n: usize,
    /// Fraction answered (chance 0.25).
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub accuracy: f64,
    /// Precision of the forward's products (`f32` or `bf16`): answers can differ between the
    /// two (thirteenth pass, S7).
    pub precision: String,
    /// The model that made the row (`NAME sha256:PREFIX`, see
    /// [`crate::identity::model_identity`]); empty in files written before it was
    /// recorded.
    #[serde(default)]
    pub model: String,
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
/// answer. [`SharedHeads::answers_many`] runs those suffixes in batches
/// ([`Llama::forward_suffixes`]: right padding, the causal mask keeps it out). The result is
/// [`answers`]' (tests check both paths); a head that does not tokenize as a prefix of its
/// prompt is not shared.
pub struct SharedHeads<'a> {
    model: &'a Llama,
    tokenizer: &'a GgufTokenizer,
    /// (head text, its ids, the cache after it) of the last head seen.
    head: Option<(String, Vec<u32>, KvCache)>,
}

/// Memory for the attention scores and MLP activations of one batch of suffixes (see
/// [`Llama::suffix_batch_bytes`]); a suffix longer than [`PREFILL_CHUNK`] runs alone, in
/// chunks. 64 MB measured best on 2 cores (`ropelab bench prompts`: 256 MB made 300-token
/// suffixes slower than one at a time, 16 MB and 64 MB about even there and 1.6x faster at
/// 100 tokens).
pub const BATCH_BYTES: u64 = 64 << 20;

/// One prompt, tokenized and checked: its ids, prompt + answer ids, and its head text.
struct Item {
    ids: Vec<u32>,
    full: Vec<u32>,
    head: String,
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
        let item = self.item(prompt, answer)?;
        let (shared, _) = self.share(&item)?;
        let mut cache = self.head_cache(shared);
        let rest = &item.full[shared..item.full.len() - 1];
        let tail = item.full.len() - item.ids.len();
        let logits = self.model.prefill(rest, &mut cache, PREFILL_CHUNK, tail)?; // [tail, vocab]
        Ok((check(&item, &logits)?, item.ids.len()))
    }

    /// [`SharedHeads::answers`] of every (prompt, answer), in order: prompts that share a head
    /// run their suffixes together in batches of at most [`BATCH_BYTES`] of scores;
    /// `progress(done)` after each batch.
    pub fn answers_many(
        &mut self,
        items: &[(String, String)],
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<(bool, usize)>> {
        let items: Vec<Item> = items
            .iter()
            .map(|(p, a)| self.item(p, a))
            .collect::<Result<_>>()?;
        let mut out = Vec::with_capacity(items.len());
        let mut i = 0;
        while i < items.len() {
            let (shared, head_len) = self.share(&items[i])?;
            let suffix = |it: &Item| it.full.len() - 1 - shared;
            if shared == 0 || suffix(&items[i]) > PREFILL_CHUNK {
                let mut cache = self.head_cache(shared);
                let it = &items[i];
                let tail = it.full.len() - it.ids.len();
                let logits = self.model.prefill(
                    &it.full[shared..it.full.len() - 1],
                    &mut cache,
                    PREFILL_CHUNK,
                    tail,
                )?;
                out.push((check(it, &logits)?, it.ids.len()));
                i += 1;
                progress(out.len());
                continue;
            }
            // The longest run of following items with the same head whose batch fits.
            let mut end = i + 1;
            let mut longest = suffix(&items[i]);
            while end < items.len() && items[end].head == items[i].head {
                let (s, _) = self.share(&items[end])?;
                let next = longest.max(suffix(&items[end]));
                if s != shared
                    || next > PREFILL_CHUNK
                    || self.model.suffix_batch_bytes(end + 1 - i, next, head_len) > BATCH_BYTES
                {
                    break;
                }
                longest = next;
                end += 1;
            }
            let batch = &items[i..end];
            let suffixes: Vec<&[u32]> = batch
                .iter()
                .map(|it| &it.full[shared..it.full.len() - 1])
                .collect();
            let tails: Vec<usize> = batch
                .iter()
                .map(|it| it.full.len() - it.ids.len())
                .collect();
            let (_, _, cache) = self.head.as_ref().expect("set by share");
            let logits = self.model.forward_suffixes(cache, &suffixes, &tails)?;
            for (it, l) in batch.iter().zip(&logits) {
                out.push((check(it, l)?, it.ids.len()));
            }
            i = end;
            progress(out.len());
        }
        Ok(out)
    }

    /// Tokenizes `prompt` and ` ` + `answer` after it; the answer must continue the prompt.
    fn item(&self, prompt: &str, answer: &str) -> Result<Item> {
        let ids = self.tokenizer.encode(prompt)?;
        let full = self.tokenizer.encode(&format!("{prompt} {answer}"))?;
        if full.len() <= ids.len() || full[..ids.len()] != ids[..] {
            return Err(PretrainedError::Tokenizer(format!(
                "the answer {answer:?} does not tokenize as a continuation of the prompt"
            )));
        }
        let context = self.model.config().context_length;
        // The last answer token is predicted, never fed: full.len() - 1 positions run.
        if full.len() - 1 > context {
            return Err(PretrainedError::Input(format!(
                "a prompt of {} tokens with its answer ({} tokens, {} fed) exceeds the model's \
                 context of {context} tokens",
                ids.len(),
                full.len(),
                full.len() - 1
            )));
        }
        let head = prompt.rfind('\n').map_or("", |i| &prompt[..=i]).to_owned();
        Ok(Item { ids, full, head })
    }

    /// Makes `item`'s head the current one (running it when new); returns how many of the
    /// item's tokens it shares (0 when the prompt's own tokens do not start with the head's)
    /// and the head's length.
    fn share(&mut self, item: &Item) -> Result<(usize, usize)> {
        if self.head.as_ref().is_none_or(|h| h.0 != item.head) {
            let head_ids = self.tokenizer.encode(&item.head)?;
            let mut cache = KvCache::new(self.model.config().n_layers);
            if !head_ids.is_empty() {
                self.model
                    .prefill(&head_ids, &mut cache, PREFILL_CHUNK, 1)?;
            }
            self.head = Some((item.head.clone(), head_ids, cache));
        }
        let (_, head_ids, _) = self.head.as_ref().expect("set above");
        let ids = &item.ids;
        let shared =
            if !head_ids.is_empty() && head_ids.len() < ids.len() && ids.starts_with(head_ids) {
                head_ids.len()
            } else {
                0
            };
        Ok((shared, head_ids.len()))
    }

    /// A copy of the current head's cache when `shared` > 0, else an empty cache.
    fn head_cache(&self, shared: usize) -> KvCache {
        match (&self.head, shared) {
            (Some((_, _, cache)), s) if s > 0 => cache.clone(),
            _ => KvCache::new(self.model.config().n_layers),
        }
    }
}

/// Whether the logits at the answer's positions ([tail, vocab]) predict its tokens.
fn check(item: &Item, logits: &Tensor) -> Result<bool> {
    let predicted: Vec<u32> = logits.argmax(D::Minus1)?.to_vec1()?;
    let at = item.ids.len();
    Ok((0..item.full.len() - at).all(|i| predicted[i] == item.full[at + i]))
}

/// The mean of `runs` and their sample standard deviation (n - 1, as every other table of
/// ropelab; twenty-fourth pass, B-S2), none for a single run (a spread one run cannot show).
fn mean_and_spread(runs: &[f64]) -> (f64, Option<f64>) {
    let mean = runs.iter().sum::<f64>() / runs.len() as f64;
    let sd = (runs.len() > 1).then(|| {
        (runs.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (runs.len() - 1) as f64).sqrt()
    });
    (mean, sd)
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
        // Every prompt of this size (run by run), answered in batches.
        let mut items = Vec::with_capacity(runs * n);
        for run in 0..runs {
            for i in 0..n {
                let p = prompt(task, size, run as u64, i)
                    .map_err(|e| PretrainedError::Tokenizer(e.to_string()))?;
                items.push((p.prompt, p.answer));
            }
        }
        // A prompt beyond the context says which size made it (thirteenth pass, U1).
        let answered = shared
            .answers_many(&items, |k| progress(done + k))
            .map_err(|e| match e {
                PretrainedError::Input(m) => {
                    PretrainedError::Input(format!("size {size} of the {task} task: {m}"))
                }
                other => other,
            })?;
        done += items.len();
        let prompt_tokens = answered.iter().map(|a| a.1).max().unwrap_or(0);
        let accs: Vec<f64> = answered
            .chunks(n.max(1))
            .map(|run| run.iter().filter(|a| a.0).count() as f64 / n as f64)
            .collect();
        let (mean, sd) = mean_and_spread(&accs);
        rows.push(SizeRow {
            task,
            size,
            runs: accs,
            mean,
            sd,
            prompt_tokens,
            n,
            precision: model.precision().to_string(),
            model: String::new(),
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

/// Prompt `index` (seed 0) of the index-in-array task with the longest array whose prompt
/// stays within `tokens` tokens, found by bisection over the array length (the arrays of one
/// index grow by appending, so the prompt's length rises with the array's up to the digits of
/// the asked position). Returns (prompt, answer, elements, prompt tokens).
pub fn index_prompt_within(
    tokenizer: &GgufTokenizer,
    tokens: usize,
    index: usize,
) -> Result<(String, String, usize, usize)> {
    let count = |len: usize| -> Result<(String, String, usize)> {
        let (prompt, answer) = index_prompt(len, 0, index);
        let n = tokenizer.encode(&prompt)?.len();
        Ok((prompt, answer, n))
    };
    let shortest = count(1)?;
    if shortest.2 > tokens {
        return Err(PretrainedError::Input(format!(
            "a prompt of {tokens} tokens cannot hold an array: the shortest index prompt is {} \
             tokens",
            shortest.2
        )));
    }
    // Invariant: lo fits; hi does not (every element takes at least one token).
    let (mut lo, mut best, mut hi) = (1, shortest, tokens + 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let got = count(mid)?;
        if got.2 <= tokens {
            (lo, best) = (mid, got);
        } else {
            hi = mid;
        }
    }
    Ok((best.0, best.1, lo, best.2))
}

/// Accuracy on the index-in-array prompt per prompt length in tokens (`n` prompts each, seed
/// 0; each holds the longest array that fits, [`index_prompt_within`]).
pub fn index_accuracy(
    model: &Llama,
    tokenizer: &GgufTokenizer,
    lengths: &[usize],
    n: usize,
    mut progress: impl FnMut(usize),
) -> Result<Vec<IndexRow>> {
    let context = model.config().context_length;
    if let Some(&l) = lengths.iter().find(|&&l| l == 0 || l > context) {
        return Err(PretrainedError::Input(format!(
            "a prompt length of {l} tokens: lengths must be between 1 and the model's context of \
             {context} tokens"
        )));
    }
    let mut out = vec![];
    let mut done = 0;
    let mut shared = SharedHeads::new(model, tokenizer);
    for &len in lengths {
        let prompts = (0..n)
            .map(|i| index_prompt_within(tokenizer, len, i))
            .collect::<Result<Vec<_>>>()?;
        let items: Vec<(String, String)> =
            prompts.iter().map(|p| (p.0.clone(), p.1.clone())).collect();
        let answered = shared.answers_many(&items, |k| progress(done + k))?;
        done += items.len();
        out.push(IndexRow {
            length: len,
            min_elements: prompts.iter().map(|p| p.2).min().unwrap_or(0),
            max_elements: prompts.iter().map(|p| p.2).max().unwrap_or(0),
            prompt_tokens: prompts.iter().map(|p| p.3).max().unwrap_or(0),
            n,
            accuracy: answered.iter().filter(|a| a.0).count() as f64 / n as f64,
            precision: model.precision().to_string(),
            model: String::new(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One run has no spread: its sd is none and its CSV cell empty, read back as none; two
    /// runs have their sample sd (issue 55: one run printed sd 0.000; twenty-fourth pass, B-S2:
    /// it was the population sd).
    #[test]
    fn a_single_run_has_no_spread() {
        assert_eq!(mean_and_spread(&[0.25]), (0.25, None));
        assert_eq!(mean_and_spread(&[0.0, 1.0]), (0.5, Some(0.5f64.sqrt())));
        let sd = mean_and_spread(&[0.0, 0.1, 0.0]).1.unwrap();
        assert!((sd - 0.057735).abs() < 1e-6, "{sd}");
        let row = |sd| SizeRow {
            task: TaskKind::Number,
            size: 4,
            prompt_tokens: 20,
            mean: 0.25,
            sd,
            runs: vec![0.25],
            n: 4,
            precision: "f32".into(),
            model: "m.gguf sha256:0123456789abcdef".into(),
        };
        let text = ropelab_io::csv_rows::to_csv(&[row(None), row(Some(0.5))]).unwrap();
        assert_eq!(
            text,
            "task,size,prompt_tokens,mean,sd,runs,n,precision,model\n\
             number,4,20,0.25,,0.25,4,f32,m.gguf sha256:0123456789abcdef\n\
             number,4,20,0.25,0.5,0.25,4,f32,m.gguf sha256:0123456789abcdef\n"
        );
        let back: Vec<SizeRow> = ropelab_io::csv_rows::read_csv(&text, "t.csv").unwrap();
        assert_eq!((back[0].sd, back[1].sd), (None, Some(0.5)));
    }
}
