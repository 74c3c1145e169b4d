//! What a job measures on its trained run, by task (docs/sweeps.md, "What a job measures"):
//! - **number / letter**: the test split (overall and per hop), every checkpoint's swap scores
//!   and the layer types, the length test, and (on request) the attention viewer's file; each
//!   file (`eval/`, `scores.jsonl`, `lengthgen.csv`, `attention/`) is recorded in the run's
//!   ledger (`measured.json`, [`ropelab_io::ledger`]) with the settings that made it and its
//!   checksum, and reused only when the ledger vouches for it, so a job stopped while scoring
//!   resumes there and a file another command wrote is refused, never read;
//! - **language**: accuracy on test strings of every training length and of every length up to
//!   [`LANGUAGE_REACH`] x the longest, and N* (`lengths.csv`);
//! - **offset**: last-position accuracy at the training lengths and at 1, 2, 4 and 8 x the
//!   longest (`lengths.csv`);
//! - **canonical**: accuracy on the test split.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::Device;
use ropelab_analysis::attention::{attention_view, write_view, AttentionView};
use ropelab_analysis::claims::layer_types;
use ropelab_analysis::dynamics::{score_run, HeadStep, ScoreOptions};
use ropelab_analysis::languages::n_star;
use ropelab_analysis::lengthgen::{self, length_generalisation, LengthOptions, LengthRow};
use ropelab_io::{write_atomic, Ledger, Progress, Standing, LEDGER};
use ropelab_model::GptJ;
use ropelab_tasks::{LanguageSamples, OffsetTask, Split, TaskKind};
use ropelab_train::canonical_data::accuracy_by_position;
use ropelab_train::eval::{eval_checkpoint, EvalReport};
use ropelab_train::language_data::{accuracy_at_lengths, LengthAccuracy};
use ropelab_train::offset_data::last_accuracy_at_lengths;
use ropelab_train::{RunConfig, RunDir, EVAL_MEMORY};

use crate::{Result, SweepError};

/// How far beyond its longest training string a language job is tested (N* is read there).
pub const LANGUAGE_REACH: usize = 2;

/// Multiples of the longest training length an offset job is tested at.
pub const OFFSET_SCALES: [usize; 4] = [1, 2, 4, 8];

/// The purity tolerance of the layer types in results.
pub const GAMMA: f64 = 0.1;

/// What a job measures and how much of it.
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    /// Swap scores of every checkpoint (number and letter tasks).
    pub score: ScoreOptions,
    /// The length test (number and letter tasks).
    pub length: LengthOptions,
    /// Also write the attention viewer's file (every head on the first test input).
    pub attention_view: bool,
    /// Test samples per length (language and offset jobs) and test samples (canonical jobs).
    pub per_length: usize,
}

/// Extension tokens of the length test of every number/letter job of a sweep.
pub const LENGTH_EXTRAS: [usize; 4] = [0, 16, 64, 256];

/// Test samples per length of that test.
pub const LENGTH_SAMPLES: usize = 256;

impl Default for MeasureOptions {
    /// A sweep's: 100 scored samples, the length test at [`LENGTH_EXTRAS`] with
    /// [`LENGTH_SAMPLES`] each, no attention file, 256 samples per language/offset length.
    fn default() -> Self {
        Self {
            score: ScoreOptions::default(),
            length: LengthOptions {
                extras: LENGTH_EXTRAS.to_vec(),
                samples: Some(LENGTH_SAMPLES),
                step: None,
                memory: EVAL_MEMORY,
            },
            attention_view: false,
            per_length: 256,
        }
    }
}

/// What was measured (the task's part of a job's result).
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Test-split evaluation of the last checkpoint (number and letter tasks).
    pub test: Option<EvalReport>,
    /// Test accuracy at the training lengths (every task).
    pub test_accuracy: Option<f64>,
    /// Test accuracy per hop count (number and letter).
    pub per_hop: BTreeMap<usize, f64>,
    /// Layer types at the last checkpoint (number and letter).
    pub layer_types: Option<String>,
    /// Accuracy per input length (see the module docs).
    pub length_accuracy: BTreeMap<usize, f64>,
    /// N* (language jobs).
    pub n_star: Option<usize>,
    /// Seconds of scoring.
    pub score_seconds: f64,
    /// Seconds of the length test.
    pub length_seconds: f64,
}

