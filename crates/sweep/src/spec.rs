//! A sweep file (docs/sweeps.md): a base run config and axes, expanded to a deterministic list
//! of jobs, each with an id derived from its parameters alone.
//!
//! ```toml
//! name = "example"
//! preset = "tiny"        # the base run config: a preset for a task ...
//! task = "number"
//! [base]                 # ... with any of its keys replaced
//! optim.steps = 40
//! [[axis]]               # a product axis: one key, its values
//! key = "seed"
//! values = [0, 1]
//! [[axis]]               # a list axis: keys that vary together, one row of values per job
//! keys = ["model.d_model", "model.d_mlp"]
//! values = [[16, 32], [32, 64]]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ropelab_tasks::TaskKind;
use ropelab_train::{Preset, RunConfig};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use toml::{Table, Value};

use crate::measure::MeasureOptions;
use crate::{Result, SweepError};

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    name: String,
    preset: Option<String>,
    task: Option<String>,
    config: Option<PathBuf>,
    #[serde(default)]
    base: Table,
    #[serde(default)]
    axis: Vec<AxisFile>,
    #[serde(default)]
    measure: MeasureFile,
}

/// The `[measure]` table: what every job measures beyond its task's default
/// ([`crate::measure`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MeasureFile {
    lengths: Option<Vec<usize>>,
    extras: Option<Vec<usize>>,
    per_length: Option<usize>,
    heads: Option<bool>,
    head_samples: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AxisFile {
    key: Option<String>,
    keys: Option<Vec<String>>,
    values: Vec<Value>,
}

/// One axis: keys that vary together and one row of values per step of the axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Dotted run-config keys (`seed`, `optim.lr`, `model.position.base`).
    pub keys: Vec<String>,
    /// One value per key, per step.
    pub rows: Vec<Vec<Value>>,
}

/// A parsed, checked sweep.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// Name (for the Slurm job and the collected tables).
    pub name: String,
    /// The base run config as a TOML table (preset or file, with `[base]` applied).
    pub base: Table,
    /// Axes, in file order; jobs are their product.
    pub axes: Vec<Axis>,
    /// What every job measures (the file's `[measure]` table over the defaults).
    pub measure: MeasureOptions,
    /// The file it came from (for error messages).
    pub origin: String,
    /// The `[measure]` keys the file gives (each must be read by some job).
    measure_keys: Vec<&'static str>,
}

/// One job: its parameters (axis keys and values, in axis order), the run config they make and
/// where it lives.
#[derive(Debug, Clone)]
pub struct Job {
    /// Stable id: `j` and 12 hex digits of the SHA-256 of its sorted `key=value` lines.
    pub id: String,
    /// (key, value) in axis order.
    pub params: Vec<(String, Value)>,
    /// The run config.
    pub config: RunConfig,
    /// Its directory (`job.json`, `result.json`), relative to the sweep's output directory.
    pub dir: PathBuf,
    /// Its run directory, relative to the sweep's output directory.
    pub run: PathBuf,
}

impl Job {
    /// A sweep's job: directory `jobs/<id>`, run directory `jobs/<id>/run`.
    pub fn new(params: Vec<(String, Value)>, config: RunConfig) -> Self {
        let id = job_id(&params);
        let dir = Path::new("jobs").join(&id);
        Self {
            run: dir.join("run"),
            dir,
            id,
            params,
            config,
        }
    }

    /// A job whose directory is its run directory `dir` (the study's `seed-S/<task>`).
    pub fn in_run_dir(params: Vec<(String, Value)>, config: RunConfig, dir: PathBuf) -> Self {
        Self {
            id: job_id(&params),
            params,
            config,
            run: dir.clone(),
            dir,
        }
    }

