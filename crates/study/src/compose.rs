//! The study's `[compose]` stage (docs/multihead.md, "A model with fewer layers than hops"):
//! per listed seed, the study's number model with fewer layers than the task has hops, trained
//! and measured as every study model is (`seed-S/compose`), so that `claims.json` can compare
//! composing models with the one-hop-per-layer models of the same seeds
//! (`composing_generalises_worse`).

use std::path::Path;

use anyhow::{Context, Result};
use ropelab_analysis::StudyDir;
use ropelab_sweep::Job;
use ropelab_tasks::TaskKind;
use serde::{Deserialize, Serialize};

use crate::{job, Progress, StudyConfig};

/// The `[compose]` table of a study config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyCompose {
    /// Layers of the composing models: fewer than the task's largest hop count.
    pub layers: usize,
    /// Seeds (each one of the study's seeds, whose number model is the one-hop side).
    pub seeds: Vec<u64>,
}

impl StudyCompose {
    /// Checks the table against the study: at least 1 layer and fewer than the largest hop
    /// count; seeds listed once each and all among the study's seeds; one head count.
    pub fn check(&self, config: &StudyConfig) -> Result<()> {
        let largest = config.tasks.hops.iter().copied().max().unwrap_or(0);
        anyhow::ensure!(
            self.layers >= 1 && self.layers < largest,
            "layers = {} cannot make a model compose: it needs 1 to {} layers (fewer than the \
             task's {largest} hops)",
            self.layers,
            largest.saturating_sub(1)
        );
        // The other side of the comparison gives each hop its own layer; a study model with
        // fewer layers composes too (with as many as these, it is the same model; seventh
        // pass, c11).
        let study_layers = config
            .train
            .run_config(
                ropelab_tasks::TaskKind::Number,
                config.seeds.first().copied().unwrap_or(0),
                &config.tasks,
            )?
            .model
            .n_layers;
        anyhow::ensure!(
            study_layers >= largest,
            "the study's number model has {study_layers} layers, fewer than the task's \
             {largest} hops: it does not give each hop its own layer, so it is no model to \
             compare the composing one with"
        );
        anyhow::ensure!(!self.seeds.is_empty(), "seeds must list at least one seed");
        for (i, s) in self.seeds.iter().enumerate() {
            anyhow::ensure!(
                config.seeds.contains(s),
                "seed {s} is not one of the study's seeds {:?}: the one-hop side of the \
                 comparison is the study's number model of the same seed",
                config.seeds
            );
            anyhow::ensure!(!self.seeds[..i].contains(s), "seed {s} is listed twice");
        }
        anyhow::ensure!(
            config.head_counts().is_none(),
            "a study of several head counts has no single one-hop model per seed: give \
             [compose] to a study of one head count"
        );
        Ok(())
    }

    /// The sweep job of each seed: the study's number run config with `layers` layers, in
    /// `seed-S/compose`.
    pub fn jobs(&self, config: &StudyConfig) -> Result<Vec<Job>> {
        self.seeds
            .iter()
            .map(|&seed| {
                let mut run = config
                    .train
                    .run_config(TaskKind::Number, seed, &config.tasks)?;
                run.model.n_layers = self.layers;
                let params = vec![
                    ("seed".to_string(), toml::Value::Integer(seed as i64)),
                    ("task".to_string(), toml::Value::String("number".into())),
                    (
                        "layers".to_string(),
                        toml::Value::Integer(self.layers as i64),
                    ),
                ];
                Ok(Job::in_run_dir(
                    params,
                    run,
                    StudyDir::compose_relative(seed),
                ))
            })
            .collect()
    }
}

/// Trains (or reuses) and measures every composing model of `config` in `out`, with the
/// study's own measurements (scores, length test, hop map, probes, layer sets, ablation), each
/// recorded in the model's ledger. Nothing when the study has no `[compose]` table.
pub fn run(
    config: &StudyConfig,
    out: &Path,
    parallel: Option<usize>,
    progress: &dyn Progress,
) -> Result<()> {
    let Some(plan) = &config.compose else {
        return Ok(());
    };
    let jobs = plan.jobs(config)?;
    let options = job::measure_options(config);
    let refs: Vec<&ropelab_sweep::Job> = jobs.iter().collect();
    ropelab_sweep::plan::Plan::of("reproduce [compose]", &refs, &options).merge_into(out)?;
    crate::grid::run(&jobs, out, &options, parallel, progress).context("the [compose] stage")?;
    Ok(())
}
