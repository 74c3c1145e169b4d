//! Hook points (a tested naming contract, as in TransformerLens), captures and interventions.
//!
//! Shapes, per hook:
//! - `blocks.{L}.hook_resid_pre`, `blocks.{L}.hook_attn_out`, `blocks.{L}.hook_mlp_out`:
//!   [batch, pos, d_model]
//! - `blocks.{L}.attn.hook_q`, `hook_k` (before rotation), `hook_rot_q`, `hook_rot_k` (after),
//!   `hook_v`, `hook_z`: [batch, heads, pos, d_head]
//! - `blocks.{L}.attn.hook_attn_scores` (scaled, pre-softmax, causal mask applied as -inf),
//!   `blocks.{L}.attn.hook_pattern`: [batch, heads, q_pos, k_pos]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use candle_core::Tensor;

use crate::{ModelError, Result};

/// What a hook point sees in layer `L`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookKind {
    /// Residual stream entering the block.
    ResidPre,
    /// Queries before rotation.
    Q,
    /// Keys before rotation.
    K,
    /// Queries after rotation.
    RotQ,
    /// Keys after rotation.
    RotK,
    /// Values.
    V,
    /// Scaled logits after the causal mask, before softmax.
    AttnScores,
    /// Attention weights.
    Pattern,
    /// Per-head attention output (pattern times values), before the output projection.
    Z,
    /// Attention output added to the residual stream.
    AttnOut,
    /// MLP output added to the residual stream.
    MlpOut,
}

impl HookKind {
    /// Every kind, in forward order.
    pub const ALL: [HookKind; 11] = [
        HookKind::ResidPre,
        HookKind::Q,
        HookKind::K,
        HookKind::RotQ,
        HookKind::RotK,
        HookKind::V,
        HookKind::AttnScores,
        HookKind::Pattern,
        HookKind::Z,
        HookKind::AttnOut,
        HookKind::MlpOut,
    ];

    /// The name after `blocks.{L}.`.
    pub fn suffix(self) -> &'static str {
        match self {
            HookKind::ResidPre => "hook_resid_pre",
            HookKind::Q => "attn.hook_q",
            HookKind::K => "attn.hook_k",
            HookKind::RotQ => "attn.hook_rot_q",
            HookKind::RotK => "attn.hook_rot_k",
            HookKind::V => "attn.hook_v",
            HookKind::AttnScores => "attn.hook_attn_scores",
            HookKind::Pattern => "attn.hook_pattern",
            HookKind::Z => "attn.hook_z",
            HookKind::AttnOut => "hook_attn_out",
            HookKind::MlpOut => "hook_mlp_out",
        }
    }
}

/// A named place in the forward pass: a kind in a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HookPoint {
    /// Block index.
    pub layer: usize,
    /// What is seen there.
    pub kind: HookKind,
}

impl HookPoint {
    /// The hook `kind` of block `layer`.
    pub fn new(layer: usize, kind: HookKind) -> Self {
        Self { layer, kind }
    }

    /// Every hook point of a model with `n_layers` blocks.
    pub fn all(n_layers: usize) -> Vec<HookPoint> {
        (0..n_layers)
            .flat_map(|l| HookKind::ALL.map(|k| HookPoint::new(l, k)))
            .collect()
    }
}

impl fmt::Display for HookPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "blocks.{}.{}", self.layer, self.kind.suffix())
    }
}

impl FromStr for HookPoint {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self> {
        let unknown = || ModelError::UnknownHook(s.to_owned());
        let rest = s.strip_prefix("blocks.").ok_or_else(unknown)?;
        let (layer, suffix) = rest.split_once('.').ok_or_else(unknown)?;
        let layer: usize = layer.parse().map_err(|_| unknown())?;
        let kind = HookKind::ALL
            .into_iter()
            .find(|k| k.suffix() == suffix)
            .ok_or_else(unknown)?;
        Ok(HookPoint::new(layer, kind))
    }
}

/// How an ablated head's output is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ablation {
    /// By zeros.
    Zero,
    /// By its mean over the batch (per position).
    Mean,
}

