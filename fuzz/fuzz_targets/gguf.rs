//! Fuzz target: arbitrary bytes through the GGUF parser, the Llama loader and the tokenizer
//! builder must never panic (errors are fine).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ropelab_pretrained::gguf::GgufFile;
use ropelab_pretrained::llama::Llama;
use ropelab_pretrained::tokenizer::GgufTokenizer;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("input.gguf");
    std::fs::write(&path, data).expect("writable");
    if let Ok(file) = GgufFile::open(&path) {
        let _ = file.llama_config();
        let _ = GgufTokenizer::from_gguf(&file);
    }
    let _ = Llama::load(&path, &candle_core::Device::Cpu);
});
