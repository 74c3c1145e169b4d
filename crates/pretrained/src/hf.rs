//! Hugging Face model directories: `config.json`, `model.safetensors` (or the shards that
//! `model.safetensors.index.json` lists) and `tokenizer.json`. Reads the Llama family
//! ([`HF_ARCHITECTURES`]); the architecture, head layout, RoPE base and scaling come from
//! `config.json`, and anything ropelab does not implement is refused in one line naming the key.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use ropelab_model::RopeLayout;
use serde_json::Value;

use crate::gguf::{BlockStyle, LlamaConfig, Mlp, Norm, Residual};
use crate::llama::Weights;
use crate::quant::QuantMatrix;
use crate::{PretrainedError, Result};

/// The `architectures` of `config.json` ropelab reads: Llama (Llama 2 and 3, SmolLM,
/// TinyLlama), Mistral without a sliding window shorter than its context, Qwen2 (q/k/v
/// biases), GPT-NeoX (Pythia: partial rotary, parallel attention and MLP) and GPT-J (ropelab's
/// own checkpoints).
pub const HF_ARCHITECTURES: [&str; 5] = [
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "GPTNeoXForCausalLM",
    "GPTJForCausalLM",
];

/// transformers' `GPTJConfig` default of `rotary_dim`, read where the key is missing.
const GPTJ_DEFAULT_ROTARY_DIM: usize = 64;

use crate::quoted;

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

    /// Key `key` when present, None when absent; a `null` is refused: transformers passes it
    /// on (an activation of None fails, a `use_parallel_residual` of None takes the sequential
    /// path), so reading it as the default could compute another model (ninth pass, S1-S3).
    fn present(&self, key: &str) -> Result<Option<&Value>> {
        match self.json.get(key) {
            None => Ok(None),
            Some(Value::Null) => Err(self.error(format!(
                "{key} is null: give a value, or leave the key out for its default"
            ))),
            Some(v) => Ok(Some(v)),
        }
    }

    fn usize(&self, key: &str) -> Result<usize> {
        // A required key has no default to fall back on (tenth pass, n4, n7).
        if self.json.get(key).is_some_and(Value::is_null) {
            return Err(self.error(format!(
                "{key} is null: give an unsigned integer (the key is required)"
            )));
        }
        // A whole-number float (`2.0`) is refused too: transformers would fail on it
        // (`range(2.0)`, a layer of 4.0 features).
        let value = self
            .present(key)?
            .ok_or_else(|| self.error(format!("key {key} is missing")))?;
        value.as_u64().map(|v| v as usize).ok_or_else(|| {
            self.error(format!(
                "{key} is {}, not an unsigned integer",
                shown(value)
            ))
        })
    }

    fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        match self.get(key) {
            None => Ok(default),
            Some(_) => self.usize(key),
        }
    }

    /// Number `key` of `object` (named `name` in errors), None when the key is absent. A
    /// `null` is refused: transformers passes it on (a RoPE base or norm epsilon of None
    /// fails there), so reading it as the default would compute another model (eighth pass,
    /// C006, C033).
    fn float_in(&self, object: &Value, key: &str, name: &str) -> Result<Option<f64>> {
        match object.get(key) {
            None => Ok(None),
            Some(Value::Null) => Err(self.error(format!(
                "{name} is null: give a number, or leave the key out for its default"
            ))),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.error(format!("{name} is not a finite number"))),
        }
    }

    /// String `key`, or `default` when it is absent; another type is refused naming the key.
    fn string_or<'a>(&'a self, key: &str, default: &'a str) -> Result<&'a str> {
        match self.present(key)? {
            None => Ok(default),
            Some(v) => v
                .as_str()
                .ok_or_else(|| self.error(format!("{key} is {}, not a string", shown(v)))),
        }
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.present(key)? {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.error(format!("{key} is not true or false"))),
        }
    }
}

/// [`shown`] for the other readers of the crate (`tokenizer.json`).
pub(crate) fn shown_json(v: &Value) -> String {
    shown(v)
}

