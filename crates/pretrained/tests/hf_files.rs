//! A Hugging Face model directory whose `config.json` or safetensors header is corrupted never
//! makes the loader panic: it loads, or is refused with an error naming a file (the same
//! mutations as the GGUF loader's, `gguf_files.rs`; `fuzz/` runs both parsers for longer).

use std::path::{Path, PathBuf};

use candle_core::Device;
use proptest::prelude::*;
use ropelab_pretrained::load_model;

fn llama() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rope_models/llama")
}

/// A copy of the tiny Llama directory with `file` replaced by `bytes`.
fn with_file(file: &str, bytes: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(llama().join(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join(file), bytes).unwrap();
    dir
}

/// Loads the directory: Ok, or an error that names one of its files (or the directory).
fn loads_or_names_a_file(dir: &Path) -> std::result::Result<(), String> {
    match load_model(Some(dir), &Device::Cpu) {
        Ok(_) => Ok(()),
        Err(e) => {
            let text = e.to_string();
            if text.contains(&dir.display().to_string()) && !text.is_empty() {
                Ok(())
            } else {
                Err(text)
            }
        }
    }
}

/// The length of the safetensors header (its first 8 bytes, little-endian) plus those 8.
fn header_end(bytes: &[u8]) -> usize {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (8 + n).min(bytes.len())
}

#[test]
fn the_unmutated_directory_loads() {
    let config = std::fs::read(llama().join("config.json")).unwrap();
    let dir = with_file("config.json", &config);
    assert!(load_model(Some(dir.path()), &Device::Cpu).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// Bytes of `config.json` changed, cut or inserted.
    #[test]
    fn a_corrupted_config_never_panics(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let mut bytes = std::fs::read(llama().join("config.json")).unwrap();
        for (i, b) in edits {
            let at = i.index(bytes.len());
            bytes[at] = b;
        }
        if do_cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        let dir = with_file("config.json", &bytes);
        prop_assert!(loads_or_names_a_file(dir.path()).is_ok());
    }

    /// Bytes of the safetensors header (its length and its JSON) changed, or the file cut.
    #[test]
    fn a_corrupted_safetensors_header_never_panics(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let mut bytes = std::fs::read(llama().join("model.safetensors")).unwrap();
        let end = header_end(&bytes);
        for (i, b) in edits {
            let at = i.index(end);
            bytes[at] = b;
        }
        if do_cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        let dir = with_file("model.safetensors", &bytes);
        prop_assert!(loads_or_names_a_file(dir.path()).is_ok());
    }
}

/// A config value no model has is refused, naming config.json (or the weights file that
/// cannot hold such a model), whichever way it is spelled.
#[test]
fn absurd_config_values_are_refused_naming_the_file() {
    let config = std::fs::read_to_string(llama().join("config.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&config).unwrap();
    for (key, value) in [
        ("rope_theta", serde_json::json!(-1.0)),
        ("rope_theta", serde_json::json!(0.0)),
        ("rms_norm_eps", serde_json::json!(-1.0)),
        ("rms_norm_eps", serde_json::json!(1e30)),
        // Zero in f32, a context beyond any model's, and a llama3 original context longer
        // than the model's (seventh pass, H23, H6, H34).
        ("rms_norm_eps", serde_json::json!(1e-300)),
        (
            "max_position_embeddings",
            serde_json::json!(100_000_000_000_000u64),
        ),
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 4096}),
        ),
        ("num_attention_heads", serde_json::json!(0)),
        ("hidden_size", serde_json::json!(1u64 << 40)),
        ("num_hidden_layers", serde_json::json!(1u64 << 40)),
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "unknown-kind", "factor": 2.0}),
        ),
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "linear", "factor": -2.0}),
        ),
        ("eos_token_id", serde_json::json!(5000)),
        ("eos_token_id", serde_json::json!([0, 5000])),
        ("bos_token_id", serde_json::json!(-1)),
    ] {
        let mut j = json.clone();
        j[key] = value.clone();
        let dir = with_file("config.json", serde_json::to_string(&j).unwrap().as_bytes());
        let err = load_model(Some(dir.path()), &Device::Cpu)
            .err()
            .unwrap_or_else(|| panic!("{key} = {value} was accepted"))
            .to_string();
        assert!(
            err.contains("config.json") || err.contains("model.safetensors"),
            "{key} = {value}: {err}"
        );
    }
}

/// A weight holding NaN is refused naming the file and the tensor, instead of a model that
/// silently answers nothing.
#[test]
fn a_nan_weight_is_refused_naming_the_tensor() {
    let mut bytes = std::fs::read(llama().join("model.safetensors")).unwrap();
    let end = header_end(&bytes);
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..end]).unwrap();
    let (name, _) = header
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, v)| v["data_offsets"][0] == 0)
        .unwrap();
    assert_eq!(header[name]["dtype"], "F32");
    bytes[end..end + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let dir = with_file("model.safetensors", &bytes);
    let err = load_model(Some(dir.path()), &Device::Cpu)
        .err()
        .expect("a NaN weight was accepted")
        .to_string();
    assert!(
        err.contains("model.safetensors") && err.contains(name.as_str()) && err.contains("NaN"),
        "{err}"
    );
}

/// A tensor the model does not read (a bias or norm of another variant) is refused naming
/// it, since the model built without it would compute another function; the buffers
/// transformers recomputes (`rotary_emb.inv_freq`) are allowed (issue 55, third pass).
#[test]
fn a_tensor_the_model_does_not_read_is_refused_naming_it() {
    let with_extra = |name: &str| {
        let mut tensors =
            candle_core::safetensors::load(llama().join("model.safetensors"), &Device::Cpu)
                .unwrap();
        let t = candle_core::Tensor::zeros(64, candle_core::DType::F32, &Device::Cpu).unwrap();
        tensors.insert(name.to_owned(), t);
        let dir = tempfile::tempdir().unwrap();
        for file in ["config.json", "tokenizer.json"] {
            std::fs::copy(llama().join(file), dir.path().join(file)).unwrap();
        }
        candle_core::safetensors::save(&tensors, dir.path().join("model.safetensors")).unwrap();
        dir
    };
    let buffer = with_extra("model.layers.0.self_attn.rotary_emb.inv_freq");
    assert!(load_model(Some(buffer.path()), &Device::Cpu).is_ok());
    let extra = with_extra("model.layers.1.self_attn.o_proj.bias");
    let err = load_model(Some(extra.path()), &Device::Cpu)
        .err()
        .expect("an unread tensor was accepted")
        .to_string();
    assert!(
        err.contains(&extra.path().display().to_string())
            && err.contains("model.layers.1.self_attn.o_proj.bias"),
        "{err}"
    );
}

