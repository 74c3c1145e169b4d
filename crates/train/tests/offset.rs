//! Fixed-offset retrieval runs from a TOML config: batches (targets k back, IGNORE where there
//! is none), learning with both objectives and both engines (same losses), last-position
//! accuracy per length, and bad configs as one-line errors naming the file.

use std::path::Path;

use candle_core::Device;
use ropelab_model::objective::IGNORE;
use ropelab_model::{AttentionKind, Objective, PositionEncoding, RopeLayout};
use ropelab_tasks::{OffsetTask, Split, TaskKind};
use ropelab_train::lengths::accuracy_at_lengths;
use ropelab_train::offset_data::{OffsetBatches, OffsetInputs};
use ropelab_train::{Engine, OffsetData, Preset, RunConfig, Trainer};

/// A one-layer, one-head, attention-only rotary model on k = `k`, lengths 4..=12.
fn config(k: usize, objective: Objective, steps: usize) -> RunConfig {
    let mut c = Preset::Tiny.config(TaskKind::Offset);
    c.offset = Some(OffsetData {
        vocab: 8,
        k,
        lengths: [4, 12],
    });
    c.objective = objective;
    c.model.vocab_size = 8;
    c.model.n_layers = 1;
    c.model.n_heads = 1;
    c.model.d_model = 32;
    c.model.mlp = false;
    c.model.dropout = 0.0;
    c.model.attention = AttentionKind::Softmax;
    c.model.position = PositionEncoding::rope(100.0, 32, RopeLayout::Interleaved);
    c.optim.steps = steps;
    c.optim.batch_size = 32;
    c.optim.lr = 1e-2;
    c.optim.warmup = 10;
    c.optim.eval_every = steps;
    c.optim.save_every = steps;
    c.data.train = 32 * steps;
    c.data.val = 90;
    c.check().unwrap();
    c
}

#[test]
fn batches_hold_one_length_and_the_tokens_k_back() {
    let data = OffsetData {
        vocab: 8,
        k: 3,
        lengths: [5, 9],
    };
    let batches = OffsetBatches::new(&data, 4, 640, 16).unwrap();
    let task = OffsetTask::new(8, 3).unwrap();
    for step in 1..=6 {
        let (ids, last) = batches.step_batch(step, 4, Objective::LastToken);
        let (ids2, every) = batches.step_batch(step, 4, Objective::EveryPosition);
        assert_eq!(ids, ids2);
        let n = ids.len() / 4;
        assert!((5..=9).contains(&n) && ids.len() == 4 * n);
        assert_eq!(every.len(), ids.len());
        for (r, row) in ids.chunks(n).enumerate() {
            assert_eq!(last[r], row[n - 4]);
            for (i, &t) in every[r * n..(r + 1) * n].iter().enumerate() {
                assert_eq!(t, if i < 3 { IGNORE } else { row[i - 3] });
            }
            assert_eq!(task.last_target(row), Some(last[r]));
        }
        // The same step gives the same batch.
        assert_eq!(batches.step_batch(step, 4, Objective::LastToken).0, ids);
    }
}

#[test]
fn a_rotary_head_learns_to_look_back_with_both_objectives_and_engines() {
    let dir = tempfile::tempdir().unwrap();
    for objective in [Objective::LastToken, Objective::EveryPosition] {
        let config = config(2, objective, 1000);
        let mut losses = vec![];
        for engine in [Engine::Fused, Engine::Composed] {
            let root = dir.path().join(format!("{objective:?}-{engine:?}"));
            let mut trainer = Trainer::start(&root, config.clone(), &Device::Cpu).unwrap();
            trainer.set_engine(engine).unwrap();
            trainer.run(|_| {}).unwrap();
            let text = std::fs::read_to_string(root.join("metrics.jsonl")).unwrap();
            losses.push(
                text.lines()
                    .filter_map(|l| {
                        serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"].as_f64()
                    })
                    .collect::<Vec<f64>>(),
            );
            // Last-position accuracy at the training lengths and at twice the longest.
            let task = OffsetTask::new(8, 2).unwrap();
            let plan = [(6, 64), (12, 64), (24, 64)];
            let inputs = OffsetInputs {
                task,
                seed: 0,
                split: Split::Test,
            };
            let rows = accuracy_at_lengths(trainer.model(), &inputs, &plan, 1 << 24).unwrap();
            assert_eq!(
                rows.iter().map(|r| r.length).collect::<Vec<_>>(),
                [6, 12, 24]
            );
            for r in &rows[..2] {
                assert!(r.accuracy() >= 0.9, "{objective:?} {engine:?}: {rows:?}");
            }
        }
        // The engines compute the same function: the same losses until rounding differences
        // grow through the fast phase of learning (about step 300 at this learning rate).
        let (a, b) = (&losses[0][..20], &losses[1][..20]);
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 2e-3 * x.abs().max(1.0), "{a:?} vs {b:?}");
        }
    }
}

#[test]
fn bad_offset_configs_name_the_file() {
    let file = Path::new("runs/bad.toml");
    let good = config(2, Objective::LastToken, 5).to_toml();
    RunConfig::from_toml(&good, file).unwrap();
    let number = Preset::Tiny.config(TaskKind::Number).to_toml();
    let cases = [
        (
            good.replace("k = 2", "k = 4"),
            "lengths must be longer than the offset",
        ),
        (
            good.replace("k = 2", "k = 0"),
            "offset k must be at least 1",
        ),
        (good.replace("vocab = 8", "vocab = 1"), "at least 2 symbols"),
        (
            good.replace("lengths = [\n    4,\n    12,\n]", "lengths = [9, 8]"),
            "offset.lengths",
        ),
        (
            good.replace("objective = \"last_token\"", "objective = \"eos_class\""),
            "objective = \"last_token\"",
        ),
        (
            format!("{number}\n[offset]\nvocab = 8\nk = 1\nlengths = [4, 8]\n"),
            "belongs to task = \"offset\"",
        ),
    ];
    for (text, want) in cases {
        assert_ne!(text, good, "{want}: the replacement did not apply");
        let err = RunConfig::from_toml(&text, file).unwrap_err().to_string();
        assert!(err.contains("runs/bad.toml"), "{err}");
        assert!(err.contains(want), "want {want:?} in: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // A learned table shorter than the training sequences.
    let mut ape = config(2, Objective::LastToken, 5);
    ape.model.position = PositionEncoding::Learned {
        max_len: 10,
        beyond: Default::default(),
    };
    let err = ape.check().unwrap_err().to_string();
    assert!(
        err.contains("10 rows") && err.contains("length 12"),
        "{err}"
    );
}
