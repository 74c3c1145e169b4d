//! Mechanisms of fixed-offset retrieval (docs/offset.md, "Mechanisms"), read from the first
//! layer's attention, whose queries and keys see only their own token (and, for a learned
//! absolute encoding, their position):
//! - **equivariance**: the logit of a (query, key) pair moved by t positions, compared with the
//!   unmoved one (a rotary head depends on the offset alone, so only f32 rounding differs);
//! - **the carrier s(r)**: the mean logit of the last query at offset r, and the dilution law's
//!   predicted target weight at length L, p_L = e^{s(k)} / sum_{r < L} e^{s(r)}, against the
//!   measured mean weight on the target; and the law applied to each sequence's own logits
//!   (the per-sequence form), averaged over sequences;
//! - **pinning**: where the last query's attention peaks (its argmax key), as a histogram over
//!   key positions: a learned absolute encoding pins it to a fixed position inside the
//!   training range.

use std::fmt;
use std::str::FromStr;

use candle_core::Tensor;
use ropelab_model::{
    AttentionKind, Beyond, GptJ, HookKind, HookPoint, Hooks, PositionEncoding, RopeLayout,
};
use ropelab_tasks::{OffsetTask, Split};
use serde::{Deserialize, Serialize};

use crate::{AnalysisError, Result};

/// One position encoding of the experiment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OffsetPe {
    /// Rotary at a base, on every dim of each head.
    Rope(f64),
    /// Learned absolute encoding with one row per training position.
    Ape,
    /// No position encoding.
    Nope,
}

impl OffsetPe {
    /// The kind without its base (`rope`, `ape`, `nope`).
    pub fn kind(&self) -> &'static str {
        match self {
            OffsetPe::Rope(_) => "rope",
            OffsetPe::Ape => "ape",
            OffsetPe::Nope => "nope",
        }
    }

    /// The model's encoding for heads of `d_head` dims, an APE table of `rows` rows.
    pub fn encoding(&self, d_head: usize, rows: usize, beyond: Beyond) -> PositionEncoding {
        match *self {
            OffsetPe::Rope(base) => PositionEncoding::rope(base, d_head, RopeLayout::Interleaved),
            OffsetPe::Ape => PositionEncoding::Learned {
                max_len: rows,
                beyond,
            },
            OffsetPe::Nope => PositionEncoding::None,
        }
    }
}

impl OffsetPe {
    /// The encoding of a fixed-offset run's model (`None` for one the experiment does not
    /// train: sinusoidal, periodic, fixed angles).
    pub fn of(position: &PositionEncoding) -> Option<Self> {
        match position {
            PositionEncoding::Rope { base, .. } => Some(OffsetPe::Rope(*base)),
            PositionEncoding::Learned { .. } => Some(OffsetPe::Ape),
            PositionEncoding::None => Some(OffsetPe::Nope),
            _ => None,
        }
    }
}

impl fmt::Display for OffsetPe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffsetPe::Rope(b) if *b == ropelab_model::rope::DEFAULT_BASE => f.write_str("rope"),
            OffsetPe::Rope(b) => write!(f, "rope:{b:e}"),
            other => f.write_str(other.kind()),
        }
    }
}

impl FromStr for OffsetPe {
    type Err = AnalysisError;
    /// `rope` (base 10,000), `rope:BASE`, `ape` or `nope`.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let bad = |m: String| Err(AnalysisError::Invalid(m));
        match s.split_once(':') {
            None if s == "rope" => Ok(OffsetPe::Rope(ropelab_model::rope::DEFAULT_BASE)),
            None if s == "ape" => Ok(OffsetPe::Ape),
            None if s == "nope" => Ok(OffsetPe::Nope),
            Some(("rope", b)) => match b.parse::<f64>() {
                Err(_) => bad(format!("position encoding {s:?}: {b:?} is not a number")),
                Ok(base)
                    if !(base.is_finite()
                        && (ropelab_model::BASE_RANGE.0..=ropelab_model::BASE_RANGE.1)
                            .contains(&base)) =>
                {
                    bad(format!(
                        "position encoding {s:?}: the base must lie in [1e-12, 1e12], got {}",
                        ropelab_model::number_text(base)
                    ))
                }
                Ok(base) => Ok(OffsetPe::Rope(base)),
            },
            _ => bad(format!(
                "unknown position encoding {s:?} (expected rope, rope:BASE, ape or nope)"
            )),
        }
    }
}

