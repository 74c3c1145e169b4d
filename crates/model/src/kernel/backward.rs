//! The hand-written backward pass of the objective's cross-entropy as named steps, from the
//! activations cached by the forward pass: the head (unembedding, final LayerNorm), each block
//! in reverse (residual split, MLP, output projection, attention, the q/k/v projection,
//! LayerNorm) and the embedding gradient.

use rayon::prelude::*;

use super::attention::{self, RopeTable};
use super::buffers::{Absolute, Buffers, LayerCache, Scratch};
use super::forward::Masks;
use super::linear::{linear_backward_input, linear_backward_weight};
use super::math::{self, column_sums};
use super::plan::BlockPlan;
use super::{FlatParams, FusedStep, View};

impl FusedStep {
    /// Backward pass from the logit gradients in `self.buf.logits`.
    pub(super) fn backward_pass(&mut self, params: &FlatParams) {
        let w = &params.values;
        self.head_backward(w);
        for l in (0..self.plans.len()).rev() {
            self.block_backward(l, w);
        }
        self.embed_backward();
    }

    /// Unembedding: dW = dlogits^T h_f, db = sum dlogits, dh_f = dlogits @ W; then the final
    /// LayerNorm, leaving the gradient of the last block's output rows in `dxq` [R, d].
    fn head_backward(&mut self, w: &[f32]) {
        let (d, v) = (self.config.d_model, self.config.out_dim());
        let g = &mut self.grads.values;
        let Buffers {
            resid,
            final_stats,
            final_h,
            logits,
            scratch,
            ..
        } = &mut self.buf;
        let r = final_h.len() / d;
        let (logit_rows, h_rows) = (View::dense(0, r, v), View::dense(0, r, d));
        let unembedding = *self.outer.unembedding(); // [out, d]
        linear_backward_weight(
            self.precision,
            g,
            unembedding,
            logits,
            logit_rows,
            final_h,
            h_rows,
        );
        column_sums(logits, &mut g[self.outer.lm_head_b.range()]);
        let dhf = &mut scratch.dhf;
        linear_backward_input(
            self.precision,
            dhf,
            h_rows,
            logits,
            logit_rows,
            w,
            unembedding,
            false,
        );
        let dxq = &mut scratch.dxq;
        match self.outer.ln_f {
            Some(ln) => {
                dxq.fill(0.0);
                let (gw, gb) = split_two(g, ln.w.offset, ln.b.offset, d);
                let last = resid.last().expect("at least one block");
                let lw = &w[ln.w.range()];
                math::layer_norm_backward(dhf, last, final_stats, lw, dxq, gw, gb);
            }
            None => dxq.copy_from_slice(dhf),
        }
    }

    /// Block `l`: from the gradient of its output rows (`dxq` for the last block, `dx`
    /// otherwise), the gradients of its weights and of its input, left in `dx` [N, d].
    fn block_backward(&mut self, l: usize, w: &[f32]) {
        let plan = &self.plans[l];
        let last = l + 1 == self.plans.len();
        let g = &mut self.grads.values;
        let Buffers {
            layers,
            resid,
            scratch,
            ..
        } = &mut self.buf;
        let (cache, x) = (&layers[l], &resid[l]);
        let Scratch {
            dx,
            dh,
            dqkv,
            dz,
            da,
            dmo,
            dg,
            dxq,
            dp,
            ..
        } = scratch;
        let dout: &[f32] = if last { dxq } else { dx };
        residual_backward(plan, dout, Masks::of(cache, self.dropout_on), da, dmo);
        mlp_backward(plan, w, g, cache, dmo, dg, dh);
        // Attention output projection: dWo = da^T z, dz = da @ Wo.
        let rows = View::dense(0, plan.rows.n, plan.d());
        linear_backward_weight(plan.precision, g, plan.w.o, da, rows, &cache.z, rows);
        linear_backward_input(plan.precision, dz, rows, da, rows, w, plan.w.o, false);
        let rope = self.ropes[l].as_ref();
        attention_backward(plan, rope, cache, self.dropout_on, dz, dqkv, dp);
        qkv_backward(plan, w, g, cache, dqkv, dh);
        // The residual: dx_in = dout at the computed rows (already in dx below the last
        // block), then + LN'(dh).
        if last {
            let d = plan.d();
            dx.fill(0.0);
            for i in 0..plan.rows.n {
                let r = plan.rows.at(i);
                dx[r * d..][..d].copy_from_slice(&dxq[i * d..][..d]);
            }
        }
        norm_backward(plan, w, g, x, cache, dh, dx);
    }

