//! A fixed-offset retrieval job's measurement (docs/offset.md): last-position accuracy per
//! length and (with `heads`) the implicit-bias experiment's mechanisms: the first layer's
//! equivariance, its carrier planes, the carrier s(r) with the dilution law, and argmax
//! pinning.

use std::collections::BTreeMap;
use std::path::Path;

use ropelab_analysis::measure::offset::{
    attention_name, carrier_planes, carrier_repeak, carrier_summary, equivariance_deviation,
    mechanisms, CarrierRow, MechanismLine, MechanismRow, OffsetPe, OffsetRunRow, PlaneRow,
};
use ropelab_model::{AttentionKind, Beyond, GptJ, PositionEncoding};
use ropelab_tasks::{OffsetTask, Split};
use ropelab_train::lengths::{accuracy_at_lengths, LengthAccuracy};
use ropelab_train::offset_data::OffsetInputs;
use ropelab_train::{RunConfig, TrainError, EVAL_MEMORY};

use super::{pooled, write_lengths, MeasureOptions, Measured, OFFSET_SCALES};
use crate::{Result, SweepError};

/// Test sequences the mechanisms read per length.
pub const MECHANISM_ROWS: usize = 64;

/// Tokens put before the sequences of the equivariance check.
pub const EQUIVARIANCE_SHIFT: usize = 37;

/// Tests an offset run at `options.lengths` (`options.per_length` sequences each), by default
/// at its training lengths (`options.per_length` spread over them) and at [`OFFSET_SCALES`] x
/// the longest (`lengths.csv`); with `options.heads`, also measures its mechanisms.
pub fn measure(
    model: &GptJ,
    config: &RunConfig,
    options: &MeasureOptions,
    run: &Path,
) -> Result<Measured> {
    let data = config
        .offset
        .as_ref()
        .expect("a checked offset run has [offset]");
    let task = OffsetTask::new(data.vocab, data.k).map_err(TrainError::from)?;
    let hi = data.lengths[1];
    let plan = plan(data.lengths, options.per_length, options.lengths.as_deref());
    let inputs = OffsetInputs {
        task,
        seed: config.seed,
        split: Split::Test,
    };
    let rows = accuracy_at_lengths(model, &inputs, &plan, EVAL_MEMORY)?;
    write_lengths(run, &rows)?;
    if options.heads {
        let tested: Vec<usize> = rows.iter().map(|r| r.length).collect();
        measure_mechanisms(model, config, &task, &tested, &rows, run)?;
    }
    Ok(summary(&rows, hi))
}

/// The (length, sequences) an offset job tests: `per_length` at each of `lengths`, by default
/// `per_length` spread over the training lengths lo..=hi and `per_length` at each of
/// [`OFFSET_SCALES`] x hi beyond hi.
pub fn plan(
    trained: [usize; 2],
    per_length: usize,
    lengths: Option<&[usize]>,
) -> Vec<(usize, usize)> {
    let [lo, hi] = trained;
    match lengths {
        Some(lengths) => lengths.iter().map(|&n| (n, per_length)).collect(),
        None => {
            let per = per_length.div_ceil(hi - lo + 1).max(1);
            let scaled = OFFSET_SCALES.iter().map(|s| s * hi).filter(|&n| n > hi);
            (lo..=hi)
                .map(|n| (n, per))
                .chain(scaled.map(|n| (n, per_length)))
                .collect()
        }
    }
}

/// What an offset job's result records of its `lengths.csv` rows (`hi` its longest training
/// length): test accuracy pooled over the training lengths, the accuracy at hi and at every
/// tested length beyond it.
pub fn summary(rows: &[LengthAccuracy], hi: usize) -> Measured {
    let trained = || rows.iter().filter(|r| r.length <= hi);
    let mut length_accuracy: BTreeMap<usize, f64> = rows
        .iter()
        .filter(|r| r.length > hi)
        .map(|r| (r.length, r.accuracy()))
        .collect();
    length_accuracy.insert(hi, trained().next_back().map_or(0.0, |r| r.accuracy()));
    Measured {
        test_accuracy: Some(pooled(trained())),
        length_accuracy,
        ..Measured::default()
    }
}

