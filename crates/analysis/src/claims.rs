//! The verdict per claim of the main paper (docs/study.md): each claim the study measures, the
//! paper's statement, this study's measured values, the explicit threshold, and whether it
//! holds, computed only from the files the study wrote (`scores.jsonl`, `metrics.jsonl`, the
//! test evaluation, `lengthgen.csv`, the theory CSVs). A claim without its numbers is "not
//! measured", never "holds".

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ropelab_io::{Ledger, LEDGER};
use ropelab_tasks::TaskKind;
use ropelab_train::Accuracy;
use serde::{Deserialize, Serialize};

use crate::attention::AttentionView;
use crate::dynamics::{summarize_heads, Gamma, HeadKind, HeadStep};
use crate::lengthgen::{first_length_below, from_csv, LengthRow};
use crate::{AnalysisError, Result};
use ropelab_theory::discrepancy::DiscrepancyRow;

/// The thresholds every verdict uses (config keys of the study's `[claims]` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// A task is learned when its test accuracy reaches this.
    pub learned_accuracy: f64,
    /// Purity tolerance gamma (checked when it is parsed).
    pub gamma: Gamma,
    /// Fewest layers with a pure positional head in the number model.
    pub min_positional_layers: usize,
    /// A hop count is learned at the first evaluation where its validation accuracy reaches
    /// this.
    pub hop_accuracy: f64,
    /// Hop counts are learned "together" when their learned steps span at most this fraction
    /// of the training steps, and "one after another" when they span more (in order).
    pub hop_spread: f64,
    /// Accuracy "peaks" at the first checkpoint within this of the run's best accuracy.
    pub peak_tolerance: f64,
    /// A model generalises to a length while its accuracy stays at or above this.
    pub length_accuracy: f64,
    /// The letter model's first failing length must be at least this many times the number
    /// model's.
    pub length_ratio: f64,
    /// The letter model must stay above `length_accuracy` up to this many tokens (the paper:
    /// about 850, 53 times the 16-token context; 50 x 16 = 800 here).
    pub letter_length: usize,
    /// The Retrieval head's discrepancy must stay above this fraction of its value at n = 1
    /// for every n up to `retrieval_n`.
    pub retrieval_fraction: f64,
    /// The range of the Retrieval curve the paper plots (n up to 100).
    pub retrieval_n: usize,
    /// Fixed-offset retrieval: rotary softmax accuracy must reach `offset_accuracy` at this
    /// many times the training length.
    pub offset_factor: usize,
    /// Fixed-offset retrieval: the accuracy that counts as extrapolating.
    pub offset_accuracy: f64,
    /// Fixed-offset retrieval: at twice the training length, APE softmax accuracy at most this
    /// (chance is 1 / vocabulary).
    pub offset_fail_accuracy: f64,
    /// Fixed-offset retrieval: the dilution law fits a rotary softmax run when its prediction
    /// is within this of the measured target weight at every test length.
    pub dilution_error: f64,
    /// Fixed-offset retrieval: linear attention fails out of range when its accuracy at twice
    /// the training length is at most this.
    pub linear_fail_accuracy: f64,
    /// Canonical tasks: a band "fails" a task when its accuracy stays below this.
    pub canonical_fail_accuracy: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            learned_accuracy: 0.99,
            gamma: Gamma::DEFAULT,
            min_positional_layers: 2,
            hop_accuracy: 0.9,
            hop_spread: 0.1,
            peak_tolerance: 0.01,
            length_accuracy: 0.9,
            length_ratio: 4.0,
            letter_length: 800,
            retrieval_fraction: 0.1,
            retrieval_n: 100,
            offset_factor: 4,
            offset_accuracy: 0.9,
            offset_fail_accuracy: 0.2,
            dilution_error: 0.1,
            linear_fail_accuracy: 0.5,
            canonical_fail_accuracy: 0.95,
        }
    }
}

