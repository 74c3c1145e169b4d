//! The brute-force reference for swap scores: exchange the block inputs of two positions (or two
//! blocks), re-run that block alone with the original positions and causal mask, and read the
//! query's new attention row. Slow and obvious; the fast path must agree with it.

use std::ops::Range;

use candle_core::{Tensor, D};
use ropelab_model::{GptJ, HookKind, HookPoint, Hooks};

use crate::lens::swap::SwapEffect;
use crate::Result;

/// Effects of every swap of two blocks, by re-running block `layer` on swapped inputs.
/// `resid` is the block input of one sequence, [pos, d_model]; `n` the query position.
pub fn reference_effects(
    model: &GptJ,
    layer: usize,
    head: usize,
    resid: &Tensor,
    n: usize,
    blocks: &[Range<usize>],
) -> Result<Vec<SwapEffect>> {
    let run = |x: &Tensor, hooks: &mut Hooks| -> Result<()> {
        model.block(layer, x, hooks, None)?;
        Ok(())
    };
    reference_effects_with(run, layer, head, resid, n, blocks)
}

/// [`reference_effects`] for any model: `run_block(x, hooks)` runs block `layer` on inputs x
/// [batch, pos, d_model] with `hooks` (which capture its attention pattern), as a pretrained
/// model's `block` does.
pub fn reference_effects_with(
    run_block: impl Fn(&Tensor, &mut Hooks) -> Result<()>,
    layer: usize,
    head: usize,
    resid: &Tensor,
    n: usize,
    blocks: &[Range<usize>],
) -> Result<Vec<SwapEffect>> {
    let rows = |inputs: &Tensor| -> Result<Vec<Vec<f64>>> {
        let point = HookPoint::new(layer, HookKind::Pattern);
        let mut hooks = Hooks::new().capture([point]);
        run_block(inputs, &mut hooks)?;
        let pattern = hooks.get(point).expect("captured");
        // [batch, heads, q_pos, k_pos] -> the query row of `head`, keys 0..=n.
        let r = pattern
            .narrow(1, head, 1)?
            .narrow(2, n, 1)?
            .narrow(D::Minus1, 0, n + 1)?
            .flatten_from(1)?;
        Ok(r.to_vec2::<f32>()?
            .into_iter()
            .map(|v| v.into_iter().map(f64::from).collect())
            .collect())
    };
    let original = &rows(&resid.unsqueeze(0)?)?[0];
    let mut pairs = vec![];
    let mut swapped = vec![];
    let positions: Vec<usize> = (0..resid.dim(0)?).collect();
    for (x, a) in blocks.iter().enumerate() {
        for b in &blocks[x + 1..] {
            let mut order = positions.clone();
            for (p, q) in a.clone().zip(b.clone()) {
                order.swap(p, q);
            }
            let index = Tensor::from_vec(
                order.iter().map(|&p| p as u32).collect::<Vec<_>>(),
                order.len(),
                resid.device(),
            )?;
            swapped.push(resid.index_select(&index, 0)?);
            pairs.push((a.clone(), b.clone()));
        }
    }
    if swapped.is_empty() {
        return Ok(vec![]);
    }
    let new_rows = rows(&Tensor::stack(&swapped, 0)?)?;
    let mass = |row: &[f64], r: &Range<usize>| r.clone().map(|p| row[p]).sum::<f64>();
    Ok(pairs
        .iter()
        .zip(&new_rows)
        .map(|((a, b), new)| SwapEffect {
            before: (mass(original, a), mass(original, b)),
            after: (mass(new, a), mass(new, b)),
        })
        .collect())
}