/// Parses `softmax` or `linear`.
pub fn parse_attention(s: &str) -> Result<AttentionKind> {
    match s.trim() {
        "softmax" => Ok(AttentionKind::Softmax),
        "linear" => Ok(AttentionKind::Linear),
        other => Err(AnalysisError::Invalid(format!(
            "unknown attention {other:?} (expected softmax or linear)"
        ))),
    }
}

/// The name of an attention kind (`softmax`, `linear`).
pub fn attention_name(a: AttentionKind) -> &'static str {
    match a {
        AttentionKind::Softmax => "softmax",
        AttentionKind::Linear => "linear",
    }
}

/// The first layer's logits and attention weights of a batch: `[batch][head][q][k]` for
/// keys k <= q.
struct LayerZero {
    scores: Vec<Vec<Vec<Vec<f64>>>>,
    pattern: Vec<Vec<Vec<Vec<f64>>>>,
}

/// Runs `ids` [batch, pos] and keeps layer 0's scores and pattern (causal part).
fn layer_zero(model: &GptJ, ids: &Tensor) -> Result<LayerZero> {
    let points = [
        HookPoint::new(0, HookKind::AttnScores),
        HookPoint::new(0, HookKind::Pattern),
    ];
    let mut hooks = Hooks::new().capture(points);
    model.trunk(ids, &mut hooks, None)?;
    let read = |p: HookPoint| -> Result<Vec<Vec<Vec<Vec<f64>>>>> {
        let t = hooks
            .get(p)
            .ok_or_else(|| AnalysisError::Invalid(format!("hook {p} was not captured")))?;
        let (b, h, n, _) = t.dims4()?;
        let flat: Vec<f32> = t.flatten_all()?.to_vec1()?;
        Ok((0..b)
            .map(|bi| {
                (0..h)
                    .map(|hi| {
                        (0..n)
                            .map(|q| {
                                let start = ((bi * h + hi) * n + q) * n;
                                flat[start..=start + q]
                                    .iter()
                                    .map(|&x| f64::from(x))
                                    .collect()
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect())
    };
    Ok(LayerZero {
        scores: read(points[0])?,
        pattern: read(points[1])?,
    })
}

/// `rows` test sequences of length `n` of `task` (seed `seed`) as a tensor [rows, n].
fn sequences(model: &GptJ, task: &OffsetTask, seed: u64, n: usize, rows: usize) -> Result<Tensor> {
    task.check_length(n)?;
    let ids: Vec<u32> = (0..rows as u64)
        .flat_map(|i| task.sequence(seed, Split::Test, n, i))
        .collect();
    Ok(Tensor::from_vec(ids, (rows, n), model.device())?)
}

/// Equivariance of the first layer's logits: for `rows` test sequences x of length `n`, the
/// same sequences after `shift` other tokens, y = (w, x); the largest change of a logit
/// between x's positions (i, j) and y's (i + shift, j + shift), over every head and j <= i,
/// relative to the largest |logit| of x. A rotary or position-free first layer gives f32
/// rounding (about 1e-6); a learned absolute one does not.
pub fn equivariance_deviation(
    model: &GptJ,
    task: &OffsetTask,
    seed: u64,
    n: usize,
    shift: usize,
    rows: usize,
) -> Result<f64> {
    let x = sequences(model, task, seed, n, rows)?;
    let filler: Vec<u32> = (0..rows as u64)
        .flat_map(|i| task.sequence(seed ^ 0x5348_4946, Split::Test, shift.max(1), i))
        .take(rows * shift)
        .collect();
    let y = Tensor::cat(
        &[
            Tensor::from_vec(filler, (rows, shift), model.device())?,
            x.clone(),
        ],
        1,
    )?;
    let (a, b) = (layer_zero(model, &x)?, layer_zero(model, &y)?);
    let (mut worst, mut scale) = (0f64, 0f64);
    for (xa, ya) in a.scores.iter().zip(&b.scores) {
        for (xh, yh) in xa.iter().zip(ya) {
            for (i, row) in xh.iter().enumerate() {
                for (j, &s) in row.iter().enumerate() {
                    scale = scale.max(s.abs());
                    worst = worst.max((s - yh[i + shift][j + shift]).abs());
                }
            }
        }
    }
    Ok(worst / scale.max(f64::MIN_POSITIVE))
}

/// The last query's mean logit at each offset r = 0 .. n - 1 (key n - 1 - r), per head of the
/// first layer, over `rows` test sequences of length `n`: `[head][r]`.
pub fn carrier(
    model: &GptJ,
    task: &OffsetTask,
    seed: u64,
    n: usize,
    rows: usize,
) -> Result<Vec<Vec<f64>>> {
    let z = layer_zero(model, &sequences(model, task, seed, n, rows)?)?;
    Ok(mean_by_offset(&last_query_by_offset(&z)))
}

/// The last query's logits by offset r (key n - 1 - r), per head and sequence:
/// `[head][sequence][r]`.
fn last_query_by_offset(z: &LayerZero) -> Vec<Vec<Vec<f64>>> {
    let heads = z.scores.first().map_or(0, Vec::len);
    (0..heads)
        .map(|h| {
            z.scores
                .iter()
                .map(|b| {
                    let last = &b[h][b[h].len() - 1];
                    last.iter().rev().copied().collect()
                })
                .collect()
        })
        .collect()
}

/// The mean over sequences of `[head][sequence][r]`: the carrier `[head][r]`.
fn mean_by_offset(logits: &[Vec<Vec<f64>>]) -> Vec<Vec<f64>> {
    logits
        .iter()
        .map(|seqs| {
            let n = seqs.first().map_or(0, Vec::len);
            (0..n)
                .map(|r| seqs.iter().map(|l| l[r]).sum::<f64>() / seqs.len() as f64)
                .collect()
        })
        .collect()
}

/// The dilution law: the target weight at length `len` predicted from a carrier `s` (offset
/// r = 0 ..): e^{s(k)} / sum_{r < len} e^{s(r)} (None when the carrier is shorter than `len`
/// or k >= len).
pub fn predicted_weight(s: &[f64], k: usize, len: usize) -> Option<f64> {
    if len > s.len() || k >= len {
        return None;
    }
    let top = s[..len].iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = s[..len].iter().map(|x| (x - top).exp()).sum();
    Some((s[k] - top).exp() / z)
}

/// The dilution law per sequence: the mean over sequences of each one's own prediction
/// e^{l(k)} / sum_{r < len} e^{l(r)} from its logits `l` by offset (`[sequence][r]`); None
/// when there is no sequence or [`predicted_weight`] has none.
pub fn per_sequence_weight(logits: &[Vec<f64>], k: usize, len: usize) -> Option<f64> {
    if logits.is_empty() {
        return None;
    }
    let mut sum = 0.0;
    for l in logits {
        sum += predicted_weight(l, k, len)?;
    }
    Some(sum / logits.len() as f64)
}

/// Where a carrier `s` (offset r = 0 ..) re-peaks: its highest local maximum at an offset other
/// than `k` (a point no lower than its neighbours), with the margin s(k) - s(r) to it; None when
/// it has none.
pub fn carrier_repeak(s: &[f64], k: usize) -> Option<(usize, f64)> {
    let target = *s.get(k)?;
    (0..s.len())
        .filter(|&r| r != k)
        .filter(|&r| (r == 0 || s[r] >= s[r - 1]) && (r + 1 == s.len() || s[r] >= s[r + 1]))
        .fold(None, |best: Option<usize>, r| match best {
            Some(b) if s[b] >= s[r] => Some(b),
            _ => Some(r),
        })
        .map(|r| (r, target - s[r]))
}

/// One row of a run's `mechanism.csv`: the first layer's head `head` at one test length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MechanismRow {
    /// Test length.
    pub test_len: usize,
    /// Head of the first layer.
    pub head: usize,
    /// Mean attention weight of the last query on the target key (k back).
    pub target_weight: f64,
    /// The dilution law's prediction from the carrier measured at the longest test length.
    pub predicted_weight: f64,
    /// The law per sequence: the mean of each longest-length test sequence's own prediction
    /// from its logits at offsets r < this length ([`per_sequence_weight`]).
    pub per_sequence_weight: f64,
    /// Fraction of sequences whose argmax key is the target.
    pub argmax_on_target: f64,
    /// The most frequent argmax key position.
    pub mode_key: usize,
    /// Fraction of sequences whose argmax key is `mode_key`.
    pub mode_fraction: f64,
}

/// One row of a run's `pinning.csv`: how many of the last queries at `test_len` put their
/// largest weight on key position `key_pos` (non-zero counts only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PinRow {
    /// Test length.
    pub test_len: usize,
    /// Head of the first layer.
    pub head: usize,
    /// Key position (0-based).
    pub key_pos: usize,
    /// Sequences.
    pub count: usize,
}

/// Everything [`mechanisms`] measures of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct Mechanisms {
    /// Per test length and head.
    pub rows: Vec<MechanismRow>,
    /// Argmax histograms per test length and head.
    pub pins: Vec<PinRow>,
    /// The carrier per head at the longest test length, `[head][r]`.
    pub carrier: Vec<Vec<f64>>,
}

/// The target weight, the dilution law's prediction, and where the last query's attention
/// peaks, for every head of the first layer at every length of `lens` (each > k, ascending),
/// on `rows` test sequences per length.
pub fn mechanisms(
    model: &GptJ,
    task: &OffsetTask,
    seed: u64,
    lens: &[usize],
    rows: usize,
) -> Result<Mechanisms> {
    let longest = *lens
        .last()
        .ok_or_else(|| AnalysisError::Invalid("no test lengths".into()))?;
    // The longest length's last-query logits, [head][sequence][r], and their mean (the carrier).
    let long = layer_zero(model, &sequences(model, task, seed, longest, rows)?)?;
    let per_seq = last_query_by_offset(&long);
    let s = mean_by_offset(&per_seq);
    let mut out = Mechanisms {
        rows: vec![],
        pins: vec![],
        carrier: s.clone(),
    };
    for &n in lens {
        let z = layer_zero(model, &sequences(model, task, seed, n, rows)?)?;
        let target = n - 1 - task.k;
        for (h, carrier) in s.iter().enumerate() {
            let mut counts = vec![0usize; n];
            let mut weight = 0.0;
            for b in &z.pattern {
                let last = &b[h][n - 1];
                weight += last[target];
                let arg = last
                    .iter()
                    .enumerate()
                    .fold(
                        (0, f64::NEG_INFINITY),
                        |m, (j, &w)| if w > m.1 { (j, w) } else { m },
                    )
                    .0;
                counts[arg] += 1;
            }
            let (mode_key, &mode_count) = counts
                .iter()
                .enumerate()
                .max_by_key(|&(j, c)| (*c, std::cmp::Reverse(j)))
                .unwrap_or((0, &0));
            out.rows.push(MechanismRow {
                test_len: n,
                head: h,
                target_weight: weight / rows as f64,
                predicted_weight: predicted_weight(carrier, task.k, n).unwrap_or(f64::NAN),
                per_sequence_weight: per_sequence_weight(&per_seq[h], task.k, n)
                    .unwrap_or(f64::NAN),
                argmax_on_target: counts[target] as f64 / rows as f64,
                mode_key,
                mode_fraction: mode_count as f64 / rows as f64,
            });
            out.pins
                .extend(counts.iter().enumerate().filter(|(_, &c)| c > 0).map(
                    |(key_pos, &count)| PinRow {
                        test_len: n,
                        head: h,
                        key_pos,
                        count,
                    },
                ));
        }
    }
    Ok(out)
}

/// One plane of a head's carrier (a row of `planes.csv`): with the mean pre-rotation query
/// q and key k of the first layer (over tokens and positions), the plane's part of the mean
/// logit at offset r is `amplitude * cos(theta * r + phase)`, with amplitude = |q_p| |k_p| /
/// sqrt(d_head) (the singular value of the plane's rank-one block q_p k_p^T) and phase = the
/// angle of q_p minus that of k_p. The plane peaks at r = k when `alignment` =
/// cos(theta k + phase) is 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlaneRow {
    /// Head of the first layer.
    pub head: usize,
    /// Plane.
    pub plane: usize,
    /// Rotation per position (radians).
    pub theta: f64,
    /// Amplitude.
    pub amplitude: f64,
    /// Phase (radians, in (-pi, pi]).
    pub phase: f64,
    /// cos(theta k + phase).
    pub alignment: f64,
}

/// The carrier's planes for every head of the first layer of a rotary model (constant-rate
/// planes), from the mean pre-rotation q and k over `rows` test sequences of length `n`.
/// Empty for a model whose first layer does not rotate at constant rates; the unrotated dims
/// of a partial rotation add a constant to the carrier and are not listed.
pub fn carrier_planes(
    model: &GptJ,
    task: &OffsetTask,
    seed: u64,
    n: usize,
    rows: usize,
) -> Result<Vec<PlaneRow>> {
    let position = model.config().layer_position(0).clone();
    let Some(rotation) = position.rotation() else {
        return Ok(vec![]);
    };
    let Some(rates) = rotation.rates() else {
        return Ok(vec![]);
    };
    let points = [
        HookPoint::new(0, HookKind::Q),
        HookPoint::new(0, HookKind::K),
    ];
    let mut hooks = Hooks::new().capture(points);
    model.trunk(&sequences(model, task, seed, n, rows)?, &mut hooks, None)?;
    let mean = |p: HookPoint| -> Result<Vec<Vec<f64>>> {
        let t = hooks
            .get(p)
            .ok_or_else(|| AnalysisError::Invalid(format!("hook {p} was not captured")))?;
        // [batch, heads, pos, d_head] -> [heads, d_head]
        let m = t.mean(2)?.mean(0)?;
        let rows: Vec<Vec<f32>> = m.to_vec2()?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_iter().map(f64::from).collect())
            .collect())
    };
    let (q, k) = (mean(points[0])?, mean(points[1])?);
    let pairs = rotation.pairs();
    let mut out = vec![];
    for (head, (qh, kh)) in q.iter().zip(&k).enumerate() {
        let scale = 1.0 / (qh.len() as f64).sqrt();
        for (plane, (&(a, b), &theta)) in pairs.iter().zip(&rates).enumerate() {
            let (qa, qb, ka, kb) = (qh[a], qh[b], kh[a], kh[b]);
            let amplitude = scale * qa.hypot(qb) * ka.hypot(kb);
            let mut phase = qb.atan2(qa) - kb.atan2(ka);
            if phase <= -std::f64::consts::PI {
                phase += 2.0 * std::f64::consts::PI;
            } else if phase > std::f64::consts::PI {
                phase -= 2.0 * std::f64::consts::PI;
            }
            out.push(PlaneRow {
                head,
                plane,
                theta,
                amplitude,
                phase,
                alignment: (theta * task.k as f64 + phase).cos(),
            });
        }
    }
    Ok(out)
}

