//! The fused forward pass as named steps, caching what the backward pass reads: the embedding,
//! each block (LayerNorm, the q/k/v projection, attention, the output projection, the MLP and
//! the residual sum; the last block at the query rows only) and the head (final LayerNorm and
//! unembedding).

use rayon::prelude::*;

use super::attention::{self, RopeTable};
use super::buffers::{Absolute, Buffers, LayerCache};
use super::linear::linear_forward;
use super::math::{self, for_rows, gelu_forward};
use super::plan::BlockPlan;
use super::{FlatParams, FusedStep, View};
use crate::ops::Dropout;
use crate::Result;

impl FusedStep {
    /// Forward pass: logits [rows, out] for `ids` [batch, seq] (rows: the last position of each
    /// sequence, or every position for the every-position objective),
    /// caching what the backward pass needs. `dropout` draws its masks in the order of
    /// [`crate::GptJ::forward_last`].
    pub fn forward(
        &mut self,
        params: &FlatParams,
        ids: &[u32],
        dropout: Option<&mut Dropout>,
    ) -> Result<&[f32]> {
        self.check_inputs(params, ids)?;
        self.ids.copy_from_slice(ids);
        self.forward_done = false;
        let dropout = dropout.filter(|d| d.p() > 0.0);
        self.dropout_on = dropout.is_some();
        if let Some(drop) = dropout {
            self.draw_masks(drop);
        }
        let w = &params.values;
        self.embed_forward(w);
        for l in 0..self.plans.len() {
            self.block_forward(l, w);
        }
        self.head_forward(w);
        self.forward_done = true;
        Ok(&self.buf.logits)
    }

    /// Draws every dropout mask of the step: the embedding's, then each block's pattern,
    /// attention-output and MLP-output masks.
    fn draw_masks(&mut self, drop: &mut Dropout) {
        let rows = self.ids.len() * self.config.d_model;
        let buf = &mut self.buf;
        drop.fill_mask(buf.emb_mask.get_or_insert_with(|| vec![0.0; rows]));
        for (cache, plan) in buf.layers.iter_mut().zip(&self.plans) {
            let pattern = cache.pattern.len();
            drop.fill_mask(cache.pattern_mask.get_or_insert_with(|| vec![0.0; pattern]));
            drop.fill_mask(cache.attn_mask.get_or_insert_with(|| vec![0.0; rows]));
            if plan.w.mlp.is_some() {
                drop.fill_mask(cache.mlp_mask.get_or_insert_with(|| vec![0.0; rows]));
            }
        }
    }

    /// x_0 = W_te[ids] (+ the absolute position vectors), times the embedding dropout mask.
    fn embed_forward(&mut self, w: &[f32]) {
        let (d, t) = (self.config.d_model, self.seq);
        let wte = self.outer.wte.offset;
        let x0 = &mut self.buf.resid[0];
        for (r, &id) in self.ids.iter().enumerate() {
            let x = &mut x0[r * d..][..d]; // [d]
            x.copy_from_slice(&w[wte + id as usize * d..][..d]);
            let pe = match &self.absolute {
                Absolute::None => continue,
                Absolute::Sinusoid(table) => &table[(r % t) * d..][..d],
                Absolute::Learned(rows) => {
                    let wpe = self.outer.wpe.expect("a learned table").offset;
                    &w[wpe + rows[r % t] * d..][..d]
                }
            };
            for (x, p) in x.iter_mut().zip(pe) {
                *x += p;
            }
        }
        if let Some(mask) = self.buf.emb_mask.as_ref().filter(|_| self.dropout_on) {
            for (x, k) in x0.iter_mut().zip(mask) {
                *x *= k;
            }
        }
    }