    /// A short label for progress bars: `key=value` of each parameter, with the key's last
    /// dotted part (`seed=0 lr=0.003`).
    pub fn label(&self) -> String {
        self.params
            .iter()
            .map(|(k, v)| {
                let short = k.rsplit('.').next().unwrap_or(k);
                format!("{short}={}", value_text(v))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The parameters as `key=value` texts.
    pub fn param_text(&self) -> Vec<String> {
        self.params
            .iter()
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect()
    }
}

/// A TOML value as one short text (strings without quotes).
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        // A float whose plain digits run past 24 characters in exponent form, not 309 digits
        // (ninth pass, y08); every other value as before (plans and tables compare these).
        Value::Float(x) if v.to_string().len() > 24 => format!("{x:e}"),
        other => other.to_string(),
    }
}

/// The id of a parameter set: independent of axis order and of other jobs.
pub fn job_id(params: &[(String, Value)]) -> String {
    let mut lines: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}\n", v)).collect();
    lines.sort();
    let digest = Sha256::digest(lines.concat().as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("j{hex}")
}

fn bad<T>(origin: &str, message: String) -> Result<T> {
    Err(SweepError::Spec {
        origin: origin.to_string(),
        message,
    })
}

impl Sweep {
    /// Parses sweep text; `origin` names the file in errors. Checks every key of `[base]` and of
    /// every axis against the run config, and every axis's shape.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let file: SpecFile = toml::from_str(text).map_err(|e| SweepError::Spec {
            origin: origin.to_string(),
            message: ropelab_io::toml_error::describe(text, &e),
        })?;
        let mut base = match (&file.config, &file.preset, &file.task) {
            (Some(path), None, None) => {
                let path = Path::new(origin)
                    .parent()
                    .unwrap_or(Path::new("."))
                    .join(path);
                let config = RunConfig::load(&path).map_err(|e| SweepError::Spec {
                    origin: origin.to_string(),
                    message: format!("config: {e}"),
                })?;
                as_table(&config)
            }
            (None, preset, Some(task)) => {
                let preset: Preset = preset.as_deref().unwrap_or("tiny").parse().map_err(
                    |e: ropelab_train::TrainError| SweepError::Spec {
                        origin: origin.to_string(),
                        message: format!("preset: {e}"),
                    },
                )?;
                let task: TaskKind = task.parse().map_err(|e| SweepError::Spec {
                    origin: origin.to_string(),
                    message: format!("task: {e}"),
                })?;
                as_table(&preset.config(task))
            }
            _ => {
                return bad(
                    origin,
                    "give the base run config as `task` (with an optional `preset`) or as \
                     `config = \"FILE.toml\"`, not both"
                        .into(),
                )
            }
        };
        let base_keys: Vec<String> = flatten(&file.base, "")
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for (key, value) in flatten(&file.base, "") {
            set(&mut base, &key, value).map_err(|m| SweepError::Spec {
                origin: origin.to_string(),
                message: format!("[base] {m}"),
            })?;
        }
        let mut axes = vec![];
        for (i, a) in file.axis.iter().enumerate() {
            let name = format!("axis {}", i + 1);
            let keys = match (&a.key, &a.keys) {
                (Some(k), None) => vec![k.clone()],
                (None, Some(k)) if !k.is_empty() => k.clone(),
                _ => return bad(origin, format!("{name}: give `key` or a non-empty `keys`")),
            };
            if a.values.is_empty() {
                return bad(
                    origin,
                    format!("{name} ({}): `values` is empty", keys.join(", ")),
                );
            }
            // A key listed twice in one axis, or also set in [base], would be set twice and
            // keep only one value without a word.
            for (j, k) in keys.iter().enumerate() {
                if keys[..j].contains(k) {
                    return bad(origin, format!("{name}: key {k} is listed twice"));
                }
                if base_keys.contains(k) {
                    return bad(
                        origin,
                        format!("{name}: key {k} is also set in [base]; set it in one place"),
                    );
                }
            }
            let rows: Vec<Vec<Value>> = if keys.len() == 1 {
                a.values.iter().map(|v| vec![v.clone()]).collect()
            } else {
                a.values
                    .iter()
                    .map(|row| match row {
                        Value::Array(r) if r.len() == keys.len() => Ok(r.clone()),
                        other => bad(
                            origin,
                            format!(
                                "{name} ({}): each value must list {} values, got {other}",
                                keys.join(", "),
                                keys.len()
                            ),
                        ),
                    })
                    .collect::<Result<_>>()?
            };
            for k in &keys {
                if axes.iter().any(|x: &Axis| x.keys.contains(k)) {
                    return bad(origin, format!("{name}: key {k} is on two axes"));
                }
                set(&mut base.clone(), k, rows[0][0].clone()).map_err(|m| SweepError::Spec {
                    origin: origin.to_string(),
                    message: format!("{name}: {m}"),
                })?;
            }
            axes.push(Axis { keys, rows });
        }
        let measure = measure_options(&file.measure).map_err(|m| SweepError::Spec {
            origin: origin.to_string(),
            message: format!("[measure] {m}"),
        })?;
        let m = &file.measure;
        let measure_keys = [
            ("lengths", m.lengths.is_some()),
            ("extras", m.extras.is_some()),
            ("per_length", m.per_length.is_some()),
            ("heads", m.heads.is_some()),
            ("head_samples", m.head_samples.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, given)| given.then_some(k))
        .collect();
        Ok(Self {
            name: file.name,
            base,
            axes,
            measure,
            origin: origin.to_string(),
            measure_keys,
        })
    }

    /// Reads and parses a sweep file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| SweepError::Io {
            path: path.to_owned(),
            source: e,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Every job, the product of the axes (the last axis varying fastest), each config checked;
    /// sorted by id, so the list does not depend on the order of the axes' values.
    pub fn jobs(&self) -> Result<Vec<Job>> {
        let mut assignments: Vec<Vec<(String, Value)>> = vec![vec![]];
        for axis in &self.axes {
            let mut next = vec![];
            for a in &assignments {
                for row in &axis.rows {
                    let mut b = a.clone();
                    b.extend(axis.keys.iter().cloned().zip(row.iter().cloned()));
                    next.push(b);
                }
            }
            assignments = next;
        }
        let mut jobs = Vec::with_capacity(assignments.len());
        let mut seen = BTreeMap::new();
        for params in assignments {
            let id = job_id(&params);
            let mut table = self.base.clone();
            for (k, v) in &params {
                set(&mut table, k, v.clone()).map_err(|m| SweepError::Spec {
                    origin: self.origin.clone(),
                    message: m,
                })?;
            }
            follow_vocabulary(&mut table, &params);
            let text = toml::to_string(&table).map_err(|e| SweepError::Spec {
                origin: self.origin.clone(),
                message: e.to_string(),
            })?;
            let label = format!("{} (job {id}: {})", self.origin, texts(&params).join(", "));
            // The error names the sweep file and the job's parameters; a line and column of
            // the job's generated config would point into no file the user has (sixteenth
            // pass, W6).
            let config = RunConfig::from_toml(&text, Path::new(&label)).map_err(|e| match e {
                ropelab_train::TrainError::ConfigFile { message, .. } => SweepError::Spec {
                    origin: label.clone(),
                    message: without_location(&message).to_owned(),
                },
                other => other.into(),
            })?;
            check_measure(&config, &self.measure).map_err(|m| SweepError::Spec {
                origin: label.clone(),
                message: m,
            })?;
            if let Some(other) = seen.insert(id.clone(), texts(&params)) {
                return bad(
                    &self.origin,
                    format!("two jobs have the same parameters: {}", other.join(", ")),
                );
            }
            jobs.push(Job::new(params, config));
        }
        jobs.sort_by(|a, b| a.id.cmp(&b.id));
        // A `[measure]` key no job reads would be ignored silently.
        for &key in &self.measure_keys {
            let readers = measure_readers(key);
            if !jobs.iter().any(|j| readers.contains(&j.config.task)) {
                let names: Vec<String> = readers.iter().map(|t| t.to_string()).collect();
                return bad(
                    &self.origin,
                    format!(
                        "[measure] {key} is read by {} jobs only, and this sweep has none: \
                         drop it",
                        names.join(", ")
                    ),
                );
            }
        }
        Ok(jobs)
    }
}

