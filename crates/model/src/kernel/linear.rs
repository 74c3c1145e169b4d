//! The kernel's Linear layers (llm.c's `matmul_forward` / `matmul_backward`, without bias: the
//! biases are separate passes). A weight W is the `[out_f, in_f]` block of the flat buffer that
//! starts at `w_off`; activations are row views of their buffers, so a layer can run on every
//! position or on the query rows only.

use super::gemm::{matmul, View};

/// `out = inp @ W^T`: `out` rows `[rows, out_f]`, `inp` rows `[rows, in_f]`.
#[allow(clippy::too_many_arguments)]
pub fn linear_forward(
    out: &mut [f32],
    out_rows: View,
    inp: &[f32],
    inp_rows: View,
    w: &[f32],
    w_off: usize,
    out_f: usize,
    in_f: usize,
) {
    matmul(
        out,
        out_rows,
        inp,
        inp_rows,
        w,
        View::dense(w_off, out_f, in_f).t(),
        false,
    );
}

/// The weight gradient of [`linear_forward`]: `dW = dout^T @ inp`, written into the
/// `[out_f, in_f]` block of `grads` at `w_off` (each weight's gradient is written once a step).
#[allow(clippy::too_many_arguments)]
pub fn linear_backward_weight(
    grads: &mut [f32],
    w_off: usize,
    out_f: usize,
    in_f: usize,
    dout: &[f32],
    dout_rows: View,
    inp: &[f32],
    inp_rows: View,
) {
    matmul(
        grads,
        View::dense(w_off, out_f, in_f),
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
    dinp: &mut [f32],
    dinp_rows: View,
    dout: &[f32],
    dout_rows: View,
    w: &[f32],
    w_off: usize,
    out_f: usize,
    in_f: usize,
    accumulate: bool,
) {
    matmul(
        dinp,
        dinp_rows,
        dout,
        dout_rows,
        w,
        View::dense(w_off, out_f, in_f),
        accumulate,
    );
}