/// Summary of a head's carrier planes: the participation ratio of the amplitudes
/// ((sum a)^2 / sum a^2, the effective number of planes), and the amplitude-weighted mean
/// alignment (1: every plane peaks at r = k).
pub fn carrier_summary(planes: &[PlaneRow]) -> Option<(f64, f64)> {
    let sum: f64 = planes.iter().map(|p| p.amplitude).sum();
    let squares: f64 = planes.iter().map(|p| p.amplitude * p.amplitude).sum();
    (sum > 0.0).then(|| {
        let aligned: f64 = planes.iter().map(|p| p.amplitude * p.alignment).sum();
        (sum * sum / squares, aligned / sum)
    })
}

/// One row of `accuracy.csv`: a run's accuracy at the last position at one test length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OffsetAccuracyRow {
    /// Position encoding (`rope`, `rope:BASE`, `ape`, `nope`).
    pub pe: String,
    /// Attention kind.
    pub attention: String,
    /// The offset.
    pub k: usize,
    /// Seed.
    pub seed: u64,
    /// Longest training length.
    pub train_len: usize,
    /// Tested length.
    pub test_len: usize,
    /// Sequences tested.
    pub n: usize,
    /// Fraction whose prediction at the last position is the token k back.
    pub accuracy: f64,
    /// Mean cross-entropy there.
    pub loss: f64,
}

