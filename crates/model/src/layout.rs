//! The one parameter layout (llm.c's `ParameterTensors`): which tensors a model has, their
//! Hugging Face names, shapes, order, flat offsets and whether weight decay applies. The candle
//! model, the fused kernel, the optimizer and checkpoints all read the layout from here, so a
//! new parameter is added in one place ([`GptjLayout::new`]).

use crate::{Head, ModelConfig, ModelError, Result};

/// One parameter tensor: its name, shape, start in a flat buffer of all parameters, and whether
/// AdamW decays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    /// Hugging Face name (e.g. `transformer.h.0.attn.q_proj.weight`).
    pub name: String,
    /// Shape (row-major).
    pub shape: Vec<usize>,
    /// Start of the tensor in a flat buffer laid out by this layout.
    pub offset: usize,
    /// Whether weight decay applies (weights of Linear and embedding layers; not biases or
    /// LayerNorm weights: the Hugging Face Trainer's convention).
    pub decay: bool,
}

impl ParamSpec {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tensor's range in a flat buffer.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len()
    }
}

/// An ordered list of parameter tensors packed back to back in one flat buffer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamLayout {
    specs: Vec<ParamSpec>,
    total: usize,
}

impl ParamLayout {
    /// An empty layout.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a tensor after the last one; returns its position in the list.
    pub fn push(&mut self, name: impl Into<String>, shape: Vec<usize>, decay: bool) -> usize {
        let spec = ParamSpec {
            name: name.into(),
            offset: self.total,
            shape,
            decay,
        };
        self.total += spec.len();
        self.specs.push(spec);
        self.specs.len() - 1
    }

    /// Every tensor, in order.
    pub fn specs(&self) -> &[ParamSpec] {
        &self.specs
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// Whether the layout has no tensors.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Number of values in all tensors together (the flat buffer's length).
    pub fn total(&self) -> usize {
        self.total
    }

    /// The names, in order.
    pub fn names(&self) -> Vec<String> {
        self.specs.iter().map(|s| s.name.clone()).collect()
    }
}

/// A LayerNorm's two tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormParams<T> {
    /// weight `[d_model]`
    pub w: T,
    /// bias `[d_model]`
    pub b: T,
}

impl<T> NormParams<T> {
    /// The same fields mapped by `f`.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> NormParams<U> {
        NormParams {
            w: f(&self.w),
            b: f(&self.b),
        }
    }
}

/// An MLP's four tensors (Hugging Face names in comments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlpParams<T> {
    /// mlp.fc_in.weight [d_mlp, d_model]
    pub fc_in_w: T,
    /// mlp.fc_in.bias `[d_mlp]`
    pub fc_in_b: T,
    /// mlp.fc_out.weight [d_model, d_mlp]
    pub fc_out_w: T,
    /// mlp.fc_out.bias `[d_model]`
    pub fc_out_b: T,
}

impl<T> MlpParams<T> {
    /// The same fields mapped by `f`.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> MlpParams<U> {
        MlpParams {
            fc_in_w: f(&self.fc_in_w),
            fc_in_b: f(&self.fc_in_b),
            fc_out_w: f(&self.fc_out_w),
            fc_out_b: f(&self.fc_out_b),
        }
    }
}

/// The tensors of a GPT-J block (Hugging Face names in comments): ten, or fewer without
/// LayerNorm or MLP. Used with `T = usize` for positions or offsets in a layout and with
/// `T = Var` for the model's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockParams<T> {
    /// ln_1 (None when the model has no LayerNorm)
    pub ln: Option<NormParams<T>>,
    /// attn.q_proj.weight [heads * d_head, d_model]
    pub q: T,
    /// attn.k_proj.weight [heads * d_head, d_model]
    pub k: T,
    /// attn.v_proj.weight [heads * d_head, d_model]
    pub v: T,
    /// attn.out_proj.weight [d_model, heads * d_head]
    pub o: T,
    /// mlp.* (None in attention-only blocks)
    pub mlp: Option<MlpParams<T>>,
}

