//! ropelab's GPT-J against Hugging Face `GPTJForCausalLM` on the same weights: the fixture in
//! fixtures/gptj/ was made by fixtures/gptj/make_fixture.py (transformers, eager attention).

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use ropelab_model::checkpoint::{load_tensors, load_weights};
use ropelab_model::{Hooks, ModelConfig, PositionEncoding};

/// max |x| over all elements.
fn max_abs(t: &Tensor) -> f32 {
    t.abs().unwrap().max_all().unwrap().to_scalar().unwrap()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/gptj")
        .join(name)
}

/// The ropelab config of a transformers GPT-J config.json.
fn config_from_hf(dir: &Path) -> ModelConfig {
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let hf: serde_json::Value = serde_json::from_str(&text).unwrap();
    let n = |key: &str| hf[key].as_u64().unwrap_or_else(|| panic!("{key}")) as usize;
    ModelConfig {
        vocab_size: n("vocab_size"),
        n_layers: n("n_layer"),
        n_heads: n("n_head"),
        d_model: n("n_embd"),
        d_mlp: n("n_inner"),
        ln_eps: hf["layer_norm_epsilon"].as_f64().unwrap(),
        dropout: 0.0,
        tied_embeddings: false,
        position: PositionEncoding::gptj(n("rotary_dim")),
        layer_positions: vec![],
        attention: ropelab_model::AttentionKind::Softmax,
        mlp: true,
        layer_norm: true,
        head: ropelab_model::Head::Lm,
    }
}

#[test]
fn logits_match_transformers() {
    let dev = Device::Cpu;
    for name in ["partial_rotary", "one_head_full_rotary"] {
        let dir = fixture(name);
        let config = config_from_hf(&dir);
        let model = load_weights(config, &dir.join("model.safetensors"), &dev).unwrap();
        let cases = load_tensors(&dir.join("cases.safetensors"), &dev).unwrap();
        let mut checked = 0;
        for len in [5, 17, 40] {
            let ids = cases[&format!("ids_{len}")].to_dtype(DType::U32).unwrap();
            let want = &cases[&format!("logits_{len}")];
            let got = model.forward(&ids, &mut Hooks::new(), None).unwrap();
            assert_eq!(got.dims(), want.dims());
            let diff = max_abs(&(got - want).unwrap());
            assert!(diff < 1e-4, "{name}, length {len}: max |diff| = {diff}");
            eprintln!("{name}, length {len}: max |logit diff| = {diff:e}");
            checked += ids.dim(0).unwrap();
        }
        assert_eq!(checked, 300);
    }
}

#[test]
fn the_comparison_detects_a_wrong_rotary_layout() {
    // Same weights, NeoX half-split planes: the logits must differ clearly.
    let dev = Device::Cpu;
    let dir = fixture("partial_rotary");
    let mut config = config_from_hf(&dir);
    config.position = PositionEncoding::rope(10_000.0, 8, ropelab_model::RopeLayout::HalfSplit);
    let model = load_weights(config, &dir.join("model.safetensors"), &dev).unwrap();
    let cases = load_tensors(&dir.join("cases.safetensors"), &dev).unwrap();
    let ids = cases["ids_17"].to_dtype(DType::U32).unwrap();
    let got = model.forward(&ids, &mut Hooks::new(), None).unwrap();
    let diff = max_abs(&(got - &cases["logits_17"]).unwrap());
    assert!(diff > 1e-2, "a wrong layout went unnoticed: {diff}");
}