/// A JSON value as an error message shows it: its JSON text (control characters escaped),
/// cut after 60 characters.
fn shown(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
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
    // transformers reads `rope_type`, else the older `type`: each given must be a string, and
    // both given must agree (neither is ignored silently).
    let type_of = |key: &str| -> Result<Option<&str>> {
        match p.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| cfg.error(format!("{name}.{key} is {}, not a string", shown(v)))),
        }
    };
    // The key the type was read from, for messages (sixth pass, U3).
    let (kind, type_key) = match (type_of("rope_type")?, type_of("type")?) {
        (Some(a), Some(b)) if a != b => {
            return Err(cfg.error(format!(
                "{name}.rope_type {} and {name}.type {} give two RoPE types: give one",
                quoted(a),
                quoted(b)
            )))
        }
        (Some(a), _) => (a, "rope_type"),
        (None, Some(b)) => (b, "type"),
        (None, None) => ("default", "rope_type"),
    };
    let freqs = ropelab_model::rope::frequencies(base, rope_dim);
    let need = |key: &str| -> Result<f64> {
        cfg.float_in(p, key, &format!("{name}.{key}"))?
            .ok_or_else(|| cfg.error(format!("key {name}.{key} is missing")))
    };
    // A scaling factor must lie in the range ropelab reads (see ROPE_FACTOR_RANGE).
    let factor_of = |key: &str| -> Result<f64> {
        let f = need(key)?;
        if !crate::gguf::rope_factor_in_range(f) {
            let (low, high) = crate::gguf::ROPE_FACTOR_RANGE;
            return Err(cfg.error(format!(
                "{name}.{key} {} is not a RoPE scaling factor ropelab reads: it must lie in \
                 [{low:e}, {high:e}]",
                crate::number(f)
            )));
        }
        Ok(f)
    };
    match kind {
        "default" => {
            // transformers' default RoPE reads no factor: one beside it (other than 1) would be
            // ignored.
            match cfg.float_in(p, "factor", &format!("{name}.factor"))? {
                Some(f) if f != 1.0 => Err(cfg.error(format!(
                    "{name}.factor {} is given with rope_type \"default\", which does not \
                     scale: give a scaling type (linear, llama3), or no factor",
                    crate::number(f)
                ))),
                _ => Ok(None),
            }
        }
        "linear" => {
            let factor = factor_of("factor")?;
            Ok(Some(freqs.iter().map(|f| f / factor).collect()))
        }
        "llama3" => {
            let factor = factor_of("factor")?;
            let low = factor_of("low_freq_factor")?;
            let high = factor_of("high_freq_factor")?;
            let old = need("original_max_position_embeddings")?;
            if high <= low || old <= 0.0 {
                return Err(cfg.error(format!(
                    "{name}: llama3 scaling needs low_freq_factor < high_freq_factor and a \
                     positive original_max_position_embeddings"
                )));
            }
            // It stretches a shorter original context to the model's (seventh pass, H34).
            if let Some(max) = cfg
                .get("max_position_embeddings")
                .and_then(Value::as_f64)
                .filter(|&m| old > m)
            {
                return Err(cfg.error(format!(
                    "{name}.original_max_position_embeddings {} exceeds max_position_embeddings \
                     {}: llama3 scaling stretches a shorter original context to the model's",
                    crate::number(old),
                    crate::number(max)
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
            "{name}.{type_key} {} is not supported (default, linear, llama3)",
            quoted(other)
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

/// The floating-point dtypes `torch_dtype` (or the newer `dtype`) may name: ropelab computes in
/// f32 from the safetensors dtypes whatever these say (a bf16 file is read exactly, widened),
/// so each is read only as a claim about the weights.
const CONFIG_DTYPES: [&str; 5] = ["float32", "float16", "bfloat16", "float64", "auto"];

/// Refuses a `torch_dtype` or `dtype` that is no floating-point dtype (an integer or
/// quantized one means weights ropelab would misread), one of another type, the two keys
/// disagreeing, and a `quantization_config` (weights packed by a quantizer).
fn check_dtype_keys(cfg: &ConfigJson) -> Result<()> {
    let mut named = vec![];
    for key in ["torch_dtype", "dtype"] {
        let Some(v) = cfg.get(key) else { continue };
        let Some(name) = v.as_str() else {
            return Err(cfg.error(format!("{key} is {}, not a string", shown(v))));
        };
        let name = name.strip_prefix("torch.").unwrap_or(name);
        if !CONFIG_DTYPES.contains(&name) {
            return Err(cfg.error(format!(
                "{key} {} is not a floating-point dtype ropelab reads ({})",
                quoted(name),
                CONFIG_DTYPES.join(", ")
            )));
        }
        named.push((key, name));
    }
    if let [(k1, a), (k2, b)] = named[..] {
        if a != b && a != "auto" && b != "auto" {
            return Err(cfg.error(format!("{k1} {a:?} and {k2} {b:?} disagree")));
        }
    }
    if cfg.get("quantization_config").is_some() {
        return Err(cfg.error(
            "quantization_config: weights packed by a quantizer are not supported (a GGUF \
             file of the model is)",
        ));
    }
    Ok(())
}

/// The configuration of a `config.json` (`path`).
fn parse_config(path: &Path) -> Result<LlamaConfig> {
    let text = crate::json_text(path, crate::SMALL_JSON_BYTES)?;
    // serde_json keeps the last of a key given twice; transformers' json.load does too, but a
    // file that says two things is refused rather than read one way.
    unique_keys(path, text.as_bytes(), "")?;
    let json: Value = serde_json::from_str(&text)
        .map_err(|e| PretrainedError::gguf(path, format!("not valid JSON: {e}")))?;
    let cfg = ConfigJson {
        path: path.to_owned(),
        json,
    };
    let arch = architecture(&cfg)?;
    let model_type = match arch.as_str() {
        "LlamaForCausalLM" => "llama",
        "MistralForCausalLM" => "mistral",
        "Qwen2ForCausalLM" => "qwen2",
        "GPTNeoXForCausalLM" => "gpt_neox",
        "GPTJForCausalLM" => "gptj",
        _ => {
            return Err(cfg.error(format!(
                "architectures {} is not supported (supported: {})",
                quoted(&arch),
                HF_ARCHITECTURES.join(", ")
            )))
        }
    };
    // transformers builds the model `model_type` names (AutoConfig) where the class is not
    // given: a config whose two keys disagree describes two models.
    let given = cfg.string_or("model_type", model_type)?;
    if given != model_type {
        return Err(cfg.error(format!(
            "model_type {} does not match architectures {} (model_type {model_type:?})",
            quoted(given),
            quoted(&arch)
        )));
    }
    check_dtype_keys(&cfg)?;
    let c = match arch.as_str() {
        "GPTNeoXForCausalLM" => neox_config(&cfg)?,
        "GPTJForCausalLM" => gptj_config(&cfg)?,
        _ => llama_config(&cfg, &arch)?,
    };
    if let Some(types) = layer_types(&cfg)? {
        if types.len() != c.n_layers {
            return Err(cfg.error(format!(
                "layer_types lists {} layers, the model has {}",
                types.len(),
                c.n_layers
            )));
        }
    }
    c.validate(path, usize::MAX)?;
    Ok(c)
}

/// The model class `config.json`'s `architectures` names: a list of one class (given twice
/// is the same class). A missing or empty list, another value, and two different classes
/// (which one the weights are is unclear) are refused naming the key.
fn architecture(cfg: &ConfigJson) -> Result<String> {
    let supported = HF_ARCHITECTURES.join(", ");
    let items = match cfg.get("architectures") {
        None => {
            return Err(cfg.error(format!(
                "key architectures is missing: name the model class (supported: {supported})"
            )))
        }
        Some(Value::Array(items)) => items,
        Some(v) => {
            return Err(cfg.error(format!(
                "architectures is {}, not a list of model classes (supported: {supported})",
                shown(v)
            )))
        }
    };
    let mut classes: Vec<&str> = Vec::new();
    for v in items {
        let class = v.as_str().ok_or_else(|| {
            cfg.error(format!(
                "architectures holds {}, not a model class name",
                shown(v)
            ))
        })?;
        if !classes.contains(&class) {
            classes.push(class);
        }
    }
    match classes.as_slice() {
        [] => Err(cfg.error(format!(
            "architectures is an empty list: name the model class (supported: {supported})"
        ))),
        [one] => Ok((*one).to_owned()),
        [a, b, ..] => Err(cfg.error(format!(
            "architectures lists two model classes, {a:?} and {b:?}: which one the weights are \
             is unclear; give one"
        ))),
    }
}

/// Refuses JSON `bytes` (the file `path`; `what` begins messages, e.g. "the safetensors
/// header: ") that gives a key twice in one object, at any depth: serde_json and Python's
/// json.load keep the last, so a file that says two things is refused rather than read one
/// way. Text that is not JSON is refused too.
pub(crate) fn unique_keys(path: &Path, bytes: &[u8], what: &str) -> Result<()> {
    match serde_json::from_slice::<UniqueKeys>(bytes) {
        Ok(_) => Ok(()),
        // The visitor accepts every value: a data error is a key given twice, quoted by the
        // visitor with its control characters escaped (so only those are escaped here, not
        // the quotes).
        Err(e) if e.is_data() => {
            let text: String = e
                .to_string()
                .chars()
                .flat_map(|c| match c.is_control() {
                    true => c.escape_debug().collect::<Vec<_>>(),
                    false => vec![c],
                })
                .collect();
            Err(PretrainedError::gguf(
                path,
                format!("{what}{text}: give it once"),
            ))
        }
        Err(e) => Err(PretrainedError::gguf(
            path,
            format!("{what}not valid JSON: {}", crate::escaped(&e.to_string())),
        )),
    }
}

/// `layer_types` (transformers 5: each layer's attention), if given: every layer must use
/// full attention, the only kind ropelab implements (a sliding window is refused here as it
/// is under `sliding_window`).
fn layer_types(cfg: &ConfigJson) -> Result<Option<Vec<&str>>> {
    let Some(v) = cfg.get("layer_types") else {
        return Ok(None);
    };
    let items = v
        .as_array()
        .ok_or_else(|| cfg.error(format!("layer_types is {}, not a list", shown(v))))?;
    let types = items
        .iter()
        .map(|t| match t.as_str() {
            Some("full_attention") => Ok("full_attention"),
            Some(other) => Err(cfg.error(format!(
                "layer_types names {}: only full_attention is supported",
                quoted(other)
            ))),
            None => Err(cfg.error(format!("layer_types holds {}, not a string", shown(t)))),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(types))
}

/// The RoPE parameters in `rope_parameters` (`p`) and the key naming them in errors.
/// transformers 5 nests them by layer type when the config has `layer_types`
/// (`{"full_attention": {...}}`): read when every layer uses the same parameters, refused
/// otherwise. A value other than an object is refused.
fn rope_parameters(cfg: &ConfigJson, p: &Value) -> Result<(Value, String)> {
    let object = p
        .as_object()
        .ok_or_else(|| cfg.error(format!("rope_parameters is {}, not an object", shown(p))))?;
    // Nested by layer type, flat, or (refused) both: an object under a key that is no layer
    // type, or a layer type's entry beside flat keys, would be read one way and mean another
    // (ninth pass, S4).
    const LAYER_TYPES: [&str; 2] = ["full_attention", "sliding_attention"];
    let nests: Vec<&String> = object.keys().filter(|k| object[*k].is_object()).collect();
    if nests.is_empty() {
        return Ok((p.clone(), "rope_parameters".into()));
    }
    if let Some(k) = nests.iter().find(|k| !LAYER_TYPES.contains(&k.as_str())) {
        return Err(cfg.error(format!(
            "rope_parameters.{} is an object, but only layer types ({}) nest parameters",
            crate::escaped(k),
            LAYER_TYPES.join(", ")
        )));
    }
    if let Some(k) = object.keys().find(|k| !object[*k].is_object()) {
        return Err(cfg.error(format!(
            "rope_parameters holds both entries per layer type and the flat key {}: give one \
             or the other",
            crate::escaped(k)
        )));
    }
    // The layer types the layers use: without `layer_types`, every layer is full attention.
    let mut used: Vec<&str> = match layer_types(cfg)? {
        Some(types) => types,
        None => vec!["full_attention"],
    };
    used.sort_unstable();
    used.dedup();
    let used_types = used.clone();
    let mut chosen: Option<(&str, &Value)> = None;
    for t in used {
        let params = object.get(t).ok_or_else(|| {
            cfg.error(format!(
                "rope_parameters has no entry for layer type {t:?} (layer_types)"
            ))
        })?;
        match chosen {
            Some((first, q)) if q != params => {
                return Err(cfg.error(format!(
                    "rope_parameters.{} and rope_parameters.{} differ: layers with different \
                     RoPE parameters are not supported",
                    crate::escaped(first),
                    crate::escaped(t)
                )))
            }
            Some(_) => {}
            None => chosen = Some((t, params)),
        }
    }
    // An entry for a layer type no layer has is read by nothing: one that differs from the
    // entry read says the config meant something else (transformers 5 writes equal ones).
    if let Some(k) = object.keys().find(|k| {
        !used_types.contains(&k.as_str()) && chosen.is_some_and(|(_, q)| q != &object[*k])
    }) {
        return Err(cfg.error(format!(
            "rope_parameters.{} is for a layer type no layer has (layer_types; without it \
             every layer is full_attention)",
            crate::escaped(k)
        )));
    }
    match chosen {
        Some((t, params)) => Ok((
            params.clone(),
            format!("rope_parameters.{}", crate::escaped(t)),
        )),
        None => Err(cfg.error("layer_types is empty")),
    }
}

/// The older `rope_scaling` object, if given (another value is refused naming it).
fn scaling_object(cfg: &ConfigJson) -> Result<Option<&Value>> {
    match cfg.get("rope_scaling") {
        None => Ok(None),
        Some(v) if v.is_object() => Ok(Some(v)),
        Some(v) => Err(cfg.error(format!("rope_scaling is {}, not an object", shown(v)))),
    }
}

/// The RoPE parameters of `config.json`: transformers 5 writes `rope_parameters` (theta,
/// scaling and partial rotary together), earlier versions `rope_theta` / `rope_scaling` (or an
/// architecture's own keys, `base_key` and `fraction_key`). Returns the base, the fraction of
/// each head that rotates, and the scaled plane frequencies (None: unscaled) for heads of
/// `d_head` dims.
fn rope_params(
    cfg: &ConfigJson,
    base_key: &str,
    fraction_key: Option<(&str, f64)>,
    d_head: usize,
) -> Result<(f64, usize, Option<Vec<f64>>)> {
    let (params, name) = match cfg.get("rope_parameters") {
        Some(p) => rope_parameters(cfg, p)?,
        None => (
            scaling_object(cfg)?.cloned().unwrap_or(Value::Null),
            "rope_scaling".into(),
        ),
    };
    let name = name.as_str();
    let top = cfg.float_in(&cfg.json, base_key, base_key)?;
    let inner_key = format!("{name}.rope_theta");
    let (base, from) = match cfg.float_in(&params, "rope_theta", &inner_key)? {
        Some(b) => {
            // A top-level base beside it must say the same (none is ignored silently).
            if let Some(t) = top.filter(|&t| t != b) {
                return Err(cfg.error(format!(
                    "{base_key} {t} and {name}.rope_theta {b} give two RoPE bases: give one"
                )));
            }
            (b, inner_key.as_str())
        }
        None => (top.unwrap_or(ropelab_model::rope::DEFAULT_BASE), base_key),
    };
    if !crate::gguf::rope_base_in_range(base) {
        return Err(cfg.error(format!(
            "{from} {} is not a RoPE base ropelab reads: it must lie in (1, {:e}] (a base \
             of 1 or less, or one beyond, is no model's)",
            crate::number(base),
            crate::gguf::ROPE_BASE_MAX
        )));
    }
    // The rotated fraction may be given under several keys (transformers reads the newest);
    // every one given must agree, so none is ignored silently.
    let mut given: Vec<(String, f64)> = Vec::new();
    let inner = format!("{name}.partial_rotary_factor");
    if let Some(f) = cfg.float_in(&params, "partial_rotary_factor", &inner)? {
        given.push((inner, f));
    }
    if let Some(f) = cfg.float_in(&cfg.json, "partial_rotary_factor", "partial_rotary_factor")? {
        given.push(("partial_rotary_factor".into(), f));
    }
    if let Some((key, _)) = fraction_key {
        if let Some(f) = cfg.float_in(&cfg.json, key, key)? {
            given.push((key.into(), f));
        }
    }
    if let Some((key, f)) = given.iter().find(|(_, f)| *f != given[0].1) {
        return Err(cfg.error(format!(
            "{} {} and {key} {f} give two rotated fractions: give one",
            given[0].0, given[0].1
        )));
    }
    let (fraction_name, fraction) = match given.first() {
        Some((name, f)) => (Some(name.clone()), *f),
        None => (None, fraction_key.map_or(1.0, |(_, default)| default)),
    };
    // transformers rotates int(head_size * fraction) dims.
    let rope_dim = (d_head as f64 * fraction).floor() as usize;
    // Named as what is wrong: a fraction beyond (0, 1] is the key's; an odd count with the
    // whole head rotating is the head size's (tenth pass, U3, U4).
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(cfg.error(format!(
            "{} {fraction} is outside (0, 1]: a head rotates a fraction of its {d_head} dims",
            fraction_name.as_deref().unwrap_or("the rotated fraction")
        )));
    }
    if rope_dim == 0 || !rope_dim.is_multiple_of(2) {
        return Err(cfg.error(match fraction_name {
            Some(name) => format!(
                "{name} {fraction} rotates {rope_dim} of the head's {d_head} dims: RoPE rotates \
                 pairs, so an even, positive number"
            ),
            None => format!(
                "the head size {d_head} (hidden_size / num_attention_heads, or head_dim) is odd \
                 or 0: RoPE rotates its dims in pairs"
            ),
        }));
    }
    let thetas = if params.is_object() {
        scaled_thetas(cfg, &params, name, base, rope_dim)?
    } else {
        None
    };
    // An older `rope_scaling` beside `rope_parameters` is read too (an unknown type is refused
    // whichever key holds it) and must scale as `rope_parameters` does.
    if name != "rope_scaling" {
        if let Some(old) = scaling_object(cfg)? {
            // Its own base, and its own rotated fraction, must agree too (twenty-second pass,
            // N2: a rope_theta there was ignored).
            if let Some(b) = cfg.float_in(old, "rope_theta", "rope_scaling.rope_theta")? {
                if b != base {
                    return Err(cfg.error(format!(
                        "rope_scaling.rope_theta {} and {from} {} give two RoPE bases: give one",
                        crate::number(b),
                        crate::number(base)
                    )));
                }
            }
            if let Some(f) = cfg.float_in(
                old,
                "partial_rotary_factor",
                "rope_scaling.partial_rotary_factor",
            )? {
                if (f * d_head as f64).round() as usize != rope_dim {
                    return Err(cfg.error(format!(
                        "rope_scaling.partial_rotary_factor {} rotates another share of a head \
                         than {rope_dim} of {d_head} dims: give one",
                        crate::number(f)
                    )));
                }
            }
            let also = scaled_thetas(cfg, old, "rope_scaling", base, rope_dim)?;
            if also != thetas {
                return Err(
                    cfg.error("rope_scaling and rope_parameters scale RoPE differently: give one")
                );
            }
        }
    }
    Ok((base, rope_dim, thetas))
}

/// The MLP of activation `act` (key `key`): GELU exact or tanh-approximated.
fn gelu_of(cfg: &ConfigJson, key: &str, default: &str) -> Result<Mlp> {
    match cfg.string_or(key, default)? {
        "gelu" => Ok(Mlp::Gelu),
        "gelu_new" | "gelu_pytorch_tanh" => Ok(Mlp::GeluTanh),
        other => Err(cfg.error(format!(
            "{key} {} is not supported (gelu, gelu_new, gelu_pytorch_tanh)",
            quoted(other)
        ))),
    }
}

/// Llama, Mistral and Qwen2 (`arch`).
fn llama_config(cfg: &ConfigJson, arch: &str) -> Result<LlamaConfig> {
    let act = cfg.string_or("hidden_act", "silu")?;
    if act != "silu" {
        return Err(cfg.error(format!(
            "hidden_act {} is not supported (silu)",
            quoted(act)
        )));
    }
    for key in ["attention_bias", "mlp_bias", "use_sliding_window"] {
        if cfg.bool_or(key, false)? {
            return Err(cfg.error(format!("{key} = true is not supported")));
        }
    }
    let context_length = positive(cfg, "max_position_embeddings")?;
    if let Some(w) = cfg.get("sliding_window") {
        let w = w.as_u64().ok_or_else(|| {
            cfg.error(format!(
                "sliding_window is {}, not an unsigned integer",
                shown(w)
            ))
        })?;
        // Qwen2 uses its window only with use_sliding_window, refused above.
        if arch != "Qwen2ForCausalLM" && (w as usize) < context_length {
            return Err(cfg.error(format!(
                "sliding_window {w} is shorter than the context of {context_length}: not supported"
            )));
        }
    }
    let d_model = positive(cfg, "hidden_size")?;
    let n_heads = positive(cfg, "num_attention_heads")?;
    let d_head = match cfg.get("head_dim") {
        Some(_) => positive(cfg, "head_dim")?,
        None if d_model >= n_heads => d_model / n_heads,
        None => {
            return Err(cfg.error(format!(
                "hidden_size {d_model} over num_attention_heads {n_heads} leaves no dims per head"
            )))
        }
    };
    let (rope_base, rope_dim, rope_thetas) = rope_params(cfg, "rope_theta", None, d_head)?;
    if rope_dim != d_head {
        return Err(cfg.error(format!(
            "partial_rotary_factor < 1 is not supported for {arch} (every dim rotates)"
        )));
    }
    Ok(LlamaConfig {
        arch: match arch {
            "Qwen2ForCausalLM" => "qwen2",
            "MistralForCausalLM" => "mistral",
            _ => "llama",
        }
        .to_owned(),
        vocab_size: cfg.usize("vocab_size")?,
        n_layers: positive(cfg, "num_hidden_layers")?,
        n_heads,
        n_kv_heads: cfg.usize_or("num_key_value_heads", n_heads)?,
        d_model,
        d_ff: cfg.usize("intermediate_size")?,
        rope_dim,
        rope_base,
        rms_eps: cfg
            .float_in(&cfg.json, "rms_norm_eps", "rms_norm_eps")?
            .unwrap_or(1e-6),
        eps_key: "rms_norm_eps".to_owned(),
        context_length,
        d_head,
        qkv_bias: arch == "Qwen2ForCausalLM",
        block: BlockStyle::LLAMA,
        rope_layout: RopeLayout::HalfSplit,
        rope_thetas,
    })
}

/// A positive integer `key`.
fn positive(cfg: &ConfigJson, key: &str) -> Result<usize> {
    match cfg.usize(key)? {
        0 => Err(cfg.error(format!("{key} must be positive"))),
        n => Ok(n),
    }
}

/// GPT-NeoX (Pythia): LayerNorms, GELU MLP, fused q/k/v, split-halves RoPE over the first
/// `rotary_pct` of each head, attention and MLP in parallel (`use_parallel_residual`).
fn neox_config(cfg: &ConfigJson) -> Result<LlamaConfig> {
    let d_model = positive(cfg, "hidden_size")?;
    let n_heads = positive(cfg, "num_attention_heads")?;
    if !d_model.is_multiple_of(n_heads) {
        return Err(cfg.error(format!(
            "hidden_size {d_model} does not split into {n_heads} heads"
        )));
    }
    let d_head = d_model / n_heads;
    let (rope_base, rope_dim, rope_thetas) =
        rope_params(cfg, "rotary_emb_base", Some(("rotary_pct", 0.25)), d_head)?;
    let bias = cfg.bool_or("attention_bias", true)?;
    Ok(LlamaConfig {
        arch: "gpt_neox".into(),
        vocab_size: cfg.usize("vocab_size")?,
        n_layers: positive(cfg, "num_hidden_layers")?,
        n_heads,
        n_kv_heads: n_heads,
        d_model,
        d_ff: cfg.usize("intermediate_size")?,
        rope_dim,
        rope_base,
        rms_eps: cfg
            .float_in(&cfg.json, "layer_norm_eps", "layer_norm_eps")?
            .unwrap_or(1e-5),
        eps_key: "layer_norm_eps".to_owned(),
        context_length: positive(cfg, "max_position_embeddings")?,
        d_head,
        qkv_bias: bias,
        block: BlockStyle {
            norm: Norm::Layer,
            mlp: gelu_of(cfg, "hidden_act", "gelu")?,
            residual: if cfg.bool_or("use_parallel_residual", true)? {
                Residual::Parallel
            } else {
                Residual::Sequential
            },
            o_bias: bias,
            mlp_bias: true,
            unembed_bias: false,
        },
        rope_layout: RopeLayout::HalfSplit,
        rope_thetas,
    })
}

/// GPT-J (ropelab's own checkpoints too): one LayerNorm before attention and MLP in parallel,
/// GELU MLP with biases, interleaved RoPE with base 10,000 over the first `rotary_dim` dims,
/// an unembedding with a bias.
fn gptj_config(cfg: &ConfigJson) -> Result<LlamaConfig> {
    if !cfg.bool_or("ropelab_exact_in_transformers", true)? {
        return Err(cfg.error(
            "ropelab_exact_in_transformers = false: this ropelab checkpoint's position encoding \
             is not GPT-J's (score it with `ropelab score` on its run)",
        ));
    }
    // transformers' GPT-J builds its sin/cos table with base 10,000, unscaled, whatever the
    // config says: a key asking for another RoPE would be ignored silently. One that says what
    // GPT-J does anyway (base 10,000, type default) is read.
    // `rotary_emb_base` is GPT-NeoX's key, which GPT-J ignores too (seventh pass, H31).
    for key in [
        "rope_theta",
        "rope_scaling",
        "rope_parameters",
        "rotary_emb_base",
    ] {
        if let Some(v) = cfg.get(key).filter(|v| !gptj_rope_as_fixed(key, v)) {
            return Err(cfg.error(format!(
                "{key} is {}: transformers' GPT-J ignores it (its RoPE base is fixed at 10,000, \
                 unscaled); remove it",
                shown(v)
            )));
        }
    }
    let d_model = positive(cfg, "n_embd")?;
    let n_heads = positive(cfg, "n_head")?;
    if !d_model.is_multiple_of(n_heads) {
        return Err(cfg.error(format!(
            "n_embd {d_model} does not split into {n_heads} heads"
        )));
    }
    let d_head = d_model / n_heads;
    // transformers' GPTJConfig defaults a missing rotary_dim to 64; a null one it passes on
    // (its GPT-J then rotates by n_embd, not a head): refused, named as null (eighth pass, J005).
    let rope_dim = match cfg.json.get("rotary_dim") {
        None => GPTJ_DEFAULT_ROTARY_DIM,
        Some(Value::Null) => {
            return Err(cfg.error(
                "rotary_dim is null: transformers' GPT-J then rotates by n_embd, not a head",
            ))
        }
        Some(_) => cfg.usize("rotary_dim")?,
    };
    if rope_dim == 0 || rope_dim > d_head || !rope_dim.is_multiple_of(2) {
        return Err(cfg.error(format!(
            "rotary_dim {rope_dim} is not an even number of dims within a head of {d_head}"
        )));
    }
    // GPT-J rotates `rotary_dim` dims; the other families' rotated-fraction keys are ignored
    // by transformers' GPT-J, so one that says another fraction than rotary_dim's is refused
    // (twentieth pass, F-S4).
    let fraction = rope_dim as f64 / d_head as f64;
    for key in ["partial_rotary_factor", "rotary_pct"] {
        if let Some(v) = cfg.get(key).filter(|v| v.as_f64() != Some(fraction)) {
            return Err(cfg.error(format!(
                "{key} is {}, but rotary_dim {rope_dim} of a {d_head}-dim head rotates {}: \
                 transformers' GPT-J ignores {key} (rotary_dim sets the rotated dims); remove it",
                shown(v),
                ropelab_model::number_text(fraction)
            )));
        }
    }
    Ok(LlamaConfig {
        arch: "gptj".into(),
        vocab_size: cfg.usize("vocab_size")?,
        n_layers: positive(cfg, "n_layer")?,
        n_heads,
        n_kv_heads: n_heads,
        d_model,
        d_ff: cfg.usize_or("n_inner", 4 * d_model)?,
        rope_dim,
        // transformers' GPT-J builds its sin/cos table with base 10,000 whatever the config.
        rope_base: ropelab_model::rope::DEFAULT_BASE,
        rms_eps: cfg
            .float_in(&cfg.json, "layer_norm_epsilon", "layer_norm_epsilon")?
            .unwrap_or(1e-5),
        eps_key: "layer_norm_epsilon".to_owned(),
        context_length: positive(cfg, "n_positions")?,
        d_head,
        qkv_bias: false,
        block: BlockStyle {
            norm: Norm::Layer,
            mlp: gelu_of(cfg, "activation_function", "gelu_new")?,
            residual: Residual::ParallelSharedNorm,
            o_bias: false,
            mlp_bias: true,
            unembed_bias: true,
        },
        rope_layout: RopeLayout::Interleaved,
        rope_thetas: None,
    })
}

/// Whether `value`, GPT-J config key `key`, says what transformers' GPT-J computes anyway:
/// `rope_theta` 10,000, or a `rope_parameters` / `rope_scaling` object holding only
/// `rope_type` (or `type`) "default" and `rope_theta` 10,000.
fn gptj_rope_as_fixed(key: &str, value: &Value) -> bool {
    let base = |v: &Value| v.as_f64() == Some(ropelab_model::rope::DEFAULT_BASE);
    match (key, value) {
        ("rope_theta" | "rotary_emb_base", v) => base(v),
        (_, Value::Object(map)) => map.iter().all(|(k, v)| match k.as_str() {
            "rope_type" | "type" => v.as_str() == Some("default"),
            "rope_theta" => base(v),
            _ => false,
        }),
        _ => false,
    }
}

/// The tensors of a Hugging Face directory, converted to f32 as they are read.
pub struct HfWeights {
    dir: PathBuf,
    /// Every tensor of every shard, in the file's dtype.
    tensors: HashMap<String, (Tensor, PathBuf)>,
    /// Whether the unembedding is the embedding (`tie_word_embeddings`).
    tied: bool,
    /// The architecture ([`LlamaConfig::arch`]), which names the tensors.
    arch: String,
    /// Query heads (GPT-NeoX's fused q/k/v is laid out head by head).
    heads: usize,
    /// The Hugging Face names of the tensors read so far.
    read: HashSet<String>,
}

/// Buffers that transformers saves beside the weights and recomputes itself (RoPE's inverse
/// frequencies, GPT-NeoX's and GPT-J's causal masks): the only tensors a directory may hold
/// that the model does not read.
const BUFFERS: [&str; 2] = ["rotary_emb.inv_freq", ".masked_bias"];

impl HfWeights {
    /// Reads `dir`'s `config.json` and its safetensors weights.
    pub fn open(dir: &Path, device: &Device) -> Result<(LlamaConfig, Self)> {
        let config_path = dir.join("config.json");
        if !regular_file(&config_path)? {
            return Err(PretrainedError::gguf(
                dir,
                "not a model directory: config.json is missing",
            ));
        }
        // A ropelab checkpoint (`ropelab.json` or ropelab's manifest beside its files) is read
        // only as its manifest sealed it: an edited config.json or weights file, or a missing
        // manifest (unless `--force`), is refused by name.
        if dir.join("ropelab.json").is_file() || has_ropelab_manifest(dir) {
            let files = ["config.json", "model.safetensors"];
            // Hashing a pipe or a device would block or never end.
            regular_file(&dir.join("model.safetensors"))?;
            match ropelab_io::checksum::Manifest::verify(dir, &files) {
                Ok(None) => {}
                Ok(Some(why)) => {
                    return Err(PretrainedError::gguf(
                        dir,
                        format!("a ropelab checkpoint that is not as it was written: {why}"),
                    ))
                }
                Err(e) => return Err(PretrainedError::io(dir, e)),
            }
            // Unsealed (`--force`), the two configs must still say one model: config.json is
            // what is read, ropelab.json what was trained.
            agrees_with_ropelab_json(dir)?;
        }
        let c = parse_config(&config_path)?;
        let tied = {
            let text = crate::json_text(&config_path, crate::SMALL_JSON_BYTES)?;
            let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            // The special token ids must be tokens of the model (one id or a list of them): a
            // padding id too (transformers' embedding refuses one beyond its rows).
            for key in ["eos_token_id", "bos_token_id", "pad_token_id"] {
                let ids: Vec<&Value> = match json.get(key) {
                    None | Some(Value::Null) => vec![],
                    Some(Value::Array(items)) => items.iter().collect(),
                    Some(v) => vec![v],
                };
                // An id that is no unsigned integer (0.0, -1, "2") is named as that, not as
                // beyond the vocabulary (nineteenth pass, U1).
                if let Some(bad) = ids.iter().find(|v| v.as_u64().is_none()) {
                    return Err(PretrainedError::gguf(
                        &config_path,
                        format!("{key} {} is not an unsigned integer", shown(bad)),
                    ));
                }
                if let Some(bad) = ids
                    .iter()
                    .find(|v| v.as_u64().is_some_and(|i| (i as usize) >= c.vocab_size))
                {
                    return Err(PretrainedError::gguf(
                        &config_path,
                        format!(
                            "{key} {bad} is not a token of the model's vocabulary of {}",
                            c.vocab_size
                        ),
                    ));
                }
            }
            match json.get("tie_word_embeddings") {
                None => false,
                Some(Value::Null) => {
                    return Err(PretrainedError::gguf(
                        &config_path,
                        "tie_word_embeddings is null: give true or false, or leave the key out",
                    ))
                }
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(PretrainedError::gguf(
                        &config_path,
                        format!("tie_word_embeddings is {}, not true or false", shown(other)),
                    ))
                }
            }
        };
        let (files, index) = shards(dir)?;
        let mut tensors: HashMap<String, (Tensor, PathBuf)> = HashMap::new();
        for file in files {
            check_safetensors_header(&file)?;
            let loaded = candle_core::safetensors::load(&file, device).map_err(|e| {
                PretrainedError::gguf(
                    &file,
                    format!("not a readable safetensors file: {}", crate::first_line(&e)),
                )
            })?;
            for (name, t) in loaded {
                // A float type ropelab does not compute in is named as such, before its values
                // are read as NaN (fourteenth pass, U-D).
                if matches!(
                    t.dtype(),
                    DType::F8E4M3 | DType::F6E2M3 | DType::F6E3M2 | DType::F4 | DType::F8E8M0
                ) {
                    return Err(PretrainedError::gguf(
                        &file,
                        format!(
                            "tensor {} is {:?}: f32, f16 or bf16 is supported",
                            crate::escaped(&name),
                            t.dtype()
                        ),
                    ));
                }
                // An F64 tensor is refused by its type when it is read (a buffer transformers
                // recomputes is never read): its values are not judged in f32 first (a finite
                // 1e300 would be named as inf; twentieth pass, F-U2).
                if t.dtype() != DType::F64 {
                    crate::gguf::finite(&file, &name, &t)?;
                }
                let quoted = crate::escaped(&name);
                // Which copy transformers reads depends on the index: a tensor is in one shard,
                // the one the index names.
                if let Some((_, first)) = tensors.get(&name) {
                    return Err(PretrainedError::gguf(
                        dir,
                        format!(
                            "tensor {quoted} is in two shards, {} and {}: give it once",
                            file_name(first),
                            file_name(&file)
                        ),
                    ));
                }
                if let Some((index, map)) = &index {
                    match map.get(&name) {
                        Some(listed) if *listed == file => {}
                        Some(listed) => {
                            return Err(PretrainedError::gguf(
                                index,
                                format!(
                                    "tensor {quoted} is in {}, but weight_map names {}",
                                    file_name(&file),
                                    file_name(listed)
                                ),
                            ))
                        }
                        None => {
                            return Err(PretrainedError::gguf(
                                index,
                                format!(
                                    "tensor {quoted} of {} is not in weight_map",
                                    file_name(&file)
                                ),
                            ))
                        }
                    }
                }
                tensors.insert(name, (t, file.clone()));
            }
        }
        if let Some((index, map)) = &index {
            if let Some((name, file)) = map.iter().find(|(n, _)| !tensors.contains_key(*n)) {
                return Err(PretrainedError::gguf(
                    index,
                    format!(
                        "weight_map places tensor {} in {}, which does not hold it",
                        crate::escaped(name),
                        file_name(file)
                    ),
                ));
            }
        }
        // Every block the weights hold must be in the config: a smaller `num_hidden_layers`
        // would silently drop the blocks beyond it.
        let prefix = format!("{}.", Self::layer_prefix(&c.arch));
        let held = crate::gguf::blocks_held(tensors.keys(), &prefix);
        if let Some(held) = held {
            if held != c.n_layers {
                return Err(PretrainedError::gguf(
                    &config_path,
                    format!(
                        "num_hidden_layers is {} but the weights hold {held} blocks ({prefix}0 \
                         .. {prefix}{})",
                        c.n_layers,
                        held - 1
                    ),
                ));
            }
        }
        let weights = Self {
            dir: dir.to_owned(),
            tensors,
            tied,
            arch: c.arch.clone(),
            heads: c.n_heads,
            read: HashSet::new(),
        };
        Ok((c, weights))
    }

    /// Refuses a directory with tensors the model did not read (call after building it): a
    /// weight ropelab's forward would leave out, such as a bias or norm of another variant of
    /// the architecture, would make it compute another function than the checkpoint's. The
    /// buffers transformers recomputes ([`BUFFERS`]) and a tied `lm_head.weight` equal to the
    /// embedding are allowed.
    pub(crate) fn check_all_read(&self) -> Result<()> {
        let mut unread: Vec<&String> = self
            .tensors
            .keys()
            .filter(|n| !self.read.contains(*n))
            .filter(|n| !self.is_buffer(n))
            .collect();
        if self.tied {
            let embed = Self::hf_name(&self.arch, "token_embd.weight");
            let output = Self::hf_name(&self.arch, "output.weight");
            if let (Some(embed), Some(output)) = (embed, output) {
                let same = match (self.tensors.get(&embed), self.tensors.get(&output)) {
                    (Some((a, _)), Some((b, _))) => equal(a, b)?,
                    _ => false,
                };
                if same {
                    unread.retain(|n| **n != output);
                }
            }
        }
        if unread.is_empty() {
            return Ok(());
        }
        unread.sort();
        let shown: Vec<String> = unread.iter().take(5).map(|n| crate::escaped(n)).collect();
        Err(PretrainedError::gguf(
            &self.dir,
            format!(
                "{} tensor(s) the {} model ropelab builds would not read: {}{}; a model that \
                 needs them would run as another function",
                unread.len(),
                self.arch,
                shown.join(", "),
                if unread.len() > shown.len() {
                    ", ..."
                } else {
                    ""
                }
            ),
        ))
    }

    /// Whether `name` is a buffer transformers recomputes: [`BUFFERS`], and the causal mask
    /// GPT-J (`attn.bias`) and GPT-NeoX (`attention.bias`) save under a weight-like name.
    fn is_buffer(&self, name: &str) -> bool {
        BUFFERS.iter().any(|b| name.ends_with(b))
            || (matches!(self.arch.as_str(), "gptj" | "gpt_neox")
                && (name.ends_with(".attn.bias") || name.ends_with(".attention.bias")))
    }

    /// The name prefix of the blocks' tensors in architecture `arch` (`model.layers`).
    fn layer_prefix(arch: &str) -> &'static str {
        match arch {
            "gpt_neox" => "gpt_neox.layers",
            "gptj" => "transformer.h",
            _ => "model.layers",
        }
    }

    /// The Hugging Face name of GGUF tensor `name` in architecture `arch`. GPT-NeoX's q, k and
    /// v map to its fused `query_key_value`, split by [`HfWeights::matrix`].
    fn hf_name(arch: &str, name: &str) -> Option<String> {
        let (fixed, prefix): (&[(&str, &str)], &str) = match arch {
            "gpt_neox" => (
                &[
                    ("token_embd.weight", "gpt_neox.embed_in.weight"),
                    ("output_norm.weight", "gpt_neox.final_layer_norm.weight"),
                    ("output_norm.bias", "gpt_neox.final_layer_norm.bias"),
                    ("output.weight", "embed_out.weight"),
                ],
                Self::layer_prefix(arch),
            ),
            "gptj" => (
                &[
                    ("token_embd.weight", "transformer.wte.weight"),
                    ("output_norm.weight", "transformer.ln_f.weight"),
                    ("output_norm.bias", "transformer.ln_f.bias"),
                    ("output.weight", "lm_head.weight"),
                    ("output.bias", "lm_head.bias"),
                ],
                Self::layer_prefix(arch),
            ),
            _ => (
                &[
                    ("token_embd.weight", "model.embed_tokens.weight"),
                    ("output_norm.weight", "model.norm.weight"),
                    ("output.weight", "lm_head.weight"),
                ],
                Self::layer_prefix(arch),
            ),
        };
        if let Some((_, hf)) = fixed.iter().find(|(g, _)| *g == name) {
            return Some((*hf).to_owned());
        }
        let rest = name.strip_prefix("blk.")?;
        let (layer, part) = rest.split_once('.')?;
        let (module, kind) = part.rsplit_once('.')?;
        let hf = match (arch, module) {
            ("gpt_neox", "attn_norm") => "input_layernorm",
            ("gpt_neox", "ffn_norm") => "post_attention_layernorm",
            ("gpt_neox", "attn_q" | "attn_k" | "attn_v") => "attention.query_key_value",
            ("gpt_neox", "attn_output") => "attention.dense",
            ("gpt_neox", "ffn_up") => "mlp.dense_h_to_4h",
            ("gpt_neox", "ffn_down") => "mlp.dense_4h_to_h",
            ("gptj", "attn_norm") => "ln_1",
            ("gptj", "attn_q") => "attn.q_proj",
            ("gptj", "attn_k") => "attn.k_proj",
            ("gptj", "attn_v") => "attn.v_proj",
            ("gptj", "attn_output") => "attn.out_proj",
            ("gptj", "ffn_up") => "mlp.fc_in",
            ("gptj", "ffn_down") => "mlp.fc_out",
            ("gpt_neox" | "gptj", _) => return None,
            (_, "attn_norm") => "input_layernorm",
            (_, "ffn_norm") => "post_attention_layernorm",
            (_, "attn_q") => "self_attn.q_proj",
            (_, "attn_k") => "self_attn.k_proj",
            (_, "attn_v") => "self_attn.v_proj",
            (_, "attn_output") => "self_attn.o_proj",
            (_, "ffn_gate") => "mlp.gate_proj",
            (_, "ffn_up") => "mlp.up_proj",
            (_, "ffn_down") => "mlp.down_proj",
            _ => return None,
        };
        Some(format!("{prefix}.{layer}.{hf}.{kind}"))
    }

    /// Which third of GPT-NeoX's fused q/k/v GGUF tensor `name` is (0 q, 1 k, 2 v).
    fn fused_part(&self, name: &str) -> Option<usize> {
        if self.arch != "gpt_neox" {
            return None;
        }
        let module = name.split('.').nth(2)?;
        ["attn_q", "attn_k", "attn_v"]
            .iter()
            .position(|m| *m == module)
    }
}

/// Whether `dir` holds ropelab's manifest ([`ropelab_io::checksum::MANIFEST`]): a file of that
/// name that is not JSON, or JSON with ropelab's `sha256` table (a manifest of another tool, a
/// JSON object without it, is not ropelab's).
fn has_ropelab_manifest(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join(ropelab_io::checksum::MANIFEST)) else {
        return dir.join(ropelab_io::checksum::MANIFEST).is_file();
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(json) => json.get("sha256").is_some(),
        Err(_) => true,
    }
}

/// The name of `path`'s file, escaped, for errors.
fn file_name(path: &Path) -> String {
    crate::escaped(&path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    ))
}

/// A shard index: its path and, for each tensor, the shard `weight_map` places it in.
type ShardIndex = (PathBuf, HashMap<String, PathBuf>);

/// Whether `path` is a regular file (following a symbolic link): false when nothing is there;
/// anything else (a directory, a named pipe, a device, a socket, a link to nothing) is refused
/// naming it and saying what it is, since reading it would fail, block or never end.
pub(crate) fn regular_file(path: &Path) -> Result<bool> {
    let kind = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => return Ok(true),
        Ok(m) => kind_of(&m.file_type()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(path).is_err() {
                return Ok(false);
            }
            "a symbolic link to nothing"
        }
        Err(e) => return Err(PretrainedError::io(path, e)),
    };
    Err(PretrainedError::gguf(
        path,
        format!("is {kind}, not a regular file"),
    ))
}

/// What a file of type `t` (not a regular file) is, in words.
fn kind_of(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a named pipe";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a file ropelab can read"
    }
}

