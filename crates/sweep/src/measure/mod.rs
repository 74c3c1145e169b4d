//! What a job measures on its trained run, by task (docs/sweeps.md, "What a job measures"):
//! - **number / letter** ([`multi_hop`]): the test split (overall and per hop), every
//!   checkpoint's swap scores and the layer types, the length test, and (on request) the
//!   attention viewer's file, a number model's hop map and the head-group ablations; each file
//!   (`eval/`, `scores.jsonl`, `lengthgen.csv`, `attention/`, `hops.csv`, `probes.csv`, `layer_sets.csv`, `ablation.csv`) is recorded in the run's ledger (`measured.json`, [`ropelab_io::ledger`])
//!   with the settings that made it and its checksum, and reused only when the ledger vouches
//!   for it, so a job stopped while scoring resumes there and a file another command wrote is
//!   refused, never read;
//! - **language** ([`language`]): accuracy on test strings of every training length and of
//!   every length up to [`LANGUAGE_REACH`] x the longest (or of the lengths asked for), and N*
//!   (`lengths.csv`); with `heads`, every head's fit to the MOD predicates (`heads.csv`);
//! - **offset** ([`offset`]): last-position accuracy at the training lengths and at 1, 2, 4 and
//!   8 x the longest, or at the lengths asked for (`lengths.csv`); with `heads`, the mechanisms
//!   of the implicit-bias experiment (`run.csv`, `planes.csv`, `carrier.csv`, `pinning.csv`,
//!   `mechanism.csv`);
//! - **ambiguous** ([`ambiguous`]): accuracy on agree test samples at the training length and
//!   at 1, 2, 4 and 8 x its items or the lengths asked for (`lengths.csv`), the conflict
//!   split's mechanism fractions (`conflict.csv`); with `heads`, every head's swap scores and
//!   type (`heads.csv`);
//! - **canonical** ([`canonical`]): accuracy on the test split per answer position
//!   (`per_position.csv`); with `heads`, the head's swap scores, per-plane scores, largest
//!   weight per key position and plane margins (`head.json`).

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::Device;
use ropelab_analysis::measure::dynamics::{HeadStep, ScoreOptions};
use ropelab_analysis::measure::keys;
use ropelab_analysis::measure::lengthgen::LengthOptions;
use ropelab_io::{write_atomic, Ledger, Progress, Standing, LEDGER};
use ropelab_tasks::TaskKind;
use ropelab_train::eval::EvalReport;
use ropelab_train::lengths::LengthAccuracy;
use ropelab_train::{RunConfig, RunDir, EVAL_MEMORY};

use crate::{Result, SweepError};

pub mod ambiguous;
pub mod canonical;
pub mod language;
pub mod multi_hop;
pub mod offset;

/// How far beyond its longest training string a language job is tested (N* is read there).
pub const LANGUAGE_REACH: usize = 2;

/// Multiples of the longest training length an offset job is tested at.
pub const OFFSET_SCALES: [usize; 4] = [1, 2, 4, 8];

/// The default purity tolerance of the layer types in results ([`MeasureOptions::gamma`]).
pub const GAMMA: ropelab_analysis::measure::dynamics::Gamma =
    ropelab_analysis::measure::dynamics::Gamma::DEFAULT;

