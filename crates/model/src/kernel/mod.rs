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
mod forward;
mod gemm;
mod linear;
mod math;
mod params;

pub use gemm::{matmul, View};
pub use params::FlatParams;

use crate::layout::{BlockParams, OuterParams};
use crate::ops::Dropout;
use crate::{ModelConfig, ModelError, Objective, PositionEncoding, Result};
use attention::RopeTable;
use math::cross_entropy_backward;

/// Activations of one block kept for the backward pass.
#[derive(Debug)]
struct LayerCache {
    stats: Vec<f32>,                // [N, 2] LayerNorm mean and rstd
    h: Vec<f32>,                    // [N, d] LayerNorm output
    qkv: Vec<f32>,                  // [N, 3d] q, k rotated; v
    pattern: Vec<f32>,              // [B, H, T, T] softmax rows of the query positions
    z: Vec<f32>,                    // [NQ, d] merged head outputs
    g: Vec<f32>,                    // [NQ, m] GELU output
    gp: Vec<f32>,                   // [NQ, m] GELU derivative
    pattern_mask: Option<Vec<f32>>, // [B, H, T, T]
    attn_mask: Option<Vec<f32>>,    // [N, d]
    mlp_mask: Option<Vec<f32>>,     // [N, d]
}

/// Buffers reused by every layer (two in the forward pass, the rest in the backward pass).
#[derive(Debug)]
struct Scratch {
    a: Vec<f32>,    // [N, d] attention output (forward)
    mo: Vec<f32>,   // [N, d] MLP output (forward)
    dx: Vec<f32>,   // [N, d] gradient of the residual stream
    dh: Vec<f32>,   // [N, d]
    dqkv: Vec<f32>, // [N, 3d]
    dz: Vec<f32>,   // [N, d]
    da: Vec<f32>,   // [N, d]
    dmo: Vec<f32>,  // [N, d]
    dg: Vec<f32>,   // [N, m]
    dhf: Vec<f32>,  // [R, d]
    dxq: Vec<f32>,  // [R, d]
    dp: Vec<f32>,   // [B, 2 T^2] attention scratch of each batch row
}

/// The absolute position encoding added to the embeddings, prepared for `seq` positions.
#[derive(Debug)]
enum Absolute {
    /// No absolute encoding.
    None,
    /// A fixed sinusoid table [seq, d_model].
    Sinusoid(Vec<f32>),
    /// The row of the learned table (`transformer.wpe.weight`) each position reads [seq].
    Learned(Vec<usize>),
}

impl Absolute {
    fn new(config: &ModelConfig, seq: usize) -> Result<Self> {
        let Some(encoding) = config.absolute() else {
            return Ok(Absolute::None);
        };
        if let Some(table) = encoding.sinusoid_table(config.d_model, 0..seq) {
            return Ok(Absolute::Sinusoid(table));
        }
        let rows = (0..seq)
            .map(|p| Ok(encoding.learned_row(p)?.unwrap_or(0)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Absolute::Learned(rows))
    }

    /// Bytes held (a row index counts 8).
    fn bytes(config: &ModelConfig, seq: usize) -> u64 {
        use ropelab_io::resources::bytes;
        match config.absolute() {
            None => 0,
            Some(PositionEncoding::Learned { .. }) => bytes(&[seq, 8]),
            Some(_) => bytes(&[seq, config.d_model, 4]),
        }
    }
}

/// The fused training step for one model configuration and batch shape.
#[derive(Debug)]
pub struct FusedStep {
    config: ModelConfig,
    batch: usize,
    objective: Objective,
    /// Rows with logits: R = batch (last position) or batch * seq (every position).
    out_rows: usize,
    seq: usize,
    ropes: Vec<Option<RopeTable>>,
    absolute: Absolute,
    layers: Vec<LayerCache>,
    resid: Vec<Vec<f32>>, // L + 1 inputs of each block ([N, d]) and the output ([R, d])
    emb_mask: Option<Vec<f32>>,
    dropout_on: bool, // whether the masks belong to the last forward
    ids: Vec<u32>,    // [B, T] of the last forward
    forward_done: bool,
    final_stats: Vec<f32>, // [R, 2]
    final_h: Vec<f32>,     // [R, d]
    logits: Vec<f32>,      // [R, out]
    grads: FlatParams,
    scratch: Scratch,
}

/// Which rows of an [N, ·] buffer a block computes: `first + i * step` for i < n.
#[derive(Debug, Clone, Copy)]
struct Rows {
    first: usize,
    step: usize,
    n: usize,
}

impl Rows {
    /// Rows computed by block `layer` of `n_layers`: every position, or (unless `all`) the
    /// last one of each sequence in the last block.
    fn of_layer(layer: usize, n_layers: usize, batch: usize, seq: usize, all: bool) -> Self {
        if layer + 1 == n_layers && !all {
            Rows {
                first: seq - 1,
                step: seq,
                n: batch,
            }
        } else {
            Rows {
                first: 0,
                step: 1,
                n: batch * seq,
            }
        }
    }