/// Refuses a safetensors `__metadata__` (`info`, of the file at `path`) whose `format`
/// transformers does not read as a PyTorch state dict: it loads `pt` and `mlx` (or no
/// metadata) as such, converts `tf` and `flax` through their own loaders (another layout), and
/// refuses any other format, or none (twenty-first pass, S-A).
fn check_safetensors_format(path: &Path, info: &Value) -> Result<()> {
    let format = match info {
        Value::Null => return Ok(()),
        Value::Object(map) => map.get("format"),
        other => {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "the safetensors __metadata__ is {}, not a map of strings",
                    shown(other)
                ),
            ))
        }
    };
    match format.and_then(Value::as_str) {
        Some("pt" | "mlx") => Ok(()),
        Some(f @ ("tf" | "flax")) => Err(PretrainedError::gguf(
            path,
            format!(
                "the safetensors __metadata__ format is \"{f}\": transformers converts such \
                 weights through its {f} loader (another layout), not as a PyTorch state dict"
            ),
        )),
        _ => Err(PretrainedError::gguf(
            path,
            format!(
                "the safetensors __metadata__ format is {}: transformers reads \"pt\" (or \
                 \"mlx\") and refuses this file",
                format.map_or("missing".to_owned(), shown)
            ),
        )),
    }
}

