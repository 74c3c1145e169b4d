//! The byte-level BPE tokenizer of a GGUF file (`tokenizer.ggml.*`): vocabulary and merges from
//! the metadata, the `smollm` pre-tokenizer (every digit on its own, then GPT-2 byte-level
//! splitting without a prefix space), control tokens (`<|im_start|>`, ...) as special tokens.

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};

use crate::gguf::GgufFile;
use crate::{PretrainedError, Result};

/// GGUF token type of control tokens.
const CONTROL: i64 = 3;

/// GGUF token type of unknown tokens (split out of a text as control tokens are).
const UNKNOWN: i64 = 2;

/// GGUF token type of user-defined tokens (added tokens that are not special).
const USER_DEFINED: i64 = 4;

/// The GGUF token types llama.cpp knows: undefined, normal, unknown, control, user-defined,
/// unused, byte.
const TOKEN_TYPES: std::ops::RangeInclusive<i64> = 0..=6;

/// Whether the tokenizer class a `tokenizer_config.json` names makes transformers rebuild the
/// post-processor from `add_bos_token` / `add_eos_token` (and with which BOS default), as its
/// fast tokenizer's constructor does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rebuild {
    /// The post-processor is `tokenizer.json`'s (GPT-2's, Qwen2's, CodeGen's, the generic one).
    Never,
    /// Rebuilt from the flags, BOS first when `add_bos_token` is absent and `bos` (Llama,
    /// Gemma: true; GPT-NeoX: false).
    Always { bos: bool },
}

impl Rebuild {
    /// The classes ropelab knows, by name (with and without `Fast`).
    const KNOWN: [&'static str; 8] = [
        "PreTrainedTokenizerFast",
        "GPT2Tokenizer",
        "Qwen2Tokenizer",
        "CodeGenTokenizer",
        "LlamaTokenizer",
        "CodeLlamaTokenizer",
        "GemmaTokenizer",
        "GPTNeoXTokenizer",
    ];

    /// What `class` does, or None for a class ropelab does not know.
    fn of(class: &str) -> Option<Self> {
        let base = class.strip_suffix("Fast").unwrap_or(class);
        match base {
            "PreTrainedTokenizer" | "GPT2Tokenizer" | "Qwen2Tokenizer" | "CodeGenTokenizer" => {
                Some(Rebuild::Never)
            }
            "LlamaTokenizer" | "CodeLlamaTokenizer" | "GemmaTokenizer" => {
                Some(Rebuild::Always { bos: true })
            }
            "GPTNeoXTokenizer" => Some(Rebuild::Always { bos: false }),
            _ => None,
        }
    }
}

/// Whether a `tokenizer.json` pre-tokenizer splits text into byte-level tokens (ByteLevel,
/// alone or in a Sequence).
fn byte_level(pre: Option<&serde_json::Value>) -> bool {
    pre.is_some_and(|p| has_type(p, "pretokenizers", "ByteLevel"))
}

/// Whether the `tokenizer.json` component `value` is of type `kind`, alone or inside a
/// Sequence (whose members are under `members`).
fn has_type(value: &serde_json::Value, members: &str, kind: &str) -> bool {
    match value.get("type").and_then(|t| t.as_str()) {
        Some(t) if t == kind => true,
        Some("Sequence") => value
            .get(members)
            .and_then(|m| m.as_array())
            .is_some_and(|items| items.iter().any(|v| has_type(v, members, kind))),
        _ => false,
    }
}

/// The TemplateProcessing post-processors of `processor` (alone or in a Sequence).
fn templates(processor: &serde_json::Value) -> Vec<&serde_json::Value> {
    match processor.get("type").and_then(|t| t.as_str()) {
        Some("TemplateProcessing") => vec![processor],
        Some("Sequence") => processor
            .get("processors")
            .and_then(|p| p.as_array())
            .into_iter()
            .flatten()
            .flat_map(templates)
            .collect(),
        _ => vec![],
    }
}

/// Refuses a template the tokenizers crate would panic on: a special token its
/// `special_tokens` table lacks, a table entry whose ids and tokens differ in number, or a
/// single-text template reading the second text `$B`.
fn check_templates(processor: &serde_json::Value) -> std::result::Result<(), String> {
    for template in templates(processor) {
        let table = template.get("special_tokens").and_then(|t| t.as_object());
        for (name, entry) in table.into_iter().flatten() {
            let count = |key: &str| entry.get(key).and_then(|v| v.as_array()).map(Vec::len);
            if count("ids").is_none() || count("ids") != count("tokens") || count("ids") == Some(0)
            {
                return Err(format!(
                    "post_processor's special token {} needs as many ids as tokens (at least \
                     one)",
                    crate::quoted(name)
                ));
            }
        }
        for which in ["single", "pair"] {
            for piece in template
                .get(which)
                .and_then(|t| t.as_array())
                .into_iter()
                .flatten()
            {
                if let Some(id) = piece.pointer("/SpecialToken/id").and_then(|i| i.as_str()) {
                    if !table.is_some_and(|t| t.contains_key(id)) {
                        return Err(format!(
                            "post_processor's {which} template names special token {} that \
                             its special_tokens table lacks",
                            crate::quoted(id)
                        ));
                    }
                }
                let sequence = piece.pointer("/Sequence/id").and_then(|i| i.as_str());
                if which == "single" && sequence.is_some_and(|id| id != "A") {
                    return Err(
                        "post_processor's single template reads $B, the second text of a pair: \
                         a single text has only $A"
                            .to_owned(),
                    );
                }
            }
        }
    }
    Ok(())
}

