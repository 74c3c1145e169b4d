//! Causal attention of one layer from projected q, k, v: rotation by the layer's position
//! encoding, scaled scores, causal mask, softmax and the weighted sum of values. The GPT-J block,
//! the hand-built heads of the theory lab and the Llama forward all run through this code.
//!
//! Long inputs whose full pattern nobody asked for take a bounded path: queries in chunks, keys
//! in blocks, a running softmax (flash-attention style), so memory grows with `block^2` per head
//! instead of `pos^2` ([`blocked_softmax`]).

use candle_core::{Device, Tensor, D};

use crate::hooks::{HookKind, HookPoint, Hooks};
use crate::ops::{softmax_last_dim, Dropout};
use crate::{rope, AttentionKind, PositionEncoding, Result};

/// Keys per block of the bounded path: a query chunk holds `chunk x block` scores per head
/// (2 MB in f32 with [`QUERY_CHUNK`]) whatever the input length.
pub const ATTENTION_BLOCK: usize = 1024;

/// Queries per chunk of the bounded path (at most the block): one chunk's scores against one
/// key block stay below the 32 MiB up to which the command line keeps freed buffers on the heap
/// (`mallopt` at start-up) for a dozen heads (9 x 512 x 1024 x 4 B = 19 MB for SmolLM2), so
/// they are reused instead of being mapped and page-faulted afresh for every block.
pub const QUERY_CHUNK: usize = 512;

/// Attends with queries `q` and keys `k` [batch, heads, pos, d] (before rotation) over values
/// `v` [batch, heads, pos, d_v] at positions 0..pos; logits are `scale * rq . rk`, turned into
/// weights by `kind` (a causal softmax, or the causally masked logits themselves for linear
/// attention). Passes the rotated q/k, scores and pattern through `hooks` as layer `layer`, and
/// returns z [batch, heads, pos, d_v]. Inputs longer than [`QUERY_CHUNK`] whose full scores
/// and pattern are neither captured nor replaced take the bounded path (see [`attend_in_blocks`]).
#[allow(clippy::too_many_arguments)]
pub fn attend(
    layer: usize,
    q: Tensor,
    k: Tensor,
    v: &Tensor,
    position: &PositionEncoding,
    kind: AttentionKind,
    scale: f64,
    hooks: &mut Hooks,
    dropout: Option<&mut Dropout>,
) -> Result<Tensor> {
    attend_in_blocks(
        layer,
        (q, k, v),
        (position, 0),
        (kind, scale),
        hooks,
        dropout,
        ATTENTION_BLOCK,
    )
}