/// The tasks whose measurement reads `[measure]` key `key` ([`crate::measure`]).
fn measure_readers(key: &str) -> &'static [TaskKind] {
    use TaskKind::*;
    match key {
        "extras" => &[Number, Letter],
        "lengths" => &[Language, Offset, Ambiguous],
        "head_samples" => &[Canonical],
        _ => &[Language, Offset, Ambiguous, Canonical], // per_length, heads
    }
}

/// The measurement a `[measure]` table asks for, checked.
fn measure_options(file: &MeasureFile) -> std::result::Result<MeasureOptions, String> {
    let mut options = MeasureOptions::default();
    if let Some(lengths) = &file.lengths {
        if lengths.is_empty() || !lengths.windows(2).all(|w| w[0] < w[1]) {
            return Err(format!(
                "lengths must be a non-empty ascending list, got {lengths:?}"
            ));
        }
        options.lengths = Some(lengths.clone());
    }
    if let Some(extras) = &file.extras {
        if extras.is_empty() || !extras.windows(2).all(|w| w[0] < w[1]) {
            return Err(format!(
                "extras must be a non-empty ascending list, got {extras:?}"
            ));
        }
        options.length.extras = extras.clone();
    }
    for (key, value, slot) in [
        ("per_length", file.per_length, &mut options.per_length),
        ("head_samples", file.head_samples, &mut options.head_samples),
    ] {
        match value {
            Some(0) => return Err(format!("{key} must be at least 1")),
            Some(n) => *slot = n,
            None => {}
        }
    }
    options.heads = file.heads.unwrap_or(false);
    Ok(options)
}