impl<T> BlockParams<T> {
    /// The same fields mapped by `f`.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> BlockParams<U> {
        BlockParams {
            ln: self.ln.as_ref().map(|n| n.map(&mut f)),
            q: f(&self.q),
            k: f(&self.k),
            v: f(&self.v),
            o: f(&self.o),
            mlp: self.mlp.as_ref().map(|m| m.map(&mut f)),
        }
    }
}

/// The tensors outside the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OuterParams<T> {
    /// transformer.wte.weight [vocab, d_model]
    pub wte: T,
    /// transformer.wpe.weight [max_len, d_model]: the learned absolute position table, only
    /// with a `learned` position encoding.
    pub wpe: Option<T>,
    /// transformer.ln_f (None when the model has no LayerNorm)
    pub ln_f: Option<NormParams<T>>,
    /// lm_head.weight [vocab, d_model] (classifier.weight [classes, d_model] with a classifier
    /// head); None when tied to the embedding.
    pub lm_head_w: Option<T>,
    /// lm_head.bias `[vocab]` (classifier.bias `[classes]`)
    pub lm_head_b: T,
}

impl<T> OuterParams<T> {
    /// The same fields mapped by `f`.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> OuterParams<U> {
        OuterParams {
            wte: f(&self.wte),
            wpe: self.wpe.as_ref().map(&mut f),
            ln_f: self.ln_f.as_ref().map(|n| n.map(&mut f)),
            lm_head_w: self.lm_head_w.as_ref().map(&mut f),
            lm_head_b: f(&self.lm_head_b),
        }
    }

    /// The unembedding matrix: lm_head.weight, or the embedding when tied.
    pub fn unembedding(&self) -> &T {
        self.lm_head_w.as_ref().unwrap_or(&self.wte)
    }
}

/// The parameter layout of a GPT-J model: the flat order, and where each named tensor sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GptjLayout {
    params: ParamLayout,
    blocks: Vec<BlockParams<usize>>,
    outer: OuterParams<usize>,
}

impl GptjLayout {
    /// The layout of `config`'s parameters: the embedding (and the learned position table, if
    /// any), each block's tensors (LayerNorm and MLP only when the config has them), the final
    /// LayerNorm (likewise) and the unembedding (its weight only when untied).
    pub fn new(config: &ModelConfig) -> Self {
        let (v, d, m) = (config.vocab_size, config.d_model, config.d_mlp);
        let mut p = ParamLayout::new();
        let wte = p.push("transformer.wte.weight", vec![v, d], true);
        let wpe = config
            .learned_positions()
            .map(|rows| p.push("transformer.wpe.weight", vec![rows, d], true));
        let blocks = (0..config.n_layers)
            .map(|i| {
                let mut push = |suffix: &str, shape: Vec<usize>, decay| {
                    p.push(format!("transformer.h.{i}.{suffix}"), shape, decay)
                };
                let ln = config.layer_norm.then(|| NormParams {
                    w: push("ln_1.weight", vec![d], false),
                    b: push("ln_1.bias", vec![d], false),
                });
                let (q, k, v, o) = (
                    push("attn.q_proj.weight", vec![d, d], true),
                    push("attn.k_proj.weight", vec![d, d], true),
                    push("attn.v_proj.weight", vec![d, d], true),
                    push("attn.out_proj.weight", vec![d, d], true),
                );
                let mlp = config.mlp.then(|| MlpParams {
                    fc_in_w: push("mlp.fc_in.weight", vec![m, d], true),
                    fc_in_b: push("mlp.fc_in.bias", vec![m], false),
                    fc_out_w: push("mlp.fc_out.weight", vec![d, m], true),
                    fc_out_b: push("mlp.fc_out.bias", vec![d], false),
                });
                BlockParams {
                    ln,
                    q,
                    k,
                    v,
                    o,
                    mlp,
                }
            })
            .collect();
        let ln_f = config.layer_norm.then(|| NormParams {
            w: p.push("transformer.ln_f.weight", vec![d], false),
            b: p.push("transformer.ln_f.bias", vec![d], false),
        });
        let (head, out) = match config.head {
            Head::Lm => ("lm_head", v),
            Head::Classifier { classes } => ("classifier", classes),
        };
        let lm_head_w =
            (!config.tied_embeddings).then(|| p.push(format!("{head}.weight"), vec![out, d], true));
        let lm_head_b = p.push(format!("{head}.bias"), vec![out], false);
        Self {
            params: p,
            blocks,
            outer: OuterParams {
                wte,
                wpe,
                ln_f,
                lm_head_w,
                lm_head_b,
            },
        }
    }

