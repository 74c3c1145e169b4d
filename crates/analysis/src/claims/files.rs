//! What the verdicts read: a study's run files (scores, metrics, the test evaluation,
//! length generalisation, attention views, the hop map) per seed and task, the theory curves, and the
//! offset and canonical tables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ropelab_io::{Ledger, LEDGER};
use ropelab_tasks::TaskKind;
use ropelab_train::Accuracy;
use serde::Deserialize;

use crate::lens::attention::AttentionView;
use crate::measure::dynamics::HeadStep;
use crate::measure::hops::HopRow;
use crate::measure::lengthgen::{from_csv, LengthRow};
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
    /// `lengthgen.csv`.
    pub lengths: Vec<LengthRow>,
    /// `attention/*.json`, in file-name order.
    pub attention: Vec<AttentionView>,
    /// `hops.csv` (a number model's hop map), empty when absent.
    pub hops: Vec<HopRow>,
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
        let hops = dir.join("hops.csv");
        if wanted("hops.csv")? {
            if let Some(text) = read(&hops)? {
                out.hops = ropelab_io::read_csv(&text, &hops.display().to_string())
                    .map_err(|e| AnalysisError::Invalid(e.to_string()))?;
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
            offset: super::offset::OffsetFiles::load(&study.offset())?,
            canonical: super::canonical::CanonicalFiles::load(&study.canonical_root())?,
        })
    }
}
