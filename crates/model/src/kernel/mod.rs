//! A dedicated CPU training kernel for the GPT-J model (llm.c-style): one forward with cached
//! activations and one hand-written backward of the last-token cross-entropy, over flat f32
//! parameters in [`GptJ::names`] order, with all buffers allocated once.
//!
//! It computes the same function as [`GptJ::forward_last`] + [`crate::ops::cross_entropy`]
//! (same parameters, same dropout masks drawn in the same order) and is checked against
//! candle's autograd on that path in the tests. Fusions: one q/k/v projection, RoPE + scores +
//! causal softmax + dropout + AV per batch row, bias + exact GELU + its derivative in one pass,
//! LayerNorm with saved statistics; the last block works at the query position only (its keys
//! and values at every position). Hooks are not supported here: analysis uses the candle path.

mod attention;
mod gemm;
mod math;

pub use gemm::{matmul, View};

use rayon::prelude::*;

use crate::ops::Dropout;
use crate::{GptJ, ModelConfig, ModelError, Result};
use attention::{RopeTable, Shape};
use math::{column_sums, cross_entropy_backward, for_rows, gelu_forward};

/// Index of each block parameter inside its group of ten (see [`GptJ::names`]).
const LN_W: usize = 0;
const LN_B: usize = 1;
const Q: usize = 2;
const O: usize = 5;
const FC_IN_W: usize = 6;
const FC_IN_B: usize = 7;
const FC_OUT_W: usize = 8;
const FC_OUT_B: usize = 9;

/// All parameters of a model in one flat f32 buffer, in [`GptJ::names`] order.
#[derive(Debug, Clone)]
pub struct FlatParams {
    /// The values.
    pub values: Vec<f32>,
    /// Start of each parameter.
    pub offsets: Vec<usize>,
    /// Shape of each parameter.
    pub shapes: Vec<Vec<usize>>,
}

impl FlatParams {
    /// Zero parameters laid out for `config`.
    pub fn zeros(config: &ModelConfig) -> Self {
        let shapes = GptJ::shapes(config);
        let mut offsets = Vec::with_capacity(shapes.len());
        let mut n = 0;
        for s in &shapes {
            offsets.push(n);
            n += s.iter().product::<usize>();
        }
        Self {
            values: vec![0.0; n],
            offsets,
            shapes,
        }
    }

    /// A copy of the model's (f32) parameters.
    pub fn from_model(model: &GptJ) -> Result<Self> {
        let mut flat = Self::zeros(model.config());
        for (i, (_, var)) in model.named_vars().iter().enumerate() {
            let v: Vec<f32> = var.as_tensor().flatten_all()?.to_vec1()?;
            flat.param_mut(i).copy_from_slice(&v);
        }
        Ok(flat)
    }

    /// Writes the values into the model's parameters.
    pub fn write_to(&self, model: &GptJ) -> Result<()> {
        for (i, (_, var)) in model.named_vars().iter().enumerate() {
            let t = candle_core::Tensor::from_slice(self.param(i), var.shape(), var.device())?;
            var.set(&t)?;
        }
        Ok(())
    }

    /// Parameter `i` (in names order).
    pub fn param(&self, i: usize) -> &[f32] {
        let n: usize = self.shapes[i].iter().product();
        &self.values[self.offsets[i]..][..n]
    }

    /// Parameter `i`, mutable.
    pub fn param_mut(&mut self, i: usize) -> &mut [f32] {
        let n: usize = self.shapes[i].iter().product();
        &mut self.values[self.offsets[i]..][..n]
    }
}

/// Activations of one block kept for the backward pass.
#[derive(Debug)]
struct LayerCache {
    stats: Vec<f32>,                // [N, 2] LayerNorm mean and rstd
    h: Vec<f32>,                    // [N, d] LayerNorm output
    qkv: Vec<f32>,                  // [N, 3d] q, k rotated; v
    pattern: Vec<f32>,              // [B, H, T, T] softmax rows of the query positions
    z: Vec<f32>,                    // [NQ, d] merged head outputs
    g: Vec<f32>,                    // [NQ, m] GELU output
    gp: Vec<f32>,                   // [NQ, m] GELU derivative
    pattern_mask: Option<Vec<f32>>, // [B, H, T, T]
    attn_mask: Option<Vec<f32>>,    // [N, d]
    mlp_mask: Option<Vec<f32>>,     // [N, d]
}