/// What a job measures and how much of it.
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    /// Swap scores of every checkpoint (number and letter tasks).
    pub score: ScoreOptions,
    /// The length test (number and letter tasks).
    pub length: LengthOptions,
    /// Also write the attention viewer's file (every head on the first test input).
    pub attention_view: bool,
    /// Also write a number model's hop map (`hops.csv`, `ropelab hops`) on this many test
    /// samples.
    pub hop_samples: Option<usize>,
    /// Also write the head-group ablations (`ablation.csv`, `ropelab ablate`) of a number or
    /// letter model on this many test samples, the heads typed at [`MeasureOptions::gamma`].
    pub ablation_samples: Option<usize>,
    /// Also write a number model's residual-stream probes (`probes.csv`) and joint layer
    /// knock-outs (`layer_sets.csv`, both `ropelab probe`) on (this many, this many per set)
    /// test samples.
    pub route_samples: Option<(usize, usize)>,
    /// Test samples per length (language and offset jobs) and test samples (canonical jobs).
    pub per_length: usize,
    /// Tested lengths in place of the task's default: an offset job is tested at exactly these,
    /// a language job at these beyond its training lengths (`per_length` inputs each).
    pub lengths: Option<Vec<usize>>,
    /// Also measure the heads as the task's experiment does (see the module docs).
    pub heads: bool,
    /// Test samples a canonical job's head is scored on (with `heads`).
    pub head_samples: usize,
    /// Purity tolerance of the layer types a job's result records (a study's `[claims]
    /// gamma`, so its tables show what its verdicts judge).
    pub gamma: ropelab_analysis::measure::dynamics::Gamma,
}

/// Extension tokens of the length test of every number/letter job of a sweep.
pub const LENGTH_EXTRAS: [usize; 4] = [0, 16, 64, 256];

/// Test samples per length of that test.
pub const LENGTH_SAMPLES: usize = 256;

/// Test samples per length of a language/offset job, and test samples of a canonical job.
pub const PER_LENGTH: usize = 256;

/// Test samples a canonical job's head is scored on.
pub const HEAD_SAMPLES: usize = 64;

impl Default for MeasureOptions {
    /// A sweep's: 100 scored samples, the length test at [`LENGTH_EXTRAS`] with
    /// [`LENGTH_SAMPLES`] each, no attention file, [`PER_LENGTH`] samples per language/offset
    /// length at the task's default lengths, no hop map, no head measurements.
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
            hop_samples: None,
            ablation_samples: None,
            route_samples: None,
            per_length: PER_LENGTH,
            lengths: None,
            heads: false,
            head_samples: HEAD_SAMPLES,
            gamma: GAMMA,
        }
    }
}

impl MeasureOptions {
    /// Every setting that changes what a job measures, as `name -> value` texts (memory
    /// budgets and output paths, which change only how it is computed, are left out): a job's
    /// result records them, and a result measured under other settings is measured again.
    pub fn settings(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("score".to_string(), keys::scores(&self.score)),
            ("length".to_string(), keys::lengths(&self.length)),
            (
                "attention_view".to_string(),
                self.attention_view.to_string(),
            ),
            ("hop_samples".to_string(), format!("{:?}", self.hop_samples)),
            (
                "ablation_samples".to_string(),
                format!("{:?}", self.ablation_samples),
            ),
            (
                "route_samples".to_string(),
                format!("{:?}", self.route_samples),
            ),
            ("per_length".to_string(), self.per_length.to_string()),
            ("lengths".to_string(), format!("{:?}", self.lengths)),
            ("heads".to_string(), self.heads.to_string()),
            ("head_samples".to_string(), self.head_samples.to_string()),
            ("gamma".to_string(), format!("{:?}", self.gamma)),
        ])
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
    record_training_log(run)?;
    match config.task {
        TaskKind::Number | TaskKind::Letter => {
            multi_hop::multi_hop(run, options, label, progress, &device)
        }
        TaskKind::Language | TaskKind::Offset | TaskKind::Canonical | TaskKind::Ambiguous => {
            let (dir, config) = RunDir::open(run)?;
            let model = dir.load_model(dir.latest_checkpoint()?, &config, &device)?;
            let stage = progress.stage(&format!("test {label}"), 1);
            let start = std::time::Instant::now();
            let mut m = match config.task {
                TaskKind::Language => language::measure(&model, &config, options, run)?,
                TaskKind::Offset => offset::measure(&model, &config, options, run)?,
                TaskKind::Ambiguous => ambiguous::measure(&model, &config, options, run)?,
                _ => canonical::measure(&model, &config, options, run)?,
            };
            m.length_seconds = start.elapsed().as_secs_f64();
            drop(stage);
            Ok(m)
        }
    }
}

