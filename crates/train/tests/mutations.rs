//! Random mutations of every file a run directory holds, through every parser that reads it:
//! the run-config TOML, a checkpoint's `ropelab.json`, `state.json` and safetensors, and
//! `metrics.jsonl`. Whatever the bytes, loading answers Ok or an error, never a panic (the
//! stable-toolchain face of the fuzz targets in `fuzz/`, which run the same calls on nightly).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use candle_core::Device;
use proptest::prelude::*;
use ropelab_tasks::TaskKind;
use ropelab_train::{training_need, Engine, Preset, RunConfig, RunDir, Trainer};

/// A finished tiny run (2 steps, checkpoints 0 and 2), made once per test process.
fn template() -> &'static Path {
    static RUN: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("run");
        let mut config = Preset::Tiny.config(TaskKind::Letter);
        config.optim.steps = 2;
        config.optim.save_every = 2;
        config.optim.eval_every = 2;
        config.data.val = 8;
        let mut t = Trainer::start(&root, config, &Device::Cpu).unwrap();
        t.run(|_| {}).unwrap();
        (dir, root)
    });
    path
}

/// A copy of the template run in a fresh folder.
fn copy_run(to: &Path) -> PathBuf {
    let root = to.join("run");
    copy_dir(template(), &root);
    root
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// One mutation of a byte string.
#[derive(Debug, Clone)]
enum Edit {
    /// Overwrite the byte at a position.
    Set(prop::sample::Index, u8),
    /// Cut the bytes from a position on.
    Truncate(prop::sample::Index),
    /// Insert bytes at a position.
    Insert(prop::sample::Index, Vec<u8>),
    /// Remove a span.
    Remove(prop::sample::Index, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        1 => any::<prop::sample::Index>().prop_map(Edit::Truncate),
        2 => (any::<prop::sample::Index>(), prop::collection::vec(any::<u8>(), 1..12))
            .prop_map(|(i, b)| Edit::Insert(i, b)),
        1 => (any::<prop::sample::Index>(), 1usize..40).prop_map(|(i, n)| Edit::Remove(i, n)),
    ]
}

fn apply(bytes: &mut Vec<u8>, edits: &[Edit]) {
    for e in edits {
        let len = bytes.len().max(1);
        match e {
            Edit::Set(i, b) if !bytes.is_empty() => {
                let at = i.index(len);
                bytes[at] = *b;
            }
            Edit::Set(..) => {}
            Edit::Truncate(i) => bytes.truncate(i.index(len)),
            Edit::Insert(i, b) => {
                let at = i.index(len + 1).min(bytes.len());
                bytes.splice(at..at, b.iter().copied());
            }
            Edit::Remove(i, n) => {
                let at = i.index(len).min(bytes.len());
                let end = (at + n).min(bytes.len());
                bytes.drain(at..end);
            }
        }
    }
}

/// Every way a run is read: open, list checkpoints, check and load each checkpoint's model
/// and training state, estimate its resources, and resume it by one step.
fn read_everything(root: &Path) {
    let Ok((dir, config)) = RunDir::open(root) else {
        return;
    };
    let _ = training_need(&config, root, 0, Engine::Fused);
    let Ok(steps) = dir.checkpoints() else {
        return;
    };
    for step in steps {
        let _ = dir.checkpoint_config(step);
        let _ = dir.check_checkpoint_config(step, &config);
        let _ = dir.load_model(step, &config, &Device::Cpu);
        let _ = dir.load_training_state(step, &config, &Device::Cpu);
    }
    if let Ok(mut t) = Trainer::resume(root, Some(3), &Device::Cpu) {
        let _ = t.run(|_| {});
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// The run-config TOML parser (with its checks and the resource estimate of what it
    /// accepts) on mutated configs.
    #[test]
    fn mutated_run_configs_never_panic(edits in prop::collection::vec(edit(), 1..6)) {
        let mut bytes = Preset::Tiny.config(TaskKind::Number).to_toml().into_bytes();
        apply(&mut bytes, &edits);
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(config) = RunConfig::from_toml(&text, Path::new("config.toml")) {
            let _ = training_need(&config, Path::new("run"), 0, Engine::Fused);
        }
    }

    /// Every file of a run directory, mutated, with the checkpoint's manifest kept (the damage
    /// must be reported as corruption) or removed (the parsers see the bytes).
    #[test]
    fn mutated_run_directories_never_panic(
        file in 0usize..7,
        step in prop::sample::select(vec![0usize, 2]),
        keep_manifest in any::<bool>(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let root = copy_run(tmp.path());
        let checkpoint = root.join(format!("checkpoints/step-{step:06}"));
        let path = match file {
            0 => root.join("config.toml"),
            1 => root.join("metrics.jsonl"),
            2 => checkpoint.join("ropelab.json"),
            3 => checkpoint.join("state.json"),
            4 => checkpoint.join("model.safetensors"),
            5 => checkpoint.join("optimizer.safetensors"),
            _ => checkpoint.join("manifest.json"),
        };
        let mut bytes = std::fs::read(&path).unwrap();
        apply(&mut bytes, &edits);
        std::fs::write(&path, &bytes).unwrap();
        if !keep_manifest && file != 6 {
            std::fs::remove_file(checkpoint.join("manifest.json")).unwrap();
            // Loaded unverified, as `--force` does, so the parsers see the mutated bytes.
            ropelab_io::allow_unsealed(true);
        }
        read_everything(&root);
    }
}

/// With the manifest kept, a changed weight file is reported as corruption, whatever changed.
#[test]
fn a_changed_checkpoint_with_its_manifest_is_reported_as_corrupted() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copy_run(tmp.path());
    let path = root.join("checkpoints/step-000002/model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let (dir, config) = RunDir::open(&root).unwrap();
    let err = dir.load_model(2, &config, &Device::Cpu).unwrap_err();
    assert!(err.to_string().contains("corrupted"), "{err}");
}
