//! The fused Llama forward (docs/performance.md#the-fused-llama-forward): prefill, cached steps
//! and batched prompt suffixes in one pass per block over flat buffers, with no per-op dispatch.
//!
//! Per block, for all `N` new tokens of every row at once:
//! 1. the norm (RMSNorm or LayerNorm) of the residual rows into `h` `[N, d_model]`;
//! 2. one product `h @ [Wq | Wk | Wv]` into `qkv` `[N, W]` (biases added in the same pass as
//!    RoPE, which rotates q and k in place at each token's position);
//! 3. attention per (row, query head), spread over the thread pool: scores against the shared
//!    keys (the cache) and the row's own keys (causal), softmax in f32, values;
//! 4. `x += z @ Wo` (the residual add is the product's accumulation);
//! 5. the MLP's norm, one product `h2 @ [Wgate | Wup]`, SiLU(gate) * up written in place over
//!    the gate half (or GELU in place), and `x += hidden @ Wdown`.
//!
//! Products run in the model's [`Precision`]: f32 reads the candle tensors' own buffers (no
//! copy); bf16 uses the weights rounded and packed once ([`PackedB`]), activations rounded per
//! product, f32 accumulation. Norms, RoPE, softmax, activations and residual stay f32. The
//! hooked forward ([`Llama::forward`]) is the reference: tests check that both agree.

use candle_core::{Storage, StorageRef, Tensor};
use rayon::prelude::*;
use ropelab_model::kernel::{
    exp, matmul, matmul_packed, matmul_serial, Bf16Path, PackedB, Precision, View,
};
use ropelab_model::rope::rotate_planes;

use crate::gguf::{Mlp, Norm, Residual};
use crate::llama::{KvCache, Llama, NormWeights};
use crate::quant::QuantMatrix;
use crate::{PretrainedError, Result};

/// A block's matrices rounded to bf16 and packed once (the bf16 path).
pub(crate) struct PackedBlock {
    qkv: PackedB,
    o: PackedB,
    up: PackedB,
    down: PackedB,
}

/// Every matrix of a model packed for bf16 products.
pub(crate) struct PackedWeights {
    blocks: Vec<PackedBlock>,
    unembed: PackedB,
}

impl PackedWeights {
    /// Packs `model`'s matrices for `path`.
    pub(crate) fn new(model: &Llama, path: Bf16Path) -> Result<Self> {
        let pack = |t: &Tensor| -> Result<PackedB> {
            let w = F32Tensor::new(t)?;
            Ok(PackedB::new(
                path,
                w.slice(),
                View::dense(0, w.rows, w.cols),
            ))
        };
        let blocks = model
            .blocks
            .iter()
            .map(|b| {
                Ok(PackedBlock {
                    qkv: pack(&b.qkv)?,
                    o: pack(&b.o)?,
                    up: pack(&b.up)?,
                    down: pack(&b.down)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            blocks,
            unembed: pack(&model.unembed)?,
        })
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        let b: usize = self
            .blocks
            .iter()
            .map(|b| b.qkv.bytes() + b.o.bytes() + b.up.bytes() + b.down.bytes())
            .sum();
        b + self.unembed.bytes()
    }
}

/// A contiguous f32 CPU tensor's buffer, read in place (the read lock is held while it lives).
struct F32Tensor<'a> {
    guard: StorageRef<'a>,
    start: usize,
    rows: usize,
    cols: usize,
}

impl<'a> F32Tensor<'a> {
    /// `t`, a contiguous f32 matrix [rows, cols] or vector [cols] on the CPU.
    fn new(t: &'a Tensor) -> Result<Self> {
        let (rows, cols) = match t.dims() {
            [r, c] => (*r, *c),
            [c] => (1, *c),
            other => {
                return Err(PretrainedError::Input(format!(
                    "the fused forward reads matrices and vectors, not shape {other:?}"
                )))
            }
        };
        let (guard, layout) = t.storage_and_layout();
        let start = match (layout.is_contiguous(), &*guard) {
            (true, Storage::Cpu(cpu)) => {
                let data = cpu.as_slice::<f32>()?;
                let start = layout.start_offset();
                if start + rows * cols > data.len() {
                    return Err(PretrainedError::Input(
                        "a weight tensor is shorter than its shape".into(),
                    ));
                }
                start
            }
            _ => {
                return Err(PretrainedError::Input(
                    "the fused forward needs contiguous f32 weights on the CPU".into(),
                ))
            }
        };
        Ok(Self {
            guard,
            start,
            rows,
            cols,
        })
    }