/// What the run in `run` (config `config`) measured under `settings` ([`MeasureOptions::settings`]),
/// as its ledger vouches for it: derived from the files its measurement wrote, each read only
/// while the ledger vouches for it, exactly as [`measure`] derives its result from them.
/// Nothing is computed or written: a file missing, unfinished or changed is an error naming
/// it. A job's `result.json` must say what this says ([`crate::local::JobResult::contradiction`]).
pub fn recorded(
    run: &Path,
    config: &RunConfig,
    settings: &BTreeMap<String, String>,
) -> Result<Measured> {
    let setting = |name: &str| {
        settings.get(name).ok_or_else(|| SweepError::Job {
            id: run.display().to_string(),
            message: format!("the measurement settings have no `{name}`"),
        })
    };
    let bad_setting = |name: &str, value: &str| SweepError::Job {
        id: run.display().to_string(),
        message: format!("the measurement setting {name} = {value} is not one ropelab writes"),
    };
    let per_length = setting("per_length")?;
    let per_length: usize = per_length
        .parse()
        .map_err(|_| bad_setting("per_length", per_length))?;
    let asked = setting("lengths")?;
    let asked: Option<Vec<usize>> = match asked.as_str() {
        "None" => None,
        text => Some(
            text.strip_prefix("Some([")
                .and_then(|t| t.strip_suffix("])"))
                .map(|t| {
                    t.split(", ")
                        .filter(|n| !n.is_empty())
                        .map(str::parse)
                        .collect::<std::result::Result<Vec<usize>, _>>()
                })
                .and_then(|r| r.ok())
                .ok_or_else(|| bad_setting("lengths", asked))?,
        ),
    };
    // The table must hold exactly the (length, inputs) its job asked for: a row added or
    // changed under a re-sealed ledger contradicts the measurement (twenty-fourth pass, S).
    let lengths = |plan: Vec<(usize, usize)>| -> Result<Vec<LengthAccuracy>> {
        let rows = read_run_lengths(run, None, false)?;
        let got: Vec<(usize, usize)> = rows.iter().map(|r| (r.length, r.n)).collect();
        if got != plan {
            return Err(SweepError::Job {
                id: run.display().to_string(),
                message: format!(
                    "{} holds (length, inputs) {got:?}, its job measures {plan:?}",
                    run.join("lengths.csv").display()
                ),
            });
        }
        Ok(rows)
    };
    Ok(match config.task {
        TaskKind::Number | TaskKind::Letter => {
            let gamma = setting("gamma")?;
            let gamma = gamma
                .strip_prefix("Gamma(")
                .and_then(|g| g.strip_suffix(')'))
                .and_then(|g| g.parse::<f64>().ok())
                .and_then(|g| ropelab_analysis::lens::purity::Gamma::new(g).ok())
                .ok_or_else(|| SweepError::Job {
                    id: run.display().to_string(),
                    message: format!("the measurement setting gamma = {gamma} is no tolerance"),
                })?;
            multi_hop::recorded(run, config, setting("score")?, setting("length")?, gamma)?
        }
        TaskKind::Language => {
            let trained = config.language.as_ref().map_or([0, 0], |l| l.lengths);
            let plan = language::plan(trained, per_length, asked.as_deref());
            language::summary(&lengths(plan)?, trained[1])
        }
        TaskKind::Offset => {
            let trained = config.offset.as_ref().map_or([0, 0], |o| o.lengths);
            let plan = offset::plan(trained, per_length, asked.as_deref());
            offset::summary(&lengths(plan)?, trained[1])
        }
        TaskKind::Ambiguous => {
            let items = match config.ambiguous.as_ref().map(|a| a.task()) {
                Some(Ok(task)) => task.items(),
                _ => 0,
            };
            let heads = match setting("heads")?.as_str() {
                "true" => Some(read_run_csv::<ambiguous::AmbiguousHead>(run, "heads.csv")?),
                _ => None,
            };
            let plan = ambiguous::plan(items, per_length, asked.as_deref());
            ambiguous::summary(&lengths(plan)?, items, heads.as_deref())
        }
        TaskKind::Canonical => {
            let rows: Vec<ropelab_train::canonical_data::PositionAccuracy> =
                read_run_csv(run, "per_position.csv")?;
            // One row per answer position of the task, in order, counting the samples asked
            // for (twenty-fourth pass, S1).
            let len = config.canonical.as_ref().map_or(0, |t| t.len);
            let positions: Vec<usize> = rows.iter().map(|r| r.position).collect();
            let total: usize = rows.iter().map(|r| r.n).sum();
            if positions != (0..len).collect::<Vec<_>>()
                || total != per_length
                || rows.iter().any(|r| r.correct > r.n)
            {
                return Err(SweepError::Job {
                    id: run.display().to_string(),
                    message: format!(
                        "{} holds positions {positions:?} over {total} samples, its job \
                         measures positions 0..{len} over {per_length}",
                        run.join("per_position.csv").display()
                    ),
                });
            }
            canonical::summary(&rows)
        }
    })
}

