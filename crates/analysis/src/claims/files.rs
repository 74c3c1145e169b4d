//! What the verdicts read: a study's run files (scores, metrics, the test evaluation,
//! length generalisation, attention views, the hop map, the ablations) per seed and task, the theory curves, and the
//! offset and canonical tables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ropelab_io::{Expect, Ledger, LEDGER};
use ropelab_tasks::TaskKind;
use ropelab_train::Accuracy;
use serde::Deserialize;

use crate::lens::attention::AttentionView;
use crate::measure::ablation::{AblationRow, ABLATION_FILE};
use crate::measure::dynamics::HeadStep;
use crate::measure::hops::HopRow;
use crate::measure::layer_sets::{LayerSetRow, LAYER_SETS_FILE};
use crate::measure::lengthgen::{from_csv, LengthRow};
use crate::measure::probe::{ProbeRow, PROBES_FILE};
use crate::{AnalysisError, Result};
use ropelab_theory::discrepancy::DiscrepancyRow;

/// The files of one trained model of the study.
#[derive(Debug, Clone, Default)]
pub struct RunFiles {
    /// Every (checkpoint, layer, head) line of `scores.jsonl`.
    pub scores: Vec<HeadStep>,
    /// (step, validation accuracy) of every evaluation in `metrics.jsonl`.
    pub val: Vec<(usize, Accuracy)>,
    /// Optimizer steps of the run.
    pub steps: usize,
    /// Test accuracy of the last checkpoint (`eval/step-S-extra-0.json`).
    pub test: Option<Accuracy>,
    /// The step `test` was measured at (the latest with a full test evaluation).
    pub test_step: Option<usize>,
    /// `lengthgen.csv`.
    pub lengths: Vec<LengthRow>,
    /// `attention/*.json`, in file-name order.
    pub attention: Vec<AttentionView>,
    /// `hops.csv` (a number model's hop map), empty when absent.
    pub hops: Vec<HopRow>,
    /// `ablation.csv` (the head groups knocked out), empty when absent.
    pub ablation: Vec<AblationRow>,
    /// `probes.csv` (a number model's residual-stream probes), empty when absent.
    pub probes: Vec<ProbeRow>,
    /// `layer_sets.csv` (a number model's joint layer knock-outs), empty when absent.
    pub layer_sets: Vec<LayerSetRow>,
    /// The checkpoint each of `hops.csv`, `ablation.csv`, `probes.csv` and `layer_sets.csv`
    /// was measured at (its rows' `step`), by file name.
    pub measured_at: BTreeMap<&'static str, usize>,
}

/// One seed of the study: the number and the letter model.
#[derive(Debug, Clone, Default)]
pub struct SeedFiles {
    /// The seed.
    pub seed: u64,
    /// The number-task run (None when missing).
    pub number: Option<RunFiles>,
    /// The letter-task run.
    pub letter: Option<RunFiles>,
    /// The number model with fewer layers than hops (`seed-S/compose`, the study's
    /// `[compose]` stage; None when the study has none for this seed).
    pub compose: Option<RunFiles>,
}

impl SeedFiles {
    /// The run of `task` (None when missing; the study has no language runs).
    pub fn run(&self, task: TaskKind) -> Option<&RunFiles> {
        match task {
            TaskKind::Number => self.number.as_ref(),
            TaskKind::Letter => self.letter.as_ref(),
            TaskKind::Language | TaskKind::Offset | TaskKind::Canonical | TaskKind::Ambiguous => {
                None
            }
        }
    }
}

/// (n, delta) of a theory discrepancy CSV.
pub type Curve = Vec<(usize, f64, f64)>;

/// Everything the verdicts read.
#[derive(Debug, Clone, Default)]
pub struct StudyFiles {
    /// Per seed.
    pub seeds: Vec<SeedFiles>,
    /// (n, delta, bound) of the hand-built Index head.
    pub index: Option<Curve>,
    /// (n, delta, bound) of the hand-built Retrieval head.
    pub retrieval: Option<Curve>,
    /// The implicit-bias experiment's tables (`offset/`), when the study ran it.
    pub offset: Option<super::offset::OffsetFiles>,
    /// The canonical tasks' summaries (`canonical/`), when the study ran them.
    pub canonical: Option<super::canonical::CanonicalFiles>,
}

fn read(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(AnalysisError::Io {
            path: path.to_owned(),
            source: e,
        }),
    }
}

fn invalid(path: &Path, what: impl std::fmt::Display) -> AnalysisError {
    AnalysisError::Invalid(format!("{}: {what}", path.display()))
}

#[derive(Deserialize)]
struct MetricsLine {
    step: usize,
    val: Option<Accuracy>,
    #[serde(default)]
    run: String,
}

/// An `eval/*.json` file (its accuracy fields are flattened, so read them one by one: serde
/// cannot read integer map keys through `flatten`).
#[derive(Deserialize)]
struct EvalFile {
    step: usize,
    extra: usize,
    n: usize,
    accuracy: f64,
    loss: f64,
    per_hop: BTreeMap<usize, f64>,
    #[serde(default)]
    run: String,
    #[serde(default)]
    seq_len: Option<usize>,
}

/// Why test evaluation `f`, read from `name`, is not what `eval` writes for the run with
/// `config` (None when it is): its name is its step, extra and sample count; its length the
/// run's input length plus extra; its loss no negative number; and its accuracies are counts
/// of the very samples it names, the `n` test samples drawn as the split is (each hop's a share of that
/// hop's samples, the overall one their sum over `n`; seventeenth pass, SILENT-1).
fn eval_mismatch(name: &str, f: &EvalFile, config: &ropelab_train::RunConfig) -> Option<String> {
    let base = format!("step-{:06}-extra-{}", f.step, f.extra);
    let whole = f.n == config.data.test;
    let own = if whole {
        format!("{base}.json")
    } else {
        format!("{base}-n{}.json", f.n)
    };
    if name != own && name != format!("{base}-n{}.json", f.n) {
        return Some(format!(
            "it holds step {} extra {} over {} samples, which is the file {own}, not the file \
             its name says",
            f.step, f.extra, f.n
        ));
    }
    let core = config.layout.core_len();
    if let Some(l) = f.seq_len.filter(|&l| l != core + f.extra) {
        return Some(format!(
            "seq_len {l} is not the run's input length {core} plus extra {}",
            f.extra
        ));
    }
    if !(f.loss.is_finite() && f.loss >= 0.0) {
        return Some(format!("loss {} is no loss", f.loss));
    }
    if let Err(why) = config.test_samples(f.n, "it") {
        return Some(why);
    }
    counts_mismatch(config, f.n, f.extra, f.accuracy, &f.per_hop)
}