/// Checks the header of safetensors file `path` where the safetensors reader trusts it or
/// names nothing: a key given twice (a tensor listed twice: the reader keeps the last) is
/// refused naming it, and a tensor whose dtype and shape do not fill its `data_offsets` (a
/// relabelled dtype) is refused naming the tensor. A header that cannot be read this far is
/// left to the reader, which reports it.
fn check_safetensors_header(path: &Path) -> Result<()> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| PretrainedError::io(path, e))?;
    let len = file
        .metadata()
        .map_err(|e| PretrainedError::io(path, e))?
        .len();
    let mut n = [0u8; 8];
    if file.read_exact(&mut n).is_err() {
        return Ok(());
    }
    let n = u64::from_le_bytes(n);
    // The safetensors reader's own limit on a header (100 MB), and the file's length.
    if n > 100_000_000 || n > len.saturating_sub(8) {
        return Ok(());
    }
    let mut header = vec![0u8; n as usize];
    if file.read_exact(&mut header).is_err() {
        return Ok(());
    }
    unique_keys(path, &header, "the safetensors header: ")?;
    let Ok(Value::Object(entries)) = serde_json::from_slice::<Value>(&header) else {
        return Ok(());
    };
    for (name, info) in &entries {
        if name == "__metadata__" {
            check_safetensors_format(path, info)?;
            continue;
        }
        let bytes = info
            .get("dtype")
            .and_then(Value::as_str)
            .and_then(safetensors_dtype_bytes);
        let shape: Option<Vec<u64>> = info
            .get("shape")
            .and_then(Value::as_array)
            .and_then(|dims| dims.iter().map(Value::as_u64).collect());
        let offsets: Option<Vec<u64>> = info
            .get("data_offsets")
            .and_then(Value::as_array)
            .and_then(|o| o.iter().map(Value::as_u64).collect());
        let (Some(bytes), Some(shape), Some(offsets)) = (bytes, shape, offsets) else {
            continue;
        };
        let [start, end] = offsets[..] else {
            continue;
        };
        let need = shape.iter().try_fold(bytes, |n, &d| n.checked_mul(d));
        if let Some(need) = need.filter(|&need| end >= start && need != end - start) {
            return Err(PretrainedError::gguf(
                path,
                format!(
                    "tensor {} is {} of shape {shape:?} ({need} bytes), but its data_offsets \
                     span {} bytes: its dtype or shape does not match its data",
                    crate::escaped(name),
                    info["dtype"].as_str().unwrap_or(""),
                    end - start
                ),
            ));
        }
    }
    Ok(())
}