/// `file` of `run` read with `read` while the run's ledger vouches for it under `key`, else an
/// error naming the file and why ([`recorded`]).
pub(crate) fn vouched<T>(
    run: &Path,
    file: &str,
    key: &str,
    read: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    let why = match Ledger::check(run, file, key).map_err(|e| io(&run.join(LEDGER), e))? {
        Standing::Own => return read(&run.join(file)),
        Standing::Absent => "is missing".to_string(),
        Standing::Pending => "was being measured when its job stopped".to_string(),
        Standing::Foreign(why) => why,
    };
    Err(SweepError::Job {
        id: run.display().to_string(),
        message: format!("{}: {why}", run.join(file).display()),
    })
}

/// Records the run's training log (`metrics.jsonl`, which the verdicts read) in its ledger under
/// the key of its last checkpoint, when the ledger does not list it yet (a run measured before
/// the log was recorded gets it at its next measurement); a log the ledger lists must be the
/// one it recorded, else it is refused by name.
fn record_training_log(run: &Path) -> Result<()> {
    const LOG: &str = "metrics.jsonl";
    if !run.join(LOG).exists() {
        return Ok(());
    }
    let ledger_err = |e| io(&run.join(LEDGER), e);
    let listed = Ledger::load(run)
        .map_err(ledger_err)?
        .is_some_and(|l| l.files.get(LOG).is_some_and(|e| e.sha256.is_some()));
    let step = ropelab_train::RunDir::new(run).latest_checkpoint()?;
    let key = ropelab_analysis::measure::keys::training_log(step);
    if !listed {
        return Ledger::finish(run, LOG, &key).map_err(ledger_err);
    }
    match Ledger::check(run, LOG, &key).map_err(ledger_err)? {
        Standing::Foreign(why) => Err(SweepError::Job {
            id: run.display().to_string(),
            message: format!("{why}; the verdicts read it, so it is not reused"),
        }),
        _ => Ok(()),
    }
}

/// `file` of `run`, read with `read` when the run's ledger vouches for it under `key` (a job
/// stopped while measuring resumes there), else made by `make` (which writes it) and recorded.
/// A file the ledger does not vouch for (another command's, or other settings') is refused in
/// one line, never read.
pub(crate) fn owned<T>(
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

/// Accuracy pooled over rows (correct / n).
pub(crate) fn pooled<'a>(rows: impl Iterator<Item = &'a LengthAccuracy>) -> f64 {
    let (n, correct) = rows.fold((0, 0), |(n, c), r| (n + r.n, c + r.correct));
    correct as f64 / n.max(1) as f64
}

pub(crate) fn write_lengths(run: &Path, rows: &[LengthAccuracy]) -> Result<()> {
    write_run_csv(run, "lengths.csv", rows)
}

/// Writes `rows` as the table `file` of `run` (atomically), recorded in the run's ledger under
/// [`keys::run_table`]: the experiment that collects it reads it only while the ledger vouches
/// for it ([`read_run_csv`]; twenty-first pass, N4).
pub(crate) fn write_run_csv<T: serde::Serialize>(run: &Path, file: &str, rows: &[T]) -> Result<()> {
    let text = ropelab_io::to_csv(rows).map_err(|e| SweepError::Job {
        id: run.display().to_string(),
        message: e.to_string(),
    })?;
    write_run_file(run, file, text.as_bytes())
}

