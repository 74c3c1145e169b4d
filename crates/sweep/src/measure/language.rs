//! A formal-language job's measurement (docs/languages.md): accuracy per string length at the
//! training lengths and beyond, N*, and (with `heads`) every head's fit to the MOD predicates.

use std::path::Path;

use candle_core::Tensor;
use ropelab_analysis::measure::languages::{n_star, Pe, PERIODS};
use ropelab_analysis::measure::modular::{bos_curves, mod_head_rows, RunLabel};
use ropelab_analysis::AnalysisError;
use ropelab_model::GptJ;
use ropelab_tasks::{LanguageSamples, Split};
use ropelab_train::language_data::LanguageInputs;
use ropelab_train::lengths::{accuracy_at_lengths, LengthAccuracy};
use ropelab_train::{RunConfig, EVAL_MEMORY};

use super::{pooled, write_lengths, MeasureOptions, Measured, LANGUAGE_REACH};
use crate::{Result, SweepError};

/// Strings whose heads are scored for MOD predicates, at the longest tested length.
pub const HEAD_STRINGS: usize = 4;

/// Tests a language run at its training lengths lo..=hi and beyond them (`options.lengths`,
/// default every length up to [`LANGUAGE_REACH`] x hi), `options.per_length` strings each
/// (`lengths.csv`); with `options.heads`, also scores its heads for MOD predicates
/// (`heads.csv`).
pub fn measure(
    model: &GptJ,
    config: &RunConfig,
    options: &MeasureOptions,
    run: &Path,
) -> Result<Measured> {
    let data = config
        .language
        .as_ref()
        .expect("a checked language run has [language]");
    let samples = LanguageSamples {
        language: data.name,
        negatives: data.negatives,
        seed: config.seed,
    };
    let hi = data.lengths[1];
    let plan = plan(data.lengths, options.per_length, options.lengths.as_deref());
    let inputs = LanguageInputs {
        samples,
        split: Split::Test,
    };
    let rows = accuracy_at_lengths(model, &inputs, &plan, EVAL_MEMORY)?;
    write_lengths(run, &rows)?;
    if options.heads {
        heads(model, config, &samples, &rows, run)?;
    }
    Ok(summary(&rows, hi))
}

/// The (length, strings) a language job tests: `per_length` strings at each training length
/// lo..=hi, then at each of `lengths` (default hi + 1 ..= [`LANGUAGE_REACH`] x hi).
pub fn plan(
    trained: [usize; 2],
    per_length: usize,
    lengths: Option<&[usize]>,
) -> Vec<(usize, usize)> {
    let [lo, hi] = trained;
    let beyond = match lengths {
        Some(lengths) => lengths.to_vec(),
        None => (hi + 1..=LANGUAGE_REACH * hi).collect(),
    };
    (lo..=hi).chain(beyond).map(|n| (n, per_length)).collect()
}

/// What a language job's result records of its `lengths.csv` rows (`hi` its longest training
/// length): test accuracy pooled over the training lengths, the accuracy at hi, 1.25 hi,
/// 1.5 hi and [`LANGUAGE_REACH`] x hi, and N*.
pub fn summary(rows: &[LengthAccuracy], hi: usize) -> Measured {
    let marks = [
        hi,
        hi + (hi / 4).max(1),
        hi + (hi / 2).max(1),
        LANGUAGE_REACH * hi,
    ];
    Measured {
        test_accuracy: Some(pooled(rows.iter().filter(|r| r.length <= hi))),
        length_accuracy: rows
            .iter()
            .filter(|r| marks.contains(&r.length))
            .map(|r| (r.length, r.accuracy()))
            .collect(),
        n_star: Some(n_star(rows, hi)),
        ..Measured::default()
    }
}

/// Every head's fit to MOD_m^r for each period of [`PERIODS`], read on [`HEAD_STRINGS`] test
/// strings of the longest tested length (`heads.csv`).
fn heads(
    model: &GptJ,
    config: &RunConfig,
    samples: &LanguageSamples,
    rows: &[LengthAccuracy],
    run: &Path,
) -> Result<()> {
    let data = config.language.as_ref().expect("checked above");
    let hi = data.lengths[1];
    let longest = rows.last().map_or(hi, |r| r.length);
    let ids: Vec<u32> = (0..HEAD_STRINGS as u64)
        .flat_map(|i| samples.sample(Split::Test, longest, i).ids)
        .collect();
    let ids = Tensor::from_vec(ids, (HEAD_STRINGS, longest + 2), model.device())
        .map_err(AnalysisError::from)?;
    let curves = bos_curves(model, &ids)?;
    let pe = Pe::of(&config.model.position).ok_or_else(|| SweepError::Job {
        id: run.display().to_string(),
        message: "the MOD heads are measured for nope, rope, sipe and the periodic encodings \
                  only"
            .into(),
    })?;
    let label = RunLabel {
        language: data.name.name().into(),
        pe: pe.kind().into(),
        base: pe.base(),
        seed: config.seed,
        lr: config.optim.lr,
    };
    // Query positions 1 ..= hi + 1 are those of training strings (w and EOS).
    let heads = mod_head_rows(&label, &curves, &PERIODS, hi + 1)?;
    super::write_run_csv(run, "heads.csv", &heads)?;
    Ok(())
}
