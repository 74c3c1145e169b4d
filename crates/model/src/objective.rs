//! Training objectives (docs/model.md#objectives): what a step predicts, where, and how it is
//! scored, for both engines.

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::ops::log_softmax_last_dim;
use crate::{ModelError, Result};

/// A target that is not scored (a position of an every-position objective without a label).
pub const IGNORE: u32 = u32::MAX;

/// What a training step predicts and scores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// Cross-entropy of the next token at the last position only (the paper's tasks): one
    /// target per sequence.
    #[default]
    LastToken,
    /// Cross-entropy at every position (full-sequence tasks): one target per token, [`IGNORE`]
    /// where a position is not scored; the loss is the mean over scored positions.
    EveryPosition,
    /// Classification read at the last (EOS) position by a classifier head (`[model.head]
    /// kind = "classifier"`): one class per sequence.
    EosClass,
}

impl Objective {
    /// The config's name (`last_token`, `every_position`, `eos_class`).
    pub fn name(self) -> &'static str {
        match self {
            Objective::LastToken => "last_token",
            Objective::EveryPosition => "every_position",
            Objective::EosClass => "eos_class",
        }
    }

    /// Whether logits are needed at every position (else at the last one only).
    pub fn every_position(self) -> bool {
        self == Objective::EveryPosition
    }

    /// Targets expected for `batch` sequences of `seq` tokens.
    pub fn targets_len(self, batch: usize, seq: usize) -> usize {
        if self.every_position() {
            batch * seq
        } else {
            batch
        }
    }
}

/// Checks `targets` against the output width `out` and the objective's shape: the right
/// count, every value below `out` (or [`IGNORE`] for every-position targets), at least one
/// scored.
pub fn check_targets(
    objective: Objective,
    targets: &[u32],
    batch: usize,
    seq: usize,
    out: usize,
) -> Result<()> {
    let want = objective.targets_len(batch, seq);
    if targets.len() != want {
        return Err(ModelError::Config(format!(
            "{} targets given; the {objective:?} objective needs {want} for {batch} x {seq} tokens",
            targets.len()
        )));
    }
    let allowed = |t: u32| (t as usize) < out || (objective.every_position() && t == IGNORE);
    if let Some(bad) = targets.iter().find(|&&t| !allowed(t)) {
        return Err(ModelError::Config(format!(
            "target id {bad} is outside the output of {out} (vocabulary or classes)"
        )));
    }
    if targets.iter().all(|&t| t == IGNORE) {
        return Err(ModelError::Config(
            "every target is IGNORE: nothing to score".into(),
        ));
    }
    Ok(())
}

/// Mean cross-entropy of `logits` `[rows, out]` against `targets` `[rows]` (u32), skipping
/// rows whose target is [`IGNORE`] (the mean is over the scored rows).
pub fn cross_entropy_masked(logits: &Tensor, targets: &[u32]) -> Result<Tensor> {
    let device = logits.device();
    let scored: Vec<f32> = targets.iter().map(|&t| f32::from(t != IGNORE)).collect();
    let count = scored.iter().sum::<f32>().max(1.0);
    let safe: Vec<u32> = targets
        .iter()
        .map(|&t| if t == IGNORE { 0 } else { t })
        .collect();
    let safe = Tensor::from_vec(safe, targets.len(), device)?;
    let weight = Tensor::from_vec(scored, targets.len(), device)?.to_dtype(logits.dtype())?;
    let logp = log_softmax_last_dim(logits)?;
    let picked = logp.gather(&safe.unsqueeze(1)?, 1)?.squeeze(1)?; // [rows]
    Ok((picked.mul(&weight)?.sum_all()?.neg()? / f64::from(count))?)
}

/// The loss of `objective` from the model's logits: `[batch, out]` at the last position, or
/// `[batch, seq, out]` at every position.
pub fn loss(objective: Objective, logits: &Tensor, targets: &[u32]) -> Result<Tensor> {
    let logits = if logits.rank() == 3 {
        let (b, t, o) = logits.dims3()?;
        logits.reshape((b * t, o))?
    } else {
        logits.clone()
    };
    if !objective.every_position() && targets.contains(&IGNORE) {
        return Err(ModelError::Config(
            "IGNORE targets are for the every-position objective".into(),
        ));
    }
    cross_entropy_masked(&logits, targets)
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;
    use crate::ops::cross_entropy;

    #[test]
    fn masked_cross_entropy_is_the_mean_over_scored_rows() {
        let dev = Device::Cpu;
        let logits = Tensor::new(
            &[[1.0f32, 2.0, 0.5], [0.0, -1.0, 3.0], [2.0, 2.0, 2.0]],
            &dev,
        )
        .unwrap();
        let all = cross_entropy_masked(&logits, &[1, 2, 0]).unwrap();
        let plain = cross_entropy(&logits, &Tensor::new(&[1u32, 2, 0], &dev).unwrap()).unwrap();
        let (a, p): (f32, f32) = (all.to_scalar().unwrap(), plain.to_scalar().unwrap());
        assert!((a - p).abs() < 1e-6);
        // Skipping row 1: the mean of rows 0 and 2 alone.
        let two = Tensor::new(&[[1.0f32, 2.0, 0.5], [2.0, 2.0, 2.0]], &dev).unwrap();
        let want: f32 = cross_entropy(&two, &Tensor::new(&[1u32, 0], &dev).unwrap())
            .unwrap()
            .to_scalar()
            .unwrap();
        let got: f32 = cross_entropy_masked(&logits, &[1, IGNORE, 0])
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }

    #[test]
    fn targets_are_checked_against_the_objective() {
        let ok = |o, t: &[u32]| check_targets(o, t, 2, 3, 5);
        assert!(ok(Objective::LastToken, &[1, 4]).is_ok());
        assert!(ok(Objective::LastToken, &[1, 5]).is_err());
        assert!(ok(Objective::LastToken, &[1, IGNORE]).is_err());
        assert!(ok(Objective::EveryPosition, &[1, IGNORE, 2, 3, IGNORE, 0]).is_ok());
        assert!(ok(Objective::EveryPosition, &[1, 2])
            .unwrap_err()
            .to_string()
            .contains("needs 6"));
        assert!(ok(Objective::EveryPosition, &[IGNORE; 6]).is_err());
    }
}
