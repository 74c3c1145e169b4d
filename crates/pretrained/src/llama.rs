//! The Llama-family forward (Llama, Mistral without a sliding window, Qwen2): RMSNorm,
//! grouped-query attention with RoPE (interleaved for GGUF `llama` files, whose q/k rows the
//! converter permutes; split halves for Qwen2 and Hugging Face weights; frequencies scaled as the
//! file says), q/k/v biases where the architecture has them, SwiGLU MLP, untied or tied
//! unembedding. Hook
//! names, shapes and interventions are the GPT-J model's (keys and values are expanded to one
//! per query head before their hooks).

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Storage, Tensor, D};
use ropelab_model::attention::{attend_in_blocks, blocked_softmax};
use ropelab_model::ops::softmax_last_dim;
use ropelab_model::{rope, AttentionKind, HookKind, HookPoint, Hooks, PositionEncoding, Rotation};

use ropelab_model::kernel::{Bf16Path, Precision};

use crate::fused::PackedWeights;
use crate::gguf::{GgufFile, LlamaConfig, Mlp, Norm, Residual};
use crate::quant::QuantMatrix;
use crate::Result;

/// Tokens per cached forward call of a long prompt: memory grows with this times
/// [`ATTENTION_BLOCK`] keys, not with the context squared.
pub const PREFILL_CHUNK: usize = 512;

/// A norm's gain and, for a LayerNorm, its bias: [d_model] each.
pub(crate) struct NormWeights {
    pub(crate) weight: Tensor,
    pub(crate) bias: Option<Tensor>,
}

/// One block's weights, stored transposed ([in, out], contiguous) so that every projection is
/// a plain row-major matmul; q, k and v side by side (one product), and SwiGLU's gate and up
/// side by side (one product). The fused forward ([`crate::fused`]) reads the same buffers.
pub(crate) struct Block {
    pub(crate) attn_norm: NormWeights,
    /// q, k and v: [d_model, (heads + 2 kv_heads) * head_dim].
    pub(crate) qkv: Tensor,
    /// Their biases (Qwen2, GPT-NeoX): [(heads + 2 kv_heads) * head_dim].
    pub(crate) qkv_bias: Option<Tensor>,
    pub(crate) o: Tensor, // [heads * head_dim, d_model]
    pub(crate) o_bias: Option<Tensor>,
    /// The MLP's norm (None: GPT-J's one norm serves both).
    pub(crate) ffn_norm: Option<NormWeights>,
    /// The MLP's input projection: gate then up, [d_model, 2 d_ff] (SwiGLU), or up alone,
    /// [d_model, d_ff] (GELU).
    pub(crate) up: Tensor,
    pub(crate) up_bias: Option<Tensor>,
    pub(crate) down: Tensor, // [d_ff, d_model]
    pub(crate) down_bias: Option<Tensor>,
    /// The same projections in the file's quantized blocks, when it stores them so (used for
    /// single-token steps, see [`Llama::with_quantized_decode`]).
    pub(crate) quant: Option<QuantBlock>,
}

/// One block's projections as [out, in] matrices in quantized blocks.
pub(crate) struct QuantBlock {
    pub(crate) q: QuantMatrix,
    pub(crate) k: QuantMatrix,
    pub(crate) v: QuantMatrix,
    pub(crate) o: QuantMatrix,
    pub(crate) gate: QuantMatrix,
    pub(crate) up: QuantMatrix,
    pub(crate) down: QuantMatrix,
}

/// x [..., in] times a transposed weight (or its quantized blocks when `quant` is given), plus
/// `bias`.
fn affine(
    x: &Tensor,
    w: &Tensor,
    quant: Option<&QuantMatrix>,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    let y = match quant {
        Some(q) => quant_linear(x, q)?,
        None => linear(x, w)?,
    };
    match bias {
        Some(b) => Ok(y.broadcast_add(b)?),
        None => Ok(y),
    }
}

impl Block {
    /// h [b, t, d_model] through q, k and v, split into heads: [b, heads, t, head_dim],
    /// [b, kv_heads, t, head_dim] twice. One product of the side-by-side weights, or three
    /// matrix-vector products from the quantized blocks when `quantized` and stored so.
    fn qkv(
        &self,
        h: &Tensor,
        c: &LlamaConfig,
        quantized: bool,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (b, t, _) = h.dims3()?;
        let hd = c.head_dim();
        let (q_out, kv_out) = (c.n_heads * hd, c.n_kv_heads * hd);
        let bias = |at: usize, n: usize| -> Result<Option<Tensor>> {
            Ok(match &self.qkv_bias {
                Some(bias) => Some(bias.narrow(0, at, n)?),
                None => None,
            })
        };
        let split = |y: Tensor, n: usize| -> Result<Tensor> {
            Ok(y.reshape((b, t, n, hd))?.transpose(1, 2)?.contiguous()?)
        };
        match self.quant.as_ref().filter(|_| quantized) {
            Some(qb) => {
                let q = affine(h, &self.qkv, Some(&qb.q), bias(0, q_out)?.as_ref())?;
                let k = affine(h, &self.qkv, Some(&qb.k), bias(q_out, kv_out)?.as_ref())?;
                let v = affine(
                    h,
                    &self.qkv,
                    Some(&qb.v),
                    bias(q_out + kv_out, kv_out)?.as_ref(),
                )?;
                Ok((
                    split(q, c.n_heads)?,
                    split(k, c.n_kv_heads)?,
                    split(v, c.n_kv_heads)?,
                ))
            }
            None => {
                let y = affine(h, &self.qkv, None, self.qkv_bias.as_ref())?; // [b, t, W]
                let part = |at: usize, n: usize| y.narrow(D::Minus1, at, n)?.contiguous();
                Ok((
                    split(part(0, q_out)?, c.n_heads)?,
                    split(part(q_out, kv_out)?, c.n_kv_heads)?,
                    split(part(q_out + kv_out, kv_out)?, c.n_kv_heads)?,
                ))
            }
        }
    }

    /// The output projection of the merged heads z [..., heads * head_dim].
    fn output(&self, z: &Tensor, quantized: bool) -> Result<Tensor> {
        let q = self.quant.as_ref().filter(|_| quantized).map(|b| &b.o);
        affine(z, &self.o, q, self.o_bias.as_ref())
    }