/// Why `accuracy` and `per_hop` over the `n` test samples (drawn as the split is) of the run with `config`
/// (lengthened by `extra`) are no counts of those samples (None when they are): each hop's
/// accuracy a whole share of that hop's samples, the overall one their sum over `n`.
fn counts_mismatch(
    config: &ropelab_train::RunConfig,
    n: usize,
    extra: usize,
    accuracy: f64,
    per_hop: &BTreeMap<usize, f64>,
) -> Option<String> {
    let task = ropelab_tasks::Task::new(config.task, config.layout.clone()).ok()?;
    let data = ropelab_tasks::Dataset::new(task, config.seed, ropelab_tasks::Split::Test, n, extra)
        .ok()?;
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for i in 0..data.len() {
        *counts.entry(data.sample(i).ok()?.hops).or_default() += 1;
    }
    if counts.keys().ne(per_hop.keys()) {
        return Some(format!(
            "per-hop accuracies of hops {:?}, where its samples have hops {:?}",
            per_hop.keys().collect::<Vec<_>>(),
            counts.keys().collect::<Vec<_>>()
        ));
    }
    let mut correct = 0.0;
    for (h, &n_h) in &counts {
        let share = per_hop[h] * n_h as f64;
        if (share - share.round()).abs() > 1e-6 {
            return Some(format!(
                "the accuracy of hop {h}, {}, is no share of its {n_h} samples",
                per_hop[h]
            ));
        }
        correct += share.round();
    }
    let overall = correct / n.max(1) as f64;
    if (overall - accuracy).abs() > 1e-9 {
        return Some(format!(
            "accuracy {} is not its per-hop counts over {} samples ({overall})",
            accuracy, n
        ));
    }
    None
}

/// Why an accuracy read from a file is none ropelab writes: outside [0, 1], or NaN.
fn bad_accuracy(what: &str, accuracy: f64) -> Option<String> {
    (!(0.0..=1.0).contains(&accuracy)).then(|| {
        let kind = if what == "mass" {
            "share of attention"
        } else {
            "accuracy"
        };
        format!("{what} {accuracy} is no {kind} (one in [0, 1]): a damaged or edited file")
    })
}

/// Why a table row's accuracy is not its `correct` answers over its `n` samples.
fn bad_count(correct: usize, n: usize, accuracy: f64) -> Option<String> {
    let own = correct as f64 / n.max(1) as f64;
    (correct > n || (n > 0 && (accuracy - own).abs() > 1e-9)).then(|| {
        format!(
            "accuracy {accuracy} is not {correct} correct of {n} samples: a damaged or edited \
             file"
        )
    })
}

/// Why an evaluation of `n` samples read from a file is none ropelab writes: an accuracy or a
/// per-hop accuracy outside [0, 1], no samples, or (`mean_checked`: a test-split or length
/// evaluation) an accuracy outside the range of its per-hop accuracies (fourteenth pass, N2,
/// N4).
fn bad_evaluation(
    what: &str,
    n: usize,
    accuracy: f64,
    per_hop: &BTreeMap<usize, f64>,
    mean_checked: bool,
) -> Option<String> {
    if let Some(why) = bad_accuracy(what, accuracy) {
        return Some(why);
    }
    if n == 0 {
        return Some(format!("{what} {accuracy} is of no samples (n = 0)"));
    }
    if let Some(why) = per_hop
        .iter()
        .find_map(|(hop, &a)| bad_accuracy(&format!("{what} of hop {hop}"), a))
    {
        return Some(why);
    }
    // The hop counts partition the samples: the accuracy is a weighted mean of the per-hop
    // ones, so it lies between them (fifteenth pass, F1, F3).
    let lo = per_hop.values().copied().fold(f64::INFINITY, f64::min);
    let hi = per_hop.values().copied().fold(f64::NEG_INFINITY, f64::max);
    let outside = !(lo - 1e-9..=hi + 1e-9).contains(&accuracy);
    (mean_checked && !per_hop.is_empty() && outside).then(|| {
        format!(
            "{what} {accuracy} is no mean of its per-hop accuracies ({lo} to {hi}): a damaged \
             or edited file"
        )
    })
}

/// The rows of the run table at `path` (none when it is missing) with the checkpoint they name;
/// every row must name this run (`same_run`) and one checkpoint (`strict`: a run whose identity
/// is known; files assembled by hand without a run config may name none). A parse error names
/// the file.
fn stamped_rows<T: serde::de::DeserializeOwned>(
    path: &Path,
    same_run: &dyn Fn(&Path, usize, &str) -> Result<()>,
    strict: bool,
) -> Result<(Vec<T>, Option<usize>)> {
    let Some(text) = read(path)? else {
        return Ok((vec![], None));
    };
    let origin = path.display().to_string();
    let parse = |e: ropelab_io::CsvError| AnalysisError::Invalid(e.to_string());
    let rows: Vec<T> = ropelab_io::read_csv(&text, &origin).map_err(parse)?;
    let stamps: Vec<ropelab_io::Stamp> = ropelab_io::read_csv(&text, &origin).map_err(parse)?;
    let mut step = None;
    for (i, stamp) in stamps.iter().enumerate() {
        same_run(path, i + 2, &stamp.run)?;
        match (step, stamp.step) {
            (None, None) if !strict => {}
            (_, None) => {
                return Err(invalid(
                    path,
                    format!("line {} names no checkpoint (no `step` value)", i + 2),
                ))
            }
            (Some(a), Some(b)) if a != b => {
                return Err(invalid(
                    path,
                    format!(
                        "line {} was measured at step {b}, the lines before at step {a}: one \
                         table, one checkpoint",
                        i + 2
                    ),
                ))
            }
            (_, b) => step = b,
        }
    }
    Ok((rows, step))
}

