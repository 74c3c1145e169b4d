//! Merging a sweep's finished jobs into tables (`OUT/collected/`): one row per job (parameters,
//! final metrics, layer types, N*, accuracy per input length), one row per configuration (the
//! parameters other than `seed`) with mean, standard deviation and count over seeds, and one
//! row per configuration and input length. A `reproduce` directory collects the same way (its
//! models are sweep jobs with parameters `seed` and `task`).

use std::collections::BTreeMap;
use std::path::Path;

use ropelab_io::write_atomic;
use serde::{Deserialize, Serialize};

use crate::local::{read_result, result_vouched, JobResult, RESULT, RESULTS_VERSION};
use crate::plan::{dir_key, Plan, PLAN};
use crate::{Result, SweepError};
use ropelab_io::LEDGER;

/// One configuration's results over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigSummary {
    /// The parameters other than `seed`, `key=value` joined by spaces.
    pub config: String,
    /// Jobs (seeds) collected.
    pub n: usize,
    /// Mean test accuracy (validation accuracy where the task has no test split evaluation).
    pub accuracy_mean: f64,
    /// Its sample standard deviation; none (an empty cell) for one job, where a spread cannot
    /// be measured.
    #[serde(serialize_with = "ropelab_io::csv_rows::display_opt")]
    pub accuracy_sd: Option<f64>,
    /// Layer types per seed, in job order (`-` where not measured).
    pub layer_types: String,
    /// Mean N* over seeds (language jobs; empty for the others).
    #[serde(default)]
    pub n_star_mean: Option<f64>,
    /// Its sample standard deviation.
    #[serde(default)]
    pub n_star_sd: Option<f64>,
}

/// One configuration's accuracy at one input length over seeds (`lengths.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthSummary {
    /// The configuration, as in [`ConfigSummary::config`].
    pub config: String,
    /// Input length (tokens; string length for a language job).
    pub length: usize,
    /// Jobs (seeds) measured there.
    pub n: usize,
    /// Mean accuracy.
    pub mean: f64,
    /// Its sample standard deviation; none (an empty cell) for one job.
    #[serde(serialize_with = "ropelab_io::csv_rows::display_opt")]
    pub sd: Option<f64>,
}

