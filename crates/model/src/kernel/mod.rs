//! A dedicated CPU training kernel for the GPT-J model (llm.c-style): one forward with cached
//! activations and one hand-written backward of the last-token cross-entropy, over flat f32
//! parameters laid out by [`crate::GptjLayout`], with every activation and gradient buffer
//! allocated once.
//!
//! It computes the same function as [`crate::GptJ::forward_last`] + [`crate::ops::cross_entropy`]
//! (same parameters, same dropout masks drawn in the same order) and is checked against
//! candle's autograd on that path in the tests. Fusions: one q/k/v projection, RoPE + scores +
//! causal softmax + dropout + AV per batch row, bias + exact GELU + its derivative in one pass,
//! LayerNorm with saved statistics; the last block works at the query position only (its keys
//! and values at every position). Hooks are not supported here: analysis uses the candle path.

mod attention;
mod backward;
mod bf16;
mod buffers;
mod forward;
mod gemm;
mod linear;
mod math;
mod params;
mod plan;

pub use bf16::{from_bf16, to_bf16, Bf16Path, PackedB, Precision};
pub use gemm::{matmul, matmul_bf16_on, matmul_in, matmul_packed, matmul_serial, View};
pub use math::exp;
pub use params::FlatParams;

use crate::layout::OuterParams;
use crate::ops::Dropout;
use crate::{ModelConfig, ModelError, Objective, Result};
use attention::RopeTable;
use buffers::{Absolute, Buffers};
use math::cross_entropy_backward;
use plan::BlockPlan;

/// The fused training step for one model configuration and batch shape.
#[derive(Debug)]
pub struct FusedStep {
    config: ModelConfig,
    batch: usize,
    objective: Objective,
    seq: usize,
    /// Precision of every matrix product.
    precision: Precision,
    /// What each block computes, and its weights.
    plans: Vec<BlockPlan>,
    /// The weights outside the blocks.
    outer: OuterParams<View>,
    ropes: Vec<Option<RopeTable>>,
    absolute: Absolute,
    /// The position of the first token the tables are built for (see [`FusedStep::set_start`]).
    start: usize,
    /// Activations, residual stream, logits and scratch.
    buf: Buffers<Vec<f32>>,
    dropout_on: bool, // whether the masks belong to the last forward
    ids: Vec<u32>,    // [B, T] of the last forward
    forward_done: bool,
    grads: FlatParams,
}

impl FusedStep {
    /// Buffers for `batch` sequences of `seq` tokens and the last-token objective.
    pub fn new(config: &ModelConfig, batch: usize, seq: usize) -> Result<Self> {
        Self::for_objective(config, batch, seq, Objective::LastToken)
    }

    /// Buffers for `batch` sequences of `seq` tokens trained on `objective` (every position
    /// keeps the last block at every row and logits at every position).
    pub fn for_objective(
        config: &ModelConfig,
        batch: usize,
        seq: usize,
        objective: Objective,
    ) -> Result<Self> {
        Self::with_precision(config, (batch, seq), objective, Precision::F32)
    }

    /// [`FusedStep::for_objective`] with every matrix product of forward and backward in
    /// `precision` (bf16: bf16 operands, f32 accumulation; LayerNorm, softmax, GELU, the loss
    /// and every reduction stay f32, as do the parameters and their gradients).
    pub fn with_precision(
        config: &ModelConfig,
        (batch, seq): (usize, usize),
        objective: Objective,
        precision: Precision,
    ) -> Result<Self> {
        config.check()?;
        let grads = FlatParams::zeros(config);
        grads.layout.check_fused_qkv()?;
        if batch == 0 || seq == 0 {
            return Err(ModelError::Config(format!(
                "the fused step needs a non-empty batch, got {batch} x {seq}"
            )));
        }
        Ok(Self {
            config: config.clone(),
            batch,
            objective,
            seq,
            precision,
            plans: BlockPlan::of_model(config, &grads.layout, (batch, seq), objective, precision),
            outer: plan::outer_weights(&grads.layout),
            ropes: (0..config.n_layers)
                .map(|l| RopeTable::new(config.layer_position(l), 0..seq))
                .collect(),
            absolute: Absolute::new(config, 0..seq)?,
            start: 0,
            buf: Buffers::lens(config, batch, seq, objective).allocate(),
            dropout_on: false,
            ids: vec![0; batch * seq],
            forward_done: false,
            grads,
        })
    }