/// The settings a reader expects a run's measured files were made with (the study's measure
/// options, [`crate::measure::keys`]); None: whatever the ledger recorded. Whatever they are,
/// the files of a checkpoint (the test split, the hop map, the attention file) must be of the
/// run's latest checkpoint, and its training log must be recorded to that step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expected {
    /// The key of `scores.jsonl`.
    pub scores: Option<String>,
    /// The key of `lengthgen.csv`.
    pub lengths: Option<String>,
    /// The hop map's test samples.
    pub hop_samples: Option<usize>,
    /// The ablations' test samples and the gamma their heads were typed at.
    pub ablation: Option<(usize, f64)>,
    /// The test samples of the probes and of each layer set.
    pub route: Option<(usize, usize)>,
    /// The study recorded its own tables (`theory/`, `offset/`, `canonical/TASK/`) in their
    /// folders' ledgers: a table there that no ledger lists is refused. Without it (a study
    /// assembled by hand) a table is read when its folder has no ledger.
    pub tables_recorded: bool,
}

impl RunFiles {
    /// [`RunFiles::load_expecting`] with no expected settings beyond the run's latest
    /// checkpoint.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_expecting(dir, &Expected::default())
    }

    /// Reads the files of the run directory `dir` (missing files stay empty). When the run was
    /// measured by a study or sweep job (it has a ledger, `measured.json`), only the files the
    /// ledger vouches for under the expected settings are read: a listed file that changed
    /// since, was measured with other settings (e.g. a hop map of another checkpoint, or on
    /// other samples), or a measurement file the ledger does not list (another command's), is
    /// an error naming it. Without a ledger (a run measured by hand), the full test-split
    /// evaluation of the latest step is read, never a partial one (`eval --n N`).
    pub fn load_expecting(dir: &Path, expected: &Expected) -> Result<Self> {
        use crate::measure::keys;
        let ledger = Ledger::load(dir).map_err(|e| invalid(&dir.join(LEDGER), e))?;
        let latest = ropelab_train::RunDir::new(dir).latest_checkpoint().ok();
        let (test_key, attention_key, hop_key, hop_prefix, log_key) = match latest {
            Some(step) => (
                Some(keys::test_split(step)),
                Some(keys::attention(step)),
                expected.hop_samples.map(|n| keys::hop_map(step, n)),
                Some(keys::hop_map_prefix(step)),
                Some(keys::training_log(step)),
            ),
            None => (None, None, None, None, None),
        };
        let (ablation_key, ablation_prefix) = match latest {
            Some(step) => (
                expected
                    .ablation
                    .map(|(n, gamma)| keys::ablation(step, n, gamma)),
                Some(keys::ablation_prefix(step)),
            ),
            None => (None, None),
        };
        let (route_keys, route_prefixes) = match latest {
            Some(step) => (
                expected
                    .route
                    .map(|(p, s)| (keys::probes(step, p), keys::layer_sets(step, s))),
                Some((keys::probes_prefix(step), keys::layer_sets_prefix(step))),
            ),
            None => (None, None),
        };
        // What a reader of `file` expects it was made with.
        let expect_of = |file: &str| -> Expect<'_> {
            let found = match file {
                "scores.jsonl" => expected.scores.as_deref().map(Expect::Key),
                "lengthgen.csv" => expected.lengths.as_deref().map(Expect::Key),
                "metrics.jsonl" => log_key.as_deref().map(Expect::Key),
                "hops.csv" => hop_key
                    .as_deref()
                    .map(Expect::Key)
                    .or(hop_prefix.as_deref().map(Expect::Prefix)),
                ABLATION_FILE => ablation_key
                    .as_deref()
                    .map(Expect::Key)
                    .or(ablation_prefix.as_deref().map(Expect::Prefix)),
                PROBES_FILE => route_keys
                    .as_ref()
                    .map(|k| Expect::Key(&k.0))
                    .or(route_prefixes.as_ref().map(|k| Expect::Prefix(&k.0))),
                LAYER_SETS_FILE => route_keys
                    .as_ref()
                    .map(|k| Expect::Key(&k.1))
                    .or(route_prefixes.as_ref().map(|k| Expect::Prefix(&k.1))),
                f if f.starts_with("eval/") => test_key.as_deref().map(Expect::Key),
                f if f.starts_with("attention/") => attention_key.as_deref().map(Expect::Key),
                _ => None,
            };
            found.unwrap_or(Expect::Any)
        };
        // Whether to read `file`: it exists and, under a ledger, is vouched for by it.
        let wanted = |file: &str| -> Result<bool> {
            let path = dir.join(file);
            match &ledger {
                None => Ok(path.exists()),
                Some(l) => {
                    if l.vouch(dir, file, expect_of(file))
                        .map_err(|e| AnalysisError::Invalid(e.to_string()))?
                    {
                        Ok(true)
                    } else if path.exists() {
                        // The training log is the run's own, recorded when a job measures
                        // the run: a run measured before that records it on its next rerun.
                        let why = if file == "metrics.jsonl" {
                            "the training log was not recorded when this run was measured (a \
                             ropelab from before it was): rerun the study or sweep into this \
                             directory, which records it and reuses the rest"
                        } else {
                            "another command wrote it, not the measurement of this run; move \
                             it away and rerun to measure it"
                        };
                        Err(invalid(&path, format!("not listed in {LEDGER}: {why}")))
                    } else {
                        Ok(false)
                    }
                }
            }
        };
        // The JSON files of `folder` to read: the ledger's, or every one found.
        let listed = |folder: &str| -> Result<Vec<PathBuf>> {
            match &ledger {
                Some(l) => l
                    .listed(&format!("{folder}/"))
                    .into_iter()
                    .filter_map(|f| match wanted(f) {
                        Ok(true) => Some(Ok(dir.join(f))),
                        Ok(false) => None,
                        Err(e) => Some(Err(e)),
                    })
                    .collect(),
                None => {
                    let Ok(entries) = std::fs::read_dir(dir.join(folder)) else {
                        return Ok(vec![]);
                    };
                    let mut paths: Vec<PathBuf> = entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "json"))
                        .collect();
                    paths.sort();
                    Ok(paths)
                }
            }
        };
        let mut out = RunFiles::default();
        // The run's identity, which each scores line and lengthgen row names (a file copied
        // from another run is refused, not read as this one's; eighth pass, a164, R002).
        let opened = ropelab_train::RunDir::open(dir).ok();
        let identity = opened.as_ref().map(|(_, config)| config.identity());
        // A config.toml edited after training changes the identity too: named as the edit it
        // is (the key and both values), not as files copied from elsewhere (ninth pass, w10).
        let edited = || -> Option<AnalysisError> {
            let (run, config) = opened.as_ref()?;
            let step = run.latest_checkpoint().ok()?;
            run.check_checkpoint_config(step, config)
                .err()
                .map(|e| AnalysisError::Invalid(e.to_string()))
        };
        let same_run = |path: &Path, line: usize, run: &str| -> Result<()> {
            if identity.as_deref().is_some_and(|own| own != run) {
                if let Some(e) = edited() {
                    return Err(e);
                }
            }
            match &identity {
                // A line without its run (the `run` column removed, or written before lines
                // named their run) cannot be told apart from another run's (ninth pass).
                Some(_) if run.is_empty() => Err(invalid(
                    path,
                    format!(
                        "line {line} does not name the run it was measured on (no `run` value: \
                         written by an older ropelab, or edited): measure again"
                    ),
                )),
                Some(own) if run != own => Err(invalid(
                    path,
                    format!(
                        "line {line} was measured on another run ({run}; this run is {own}): \
                         a file copied from elsewhere, or a config.toml edited since (its \
                         steps, say), is not this run's measurement"
                    ),
                )),
                _ => Ok(()),
            }
        };
        let scores = dir.join("scores.jsonl");
        if wanted("scores.jsonl")? {
            if let Some(text) = read(&scores)? {
                let mut seen = std::collections::BTreeSet::new();
                for (i, line) in text.lines().enumerate() {
                    let head: crate::measure::dynamics::HeadStep = serde_json::from_str(line)
                        .map_err(|e| invalid(&scores, format!("line {}: {e}", i + 1)))?;
                    if let Some(why) = head.defect() {
                        return Err(invalid(&scores, format!("line {}: {why}", i + 1)));
                    }
                    same_run(&scores, i + 1, &head.run)?;
                    // A head scored twice at one step is a damaged or concatenated file: read
                    // as two heads it would count twice (tenth pass, SILENT-2).
                    if !seen.insert((head.step, head.layer, head.head)) {
                        return Err(invalid(
                            &scores,
                            format!(
                                "line {}: step {} layer {} head {} is scored twice",
                                i + 1,
                                head.step,
                                head.layer,
                                head.head
                            ),
                        ));
                    }
                    if let Some((_, config)) = &opened {
                        let m = &config.model;
                        if head.layer >= m.n_layers || head.head >= m.n_heads {
                            return Err(invalid(
                                &scores,
                                format!(
                                    "line {}: layer {} head {} is no head of the model ({} \
                                     layers x {} heads)",
                                    i + 1,
                                    head.layer,
                                    head.head,
                                    m.n_layers,
                                    m.n_heads
                                ),
                            ));
                        }
                    }
                    // One file, one scoring: lines of other settings are another
                    // command's (fifteenth pass, F9).
                    if let Some(first) = out.scores.first() {
                        if first.settings != head.settings {
                            return Err(invalid(
                                &scores,
                                format!(
                                    "line {} was scored with other settings than line 1 ({:?}, \
                                     not {:?}): a file joined from two scorings",
                                    i + 1,
                                    head.settings,
                                    first.settings
                                ),
                            ));
                        }
                    }
                    out.scores.push(head);
                }
                // Every scored step holds every head (a line cut out would count one head
                // fewer; twelfth pass, S1).
                if let Some((run, config)) = &opened {
                    // `score` scores every checkpoint there is: a scored step the run never
                    // saved, or a kept checkpoint below the last scored step left out, is an
                    // edited file (seventeenth pass, SILENT-3). A checkpoint pruned since may
                    // have been scored.
                    let kept = run.checkpoints().unwrap_or_default();
                    let scored: std::collections::BTreeSet<usize> =
                        out.scores.iter().map(|h| h.step).collect();
                    let every = config.optim.save_every.max(1);
                    // An empty file is named as one, not as steps cut out (nineteenth pass,
                    // U5).
                    let empty = scored
                        .is_empty()
                        .then(|| "it holds no scored head (an empty file)".to_owned());
                    let why = empty.or_else(|| {
                        scored
                            .iter()
                            .find(|&&s| !kept.contains(&s) && s % every != 0)
                            .map(|s| format!("step {s} is no step the run saves checkpoints at"))
                            .or_else(|| {
                                let last = scored.last().copied().unwrap_or(0);
                                kept.iter()
                                    .find(|&&c| c <= last && !scored.contains(&c))
                                    .map(|c| {
                                        format!(
                                        "checkpoint step {c} is not scored, though steps after \
                                         it are (lines cut out)"
                                    )
                                    })
                            })
                    });
                    if let Some(why) = why {
                        return Err(invalid(
                            &scores,
                            format!("{why}: a damaged or edited file (score the run again)"),
                        ));
                    }
                    let heads = config.model.n_layers * config.model.n_heads;
                    let mut per_step: BTreeMap<usize, usize> = BTreeMap::new();
                    for h in &out.scores {
                        *per_step.entry(h.step).or_default() += 1;
                    }
                    if let Some((step, n)) = per_step.iter().find(|(_, &n)| n != heads) {
                        return Err(invalid(
                            &scores,
                            format!(
                                "step {step} scores {n} heads, but the model has {heads}: a \
                                 damaged or edited file (score the run again)"
                            ),
                        ));
                    }
                }
            }
        }
        let metrics = dir.join("metrics.jsonl");
        let log = if wanted("metrics.jsonl")? {
            read(&metrics)?
        } else {
            None
        };
        if let Some(text) = log {
            // The line each checkpoint recorded of its own step: a log line of that step
            // saying otherwise is an edit (fourteenth pass, N1), as `train --resume` refuses.
            let recorded: BTreeMap<usize, serde_json::Value> = match &opened {
                Some((run, _)) => match run.latest_checkpoint() {
                    Ok(latest) => run
                        .checkpoint_metrics_lines(latest)?
                        .into_iter()
                        .filter_map(|(s, l)| Some((s, serde_json::from_str(&l).ok()?)))
                        .collect(),
                    Err(_) => BTreeMap::new(),
                },
                None => BTreeMap::new(),
            };
            let mut last_step = 0;
            for (i, line) in text.lines().enumerate() {
                let m: MetricsLine = serde_json::from_str(line)
                    .map_err(|e| invalid(&metrics, format!("line {}: {e}", i + 1)))?;
                same_run(&metrics, i + 1, &m.run)?;
                // One line per step, in step order: a repeated or earlier step is a
                // concatenated or edited log (twelfth pass, S2).
                if i > 0 && m.step <= last_step {
                    return Err(invalid(
                        &metrics,
                        format!(
                            "line {}: step {} after step {last_step}: one line per step, in \
                             order (a concatenated or edited training log)",
                            i + 1,
                            m.step
                        ),
                    ));
                }
                last_step = m.step;
                if let Some(why) = m.val.as_ref().and_then(|v| {
                    bad_evaluation("val.accuracy", v.n, v.accuracy, &v.per_hop, false)
                }) {
                    return Err(invalid(&metrics, format!("line {}: {why}", i + 1)));
                }
                if let Some(own) = recorded.get(&m.step) {
                    let value: serde_json::Value = serde_json::from_str(line)
                        .map_err(|e| invalid(&metrics, format!("line {}: {e}", i + 1)))?;
                    if &value != own {
                        return Err(invalid(
                            &metrics,
                            format!(
                                "line {}: step {} differs from the line its checkpoint recorded \
                                 (an edited training log)",
                                i + 1,
                                m.step
                            ),
                        ));
                    }
                }
                out.steps = out.steps.max(m.step);
                if let Some(v) = m.val {
                    out.val.push((m.step, v));
                }
            }
            // Every line through the latest checkpoint is the one it sealed (fifteenth pass,
            // F4: a validation line of a step no checkpoint holds, edited in range).
            if let Some((run, _)) = &opened {
                run.check_log(&text)?;
            }
        }
        let mut best: Option<(usize, Accuracy)> = None;
        for path in listed("eval")? {
            // `step-S-extra-E-nN.json` is a partial evaluation (`eval --n N`), never the test.
            let partial = path
                .file_stem()
                .and_then(|s| s.to_str())
                .is_some_and(|s| s.rsplit('-').next().is_some_and(|p| p.starts_with('n')));
            let Some(text) = read(&path)? else { continue };
            let f: EvalFile = serde_json::from_str(&text).map_err(|e| invalid(&path, e))?;
            // The test accuracy of another run, or an edited one, is not this model's
            // (thirteenth pass, S3, S6).
            same_run(&path, 1, &f.run)?;
            if let Some(why) = bad_evaluation("accuracy", f.n, f.accuracy, &f.per_hop, true) {
                return Err(invalid(&path, why));
            }
            if let Some((_, config)) = &opened {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if let Some(why) = eval_mismatch(name, &f, config) {
                    return Err(invalid(
                        &path,
                        format!("{why}: a damaged or edited file; evaluate again"),
                    ));
                }
            }
            if !partial && f.extra == 0 && best.as_ref().is_none_or(|b| f.step > b.0) {
                let accuracy = Accuracy {
                    n: f.n,
                    accuracy: f.accuracy,
                    loss: f.loss,
                    per_hop: f.per_hop,
                    ..Accuracy::default()
                };
                best = Some((f.step, accuracy));
            }
        }
        out.test_step = best.as_ref().map(|b| b.0);
        out.test = best.map(|b| b.1);
        let lengths = dir.join("lengthgen.csv");
        if wanted("lengthgen.csv")? {
            if let Some(text) = read(&lengths)? {
                out.lengths = from_csv(&text, &lengths.display().to_string())?;
                let mut seen = std::collections::BTreeSet::new();
                for (i, row) in out.lengths.iter().enumerate() {
                    same_run(&lengths, i + 2, &row.run)?;
                    if let Some(why) =
                        bad_evaluation("accuracy", row.n, row.accuracy, &row.per_hop, true)
                    {
                        return Err(invalid(&lengths, format!("line {}: {why}", i + 2)));
                    }
                    // One table, one checkpoint (`lengthgen` measures one step); a length
                    // is its input's, a loss no negative number (seventeenth pass, SILENT-2).
                    let first = &out.lengths[0];
                    let core = opened.as_ref().map(|(_, c)| c.layout.core_len());
                    let why = if row.step != first.step {
                        Some(format!(
                            "step {} beside step {} of line 2: one table, one checkpoint",
                            row.step, first.step
                        ))
                    } else if row.n != first.n {
                        // `lengthgen` measures every length over one sample count: points
                        // of other counts are not one curve (nineteenth pass, SILENT-1).
                        Some(format!(
                            "{} samples beside {} of line 2: one table, one sample count",
                            row.n, first.n
                        ))
                    } else if core.is_some_and(|c| row.length != c + row.extra) {
                        Some(format!(
                            "length {} is not the run's input length plus extra {}",
                            row.length, row.extra
                        ))
                    } else if !(row.loss.is_finite() && row.loss >= 0.0) {
                        Some(format!("loss {} is no loss", row.loss))
                    } else if let Some(why) = opened.as_ref().and_then(|(_, c)| {
                        // Counts of the samples measured (eighteenth pass, S1).
                        counts_mismatch(c, row.n, row.extra, row.accuracy, &row.per_hop)
                    }) {
                        Some(why)
                    } else {
                        // The largest logit minus the second is no negative number; the top
                        // weight over `length` keys is at least 1/length.
                        row.heads
                            .iter()
                            .find(|h| {
                                h.margin < 0.0
                                    || !(h.top_weight <= 1.0
                                        && h.top_weight * row.length as f64 >= 1.0 - 1e-6)
                            })
                            .filter(|h| h.margin.is_finite() && h.top_weight.is_finite())
                            .map(|h| {
                                format!(
                                    "layer {} head {}: margin {} or top weight {} is none a \
                                     head gives (a margin is at least 0, a top weight over {} \
                                     keys at least 1/{} and at most 1)",
                                    h.layer, h.head, h.margin, h.top_weight, row.length, row.length
                                )
                            })
                    };
                    if let Some(why) = why {
                        return Err(invalid(&lengths, format!("line {}: {why}", i + 2)));
                    }
                    // A margin that is no number would drop its point from the curve.
                    if let Some(h) = row
                        .heads
                        .iter()
                        .find(|h| !(h.margin.is_finite() && h.top_weight.is_finite()))
                    {
                        return Err(invalid(
                            &lengths,
                            format!(
                                "line {}: layer {} head {}: margin {} or top weight {} is not \
                                 a finite number",
                                i + 2,
                                h.layer,
                                h.head,
                                h.margin,
                                h.top_weight
                            ),
                        ));
                    }
                    // One row per (step, extra) (twelfth pass, S3).
                    if !seen.insert((row.step, row.extra)) {
                        return Err(invalid(
                            &lengths,
                            format!(
                                "line {}: step {} extra {} is measured twice",
                                i + 2,
                                row.step,
                                row.extra
                            ),
                        ));
                    }
                }
            }
        }
        // Each table names the run and the checkpoint it was measured on: another run's copy
        // is refused, an earlier checkpoint's is marked (thirteenth pass, S4, S5).
        // A head outside the model is another model's row (fourteenth pass, N3).
        let in_model = |path: &Path, line: usize, layer: usize, head: usize| -> Result<()> {
            match &opened {
                Some((_, config))
                    if layer >= config.model.n_layers || head >= config.model.n_heads =>
                {
                    Err(invalid(
                        path,
                        format!(
                            "line {line}: layer {layer} head {head} is no head of the model ({} \
                             layers x {} heads)",
                            config.model.n_layers, config.model.n_heads
                        ),
                    ))
                }
                _ => Ok(()),
            }
        };
        if wanted("hops.csv")? {
            let path = dir.join("hops.csv");
            let (rows, step) = stamped_rows::<HopRow>(&path, &same_run, identity.is_some())?;
            for (i, r) in rows.iter().enumerate() {
                in_model(&path, i + 2, r.layer, r.head)?;
                // A mass is a mean over edges: none measured, none to give (seventeenth pass,
                // SILENT-4).
                if r.edges == 0 {
                    return Err(invalid(
                        &path,
                        format!(
                            "line {}: a mass of {} over no edge measured: a damaged or edited \
                             file",
                            i + 2,
                            r.mass
                        ),
                    ));
                }
                // A mass is a share of attention; the accuracies are accuracies (fifteenth
                // pass, F5).
                for (what, x) in [
                    ("mass", r.mass),
                    ("accuracy", r.accuracy),
                    ("knockout_accuracy", r.knockout_accuracy),
                ] {
                    if let Some(why) = bad_accuracy(what, x) {
                        return Err(invalid(&path, format!("line {}: {why}", i + 2)));
                    }
                }
            }
            out.hops = rows;
            step.map(|s| out.measured_at.insert("hops.csv", s));
        }
        if wanted(ABLATION_FILE)? {
            let path = dir.join(ABLATION_FILE);
            let (rows, step) = stamped_rows::<AblationRow>(&path, &same_run, identity.is_some())?;
            for (i, r) in rows.iter().enumerate() {
                for head in r.heads.split_whitespace() {
                    let parsed = head
                        .split_once('.')
                        .and_then(|(l, h)| Some((l.parse().ok()?, h.parse().ok()?)));
                    let Some((layer, h)) = parsed else {
                        return Err(invalid(
                            &path,
                            format!("line {}: {head:?} is no head (layer.head)", i + 2),
                        ));
                    };
                    in_model(&path, i + 2, layer, h)?;
                }
                // The accuracy is its count over its samples (fifteenth pass, F2).
                if let Some(why) = bad_count(r.correct, r.n, r.accuracy) {
                    return Err(invalid(&path, format!("line {}: {why}", i + 2)));
                }
            }
            if let Some(why) = ablation_contradiction(&rows) {
                return Err(invalid(&path, why));
            }
            out.ablation = rows;
            step.map(|s| out.measured_at.insert(ABLATION_FILE, s));
        }
        if wanted(PROBES_FILE)? {
            let path = dir.join(PROBES_FILE);
            let (rows, step) = stamped_rows::<ProbeRow>(&path, &same_run, identity.is_some())?;
            // Held-out accuracies (fifteenth pass, F6), each a whole share of its held-out
            // positions (seventeenth pass, SILENT-4).
            for (i, r) in rows.iter().enumerate() {
                let share = r.accuracy * r.n_test as f64;
                if r.n_test == 0 || (share - share.round()).abs() > 1e-6 {
                    return Err(invalid(
                        &path,
                        format!(
                            "line {}: accuracy {} is no share of its {} held-out positions: a \
                             damaged or edited file",
                            i + 2,
                            r.accuracy,
                            r.n_test
                        ),
                    ));
                }
                for (what, x) in [
                    ("accuracy", Some(r.accuracy)),
                    ("chance", Some(r.chance)),
                    ("control", r.control),
                ] {
                    if let Some(why) = x.and_then(|x| bad_accuracy(what, x)) {
                        return Err(invalid(&path, format!("line {}: {why}", i + 2)));
                    }
                }
            }
            out.probes = rows;
            step.map(|s| out.measured_at.insert(PROBES_FILE, s));
        }
        if wanted(LAYER_SETS_FILE)? {
            let (rows, step) = stamped_rows::<LayerSetRow>(
                &dir.join(LAYER_SETS_FILE),
                &same_run,
                identity.is_some(),
            )?;
            // Each set's accuracy is its count over its samples (fifteenth pass, F6).
            for (i, r) in rows.iter().enumerate() {
                if let Some(why) = bad_count(r.correct, r.n, r.accuracy) {
                    return Err(invalid(
                        &dir.join(LAYER_SETS_FILE),
                        format!("line {}: {why}", i + 2),
                    ));
                }
            }
            out.layer_sets = rows;
            step.map(|s| out.measured_at.insert(LAYER_SETS_FILE, s));
        }
        for path in listed("attention")? {
            let Some(text) = read(&path)? else { continue };
            let view: AttentionView = serde_json::from_str(&text).map_err(|e| invalid(&path, e))?;
            same_run(&path, 1, &view.run)?;
            // Its input, heads and weights are those the viewer computes, of a checkpoint the
            // run keeps (fifteenth pass, F8).
            if let Some((run, config)) = &opened {
                let named = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let own = AttentionView::file_name(view.step, view.sample);
                let why = (named != own)
                    .then(|| {
                        format!(
                            "it holds step {} sample {}, which is the file {own}, not the file \
                             its name says",
                            view.step, view.sample
                        )
                    })
                    .or_else(|| crate::lens::attention::view_mismatch(&view, config))
                    .or_else(|| {
                        (!run.checkpoints().is_ok_and(|c| c.contains(&view.step)))
                            .then(|| format!("step {} is no checkpoint of the run", view.step))
                    });
                if let Some(why) = why {
                    return Err(invalid(
                        &path,
                        format!("{why}: a damaged or edited file; measure it again"),
                    ));
                }
            }
            out.attention.push(view);
        }
        Ok(out)
    }
}