    /// The embedding (the gradient of a tied unembedding is already in place, and the
    /// embedding's adds to it) and a learned position table: each position's gradient lands
    /// on the row it read.
    fn embed_backward(&mut self) {
        let (d, t) = (self.config.d_model, self.seq);
        let g = &mut self.grads.values;
        let Buffers {
            emb_mask, scratch, ..
        } = &mut self.buf;
        let dx = &mut scratch.dx; // [N, d]
        let wte = self.outer.wte; // [vocab, d]
        if !self.config.tied_embeddings {
            g[wte.range()].fill(0.0);
        }
        if let Some(mask) = emb_mask.as_ref().filter(|_| self.dropout_on) {
            for (x, k) in dx.iter_mut().zip(mask) {
                *x *= k;
            }
        }
        for (r, &id) in self.ids.iter().enumerate() {
            let row = &mut g[wte.offset + id as usize * d..][..d];
            for (o, x) in row.iter_mut().zip(&dx[r * d..][..d]) {
                *o += x;
            }
        }
        if let (Absolute::Learned(rows), Some(wpe)) = (&self.absolute, self.outer.wpe) {
            g[wpe.range()].fill(0.0);
            for r in 0..self.ids.len() {
                let row = &mut g[wpe.offset + rows[r % t] * d..][..d];
                for (o, x) in row.iter_mut().zip(&dx[r * d..][..d]) {
                    *o += x;
                }
            }
        }
    }
}

/// The block output's gradient `dout` [NQ, d] through each branch's dropout mask: `da` for
/// the attention output, `dmo` for the MLP output.
fn residual_backward(
    plan: &BlockPlan,
    dout: &[f32],
    masks: Masks,
    da: &mut [f32],
    dmo: &mut [f32],
) {
    let (nq, d) = (plan.rows.n, plan.d());
    math::for_rows2(&mut da[..nq * d], &mut dmo[..nq * d], d, |i, da, dmo| {
        let r = plan.rows.at(i);
        let g_row = &dout[i * d..][..d];
        for (out, mask) in [(da, masks.attn), (dmo, masks.mlp)] {
            match mask {
                Some(k) => {
                    for ((o, g), k) in out.iter_mut().zip(g_row).zip(&k[r * d..][..d]) {
                        *o = g * k;
                    }
                }
                None => out.copy_from_slice(g_row),
            }
        }
    });
}