/// A change to the forward pass.
#[derive(Debug, Clone)]
pub enum Intervention {
    /// Replace the tensor at a hook point (same shape).
    Replace {
        /// Where.
        hook: HookPoint,
        /// The new value.
        value: Tensor,
    },
    /// Replace one head's output (`hook_z`) by zeros or its batch mean.
    AblateHead {
        /// Block index.
        layer: usize,
        /// Head index.
        head: usize,
        /// Zero or mean.
        ablation: Ablation,
    },
    /// Replace one head's output (`hook_z`) by a fixed value, the same for every batch row: mean
    /// ablation over a whole split, whose mean was computed beforehand (`ropelab ablate`).
    SetHead {
        /// Block index.
        layer: usize,
        /// Head index.
        head: usize,
        /// The head's output at every position: [pos, d_head].
        value: Tensor,
    },
    /// Keep only the given planes of one head's q and k (zero the other dims), applied before
    /// `hook_q` / `hook_k`, so the hooks show what the head uses.
    RestrictPlanes {
        /// Block index.
        layer: usize,
        /// Head index.
        head: usize,
        /// Plane indices (see [`crate::rope::plane_dims`]).
        planes: Vec<usize>,
    },
}

/// The hooks of one forward pass: which points to capture, the captured tensors, and the
/// interventions to apply. Points nobody asked for are neither copied nor stored.
#[derive(Debug, Default)]
pub struct Hooks {
    capture: BTreeSet<HookPoint>,
    capture_last: BTreeSet<HookPoint>,
    cache: BTreeMap<HookPoint, Tensor>,
    interventions: Vec<Intervention>,
}

impl Hooks {
    /// No captures, no interventions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also capture `points`.
    pub fn capture(mut self, points: impl IntoIterator<Item = HookPoint>) -> Self {
        self.capture.extend(points);
        self
    }

    /// Also capture `points`, keeping only the last position: the last query row of
    /// [batch, heads, q_pos, k_pos] scores and patterns, the last position of [batch, heads,
    /// pos, d] and [batch, pos, d] tensors (the position axis is the second to last). Long
    /// inputs then keep O(pos) per point instead of O(pos^2).
    pub fn capture_last(mut self, points: impl IntoIterator<Item = HookPoint>) -> Self {
        self.capture_last.extend(points);
        self
    }

    /// Also apply `intervention`.
    pub fn intervene(mut self, intervention: Intervention) -> Self {
        self.interventions.push(intervention);
        self
    }

    /// The captured tensor at `point`, if it was requested and reached.
    pub fn get(&self, point: HookPoint) -> Option<&Tensor> {
        self.cache.get(&point)
    }

    /// Whether `point` is captured (in full or its last position).
    pub fn wants(&self, point: HookPoint) -> bool {
        self.capture.contains(&point) || self.capture_last.contains(&point)
    }

    /// Whether layer `layer`'s full attention scores or pattern are captured or replaced: only
    /// then must attention materialise them ([batch, heads, pos, pos]).
    pub fn needs_full_pattern(&self, layer: usize) -> bool {
        [HookKind::AttnScores, HookKind::Pattern]
            .iter()
            .any(|&kind| {
                let point = HookPoint::new(layer, kind);
                self.capture.contains(&point)
                    || self
                        .interventions
                        .iter()
                        .any(|i| matches!(i, Intervention::Replace { hook, .. } if *hook == point))
            })
    }

    /// All captured tensors.
    pub fn cache(&self) -> &BTreeMap<HookPoint, Tensor> {
        &self.cache
    }

    /// Checks every intervention against a model's sizes.
    pub fn check(&self, n_layers: usize, n_heads: usize, n_planes: usize) -> Result<()> {
        let bad = |m: String| Err(ModelError::Intervention(m));
        for i in &self.interventions {
            let (layer, head) = match i {
                Intervention::Replace { hook, .. } => (hook.layer, 0),
                Intervention::AblateHead { layer, head, .. }
                | Intervention::SetHead { layer, head, .. } => (*layer, *head),
                Intervention::RestrictPlanes {
                    layer,
                    head,
                    planes,
                } => {
                    if let Some(p) = planes.iter().find(|&&p| p >= n_planes) {
                        return bad(format!("plane {p} of a head with {n_planes} planes"));
                    }
                    (*layer, *head)
                }
            };
            if layer >= n_layers || head >= n_heads {
                return bad(format!(
                    "layer {layer} head {head} of a model with {n_layers} layers x {n_heads} heads"
                ));
            }
        }
        Ok(())
    }

