//! Fuzz target: arbitrary bytes as a study config TOML (`reproduce --config`). Parsing, its
//! checks and the resource estimate of an accepted config must never panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use ropelab_study::StudyConfig;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(config) = StudyConfig::parse(&text, "study.toml") {
        let _ = ropelab_study::resources::need(&config, Path::new("out"), Some(1));
    }
});