/// Buffers of the backward pass, reused by every layer.
#[derive(Debug)]
struct Scratch {
    a: Vec<f32>,    // [N, d] attention output (forward)
    mo: Vec<f32>,   // [N, d] MLP output (forward)
    dx: Vec<f32>,   // [N, d] gradient of the residual stream
    dh: Vec<f32>,   // [N, d]
    dqkv: Vec<f32>, // [N, 3d]
    dz: Vec<f32>,   // [N, d]
    da: Vec<f32>,   // [N, d]
    dmo: Vec<f32>,  // [N, d]
    dg: Vec<f32>,   // [N, m]
    dhf: Vec<f32>,  // [B, d]
    dxq: Vec<f32>,  // [B, d]
}

/// The fused training step for one model configuration and batch shape.
#[derive(Debug)]
pub struct FusedStep {
    config: ModelConfig,
    batch: usize,
    seq: usize,
    layout: FlatParams,
    ropes: Vec<Option<RopeTable>>,
    layers: Vec<LayerCache>,
    resid: Vec<Vec<f32>>, // L + 1 inputs of each block ([N, d]) and the output ([B, d])
    emb_mask: Option<Vec<f32>>,
    dropout_on: bool, // whether the masks belong to the last forward
    ids: Vec<u32>,    // [B, T] of the last forward
    forward_done: bool,
    final_stats: Vec<f32>, // [B, 2]
    final_h: Vec<f32>,     // [B, d]
    logits: Vec<f32>,      // [B, V]
    grads: FlatParams,
    scratch: Scratch,
}

/// Which rows of an [N, ·] buffer a block computes: `first + i * step` for i < n.
#[derive(Debug, Clone, Copy)]
struct Rows {
    first: usize,
    step: usize,
    n: usize,
}

impl Rows {
    /// Rows computed by block `layer` of `n_layers`: every position, or the last one of each
    /// sequence in the last block.
    fn of_layer(layer: usize, n_layers: usize, batch: usize, seq: usize) -> Self {
        if layer + 1 == n_layers {
            Rows {
                first: seq - 1,
                step: seq,
                n: batch,
            }
        } else {
            Rows {
                first: 0,
                step: 1,
                n: batch * seq,
            }
        }
    }

    fn at(&self, i: usize) -> usize {
        self.first + i * self.step
    }
}

impl FusedStep {
    /// Buffers for `batch` sequences of `seq` tokens.
    pub fn new(config: &ModelConfig, batch: usize, seq: usize) -> Result<Self> {
        config.check()?;
        if batch == 0 || seq == 0 {
            return Err(ModelError::Config(format!(
                "the fused step needs a non-empty batch, got {batch} x {seq}"
            )));
        }
        let (d, m, h, v) = (
            config.d_model,
            config.d_mlp,
            config.n_heads,
            config.vocab_size,
        );
        let n = batch * seq;
        let layers = (0..config.n_layers)
            .map(|l| {
                let nq = if l + 1 == config.n_layers { batch } else { n };
                LayerCache {
                    stats: vec![0.0; 2 * n],
                    h: vec![0.0; n * d],
                    qkv: vec![0.0; n * 3 * d],
                    pattern: vec![0.0; batch * h * seq * seq],
                    z: vec![0.0; nq * d],
                    g: vec![0.0; nq * m],
                    gp: vec![0.0; nq * m],
                    pattern_mask: None,
                    attn_mask: None,
                    mlp_mask: None,
                }
            })
            .collect();
        let mut resid: Vec<Vec<f32>> = (0..config.n_layers).map(|_| vec![0.0; n * d]).collect();
        resid.push(vec![0.0; batch * d]);
        Ok(Self {
            config: config.clone(),
            batch,
            seq,
            layout: FlatParams::zeros(config),
            ropes: (0..config.n_layers)
                .map(|l| RopeTable::new(config.layer_position(l), seq))
                .collect(),
            layers,
            resid,
            emb_mask: None,
            dropout_on: false,
            ids: vec![0; n],
            forward_done: false,
            final_stats: vec![0.0; 2 * batch],
            final_h: vec![0.0; batch * d],
            logits: vec![0.0; batch * v],
            grads: FlatParams::zeros(config),
            scratch: Scratch {
                a: vec![0.0; n * d],
                mo: vec![0.0; n * d],
                dx: vec![0.0; n * d],
                dh: vec![0.0; n * d],
                dqkv: vec![0.0; n * 3 * d],
                dz: vec![0.0; n * d],
                da: vec![0.0; n * d],
                dmo: vec![0.0; n * d],
                dg: vec![0.0; n * m],
                dhf: vec![0.0; batch * d],
                dxq: vec![0.0; batch * d],
            },
        })
    }