    fn at(&self, i: usize) -> usize {
        self.first + i * self.step
    }
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
        config.check()?;
        let grads = FlatParams::zeros(config);
        grads.layout.check_fused_qkv()?;
        if batch == 0 || seq == 0 {
            return Err(ModelError::Config(format!(
                "the fused step needs a non-empty batch, got {batch} x {seq}"
            )));
        }
        // Attention-only blocks keep no MLP activations.
        let (d, m, h, v) = (
            config.d_model,
            if config.mlp { config.d_mlp } else { 0 },
            config.n_heads,
            config.out_dim(),
        );
        let n = batch * seq;
        let r = if objective.every_position() { n } else { batch };
        let layers = (0..config.n_layers)
            .map(|l| {
                let nq = if l + 1 == config.n_layers { r } else { n };
                LayerCache {
                    stats: vec![0.0; 2 * n],
                    h: vec![0.0; n * d],
                    qkv: vec![0.0; n * 3 * d],
                    pattern: vec![0.0; batch * h * seq * seq],
                    z: vec![0.0; nq * d],
                    g: vec![0.0; nq * m],
                    gp: vec![0.0; nq * m],
                    pattern_mask: None,
                    attn_mask: None,
                    mlp_mask: None,
                }
            })
            .collect();
        let mut resid: Vec<Vec<f32>> = (0..config.n_layers).map(|_| vec![0.0; n * d]).collect();
        resid.push(vec![0.0; r * d]);
        Ok(Self {
            config: config.clone(),
            batch,
            objective,
            out_rows: r,
            seq,
            ropes: (0..config.n_layers)
                .map(|l| RopeTable::new(config.layer_position(l), seq))
                .collect(),
            absolute: Absolute::new(config, seq)?,
            layers,
            resid,
            emb_mask: None,
            dropout_on: false,
            ids: vec![0; n],
            forward_done: false,
            final_stats: vec![0.0; 2 * r],
            final_h: vec![0.0; r * d],
            logits: vec![0.0; r * v],
            grads,
            scratch: Scratch {
                a: vec![0.0; n * d],
                mo: vec![0.0; n * d],
                dx: vec![0.0; n * d],
                dh: vec![0.0; n * d],
                dqkv: vec![0.0; n * 3 * d],
                dz: vec![0.0; n * d],
                da: vec![0.0; n * d],
                dmo: vec![0.0; n * d],
                dg: vec![0.0; n * m],
                dhf: vec![0.0; r * d],
                dxq: vec![0.0; r * d],
                dp: vec![0.0; batch * 2 * seq * seq],
            },
        })
    }

