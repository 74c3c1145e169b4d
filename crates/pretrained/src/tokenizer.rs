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

/// A tokenizer with the file's special-token ids.
pub struct GgufTokenizer {
    inner: Tokenizer,
    /// End-of-sequence id.
    pub eos: Option<u32>,
}

impl GgufTokenizer {
    /// Builds the tokenizer from the metadata of `file`.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let err = |e: &dyn std::fmt::Display| {
            PretrainedError::Tokenizer(format!("{}: {e}", file.path().display()))
        };
        let model = match file.value("tokenizer.ggml.model")? {
            candle_core::quantized::gguf_file::Value::String(s) => s.clone(),
            _ => String::new(),
        };
        if let Ok(pre) = file.string("tokenizer.ggml.pre") {
            if pre != "smollm" {
                return Err(err(&format!(
                    "tokenizer.ggml.pre {pre:?} is not supported (smollm; or use the model's \
                     Hugging Face directory with its tokenizer.json)"
                )));
            }
        }
        if model != "gpt2" {
            return Err(err(&format!(
                "tokenizer model {model:?} is not the byte-level BPE (gpt2)"
            )));
        }
        let tokens = file.strings("tokenizer.ggml.tokens")?;
        let types = file.ints("tokenizer.ggml.token_type").unwrap_or_default();
        let merges = file
            .strings("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| err(&format!("merge {m:?} is not two tokens")))
            })
            .collect::<Result<Vec<_>>>()?;
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| err(&e))?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(Sequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let specials: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(_, &t)| t == CONTROL)
            .map(|(tok, _)| AddedToken::from(tok.clone(), true))
            .collect();
        inner.add_special_tokens(specials).map_err(|e| err(&e))?;
        let eos = file
            .usize("tokenizer.ggml.eos_token_id")
            .ok()
            .map(|e| e as u32);
        if let Some(e) = eos.filter(|&e| e as usize >= tokens.len()) {
            return Err(PretrainedError::gguf(
                file.path(),
                format!(
                    "tokenizer.ggml.eos_token_id {e} is not a token of its {} tokens",
                    tokens.len()
                ),
            ));
        }
        Ok(Self { inner, eos })
    }

    /// The tokenizer of a Hugging Face directory (`tokenizer.json`, read by the tokenizers
    /// crate itself) with end-of-sequence id `eos`.
    pub fn from_file(path: &std::path::Path, eos: Option<u32>) -> Result<Self> {
        let inner = Tokenizer::from_file(path)
            .map_err(|e| PretrainedError::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Self { inner, eos })
    }

    /// Refuses a tokenizer that can produce an id at or beyond the model's `vocab_size` (an
    /// embedding row the model lacks), naming `path`: otherwise only a prompt that uses such a
    /// token would fail.
    pub fn check_ids(&self, vocab_size: usize, path: &std::path::Path) -> Result<()> {
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

    /// Token ids of `text` (no BOS added, as the GGUF's add_bos_token is false).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .inner
            .encode(text, false)
            .map_err(|e| PretrainedError::Tokenizer(e.to_string()))?
            .get_ids()
            .to_vec())
    }

    /// Text of token ids.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| PretrainedError::Tokenizer(e.to_string()))
    }
}
