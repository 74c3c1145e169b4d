//! The flat parameter (and gradient) buffer of the fused kernel.

use crate::{GptJ, ModelConfig, Result};

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