    /// The values, row-major.
    fn slice(&self) -> &[f32] {
        match &*self.guard {
            // Checked in `new`: f32 CPU storage holding [start, start + rows * cols).
            Storage::Cpu(cpu) => match cpu.as_slice::<f32>() {
                Ok(data) => &data[self.start..self.start + self.rows * self.cols],
                Err(_) => &[],
            },
            _ => &[],
        }
    }
}

/// A weight matrix [in, out] as a product reads it.
enum Weight<'a> {
    F32(F32Tensor<'a>),
    Bf16(&'a PackedB),
    /// The file's quantized [out, in] blocks, side by side (q, k, v; gate, up): one
    /// matrix-vector product per row and part (single-token steps).
    Quant(Vec<&'a QuantMatrix>),
}

impl<'a> Weight<'a> {
    /// The quantized parts when given, else the packed copy when there is one, else the f32
    /// tensor.
    fn of(
        t: &'a Tensor,
        packed: Option<&'a PackedB>,
        quant: Option<Vec<&'a QuantMatrix>>,
    ) -> Result<Self> {
        Ok(match (quant, packed) {
            (Some(parts), _) => Weight::Quant(parts),
            (None, Some(p)) => Weight::Bf16(p),
            (None, None) => Weight::F32(F32Tensor::new(t)?),
        })
    }

    /// Output columns.
    fn cols(&self) -> usize {
        match self {
            Weight::F32(w) => w.cols,
            Weight::Bf16(p) => p.cols(),
            Weight::Quant(parts) => parts.iter().map(|q| q.rows()).sum(),
        }
    }

    /// `dst (+)= a[av] @ self + bias` into the first `av.rows` dense rows of `dst`, then
    /// releases the weight (its read lock).
    fn affine(
        self,
        dst: &mut [f32],
        a: &[f32],
        av: View,
        accumulate: bool,
        bias: Option<&Tensor>,
    ) -> Result<()> {
        let cols = self.cols();
        self.apply(dst, View::dense(0, av.rows, cols), a, av, accumulate);
        drop(self);
        if let Some(b) = bias {
            add_bias(&mut dst[..av.rows * cols], &values(b)?);
        }
        Ok(())
    }

    /// `dst[d] (+)= a[av] @ self`.
    fn apply(&self, dst: &mut [f32], d: View, a: &[f32], av: View, accumulate: bool) {
        match self {
            Weight::F32(w) => {
                let bv = View::dense(0, w.rows, w.cols);
                matmul(dst, d, a, av, w.slice(), bv, accumulate)
            }
            Weight::Bf16(p) => matmul_packed(dst, d, a, av, p, accumulate),
            Weight::Quant(parts) => {
                let mut x = vec![0f32; av.cols];
                let mut y = vec![];
                for r in 0..av.rows {
                    for (c, v) in x.iter_mut().enumerate() {
                        *v = a[av.offset + r * av.rs + c * av.cs];
                    }
                    let mut col = 0;
                    for q in parts {
                        y.resize(q.rows(), 0.0);
                        q.matvec(&x, &mut y);
                        for (j, v) in y.iter().enumerate() {
                            let o = &mut dst[d.offset + r * d.rs + (col + j) * d.cs];
                            *o = if accumulate { *o + v } else { *v };
                        }
                        col += q.rows();
                    }
                }
            }
        }
    }
}

/// A vector's values (a norm's gain, a bias).
fn values(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_vec1::<f32>()?)
}

/// Adds `bias` to every row of `x` (rows of `bias.len()` values).
fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

/// A norm's gain and bias as vectors.
struct FlatNorm {
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
}

impl FlatNorm {
    fn of(n: &NormWeights) -> Result<Self> {
        Ok(Self {
            weight: values(&n.weight)?,
            bias: n.bias.as_ref().map(values).transpose()?,
        })
    }

    /// `out` = the norm of every row of `x` (rows of d_model values), as the hooked path
    /// computes it: RMSNorm x / sqrt(mean(x^2) + eps) * w, LayerNorm (x - mean) /
    /// sqrt(var + eps) * w + b (biased variance). An error ([`Llama::norm_overflow`]) when a
    /// row's mean of squares (or variance) is not finite: the row would become zeros, finite
    /// values no scan of the output would catch. One comparison per row.
    fn apply(&self, model: &Llama, x: &[f32], out: &mut [f32]) -> Result<()> {
        let c = &model.config;
        let (kind, eps) = (c.block.norm, c.rms_eps as f32);
        let d = self.weight.len();
        let finite = out
            .par_chunks_mut(d)
            .zip(x.par_chunks(d))
            .all(|(o, x)| match kind {
                Norm::Rms => {
                    let ms = x.iter().map(|v| v * v).sum::<f32>() / d as f32;
                    if !ms.is_finite() {
                        return false;
                    }
                    let r = (ms + eps).sqrt();
                    for ((o, v), w) in o.iter_mut().zip(x).zip(&self.weight) {
                        *o = v / r * w;
                    }
                    true
                }
                Norm::Layer => {
                    let mean = x.iter().sum::<f32>() / d as f32;
                    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
                    if !var.is_finite() {
                        return false;
                    }
                    let r = (var + eps).sqrt();
                    for (i, (o, v)) in o.iter_mut().zip(x).enumerate() {
                        let b = self.bias.as_ref().map_or(0.0, |b| b[i]);
                        *o = (v - mean) / r * self.weight[i] + b;
                    }
                    true
                }
            });
        match finite {
            true => Ok(()),
            false => Err(model.norm_overflow()),
        }
    }
}

/// New keys and values per layer: rotated keys, values, token-major [tokens, kv_heads *
/// head_dim] each.
pub(crate) type NewKv = Vec<(Vec<f32>, Vec<f32>)>;

/// The residual rows after the last block for every row of `rows` (token ids), each row
/// attending to the keys and values in `cache` (a shared prefix at positions 0 .. cache.len())
/// and, causally, to its own tokens at positions cache.len() onwards: [sum of row lengths,
/// d_model], rows one after another. With `keep_kv` (one row only), also the row's keys and
/// values per layer, for the caller to append to the cache. With `quantized`, the projections
/// run from the file's quantized blocks (single-token steps; the caller checked they exist).
pub(crate) fn trunk(
    model: &Llama,
    rows: &[&[u32]],
    cache: &KvCache,
    keep_kv: bool,
    quantized: bool,
) -> Result<(Vec<f32>, NewKv)> {
    let c = &model.config;
    let (d, hd) = (c.d_model, c.head_dim());
    let (nh, nkv) = (c.n_heads, c.n_kv_heads);
    let (q_out, kv_out) = (nh * hd, nkv * hd);
    let width = q_out + 2 * kv_out;
    if keep_kv && rows.len() != 1 {
        return Err(PretrainedError::Input(
            "only one sequence at a time can extend a cache".into(),
        ));
    }
    if !cache.is_empty() && cache.layers.len() != c.n_layers {
        return Err(PretrainedError::Input(format!(
            "the cache has {} layers, the model {}",
            cache.layers.len(),
            c.n_layers
        )));
    }
    let mut new_kv: NewKv = Vec::new();
    let start = cache.len;
    let lens: Vec<usize> = rows.iter().map(|r| r.len()).collect();
    let n: usize = lens.iter().sum();
    let offsets: Vec<usize> = lens
        .iter()
        .scan(0, |at, &l| {
            let o = *at;
            *at += l;
            Some(o)
        })
        .collect();
    let longest = lens.iter().copied().max().unwrap_or(0);
    // RoPE tables for positions start .. start + longest: [longest, planes] each.
    let rotation = model.position.rotation();
    let (cos, sin) = match &rotation {
        Some(r) => r.table(start..start + longest),
        None => (vec![], vec![]),
    };
    let pairs = rotation.as_ref().map(|r| r.pairs()).unwrap_or_default();
    let planes = pairs.len();

    // The embeddings: [n, d].
    let embed = F32Tensor::new(&model.embed)?;
    let table = embed.slice();
    let mut x = vec![0f32; n * d];
    for (row, ids) in x
        .chunks_exact_mut(d)
        .zip(rows.iter().flat_map(|r| r.iter()))
    {
        let id = *ids as usize;
        if id >= embed.rows {
            return Err(PretrainedError::Input(format!(
                "token id {id} is outside the vocabulary of {}",
                embed.rows
            )));
        }
        row.copy_from_slice(&table[id * d..(id + 1) * d]);
    }
    drop(embed);

    let packed = model.packed.as_ref();
    let precision = model.precision;
    let style = c.block;
    let ff = c.d_ff;
    let up_width = match style.mlp {
        Mlp::SwiGlu => 2 * ff,
        Mlp::Gelu | Mlp::GeluTanh => ff,
    };
    let mut h = vec![0f32; n * d];
    let mut h2 = vec![
        0f32;
        if style.residual == Residual::Sequential {
            0
        } else {
            n * d
        }
    ];
    let mut qkv = vec![0f32; n * width];
    let mut z = vec![0f32; n * q_out];
    let mut up = vec![0f32; n * up_width];
    let scale = 1.0 / (hd as f32).sqrt();
    let group = nh / nkv;

    for (layer, blk) in model.blocks.iter().enumerate() {
        let pb = packed.map(|p| &p.blocks[layer]);
        let qb = blk.quant.as_ref().filter(|_| quantized);
        let attn_norm = FlatNorm::of(&blk.attn_norm)?;
        attn_norm.apply(model, &x, &mut h)?;

        // q, k, v for every token: [n, width], biased, q and k rotated.
        let w_qkv = Weight::of(
            &blk.qkv,
            pb.map(|p| &p.qkv),
            qb.map(|q| vec![&q.q, &q.k, &q.v]),
        )?;
        debug_assert_eq!(w_qkv.cols(), width);
        // The biases are added in the RoPE pass below.
        w_qkv.affine(&mut qkv, &h, View::dense(0, n, d), false, None)?;
        let qkv_bias = blk.qkv_bias.as_ref().map(values).transpose()?;
        {
            let offsets = &offsets;
            let (cos, sin, pairs) = (&cos, &sin, &pairs);
            qkv.par_chunks_mut(width)
                .enumerate()
                .for_each(|(token, row)| {
                    if let Some(b) = &qkv_bias {
                        row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
                    }
                    if planes == 0 {
                        return;
                    }
                    // The token's position within its row.
                    let r = offsets.partition_point(|&o| o <= token) - 1;
                    let i = token - offsets[r];
                    let (cs, sn) = (&cos[i * planes..][..planes], &sin[i * planes..][..planes]);
                    for head in row[..q_out + kv_out].chunks_exact_mut(hd) {
                        rotate_planes(head, pairs, cs, sn, false);
                    }
                });
        }

        // Attention per (row, kv head, block of queries), spread over the pool; each task's
        // output [group * queries, hd] is scattered into z afterwards.
        let (ck, cv): (&[f32], &[f32]) = match cache.layers.get(layer) {
            Some((k, v)) if start > 0 => (k, v),
            _ => (&[], &[]),
        };
        let shape = AttentionShape {
            width,
            q_out,
            kv_out,
            hd,
            group,
            shared: start,
            scale,
            precision,
        };
        let mut tasks: Vec<(usize, usize, usize)> = vec![];
        for (r, &t) in lens.iter().enumerate() {
            for g in 0..nkv {
                tasks.extend((0..t).step_by(QUERY_BLOCK).map(|q0| (r, g, q0)));
            }
        }
        let outputs: Vec<Vec<f32>> = tasks
            .par_iter()
            .map(|&(r, g, q0)| {
                let queries = QUERY_BLOCK.min(lens[r] - q0);
                shape.attend(&qkv, (ck, cv), offsets[r], g, q0, queries)
            })
            .collect();
        for (&(r, g, q0), out) in tasks.iter().zip(&outputs) {
            let queries = QUERY_BLOCK.min(lens[r] - q0);
            for (at, src) in out.chunks_exact(hd).enumerate() {
                let (j, i) = (at / queries, at % queries);
                let dst = (offsets[r] + q0 + i) * q_out + (g * group + j) * hd;
                z[dst..dst + hd].copy_from_slice(src);
            }
        }
        if keep_kv {
            let (mut k, mut v) = (
                Vec::with_capacity(n * kv_out),
                Vec::with_capacity(n * kv_out),
            );
            for row in qkv.chunks_exact(width) {
                k.extend_from_slice(&row[q_out..q_out + kv_out]);
                v.extend_from_slice(&row[q_out + kv_out..]);
            }
            new_kv.push((k, v));
        }

        // The MLP's input, then the attention joins the residual.
        let ffn_norm = blk.ffn_norm.as_ref().map(FlatNorm::of).transpose()?;
        if style.residual != Residual::Sequential {
            match &ffn_norm {
                Some(norm) => norm.apply(model, &x, &mut h2)?,
                None => h2.copy_from_slice(&h), // GPT-J: the attention's norm serves both
            }
        }
        Weight::of(&blk.o, pb.map(|p| &p.o), qb.map(|q| vec![&q.o]))?.affine(
            &mut x,
            &z,
            View::dense(0, n, q_out),
            true,
            blk.o_bias.as_ref(),
        )?;
        let mlp_in: &[f32] = if style.residual == Residual::Sequential {
            let norm = ffn_norm.as_ref().ok_or_else(|| {
                PretrainedError::Input("a sequential block without its MLP norm".into())
            })?;
            norm.apply(model, &x, &mut h)?;
            &h
        } else {
            &h2
        };

        // The MLP: [n, up_width], activation in place, then x += hidden @ Wdown.
        let w_up = Weight::of(
            &blk.up,
            pb.map(|p| &p.up),
            qb.map(|q| match style.mlp {
                Mlp::SwiGlu => vec![&q.gate, &q.up],
                Mlp::Gelu | Mlp::GeluTanh => vec![&q.up],
            }),
        )?;
        w_up.affine(
            &mut up,
            mlp_in,
            View::dense(0, n, d),
            false,
            blk.up_bias.as_ref(),
        )?;
        let mlp = style.mlp;
        up.par_chunks_mut(up_width).for_each(|row| match mlp {
            Mlp::SwiGlu => {
                let (gate, u) = row.split_at_mut(ff);
                swiglu(gate, u);
            }
            Mlp::Gelu => row.iter_mut().for_each(|v| {
                *v = (candle_core::cpu::erf::erf_f32(*v * std::f32::consts::FRAC_1_SQRT_2) + 1.0)
                    * 0.5
                    * *v
            }),
            Mlp::GeluTanh => row.iter_mut().for_each(|v| {
                let u = *v;
                *v = 0.5
                    * u
                    * (1.0
                        + ((2.0 / std::f32::consts::PI).sqrt() * (u + 0.044715 * u * u * u)).tanh())
            }),
        });
        // The hidden values: the gate half of each row (SwiGLU) or the whole row.
        Weight::of(&blk.down, pb.map(|p| &p.down), qb.map(|q| vec![&q.down]))?.affine(
            &mut x,
            &up,
            View::rows(0, n, ff, up_width),
            true,
            blk.down_bias.as_ref(),
        )?;
    }
    Ok((x, new_kv))
}

/// Queries per attention task: a row's queries are split into blocks of this many, so that
/// one sequence still spreads over the pool and each block computes scores only up to its own
/// last (causal) key.
const QUERY_BLOCK: usize = 128;

thread_local! {
    /// Per thread: a task's stacked queries and its scores.
    static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// The shapes one layer's attention tasks share.
struct AttentionShape {
    /// Columns of a token's q/k/v row (q heads, then k, then v).
    width: usize,
    q_out: usize,
    kv_out: usize,
    hd: usize,
    /// Query heads per kv head.
    group: usize,
    /// Shared keys (the cache) before each row's own.
    shared: usize,
    scale: f32,
    precision: Precision,
}

impl AttentionShape {
    /// Attention of queries `q0 .. q0 + queries` of the row starting at token `offset`, for the
    /// query heads of kv head `g` stacked: scores against the shared keys `cache` (token-major
    /// keys and values, [shared, kv_out] each) and the row's own keys 0 .. q0 + queries, a
    /// causal softmax in f32, then the values: [group * queries, hd] (head-major).
    fn attend(
        &self,
        qkv: &[f32],
        cache: (&[f32], &[f32]),
        offset: usize,
        g: usize,
        q0: usize,
        queries: usize,
    ) -> Vec<f32> {
        let (w, hd, len) = (self.width, self.hd, self.shared);
        let rows = self.group * queries;
        let own = q0 + queries;
        let keys = len + own;
        let mut out = vec![0f32; rows * hd];
        SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            let (q, s) = &mut *scratch;
            // The group's queries stacked: [group, queries, hd].
            q.clear();
            for j in 0..self.group {
                let head = g * self.group + j;
                for i in 0..queries {
                    let at = (offset + q0 + i) * w + head * hd;
                    q.extend_from_slice(&qkv[at..at + hd]);
                }
            }
            s.clear();
            s.resize(rows * keys, 0.0);
            let qv = View::dense(0, rows, hd);
            let p = self.precision;
            if len > 0 {
                let kh = View::rows(g * hd, len, hd, self.kv_out).t();
                matmul_serial(
                    p,
                    s,
                    View::rows(0, rows, len, keys),
                    q,
                    qv,
                    cache.0,
                    kh,
                    false,
                );
            }
            let ko = View::rows(offset * w + self.q_out + g * hd, own, hd, w).t();
            matmul_serial(
                p,
                s,
                View::rows(len, rows, own, keys),
                q,
                qv,
                qkv,
                ko,
                false,
            );
            // Query i of the block sees the shared keys and own keys 0 ..= q0 + i.
            for (at, row) in s.chunks_exact_mut(keys).enumerate() {
                softmax_prefix(row, len + q0 + at % queries + 1, self.scale);
            }
            let dv = View::dense(0, rows, hd);
            if len > 0 {
                let vh = View::rows(g * hd, len, hd, self.kv_out);
                let pv = View::rows(0, rows, len, keys);
                matmul_serial(p, &mut out, dv, s, pv, cache.1, vh, false);
            }
            let vo = View::rows(offset * w + self.q_out + self.kv_out + g * hd, own, hd, w);
            let pv = View::rows(len, rows, own, keys);
            matmul_serial(p, &mut out, dv, s, pv, qkv, vo, len > 0);
        });
        out
    }
}

/// Logits of residual rows `x` ([rows, d_model], flat): the final norm, then the unembedding in
/// the model's precision (from its quantized blocks with `quantized` where the file has them):
/// [rows, vocab].
pub(crate) fn logits(model: &Llama, x: &[f32], quantized: bool) -> Result<Tensor> {
    let c = &model.config;
    let d = c.d_model;
    let n = x.len() / d;
    let mut h = vec![0f32; n * d];
    FlatNorm::of(&model.norm)?.apply(model, x, &mut h)?;
    let packed = model.packed.as_ref();
    let w = Weight::of(
        &model.unembed,
        packed.map(|p| &p.unembed),
        model
            .unembed_quant
            .as_ref()
            .filter(|_| quantized)
            .map(|q| vec![q]),
    )?;
    let vocab = w.cols();
    let mut out = vec![0f32; n * vocab];
    w.affine(
        &mut out,
        &h,
        View::dense(0, n, d),
        false,
        model.unembed_bias.as_ref(),
    )?;
    Ok(Tensor::from_vec(out, (n, vocab), &model.device)?)
}

/// The precision a model's fused products run in, by name, with the bf16 path where bf16.
pub fn describe(precision: Precision) -> String {
    match precision {
        Precision::F32 => "f32".into(),
        Precision::Bf16 => format!("bf16 ({})", Bf16Path::detect().name()),
    }
}

/// `row[..live]` <- softmax(scale * row[..live]) in f32, `row[live..]` <- 0 (a causal row),
/// vectorised for AVX-512 where the CPU has it.
fn softmax_prefix(row: &mut [f32], live: usize, scale: f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked above).
        return unsafe { softmax_prefix_avx512(row, live, scale) };
    }
    softmax_prefix_body(row, live, scale)
}

