//! The hand-written backward pass of the last-token cross-entropy, block by block in reverse,
//! from the activations cached by the forward pass.

use rayon::prelude::*;

use super::attention::{self, Shape};
use super::linear::{linear_backward_input, linear_backward_weight};
use super::math::{self, column_sums};
use super::{Absolute, FlatParams, FusedStep, Rows, View};

impl FusedStep {
    /// Backward pass from the logit gradients in `self.logits`.
    pub(super) fn backward_pass(&mut self, params: &FlatParams) {
        let ids = &self.ids;
        let c = self.config.clone();
        let (d, m, v) = (c.d_model, c.d_mlp, c.out_dim());
        let r = self.out_rows;
        let (b, t) = (self.batch, self.seq);
        let n = b * t;
        let w = &params.values;
        let outer = self.outer_offsets();
        let (lm_w, lm_b) = (*outer.unembedding(), outer.lm_head_b);
        let block_offsets: Vec<_> = (0..c.n_layers).map(|l| self.block_offsets(l)).collect();
        let g = &mut self.grads.values;

        // Unembedding: dW = dlogits^T h_f, db = sum dlogits, dh_f = dlogits @ W.
        linear_backward_weight(
            g,
            lm_w,
            v,
            d,
            &self.logits,
            View::dense(0, r, v),
            &self.final_h,
            View::dense(0, r, d),
        );
        column_sums(&self.logits, &mut g[lm_b..][..v]);
        let s = &mut self.scratch;
        linear_backward_input(
            &mut s.dhf,
            View::dense(0, r, d),
            &self.logits,
            View::dense(0, r, v),
            w,
            lm_w,
            v,
            d,
            false,
        );
        match outer.ln_f {
            Some(ln) => {
                s.dxq.fill(0.0);
                let (gw, gb) = split_two(g, ln.w, ln.b, d);
                math::layer_norm_backward(
                    &s.dhf,
                    &self.resid[c.n_layers],
                    &self.final_stats,
                    &w[ln.w..][..d],
                    &mut s.dxq,
                    gw,
                    gb,
                );
            }
            None => s.dxq.copy_from_slice(&s.dhf),
        }

        for l in (0..c.n_layers).rev() {
            let rows = Rows::of_layer(l, c.n_layers, b, t, self.objective.every_position());
            let nq = rows.n;
            let shape = Shape {
                seq: t,
                heads: c.n_heads,
                d_head: c.d_head(),
                queries: if nq == n { t } else { 1 },
                scale: (1.0 / (c.d_head() as f64).sqrt()) as f32,
                kind: c.attention,
            };
            let p = block_offsets[l];
            let cache = &self.layers[l];
            let x = &self.resid[l];
            // Gradient of the block output at the computed rows.
            let last = l + 1 == c.n_layers;
            let dout: &[f32] = if last { &s.dxq } else { &s.dx };
            let on = self.dropout_on;
            let am = cache.attn_mask.as_deref().filter(|_| on);
            let mm = cache.mlp_mask.as_deref().filter(|_| on);
            math::for_rows2(
                &mut s.da[..nq * d],
                &mut s.dmo[..nq * d],
                d,
                |i, da, dmo| {
                    let r = rows.at(i);
                    let g_row = &dout[i * d..][..d];
                    match am {
                        Some(ka) => {
                            for ((o, g), k) in da.iter_mut().zip(g_row).zip(&ka[r * d..][..d]) {
                                *o = g * k;
                            }
                        }
                        None => da.copy_from_slice(g_row),
                    }
                    match mm {
                        Some(km) => {
                            for ((o, g), k) in dmo.iter_mut().zip(g_row).zip(&km[r * d..][..d]) {
                                *o = g * k;
                            }
                        }
                        None => dmo.copy_from_slice(g_row),
                    }
                },
            );
            // MLP (dh of the computed rows; the other rows start at 0).
            if nq != n || p.mlp.is_none() {
                s.dh.fill(0.0);
            }
            if let Some(mp) = p.mlp {
                let hq = View::rows(rows.first * d, nq, d, rows.step * d);
                linear_backward_weight(
                    g,
                    mp.fc_out_w,
                    d,
                    m,
                    &s.dmo,
                    View::dense(0, nq, d),
                    &cache.g,
                    View::dense(0, nq, m),
                );
                column_sums(&s.dmo[..nq * d], &mut g[mp.fc_out_b..][..d]);
                linear_backward_input(
                    &mut s.dg,
                    View::dense(0, nq, m),
                    &s.dmo,
                    View::dense(0, nq, d),
                    w,
                    mp.fc_out_w,
                    d,
                    m,
                    false,
                );
                for (dg, gp) in s.dg[..nq * m].iter_mut().zip(&cache.gp) {
                    *dg *= gp;
                }
                linear_backward_weight(
                    g,
                    mp.fc_in_w,
                    m,
                    d,
                    &s.dg,
                    View::dense(0, nq, m),
                    &cache.h,
                    hq,
                );
                column_sums(&s.dg[..nq * m], &mut g[mp.fc_in_b..][..m]);
                linear_backward_input(
                    &mut s.dh,
                    hq,
                    &s.dg,
                    View::dense(0, nq, m),
                    w,
                    mp.fc_in_w,
                    m,
                    d,
                    false,
                );
            }
            // Attention output projection.
            linear_backward_weight(
                g,
                p.o,
                d,
                d,
                &s.da,
                View::dense(0, nq, d),
                &cache.z,
                View::dense(0, nq, d),
            );
            linear_backward_input(
                &mut s.dz,
                View::dense(0, nq, d),
                &s.da,
                View::dense(0, nq, d),
                w,
                p.o,
                d,
                d,
                false,
            );
            let rope = self.ropes[l].as_ref();
            let per_row_pattern = c.n_heads * t * t;
            let pmask = cache.pattern_mask.as_deref().filter(|_| on);
            let dz = &s.dz;
            s.dqkv
                .par_chunks_mut(t * 3 * d)
                .zip(s.dp.par_chunks_mut(2 * t * t))
                .enumerate()
                .for_each(|(bi, (dqkv, dp))| {
                    let mask = pmask.map(|m| &m[bi * per_row_pattern..][..per_row_pattern]);
                    attention::backward(
                        shape,
                        rope,
                        &cache.qkv[bi * t * 3 * d..][..t * 3 * d],
                        &cache.pattern[bi * per_row_pattern..][..per_row_pattern],
                        mask,
                        &dz[bi * shape.queries * d..][..shape.queries * d],
                        dqkv,
                        dp,
                    );
                });
            // q, k, v projections: dW = dqkv^T h, dh += dqkv @ W.
            linear_backward_weight(
                g,
                p.q,
                3 * d,
                d,
                &s.dqkv,
                View::dense(0, n, 3 * d),
                &cache.h,
                View::dense(0, n, d),
            );
            linear_backward_input(
                &mut s.dh,
                View::dense(0, n, d),
                &s.dqkv,
                View::dense(0, n, 3 * d),
                w,
                p.q,
                3 * d,
                d,
                true,
            );
            // Residual and LayerNorm: dx_in = dout (at the computed rows) + LN'(dh).
            if last {
                s.dx.fill(0.0);
                for i in 0..nq {
                    let r = rows.at(i);
                    s.dx[r * d..][..d].copy_from_slice(&s.dxq[i * d..][..d]);
                }
            }
            match p.ln {
                Some(ln) => {
                    let (gw, gb) = split_two(g, ln.w, ln.b, d);
                    math::layer_norm_backward(
                        &s.dh,
                        x,
                        &cache.stats,
                        &w[ln.w..][..d],
                        &mut s.dx,
                        gw,
                        gb,
                    );
                }
                None => {
                    for (dx, dh) in s.dx.iter_mut().zip(&s.dh) {
                        *dx += dh;
                    }
                }
            }
        }

        // Embeddings (the gradient of a tied unembedding is already in place).
        let wte = outer.wte;
        if !c.tied_embeddings {
            g[wte..][..c.vocab_size * d].fill(0.0);
        }
        if let Some(mask) = self.emb_mask.as_ref().filter(|_| self.dropout_on) {
            for (x, k) in s.dx.iter_mut().zip(mask) {
                *x *= k;
            }
        }
        for (r, &id) in ids.iter().enumerate() {
            let row = &mut g[wte + id as usize * d..][..d];
            for (o, x) in row.iter_mut().zip(&s.dx[r * d..][..d]) {
                *o += x;
            }
        }
        // A learned position table: each position's gradient lands on the row it read.
        if let (Absolute::Learned(rows), Some(wpe)) = (&self.absolute, outer.wpe) {
            let table_len = self.grads.layout.params().specs()
                [self.grads.layout.outer().wpe.expect("a learned table")]
            .len();
            let g = &mut self.grads.values;
            g[wpe..][..table_len].fill(0.0);
            for r in 0..n {
                let row = &mut g[wpe + rows[r % t] * d..][..d];
                for (o, x) in row.iter_mut().zip(&s.dx[r * d..][..d]) {
                    *o += x;
                }
            }
        }
    }
}

/// Two disjoint `len`-long slices of `g` starting at `a` < `b`.
fn split_two(g: &mut [f32], a: usize, b: usize, len: usize) -> (&mut [f32], &mut [f32]) {
    assert!(a + len <= b);
    let (lo, hi) = g.split_at_mut(b);
    (&mut lo[a..][..len], &mut hi[..len])
}
