//! Running a model once over a batch and keeping what the scores need: per layer the
//! pre-rotation q and k, the attention pattern, and (for the reference path) the block input.

use candle_core::{Tensor, D};
use ropelab_model::{GptJ, HookKind, HookPoint, Hooks, PositionEncoding};

use crate::lens::head::HeadView;
use crate::{AnalysisError, Result};

/// Captured tensors of one forward pass, per layer.
pub struct Captured {
    /// Pre-rotation queries per layer: one flat f32 buffer [batch, heads, pos, d_head] each.
    q: Vec<Vec<f32>>,
    /// Pre-rotation keys per layer, same layout.
    k: Vec<Vec<f32>>,
    /// Attention patterns per layer, [batch, heads, q_pos, k_pos].
    pub patterns: Vec<Tensor>,
    /// Block inputs per layer, [batch, pos, d_model] (only when asked for).
    pub resid_pre: Vec<Tensor>,
    /// Position encoding per layer.
    positions: Vec<PositionEncoding>,
    dims: (usize, usize, usize, usize),
}

impl Captured {
    /// The hook points a capture needs for `n_layers` layers.
    pub fn hooks(n_layers: usize, with_resid: bool) -> Hooks {
        let mut kinds = vec![HookKind::Q, HookKind::K, HookKind::Pattern];
        if with_resid {
            kinds.push(HookKind::ResidPre);
        }
        let points = (0..n_layers).flat_map(|l| kinds.iter().map(move |&k| HookPoint::new(l, k)));
        Hooks::new().capture(points)
    }

    /// One forward of `ids` [batch, pos] through a GPT-J; `with_resid` also keeps the block
    /// inputs.
    pub fn run(model: &GptJ, ids: &Tensor, with_resid: bool) -> Result<Self> {
        let n_layers = model.config().n_layers;
        let mut hooks = Self::hooks(n_layers, with_resid);
        model.trunk(ids, &mut hooks, None)?;
        let positions = (0..n_layers)
            .map(|l| model.config().layer_position(l).clone())
            .collect();
        Self::from_hooks(&hooks, positions, with_resid)
    }

    /// The capture from hooks filled by any hooked model (see [`Captured::hooks`]), with the
    /// position encoding of each layer.
    pub fn from_hooks(
        hooks: &Hooks,
        positions: Vec<PositionEncoding>,
        with_resid: bool,
    ) -> Result<Self> {
        let take = |l, kind| -> Result<Tensor> {
            hooks.get(HookPoint::new(l, kind)).cloned().ok_or_else(|| {
                AnalysisError::Invalid(format!("hook {} was not captured", HookPoint::new(l, kind)))
            })
        };
        let flat = |t: Tensor| -> Result<Vec<f32>> { Ok(t.flatten_all()?.to_vec1()?) };
        let mut out = Captured {
            q: vec![],
            k: vec![],
            patterns: vec![],
            resid_pre: vec![],
            positions,
            dims: (0, 0, 0, 0),
        };
        for l in 0..out.positions.len() {
            let q = take(l, HookKind::Q)?;
            out.dims = q.dims4()?;
            out.q.push(flat(q)?);
            out.k.push(flat(take(l, HookKind::K)?)?);
            out.patterns.push(take(l, HookKind::Pattern)?);
            if with_resid {
                out.resid_pre.push(take(l, HookKind::ResidPre)?);
            }
        }
        Ok(out)
    }

    /// A capture of queries and keys alone (any model's, e.g. from Python): per layer, flat
    /// pre-rotation q and k [batch, heads, pos, d_head] (`dims`), with each layer's position
    /// encoding. It scores heads ([`crate::lens::heads::score_captured`]); it has no patterns
    /// or block inputs.
    pub fn from_parts(
        q: Vec<Vec<f32>>,
        k: Vec<Vec<f32>>,
        dims: (usize, usize, usize, usize),
        positions: Vec<PositionEncoding>,
    ) -> Result<Self> {
        let size = dims.0 * dims.1 * dims.2 * dims.3;
        let layers = positions.len();
        if q.len() != layers || k.len() != layers || q.iter().chain(&k).any(|x| x.len() != size) {
            return Err(AnalysisError::Invalid(format!(
                "q and k must hold {layers} layers of {dims:?} values each"
            )));
        }
        Ok(Self {
            q,
            k,
            patterns: vec![],
            resid_pre: vec![],
            positions,
            dims,
        })
    }

    /// Number of layers captured.
    pub fn n_layers(&self) -> usize {
        self.positions.len()
    }

    /// (batch, heads, pos, d_head).
    pub fn dims(&self) -> (usize, usize, usize, usize) {
        self.dims
    }

    /// The head `head` of layer `layer` on input `b` seen from query position `n`.
    pub fn head_view(&self, layer: usize, b: usize, head: usize, n: usize) -> Result<HeadView> {
        let (batch, heads, pos, d) = self.dims;
        if b >= batch || head >= heads || n >= pos {
            return Err(AnalysisError::Invalid(format!(
                "input {b}, head {head}, query {n} outside [{batch} inputs, {heads} heads, {pos} positions]"
            )));
        }
        let row = |data: &[f32], p: usize| -> Vec<f64> {
            let start = ((b * heads + head) * pos + p) * d;
            data[start..start + d]
                .iter()
                .map(|&v| f64::from(v))
                .collect()
        };
        Ok(HeadView {
            q: row(&self.q[layer], n),
            keys: (0..=n).map(|p| row(&self.k[layer], p)).collect(),
            encoding: self.positions[layer].clone(),
            scale: 1.0 / (d as f64).sqrt(),
            dims: None,
        })
    }

    /// The attention row of a head at query `n` as the model computed it (keys 0..=n).
    pub fn pattern_row(&self, layer: usize, b: usize, head: usize, n: usize) -> Result<Vec<f64>> {
        let row = self.patterns[layer]
            .get(b)?
            .get(head)?
            .get(n)?
            .narrow(D::Minus1, 0, n + 1)?;
        Ok(row.to_vec1::<f32>()?.into_iter().map(f64::from).collect())
    }
}
