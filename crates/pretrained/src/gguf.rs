//! Reading a Llama-architecture GGUF file (candle's GGUF reader): the configuration from the
//! metadata, the tokenizer tables, and every tensor dequantized to f32 (exact with respect to
//! the stored blocks: Q4_1 is d * q + m, Q8_0 is d * q, per block).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{Device, Tensor};

use ropelab_model::{PositionEncoding, RopeLayout};

use crate::quant::QuantMatrix;
use crate::{PretrainedError, Result};

/// The architectures a GGUF file may name (`general.architecture`): Llama (Mistral and Llama 3
/// files name it too) and Qwen2, whose only differences are q/k/v biases and the split-halves
/// RoPE layout.
pub const GGUF_ARCHITECTURES: [&str; 2] = ["llama", "qwen2"];

/// The RoPE bases ropelab reads: (1, [`ROPE_BASE_MAX`]]. At a base of 1 every plane turns 1
/// rad per token (no spread of frequencies) and below 1 the order reverses (1e-300 overflows
/// f32 frequencies to infinity); above about 1e45 the slowest planes' frequencies underflow f32
/// to 0 (transformers computes them in f32). Released models use 1e4 to about 1e8; 1e12 leaves
/// room for any of them while every plane's frequency stays a normal f32 number.
pub const ROPE_BASE_MAX: f64 = 1e12;

/// The RoPE scaling factors ropelab reads (a linear or Llama 3 `factor`, `low_freq_factor`,
/// `high_freq_factor`, each of Llama 3's per-plane `rope_freqs.weight` factors): from
/// `ROPE_FACTOR_RANGE.0` to `ROPE_FACTOR_RANGE.1`. Released models scale by 1 to 64; a factor
/// of 1e-30 would turn every plane 1e30 times faster (angles of pure f32 rounding noise), one of
/// 1e30 would all but stop them.
pub const ROPE_FACTOR_RANGE: (f64, f64) = (1e-6, 1e6);

/// Whether `base` is a RoPE base ropelab reads (see [`ROPE_BASE_MAX`]; NaN is not).
pub fn rope_base_in_range(base: f64) -> bool {
    base > 1.0 && base <= ROPE_BASE_MAX
}

/// Whether `factor` is a RoPE scaling factor ropelab reads ([`ROPE_FACTOR_RANGE`]; NaN is not).
pub fn rope_factor_in_range(factor: f64) -> bool {
    factor >= ROPE_FACTOR_RANGE.0 && factor <= ROPE_FACTOR_RANGE.1
}

/// Sizes and structure of a RoPE decoder (the Llama family, GPT-NeoX, GPT-J), from a GGUF
/// file's `<arch>.*` metadata keys or a Hugging Face `config.json`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LlamaConfig {
    /// The architecture (`llama`, `mistral`, `qwen2`, `gpt_neox`, `gptj`).
    pub arch: String,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Blocks (`llama.block_count`).
    pub n_layers: usize,
    /// Query heads (`llama.attention.head_count`).
    pub n_heads: usize,
    /// Key/value heads (`llama.attention.head_count_kv`).
    pub n_kv_heads: usize,
    /// Residual width (`llama.embedding_length`).
    pub d_model: usize,
    /// MLP width (`llama.feed_forward_length`).
    pub d_ff: usize,
    /// Rotated dims per head (`llama.rope.dimension_count`).
    pub rope_dim: usize,
    /// RoPE base (`llama.rope.freq_base`).
    pub rope_base: f64,
    /// Epsilon of the RMSNorms or LayerNorms (`llama.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f64,
    /// The key `rms_eps` was read from (named by a refusal of its value).
    #[serde(skip)]
    pub eps_key: String,
    /// Training context (`llama.context_length`).
    pub context_length: usize,
    /// Dimension of one head (`llama.attention.key_length`, else d_model / heads).
    pub d_head: usize,
    /// Whether the q, k and v projections have biases (Qwen2, GPT-NeoX).
    pub qkv_bias: bool,
    /// The block's structure beyond Llama's (norms, MLP, residual joins, other biases).
    pub block: BlockStyle,
    /// Which dims of a head form a RoPE plane: interleaved for a GGUF `llama` file (its
    /// converter permutes the q/k rows), split halves for `qwen2` and Hugging Face weights.
    pub rope_layout: RopeLayout,
    /// Radians per position of each plane when the file scales RoPE's frequencies (Llama 3's
    /// `rope_freqs.weight` or `rope_type = "llama3"`, linear scaling); None: base^(-2k/rope_dim).
    pub rope_thetas: Option<Vec<f64>>,
}

/// The longest context a model may declare (2^27 tokens).
pub const MAX_CONTEXT: usize = 1 << 27;

/// The normalization before attention, MLP and unembedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// RMSNorm with a gain (Llama, Qwen2).
    Rms,
    /// LayerNorm with a gain and a bias (GPT-NeoX, GPT-J).
    Layer,
}

/// The MLP of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mlp {
    /// down(silu(gate(h)) * up(h)) (Llama, Qwen2).
    SwiGlu,
    /// down(gelu(up(h))) with the exact, erf-based GELU (`gelu`: GPT-NeoX, ropelab's GPT-J).
    Gelu,
    /// down(gelu(up(h))) with GELU's tanh approximation (`gelu_new`: GPT-J).
    GeluTanh,
}

