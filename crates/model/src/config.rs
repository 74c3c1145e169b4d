//! Model configuration: sizes, dropout and one position encoding per layer.

use serde::{Deserialize, Serialize};

use crate::{ModelError, PositionEncoding, Result};

/// Sizes and regularisation of a GPT-J-style decoder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Vocabulary size (padding id 0 included).
    pub vocab_size: usize,
    /// Number of blocks.
    pub n_layers: usize,
    /// Attention heads per block; d_head = d_model / n_heads.
    pub n_heads: usize,
    /// Residual stream width.
    pub d_model: usize,
    /// MLP hidden width.
    pub d_mlp: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_ln_eps")]
    pub ln_eps: f64,
    /// Dropout on embeddings, attention weights and residual branches while training.
    #[serde(default)]
    pub dropout: f32,
    /// Share the unembedding matrix with the embedding (the bias stays separate).
    #[serde(default)]
    pub tied_embeddings: bool,
    /// Position encoding of every layer without an entry in `layer_positions`.
    #[serde(deserialize_with = "ropelab_io::toml_error::tagged")]
    pub position: PositionEncoding,
    /// Per-layer position encodings; empty, or one per layer.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "ropelab_io::toml_error::tagged_list"
    )]
    pub layer_positions: Vec<PositionEncoding>,
    /// How attention weights come from the logits (softmax, or linear).
    #[serde(default)]
    pub attention: AttentionKind,
    /// Whether each block has its MLP (false: attention-only blocks, no MLP parameters).
    #[serde(default = "yes")]
    pub mlp: bool,
    /// Whether the blocks and the output use LayerNorm (false: no `ln_1`, no `ln_f`; the
    /// blocks read the residual stream itself).
    #[serde(default = "yes")]
    pub layer_norm: bool,
    /// What the output layer predicts: the next token, or a class.
    #[serde(default, deserialize_with = "ropelab_io::toml_error::tagged")]
    pub head: Head,
}

/// The output layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Head {
    /// The unembedding to the vocabulary (`lm_head.weight`, `lm_head.bias`).
    #[default]
    Lm,
    /// A linear classifier to `classes` logits (`classifier.weight`, `classifier.bias`), read
    /// at the last (EOS) position by the `eos_class` objective.
    Classifier {
        /// Number of classes (at least 2).
        classes: usize,
    },
}

/// How a head turns its logits s_ij = scale * q_i . k_j (j <= i) into attention weights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKind {
    /// softmax over the causal keys (GPT-J).
    #[default]
    Softmax,
    /// The logits themselves, unnormalised: z_i = sum_{j <= i} s_ij v_j (causal linear
    /// attention, as in the implicit-bias paper).
    Linear,
}

fn yes() -> bool {
    true
}

fn default_ln_eps() -> f64 {
    1e-5
}

/// The most layers a model may have (100x the largest model studied here).
pub const MAX_LAYERS: usize = 1 << 12;

/// The widest `d_model` (and the most heads) a model may have: 16x Llama-3-70B's 8,192.
pub const MAX_WIDTH: usize = 1 << 16;

/// The widest MLP a model may have.
pub const MAX_MLP: usize = 1 << 20;

impl ModelConfig {
    /// A tiny GPT-J for tests and examples: vocabulary 11, 2 layers of 2 heads, d_model 8, MLP
    /// 12, LayerNorm, no dropout, untied, an LM head, `position` in every layer. Tests change
    /// what they need with struct-update syntax (`ModelConfig { d_model: 16, ..tiny(p) }`).
    pub fn tiny(position: PositionEncoding) -> ModelConfig {
        ModelConfig {
            vocab_size: 11,
            n_layers: 2,
            n_heads: 2,
            d_model: 8,
            d_mlp: 12,
            ln_eps: 1e-5,
            dropout: 0.0,
            tied_embeddings: false,
            position,
            layer_positions: vec![],
            attention: AttentionKind::Softmax,
            mlp: true,
            layer_norm: true,
            head: Head::Lm,
        }
    }

    /// Dimension of one head.
    pub fn d_head(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }

    /// The position encoding of layer `layer`.
    pub fn layer_position(&self, layer: usize) -> &PositionEncoding {
        self.layer_positions.get(layer).unwrap_or(&self.position)
    }

    /// The absolute encoding added to the embeddings (the model-wide `position` when it is
    /// `sinusoidal`, `periodic_sinusoidal` or `learned`).
    pub fn absolute(&self) -> Option<&PositionEncoding> {
        self.position.is_absolute().then_some(&self.position)
    }

    /// Rows of the learned position table (`transformer.wpe.weight`), if the model has one.
    pub fn learned_positions(&self) -> Option<usize> {
        match self.position {
            PositionEncoding::Learned { max_len, .. } => Some(max_len),
            _ => None,
        }
    }

    /// Width of the output layer: the vocabulary, or the classifier's classes.
    pub fn out_dim(&self) -> usize {
        match self.head {
            Head::Lm => self.vocab_size,
            Head::Classifier { classes } => classes,
        }
    }