/// Reads a theory discrepancy CSV (`n,delta,bound,delta_max,mechanism`).
pub fn load_curve(path: &Path) -> Result<Option<Curve>> {
    let Some(text) = read(path)? else {
        return Ok(None);
    };
    let rows: Vec<DiscrepancyRow> = ropelab_io::read_csv(&text, &path.display().to_string())
        .map_err(|e| AnalysisError::Invalid(e.to_string()))?;
    Ok(Some(rows.iter().map(|r| (r.n, r.delta, r.bound)).collect()))
}

impl StudyFiles {
    /// [`StudyFiles::load_expecting`] with no expected settings beyond each run's latest
    /// checkpoint (a report of a study whose config it does not read).
    pub fn load(root: &Path, seeds: &[u64]) -> Result<Self> {
        Self::load_expecting(root, seeds, &Expected::default())
    }

    /// Reads a study directory: `seed-S/{number,letter}/` for each seed (each run's files as
    /// [`RunFiles::load_expecting`] reads them), `theory/discrepancy-{index,retrieval}.csv`,
    /// `offset/` and `canonical/`. The study's own tables are read only when the ledger of the
    /// folder holding them (`theory/`, `offset/`, `canonical/TASK/`) vouches for them: a table
    /// replaced after the study wrote it, or written by another command, is refused by name.
    pub fn load_expecting(root: &Path, seeds: &[u64], expected: &Expected) -> Result<Self> {
        let study = crate::StudyDir::new(root);
        let required = expected.tables_recorded;
        let run = |seed: u64, task: TaskKind| -> Result<Option<RunFiles>> {
            let dir: PathBuf = study.model(seed, task);
            if dir.is_dir() {
                // A model folder holds the model its name says: swapped or moved folders would
                // show one seed's model under another's name (ninth pass, m006).
                if let Ok((_, config)) = ropelab_train::RunDir::open(&dir) {
                    if (config.seed, config.task) != (seed, task) {
                        return Err(invalid(
                            &dir,
                            format!(
                                "holds the {} model of seed {}, not the {task} model of seed \
                                 {seed} its folder names: move the folders back",
                                config.task, config.seed
                            ),
                        ));
                    }
                }
                Ok(Some(RunFiles::load_expecting(&dir, expected)?))
            } else {
                Ok(None)
            }
        };
        Ok(Self {
            seeds: seeds
                .iter()
                .map(|&seed| {
                    Ok(SeedFiles {
                        seed,
                        number: run(seed, TaskKind::Number)?,
                        letter: run(seed, TaskKind::Letter)?,
                        compose: {
                            let dir = study.compose(seed);
                            if dir.is_dir() {
                                Some(RunFiles::load_expecting(&dir, expected)?)
                            } else {
                                None
                            }
                        },
                    })
                })
                .collect::<Result<_>>()?,
            index: {
                let path = study.theory("discrepancy-index.csv");
                vouched_table(&path, "theory", required)?;
                load_curve(&path)?
            },
            retrieval: {
                let path = study.theory("discrepancy-retrieval.csv");
                vouched_table(&path, "theory", required)?;
                load_curve(&path)?
            },
            offset: {
                for file in ["accuracy.csv", "runs.csv"] {
                    vouched_table(&study.offset().join(file), "offset", required)?;
                }
                super::offset::OffsetFiles::load(&study.offset())?
            },
            canonical: {
                for task in ["index", "retrieval", "partial"] {
                    let path = study.canonical_root().join(task).join("summary.json");
                    vouched_table(&path, "canonical", required)?;
                }
                super::canonical::CanonicalFiles::load(&study.canonical_root())?
            },
        })
    }
}