/// One row of `mechanism.csv`: a run's first-layer head at one test length (softmax runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MechanismLine {
    /// Position encoding.
    pub pe: String,
    /// Attention kind.
    pub attention: String,
    /// The offset.
    pub k: usize,
    /// Seed.
    pub seed: u64,
    /// Test length.
    pub test_len: usize,
    /// Head of the first layer.
    pub head: usize,
    /// Mean weight of the last query on the target.
    pub target_weight: f64,
    /// The dilution law's prediction from the carrier.
    pub predicted_weight: f64,
    /// The law per sequence, averaged (absent in files written before it was measured).
    #[serde(default)]
    pub per_sequence_weight: Option<f64>,
    /// Fraction of sequences whose argmax key is the target.
    pub argmax_on_target: f64,
    /// The most frequent argmax key position.
    pub mode_key: usize,
    /// Its fraction.
    pub mode_fraction: f64,
    /// The run's accuracy at this length.
    pub accuracy: f64,
}

/// One row of `runs.csv`: a run's equivariance and, for softmax runs, how well the dilution
/// law predicts its target weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OffsetRunRow {
    /// Position encoding.
    pub pe: String,
    /// Attention kind.
    pub attention: String,
    /// The offset.
    pub k: usize,
    /// Seed.
    pub seed: u64,
    /// Largest change of a first-layer logit when the input moves by 37 positions
    /// (docs/offset.md), relative to the largest logit.
    pub equivariance: f64,
    /// Largest |predicted - measured| target weight over test lengths and heads (softmax
    /// runs with an equivariant encoding: rotary or none).
    pub dilution_error: Option<f64>,
    /// The same for the per-sequence form of the law (absent in older files).
    #[serde(default)]
    pub per_sequence_error: Option<f64>,
    /// Where head 0's carrier re-peaks: its highest local maximum at an offset other than k
    /// (softmax runs; absent in older files).
    #[serde(default)]
    pub repeak_offset: Option<usize>,
    /// The carrier's margin there, s(k) - s(repeak_offset).
    #[serde(default)]
    pub repeak_margin: Option<f64>,
    /// Argmax key at the longest test length, most frequent (head 0, softmax).
    pub mode_key: Option<usize>,
    /// Its fraction.
    pub mode_fraction: Option<f64>,
    /// Rotary runs: the participation ratio of the carrier's plane amplitudes (its effective
    /// rank), for the first-layer head with the best alignment.
    pub carrier_rank: Option<f64>,
    /// Rotary runs: that head's amplitude-weighted mean cos(theta k + phase).
    pub carrier_alignment: Option<f64>,
}

