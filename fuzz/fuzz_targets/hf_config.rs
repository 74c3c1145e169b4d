//! Fuzz target: arbitrary bytes as a Hugging Face directory's `config.json` (beside the tiny
//! Llama fixture's weights and tokenizer) must never make the loader panic (errors are fine).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/rope_models/llama");
    let dir = tempfile::tempdir().expect("a temporary directory");
    for name in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture.join(name), dir.path().join(name)).expect("the fixture");
    }
    std::fs::write(dir.path().join("config.json"), data).expect("writable");
    let _ = ropelab_pretrained::load_model(Some(dir.path()), &candle_core::Device::Cpu);
});