impl Thresholds {
    /// Checks every threshold's range (a study checks them when its config is parsed, before
    /// any training): the error names the key, its value and the range it must be in.
    pub fn check(&self) -> std::result::Result<(), String> {
        let within = |key: &str, v: f64, lo: f64, hi: f64, open_lo: bool| {
            let above = if open_lo { v > lo } else { v >= lo };
            if v.is_finite() && above && v <= hi {
                Ok(())
            } else {
                let bracket = if open_lo { "(" } else { "[" };
                Err(format!(
                    "{key} = {v} is out of range: it must be in {bracket}{lo}, {hi}]"
                ))
            }
        };
        for (key, v) in [
            ("learned_accuracy", self.learned_accuracy),
            ("hop_accuracy", self.hop_accuracy),
            ("hop_spread", self.hop_spread),
            ("peak_tolerance", self.peak_tolerance),
            ("length_accuracy", self.length_accuracy),
            ("offset_accuracy", self.offset_accuracy),
            ("offset_fail_accuracy", self.offset_fail_accuracy),
            ("linear_fail_accuracy", self.linear_fail_accuracy),
            ("canonical_fail_accuracy", self.canonical_fail_accuracy),
        ] {
            within(key, v, 0.0, 1.0, false)?;
        }
        within(
            "retrieval_fraction",
            self.retrieval_fraction,
            0.0,
            1.0,
            true,
        )?;
        within("length_ratio", self.length_ratio, 0.0, f64::MAX, true)?;
        within("dilution_error", self.dilution_error, 0.0, f64::MAX, false)?;
        for (key, v) in [
            ("letter_length", self.letter_length),
            ("retrieval_n", self.retrieval_n),
            ("offset_factor", self.offset_factor),
        ] {
            if v == 0 {
                return Err(format!("{key} must be at least 1"));
            }
        }
        Ok(())
    }
}

/// Whether a claim holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every measured seed meets the threshold.
    Holds,
    /// At least one measured seed does not.
    DoesNotHold,
    /// The files needed are missing.
    NotMeasured,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "does not hold",
            Verdict::NotMeasured => "not measured",
        })
    }
}

/// One claim's row of `claims.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// Short identifier.
    pub id: String,
    /// What the paper says.
    pub paper: String,
    /// The threshold this verdict used, in words and numbers.
    pub threshold: String,
    /// What this study measured, per seed (or once, for the theory).
    pub measured: Vec<String>,
    /// Seeds (or single measurements) meeting the threshold.
    pub holding: usize,
    /// Seeds (or single measurements) measured.
    pub measured_count: usize,
    /// The verdict: holds only when every measurement does.
    pub verdict: Verdict,
}

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
    /// `lengthgen.csv`.
    pub lengths: Vec<LengthRow>,
    /// `attention/*.json`, in file-name order.
    pub attention: Vec<AttentionView>,
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
}

