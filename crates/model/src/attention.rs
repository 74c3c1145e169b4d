//! Causal attention of one layer from projected q, k, v: rotation by the layer's position
//! encoding, scaled scores, causal mask, softmax and the weighted sum of values. The GPT-J block
//! and the hand-built heads of the theory lab both run through this code.

use candle_core::{Device, Tensor};

use crate::hooks::{HookKind, HookPoint, Hooks};
use crate::ops::{softmax_last_dim, Dropout};
use crate::{rope, AttentionKind, PositionEncoding, Result};

/// Attends with queries `q` and keys `k` [batch, heads, pos, d] (before rotation) over values
/// `v` [batch, heads, pos, d_v] at positions 0..pos; logits are `scale * rq . rk`, turned into
/// weights by `kind` (a causal softmax, or the causally masked logits themselves for linear
/// attention). Passes the rotated q/k, scores and pattern through `hooks` as layer `layer`, and
/// returns z [batch, heads, pos, d_v].
#[allow(clippy::too_many_arguments)]
pub fn attend(
    layer: usize,
    q: Tensor,
    k: Tensor,
    v: &Tensor,
    position: &PositionEncoding,
    kind: AttentionKind,
    scale: f64,
    hooks: &mut Hooks,
    dropout: Option<&mut Dropout>,
) -> Result<Tensor> {
    let point = |kind| HookPoint::new(layer, kind);
    let t = q.dim(2)?;
    let device = q.device().clone();
    let (rq, rk) = match position.rotation() {
        None => (q, k),
        Some(r) => {
            let positions: Vec<usize> = (0..t).collect();
            let (cos, sin) = rope::angles_of(&positions, &r, &device)?;
            let (cos, sin) = (cos.to_dtype(q.dtype())?, sin.to_dtype(q.dtype())?);
            (
                rope::rotate(&q, &cos, &sin, r.rotary_dim, r.layout)?,
                rope::rotate(&k, &cos, &sin, r.rotary_dim, r.layout)?,
            )
        }
    };
    let rq = hooks.point(point(HookKind::RotQ), rq)?;
    let rk = hooks.point(point(HookKind::RotK), rk)?;
    let scores = (rq.matmul(&rk.t()?)? * scale)?; // [batch, heads, q_pos, k_pos]
    let pattern = match kind {
        AttentionKind::Softmax => {
            let mask = causal_mask(t, &device)?.to_dtype(scores.dtype())?;
            let scores = hooks.point(point(HookKind::AttnScores), scores.broadcast_add(&mask)?)?;
            softmax_last_dim(&scores)?
        }
        AttentionKind::Linear => {
            let keep = causal_keep(t, &device)?.to_dtype(scores.dtype())?;
            hooks.point(point(HookKind::AttnScores), scores.broadcast_mul(&keep)?)?
        }
    };
    let pattern = hooks.point(point(HookKind::Pattern), pattern)?;
    let pattern = match dropout {
        Some(d) => d.apply(&pattern)?,
        None => pattern,
    };
    Ok(pattern.matmul(&v.contiguous()?)?) // [batch, heads, pos, d_v]
}

/// [pos, pos] with 1 on and below the diagonal and 0 above.
pub fn causal_keep(t: usize, device: &Device) -> Result<Tensor> {
    let keep: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j <= i { 1.0 } else { 0.0 }))
        .collect();
    Ok(Tensor::from_vec(keep, (t, t), device)?)
}

/// [pos, pos] with 0 on and below the diagonal and -inf above.
pub fn causal_mask(t: usize, device: &Device) -> Result<Tensor> {
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    Ok(Tensor::from_vec(mask, (t, t), device)?)
}