/// How a block's attention and MLP join the residual stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Residual {
    /// x + attn(norm1(x)), then + mlp(norm2(.)) (Llama; GPT-NeoX without parallel residual).
    Sequential,
    /// x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX's `use_parallel_residual`).
    Parallel,
    /// x + attn(norm(x)) + mlp(norm(x)), one norm for both (GPT-J).
    ParallelSharedNorm,
}

/// What a block looks like beyond the Llama family's common part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BlockStyle {
    /// The normalization.
    pub norm: Norm,
    /// The MLP.
    pub mlp: Mlp,
    /// How attention and MLP join the residual stream.
    pub residual: Residual,
    /// Whether the attention output projection has a bias (GPT-NeoX).
    pub o_bias: bool,
    /// Whether the MLP's projections have biases (GPT-NeoX, GPT-J).
    pub mlp_bias: bool,
    /// Whether the unembedding has a bias (GPT-J's `lm_head.bias`).
    pub unembed_bias: bool,
}

impl BlockStyle {
    /// The Llama family's block: RMSNorm, SwiGLU, sequential residual, no bias but q/k/v's.
    pub const LLAMA: Self = Self {
        norm: Norm::Rms,
        mlp: Mlp::SwiGlu,
        residual: Residual::Sequential,
        o_bias: false,
        mlp_bias: false,
        unembed_bias: false,
    };
}

impl LlamaConfig {
    /// Dimension of one head.
    pub fn head_dim(&self) -> usize {
        self.d_head
    }

    /// The rotary position encoding of every layer.
    pub fn position(&self) -> PositionEncoding {
        match &self.rope_thetas {
            Some(thetas) => PositionEncoding::Angles {
                thetas: thetas.clone(),
                layout: self.rope_layout,
                planes: Default::default(),
            },
            None => PositionEncoding::rope(self.rope_base, self.rope_dim, self.rope_layout),
        }
    }

    /// Checks that the sizes make a valid model (`source` names the file in errors).
    pub fn validate(&self, source: &Path, tensors: usize) -> Result<()> {
        let c = self;
        let bad = |m: String| Err(PretrainedError::gguf(source, m));
        if c.n_layers == 0 {
            return bad("the model has 0 blocks".into());
        }
        if c.context_length == 0 {
            return bad("the model's context length is 0".into());
        }
        // Beyond any model's (the longest today are near 10M tokens): a corrupted header,
        // which would lift every length bound derived from it (seventh pass, H6).
        if c.context_length > MAX_CONTEXT {
            return bad(format!(
                "the model's context length {} is beyond {MAX_CONTEXT}: no model has one",
                c.context_length
            ));
        }
        // Each block has its own tensors: a block count beyond the tensors in the file is a
        // corrupted header (and must not size any allocation).
        if c.n_layers > tensors {
            return bad(format!(
                "block count {} does not fit the {tensors} tensors in the file",
                c.n_layers
            ));
        }
        if c.n_heads == 0 || c.n_kv_heads == 0 || !c.n_heads.is_multiple_of(c.n_kv_heads) {
            return bad(format!(
                "{} query heads do not group over {} key/value heads",
                c.n_heads, c.n_kv_heads
            ));
        }
        if c.d_head == 0
            || c.rope_dim > c.d_head
            || !c.rope_dim.is_multiple_of(2)
            || c.rope_dim == 0
        {
            return bad(format!(
                "head dim {} with rope dim {} is not a valid head layout",
                c.d_head, c.rope_dim
            ));
        }
        if c.vocab_size == 0 || c.d_model == 0 || c.d_ff == 0 {
            return bad("vocabulary, residual and MLP sizes must be positive".into());
        }
        // A RoPE base outside (1, 1e12] (NaN, 0, 1e-300, 1e300) gives NaN, infinite or
        // meaningless angles, and a norm epsilon outside (0, 1] divisions by zero or a norm
        // that flattens every row (1e30): no model has one.
        if !rope_base_in_range(c.rope_base) {
            return bad(format!(
                "RoPE base {} is outside (1, {ROPE_BASE_MAX:e}]: no model rotates so",
                crate::number(c.rope_base)
            ));
        }
        // (In f32, where the norms add it: 1e-300 would be 0 there; seventh pass, H23.) The
        // message names the keys it is read from (twenty-fourth pass, B-U1).
        let eps_key = &c.eps_key;
        if !(c.rms_eps > 0.0 && c.rms_eps <= 1.0) {
            return bad(format!(
                "norm epsilon {eps_key} = {} is outside (0, 1]: no model normalises so",
                crate::number(c.rms_eps)
            ));
        }
        if (c.rms_eps as f32) == 0.0 {
            return bad(format!(
                "norm epsilon {eps_key} = {} is 0 in f32, where the norms add it: no model \
                 normalises so",
                crate::number(c.rms_eps)
            ));
        }
        if let Some(t) = &c.rope_thetas {
            if t.len() != c.rope_dim / 2 {
                return bad(format!(
                    "{} RoPE frequencies for {} planes: give one per plane",
                    t.len(),
                    c.rope_dim / 2
                ));
            }
            if let Some((k, x)) = t
                .iter()
                .enumerate()
                .find(|(_, x)| !(x.is_finite() && **x > 0.0))
            {
                return bad(format!(
                    "the scaled RoPE frequency of plane {k} is {}, not a finite positive number",
                    crate::number(*x)
                ));
            }
        }
        Ok(())
    }

