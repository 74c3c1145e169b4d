//! What each block of the fused step computes, fixed by the model and the batch shape and
//! built once: the rows it computes, its attention shape and its weights as views of the flat
//! parameter buffer (the gradient buffer has the same layout, so the same views address the
//! gradients).

use super::attention::Shape;
use super::bf16::Precision;
use super::gemm::View;
use crate::layout::{BlockParams, GptjLayout, MlpParams, NormParams, OuterParams, ParamSpec};
use crate::{ModelConfig, Objective};

/// Which rows of an [N, ·] buffer a block computes: `first + i * step` for i < n.
#[derive(Debug, Clone, Copy)]
pub struct Rows {
    pub first: usize,
    pub step: usize,
    pub n: usize,
}

impl Rows {
    /// Row `i` of the computed ones.
    pub fn at(&self, i: usize) -> usize {
        self.first + i * self.step
    }

    /// The first `cols` columns of the computed rows of a `[N, width]` buffer.
    pub fn view(&self, width: usize, cols: usize) -> View {
        View::rows(self.first * width, self.n, cols, self.step * width)
    }
}

/// A tensor of the layout as a view of the flat buffer: a matrix `[out, in]` as it is stored,
/// a vector `[1, len]`.
fn view(spec: &ParamSpec) -> View {
    match spec.shape[..] {
        [rows, cols] => View::dense(spec.offset, rows, cols),
        _ => View::dense(spec.offset, 1, spec.len()),
    }
}

/// One block's weights as views of the flat buffer.
#[derive(Debug, Clone, Copy)]
pub struct Weights {
    /// ln_1's weight and bias `[1, d]`.
    pub ln: Option<NormParams<View>>,
    /// W_q; W_k; W_v as one `[3d, d]` matrix (adjacent: checked when the step is built).
    pub qkv: View,
    /// W_q `[d, d]`.
    pub q: View,
    /// W_k; W_v `[2d, d]`.
    pub kv: View,
    /// W_o `[d, d]`.
    pub o: View,
    /// The MLP's weights `[m, d]`, `[d, m]` and biases `[1, m]`, `[1, d]`.
    pub mlp: Option<MlpParams<View>>,
}

impl Weights {
    fn of(layout: &GptjLayout, layer: usize) -> Self {
        let specs = layout.params().specs();
        let p: BlockParams<View> = layout.block(layer).map(|&i| view(&specs[i]));
        Weights {
            ln: p.ln,
            qkv: View {
                rows: p.q.rows + p.k.rows + p.v.rows,
                ..p.q
            },
            q: p.q,
            kv: View {
                rows: p.k.rows + p.v.rows,
                ..p.k
            },
            o: p.o,
            mlp: p.mlp,
        }
    }
}

/// The weights outside the blocks as views of the flat buffer.
pub fn outer_weights(layout: &GptjLayout) -> OuterParams<View> {
    let specs = layout.params().specs();
    layout.outer().map(|&i| view(&specs[i]))
}

/// One block of the step.
#[derive(Debug, Clone, Copy)]
pub struct BlockPlan {
    /// Rows of the block's output it computes (every position, or the query rows).
    pub rows: Rows,
    /// Rows of its input: N = batch * seq.
    pub tokens: usize,
    /// The attention of one batch row.
    pub attn: Shape,
    /// Its weights.
    pub w: Weights,
    /// The LayerNorm epsilon.
    pub eps: f32,
    /// Precision of the block's matrix products.
    pub precision: Precision,
}

impl BlockPlan {
    /// The plans of every block of `config` over `batch` sequences of `seq` tokens: every
    /// position, or (unless `objective` scores every position) the last block at the last
    /// position of each sequence only; every product in `precision`.
    pub fn of_model(
        config: &ModelConfig,
        layout: &GptjLayout,
        (batch, seq): (usize, usize),
        objective: Objective,
        precision: Precision,
    ) -> Vec<Self> {
        let n = batch * seq;
        (0..config.n_layers)
            .map(|layer| {
                let query_rows = layer + 1 == config.n_layers && !objective.every_position();
                let rows = if query_rows {
                    Rows {
                        first: seq - 1,
                        step: seq,
                        n: batch,
                    }
                } else {
                    Rows {
                        first: 0,
                        step: 1,
                        n,
                    }
                };
                BlockPlan {
                    rows,
                    tokens: n,
                    attn: Shape {
                        seq,
                        heads: config.n_heads,
                        d_head: config.d_head(),
                        queries: if query_rows { 1 } else { seq },
                        scale: (1.0 / (config.d_head() as f64).sqrt()) as f32,
                        kind: config.attention,
                        precision,
                    },
                    w: Weights::of(layout, layer),
                    eps: config.ln_eps as f32,
                    precision,
                }
            })
            .collect()
    }

    /// d_model.
    pub fn d(&self) -> usize {
        self.attn.d_model()
    }

    /// The MLP's hidden width (0 in an attention-only block).
    pub fn m(&self) -> usize {
        self.w.mlp.map_or(0, |mlp| mlp.fc_in_w.rows)
    }

    /// Whether the block computes every row of its input.
    pub fn every_row(&self) -> bool {
        self.rows.n == self.tokens
    }
}