    /// Checks every value; the error names the first bad one.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(ModelError::Config(m));
        for (name, value, max) in [
            ("n_layers", self.n_layers, MAX_LAYERS),
            ("n_heads", self.n_heads, MAX_WIDTH),
            ("d_model", self.d_model, MAX_WIDTH),
            ("d_mlp", self.d_mlp, MAX_MLP),
        ] {
            if value > max {
                return bad(format!(
                    "{name} {value} is beyond the {max} a ropelab model may have (the size of a \
                     typo, not of a model: its tables would be allocated before any estimate)"
                ));
            }
        }
        if self.vocab_size < 2 {
            return bad(format!(
                "vocab_size must be at least 2, got {}",
                self.vocab_size
            ));
        }
        if self.n_layers == 0 {
            return bad("n_layers must be at least 1".into());
        }
        if self.n_heads == 0 {
            return bad("n_heads must be at least 1".into());
        }
        if self.d_model == 0 || !self.d_model.is_multiple_of(self.n_heads) {
            return bad(format!(
                "d_model {} must be a positive multiple of n_heads {}",
                self.d_model, self.n_heads
            ));
        }
        if self.d_mlp == 0 {
            return bad("d_mlp must be at least 1".into());
        }
        // Above 1 the epsilon outweighs the variance of any unit-scale activation: the norm
        // would divide by (about) a constant, which no LayerNorm means.
        if !(self.ln_eps.is_finite() && self.ln_eps > 0.0 && self.ln_eps <= 1.0) {
            return bad(format!(
                "ln_eps must be in (0, 1] (1e-5 in GPT-J), got {}",
                self.ln_eps
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("dropout must be in [0, 1), got {}", self.dropout));
        }
        if let Head::Classifier { classes } = self.head {
            if classes < 2 {
                return bad(format!("head.classes must be at least 2, got {classes}"));
            }
            if self.tied_embeddings {
                return bad(
                    "tied_embeddings shares the embedding with an lm head, not a classifier".into(),
                );
            }
        }
        if !self.layer_positions.is_empty() && self.layer_positions.len() != self.n_layers {
            return bad(format!(
                "layer_positions has {} entries for {} layers",
                self.layer_positions.len(),
                self.n_layers
            ));
        }
        self.position
            .check(self.d_model, self.d_head(), "position")?;
        for (l, p) in self.layer_positions.iter().enumerate() {
            let key = format!("layer_positions[{l}]");
            if p.is_absolute() {
                return bad(format!(
                    "{key}: a {} encoding is added to the embeddings once; set it as the \
                     model's `position`, not per layer",
                    p.kind()
                ));
            }
            p.check(self.d_model, self.d_head(), &key)?;
        }
        Ok(())
    }

    /// Number of parameters (saturating: an absurd config counts `usize::MAX`, never wraps).
    pub fn n_params(&self) -> usize {
        use ropelab_io::resources::bytes;
        let (d, m, v, o) = (self.d_model, self.d_mlp, self.vocab_size, self.out_dim());
        let (ln, mlp) = (u64::from(self.layer_norm), u64::from(self.mlp));
        let per_layer = [
            ln * bytes(&[2, d]),
            bytes(&[4, d, d]),
            mlp * bytes(&[2, d, m]),
            mlp * bytes(&[m]),
            mlp * bytes(&[d]),
        ];
        let per_layer = per_layer.into_iter().fold(0u64, u64::saturating_add);
        let unembed = if self.tied_embeddings {
            0
        } else {
            bytes(&[o, d])
        };
        let total = [
            bytes(&[v, d]),
            bytes(&[self.learned_positions().unwrap_or(0), d]),
            per_layer.saturating_mul(self.n_layers as u64),
            ln * bytes(&[2, d]),
            unembed,
            bytes(&[o]),
        ]
        .into_iter()
        .fold(0u64, u64::saturating_add);
        usize::try_from(total).unwrap_or(usize::MAX)
    }

    /// Whether `transformers.GPTJForCausalLM` computes exactly this model: every layer uses
    /// interleaved, unmasked RoPE with base 10,000 and the same rotary_dim, embeddings are
    /// untied, and the blocks are GPT-J's (softmax attention, MLP, LayerNorm).
    pub fn hf_exact(&self) -> bool {
        let first = self.layer_position(0);
        let gptj = |p: &PositionEncoding| match p {
            PositionEncoding::Rope { rotary_dim, .. } => *p == PositionEncoding::gptj(*rotary_dim),
            _ => false,
        };
        !self.tied_embeddings
            && self.head == Head::Lm
            && self.mlp
            && self.layer_norm
            && self.attention == AttentionKind::Softmax
            && (0..self.n_layers).all(|l| self.layer_position(l) == first)
            && gptj(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn paper() -> ModelConfig {
        ModelConfig {
            vocab_size: 137,
            n_layers: 12,
            n_heads: 1,
            d_model: 128,
            d_mlp: 512,
            ln_eps: 1e-5,
            dropout: 0.1,
            tied_embeddings: false,
            position: PositionEncoding::gptj(128),
            layer_positions: vec![],
            attention: AttentionKind::Softmax,
            mlp: true,
            layer_norm: true,
            head: Head::Lm,
        }
    }

    #[test]
    fn paper_model_has_about_2_4_million_parameters() {
        let n = paper().n_params();
        assert!((2_300_000..2_500_000).contains(&n), "{n}");
        assert!(paper().hf_exact());
    }

    #[test]
    fn bad_values_are_named() {
        let err = |f: &dyn Fn(&mut ModelConfig)| {
            let mut c = paper();
            f(&mut c);
            c.check().unwrap_err().to_string()
        };
        assert!(err(&|c| c.n_layers = 0).contains("n_layers"));
        assert!(err(&|c| c.n_heads = 3).contains("multiple of n_heads"));
        assert!(err(&|c| c.position = PositionEncoding::gptj(7)).contains("even"));
        assert!(err(&|c| c.position = PositionEncoding::gptj(256)).contains("larger than d_head"));
        assert!(err(&|c| c.dropout = 1.5).contains("dropout"));
        for eps in [0.0, -1.0, 1.5, 1e30, f64::NAN] {
            assert!(err(&|c| c.ln_eps = eps).contains("ln_eps"), "{eps}");
        }
        assert!(
            err(&|c| c.layer_positions = vec![PositionEncoding::None]).contains("layer_positions")
        );
    }
}