    /// Bytes of the buffers [`FusedStep::new`] allocates for `batch` sequences of `seq` tokens
    /// (the dropout masks included when the model has dropout): the up-front estimate of a
    /// training run's activation memory. Saturating: absurd shapes give a huge number, never
    /// an overflow.
    pub fn bytes(config: &ModelConfig, batch: usize, seq: usize) -> u64 {
        Self::objective_bytes(config, batch, seq, Objective::LastToken)
    }

    /// [`FusedStep::bytes`] for `objective`.
    pub fn objective_bytes(
        config: &ModelConfig,
        batch: usize,
        seq: usize,
        objective: Objective,
    ) -> u64 {
        use ropelab_io::resources::bytes;
        // RoPE tables: cos and sin of every rotated plane at every position, per layer.
        let tables: u64 = (0..config.n_layers)
            .map(|l| {
                let planes = config
                    .layer_position(l)
                    .rotation()
                    .map_or(0, |r| r.planes());
                bytes(&[2, seq, planes])
            })
            .fold(0, u64::saturating_add);
        // The float buffers, token ids (u32), RoPE tables and gradients (the parameters' size).
        Buffers::lens(config, batch, seq, objective)
            .floats()
            .saturating_add(bytes(&[batch, seq]))
            .saturating_add(tables)
            .saturating_add(config.n_params() as u64)
            .saturating_mul(4)
            .saturating_add(Absolute::bytes(config, seq))
    }

    /// Bytes of the buffers this step holds now (test helper for [`FusedStep::bytes`]).
    #[cfg(test)]
    fn held_bytes(&self) -> u64 {
        let tables: usize = self.ropes.iter().flatten().map(RopeTable::floats).sum();
        let floats: usize = self.buf.all().map(Vec::len).sum::<usize>()
            + tables
            + self.ids.len()
            + self.grads.values.len();
        4 * floats as u64 + self.absolute.held_bytes()
    }

    /// Reads the next inputs at positions `start .. start + seq` (as
    /// [`crate::GptJ::starting_at`]): rebuilds the rotary and absolute tables when `start`
    /// changes. An absolute learned table without a row for a shifted position is refused.
    pub fn set_start(&mut self, start: usize) -> Result<()> {
        if start == self.start {
            return Ok(());
        }
        let positions = start..start + self.seq;
        self.absolute = Absolute::new(&self.config, positions.clone())?;
        self.ropes = (0..self.config.n_layers)
            .map(|l| RopeTable::new(self.config.layer_position(l), positions.clone()))
            .collect();
        self.start = start;
        Ok(())
    }

    /// Precision of the step's matrix products.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Gradients of the last [`FusedStep::loss_and_grads`], laid out as the parameters.
    pub fn grads(&self) -> &FlatParams {
        &self.grads
    }