    /// Peak activation bytes of one hooked forward pass over `tokens` positions (batch 1, f32):
    /// one layer's attention scores, softmax and pattern (3 x heads x T^2 when any layer's full
    /// pattern is captured, else in query chunks of [`ropelab_model::attention::QUERY_CHUNK`]
    /// and key blocks of [`crate::llama::ATTENTION_BLOCK`]: 3 x heads x chunk x block), the
    /// residual stream,
    /// q/k/v and MLP activations (16 x T x d_model + 4 x T x d_ff), logits at every position
    /// (`all_logits`, T x vocab) and every captured layer's pattern (`captured_layers` x heads x
    /// T^2). Saturating.
    pub fn forward_bytes(&self, tokens: usize, all_logits: bool, captured_layers: usize) -> u64 {
        use ropelab_io::resources::bytes;
        let t = tokens;
        let logit_rows = if all_logits { t } else { 1 };
        let (chunk, block) = if captured_layers > 0 {
            (t, t)
        } else {
            (
                t.min(ropelab_model::attention::QUERY_CHUNK),
                t.min(crate::llama::ATTENTION_BLOCK),
            )
        };
        [
            bytes(&[4, 3, self.n_heads, chunk, block]),
            bytes(&[4, 16, t, self.d_model]),
            bytes(&[4, 4, t, self.d_ff]),
            bytes(&[4, logit_rows, self.vocab_size]),
            bytes(&[4, captured_layers, self.n_heads, t, t]),
        ]
        .into_iter()
        .fold(0, u64::saturating_add)
    }
}

impl LlamaConfig {
    /// Arithmetic of a forward pass over `tokens` prompt tokens, a lower bound for time
    /// estimates: 2 FLOP per block weight per token (q, k, v, output and MLP projections),
    /// leaving out attention scores, norms and the unembedding. Saturating.
    pub fn forward_flops(&self, tokens: usize) -> u64 {
        use ropelab_io::resources::bytes;
        let (q, kv) = (self.n_heads * self.d_head, self.n_kv_heads * self.d_head);
        let mlp = match self.block.mlp {
            Mlp::SwiGlu => 3,
            Mlp::Gelu | Mlp::GeluTanh => 2,
        };
        let per_layer = [
            bytes(&[2, self.d_model, q]),
            bytes(&[2, self.d_model, kv]),
            bytes(&[mlp, self.d_model, self.d_ff]),
        ]
        .into_iter()
        .fold(0, u64::saturating_add);
        bytes(&[2, self.n_layers, tokens]).saturating_mul(per_layer)
    }

    /// Peak bytes of a cached forward over `tokens` positions fed `chunk` at a time (batch 1,
    /// f32): the key/value cache of every layer (2 x layers x kv_heads x T x head_dim), one
    /// chunk's scores and pattern against one block of keys (3 x heads x chunk x
    /// min(T, [`crate::llama::ATTENTION_BLOCK`])), its residual stream and MLP activations, and
    /// logits at `logit_rows` positions. Saturating.
    pub fn cached_bytes(&self, tokens: usize, chunk: usize, logit_rows: usize) -> u64 {
        use ropelab_io::resources::bytes;
        let (t, c) = (tokens, chunk.min(tokens));
        [
            bytes(&[4, 2, self.n_layers, self.n_kv_heads, t, self.head_dim()]),
            bytes(&[4, 3, self.n_heads, c, t.min(crate::llama::ATTENTION_BLOCK)]),
            bytes(&[4, 16, c, self.d_model]),
            bytes(&[4, 4, c, self.d_ff]),
            bytes(&[4, logit_rows, self.vocab_size]),
        ]
        .into_iter()
        .fold(0, u64::saturating_add)
    }
}

/// An open GGUF file: its metadata and tensor index.
pub struct GgufFile {
    path: PathBuf,
    content: Content,
    reader: BufReader<File>,
    /// The tensors read so far ([`GgufFile::check_all_read`]).
    read: HashSet<String>,
}

