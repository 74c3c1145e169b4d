//! Scoring every head of a hooked model on a batch of inputs: swap scores, block swaps,
//! per-plane scores, attention entropy and frequency use, captured in memory-bounded batches
//! and averaged over every (input, query) pair.

use candle_core::Tensor;
use ropelab_model::GptJ;
use ropelab_train::forward_bytes;

use crate::lens::capture::Captured;
use crate::lens::swap::{blocks, effects, entropy, row, scores, SwapScores, Tau};
use crate::Result;

/// The plane id averaged with weights `freq_use` (0 when every weight is 0).
pub fn mean_plane(freq_use: &[f64]) -> f64 {
    let total: f64 = freq_use.iter().sum();
    if total > 0.0 {
        freq_use
            .iter()
            .enumerate()
            .map(|(p, f)| p as f64 * f)
            .sum::<f64>()
            / total
    } else {
        0.0
    }
}

/// One head's scores averaged over a sample set.
#[derive(Debug, Clone)]
pub struct HeadScores {
    /// Block index.
    pub layer: usize,
    /// Head index.
    pub head: usize,
    /// Mean swap scores.
    pub scores: SwapScores,
    /// Mean attention entropy at the query (nats).
    pub entropy: f64,
    /// Mean |logit contribution| per plane at the attended key.
    pub freq_use: Vec<f64>,
    /// Mean block-swap scores (when blocks were asked for).
    pub block: Option<SwapScores>,
    /// Mean scores of each plane alone (when asked for).
    pub planes: Vec<SwapScores>,
}

fn mean_scores(sum: (f64, f64), count: f64) -> SwapScores {
    SwapScores {
        s_pos: sum.0 / count,
        s_sym: sum.1 / count,
    }
}

/// Bytes the score path keeps per sequence of `seq_len` tokens: a forward pass plus the captured
/// q, k (f32) and attention pattern of every layer.
/// Saturating, like [`forward_bytes`].
pub fn capture_bytes(config: &ropelab_model::ModelConfig, seq_len: usize) -> u64 {
    use ropelab_io::resources::bytes;
    let (l, t) = (config.n_layers, seq_len);
    forward_bytes(config, seq_len)
        .saturating_add(bytes(&[4, l, 2, t, config.d_model]))
        .saturating_add(bytes(&[4, l, config.n_heads, t, t]))
}

/// Scores every head of `model` on `ids` [samples, pos] at the query positions of each row
/// (optionally also `n_blocks` block swaps and every plane alone). Rows are captured in batches
/// whose capture stays within `memory` bytes (see [`capture_bytes`]); the result is the mean over
/// every (row, query) pair, whatever the batching.
#[allow(clippy::too_many_arguments)]
pub fn score_heads(
    model: &GptJ,
    ids: &Tensor,
    queries: &[Vec<usize>],
    tau: Tau,
    n_blocks: Option<usize>,
    planes: bool,
    memory: usize,
) -> Result<Vec<HeadScores>> {
    let (rows, len) = ids.dims2()?;
    let fit = memory as u64 / capture_bytes(model.config(), len).max(1);
    let batch = usize::try_from(fit).unwrap_or(rows).clamp(1, rows.max(1));
    let mut parts = vec![];
    for start in (0..rows).step_by(batch) {
        let size = batch.min(rows - start);
        let cap = Captured::run(model, &ids.narrow(0, start, size)?, false)?;
        let chunk = &queries[start..start + size];
        let count: usize = chunk.iter().map(Vec::len).sum();
        parts.push((count, score_captured(&cap, chunk, tau, n_blocks, planes)?));
    }
    Ok(merge_weighted(parts))
}