    /// Block `l` (GPT-J's parallel block): x_{l+1} = x_l + attn(LN(x_l)) + mlp(LN(x_l)) at the
    /// block's rows.
    fn block_forward(&mut self, l: usize, w: &[f32]) {
        let plan = &self.plans[l];
        let on = self.dropout_on;
        let Buffers {
            layers,
            resid,
            scratch,
            ..
        } = &mut self.buf;
        let (before, after) = resid.split_at_mut(l + 1);
        let (x, next) = (&before[l], &mut after[0]); // [N, d], [NQ, d]
        let cache = &mut layers[l];
        norm_forward(plan, w, x, cache);
        qkv_forward(plan, w, cache);
        attention_forward(plan, self.ropes[l].as_ref(), cache, &mut scratch.dp, on);
        // attn = z @ Wo^T.
        let (nq, d) = (plan.rows.n, plan.d());
        let rows = View::dense(0, nq, d);
        linear_forward(
            plan.precision,
            &mut scratch.a,
            rows,
            &cache.z,
            rows,
            w,
            plan.w.o,
        );
        mlp_forward(plan, w, cache, &mut scratch.mo);
        let mlp = plan
            .w
            .mlp
            .map(|mp| (&scratch.mo[..], &w[mp.fc_out_b.range()]));
        residual_forward(plan, x, &scratch.a, mlp, Masks::of(cache, on), next);
    }

    /// The final LayerNorm (if any) and the unembedding of the last block's rows.
    fn head_forward(&mut self, w: &[f32]) {
        let (d, v) = (self.config.d_model, self.config.out_dim());
        let Buffers {
            resid,
            final_stats,
            final_h,
            logits,
            ..
        } = &mut self.buf;
        let last = resid.last().expect("at least one block"); // [R, d]
        match self.outer.ln_f {
            Some(ln) => math::layer_norm_forward(
                last,
                &w[ln.w.range()],
                &w[ln.b.range()],
                self.config.ln_eps as f32,
                final_h,
                final_stats,
            ),
            None => final_h.copy_from_slice(last),
        }
        let r = final_h.len() / d;
        let unembedding = *self.outer.unembedding(); // [out, d]
        linear_forward(
            self.precision,
            logits,
            View::dense(0, r, v),
            final_h,
            View::dense(0, r, d),
            w,
            unembedding,
        );
        let bias = &w[self.outer.lm_head_b.range()];
        for row in logits.chunks_exact_mut(v) {
            for (x, b) in row.iter_mut().zip(bias) {
                *x += b;
            }
        }
    }
}

/// The dropout masks of a block's two outputs, when the last forward drew them.
#[derive(Clone, Copy)]
pub(super) struct Masks<'a> {
    /// [N, d]
    pub attn: Option<&'a [f32]>,
    /// [N, d]
    pub mlp: Option<&'a [f32]>,
}

impl<'a> Masks<'a> {
    /// The masks of `cache` if `on` (the last forward had dropout).
    pub fn of(cache: &'a LayerCache<Vec<f32>>, on: bool) -> Self {
        Masks {
            attn: cache.attn_mask.as_deref().filter(|_| on),
            mlp: cache.mlp_mask.as_deref().filter(|_| on),
        }
    }
}

/// h = LN(x) at every row (the identity without LayerNorm), keeping the row statistics.
fn norm_forward(plan: &BlockPlan, w: &[f32], x: &[f32], cache: &mut LayerCache<Vec<f32>>) {
    match plan.w.ln {
        Some(ln) => math::layer_norm_forward(
            x,
            &w[ln.w.range()],
            &w[ln.b.range()],
            plan.eps,
            &mut cache.h,
            &mut cache.stats,
        ),
        None => cache.h.copy_from_slice(x),
    }
}

/// q, k, v = h @ [Wq; Wk; Wv]^T: k and v at every position, q at the block's rows.
fn qkv_forward(plan: &BlockPlan, w: &[f32], cache: &mut LayerCache<Vec<f32>>) {
    let (n, d) = (plan.tokens, plan.d());
    let h = View::dense(0, n, d);
    if plan.every_row() {
        linear_forward(
            plan.precision,
            &mut cache.qkv,
            View::dense(0, n, 3 * d),
            &cache.h,
            h,
            w,
            plan.w.qkv,
        );
        return;
    }
    let kv = View::rows(d, n, 2 * d, 3 * d);
    linear_forward(
        plan.precision,
        &mut cache.qkv,
        kv,
        &cache.h,
        h,
        w,
        plan.w.kv,
    );
    let (q, hq) = (plan.rows.view(3 * d, d), plan.rows.view(d, d));
    linear_forward(plan.precision, &mut cache.qkv, q, &cache.h, hq, w, plan.w.q);
}