/// [`softmax_prefix`] compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn softmax_prefix_avx512(row: &mut [f32], live: usize, scale: f32) {
    softmax_prefix_body(row, live, scale)
}

#[inline(always)]
fn softmax_prefix_body(row: &mut [f32], live: usize, scale: f32) {
    let (live, dead) = row.split_at_mut(live);
    let m = max(live) * scale;
    for v in live.iter_mut() {
        *v = exp(*v * scale - m);
    }
    let inv = 1.0 / sum(live);
    live.iter_mut().for_each(|v| *v *= inv);
    dead.iter_mut().for_each(|v| *v = 0.0);
}

/// The largest value, with 16 independent accumulators (so the loop vectorises).
#[inline(always)]
fn max(a: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let chunks = a.chunks_exact(16);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    for x in chunks {
        for l in 0..16 {
            acc[l] = if x[l] > acc[l] { x[l] } else { acc[l] };
        }
    }
    acc.iter().fold(tail, |m, &v| if v > m { v } else { m })
}

/// Sum with 16 independent accumulators (so the loop vectorises).
#[inline(always)]
fn sum(a: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = a.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().sum();
    for x in chunks {
        for l in 0..16 {
            acc[l] += x[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `gate` <- SiLU(gate) * up, vectorised for AVX-512 where the CPU has it.
fn swiglu(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked above).
        return unsafe { swiglu_avx512(gate, up) };
    }
    swiglu_body(gate, up)
}

/// [`swiglu`] compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn swiglu_avx512(gate: &mut [f32], up: &[f32]) {
    swiglu_body(gate, up)
}

#[inline(always)]
fn swiglu_body(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp(-*g)) * u;
    }
}
