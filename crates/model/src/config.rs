//! Model configuration: sizes, dropout and one position encoding per layer.

use serde::{Deserialize, Serialize};

use crate::{ModelError, Result};

/// Which dimensions of a head a rotary plane pairs up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeLayout {
    /// GPT-J: plane k is dims (2k, 2k + 1).
    Interleaved,
    /// NeoX / Llama: plane k is dims (k, k + rotary_dim / 2).
    HalfSplit,
}

/// How a layer encodes positions. One enum so that further schedules (learned absolute,
/// sinusoidal, periodic lookup tables) are each one more variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PositionEncoding {
    /// No position encoding (NoPE): logits depend on content only.
    None,
    /// Rotary: plane k of the first `rotary_dim` dims of q and k is rotated by
    /// `pos * base^(-2k / rotary_dim)`; the other dims pass through.
    Rope {
        /// Frequency base (10,000 in GPT-J).
        base: f64,
        /// Number of rotated dims (even, at most d_head).
        rotary_dim: usize,
        /// Which dims form a plane.
        layout: RopeLayout,
    },
    /// Rotary with explicit plane frequencies: plane k of the first `2 * thetas.len()` dims
    /// turns by `pos * thetas[k]` (e.g. the single-angle heads of the theory).
    Angles {
        /// Radians per position, one per plane.
        thetas: Vec<f64>,
        /// Which dims form a plane.
        layout: RopeLayout,
    },
}

/// The rotation a position encoding applies to q and k.
#[derive(Debug, Clone, PartialEq)]
pub struct Rotation {
    /// Radians per position of each rotated plane.
    pub freqs: Vec<f64>,
    /// Number of rotated dims (2 per plane).
    pub rotary_dim: usize,
    /// Which dims form a plane.
    pub layout: RopeLayout,
}

impl Rotation {
    /// The dims (i, j) of every rotated plane, in plane order.
    pub fn pairs(&self) -> Vec<(usize, usize)> {
        (0..self.freqs.len())
            .map(|p| crate::rope::plane_dims(self.layout, self.rotary_dim, p))
            .collect()
    }
}

impl PositionEncoding {
    /// GPT-J's default: base 10,000, interleaved, `rotary_dim` dims.
    pub fn gptj(rotary_dim: usize) -> Self {
        PositionEncoding::Rope {
            base: 10_000.0,
            rotary_dim,
            layout: RopeLayout::Interleaved,
        }
    }

    /// The rotation applied to q and k, or `None` without position encoding.
    pub fn rotation(&self) -> Option<Rotation> {
        match self {
            PositionEncoding::None => None,
            PositionEncoding::Rope {
                base,
                rotary_dim,
                layout,
            } => Some(Rotation {
                freqs: crate::rope::frequencies(*base, *rotary_dim),
                rotary_dim: *rotary_dim,
                layout: *layout,
            }),
            PositionEncoding::Angles { thetas, layout } => Some(Rotation {
                freqs: thetas.clone(),
                rotary_dim: 2 * thetas.len(),
                layout: *layout,
            }),
        }
    }

    /// The two dims of plane `plane` (rotated planes follow the layout; the remaining dims pair
    /// up consecutively).
    pub fn plane_dims(&self, plane: usize) -> (usize, usize) {
        match self.rotation() {
            Some(r) => crate::rope::plane_dims(r.layout, r.rotary_dim, plane),
            None => (2 * plane, 2 * plane + 1),
        }
    }

    fn check(&self, d_head: usize) -> Result<()> {
        if let PositionEncoding::Angles { thetas, .. } = self {
            if thetas.is_empty() || thetas.iter().any(|t| !t.is_finite()) {
                return Err(ModelError::Config(
                    "angles must list at least one finite angle".into(),
                ));
            }
            if 2 * thetas.len() > d_head {
                return Err(ModelError::Config(format!(
                    "{} angles rotate {} dims, more than d_head {d_head}",
                    thetas.len(),
                    2 * thetas.len()
                )));
            }
        }
        if let PositionEncoding::Rope {
            base, rotary_dim, ..
        } = *self
        {
            if !(base.is_finite() && base > 0.0) {
                return Err(ModelError::Config(format!(
                    "rope base must be positive and finite, got {base}"
                )));
            }
            if rotary_dim == 0 || rotary_dim % 2 != 0 {
                return Err(ModelError::Config(format!(
                    "rotary_dim must be even and at least 2, got {rotary_dim}"
                )));
            }
            if rotary_dim > d_head {
                return Err(ModelError::Config(format!(
                    "rotary_dim {rotary_dim} is larger than d_head {d_head}"
                )));
            }
        }
        Ok(())
    }
}

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
    pub position: PositionEncoding,
    /// Per-layer position encodings; empty, or one per layer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layer_positions: Vec<PositionEncoding>,
}

fn default_ln_eps() -> f64 {
    1e-5
}

impl ModelConfig {
    /// Dimension of one head.
    pub fn d_head(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }

    /// The position encoding of layer `layer`.
    pub fn layer_position(&self, layer: usize) -> &PositionEncoding {
        self.layer_positions.get(layer).unwrap_or(&self.position)
    }

    /// Checks every value; the error names the first bad one.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(ModelError::Config(m));
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
        if !(self.ln_eps.is_finite() && self.ln_eps > 0.0) {
            return bad(format!("ln_eps must be positive, got {}", self.ln_eps));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("dropout must be in [0, 1), got {}", self.dropout));
        }
        if !self.layer_positions.is_empty() && self.layer_positions.len() != self.n_layers {
            return bad(format!(
                "layer_positions has {} entries for {} layers",
                self.layer_positions.len(),
                self.n_layers
            ));
        }
        self.position.check(self.d_head())?;
        for p in &self.layer_positions {
            p.check(self.d_head())?;
        }
        Ok(())
    }

    /// Number of parameters (saturating: an absurd config counts `usize::MAX`, never wraps).
    pub fn n_params(&self) -> usize {
        use ropelab_io::resources::bytes;
        let (d, m, v) = (self.d_model, self.d_mlp, self.vocab_size);
        let per_layer = [
            bytes(&[2, d]),
            bytes(&[4, d, d]),
            bytes(&[2, d, m]),
            bytes(&[m]),
            bytes(&[d]),
        ];
        let per_layer = per_layer.into_iter().fold(0u64, u64::saturating_add);
        let unembed = if self.tied_embeddings {
            0
        } else {
            bytes(&[v, d])
        };
        let total = [
            bytes(&[v, d]),
            per_layer.saturating_mul(self.n_layers as u64),
            bytes(&[2, d]),
            unembed,
            bytes(&[v]),
        ]
        .into_iter()
        .fold(0u64, u64::saturating_add);
        usize::try_from(total).unwrap_or(usize::MAX)
    }

    /// Whether `transformers.GPTJForCausalLM` computes exactly this model: every layer uses
    /// interleaved RoPE with base 10,000 and the same rotary_dim, and embeddings are untied.
    pub fn hf_exact(&self) -> bool {
        let first = self.layer_position(0);
        !self.tied_embeddings
            && (0..self.n_layers).all(|l| self.layer_position(l) == first)
            && matches!(first, PositionEncoding::Rope { base, layout: RopeLayout::Interleaved, .. } if *base == 10_000.0)
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
        assert!(
            err(&|c| c.layer_positions = vec![PositionEncoding::None]).contains("layer_positions")
        );
    }
}