/// RoPE, scores, causal weights, pattern dropout and the weighted sum of values, one batch row
/// per task: z [NQ, d] from qkv (rotated in place), keeping the pattern.
fn attention_forward(
    plan: &BlockPlan,
    rope: Option<&RopeTable>,
    cache: &mut LayerCache<Vec<f32>>,
    dp: &mut [f32],
    on: bool,
) {
    let s = plan.attn;
    let (t, d) = (s.seq, plan.d());
    let per_row = s.heads * t * t; // [H, T, T] of one batch row
    let pmask = cache.pattern_mask.as_deref().filter(|_| on);
    cache
        .qkv
        .par_chunks_mut(t * 3 * d)
        .zip(cache.pattern.par_chunks_mut(per_row))
        .zip(cache.z.par_chunks_mut(s.queries * d))
        .zip(dp.par_chunks_mut(2 * t * t))
        .enumerate()
        .for_each(|(bi, (((qkv, pattern), z), scratch))| {
            let mask = pmask.map(|m| &m[bi * per_row..][..per_row]);
            attention::forward(s, rope, qkv, pattern, mask, z, scratch);
        });
}

/// hidden = GELU(hq @ Win^T + b_in) (kept with its derivative); mo = hidden @ Wout^T (b_out is
/// added in the residual sum). Nothing in an attention-only block.
fn mlp_forward(plan: &BlockPlan, w: &[f32], cache: &mut LayerCache<Vec<f32>>, mo: &mut [f32]) {
    let Some(mp) = plan.w.mlp else {
        return;
    };
    let (nq, d, m) = (plan.rows.n, plan.d(), plan.m());
    let hq = plan.rows.view(d, d);
    linear_forward(
        plan.precision,
        &mut cache.g,
        View::dense(0, nq, m),
        &cache.h,
        hq,
        w,
        mp.fc_in_w,
    );
    let b_in = &w[mp.fc_in_b.range()];
    for_rows(&mut cache.g, m, |_, row| {
        for (x, bias) in row.iter_mut().zip(b_in) {
            *x += bias;
        }
    });
    gelu_forward(&mut cache.g, &mut cache.gp);
    let rows = View::dense(0, nq, d);
    linear_forward(
        plan.precision,
        mo,
        rows,
        &cache.g,
        View::dense(0, nq, m),
        w,
        mp.fc_out_w,
    );
}

/// next = x + attn * mask_a (+ (mo + b_out) * mask_m) at the block's rows; `mlp` holds the
/// MLP output [NQ, d] and its bias [d].
fn residual_forward(
    plan: &BlockPlan,
    x: &[f32],
    a: &[f32],
    mlp: Option<(&[f32], &[f32])>,
    masks: Masks,
    next: &mut [f32],
) {
    let (nq, d) = (plan.rows.n, plan.d());
    for_rows(&mut next[..nq * d], d, |i, out| {
        let r = plan.rows.at(i);
        let xr = &x[r * d..][..d];
        let ar = &a[i * d..][..d];
        match masks.attn {
            Some(ka) => {
                let ka = &ka[r * d..][..d];
                for j in 0..d {
                    out[j] = xr[j] + ar[j] * ka[j];
                }
            }
            None => {
                for j in 0..d {
                    out[j] = xr[j] + ar[j];
                }
            }
        }
        let Some((mo, b_out)) = mlp else {
            return;
        };
        let mr = &mo[i * d..][..d];
        match masks.mlp {
            Some(km) => {
                let km = &km[r * d..][..d];
                for j in 0..d {
                    out[j] += (mr[j] + b_out[j]) * km[j];
                }
            }
            None => {
                for j in 0..d {
                    out[j] += mr[j] + b_out[j];
                }
            }
        }
    });
}