/// Checks that the study table at `path` (when it exists) is vouched for by the ledger of the
/// folder holding it, as written by the study's `stage` ([`crate::measure::keys::study_table`]):
/// an error naming the file when the ledger does not list it or it changed since, or when the
/// folder has no ledger and one is `required`.
pub fn vouched_table(path: &Path, stage: &str, required: bool) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(invalid(path, "not a file in a folder"));
    };
    let key = crate::measure::keys::study_table(stage);
    let ledger = Ledger::load(dir).map_err(|e| invalid(&dir.join(LEDGER), e))?;
    let listed = match &ledger {
        Some(l) => l
            .vouch(dir, name, Expect::Key(&key))
            .map_err(|e| AnalysisError::Invalid(e.to_string()))?,
        None if !required => return Ok(()),
        None => false,
    };
    if listed {
        Ok(())
    } else {
        Err(invalid(
            path,
            format!(
                "not listed in {} (the study did not write it, or wrote it before its tables \
                 were recorded): rerun the study to write it again",
                dir.join(LEDGER).display()
            ),
        ))
    }
}

/// Writes a study table (`bytes`, atomically) and records it in the ledger of its folder under
/// the key of the study's `stage`, so that [`vouched_table`] reads it.
pub fn record_table(path: &Path, stage: &str, bytes: &[u8]) -> Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(invalid(path, "not a file in a folder"));
    };
    let key = crate::measure::keys::study_table(stage);
    let ledger = |e| invalid(&dir.join(LEDGER), e);
    std::fs::create_dir_all(dir).map_err(|e| invalid(dir, e))?;
    Ledger::begin(dir, name, &key).map_err(ledger)?;
    ropelab_io::write_atomic(path, bytes).map_err(|e| invalid(path, e))?;
    Ledger::finish(dir, name, &key).map_err(ledger)
}

