//! The flat parameter (and gradient) buffer of the fused kernel.

use crate::layout::{GptjLayout, ParamSpec};
use crate::{GptJ, ModelConfig, Result};

/// All parameters of a model in one flat f32 buffer, laid out by its [`GptjLayout`].
#[derive(Debug, Clone)]
pub struct FlatParams {
    /// The values.
    pub values: Vec<f32>,
    /// Where each tensor sits in `values`.
    pub layout: GptjLayout,
}

impl FlatParams {
    /// Zero parameters laid out for `config`.
    pub fn zeros(config: &ModelConfig) -> Self {
        let layout = GptjLayout::new(config);
        Self {
            values: vec![0.0; layout.params().total()],
            layout,
        }
    }

    /// A copy of the model's (f32) parameters.
    pub fn from_model(model: &GptJ) -> Result<Self> {
        let mut flat = Self {
            values: vec![0.0; model.layout().params().total()],
            layout: model.layout().clone(),
        };
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

    /// The tensors, in layout order.
    pub fn specs(&self) -> &[ParamSpec] {
        self.layout.params().specs()
    }

    /// Parameter `i` (in layout order).
    pub fn param(&self, i: usize) -> &[f32] {
        &self.values[self.specs()[i].range()]
    }

    /// Parameter `i`, mutable.
    pub fn param_mut(&mut self, i: usize) -> &mut [f32] {
        let r = self.layout.params().specs()[i].range();
        &mut self.values[r]
    }
}
