//! Hugging Face model directories: `config.json`, `model.safetensors` (or the shards that
//! `model.safetensors.index.json` lists) and `tokenizer.json`. Reads the Llama family
//! ([`HF_ARCHITECTURES`]); the architecture, head layout, RoPE base and scaling come from
//! `config.json`, and anything ropelab does not implement is refused in one line naming the key.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use ropelab_model::RopeLayout;
use serde_json::Value;

use crate::gguf::LlamaConfig;
use crate::llama::Weights;
use crate::quant::QuantMatrix;
use crate::{PretrainedError, Result};

/// The `architectures` of `config.json` read as Llama-family models: Llama (Llama 2 and 3,
/// SmolLM, TinyLlama), Mistral without a sliding window shorter than its context, and Qwen2
/// (q/k/v biases).
pub const HF_ARCHITECTURES: [&str; 3] =
    ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"];

/// A parsed `config.json` and the file it came from, for errors naming both.
struct ConfigJson {
    path: PathBuf,
    json: Value,
}

impl ConfigJson {
    fn error(&self, message: impl std::fmt::Display) -> PretrainedError {
        PretrainedError::gguf(&self.path, message)
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    fn usize(&self, key: &str) -> Result<usize> {
        self.get(key)
            .ok_or_else(|| self.error(format!("key {key} is missing")))?
            .as_u64()
            .map(|v| v as usize)
            .ok_or_else(|| self.error(format!("{key} is not an unsigned integer")))
    }

    fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        match self.get(key) {
            None => Ok(default),
            Some(_) => self.usize(key),
        }
    }

    fn float_in(&self, object: &Value, key: &str, name: &str) -> Result<Option<f64>> {
        match object.get(key).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.error(format!("{name} is not a finite number"))),
        }
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.error(format!("{key} is not true or false"))),
        }
    }
}