/// Bytes per element of safetensors dtype `name` (None: one the check leaves to the reader).
fn safetensors_dtype_bytes(name: &str) -> Option<u64> {
    Some(match name {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 1,
        "U16" | "I16" | "F16" | "BF16" => 2,
        "U32" | "I32" | "F32" => 4,
        "U64" | "I64" | "F64" => 8,
        _ => return None,
    })
}

/// The safetensors files of `dir`: `model.safetensors`, or the shards the index lists, with
/// the index (each tensor's shard). A directory with both is refused: which weights are the
/// model's is unclear.
fn shards(dir: &Path) -> Result<(Vec<PathBuf>, Option<ShardIndex>)> {
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    match (regular_file(&single)?, regular_file(&index)?) {
        (true, true) => {
            return Err(PretrainedError::gguf(
                dir,
                "holds both model.safetensors and model.safetensors.index.json (with its \
                 shards): which weights are the model's is unclear; remove one",
            ))
        }
        (true, false) => {
            // Shards beside the single file, with no index to say which is the model's: the
            // single file would be read and the shards ignored without a word.
            if let Some(shard) = unindexed_shard(dir)? {
                return Err(PretrainedError::gguf(
                    dir,
                    format!(
                        "holds both model.safetensors and the shard {shard} (without \
                         model.safetensors.index.json): which weights are the model's is \
                         unclear; remove one"
                    ),
                ));
            }
            return Ok((vec![single], None));
        }
        (false, false) => {
            let why = match unindexed_shard(dir)? {
                Some(shard) => format!(
                    "no weights it can read: the shard {shard} is there, but not \
                     model.safetensors.index.json, which says where each tensor lies"
                ),
                None => "no weights: neither model.safetensors nor model.safetensors.index.json"
                    .to_owned(),
            };
            return Err(PretrainedError::gguf(dir, why));
        }
        (false, true) => {}
    }
    let len = std::fs::metadata(&index)
        .map_err(|e| PretrainedError::io(&index, e))?
        .len();
    if len > crate::SMALL_JSON_BYTES {
        return Err(PretrainedError::gguf(
            &index,
            format!("is {len} bytes, more than a shard index holds: a damaged or wrong file"),
        ));
    }
    let text = std::fs::read(&index).map_err(|e| PretrainedError::io(&index, e))?;
    // A key given twice (a tensor placed in two shards, `weight_map` itself) is refused, not
    // read as the last.
    unique_keys(&index, &text, "")?;
    let json: Value = serde_json::from_slice(&text)
        .map_err(|e| PretrainedError::gguf(&index, format!("not valid JSON: {e}")))?;
    let map = match json.get("weight_map") {
        None | Some(Value::Null) => {
            return Err(PretrainedError::gguf(&index, "key weight_map is missing"))
        }
        Some(Value::Object(map)) => map,
        Some(v) => {
            return Err(PretrainedError::gguf(
                &index,
                format!(
                    "weight_map is {}, not an object of tensor names and their shards",
                    shown(v)
                ),
            ))
        }
    };
    let mut files: Vec<PathBuf> = vec![];
    let mut placed = HashMap::new();
    for (tensor, v) in map {
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
            if !regular_file(&path)? {
                return Err(PretrainedError::gguf(
                    &index,
                    format!(
                        "weight_map places tensor {} in {}, which is missing",
                        crate::escaped(tensor),
                        file_name(&path)
                    ),
                ));
            }
            files.push(path.clone());
        }
        placed.insert(tensor.clone(), path);
    }
    files.sort();
    // A shard the index does not list (left from another set of shards) may hold another
    // version of the model's tensors (seventh pass, SH_stray).
    if let Some(stray) = shard_names(dir)?
        .into_iter()
        .find(|n| !files.iter().any(|f| file_name(f) == *n))
    {
        return Err(PretrainedError::gguf(
            dir,
            format!(
                "holds the shard {stray}, which model.safetensors.index.json does not list \
                 (another set of shards?): which weights are the model's is unclear; remove it"
            ),
        ));
    }
    Ok((files, Some((index, placed))))
}

