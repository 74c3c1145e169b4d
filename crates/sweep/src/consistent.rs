//! A job's `result.json` read against its run (docs/sweeps.md, "Stale results"): a result whose
//! ledger entry was re-sealed over an edit passes every checksum, so its numbers must also be
//! the ones its run's own files give. A result is refused by `collect`, and measured again by a
//! rerun, when it contradicts itself (an accuracy outside [0, 1], a test accuracy its own test
//! evaluation does not give), its run (another task or step count than the run's config, a
//! validation accuracy its `metrics.jsonl` does not end with) or its measurement (a number the
//! vouched files its job wrote do not give: [`crate::measure::recorded`]).

use std::collections::BTreeMap;
use std::path::Path;

use ropelab_train::RunDir;
use serde_json::Value;

use crate::local::{JobResult, TestEval};
use crate::measure::{recorded, Measured};
use crate::Result;

impl JobResult {
    /// Why this result, the job's in `run` measured under `settings`, contradicts itself, its
    /// run or its measurement (see the module docs), or None when it says what they say. An
    /// error only where the run cannot be read at all.
    pub fn contradiction(
        &self,
        run: &Path,
        settings: &BTreeMap<String, String>,
    ) -> Result<Option<String>> {
        if let Some(why) = self.self_contradiction() {
            return Ok(Some(why));
        }
        let (dir, config) = match RunDir::open(run) {
            Ok(opened) => opened,
            Err(e) => return Ok(Some(format!("its run cannot be read ({e})"))),
        };
        if self.task != config.task.as_str() {
            return Ok(Some(format!(
                "it says task {}, its run's config says {}",
                self.task,
                config.task.as_str()
            )));
        }
        if self.steps != config.optim.steps {
            return Ok(Some(format!(
                "it says {} steps, its run's config says {}",
                self.steps, config.optim.steps
            )));
        }
        if self.config_sha256.as_deref() != Some(config.digest().as_str()) {
            return Ok(Some(
                "its config_sha256 is not its run's config's digest".into(),
            ));
        }
        let last = match dir.last_validation() {
            Ok(v) => v.map(|a| a.accuracy),
            Err(e) => {
                return Ok(Some(format!(
                    "its run's metrics.jsonl cannot be read ({e})"
                )))
            }
        };
        if !same_option(self.val_accuracy, last) {
            return Ok(Some(format!(
                "it says val_accuracy {}, its run's metrics.jsonl ends with {}",
                shown(self.val_accuracy),
                shown(last)
            )));
        }
        let measured = match recorded(run, &config, settings) {
            Ok(m) => m,
            Err(e) => return Ok(Some(format!("its measurement cannot be read back ({e})"))),
        };
        Ok(self.measured_contradiction(&measured))
    }

    /// Why the result contradicts itself: an accuracy that is no fraction, a time that is no
    /// duration, a test accuracy or per-hop table its own test evaluation does not give.
    fn self_contradiction(&self) -> Option<String> {
        let fractions = [
            ("val_accuracy", self.val_accuracy),
            ("test_accuracy", self.test_accuracy),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
        .chain(
            self.per_hop
                .iter()
                .map(|(h, v)| (format!("per_hop {h}"), *v)),
        )
        .chain(
            self.length_accuracy
                .iter()
                .map(|(n, v)| (format!("length_accuracy {n}"), *v)),
        );
        for (key, v) in fractions {
            if !(0.0..=1.0).contains(&v) {
                return Some(format!("its {key} is {v}, which is no accuracy"));
            }
        }
        let times = [
            ("setup_seconds", self.setup_seconds),
            ("train_seconds", self.train_seconds),
            ("eval_seconds", self.eval_seconds),
            ("score_seconds", self.score_seconds),
            ("length_seconds", self.length_seconds),
        ];
        if let Some((key, v)) = times.iter().find(|(_, v)| !(v.is_finite() && *v >= 0.0)) {
            return Some(format!("its {key} is {v}, which is no duration"));
        }
        if let Some(test) = &self.test {
            if !same_option(self.test_accuracy, Some(test.accuracy.accuracy)) {
                return Some(format!(
                    "it says test_accuracy {}, its own test evaluation says {}",
                    shown(self.test_accuracy),
                    test.accuracy.accuracy
                ));
            }
            if !same_map(&self.per_hop, &test.accuracy.per_hop) {
                return Some("its per_hop is not its own test evaluation's".into());
            }
        }
        None
    }

    /// Why the result's measured numbers are not those its run's vouched files give.
    fn measured_contradiction(&self, m: &Measured) -> Option<String> {
        let from_files = "the files its job measured give";
        if !same_option(self.test_accuracy, m.test_accuracy) {
            return Some(format!(
                "it says test_accuracy {}, {from_files} {}",
                shown(self.test_accuracy),
                shown(m.test_accuracy)
            ));
        }
        if !same_map(&self.per_hop, &m.per_hop) {
            return Some(format!("its per_hop is not what {from_files}"));
        }
        if self.layer_types != m.layer_types {
            return Some(format!(
                "it says layer_types {:?}, {from_files} {:?}",
                self.layer_types, m.layer_types
            ));
        }
        if !same_map(&self.length_accuracy, &m.length_accuracy) {
            return Some(format!(
                "its length_accuracy {:?} is not what {from_files} ({:?})",
                self.length_accuracy, m.length_accuracy
            ));
        }
        if self.n_star != m.n_star {
            return Some(format!(
                "it says n_star {:?}, {from_files} {:?}",
                self.n_star, m.n_star
            ));
        }
        let test = m.test.clone().map(TestEval::from);
        let as_json = |t: &Option<TestEval>| serde_json::to_value(t).unwrap_or(Value::Null);
        if !same_json(&as_json(&self.test), &as_json(&test)) {
            return Some(format!(
                "its test evaluation is not its run's eval file ({from_files} another)"
            ));
        }
        None
    }
}

/// Two measured numbers equal but for the last bits of a float's text.
fn same(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

fn same_option(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => same(a, b),
        (None, None) => true,
        _ => false,
    }
}

fn same_map(a: &BTreeMap<usize, f64>, b: &BTreeMap<usize, f64>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, va), (kb, vb))| ka == kb && same(*va, *vb))
}

fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => same(x, y),
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, vx), (ky, vy))| kx == ky && same_json(vx, vy))
        }
        _ => a == b,
    }
}

fn shown(v: Option<f64>) -> String {
    v.map_or("none".into(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_equal_but_for_their_last_bits_are_the_same() {
        assert!(same(0.1 + 0.2, 0.3));
        assert!(!same(0.5, 0.5000001));
        assert!(same_json(
            &serde_json::json!({"a": [0.3, 1]}),
            &serde_json::json!({"a": [0.1 + 0.2, 1]})
        ));
        assert!(!same_json(
            &serde_json::json!({"a": [0.3, 1]}),
            &serde_json::json!({"a": [0.3, 2]})
        ));
        assert!(!same_option(Some(0.0), None));
    }
}