/// A tokenizer that can produce an id beyond the model's vocabulary is refused when it is
/// loaded, naming tokenizer.json, not on the first prompt that uses the token.
#[test]
fn a_tokenizer_id_beyond_the_vocabulary_is_refused_at_load() {
    let text = std::fs::read_to_string(llama().join("tokenizer.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let vocab = json["model"]["vocab"].as_object_mut().unwrap();
    let (token, _) = vocab.iter().max_by_key(|(_, v)| v.as_u64()).unwrap();
    let token = token.clone();
    // Within the vocabulary: loads (the edit reaches the table).
    vocab.insert(token.clone(), 299.into());
    let same = with_file("tokenizer.json", json.to_string().as_bytes());
    assert!(load_model(Some(same.path()), &Device::Cpu).is_ok());
    json["model"]["vocab"][&token] = 300.into();
    let dir = with_file("tokenizer.json", json.to_string().as_bytes());
    let err = load_model(Some(dir.path()), &Device::Cpu)
        .err()
        .expect("an id beyond the vocabulary was accepted")
        .to_string();
    assert!(
        err.contains("tokenizer.json") && err.contains("id 300"),
        "{err}"
    );
}

/// The tiny Llama directory with its weights in two shards and an index: `edit` changes the
/// shards' tensors (by shard) and the index's `weight_map` before they are written.
fn sharded(
    edit: impl FnOnce(
        &mut [std::collections::HashMap<String, candle_core::Tensor>; 2],
        &mut serde_json::Map<String, serde_json::Value>,
    ),
) -> tempfile::TempDir {
    let tensors =
        candle_core::safetensors::load(llama().join("model.safetensors"), &Device::Cpu).unwrap();
    let files = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    let mut shards: [std::collections::HashMap<_, _>; 2] = Default::default();
    let mut map = serde_json::Map::new();
    for (name, t) in tensors {
        // Blocks in the second shard, the rest in the first.
        let s = usize::from(name.starts_with("model.layers."));
        map.insert(name.clone(), files[s].into());
        shards[s].insert(name, t);
    }
    edit(&mut shards, &mut map);
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(llama().join(file), dir.path().join(file)).unwrap();
    }
    for (shard, file) in shards.iter().zip(files) {
        candle_core::safetensors::save(shard, dir.path().join(file)).unwrap();
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    dir
}

/// Sharded weights must be as the index says: a tensor in two shards (transformers reads the
/// one the index names, the loader took the last), a tensor in a shard the index does not
/// name for it, and an index entry no shard holds are refused naming the tensor (issue 55,
/// fourth pass, K).
#[test]
fn sharded_weights_must_follow_the_index() {
    let fine = sharded(|_, _| {});
    assert!(load_model(Some(fine.path()), &Device::Cpu).is_ok());
    // A shard of another set beside the listed ones (seventh pass, SH_stray).
    let stray = sharded(|_, _| {});
    std::fs::copy(
        stray.path().join("model-00001-of-00002.safetensors"),
        stray.path().join("model-00003-of-00003.safetensors"),
    )
    .unwrap();
    let err = load_model(Some(stray.path()), &Device::Cpu)
        .err()
        .expect("a stray shard was accepted")
        .to_string();
    assert!(
        err.contains("holds the shard model-00003-of-00003.safetensors, which"),
        "{err}"
    );
    let norm = "model.norm.weight";
    let twice = sharded(|shards, _| {
        let t = shards[0][norm].clone();
        shards[1].insert(norm.into(), t);
    });
    let moved = sharded(|_, map| {
        map.insert(norm.into(), "model-00002-of-00002.safetensors".into());
    });
    let listed = sharded(|_, map| {
        map.insert(
            "model.extra.weight".into(),
            "model-00001-of-00002.safetensors".into(),
        );
    });
    for (dir, name, want) in [
        (&twice, norm, "is in two shards"),
        (
            &moved,
            norm,
            "but weight_map names model-00002-of-00002.safetensors",
        ),
        (&listed, "model.extra.weight", "which does not hold it"),
    ] {
        let err = load_model(Some(dir.path()), &Device::Cpu)
            .err()
            .unwrap_or_else(|| panic!("{want}: accepted"))
            .to_string();
        assert!(
            err.contains(&dir.path().display().to_string())
                && err.contains(name)
                && err.contains(want),
            "{want}: {err}"
        );
    }
}

/// A ropelab checkpoint whose `ropelab.json` is gone but whose manifest is still there is
/// verified against the manifest: an edited config.json is refused without `--force`
/// (issue 55, fourth pass, M).
#[test]
fn a_checkpoint_with_its_manifest_but_no_ropelab_json_is_verified() {
    use ropelab_model::checkpoint::{hf_config, save_weights};
    use ropelab_model::{GptJ, ModelConfig, PositionEncoding};
    let config = ModelConfig::tiny(PositionEncoding::gptj(4));
    let model = GptJ::new(config.clone(), 3, &Device::Cpu).unwrap();
    let dir = tempfile::tempdir().unwrap();
    save_weights(&model, &dir.path().join("model.safetensors")).unwrap();
    let json = serde_json::to_string(&hf_config(&config)).unwrap();
    std::fs::write(dir.path().join("config.json"), &json).unwrap();
    let files = ["config.json", "model.safetensors"];
    ropelab_io::checksum::Manifest::seal(dir.path(), &files).unwrap();
    assert!(ropelab_pretrained::llama::Llama::open(dir.path(), &Device::Cpu).is_ok());
    let mut edited: serde_json::Value = serde_json::from_str(&json).unwrap();
    edited["layer_norm_epsilon"] = 0.5.into();
    std::fs::write(dir.path().join("config.json"), edited.to_string()).unwrap();
    let err = ropelab_pretrained::llama::Llama::open(dir.path(), &Device::Cpu)
        .err()
        .expect("an edited config.json was accepted")
        .to_string();
    assert!(
        err.contains("config.json does not match its checksum"),
        "{err}"
    );
}

/// A context of 0 (`max_position_embeddings`) is refused at load naming the key (issue 55,
/// fourth pass, I).
#[test]
fn a_context_of_zero_is_refused_naming_the_key() {
    let config = std::fs::read_to_string(llama().join("config.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&config).unwrap();
    json["max_position_embeddings"] = 0.into();
    let dir = with_file("config.json", json.to_string().as_bytes());
    let err = load_model(Some(dir.path()), &Device::Cpu)
        .err()
        .expect("a context of 0 was accepted")
        .to_string();
    assert!(
        err.contains("config.json") && err.contains("max_position_embeddings"),
        "{err}"
    );
}

/// A named pipe given as the model is refused without being opened (opening it would block
/// until a writer came; issue 55, third pass). Skipped, saying so, where `mkfifo` is missing.
#[cfg(unix)]
#[test]
fn a_pipe_given_as_the_model_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("model.gguf");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        eprintln!("skipped: mkfifo is not available here");
        return;
    }
    let err = load_model(Some(&fifo), &Device::Cpu)
        .err()
        .expect("a pipe was read as a model")
        .to_string();
    assert!(err.contains("not a regular file or a directory"), "{err}");
}

/// A copy of fixture directory `name` (config.json, model.safetensors, tokenizer.json) with
/// its config.json changed by `edit`.
fn fixture_with_config(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    let from = llama().with_file_name(name);
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(from.join(file), dir.path().join(file)).unwrap();
    }
    let text = std::fs::read_to_string(from.join("config.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut json);
    std::fs::write(dir.path().join("config.json"), json.to_string()).unwrap();
    dir
}

/// The tiny Llama directory with its tensors changed by `edit` before they are written.
fn with_tensors(
    edit: impl FnOnce(&mut std::collections::HashMap<String, candle_core::Tensor>),
) -> tempfile::TempDir {
    let mut tensors =
        candle_core::safetensors::load(llama().join("model.safetensors"), &Device::Cpu).unwrap();
    edit(&mut tensors);
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(llama().join(file), dir.path().join(file)).unwrap();
    }
    candle_core::safetensors::save(&tensors, dir.path().join("model.safetensors")).unwrap();
    dir
}

/// The tiny Llama directory with the JSON header of model.safetensors changed by `edit` (the
/// data after it unchanged: offsets count from the end of the header).
fn with_header(edit: impl FnOnce(&str) -> String) -> tempfile::TempDir {
    let bytes = std::fs::read(llama().join("model.safetensors")).unwrap();
    let end = header_end(&bytes);
    let header = edit(std::str::from_utf8(&bytes[8..end]).unwrap());
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(&bytes[end..]);
    with_file("model.safetensors", &out)
}

/// The one-line error of loading `dir` (model and tokenizer), or a panic naming `what`.
fn refusal(dir: &Path, what: &str) -> String {
    let err = load_model(Some(dir), &Device::Cpu)
        .err()
        .unwrap_or_else(|| panic!("{what} was accepted"))
        .to_string();
    assert!(!err.contains('\n'), "{what}: {err}");
    err
}

/// Finite weights whose activations overflow f32 inside a norm (an embedding scaled by 1e20,
/// one MLP weight of 3e38) would make every normed row 0, finite: no scan of the outputs saw
/// it, and `generate` returned no token. The norm refuses it, on the fused path and off it
/// (adversarial pass 5, S1).
#[test]
fn activations_that_overflow_inside_a_norm_are_refused() {
    use candle_core::Tensor;
    let embed = with_tensors(|t| {
        let e = t.get_mut("model.embed_tokens.weight").unwrap();
        *e = (&*e * 1e20).unwrap();
    });
    let down = with_tensors(|t| {
        let w = t.get_mut("model.layers.0.mlp.down_proj.weight").unwrap();
        let mut v: Vec<f32> = w.flatten_all().unwrap().to_vec1().unwrap();
        v[0] = 3e38;
        *w = Tensor::from_vec(v, w.dims(), &Device::Cpu).unwrap();
    });
    let ids = [5u32, 17, 42, 99];
    for dir in [&embed, &down] {
        let (model, _) = load_model(Some(dir.path()), &Device::Cpu).unwrap();
        for fused in [true, false] {
            let model = ropelab_pretrained::llama::Llama::open(dir.path(), &Device::Cpu)
                .unwrap()
                .with_fused(fused);
            let err = model
                .generate(&ids, 3, &Default::default())
                .err()
                .unwrap_or_else(|| panic!("fused {fused}: generated"))
                .to_string();
            assert!(
                err.contains(&dir.path().display().to_string())
                    && err.contains("overflow f32")
                    && err.contains("mean of squares"),
                "fused {fused}: {err}"
            );
        }
        let input = Tensor::new(&[ids], &Device::Cpu).unwrap();
        let err = model
            .forward(&input, &mut ropelab_model::Hooks::new())
            .expect_err("the hooked forward gave logits")
            .to_string();
        assert!(err.contains("mean of squares"), "{err}");
    }
}

/// A `pad_token_id` outside the vocabulary is refused as `bos_token_id` and `eos_token_id`
/// are (adversarial pass 5, S11).
#[test]
fn a_padding_id_beyond_the_vocabulary_is_refused() {
    let fine = fixture_with_config("llama", |j| j["pad_token_id"] = 299.into());
    assert!(load_model(Some(fine.path()), &Device::Cpu).is_ok());
    let bad = fixture_with_config("llama", |j| j["pad_token_id"] = 99_999.into());
    let err = refusal(bad.path(), "pad_token_id 99999");
    assert!(
        err.contains("config.json")
            && err.contains("pad_token_id 99999 is not a token of the model's vocabulary of 300"),
        "{err}"
    );
    // An id that is no integer is named so, not as beyond the vocabulary (nineteenth pass,
    // U1).
    let float = fixture_with_config("llama", |j| j["bos_token_id"] = 0.0.into());
    let err = refusal(float.path(), "bos_token_id 0.0");
    assert!(
        err.contains("bos_token_id 0.0 is not an unsigned integer"),
        "{err}"
    );
}

/// GPT-J's fixed RoPE (base 10,000, unscaled): a config key asking for another is refused
/// at load, not ignored (adversarial pass 5, S5; the unit tests cover each key).
#[test]
fn a_gptj_directory_asking_for_another_rope_is_refused() {
    let fine = fixture_with_config("gptj", |j| j["rope_theta"] = 10_000.into());
    assert!(load_model(Some(fine.path()), &Device::Cpu).is_ok());
    let bad = fixture_with_config("gptj", |j| j["rope_theta"] = 500.into());
    let err = refusal(bad.path(), "GPT-J rope_theta 500");
    assert!(
        err.contains("config.json")
            && err.contains("rope_theta is 500: transformers' GPT-J ignores it"),
        "{err}"
    );
    // A rotated fraction other than rotary_dim's, which GPT-J ignores (twentieth pass, F-S4);
    // one that agrees with it is read.
    for key in ["partial_rotary_factor", "rotary_pct"] {
        let bad = fixture_with_config("gptj", |j| j[key] = 1.0.into());
        let err = refusal(bad.path(), key);
        assert!(
            err.contains(&format!("{key} is 1.0, but rotary_dim"))
                && err.contains("transformers' GPT-J ignores"),
            "{err}"
        );
    }
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(llama().with_file_name("gptj").join("config.json")).unwrap(),
    )
    .unwrap();
    let fraction = config["rotary_dim"].as_f64().unwrap()
        / (config["n_embd"].as_f64().unwrap() / config["n_head"].as_f64().unwrap());
    let agreeing = fixture_with_config("gptj", |j| j["partial_rotary_factor"] = fraction.into());
    assert!(load_model(Some(agreeing.path()), &Device::Cpu).is_ok());
}

/// A tensor listed twice in a safetensors header (the reader keeps the last) is refused naming
/// it, and a dtype relabelled (F32 declared F16) is refused naming the tensor (adversarial
/// pass 5, S12 and U2).
#[test]
fn safetensors_headers_listing_a_tensor_twice_or_mislabelled_are_refused() {
    let norm = "\"model.norm.weight\":";
    let entry = |h: &str| {
        let at = h.find(norm).unwrap();
        let end = at + h[at..].find('}').unwrap() + 1;
        h[at..end].to_owned()
    };
    let same = with_header(|h| h.to_owned());
    assert!(load_model(Some(same.path()), &Device::Cpu).is_ok());
    let twice = with_header(|h| h.replacen('{', &format!("{{{},", entry(h)), 1));
    let err = refusal(twice.path(), "a tensor listed twice");
    assert!(
        err.contains("model.safetensors")
            && err.contains("the safetensors header")
            && err.contains("model.norm.weight")
            && err.contains("given twice"),
        "{err}"
    );
    let relabelled = with_header(|h| {
        let e = entry(h);
        assert!(e.contains("\"F32\""), "{e}");
        h.replace(&e, &e.replace("\"F32\"", "\"F16\""))
    });
    let err = refusal(relabelled.path(), "F32 declared F16");
    assert!(
        err.contains("model.safetensors")
            && err.contains(
                "tensor model.norm.weight is F16 of shape [64] (128 bytes), but its \
                             data_offsets span 256 bytes"
            ),
        "{err}"
    );
}

/// The shard index must say one thing: a key given twice in it (a tensor placed twice, last
/// wins) is refused naming it, a `weight_map` that is not an object is refused saying so, a
/// shard the index names but the directory lacks is named, and a directory with both
/// model.safetensors and an index is refused naming both (adversarial pass 5, S12, S13, U6).
#[test]
fn an_ambiguous_shard_index_is_refused() {
    let index_of = |dir: &tempfile::TempDir| dir.path().join("model.safetensors.index.json");
    let twice = sharded(|_, _| {});
    let text = std::fs::read_to_string(index_of(&twice)).unwrap();
    let dup = text.replacen(
        "\"weight_map\":{",
        "\"weight_map\":{\"lm_head.weight\":\"model-00001-of-00002.safetensors\",",
        1,
    );
    assert_ne!(dup, text, "the edit reaches the index");
    std::fs::write(index_of(&twice), dup).unwrap();
    let err = refusal(twice.path(), "a tensor placed twice in weight_map");
    assert!(
        err.contains("model.safetensors.index.json")
            && err.contains("lm_head.weight")
            && err.contains("given twice"),
        "{err}"
    );
    let list = sharded(|_, _| {});
    std::fs::write(index_of(&list), r#"{"weight_map": ["lm_head.weight"]}"#).unwrap();
    let err = refusal(list.path(), "a weight_map list");
    assert!(
        err.contains("weight_map is [\"lm_head.weight\"], not an object"),
        "{err}"
    );
    let lost = sharded(|_, _| {});
    std::fs::remove_file(lost.path().join("model-00002-of-00002.safetensors")).unwrap();
    let err = refusal(lost.path(), "a missing shard");
    assert!(
        err.contains("in model-00002-of-00002.safetensors, which is missing"),
        "{err}"
    );
    let both = sharded(|_, _| {});
    std::fs::copy(
        llama().join("model.safetensors"),
        both.path().join("model.safetensors"),
    )
    .unwrap();
    let err = refusal(both.path(), "model.safetensors beside an index");
    assert!(
        err.contains(&both.path().display().to_string())
            && err.contains("both model.safetensors and model.safetensors.index.json"),
        "{err}"
    );
    // Shards beside model.safetensors with no index: not read as the single file alone
    // (sixth pass, h13); shards alone, with no index, say what is missing.
    std::fs::remove_file(index_of(&both)).unwrap();
    let err = refusal(both.path(), "model.safetensors beside unindexed shards");
    assert!(
        err.contains("both model.safetensors and the shard model-00001-of-00002.safetensors"),
        "{err}"
    );
    std::fs::remove_file(both.path().join("model.safetensors")).unwrap();
    let err = refusal(both.path(), "shards without their index");
    assert!(
        err.contains("the shard model-00001-of-00002.safetensors is there, but not")
            && err.contains("model.safetensors.index.json"),
        "{err}"
    );
}

/// config.json, tokenizer.json or model.safetensors that is a directory, a named pipe or a
/// link to a device is refused saying what it is, not reported missing (adversarial pass 5,
/// U1). The pipe is skipped, saying so, where `mkfifo` is missing.
#[cfg(unix)]
#[test]
fn a_model_file_that_is_not_a_regular_file_is_named_as_such() {
    for file in ["config.json", "tokenizer.json", "model.safetensors"] {
        let dir = with_file(file, b"");
        let path = dir.path().join(file);
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let err = refusal(dir.path(), "a directory");
        assert!(
            err.contains(&path.display().to_string())
                && err.contains("is a directory, not a regular file"),
            "{file}: {err}"
        );
        std::fs::remove_dir(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let err = refusal(dir.path(), "a link to /dev/zero");
        assert!(
            err.contains("is a device, not a regular file"),
            "{file}: {err}"
        );
        std::fs::remove_file(&path).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            eprintln!("skipped: mkfifo is not available here");
            continue;
        }
        let err = refusal(dir.path(), "a pipe");
        assert!(
            err.contains("is a named pipe, not a regular file"),
            "{file}: {err}"
        );
    }
}

/// tokenizer.json tables the tokenizers crate reads otherwise than they say: two tokens
/// sharing one id, and an added token whose declared id the crate renumbers (reported with
/// the declared id; adversarial pass 5, S10 and U7).
#[test]
fn tokenizer_ids_that_would_be_read_otherwise_are_refused() {
    let text = std::fs::read_to_string(llama().join("tokenizer.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let token_of = |id: u64| {
        json["model"]["vocab"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, v)| v.as_u64() == Some(id))
            .unwrap()
            .0
            .clone()
    };
    let mut shared = json.clone();
    shared["model"]["vocab"][&token_of(2)] = 1.into();
    let dir = with_file("tokenizer.json", shared.to_string().as_bytes());
    let err = refusal(dir.path(), "two tokens sharing id 1");
    assert!(
        err.contains("tokenizer.json") && err.contains("share id 1"),
        "{err}"
    );
    let mut added = json.clone();
    added["added_tokens"].as_array_mut().unwrap().push(
        serde_json::json!({"id": 500, "content": "<x>", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}),
    );
    let dir = with_file("tokenizer.json", added.to_string().as_bytes());
    let err = refusal(dir.path(), "an added token declared 500");
    assert!(
        err.contains("tokenizer.json")
            && err
                .contains("added token \"<x>\" declares id 500, but the tokenizer numbers it 300"),
        "{err}"
    );
    // A token given twice in model.vocab (sixth pass, S3): the crate keeps the last.
    let twice = text.replacen("\"vocab\": {", "\"vocab\": {\"h\": 299, ", 1);
    assert_ne!(twice, text, "the edit reaches model.vocab");
    let dir = with_file("tokenizer.json", twice.as_bytes());
    let err = refusal(dir.path(), "a token given twice");
    assert!(
        err.contains("tokenizer.json") && err.contains("give it once"),
        "{err}"
    );
    // A tokenizer of another model type is named with the file (earlier passes, B11).
    let mut wordpiece = json.clone();
    wordpiece["model"]["type"] = "WordPiece".into();
    let dir = with_file("tokenizer.json", wordpiece.to_string().as_bytes());
    let err = refusal(dir.path(), "a WordPiece tokenizer");
    assert!(
        err.contains("tokenizer.json: model.type \"WordPiece\" is not supported"),
        "{err}"
    );
    // A string merge among pair merges is named (sixth pass, U4).
    let mut mixed = json.clone();
    mixed["model"]["merges"][1] = "a r".into();
    let dir = with_file("tokenizer.json", mixed.to_string().as_bytes());
    let err = refusal(dir.path(), "a string merge among pairs");
    assert!(
        err.contains("model.merges[1] is \"a r\", but the merges are pairs"),
        "{err}"
    );
    // A merge given twice has two ranks (the crate keeps the last, llama.cpp the first):
    // refused naming both (thirteenth pass, S1).
    let mut twice = json.clone();
    let first = twice["model"]["merges"][0].clone();
    twice["model"]["merges"].as_array_mut().unwrap().push(first);
    let last = twice["model"]["merges"].as_array().unwrap().len() - 1;
    let dir = with_file("tokenizer.json", twice.to_string().as_bytes());
    let err = refusal(dir.path(), "a merge given twice");
    assert!(
        err.contains(&format!(
            "model.merges[0] and model.merges[{last}] are the same merge"
        )),
        "{err}"
    );
    // A subword prefix (the tokenizers crate panicked on it) and BPE dropout (no rerun would
    // repeat) are refused naming the key (ninth pass, P1, S5).
    for (key, value, want) in [
        (
            "continuing_subword_prefix",
            serde_json::json!("##"),
            "model.continuing_subword_prefix is \"##\"",
        ),
        (
            "end_of_word_suffix",
            serde_json::json!("</w>"),
            "model.end_of_word_suffix",
        ),
        ("dropout", serde_json::json!(0.5), "model.dropout is 0.5"),
    ] {
        let mut edited = json.clone();
        edited["model"][key] = value;
        let dir = with_file("tokenizer.json", edited.to_string().as_bytes());
        let err = refusal(dir.path(), key);
        assert!(
            err.contains("tokenizer.json") && err.contains(want),
            "{err}"
        );
    }
}

/// A post-processor that puts BOS before every text (Llama 3's) is honoured, as
/// `transformers` does by default: each prompt begins with it (ninth pass: it was dropped).
/// One that puts a token after every text is refused (a prompt and its answer would not share
/// the prompt's tokens), and truncation or padding settings never cut or pad a prompt.
#[test]
fn a_tokenizer_post_processor_is_honoured_or_refused() {
    use ropelab_pretrained::tokenizer::GgufTokenizer;
    let text = std::fs::read_to_string(llama().join("tokenizer.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let special = |name: &str| serde_json::json!({"SpecialToken": {"id": name, "type_id": 0}});
    let sequence = serde_json::json!({"Sequence": {"id": "A", "type_id": 0}});
    let template = |single: Vec<serde_json::Value>| {
        serde_json::json!({
            "type": "TemplateProcessing",
            "single": single,
            "pair": [sequence.clone(), {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<|endoftext|>": {
                "id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]
            }}
        })
    };
    let load = |edited: &serde_json::Value| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, edited.to_string()).unwrap();
        GgufTokenizer::from_file(&path, None).map_err(|e| e.to_string())
    };
    let plain = load(&json).unwrap().encode("a b ab").unwrap();
    assert!(!plain.is_empty() && plain[0] != 0, "{plain:?}");

    let mut bos = json.clone();
    bos["post_processor"] = template(vec![special("<|endoftext|>"), sequence.clone()]);
    let with_bos = load(&bos).unwrap().encode("a b ab").unwrap();
    assert_eq!(with_bos[0], 0, "{with_bos:?}");
    assert_eq!(&with_bos[1..], &plain[..]);

    let mut eos = json.clone();
    eos["post_processor"] = template(vec![sequence.clone(), special("<|endoftext|>")]);
    let err = load(&eos).err().expect("a trailing token was accepted");
    assert!(
        err.contains("tokenizer.json") && err.contains("after every text"),
        "{err}"
    );

    let mut cut = json.clone();
    cut["truncation"] = serde_json::json!({
        "direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 0
    });
    cut["padding"] = serde_json::json!({
        "strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": null,
        "pad_id": 0, "pad_type_id": 0, "pad_token": "<|endoftext|>"
    });
    assert_eq!(load(&cut).unwrap().encode("a b ab").unwrap(), plain);

    // A special id beyond the model's vocabulary is named at load (tenth pass, T2oov): it is
    // not the vocabulary's id of its token (twentieth pass, F-S2).
    let mut beyond = bos.clone();
    beyond["post_processor"]["special_tokens"]["<|endoftext|>"]["ids"] = serde_json::json!([999]);
    let dir = with_file("tokenizer.json", beyond.to_string().as_bytes());
    let err = refusal(dir.path(), "a special id beyond the vocabulary");
    assert!(
        err.contains("tokenizer.json")
            && err.contains("declares id 999, but the vocabulary numbers it 0"),
        "{err}"
    );
}

/// A 5,000-character value is quoted cut, the message one short line; an epsilon that is 0
/// in f32 is called that, not "outside (0, 1]" (ninth pass, u1_lt, e1, e3).
#[test]
fn long_values_are_quoted_short_and_an_underflowing_epsilon_is_named() {
    let config = std::fs::read_to_string(llama().join("config.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&config).unwrap();
    let layers = json["num_hidden_layers"].as_u64().unwrap() as usize;
    let long = "v".repeat(5000);
    for (key, value, want) in [
        (
            "layer_types",
            serde_json::json!(vec![long.clone(); layers]),
            "layer_types names \"vvvv",
        ),
        (
            "rms_norm_eps",
            serde_json::json!(1e-300),
            "norm epsilon rms_norm_eps = 1e-300 is 0 in f32",
        ),
        (
            "rms_norm_eps",
            serde_json::json!(1e-46),
            "norm epsilon rms_norm_eps = 1e-46 is 0 in f32",
        ),
        // The rotated fraction named as what is wrong (tenth pass, U3, U4).
        (
            "head_dim",
            serde_json::json!(17),
            "the head size 17 (hidden_size / num_attention_heads, or head_dim) is odd",
        ),
        (
            "partial_rotary_factor",
            serde_json::json!(1.5),
            "partial_rotary_factor 1.5 is outside (0, 1]",
        ),
        // A required key given as null has no default to fall back on (tenth pass, n4, n7).
        (
            "vocab_size",
            serde_json::Value::Null,
            "vocab_size is null: give an unsigned integer (the key is required)",
        ),
    ] {
        let mut j = json.clone();
        j[key] = value;
        let dir = with_file("config.json", j.to_string().as_bytes());
        let err = refusal(dir.path(), key);
        assert!(err.contains(want) && err.len() < 400, "{key}: {err}");
    }
}

/// `tokenizer_config.json` flags that would make transformers tokenize otherwise than
/// `tokenizer.json` says (BOS asked where the post-processor adds none, any EOS) are refused
/// naming the file; flags that agree load; the file is part of the model's identity (tenth
/// pass, S2).
#[test]
fn tokenizer_config_flags_must_agree_with_the_tokenizer() {
    let dir = with_file("tokenizer_config.json", b"{\"add_bos_token\": false}");
    load_model(Some(dir.path()), &Device::Cpu).expect("flags that agree");
    let first = ropelab_pretrained::identity::model_identity(Some(dir.path())).unwrap();
    for (text, want) in [
        ("{\"add_bos_token\": true}", "add_bos_token is true"),
        (
            "{\"add_bos_token\": false, \"add_eos_token\": true}",
            "add_eos_token is true",
        ),
        ("{\"add_bos_token\": \"yes\"}", "not true or false"),
        ("{not json", "tokenizer_config.json"),
        ("[]", "not a JSON object"),
    ] {
        std::fs::write(dir.path().join("tokenizer_config.json"), text).unwrap();
        let err = refusal(dir.path(), text);
        assert!(
            err.contains("tokenizer_config.json") && err.contains(want),
            "{text}: {err}"
        );
    }
    std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
    let second = ropelab_pretrained::identity::model_identity(Some(dir.path())).unwrap();
    assert_ne!(first, second);
    // The class transformers builds: Llama's adds BOS unless told not to, GPT-2's reads
    // tokenizer.json as it is; an unknown class is named (thirteenth pass, S4).
    for fine in [
        "{\"tokenizer_class\": \"GPT2Tokenizer\"}",
        "{\"tokenizer_class\": \"PreTrainedTokenizerFast\"}",
        "{\"tokenizer_class\": \"LlamaTokenizerFast\", \"add_bos_token\": false}",
        "{\"tokenizer_class\": \"GPTNeoXTokenizerFast\"}",
        "{\"add_prefix_space\": false}",
    ] {
        std::fs::write(dir.path().join("tokenizer_config.json"), fine).unwrap();
        load_model(Some(dir.path()), &Device::Cpu).unwrap_or_else(|e| panic!("{fine}: {e}"));
    }
    for (text, want) in [
        (
            "{\"tokenizer_class\": \"LlamaTokenizerFast\"}",
            "add_bos_token is true (the default of tokenizer_class LlamaTokenizerFast)",
        ),
        (
            "{\"tokenizer_class\": \"BertTokenizer\"}",
            "tokenizer_class \"BertTokenizer\" is not one ropelab knows",
        ),
        ("{\"tokenizer_class\": 3}", "tokenizer_class is 3"),
        (
            "{\"tokenizer_class\": \"LlamaTokenizer\", \"add_bos_token\": false, \
             \"add_prefix_space\": true}",
            "add_prefix_space is true: transformers' LlamaTokenizer then rebuilds",
        ),
        (
            "{\"add_prefix_space\": \"no\"}",
            "add_prefix_space is \"no\"",
        ),
    ] {
        std::fs::write(dir.path().join("tokenizer_config.json"), text).unwrap();
        let err = refusal(dir.path(), text);
        assert!(
            err.contains("tokenizer_config.json") && err.contains(want),
            "{text}: {err}"
        );
    }
}

/// A `tokenizer_config.json` `add_prefix_space` that differs from the byte-level
/// pre-tokenizer's own flag is refused: transformers rebuilds the pre-tokenizer with it
/// (thirteenth pass, S5).
#[test]
fn add_prefix_space_must_agree_with_the_pre_tokenizer() {
    let text = std::fs::read_to_string(llama().join("tokenizer.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    // The ByteLevel pre-tokenizer alone, as GPT-2's tokenizer.json has it.
    json["pre_tokenizer"] = json["pre_tokenizer"]["pretokenizers"][1].clone();
    assert_eq!(json["pre_tokenizer"]["type"], "ByteLevel");
    let dir = with_file("tokenizer.json", json.to_string().as_bytes());
    let config = dir.path().join("tokenizer_config.json");
    std::fs::write(&config, "{\"add_prefix_space\": false}").unwrap();
    load_model(Some(dir.path()), &Device::Cpu).expect("flags that agree");
    std::fs::write(&config, "{\"add_prefix_space\": true}").unwrap();
    let err = refusal(dir.path(), "add_prefix_space true over false");
    assert!(
        err.contains("tokenizer_config.json")
            && err.contains("pre_tokenizer has add_prefix_space false"),
        "{err}"
    );
    // The ByteLevel inside a Sequence (the fixture's Digits then ByteLevel) is rebuilt too.
    for (name, text) in [
        (
            "GPT-2's",
            "{\"tokenizer_class\":\"GPT2TokenizerFast\",\"add_prefix_space\":true}",
        ),
        ("none", "{\"add_prefix_space\": true}"),
    ] {
        let dir = with_file("tokenizer_config.json", text.as_bytes());
        let err = refusal(dir.path(), name);
        assert!(
            err.contains("tokenizer_config.json")
                && err.contains("pre_tokenizer has add_prefix_space false"),
            "{name}: {err}"
        );
    }
    let dir = with_file("tokenizer_config.json", b"{\"add_prefix_space\": false}");
    load_model(Some(dir.path()), &Device::Cpu).expect("a Sequence's flag that agrees");
}

/// A config.json or tokenizer.json far larger than such a file is refused naming its size,
/// before it is read whole (fourteenth pass, U-E).
#[test]
fn an_oversized_json_file_is_refused_by_its_size() {
    for (name, size) in [("config.json", 20u64 << 20), ("tokenizer.json", 600 << 20)] {
        let dir = with_file("README", b"");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(name))
            .unwrap();
        file.set_len(size).unwrap(); // sparse: no disk used
        let err = refusal(dir.path(), name);
        assert!(
            err.contains(name) && err.contains(&format!("is {size} bytes, more than such a file")),
            "{name}: {err}"
        );
    }
}

/// A byte-level vocabulary missing a byte's token is refused at load: a prompt holding the
/// byte would lose it without a word (tenth pass, SI4).
#[test]
fn a_byte_level_vocabulary_missing_a_byte_is_refused() {
    let text = std::fs::read_to_string(llama().join("tokenizer.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let vocab = json["model"]["vocab"].as_object_mut().unwrap();
    assert_eq!(vocab.remove("%"), Some(serde_json::json!(5)));
    let dir = with_file("tokenizer.json", json.to_string().as_bytes());
    let err = refusal(dir.path(), "a missing byte token");
    assert!(
        err.contains("tokenizer.json") && err.contains("no token for byte 0x25"),
        "{err}"
    );
}

/// A byte-level decoder beside no byte-level pre-tokenizer (`"pre_tokenizer": null`, or a
/// Whitespace one) is refused at load: a prompt's spaces would have no token and vanish
/// (nineteenth pass, S2).
#[test]
fn a_byte_level_decoder_without_a_byte_level_pre_tokenizer_is_refused() {
    let text = std::fs::read_to_string(llama().join("tokenizer.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["decoder"]["type"], "ByteLevel");
    for pre in [
        serde_json::Value::Null,
        serde_json::json!({"type": "Whitespace"}),
    ] {
        let mut edited = json.clone();
        edited["pre_tokenizer"] = pre.clone();
        let dir = with_file("tokenizer.json", edited.to_string().as_bytes());
        let err = refusal(dir.path(), "a byte-level decoder alone");
        assert!(
            err.contains("tokenizer.json") && err.contains("decoder is ByteLevel"),
            "{pre}: {err}"
        );
    }
}

/// The llama fixture's tokenizer.json with `edit` applied, in a model directory.
fn with_tokenizer(edit: impl Fn(&mut serde_json::Value)) -> tempfile::TempDir {
    let text = std::fs::read_to_string(llama().join("tokenizer.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut json);
    with_file("tokenizer.json", json.to_string().as_bytes())
}

/// What the tokenizers crate panics on (a sentencepiece character map, a template naming a
/// special token its table lacks or reading `$B` alone) is refused in one line; a template's
/// special id other than the vocabulary's, and a tokenizer dropping a printable character,
/// are refused too (twentieth pass, F-P1, F-P2, F-S1, F-S2).
#[test]
fn tokenizers_the_crate_would_panic_on_or_that_drop_text_are_refused() {
    let template = |single: serde_json::Value, table: serde_json::Value| {
        serde_json::json!({
            "type": "TemplateProcessing",
            "single": single,
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": table,
        })
    };
    let bos = serde_json::json!([
        {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
        {"Sequence": {"id": "A", "type_id": 0}}
    ]);
    let table = |id: u32| serde_json::json!({"<|endoftext|>": {"id": "<|endoftext|>", "ids": [id], "tokens": ["<|endoftext|>"]}});
    let good = with_tokenizer(|j| j["post_processor"] = template(bos.clone(), table(0)));
    assert!(load_model(Some(good.path()), &Device::Cpu).is_ok());
    type Edit<'a> = Box<dyn Fn(&mut serde_json::Value) + 'a>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|j| {
                j["normalizer"] =
                    serde_json::json!({"type": "Precompiled", "precompiled_charsmap": "AAAA"})
            }),
            "normalizer Precompiled",
        ),
        (
            Box::new(|j| {
                j["normalizer"] = serde_json::json!({"type": "Sequence", "normalizers": [
                    {"type": "Precompiled", "precompiled_charsmap": "AAAAAAAA"}]})
            }),
            "normalizer Precompiled",
        ),
        (
            Box::new(|j| j["post_processor"] = template(bos.clone(), serde_json::json!({}))),
            "that its special_tokens table lacks",
        ),
        (
            Box::new(|j| {
                j["post_processor"] = template(
                    serde_json::json!([{"Sequence": {"id": "B", "type_id": 0}}]),
                    table(0),
                )
            }),
            "reads $B",
        ),
        (
            Box::new(|j| j["post_processor"] = template(bos.clone(), table(7))),
            "declares id 7, but the vocabulary numbers it 0",
        ),
        (
            Box::new(|j| {
                j["pre_tokenizer"] = serde_json::Value::Null;
                j["decoder"] = serde_json::Value::Null;
            }),
            "the character ' ' has no token",
        ),
    ];
    for (edit, says) in cases {
        let dir = with_tokenizer(edit);
        let err = refusal(dir.path(), says);
        assert!(
            err.contains("tokenizer.json") && err.contains(says),
            "{says}: {err}"
        );
    }
}

/// A normalizer that deletes a sequence of characters (each of which survives alone) loads, but
/// a prompt holding the sequence is refused at encoding, naming where it changes; the text
/// with a good tokenizer comes back whole, leading BOS aside (twenty-fourth pass, B-S20).
#[test]
fn a_prompt_the_tokenizer_would_change_is_refused() {
    let dir = with_tokenizer(|j| {
        j["normalizer"] = serde_json::json!({"type": "Replace",
            "pattern": {"String": " ->"}, "content": ""})
    });
    let tokenizer = ropelab_pretrained::tokenizer::GgufTokenizer::from_file(
        &dir.path().join("tokenizer.json"),
        None,
    )
    .unwrap();
    assert!(tokenizer.encode("w9 t7 k7").is_ok());
    let err = tokenizer.encode("w9 t7 -> k7").unwrap_err().to_string();
    assert!(
        err.contains("normalizer") && err.contains("character 6 (\"-> k7\""),
        "{err}"
    );
    // A rewrite the decoder undoes passes the round trip, not the normalizer's own check
    // (twenty-fifth pass, B-S1).
    let dir = with_tokenizer(|j| {
        j["normalizer"] = serde_json::json!({"type": "Replace",
            "pattern": {"String": "cat"}, "content": "dog"});
        j["decoder"] = serde_json::json!({"type": "Sequence", "decoders": [
            j["decoder"].clone(),
            {"type": "Replace", "pattern": {"String": "dog"}, "content": "cat"}]});
    });
    let hidden = ropelab_pretrained::tokenizer::GgufTokenizer::from_file(
        &dir.path().join("tokenizer.json"),
        None,
    )
    .unwrap();
    assert!(hidden.encode("my bird sat").is_ok());
    let err = hidden.encode("my cat sat").unwrap_err().to_string();
    assert!(err.contains("rewrites the text from character 3"), "{err}");
    let good = ropelab_pretrained::tokenizer::GgufTokenizer::from_file(
        &llama().join("tokenizer.json"),
        None,
    )
    .unwrap();
    assert!(good.encode("w9 t7 -> k7\n").is_ok());
}

/// A tokenizer_config.json special token that tokenizer.json lacks (transformers would add it
/// beyond the embedding rows), or an id it numbers otherwise, is refused (twentieth pass,
/// F-S3); tokens the vocabulary holds are read.
#[test]
fn tokenizer_config_special_tokens_must_be_tokens() {
    let dir = with_file(
        "tokenizer_config.json",
        br#"{"bos_token": "<|endoftext|>", "eos_token": {"content": "<|endoftext|>"}}"#,
    );
    assert!(load_model(Some(dir.path()), &Device::Cpu).is_ok());
    for (config, says) in [
        (r#"{"bos_token": "<s>"}"#, "bos_token \"<s>\" is not a token"),
        (
            r#"{"additional_special_tokens": ["<im_start>"]}"#,
            "additional_special_tokens[0] \"<im_start>\" is not a token",
        ),
        (
            r#"{"added_tokens_decoder": {"5": {"content": "<|endoftext|>"}}}"#,
            "added_tokens_decoder gives id \"5\" to \"<|endoftext|>\", but tokenizer.json numbers it 0",
        ),
    ] {
        let dir = with_file("tokenizer_config.json", config.as_bytes());
        let err = refusal(dir.path(), says);
        assert!(
            err.contains("tokenizer_config.json") && err.contains(says),
            "{says}: {err}"
        );
    }
}

/// special_tokens_map.json and added_tokens.json, which transformers reads beside
/// tokenizer.json, must name its tokens with its ids (twenty-fourth pass, B-S6).
#[test]
fn side_files_of_the_tokenizer_must_agree_with_it() {
    for (name, text) in [
        (
            "special_tokens_map.json",
            r#"{"bos_token": "<|endoftext|>"}"#,
        ),
        ("added_tokens.json", r#"{"<|endoftext|>": 0}"#),
    ] {
        let dir = with_file(name, text.as_bytes());
        assert!(load_model(Some(dir.path()), &Device::Cpu).is_ok(), "{name}");
    }
    for (name, text, says) in [
        (
            "special_tokens_map.json",
            r#"{"bos_token": "<s>"}"#,
            "bos_token \"<s>\" is not a token",
        ),
        (
            "added_tokens.json",
            r#"{"<extra>": 300}"#,
            "numbers it nothing (not a token)",
        ),
        (
            "added_tokens.json",
            r#"{"<|endoftext|>": 5}"#,
            "numbers it 0",
        ),
        // An ordinary vocabulary token made special: transformers would split texts around
        // it (twenty-fifth pass, B-S3).
        (
            "special_tokens_map.json",
            r#"{"eos_token": "he"}"#,
            "eos_token \"he\" is an ordinary token",
        ),
        (
            "tokenizer_config.json",
            r#"{"added_tokens_decoder": {"259": {"content": "he", "special": true}}}"#,
            "added_tokens_decoder[259] \"he\" is an ordinary token",
        ),
        (
            "added_tokens.json",
            r#"{"he": 259}"#,
            "the entry \"he\" is an ordinary token",
        ),
    ] {
        let dir = with_file(name, text.as_bytes());
        let err = refusal(dir.path(), says);
        assert!(err.contains(name) && err.contains(says), "{says}: {err}");
    }
}

/// A safetensors `__metadata__` whose format transformers does not read as a PyTorch state
/// dict (none, an unknown one, or `tf`/`flax`, which it converts through other loaders) is
/// refused naming the file; `pt`, `mlx` and no metadata are read (twenty-first pass, S-A).
#[test]
fn safetensors_metadata_must_say_pytorch() {
    let meta = r#""__metadata__":{"format":"pt"}"#;
    for (format, says) in [
        (r#""__metadata__":{}"#, Some("format is missing")),
        (
            r#""__metadata__":{"format":"foo"}"#,
            Some("format is \"foo\""),
        ),
        (
            r#""__metadata__":{"format":"flax"}"#,
            Some("its flax loader"),
        ),
        (r#""__metadata__":{"format":"tf"}"#, Some("its tf loader")),
        (r#""__metadata__":{"format":"mlx"}"#, None),
        (r#""__metadata__":null"#, None),
    ] {
        let dir = with_header(|h| {
            assert!(h.contains(meta), "{h}");
            h.replace(meta, format)
        });
        match says {
            Some(says) => {
                let err = refusal(dir.path(), format);
                assert!(
                    err.contains("model.safetensors") && err.contains(says),
                    "{format}: {err}"
                );
            }
            None => assert!(
                load_model(Some(dir.path()), &Device::Cpu).is_ok(),
                "{format}"
            ),
        }
    }
}

/// A generation_config.json's rules reach greedy generation: a suppressed token is never the
/// first new one, a key that changes greedy decoding and is not applied is refused, and
/// sampling settings are named as not applied (twenty-fifth pass, B-S2).
#[test]
fn generation_config_rules_reach_generation() {
    let ids = [5u32, 17, 42, 99];
    let (model, tokenizer) = load_model(Some(&llama()), &Device::Cpu).unwrap();
    let free = model.generate(&ids, 3, &tokenizer.decoding).unwrap();
    assert!(!free.is_empty());
    for key in ["suppress_tokens", "begin_suppress_tokens"] {
        let dir = with_file(
            "generation_config.json",
            format!(r#"{{"{key}": [{}], "temperature": 0.7}}"#, free[0]).as_bytes(),
        );
        let (model, tokenizer) = load_model(Some(dir.path()), &Device::Cpu).unwrap();
        assert_eq!(tokenizer.decoding.not_applied, vec!["temperature = 0.7"]);
        let got = model.generate(&ids, 3, &tokenizer.decoding).unwrap();
        assert_ne!(got.first(), free.first(), "{key}");
    }
    let dir = with_file("generation_config.json", br#"{"forced_bos_token_id": 1}"#);
    let err = refusal(dir.path(), "forced_bos_token_id");
    assert!(
        err.contains("generation_config.json") && err.contains("not apply"),
        "{err}"
    );
}
