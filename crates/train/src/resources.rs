//! Up-front estimates of what training and evaluation need (see [`ropelab_io::resources`]):
//! computed from the config alone, before a model is built or a file written.

use std::path::Path;

use ropelab_io::resources::{bytes, Need};
use ropelab_model::kernel::FusedStep;
use ropelab_model::ModelConfig;

use crate::data::{batch_for_budget, forward_bytes};
use crate::step::Engine;
use crate::{RunConfig, EVAL_MEMORY};

/// Bytes held per parameter while training, besides the gradients (counted with the step's
/// buffers): the model's weights, the fused kernel's flat copy, and AdamW's two moments.
const TRAIN_BYTES_PER_PARAM: usize = 16;

/// Bytes per parameter in a checkpoint: the weights and AdamW's two moments (f32).
const CHECKPOINT_BYTES_PER_PARAM: usize = 12;

/// A checkpoint's small files (config, state, manifest), an upper estimate.
const CHECKPOINT_OVERHEAD: usize = 8 << 10;

/// One line of `metrics.jsonl` with its validation accuracies, an upper estimate.
const METRICS_LINE_BYTES: usize = 512;

/// The composed engine keeps every op's output for autograd and a gradient per output: about
/// this many forward passes' worth of activations.
const AUTOGRAD_FACTOR: usize = 3;

/// What one sequence's forward pass costs beyond its arithmetic (generating it, batching,
/// kernel launches on tiny matrices), as floating-point operations at the estimate's assumed
/// rate: measured at about 30 us per sequence for the tiny preset on 2 cores (`eval --n 8000`
/// 0.26 s, `ablate --n 8000` 16 passes in 4.2 s), 6e6 operations at 200 GFLOP/s. Without it a
/// tiny model's million-sample command was estimated at seconds (sixth pass, A6).
pub const PER_SEQUENCE_FLOPS: u64 = 6_000_000;

/// Floating-point operations of forward passes over `sequences` sequences of `seq_len` tokens:
/// the matrix products (2 per parameter per token), the attention scores and weighted sums
/// (4 d_model per query-key pair per layer) and [`PER_SEQUENCE_FLOPS`] per sequence,
/// saturating (an estimate never wraps).
pub fn forward_flops(config: &ModelConfig, sequences: usize, seq_len: usize) -> u64 {
    let products = bytes(&[2, config.n_params(), sequences, seq_len]);
    let attention = bytes(&[
        4,
        config.n_layers,
        config.d_model,
        sequences,
        seq_len,
        seq_len,
    ]);
    products
        .saturating_add(attention)
        .saturating_add(PER_SEQUENCE_FLOPS.saturating_mul(sequences as u64))
}

/// Memory of inference with `config` on sequences of `seq_len` tokens in batches sized to
/// `budget` bytes: the weights and one batch's forward pass (at least one sequence's, which
/// may exceed the budget).
pub fn inference_need(config: &ModelConfig, seq_len: usize, budget: usize) -> Need {
    let batch = batch_for_budget(config, seq_len, budget);
    Need::new()
        .memory(
            bytes(&[4, config.n_params()]),
            format!("the weights of {} parameters", config.n_params()),
        )
        .memory(
            forward_bytes(config, seq_len).saturating_mul(batch as u64),
            format!("a forward pass over {batch} sequence(s) of {seq_len} tokens"),
        )
}

/// Memory of training `model` on batches of `batch` sequences whose lengths are `seqs` (one
/// length per batch; the longest one matters for the composed engine, while the fused engine
/// keeps one kernel, with its buffers, per length) with `engine`: weights and AdamW moments,
/// the steps' activations and gradients, and the validation forward pass.
pub fn training_memory(model: &ModelConfig, batch: usize, seqs: &[usize], engine: Engine) -> Need {
    let params = model.n_params();
    let longest = seqs.iter().copied().max().unwrap_or(1);
    let activations = match engine {
        Engine::Fused => seqs
            .iter()
            .map(|&seq| FusedStep::bytes(model, batch, seq))
            .fold(0, u64::saturating_add),
        Engine::Composed => {
            forward_bytes(model, longest).saturating_mul(bytes(&[AUTOGRAD_FACTOR, batch]))
        }
    };
    let validation = inference_need(model, longest, EVAL_MEMORY);
    let what = match seqs {
        [seq] => format!("one training step on {batch} x {seq} tokens"),
        _ => format!(
            "training steps on {batch} sequences of {} lengths up to {longest} tokens",
            seqs.len()
        ),
    };
    Need::new()
        .memory(
            bytes(&[TRAIN_BYTES_PER_PARAM, params]),
            format!("weights and AdamW moments of {params} parameters"),
        )
        .memory(activations, what)
        .memory(validation.memory_bytes(), "the validation forward pass")
}