/// One row of a run's `carrier.csv`: the last query's mean first-layer logit at offset r.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CarrierRow {
    /// Head of the first layer.
    pub head: usize,
    /// Offset r (key = last position - r).
    pub r: usize,
    /// Mean logit s(r).
    pub s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dilution_law_on_a_hand_made_carrier() {
        // s(k) = 2 and every other offset 0: p_L = e^2 / (e^2 + L - 1).
        let k = 3;
        let s: Vec<f64> = (0..64).map(|r| if r == k { 2.0 } else { 0.0 }).collect();
        for len in [4, 16, 64] {
            let want = 2f64.exp() / (2f64.exp() + (len - 1) as f64);
            let got = predicted_weight(&s, k, len).unwrap();
            assert!((got - want).abs() < 1e-12, "{len}: {got} vs {want}");
        }
        assert_eq!(predicted_weight(&s, k, 65), None);
        assert_eq!(predicted_weight(&s, k, 3), None);
        // Large logits do not overflow.
        let big: Vec<f64> = s.iter().map(|x| x + 1000.0).collect();
        assert!(
            (predicted_weight(&big, k, 16).unwrap() - predicted_weight(&s, k, 16).unwrap()).abs()
                < 1e-12
        );
    }

    #[test]
    fn the_per_sequence_law_is_the_mean_of_each_sequences_softmax() {
        // Two sequences whose logits differ by content: the mean of their softmax weights is
        // not the softmax of their mean logits (Jensen), and the per-sequence form is the former.
        let k = 1;
        let a: Vec<f64> = (0..8).map(|r| if r == k { 8.0 } else { 0.0 }).collect();
        let b = vec![0.0; 8];
        let len = 8;
        let want = (predicted_weight(&a, k, len).unwrap() + 1.0 / 8.0) / 2.0;
        let got = per_sequence_weight(&[a.clone(), b.clone()], k, len).unwrap();
        assert!((got - want).abs() < 1e-12);
        let mean: Vec<f64> = a.iter().zip(&b).map(|(x, y)| (x + y) / 2.0).collect();
        // 0.998 and 0.125 average to 0.561; the mean logits (4 on the target) give 0.886.
        assert!((predicted_weight(&mean, k, len).unwrap() - got).abs() > 0.3);
        assert_eq!(per_sequence_weight(&[], k, len), None);
        assert_eq!(per_sequence_weight(&[a], k, 9), None);
    }

    #[test]
    fn the_carrier_repeaks_at_its_highest_other_local_maximum() {
        // Peak 3 at k = 2, local maxima 1 at r = 6 and 2.5 at r = 10 (the re-peak), a rising
        // edge at r = 0 that is no maximum.
        let s = [0.0, 1.0, 3.0, 1.0, 0.0, 0.5, 1.0, 0.2, 0.0, 2.0, 2.5, 2.4];
        assert_eq!(carrier_repeak(&s, 2), Some((10, 0.5)));
        // A carrier falling from k on: the last point (one neighbour, lower) is no maximum,
        // the first one (r = 0, above r = 1) is.
        let fall = [1.0, 0.5, 3.0, 2.0, 1.0];
        assert_eq!(carrier_repeak(&fall, 2), Some((0, 2.0)));
        assert_eq!(carrier_repeak(&[1.0, 2.0, 3.0], 2), None);
        assert_eq!(carrier_repeak(&s, 40), None);
    }
}
