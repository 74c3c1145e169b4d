//! The settings keys a run's ledger (`measured.json`, docs/study.md) records for each measured
//! file, written by the study and sweep jobs that measure a run and compared by every reader of
//! its files: one function per file, so a writer and a reader can never spell a key two ways.

use super::dynamics::ScoreOptions;
use super::lengthgen::LengthOptions;

/// `eval/step-S-extra-0.json`: the test split of checkpoint `step`.
pub fn test_split(step: usize) -> String {
    format!("test split of step {step}")
}

/// `scores.jsonl`: every checkpoint's swap scores under `s`.
pub fn scores(s: &ScoreOptions) -> String {
    format!(
        "swap scores of every checkpoint: samples {}, query {:?}, tau {}, accuracy samples {}, blocks {:?}, planes {}",
        s.samples, s.query, s.tau, s.eval_samples, s.blocks, s.planes
    )
}

/// `lengthgen.csv`: the length test under `l`.
pub fn lengths(l: &LengthOptions) -> String {
    format!(
        "length test: extras {:?}, samples {:?}, step {:?}",
        l.extras, l.samples, l.step
    )
}

/// The accuracy samples a [`scores`] key names (None for a text it never writes).
pub fn parse_score_samples(key: &str) -> Option<usize> {
    let rest = key.split_once(", accuracy samples ")?.1;
    rest.split(',').next()?.trim().parse().ok()
}

/// The extension tokens, samples and step a [`lengths`] key names (None for a text it never
/// writes).
pub fn parse_lengths(key: &str) -> Option<(Vec<usize>, Option<usize>, Option<usize>)> {
    let rest = key.strip_prefix("length test: extras [")?;
    let (extras, rest) = rest.split_once("], samples ")?;
    let (samples, step) = rest.split_once(", step ")?;
    let extras = extras
        .split(", ")
        .filter(|e| !e.is_empty())
        .map(str::parse)
        .collect::<Result<Vec<usize>, _>>()
        .ok()?;
    let option = |text: &str| -> Option<Option<usize>> {
        match text {
            "None" => Some(None),
            s => Some(Some(
                s.strip_prefix("Some(")?.strip_suffix(')')?.parse().ok()?,
            )),
        }
    };
    Some((extras, option(samples)?, option(step)?))
}

/// `attention/step-S-sample-0.json`: the attention viewer's file of checkpoint `step`.
pub fn attention(step: usize) -> String {
    format!("attention of step {step} on test input 0")
}

/// `hops.csv`: the hop map of checkpoint `step` on `samples` test samples.
pub fn hop_map(step: usize, samples: usize) -> String {
    format!("{}{samples}", hop_map_prefix(step))
}

/// The start of every hop-map key of checkpoint `step` (whatever its samples).
pub fn hop_map_prefix(step: usize) -> String {
    format!("hop map of step {step}: samples ")
}

/// `ablation.csv`: the head groups of checkpoint `step` (typed at `gamma`) knocked out on
/// `samples` test samples.
pub fn ablation(step: usize, samples: usize, gamma: f64) -> String {
    format!("{}samples {samples}, gamma {gamma}", ablation_prefix(step))
}

/// The start of every ablation key of checkpoint `step` (whatever its samples and gamma).
pub fn ablation_prefix(step: usize) -> String {
    format!("ablation of step {step}: ")
}

/// `probes.csv`: the residual-stream probes of checkpoint `step` on `samples` test samples.
pub fn probes(step: usize, samples: usize) -> String {
    format!("{}{samples}", probes_prefix(step))
}

/// The start of every probe key of checkpoint `step` (whatever its samples).
pub fn probes_prefix(step: usize) -> String {
    format!("probes of step {step}: samples ")
}

/// `layer_sets.csv`: the joint layer knock-outs of checkpoint `step` on `samples` test samples.
pub fn layer_sets(step: usize, samples: usize) -> String {
    format!("{}{samples}", layer_sets_prefix(step))
}

/// The start of every layer-set key of checkpoint `step` (whatever its samples).
pub fn layer_sets_prefix(step: usize) -> String {
    format!("layer sets of step {step}: samples ")
}

/// `metrics.jsonl`: the training log of a run whose last checkpoint is `step`.
pub fn training_log(step: usize) -> String {
    format!("training log to step {step}")
}

/// A table a sweep, study or experiment job writes into its run (`lengths.csv`,
/// `conflict.csv`, `heads.csv`, `head.json`, the offset mechanism files), recorded in the run's
/// ledger: the experiment collects only what the ledger vouches for.
pub fn run_table(file: &str) -> String {
    format!("{file} measured by the run's job")
}

/// A study's own tables (`offset/`, `canonical/TASK/`, `theory/`), recorded in the ledger of
/// the folder that holds them when the study writes them.
pub fn study_table(stage: &str) -> String {
    format!("{stage} tables written by the study")
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn a_length_key_reads_back_as_written() {
        for (extras, samples, step) in
            [(vec![0, 16, 64], Some(256), Some(4)), (vec![0], None, None)]
        {
            let key = lengths(&LengthOptions {
                extras: extras.clone(),
                samples,
                step,
                memory: 1,
            });
            assert_eq!(parse_lengths(&key), Some((extras, samples, step)));
        }
        assert_eq!(parse_lengths("length test: extras [x]"), None);
        let key = scores(&ScoreOptions {
            eval_samples: 512,
            ..Default::default()
        });
        assert_eq!(parse_score_samples(&key), Some(512));
    }
}
