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
    matmul, matmul_packed, matmul_serial, Bf16Path, PackedB, Precision, View,
};
use ropelab_model::rope::rotate_planes;

use crate::gguf::{Mlp, Norm, Residual};
use crate::llama::{KvCache, Llama, NormWeights};
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
}

impl<'a> Weight<'a> {
    /// The f32 tensor, or its packed copy when there is one.
    fn of(t: &'a Tensor, packed: Option<&'a PackedB>) -> Result<Self> {
        Ok(match packed {
            Some(p) => Weight::Bf16(p),
            None => Weight::F32(F32Tensor::new(t)?),
        })
    }

    /// Output columns.
    fn cols(&self) -> usize {
        match self {
            Weight::F32(w) => w.cols,
            Weight::Bf16(p) => p.cols(),
        }
    }

    /// `dst[d] (+)= a[av] @ self`.
    fn apply(&self, dst: &mut [f32], d: View, a: &[f32], av: View, accumulate: bool) {
        match self {
            Weight::F32(w) => {
                let bv = View::dense(0, w.rows, w.cols);
                matmul(dst, d, a, av, w.slice(), bv, accumulate)
            }
            Weight::Bf16(p) => matmul_packed(dst, d, a, av, p, accumulate),
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
    /// sqrt(var + eps) * w + b (biased variance).
    fn apply(&self, kind: Norm, eps: f64, x: &[f32], out: &mut [f32]) {
        let d = self.weight.len();
        let eps = eps as f32;
        out.par_chunks_mut(d)
            .zip(x.par_chunks(d))
            .for_each(|(o, x)| match kind {
                Norm::Rms => {
                    let ms = x.iter().map(|v| v * v).sum::<f32>() / d as f32;
                    let r = (ms + eps).sqrt();
                    for ((o, v), w) in o.iter_mut().zip(x).zip(&self.weight) {
                        *o = v / r * w;
                    }
                }
                Norm::Layer => {
                    let mean = x.iter().sum::<f32>() / d as f32;
                    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
                    let r = (var + eps).sqrt();
                    for (i, (o, v)) in o.iter_mut().zip(x).enumerate() {
                        let b = self.bias.as_ref().map_or(0.0, |b| b[i]);
                        *o = (v - mean) / r * self.weight[i] + b;
                    }
                }
            });
    }
}

/// New keys and values per layer: rotated keys, values, token-major [tokens, kv_heads *
/// head_dim] each.
pub(crate) type NewKv = Vec<(Vec<f32>, Vec<f32>)>;

/// The residual rows after the last block for every row of `rows` (token ids), each row
/// attending to the keys and values in `cache` (a shared prefix at positions 0 .. cache.len())
/// and, causally, to its own tokens at positions cache.len() onwards: [sum of row lengths,
/// d_model], rows one after another. With `keep_kv` (one row only), also the row's keys and
/// values per layer, for the caller to append to the cache.
pub(crate) fn trunk(
    model: &Llama,
    rows: &[&[u32]],
    cache: &KvCache,
    keep_kv: bool,
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
        let attn_norm = FlatNorm::of(&blk.attn_norm)?;
        attn_norm.apply(style.norm, c.rms_eps, &x, &mut h);

        // q, k, v for every token: [n, width], biased, q and k rotated.
        let w_qkv = Weight::of(&blk.qkv, pb.map(|p| &p.qkv))?;
        debug_assert_eq!(w_qkv.cols(), width);
        w_qkv.apply(
            &mut qkv,
            View::dense(0, n, width),
            &h,
            View::dense(0, n, d),
            false,
        );
        drop(w_qkv);
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

        // Attention per (row, query head): [t, hd] outputs, scattered into z afterwards.
        let (ck, cv): (&[f32], &[f32]) = match cache.layers.get(layer) {
            Some((k, v)) if start > 0 => (k, v),
            _ => (&[], &[]),
        };
        let len = start;
        let tasks: Vec<(usize, usize)> = (0..rows.len())
            .flat_map(|r| (0..nh).map(move |hh| (r, hh)))
            .collect();
        let outputs: Vec<Vec<f32>> = tasks
            .par_iter()
            .map(|&(r, hh)| {
                let (t, o) = (lens[r], offsets[r]);
                let g = hh / group;
                let keys = len + t;
                // [t, len + t]: shared keys first, then the row's own.
                let mut s = vec![0f32; t * keys];
                let q = View::rows(o * width + hh * hd, t, hd, width);
                if len > 0 {
                    let kh = View::rows(g * hd, len, hd, kv_out).t();
                    matmul_serial(
                        precision,
                        &mut s,
                        View::rows(0, t, len, keys),
                        &qkv,
                        q,
                        ck,
                        kh,
                        false,
                    );
                }
                let ko = View::rows(o * width + q_out + g * hd, t, hd, width).t();
                matmul_serial(
                    precision,
                    &mut s,
                    View::rows(len, t, t, keys),
                    &qkv,
                    q,
                    &qkv,
                    ko,
                    false,
                );
                // Causal softmax in f32: query i sees the shared keys and own keys 0..=i.
                for (i, row) in s.chunks_exact_mut(keys).enumerate() {
                    let seen = len + i + 1;
                    let (live, dead) = row.split_at_mut(seen);
                    let m = live
                        .iter()
                        .fold(f32::NEG_INFINITY, |m, &v| m.max(v * scale));
                    let mut sum = 0f32;
                    for v in live.iter_mut() {
                        *v = (*v * scale - m).exp();
                        sum += *v;
                    }
                    live.iter_mut().for_each(|v| *v /= sum);
                    dead.iter_mut().for_each(|v| *v = 0.0);
                }
                let mut out = vec![0f32; t * hd];
                let dv = View::dense(0, t, hd);
                if len > 0 {
                    let vh = View::rows(g * hd, len, hd, kv_out);
                    matmul_serial(
                        precision,
                        &mut out,
                        dv,
                        &s,
                        View::rows(0, t, len, keys),
                        cv,
                        vh,
                        false,
                    );
                }
                let vo = View::rows(o * width + q_out + kv_out + g * hd, t, hd, width);
                matmul_serial(
                    precision,
                    &mut out,
                    dv,
                    &s,
                    View::rows(len, t, t, keys),
                    &qkv,
                    vo,
                    len > 0,
                );
                out
            })
            .collect();
        for (&(r, hh), out) in tasks.iter().zip(&outputs) {
            for (i, src) in out.chunks_exact(hd).enumerate() {
                let at = (offsets[r] + i) * q_out + hh * hd;
                z[at..at + hd].copy_from_slice(src);
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
                Some(norm) => norm.apply(style.norm, c.rms_eps, &x, &mut h2),
                None => h2.copy_from_slice(&h), // GPT-J: the attention's norm serves both
            }
        }
        let w_o = Weight::of(&blk.o, pb.map(|p| &p.o))?;
        w_o.apply(
            &mut x,
            View::dense(0, n, d),
            &z,
            View::dense(0, n, q_out),
            true,
        );
        drop(w_o);
        if let Some(b) = &blk.o_bias {
            add_bias(&mut x, &values(b)?);
        }
        let mlp_in: &[f32] = if style.residual == Residual::Sequential {
            let norm = ffn_norm.as_ref().ok_or_else(|| {
                PretrainedError::Input("a sequential block without its MLP norm".into())
            })?;
            norm.apply(style.norm, c.rms_eps, &x, &mut h);
            &h
        } else {
            &h2
        };

        // The MLP: [n, up_width], activation in place, then x += hidden @ Wdown.
        let w_up = Weight::of(&blk.up, pb.map(|p| &p.up))?;
        w_up.apply(
            &mut up,
            View::dense(0, n, up_width),
            mlp_in,
            View::dense(0, n, d),
            false,
        );
        drop(w_up);
        if let Some(b) = &blk.up_bias {
            add_bias(&mut up, &values(b)?);
        }
        let mlp = style.mlp;
        up.par_chunks_mut(up_width).for_each(|row| match mlp {
            Mlp::SwiGlu => {
                let (gate, u) = row.split_at_mut(ff);
                for (g, u) in gate.iter_mut().zip(u.iter()) {
                    *g = *g / (1.0 + (-*g).exp()) * u;
                }
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
        let w_down = Weight::of(&blk.down, pb.map(|p| &p.down))?;
        // The hidden values: the gate half of each row (SwiGLU) or the whole row.
        w_down.apply(
            &mut x,
            View::dense(0, n, d),
            &up,
            View::rows(0, n, ff, up_width),
            true,
        );
        drop(w_down);
        if let Some(b) = &blk.down_bias {
            add_bias(&mut x, &values(b)?);
        }
    }
    Ok((x, new_kv))
}

/// Logits of residual rows `x` ([rows, d_model], flat): the final norm, then the unembedding in
/// the model's precision: [rows, vocab].
pub(crate) fn logits(model: &Llama, x: &[f32]) -> Result<Tensor> {
    let c = &model.config;
    let d = c.d_model;
    let n = x.len() / d;
    let mut h = vec![0f32; n * d];
    FlatNorm::of(&model.norm)?.apply(c.block.norm, c.rms_eps, x, &mut h);
    let packed = model.packed.as_ref();
    let w = Weight::of(&model.unembed, packed.map(|p| &p.unembed))?;
    let vocab = w.cols();
    let mut out = vec![0f32; n * vocab];
    w.apply(
        &mut out,
        View::dense(0, n, vocab),
        &h,
        View::dense(0, n, d),
        false,
    );
    drop(w);
    if let Some(b) = &model.unembed_bias {
        add_bias(&mut out, &values(b)?);
    }
    Ok(Tensor::from_vec(out, (n, vocab), &model.device)?)
}

/// The precision a model's fused products run in, by name, with the bf16 path where bf16.
pub fn describe(precision: Precision) -> String {
    match precision {
        Precision::F32 => "f32".into(),
        Precision::Bf16 => format!("bf16 ({})", Bf16Path::detect().name()),
    }
}
