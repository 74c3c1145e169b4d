//! Fuzz target: arbitrary bytes as a run-config TOML (`train --config`, a run's
//! `config.toml`). Parsing, its checks and the resource estimate of an accepted config must
//! never panic (errors are fine).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use ropelab_train::{training_need, Engine, RunConfig};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(config) = RunConfig::from_toml(&text, Path::new("config.toml")) {
        let _ = training_need(&config, Path::new("run"), 0, Engine::Fused);
    }
});