/// Measures the trained run in `run` (its config `config`), labelled `label` in progress bars.
pub fn measure(
    run: &Path,
    config: &RunConfig,
    options: &MeasureOptions,
    label: &str,
    progress: &dyn Progress,
) -> Result<Measured> {
    let device = Device::Cpu;
    match config.task {
        TaskKind::Number | TaskKind::Letter => multi_hop(run, options, label, progress, &device),
        TaskKind::Language | TaskKind::Offset | TaskKind::Canonical => {
            let (dir, config) = RunDir::open(run)?;
            let model = dir.load_model(dir.latest_checkpoint()?, &config, &device)?;
            let stage = progress.stage(&format!("test {label}"), 1);
            let start = std::time::Instant::now();
            let mut m = match config.task {
                TaskKind::Language => language(&model, &config, options, run)?,
                TaskKind::Offset => offset(&model, &config, options, run)?,
                _ => canonical(&model, &config, options)?,
            };
            m.length_seconds = start.elapsed().as_secs_f64();
            drop(stage);
            Ok(m)
        }
    }
}

fn multi_hop(
    run: &Path,
    options: &MeasureOptions,
    label: &str,
    progress: &dyn Progress,
    device: &Device,
) -> Result<Measured> {
    let test = eval_checkpoint(run, None, 0, None, EVAL_MEMORY, device)?;
    let eval_file = format!("eval/{}", test.file_name(true));
    let eval_key = format!("test split of step {}", test.step);
    Ledger::begin(run, &eval_file, &eval_key).map_err(|e| io(&run.join(LEDGER), e))?;
    write_json(&run.join(&eval_file), &test)?;
    Ledger::finish(run, &eval_file, &eval_key).map_err(|e| io(&run.join(LEDGER), e))?;

    let start = std::time::Instant::now();
    let s = &options.score;
    let score_key = format!(
        "swap scores of every checkpoint: samples {}, query {:?}, tau {}, accuracy samples {}, blocks {:?}, planes {}",
        s.samples, s.query, s.tau, s.eval_samples, s.blocks, s.planes
    );
    let scores: Vec<HeadStep> = owned(run, "scores.jsonl", &score_key, read_scores, || {
        let stage = progress.stage(&format!("score {label}"), 0);
        Ok(score_run(run, &options.score, device, |done, total| {
            stage.set_total(total as u64);
            stage.set(done as u64);
        })?
        .lines)
    })?;
    let score_seconds = start.elapsed().as_secs_f64();

    let start = std::time::Instant::now();
    let l = &options.length;
    let length_key = format!(
        "length test: extras {:?}, samples {:?}, step {:?}",
        l.extras, l.samples, l.step
    );
    let read_lengths = |path: &Path| -> Result<Vec<LengthRow>> {
        let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
        Ok(lengthgen::from_csv(&text, &path.display().to_string())?)
    };
    let lengths = owned(run, "lengthgen.csv", &length_key, read_lengths, || {
        let stage = progress.stage(&format!("length {label}"), l.extras.len() as u64);
        let rows = length_generalisation(run, l, device, |done, _| stage.set(done as u64))?;
        let path = run.join("lengthgen.csv");
        write_atomic(&path, lengthgen::to_csv(&rows)?.as_bytes()).map_err(|e| io(&path, e))?;
        Ok(rows)
    })?;
    let length_seconds = start.elapsed().as_secs_f64();

    if options.attention_view {
        let file = format!("attention/{}", AttentionView::file_name(test.step, 0));
        let key = format!("attention of step {} on test input 0", test.step);
        owned(
            run,
            &file,
            &key,
            |_| Ok(()),
            || {
                let view = attention_view(run, Some(test.step), 0, device)?;
                write_view(run, &view)?;
                Ok(())
            },
        )?;
    }
    Ok(Measured {
        test_accuracy: Some(test.accuracy.accuracy),
        per_hop: test.accuracy.per_hop.clone(),
        layer_types: Some(layer_types(&scores, GAMMA)),
        length_accuracy: lengths.iter().map(|r| (r.length, r.accuracy)).collect(),
        n_star: None,
        test: Some(test),
        score_seconds,
        length_seconds,
    })
}

/// `file` of `run`, read with `read` when the run's ledger vouches for it under `key` (a job
/// stopped while measuring resumes there), else made by `make` (which writes it) and recorded.
/// A file the ledger does not vouch for (another command's, or other settings') is refused in
/// one line, never read.
fn owned<T>(
    run: &Path,
    file: &str,
    key: &str,
    read: impl FnOnce(&Path) -> Result<T>,
    make: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let ledger = |e| io(&run.join(LEDGER), e);
    match Ledger::check(run, file, key).map_err(ledger)? {
        Standing::Own => read(&run.join(file)),
        Standing::Absent | Standing::Pending => {
            Ledger::begin(run, file, key).map_err(ledger)?;
            let made = make()?;
            Ledger::finish(run, file, key).map_err(ledger)?;
            Ok(made)
        }
        Standing::Foreign(why) => Err(SweepError::Job {
            id: run.display().to_string(),
            message: format!("{why}; move it away and rerun: the job measures it again"),
        }),
    }
}

