//! Merging a sweep's finished jobs into tables (`OUT/collected/`): one row per job (parameters,
//! final metrics, layer types, accuracy per input length), and one
//! row per configuration (the parameters other than `seed`) with mean, standard deviation and
//! count over seeds.

use std::collections::BTreeMap;
use std::path::Path;

use ropelab_io::write_atomic;
use serde::{Deserialize, Serialize};

use crate::local::{read_result, JobResult};
use crate::{Result, SweepError};

/// One configuration's results over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigSummary {
    /// The parameters other than `seed`, `key=value` joined by spaces.
    pub config: String,
    /// Jobs (seeds) collected.
    pub n: usize,
    /// Mean test accuracy (validation accuracy where the task has no test split evaluation).
    pub accuracy_mean: f64,
    /// Its sample standard deviation (0 for one job).
    pub accuracy_sd: f64,
    /// Layer types per seed, in job order (`-` where not measured).
    pub layer_types: String,
}

/// Every finished job's result in `out/jobs/`, sorted by id.
pub fn results(out: &Path) -> Result<Vec<JobResult>> {
    let jobs = out.join("jobs");
    let entries = match std::fs::read_dir(&jobs) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => {
            return Err(SweepError::Io {
                path: jobs,
                source: e,
            })
        }
    };
    let mut out = vec![];
    for entry in entries {
        let entry = entry.map_err(|e| SweepError::Io {
            path: jobs.clone(),
            source: e,
        })?;
        if let Some(r) = read_result(&entry.path().join("result.json"))? {
            out.push(r);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// The accuracy a summary uses: test where measured, else validation.
fn accuracy(r: &JobResult) -> Option<f64> {
    r.test_accuracy.or(r.val_accuracy)
}

/// The results grouped by configuration (parameters without `seed`).
pub fn summarise(results: &[JobResult]) -> Vec<ConfigSummary> {
    let mut groups: BTreeMap<String, Vec<&JobResult>> = BTreeMap::new();
    for r in results {
        let config: Vec<String> = r
            .params
            .iter()
            .filter(|(k, _)| k.as_str() != "seed")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        groups.entry(config.join(" ")).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|(config, rs)| {
            let acc: Vec<f64> = rs.iter().filter_map(|r| accuracy(r)).collect();
            let n = acc.len();
            let mean = acc.iter().sum::<f64>() / n.max(1) as f64;
            let sd = if n > 1 {
                (acc.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
            } else {
                0.0
            };
            ConfigSummary {
                config,
                n: rs.len(),
                accuracy_mean: if n == 0 { f64::NAN } else { mean },
                accuracy_sd: sd,
                layer_types: rs
                    .iter()
                    .map(|r| r.layer_types.clone().unwrap_or_else(|| "-".into()))
                    .collect::<Vec<_>>()
                    .join(" "),
            }
        })
        .collect()
}

/// The per-job table as CSV: id, one column per parameter, then the measurements.
pub fn jobs_csv(results: &[JobResult]) -> String {
    let keys: Vec<String> = {
        let mut k: Vec<String> = results
            .iter()
            .flat_map(|r| r.params.keys().cloned())
            .collect();
        k.sort();
        k.dedup();
        k
    };
    let hops: Vec<usize> = {
        let mut h: Vec<usize> = results
            .iter()
            .flat_map(|r| r.per_hop.keys().copied())
            .collect();
        h.sort_unstable();
        h.dedup();
        h
    };
    let lengths: Vec<usize> = {
        let mut l: Vec<usize> = results
            .iter()
            .flat_map(|r| r.length_accuracy.keys().copied())
            .collect();
        l.sort_unstable();
        l.dedup();
        l
    };
    let mut w = csv::Writer::from_writer(vec![]);
    let mut header = vec!["id".to_string()];
    header.extend(keys.iter().cloned());
    header.extend(
        [
            "task",
            "steps",
            "val_accuracy",
            "test_accuracy",
            "layer_types",
            "setup_seconds",
            "train_seconds",
            "eval_seconds",
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
        row.extend([
            r.task.clone(),
            r.steps.to_string(),
            num(r.val_accuracy),
            num(r.test_accuracy),
            r.layer_types.clone().unwrap_or_default(),
            format!("{:.3}", r.setup_seconds),
            format!("{:.3}", r.train_seconds),
            format!("{:.3}", r.eval_seconds),
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

/// Writes `out/collected/{jobs.csv, jobs.jsonl, summary.csv}`; returns the results.
pub fn collect(out: &Path) -> Result<Vec<JobResult>> {
    let all = results(out)?;
    let dir = out.join("collected");
    let io = |path: std::path::PathBuf| move |e: std::io::Error| SweepError::Io { path, source: e };
    std::fs::create_dir_all(&dir).map_err(io(dir.clone()))?;
    write_atomic(&dir.join("jobs.csv"), jobs_csv(&all).as_bytes())
        .map_err(io(dir.join("jobs.csv")))?;
    let mut lines = String::new();
    for r in &all {
        lines += &serde_json::to_string(r)?;
        lines.push('\n');
    }
    write_atomic(&dir.join("jobs.jsonl"), lines.as_bytes()).map_err(io(dir.join("jobs.jsonl")))?;
    ropelab_io::write_csv(&dir.join("summary.csv"), &summarise(&all)).map_err(|e| {
        SweepError::Job {
            id: "collect".into(),
            message: e.to_string(),
        }
    })?;
    Ok(all)
}