    /// Fails unless W_q, W_k and W_v of every block are back to back in the flat buffer, as the
    /// fused kernel's single [3 d_model, d_model] product reads them.
    pub fn check_fused_qkv(&self) -> Result<()> {
        (0..self.n_layers()).try_for_each(|layer| self.check_qkv_adjacent(layer))
    }

    fn check_qkv_adjacent(&self, layer: usize) -> Result<()> {
        let o = self.block_offsets(layer);
        let s = self.params.specs();
        let b = &self.blocks[layer];
        if o.k != o.q + s[b.q].len() || o.v != o.k + s[b.k].len() {
            return Err(ModelError::Config(format!(
                "parameter layout: layer {layer}'s W_q, W_k, W_v are not adjacent (offsets {}, {}, {})",
                o.q, o.k, o.v
            )));
        }
        Ok(())
    }

    /// The flat layout (names, shapes, offsets, decay).
    pub fn params(&self) -> &ParamLayout {
        &self.params
    }

    /// Positions in [`ParamLayout::specs`] of block `layer`'s tensors.
    pub fn block(&self, layer: usize) -> &BlockParams<usize> {
        &self.blocks[layer]
    }

    /// Positions of the tensors outside the blocks.
    pub fn outer(&self) -> &OuterParams<usize> {
        &self.outer
    }

    /// Flat offsets of block `layer`'s tensors.
    pub fn block_offsets(&self, layer: usize) -> BlockParams<usize> {
        self.blocks[layer].map(|&i| self.params.specs[i].offset)
    }

    /// Flat offsets of the tensors outside the blocks.
    pub fn outer_offsets(&self) -> OuterParams<usize> {
        self.outer.map(|&i| self.params.specs[i].offset)
    }

    /// Number of blocks.
    pub fn n_layers(&self) -> usize {
        self.blocks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PositionEncoding;

    fn config(tied: bool) -> ModelConfig {
        ModelConfig {
            n_layers: 3,
            tied_embeddings: tied,
            ..ModelConfig::tiny(PositionEncoding::None)
        }
    }

    #[test]
    fn offsets_pack_the_tensors_back_to_back_in_hugging_face_order() {
        for tied in [false, true] {
            let c = config(tied);
            let layout = GptjLayout::new(&c);
            let specs = layout.params().specs();
            assert_eq!(specs.len(), 1 + 10 * 3 + 3 + usize::from(!tied));
            let mut next = 0;
            for s in specs {
                assert_eq!(s.offset, next, "{}", s.name);
                next += s.len();
            }
            assert_eq!(layout.params().total(), next);
            assert_eq!(specs[0].name, "transformer.wte.weight");
            assert_eq!(
                specs[layout.block(2).v].name,
                "transformer.h.2.attn.v_proj.weight"
            );
            assert_eq!(specs.last().unwrap().name, "lm_head.bias");
            let outer = layout.outer_offsets();
            assert_eq!(*outer.unembedding() == outer.wte, tied);
        }
    }

    /// The fused kernel reads W_q, W_k, W_v of a block as one [3d, d] matrix.
    #[test]
    fn qkv_weights_of_every_block_are_adjacent() {
        let c = config(false);
        let layout = GptjLayout::new(&c);
        let d = c.d_model;
        for layer in 0..c.n_layers {
            let o = layout.block_offsets(layer);
            assert_eq!((o.k - o.q, o.v - o.k), (d * d, d * d), "layer {layer}");
        }
        assert!(layout.check_fused_qkv().is_ok());
        // A layout with another tensor between W_q and W_k is refused.
        let mut broken = layout.clone();
        broken.blocks[1].k = broken.blocks[1].o;
        assert!(broken.check_fused_qkv().is_err());
    }

    #[test]
    fn decay_skips_biases_and_layer_norms() {
        let layout = GptjLayout::new(&config(false));
        for s in layout.params().specs() {
            let expected = !(s.name.ends_with(".bias") || s.name.contains("ln_"));
            assert_eq!(s.decay, expected, "{}", s.name);
        }
    }
}