/// The (token, id) pairs the templates of `processor` declare in their special-token tables.
fn template_tokens(processor: &serde_json::Value) -> Vec<(String, u32)> {
    let mut out = vec![];
    for template in templates(processor) {
        for entry in template
            .get("special_tokens")
            .and_then(|t| t.as_object())
            .into_iter()
            .flat_map(|t| t.values())
        {
            let list = |key: &str| entry.get(key).and_then(|v| v.as_array()).cloned();
            if let (Some(ids), Some(tokens)) = (list("ids"), list("tokens")) {
                for (id, token) in ids.iter().zip(&tokens) {
                    if let (Some(id), Some(token)) = (id.as_u64(), token.as_str()) {
                        out.push((token.to_owned(), u32::try_from(id).unwrap_or(u32::MAX)));
                    }
                }
            }
        }
    }
    out
}

/// Whether a `tokenizer.json` decoder turns byte-level tokens back into text (ByteLevel,
/// alone or in a Sequence).
fn byte_level_decoder(decoder: Option<&serde_json::Value>) -> bool {
    decoder.is_some_and(|d| has_type(d, "decoders", "ByteLevel"))
}

/// The character byte-level BPE writes for each byte 0..=255 (GPT-2's table: printable
/// bytes stand for themselves, the others take the characters from U+0100 on, in order).
fn byte_chars() -> Vec<char> {
    let mut next = 256u32;
    (0u32..=255)
        .map(|b| {
            let printable =
                (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
            let code = if printable {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(code).expect("a byte-level character")
        })
        .collect()
}

/// A tokenizer with the file's special-token ids.
pub struct GgufTokenizer {
    inner: Tokenizer,
    /// End-of-sequence id.
    pub eos: Option<u32>,
    /// Every id that ends a generation: the end-of-sequence id and the file's other
    /// end-of-generation ids (a GGUF's `eot_token_id` and `eom_token_id`; every
    /// `eos_token_id` of a directory's `config.json` and `generation_config.json`), as
    /// llama.cpp and transformers stop at each (twenty-fourth pass, B-S5); with a directory's
    /// `generation_config.json` rules (twenty-fifth pass, B-S2).
    pub decoding: crate::decoding::Decoding,
    /// Whether a prompt is encoded with the tokens the file's post-processor puts before
    /// every text (a Hugging Face `tokenizer.json` whose template adds BOS, as Llama 3's does;
    /// `transformers` adds them by default).
    special: bool,
    /// The ids the post-processor puts before every text (empty without them).
    leading: Vec<u32>,
    /// The bytes a GGUF's byte-level vocabulary has no token for: a text holding one would
    /// lose it, so [`GgufTokenizer::encode`] refuses it (twenty-third pass, S-B). Empty for a
    /// `tokenizer.json`, whose vocabulary is refused at load when it lacks a byte.
    missing_bytes: Vec<u8>,
}

impl GgufTokenizer {
    /// Builds the tokenizer from the metadata of `file`. A key ropelab would ignore or read
    /// otherwise than llama.cpp is refused naming it: a missing `tokenizer.ggml.pre` (llama.cpp
    /// then splits text with its default pre-tokenizer, not smollm's), `add_bos_token` or
    /// `add_eos_token` true (ropelab adds neither to a prompt), special-token ids outside the
    /// vocabulary, token types that are not one per token or not llama.cpp's (0 to 6), a token
    /// string given twice (llama.cpp refuses each).
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let err = |e: &dyn std::fmt::Display| {
            PretrainedError::Tokenizer(format!("{}: {e}", file.path().display()))
        };
        let bad = |m: String| Err(PretrainedError::gguf(file.path(), m));
        let model = file.string("tokenizer.ggml.model")?;
        match file.optional_string("tokenizer.ggml.pre")?.as_deref() {
            Some("smollm") => {}
            None => {
                return bad(
                    "metadata key tokenizer.ggml.pre is missing: ropelab reads smollm's \
                     pre-tokenizer only, and llama.cpp would split text with its default one \
                     (or use the model's Hugging Face directory with its tokenizer.json)"
                        .into(),
                )
            }
            Some(pre) => {
                // A long value is cut: a message stays one readable line (eighth pass, G068).
                let cut: String = pre.chars().take(60).collect();
                let more = if cut.len() < pre.len() { "..." } else { "" };
                return Err(err(&format!(
                    "tokenizer.ggml.pre {cut:?}{more} is not supported (smollm; or use the \
                     model's Hugging Face directory with its tokenizer.json)"
                )));
            }
        }
        if model != "gpt2" {
            return Err(err(&format!(
                "tokenizer model {} is not the byte-level BPE (gpt2)",
                crate::quoted(&model)
            )));
        }
        for (key, token) in [
            ("tokenizer.ggml.add_bos_token", "a BOS token first"),
            ("tokenizer.ggml.add_eos_token", "an EOS token last"),
        ] {
            if file.optional_bool(key)? == Some(true) {
                return bad(format!(
                    "{key} is true, but ropelab adds no token to a prompt: the model would see \
                     other inputs than llama.cpp gives it ({token})"
                ));
            }
        }
        let tokens = file.strings("tokenizer.ggml.tokens")?;
        // A token given twice has two ids but maps back to one (llama.cpp refuses it).
        let mut seen = std::collections::HashMap::with_capacity(tokens.len());
        for (id, token) in tokens.iter().enumerate() {
            if let Some(first) = seen.insert(token.as_str(), id) {
                return bad(format!(
                    "tokenizer.ggml.tokens lists {:?} twice (ids {first} and {id}): each token \
                     must have one id",
                    token
                ));
            }
        }
        let types = match file.has_key("tokenizer.ggml.token_type") {
            true => file.ints("tokenizer.ggml.token_type")?,
            false => vec![],
        };
        if file.has_key("tokenizer.ggml.token_type") && types.len() != tokens.len() {
            return bad(format!(
                "tokenizer.ggml.token_type has {} entries for {} tokens: give one per token",
                types.len(),
                tokens.len()
            ));
        }
        // Scores too are one per token, when given (BPE does not read them; a list of
        // another length is a damaged file; tenth pass, SI2).
        if file.has_key("tokenizer.ggml.scores") {
            let n = file.floats_len("tokenizer.ggml.scores")?;
            if n != tokens.len() {
                return bad(format!(
                    "tokenizer.ggml.scores has {n} entries for {} tokens: give one per token",
                    tokens.len()
                ));
            }
        }
        if let Some((id, t)) = types
            .iter()
            .enumerate()
            .find(|(_, t)| !TOKEN_TYPES.contains(*t))
        {
            return bad(format!(
                "tokenizer.ggml.token_type {t} of token {id} is not a llama.cpp token type \
                 ({} to {})",
                TOKEN_TYPES.start(),
                TOKEN_TYPES.end()
            ));
        }
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        // A merge of a token the vocabulary lacks is named with its key and index, not left
        // to the tokenizers crate's "Token `x` out of vocabulary" (tenth pass, G36). A merge
        // given twice has two ranks: llama.cpp keeps the first, the tokenizers crate the last
        // (thirteenth pass, S1), so it is refused.
        let mut ranks = std::collections::HashMap::new();
        let merges = file
            .strings("tokenizer.ggml.merges")?
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                let (a, b) = m.split_once(' ').ok_or_else(|| {
                    err(&format!(
                        "tokenizer.ggml.merges[{i}] {} is not two tokens",
                        crate::quoted(&m)
                    ))
                })?;
                let merged = format!("{a}{b}");
                if let Some(missing) = [a, b, merged.as_str()]
                    .into_iter()
                    .find(|t| !vocab.contains_key(*t))
                {
                    return Err(err(&format!(
                        "tokenizer.ggml.merges[{i}] {} names {}, which is not a token of \
                         tokenizer.ggml.tokens",
                        crate::quoted(&m),
                        crate::quoted(missing)
                    )));
                }
                if let Some(first) = ranks.insert(m.clone(), i) {
                    return Err(err(&format!(
                        "tokenizer.ggml.merges lists {} twice (merges[{first}] and \
                         merges[{i}]): each merge must have one rank",
                        crate::quoted(&m)
                    )));
                }
                Ok((a.to_owned(), b.to_owned()))
            })
            .collect::<Result<Vec<_>>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| err(&crate::first_line(&e)))?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(Sequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        // Control tokens are special; user-defined ones (added tokens that are not special)
        // are matched in the text before BPE too, as llama.cpp partitions on them (fourteenth
        // pass, S-H).
        let added = |kinds: &[i64], special: bool| -> Vec<AddedToken> {
            tokens
                .iter()
                .zip(&types)
                .filter(|(_, t)| kinds.contains(t))
                .map(|(tok, _)| AddedToken::from(tok.clone(), special))
                .collect()
        };
        // llama.cpp splits unknown tokens out of a text as it does control ones (its special
        // tokens cache holds both; twenty-first pass, S-C).
        inner
            .add_special_tokens(added(&[CONTROL, UNKNOWN], true))
            .map_err(|e| err(&crate::first_line(&e)))?;
        inner
            .add_tokens(added(&[USER_DEFINED], false))
            .map_err(|e| err(&crate::first_line(&e)))?;
        // The special-token ids must be tokens (a present id of another type is refused by
        // `optional_usize`, never dropped).
        let mut ids = [None, None];
        for (id, key) in ids
            .iter_mut()
            .zip(["tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id"])
        {
            *id = file.optional_usize(key)?;
            if let Some(i) = id.filter(|&i| i >= tokens.len()) {
                return bad(format!(
                    "{key} {i} is not a token of its {} tokens",
                    tokens.len()
                ));
            }
        }
        // The other special ids ropelab does not use (pad, unknown, separator, cls, mask,
        // eot, fim, ...: every `tokenizer.ggml.*_token_id`) must still be tokens of the file
        // (nineteenth pass, S1).
        let mut others: Vec<String> = file
            .metadata_keys()
            .into_keys()
            .filter(|k| k.starts_with("tokenizer.ggml.") && k.ends_with("_token_id"))
            .collect();
        others.sort();
        for key in &others {
            if let Some(i) = file.optional_usize(key)?.filter(|&i| i >= tokens.len()) {
                return bad(format!(
                    "{key} {i} is not a token of its {} tokens",
                    tokens.len()
                ));
            }
        }
        let missing_bytes = byte_chars()
            .into_iter()
            .enumerate()
            .filter(|(_, c)| !seen.contains_key(c.to_string().as_str()))
            .map(|(b, _)| b as u8)
            .collect();
        let mut stops: Vec<u32> = ids[0].map(|e| e as u32).into_iter().collect();
        for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            if let Some(id) = file.optional_usize(key)? {
                stops.push(id as u32);
            }
        }
        stops.sort_unstable();
        stops.dedup();
        Ok(Self {
            inner,
            eos: ids[0].map(|e| e as u32),
            decoding: crate::decoding::Decoding::greedy(stops),
            special: false,
            leading: vec![],
            missing_bytes,
        })
    }

    /// The tokenizer of a Hugging Face directory (`tokenizer.json`, read by the tokenizers
    /// crate itself) with end-of-sequence id `eos`. What the tokenizers crate reads otherwise
    /// than the file says is refused: two tokens of `model.vocab` sharing one id (one of them
    /// could never be decoded), and an added token whose declared id is not the one the
    /// tokenizer gives it (the crate renumbers it silently).
    pub fn from_file(path: &std::path::Path, eos: Option<u32>) -> Result<Self> {
        let failed = |m: String| PretrainedError::Tokenizer(format!("{}: {m}", path.display()));
        let text = crate::json_text(path, crate::TOKENIZER_JSON_BYTES)?;
        // A token (or a table) given twice is read as the last by the tokenizers crate.
        crate::hf::unique_keys(path, text.as_bytes(), "")?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| failed(crate::first_line(&e)))?;
        // The families ropelab reads all tokenize by BPE: another model type (WordPiece,
        // Unigram, WordLevel) is named here, not by the tokenizers crate's message without the
        // file (earlier passes, B11).
        match json.pointer("/model/type").and_then(|t| t.as_str()) {
            Some("BPE") | None => {}
            Some(other) => {
                return Err(failed(format!(
                    "model.type {other:?} is not supported: ropelab reads BPE tokenizers (those \
                     of Llama, Mistral, Qwen2, GPT-NeoX and GPT-J)"
                )))
            }
        }
        // Settings the byte-level BPE of these families never has: a subword prefix or
        // suffix (the tokenizers crate panics on some; ninth pass, P1) and BPE dropout (which
        // tokenizes one text differently on every call; S5).
        for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
            match json.pointer(&format!("/model/{key}")) {
                None | Some(serde_json::Value::Null) => {}
                Some(serde_json::Value::String(s)) if s.is_empty() => {}
                Some(v) => {
                    return Err(failed(format!(
                        "model.{key} is {}: byte-level BPE tokenizers (Llama, Mistral, Qwen2, \
                         GPT-NeoX, GPT-J) have none",
                        crate::hf::shown_json(v)
                    )))
                }
            }
        }
        match json.pointer("/model/dropout") {
            None | Some(serde_json::Value::Null) => {}
            Some(v) if v.as_f64() == Some(0.0) => {}
            Some(v) => {
                return Err(failed(format!(
                    "model.dropout is {}: BPE dropout tokenizes one text differently on every \
                     call, so no result would repeat (set it to null)",
                    crate::hf::shown_json(v)
                )))
            }
        }
        // BPE merges are all "a b" strings or all [a, b] pairs: one of the other form is named
        // here, not left to the tokenizers crate's "did not match any variant of untagged enum
        // MergeType" (sixth pass, U4).
        if let Some(merges) = json.pointer("/model/merges").and_then(|m| m.as_array()) {
            let pair = |m: &serde_json::Value| {
                m.as_array()
                    .is_some_and(|p| p.len() == 2 && p.iter().all(|s| s.is_string()))
            };
            let string =
                |m: &serde_json::Value| m.as_str().is_some_and(|s| s.split(' ').count() == 2);
            let first_pair = merges.first().is_some_and(pair);
            if let Some((i, m)) = merges
                .iter()
                .enumerate()
                .find(|(_, m)| !(if first_pair { pair(m) } else { string(m) }))
            {
                return Err(failed(format!(
                    "model.merges[{i}] is {}, but the merges are {}: give every merge in that \
                     form",
                    m,
                    if first_pair {
                        "pairs [\"a\", \"b\"]"
                    } else {
                        "strings \"a b\""
                    }
                )));
            }
        }
        // A merge given twice has two ranks (the tokenizers crate keeps the last): refused,
        // as in a GGUF file (thirteenth pass, S1).
        if let Some(merges) = json.pointer("/model/merges").and_then(|m| m.as_array()) {
            let mut ranks = std::collections::HashMap::with_capacity(merges.len());
            for (i, m) in merges.iter().enumerate() {
                let key: Vec<&str> = match m {
                    serde_json::Value::Array(p) => {
                        p.iter().map(|s| s.as_str().unwrap_or_default()).collect()
                    }
                    other => other.as_str().unwrap_or_default().split(' ').collect(),
                };
                if let Some(first) = ranks.insert(key, i) {
                    return Err(failed(format!(
                        "model.merges[{first}] and model.merges[{i}] are the same merge {}: \
                         each merge must have one rank",
                        crate::hf::shown_json(m)
                    )));
                }
            }
        }
        // What the tokenizers crate panics on instead of refusing (twentieth pass, F-P1,
        // F-P2): a sentencepiece character map, a template naming what it lacks.
        if let Some(normalizer) = json.get("normalizer") {
            if has_type(normalizer, "normalizers", "Precompiled") {
                return Err(failed(
                    "normalizer Precompiled (a sentencepiece character map) is not supported: \
                     ropelab reads the BPE tokenizers of Llama, Mistral, Qwen2, GPT-NeoX and \
                     GPT-J"
                        .to_owned(),
                ));
            }
        }
        if let Some(processor) = json.get("post_processor") {
            check_templates(processor).map_err(failed)?;
        }
        let mut inner: Tokenizer = text.parse().map_err(|e| failed(crate::first_line(&e)))?;
        let quoted = |t: &str| format!("{:?}", t);
        if let Some(vocab) = json.pointer("/model/vocab").and_then(|v| v.as_object()) {
            let mut owner: std::collections::HashMap<u64, &str> =
                std::collections::HashMap::with_capacity(vocab.len());
            for (token, id) in vocab {
                let Some(id) = id.as_u64() else { continue };
                if let Some(first) = owner.insert(id, token) {
                    return Err(failed(format!(
                        "tokens {} and {} of model.vocab share id {id}: each id must be one token",
                        quoted(first),
                        quoted(token)
                    )));
                }
            }
        }
        let added = json.get("added_tokens").and_then(|a| a.as_array());
        for token in added.into_iter().flatten() {
            let (Some(content), Some(id)) = (
                token.get("content").and_then(|c| c.as_str()),
                token.get("id").and_then(|i| i.as_u64()),
            ) else {
                continue;
            };
            let given = inner.token_to_id(content);
            if given.map(u64::from) != Some(id) {
                return Err(failed(format!(
                    "added token {} declares id {id}, but the tokenizer numbers it {}: added \
                     tokens must keep the ids of the vocabulary, or follow it without a gap",
                    quoted(content),
                    given.map_or("nothing".to_owned(), |g| g.to_string())
                )));
            }
        }
        // A byte-level decoder means a byte-level vocabulary: without a byte-level
        // pre-tokenizer, a space or a non-ASCII character of a prompt has no token and is
        // dropped with no word (nineteenth pass, S2).
        if byte_level_decoder(json.get("decoder")) && !byte_level(json.get("pre_tokenizer")) {
            return Err(failed(
                "its decoder is ByteLevel but its pre_tokenizer is not: a prompt's spaces and \
                 non-ASCII characters would have no token and be lost"
                    .to_owned(),
            ));
        }
        if byte_level(json.get("pre_tokenizer")) {
            // Every byte has its token in a byte-level vocabulary: without one, the byte
            // vanishes from every prompt holding it, with no word (tenth pass, SI4).
            let vocab = inner.get_vocab(true);
            if let Some((byte, c)) = byte_chars()
                .into_iter()
                .enumerate()
                .find(|(_, c)| !vocab.contains_key(&c.to_string()))
            {
                return Err(failed(format!(
                    "its byte-level vocabulary has no token for byte 0x{byte:02x} ({c:?}): a \
                     prompt holding that byte would lose it"
                )));
            }
        }
        // A template's special token is the vocabulary's token of that id: another id would
        // put another token before every prompt (twentieth pass, F-S2).
        if let Some(processor) = json.get("post_processor") {
            for (token, id) in template_tokens(processor) {
                if inner.token_to_id(&token) != Some(id) {
                    return Err(failed(format!(
                        "post_processor's special token {} declares id {id}, but the \
                         vocabulary numbers it {}: the two tables must agree",
                        quoted(&token),
                        inner
                            .token_to_id(&token)
                            .map_or("nothing".to_owned(), |i| i.to_string())
                    )));
                }
            }
        }
        let leading = Self::leading_special(&mut inner, path)?;
        // Every printable ASCII character and the space survives tokenizing (truncation and
        // padding dropped above), inside a word
        // and repeated: a tokenizer without a token for one (no byte-level pre-tokenizer, a
        // byte-fallback token missing) would drop it from every prompt with no word
        // (twentieth pass, F-S1; twenty-second pass, N1: alone it could hide in a merged
        // token).
        // The task prompts hold newlines, and text may hold tabs and non-ASCII letters: a
        // tokenizer that loses one of those is refused too (twenty-third pass, F-NL).
        for c in (' '..='~').chain(['\n', '\t', 'é', '中']) {
            let probe = format!("a{c}{c}b");
            let ids = inner
                .encode(probe.as_str(), false)
                .map_err(|e| failed(crate::first_line(&e)))?;
            let back = inner
                .decode(ids.get_ids(), false)
                .map_err(|e| failed(crate::first_line(&e)))?;
            if !back.contains(&format!("{c}{c}")) {
                // A normalizer that rewrites the character is named as the cause, not a
                // missing token (twenty-sixth pass, B-U1, B-U2).
                if let Some(normalizer) = inner.get_normalizer() {
                    use tokenizers::Normalizer;
                    let mut n = tokenizers::NormalizedString::from(probe.as_str());
                    if normalizer.normalize(&mut n).is_ok()
                        && n.get().replace('\u{2581}', " ").trim_start() != probe
                    {
                        return Err(failed(format!(
                            "its normalizer rewrites the character {c:?}: {probe:?} becomes \
                             {:?}, so the model would read another prompt than the one given",
                            n.get()
                        )));
                    }
                }
                return Err(failed(format!(
                    "the character {c:?} has no token (no byte-level pre-tokenizer, byte \
                     fallback or unknown token covers it): {probe:?} tokenizes back to \
                     {back:?}, so a prompt holding it would lose it"
                )));
            }
        }
        Ok(Self {
            inner,
            eos,
            decoding: crate::decoding::Decoding::greedy(eos.into_iter().collect()),
            special: !leading.is_empty(),
            leading,
            missing_bytes: vec![],
        })
    }

    /// Whether the post-processor of the tokenizer at `path` puts tokens before every text
    /// (they are then added to each prompt, as `transformers` does by default). Tokens it puts
    /// after a text (an end-of-sequence token) are refused: a prompt followed by its answer
    /// would no longer begin with the prompt's own tokens, and ropelab scores continuations.
    /// A truncation or padding setting is dropped: `transformers` applies neither unless a
    /// call asks for it, and either would change a prompt silently.
    fn leading_special(inner: &mut Tokenizer, path: &std::path::Path) -> Result<Vec<u32>> {
        let failed = |m: String| PretrainedError::Tokenizer(format!("{}: {m}", path.display()));
        inner
            .with_truncation(None)
            .map_err(|e| failed(crate::first_line(&e)))?;
        inner.with_padding(None);
        const PROBE: &str = "a b";
        let ids = |special: bool| -> Result<Vec<u32>> {
            Ok(inner
                .encode(PROBE, special)
                .map_err(|e| failed(crate::first_line(&e)))?
                .get_ids()
                .to_vec())
        };
        let (plain, with) = (ids(false)?, ids(true)?);
        if plain == with {
            return Ok(vec![]);
        }
        let at = (0..=with.len().saturating_sub(plain.len()))
            .find(|&i| with[i..].starts_with(&plain))
            .ok_or_else(|| {
                failed(format!(
                    "its post_processor changes a text's own tokens ({PROBE:?} is {plain:?}, \
                     {with:?} with special tokens): ropelab reads post-processors that add \
                     tokens before a text only"
                ))
            })?;
        let after = &with[at + plain.len()..];
        if !after.is_empty() {
            return Err(failed(format!(
                "its post_processor adds token(s) {after:?} after every text (an end-of-sequence \
                 token): a prompt followed by its answer would not begin with the prompt's own \
                 tokens; remove them from the template (keep the ones before $A)"
            )));
        }
        Ok(with[..at].to_vec())
    }

    /// Refuses a `tokenizer_config.json` (at `path`, when there is one) whose `add_bos_token`
    /// or `add_eos_token` asks for other special tokens than `tokenizer.json` adds:
    /// `transformers` rebuilds the post-processor from those flags (Llama's fast tokenizer), so
    /// it would tokenize a prompt otherwise than ropelab reads it (tenth pass, S2). An
    /// `add_eos_token` that is true is refused as a trailing token in the post-processor is.
    pub fn check_config(&self, path: &std::path::Path) -> Result<()> {
        let failed = |m: String| PretrainedError::Tokenizer(format!("{}: {m}", path.display()));
        if !crate::hf::regular_file(path)? {
            return Ok(());
        }
        let text = crate::json_text(path, crate::SMALL_JSON_BYTES)?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| failed(crate::first_line(&e)))?;
        if !json.is_object() {
            return Err(failed(format!(
                "is {}, not a JSON object of settings",
                crate::hf::shown_json(&json)
            )));
        }
        let flag = |key: &str| -> Result<Option<bool>> {
            match json.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::Bool(b)) => Ok(Some(*b)),
                Some(v) => Err(failed(format!(
                    "{key} is {}, not true or false",
                    crate::hf::shown_json(v)
                ))),
            }
        };
        self.config_tokens_are_tokens(&json).map_err(failed)?;
        if flag("add_eos_token")? == Some(true) {
            return Err(failed(
                "add_eos_token is true: transformers would end every prompt with EOS, and a \
                 prompt followed by its answer would not begin with the prompt's tokens \
                 (ropelab scores continuations)"
                    .into(),
            ));
        }
        // The class transformers builds decides whether it rebuilds the post-processor from
        // the flags, and with which defaults (thirteenth pass, S4).
        let class = match json.get("tokenizer_class") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(c)) => Some(c.as_str()),
            Some(v) => {
                return Err(failed(format!(
                    "tokenizer_class is {}, not a class name",
                    crate::hf::shown_json(v)
                )))
            }
        };
        let rebuilds = match class {
            None => Rebuild::Never,
            Some(c) => Rebuild::of(c).ok_or_else(|| {
                failed(format!(
                    "tokenizer_class {} is not one ropelab knows how transformers builds \
                     (known: {})",
                    crate::quoted(c),
                    Rebuild::KNOWN.join(", ")
                ))
            })?,
        };
        let bos = match (flag("add_bos_token")?, rebuilds) {
            (Some(bos), _) => Some(bos),
            (None, Rebuild::Always { bos }) => Some(bos),
            (None, Rebuild::Never) => None,
        };
        if let Some(prefix) = flag("add_prefix_space")? {
            self.check_prefix_space(prefix, class, rebuilds)
                .map_err(failed)?;
        }
        if let Some(bos) = bos {
            if bos != self.special {
                return Err(failed(format!(
                    "add_bos_token is {bos}{}, but tokenizer.json's post_processor {} before \
                     every text: transformers would tokenize prompts otherwise than ropelab \
                     reads them (make the two files agree)",
                    match (flag("add_bos_token")?, class) {
                        (None, Some(c)) => format!(" (the default of tokenizer_class {c})"),
                        _ => String::new(),
                    },
                    if self.special {
                        "adds a token"
                    } else {
                        "adds no token"
                    }
                )));
            }
        }
        Ok(())
    }

    /// Refuses special tokens of a `tokenizer_config.json` (`json`) that `tokenizer.json` does
    /// not hold under the same id: transformers adds a missing one as a new token, beyond the
    /// model's embedding rows (twentieth pass, F-S3).
    /// Checks the files transformers reads beside `tokenizer.json` in model directory `dir`:
    /// `special_tokens_map.json`'s tokens must be tokens of tokenizer.json, and every entry of
    /// `added_tokens.json` (token -> id) the id tokenizer.json gives it; transformers would
    /// otherwise add a token beyond the model's embedding rows, or number one otherwise
    /// (twenty-fourth pass, B-S6). Absent files are fine.
    pub fn check_side_files(&self, dir: &std::path::Path) -> Result<()> {
        let read = |name: &str| -> Result<Option<(std::path::PathBuf, serde_json::Value)>> {
            let path = dir.join(name);
            if !crate::hf::regular_file(&path)? {
                return Ok(None);
            }
            let text = crate::json_text(&path, crate::SMALL_JSON_BYTES)?;
            let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                PretrainedError::Tokenizer(format!("{}: {}", path.display(), crate::first_line(&e)))
            })?;
            if !json.is_object() {
                return Err(PretrainedError::Tokenizer(format!(
                    "{}: is {}, not a JSON object",
                    path.display(),
                    crate::hf::shown_json(&json)
                )));
            }
            Ok(Some((path, json)))
        };
        if let Some((path, json)) = read("special_tokens_map.json")? {
            self.config_tokens_are_tokens(&json)
                .map_err(|m| PretrainedError::Tokenizer(format!("{}: {m}", path.display())))?;
        }
        if let Some((path, json)) = read("added_tokens.json")? {
            for (token, id) in json.as_object().into_iter().flatten() {
                let given = self.inner.token_to_id(token);
                if id.as_u64() != given.map(u64::from) {
                    return Err(PretrainedError::Tokenizer(format!(
                        "{}: gives {} id {}, but tokenizer.json numbers it {}: transformers \
                         would add or renumber it",
                        path.display(),
                        crate::quoted(token),
                        crate::hf::shown_json(id),
                        given.map_or("nothing (not a token)".to_owned(), |g| g.to_string())
                    )));
                }
                // transformers registers each entry as an added token (twenty-sixth pass,
                // B-S-A): an ordinary vocabulary token here would split texts around it.
                self.is_added("the entry", token)
                    .map_err(|m| PretrainedError::Tokenizer(format!("{}: {m}", path.display())))?;
            }
        }
        Ok(())
    }

    /// Refuses a token a side file declares special (or added) that `tokenizer.json` holds as
    /// an ordinary vocabulary token: transformers registers it as an added token and splits
    /// every text around it, so it would read prompts otherwise than ropelab does (twenty-fifth
    /// pass, B-S3).
    fn is_added(&self, key: &str, token: &str) -> std::result::Result<(), String> {
        let added = self
            .inner
            .get_added_tokens_decoder()
            .values()
            .any(|t| t.content == token);
        if added {
            return Ok(());
        }
        Err(format!(
            "{key} {} is an ordinary token of tokenizer.json, not one of its added_tokens: \
             transformers would register it as an added token and split every text around it, \
             which tokenizer.json does not (add it to tokenizer.json's added_tokens, or remove \
             it here)",
            crate::quoted(token)
        ))
    }

    fn config_tokens_are_tokens(
        &self,
        json: &serde_json::Value,
    ) -> std::result::Result<(), String> {
        // A token is a string, or an object holding it as `content` (an AddedToken).
        let content = |v: &serde_json::Value| -> Option<String> {
            v.as_str()
                .or_else(|| v.get("content").and_then(|c| c.as_str()))
                .map(str::to_owned)
        };
        let mut named: Vec<(String, String)> = vec![];
        for key in [
            "bos_token",
            "eos_token",
            "unk_token",
            "pad_token",
            "sep_token",
            "cls_token",
            "mask_token",
        ] {
            match json.get(key) {
                None | Some(serde_json::Value::Null) => {}
                Some(v) => named.push((
                    key.to_owned(),
                    content(v).ok_or_else(|| {
                        format!("{key} is {}, not a token", crate::hf::shown_json(v))
                    })?,
                )),
            }
        }
        if let Some(extra) = json.get("additional_special_tokens") {
            let items = extra.as_array().ok_or_else(|| {
                format!(
                    "additional_special_tokens is {}, not a list of tokens",
                    crate::hf::shown_json(extra)
                )
            })?;
            for (i, v) in items.iter().enumerate() {
                let key = format!("additional_special_tokens[{i}]");
                let token = content(v)
                    .ok_or_else(|| format!("{key} is {}, not a token", crate::hf::shown_json(v)))?;
                named.push((key, token));
            }
        }
        for (key, token) in named {
            if self.inner.token_to_id(&token).is_none() {
                return Err(format!(
                    "{key} {} is not a token of tokenizer.json: transformers would add it as a \
                     new token, beyond the model's embedding rows",
                    crate::quoted(&token)
                ));
            }
            self.is_added(&key, &token)?;
        }
        if let Some(decoder) = json.get("added_tokens_decoder") {
            let map = decoder.as_object().ok_or_else(|| {
                format!(
                    "added_tokens_decoder is {}, not a map of ids to tokens",
                    crate::hf::shown_json(decoder)
                )
            })?;
            for (id, v) in map {
                let token = content(v).ok_or_else(|| {
                    format!(
                        "added_tokens_decoder[{id}] is {}, not a token",
                        crate::hf::shown_json(v)
                    )
                })?;
                let given = self.inner.token_to_id(&token);
                if id.parse::<u32>().ok() != given || given.is_none() {
                    return Err(format!(
                        "added_tokens_decoder gives id {} to {}, but tokenizer.json numbers it \
                         {}: the two files must agree",
                        crate::quoted(id),
                        crate::quoted(&token),
                        given.map_or("nothing".to_owned(), |g| g.to_string())
                    ));
                }
                self.is_added(&format!("added_tokens_decoder[{id}]"), &token)?;
            }
        }
        Ok(())
    }

    /// Refuses a `tokenizer_config.json` `add_prefix_space` that transformers would apply
    /// otherwise than `tokenizer.json` reads (thirteenth pass, S5): Llama's and Gemma's fast
    /// tokenizers rebuild themselves from the slow (sentencepiece) tokenizer when it is given;
    /// the others rebuild a byte-level pre-tokenizer whose own flag differs.
    fn check_prefix_space(
        &self,
        prefix: bool,
        class: Option<&str>,
        rebuilds: Rebuild,
    ) -> std::result::Result<(), String> {
        if let (Some(c), Rebuild::Always { bos: true }) = (class, rebuilds) {
            return Err(format!(
                "add_prefix_space is {prefix}: transformers' {c} then rebuilds the tokenizer \
                 from its sentencepiece model, not from tokenizer.json (remove the key)"
            ));
        }
        let pre = serde_json::to_value(self.inner.get_pre_tokenizer())
            .map_err(|e| crate::first_line(&e))?;
        // A ByteLevel inside a Sequence (Llama 3's layout) is rebuilt too.
        match prefix_flags(&pre).into_iter().find(|&own| own != prefix) {
            Some(own) => Err(format!(
                "add_prefix_space is {prefix}, but tokenizer.json's pre_tokenizer has \
                 add_prefix_space {own}: transformers would rebuild it with {prefix} and \
                 tokenize prompts otherwise than ropelab reads them (make the two files agree)"
            )),
            None => Ok(()),
        }
    }

    /// Refuses a tokenizer that can produce an id at or beyond the model's `vocab_size` (an
    /// embedding row the model lacks), naming `path`: otherwise only a prompt that uses such a
    /// token would fail.
    pub fn check_ids(&self, vocab_size: usize, path: &std::path::Path) -> Result<()> {
        // The post-processor's own ids are none of the vocabulary's (tenth pass, T2oov).
        if let Some(&id) = self.leading.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(PretrainedError::Tokenizer(format!(
                "{}: post_processor puts id {id} before every text, beyond the model's \
                 vocabulary of {vocab_size}",
                path.display()
            )));
        }
        let vocab = self.inner.get_vocab(true);
        if let Some((token, &id)) = vocab.iter().max_by_key(|(_, &id)| id) {
            if id as usize >= vocab_size {
                return Err(PretrainedError::Tokenizer(format!(
                    "{}: token {:?} has id {id}, beyond the model's vocabulary of {vocab_size}",
                    path.display(),
                    token
                        .chars()
                        .flat_map(char::escape_debug)
                        .collect::<String>()
                )));
            }
        }
        Ok(())
    }

    /// Token ids of `text`: after the tokens a `tokenizer.json` post-processor puts before
    /// every text (BOS, in Llama 3's), else none (a GGUF's add_bos_token is false).
    /// A text holding a byte the vocabulary has no token for (a GGUF's byte-level vocabulary
    /// with a byte left out) is refused naming it, not encoded without it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        // A normalizer that rewrites the text may be undone by a decoder that rewrites it
        // back, so the round trip below cannot see it: the normalized text itself must be the
        // text, but for sentencepiece's spaces as "▁" and one space put before it
        // (twenty-fifth pass, B-S1).
        if let Some(normalizer) = self.inner.get_normalizer() {
            use tokenizers::Normalizer;
            let mut normalized = tokenizers::NormalizedString::from(text);
            normalizer
                .normalize(&mut normalized)
                .map_err(|e| PretrainedError::Tokenizer(e.to_string()))?;
            let got = normalized.get().replace('\u{2581}', " ");
            let want = text.replace('\u{2581}', " ");
            if got != want && got.strip_prefix(' ') != Some(want.as_str()) {
                let at = want
                    .chars()
                    .zip(got.trim_start_matches(' ').chars())
                    .position(|(a, b)| a != b)
                    .unwrap_or_else(|| want.chars().count().min(got.chars().count()));
                let near: String = text.chars().skip(at).take(12).collect();
                return Err(PretrainedError::Tokenizer(format!(
                    "the model's normalizer (tokenizer.json) rewrites the text from character \
                     {at} ({near:?} ...): the model would read another prompt than the one given"
                )));
            }
        }
        let ids = self
            .inner
            .encode(text, self.special)
            .map_err(|e| PretrainedError::Tokenizer(e.to_string()))?
            .get_ids()
            .to_vec();
        // Whatever the tokenizer drops or rewrites (a byte without a token, a normalizer that
        // deletes a sequence) the model never sees: such a text is refused, naming where it
        // changes (twenty-third pass, S-B; twenty-fourth, a normalizer deleting " ->").
        let body = ids.get(self.leading.len()..).unwrap_or_default();
        let back = self.decode(body)?;
        if back != text {
            let byte = text.bytes().find(|b| self.missing_bytes.contains(b));
            return Err(PretrainedError::Tokenizer(match byte {
                Some(b) => format!(
                    "the text holds byte 0x{b:02x}, for which the model's byte-level \
                     vocabulary has no token: it would be dropped from the prompt"
                ),
                None => {
                    let at = text
                        .char_indices()
                        .zip(back.chars())
                        .find(|((_, a), b)| a != b)
                        .map_or(text.len().min(back.len()), |((i, _), _)| i);
                    let near: String = text[at..].chars().take(12).collect();
                    format!(
                        "the text does not survive the model's tokenizer: encoded and decoded \
                         it changes from byte {at} ({near:?} ...), so the model would read \
                         another prompt than the one given"
                    )
                }
            }));
        }
        Ok(ids)
    }

    /// Text of token ids.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| PretrainedError::Tokenizer(e.to_string()))
    }
}

/// The `add_prefix_space` flags of a serialized pre-tokenizer: its own, and those of the
/// members of a `Sequence` (at any depth).
fn prefix_flags(pre: &serde_json::Value) -> Vec<bool> {
    let own = pre.get("add_prefix_space").and_then(|v| v.as_bool());
    let members = pre
        .get("pretokenizers")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .flat_map(prefix_flags);
    own.into_iter().chain(members).collect()
}