/// A language run: training lengths lo..=hi and every length up to [`LANGUAGE_REACH`] x hi.
fn language(
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
    let [lo, hi] = data.lengths;
    let plan: Vec<(usize, usize)> = (lo..=LANGUAGE_REACH * hi)
        .map(|n| (n, options.per_length))
        .collect();
    let rows = accuracy_at_lengths(model, &samples, Split::Test, &plan, EVAL_MEMORY)?;
    write_lengths(run, &rows)?;
    let marks = [
        hi,
        hi + (hi / 4).max(1),
        hi + (hi / 2).max(1),
        LANGUAGE_REACH * hi,
    ];
    Ok(Measured {
        test_accuracy: Some(pooled(rows.iter().filter(|r| r.length <= hi))),
        length_accuracy: rows
            .iter()
            .filter(|r| marks.contains(&r.length))
            .map(|r| (r.length, r.accuracy()))
            .collect(),
        n_star: Some(n_star(&rows, hi)),
        ..Measured::default()
    })
}

/// An offset run: the training lengths, and [`OFFSET_SCALES`] x the longest.
fn offset(
    model: &GptJ,
    config: &RunConfig,
    options: &MeasureOptions,
    run: &Path,
) -> Result<Measured> {
    let data = config
        .offset
        .as_ref()
        .expect("a checked offset run has [offset]");
    let task = OffsetTask::new(data.vocab, data.k).map_err(ropelab_train::TrainError::from)?;
    let [lo, hi] = data.lengths;
    let count = hi - lo + 1;
    let per = options.per_length.div_ceil(count).max(1);
    let mut plan: Vec<(usize, usize)> = (lo..=hi).map(|n| (n, per)).collect();
    let scaled: Vec<usize> = OFFSET_SCALES.iter().map(|s| s * hi).collect();
    plan.extend(
        scaled
            .iter()
            .filter(|&&n| n > hi)
            .map(|&n| (n, options.per_length)),
    );
    let rows =
        last_accuracy_at_lengths(model, &task, config.seed, Split::Test, &plan, EVAL_MEMORY)?;
    write_lengths(run, &rows)?;
    let train: Vec<&LengthAccuracy> = rows.iter().take(count).collect();
    let mut length_accuracy: BTreeMap<usize, f64> = rows
        .iter()
        .skip(count)
        .map(|r| (r.length, r.accuracy()))
        .collect();
    length_accuracy.insert(hi, train.last().map_or(0.0, |r| r.accuracy()));
    Ok(Measured {
        test_accuracy: Some(pooled(train.into_iter())),
        length_accuracy,
        ..Measured::default()
    })
}

/// A canonical run: accuracy on `per_length` test samples.
fn canonical(model: &GptJ, config: &RunConfig, options: &MeasureOptions) -> Result<Measured> {
    let task = config
        .canonical
        .as_ref()
        .expect("a checked canonical run has [canonical]");
    let rows = accuracy_by_position(
        model,
        task,
        config.seed,
        Split::Test,
        options.per_length,
        EVAL_MEMORY,
    )?;
    let n: usize = rows.iter().map(|r| r.n).sum();
    let correct: usize = rows.iter().map(|r| r.correct).sum();
    Ok(Measured {
        test_accuracy: Some(correct as f64 / n.max(1) as f64),
        ..Measured::default()
    })
}

/// Accuracy pooled over rows (correct / n).
fn pooled<'a>(rows: impl Iterator<Item = &'a LengthAccuracy>) -> f64 {
    let (n, correct) = rows.fold((0, 0), |(n, c), r| (n + r.n, c + r.correct));
    correct as f64 / n.max(1) as f64
}

fn write_lengths(run: &Path, rows: &[LengthAccuracy]) -> Result<()> {
    let path = run.join("lengths.csv");
    let text = ropelab_io::to_csv(rows).map_err(|e| SweepError::Job {
        id: run.display().to_string(),
        message: e.to_string(),
    })?;
    write_atomic(&path, text.as_bytes()).map_err(|e| io(&path, e))
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    write_atomic(path, serde_json::to_string_pretty(value)?.as_bytes()).map_err(|e| io(path, e))
}

fn io(path: &Path, source: std::io::Error) -> SweepError {
    SweepError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Reads a run's `scores.jsonl`.
pub fn read_scores(path: &Path) -> Result<Vec<HeadStep>> {
    let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| SweepError::Job {
                id: path.display().to_string(),
                message: format!("line {} is not a score line: {e}", i + 1),
            })
        })
        .collect()
}