    /// The MLP of style `mlp`: down(silu(gate(h)) * up(h)) or down(gelu(up(h))).
    fn mlp(&self, h: &Tensor, mlp: Mlp, d_ff: usize, quantized: bool) -> Result<Tensor> {
        let qb = self.quant.as_ref().filter(|_| quantized);
        let hidden = match mlp {
            Mlp::SwiGlu => {
                let (gate, up) = match qb {
                    Some(qb) => {
                        let bias = |at: usize| -> Result<Option<Tensor>> {
                            Ok(match &self.up_bias {
                                Some(b) => Some(b.narrow(0, at, d_ff)?),
                                None => None,
                            })
                        };
                        (
                            affine(h, &self.up, Some(&qb.gate), bias(0)?.as_ref())?,
                            affine(h, &self.up, Some(&qb.up), bias(d_ff)?.as_ref())?,
                        )
                    }
                    None => {
                        let y = affine(h, &self.up, None, self.up_bias.as_ref())?;
                        (
                            y.narrow(D::Minus1, 0, d_ff)?,
                            y.narrow(D::Minus1, d_ff, d_ff)?,
                        )
                    }
                };
                (gate.silu()? * up)?
            }
            Mlp::Gelu | Mlp::GeluTanh => {
                let up = affine(h, &self.up, qb.map(|b| &b.up), self.up_bias.as_ref())?;
                match mlp {
                    Mlp::Gelu => up.gelu_erf()?,
                    _ => up.gelu()?,
                }
            }
        };
        affine(
            &hidden,
            &self.down,
            qb.map(|b| &b.down),
            self.down_bias.as_ref(),
        )
    }
}

/// What differs between the forward paths of a block (hooked, cached, batched suffixes): how
/// the un-rotated heads become the merged attention output, and what the hooks see.
trait Attend {
    /// The merged heads' output [b, t, heads * head_dim] of layer `layer` from q
    /// [b, heads, t, head_dim] and k, v [b, kv_heads, t, head_dim], before RoPE.
    fn attend(&mut self, layer: usize, q: Tensor, k: Tensor, v: Tensor) -> Result<Tensor>;

    /// The value at hook point `kind` of `layer` (unchanged off the hooked path).
    fn point(&mut self, _layer: usize, _kind: HookKind, x: Tensor) -> Result<Tensor> {
        Ok(x)
    }
}

/// Merged head outputs: z [b, heads, t, head_dim] -> [b, t, heads * head_dim].
fn merge_heads(z: &Tensor) -> Result<Tensor> {
    let (b, nh, t, hd) = z.dims4()?;
    Ok(z.transpose(1, 2)?.reshape((b, t, nh * hd))?)
}

/// RoPE at the positions of one call, applied to q and k before the cached and suffix
/// attentions (the hooked path rotates inside [`attend_in_blocks`]).
struct Rotary {
    rotation: Rotation,
    cos: Tensor, // [t, planes]
    sin: Tensor, // [t, planes]
}

impl Rotary {
    /// The rotation of `position` at `positions` (None without one).
    fn at(
        position: &PositionEncoding,
        positions: &[usize],
        device: &Device,
    ) -> Result<Option<Self>> {
        let Some(rotation) = position.rotation() else {
            return Ok(None);
        };
        let (cos, sin) = rope::angles_of(positions, &rotation, device)?;
        Ok(Some(Self { rotation, cos, sin }))
    }

    /// x [b, n, t, head_dim] rotated (unchanged without a rotation).
    fn apply(this: &Option<Self>, x: Tensor) -> Result<Tensor> {
        match this {
            Some(r) => Ok(rope::rotate(
                &x,
                &r.cos,
                &r.sin,
                r.rotation.rotary_dim,
                r.rotation.layout,
            )?),
            None => Ok(x),
        }
    }
}

/// The hooked path: every hook point and intervention of the GPT-J model.
struct Hooked<'a> {
    model: &'a Llama,
    hooks: &'a mut Hooks,
}

impl Attend for Hooked<'_> {
    fn attend(&mut self, layer: usize, q: Tensor, k: Tensor, v: Tensor) -> Result<Tensor> {
        let c = &self.model.config;
        let position = &self.model.position;
        let point = |kind| HookPoint::new(layer, kind);
        let (b, nkv, t, hd) = k.dims4()?;
        // Each key/value head serves nh / nkv consecutive query heads.
        let expand = |kv: Tensor| -> Result<Tensor> {
            let group = c.n_heads / nkv;
            if group == 1 {
                return Ok(kv);
            }
            Ok(kv
                .unsqueeze(2)?
                .expand((b, nkv, group, t, hd))?
                .reshape((b, c.n_heads, t, hd))?)
        };
        let hooks = &mut *self.hooks;
        let planes = |p| position.plane_dims(p);
        let q = hooks.restrict(layer, q, planes)?;
        let q = hooks.point(point(HookKind::Q), q)?;
        let k = hooks.restrict(layer, expand(k)?, planes)?;
        let k = hooks.point(point(HookKind::K), k)?;
        let v = hooks.point(point(HookKind::V), expand(v)?)?;
        let scale = 1.0 / (hd as f64).sqrt();
        let z = attend_in_blocks(
            layer,
            (q, k, &v),
            (position, 0),
            (AttentionKind::Softmax, scale),
            hooks,
            None,
            self.model.attention_block,
        )?; // [b, nh, t, hd]
        let z = hooks.ablate(layer, z)?;
        let z = hooks.point(point(HookKind::Z), z)?;
        merge_heads(&z)
    }

    fn point(&mut self, layer: usize, kind: HookKind, x: Tensor) -> Result<Tensor> {
        Ok(self.hooks.point(HookPoint::new(layer, kind), x)?)
    }
}

/// The cached path: one sequence's new positions attend to the cache's keys and their own
/// (in key blocks with a running softmax), and the cache gains their keys and values.
struct Cached<'a> {
    cache: &'a mut KvCache,
    rotary: Option<Rotary>,
    /// The first new position.
    start: usize,
    block: usize,
}

impl Attend for Cached<'_> {
    fn attend(&mut self, layer: usize, q: Tensor, k: Tensor, v: Tensor) -> Result<Tensor> {
        let (_, nh, t, hd) = q.dims4()?;
        let nkv = k.dim(1)?;
        let group = nh / nkv;
        let q = Rotary::apply(&self.rotary, q)?;
        let k = Rotary::apply(&self.rotary, k)?;
        let (k, v) = self.cache.append(layer, k, v)?; // [1, nkv, total, hd]
                                                      // Query heads grouped by their key/value head (head h uses kv head h / group):
                                                      // [1, nkv, group * t, hd]; query i (position start + i) sees keys 0..=start + i.
        let q = q.reshape((1, nkv, group * t, hd))?;
        let scale = 1.0 / (hd as f64).sqrt();
        let z = blocked_softmax(&q, &k, &v, (self.start, t, group), scale, self.block)?;
        merge_heads(&z.reshape((1, nh, t, hd))?)
    }
}

/// The batched-suffix path: every row attends to a shared head's keys (broadcast, never
/// copied) and, causally, to its own.
struct Suffixes<'a> {
    /// Per layer: the head's keys and values [1, kv_heads, len, head_dim] (None: no head).
    head: &'a [Option<(Tensor, Tensor)>],
    rotary: Option<Rotary>,
    /// 0 where suffix query i may see suffix key j (j <= i), -inf elsewhere: [s, s].
    mask: Tensor,
}