/// The MLP's weight and bias gradients from `dmo` [NQ, d], and `dh` [N, d] = the gradient of
/// its input at the block's rows (0 elsewhere, and everywhere without an MLP). `dg` [NQ, m] is
/// scratch.
fn mlp_backward(
    plan: &BlockPlan,
    w: &[f32],
    g: &mut [f32],
    cache: &LayerCache<Vec<f32>>,
    dmo: &[f32],
    dg: &mut [f32],
    dh: &mut [f32],
) {
    if !plan.every_row() || plan.w.mlp.is_none() {
        dh.fill(0.0);
    }
    let Some(mp) = plan.w.mlp else {
        return;
    };
    let (nq, d, m) = (plan.rows.n, plan.d(), plan.m());
    let (rows_d, rows_m, hq) = (
        View::dense(0, nq, d),
        View::dense(0, nq, m),
        plan.rows.view(d, d),
    );
    // fc_out: dW = dmo^T g, db = sum dmo, dg = dmo @ W, then through GELU.
    linear_backward_weight(
        plan.precision,
        g,
        mp.fc_out_w,
        dmo,
        rows_d,
        &cache.g,
        rows_m,
    );
    column_sums(&dmo[..nq * d], &mut g[mp.fc_out_b.range()]);
    linear_backward_input(
        plan.precision,
        dg,
        rows_m,
        dmo,
        rows_d,
        w,
        mp.fc_out_w,
        false,
    );
    for (dg, gp) in dg[..nq * m].iter_mut().zip(&cache.gp) {
        *dg *= gp;
    }
    // fc_in: dW = dg^T hq, db = sum dg, dh = dg @ W.
    linear_backward_weight(plan.precision, g, mp.fc_in_w, dg, rows_m, &cache.h, hq);
    column_sums(&dg[..nq * m], &mut g[mp.fc_in_b.range()]);
    linear_backward_input(plan.precision, dh, hq, dg, rows_m, w, mp.fc_in_w, false);
}

/// Attention backward, one batch row per task: `dqkv` [N, 3d] (gradients of the un-rotated q,
/// k and v) from `dz` [NQ, d]; `dp` is scratch.
fn attention_backward(
    plan: &BlockPlan,
    rope: Option<&RopeTable>,
    cache: &LayerCache<Vec<f32>>,
    on: bool,
    dz: &[f32],
    dqkv: &mut [f32],
    dp: &mut [f32],
) {
    let s = plan.attn;
    let (t, d) = (s.seq, plan.d());
    let per_row = s.heads * t * t; // [H, T, T] of one batch row
    let pmask = cache.pattern_mask.as_deref().filter(|_| on);
    dqkv.par_chunks_mut(t * 3 * d)
        .zip(dp.par_chunks_mut(2 * t * t))
        .enumerate()
        .for_each(|(bi, (dqkv, dp))| {
            let saved = attention::Saved {
                qkv: &cache.qkv[bi * t * 3 * d..][..t * 3 * d],
                pattern: &cache.pattern[bi * per_row..][..per_row],
                mask: pmask.map(|m| &m[bi * per_row..][..per_row]),
            };
            let dz = &dz[bi * s.queries * d..][..s.queries * d];
            attention::backward(s, rope, saved, dz, dqkv, dp);
        });
}

/// The q, k, v projection: dW = dqkv^T h, dh += dqkv @ W.
fn qkv_backward(
    plan: &BlockPlan,
    w: &[f32],
    g: &mut [f32],
    cache: &LayerCache<Vec<f32>>,
    dqkv: &[f32],
    dh: &mut [f32],
) {
    let (n, d) = (plan.tokens, plan.d());
    let (rows_qkv, rows_h) = (View::dense(0, n, 3 * d), View::dense(0, n, d));
    linear_backward_weight(
        plan.precision,
        g,
        plan.w.qkv,
        dqkv,
        rows_qkv,
        &cache.h,
        rows_h,
    );
    linear_backward_input(
        plan.precision,
        dh,
        rows_h,
        dqkv,
        rows_qkv,
        w,
        plan.w.qkv,
        true,
    );
}

/// LayerNorm backward: dx += LN'(dh) with ln_1's gradients (dx += dh without LayerNorm).
fn norm_backward(
    plan: &BlockPlan,
    w: &[f32],
    g: &mut [f32],
    x: &[f32],
    cache: &LayerCache<Vec<f32>>,
    dh: &[f32],
    dx: &mut [f32],
) {
    match plan.w.ln {
        Some(ln) => {
            let (gw, gb) = split_two(g, ln.w.offset, ln.b.offset, plan.d());
            let lw = &w[ln.w.range()];
            math::layer_norm_backward(dh, x, &cache.stats, lw, dx, gw, gb);
        }
        None => {
            for (dx, dh) in dx.iter_mut().zip(dh) {
                *dx += dh;
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