/// Memory and disk of training the run `config` in `root` from step `from` to its last step:
/// [`training_memory`]; checkpoints kept on disk (its retention policy) and `metrics.jsonl`
/// lines.
pub fn training_need(config: &RunConfig, root: &Path, from: usize, engine: Engine) -> Need {
    let o = &config.optim;
    let seqs = config.train_seq_lens();
    let steps = o.steps.saturating_sub(from);
    let checkpoint = bytes(&[CHECKPOINT_BYTES_PER_PARAM, config.model.n_params()])
        .saturating_add(CHECKPOINT_OVERHEAD as u64);
    let kept = new_checkpoints(config, from);
    let lines =
        steps / o.log_every.max(1) + steps / o.eval_every.max(1) + steps / o.save_every.max(1) + 2;
    let longest = seqs.iter().copied().max().unwrap_or(1);
    // A step is a forward and a backward pass (about twice the forward's arithmetic).
    let step_flops = forward_flops(&config.model, o.batch_size, longest).saturating_mul(3);
    // Every `eval_every` steps and at the end, a forward pass over the validation split.
    let evals = steps / o.eval_every.max(1) + 1;
    let val_flops = forward_flops(&config.model, config.data.val, longest);
    training_memory(&config.model, o.batch_size, &seqs, engine)
        .compute(
            step_flops.saturating_mul(steps as u64),
            format!("{steps} training steps"),
        )
        .compute(
            val_flops.saturating_mul(evals as u64),
            format!("{evals} validations on {} samples", config.data.val),
        )
        .disk(
            root,
            checkpoint.saturating_mul(kept as u64),
            format!("{kept} checkpoints kept"),
        )
        .disk(
            root,
            bytes(&[METRICS_LINE_BYTES, lines]),
            format!("{lines} metrics lines"),
        )
}

/// Checkpoints that training from step `from` adds to those already on disk, at most: from step
/// 0, [`kept_checkpoints`]; on a resume, the saves still to come (one per `save_every` steps
/// beyond `from`, and the last step), no more than the retention policy keeps at the end
/// beyond what it keeps at `from`, plus the one written before an older one is pruned. The
/// checkpoints that exist are not counted again (a finished run's resume adds none).
pub fn new_checkpoints(config: &RunConfig, from: usize) -> usize {
    let o = &config.optim;
    if from == 0 {
        return kept_checkpoints(config, 0);
    }
    let every = o.save_every.max(1);
    if o.steps <= from {
        return 0;
    }
    let written = o.steps / every - from / every + usize::from(!o.steps.is_multiple_of(every));
    if o.keep.keeps_all() {
        return written;
    }
    let mut at_from = config.clone();
    at_from.optim.steps = from;
    let more = kept_checkpoints(config, 0).saturating_sub(kept_checkpoints(&at_from, 0));
    written.min(more + 1)
}

/// Checkpoints that training from step `from` leaves on disk at the end, at most: every save
/// (one per `save_every` steps and the last) unless the retention policy keeps fewer (step 0,
/// the last `last`, the multiples of `every`).
pub fn kept_checkpoints(config: &RunConfig, from: usize) -> usize {
    let o = &config.optim;
    let saves = o.steps.saturating_sub(from) / o.save_every.max(1) + 2;
    if o.keep.keeps_all() {
        return saves;
    }
    let every = o
        .keep
        .every
        .map_or(0, |e| o.steps / lcm(e.max(1), o.save_every.max(1)) + 1);
    saves.min(2 + o.keep.last.unwrap_or(1) + every)
}

