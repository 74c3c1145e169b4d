//! The fused forward pass: embeddings, blocks (the last one at the query position only),
//! final LayerNorm and unembedding, caching what the backward pass reads.

use rayon::prelude::*;

use super::attention::{self, Shape};
use super::linear::linear_forward;
use super::math::{self, for_rows, gelu_forward};
use super::{Absolute, FlatParams, FusedStep, Rows, View};
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
        let mut dropout = dropout.filter(|d| d.p() > 0.0);
        self.dropout_on = dropout.is_some();
        let c = self.config.clone();
        let (d, m, v) = (c.d_model, c.d_mlp, c.out_dim());
        let r = self.out_rows;
        let (b, t) = (self.batch, self.seq);
        let n = b * t;
        let w = &params.values;

        // Embeddings, plus the absolute position vectors if any.
        let outer = self.outer_offsets();
        let wte = outer.wte;
        for (r, &id) in ids.iter().enumerate() {
            let x = &mut self.resid[0][r * d..][..d];
            x.copy_from_slice(&w[wte + id as usize * d..][..d]);
            let pe = match &self.absolute {
                Absolute::None => continue,
                Absolute::Sinusoid(table) => &table[(r % t) * d..][..d],
                Absolute::Learned(rows) => {
                    &w[outer.wpe.expect("a learned table") + rows[r % t] * d..][..d]
                }
            };
            for (x, p) in x.iter_mut().zip(pe) {
                *x += p;
            }
        }
        if let Some(drop) = dropout.as_deref_mut() {
            let mask = self.emb_mask.get_or_insert_with(|| vec![0.0; n * d]);
            drop.fill_mask(mask);
            for (x, k) in self.resid[0].iter_mut().zip(mask.iter()) {
                *x *= k;
            }
        }

        for l in 0..c.n_layers {
            let rows = Rows::of_layer(l, c.n_layers, b, t, self.objective.every_position());
            let shape = Shape {
                seq: t,
                heads: c.n_heads,
                d_head: c.d_head(),
                queries: if rows.n == n { t } else { 1 },
                scale: (1.0 / (c.d_head() as f64).sqrt()) as f32,
                kind: c.attention,
            };
            let p = self.block_offsets(l);
            // W_q, W_k, W_v are adjacent (checked in `FusedStep::new`): one [3d, d] matrix at wq.
            let (wq, wo) = (p.q, p.o);
            let (before, after) = self.resid.split_at_mut(l + 1);
            let x = &before[l];
            let next = &mut after[0];
            let cache = &mut self.layers[l];

            match p.ln {
                Some(ln) => math::layer_norm_forward(
                    x,
                    &w[ln.w..][..d],
                    &w[ln.b..][..d],
                    c.ln_eps as f32,
                    &mut cache.h,
                    &mut cache.stats,
                ),
                None => cache.h.copy_from_slice(x),
            }
            // q, k, v = h @ [Wq; Wk; Wv]^T (q at the computed rows only).
            if rows.n == n {
                linear_forward(
                    &mut cache.qkv,
                    View::dense(0, n, 3 * d),
                    &cache.h,
                    View::dense(0, n, d),
                    w,
                    wq,
                    3 * d,
                    d,
                );
            } else {
                linear_forward(
                    &mut cache.qkv,
                    View::rows(d, n, 2 * d, 3 * d),
                    &cache.h,
                    View::dense(0, n, d),
                    w,
                    wq + d * d,
                    2 * d,
                    d,
                );
                linear_forward(
                    &mut cache.qkv,
                    View::rows(rows.first * 3 * d, rows.n, d, rows.step * 3 * d),
                    &cache.h,
                    View::rows(rows.first * d, rows.n, d, rows.step * d),
                    w,
                    wq,
                    d,
                    d,
                );
            }
            if let Some(drop) = dropout.as_deref_mut() {
                let pm = cache
                    .pattern_mask
                    .get_or_insert_with(|| vec![0.0; b * c.n_heads * t * t]);
                drop.fill_mask(pm);
                drop.fill_mask(cache.attn_mask.get_or_insert_with(|| vec![0.0; n * d]));
                if p.mlp.is_some() {
                    drop.fill_mask(cache.mlp_mask.get_or_insert_with(|| vec![0.0; n * d]));
                }
            }
            let rope = self.ropes[l].as_ref();
            let per_row_pattern = c.n_heads * t * t;
            let on = self.dropout_on;
            let pmask = cache.pattern_mask.as_deref().filter(|_| on);
            cache
                .qkv
                .par_chunks_mut(t * 3 * d)
                .zip(cache.pattern.par_chunks_mut(per_row_pattern))
                .zip(cache.z.par_chunks_mut(shape.queries * d))
                .zip(self.scratch.dp.par_chunks_mut(2 * t * t))
                .enumerate()
                .for_each(|(bi, (((qkv, pattern), z), scratch))| {
                    let mask = pmask.map(|m| &m[bi * per_row_pattern..][..per_row_pattern]);
                    attention::forward(shape, rope, qkv, pattern, mask, z, scratch);
                });
            let nq = rows.n;
            let hq = View::rows(rows.first * d, nq, d, rows.step * d);
            // attn = z @ Wo^T.
            let a = &mut self.scratch.a;
            linear_forward(
                a,
                View::dense(0, nq, d),
                &cache.z,
                View::dense(0, nq, d),
                w,
                wo,
                d,
                d,
            );
            // hidden = GELU(hq @ Win^T + b_in); mlp = hidden @ Wout^T (b_out added below).
            if let Some(mp) = p.mlp {
                linear_forward(
                    &mut cache.g,
                    View::dense(0, nq, m),
                    &cache.h,
                    hq,
                    w,
                    mp.fc_in_w,
                    m,
                    d,
                );
                let b_in = &w[mp.fc_in_b..][..m];
                for_rows(&mut cache.g, m, |_, row| {
                    for (x, bias) in row.iter_mut().zip(b_in) {
                        *x += bias;
                    }
                });
                gelu_forward(&mut cache.g, &mut cache.gp);
                linear_forward(
                    &mut self.scratch.mo,
                    View::dense(0, nq, d),
                    &cache.g,
                    View::dense(0, nq, m),
                    w,
                    mp.fc_out_w,
                    d,
                    m,
                );
            }
            let b_out = p.mlp.map(|mp| &w[mp.fc_out_b..][..d]);
            let am = cache.attn_mask.as_deref().filter(|_| on);
            let mm = cache.mlp_mask.as_deref().filter(|_| on);
            let (a, mo) = (&self.scratch.a, &self.scratch.mo);
            for_rows(&mut next[..nq * d], d, |i, out| {
                let r = rows.at(i);
                let xr = &x[r * d..][..d];
                let ar = &a[i * d..][..d];
                match am {
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
                let Some(b_out) = b_out else {
                    return;
                };
                let mr = &mo[i * d..][..d];
                match mm {
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

        // Final LayerNorm (if any) and unembedding at the last position.
        let (lm_w, lm_b) = (*outer.unembedding(), outer.lm_head_b);
        let last = &self.resid[c.n_layers];
        match outer.ln_f {
            Some(ln) => math::layer_norm_forward(
                last,
                &w[ln.w..][..d],
                &w[ln.b..][..d],
                c.ln_eps as f32,
                &mut self.final_h,
                &mut self.final_stats,
            ),
            None => self.final_h.copy_from_slice(last),
        }
        linear_forward(
            &mut self.logits,
            View::dense(0, r, v),
            &self.final_h,
            View::dense(0, r, d),
            w,
            lm_w,
            v,
            d,
        );
        let bias = &w[lm_b..][..v];
        for row in self.logits.chunks_exact_mut(v) {
            for (x, bb) in row.iter_mut().zip(bias) {
                *x += bb;
            }
        }
        self.forward_done = true;
        Ok(&self.logits)
    }
}