    fn check_inputs(&self, params: &FlatParams, ids: &[u32]) -> Result<()> {
        if params.layout != self.grads.layout {
            return Err(ModelError::Config(
                "the parameters are laid out for another model than the fused step".into(),
            ));
        }
        if params.values.len() != self.grads.values.len() {
            return Err(ModelError::Config(format!(
                "{} parameter values given, the model has {}",
                params.values.len(),
                self.grads.values.len()
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

    /// One forward and backward pass: returns the objective's mean cross-entropy of `ids`
    /// `[batch, seq]` against `targets` (`[batch]`, or `[batch * seq]` for every position); the
    /// gradients are in [`FusedStep::grads`].
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
        crate::objective::check_targets(
            self.objective,
            targets,
            self.batch,
            self.seq,
            self.config.out_dim(),
        )
    }

    /// The backward pass of the last [`FusedStep::forward`] (which must have run with the
    /// same `params`): returns the mean cross-entropy against `targets` (as for
    /// [`FusedStep::loss_and_grads`]) and leaves the gradients in [`FusedStep::grads`]. The
    /// logits are consumed (they become their gradient).
    pub fn backward(&mut self, params: &FlatParams, targets: &[u32]) -> Result<f32> {
        self.check_targets(targets)?;
        if !self.forward_done {
            return Err(ModelError::Config(
                "the fused backward needs a forward pass first".into(),
            ));
        }
        self.forward_done = false;
        let loss = cross_entropy_backward(&mut self.buf.logits, self.config.out_dim(), targets);
        self.backward_pass(params);
        Ok(loss)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::ops::Dropout;
    use crate::PositionEncoding;

    fn config(dropout: f32, last: PositionEncoding) -> ModelConfig {
        ModelConfig {
            vocab_size: 19,
            n_layers: 3,
            d_model: 16,
            dropout,
            layer_positions: vec![PositionEncoding::gptj(4), PositionEncoding::None, last],
            ..ModelConfig::tiny(PositionEncoding::gptj(4))
        }
    }

    /// The up-front estimate counts exactly the buffers a step holds, before and after a step
    /// (with and without dropout), for mixed position encodings.
    #[test]
    fn the_byte_estimate_is_what_the_step_holds() {
        for (dropout, last, mlp) in [
            (0.0, PositionEncoding::gptj(8), true),
            (0.1, PositionEncoding::gptj(2), true),
            (0.1, PositionEncoding::None, false),
        ] {
            let mut c = config(dropout, last);
            c.mlp = mlp;
            c.layer_norm = mlp;
            let (batch, seq) = (3, 5);
            let mut step = FusedStep::new(&c, batch, seq).unwrap();
            assert_eq!(FusedStep::bytes(&c, batch, seq), step.held_bytes());
            let params = FlatParams::zeros(&c);
            let ids: Vec<u32> = (0..(batch * seq) as u32).map(|i| i % 19).collect();
            let mut drop =
                (dropout > 0.0).then(|| Dropout::new(dropout, ChaCha8Rng::seed_from_u64(1)));
            step.loss_and_grads(&params, &ids, &[1, 2, 3], drop.as_mut())
                .unwrap();
            assert_eq!(FusedStep::bytes(&c, batch, seq), step.held_bytes());
            // Every position: the last block at every row, logits at every position.
            let every = Objective::EveryPosition;
            let mut step = FusedStep::for_objective(&c, batch, seq, every).unwrap();
            let targets: Vec<u32> = (0..(batch * seq) as u32).map(|i| i % 7).collect();
            step.loss_and_grads(&params, &ids, &targets, drop.as_mut())
                .unwrap();
            assert_eq!(
                FusedStep::objective_bytes(&c, batch, seq, every),
                step.held_bytes()
            );
            // A classifier head: two logits per row.
            c.head = crate::Head::Classifier { classes: 2 };
            let params = FlatParams::zeros(&c);
            let mut step = FusedStep::for_objective(&c, batch, seq, Objective::EosClass).unwrap();
            step.loss_and_grads(&params, &ids, &[1, 0, 1], drop.as_mut())
                .unwrap();
            assert_eq!(
                FusedStep::objective_bytes(&c, batch, seq, Objective::EosClass),
                step.held_bytes()
            );
        }
        // Absurd shapes saturate.
        assert_eq!(
            FusedStep::bytes(&config(0.0, PositionEncoding::None), 1, usize::MAX),
            u64::MAX
        );
    }
}
