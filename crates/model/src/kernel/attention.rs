//! Fused causal attention of one batch row, forward and backward: RoPE on q and k, scaled
//! scores, causal softmax (or linear, unnormalised weights), pattern dropout and the weighted sum of values, with every head of
//! the row in one call. q, k and v live side by side in a `[pos, 3 * d_model]` buffer (the
//! output of one projection), heads `d_head` wide inside each third.

use super::bf16::Precision;
use super::gemm::{matmul_serial, View};
use super::math::{axpy, dot, exp, sum};
use crate::{rope, AttentionKind, PositionEncoding};

/// The rotation of one layer as tables for the positions of one row (0..seq, or shifted).
#[derive(Debug, Clone)]
pub struct RopeTable {
    /// The two dims of each rotated plane.
    pairs: Vec<(usize, usize)>,
    /// cos of `pos * freq` [seq, planes].
    cos: Vec<f32>,
    /// sin of `pos * freq` [seq, planes].
    sin: Vec<f32>,
    /// Whether plane k is dims (2k, 2k + 1) for every k (interleaved from dim 0): the
    /// rotation then runs over consecutive pairs, which vectorises.
    interleaved: bool,
}

impl RopeTable {
    /// Floats held by the cos and sin tables.
    #[cfg(test)]
    pub fn floats(&self) -> usize {
        self.cos.len() + self.sin.len()
    }

    /// Tables of `position` at `positions` (row index i holds position `positions.start + i`;
    /// `None` without rotation). Angles are computed in f64 and rounded once
    /// ([`crate::Rotation::table`]); a zeroed plane has cos = sin = 0.
    pub fn new(position: &PositionEncoding, positions: std::ops::Range<usize>) -> Option<Self> {
        let r = position.rotation()?;
        let (cos, sin) = r.table(positions);
        let pairs = r.pairs();
        let interleaved = pairs
            .iter()
            .enumerate()
            .all(|(k, &p)| p == (2 * k, 2 * k + 1));
        Some(Self {
            pairs,
            cos,
            sin,
            interleaved,
        })
    }

    /// Rotates one head vector `x` [d_head] to position `pos` (inverse: the transpose).
    fn apply(&self, x: &mut [f32], pos: usize, inverse: bool) {
        let planes = self.pairs.len();
        let (cos, sin) = (
            &self.cos[pos * planes..][..planes],
            &self.sin[pos * planes..][..planes],
        );
        if !self.interleaved {
            rope::rotate_planes(x, &self.pairs, cos, sin, inverse);
            return;
        }
        let sign = if inverse { -1.0 } else { 1.0 };
        for ((pair, &c), &s) in x.chunks_exact_mut(2).zip(cos).zip(sin) {
            let (x0, x1, s) = (pair[0], pair[1], sign * s);
            pair[0] = x0 * c - x1 * s;
            pair[1] = x1 * c + x0 * s;
        }
    }
}

/// Sizes of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Positions in the row.
    pub seq: usize,
    /// Heads.
    pub heads: usize,
    /// Width of one head.
    pub d_head: usize,
    /// Query positions computed: the last `queries` positions (all, or 1 for the last layer).
    pub queries: usize,
    /// Logit scale (1 / sqrt(d_head)).
    pub scale: f32,
    /// Softmax, or linear (unnormalised) weights.
    pub kind: AttentionKind,
    /// Precision of the score and value products.
    pub precision: Precision,
}

impl Shape {
    /// Width of the merged heads.
    pub fn d_model(&self) -> usize {
        self.heads * self.d_head
    }
}

/// Rotates (or, with `inverse`, rotates back) the k part of every position and the q part of
/// the query positions of `qkv` [seq, 3 d_model], head by head.
fn rotate_q_and_k(s: Shape, rope: &RopeTable, qkv: &mut [f32], inverse: bool) {
    let (dm, dh) = (s.d_model(), s.d_head);
    let first_q = s.seq - s.queries;
    for (pos, row) in qkv.chunks_exact_mut(3 * dm).take(s.seq).enumerate() {
        for h in 0..s.heads {
            rope.apply(&mut row[dm + h * dh..][..dh], pos, inverse);
            if pos >= first_q {
                rope.apply(&mut row[h * dh..][..dh], pos, inverse);
            }
        }
    }
}

/// Scales the raw dot products `p[..=pos]` of one query row and turns them into weights
/// (a softmax, or the scaled logits themselves for linear attention); zeroes `p[pos + 1..]`.
fn finish_row(s: Shape, p: &mut [f32], pos: usize) {
    let mut max = f32::NEG_INFINITY;
    for v in &mut p[..=pos] {
        *v *= s.scale;
        max = max.max(*v);
    }
    if s.kind == AttentionKind::Softmax {
        for v in &mut p[..=pos] {
            *v = exp(*v - max);
        }
        let inv = 1.0 / sum(&p[..=pos]);
        for v in &mut p[..=pos] {
            *v *= inv;
        }
    }
    p[pos + 1..].fill(0.0);
}