impl GgufFile {
    /// Opens and parses the header of `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| PretrainedError::io(path, e))?;
        let mut reader = BufReader::new(file);
        let header =
            crate::gguf_header::scan(&mut reader).map_err(|e| PretrainedError::io(path, e))?;
        // llama.cpp reads versions 2 and 3 only (version 1 is "no longer supported"); another
        // version's header would be read as garbage (a tensor of 1630432353 dimensions).
        if let Some(v) = header.version.filter(|v| !matches!(v, 2 | 3)) {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "GGUF version {v} is not supported: ropelab reads versions 2 and 3 (as \
                     llama.cpp does; convert the file again)"
                ),
            ));
        }
        // candle divides by the alignment while it parses: a zero is refused first.
        if header.alignment == Some(0) {
            return Err(PretrainedError::gguf(
                path,
                "general.alignment is 0; it must be a power of two (GGUF's default is 32)",
            ));
        }
        // candle keeps the last of a key or tensor given twice: which one a writer meant is
        // unknown.
        if let Some(key) = header.repeated_key {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "metadata key {} is given twice: give it once",
                    crate::escaped(&key)
                ),
            ));
        }
        // GGUF's strings are UTF-8: candle would replace other bytes with U+FFFD, so two
        // damaged tokens would read as one (thirteenth pass, S3).
        if let Some(at) = header.not_utf8 {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "{} holds bytes that are not UTF-8 (GGUF strings are UTF-8)",
                    crate::escaped(&at)
                ),
            ));
        }
        if let Some(name) = header.repeated_tensor {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "tensor {} is listed twice: give it once",
                    crate::escaped(&name)
                ),
            ));
        }
        let content = Content::read(&mut reader).map_err(|e| {
            let text = crate::first_line(&e);
            // candle names a type it does not know as if it were a tensor ("unknown dtype for
            // tensor 99"): the walk names the tensor, or says where the index went wrong.
            if text.contains("unknown dtype") {
                let why = match &header.unknown_type {
                    Some((name, kind)) => format!(
                        "tensor {} has GGML type {kind}, which ropelab does not read (it reads \
                         F32, F16, BF16, Q4_0 to Q8_1 and the K quants), or the header's \
                         tensor_count / metadata_kv_count do not match its entries",
                        crate::escaped(name)
                    ),
                    None => "the tensor index is unreadable: the header's tensor_count or \
                             metadata_kv_count does not match its entries"
                        .to_owned(),
                };
                return PretrainedError::gguf(path, why);
            }
            // The parser may quote raw bytes of the file (a wrong magic, a bad string): printed
            // escaped, never as control characters, and without a backtrace.
            PretrainedError::gguf(path, format!("not a readable GGUF file: {text}"))
        })?;
        let file_len = reader
            .get_ref()
            .metadata()
            .map_err(|e| PretrainedError::io(path, e))?
            .len();
        check_layout(path, &content, file_len)?;
        Ok(Self {
            path: path.to_owned(),
            content,
            reader,
            read: HashSet::new(),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An error naming the file.
    fn error(&self, message: impl std::fmt::Display) -> PretrainedError {
        PretrainedError::gguf(&self.path, message)
    }

    /// A metadata value, or an error naming the missing key.
    pub fn value(&self, key: &str) -> Result<&Value> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| self.error(format!("metadata key {key} is missing")))
    }

    /// Whether the file has metadata key `key`.
    pub fn has_key(&self, key: &str) -> bool {
        self.content.metadata.contains_key(key)
    }

    /// An error saying that `key` holds a `value` that is not `what`.
    fn wrong_type(&self, key: &str, value: &Value, what: &str) -> PretrainedError {
        let shown = match value {
            Value::String(s) if s.chars().count() > 40 => {
                format!("the string {:?}...", s.chars().take(40).collect::<String>())
            }
            Value::String(s) => format!("the string {s:?}"),
            Value::Array(items) => format!("an array of {}", items.len()),
            Value::Bool(b) => format!("{b}"),
            other => format!("{other:?}"),
        };
        self.error(format!("{key} is {shown}, not {what}"))
    }

    /// An unsigned integer metadata value of any integer type, or None when the key is absent;
    /// a value of another type or a negative one is refused naming the key (a missing key may
    /// take a default, a present one is never ignored).
    pub fn optional_usize(&self, key: &str) -> Result<Option<usize>> {
        let Some(v) = self.content.metadata.get(key) else {
            return Ok(None);
        };
        let n = match *v {
            Value::U8(x) => Some(u64::from(x)),
            Value::U16(x) => Some(u64::from(x)),
            Value::U32(x) => Some(u64::from(x)),
            Value::U64(x) => Some(x),
            Value::I8(x) => u64::try_from(x).ok(),
            Value::I16(x) => u64::try_from(x).ok(),
            Value::I32(x) => u64::try_from(x).ok(),
            Value::I64(x) => u64::try_from(x).ok(),
            _ => None,
        };
        match n.and_then(|n| usize::try_from(n).ok()) {
            Some(n) => Ok(Some(n)),
            None => Err(self.wrong_type(key, v, "an unsigned integer")),
        }
    }

    /// An unsigned integer metadata value ([`GgufFile::optional_usize`]) that must be present.
    pub fn usize(&self, key: &str) -> Result<usize> {
        self.optional_usize(key)?
            .ok_or_else(|| self.error(format!("metadata key {key} is missing")))
    }

    /// A positive integer metadata value, or None when the key is absent.
    fn optional_positive(&self, key: &str) -> Result<Option<usize>> {
        match self.optional_usize(key)? {
            Some(0) => Err(self.error(format!("{key} is 0; it must be positive"))),
            n => Ok(n),
        }
    }

    /// A positive integer metadata value that must be present.
    fn positive(&self, key: &str) -> Result<usize> {
        self.optional_positive(key)?
            .ok_or_else(|| self.error(format!("metadata key {key} is missing")))
    }

    /// A float metadata value (F32 or F64), or None when the key is absent; another type is
    /// refused naming the key. llama.cpp's loader refuses any type but F32 for its float keys
    /// ("wrong type"), so an integer is refused here too; F64 holds the same numbers exactly.
    pub fn optional_float(&self, key: &str) -> Result<Option<f64>> {
        match self.content.metadata.get(key) {
            None => Ok(None),
            Some(Value::F32(x)) => Ok(Some(f64::from(*x))),
            Some(Value::F64(x)) => Ok(Some(*x)),
            Some(other) => Err(self.wrong_type(key, other, "a float (F32 or F64)")),
        }
    }

    /// A float metadata value ([`GgufFile::optional_float`]) that must be present.
    pub fn float(&self, key: &str) -> Result<f64> {
        self.optional_float(key)?
            .ok_or_else(|| self.error(format!("metadata key {key} is missing")))
    }

    /// A string metadata value, or None when the key is absent; another type is refused.
    pub fn optional_string(&self, key: &str) -> Result<Option<String>> {
        match self.content.metadata.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.wrong_type(key, other, "a string")),
        }
    }

    /// A string metadata value that must be present.
    pub fn string(&self, key: &str) -> Result<String> {
        self.optional_string(key)?
            .ok_or_else(|| self.error(format!("metadata key {key} is missing")))
    }

    /// A boolean metadata value, or None when the key is absent; another type is refused.
    pub fn optional_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.content.metadata.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong_type(key, other, "true or false")),
        }
    }

    /// A string array metadata value.
    pub fn strings(&self, key: &str) -> Result<Vec<String>> {
        let bad = || self.error(format!("{key} is not an array of strings"));
        let Value::Array(items) = self.value(key)? else {
            return Err(bad());
        };
        items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                _ => Err(bad()),
            })
            .collect()
    }

    /// The length of float array metadata value `key` (an error when it is no array of
    /// floats).
    pub fn floats_len(&self, key: &str) -> Result<usize> {
        match self.value(key)? {
            Value::Array(items)
                if items
                    .iter()
                    .all(|v| matches!(v, Value::F32(_) | Value::F64(_))) =>
            {
                Ok(items.len())
            }
            _ => Err(self.error(format!("{key} is not an array of floats"))),
        }
    }

    /// An integer array metadata value (elements of any integer type).
    pub fn ints(&self, key: &str) -> Result<Vec<i64>> {
        let bad = || self.error(format!("{key} is not an array of integers"));
        let Value::Array(items) = self.value(key)? else {
            return Err(bad());
        };
        items
            .iter()
            .map(|v| match *v {
                Value::U8(x) => Ok(i64::from(x)),
                Value::I8(x) => Ok(i64::from(x)),
                Value::U16(x) => Ok(i64::from(x)),
                Value::I16(x) => Ok(i64::from(x)),
                Value::U32(x) => Ok(i64::from(x)),
                Value::I32(x) => Ok(i64::from(x)),
                Value::I64(x) => Ok(x),
                Value::U64(x) => i64::try_from(x).map_err(|_| bad()),
                _ => Err(bad()),
            })
            .collect()
    }

    /// The architecture the file names, if it is one ropelab reads ([`GGUF_ARCHITECTURES`]).
    pub fn architecture(&self) -> Result<String> {
        let arch = self.string("general.architecture")?;
        if !GGUF_ARCHITECTURES.contains(&arch.as_str()) {
            return Err(self.error(format!(
                "general.architecture {} is not supported (supported: {})",
                crate::quoted(&arch),
                GGUF_ARCHITECTURES.join(", ")
            )));
        }
        Ok(arch)
    }

    /// The Llama-family configuration, checked for consistency. An optional key that is present
    /// must hold a usable value (a missing one takes llama.cpp's default). RoPE scaling from
    /// `<arch>.rope.scaling.*` as llama.cpp reads it: a factor (or the older
    /// `<arch>.rope.scale_linear`) without a type is linear scaling (llama.cpp's default type);
    /// type none or linear, any other is refused naming the key. A `rope_freqs.weight` tensor
    /// (Llama 3) is applied by the loader.
    pub fn llama_config(&self) -> Result<LlamaConfig> {
        let arch = self.architecture()?;
        let key = |k: &str| format!("{arch}.{k}");
        let vocab_size = match self.optional_positive(&key("vocab_size"))? {
            Some(v) => v,
            None => self.strings("tokenizer.ggml.tokens")?.len(),
        };
        let n_heads = self.positive(&key("attention.head_count"))?;
        let d_model = self.positive(&key("embedding_length"))?;
        // llama.cpp builds a mixture of experts from these keys: a dense forward would be
        // another model (tenth pass, SI1).
        for k in ["expert_count", "expert_used_count"] {
            if let Some(n) = self.optional_usize(&key(k))?.filter(|&n| n > 0) {
                return Err(self.error(format!(
                    "{} is {n}: a mixture of experts is not supported (ropelab runs dense \
                     blocks)",
                    key(k)
                )));
            }
        }
        // The embedding's width is the residual width: a mismatch is named here, before the
        // head size derived from it is (sixth pass, B34).
        if let Some(info) = self.content.tensor_infos.get("token_embd.weight") {
            if let Some(&width) = info.shape.dims().last() {
                if width != d_model {
                    return Err(self.error(format!(
                        "{} {d_model} differs from the width {width} of token_embd.weight",
                        key("embedding_length")
                    )));
                }
            }
        }
        // A sliding window shorter than the context changes attention, and ropelab attends
        // over the whole context (as the Hugging Face path refuses `sliding_window`).
        let context = self.positive(&key("context_length"))?;
        if let Some(w) = self.optional_usize(&key("attention.sliding_window"))? {
            if w < context {
                return Err(self.error(format!(
                    "{} {w} is shorter than the context of {context}: sliding-window \
                     attention is not supported",
                    key("attention.sliding_window")
                )));
            }
        }
        let d_head = match self.optional_positive(&key("attention.key_length"))? {
            Some(k) => k,
            // Without a key length a head is d_model / heads wide: heads that do not divide
            // the width are named as such (tenth pass, G24b).
            None if d_model % n_heads != 0 => {
                return Err(self.error(format!(
                    "{} {d_model} is not divisible by {} {n_heads} (and no {} gives the head \
                     size)",
                    key("embedding_length"),
                    key("attention.head_count"),
                    key("attention.key_length")
                )))
            }
            None => d_model / n_heads,
        };
        if let Some(v) = self.optional_positive(&key("attention.value_length"))? {
            if v != d_head {
                return Err(self.error(format!(
                    "{} {v} differs from the key length {d_head}",
                    key("attention.value_length")
                )));
            }
        }
        let rope_base = match self.optional_float(&key("rope.freq_base"))? {
            Some(b) if !rope_base_in_range(b) => {
                return Err(self.error(format!(
                    "{} {} is not a RoPE base ropelab reads: it must lie in (1, \
                     {ROPE_BASE_MAX:e}] (a base of 1 or less, or one beyond, is no model's)",
                    key("rope.freq_base"),
                    crate::number(b)
                )))
            }
            Some(b) => b,
            None => ropelab_model::rope::DEFAULT_BASE,
        };
        // llama.cpp rotates every dim of a head in these architectures (it refuses a llama
        // file whose n_rot is not the head size), as transformers' Llama and Qwen2 do.
        let rope_dim = match self.optional_positive(&key("rope.dimension_count"))? {
            Some(n) if n != d_head => {
                return Err(self.error(format!(
                    "{} {n} differs from the head size {d_head}: partial rotary is not \
                     supported for {arch} (every dim of a head rotates)",
                    key("rope.dimension_count")
                )))
            }
            _ => d_head,
        };
        let rope_thetas = self.rope_scaling(&arch, rope_base, rope_dim)?;
        let block_key = key("block_count");
        let c = LlamaConfig {
            vocab_size,
            n_layers: self.positive(&block_key)?,
            n_heads,
            n_kv_heads: self
                .optional_positive(&key("attention.head_count_kv"))?
                .unwrap_or(n_heads),
            d_model,
            d_ff: self.positive(&key("feed_forward_length"))?,
            rope_dim,
            rope_base,
            rms_eps: self.float(&key("attention.layer_norm_rms_epsilon"))?,
            eps_key: key("attention.layer_norm_rms_epsilon"),
            context_length: self.positive(&key("context_length"))?,
            d_head,
            qkv_bias: arch == "qwen2",
            block: BlockStyle::LLAMA,
            rope_layout: if arch == "llama" {
                RopeLayout::Interleaved
            } else {
                RopeLayout::HalfSplit
            },
            rope_thetas,
            arch,
        };
        c.validate(&self.path, self.content.tensor_infos.len())?;
        // Every block the file holds must be in the config (a smaller block count would
        // silently drop the blocks beyond it).
        let held = blocks_held(self.content.tensor_infos.keys(), "blk.");
        if let Some(held) = held.filter(|&h| h != c.n_layers) {
            return Err(self.error(format!(
                "{block_key} is {} but the file holds {held} blocks (blk.0 .. blk.{})",
                c.n_layers,
                held - 1
            )));
        }
        Ok(c)
    }

    /// The plane frequencies of `arch`'s RoPE scaling keys (None: unscaled), as llama.cpp reads
    /// them: the type defaults to linear, the factor is `rope.scaling.factor` or the older
    /// `rope.scale_linear`. A factor beside type none (which llama.cpp ignores) is refused
    /// unless it is 1, so that no present key is ignored.
    fn rope_scaling(&self, arch: &str, base: f64, rope_dim: usize) -> Result<Option<Vec<f64>>> {
        let (type_key, factor_key, old_key) = (
            format!("{arch}.rope.scaling.type"),
            format!("{arch}.rope.scaling.factor"),
            format!("{arch}.rope.scale_linear"),
        );
        let factor = match (
            self.optional_float(&factor_key)?,
            self.optional_float(&old_key)?,
        ) {
            (Some(f), Some(old)) if f != old => {
                return Err(self.error(format!(
                    "{factor_key} {f} and {old_key} {old} give two RoPE scaling factors: give one"
                )))
            }
            (Some(f), _) => Some((f, &factor_key)),
            (None, Some(old)) => Some((old, &old_key)),
            (None, None) => None,
        };
        // llama.cpp multiplies the rotated q and k by this factor whatever the type
        // (thirteenth pass, S2): ropelab does not, so only 1 (a no-op) is read.
        let attn_key = format!("{arch}.rope.scaling.attn_factor");
        if let Some(a) = self.optional_float(&attn_key)?.filter(|&a| a != 1.0) {
            return Err(self.error(format!(
                "{attn_key} is {}: ropelab does not scale the rotated q and k (give 1, or no \
                 such key)",
                crate::number(a)
            )));
        }
        match (self.optional_string(&type_key)?.as_deref(), factor) {
            (None | Some("none"), None) => Ok(None),
            (Some("none"), Some((1.0, _))) => Ok(None),
            (Some("none"), Some((f, name))) => Err(self.error(format!(
                "{type_key} is \"none\" but {name} is {f}: give a scaling type for the factor, \
                 or no factor"
            ))),
            (Some("linear"), None) => Err(self.error(format!(
                "metadata key {factor_key} is missing ({type_key} is \"linear\")"
            ))),
            (None | Some("linear"), Some((factor, name))) => {
                if !rope_factor_in_range(factor) {
                    return Err(self.error(format!(
                        "{name} {} is not a RoPE scaling factor ropelab reads: it must lie \
                         in [{:e}, {:e}]",
                        crate::number(factor),
                        ROPE_FACTOR_RANGE.0,
                        ROPE_FACTOR_RANGE.1
                    )));
                }
                Ok(Some(
                    ropelab_model::rope::frequencies(base, rope_dim)
                        .into_iter()
                        .map(|f| f / factor)
                        .collect(),
                ))
            }
            (Some(other), _) => Err(self.error(format!(
                "{type_key} {} is not supported (none, linear)",
                crate::quoted(other)
            ))),
        }
    }

    /// Tensor `name` dequantized to f32, checked against `shape` (candle order: [rows, cols]).
    pub fn tensor(&mut self, name: &str, shape: &[usize], device: &Device) -> Result<Tensor> {
        Ok(self.tensor_and_blocks(name, shape, device)?.0)
    }

    /// Tensor `name` dequantized to f32 and, for a [rows, cols] matrix stored as Q4_1 or Q8_0,
    /// also kept in its blocks ([`QuantMatrix`]); checked against `shape` like
    /// [`GgufFile::tensor`].
    pub fn tensor_and_blocks(
        &mut self,
        name: &str,
        shape: &[usize],
        device: &Device,
    ) -> Result<(Tensor, Option<QuantMatrix>)> {
        let path = self.path.clone();
        let shown = crate::escaped(name);
        let failed = |e: candle_core::Error| {
            PretrainedError::gguf(&path, format!("tensor {shown}: {}", crate::first_line(&e)))
        };
        // Check the declared shape before reading: a corrupted dimension must be an error, not
        // a dequantization buffer of absurd size.
        let info =
            self.content.tensor_infos.get(name).ok_or_else(|| {
                PretrainedError::gguf(&path, format!("tensor {shown} is missing"))
            })?;
        if info.shape.dims() != shape {
            return Err(PretrainedError::gguf(
                &path,
                format!(
                    "tensor {shown} has shape {:?}, where the metadata's dimensions need {shape:?}",
                    info.shape.dims()
                ),
            ));
        }
        self.read.insert(name.to_owned());
        let q = self
            .content
            .tensor(&mut self.reader, name, device)
            .map_err(failed)?;
        let t = q.dequantize(device).map_err(failed)?;
        finite(&path, name, &t)?;
        if t.dims() != shape {
            return Err(PretrainedError::gguf(
                &path,
                format!(
                    "tensor {shown} has shape {:?}, where the metadata's dimensions need {shape:?}",
                    t.dims()
                ),
            ));
        }
        let blocks = match shape {
            [rows, cols] => {
                let data = q.data().map_err(failed)?;
                QuantMatrix::from_gguf(q.dtype(), *rows, *cols, &data).map_err(|e| {
                    PretrainedError::gguf(
                        &path,
                        format!("tensor {shown}: {}", crate::first_line(&e)),
                    )
                })?
            }
            _ => None,
        };
        Ok((t, blocks))
    }

    /// Whether the file holds tensor `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Refuses a file with tensors the model did not read (call after building it): llama.cpp
    /// applies such tensors where ropelab's forward would leave them out (q/k/v and output
    /// biases in a `llama` file, norms of other variants), so the model would compute another
    /// function. Every tensor a supported file carries is read, `rope_freqs.weight` included.
    pub(crate) fn check_all_read(&self, arch: &str) -> Result<()> {
        let mut unread: Vec<&String> = self
            .content
            .tensor_infos
            .keys()
            .filter(|n| !self.read.contains(*n))
            .collect();
        if unread.is_empty() {
            return Ok(());
        }
        unread.sort();
        let shown: Vec<String> = unread.iter().take(5).map(|n| crate::escaped(n)).collect();
        Err(self.error(format!(
            "{} tensor(s) the {arch} model ropelab builds would not read: {}{}; a model that \
             needs them would run as another function",
            unread.len(),
            shown.join(", "),
            if unread.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        )))
    }

    /// Every metadata key and the type of its value (for inspection).
    pub fn metadata_keys(&self) -> HashMap<String, String> {
        self.content
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), format!("{:?}", v.value_type())))
            .collect()
    }
}

