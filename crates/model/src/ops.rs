//! Differentiable building blocks written with plain candle ops (candle-nn's fused LayerNorm,
//! softmax and rotary ops have no backward: docs/model.md, "Two engines").

use candle_core::{Tensor, D};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::Result;

/// LayerNorm over the last dim: (x - mean) / sqrt(var + eps) * weight + bias.
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    let mean = x.mean_keepdim(D::Minus1)?;
    let centred = x.broadcast_sub(&mean)?;
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = centred.broadcast_div(&(var + eps)?.sqrt()?)?;
    Ok(normed.broadcast_mul(weight)?.broadcast_add(bias)?)
}

/// Softmax over the last dim; rows may hold -inf (masked) entries but not only those.
pub fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    Ok(e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?)
}

/// Log-softmax over the last dim.
pub fn log_softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let shifted = x.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    Ok(shifted.broadcast_sub(&lse)?)
}

/// Mean cross-entropy of `logits` `[batch, vocab]` against `targets` `[batch]` (u32 ids).
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let logp = log_softmax_last_dim(logits)?;
    let picked = logp.gather(&targets.unsqueeze(1)?, 1)?; // [batch, 1]
    Ok(picked.mean_all()?.neg()?)
}

/// Inverted dropout with its own seeded stream, so training is reproducible.
#[derive(Debug, Clone)]
pub struct Dropout {
    p: f32,
    rng: ChaCha8Rng,
}

impl Dropout {
    /// Drops each element with probability `p` (kept ones scaled by 1 / (1 - p)).
    pub fn new(p: f32, rng: ChaCha8Rng) -> Self {
        Self { p, rng }
    }

    /// The drop probability.
    pub fn p(&self) -> f32 {
        self.p
    }

    /// Fills `mask` with the next mask values from the stream: 0 (dropped) or 1 / (1 - p).
    /// Element i is dropped exactly when the i-th `random::<f32>()` of the stream would be
    /// below p; the words are drawn in bulk and compared as integers.
    pub fn fill_mask(&mut self, mask: &mut [f32]) {
        let scale = 1.0 / (1.0 - self.p);
        // random::<f32>() is (next_u32 >> 8) * 2^-24, so u < p * 2^24 <=> (u >> 8) < threshold.
        let threshold = (f64::from(self.p) * f64::from(1u32 << 24)).ceil() as u32;
        let mut words = [0u32; 1024];
        for chunk in mask.chunks_mut(words.len()) {
            let words = &mut words[..chunk.len()];
            self.rng.fill(words);
            for (m, w) in chunk.iter_mut().zip(words.iter()) {
                *m = if (w >> 8) < threshold { 0.0 } else { scale };
            }
        }
    }

    /// `x` with a fresh mask applied (`x` itself when p = 0).
    pub fn apply(&mut self, x: &Tensor) -> Result<Tensor> {
        if self.p == 0.0 {
            return Ok(x.clone());
        }
        let mut mask = vec![0f32; x.elem_count()];
        self.fill_mask(&mut mask);
        let mask = Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?;
        Ok(x.mul(&mask)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn softmax_and_layer_norm_match_closed_forms() {
        let dev = Device::Cpu;
        let x = Tensor::new(&[[1f32, 2.0, 3.0], [0.0, f32::NEG_INFINITY, 0.0]], &dev).unwrap();
        let s: Vec<Vec<f32>> = softmax_last_dim(&x).unwrap().to_vec2().unwrap();
        let z: f32 = [1f32, 2.0, 3.0].iter().map(|v| v.exp()).sum();
        assert!((s[0][2] - 3f32.exp() / z).abs() < 1e-6);
        assert_eq!(s[1], vec![0.5, 0.0, 0.5]);

        let x = Tensor::new(&[[1f32, 2.0, 3.0, 6.0]], &dev).unwrap();
        let w = Tensor::new(&[1f32, 2.0, 1.0, 1.0], &dev).unwrap();
        let b = Tensor::new(&[0f32, 0.0, 1.0, 0.0], &dev).unwrap();
        let y: Vec<Vec<f32>> = layer_norm(&x, &w, &b, 1e-5).unwrap().to_vec2().unwrap();
        let (mean, var) = (3.0f32, (4.0 + 1.0 + 0.0 + 9.0) / 4.0);
        let n = |v: f32| (v - mean) / (var + 1e-5f32).sqrt();
        let want = [n(1.0), 2.0 * n(2.0), n(3.0) + 1.0, n(6.0)];
        for (a, w) in y[0].iter().zip(want) {
            assert!((a - w).abs() < 1e-5, "{a} vs {w}");
        }
    }

    /// The bulk mask equals drawing `random::<f32>() < p` one value at a time.
    #[test]
    fn dropout_masks_follow_the_uniform_stream() {
        use rand::SeedableRng;
        for p in [0.1f32, 0.5, 0.3, 1e-7] {
            let mut d = Dropout::new(p, ChaCha8Rng::seed_from_u64(7));
            let mut reference = ChaCha8Rng::seed_from_u64(7);
            let mut mask = vec![0f32; 5000];
            d.fill_mask(&mut mask[..1500]);
            d.fill_mask(&mut mask[1500..]);
            for m in mask {
                let dropped = reference.random::<f32>() < p;
                assert_eq!(m == 0.0, dropped, "p = {p}");
                assert!(dropped || (m - 1.0 / (1.0 - p)).abs() < 1e-7);
            }
        }
    }

    #[test]
    fn cross_entropy_of_uniform_logits_is_log_vocab() {
        let dev = Device::Cpu;
        let logits = Tensor::zeros((4, 10), DType::F32, &dev).unwrap();
        let targets = Tensor::new(&[0u32, 3, 9, 1], &dev).unwrap();
        let l: f32 = cross_entropy(&logits, &targets)
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!((l - 10f32.ln()).abs() < 1e-6);
    }
}