/// The mean of per-batch head scores, weighted by each batch's number of queries.
fn merge_weighted(parts: Vec<(usize, Vec<HeadScores>)>) -> Vec<HeadScores> {
    let total: usize = parts.iter().map(|p| p.0).sum();
    if parts.len() == 1 || total == 0 {
        return parts.into_iter().next().map(|p| p.1).unwrap_or_default();
    }
    let mut iter = parts.into_iter();
    let (w0, mut acc) = iter.next().expect("at least two parts");
    let scale = |x: SwapScores, w: f64| SwapScores {
        s_pos: x.s_pos * w,
        s_sym: x.s_sym * w,
    };
    let add = |a: SwapScores, b: SwapScores| SwapScores {
        s_pos: a.s_pos + b.s_pos,
        s_sym: a.s_sym + b.s_sym,
    };
    let w0 = w0 as f64 / total as f64;
    for h in acc.iter_mut() {
        h.scores = scale(h.scores, w0);
        h.entropy *= w0;
        h.freq_use.iter_mut().for_each(|f| *f *= w0);
        h.block = h.block.map(|b| scale(b, w0));
        h.planes.iter_mut().for_each(|p| *p = scale(*p, w0));
    }
    for (w, part) in iter {
        let w = w as f64 / total as f64;
        for (a, h) in acc.iter_mut().zip(part) {
            a.scores = add(a.scores, scale(h.scores, w));
            a.entropy += h.entropy * w;
            for (f, g) in a.freq_use.iter_mut().zip(&h.freq_use) {
                *f += g * w;
            }
            a.block = match (a.block, h.block) {
                (Some(x), Some(y)) => Some(add(x, scale(y, w))),
                (x, _) => x,
            };
            for (p, q) in a.planes.iter_mut().zip(&h.planes) {
                *p = add(*p, scale(*q, w));
            }
        }
    }
    acc
}

/// Scores every head of a capture (any hooked model) at the query positions of each row.
pub fn score_captured(
    cap: &Captured,
    queries: &[Vec<usize>],
    tau: Tau,
    n_blocks: Option<usize>,
    planes: bool,
) -> Result<Vec<HeadScores>> {
    let (_, heads, _, d_head) = cap.dims();
    let n_planes = d_head / 2;
    let mut out = vec![];
    for layer in 0..cap.n_layers() {
        for head in 0..heads {
            let (mut sp, mut ss, mut ent, mut count) = (0.0, 0.0, 0.0, 0usize);
            let mut freq = vec![0.0; n_planes];
            let mut block_sum = (0.0, 0.0);
            let mut plane_sums = vec![(0.0, 0.0); if planes { n_planes } else { 0 }];
            for (b, row_queries) in queries.iter().enumerate() {
                for &n in row_queries {
                    let view = cap.head_view(layer, b, head, n)?;
                    let cross = view.cross_logits();
                    let self_logit = view.self_logit();
                    let singles: Vec<_> = (0..n).map(|p| p..p + 1).collect();
                    let s = scores(&effects(&cross, self_logit, &singles), tau);
                    if let Some(m) = n_blocks {
                        let b = scores(&effects(&cross, self_logit, &blocks(n, m)?), tau);
                        block_sum.0 += b.s_pos;
                        block_sum.1 += b.s_sym;
                    }
                    for (p, sum) in plane_sums.iter_mut().enumerate() {
                        let plane = view.plane(p);
                        let ps = scores(
                            &effects(&plane.cross_logits(), plane.self_logit(), &singles),
                            tau,
                        );
                        sum.0 += ps.s_pos;
                        sum.1 += ps.s_sym;
                    }
                    let r = row(&cross, self_logit);
                    let attended = r
                        .iter()
                        .enumerate()
                        .max_by(|x, y| x.1.total_cmp(y.1))
                        .map_or(0, |(i, _)| i);
                    for (f, c) in freq
                        .iter_mut()
                        .zip(view.plane_contributions(attended, attended))
                    {
                        *f += c.abs();
                    }
                    sp += s.s_pos;
                    ss += s.s_sym;
                    ent += entropy(&r);
                    count += 1;
                }
            }
            let c = count.max(1) as f64;
            freq.iter_mut().for_each(|f| *f /= c);
            out.push(HeadScores {
                layer,
                head,
                scores: SwapScores {
                    s_pos: sp / c,
                    s_sym: ss / c,
                },
                entropy: ent / c,
                freq_use: freq,
                block: n_blocks.map(|_| mean_scores(block_sum, c)),
                planes: plane_sums.into_iter().map(|p| mean_scores(p, c)).collect(),
            });
        }
    }
    Ok(out)
}