/// Refuses a job whose task cannot be tested at the lengths `measure` asks for (a fixed-offset
/// sequence no longer than its offset, a language length inside the training range).
fn check_measure(config: &RunConfig, measure: &MeasureOptions) -> std::result::Result<(), String> {
    if let (Some(language), true) = (&config.language, measure.heads) {
        let hi = language.lengths[1];
        let longest = match &measure.lengths {
            Some(lengths) => lengths.last().copied().unwrap_or(hi),
            None => crate::measure::LANGUAGE_REACH * hi,
        };
        let need = ropelab_analysis::measure::languages::mod_heads_need(hi);
        if longest < need {
            return Err(format!(
                "[measure] heads = true scores the MOD heads beyond the training lengths (up to \
                 {hi}) on at least {} positions, but the longest tested length is {longest}: \
                 give [measure] lengths reaching {need} or more",
                need - hi
            ));
        }
    }
    let Some(lengths) = &measure.lengths else {
        return Ok(());
    };
    if let Some(offset) = &config.offset {
        if let Some(n) = lengths.iter().find(|&&n| n <= offset.k) {
            return Err(format!(
                "[measure] length {n} is not longer than the offset k = {}",
                offset.k
            ));
        }
    }
    if let Some(language) = &config.language {
        let hi = language.lengths[1];
        if let Some(n) = lengths.iter().find(|&&n| n <= hi) {
            return Err(format!(
                "[measure] length {n} is not beyond the training lengths (up to {hi}): a \
                 language job is tested at its training lengths and at these"
            ));
        }
        // N* over lengths with one label only would count a constant answer as generalising.
        if let Some(why) = language.name.one_label(lengths.iter().copied()) {
            return Err(format!(
                "[measure] lengths: {why}; test lengths with both labels"
            ));
        }
    }
    Ok(())
}

fn texts(params: &[(String, Value)]) -> Vec<String> {
    params
        .iter()
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect()
}

fn as_table(config: &RunConfig) -> Table {
    toml::from_str(&config.to_toml()).expect("a run config's TOML is a table")
}

/// The leaves of a table as dotted keys (a table of tables flattens; arrays are leaves).
fn flatten(table: &Table, prefix: &str) -> Vec<(String, Value)> {
    let mut out = vec![];
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Table(t) => out.extend(flatten(t, &key)),
            other => out.push((key, other.clone())),
        }
    }
    out
}

