//! The kernel's Linear layers (llm.c's `matmul_forward` / `matmul_backward`, without bias: the
//! biases are separate passes). A weight W is a `[out_f, in_f]` view of the flat parameter (or
//! gradient) buffer, taken from the layout ([`super::plan::Weights`]); activations are row views
//! of their buffers, so a layer can run on every position or on the query rows only. Each
//! product runs in the step's [`Precision`].

use super::bf16::Precision;
use super::gemm::{matmul_in, View};

/// `out = inp @ W^T`: `out` rows `[rows, out_f]`, `inp` rows `[rows, in_f]`, `weight` the
/// `[out_f, in_f]` view of `w`.
pub fn linear_forward(
    precision: Precision,
    out: &mut [f32],
    out_rows: View,
    inp: &[f32],
    inp_rows: View,
    w: &[f32],
    weight: View,
) {
    matmul_in(
        precision,
        out,
        out_rows,
        inp,
        inp_rows,
        w,
        weight.t(),
        false,
    );
}

/// The weight gradient of [`linear_forward`]: `dW = dout^T @ inp`, written into the `weight`
/// view of `grads` (each weight's gradient is written once a step).
pub fn linear_backward_weight(
    precision: Precision,
    grads: &mut [f32],
    weight: View,
    dout: &[f32],
    dout_rows: View,
    inp: &[f32],
    inp_rows: View,
) {
    matmul_in(
        precision,
        grads,
        weight,
        dout,
        dout_rows.t(),
        inp,
        inp_rows,
        false,
    );
}

/// The input gradient of [`linear_forward`]: `dinp = dout @ W` (added to `dinp` with
/// `accumulate`, e.g. when two layers read the same input).
#[allow(clippy::too_many_arguments)]
pub fn linear_backward_input(
    precision: Precision,
    dinp: &mut [f32],
    dinp_rows: View,
    dout: &[f32],
    dout_rows: View,
    w: &[f32],
    weight: View,
    accumulate: bool,
) {
    matmul_in(
        precision, dinp, dinp_rows, dout, dout_rows, w, weight, accumulate,
    );
}