/// The plane frequencies of `rope_type` (with its parameters in `p`, named `name` in errors):
/// None for the default, base^(-2k/d) / factor for `linear`, Llama 3's banded scaling for
/// `llama3`; any other type is refused.
fn scaled_thetas(
    cfg: &ConfigJson,
    p: &Value,
    name: &str,
    base: f64,
    rope_dim: usize,
) -> Result<Option<Vec<f64>>> {
    let kind = p
        .get("rope_type")
        .or_else(|| p.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let freqs = ropelab_model::rope::frequencies(base, rope_dim);
    let need = |key: &str| -> Result<f64> {
        cfg.float_in(p, key, &format!("{name}.{key}"))?
            .ok_or_else(|| cfg.error(format!("key {name}.{key} is missing")))
    };
    match kind {
        "default" => Ok(None),
        "linear" => {
            let factor = need("factor")?;
            if factor <= 0.0 {
                return Err(cfg.error(format!("{name}.factor {factor} is not positive")));
            }
            Ok(Some(freqs.iter().map(|f| f / factor).collect()))
        }
        "llama3" => {
            let factor = need("factor")?;
            let low = need("low_freq_factor")?;
            let high = need("high_freq_factor")?;
            let old = need("original_max_position_embeddings")?;
            if factor <= 0.0 || low <= 0.0 || high <= low || old <= 0.0 {
                return Err(cfg.error(format!(
                    "{name}: llama3 scaling needs factor > 0 and 0 < low_freq_factor < \
                     high_freq_factor and a positive original context"
                )));
            }
            Ok(Some(
                freqs
                    .iter()
                    .map(|&f| llama3_theta(f, factor, low, high, old))
                    .collect(),
            ))
        }
        other => Err(cfg.error(format!(
            "{name}.rope_type {other:?} is not supported (default, linear, llama3)"
        ))),
    }
}

/// Llama 3's scaled frequency of a plane turning by `theta` per position: unchanged for
/// wavelengths below `old / high`, divided by `factor` above `old / low`, interpolated between.
pub fn llama3_theta(theta: f64, factor: f64, low: f64, high: f64, old: f64) -> f64 {
    let wavelength = 2.0 * std::f64::consts::PI / theta;
    if wavelength < old / high {
        theta
    } else if wavelength > old / low {
        theta / factor
    } else {
        let smooth = (old / wavelength - low) / (high - low);
        (1.0 - smooth) * theta / factor + smooth * theta
    }
}

/// The configuration of a `config.json` (`path`).
fn parse_config(path: &Path) -> Result<LlamaConfig> {
    let text = std::fs::read_to_string(path).map_err(|e| PretrainedError::io(path, e))?;
    let json: Value = serde_json::from_str(&text)
        .map_err(|e| PretrainedError::gguf(path, format!("not valid JSON: {e}")))?;
    let cfg = ConfigJson {
        path: path.to_owned(),
        json,
    };
    let arch = cfg
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if !HF_ARCHITECTURES.contains(&arch.as_str()) {
        return Err(cfg.error(format!(
            "architectures {arch:?} is not supported (supported: {})",
            HF_ARCHITECTURES.join(", ")
        )));
    }
    let act = cfg
        .get("hidden_act")
        .and_then(Value::as_str)
        .unwrap_or("silu");
    if act != "silu" {
        return Err(cfg.error(format!("hidden_act {act:?} is not supported (silu)")));
    }
    for key in ["attention_bias", "mlp_bias", "use_sliding_window"] {
        if cfg.bool_or(key, false)? {
            return Err(cfg.error(format!("{key} = true is not supported")));
        }
    }
    let context_length = cfg.usize("max_position_embeddings")?;
    if let Some(w) = cfg.get("sliding_window") {
        let ok = arch == "Qwen2ForCausalLM" // used only with use_sliding_window, refused above
            || w.as_u64().is_some_and(|w| w as usize >= context_length);
        if !ok {
            return Err(cfg.error(format!(
                "sliding_window {w} is shorter than the context of {context_length}: not supported"
            )));
        }
    }
    let d_model = cfg.usize("hidden_size")?;
    let n_heads = cfg.usize("num_attention_heads")?;
    if n_heads == 0 {
        return Err(cfg.error("num_attention_heads must be positive"));
    }
    let d_head = cfg.usize_or("head_dim", d_model / n_heads)?;
    // transformers 5 writes `rope_parameters` (theta and scaling together); earlier versions
    // `rope_theta` and `rope_scaling`.
    let (params, name) = match cfg.get("rope_parameters") {
        Some(p) => (p.clone(), "rope_parameters"),
        None => (
            cfg.get("rope_scaling").cloned().unwrap_or(Value::Null),
            "rope_scaling",
        ),
    };
    let base = match cfg.float_in(&params, "rope_theta", &format!("{name}.rope_theta"))? {
        Some(b) => b,
        None => cfg
            .float_in(&cfg.json, "rope_theta", "rope_theta")?
            .unwrap_or(ropelab_model::rope::DEFAULT_BASE),
    };
    if base <= 0.0 {
        return Err(cfg.error(format!("rope_theta {base} is not positive")));
    }
    if let Some(f) = params
        .get("partial_rotary_factor")
        .or_else(|| cfg.get("partial_rotary_factor"))
    {
        if f.as_f64() != Some(1.0) {
            return Err(cfg.error(format!(
                "partial_rotary_factor {f} is not supported for {arch} (1.0)"
            )));
        }
    }
    let rope_thetas = if params.is_object() {
        scaled_thetas(&cfg, &params, name, base, d_head)?
    } else {
        None
    };
    let c = LlamaConfig {
        arch: match arch.as_str() {
            "Qwen2ForCausalLM" => "qwen2",
            "MistralForCausalLM" => "mistral",
            _ => "llama",
        }
        .to_owned(),
        vocab_size: cfg.usize("vocab_size")?,
        n_layers: cfg.usize("num_hidden_layers")?,
        n_heads,
        n_kv_heads: cfg.usize_or("num_key_value_heads", n_heads)?,
        d_model,
        d_ff: cfg.usize("intermediate_size")?,
        rope_dim: d_head,
        rope_base: base,
        rms_eps: cfg
            .float_in(&cfg.json, "rms_norm_eps", "rms_norm_eps")?
            .unwrap_or(1e-6),
        context_length,
        d_head,
        qkv_bias: arch == "Qwen2ForCausalLM",
        rope_layout: RopeLayout::HalfSplit,
        rope_thetas,
    };
    c.validate(path, usize::MAX)?;
    Ok(c)
}

/// The tensors of a Hugging Face directory, converted to f32 as they are read.
pub struct HfWeights {
    dir: PathBuf,
    /// Every tensor of every shard, in the file's dtype.
    tensors: HashMap<String, (Tensor, PathBuf)>,
    /// Whether the unembedding is the embedding (`tie_word_embeddings`).
    tied: bool,
}

impl HfWeights {
    /// Reads `dir`'s `config.json` and its safetensors weights.
    pub fn open(dir: &Path, device: &Device) -> Result<(LlamaConfig, Self)> {
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(PretrainedError::gguf(
                dir,
                "not a model directory: config.json is missing",
            ));
        }
        let c = parse_config(&config_path)?;
        let tied = {
            let text = std::fs::read_to_string(&config_path)
                .map_err(|e| PretrainedError::io(&config_path, e))?;
            let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            json.get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let mut tensors = HashMap::new();
        for file in shards(dir)? {
            let loaded = candle_core::safetensors::load(&file, device).map_err(|e| {
                PretrainedError::gguf(&file, format!("not a readable safetensors file: {e}"))
            })?;
            for (name, t) in loaded {
                tensors.insert(name, (t, file.clone()));
            }
        }
        let weights = Self {
            dir: dir.to_owned(),
            tensors,
            tied,
        };
        Ok((c, weights))
    }

    /// The Hugging Face name of GGUF tensor `name`.
    fn hf_name(name: &str) -> Option<String> {
        let fixed = match name {
            "token_embd.weight" => Some("model.embed_tokens.weight"),
            "output_norm.weight" => Some("model.norm.weight"),
            "output.weight" => Some("lm_head.weight"),
            _ => None,
        };
        if let Some(f) = fixed {
            return Some(f.to_owned());
        }
        let rest = name.strip_prefix("blk.")?;
        let (layer, part) = rest.split_once('.')?;
        let hf = match part {
            "attn_norm.weight" => "input_layernorm.weight",
            "ffn_norm.weight" => "post_attention_layernorm.weight",
            "attn_q.weight" => "self_attn.q_proj.weight",
            "attn_k.weight" => "self_attn.k_proj.weight",
            "attn_v.weight" => "self_attn.v_proj.weight",
            "attn_q.bias" => "self_attn.q_proj.bias",
            "attn_k.bias" => "self_attn.k_proj.bias",
            "attn_v.bias" => "self_attn.v_proj.bias",
            "attn_output.weight" => "self_attn.o_proj.weight",
            "ffn_gate.weight" => "mlp.gate_proj.weight",
            "ffn_up.weight" => "mlp.up_proj.weight",
            "ffn_down.weight" => "mlp.down_proj.weight",
            _ => return None,
        };
        Some(format!("model.layers.{layer}.{hf}"))
    }
}

/// The safetensors files of `dir`: `model.safetensors`, or the shards the index lists.
fn shards(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.is_file() {
        return Err(PretrainedError::gguf(
            dir,
            "no weights: neither model.safetensors nor model.safetensors.index.json",
        ));
    }
    let text = std::fs::read_to_string(&index).map_err(|e| PretrainedError::io(&index, e))?;
    let json: Value = serde_json::from_str(&text)
        .map_err(|e| PretrainedError::gguf(&index, format!("not valid JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| PretrainedError::gguf(&index, "key weight_map is missing"))?;
    let mut files: Vec<PathBuf> = vec![];
    for v in map.values() {
        let name = v
            .as_str()
            .filter(|n| !n.contains('/') && !n.contains('\\') && !n.starts_with('.'))
            .ok_or_else(|| {
                PretrainedError::gguf(
                    &index,
                    format!("weight_map entry {v} is not a file name in the directory"),
                )
            })?;
        let path = dir.join(name);
        if !files.contains(&path) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

impl Weights for HfWeights {
    fn matrix(
        &mut self,
        name: &str,
        shape: &[usize],
        _device: &Device,
    ) -> Result<(Tensor, Option<QuantMatrix>)> {
        let hf = Self::hf_name(name).unwrap_or_else(|| name.to_owned());
        let (t, file) = self
            .tensors
            .get(&hf)
            .ok_or_else(|| PretrainedError::gguf(&self.dir, format!("tensor {hf} is missing")))?;
        if t.dims() != shape {
            return Err(PretrainedError::gguf(
                file,
                format!(
                    "tensor {hf} has shape {:?}, the config needs {shape:?}",
                    t.dims()
                ),
            ));
        }
        let t = match t.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => t.to_dtype(DType::F32)?,
            other => {
                return Err(PretrainedError::gguf(
                    file,
                    format!("tensor {hf} is {other:?}: f32, f16 or bf16 is supported"),
                ))
            }
        };
        Ok((t, None))
    }

    fn has(&self, name: &str) -> bool {
        if name == "output.weight" {
            return !self.tied; // untied: lm_head.weight must be there
        }
        Self::hf_name(name).is_some_and(|hf| self.tensors.contains_key(&hf))
    }
}

/// The end-of-sequence id of a model directory's `config.json` (`eos_token_id`, the first of a
/// list), if it names one.
pub fn eos_token(dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
    let json: Value = serde_json::from_str(&text).ok()?;
    let eos = json.get("eos_token_id")?;
    let id = eos
        .as_u64()
        .or_else(|| eos.get(0).and_then(Value::as_u64))?;
    u32::try_from(id).ok()
}