/// Keys a run config writes only when they are set (the task vocabulary sizes, docs/tasks.md):
/// a sweep may set them although the base config does not hold them.
pub const OPTIONAL_KEYS: [&str; 3] = ["layout.offsets", "layout.letters", "layout.numbers"];

/// A job that sets the task or its layout gets the vocabulary they need as its
/// `model.vocab_size`, unless it sets that itself (a config the task refuses is left for the
/// run config's check to name).
fn follow_vocabulary(table: &mut Table, params: &[(String, Value)]) {
    let touches = |k: &str| k == "task" || k == "layout" || k.starts_with("layout.");
    if !params.iter().any(|(k, _)| touches(k))
        || params.iter().any(|(k, _)| k == "model.vocab_size")
    {
        return;
    }
    let kind = table
        .get("task")
        .and_then(|v| v.clone().try_into::<TaskKind>().ok());
    let layout = table
        .get("layout")
        .and_then(|v| v.clone().try_into::<ropelab_tasks::Layout>().ok());
    if let (Some(kind), Some(layout)) = (kind, layout) {
        if let Ok(task) = ropelab_tasks::Task::new(kind, layout) {
            let vocab = Value::Integer(task.vocab().len() as i64);
            let _ = set(table, "model.vocab_size", vocab);
        }
    }
}

/// Replaces the value at dotted `key` (which must exist, or be one of [`OPTIONAL_KEYS`]); a
/// scalar given for a list becomes a one-element list.
pub fn set(table: &mut Table, key: &str, value: Value) -> std::result::Result<(), String> {
    if let Some((parent, leaf)) = key.rsplit_once('.') {
        if OPTIONAL_KEYS.contains(&key) {
            if let Some(Value::Table(t)) = table.get_mut(parent) {
                t.entry(leaf.to_string()).or_insert(Value::Integer(0));
            }
        }
    }
    let parts: Vec<&str> = key.split('.').collect();
    let mut at = table;
    for (i, part) in parts.iter().enumerate() {
        let known = || {
            let mut k: Vec<&str> = at.keys().map(String::as_str).collect();
            k.sort_unstable();
            k.join(", ")
        };
        if !at.contains_key(*part) {
            let within = if i == 0 {
                "the run config".to_string()
            } else {
                format!("[{}]", parts[..i].join("."))
            };
            return Err(format!(
                "unknown config key {key}: {within} has no `{part}` (it has {})",
                known()
            ));
        }
        if i + 1 == parts.len() {
            let slot = at.get_mut(*part).expect("checked above");
            *slot = match (&*slot, value) {
                (Value::Array(_), Value::Array(v)) => Value::Array(v),
                (Value::Array(_), v) => Value::Array(vec![v]),
                (Value::Table(_), Value::Table(t)) => Value::Table(t),
                (Value::Table(_), _) => {
                    return Err(format!(
                        "config key {key} is a table: name one of its keys, or give a whole \
                         table (e.g. {{ kind = \"rope\", base = 100.0 }})"
                    ))
                }
                (_, v) => v,
            };
            return Ok(());
        }
        at = match at.get_mut(*part) {
            Some(Value::Table(t)) => t,
            _ => return Err(format!("config key {key}: `{part}` is not a table")),
        };
    }
    Ok(())
}

/// Shard `index` of `count`: every `count`-th job of the id-sorted list, from `index`.
pub fn shard(jobs: &[Job], index: usize, count: usize) -> Vec<&Job> {
    jobs.iter()
        .enumerate()
        .filter(|(i, _)| count > 0 && i % count == index)
        .map(|(_, j)| j)
        .collect()
}

/// `message` without the `line N, column M: ` it starts with, when it does.
fn without_location(message: &str) -> &str {
    let Some(rest) = message.strip_prefix("line ") else {
        return message;
    };
    match rest.split_once(", column ") {
        Some((line, after)) if line.chars().all(|c| c.is_ascii_digit()) => after
            .split_once(": ")
            .filter(|(column, _)| column.chars().all(|c| c.is_ascii_digit()))
            .map_or(message, |(_, tail)| tail),
        _ => message,
    }
}
