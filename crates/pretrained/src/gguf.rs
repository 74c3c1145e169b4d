//! Reading a Llama-architecture GGUF file (candle's GGUF reader): the configuration from the
//! metadata, the tokenizer tables, and every tensor dequantized to f32 (exact with respect to
//! the stored blocks: Q4_1 is d * q + m, Q8_0 is d * q, per block).

use std::collections::HashMap;
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
        // Each block has its own tensors: a block count beyond the tensors in the file is a
        // corrupted header (and must not size any allocation).
        if c.n_layers == 0 || c.n_layers > tensors {
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
        // A RoPE base or norm epsilon that is not a finite positive number gives NaN angles or
        // divisions by zero: no model has one.
        if !(c.rope_base.is_finite() && c.rope_base > 0.0) {
            return bad(format!(
                "RoPE base {} is not a finite positive number",
                c.rope_base
            ));
        }
        if !(c.rms_eps.is_finite() && c.rms_eps > 0.0) {
            return bad(format!(
                "norm epsilon {} is not a finite positive number",
                c.rms_eps
            ));
        }
        if let Some(t) = &c.rope_thetas {
            if t.len() != c.rope_dim / 2 || t.iter().any(|x| !x.is_finite() || *x < 0.0) {
                return bad(format!(
                    "{} RoPE frequencies for {} planes (each finite, at least 0)",
                    t.len(),
                    c.rope_dim / 2
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
}

impl GgufFile {
    /// Opens and parses the header of `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| PretrainedError::io(path, e))?;
        let mut reader = BufReader::new(file);
        // candle divides by the alignment while it parses: a zero is refused first.
        if crate::gguf_alignment::declared_alignment(&mut reader)
            .map_err(|e| PretrainedError::io(path, e))?
            == Some(0)
        {
            return Err(PretrainedError::gguf(
                path,
                "general.alignment is 0; it must be a power of two (GGUF's default is 32)",
            ));
        }
        let content = Content::read(&mut reader).map_err(|e| {
            // The parser may quote raw bytes of the file (a wrong magic, a bad string): printed
            // escaped, never as control characters.
            let text: String = e.to_string().chars().flat_map(char::escape_debug).collect();
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
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A metadata value, or an error naming the missing key.
    pub fn value(&self, key: &str) -> Result<&Value> {
        self.content.metadata.get(key).ok_or_else(|| {
            PretrainedError::gguf(&self.path, format!("metadata key {key} is missing"))
        })
    }

    /// An unsigned integer metadata value.
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.value(key)?;
        let n = match v {
            Value::I32(x) if *x >= 0 => *x as u64,
            Value::I64(x) if *x >= 0 => *x as u64,
            other => other.to_u64().map_err(|_| {
                PretrainedError::gguf(&self.path, format!("{key} is not an unsigned integer"))
            })?,
        };
        Ok(n as usize)
    }

    /// A float metadata value.
    pub fn float(&self, key: &str) -> Result<f64> {
        match self.value(key)? {
            Value::F32(x) => Ok(f64::from(*x)),
            Value::F64(x) => Ok(*x),
            _ => Err(PretrainedError::gguf(
                &self.path,
                format!("{key} is not a float"),
            )),
        }
    }

    /// A string array metadata value.
    pub fn strings(&self, key: &str) -> Result<Vec<String>> {
        let bad = || PretrainedError::gguf(&self.path, format!("{key} is not an array of strings"));
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

    /// An integer array metadata value.
    pub fn ints(&self, key: &str) -> Result<Vec<i64>> {
        let bad =
            || PretrainedError::gguf(&self.path, format!("{key} is not an array of integers"));
        let Value::Array(items) = self.value(key)? else {
            return Err(bad());
        };
        items
            .iter()
            .map(|v| match v {
                Value::I32(x) => Ok(i64::from(*x)),
                Value::I64(x) => Ok(*x),
                Value::U32(x) => Ok(i64::from(*x)),
                Value::U8(x) => Ok(i64::from(*x)),
                _ => Err(bad()),
            })
            .collect()
    }

    /// The architecture the file names, if it is one ropelab reads ([`GGUF_ARCHITECTURES`]).
    pub fn architecture(&self) -> Result<String> {
        let arch = match self.value("general.architecture")? {
            Value::String(s) => s.clone(),
            _ => String::new(),
        };
        if !GGUF_ARCHITECTURES.contains(&arch.as_str()) {
            return Err(PretrainedError::gguf(
                &self.path,
                format!(
                    "general.architecture {arch:?} is not supported (supported: {})",
                    GGUF_ARCHITECTURES.join(", ")
                ),
            ));
        }
        Ok(arch)
    }

    /// A string metadata value.
    pub fn string(&self, key: &str) -> Result<String> {
        match self.value(key)? {
            Value::String(s) => Ok(s.clone()),
            _ => Err(PretrainedError::gguf(
                &self.path,
                format!("{key} is not a string"),
            )),
        }
    }

    /// The Llama-family configuration, checked for consistency: RoPE scaling from
    /// `<arch>.rope.scaling.*` (none or linear; any other type is refused naming the key); a
    /// `rope_freqs.weight` tensor (Llama 3) is applied by the loader.
    pub fn llama_config(&self) -> Result<LlamaConfig> {
        let arch = self.architecture()?;
        let key = |k: &str| format!("{arch}.{k}");
        let vocab_size = match self.usize(&key("vocab_size")) {
            Ok(v) => v,
            Err(_) => self.strings("tokenizer.ggml.tokens")?.len(),
        };
        let n_heads = self.usize(&key("attention.head_count"))?;
        let d_model = self.usize(&key("embedding_length"))?;
        let d_head = match self.usize(&key("attention.key_length")) {
            Ok(k) => k,
            Err(_) if n_heads > 0 => d_model / n_heads,
            Err(_) => 0,
        };
        if let Ok(v) = self.usize(&key("attention.value_length")) {
            if v != d_head {
                return Err(PretrainedError::gguf(
                    &self.path,
                    format!(
                        "{} {v} differs from the key length {d_head}",
                        key("attention.value_length")
                    ),
                ));
            }
        }
        let rope_base = self
            .float(&key("rope.freq_base"))
            .unwrap_or(ropelab_model::rope::DEFAULT_BASE);
        let rope_dim = self.usize(&key("rope.dimension_count")).unwrap_or(d_head);
        let scaling_key = key("rope.scaling.type");
        let rope_thetas = match self.string(&scaling_key).ok().as_deref() {
            None | Some("none") => None,
            Some("linear") => {
                let factor = self.float(&key("rope.scaling.factor"))?;
                if !(factor.is_finite() && factor > 0.0) {
                    return Err(PretrainedError::gguf(
                        &self.path,
                        format!(
                            "{} {factor} is not a positive factor",
                            key("rope.scaling.factor")
                        ),
                    ));
                }
                Some(
                    ropelab_model::rope::frequencies(rope_base, rope_dim)
                        .into_iter()
                        .map(|f| f / factor)
                        .collect(),
                )
            }
            Some(other) => {
                return Err(PretrainedError::gguf(
                    &self.path,
                    format!("{scaling_key} {other:?} is not supported (none, linear)"),
                ))
            }
        };
        let block_key = key("block_count");
        let c = LlamaConfig {
            vocab_size,
            n_layers: self.usize(&key("block_count"))?,
            n_heads,
            n_kv_heads: self
                .usize(&key("attention.head_count_kv"))
                .unwrap_or(n_heads),
            d_model,
            d_ff: self.usize(&key("feed_forward_length"))?,
            rope_dim,
            rope_base,
            rms_eps: self.float(&key("attention.layer_norm_rms_epsilon"))?,
            context_length: self.usize(&key("context_length"))?,
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
            return Err(PretrainedError::gguf(
                &self.path,
                format!(
                    "{block_key} is {} but the file holds {held} blocks (blk.0 .. blk.{})",
                    c.n_layers,
                    held - 1
                ),
            ));
        }
        Ok(c)
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
        // Check the declared shape before reading: a corrupted dimension must be an error, not
        // a dequantization buffer of absurd size.
        let info = self
            .content
            .tensor_infos
            .get(name)
            .ok_or_else(|| PretrainedError::gguf(&path, format!("tensor {name} is missing")))?;
        if info.shape.dims() != shape {
            return Err(PretrainedError::gguf(
                &path,
                format!(
                    "tensor {name} has shape {:?}, the config needs {shape:?}",
                    info.shape.dims()
                ),
            ));
        }
        let q = self
            .content
            .tensor(&mut self.reader, name, device)
            .map_err(|e| PretrainedError::gguf(&path, format!("tensor {name}: {e}")))?;
        let t = q
            .dequantize(device)
            .map_err(|e| PretrainedError::gguf(&path, format!("tensor {name}: {e}")))?;
        finite(&path, name, &t)?;
        if t.dims() != shape {
            return Err(PretrainedError::gguf(
                &path,
                format!(
                    "tensor {name} has shape {:?}, the config needs {shape:?}",
                    t.dims()
                ),
            ));
        }
        let blocks = match shape {
            [rows, cols] => {
                let data = q
                    .data()
                    .map_err(|e| PretrainedError::gguf(&path, format!("tensor {name}: {e}")))?;
                QuantMatrix::from_gguf(q.dtype(), *rows, *cols, &data)
                    .map_err(|e| PretrainedError::gguf(&path, format!("tensor {name}: {e}")))?
            }
            _ => None,
        };
        Ok((t, blocks))
    }

    /// Whether the file holds tensor `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
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
        let dtype = info.ggml_dtype;
        let elements = info.shape.elem_count() as u64;
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
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "tensor {name} ({size} bytes of {dtype:?} at byte {start}) runs past the end \
                     of the file ({file_len} bytes): truncated, or its type or shape is wrong"
                ),
            ));
        }
        spans.push((start, end, name.as_str(), dtype));
    }
    spans.sort_unstable_by_key(|s| s.0);
    for pair in spans.windows(2) {
        let ((_, end, name, dtype), (next, _, other, _)) = (pair[0], pair[1]);
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
    if let Some(&(_, end, name, dtype)) = spans.last() {
        // The file ends right after the last tensor or after its padding to the alignment: a
        // byte added or removed before the data (which moves every tensor) shows here.
        let padded = end.div_ceil(alignment).saturating_mul(alignment);
        if file_len != end && file_len != padded && file_len - end < alignment {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "the file is {file_len} bytes, but its last tensor, {name}, ends at byte \
                     {end} (padded: {padded}): bytes were added or removed before the tensor data"
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
        .map_err(|e| PretrainedError::gguf(path, format!("tensor {name}: {e}")))?;
    match values.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => Err(PretrainedError::gguf(
            path,
            format!(
                "tensor {name} holds {} at element {i}: not a weight",
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