/// Refuses `dir` when it holds a Slurm array another command than `own` planned there
/// (`bias.sbatch`): this command's files beside it would leave the array unable to run or
/// collect (twenty-first pass, N6; twenty-second pass, S2: `reproduce` too).
pub fn refuse_planned_arrays(dir: &Path, own: &str) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(planner) = name.strip_suffix(".sbatch") {
            if planner != own {
                return Err(invalid(
                    dir,
                    format!(
                        "holds {name}, a Slurm array `ropelab {planner}` planned there: choose \
                         another --out"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses `dir` as the output of the study stage (or experiment) `stage` when its ledger
/// lists files that something else wrote there (another experiment's tables, a study's or a
/// run's measurements): writing this stage's tables beside them would replace theirs (an
/// `accuracy.csv` of one experiment under another's name).
pub fn refuse_other_tables(dir: &Path, stage: &str) -> Result<()> {
    // A sweep's or study's directory: its collect and report would hide these tables, and
    // this experiment's report would replace the sweep's (sixth pass, A4).
    if dir.join("plan.json").is_file() {
        return Err(invalid(
            dir,
            "holds the jobs of a sweep or study (plan.json): choose another --out",
        ));
    }
    refuse_planned_arrays(dir, stage)?;
    let key = crate::measure::keys::study_table(stage);
    let Some(ledger) = Ledger::load(dir).map_err(|e| invalid(&dir.join(LEDGER), e))? else {
        return Ok(());
    };
    // The key names a stage of the study; the same tables come from the stage's own command.
    let shown = |k: &str| k.trim_end_matches(" written by the study").to_owned();
    match ledger.files.iter().find(|(_, entry)| entry.key != key) {
        Some((file, entry)) => Err(invalid(
            dir,
            format!(
                "holds {file}, which {} lists as {}, not as {}: choose another --out",
                LEDGER,
                shown(&entry.key),
                shown(&key)
            ),
        )),
        None => Ok(()),
    }
}

/// Why the rows of an `ablation.csv` contradict each other, if they do: each (group,
/// knockout)'s `all` row counts the samples of its per-hop rows together, and a group names
/// the same heads on every row (twenty-fifth pass, A-S8: an `all` row left as it was under an
/// edited per-hop row).
pub fn ablation_contradiction(rows: &[AblationRow]) -> Option<String> {
    for all in rows.iter().filter(|r| r.hop == "all") {
        let parts: Vec<&AblationRow> = rows
            .iter()
            .filter(|r| r.group == all.group && r.ablation == all.ablation && r.hop != "all")
            .collect();
        if parts.is_empty() {
            continue;
        }
        let (correct, n) = parts.iter().fold((0usize, 0usize), |(c, n), r| {
            (c.saturating_add(r.correct), n.saturating_add(r.n))
        });
        if (correct, n) != (all.correct, all.n) {
            return Some(format!(
                "group {} ({:?}): its all row counts {} of {} correct, its per-hop rows {} of \
                 {}: a damaged or edited file",
                all.group, all.ablation, all.correct, all.n, correct, n
            ));
        }
    }
    for r in rows {
        if let Some(other) = rows
            .iter()
            .find(|o| o.group == r.group && o.heads != r.heads)
        {
            return Some(format!(
                "group {} names heads {:?} on one row and {:?} on another: a damaged or edited \
                 file",
                r.group, r.heads, other.heads
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::ablation::Knockout;

    fn row(group: &str, heads: &str, hop: &str, correct: usize, n: usize) -> AblationRow {
        AblationRow {
            group: group.into(),
            heads: heads.into(),
            ablation: Knockout::Mean,
            hop: hop.into(),
            n,
            correct,
            accuracy: correct as f64 / n as f64,
        }
    }

    #[test]
    fn an_ablation_all_row_counts_its_per_hop_rows() {
        let mut rows = vec![
            row("layer 0", "0.0", "all", 9, 1024),
            row("layer 0", "0.0", "1", 2, 512),
            row("layer 0", "0.0", "2", 7, 512),
        ];
        assert_eq!(ablation_contradiction(&rows), None);
        rows[1] = row("layer 0", "0.0", "1", 30, 512);
        let why = ablation_contradiction(&rows).unwrap();
        assert!(
            why.contains("9 of 1024") && why.contains("37 of 1024"),
            "{why}"
        );
        rows[1] = row("layer 0", "0.1", "1", 2, 512);
        let why = ablation_contradiction(&rows).unwrap();
        assert!(why.contains("names heads"), "{why}");
    }
}