    /// Passes `value` through hook point `point`: applies replacements, stores a capture.
    pub fn point(&mut self, point: HookPoint, value: Tensor) -> Result<Tensor> {
        let mut value = value;
        for i in &self.interventions {
            if let Intervention::Replace { hook, value: new } = i {
                if *hook == point {
                    if new.dims() != value.dims() {
                        return Err(ModelError::Intervention(format!(
                            "{point} has shape {:?}, the replacement {:?}",
                            value.dims(),
                            new.dims()
                        )));
                    }
                    value = new.clone();
                }
            }
        }
        if self.capture.contains(&point) {
            self.cache.insert(point, value.clone());
        } else if self.capture_last.contains(&point) {
            let axis = value.rank().saturating_sub(2);
            let last = value.dim(axis)?.saturating_sub(1);
            // A copy, so the full tensor is freed when the forward pass drops it.
            let row = value.narrow(axis, last, 1)?.contiguous()?.copy()?;
            self.cache.insert(point, row);
        }
        Ok(value)
    }

    /// Applies head ablations and head replacements of `layer` to `z`: [batch, heads, pos,
    /// d_head].
    pub fn ablate(&self, layer: usize, z: Tensor) -> Result<Tensor> {
        let mut z = z;
        for i in &self.interventions {
            let (head, replacement) = match i {
                Intervention::AblateHead {
                    layer: l,
                    head,
                    ablation,
                } if *l == layer => {
                    let replacement = match ablation {
                        Ablation::Zero => None,
                        Ablation::Mean => Some(z.mean_keepdim(0)?), // [1, heads, pos, d_head]
                    };
                    (*head, replacement)
                }
                Intervention::SetHead {
                    layer: l,
                    head,
                    value,
                } if *l == layer => {
                    let (_, _, pos, d_head) = z.dims4()?;
                    if value.dims() != [pos, d_head] {
                        return Err(ModelError::Intervention(format!(
                            "the value set for head {head} of layer {layer} has shape {:?}, \
                             the head's output [{pos}, {d_head}] per row",
                            value.dims()
                        )));
                    }
                    let value = value.to_dtype(z.dtype())?.reshape((1, 1, pos, d_head))?;
                    (*head, Some(value))
                }
                _ => continue,
            };
            let n_heads = z.dim(1)?;
            let keep = head_mask(n_heads, head, &z)?; // [1, heads, 1, 1]
            let kept = z.broadcast_mul(&keep)?;
            z = match replacement {
                None => kept,
                Some(r) => {
                    let drop = keep.affine(-1.0, 1.0)?; // 1 at `head` only
                    kept.broadcast_add(&r.broadcast_mul(&drop)?)?
                }
            };
        }
        Ok(z)
    }

    /// Applies plane restrictions of `layer` to q or k: [batch, heads, pos, d_head].
    pub fn restrict(
        &self,
        layer: usize,
        x: Tensor,
        plane_dims: impl Fn(usize) -> (usize, usize),
    ) -> Result<Tensor> {
        let mut x = x;
        for i in &self.interventions {
            if let Intervention::RestrictPlanes {
                layer: l,
                head,
                planes,
            } = i
            {
                if *l != layer {
                    continue;
                }
                let (_, n_heads, _, d_head) = x.dims4()?;
                let mut mask = vec![1f32; n_heads * d_head];
                mask[head * d_head..(head + 1) * d_head].fill(0.0);
                for &p in planes {
                    let (a, b) = plane_dims(p);
                    mask[head * d_head + a] = 1.0;
                    mask[head * d_head + b] = 1.0;
                }
                let mask = Tensor::from_vec(mask, (1, n_heads, 1, d_head), x.device())?
                    .to_dtype(x.dtype())?;
                x = x.broadcast_mul(&mask)?;
            }
        }
        Ok(x)
    }
}

/// [1, heads, 1, 1] of ones with a zero at `head`.
fn head_mask(n_heads: usize, head: usize, like: &Tensor) -> Result<Tensor> {
    let mut m = vec![1f32; n_heads];
    m[head] = 0.0;
    Ok(Tensor::from_vec(m, (1, n_heads, 1, 1), like.device())?.to_dtype(like.dtype())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in HookPoint::all(3) {
            let name = p.to_string();
            assert_eq!(name.parse::<HookPoint>().unwrap(), p, "{name}");
        }
        assert_eq!(
            HookPoint::new(2, HookKind::Pattern).to_string(),
            "blocks.2.attn.hook_pattern"
        );
        assert_eq!(
            HookPoint::new(0, HookKind::ResidPre).to_string(),
            "blocks.0.hook_resid_pre"
        );
        for bad in [
            "blocks.x.hook_q",
            "blocks.1.hook_q",
            "hook_z",
            "blocks.1.attn.hook_zz",
        ] {
            assert!(bad.parse::<HookPoint>().is_err(), "{bad}");
        }
    }
}
