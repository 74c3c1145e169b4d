//! Swap scores of pretrained architectures: the fast path (from the captured rotated queries
//! and keys) against re-running the block on swapped inputs, for the tiny Llama, Llama 3,
//! Qwen2, GPT-NeoX and GPT-J models of fixtures/rope_models (directories and GGUF files).

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ropelab_analysis::lens::reference::reference_effects_with;
use ropelab_analysis::lens::swap::{block_swap_effects, blocks, scores, Tau};
use ropelab_analysis::Captured;
use ropelab_model::Hooks;
use ropelab_pretrained::llama::Llama;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rope_models")
}

#[test]
fn fast_swap_scores_agree_with_rerunning_every_architecture() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for name in [
        "llama",
        "llama3",
        "qwen2",
        "gptneox",
        "gptneox_seq",
        "gptj",
        "llama.gguf",
        "qwen2.gguf",
    ] {
        let model = Llama::open(&fixtures().join(name), &Device::Cpu).unwrap();
        let c = model.config().clone();
        let len = 13;
        let ids: Vec<u32> = (0..len)
            .map(|_| rng.random_range(1..c.vocab_size as u32))
            .collect();
        let input = Tensor::from_vec(ids, (1, len), &Device::Cpu).unwrap();
        let mut hooks = Captured::hooks(c.n_layers, true);
        model.trunk(&input, &mut hooks).unwrap();
        let cap =
            Captured::from_hooks(&hooks, vec![model.position().clone(); c.n_layers], true).unwrap();
        let mut compared = 0;
        let mut worst = 0f64;
        for layer in 0..c.n_layers {
            let resid = cap.resid_pre[layer].get(0).unwrap(); // [pos, d_model]
            let run = |x: &Tensor, h: &mut Hooks| -> ropelab_analysis::Result<()> {
                model.block(layer, x, h)?;
                Ok(())
            };
            for head in 0..c.n_heads {
                for n in [len - 1, 8] {
                    let view = cap.head_view(layer, 0, head, n).unwrap();
                    // The fast row is the model's own pattern row.
                    let row = cap.pattern_row(layer, 0, head, n).unwrap();
                    let fast_row =
                        ropelab_analysis::lens::swap::row(&view.cross_logits(), view.self_logit());
                    for (x, y) in row.iter().zip(&fast_row) {
                        assert!((x - y).abs() < 1e-5, "{name}: row {x} vs {y}");
                    }
                    for m in [n, 2] {
                        let bl = blocks(n, m).unwrap();
                        let fast = block_swap_effects(&view, &bl);
                        let slow =
                            reference_effects_with(run, layer, head, &resid, n, &bl).unwrap();
                        assert_eq!(fast.len(), slow.len());
                        for (f, s) in fast.iter().zip(&slow) {
                            for (x, y) in [
                                (f.before.0, s.before.0),
                                (f.before.1, s.before.1),
                                (f.after.0, s.after.0),
                                (f.after.1, s.after.1),
                            ] {
                                worst = worst.max((x - y).abs());
                            }
                        }
                        let tau = Tau::new(1e-2).unwrap();
                        let (sf, ss) = (scores(&fast, tau), scores(&slow, tau));
                        assert!(
                            (sf.s_pos - ss.s_pos).abs() < 1e-4
                                && (sf.s_sym - ss.s_sym).abs() < 1e-4,
                            "{name} layer {layer} head {head} n {n} m {m}: {sf:?} vs {ss:?}"
                        );
                        compared += fast.len();
                    }
                }
            }
        }
        assert!(worst < 1e-5, "{name}: swap effects differ by {worst}");
        assert!(compared > 500, "{name}: {compared}");
        eprintln!("{name}: {compared} swaps, fast vs re-run within {worst:e}");
    }
}