/// Writes `bytes` as `file` of `run`, recorded in its ledger ([`write_run_csv`]).
pub(crate) fn write_run_file(run: &Path, file: &str, bytes: &[u8]) -> Result<()> {
    let key = keys::run_table(file);
    let ledger = |e| io(&run.join(LEDGER), e);
    Ledger::begin(run, file, &key).map_err(ledger)?;
    let path = run.join(file);
    write_atomic(&path, bytes).map_err(|e| io(&path, e))?;
    Ledger::finish(run, file, &key).map_err(ledger)
}

/// Whether the run's ledger vouches for its table `file` as its job wrote it (`Ok(())`), or
/// why not: changed after it was measured, never recorded (an older ropelab's run, or another
/// command's file), or not finished.
pub fn vouched_run_file(run: &Path, file: &str) -> Result<()> {
    let key = keys::run_table(file);
    let why = match Ledger::check(run, file, &key).map_err(|e| io(&run.join(LEDGER), e))? {
        Standing::Own => return Ok(()),
        Standing::Absent => format!("{} is missing", run.join(file).display()),
        Standing::Pending => format!(
            "{} was being measured when its job stopped",
            run.join(file).display()
        ),
        Standing::Foreign(why) => why,
    };
    Err(SweepError::Job {
        id: run.display().to_string(),
        message: format!(
            "{why}: the experiment reads a run's tables only as its ledger vouches for them \
             (rerun the experiment into a new --out, or move the run away so it is measured \
             again)"
        ),
    })
}

/// The run's `lengths.csv` ([`read_run_csv`]) with every row a count of what it measured
/// (at least one input, no more correct than inputs) and, when `asked` is given, exactly the
/// lengths the experiment asks for (`asked`; with `after_training`, those after the rows of
/// the training lengths a language run measures first): a table whose content contradicts
/// itself or the experiment is refused even when its ledger vouches for it (twenty-second
/// pass, S3, S4).
pub fn read_run_lengths(
    run: &Path,
    asked: Option<&[usize]>,
    after_training: bool,
) -> Result<Vec<LengthAccuracy>> {
    let rows: Vec<LengthAccuracy> = read_run_csv(run, "lengths.csv")?;
    let bad = |why: String| SweepError::Job {
        id: run.display().to_string(),
        message: format!(
            "{}: {why}: a damaged or edited file",
            run.join("lengths.csv").display()
        ),
    };
    if let Some(r) = rows
        .iter()
        .find(|r| r.n == 0 || r.correct > r.n || !r.loss.is_finite())
    {
        return Err(bad(format!(
            "the row of length {} counts {} correct of {} inputs (loss {}), which no \
             measurement gives",
            r.length, r.correct, r.n, r.loss
        )));
    }
    if let Some(asked) = asked {
        let lengths: Vec<usize> = rows.iter().map(|r| r.length).collect();
        let fits = match after_training {
            true => lengths.ends_with(asked),
            false => lengths == asked,
        };
        if !fits {
            return Err(bad(format!(
                "it holds lengths {lengths:?}, the experiment measures {asked:?}"
            )));
        }
    }
    Ok(rows)
}

/// The table `file` of `run`, read only while the run's ledger vouches for it
/// ([`vouched_run_file`]).
pub fn read_run_csv<T: serde::de::DeserializeOwned>(run: &Path, file: &str) -> Result<Vec<T>> {
    vouched_run_file(run, file)?;
    let path = run.join(file);
    ropelab_io::read_csv_file(&path).map_err(|e| SweepError::Job {
        id: run.display().to_string(),
        message: e.to_string(),
    })
}

pub(crate) fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    write_atomic(path, serde_json::to_string_pretty(value)?.as_bytes()).map_err(|e| io(path, e))
}

pub(crate) fn io(path: &Path, source: std::io::Error) -> SweepError {
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