    /// Gradients of the last [`FusedStep::loss_and_grads`], in [`GptJ::names`] order.
    pub fn grads(&self) -> &FlatParams {
        &self.grads
    }

    /// Logits at the last position [batch, vocab] of the last [`FusedStep::forward`].
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    fn offset(&self, layer: usize, which: usize) -> usize {
        self.layout.offsets[1 + 10 * layer + which]
    }

    /// (ln_f weight, ln_f bias, lm_head weight, lm_head bias) offsets.
    fn head_offsets(&self) -> (usize, usize, usize, usize) {
        let o = &self.layout.offsets;
        let base = 1 + 10 * self.config.n_layers;
        let lm_w = if self.config.tied_embeddings {
            o[0]
        } else {
            o[base + 2]
        };
        (o[base], o[base + 1], lm_w, o[o.len() - 1])
    }

    fn check_inputs(&self, params: &FlatParams, ids: &[u32]) -> Result<()> {
        if params.values.len() != self.layout.values.len() {
            return Err(ModelError::Config(format!(
                "{} parameter values given, the model has {}",
                params.values.len(),
                self.layout.values.len()
            )));
        }
        if ids.len() != self.batch * self.seq {
            return Err(ModelError::Config(format!(
                "{} token ids given, the fused step expects {} x {}",
                ids.len(),
                self.batch,
                self.seq
            )));
        }
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= self.config.vocab_size) {
            return Err(ModelError::Config(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.config.vocab_size
            )));
        }
        Ok(())
    }

    /// Forward pass: logits at the last position [batch, vocab] for `ids` [batch, seq],
    /// caching what the backward pass needs. `dropout` draws its masks in the order of
    /// [`GptJ::forward_last`].
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
        let (d, m, v) = (c.d_model, c.d_mlp, c.vocab_size);
        let (b, t) = (self.batch, self.seq);
        let n = b * t;
        let w = &params.values;

        // Embeddings.
        let wte = params.offsets[0];
        for (r, &id) in ids.iter().enumerate() {
            self.resid[0][r * d..][..d].copy_from_slice(&w[wte + id as usize * d..][..d]);
        }
        if let Some(drop) = dropout.as_deref_mut() {
            let mask = self.emb_mask.get_or_insert_with(|| vec![0.0; n * d]);
            drop.fill_mask(mask);
            for (x, k) in self.resid[0].iter_mut().zip(mask.iter()) {
                *x *= k;
            }
        }

        for l in 0..c.n_layers {
            let rows = Rows::of_layer(l, c.n_layers, b, t);
            let shape = Shape {
                seq: t,
                heads: c.n_heads,
                d_head: c.d_head(),
                queries: if rows.n == n { t } else { 1 },
                scale: (1.0 / (c.d_head() as f64).sqrt()) as f32,
            };
            let off = |which| self.offset(l, which);
            let (ln_w, ln_b) = (off(LN_W), off(LN_B));
            let (wq, wo, win, bin, wout, bout) = (
                off(Q),
                off(O),
                off(FC_IN_W),
                off(FC_IN_B),
                off(FC_OUT_W),
                off(FC_OUT_B),
            );
            let (before, after) = self.resid.split_at_mut(l + 1);
            let x = &before[l];
            let next = &mut after[0];
            let cache = &mut self.layers[l];

            math::layer_norm_forward(
                x,
                |r| r,
                &w[ln_w..][..d],
                &w[ln_b..][..d],
                c.ln_eps as f32,
                &mut cache.h,
                &mut cache.stats,
            );
            // q, k, v = h @ [Wq; Wk; Wv]^T (q at the computed rows only).
            if rows.n == n {
                matmul(
                    &mut cache.qkv,
                    View::dense(0, n, 3 * d),
                    &cache.h,
                    View::dense(0, n, d),
                    w,
                    View::dense(wq, 3 * d, d).t(),
                    false,
                );
            } else {
                matmul(
                    &mut cache.qkv,
                    View::rows(d, n, 2 * d, 3 * d),
                    &cache.h,
                    View::dense(0, n, d),
                    w,
                    View::dense(wq + d * d, 2 * d, d).t(),
                    false,
                );
                matmul(
                    &mut cache.qkv,
                    View::rows(rows.first * 3 * d, rows.n, d, rows.step * 3 * d),
                    &cache.h,
                    View::rows(rows.first * d, rows.n, d, rows.step * d),
                    w,
                    View::dense(wq, d, d).t(),
                    false,
                );
            }
            if let Some(drop) = dropout.as_deref_mut() {
                let pm = cache
                    .pattern_mask
                    .get_or_insert_with(|| vec![0.0; b * c.n_heads * t * t]);
                drop.fill_mask(pm);
                drop.fill_mask(cache.attn_mask.get_or_insert_with(|| vec![0.0; n * d]));
                drop.fill_mask(cache.mlp_mask.get_or_insert_with(|| vec![0.0; n * d]));
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
                .enumerate()
                .for_each(|(bi, ((qkv, pattern), z))| {
                    let mask = pmask.map(|m| &m[bi * per_row_pattern..][..per_row_pattern]);
                    attention::forward(shape, rope, qkv, pattern, mask, z);
                });
            let nq = rows.n;
            let hq = View::rows(rows.first * d, nq, d, rows.step * d);
            // attn = z @ Wo^T; hidden = GELU(hq @ Win^T + b_in); mlp = hidden @ Wout^T + b_out.
            let a = &mut self.scratch.a;
            matmul(
                a,
                View::dense(0, nq, d),
                &cache.z,
                View::dense(0, nq, d),
                w,
                View::dense(wo, d, d).t(),
                false,
            );
            matmul(
                &mut cache.g,
                View::dense(0, nq, m),
                &cache.h,
                hq,
                w,
                View::dense(win, m, d).t(),
                false,
            );
            let b_in = &w[bin..][..m];
            for_rows(&mut cache.g, m, |_, row| {
                for (x, bias) in row.iter_mut().zip(b_in) {
                    *x += bias;
                }
            });
            gelu_forward(&mut cache.g, &mut cache.gp);
            let mo = &mut self.scratch.mo;
            matmul(
                mo,
                View::dense(0, nq, d),
                &cache.g,
                View::dense(0, nq, m),
                w,
                View::dense(wout, d, m).t(),
                false,
            );
            let b_out = &w[bout..][..d];
            let am = cache.attn_mask.as_deref().filter(|_| on);
            let mm = cache.mlp_mask.as_deref().filter(|_| on);
            let (a, mo) = (&self.scratch.a, &self.scratch.mo);
            for_rows(&mut next[..nq * d], d, |i, out| {
                let r = rows.at(i);
                let xr = &x[r * d..][..d];
                let (ar, mr) = (&a[i * d..][..d], &mo[i * d..][..d]);
                match (am, mm) {
                    (Some(ka), Some(km)) => {
                        let (ka, km) = (&ka[r * d..][..d], &km[r * d..][..d]);
                        for j in 0..d {
                            out[j] = xr[j] + ar[j] * ka[j] + (mr[j] + b_out[j]) * km[j];
                        }
                    }
                    _ => {
                        for j in 0..d {
                            out[j] = xr[j] + ar[j] + mr[j] + b_out[j];
                        }
                    }
                }
            });
        }

        // Final LayerNorm and unembedding at the last position.
        let (lnf_w, lnf_b, lm_w, lm_b) = self.head_offsets();
        let last = &self.resid[c.n_layers];
        math::layer_norm_forward(
            last,
            |r| r,
            &w[lnf_w..][..d],
            &w[lnf_b..][..d],
            c.ln_eps as f32,
            &mut self.final_h,
            &mut self.final_stats,
        );
        matmul(
            &mut self.logits,
            View::dense(0, b, v),
            &self.final_h,
            View::dense(0, b, d),
            w,
            View::dense(lm_w, v, d).t(),
            false,
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

    /// One forward and backward pass: returns the mean last-token cross-entropy of `ids`
    /// [batch, seq] against `targets` [batch]; the gradients are in [`FusedStep::grads`].
    pub fn loss_and_grads(
        &mut self,
        params: &FlatParams,
        ids: &[u32],
        targets: &[u32],
        dropout: Option<&mut Dropout>,
    ) -> Result<f32> {
        self.check_targets(targets)?;
        self.forward(params, ids, dropout)?;
        self.backward(params, targets)
    }

    fn check_targets(&self, targets: &[u32]) -> Result<()> {
        if targets.len() != self.batch {
            return Err(ModelError::Config(format!(
                "{} targets given for a batch of {}",
                targets.len(),
                self.batch
            )));
        }
        if let Some(bad) = targets
            .iter()
            .find(|&&i| i as usize >= self.config.vocab_size)
        {
            return Err(ModelError::Config(format!(
                "target id {bad} is outside the vocabulary of {}",
                self.config.vocab_size
            )));
        }
        Ok(())
    }

    /// The backward pass of the last [`FusedStep::forward`] (which must have run with the
    /// same `params`): returns the mean cross-entropy against `targets` [batch] and leaves the
    /// gradients in [`FusedStep::grads`]. The logits are consumed (they become their gradient).
    pub fn backward(&mut self, params: &FlatParams, targets: &[u32]) -> Result<f32> {
        self.check_targets(targets)?;
        if !self.forward_done {
            return Err(ModelError::Config(
                "the fused backward needs a forward pass first".into(),
            ));
        }
        self.forward_done = false;
        let loss = cross_entropy_backward(&mut self.logits, self.config.vocab_size, targets);
        self.backward_pass(params);
        Ok(loss)
    }

    /// Backward pass from the logit gradients in `self.logits`.
    fn backward_pass(&mut self, params: &FlatParams) {
        let ids = &self.ids;
        let c = self.config.clone();
        let (d, m, v) = (c.d_model, c.d_mlp, c.vocab_size);
        let (b, t) = (self.batch, self.seq);
        let n = b * t;
        let w = &params.values;
        let (lnf_w, lnf_b, lm_w, lm_b) = self.head_offsets();
        let g = &mut self.grads.values;

        // Unembedding: dW = dlogits^T h_f, db = sum dlogits, dh_f = dlogits @ W.
        matmul(
            g,
            View::dense(lm_w, v, d),
            &self.logits,
            View::dense(0, b, v).t(),
            &self.final_h,
            View::dense(0, b, d),
            false,
        );
        column_sums(&self.logits, &mut g[lm_b..][..v]);
        let s = &mut self.scratch;
        matmul(
            &mut s.dhf,
            View::dense(0, b, d),
            &self.logits,
            View::dense(0, b, v),
            w,
            View::dense(lm_w, v, d),
            false,
        );
        s.dxq.fill(0.0);
        {
            let (gw, gb) = split_two(g, lnf_w, lnf_b, d);
            math::layer_norm_backward(
                &s.dhf,
                &self.resid[c.n_layers],
                |r| r,
                &self.final_stats,
                &w[lnf_w..][..d],
                &mut s.dxq,
                gw,
                gb,
            );
        }

        for l in (0..c.n_layers).rev() {
            let rows = Rows::of_layer(l, c.n_layers, b, t);
            let nq = rows.n;
            let shape = Shape {
                seq: t,
                heads: c.n_heads,
                d_head: c.d_head(),
                queries: if nq == n { t } else { 1 },
                scale: (1.0 / (c.d_head() as f64).sqrt()) as f32,
            };
            let off = |which| self.layout.offsets[1 + 10 * l + which];
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
                    match (am, mm) {
                        (Some(ka), Some(km)) => {
                            let (ka, km) = (&ka[r * d..][..d], &km[r * d..][..d]);
                            for j in 0..d {
                                da[j] = g_row[j] * ka[j];
                                dmo[j] = g_row[j] * km[j];
                            }
                        }
                        _ => {
                            da.copy_from_slice(g_row);
                            dmo.copy_from_slice(g_row);
                        }
                    }
                },
            );
            // MLP.
            let hq = View::rows(rows.first * d, nq, d, rows.step * d);
            matmul(
                g,
                View::dense(off(FC_OUT_W), d, m),
                &s.dmo,
                View::dense(0, nq, d).t(),
                &cache.g,
                View::dense(0, nq, m),
                false,
            );
            column_sums(&s.dmo[..nq * d], &mut g[off(FC_OUT_B)..][..d]);
            matmul(
                &mut s.dg,
                View::dense(0, nq, m),
                &s.dmo,
                View::dense(0, nq, d),
                w,
                View::dense(off(FC_OUT_W), d, m),
                false,
            );
            for (dg, gp) in s.dg[..nq * m].iter_mut().zip(&cache.gp) {
                *dg *= gp;
            }
            matmul(
                g,
                View::dense(off(FC_IN_W), m, d),
                &s.dg,
                View::dense(0, nq, m).t(),
                &cache.h,
                hq,
                false,
            );
            column_sums(&s.dg[..nq * m], &mut g[off(FC_IN_B)..][..m]);
            if nq != n {
                s.dh.fill(0.0);
            }
            matmul(
                &mut s.dh,
                hq,
                &s.dg,
                View::dense(0, nq, m),
                w,
                View::dense(off(FC_IN_W), m, d),
                false,
            );
            // Attention output projection.
            matmul(
                g,
                View::dense(off(O), d, d),
                &s.da,
                View::dense(0, nq, d).t(),
                &cache.z,
                View::dense(0, nq, d),
                false,
            );
            matmul(
                &mut s.dz,
                View::dense(0, nq, d),
                &s.da,
                View::dense(0, nq, d),
                w,
                View::dense(off(O), d, d),
                false,
            );
            let rope = self.ropes[l].as_ref();
            let per_row_pattern = c.n_heads * t * t;
            let pmask = cache.pattern_mask.as_deref().filter(|_| on);
            let dz = &s.dz;
            s.dqkv
                .par_chunks_mut(t * 3 * d)
                .enumerate()
                .for_each(|(bi, dqkv)| {
                    let mask = pmask.map(|m| &m[bi * per_row_pattern..][..per_row_pattern]);
                    attention::backward(
                        shape,
                        rope,
                        &cache.qkv[bi * t * 3 * d..][..t * 3 * d],
                        &cache.pattern[bi * per_row_pattern..][..per_row_pattern],
                        mask,
                        &dz[bi * shape.queries * d..][..shape.queries * d],
                        dqkv,
                    );
                });
            // q, k, v projections: dW = dqkv^T h, dh += dqkv @ W.
            matmul(
                g,
                View::dense(off(Q), 3 * d, d),
                &s.dqkv,
                View::dense(0, n, 3 * d).t(),
                &cache.h,
                View::dense(0, n, d),
                false,
            );
            matmul(
                &mut s.dh,
                View::dense(0, n, d),
                &s.dqkv,
                View::dense(0, n, 3 * d),
                w,
                View::dense(off(Q), 3 * d, d),
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
            let (gw, gb) = split_two(g, off(LN_W), off(LN_B), d);
            math::layer_norm_backward(
                &s.dh,
                x,
                |r| r,
                &cache.stats,
                &w[off(LN_W)..][..d],
                &mut s.dx,
                gw,
                gb,
            );
        }

        // Embeddings (the gradient of a tied unembedding is already in place).
        let wte = self.layout.offsets[0];
        if !c.tied_embeddings {
            g[wte..][..v * d].fill(0.0);
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
    }
}

/// Two disjoint `len`-long slices of `g` starting at `a` < `b`.
fn split_two(g: &mut [f32], a: usize, b: usize, len: usize) -> (&mut [f32], &mut [f32]) {
    assert!(a + len <= b);
    let (lo, hi) = g.split_at_mut(b);
    (&mut lo[a..][..len], &mut hi[..len])
}
