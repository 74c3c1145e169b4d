//! Saving and loading weights as safetensors with Hugging Face GPT-J names, and the
//! `config.json` that `transformers.GPTJForCausalLM` loads. Files are written to a temporary
//! name in the target directory and renamed, so a crash never leaves a half-written file.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde_json::json;

use crate::{GptJ, ModelConfig, ModelError, Result};

/// Positions the Hugging Face config allows (GPT-J precomputes a sin/cos table this long).
pub const HF_N_POSITIONS: usize = 16_384;

/// Writes named tensors to `path` atomically.
pub fn save_tensors(tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    ropelab_io::write_atomic_with(path, |tmp| {
        candle_core::safetensors::save(tensors, tmp).map_err(std::io::Error::other)
    })
    .map_err(|e| ModelError::checkpoint(path, format!("cannot write: {e}")))?;
    Ok(())
}

/// Reads every tensor of a safetensors file.
pub fn load_tensors(path: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    if !path.is_file() {
        return Err(ModelError::checkpoint(path, "no such file"));
    }
    candle_core::safetensors::load(path, device)
        .map_err(|e| ModelError::checkpoint(path, format!("not a readable safetensors file: {e}")))
}

/// Saves the model's weights (Hugging Face GPT-J names) to `path`. A tied model also writes
/// `lm_head.weight` (a copy of the embedding) so that Hugging Face loads it unchanged.
pub fn save_weights(model: &GptJ, path: &Path) -> Result<()> {
    let mut tensors: HashMap<String, Tensor> = model
        .named_vars()
        .into_iter()
        .map(|(name, var)| (name, var.as_tensor().clone()))
        .collect();
    if model.config().tied_embeddings {
        let wte = tensors["transformer.wte.weight"].clone();
        tensors.insert("lm_head.weight".into(), wte);
    }
    save_tensors(&tensors, path)
}

/// Loads weights saved by [`save_weights`] (or by Hugging Face) for `config`.
///
/// A weight that is not a finite number is refused, naming the tensor: no training step writes
/// one (a non-finite loss stops training), and a model holding one answers with NaN everywhere
/// (seventeenth pass, SILENT-7).
pub fn load_weights(config: ModelConfig, path: &Path, device: &Device) -> Result<GptJ> {
    let tensors = load_tensors(path, device)?;
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    for name in names {
        // [numel]
        let values = tensors[name]
            .flatten_all()?
            .to_dtype(candle_core::DType::F32)?
            .to_vec1::<f32>()?;
        if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
            return Err(ModelError::checkpoint(
                path,
                format!(
                    "tensor {name} holds {bad}, no weight a trained model has (a damaged or \
                     edited checkpoint)"
                ),
            ));
        }
    }
    GptJ::from_named(config, tensors, path, device)
}

/// The Hugging Face `config.json` for this model. `ropelab_exact_in_transformers` says whether
/// transformers computes exactly this model (it knows only uniform base-10,000 interleaved RoPE).
pub fn hf_config(config: &ModelConfig) -> serde_json::Value {
    let rotary_dim = config
        .layer_position(0)
        .rotation()
        .map_or(config.d_head(), |r| r.rotary_dim);
    json!({
        "architectures": ["GPTJForCausalLM"],
        "model_type": "gptj",
        "vocab_size": config.vocab_size,
        "n_positions": HF_N_POSITIONS,
        "n_embd": config.d_model,
        "n_layer": config.n_layers,
        "n_head": config.n_heads,
        "rotary_dim": rotary_dim,
        "n_inner": config.d_mlp,
        "activation_function": "gelu",
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "layer_norm_epsilon": config.ln_eps,
        "initializer_range": 0.02,
        "tie_word_embeddings": false,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "pad_token_id": 0,
        "use_cache": false,
        "torch_dtype": "float32",
        "ropelab_exact_in_transformers": config.hf_exact(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A weight that is no finite number is refused by name; the saved model loads.
    #[test]
    fn non_finite_weights_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = ModelConfig::tiny(crate::PositionEncoding::None);
        let model = GptJ::new(config.clone(), 0, &Device::Cpu).unwrap();
        let path = dir.path().join("model.safetensors");
        save_weights(&model, &path).unwrap();
        load_weights(config.clone(), &path, &Device::Cpu).unwrap();
        let mut tensors = load_tensors(&path, &Device::Cpu).unwrap();
        let name = "transformer.h.0.attn.q_proj.weight".to_string();
        let shape = tensors[&name].dims().to_vec();
        let mut values = tensors[&name]
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        values[3] = f32::NAN;
        tensors.insert(name, Tensor::from_vec(values, shape, &Device::Cpu).unwrap());
        save_tensors(&tensors, &path).unwrap();
        let err = load_weights(config, &path, &Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("transformer.h.0.attn.q_proj.weight holds NaN"),
            "{err}"
        );
    }

    /// Weights follow the umask like every other file (the safetensors writer's own private
    /// temporary file must not leave its 0600 on them).
    #[cfg(unix)]
    #[test]
    fn saved_weights_have_the_umask_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"x").unwrap();
        let tensors = HashMap::from([(
            "w".to_string(),
            Tensor::zeros((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap(),
        )]);
        let path = dir.path().join("model.safetensors");
        save_tensors(&tensors, &path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), mode(&plain));
        assert_eq!(load_tensors(&path, &Device::Cpu).unwrap().len(), 1);
    }
}