impl Attend for Suffixes<'_> {
    fn attend(&mut self, layer: usize, q: Tensor, k: Tensor, v: Tensor) -> Result<Tensor> {
        let (b, nh, s, hd) = q.dims4()?;
        let nkv = k.dim(1)?;
        let group = nh / nkv;
        let scale = 1.0 / (hd as f64).sqrt();
        let q = Rotary::apply(&self.rotary, q)?;
        let k = Rotary::apply(&self.rotary, k)?;
        // Query heads grouped by their key/value head: [b, nkv, group * s, hd].
        let q = q.reshape((b, nkv, group * s, hd))?;
        let own = (q.matmul(&k.t()?)? * scale)?
            .reshape((b, nkv, group, s, s))?
            .broadcast_add(&self.mask)?
            .reshape((b, nkv, group * s, s))?; // [b, nkv, group * s, s]
        let z = match &self.head[layer] {
            Some((kh, vh)) => {
                let len = kh.dim(2)?;
                // [1, nkv, len, hd] keys serve every row.
                let shared = (q.broadcast_matmul(&kh.t()?)? * scale)?; // [b, nkv, g*s, len]
                let p = softmax_last_dim(&Tensor::cat(&[&shared, &own], 3)?)?;
                let from_head = p.narrow(3, 0, len)?.contiguous()?.broadcast_matmul(vh)?;
                let from_own = p.narrow(3, len, s)?.contiguous()?.matmul(&v)?;
                (from_head + from_own)?
            }
            None => softmax_last_dim(&own)?.matmul(&v)?,
        }; // [b, nkv, group * s, hd]
        merge_heads(&z.reshape((b, nh, s, hd))?)
    }
}

/// Where a model's tensors come from, named as in GGUF files (`blk.{i}.attn_q.weight`, ...).
pub(crate) trait Weights {
    /// Tensor `name` as f32, checked against `shape`, and its quantized blocks when the file
    /// stores a [rows, cols] matrix in blocks ropelab multiplies directly.
    fn matrix(
        &mut self,
        name: &str,
        shape: &[usize],
        device: &Device,
    ) -> Result<(Tensor, Option<QuantMatrix>)>;

    /// Whether the file holds tensor `name`.
    fn has(&self, name: &str) -> bool;
}

impl Weights for GgufFile {
    fn matrix(
        &mut self,
        name: &str,
        shape: &[usize],
        device: &Device,
    ) -> Result<(Tensor, Option<QuantMatrix>)> {
        self.tensor_and_blocks(name, shape, device)
    }

    fn has(&self, name: &str) -> bool {
        self.has_tensor(name)
    }
}

/// A Llama-family model (Llama, Qwen2) with f32 weights.
pub struct Llama {
    pub(crate) config: LlamaConfig,
    /// The file or directory the model was read from (named when its outputs overflow).
    source: PathBuf,
    pub(crate) embed: Tensor, // [vocab, d_model]
    pub(crate) blocks: Vec<Block>,
    pub(crate) norm: NormWeights,
    pub(crate) unembed: Tensor, // [d_model, vocab] (transposed)
    /// The unembedding's bias [vocab] (GPT-J).
    pub(crate) unembed_bias: Option<Tensor>,
    pub(crate) position: PositionEncoding,
    pub(crate) device: Device,
    /// Keys per block of the attention ([`ATTENTION_BLOCK`] by default).
    attention_block: usize,
    /// The unembedding [vocab, d_model] in quantized blocks, when the file stores it so.
    pub(crate) unembed_quant: Option<QuantMatrix>,
    /// Whether single-token cached steps use the quantized blocks.
    quantized_decode: bool,
    /// Whether prefill, cached steps and prompt suffixes run the fused forward
    /// ([`crate::fused`]; CPU only).
    fused: bool,
    /// The precision of the fused forward's products.
    pub(crate) precision: Precision,
    /// The matrices packed for bf16 products (with [`Precision::Bf16`]).
    pub(crate) packed: Option<PackedWeights>,
}

/// Keys per block of the attention (cached and hooked paths): scores are computed block by
/// block with a running softmax (flash-attention style), so a chunk of queries holds
/// `chunk x block` scores, not `chunk x context` (about 19 MB instead of 150 MB at 8K tokens
/// for SmolLM2).
pub use ropelab_model::attention::ATTENTION_BLOCK;

/// x [..., in] times a transposed Linear weight wt [in, out].
fn linear(x: &Tensor, wt: &Tensor) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let inner = *dims.last().expect("linear input has a last dim");
    let y = x.reshape((x.elem_count() / inner, inner))?.matmul(wt)?;
    let mut out = dims;
    *out.last_mut().expect("non-empty") = wt.dim(1)?;
    Ok(y.reshape(out)?)
}

/// x [..., in] times a quantized [out, in] matrix: [..., out] (a matrix-vector product per row
/// of x; meant for one row).
fn quant_linear(x: &Tensor, w: &QuantMatrix) -> Result<Tensor> {
    let input: Vec<f32> = x.flatten_all()?.to_vec1()?;
    let rows = input.len() / w.cols().max(1);
    let mut out = vec![0f32; rows * w.rows()];
    for (x, y) in input
        .chunks_exact(w.cols())
        .zip(out.chunks_exact_mut(w.rows()))
    {
        w.matvec(x, y);
    }
    let mut dims = x.dims().to_vec();
    *dims.last_mut().expect("non-empty") = w.rows();
    Ok(Tensor::from_vec(out, dims, x.device())?)
}

/// A Linear weight [out, in] stored as [in, out], contiguous.
fn transposed(w: Tensor) -> Result<Tensor> {
    Ok(w.t()?.contiguous()?)
}

/// x / sqrt(mean(x^2) + eps) * weight over the last dim.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    Ok(rms_norm_and_spread(x, weight, eps)?.0)
}

/// [`rms_norm`] and the mean of squares of every row ([..., 1]).
fn rms_norm_and_spread(x: &Tensor, weight: &Tensor, eps: f64) -> Result<(Tensor, Tensor)> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    let y = x
        .broadcast_div(&(&ms + eps)?.sqrt()?)?
        .broadcast_mul(weight)?;
    Ok((y, ms))
}

/// (x - mean(x)) / sqrt(var(x) + eps) * weight + bias over the last dim (the biased variance,
/// as torch's LayerNorm).
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    Ok(layer_norm_and_spread(x, weight, bias, eps)?.0)
}