/// The mechanisms of one run (docs/offset.md, "Mechanisms"): `run.csv` (equivariance, the
/// dilution law's largest error, the argmax mode, the carrier planes' rank and alignment),
/// `planes.csv` (rotary runs), and for softmax runs `carrier.csv`, `pinning.csv` and
/// `mechanism.csv` (per test length and head, with the accuracy of `rows`).
fn measure_mechanisms(
    model: &GptJ,
    config: &RunConfig,
    task: &OffsetTask,
    test_lens: &[usize],
    rows: &[LengthAccuracy],
    run: &Path,
) -> Result<()> {
    let data = config.offset.as_ref().expect("checked above");
    let (k, seed, train_len) = (data.k, config.seed, data.lengths[1]);
    let pe = OffsetPe::of(&config.model.position).ok_or_else(|| SweepError::Job {
        id: run.display().to_string(),
        message: "the mechanisms are measured for rope, ape and nope runs only".into(),
    })?;
    let attention = config.model.attention;
    let accuracy_at = |n: usize| {
        rows.iter()
            .find(|r| r.length == n)
            .map_or(f64::NAN, |r| r.accuracy())
    };
    // Sequences of the training length moved by EQUIVARIANCE_SHIFT tokens; an APE table that
    // refuses longer inputs keeps the moved copy inside it.
    let refuses = matches!(
        config.model.position,
        PositionEncoding::Learned {
            beyond: Beyond::Error,
            ..
        }
    );
    let (eq_len, shift) = if refuses {
        (k + 1, train_len - k - 1)
    } else {
        (train_len, EQUIVARIANCE_SHIFT)
    };
    let equivariance = if shift == 0 {
        f64::NAN
    } else {
        equivariance_deviation(model, task, seed, eq_len, shift, MECHANISM_ROWS)?
    };
    let mut run_row = OffsetRunRow {
        pe: pe.to_string(),
        attention: attention_name(attention).into(),
        k,
        seed,
        equivariance,
        dilution_error: None,
        per_sequence_error: None,
        repeak_offset: None,
        repeak_margin: None,
        mode_key: None,
        mode_fraction: None,
        carrier_rank: None,
        carrier_alignment: None,
    };
    let planes = carrier_planes(model, task, seed, train_len, MECHANISM_ROWS)?;
    if !planes.is_empty() {
        super::write_run_csv(run, "planes.csv", &planes)?;
        let heads = planes.iter().map(|p| p.head).max().unwrap_or(0) + 1;
        let best = (0..heads)
            .filter_map(|h| {
                let mine: Vec<PlaneRow> = planes.iter().filter(|p| p.head == h).cloned().collect();
                carrier_summary(&mine)
            })
            .fold(None, |b: Option<(f64, f64)>, x| match b {
                Some(b) if b.1 >= x.1 => Some(b),
                _ => Some(x),
            });
        if let Some((rank, alignment)) = best {
            run_row.carrier_rank = Some(rank);
            run_row.carrier_alignment = Some(alignment);
        }
    }
    if attention == AttentionKind::Softmax {
        let m = mechanisms(model, task, seed, test_lens, MECHANISM_ROWS)?;
        super::write_run_csv(run, "pinning.csv", &m.pins)?;
        let carrier: Vec<CarrierRow> = m
            .carrier
            .iter()
            .enumerate()
            .flat_map(|(head, s)| {
                s.iter()
                    .enumerate()
                    .map(move |(r, &s)| CarrierRow { head, r, s })
            })
            .collect();
        super::write_run_csv(run, "carrier.csv", &carrier)?;
        // The law assumes logits that depend on the offset alone (not APE's).
        let largest_error = |predicted: fn(&MechanismRow) -> f64| {
            m.rows
                .iter()
                .map(|r| (predicted(r) - r.target_weight).abs())
                .fold(None, |a: Option<f64>, e| Some(a.map_or(e, |a| a.max(e))))
                .filter(|_| pe != OffsetPe::Ape)
        };
        run_row.dilution_error = largest_error(|r| r.predicted_weight);
        run_row.per_sequence_error = largest_error(|r| r.per_sequence_weight);
        if let Some((r, margin)) = m.carrier.first().and_then(|s| carrier_repeak(s, k)) {
            run_row.repeak_offset = Some(r);
            run_row.repeak_margin = Some(margin);
        }
        if let Some(last) = m.rows.iter().rev().find(|r| r.head == 0) {
            run_row.mode_key = Some(last.mode_key);
            run_row.mode_fraction = Some(last.mode_fraction);
        }
        let mechanism: Vec<MechanismLine> = m
            .rows
            .iter()
            .map(|r| MechanismLine {
                pe: pe.to_string(),
                attention: attention_name(attention).into(),
                k,
                seed,
                test_len: r.test_len,
                head: r.head,
                target_weight: r.target_weight,
                predicted_weight: r.predicted_weight,
                per_sequence_weight: Some(r.per_sequence_weight),
                argmax_on_target: r.argmax_on_target,
                mode_key: r.mode_key,
                mode_fraction: r.mode_fraction,
                accuracy: accuracy_at(r.test_len),
            })
            .collect();
        super::write_run_csv(run, "mechanism.csv", &mechanism)?;
    }
    super::write_run_csv(run, "run.csv", std::slice::from_ref(&run_row))?;
    Ok(())
}
