//! Fuzz target: one file of a tiny trained run replaced by arbitrary bytes: `config.toml`,
//! `metrics.jsonl`, or checkpoint 2's `ropelab.json`, `state.json`, `model.safetensors`,
//! `optimizer.safetensors` (the first byte picks the file; its top bit keeps the manifest, so
//! both the corruption report and the parsers behind it are reached). Opening the run,
//! loading every checkpoint and resuming must never panic.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use candle_core::Device;
use libfuzzer_sys::fuzz_target;
use ropelab_tasks::TaskKind;
use ropelab_train::{Preset, RunDir, Trainer};

fn template() -> &'static Path {
    static RUN: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = RUN.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path().join("run");
        let mut config = Preset::Tiny.config(TaskKind::Number);
        config.optim.steps = 2;
        config.optim.save_every = 2;
        config.optim.eval_every = 2;
        config.data.val = 8;
        let mut t = Trainer::start(&root, config, &Device::Cpu).expect("a tiny run starts");
        t.run(|_| {}).expect("a tiny run trains");
        (dir, root)
    });
    path
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("writable");
    for entry in std::fs::read_dir(from).expect("readable") {
        let entry = entry.expect("readable");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("readable").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("writable");
        }
    }
}

const FILES: [&str; 6] = [
    "config.toml",
    "metrics.jsonl",
    "checkpoints/step-000002/ropelab.json",
    "checkpoints/step-000002/state.json",
    "checkpoints/step-000002/model.safetensors",
    "checkpoints/step-000002/optimizer.safetensors",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let root = tmp.path().join("run");
    copy_dir(template(), &root);
    std::fs::write(root.join(FILES[usize::from(pick & 0x7f) % FILES.len()]), bytes)
        .expect("writable");
    if pick & 0x80 == 0 {
        let _ = std::fs::remove_file(root.join("checkpoints/step-000002/manifest.json"));
        // Loaded unverified, as `--force` does, so the parsers see the bytes.
        ropelab_io::allow_unsealed(true);
    } else {
        ropelab_io::allow_unsealed(false);
    }
    if let Ok((dir, config)) = RunDir::open(&root) {
        if let Ok(steps) = dir.checkpoints() {
            for step in steps {
                let _ = dir.load_model(step, &config, &Device::Cpu);
                let _ = dir.load_training_state(step, &config, &Device::Cpu);
            }
        }
    }
    if let Ok(mut t) = Trainer::resume(&root, Some(3), &Device::Cpu) {
        let _ = t.run(|_| {});
    }
});