fn lcm(a: usize, b: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    (a / gcd(a, b)).saturating_mul(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Preset, Retention};
    use ropelab_tasks::TaskKind;

    /// The time estimate: the paper preset's 6,000 steps are minutes of arithmetic at the
    /// assumed rate (measured: 23 minutes on 2 cores, so the estimate is a lower bound), and
    /// 10^9 steps are refused as beyond a day.
    #[test]
    fn training_time_is_estimated_from_the_arithmetic_of_its_steps() {
        let root = Path::new("run");
        let paper = Preset::Paper.config(TaskKind::Number);
        let seconds = training_need(&paper, root, 0, Engine::Fused).seconds();
        assert!((10.0..1400.0).contains(&seconds), "{seconds}");
        // Half the steps left, half the time (and one more validation than half of them).
        let half = training_need(&paper, root, paper.optim.steps / 2, Engine::Fused).seconds();
        assert!((half / seconds - 0.5).abs() < 0.01, "{half} vs {seconds}");
        // The validations are counted: a thousand times the validation set costs more.
        let mut val = paper.clone();
        val.data.val *= 1000;
        assert!(training_need(&val, root, 0, Engine::Fused).seconds() > 2.0 * seconds);
        let mut long = paper.clone();
        long.optim.steps = 1_000_000_000;
        let need = training_need(&long, root, 0, Engine::Fused);
        assert!(need.seconds() > ropelab_io::resources::TIME_LIMIT_SECONDS);
        let available = ropelab_io::Available {
            memory: None,
            disk: None,
        };
        let err = need.check_against("train", &available).unwrap_err();
        assert!(err.to_string().contains("would take at least"), "{err}");
    }

    #[test]
    fn the_tiny_preset_fits_a_laptop_and_absurd_configs_do_not() {
        let root = Path::new("run");
        let tiny = Preset::Tiny.config(TaskKind::Number);
        let need = training_need(&tiny, root, 0, Engine::Fused);
        assert!(need.memory_bytes() < 64 << 20, "{need:?}");
        assert!(need.disk_bytes() < 64 << 20, "{need:?}");

        let mut wide = tiny.clone();
        wide.model.n_layers = 100;
        wide.model.d_model = 4096;
        wide.model.n_heads = 32;
        wide.model.d_mlp = 16384;
        wide.model.vocab_size = 100_000_000;
        // 100 layers x 200 M + 2 x 409.6 G embedding parameters: terabytes.
        assert!(training_need(&wide, root, 0, Engine::Fused).memory_bytes() > 1 << 40);

        // 10^10 steps with a checkpoint every 10 keep 10^9 checkpoints unless retention says
        // otherwise.
        let mut long = tiny.clone();
        long.optim.steps = 10_000_000_000;
        long.optim.eval_every = 10_000_000;
        long.optim.log_every = 10_000_000;
        let all = training_need(&long, root, 0, Engine::Fused).disk_bytes();
        assert!(all > 1 << 40, "{all}");
        long.optim.keep = Retention {
            last: Some(3),
            every: None,
        };
        // Three checkpoints kept; every checkpoint step still leaves its metrics line.
        let kept = training_need(&long, root, 0, Engine::Fused).disk_bytes();
        assert!(kept < all / 10, "{kept} of {all}");
        long.optim.save_every = 10_000_000;
        let kept = training_need(&long, root, 0, Engine::Fused).disk_bytes();
        assert!(kept < 4 << 20, "{kept}");
    }

    /// A resume adds only the checkpoints still to come: none for a finished run, so a tight
    /// disk does not refuse it (issue 55, item 6).
    #[test]
    fn a_resume_counts_only_the_checkpoints_it_writes() {
        let root = Path::new("run");
        let mut c = Preset::Tiny.config(TaskKind::Number);
        c.optim.steps = 1000;
        c.optim.save_every = 10;
        let one = bytes(&[CHECKPOINT_BYTES_PER_PARAM, c.model.n_params()]);
        assert_eq!(new_checkpoints(&c, 0), kept_checkpoints(&c, 0));
        assert_eq!(new_checkpoints(&c, 1000), 0);
        assert!(training_need(&c, root, 1000, Engine::Fused).disk_bytes() < one);
        // From 990: the save at 1000 only; from 995 with 1003 steps: 1000 and the last, 1003.
        assert_eq!(new_checkpoints(&c, 990), 1);
        c.optim.steps = 1003;
        assert_eq!(new_checkpoints(&c, 995), 2);
        // Brute force over resume points: the saves are the multiples of 10 after `from`, and
        // the last step.
        for from in [1, 9, 10, 11, 500, 999, 1002] {
            let want = (from + 1..=1003)
                .filter(|s| s % 10 == 0 || *s == 1003)
                .count();
            assert_eq!(new_checkpoints(&c, from), want, "from {from}");
        }
        // With retention, no more than the policy adds (and the one written before pruning).
        c.optim.keep = Retention {
            last: Some(2),
            every: None,
        };
        assert!(new_checkpoints(&c, 500) <= 2);
    }

    #[test]
    fn retention_bounds_the_count_of_kept_checkpoints() {
        let mut c = Preset::Tiny.config(TaskKind::Letter);
        c.optim.steps = 1000;
        c.optim.save_every = 10;
        assert_eq!(kept_checkpoints(&c, 0), 102);
        c.optim.keep = Retention {
            last: Some(5),
            every: Some(250),
        };
        // Step 0, the latest, 5 recent, multiples of 250 (0, 250, ..., 1000): at most 12.
        assert_eq!(kept_checkpoints(&c, 0), 12);
        // Brute force: the steps the policy keeps are fewer than the bound.
        let steps: Vec<usize> = (0..=1000).step_by(10).collect();
        let kept = steps
            .iter()
            .filter(|&&s| c.optim.keep.keeps(s, &steps))
            .count();
        assert!((8..=12).contains(&kept), "{kept}");
        assert_eq!(lcm(4, 6), 12);
    }

    #[test]
    fn inference_of_a_long_sequence_needs_its_attention_pattern() {
        let c = Preset::Tiny.config(TaskKind::Number).model;
        let need = inference_need(&c, 100_017, EVAL_MEMORY);
        // 5 x heads x T^2 floats alone: 2 x 10^11 bytes for 2 heads.
        assert!(need.memory_bytes() > 200_000_000_000);
    }
}