/// [`attend`] at positions `start .. start + pos` (the rotation's angles; the causal mask and
/// every relative distance are unchanged) with the bounded path's block size given: a softmax layer without dropout whose
/// input is longer than one query chunk (min(`block`, [`QUERY_CHUNK`])) and whose full scores
/// and pattern `hooks` does not need ([`Hooks::needs_full_pattern`]) is computed in query
/// chunks and key blocks of `block`; a `capture_last` of its scores or pattern is then
/// computed from the last query row alone.
/// The same z as the full path to f32 rounding (a test).
pub fn attend_in_blocks(
    layer: usize,
    (q, k, v): (Tensor, Tensor, &Tensor),
    (position, start): (&PositionEncoding, usize),
    (kind, scale): (AttentionKind, f64),
    hooks: &mut Hooks,
    dropout: Option<&mut Dropout>,
    block: usize,
) -> Result<Tensor> {
    let point = |kind| HookPoint::new(layer, kind);
    let t = q.dim(2)?;
    let device = q.device().clone();
    let (rq, rk) = match position.rotation() {
        None => (q, k),
        Some(r) => {
            let positions: Vec<usize> = (start..start + t).collect();
            let (cos, sin) = rope::angles_of(&positions, &r, &device)?;
            let (cos, sin) = (cos.to_dtype(q.dtype())?, sin.to_dtype(q.dtype())?);
            (
                rope::rotate(&q, &cos, &sin, r.rotary_dim, r.layout)?,
                rope::rotate(&k, &cos, &sin, r.rotary_dim, r.layout)?,
            )
        }
    };
    let rq = hooks.point(point(HookKind::RotQ), rq)?;
    let rk = hooks.point(point(HookKind::RotK), rk)?;
    let block = block.max(1);
    if kind == AttentionKind::Softmax
        && dropout.is_none()
        && t > block.min(QUERY_CHUNK)
        && !hooks.needs_full_pattern(layer)
    {
        return bounded(layer, (&rq, &rk, v), scale, hooks, block);
    }
    let scores = (rq.matmul(&rk.t()?)? * scale)?; // [batch, heads, q_pos, k_pos]
    let pattern = match kind {
        AttentionKind::Softmax => {
            let mask = causal_mask(t, &device)?.to_dtype(scores.dtype())?;
            let scores = hooks.point(point(HookKind::AttnScores), scores.broadcast_add(&mask)?)?;
            softmax_last_dim(&scores)?
        }
        AttentionKind::Linear => {
            let keep = causal_keep(t, &device)?.to_dtype(scores.dtype())?;
            hooks.point(point(HookKind::AttnScores), scores.broadcast_mul(&keep)?)?
        }
    };
    let pattern = hooks.point(point(HookKind::Pattern), pattern)?;
    let pattern = match dropout {
        Some(d) => d.apply(&pattern)?,
        None => pattern,
    };
    Ok(pattern.matmul(&v.contiguous()?)?) // [batch, heads, pos, d_v]
}

/// The bounded path of [`attend_in_blocks`]: rotated `rq`, `rk` [batch, heads, pos, d], values
/// [batch, heads, pos, d_v]; queries in chunks of min(`block`, [`QUERY_CHUNK`]), each against
/// its keys in blocks of `block`.
fn bounded(
    layer: usize,
    (rq, rk, v): (&Tensor, &Tensor, &Tensor),
    scale: f64,
    hooks: &mut Hooks,
    block: usize,
) -> Result<Tensor> {
    let t = rq.dim(2)?;
    let v = v.contiguous()?;
    let mut chunks = vec![];
    let chunk = block.min(QUERY_CHUNK);
    for s0 in (0..t).step_by(chunk) {
        let s1 = (s0 + chunk).min(t);
        let q = rq.narrow(2, s0, s1 - s0)?.contiguous()?; // [batch, heads, chunk, d]
        let k = rk.narrow(2, 0, s1)?;
        let v = v.narrow(2, 0, s1)?;
        chunks.push(blocked_softmax(&q, &k, &v, (s0, s1 - s0, 1), scale, block)?);
    }
    let z = Tensor::cat(&chunks, 2)?; // [batch, heads, pos, d_v]
    let point = |kind| HookPoint::new(layer, kind);
    let (scores, pattern) = (point(HookKind::AttnScores), point(HookKind::Pattern));
    if hooks.wants(scores) || hooks.wants(pattern) {
        // The last query sees every key: its row needs no mask.
        let last = rq.narrow(2, t - 1, 1)?.contiguous()?; // [batch, heads, 1, d]
        let row = (last.matmul(&rk.contiguous()?.t()?)? * scale)?; // [batch, heads, 1, k_pos]
        let row = hooks.point(scores, row)?;
        hooks.point(pattern, softmax_last_dim(&row)?)?;
    }
    Ok(z)
}