/// Checks where `content`'s tensors lie in a file of `file_len` bytes: each at an offset
/// aligned to the file's alignment, its bytes (elements / block size x block bytes of its
/// declared type) inside the file, not overlapping the next tensor, and leaving no gap of an
/// alignment or more before it (writers pack tensors, padding each to the alignment): a type
/// relabelled (F16 declared F32, or back) or an offset moved is refused by name, never read as
/// garbage.
fn check_layout(path: &Path, content: &Content, file_len: u64) -> Result<()> {
    // The types candle reads the alignment from (it uses 32 for any other): another type
    // would place the data where this check does not look.
    let declared = match content.metadata.get("general.alignment") {
        None => Some(32),
        Some(Value::U8(v)) => Some(u64::from(*v)),
        Some(Value::U16(v)) => Some(u64::from(*v)),
        Some(Value::U32(v)) => Some(u64::from(*v)),
        Some(Value::I8(v)) => u64::try_from(*v).ok(),
        Some(Value::I16(v)) => u64::try_from(*v).ok(),
        Some(Value::I32(v)) => u64::try_from(*v).ok(),
        Some(_) => None,
    };
    let alignment = match declared {
        Some(a) if a > 0 && a.is_power_of_two() => a,
        _ => {
            return Err(PretrainedError::gguf(
                path,
                "general.alignment is not a power of two held as an integer of up to 32 bits",
            ))
        }
    };
    let mut spans = Vec::with_capacity(content.tensor_infos.len());
    for (name, info) in &content.tensor_infos {
        // Names come from the file: quoted escaped.
        let name = crate::escaped(name);
        let dtype = info.ggml_dtype;
        // The dimensions come from the file: their product may not fit in 64 bits.
        let elements = info
            .shape
            .dims()
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        let Some(elements) = elements else {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "tensor {name}: shape {:?} holds more elements than 64 bits can count",
                    info.shape.dims()
                ),
            ));
        };
        let block = dtype.block_size() as u64;
        if block == 0 || !elements.is_multiple_of(block) {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "tensor {name}: {elements} elements are not whole blocks of {block} of its \
                     type {dtype:?}"
                ),
            ));
        }
        let size = (elements / block).saturating_mul(dtype.type_size() as u64);
        if info.offset % alignment != 0 {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "tensor {name} starts at offset {} of the data, not a multiple of the \
                     alignment {alignment}",
                    info.offset
                ),
            ));
        }
        let start = content.tensor_data_offset.saturating_add(info.offset);
        let end = start.saturating_add(size);
        if end > file_len {
            // A size past u64 is held at its largest value: said as a floor (fourteenth pass,
            // U-C).
            let shown = if size == u64::MAX {
                format!("more than {:.1e}", size as f64)
            } else {
                size.to_string()
            };
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "tensor {name} ({shown} bytes of {dtype:?} at byte {start}) runs past the end \
                     of the file ({file_len} bytes): truncated, or its type or shape is wrong"
                ),
            ));
        }
        spans.push((start, end, name, dtype));
    }
    spans.sort_unstable_by_key(|s| s.0);
    for pair in spans.windows(2) {
        let ((_, end, name, dtype), (next, _, other, _)) = (&pair[0], &pair[1]);
        let (end, next) = (*end, *next);
        if end > next {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "tensor {name} ({dtype:?}) overlaps tensor {other}: its declared type or shape \
                     does not match its data"
                ),
            ));
        }
        if next - end >= alignment {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "tensor {name} ({dtype:?}) ends {} bytes before tensor {other}: its declared \
                     type or shape does not account for its data",
                    next - end
                ),
            ));
        }
    }
    if let Some((_, end, name, dtype)) = spans.last() {
        let end = *end;
        // The file ends right after the last tensor or after its padding to the alignment: a
        // byte added or removed before the data (which moves every tensor) shows here.
        let padded = end.div_ceil(alignment).saturating_mul(alignment);
        if file_len != end && file_len != padded && file_len - end < alignment {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "the file is {file_len} bytes, but its last tensor, {name}, ends at byte \
                     {end} (padded: {padded}): the file was cut or grown at its end, or bytes were added \
                     or removed before the tensor data"
                ),
            ));
        }
        if file_len - end >= alignment {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "the last tensor, {name} ({dtype:?}), ends {} bytes before the end of the \
                     file: its declared type or shape does not account for its data",
                    file_len - end
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a weight tensor holding NaN or an infinity, naming the file and the tensor (a model
/// with one answers nothing: every logit it reaches is NaN).
pub fn finite(path: &Path, name: &str, t: &candle_core::Tensor) -> Result<()> {
    let values = t
        .flatten_all()
        .and_then(|v| v.to_dtype(candle_core::DType::F32))
        .and_then(|v| v.to_vec1::<f32>())
        .map_err(|e| {
            PretrainedError::gguf(
                path,
                format!("tensor {}: {}", crate::escaped(name), crate::first_line(&e)),
            )
        })?;
    match values.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => Err(PretrainedError::gguf(
            path,
            format!(
                "tensor {} holds {} at element {i}: not a weight",
                crate::escaped(name),
                values[i]
            ),
        )),
    }
}

/// The blocks a model file holds: one more than the largest N of its tensors named
/// `{prefix}N.…` (None when it has none), for the check that the config names them all.
pub(crate) fn blocks_held<'a>(
    names: impl Iterator<Item = &'a String>,
    prefix: &str,
) -> Option<usize> {
    names
        .filter_map(|n| {
            n.strip_prefix(prefix)?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max()
        .map(|l| l + 1)
}