/// Mean and sample standard deviation (none for fewer than two values, which have no
/// measurable spread; NaN mean for none).
pub fn mean_sd(values: &[f64]) -> (f64, Option<f64>) {
    let n = values.len();
    if n == 0 {
        return (f64::NAN, None);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let sd = (n > 1)
        .then(|| (values.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt());
    (mean, sd)
}

/// Every finished job's result under `out` with its job directory (relative, `/`-separated),
/// sorted by id: each `out/*/*/result.json` (a sweep's `jobs/<id>/`, the study's
/// `seed-S/<task>/`).
pub fn found(out: &Path) -> Result<Vec<(String, JobResult)>> {
    let mut found = vec![];
    for dir in subdirs(out)? {
        for job in subdirs(&dir)? {
            if let Some(r) = read_result(&job.join(RESULT))? {
                let rel = job.strip_prefix(out).unwrap_or(&job);
                found.push((dir_key(rel), r));
            }
        }
    }
    found.sort_by(|a, b| a.1.id.cmp(&b.1.id).then_with(|| a.0.cmp(&b.0)));
    Ok(found)
}

/// Every finished job's result under `out` that its directory's plan ([`Plan`]) and ledger
/// vouch for, sorted by id. Refused, naming each job directory (at most [`NAMED`] of them):
/// a directory with no plan; a result the plan does not list there, or with another id, run
/// config or measurement than the plan's (a job copied in from another sweep or under another
/// name); a result edited after its job wrote it (the job directory's ledger); a result of
/// another [`crate::local::RESULTS_VERSION`].
pub fn results(out: &Path) -> Result<Vec<JobResult>> {
    let all = found(out)?;
    if all.is_empty() {
        return Ok(vec![]);
    }
    let Some(plan) = Plan::load(out)? else {
        return Err(refused(format!(
            "{} has no {PLAN} (the list of the jobs its sweep set out to run, written by \
             `ropelab sweep` and `ropelab reproduce` before they run a job, by this version or \
             later): run the same `ropelab sweep` (or `reproduce`) command again to record it \
             (finished jobs are skipped); nothing written",
            out.display()
        )));
    };
    // A study's jobs are those of the config it ran: one edited since (its ledger no longer
    // vouching for it) may list other seeds than the models pooled (twenty-fifth pass, A-S5).
    if plan.origin.starts_with("reproduce") && out.join(LEDGER).is_file() {
        let key = ropelab_analysis::measure::keys::study_table("config");
        let standing = ropelab_io::Ledger::check(out, "config.toml", &key)
            .map_err(|e| refused(format!("{}: {e}", out.join("config.toml").display())))?;
        if let ropelab_io::Standing::Foreign(why) = standing {
            return Err(refused(format!(
                "{why}: the study's config is not the one its jobs ran (restore it, or reproduce \
                 the study again); nothing written"
            )));
        }
    }
    let mut why = vec![];
    for (dir, r) in &all {
        let twice = all.iter().filter(|(_, o)| o.id == r.id).count() > 1;
        if let Some(reason) = plan.refuses(dir, r) {
            why.push(reason);
        } else if twice {
            why.push(format!(
                "{dir}/{RESULT} is job {}'s result, found in more than one directory (a job \
                 copied under another name is counted once at most)",
                r.id
            ));
        } else if r.results_version != RESULTS_VERSION {
            why.push(format!(
                "{dir}/{RESULT} was made by results version {} of ropelab, this one is version \
                 {RESULTS_VERSION}",
                r.results_version
            ));
        } else if !result_vouched(&out.join(dir))? {
            why.push(format!(
                "{dir}/{RESULT} is not the one its job wrote (edited afterwards, or written \
                 before results were recorded in the job's {LEDGER}): rerun the sweep, which \
                 measures the job again"
            ));
        } else if let Some(planned) = plan.jobs.get(dir) {
            let run = planned.run_dir(out, dir);
            if let Some(c) = r.contradiction(&run, &planned.measure)? {
                why.push(format!(
                    "{dir}/{RESULT} contradicts itself or its run: {c} (a result edited and its \
                     ledger re-sealed; rerun the sweep, which measures the job again)"
                ));
            }
        }
    }
    if !why.is_empty() {
        let more = why.len().saturating_sub(NAMED);
        why.truncate(NAMED);
        return Err(refused(format!(
            "{} results in {} cannot be pooled: {}{}; nothing written",
            why.len() + more,
            out.display(),
            why.join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            }
        )));
    }
    Ok(all.into_iter().map(|(_, r)| r).collect())
}

/// At most this many refused job directories are named in one error.
pub const NAMED: usize = 5;

fn refused(message: String) -> SweepError {
    SweepError::Job {
        id: "collect".into(),
        message,
    }
}

/// The planned jobs of `out` (its [`Plan`]) that have no result: never started (a shard not
/// run) or started and unfinished. Their directories, sorted; empty without a plan.
pub fn not_finished(out: &Path) -> Result<Vec<String>> {
    let Some(plan) = Plan::load(out)? else {
        return Ok(vec![]);
    };
    Ok(plan
        .jobs
        .keys()
        .filter(|dir| !out.join(dir.as_str()).join(RESULT).exists())
        .cloned()
        .collect())
}

/// The directories in `dir` (none when it does not exist), sorted.
fn subdirs(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let io = |e| SweepError::Io {
        path: dir.to_owned(),
        source: e,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(io(e)),
    };
    let mut out = vec![];
    for entry in entries {
        let entry = entry.map_err(io)?;
        if entry.file_type().map_err(io)?.is_dir() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The accuracy a summary uses: test where measured, else validation.
fn accuracy(r: &JobResult) -> Option<f64> {
    r.test_accuracy.or(r.val_accuracy)
}

/// The configuration of a result: its parameters other than `seed`, `key=value` joined by
/// spaces.
fn config_of(r: &JobResult) -> String {
    r.params
        .iter()
        .filter(|(k, _)| k.as_str() != "seed")
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn groups(results: &[JobResult]) -> BTreeMap<String, Vec<&JobResult>> {
    let mut groups: BTreeMap<String, Vec<&JobResult>> = BTreeMap::new();
    for r in results {
        groups.entry(config_of(r)).or_default().push(r);
    }
    groups
}

/// The results grouped by configuration (parameters without `seed`).
pub fn summarise(results: &[JobResult]) -> Vec<ConfigSummary> {
    groups(results)
        .into_iter()
        .map(|(config, rs)| {
            let acc: Vec<f64> = rs.iter().filter_map(|r| accuracy(r)).collect();
            let (mean, sd) = mean_sd(&acc);
            let stars: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.n_star.map(|n| n as f64))
                .collect();
            let (star_mean, star_sd) = mean_sd(&stars);
            ConfigSummary {
                config,
                n: rs.len(),
                accuracy_mean: mean,
                accuracy_sd: sd,
                layer_types: rs
                    .iter()
                    .map(|r| r.layer_types.clone().unwrap_or_else(|| "-".into()))
                    .collect::<Vec<_>>()
                    .join(" "),
                n_star_mean: (!stars.is_empty()).then_some(star_mean),
                n_star_sd: star_sd,
            }
        })
        .collect()
}

/// Accuracy per input length of every configuration, mean and sd over its seeds.
pub fn length_summary(results: &[JobResult]) -> Vec<LengthSummary> {
    let mut out = vec![];
    for (config, rs) in groups(results) {
        let mut by_length: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for r in &rs {
            for (&l, &a) in &r.length_accuracy {
                by_length.entry(l).or_default().push(a);
            }
        }
        for (length, values) in by_length {
            let (mean, sd) = mean_sd(&values);
            out.push(LengthSummary {
                config: config.clone(),
                length,
                n: values.len(),
                mean,
                sd,
            });
        }
    }
    out
}

/// Every key any result has, sorted (the columns of a table over all jobs).
fn union<K: Ord>(results: &[JobResult], keys: impl Fn(&JobResult) -> Vec<K>) -> Vec<K> {
    let all: std::collections::BTreeSet<K> = results.iter().flat_map(keys).collect();
    all.into_iter().collect()
}

/// The per-job table as CSV: id, one column per parameter, then the measurements.
pub fn jobs_csv(results: &[JobResult]) -> String {
    let keys = union(results, |r| r.params.keys().cloned().collect());
    let hops = union(results, |r| r.per_hop.keys().copied().collect());
    let lengths = union(results, |r| r.length_accuracy.keys().copied().collect());
    // A `task` parameter (a study's jobs, a sweep over tasks) is the run's task: one column.
    let task_column = !keys.iter().any(|k| k == "task");
    let mut w = csv::Writer::from_writer(vec![]);
    let mut header = vec!["id".to_string()];
    header.extend(keys.iter().cloned());
    if task_column {
        header.push("task".into());
    }
    header.extend(
        [
            "steps",
            "val_accuracy",
            "test_accuracy",
            "layer_types",
            "setup_seconds",
            "train_seconds",
            "eval_seconds",
            "n_star",
        ]
        .map(String::from),
    );
    header.extend(hops.iter().map(|h| format!("hop_{h}")));
    header.extend(lengths.iter().map(|l| format!("length_{l}")));
    w.write_record(&header).expect("writing to memory");
    let num = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
    for r in results {
        let mut row = vec![r.id.clone()];
        row.extend(
            keys.iter()
                .map(|k| r.params.get(k).cloned().unwrap_or_default()),
        );
        if task_column {
            row.push(r.task.clone());
        }
        row.extend([
            r.steps.to_string(),
            num(r.val_accuracy),
            num(r.test_accuracy),
            r.layer_types.clone().unwrap_or_default(),
            format!("{:.3}", r.setup_seconds),
            format!("{:.3}", r.train_seconds),
            format!("{:.3}", r.eval_seconds),
            r.n_star.map_or(String::new(), |n| n.to_string()),
        ]);
        row.extend(hops.iter().map(|h| num(r.per_hop.get(h).copied())));
        row.extend(
            lengths
                .iter()
                .map(|l| num(r.length_accuracy.get(l).copied())),
        );
        w.write_record(&row).expect("writing to memory");
    }
    String::from_utf8(w.into_inner().expect("writing to memory")).expect("CSV of UTF-8 text")
}

/// The ids of the jobs under `out` that started (`*/*/job.json`) but have no result yet: still
/// running, killed or failed. Sorted.
pub fn unfinished(out: &Path) -> Result<Vec<String>> {
    let mut found = vec![];
    for dir in subdirs(out)? {
        for job in subdirs(&dir)? {
            if job.join("job.json").exists() && !job.join("result.json").exists() {
                let rel = job.strip_prefix(out).unwrap_or(&job);
                found.push(dir_key(rel));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The file that lists a partial collection's unfinished jobs (absent when none was).
pub const UNFINISHED: &str = "unfinished.txt";

/// The key under which `collect` records its tables in the ledger of `collected/`.
pub const COLLECTED_KEY: &str = "tables written by ropelab collect";

/// Checks that the collected tables of `out` are those of the jobs' results now (a job rerun,
/// added or replaced since `collect` would leave them stale; seventh pass, h4): an error saying
/// so, or the error [`results`] gives for a job it refuses.
pub fn current(out: &Path) -> std::result::Result<(), String> {
    // Every collected table, read by a report or not, is what the jobs give (twenty-fifth
    // pass, A-S10: an edited jobs.csv was left unchecked).
    for name in COLLECTED_TABLES {
        vouch_collected(&out.join("collected").join(name))?;
    }
    let path = out.join("collected").join("jobs.jsonl");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let collected: Vec<JobResult> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let now = results(out).map_err(|e| e.to_string())?;
    if now != collected {
        return Err(format!(
            "{} holds tables of other results than the jobs' now (a job was rerun, added or \
             replaced since `ropelab collect`): run `ropelab collect {}` again",
            out.join("collected").display(),
            out.display()
        ));
    }
    Ok(())
}

/// Checks that the collected table at `path` (in `collected/`) is as `collect` wrote it: the
/// folder's ledger lists it with its checksum, and a table it lists is there (a folder of
/// tables without a ledger was edited, or written by a ropelab from before it kept one: run
/// collect again). An error naming the file otherwise.
pub fn vouch_collected(path: &Path) -> std::result::Result<(), String> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Ok(());
    };
    let ledger = dir.join(ropelab_io::LEDGER);
    let again = "run `ropelab collect` again";
    let listed = match ropelab_io::Ledger::load(dir) {
        Ok(Some(l)) => l.files.contains_key(name),
        Ok(None) if !path.exists() => return Ok(()),
        Ok(None) => {
            return Err(format!(
                "{} has no {} vouching for it (removed, or written by an older ropelab): {again}",
                path.display(),
                ledger.display()
            ))
        }
        Err(e) => return Err(format!("{}: {e}", ledger.display())),
    };
    if listed && !path.exists() {
        return Err(format!(
            "{} is missing, though {} lists it (a collect that did not finish, or a table \
             removed): {again}",
            path.display(),
            ledger.display()
        ));
    }
    match ropelab_io::Ledger::check(dir, name, COLLECTED_KEY) {
        Ok(ropelab_io::Standing::Own) => agrees_with_jobs(dir, name, path),
        Ok(ropelab_io::Standing::Absent) => Ok(()),
        Ok(_) => Err(format!(
            "{} is not as `ropelab collect` wrote it ({} records another checksum, or none): \
             run `ropelab collect` again",
            path.display(),
            dir.join(ropelab_io::LEDGER).display()
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The names of the tables [`collect`] writes into `collected/`.
pub const COLLECTED_TABLES: [&str; 4] = ["jobs.csv", "jobs.jsonl", "summary.csv", "lengths.csv"];

/// The collected tables of `all` (name, text), as [`collect`] writes them.
fn tables(all: &[JobResult]) -> Result<Vec<(&'static str, String)>> {
    let mut lines = String::new();
    for r in all {
        lines += &serde_json::to_string(r)?;
        lines.push('\n');
    }
    let csv_error = |e: ropelab_io::CsvError| SweepError::Job {
        id: "collect".into(),
        message: e.to_string(),
    };
    let [jobs, jsonl, summary, lengths] = COLLECTED_TABLES;
    Ok(vec![
        (jobs, jobs_csv(all)),
        (jsonl, lines),
        (
            summary,
            ropelab_io::to_csv(&summarise(all)).map_err(csv_error)?,
        ),
        (
            lengths,
            ropelab_io::to_csv(&length_summary(all)).map_err(csv_error)?,
        ),
    ])
}

/// A collected table must be what the jobs of its directory give now: one edited with its
/// ledger entry re-sealed (twenty-fourth pass, S5), or collected before more jobs finished, is
/// refused, to be collected again.
fn agrees_with_jobs(dir: &Path, name: &str, path: &Path) -> std::result::Result<(), String> {
    let Some(out) = dir.parent() else {
        return Ok(());
    };
    let again = format!("run `ropelab collect {}` again", out.display());
    let all = results(out).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some((_, want)) = tables(&all)
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|(n, _)| *n == name)
    else {
        return Ok(());
    };
    let got = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if got != want {
        return Err(format!(
            "{} is not what the finished jobs of {} give (edited, or collected before other jobs \
             finished): {again}",
            path.display(),
            out.display()
        ));
    }
    Ok(())
}

/// What `out`, a directory without a plan, is when it is something collect does not merge: a
/// run (one trained model), a study per head count (its `heads-H/` studies are collected one by
/// one) or an experiment's directory (its tables in its ledger, merged already).
fn not_a_job_directory(out: &Path) -> Result<Option<String>> {
    // A level inside a sweep, study or experiment names the directory to collect
    // (twenty-fourth pass, U2).
    let above = |levels: usize| {
        out.ancestors()
            .nth(levels)
            .filter(|d| d.join(PLAN).is_file())
    };
    if out.join(RESULT).is_file() || out.join("job.json").is_file() {
        if let Some(root) = above(2).or_else(|| above(1)) {
            return Ok(Some(format!(
                "one job's directory of {}: collect that directory",
                root.display()
            )));
        }
    }
    if let Some(root) = above(1) {
        return Ok(Some(format!(
            "a folder of the jobs of {}: collect that directory",
            root.display()
        )));
    }
    if let Some(root) = out
        .ancestors()
        .skip(1)
        .find(|d| d.join(ropelab_io::LEDGER).is_file() && !d.join("config.toml").is_file())
    {
        if !out.join(ropelab_io::LEDGER).is_file() || out.join("config.toml").is_file() {
            return Ok(Some(format!(
                "a folder inside {}, an experiment's directory whose tables are its merged \
                 results already",
                root.display()
            )));
        }
    }
    if out.join("config.toml").is_file() && out.join("checkpoints").is_dir() {
        return Ok(Some(
            "a run directory (one trained model; its job's result, when a sweep or study ran \
             it, is collected from the sweep's or study's directory)"
                .into(),
        ));
    }
    let heads: Vec<String> = subdirs(out)?
        .iter()
        .filter(|d| d.join(PLAN).is_file())
        .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("heads-"))
        .collect();
    if let Some(first) = heads.first() {
        return Ok(Some(format!(
            "a study per head count ({}): collect each of them (e.g. {})",
            heads.join(", "),
            out.join(first).display()
        )));
    }
    if out.join(ropelab_io::LEDGER).is_file() {
        return Ok(Some(format!(
            "an experiment's directory ({} lists its tables, which are its merged results \
             already)",
            ropelab_io::LEDGER
        )));
    }
    Ok(None)
}

/// Writes `out/collected/{jobs.csv, jobs.jsonl, summary.csv, lengths.csv}` (and
/// `unfinished.txt`, one job directory per line, when some planned or started jobs have no
/// result yet: the tables then count only the finished ones); returns the results. A directory
/// with no finished job, or with a result [`results`] refuses, is an error, and nothing is
/// written.
pub fn collect(out: &Path) -> Result<Vec<JobResult>> {
    let all = results(out)?;
    // An experiment's directory (`offset`, `languages`, `canonical`, `bias`: its tables in its
    // ledger, no plan) has its tables already; collect merges a sweep's or study's jobs.
    if all.is_empty() && !out.join(PLAN).is_file() {
        if let Some(what) = not_a_job_directory(out)? {
            return Err(SweepError::Job {
                id: "collect".into(),
                message: format!(
                    "{} is {what}: collect merges the jobs of a sweep or a study; nothing written",
                    out.display()
                ),
            });
        }
    }
    if all.is_empty() {
        return Err(SweepError::Job {
            id: "collect".into(),
            message: format!(
                "{} holds no finished job (no */*/result.json: run `ropelab sweep` or `ropelab \
                 reproduce` there first); nothing written",
                out.display()
            ),
        });
    }
    let dir = out.join("collected");
    let io = |path: std::path::PathBuf| move |e: std::io::Error| SweepError::Io { path, source: e };
    std::fs::create_dir_all(&dir).map_err(io(dir.clone()))?;
    let mut pending = unfinished(out)?;
    pending.extend(not_finished(out)?);
    pending.sort();
    pending.dedup();
    let list = dir.join(UNFINISHED);
    if pending.is_empty() {
        match std::fs::remove_file(&list) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(list)(e)),
            _ => {}
        }
    } else {
        let text: String = pending.iter().map(|p| format!("{p}\n")).collect();
        write_atomic(&list, text.as_bytes()).map_err(io(list.clone()))?;
    }
    let tables = tables(&all)?;
    // Each table is recorded in `collected/`'s ledger, so a report refuses one edited since
    // (sixth pass, A2).
    for (name, text) in tables {
        let path = dir.join(name);
        ropelab_io::Ledger::begin(&dir, name, COLLECTED_KEY).map_err(io(path.clone()))?;
        write_atomic(&path, text.as_bytes()).map_err(io(path.clone()))?;
        ropelab_io::Ledger::finish(&dir, name, COLLECTED_KEY).map_err(io(path))?;
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One value has no spread: its sd is none (an empty CSV cell), never 0 (eighth pass,
    /// w008); two values have their sample sd.
    #[test]
    fn one_seed_has_no_standard_deviation() {
        assert_eq!(mean_sd(&[0.5]), (0.5, None));
        let (m, sd) = mean_sd(&[0.0, 1.0]);
        assert_eq!(m, 0.5);
        assert!((sd.unwrap() - 0.5f64.sqrt()).abs() < 1e-12);
        assert!(mean_sd(&[]).0.is_nan());
        let row = LengthSummary {
            config: "lr=0.01".into(),
            length: 8,
            n: 1,
            mean: 0.5,
            sd: None,
        };
        let text = ropelab_io::to_csv(&[row]).unwrap();
        assert_eq!(text, "config,length,n,mean,sd\nlr=0.01,8,1,0.5,\n");
        let back: Vec<LengthSummary> = ropelab_io::read_csv(&text, "l.csv").unwrap();
        assert_eq!(back[0].sd, None);
    }
}
