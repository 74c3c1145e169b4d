//! The cost of a sweep's jobs before they run: each distinct training shape (task, model,
//! batch, task tables) trains a few steps in a temporary directory and its steps/s, measured on
//! this machine now, prices every job of that shape.

use std::collections::BTreeMap;
use std::time::Instant;

use ropelab_train::{RunConfig, Trainer};

use crate::spec::Job;
use crate::{Result, SweepError};

/// Unmeasured steps before the timed ones (allocation, first-touch).
pub const WARMUP_STEPS: usize = 2;

/// Timed steps per shape.
pub const TIMED_STEPS: usize = 5;

/// What training one job is expected to cost here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Steps/s measured for the job's shape (one job on the threads of the caller's pool).
    pub steps_per_second: f64,
    /// Its steps at that rate, in seconds.
    pub train_seconds: f64,
}

/// The parts of a run config that set a training step's cost: the config with its seed,
/// learning-rate schedule, step counts and bookkeeping fixed.
fn shape(config: &RunConfig) -> String {
    let mut c = config.clone();
    c.seed = 0;
    c.optim.lr = 1e-3;
    c.optim.steps = 1;
    c.optim.warmup = 0;
    c.optim.eval_every = 1;
    c.optim.save_every = 1;
    c.optim.log_every = 1;
    c.data.train = 1;
    c.data.val = 1;
    c.data.test = 1;
    c.to_toml()
}

/// Steps/s of training `config` here: [`WARMUP_STEPS`] then [`TIMED_STEPS`] timed steps of a
/// fresh model in a temporary directory (removed afterwards), with no evaluation or checkpoint
/// inside the timed span.
pub fn steps_per_second(config: &RunConfig) -> Result<f64> {
    let dir = tempfile::tempdir().map_err(|e| SweepError::Io {
        path: std::env::temp_dir(),
        source: e,
    })?;
    let mut c = config.clone();
    // The cost of a step does not depend on the learning rate, and a job's own rate may
    // diverge (its run says so, by job): timed at a tame one (ninth pass, w19).
    c.optim.lr = 1e-3;
    let total = WARMUP_STEPS + TIMED_STEPS + 1;
    c.optim.steps = total;
    c.optim.warmup = c.optim.warmup.min(total);
    c.optim.eval_every = total;
    c.optim.save_every = total;
    c.optim.log_every = total;
    c.data.val = c.data.val.min(8);
    let mut trainer = Trainer::start_or_resume(dir.path(), c, &candle_core::Device::Cpu)?;
    let (mut start, mut end) = (None, None);
    trainer.run(|p| {
        if p.step == WARMUP_STEPS {
            start = Some(Instant::now());
        } else if p.step == WARMUP_STEPS + TIMED_STEPS {
            end = Some(Instant::now());
        }
    })?;
    let seconds = match (start, end) {
        (Some(s), Some(e)) => e.duration_since(s).as_secs_f64(),
        _ => unreachable!("the run has {total} steps"),
    };
    Ok(TIMED_STEPS as f64 / seconds.max(1e-9))
}

/// The estimate of every job, in order; each distinct shape is measured once.
pub fn estimate(jobs: &[&Job]) -> Result<Vec<Estimate>> {
    let mut measured: BTreeMap<String, f64> = BTreeMap::new();
    jobs.iter()
        .map(|j| {
            let key = shape(&j.config);
            let rate = match measured.get(&key) {
                Some(&r) => r,
                None => {
                    let r = steps_per_second(&j.config).map_err(|e| SweepError::Job {
                        id: j.id.clone(),
                        message: format!("timing its training: {e}"),
                    })?;
                    measured.insert(key, r);
                    r
                }
            };
            Ok(Estimate {
                steps_per_second: rate,
                train_seconds: j.config.optim.steps as f64 / rate,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ropelab_tasks::TaskKind;
    use ropelab_train::Preset;

    #[test]
    fn seeds_and_learning_rates_share_a_shape_and_models_do_not() {
        let a = Preset::Tiny.config(TaskKind::Number);
        let mut b = a.clone();
        b.seed = 7;
        b.optim.lr = 0.1;
        b.optim.steps = 999;
        assert_eq!(shape(&a), shape(&b));
        let mut c = a.clone();
        c.optim.batch_size *= 2;
        assert_ne!(shape(&a), shape(&c));
        assert_ne!(shape(&a), shape(&Preset::Tiny.config(TaskKind::Letter)));
    }

    #[test]
    fn a_measured_rate_prices_every_job_by_its_steps() {
        let mut config = Preset::Tiny.config(TaskKind::Number);
        config.optim.steps = 100;
        let short = Job::new(
            vec![("seed".into(), toml::Value::Integer(0))],
            config.clone(),
        );
        config.optim.steps = 300;
        config.seed = 1;
        let long = Job::new(vec![("seed".into(), toml::Value::Integer(1))], config);
        let e = estimate(&[&short, &long]).unwrap();
        assert!(e[0].steps_per_second > 0.0 && e[0].steps_per_second.is_finite());
        // One shape, measured once: the same rate, the cost in proportion to the steps.
        assert_eq!(e[0].steps_per_second, e[1].steps_per_second);
        assert!((e[1].train_seconds / e[0].train_seconds - 3.0).abs() < 1e-9);
    }
}