/// Views of head `h`'s q, k and v ([seq, d_head] each) inside a `[seq, 3 d_model]` buffer.
fn head_views(s: Shape, h: usize) -> (View, View, View) {
    let (t, dm, dh) = (s.seq, s.d_model(), s.d_head);
    (
        View::rows(h * dh, t, dh, 3 * dm),
        View::rows(dm + h * dh, t, dh, 3 * dm),
        View::rows(2 * dm + h * dh, t, dh, 3 * dm),
    )
}

/// `out = p * mask` over one head's [seq, seq] block (the dropped-out weights).
fn masked<'a>(p: &'a [f32], mask: Option<&[f32]>, out: &'a mut [f32]) -> &'a [f32] {
    match mask {
        Some(m) => {
            for ((o, w), k) in out.iter_mut().zip(p).zip(m) {
                *o = w * k;
            }
            out
        }
        None => p,
    }
}

/// Forward of one batch row. `qkv` [seq, 3 d_model] is rotated in place (k at every position,
/// q at the query positions); `pattern` [heads, seq, seq] receives the softmax rows of the
/// query positions; `mask` [heads, seq, seq] is the dropout mask of the pattern (already
/// scaled), and `z` [queries, d_model] the merged head outputs. `scratch` holds at least
/// 2 seq^2 floats. With every position a query, each head is three matrix products
/// (S = Q K^T, row-wise weights, Z = P V); one query row uses dot products.
pub fn forward(
    s: Shape,
    rope: Option<&RopeTable>,
    qkv: &mut [f32],
    pattern: &mut [f32],
    mask: Option<&[f32]>,
    z: &mut [f32],
    scratch: &mut [f32],
) {
    let (t, dm, dh) = (s.seq, s.d_model(), s.d_head);
    let first_q = t - s.queries;
    if let Some(rope) = rope {
        rotate_q_and_k(s, rope, qkv, false);
    }
    if s.queries == t {
        for h in 0..s.heads {
            let (q, k, v) = head_views(s, h);
            let block = View::dense(0, t, t);
            let p = &mut pattern[h * t * t..][..t * t];
            matmul_serial(s.precision, p, block, qkv, q, qkv, k.t(), false);
            for (pos, row) in p.chunks_exact_mut(t).enumerate() {
                finish_row(s, row, pos);
            }
            let m = mask.map(|m| &m[h * t * t..][..t * t]);
            let w = masked(p, m, &mut scratch[..t * t]);
            matmul_serial(
                s.precision,
                z,
                View::rows(h * dh, t, dh, dm),
                w,
                block,
                qkv,
                v,
                false,
            );
        }
        return;
    }
    z.fill(0.0);
    for qi in 0..s.queries {
        let pos = first_q + qi;
        for h in 0..s.heads {
            let q = &qkv[pos * 3 * dm + h * dh..][..dh];
            let p = &mut pattern[(h * t + pos) * t..][..t];
            for j in 0..=pos {
                p[j] = dot(q, &qkv[j * 3 * dm + dm + h * dh..][..dh]);
            }
            finish_row(s, p, pos);
            let out = &mut z[qi * dm + h * dh..][..dh];
            for j in 0..=pos {
                let w = p[j] * mask.map_or(1.0, |m| m[(h * t + pos) * t + j]);
                axpy(w, &qkv[j * 3 * dm + 2 * dm + h * dh..][..dh], out);
            }
        }
    }
}

/// What the forward pass of one batch row kept for its backward pass.
#[derive(Debug, Clone, Copy)]
pub struct Saved<'a> {
    /// The rotated q, k and v [seq, 3 d_model].
    pub qkv: &'a [f32],
    /// The weights of the query rows [heads, seq, seq].
    pub pattern: &'a [f32],
    /// The pattern's dropout mask [heads, seq, seq], if the forward pass had dropout.
    pub mask: Option<&'a [f32]>,
}

