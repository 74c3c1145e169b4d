//! The plan of an output directory (`OUT/plan.json`): every job a sweep (or a study's grid of
//! models) set out to run, by directory, with its id, parameters and the SHA-256 of its run
//! config, and the measurement every job was asked for. It is written before any job runs, by
//! every shard alike, so [`crate::collect`] pools only the jobs of one plan (a result copied in
//! from another sweep, or under another directory name, or made by another config is refused by
//! name) and says which planned jobs have not run (a shard not started, a job still running).

use std::collections::BTreeMap;
use std::path::Path;

use ropelab_io::write_atomic;
use serde::{Deserialize, Serialize};

use crate::local::JobResult;
use crate::measure::MeasureOptions;
use crate::spec::{value_text, Job};
use crate::{Result, SweepError};

/// The plan's file name in an output directory.
pub const PLAN: &str = "plan.json";

/// One planned job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    /// Its id ([`crate::spec::job_id`]).
    pub id: String,
    /// Its parameters, `key -> value` as text.
    pub params: BTreeMap<String, String>,
    /// SHA-256 of its resolved run config ([`ropelab_train::RunConfig::digest`]).
    pub config_sha256: String,
    /// The measurement it was asked for ([`MeasureOptions::settings`]).
    pub measure: BTreeMap<String, String>,
    /// Its run directory relative to the output directory (`/`-separated; absent in plans
    /// written before it was recorded: then `<dir>/run` where that exists, else `<dir>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

/// What an output directory's jobs are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The sweep file (or `reproduce`) that wrote it.
    pub origin: String,
    /// Job directory relative to the output directory (`/`-separated) -> the job.
    pub jobs: BTreeMap<String, Planned>,
}