/// [`layer_norm`] and the variance of every row ([..., 1]).
fn layer_norm_and_spread(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let centered = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
    let var = centered.sqr()?.mean_keepdim(D::Minus1)?;
    let y = centered
        .broadcast_div(&(&var + eps)?.sqrt()?)?
        .broadcast_mul(weight)?
        .broadcast_add(bias)?;
    Ok((y, var))
}

impl Llama {
    /// Loads a Llama-family GGUF file ([`crate::gguf::GGUF_ARCHITECTURES`]), dequantizing every
    /// tensor to f32 (Q4_1 / Q8_0 projections are also kept in their blocks for decoding).
    pub fn load(path: &Path, device: &Device) -> Result<Self> {
        let mut file = GgufFile::open(path)?;
        let mut c = file.llama_config()?;
        if file.has_tensor("rope_freqs.weight") {
            // Llama 3's frequency scaling as llama.cpp stores it: theta_k / factor_k. llama.cpp
            // reads the tensor in `llama` files only: another architecture's would not be
            // applied there.
            if c.arch != "llama" {
                return Err(crate::PretrainedError::gguf(
                    path,
                    format!(
                        "tensor rope_freqs.weight (Llama 3's frequency factors) is in a {} \
                         file: llama.cpp reads it for llama files only",
                        crate::escaped(&c.arch)
                    ),
                ));
            }
            let planes = c.rope_dim / 2;
            let factors: Vec<f32> = file
                .tensor("rope_freqs.weight", &[planes], device)?
                .to_vec1()?;
            let (low, high) = crate::gguf::ROPE_FACTOR_RANGE;
            if let Some((k, f)) = factors
                .iter()
                .enumerate()
                .find(|(_, f)| !crate::gguf::rope_factor_in_range(f64::from(**f)))
            {
                return Err(crate::PretrainedError::gguf(
                    path,
                    format!(
                        "tensor rope_freqs.weight holds {} for plane {k}: each Llama 3 \
                         frequency factor must lie in [{low:e}, {high:e}]",
                        crate::number(f64::from(*f))
                    ),
                ));
            }
            let thetas = c
                .rope_thetas
                .clone()
                .unwrap_or_else(|| ropelab_model::rope::frequencies(c.rope_base, c.rope_dim));
            c.rope_thetas = Some(
                thetas
                    .iter()
                    .zip(&factors)
                    .map(|(t, f)| t / f64::from(*f))
                    .collect(),
            );
            c.validate(path, usize::MAX)?;
        }
        let model = Self::from_weights(c, &mut file, path, device)?;
        file.check_all_read(&model.config.arch)?;
        Ok(model)
    }

    /// Loads a Llama-family model from `path`: a GGUF file ([`Llama::load`]) or a Hugging Face
    /// directory (`config.json` and safetensors weights, [`crate::hf`]).
    pub fn open(path: &Path, device: &Device) -> Result<Self> {
        if path.is_dir() {
            let (c, mut weights) = crate::hf::HfWeights::open(path, device)?;
            let model = Self::from_weights(c, &mut weights, path, device)?;
            weights.check_all_read()?;
            Ok(model)
        } else {
            Self::load(path, device)
        }
    }