/// Backward of one batch row: from `dz` [queries, d_model] and what the forward pass kept,
/// writes `dqkv` [seq, 3 d_model] (gradients of the un-rotated q, k and v; q rows outside the
/// query positions are 0). `dp` (at least 2 seq^2 floats) is scratch. With every position a
/// query, each head is four matrix products (dP = dZ V^T, dV = P^T dZ, dQ = dS K,
/// dK = dS^T Q) around the row-wise softmax backward.
pub fn backward(
    s: Shape,
    rope: Option<&RopeTable>,
    saved: Saved,
    dz: &[f32],
    dqkv: &mut [f32],
    dp: &mut [f32],
) {
    if s.queries == s.seq {
        backward_all(s, saved, dz, dqkv, dp);
    } else {
        backward_rows(s, saved, dz, dqkv, dp);
    }
    if let Some(rope) = rope {
        rotate_q_and_k(s, rope, dqkv, true);
    }
}

/// [`backward`] with every position a query: per head, dP = dZ V^T, dV = (P * mask)^T dZ, the
/// row-wise softmax backward, dQ = dS K and dK = dS^T Q (gradients of the rotated q and k).
fn backward_all(s: Shape, saved: Saved, dz: &[f32], dqkv: &mut [f32], dp: &mut [f32]) {
    let Saved { qkv, pattern, mask } = saved;
    let (t, dm, dh) = (s.seq, s.d_model(), s.d_head);
    let (ds, weights) = dp[..2 * t * t].split_at_mut(t * t);
    for h in 0..s.heads {
        let (q, k, v) = head_views(s, h);
        let g = View::rows(h * dh, t, dh, dm);
        let p = &pattern[h * t * t..][..t * t];
        let m = mask.map(|m| &m[h * t * t..][..t * t]);
        // dP of the dropped-out weights, and dV = (P * mask)^T dZ.
        let block = View::dense(0, t, t);
        matmul_serial(s.precision, ds, block, dz, g, qkv, v.t(), false);
        let w = masked(p, m, weights);
        matmul_serial(s.precision, dqkv, v, w, block.t(), dz, g, false);
        // dS row by row: through the mask, then the softmax (linear: the identity).
        for pos in 0..t {
            let row = &mut ds[pos * t..][..t];
            let pr = &p[pos * t..][..t];
            if let Some(m) = m {
                for (d, k) in row.iter_mut().zip(&m[pos * t..][..t]) {
                    *d *= k;
                }
            }
            match s.kind {
                AttentionKind::Softmax => {
                    let inner = dot(&pr[..=pos], &row[..=pos]);
                    for j in 0..=pos {
                        row[j] = s.scale * pr[j] * (row[j] - inner);
                    }
                }
                AttentionKind::Linear => {
                    for d in &mut row[..=pos] {
                        *d *= s.scale;
                    }
                }
            }
            row[pos + 1..].fill(0.0);
        }
        matmul_serial(s.precision, dqkv, q, ds, block, qkv, k, false);
        matmul_serial(s.precision, dqkv, k, ds, block.t(), qkv, q, false);
    }
}

/// [`backward`] for the last `queries` positions, one query row at a time (dot products).
fn backward_rows(s: Shape, saved: Saved, dz: &[f32], dqkv: &mut [f32], dp: &mut [f32]) {
    let Saved { qkv, pattern, mask } = saved;
    let (t, dm, dh) = (s.seq, s.d_model(), s.d_head);
    let first_q = t - s.queries;
    dqkv.fill(0.0);
    for qi in 0..s.queries {
        let pos = first_q + qi;
        for h in 0..s.heads {
            let g = &dz[qi * dm + h * dh..][..dh];
            let p = &pattern[(h * t + pos) * t..][..t];
            let m = |j: usize| mask.map_or(1.0, |m| m[(h * t + pos) * t + j]);
            // dP (through the dropout mask) and dv.
            for j in 0..=pos {
                let v = &qkv[j * 3 * dm + 2 * dm + h * dh..][..dh];
                dp[j] = dot(g, v) * m(j);
                axpy(
                    p[j] * m(j),
                    g,
                    &mut dqkv[j * 3 * dm + 2 * dm + h * dh..][..dh],
                );
            }
            // Softmax backward (linear weights: the identity), then the two sides of the dot
            // product.
            let inner: f32 = match s.kind {
                AttentionKind::Softmax => (0..=pos).map(|j| p[j] * dp[j]).sum(),
                AttentionKind::Linear => 0.0,
            };
            for j in 0..=pos {
                let ds = match s.kind {
                    AttentionKind::Softmax => s.scale * p[j] * (dp[j] - inner),
                    AttentionKind::Linear => s.scale * dp[j],
                };
                let (row_q, row_k) = (pos * 3 * dm + h * dh, j * 3 * dm + dm + h * dh);
                let k = &qkv[row_k..][..dh];
                axpy(ds, k, &mut dqkv[row_q..][..dh]);
                let q = &qkv[row_q..][..dh];
                axpy(ds, q, &mut dqkv[row_k..][..dh]);
            }
        }
    }
}