/// A job directory as the plan names it: relative, `/`-separated.
pub fn dir_key(dir: &Path) -> String {
    dir.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

impl Planned {
    /// The job's run directory under `out`, whose job directory is `dir` ([`Planned::run`]).
    pub fn run_dir(&self, out: &Path, dir: &str) -> std::path::PathBuf {
        match &self.run {
            Some(run) => out.join(run),
            None if out.join(dir).join("run").is_dir() => out.join(dir).join("run"),
            None => out.join(dir),
        }
    }
}

impl Plan {
    /// The plan of `jobs` (every job of the sweep, not one shard's), measured with `measure`.
    pub fn of(origin: &str, jobs: &[&Job], measure: &MeasureOptions) -> Self {
        let settings = measure.settings();
        Self {
            origin: origin.to_owned(),
            jobs: jobs
                .iter()
                .map(|j| {
                    let planned = Planned {
                        id: j.id.clone(),
                        params: j
                            .params
                            .iter()
                            .map(|(k, v)| (k.clone(), value_text(v)))
                            .collect(),
                        config_sha256: j.config.digest(),
                        measure: settings.clone(),
                        run: Some(dir_key(&j.run)),
                    };
                    (dir_key(&j.dir), planned)
                })
                .collect(),
        }
    }

    /// The plan of `out`, when it has one; an unreadable plan is an error naming the file.
    pub fn load(out: &Path) -> Result<Option<Self>> {
        let path = out.join(PLAN);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| SweepError::Spec {
                    origin: path.display().to_string(),
                    message: format!("not a plan: {e}"),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SweepError::Io { path, source: e }),
        }
    }

    /// Refuses to plan into `out` when it holds the plan of something else (another sweep, by
    /// name, or a study where a sweep would go, and back): its finished jobs would be orphaned,
    /// or pooled with these.
    pub fn check_owner(&self, out: &Path) -> Result<()> {
        let study = |o: &str| o.starts_with("reproduce");
        match Self::load(out)? {
            Some(old)
                if study(&old.origin) != study(&self.origin)
                    || (!study(&self.origin) && old.origin != self.origin) =>
            {
                Err(SweepError::Spec {
                    origin: out.join(PLAN).display().to_string(),
                    message: format!(
                        "{} holds the jobs of {}, not of {}: choose another --out",
                        out.display(),
                        old.origin,
                        self.origin
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// Writes the plan to `out/plan.json` (atomically), replacing the one there when it is the
    /// plan of the same sweep (an edited sweep file keeps its name) and refusing another's.
    pub fn write(&self, out: &Path) -> Result<()> {
        self.check_owner(out)?;
        let path = out.join(PLAN);
        std::fs::create_dir_all(out).map_err(|e| SweepError::Io {
            path: out.to_owned(),
            source: e,
        })?;
        write_atomic(&path, serde_json::to_string_pretty(self)?.as_bytes())
            .map_err(|e| SweepError::Io { path, source: e })
    }

    /// Writes `self` into `out`'s plan, keeping the plan's other jobs (a study plans its
    /// grids of models one after another into one directory).
    pub fn merge_into(&self, out: &Path) -> Result<()> {
        self.check_owner(out)?;
        let mut plan = Self::load(out)?.unwrap_or_else(|| Self {
            origin: self.origin.clone(),
            jobs: BTreeMap::new(),
        });
        self.check_unchanged(out)?;
        plan.jobs
            .extend(self.jobs.iter().map(|(k, v)| (k.clone(), v.clone())));
        // One job lives in one directory: an id under two keys is an entry edited or copied
        // by hand (it would stand in `collect` as a job that never ran).
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (dir, job) in &plan.jobs {
            if let Some(first) = seen.insert(&job.id, dir) {
                return Err(SweepError::Spec {
                    origin: out.join(PLAN).display().to_string(),
                    message: format!(
                        "lists job {} under both {first} and {dir}: an entry was edited or \
                         copied by hand; restore the file or choose another --out",
                        job.id
                    ),
                });
            }
        }
        plan.write(out)
    }

    /// Fails when `out`'s plan already lists one of this plan's job folders, one that holds a
    /// started job, with another run config (a shard of an edited sweep file): the job there
    /// would then stand as a stranger to its own directory (thirteenth pass, S7). Checked before
    /// the plan is written. Another measurement is no conflict (the job is measured again).
    pub fn check_unchanged(&self, out: &Path) -> Result<()> {
        let Some(plan) = Self::load(out)? else {
            return Ok(());
        };
        for (dir, job) in &self.jobs {
            let Some(old) = plan.jobs.get(dir) else {
                continue;
            };
            if old.config_sha256 != job.config_sha256 && out.join(dir).exists() {
                return Err(SweepError::Spec {
                    origin: out.join(PLAN).display().to_string(),
                    message: format!(
                        "plans {dir}, a started job, with another run config than this command's \
                         (an earlier sweep file, or another shard's): run every shard with the \
                         same file, or choose another --out (nothing was written)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Fails, naming the folder, when a job folder of `out` that its plan lists holds a run of
    /// another config than the plan recorded for it (a model copied in from another study or
    /// sweep with the same seed and task, say); readers of a study's models (the report,
    /// `bias --study`) call it before reading them (ninth pass). Without a plan (a directory
    /// assembled by hand) there is nothing to check.
    pub fn check_models(out: &Path) -> Result<()> {
        let Some(plan) = Self::load(out)? else {
            return Ok(());
        };
        for (dir, planned) in &plan.jobs {
            let config = out.join(dir).join("config.toml");
            if !config.is_file() {
                continue; // not run yet
            }
            let found = ropelab_train::RunConfig::load(&config)?.digest();
            if found != planned.config_sha256 {
                return Err(SweepError::Spec {
                    origin: config.display().to_string(),
                    message: format!(
                        "holds a run of another config than the one {} planned for {dir} \
                         (config sha256 {}, planned {}): a model copied in from another study \
                         or sweep; move it back, or rerun to train this one's",
                        out.join(PLAN).display(),
                        &found[..16],
                        &planned.config_sha256[..planned.config_sha256.len().min(16)]
                    ),
                });
            }
        }
        Ok(())
    }

    /// Why the result found in job directory `dir` (relative) does not belong to this plan,
    /// or None when it does: the plan must list the directory, with the result's id, run
    /// config and measurement.
    pub fn refuses(&self, dir: &str, result: &JobResult) -> Option<String> {
        let Some(planned) = self.jobs.get(dir) else {
            let elsewhere = self
                .jobs
                .iter()
                .find(|(_, p)| p.id == result.id)
                .map(|(d, _)| format!(" (the plan puts job {} in {d})", result.id))
                .unwrap_or_default();
            return Some(format!(
                "{dir} is not a job of this directory's plan ({PLAN}, from {}){elsewhere}: \
                 copied from another sweep, or left by an older version of the sweep file",
                self.origin
            ));
        };
        if planned.id != result.id {
            return Some(format!(
                "{dir}/result.json is job {}'s result, but the plan puts job {} there (a job \
                 copied under another directory name)",
                result.id, planned.id
            ));
        }
        if result.params != planned.params {
            return Some(format!(
                "{dir}/result.json says parameters {:?}, the plan gives job {} {:?}",
                result.params, planned.id, planned.params
            ));
        }
        if result.config_sha256.as_deref() != Some(planned.config_sha256.as_str()) {
            return Some(format!(
                "{dir}/result.json was made by another run config than the plan's for job {} \
                 (a job copied in from another sweep)",
                planned.id
            ));
        }
        if result.measure.as_ref() != Some(&planned.measure) {
            return Some(format!(
                "{dir}/result.json was measured with other settings than the plan's [measure] \
                 (rerun the sweep: it measures the job again)"
            ));
        }
        None
    }
}