    /// Builds the model from configuration `c` and tensors named as in GGUF files, read from
    /// `source`.
    fn from_weights(
        c: LlamaConfig,
        file: &mut impl Weights,
        source: &Path,
        device: &Device,
    ) -> Result<Self> {
        let (d, hd, ff, v) = (c.d_model, c.head_dim(), c.d_ff, c.vocab_size);
        let style = c.block;
        let layer_norm = style.norm == Norm::Layer;
        let (embed, embed_quant) = file.matrix("token_embd.weight", &[v, d], device)?;
        let norm_of = |file: &mut dyn FnMut(&str, &[usize]) -> Result<Tensor>, name: &str| {
            Ok::<_, crate::PretrainedError>(NormWeights {
                weight: file(&format!("{name}.weight"), &[d])?,
                bias: if layer_norm {
                    Some(file(&format!("{name}.bias"), &[d])?)
                } else {
                    None
                },
            })
        };
        let mut blocks = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let mut t = |name: &str, shape: &[usize]| {
                Ok::<_, crate::PretrainedError>(
                    file.matrix(&format!("blk.{i}.{name}"), shape, device)?.0,
                )
            };
            let attn_norm = norm_of(&mut t, "attn_norm")?;
            let ffn_norm = match style.residual {
                Residual::ParallelSharedNorm => None,
                _ => Some(norm_of(&mut t, "ffn_norm")?),
            };
            let (q_out, kv_out) = (c.n_heads * hd, c.n_kv_heads * hd);
            let mut bias = |on: bool, name: &str, n: usize| match on {
                true => t(name, &[n]).map(Some),
                false => Ok(None),
            };
            let qkv_bias = match (
                bias(c.qkv_bias, "attn_q.bias", q_out)?,
                bias(c.qkv_bias, "attn_k.bias", kv_out)?,
                bias(c.qkv_bias, "attn_v.bias", kv_out)?,
            ) {
                (Some(q), Some(k), Some(v)) => Some(Tensor::cat(&[q, k, v], 0)?),
                _ => None,
            };
            let o_bias = bias(style.o_bias, "attn_output.bias", d)?;
            let up_bias = bias(style.mlp_bias, "ffn_up.bias", ff)?;
            let down_bias = bias(style.mlp_bias, "ffn_down.bias", d)?;
            let mut m = |name: &str, rows: usize, cols: usize| {
                file.matrix(&format!("blk.{i}.{name}"), &[rows, cols], device)
            };
            let (q, qq) = m("attn_q.weight", q_out, d)?;
            let (k, qk) = m("attn_k.weight", kv_out, d)?;
            let (v, qv) = m("attn_v.weight", kv_out, d)?;
            let (o, qo) = m("attn_output.weight", d, q_out)?;
            let (gate, qg) = match style.mlp {
                Mlp::SwiGlu => {
                    let (g, qg) = m("ffn_gate.weight", ff, d)?;
                    (Some(g), qg)
                }
                Mlp::Gelu | Mlp::GeluTanh => (None, None),
            };
            let (up, qu) = m("ffn_up.weight", ff, d)?;
            let (down, qd) = m("ffn_down.weight", d, ff)?;
            let quant = match (qq, qk, qv, qo, qg, qu, qd) {
                (Some(q), Some(k), Some(v), Some(o), Some(gate), Some(up), Some(down)) => {
                    Some(QuantBlock {
                        q,
                        k,
                        v,
                        o,
                        gate,
                        up,
                        down,
                    })
                }
                _ => None, // some projection is stored otherwise: f32 throughout
            };
            // Gate and up side by side (the gate has no bias: zeros in its half).
            let (up, up_bias) = match gate {
                Some(gate) => (
                    Tensor::cat(&[gate, up], 0)?,
                    match up_bias {
                        Some(b) => Some(Tensor::cat(&[b.zeros_like()?, b], 0)?),
                        None => None,
                    },
                ),
                None => (up, up_bias),
            };
            blocks.push(Block {
                attn_norm,
                qkv: transposed(Tensor::cat(&[q, k, v], 0)?)?,
                qkv_bias,
                o: transposed(o)?,
                o_bias,
                ffn_norm,
                up: transposed(up)?,
                up_bias,
                down: transposed(down)?,
                down_bias,
                quant,
            });
        }
        let mut t = |name: &str, shape: &[usize]| {
            Ok::<_, crate::PretrainedError>(file.matrix(name, shape, device)?.0)
        };
        let norm = norm_of(&mut t, "output_norm")?;
        let unembed_bias = if style.unembed_bias {
            Some(t("output.bias", &[v])?)
        } else {
            None
        };
        let (unembed, unembed_quant) = if file.has("output.weight") {
            file.matrix("output.weight", &[v, d], device)?
        } else {
            (embed.clone(), embed_quant) // tied embeddings
        };
        let unembed = transposed(unembed)?;
        let position = c.position();
        Ok(Self {
            config: c,
            source: source.to_owned(),
            embed,
            blocks,
            norm,
            unembed,
            unembed_bias,
            position,
            device: device.clone(),
            attention_block: ATTENTION_BLOCK,
            unembed_quant,
            quantized_decode: true,
            fused: true,
            precision: Precision::F32,
            packed: None,
        })
    }

    /// The same model with single-token cached steps (decoding) computed from the file's
    /// quantized blocks (`true`, the default where every projection of a block is Q4_1 or
    /// Q8_0) or from the dequantized f32 weights (`false`). The weights are the same numbers
    /// either way; only the order of the sums differs (a test compares the two). Decoding reads
    /// every weight once per token, so the blocks' fewer bytes make it several times faster.
    pub fn with_quantized_decode(mut self, on: bool) -> Self {
        self.quantized_decode = on;
        self
    }

    /// The same model with prefill, cached steps and prompt suffixes computed by the fused
    /// forward (`true`, the default on the CPU) or by the candle ops of the hooked path
    /// (`false`; the reference the tests compare against). Off the CPU the candle ops run.
    pub fn with_fused(mut self, on: bool) -> Self {
        self.fused = on;
        self
    }

    /// The same model with the fused forward's matrix products in `precision`: bf16 rounds
    /// and packs every matrix once (on this machine's fastest [`Bf16Path`]; about half the f32
    /// weights' memory more) and rounds activations per product, with f32 accumulation; norms,
    /// RoPE, softmax, activations and the residual stay f32. The hooked forward stays f32.
    pub fn with_precision(mut self, precision: Precision) -> Result<Self> {
        self.packed = match precision {
            Precision::F32 => None,
            Precision::Bf16 => Some(PackedWeights::new(&self, Bf16Path::detect())?),
        };
        self.precision = precision;
        Ok(self)
    }

    /// The precision of the fused forward's products.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Bytes of the bf16-packed matrices (0 in f32).
    pub fn packed_bytes(&self) -> usize {
        self.packed.as_ref().map_or(0, PackedWeights::bytes)
    }

    /// Whether cached and suffix calls run fused.
    fn runs_fused(&self) -> bool {
        self.fused && self.device.is_cpu()
    }

    /// Whether single-token steps run from quantized blocks (asked for and available).
    pub fn decodes_quantized(&self) -> bool {
        self.quantized_decode
            && self.device.is_cpu()
            && self.blocks.iter().all(|b| b.quant.is_some())
    }

    /// The same model with attention computed over key blocks of `block` (at least 1): always
    /// on the cached path, on the hooked path for inputs longer than a query chunk whose full pattern
    /// is not needed; results equal the default's to f32 rounding (a test).
    pub fn with_attention_block(mut self, block: usize) -> Self {
        self.attention_block = block.max(1);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The position encoding of every layer.
    pub fn position(&self) -> &PositionEncoding {
        &self.position
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Logits at every position: ids [batch, pos] -> [batch, pos, vocab].
    pub fn forward(&self, ids: &Tensor, hooks: &mut Hooks) -> Result<Tensor> {
        let x = self.trunk(ids, hooks)?;
        self.finite(self.unembed(&x, false)?, "logits")
    }

    /// `t`, an output of the model (`what`: its logits, its residual stream), refused when it
    /// holds NaN or an infinity: finite weights can overflow f32 in their products (a norm gain
    /// of 3e38), and every value computed from such activations (greedy tokens, scores,
    /// accuracies) would be garbage without an error. One scan of the output, not of every
    /// intermediate.
    fn finite(&self, t: Tensor, what: &str) -> Result<Tensor> {
        if all_finite(&t)? {
            return Ok(t);
        }
        Err(self.overflow(&format!("its {what} hold NaN or an infinity")))
    }

    /// The error of activations that overflow f32 (`how`: where it shows), naming the model.
    pub(crate) fn overflow(&self, how: &str) -> crate::PretrainedError {
        crate::PretrainedError::gguf(
            &self.source,
            format!(
                "the model's activations overflow f32: {how} (its weights are finite, but too \
                 large for f32 arithmetic)"
            ),
        )
    }

    /// The error of a norm whose mean of squares (RMSNorm) or variance (LayerNorm) over a row
    /// is not finite: it would scale the row to zeros (finite, so no later scan sees it) or NaN.
    pub(crate) fn norm_overflow(&self) -> crate::PretrainedError {
        let what = match self.config.block.norm {
            Norm::Rms => "mean of squares",
            Norm::Layer => "variance",
        };
        self.overflow(&format!(
            "the {what} a norm divides a row by is not finite (the row would become 0)"
        ))
    }

    /// x [..., d_model] through norm `n` (RMSNorm or LayerNorm, as the architecture's); a row
    /// whose mean of squares (or variance) overflows is refused ([`Llama::norm_overflow`]).
    fn normalize(&self, x: &Tensor, n: &NormWeights) -> Result<Tensor> {
        let eps = self.config.rms_eps;
        let (y, spread) = match (self.config.block.norm, &n.bias) {
            (Norm::Layer, Some(bias)) => layer_norm_and_spread(x, &n.weight, bias, eps)?,
            (Norm::Layer, None) => {
                return Err(crate::PretrainedError::Input(
                    "a LayerNorm without its bias".into(),
                ))
            }
            (Norm::Rms, _) => rms_norm_and_spread(x, &n.weight, eps)?,
        };
        // One value per row: cheap beside the norm itself.
        if !all_finite(&spread)? {
            return Err(self.norm_overflow());
        }
        Ok(y)
    }

    /// Logits of residual rows x [..., d_model]: the final norm, then the unembedding (from
    /// its quantized blocks when `quantized` and the file stores them so): [..., vocab].
    fn unembed(&self, x: &Tensor, quantized: bool) -> Result<Tensor> {
        let h = self.normalize(x, &self.norm)?;
        let logits = match (&self.unembed_quant, quantized) {
            (Some(w), true) => quant_linear(&h, w)?,
            _ => linear(&h, &self.unembed)?,
        };
        match &self.unembed_bias {
            Some(b) => Ok(logits.broadcast_add(b)?),
            None => Ok(logits),
        }
    }

    /// Logits at the last position: ids [batch, pos] -> [batch, vocab].
    pub fn forward_last(&self, ids: &Tensor, hooks: &mut Hooks) -> Result<Tensor> {
        let x = self.trunk(ids, hooks)?;
        let last = x.narrow(1, x.dim(1)? - 1, 1)?.squeeze(1)?;
        self.finite(self.unembed(&last, false)?, "logits")
    }

    /// Residual stream after the last block: [batch, pos, d_model].
    pub fn trunk(&self, ids: &Tensor, hooks: &mut Hooks) -> Result<Tensor> {
        self.trunk_with_progress(ids, hooks, |_| {})
    }

    /// [`Llama::trunk`], calling `progress(blocks done)` after each block (long inputs).
    pub fn trunk_with_progress(
        &self,
        ids: &Tensor,
        hooks: &mut Hooks,
        mut progress: impl FnMut(usize),
    ) -> Result<Tensor> {
        let c = &self.config;
        hooks.check(c.n_layers, c.n_heads, c.head_dim() / 2)?;
        let (b, t) = ids.dims2()?;
        let mut x = self.embed(ids, b, t)?;
        for layer in 0..c.n_layers {
            x = self.block_unchecked(layer, &x, hooks)?;
            progress(layer + 1);
        }
        self.finite(x, "residual stream after the last block")
    }

    /// One block: x + Attn(norm(x)), then + MLP(norm(.)); an output holding NaN or an
    /// infinity is refused naming the block.
    pub fn block(&self, layer: usize, x: &Tensor, hooks: &mut Hooks) -> Result<Tensor> {
        let y = self.block_unchecked(layer, x, hooks)?;
        self.finite(y, &format!("residual stream after block {layer}"))
    }

    /// [`Llama::block`] without the check of its output.
    fn block_unchecked(&self, layer: usize, x: &Tensor, hooks: &mut Hooks) -> Result<Tensor> {
        let mut path = Hooked { model: self, hooks };
        self.block_with(layer, x.clone(), false, &mut path)
    }

    /// Block `layer` of every path, written once: x [b, t, d_model] + Attn(norm(x)), then plus
    /// MLP(norm(.)), the attention computed by `path`; projections from the quantized blocks
    /// when `quantized`.
    fn block_with(
        &self,
        layer: usize,
        x: Tensor,
        quantized: bool,
        path: &mut impl Attend,
    ) -> Result<Tensor> {
        let c = &self.config;
        let blk = &self.blocks[layer];
        let x = path.point(layer, HookKind::ResidPre, x)?;
        let h = self.normalize(&x, &blk.attn_norm)?;
        // q [b, nh, t, hd], k and v [b, nkv, t, hd]
        let (q, k, v) = blk.qkv(&h, c, quantized)?;
        let merged = path.attend(layer, q, k, v)?; // [b, t, nh * hd]
        let attn = blk.output(&merged, quantized)?;
        let attn = path.point(layer, HookKind::AttnOut, attn)?;
        let mlp_norm = |x: &Tensor| match &blk.ffn_norm {
            Some(n) => self.normalize(x, n),
            None => Ok(h.clone()),
        };
        let mlp = |h: &Tensor| blk.mlp(h, c.block.mlp, c.d_ff, quantized);
        match c.block.residual {
            Residual::Sequential => {
                let x = (x + attn)?;
                let mlp = path.point(layer, HookKind::MlpOut, mlp(&mlp_norm(&x)?)?)?;
                Ok((x + mlp)?)
            }
            // Both read the block's input: GPT-NeoX through its second norm, GPT-J through
            // the attention's.
            Residual::Parallel | Residual::ParallelSharedNorm => {
                let mlp = path.point(layer, HookKind::MlpOut, mlp(&mlp_norm(&x)?)?)?;
                Ok(((mlp + attn)? + x)?)
            }
        }
    }

    /// The embeddings of `ids` (`b * t` of them, row-major): [b, t, d_model].
    fn embed(&self, ids: &Tensor, b: usize, t: usize) -> Result<Tensor> {
        Ok(self
            .embed
            .index_select(&ids.flatten_all()?, 0)?
            .reshape((b, t, self.config.d_model))?)
    }

    /// Logits at the last of `ids` [1, new] given every earlier token in `cache`, which gains
    /// their keys and values: [1, vocab]. Prefill passes the whole prompt once; decoding passes
    /// one token at a time, so each new token costs O(context) instead of a whole forward.
    /// The same function as [`Llama::forward_last`] on the concatenated sequence (no hooks).
    pub fn forward_cached(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let x = self.trunk_cached(ids, cache)?; // [1, new, d_model]
        let last = x.narrow(1, x.dim(1)? - 1, 1)?.squeeze(1)?;
        let logits = self.unembed_cached(&last, x.dim(1)? == 1 && self.decodes_quantized())?;
        self.finite(logits, "logits")
    }

    /// Logits of residual rows x [n, d_model] of a cached or suffix call: fused unless the
    /// call runs from quantized blocks (or off the CPU): [n, vocab].
    fn unembed_cached(&self, x: &Tensor, quantized: bool) -> Result<Tensor> {
        if self.runs_fused() {
            return crate::fused::logits(self, &x.flatten_all()?.to_vec1()?, quantized);
        }
        self.unembed(x, quantized)
    }

    /// Logits at every position of `ids` [1, new] given the tokens in `cache` (which gains
    /// them): [new, vocab]. [`Llama::forward`] of the concatenated sequence, restricted to the
    /// new positions.
    pub fn forward_cached_all(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let x = self.trunk_cached(ids, cache)?.squeeze(0)?; // [new, d_model]
        self.finite(self.unembed_cached(&x, false)?, "logits")
    }

    /// The residual stream after the last block at the positions of `ids` [1, new], attending
    /// to the keys and values in `cache` as well; appends this call's to it: [1, new, d_model].
    fn trunk_cached(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let c = &self.config;
        let (b, t) = ids.dims2()?;
        if b != 1 || t == 0 {
            return Err(crate::PretrainedError::Input(format!(
                "a cached forward takes one sequence of at least one token, got [{b}, {t}]"
            )));
        }
        if cache.layers.len() != c.n_layers {
            *cache = KvCache::new(c.n_layers);
        }
        let start = cache.len;
        // One new token: every projection is a matrix-vector product, bound by reading the
        // weights, so it runs from the file's smaller quantized blocks.
        let quantized = t == 1 && self.decodes_quantized();
        if self.runs_fused() {
            let ids: Vec<u32> = ids.flatten_all()?.to_vec1()?;
            let (x, new_kv) = crate::fused::trunk(self, &[&ids], cache, true, quantized)?;
            for (layer, (k, v)) in cache.layers.iter_mut().zip(new_kv) {
                layer.0.extend(k);
                layer.1.extend(v);
            }
            cache.len = start + t;
            return Ok(Tensor::from_vec(x, (1, t, c.d_model), &self.device)?);
        }
        let positions: Vec<usize> = (start..start + t).collect();
        let mut path = Cached {
            cache,
            rotary: Rotary::at(&self.position, &positions, &self.device)?,
            start,
            block: self.attention_block,
        };
        let mut x = self.embed(ids, 1, t)?;
        for layer in 0..c.n_layers {
            x = self.block_with(layer, x, quantized, &mut path)?;
        }
        cache.len = start + t;
        Ok(x)
    }

    /// Logits at the last `tails[r]` positions of every suffix `suffixes[r]` (`[tails[r], vocab]`
    /// each), every suffix attending to the keys and values in `head` (a shared prefix, run
    /// once) and to its own earlier tokens; `head` is not changed. The suffixes run as one
    /// batch, right-padded to the longest: padding comes after each row's own tokens, so the
    /// causal mask alone keeps it out of them, and the head's keys are broadcast to every row
    /// rather than copied. The same logits as [`Llama::prefill`] of each suffix on a copy of
    /// `head` (a test). Scores take about `rows x heads x longest x (head + longest)` floats
    /// ([`Llama::suffix_batch_bytes`]).
    pub fn forward_suffixes(
        &self,
        head: &KvCache,
        suffixes: &[&[u32]],
        tails: &[usize],
    ) -> Result<Vec<Tensor>> {
        let c = &self.config;
        let bad = |m: String| Err(crate::PretrainedError::Input(m));
        if suffixes.is_empty() || suffixes.len() != tails.len() {
            return bad(format!(
                "{} suffixes with {} tails: give one tail per suffix, at least one suffix",
                suffixes.len(),
                tails.len()
            ));
        }
        if let Some((r, _)) = suffixes
            .iter()
            .zip(tails)
            .enumerate()
            .find(|(_, (ids, &tail))| tail == 0 || tail > ids.len())
        {
            return bad(format!(
                "suffix {r}: logits of the last {} of {} tokens",
                tails[r],
                suffixes[r].len()
            ));
        }
        if !head.is_empty() && head.layers.len() != c.n_layers {
            return bad(format!(
                "the head cache has {} layers, the model {}",
                head.layers.len(),
                c.n_layers
            ));
        }
        if self.runs_fused() {
            // Rows back to back, no padding.
            let (x, _) = crate::fused::trunk(self, suffixes, head, false, false)?;
            let d = c.d_model;
            let mut picked = Vec::with_capacity(tails.iter().sum::<usize>() * d);
            let mut at = 0;
            for (ids, &tail) in suffixes.iter().zip(tails) {
                picked.extend_from_slice(&x[(at + ids.len() - tail) * d..(at + ids.len()) * d]);
                at += ids.len();
            }
            let logits = crate::fused::logits(self, &picked, false)?; // [sum of tails, vocab]
            let logits = self.finite(logits, "logits")?;
            let mut out = Vec::with_capacity(tails.len());
            let mut at = 0;
            for &tail in tails {
                out.push(logits.narrow(0, at, tail)?);
                at += tail;
            }
            return Ok(out);
        }
        let b = suffixes.len();
        let s = suffixes.iter().map(|ids| ids.len()).max().unwrap_or(1);
        let start = head.len;
        let head_layers = (0..c.n_layers)
            .map(|l| match head.is_empty() {
                true => Ok(None),
                false => head.tensors(l, c.n_kv_heads, &self.device),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut ids = vec![0u32; b * s];
        for (r, row) in suffixes.iter().enumerate() {
            ids[r * s..r * s + row.len()].copy_from_slice(row);
        }
        let ids = Tensor::from_vec(ids, b * s, &self.device)?;
        let positions: Vec<usize> = (start..start + s).collect();
        // Suffix query i sees suffix keys 0..=i (and every head key).
        let mask: Vec<f32> = (0..s)
            .flat_map(|i| (0..s).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        let mut path = Suffixes {
            head: &head_layers,
            rotary: Rotary::at(&self.position, &positions, &self.device)?,
            mask: Tensor::from_vec(mask, (s, s), &self.device)?,
        };
        let mut x = self.embed(&ids, b, s)?;
        for layer in 0..c.n_layers {
            x = self.block_with(layer, x, false, &mut path)?;
        }
        // Only the asked positions are unembedded.
        let rows: Vec<u32> = suffixes
            .iter()
            .zip(tails)
            .enumerate()
            .flat_map(|(r, (ids, &tail))| {
                (ids.len() - tail..ids.len()).map(move |p| (r * s + p) as u32)
            })
            .collect();
        let picked = Tensor::from_vec(rows, tails.iter().sum::<usize>(), &self.device)?;
        let h = x.reshape((b * s, c.d_model))?.index_select(&picked, 0)?;
        let logits = self.finite(self.unembed(&h, false)?, "logits")?; // [sum, vocab]
        let mut out = Vec::with_capacity(b);
        let mut at = 0;
        for &tail in tails {
            out.push(logits.narrow(0, at, tail)?);
            at += tail;
        }
        Ok(out)
    }

    /// Bytes of the attention scores of [`Llama::forward_suffixes`] for `rows` suffixes of up
    /// to `longest` tokens after a head of `head` tokens (scores and their softmax, f32).
    pub fn suffix_batch_bytes(&self, rows: usize, longest: usize, head: usize) -> u64 {
        let c = &self.config;
        let scores = rows as u64 * c.n_heads as u64 * longest as u64 * (head + longest) as u64;
        let mlp = rows as u64 * longest as u64 * c.d_ff as u64 * 3;
        (2 * scores + mlp) * 4
    }

    /// Runs `ids` through the model into `cache`, `chunk` tokens per call (at least 1), and
    /// returns the logits at its last `tail` positions [tail, vocab] (tail >= 1, at most
    /// ids.len()). Peak memory grows with chunk x context, not context^2
    /// ([`LlamaConfig::cached_bytes`]).
    pub fn prefill(
        &self,
        ids: &[u32],
        cache: &mut KvCache,
        chunk: usize,
        tail: usize,
    ) -> Result<Tensor> {
        if tail == 0 || tail > ids.len() {
            return Err(crate::PretrainedError::Input(format!(
                "logits of the last {tail} of {} tokens",
                ids.len()
            )));
        }
        let chunk = chunk.max(1);
        let head = ids.len() - tail;
        let mut logits = vec![];
        for (i, part) in ids.chunks(chunk).enumerate() {
            let input = Tensor::from_vec(part.to_vec(), (1, part.len()), &self.device)?;
            // One token alone is a decoding step (quantized where the file allows it).
            let x = self.trunk_cached(&input, cache)?.squeeze(0)?; // [t, d_model]
                                                                   // Only the chunk's rows among the last `tail` positions are unembedded.
            let first = head.max(i * chunk) - i * chunk;
            if first < part.len() {
                let rows = x.narrow(0, first, part.len() - first)?;
                let quantized = part.len() == 1 && self.decodes_quantized();
                logits.push(self.unembed_cached(&rows, quantized)?);
            }
        }
        self.finite(Tensor::cat(&logits, 0)?, "logits")
    }

    /// Greedy continuation: up to `max_new` tokens after `prompt`, each the argmax of the logits
    /// under `decoding`'s rules, stopping at any of its stop ids. The prompt is run once and
    /// each new token reuses the keys and values of every earlier one
    /// ([`Llama::forward_cached`]); prompt and continuation must fit the model's context.
    pub fn generate(
        &self,
        prompt: &[u32],
        max_new: usize,
        decoding: &crate::decoding::Decoding,
    ) -> Result<Vec<u32>> {
        if prompt.is_empty() {
            return Err(crate::PretrainedError::Input(
                "the prompt is empty: give at least one token to continue".into(),
            ));
        }
        let context = self.config.context_length;
        if prompt.len().saturating_add(max_new) > context {
            return Err(crate::PretrainedError::Input(format!(
                "{} prompt tokens and {max_new} new tokens exceed the model's context of {context}",
                prompt.len()
            )));
        }
        let mut cache = KvCache::new(self.config.n_layers);
        let mut out = vec![];
        if max_new == 0 {
            return Ok(out);
        }
        let mut logits = self.prefill(prompt, &mut cache, PREFILL_CHUNK, 1)?; // [1, vocab]
        let mut context = prompt.to_vec();
        for step in 0..max_new {
            let next: u32 = if decoding.is_plain() {
                logits.argmax(D::Minus1)?.to_vec1::<u32>()?[0]
            } else {
                let mut row = logits.flatten_all()?.to_vec1::<f32>()?;
                decoding.choose(&mut row, &context, step)
            };
            if decoding.stops.contains(&next) {
                break;
            }
            context.push(next);
            out.push(next);
            if step + 1 < max_new {
                let input = Tensor::from_vec(vec![next], (1, 1), &self.device)?;
                logits = self.forward_cached(&input, &mut cache)?;
            }
        }
        Ok(out)
    }
}

/// The rotated keys and the values of every token a [`Llama`] has seen, per layer, so that
/// the next token attends to them without recomputing them.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    /// Per layer: rotated keys and values, token-major: [len, kv_heads * head_dim] each.
    pub(crate) layers: Vec<(Vec<f32>, Vec<f32>)>,
    /// Tokens held.
    pub(crate) len: usize,
}

impl KvCache {
    /// An empty cache for `n_layers` layers.
    pub fn new(n_layers: usize) -> Self {
        Self {
            layers: vec![(Vec::new(), Vec::new()); n_layers],
            len: 0,
        }
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Layer `layer`'s keys and values as tensors [1, kv_heads, len, head_dim] (None when
    /// empty).
    fn tensors(
        &self,
        layer: usize,
        kv_heads: usize,
        device: &Device,
    ) -> Result<Option<(Tensor, Tensor)>> {
        let (k, v) = &self.layers[layer];
        if k.is_empty() {
            return Ok(None);
        }
        let rows = self.len;
        let hd = k.len() / rows / kv_heads;
        Ok(Some((
            head_major(k, (rows, kv_heads, hd), device)?,
            head_major(v, (rows, kv_heads, hd), device)?,
        )))
    }

    /// Appends `k`, `v` [1, kv_heads, t, hd] to layer `layer`; returns the whole keys and
    /// values, [1, kv_heads, len + t, hd] each.
    fn append(&mut self, layer: usize, k: Tensor, v: Tensor) -> Result<(Tensor, Tensor)> {
        let (_, nkv, _, hd) = k.dims4()?;
        // [1, nkv, t, hd] -> [t, nkv, hd], flat.
        let token_major = |x: &Tensor| -> Result<Vec<f32>> {
            Ok(x.squeeze(0)?.transpose(0, 1)?.flatten_all()?.to_vec1()?)
        };
        let (ck, cv) = &mut self.layers[layer];
        ck.extend(token_major(&k)?);
        cv.extend(token_major(&v)?);
        let rows = ck.len() / (nkv * hd);
        Ok((
            head_major(ck, (rows, nkv, hd), k.device())?,
            head_major(cv, (rows, nkv, hd), k.device())?,
        ))
    }
}

/// Whether every element of `t` is finite: read in place for a contiguous f32 tensor on the
/// CPU; elsewhere from the sum of 0 x (0 for a finite x, NaN otherwise).
fn all_finite(t: &Tensor) -> Result<bool> {
    if t.dtype() == DType::F32 {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(cpu), Some((start, end))) = (&*storage, layout.contiguous_offsets()) {
            return Ok(cpu.as_slice::<f32>()?[start..end]
                .iter()
                .all(|x| x.is_finite()));
        }
    }
    let zero = t
        .affine(0.0, 0.0)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()?;
    Ok(zero == 0.0)
}

/// Token-major rows x [rows, heads, hd] (flat) as a tensor [1, heads, rows, hd].
fn head_major(x: &[f32], shape: (usize, usize, usize), device: &Device) -> Result<Tensor> {
    Ok(Tensor::from_slice(x, shape, device)?
        .transpose(0, 1)?
        .unsqueeze(0)?
        .contiguous()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NaN and infinities are found in place (contiguous f32 on the CPU) and through the
    /// fallback (a transposed view, another dtype).
    #[test]
    fn non_finite_values_are_found_on_both_paths() {
        let dev = Device::Cpu;
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let t = Tensor::from_vec(vec![1.0f32, 2.0, bad, 4.0, 5.0, 6.0], (2, 3), &dev).unwrap();
            assert!(!all_finite(&t).unwrap());
            assert!(!all_finite(&t.t().unwrap()).unwrap());
            assert!(!all_finite(&t.to_dtype(DType::BF16).unwrap()).unwrap());
        }
        let t = Tensor::from_vec(vec![1.0f32, -3e38, 0.0, 4.0], (2, 2), &dev).unwrap();
        assert!(all_finite(&t).unwrap());
        assert!(all_finite(&t.t().unwrap()).unwrap());
    }
}