impl SeedFiles {
    /// The run of `task` (None when missing; the study has no language runs).
    pub fn run(&self, task: TaskKind) -> Option<&RunFiles> {
        match task {
            TaskKind::Number => self.number.as_ref(),
            TaskKind::Letter => self.letter.as_ref(),
            TaskKind::Language | TaskKind::Offset | TaskKind::Canonical => None,
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
    pub offset: Option<crate::offset_claims::OffsetFiles>,
    /// The canonical tasks' summaries (`canonical/`), when the study ran them.
    pub canonical: Option<crate::canonical_claims::CanonicalFiles>,
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
}

impl RunFiles {
    /// Reads the files of the run directory `dir` (missing files stay empty). When the run was
    /// measured by a study or sweep job (it has a ledger, `measured.json`), only the files the
    /// ledger vouches for are read: a listed file that changed since, or a measurement file the
    /// ledger does not list (another command's), is an error naming it. Without a ledger (a
    /// run measured by hand), the full test-split evaluation of the latest step is read, never
    /// a partial one (`eval --n N`).
    pub fn load(dir: &Path) -> Result<Self> {
        let ledger = Ledger::load(dir).map_err(|e| invalid(&dir.join(LEDGER), e))?;
        // Whether to read `file`: it exists and, under a ledger, is vouched for by it.
        let wanted = |file: &str| -> Result<bool> {
            let path = dir.join(file);
            match &ledger {
                None => Ok(path.exists()),
                Some(l) => {
                    if l.vouch(dir, file)
                        .map_err(|e| AnalysisError::Invalid(e.to_string()))?
                    {
                        Ok(true)
                    } else if path.exists() {
                        Err(invalid(
                            &path,
                            format!(
                                "not listed in {LEDGER}: another command wrote it, not the \
                                 measurement of this run; move it away and rerun to measure it"
                            ),
                        ))
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
        let scores = dir.join("scores.jsonl");
        if wanted("scores.jsonl")? {
            if let Some(text) = read(&scores)? {
                for (i, line) in text.lines().enumerate() {
                    out.scores.push(
                        serde_json::from_str(line)
                            .map_err(|e| invalid(&scores, format!("line {}: {e}", i + 1)))?,
                    );
                }
            }
        }
        let metrics = dir.join("metrics.jsonl");
        if let Some(text) = read(&metrics)? {
            for (i, line) in text.lines().enumerate() {
                let m: MetricsLine = serde_json::from_str(line)
                    .map_err(|e| invalid(&metrics, format!("line {}: {e}", i + 1)))?;
                out.steps = out.steps.max(m.step);
                if let Some(v) = m.val {
                    out.val.push((m.step, v));
                }
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
        out.test = best.map(|b| b.1);
        let lengths = dir.join("lengthgen.csv");
        if wanted("lengthgen.csv")? {
            if let Some(text) = read(&lengths)? {
                out.lengths = from_csv(&text, &lengths.display().to_string())?;
            }
        }
        for path in listed("attention")? {
            let Some(text) = read(&path)? else { continue };
            out.attention
                .push(serde_json::from_str(&text).map_err(|e| invalid(&path, e))?);
        }
        Ok(out)
    }
}

/// Reads a theory discrepancy CSV (`n,delta,bound,delta_max`).
pub fn load_curve(path: &Path) -> Result<Option<Curve>> {
    let Some(text) = read(path)? else {
        return Ok(None);
    };
    let rows: Vec<DiscrepancyRow> = ropelab_io::read_csv(&text, &path.display().to_string())
        .map_err(|e| AnalysisError::Invalid(e.to_string()))?;
    Ok(Some(rows.iter().map(|r| (r.n, r.delta, r.bound)).collect()))
}

impl StudyFiles {
    /// Reads a study directory: `seed-S/{number,letter}/` for each seed,
    /// `theory/discrepancy-{index,retrieval}.csv`, `offset/` and `canonical/`.
    pub fn load(root: &Path, seeds: &[u64]) -> Result<Self> {
        let study = crate::StudyDir::new(root);
        let run = |seed: u64, task: TaskKind| -> Result<Option<RunFiles>> {
            let dir: PathBuf = study.model(seed, task);
            if dir.is_dir() {
                Ok(Some(RunFiles::load(&dir)?))
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
                    })
                })
                .collect::<Result<_>>()?,
            index: load_curve(&study.theory("discrepancy-index.csv"))?,
            retrieval: load_curve(&study.theory("discrepancy-retrieval.csv"))?,
            offset: crate::offset_claims::OffsetFiles::load(&study.offset())?,
            canonical: crate::canonical_claims::CanonicalFiles::load(&study.canonical_root())?,
        })
    }
}

/// The final step's lines of a run.
fn last_step(scores: &[HeadStep]) -> Vec<&HeadStep> {
    let last = scores.iter().map(|l| l.step).max().unwrap_or(0);
    scores.iter().filter(|l| l.step == last).collect()
}

fn pure(l: &HeadStep, gamma: Gamma) -> HeadKind {
    crate::dynamics::purity(
        crate::SwapScores {
            s_pos: l.s_pos,
            s_sym: l.s_sym,
        },
        gamma,
    )
}

/// Layer types at the final checkpoint: P (a pure positional head), S (a pure symbolic one),
/// - (neither), one letter per layer.
pub fn layer_types(scores: &[HeadStep], gamma: Gamma) -> String {
    let mut by_layer: BTreeMap<usize, Vec<HeadKind>> = BTreeMap::new();
    for l in last_step(scores) {
        by_layer.entry(l.layer).or_default().push(pure(l, gamma));
    }
    by_layer
        .values()
        .map(|kinds| {
            let p = kinds.contains(&HeadKind::Positional);
            let s = kinds.contains(&HeadKind::Symbolic);
            match (p, s) {
                (true, true) => 'B',
                (true, false) => 'P',
                (false, true) => 'S',
                (false, false) => '-',
            }
        })
        .collect()
}

/// The step each hop count is first learned (validation accuracy >= threshold), per hop.
fn hop_steps(val: &[(usize, Accuracy)], threshold: f64) -> BTreeMap<usize, Option<usize>> {
    let mut out: BTreeMap<usize, Option<usize>> = BTreeMap::new();
    for (step, acc) in val {
        for (&h, &a) in &acc.per_hop {
            let e = out.entry(h).or_insert(None);
            if e.is_none() && a >= threshold {
                *e = Some(*step);
            }
        }
    }
    out
}

/// When each hop count of a run is learned: (description, every hop count learned, learned in
/// order of hop count, spread of the learned steps as a fraction of the run's steps).
fn hop_timing(r: &RunFiles, threshold: f64) -> (String, bool, bool, f64) {
    let steps = hop_steps(&r.val, threshold);
    let learned: Vec<usize> = steps.values().filter_map(|s| *s).collect();
    let all = learned.len() == steps.len();
    let ordered = learned.windows(2).all(|w| w[0] <= w[1]);
    let spread = learned.iter().max().unwrap_or(&0) - learned.iter().min().unwrap_or(&0);
    let text = format!(
        "learned at {} (spread {spread} of {} steps)",
        fmt_steps(&steps),
        r.steps
    );
    (text, all, ordered, spread as f64 / r.steps.max(1) as f64)
}

fn fmt_steps(steps: &BTreeMap<usize, Option<usize>>) -> String {
    steps
        .iter()
        .map(|(h, s)| match s {
            Some(s) => format!("{h}:{s}"),
            None => format!("{h}:never"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One per-seed measurement: its text and whether it meets the threshold (None: not measured).
type Measure = (String, Option<bool>);

fn per_seed(files: &StudyFiles, f: impl Fn(&SeedFiles) -> Measure) -> (Vec<String>, usize, usize) {
    let mut measured = vec![];
    let (mut holding, mut count) = (0, 0);
    for s in &files.seeds {
        let (text, ok) = f(s);
        measured.push(format!("seed {}: {text}", s.seed));
        if let Some(ok) = ok {
            count += 1;
            holding += usize::from(ok);
        }
    }
    (measured, holding, count)
}

pub(crate) fn claim(
    id: &str,
    paper: &str,
    threshold: String,
    (measured, holding, measured_count): (Vec<String>, usize, usize),
    expected: usize,
) -> Claim {
    let verdict = if measured_count == 0 || measured_count < expected {
        Verdict::NotMeasured
    } else if holding == measured_count {
        Verdict::Holds
    } else {
        Verdict::DoesNotHold
    };
    Claim {
        id: id.into(),
        paper: paper.into(),
        threshold,
        measured,
        holding,
        measured_count,
        verdict,
    }
}

/// Every verdict of the study from its files.
pub fn verdicts(files: &StudyFiles, t: &Thresholds) -> Vec<Claim> {
    let n = files.seeds.len();
    let mut out = vec![];

    out.push(claim(
        "both_tasks_learned",
        "Both tasks are learned to about 100% test accuracy.",
        format!("test accuracy >= {} on both tasks", t.learned_accuracy),
        per_seed(files, |s| {
            let acc =
                |r: &Option<RunFiles>| r.as_ref().and_then(|r| r.test.as_ref()).map(|a| a.accuracy);
            match (acc(&s.number), acc(&s.letter)) {
                (Some(a), Some(b)) => (
                    format!("number {a:.4}, letter {b:.4}"),
                    Some(a >= t.learned_accuracy && b >= t.learned_accuracy),
                ),
                _ => ("no test evaluation".into(), None),
            }
        }),
        n,
    ));

    out.push(claim(
        "number_positional_then_symbolic",
        "Number task: the early layers end as pure positional heads (they perform the hops), \
         the later layers as pure symbolic heads.",
        format!(
            "at the last checkpoint, gamma {}: >= {} layers with a pure positional head, >= 1 \
             with a pure symbolic head, every positional layer before every symbolic one \
             (layer types: P positional, S symbolic, - neither)",
            t.gamma, t.min_positional_layers
        ),
        per_seed(files, |s| match &s.number {
            Some(r) if !r.scores.is_empty() => {
                let types = layer_types(&r.scores, t.gamma);
                let last_p = types.rfind('P');
                let first_s = types.find('S');
                let ok = types.matches('P').count() >= t.min_positional_layers
                    && !types.contains('B')
                    && matches!((last_p, first_s), (Some(p), Some(s)) if p < s);
                (format!("layers {types}"), Some(ok))
            }
            _ => ("no scores".into(), None),
        }),
        n,
    ));

    out.push(claim(
        "letter_all_symbolic",
        "Letter task: the heads that become pure are all symbolic; there is no positional head.",
        format!(
            "at the last checkpoint, gamma {}: no pure positional head and >= 1 pure symbolic head",
            t.gamma
        ),
        per_seed(files, |s| match &s.letter {
            Some(r) if !r.scores.is_empty() => {
                let types = layer_types(&r.scores, t.gamma);
                let ok = !types.contains('P') && !types.contains('B') && types.contains('S');
                (format!("layers {types}"), Some(ok))
            }
            _ => ("no scores".into(), None),
        }),
        n,
    ));

    out.push(claim(
        "pure_before_accuracy_peak",
        "Test accuracy peaks only once the heads are pure.",
        format!(
            "per task, the last step at which a head that ends pure (gamma {}) becomes pure for \
             good is <= the first checkpoint whose test accuracy is within {} of the run's best",
            t.gamma, t.peak_tolerance
        ),
        per_seed(files, |s| {
            let mut parts = vec![];
            let mut ok = Some(true);
            for (name, run) in [("number", &s.number), ("letter", &s.letter)] {
                let Some(r) = run.as_ref().filter(|r| !r.scores.is_empty()) else {
                    return ("no scores".into(), None);
                };
                let Ok(summary) = summarize_heads(&r.scores, t.gamma) else {
                    return ("bad gamma".into(), None);
                };
                let pure_step = summary.iter().filter_map(|h| h.pure_from).max();
                let mut acc: BTreeMap<usize, f64> = BTreeMap::new();
                for l in &r.scores {
                    acc.insert(l.step, l.accuracy);
                }
                let best = acc.values().copied().fold(0.0, f64::max);
                let peak = acc
                    .iter()
                    .find(|(_, &a)| a >= best - t.peak_tolerance)
                    .map(|(&s, _)| s);
                match (pure_step, peak) {
                    (Some(p), Some(k)) => {
                        parts.push(format!("{name}: heads pure by {p}, accuracy peaks at {k}"));
                        if p > k {
                            ok = Some(false);
                        }
                    }
                    _ => {
                        parts.push(format!("{name}: no pure head"));
                        ok = Some(false);
                    }
                }
            }
            (parts.join("; "), ok)
        }),
        n,
    ));

    out.push(claim(
        "number_hops_in_order",
        "Number task: hop counts are learned one after another, 1 hop first.",
        format!(
            "step at which each hop count's validation accuracy first reaches {}: \
             non-decreasing in the hop count, spanning more than {} of the training steps",
            t.hop_accuracy, t.hop_spread
        ),
        per_seed(files, |s| match &s.number {
            Some(r) if !r.val.is_empty() => {
                let (text, all, ordered, spread) = hop_timing(r, t.hop_accuracy);
                (text, Some(all && ordered && spread > t.hop_spread))
            }
            _ => ("no validation metrics".into(), None),
        }),
        n,
    ));

    out.push(claim(
        "letter_hops_together",
        "Letter task: hop counts are learned almost together.",
        format!(
            "step at which each hop count's validation accuracy first reaches {}: all within {} \
             of the training steps",
            t.hop_accuracy, t.hop_spread
        ),
        per_seed(files, |s| match &s.letter {
            Some(r) if !r.val.is_empty() => {
                let (text, all, _, spread) = hop_timing(r, t.hop_accuracy);
                (text, Some(all && spread <= t.hop_spread))
            }
            _ => ("no validation metrics".into(), None),
        }),
        n,
    ));

    out.push(claim(
        "frequency_use",
        "Positional heads use high RoPE frequencies (low plane ids), symbolic heads low \
         frequencies (high plane ids).",
        format!(
            "at the last checkpoint of both models, the mean over pure positional heads (gamma \
             {}) of the frequency-weighted mean plane id is below the mean over pure symbolic heads",
            t.gamma
        ),
        per_seed(files, |s| {
            let (mut p, mut q) = (vec![], vec![]);
            for r in [&s.number, &s.letter].into_iter().flatten() {
                for l in last_step(&r.scores) {
                    match pure(l, t.gamma) {
                        HeadKind::Positional => p.push(l.freq_mean_plane),
                        HeadKind::Symbolic => q.push(l.freq_mean_plane),
                        HeadKind::Mixed => {}
                    }
                }
            }
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            let range = |v: &[f64]| {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                format!("{lo:.1}..{hi:.1}")
            };
            if p.is_empty() || q.is_empty() {
                return ("no pure positional or no pure symbolic head".into(), None);
            }
            (
                format!(
                    "mean plane: positional {:.2} ({} heads, {}), symbolic {:.2} ({} heads, {})",
                    mean(&p),
                    p.len(),
                    range(&p),
                    mean(&q),
                    q.len(),
                    range(&q)
                ),
                Some(mean(&p) < mean(&q)),
            )
        }),
        n,
    ));

    let drop = |r: &Option<RunFiles>| -> Option<(Option<usize>, usize)> {
        let r = r.as_ref().filter(|r| !r.lengths.is_empty())?;
        let longest = r.lengths.iter().map(|l| l.length).max()?;
        Some((first_length_below(&r.lengths, t.length_accuracy), longest))
    };
    let fmt_drop = |d: (Option<usize>, usize)| match d.0 {
        Some(l) => format!("first below {} at length {l}", t.length_accuracy),
        None => format!("never below {} up to length {}", t.length_accuracy, d.1),
    };
    out.push(claim(
        "length_contrast",
        "Length generalisation: the letter model stays accurate far beyond its training length \
         while the number model collapses almost at once.",
        format!(
            "the first tested length where the letter model's accuracy falls below {} is >= {} \
             times the number model's (a model that never falls counts with its longest tested \
             length)",
            t.length_accuracy, t.length_ratio
        ),
        per_seed(files, |s| match (drop(&s.number), drop(&s.letter)) {
            (Some(a), Some(b)) => {
                let letter = b.0.unwrap_or(b.1) as f64;
                let ok = match a.0 {
                    Some(num) => letter >= t.length_ratio * num as f64,
                    None => false,
                };
                (
                    format!("number {}; letter {}", fmt_drop(a), fmt_drop(b)),
                    Some(ok),
                )
            }
            _ => ("no lengthgen.csv".into(), None),
        }),
        n,
    ));

    out.push(claim(
        "letter_50x_context",
        "A letter-task model stays above 90% accuracy up to length about 850, about 53 times \
         its 16-token context.",
        format!(
            "letter accuracy >= {} at every tested length up to {} tokens (50 x 16), with a \
             length of at least {} tested",
            t.length_accuracy, t.letter_length, t.letter_length
        ),
        per_seed(files, |s| match drop(&s.letter) {
            Some(d) if d.1 >= t.letter_length => {
                let ok = d.0.is_none_or(|l| l > t.letter_length);
                (fmt_drop(d), Some(ok))
            }
            Some(d) => (format!("longest tested length {} is too short", d.1), None),
            None => ("no lengthgen.csv".into(), None),
        }),
        n,
    ));

    let single = |m: Option<Measure>| -> (Vec<String>, usize, usize) {
        match m {
            Some((text, Some(ok))) => (vec![text], usize::from(ok), 1),
            Some((text, None)) => (vec![text], 0, 0),
            None => (vec!["no theory CSV".into()], 0, 0),
        }
    };
    let at = |c: &Curve, n: usize| c.iter().find(|r| r.0 == n).map(|r| r.1);
    out.push(claim(
        "index_discrepancy_decays",
        "The hand-built Index head's discrepancy decays like 1/n^2 (theorem 3.2: Delta(n) <= \
         min(1 - cos theta, 2 pi^2 / n^2)).",
        "Delta(n) <= the theorem's bound at every n of the curve (relative slack 1e-9)".into(),
        single(files.index.as_ref().map(|c| {
            let worst = c
                .iter()
                .map(|r| r.1 / r.2)
                .fold(f64::NEG_INFINITY, f64::max);
            let max_n = c.iter().map(|r| r.0).max().unwrap_or(0);
            let pick: Vec<String> = [1, 10, 100, max_n]
                .iter()
                .filter_map(|&n| at(c, n).map(|d| format!("Delta({n}) = {d:.3e}")))
                .collect();
            (
                format!("{}; largest Delta / bound {worst:.3}", pick.join(", ")),
                Some(worst <= 1.0 + 1e-9),
            )
        })),
        1,
    ));

    out.push(claim(
        "retrieval_discrepancy_holds",
        "The hand-built Retrieval head's discrepancy does not decay with n (it stays near 1 - \
         cos omega while n theta is small).",
        format!(
            "Delta(n) >= {} x Delta(1) for every n <= {} (the paper's plotted range)",
            t.retrieval_fraction, t.retrieval_n
        ),
        single(files.retrieval.as_ref().map(|c| {
            let Some(d1) = at(c, 1) else {
                return ("the curve has no n = 1".into(), None);
            };
            let in_range: Vec<_> = c.iter().filter(|r| r.0 <= t.retrieval_n).collect();
            if in_range.iter().map(|r| r.0).max() != Some(t.retrieval_n) {
                return (
                    format!("the curve stops before n = {}", t.retrieval_n),
                    None,
                );
            }
            let min = in_range.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
            let fails = c.iter().find(|r| r.1 <= 0.0).map(|r| r.0);
            let text = format!(
                "Delta(1) = {d1:.3}, min over n <= {} = {min:.3} ({:.2} x Delta(1)); {}",
                t.retrieval_n,
                min / d1,
                match fails {
                    Some(n) => format!("Delta first <= 0 at n = {n} (n theta passes omega / 2)"),
                    None => "Delta > 0 over the whole curve".into(),
                }
            );
            (text, Some(min >= t.retrieval_fraction * d1))
        })),
        1,
    ));
    out.extend(crate::offset_claims::verdicts(files.offset.as_ref(), t));
    out.extend(crate::canonical_claims::verdicts(
        files.canonical.as_ref(),
        t,
    ));
    out
}

/// The verdicts as a text table.
pub fn table(claims: &[Claim]) -> String {
    let mut s = String::new();
    for c in claims {
        let _ = writeln!(
            s,
            "{:<32} {:<14} {}/{}",
            c.id,
            c.verdict.to_string(),
            c.holding,
            c.measured_count
        );
        let _ = writeln!(s, "    paper:     {}", c.paper);
        let _ = writeln!(s, "    threshold: {}", c.threshold);
        for m in &c.measured {
            let _ = writeln!(s, "    measured:  {m}");
        }
    }
    s.trim_end().to_owned()
}
