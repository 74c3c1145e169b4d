//! Every architecture `--model` reads, against transformers (fixtures/rope_models, written by
//! fixtures/rope_models/make_fixtures.py): tiny random Llama, Llama 3 (frequency scaling,
//! explicit head size) and Qwen2 (q/k/v biases, tied embeddings) models as Hugging Face
//! directories and as GGUF files in mixed f32/f16/bf16/Q8_0/Q4_0/Q4_1/Q4_K/Q6_K storage;
//! GPT-NeoX (partial rotary, parallel and sequential residual) and GPT-J directories. Token
//! ids, logits at every position and the rotated queries and keys of every layer within 1e-4,
//! the same greedy continuation. A ropelab checkpoint read as a GPT-J directory gives the
//! logits of ropelab's own GPT-J.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use ropelab_model::kernel::{Bf16Path, Precision};
use ropelab_model::{rope, HookKind, HookPoint, Hooks};
use ropelab_pretrained::llama::{KvCache, Llama};
use ropelab_pretrained::load_model;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rope_models")
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    match v {
        serde_json::Value::Array(items) => items.iter().flat_map(floats).collect(),
        x => vec![x.as_f64().expect("a number") as f32],
    }
}

/// Largest absolute difference.
fn worst(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn check(model_path: &Path, reference: &str) {
    let text = std::fs::read_to_string(fixtures().join(reference)).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let (model, tokenizer) = load_model(Some(model_path), &Device::Cpu)
        .unwrap_or_else(|e| panic!("{}: {e}", model_path.display()));
    let ids: Vec<u32> = r["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(
        tokenizer.encode(r["text"].as_str().unwrap()).unwrap(),
        ids,
        "{reference}: token ids"
    );
    let t = ids.len();
    let c = model.config().clone();
    let input = Tensor::from_vec(ids.clone(), (1, t), &Device::Cpu).unwrap();
    let points: Vec<HookPoint> = (0..c.n_layers)
        .flat_map(|l| {
            [
                HookPoint::new(l, HookKind::Q),
                HookPoint::new(l, HookKind::K),
            ]
        })
        .collect();
    let mut hooks = Hooks::new().capture(points);
    let logits: Vec<f32> = model
        .forward(&input, &mut hooks)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let d_logits = worst(&logits, &floats(&r["logits"]));
    assert!(d_logits < 1e-4, "{reference}: logits differ by {d_logits}");

    let rotation = model.position().rotation().expect("a rotary model");
    let positions: Vec<usize> = (0..t).collect();
    let (cos, sin) = rope::angles_of(&positions, &rotation, &Device::Cpu).unwrap();
    let rotated = |kind, layer| -> Vec<f32> {
        let x = hooks.get(HookPoint::new(layer, kind)).unwrap(); // [1, heads, pos, head_dim]
        rope::rotate(x, &cos, &sin, rotation.rotary_dim, rotation.layout)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let (hd, group) = (c.head_dim(), c.n_heads / c.n_kv_heads);
    // transformers' heads are in split halves (plane p is dims p and p + rotary_dim / 2) but
    // for GPT-J (interleaved, as ours); a GGUF llama file's rows are permuted so that ours are
    // interleaved: compare plane by plane.
    let halves = |x: Vec<f32>| -> Vec<f32> {
        let mut out = x.clone();
        if c.arch == "gptj" {
            return out;
        }
        let planes = rotation.rotary_dim / 2;
        for (row, src) in out.chunks_exact_mut(hd).zip(x.chunks_exact(hd)) {
            for p in 0..planes {
                let (a, b) = model.position().plane_dims(p);
                row[p] = src[a];
                row[p + planes] = src[b];
            }
        }
        out
    };
    let mut d_qk = 0f32;
    for layer in 0..c.n_layers {
        let q = halves(rotated(HookKind::Q, layer));
        d_qk = d_qk.max(worst(&q, &floats(&r["q_rot"][layer])));
        // The hook's keys are expanded to one per query head; transformers' are per kv head.
        let k = halves(rotated(HookKind::K, layer));
        let want = floats(&r["k_rot"][layer]); // [kv_heads, pos, head_dim]
        let per_kv: Vec<f32> = (0..c.n_kv_heads)
            .flat_map(|g| k[g * group * t * hd..][..t * hd].to_vec())
            .collect();
        d_qk = d_qk.max(worst(&per_kv, &want));
    }
    assert!(d_qk < 1e-4, "{reference}: rotated q/k differ by {d_qk}");

    let greedy: Vec<u32> = r["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(
        model
            .generate(&ids, greedy.len(), &Default::default())
            .unwrap(),
        greedy,
        "{reference}: greedy"
    );
    eprintln!(
        "{reference}: {} ({} layers, {} heads / {} kv heads, head dim {hd}): logits within \
         {d_logits:e}, rotated q/k within {d_qk:e}",
        c.arch, c.n_layers, c.n_heads, c.n_kv_heads
    );
    check_fused(model, &ids, &floats(&r["logits"]), reference);
}

/// The fused forward (prefill in chunks of 3, logits at every position) against transformers'
/// logits `want` and against the candle ops it replaces; in bf16 against transformers within
/// the bf16 tolerance of docs/performance.md, and really rounded (not the f32 numbers).
fn check_fused(model: Llama, ids: &[u32], want: &[f32], reference: &str) {
    let prefill = |m: &Llama| -> Vec<f32> {
        let mut cache = KvCache::new(m.config().n_layers);
        m.prefill(ids, &mut cache, 3, ids.len())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let fused = prefill(&model);
    let d_fused = worst(&fused, want);
    assert!(
        d_fused < 1e-4,
        "{reference}: fused logits differ by {d_fused}"
    );
    let model = model.with_fused(false);
    let d_ops = worst(&fused, &prefill(&model));
    assert!(
        d_ops < 1e-5,
        "{reference}: fused and candle ops differ by {d_ops}"
    );
    let model = model
        .with_fused(true)
        .with_precision(Precision::Bf16)
        .unwrap();
    let bf16 = prefill(&model);
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d_bf16 = worst(&bf16, want);
    assert!(
        d_bf16 <= BF16_LOGIT_TOLERANCE * scale,
        "{reference}: bf16 logits differ by {d_bf16} (largest logit {scale})"
    );
    assert!(
        worst(&bf16, &fused) > 0.0,
        "{reference}: bf16 gave the f32 logits"
    );
    eprintln!(
        "{reference}: fused f32 within {d_fused:e} of transformers ({d_ops:e} of the candle \
         ops), bf16 ({}) within {:.4} of the largest logit",
        Bf16Path::detect().name(),
        d_bf16 / scale
    );
}

/// bf16 logits within this fraction of the largest |logit| of f32 transformers (2^-8 rounding
/// of every product's operands, compounded over the tiny models' 2-4 blocks; measured up to
/// the value each run prints).
const BF16_LOGIT_TOLERANCE: f32 = 0.03;

#[test]
fn hugging_face_llama_matches_transformers() {
    check(&fixtures().join("llama"), "llama.reference.json");
}

#[test]
fn hugging_face_llama3_scaling_and_head_dim_match_transformers() {
    check(&fixtures().join("llama3"), "llama3.reference.json");
}

#[test]
fn hugging_face_qwen2_matches_transformers() {
    check(&fixtures().join("qwen2"), "qwen2.reference.json");
}

#[test]
fn gguf_llama_in_mixed_quantizations_matches_transformers() {
    check(&fixtures().join("llama.gguf"), "llama.gguf.reference.json");
}

#[test]
fn gguf_llama3_rope_freqs_match_transformers() {
    check(
        &fixtures().join("llama3.gguf"),
        "llama3.gguf.reference.json",
    );
}

#[test]
fn gguf_qwen2_matches_transformers() {
    check(&fixtures().join("qwen2.gguf"), "qwen2.gguf.reference.json");
}

#[test]
fn hugging_face_gpt_neox_parallel_partial_rotary_matches_transformers() {
    check(&fixtures().join("gptneox"), "gptneox.reference.json");
}

#[test]
fn hugging_face_gpt_neox_sequential_gelu_tanh_matches_transformers() {
    check(
        &fixtures().join("gptneox_seq"),
        "gptneox_seq.reference.json",
    );
}

#[test]
fn hugging_face_gptj_matches_transformers() {
    check(&fixtures().join("gptj"), "gptj.reference.json");
}

/// A ropelab checkpoint (GPT-J names, its `config.json`), every weight and bias set away from
/// its init, read by the Hugging Face loader: the same logits as ropelab's GPT-J.
#[test]
fn a_ropelab_checkpoint_reads_as_gptj() {
    use ropelab_model::checkpoint::{hf_config, save_weights};
    use ropelab_model::{GptJ, ModelConfig, PositionEncoding};
    let config = ModelConfig {
        vocab_size: 23,
        d_model: 16,
        n_heads: 2,
        d_mlp: 24,
        ..ModelConfig::tiny(PositionEncoding::gptj(4))
    };
    let model = GptJ::new(config.clone(), 3, &Device::Cpu).unwrap();
    for (k, (_, var)) in model.named_vars().into_iter().enumerate() {
        let n = var.elem_count();
        let values: Vec<f32> = (0..n)
            .map(|i| {
                0.4 * ((i as f32) * 0.37 + k as f32).sin() + if k % 3 == 0 { 1.0 } else { 0.0 }
            })
            .collect();
        var.set(&Tensor::from_vec(values, var.shape(), &Device::Cpu).unwrap())
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    save_weights(&model, &dir.path().join("model.safetensors")).unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::to_string(&hf_config(&config)).unwrap(),
    )
    .unwrap();
    let read = ropelab_pretrained::llama::Llama::open(dir.path(), &Device::Cpu).unwrap();
    assert_eq!(read.config().arch, "gptj");
    let ids: Vec<u32> = (0..12).map(|i| (i * 7 % 23) as u32).collect();
    let input = Tensor::from_vec(ids, (1, 12), &Device::Cpu).unwrap();
    let ours: Vec<f32> = model
        .forward(&input, &mut Hooks::new(), None)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let theirs: Vec<f32> = read
        .forward(&input, &mut Hooks::new())
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let d = worst(&ours, &theirs);
    assert!(d < 1e-4, "logits differ by {d}");
    assert!(
        ours.iter().map(|x| x.abs()).fold(0.0, f32::max) > 0.5,
        "logits not flat"
    );
}

/// A ropelab checkpoint whose position encoding transformers' GPT-J does not compute is refused
/// in one line naming the key.
#[test]
fn a_ropelab_checkpoint_transformers_cannot_run_is_refused() {
    use ropelab_model::checkpoint::hf_config;
    use ropelab_model::{ModelConfig, PositionEncoding, RopeLayout};
    let config = ModelConfig::tiny(PositionEncoding::rope(500.0, 4, RopeLayout::HalfSplit));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::to_string(&hf_config(&config)).unwrap(),
    )
    .unwrap();
    let err = ropelab_pretrained::llama::Llama::open(dir.path(), &Device::Cpu)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("ropelab_exact_in_transformers"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn a_config_with_fewer_layers_than_the_weights_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixtures().join("llama");
    for file in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(src.join(file), dir.path().join(file)).unwrap();
    }
    assert!(load_model(Some(dir.path()), &Device::Cpu).is_ok());
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        config.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1"),
    )
    .unwrap();
    let err = load_model(Some(dir.path()), &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("config.json")
            && err.contains("num_hidden_layers is 1 but the weights hold 2"),
        "{err}"
    );
}