/// `softmax(q k^T * scale + causal mask) v` for queries at positions `start .. start + t`
/// (grouped: q `[batch, kv_heads, group * t, d]`, query head g of kv head h at rows `g * t ..`)
/// against keys and values `[batch, kv_heads, total, d]` at positions `0 .. total`, computed over
/// key blocks of `block` with a running maximum and sum (flash-attention style); one block is the
/// plain softmax. Returns `[batch, kv_heads, group * t, d_v]`. Every query must see key 0
/// (`start + t <= total`).
pub fn blocked_softmax(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    (start, t, group): (usize, usize, usize),
    scale: f64,
    block: usize,
) -> Result<Tensor> {
    let (b, nkv, rows, _) = q.dims4()?;
    let total = k.dim(2)?;
    let block = block.max(1);
    // Scores of keys j0..j1 with the causal mask where a query could see past itself.
    let scores = |j0: usize, j1: usize| -> Result<Tensor> {
        let kb = k.narrow(2, j0, j1 - j0)?.contiguous()?;
        let s = (q.matmul(&kb.t()?)? * scale)?; // [batch, kv_heads, group * t, j1 - j0]
        if j1 <= start + 1 {
            return Ok(s); // every key is at or before every query
        }
        let mask: Vec<f32> = (0..t)
            .flat_map(|i| {
                (j0..j1).map(move |j| {
                    if j <= start + i {
                        0.0
                    } else {
                        f32::NEG_INFINITY
                    }
                })
            })
            .collect();
        let mask = Tensor::from_vec(mask, (t, j1 - j0), q.device())?.to_dtype(s.dtype())?; // [q, k]
        Ok(s.reshape((b, nkv, group, t, j1 - j0))?
            .broadcast_add(&mask)?
            .reshape((b, nkv, rows, j1 - j0))?)
    };
    if total <= block {
        return Ok(softmax_last_dim(&scores(0, total)?)?.matmul(&v.contiguous()?)?);
    }
    // Running maximum m, sum l and unnormalised output acc per query row. Every row sees key
    // 0, so m is finite after the first block and fully masked later blocks add exactly 0.
    let mut state: Option<(Tensor, Tensor, Tensor)> = None;
    for j0 in (0..total).step_by(block) {
        let j1 = (j0 + block).min(total);
        if j0 > start + t - 1 {
            break; // no query sees these keys
        }
        let s = scores(j0, j1)?;
        let block_max = s.max_keepdim(D::Minus1)?; // [batch, kv_heads, rows, 1]
        let m = match &state {
            Some((m, _, _)) => m.maximum(&block_max)?,
            None => block_max,
        };
        let p = s.broadcast_sub(&m)?.exp()?;
        let sum = p.sum_keepdim(D::Minus1)?;
        let pv = p.matmul(&v.narrow(2, j0, j1 - j0)?.contiguous()?)?; // [batch, kv_heads, rows, d_v]
        state = Some(match state {
            Some((old, l, acc)) => {
                let carry = (old - &m)?.exp()?; // [batch, kv_heads, rows, 1]
                let l = ((l * &carry)? + sum)?;
                let acc = (acc.broadcast_mul(&carry)? + pv)?;
                (m, l, acc)
            }
            None => (m, sum, pv),
        });
    }
    let (_, l, acc) = state.expect("at least one block");
    Ok(acc.broadcast_div(&l)?)
}

/// [pos, pos] with 1 on and below the diagonal and 0 above.
pub fn causal_keep(t: usize, device: &Device) -> Result<Tensor> {
    let keep: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j <= i { 1.0 } else { 0.0 }))
        .collect();
    Ok(Tensor::from_vec(keep, (t, t), device)?)
}