/// Refuses a ropelab checkpoint whose `config.json` says another model than its `ropelab.json`
/// (the run config it was trained with): every key ropelab writes into `config.json` must be
/// the one `ropelab.json`'s model gives (its RoPE's exactness in transformers among them).
fn agrees_with_ropelab_json(dir: &Path) -> Result<()> {
    let path = dir.join("ropelab.json");
    if !path.is_file() {
        return Ok(());
    }
    let text = std::fs::read_to_string(&path).map_err(|e| PretrainedError::io(&path, e))?;
    let run: Value = serde_json::from_str(&text)
        .map_err(|e| PretrainedError::gguf(&path, format!("not valid JSON: {e}")))?;
    let model: ropelab_model::ModelConfig = run
        .get("model")
        .cloned()
        .ok_or_else(|| PretrainedError::gguf(&path, "key model is missing"))
        .and_then(|m| {
            serde_json::from_value(m)
                .map_err(|e| PretrainedError::gguf(&path, format!("not a model config: {e}")))
        })?;
    let config_path = dir.join("config.json");
    let text =
        std::fs::read_to_string(&config_path).map_err(|e| PretrainedError::io(&config_path, e))?;
    let Ok(Value::Object(found)) = serde_json::from_str::<Value>(&text) else {
        // parse_config names what is wrong with it.
        return Ok(());
    };
    let Value::Object(want) = ropelab_model::checkpoint::hf_config(&model) else {
        return Ok(());
    };
    for (key, v) in &want {
        if found.get(key) != Some(v) {
            // The one key that stands for the position encoding: say what ropelab.json has.
            let why = if key == "ropelab_exact_in_transformers" {
                format!(
                    " (its position encoding, {}, is {}what transformers' GPT-J computes)",
                    shown(&serde_json::to_value(&model.position).unwrap_or(Value::Null)),
                    if model.hf_exact() { "" } else { "not " }
                )
            } else {
                String::new()
            };
            return Err(PretrainedError::gguf(
                &config_path,
                format!(
                    "{key} is {} but ropelab.json's model gives {}{why}: the two files of this \
                     checkpoint disagree (one was edited); restore it",
                    found.get(key).map_or("missing".into(), shown),
                    shown(v)
                ),
            ));
        }
    }
    Ok(())
}

/// The first shard of a sharded checkpoint in `dir` (`model-00001-of-00002.safetensors`, as
/// transformers names them), when there is one.
fn unindexed_shard(dir: &Path) -> Result<Option<String>> {
    Ok(shard_names(dir)?.into_iter().next())
}

/// The shard files of `dir` (`model-00001-of-00002.safetensors`, as transformers names them),
/// sorted.
fn shard_names(dir: &Path) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(dir).map_err(|e| PretrainedError::io(dir, e))?;
    let mut shards: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.strip_prefix("model-")
                .and_then(|n| n.strip_suffix(".safetensors"))
                .is_some_and(|n| n.contains("-of-"))
        })
        .collect();
    shards.sort();
    Ok(shards)
}

impl Weights for HfWeights {
    fn matrix(
        &mut self,
        name: &str,
        shape: &[usize],
        _device: &Device,
    ) -> Result<(Tensor, Option<QuantMatrix>)> {
        let hf = Self::hf_name(&self.arch, name).unwrap_or_else(|| name.to_owned());
        self.read.insert(hf.clone());
        let (t, file) = self
            .tensors
            .get(&hf)
            .ok_or_else(|| PretrainedError::gguf(&self.dir, format!("tensor {hf} is missing")))?;
        // GPT-NeoX stores q, k and v as one [heads * 3 * head_dim, ...] tensor, head by head.
        let (t, want) = match self.fused_part(name) {
            Some(part) => {
                let mut fused = shape.to_vec();
                fused[0] *= 3;
                if t.dims() != fused.as_slice() {
                    return Err(PretrainedError::gguf(
                        file,
                        format!(
                            "tensor {hf} has shape {:?}, where config.json's dimensions need {fused:?}",
                            t.dims()
                        ),
                    ));
                }
                let heads = self.heads;
                let mut split = vec![heads, 3, shape[0] / heads];
                split.extend_from_slice(&shape[1..]);
                let third = t.reshape(split)?.narrow(1, part, 1)?.reshape(shape)?;
                (third, shape)
            }
            None => (t.clone(), shape),
        };
        if t.dims() != want {
            return Err(PretrainedError::gguf(
                file,
                format!(
                    "tensor {hf} has shape {:?}, where config.json's dimensions need {shape:?}",
                    t.dims()
                ),
            ));
        }
        let t = match t.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => t.to_dtype(DType::F32)?.contiguous()?,
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
        Self::hf_name(&self.arch, name).is_some_and(|hf| self.tensors.contains_key(&hf))
    }
}

/// Whether two tensors hold the same shape and values.
fn equal(a: &Tensor, b: &Tensor) -> Result<bool> {
    if a.dims() != b.dims() {
        return Ok(false);
    }
    let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
    let differ = a
        .ne(&b)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()?;
    Ok(differ == 0.0)
}

