//! The attention viewer's data: one test input of a tiny run, every head's pattern (checked
//! against a softmax of the logits recomputed in f64 from the captured q and k), and the
//! input's swap scores (checked against scoring that input alone).

use candle_core::{Device, Tensor};
use ropelab_analysis::lens::attention::{attention_view, write_view, AttentionView};
use ropelab_analysis::lens::heads::score_heads;
use ropelab_analysis::lens::swap::Tau;
use ropelab_analysis::Captured;
use ropelab_tasks::{Dataset, Split, Task, TaskKind};
use ropelab_train::{Preset, RunDir, Trainer};

#[test]
fn every_head_attention_on_one_input_matches_an_independent_recomputation() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("run");
    let mut config = Preset::Tiny.config(TaskKind::Number);
    config.optim.steps = 20;
    let mut trainer = Trainer::start(&root, config.clone(), &Device::Cpu).unwrap();
    trainer.run(|_| {}).unwrap();
    drop(trainer);

    let sample = 2;
    let view = attention_view(&root, None, sample, &Device::Cpu).unwrap();
    assert_eq!(
        (view.step, view.sample, view.task.as_str()),
        (20, 2, "number")
    );
    let task = Task::new(config.task, config.layout.clone()).unwrap();
    let data = Dataset::new(task.clone(), config.seed, Split::Test, config.data.test, 0).unwrap();
    let s = data.sample(sample).unwrap();
    let tokens: Vec<&str> = s
        .ids
        .iter()
        .map(|&i| task.vocab().token(i).unwrap())
        .collect();
    assert_eq!(view.tokens, tokens);
    assert_eq!(view.chain, task.chain(&tokens).unwrap());
    assert_eq!(*view.chain.last().unwrap(), s.target_pos);
    assert_eq!(view.answer, task.vocab().token(s.answer_id).unwrap());
    assert_eq!(view.hops, s.hops);
    assert_eq!(view.heads.len(), 2 * 2);

    // Patterns: causal rows that sum to one, equal to softmax of the f64 logits.
    let n = tokens.len();
    let (_, config) = RunDir::open(&root).unwrap();
    let model = RunDir::new(&root)
        .load_model(20, &config, &Device::Cpu)
        .unwrap();
    let ids = Tensor::from_vec(s.ids.clone(), (1, n), &Device::Cpu).unwrap();
    let cap = Captured::run(&model, &ids, false).unwrap();
    for h in &view.heads {
        for (q, row) in h.pattern.iter().enumerate() {
            assert_eq!(row.len(), q + 1);
            let sum: f32 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-4, "row {q} sums to {sum}");
        }
        for q in [2, n / 2, n - 1] {
            let logits = cap.head_view(h.layer, 0, h.head, q).unwrap().logits();
            let max = logits.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = logits.iter().map(|l| (l - max).exp()).sum();
            for (k, &w) in h.pattern[q].iter().enumerate() {
                let expected = (logits[k] - max).exp() / z;
                assert!(
                    (f64::from(w) - expected).abs() < 1e-4,
                    "L{} H{} q {q} k {k}: {w} vs {expected}",
                    h.layer,
                    h.head
                );
            }
        }
    }
    // Swap scores: the same as scoring this input alone at its query.
    let alone = score_heads(
        &model,
        &ids,
        &[vec![n - 1]],
        Tau::default(),
        None,
        false,
        1 << 20,
    )
    .unwrap();
    for (h, a) in view.heads.iter().zip(&alone) {
        assert_eq!((h.layer, h.head), (a.layer, a.head));
        assert_eq!(h.scores, a.scores);
    }

    // The file round-trips.
    let path = write_view(&root, &view).unwrap();
    assert!(path.ends_with("attention/step-20-sample-2.json"));
    let back: AttentionView =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // (serde_json reads floats to within one ulp, so scores are compared to 1e-12.)
    assert_eq!(
        (&back.tokens, &back.chain, back.step),
        (&view.tokens, &view.chain, view.step)
    );
    for (b, h) in back.heads.iter().zip(&view.heads) {
        assert_eq!((&b.pattern, b.kind), (&h.pattern, h.kind));
        assert!((b.scores.s_pos - h.scores.s_pos).abs() < 1e-12);
        assert!((b.scores.s_sym - h.scores.s_sym).abs() < 1e-12);
    }

    // Bad input names the problem.
    let err = attention_view(&root, Some(7), 0, &Device::Cpu).unwrap_err();
    assert!(err.to_string().contains("no checkpoint at step 7"), "{err}");
    let err = attention_view(&root, None, 1_000_000, &Device::Cpu).unwrap_err();
    assert!(err.to_string().contains("past the test split"), "{err}");
    let err = attention_view(dir.path(), None, 0, &Device::Cpu).unwrap_err();
    assert!(!err.to_string().is_empty());
}