    /// Bytes of the buffers [`FusedStep::new`] allocates for `batch` sequences of `seq` tokens,
    /// plus the dropout masks the first step with dropout adds: the up-front estimate of a
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
        let (d, m, h, v) = (
            config.d_model,
            if config.mlp { config.d_mlp } else { 0 },
            config.n_heads,
            config.out_dim(),
        );
        let n = bytes(&[batch, seq]);
        // Rows with logits: the last position of each sequence, or every position.
        let r = if objective.every_position() {
            n
        } else {
            batch as u64
        };
        let layer = |nq: u64| {
            [
                2 * n,
                n.saturating_mul(d as u64),
                n.saturating_mul(3 * d as u64),
                bytes(&[batch, h, seq, seq]),
                nq.saturating_mul(d as u64),
                nq.saturating_mul(2 * m as u64),
            ]
            .iter()
            .fold(0u64, |a, &x| a.saturating_add(x))
        };
        let layers = config.n_layers as u64;
        let mut floats = layer(n)
            .saturating_mul(layers.saturating_sub(1))
            .saturating_add(layer(r));
        // The residual stream per layer, and the final rows.
        floats = floats
            .saturating_add(n.saturating_mul(d as u64).saturating_mul(layers))
            .saturating_add(r.saturating_mul(d as u64));
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
        floats = floats.saturating_add(tables);
        // Token ids (u32), final LayerNorm, logits, gradients (the parameters' size).
        floats = floats
            .saturating_add(n)
            .saturating_add(r.saturating_mul((2 + d + v) as u64))
            .saturating_add(config.n_params() as u64);
        // Scratch: eight [N, d]-sized rows, one [N, m], two [R, d], one [B, 2 T^2].
        floats = floats
            .saturating_add(n.saturating_mul(10 * d as u64))
            .saturating_add(n.saturating_mul(m as u64))
            .saturating_add(r.saturating_mul(2 * d as u64))
            .saturating_add(bytes(&[batch, 2, seq, seq]));
        if config.dropout > 0.0 {
            // Embedding mask, and per layer the pattern, attention and MLP masks.
            let masks = if config.mlp { 2 } else { 1 };
            let per_layer =
                bytes(&[batch, h, seq, seq]).saturating_add(n.saturating_mul(masks * d as u64));
            floats = floats
                .saturating_add(n.saturating_mul(d as u64))
                .saturating_add(per_layer.saturating_mul(layers));
        }
        floats
            .saturating_mul(4)
            .saturating_add(Absolute::bytes(config, seq))
    }

    /// Bytes of the buffers this step holds now (test helper for [`FusedStep::bytes`]).
    #[cfg(test)]
    fn held_bytes(&self) -> u64 {
        let opt = |v: &Option<Vec<f32>>| v.as_ref().map_or(0, Vec::len);
        let layers: usize = self
            .layers
            .iter()
            .map(|c| {
                c.stats.len()
                    + c.h.len()
                    + c.qkv.len()
                    + c.pattern.len()
                    + c.z.len()
                    + c.g.len()
                    + c.gp.len()
                    + opt(&c.pattern_mask)
                    + opt(&c.attn_mask)
                    + opt(&c.mlp_mask)
            })
            .sum();
        let tables: usize = self.ropes.iter().flatten().map(RopeTable::floats).sum();
        let s = &self.scratch;
        let scratch = [
            &s.a, &s.mo, &s.dx, &s.dh, &s.dqkv, &s.dz, &s.da, &s.dmo, &s.dg, &s.dhf, &s.dxq, &s.dp,
        ]
        .iter()
        .map(|v| v.len())
        .sum::<usize>();
        let floats = layers
            + tables
            + self.resid.iter().map(Vec::len).sum::<usize>()
            + opt(&self.emb_mask)
            + self.ids.len()
            + self.final_stats.len()
            + self.final_h.len()
            + self.logits.len()
            + self.grads.values.len()
            + scratch;
        let absolute = match &self.absolute {
            Absolute::None => 0,
            Absolute::Sinusoid(t) => 4 * t.len(),
            Absolute::Learned(rows) => 8 * rows.len(),
        };
        4 * floats as u64 + absolute as u64
    }

    /// Gradients of the last [`FusedStep::loss_and_grads`], laid out as the parameters.
    pub fn grads(&self) -> &FlatParams {
        &self.grads
    }

    /// Flat offsets of block `layer`'s parameters (the gradient buffer has the parameters'
    /// layout).
    fn block_offsets(&self, layer: usize) -> BlockParams<usize> {
        self.grads.layout.block_offsets(layer)
    }

    /// Flat offsets of the parameters outside the blocks.
    fn outer_offsets(&self) -> OuterParams<usize> {
        self.grads.layout.outer_offsets()
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
        let loss = cross_entropy_backward(&mut self.logits, self.config.out_dim(), targets);
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

    fn config(dropout: f32, last: PositionEncoding) -> ModelConfig {
        ModelConfig {
            vocab_size: 19,
            n_layers: 3,
            n_heads: 2,
            d_model: 16,
            d_mlp: 12,
            ln_eps: 1e-5,
            dropout,
            tied_embeddings: false,
            position: PositionEncoding::gptj(4),
            layer_positions: vec![PositionEncoding::gptj(4), PositionEncoding::None, last],
            attention: crate::AttentionKind::Softmax,
            mlp: true,
            layer_norm: true,
            head: crate::Head::Lm,
        }
    }

    /// The up-front estimate counts exactly the buffers a step holds, before and after a step
    /// with dropout (which adds the masks), for mixed position encodings.
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