/// A JSON value whose every object names each key once (deserializing it is the check).
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<UniqueKeys, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "key {key:?} is given twice"
                )));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(UniqueKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_bool<E>(self, _: bool) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
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

/// Every end-of-generation id of a model directory: each `eos_token_id` (one id or a list) of
/// its `config.json` and, when present, its `generation_config.json` (transformers' `generate`
/// stops at each). An id beyond the `vocab` or of another type is refused naming the file.
pub fn stop_tokens(dir: &Path, vocab: usize) -> Result<Vec<u32>> {
    let mut stops = vec![];
    for name in ["config.json", "generation_config.json"] {
        let path = dir.join(name);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && name != "config.json" => continue,
            Err(e) => return Err(PretrainedError::gguf(&path, e.to_string())),
        };
        let json: Value = serde_json::from_str(&text)
            .map_err(|e| PretrainedError::gguf(&path, format!("not JSON: {e}")))?;
        let ids = match json.get("eos_token_id") {
            None | Some(Value::Null) => vec![],
            Some(Value::Array(list)) => list.clone(),
            Some(one) => vec![one.clone()],
        };
        for id in ids {
            match id.as_u64().filter(|&i| (i as usize) < vocab) {
                Some(i) => stops.push(i as u32),
                None => {
                    return Err(PretrainedError::gguf(
                        &path,
                        format!(
                            "eos_token_id {id} is not a token id of the model's {vocab} (an end \
                             of generation no token can reach)"
                        ),
                    ))
                }
            }
        }
    }
    stops.sort_unstable();
    stops.dedup();
    Ok(stops)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every eos_token_id of config.json and generation_config.json ends a generation; one no
    /// token can reach is refused (twenty-fourth pass, B-S5).
    #[test]
    fn every_end_of_generation_id_stops() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"eos_token_id": [0, 238]}"#,
        )
        .unwrap();
        assert_eq!(stop_tokens(dir.path(), 300).unwrap(), vec![0, 238]);
        std::fs::write(
            dir.path().join("generation_config.json"),
            r#"{"eos_token_id": 97}"#,
        )
        .unwrap();
        assert_eq!(stop_tokens(dir.path(), 300).unwrap(), vec![0, 97, 238]);
        let err = stop_tokens(dir.path(), 200).unwrap_err().to_string();
        assert!(err.contains("config.json") && err.contains("238"), "{err}");
    }

    /// The configuration of `json` written as a config.json (or its one-line error).
    fn config(json: &str) -> std::result::Result<LlamaConfig, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, json).unwrap();
        parse_config(&path).map_err(|e| e.to_string())
    }

    const NEOX_OLD: &str = r#"{"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 64,
        "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 256,
        "vocab_size": 300, "max_position_embeddings": 128, "rotary_pct": 0.25,
        "rotary_emb_base": 5000, "use_parallel_residual": false, "hidden_act": "gelu"}"#;

    #[test]
    fn gpt_neox_reads_the_older_rotary_keys() {
        let c = config(NEOX_OLD).unwrap();
        assert_eq!((c.d_head, c.rope_dim, c.rope_base), (16, 4, 5000.0));
        assert_eq!(c.block.residual, Residual::Sequential);
        assert_eq!((c.block.norm, c.block.mlp), (Norm::Layer, Mlp::Gelu));
        assert!(c.qkv_bias && c.block.o_bias && c.block.mlp_bias);
    }

    #[test]
    fn values_no_model_has_are_refused() {
        let llama = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
            "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128,
            "vocab_size": 300, "max_position_embeddings": 128, "rope_theta": 10000.0,
            "rms_norm_eps": 1e-5}"#;
        assert_eq!(config(llama).unwrap().rms_eps, 1e-5);
        for (from, to, needle) in [
            ("1e-5", "-1", "norm epsilon rms_norm_eps = -1"),
            ("1e-5", "0", "norm epsilon rms_norm_eps = 0"),
            ("10000.0", "-5", "rope_theta -5"),
            ("10000.0", "0", "rope_theta 0"),
        ] {
            let err = config(&llama.replace(from, to)).expect_err(needle);
            assert!(err.contains(needle) && err.contains("config.json"), "{err}");
        }
    }

    /// A `rope_theta` in an older `rope_scaling` beside `rope_parameters` must be the same
    /// base: it was ignored (twenty-second pass, N2).
    #[test]
    fn a_second_base_in_rope_scaling_is_refused() {
        let with = |extra: &str| {
            format!(
                r#"{{"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "vocab_size": 300, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
                "rope_parameters": {{"rope_type": "default", "rope_theta": 10000.0}}{extra}}}"#
            )
        };
        let err = config(&with(
            r#", "rope_scaling": {"rope_type": "default", "rope_theta": 500000.0}"#,
        ))
        .unwrap_err();
        assert!(err.contains("rope_scaling.rope_theta 500000"), "{err}");
        assert!(err.contains("two RoPE bases"), "{err}");
        assert!(config(&with(
            r#", "rope_scaling": {"rope_type": "default", "rope_theta": 10000.0}"#
        ))
        .is_ok());
    }

    #[test]
    fn an_unknown_rope_scaling_beside_rope_parameters_is_refused() {
        let llama = |extra: &str| {
            format!(
                r#"{{"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128,
                "vocab_size": 300, "max_position_embeddings": 128,
                "rope_parameters": {{"rope_type": "default", "rope_theta": 10000.0}}{extra}}}"#
            )
        };
        assert!(config(&llama("")).unwrap().rope_thetas.is_none());
        assert!(config(&llama(r#", "rope_scaling": null"#)).is_ok());
        let err = config(&llama(
            r#", "rope_scaling": {"type": "yarn", "factor": 4.0}"#,
        ))
        .unwrap_err();
        // Named by the key the file uses (`type`, not `rope_type`; sixth pass, U3).
        assert!(
            err.contains("rope_scaling.type \"yarn\" is not supported"),
            "{err}"
        );
        let err = config(&llama(
            r#", "rope_scaling": {"rope_type": "linear", "factor": 2.0}"#,
        ))
        .unwrap_err();
        assert!(err.contains("scale RoPE differently"), "{err}");
    }

    /// GPT-NeoX's older `rotary_pct` beside the newer `partial_rotary_factor` (top level or in
    /// `rope_parameters`) must say the same: transformers reads one of them.
    /// A key given twice in config.json (serde_json and json.load keep the last) is refused
    /// naming it, at any depth (issue 55, fourth pass).
    #[test]
    fn a_key_given_twice_is_refused() {
        let twice = NEOX_OLD.replace(
            "\"rotary_emb_base\": 5000,",
            "\"rotary_emb_base\": 5000, \"rotary_emb_base\": 100,",
        );
        let err = config(&twice).unwrap_err();
        assert!(
            err.contains("\\\"rotary_emb_base\\\" is given twice")
                || err.contains("rotary_emb_base"),
            "{err}"
        );
        assert!(err.contains("given twice"), "{err}");
        let nested = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
            "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128,
            "vocab_size": 300, "max_position_embeddings": 128,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1.0, "rope_theta": 2.0}}"#;
        assert!(config(nested).unwrap_err().contains("given twice"));
        assert!(config(NEOX_OLD).is_ok());
    }

    #[test]
    fn two_rotated_fractions_must_agree() {
        let both = |key: &str, value: &str| {
            NEOX_OLD.replace(
                "\"rotary_pct\": 0.25,",
                &format!("\"rotary_pct\": 0.25, {key}: {value},"),
            )
        };
        assert_eq!(
            config(&both("\"partial_rotary_factor\"", "0.25"))
                .unwrap()
                .rope_dim,
            4
        );
        let err = config(&both("\"partial_rotary_factor\"", "0.5")).unwrap_err();
        assert!(
            err.contains("rotary_pct 0.25") && err.contains("partial_rotary_factor 0.5"),
            "{err}"
        );
        let nested = both(
            "\"rope_parameters\"",
            r#"{"rope_type": "default", "rope_theta": 5000, "partial_rotary_factor": 1.0}"#,
        );
        let err = config(&nested).unwrap_err();
        assert!(
            err.contains("rope_parameters.partial_rotary_factor 1"),
            "{err}"
        );
    }

    #[test]
    fn unsupported_keys_are_refused_naming_them() {
        for (json, key) in [
            (NEOX_OLD.replace("\"gelu\"", "\"relu\""), "hidden_act"),
            (NEOX_OLD.replace("0.25", "0.1"), "rotary_pct 0.1"),
            (
                NEOX_OLD.replace(
                    "\"rotary_pct\": 0.25,",
                    "\"rope_scaling\": {\"type\": \"yarn\"},",
                ),
                "rope_scaling.type",
            ),
            (
                r#"{"architectures": ["GPTJForCausalLM"], "n_embd": 64, "n_head": 4,
                "n_layer": 2, "vocab_size": 300, "n_positions": 128, "rotary_dim": null}"#
                    .into(),
                "rotary_dim",
            ),
            (
                r#"{"architectures": ["GPTJForCausalLM"], "n_embd": 64, "n_head": 4,
                "n_layer": 2, "vocab_size": 300, "n_positions": 128, "rotary_dim": 32}"#
                    .into(),
                "rotary_dim 32",
            ),
            // GPT-NeoX's base key, which GPT-J ignores (seventh pass, H31).
            (
                r#"{"architectures": ["GPTJForCausalLM"], "n_embd": 64, "n_head": 4,
                "n_layer": 2, "vocab_size": 300, "n_positions": 128, "rotary_dim": 16,
                "rotary_emb_base": 5.0}"#
                    .into(),
                "rotary_emb_base",
            ),
        ] {
            let err = config(&json).expect_err(key);
            assert!(err.contains(key), "{key}: {err}");
            assert!(err.contains("config.json") && !err.contains('\n'), "{err}");
        }
    }

    /// The tiny Llama config.json of the unit tests with `extra` keys added or replaced.
    fn llama_with(extra: &str) -> String {
        // The extra keys replace the base's (a key given twice is refused on its own).
        let mut base: Value = serde_json::from_str(
            r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
            "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128,
            "vocab_size": 300, "max_position_embeddings": 128}"#,
        )
        .unwrap();
        let extra: Value =
            serde_json::from_str(&format!("{{{}}}", extra.trim_start_matches(','))).unwrap();
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        base.to_string()
    }

    /// transformers 5 nests `rope_parameters` by layer type when the config has `layer_types`:
    /// read when every layer uses the same parameters, refused otherwise; a `rope_parameters`,
    /// `rope_scaling` or `rope_type` of the wrong kind is refused naming it (issue 55, fourth
    /// pass, J).
    #[test]
    fn rope_parameters_nested_by_layer_type_are_read_or_refused() {
        let nested = |params: &str, types: &str| {
            config(&llama_with(&format!(
                r#", "layer_types": {types}, "rope_parameters": {params}"#
            )))
        };
        let full = r#"{"full_attention": {"rope_type": "default", "rope_theta": 1e6}}"#;
        let c = nested(full, r#"["full_attention", "full_attention"]"#).unwrap();
        assert_eq!((c.rope_base, c.rope_thetas), (1e6, None));
        let linear = r#"{"full_attention": {"rope_type": "linear", "factor": 2.0}}"#;
        let c = config(&llama_with(&format!(r#", "rope_parameters": {linear}"#))).unwrap();
        assert_eq!(c.rope_thetas.unwrap()[0], 0.5);
        let both = r#"{"full_attention": {"rope_theta": 1e6},
            "sliding_attention": {"rope_theta": 1e6}}"#;
        assert_eq!(
            config(&llama_with(&format!(r#", "rope_parameters": {both}"#)))
                .unwrap()
                .rope_base,
            1e6
        );
        for (json, want) in [
            (
                nested(
                    r#"{"full_attention": {"rope_type": "yarn", "factor": 4.0}}"#,
                    r#"["full_attention", "full_attention"]"#,
                ),
                "rope_parameters.full_attention.rope_type \"yarn\"",
            ),
            (
                config(&llama_with(
                    r#", "rope_parameters": {"full_attention": {"rope_theta": 1e6},
                    "sliding_attention": {"rope_theta": 1e4}}"#,
                )),
                "rope_parameters.sliding_attention is for a layer type no layer has",
            ),
            (
                nested(
                    r#"{"other": {"rope_theta": 1e6}}"#,
                    r#"["full_attention", "full_attention"]"#,
                ),
                "rope_parameters.other is an object, but only layer types",
            ),
            // Without layer_types every layer is full attention: a sliding entry alone is
            // none of theirs; a nest beside a flat base says two things (ninth pass, S4).
            (
                config(&llama_with(
                    r#", "rope_parameters": {"sliding_attention": {"rope_theta": 5e5}}"#,
                )),
                "no entry for layer type \"full_attention\"",
            ),
            (
                config(&llama_with(
                    r#", "rope_parameters": {"full_attention": {"rope_theta": 5e5},
                    "rope_theta": 1e4}"#,
                )),
                "both entries per layer type and the flat key rope_theta",
            ),
            (
                nested(full, r#"["full_attention", "sliding_attention"]"#),
                "layer_types names \"sliding_attention\"",
            ),
            (
                nested(full, r#"["full_attention"]"#),
                "layer_types lists 1 layers",
            ),
            (
                config(&llama_with(r#", "rope_parameters": "default""#)),
                "rope_parameters is \"default\", not an object",
            ),
            (
                config(&llama_with(r#", "rope_parameters": 5"#)),
                "rope_parameters is 5",
            ),
            (
                config(&llama_with(r#", "rope_parameters": [1]"#)),
                "rope_parameters is [1]",
            ),
            (
                config(&llama_with(r#", "rope_scaling": "linear""#)),
                "rope_scaling is \"linear\"",
            ),
            (
                config(&llama_with(
                    r#", "rope_scaling": {"rope_type": 5, "factor": 2.0}"#,
                )),
                "rope_scaling.rope_type is 5, not a string",
            ),
            (
                config(&llama_with(
                    r#", "rope_scaling": {"rope_type": null, "type": "linear", "factor": 2.0}"#,
                )),
                "rope_scaling.rope_type is null, not a string",
            ),
            (
                config(&llama_with(
                    r#", "rope_scaling": {"rope_type": "default", "type": "linear", "factor": 2.0}"#,
                )),
                "give two RoPE types",
            ),
        ] {
            let err = json.expect_err(want);
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{want}: {err}"
            );
        }
    }

    /// Values of the wrong kind that were read as a default are refused naming the key: a
    /// non-string activation, a `model_type` of another architecture, a non-bool
    /// `ropelab_exact_in_transformers` (issue 55, fourth pass, L).
    #[test]
    fn keys_of_the_wrong_kind_are_refused_not_defaulted() {
        assert!(config(&llama_with(
            r#", "model_type": "llama", "hidden_act": "silu""#
        ))
        .is_ok());
        for (json, want) in [
            (
                llama_with(r#", "hidden_act": 3"#),
                "hidden_act is 3, not a string",
            ),
            (
                llama_with(r#", "hidden_act": "gelu""#),
                "hidden_act \"gelu\" is not supported",
            ),
            (
                NEOX_OLD.replace("\"gelu\"", "1"),
                "hidden_act is 1, not a string",
            ),
            (
                llama_with(r#", "model_type": "qwen2""#),
                "model_type \"qwen2\" does not match architectures \"LlamaForCausalLM\"",
            ),
            (
                r#"{"architectures": ["GPTJForCausalLM"], "n_embd": 64, "n_head": 4,
                "n_layer": 2, "vocab_size": 300, "n_positions": 128, "rotary_dim": 8,
                "ropelab_exact_in_transformers": "false"}"#
                    .into(),
                "ropelab_exact_in_transformers is not true or false",
            ),
        ] {
            let err = config(&json).expect_err(want);
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{want}: {err}"
            );
        }
    }

    /// `torch_dtype` and `dtype` are read (issue 55, H17): a floating-point dtype passes, an
    /// integer one, a non-string, two that disagree and a quantizer's config are refused.
    /// A 5,000-character value is quoted cut to 60 characters (eighth pass, C065); a GPT-J
    /// config without `rotary_dim` takes transformers' default of 64 (J005).
    #[test]
    fn long_values_are_cut_and_a_missing_rotary_dim_is_defaulted() {
        let long = "x".repeat(5000);
        let err = config(&llama_with(&format!(r#", "hidden_act": "{long}""#))).unwrap_err();
        assert!(
            err.contains("...") && err.len() < 400,
            "{} characters",
            err.len()
        );
        let gptj = r#"{"architectures": ["GPTJForCausalLM"], "n_embd": 256, "n_head": 2,
            "n_layer": 2, "vocab_size": 300, "n_positions": 128}"#;
        assert_eq!(config(gptj).unwrap().rope_dim, 64);
    }

    #[test]
    fn a_null_base_or_epsilon_is_refused_not_defaulted() {
        for (extra, want) in [
            (r#", "rope_theta": null"#, "rope_theta is null"),
            (r#", "rms_norm_eps": null"#, "rms_norm_eps is null"),
            // transformers fails on a None activation (ninth pass, S1).
            (r#", "hidden_act": null"#, "hidden_act is null"),
            (r#", "attention_bias": null"#, "attention_bias is null"),
        ] {
            let err = config(&llama_with(extra)).expect_err(want);
            assert!(err.contains(want), "{want}: {err}");
        }
        // GPT-NeoX with a None `use_parallel_residual` runs sequentially in transformers, not
        // as the default says (ninth pass, S2).
        let neox = NEOX_OLD.replace(
            "\"use_parallel_residual\": false",
            "\"use_parallel_residual\": null",
        );
        assert_ne!(neox, NEOX_OLD);
        assert!(config(&neox)
            .unwrap_err()
            .contains("use_parallel_residual is null"));
        // Keys transformers itself defaults from None stay readable as null.
        config(&llama_with(
            r#", "rope_scaling": null, "num_key_value_heads": null"#,
        ))
        .unwrap();
    }

    #[test]
    fn dtype_keys_are_read() {
        for ok in [
            r#", "torch_dtype": "bfloat16""#,
            r#", "dtype": "torch.float16""#,
            r#", "torch_dtype": "float32", "dtype": "auto""#,
        ] {
            config(&llama_with(ok)).unwrap();
        }
        for (bad, want) in [
            (
                r#", "torch_dtype": "int8""#,
                "torch_dtype \"int8\" is not a floating-point",
            ),
            (r#", "dtype": 16"#, "dtype is 16, not a string"),
            (
                r#", "torch_dtype": "float32", "dtype": "bfloat16""#,
                "torch_dtype \"float32\" and dtype \"bfloat16\" disagree",
            ),
            (
                r#", "quantization_config": {"bits": 4}"#,
                "quantization_config",
            ),
        ] {
            let err = config(&llama_with(bad)).expect_err(want);
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    /// Each message names the key at fault and its real problem: a head_dim of 0 (not the
    /// rotated fraction), a layer count of 0 (not the tensors), a sliding window that is not a
    /// number (not its length), a context of 0 (issue 55, fourth pass, I and N).
    #[test]
    fn messages_name_the_real_key_and_problem() {
        for (json, want, not) in [
            (
                llama_with(r#", "head_dim": 0"#),
                "head_dim must be positive",
                "partial_rotary",
            ),
            (
                llama_with(r#", "num_hidden_layers": 0"#),
                "num_hidden_layers must be positive",
                "18446744073709551615",
            ),
            (
                llama_with(r#", "sliding_window": "4096""#)
                    .replace("LlamaForCausalLM", "MistralForCausalLM"),
                "sliding_window is \"4096\", not an unsigned integer",
                "shorter",
            ),
            (
                llama_with(r#", "max_position_embeddings": 0"#),
                "max_position_embeddings must be positive",
                "sliding",
            ),
            // A whole-number float is no layer count transformers takes (eighteenth pass,
            // HB7): refused, showing the value.
            (
                llama_with(r#", "num_hidden_layers": 2.0"#),
                "num_hidden_layers is 2.0, not an unsigned integer",
                "missing",
            ),
            (
                NEOX_OLD.replace(
                    "\"max_position_embeddings\": 128",
                    "\"max_position_embeddings\": 0",
                ),
                "max_position_embeddings must be positive",
                "sliding",
            ),
        ] {
            let err = config(&json).expect_err(want);
            assert!(err.contains(want) && !err.contains(not), "{want}: {err}");
        }
    }

    /// The tiny GPT-J config.json of the unit tests with `extra` keys added.
    fn gptj_with(extra: &str) -> String {
        format!(
            r#"{{"architectures": ["GPTJForCausalLM"], "n_embd": 64, "n_head": 4,
            "n_layer": 2, "vocab_size": 300, "n_positions": 128, "rotary_dim": 8{extra}}}"#
        )
    }

    /// GPT-J's RoPE is base 10,000 unscaled whatever the config says (transformers): a
    /// `rope_theta`, `rope_scaling` or `rope_parameters` asking for another is refused naming
    /// the key, not ignored; one saying what GPT-J does loads (adversarial pass 5, S5).
    #[test]
    fn gptj_rope_keys_it_would_ignore_are_refused() {
        for fine in [
            "",
            r#", "rope_theta": 10000"#,
            r#", "rope_scaling": null"#,
            r#", "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}"#,
        ] {
            let c = config(&gptj_with(fine)).unwrap_or_else(|e| panic!("{fine}: {e}"));
            assert_eq!((c.rope_base, c.rope_thetas), (10_000.0, None));
        }
        for (extra, key) in [
            (r#", "rope_theta": 500"#, "rope_theta is 500"),
            (
                r#", "rope_scaling": {"rope_type": "linear", "factor": 2.0}"#,
                "rope_scaling is",
            ),
            (
                r#", "rope_scaling": {"type": "yarn", "factor": 4.0}"#,
                "rope_scaling is",
            ),
            (
                r#", "rope_parameters": {"rope_type": "default", "rope_theta": 77}"#,
                "rope_parameters is",
            ),
        ] {
            let err = config(&gptj_with(extra)).expect_err(extra);
            assert!(
                err.contains(key)
                    && err.contains("GPT-J ignores it")
                    && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }

    /// A scaling factor beside `rope_type` "default" (which scales nothing) is refused, in
    /// `rope_parameters` and in `rope_scaling`; a factor of 1 says nothing and loads
    /// (adversarial pass 5, S6).
    #[test]
    fn a_factor_beside_the_default_rope_type_is_refused() {
        let fine = llama_with(r#", "rope_parameters": {"rope_type": "default", "factor": 1.0}"#);
        assert!(config(&fine).unwrap().rope_thetas.is_none());
        for (extra, want) in [
            (
                r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "factor": 4.0}"#,
                "rope_parameters.factor 4 is given with rope_type \"default\"",
            ),
            (
                r#", "rope_scaling": {"rope_type": "default", "factor": 4.0}"#,
                "rope_scaling.factor 4 is given with rope_type \"default\"",
            ),
            (
                r#", "rope_scaling": {"type": "default", "factor": 2.0}"#,
                "rope_scaling.factor 2",
            ),
        ] {
            let err = config(&llama_with(extra)).expect_err(want);
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    /// RoPE bases outside (1, 1e12] and scaling factors outside [1e-6, 1e6] are refused naming
    /// the key (adversarial pass 5, S7); the bounds themselves load.
    #[test]
    fn absurd_rope_bases_and_factors_are_refused() {
        for fine in [
            r#", "rope_theta": 1e12"#,
            r#", "rope_theta": 1.0001"#,
            r#", "rope_scaling": {"rope_type": "linear", "factor": 1e-6}"#,
            r#", "rope_scaling": {"rope_type": "linear", "factor": 1e6}"#,
        ] {
            assert!(config(&llama_with(fine)).is_ok(), "{fine}");
        }
        for (extra, want) in [
            (
                r#", "rope_theta": 1e-300"#,
                "rope_theta 1e-300 is not a RoPE base",
            ),
            (r#", "rope_theta": 1.0"#, "rope_theta 1 is not a RoPE base"),
            (r#", "rope_theta": 1e13"#, "rope_theta 1e13 is not"),
            (
                r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1e300}"#,
                "rope_parameters.rope_theta 1e300 is not",
            ),
            (
                r#", "rope_scaling": {"rope_type": "linear", "factor": 1e-300}"#,
                "rope_scaling.factor 1e-300 is not a RoPE scaling factor",
            ),
            (
                r#", "rope_scaling": {"rope_type": "linear", "factor": 1e7}"#,
                "rope_scaling.factor 10000000 is not a RoPE scaling factor",
            ),
            (
                r#", "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                "low_freq_factor": 1e-30, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}"#,
                "rope_scaling.low_freq_factor 1e-30 is not",
            ),
        ] {
            let err = config(&llama_with(extra)).expect_err(want);
            assert!(
                err.contains(want) && err.contains("config.json") && !err.contains('\n'),
                "{want}: {err}"
            );
        }
        let neox = NEOX_OLD.replace("\"rotary_emb_base\": 5000", "\"rotary_emb_base\": 0.5");
        let err = config(&neox).unwrap_err();
        assert!(
            err.contains("rotary_emb_base 0.5 is not a RoPE base"),
            "{err}"
        );
    }

    /// `architectures` must name one model class: two different ones (which the weights are
    /// is unclear), a string, an empty list and a missing key are refused saying so; a class
    /// given twice is one class (adversarial pass 5, S14 and U5).
    #[test]
    fn architectures_must_name_one_class() {
        let arch =
            |value: &str| llama_with("").replace(r#""architectures":["LlamaForCausalLM"]"#, value);
        assert!(config(&llama_with("")).is_ok());
        assert!(config(&arch(
            r#""architectures":["LlamaForCausalLM","LlamaForCausalLM"]"#
        ))
        .is_ok());
        for (value, want) in [
            (
                r#""architectures":["LlamaForCausalLM","GPTJForCausalLM"]"#,
                "architectures lists two model classes, \"LlamaForCausalLM\" and \"GPTJForCausalLM\"",
            ),
            (
                r#""architectures":["LlamaForCausalLM","Qwen2ForCausalLM"]"#,
                "two model classes",
            ),
            (
                r#""architectures":"LlamaForCausalLM""#,
                "architectures is \"LlamaForCausalLM\", not a list",
            ),
            (r#""architectures":[]"#, "architectures is an empty list"),
            (r#""architectures":[5]"#, "architectures holds 5"),
            (r#""model_type":"llama""#, "key architectures is missing"),
        ] {
            let json = arch(value);
            assert_ne!(json, llama_with(""), "the edit reaches the key");
            let err = config(&json).expect_err(want);
            assert!(err.contains(want) && err.contains("config.json"), "{want}: {err}");
        }
    }
}