/// [pos, pos] with 0 on and below the diagonal and -inf above.
pub fn causal_mask(t: usize, device: &Device) -> Result<Tensor> {
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    Ok(Tensor::from_vec(mask, (t, t), device)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RopeLayout;
    use rand::{Rng, SeedableRng};

    fn random(shape: (usize, usize, usize, usize), seed: u64) -> Tensor {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n = shape.0 * shape.1 * shape.2 * shape.3;
        // Spread logits so that some rows are peaked and the running maximum changes.
        let data: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
        Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
    }

    fn worst(a: &Tensor, b: &Tensor) -> f32 {
        assert_eq!(a.dims(), b.dims());
        let (a, b): (Vec<f32>, Vec<f32>) = (
            a.flatten_all().unwrap().to_vec1().unwrap(),
            b.flatten_all().unwrap().to_vec1().unwrap(),
        );
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    /// The bounded path (query chunks, key blocks, running softmax) against the full pattern,
    /// for blocks that divide the length, do not, and are 1; the last-row captures against the
    /// full captures' last rows.
    #[test]
    fn the_bounded_path_matches_the_full_pattern_and_its_last_row() {
        let (b, h, t, d) = (2, 3, 37, 8);
        let (q, k, v) = (
            random((b, h, t, d), 1),
            random((b, h, t, d), 2),
            random((b, h, t, 5), 3),
        );
        let position = PositionEncoding::rope(10_000.0, 8, RopeLayout::Interleaved);
        let kinds = [HookKind::AttnScores, HookKind::Pattern];
        let points: Vec<HookPoint> = kinds.iter().map(|&k| HookPoint::new(0, k)).collect();
        let run = |hooks: &mut Hooks, block| {
            attend_in_blocks(
                0,
                (q.clone(), k.clone(), &v),
                (&position, 0),
                (AttentionKind::Softmax, 0.9),
                hooks,
                None,
                block,
            )
            .unwrap()
        };
        let mut full = Hooks::new().capture(points.clone());
        assert!(full.needs_full_pattern(0));
        let want = run(&mut full, 1);
        for block in [1, 4, 10, 36] {
            let mut last = Hooks::new().capture_last(points.clone());
            assert!(!last.needs_full_pattern(0));
            let got = run(&mut last, block);
            assert!(worst(&got, &want) < 1e-5, "block {block}");
            for &p in &points {
                let row = full.get(p).unwrap().narrow(2, t - 1, 1).unwrap();
                let got = last.get(p).unwrap();
                assert_eq!(got.dims(), &[b, h, 1, t]);
                assert!(worst(got, &row) < 1e-5, "block {block}, {p}");
            }
        }
        // A block of the input's length or more is the full path itself.
        let mut none = Hooks::new();
        assert!(worst(&run(&mut none, t), &want) < 1e-6);
    }

    /// Queries placed after a cached prefix (start > 0), grouped by key/value head, against a
    /// naive per-row softmax in f64.
    #[test]
    fn blocked_softmax_matches_a_naive_softmax_per_row() {
        let (nkv, group, start, t, d) = (2, 3, 5, 4, 6);
        let total = start + t;
        let q = random((1, nkv, group * t, d), 4);
        let k = random((1, nkv, total, d), 5);
        let v = random((1, nkv, total, d), 6);
        let scale = 0.7;
        let (qv, kv, vv): (Vec<f32>, Vec<f32>, Vec<f32>) = (
            q.flatten_all().unwrap().to_vec1().unwrap(),
            k.flatten_all().unwrap().to_vec1().unwrap(),
            v.flatten_all().unwrap().to_vec1().unwrap(),
        );
        let mut want = vec![];
        for h in 0..nkv {
            for row in 0..group * t {
                let i = start + row % t; // this query's position
                let qr = &qv[(h * group * t + row) * d..][..d];
                let logits: Vec<f64> = (0..=i)
                    .map(|j| {
                        let kr = &kv[(h * total + j) * d..][..d];
                        scale
                            * qr.iter()
                                .zip(kr)
                                .map(|(a, b)| f64::from(a * b))
                                .sum::<f64>()
                    })
                    .collect();
                let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
                let sum: f64 = w.iter().sum();
                for c in 0..d {
                    let z: f64 = (0..=i)
                        .map(|j| w[j] * f64::from(vv[(h * total + j) * d + c]))
                        .sum();
                    want.push((z / sum) as f32);
                }
            }
        }
        let want = Tensor::from_vec(want, (1, nkv, group * t, d), &Device::Cpu).unwrap();
        for block in [1, 2, 4, 9, 100] {
            let got = blocked_softmax(&q, &k, &v, (start, t, group), scale, block).unwrap();
            assert!(worst(&got, &want) < 1e-5, "block {block}");
        }
    }
}
