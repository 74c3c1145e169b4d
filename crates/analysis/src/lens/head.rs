//! One attention head seen from one query: its pre-rotation query and keys and its position
//! encoding, enough to compute the logit of ANY key content at ANY position exactly.
//!
//! The logit of the content that sits at position `b` when it is moved to position `a` is
//! `scale * (R(n) q) . (R(a) k_b) = scale * (R(n - a) q) . k_b` for a rotary head (R is the
//! plane-wise rotation), and `scale * q . k_b` without position encoding. Swapping block inputs
//! moves only key contents; the query stays, so every swap is a re-pairing of these numbers.

use ropelab_model::rope::rotate_planes;
use ropelab_model::PositionEncoding;

/// A head at one query position, in f64.
#[derive(Debug, Clone)]
pub struct HeadView {
    /// Pre-rotation query at the query position `n` `[d_head]`.
    pub q: Vec<f64>,
    /// Pre-rotation keys at positions 0..=n `[n + 1][d_head]`.
    pub keys: Vec<Vec<f64>>,
    /// The layer's position encoding.
    pub encoding: PositionEncoding,
    /// Logit scale (1 / sqrt(d_head) in GPT-J).
    pub scale: f64,
    /// Dims that take part (all of them, or one plane for projection heads).
    pub dims: Option<Vec<usize>>,
}

impl HeadView {
    /// The query position n (the last key position).
    pub fn n(&self) -> usize {
        self.keys.len() - 1
    }

    /// Dimension of the head.
    pub fn d_head(&self) -> usize {
        self.q.len()
    }

    /// The query as key position `a` sees it: `R(a)^T G^2 R(n) q`, so that its dot product with
    /// the pre-rotation key at `a` is the rotated logit (G: the planes' gains). For plain RoPE
    /// this is `R(n - a) q`; absolute angles also cover periodic tables and masked planes.
    /// Identity without a rotation.
    fn query_against(&self, a: usize) -> Vec<f64> {
        let mut out = self.q.clone();
        if let Some(r) = self.encoding.rotation() {
            let pairs = r.pairs();
            let (cos, sin) = r.cos_sin_at(self.n());
            rotate_planes(&mut out, &pairs, &cos, &sin, false);
            let (cos, sin) = r.cos_sin_at(a);
            rotate_planes(&mut out, &pairs, &cos, &sin, true);
        }
        out
    }

    fn dot(&self, x: &[f64], y: &[f64]) -> f64 {
        match &self.dims {
            None => x.iter().zip(y).map(|(a, b)| a * b).sum(),
            Some(dims) => dims.iter().map(|&d| x[d] * y[d]).sum(),
        }
    }

    /// `cross[a][b]` = logit of the content at position b moved to position a, for a, b in 0..n;
    /// the diagonal holds the unpermuted logits. O(n^2 d).
    pub fn cross_logits(&self) -> Vec<Vec<f64>> {
        let n = self.n();
        (0..n)
            .map(|a| {
                let rq = self.query_against(a);
                (0..n)
                    .map(|b| self.scale * self.dot(&rq, &self.keys[b]))
                    .collect()
            })
            .collect()
    }

    /// The unpermuted logits of keys 0..=n (the diagonal of the cross logits plus the self
    /// logit), O(n d).
    pub fn logits(&self) -> Vec<f64> {
        let n = self.n();
        (0..=n)
            .map(|a| self.scale * self.dot(&self.query_against(a), &self.keys[a]))
            .collect()
    }

    /// The logit of the query attending to itself (position n, never moved). Not simply
    /// q . k: a zeroed plane (a plane mask's `Z`) drops out of this logit too.
    pub fn self_logit(&self) -> f64 {
        let n = self.n();
        self.scale * self.dot(&self.query_against(n), &self.keys[n])
    }

    /// Contribution of each plane to the logit of the key content at `b` placed at `a`
    /// (planes follow the head's layout; unrotated dims pair up after rotary_dim).
    pub fn plane_contributions(&self, a: usize, b: usize) -> Vec<f64> {
        let rq = self.query_against(a);
        (0..self.d_head() / 2)
            .map(|p| {
                let (i, j) = self.encoding.plane_dims(p);
                self.scale * (rq[i] * self.keys[b][i] + rq[j] * self.keys[b][j])
            })
            .collect()
    }

    /// A projection head: only plane `p`'s two dims take part in the logits.
    pub fn plane(&self, p: usize) -> HeadView {
        let (i, j) = self.encoding.plane_dims(p);
        HeadView {
            dims: Some(vec![i, j]),
            ..self.clone()
        }
    }
}
