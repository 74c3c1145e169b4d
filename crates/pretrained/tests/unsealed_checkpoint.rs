//! A ropelab checkpoint read without its manifest (`--force`, which this binary sets for all
//! its tests) is still read as one model: its `config.json` must say what its `ropelab.json`
//! trained (sixth adversarial pass, B56).

use candle_core::Device;
use ropelab_model::checkpoint::{hf_config, save_weights};
use ropelab_model::{GptJ, ModelConfig, PositionEncoding};

/// A checkpoint of `config` with its `config.json` (edited by `edit`) and `ropelab.json`, and
/// no manifest.
fn unsealed(config: &ModelConfig, edit: impl Fn(&mut serde_json::Value)) -> tempfile::TempDir {
    let model = GptJ::new(config.clone(), 3, &Device::Cpu).unwrap();
    let dir = tempfile::tempdir().unwrap();
    save_weights(&model, &dir.path().join("model.safetensors")).unwrap();
    let mut json = hf_config(config);
    edit(&mut json);
    std::fs::write(dir.path().join("config.json"), json.to_string()).unwrap();
    let run = serde_json::json!({ "model": config });
    std::fs::write(dir.path().join("ropelab.json"), run.to_string()).unwrap();
    dir
}

#[test]
fn config_json_must_say_what_ropelab_json_trained() {
    ropelab_io::allow_unsealed(true);
    let open = |dir: &tempfile::TempDir| {
        ropelab_pretrained::llama::Llama::open(dir.path(), &Device::Cpu).map(|_| ())
    };
    let gptj = ModelConfig::tiny(PositionEncoding::gptj(4));
    open(&unsealed(&gptj, |_| {})).expect("an unedited unsealed checkpoint is read");
    // Trained with base 500 (which transformers' GPT-J cannot compute), relabelled as exact:
    // it would be read with base 10,000.
    let mut other = serde_json::to_value(&gptj).unwrap();
    other["position"]["base"] = 500.0.into();
    let other: ModelConfig = serde_json::from_value(other).unwrap();
    let relabelled = unsealed(&other, |j| j["ropelab_exact_in_transformers"] = true.into());
    let err = open(&relabelled)
        .expect_err("a relabelled base was read")
        .to_string();
    assert!(
        err.contains("ropelab_exact_in_transformers is true but ropelab.json's model gives false")
            && err.contains("\"base\":500"),
        "{err}"
    );
    let wider = unsealed(&gptj, |j| j["rotary_dim"] = 2.into());
    let err = open(&wider)
        .expect_err("an edited rotary_dim was read")
        .to_string();
    assert!(
        err.contains("config.json") && err.contains("rotary_dim is 2 but ropelab.json"),
        "{err}"
    );
}
