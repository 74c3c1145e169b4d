//! Row-wise pieces of the fused kernel: a branch-free exp that vectorises, exact-erf GELU with
//! its derivative, LayerNorm forward and backward, and last-token cross-entropy.

use rayon::prelude::*;

/// Rows per parallel task (at least this many, so that tiny inputs stay on one thread).
const MIN_ROWS_PER_TASK: usize = 16;

/// Rows per parallel task: an even split over the threads, at least `MIN_ROWS_PER_TASK`.
fn rows_per_task(rows: usize) -> usize {
    rows.div_ceil(rayon::current_num_threads().max(1))
        .max(MIN_ROWS_PER_TASK)
}

/// Calls `f(row, out_row)` for every row of `out` (`width` values each), in parallel over
/// contiguous row blocks.
pub fn for_rows(out: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if width == 0 || out.is_empty() {
        return;
    }
    let per = rows_per_task(out.len() / width);
    out.par_chunks_mut(per * width)
        .enumerate()
        .for_each(|(c, chunk)| {
            for (i, row) in chunk.chunks_exact_mut(width).enumerate() {
                f(c * per + i, row);
            }
        });
}

/// Calls `f(row, a_row, b_row)` for every row of `a` and `b` (both `width` wide), in parallel
/// over contiguous row blocks.
pub fn for_rows2(
    a: &mut [f32],
    b: &mut [f32],
    width: usize,
    f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
) {
    if width == 0 || a.is_empty() {
        return;
    }
    let per = rows_per_task(a.len() / width);
    a.par_chunks_mut(per * width)
        .zip(b.par_chunks_mut(per * width))
        .enumerate()
        .for_each(|(c, (ca, cb))| {
            for (i, (ra, rb)) in ca
                .chunks_exact_mut(width)
                .zip(cb.chunks_exact_mut(width))
                .enumerate()
            {
                f(c * per + i, ra, rb);
            }
        });
}

/// Row blocks of the parameter-gradient reductions: a fixed count, so the summation order
/// (and every bit of the result) does not depend on the number of threads.
const REDUCTION_BLOCKS: usize = 8;

/// Lanes of the multi-accumulator reductions (one AVX-512 register of f32).
const LANES: usize = 16;

/// Dot product with `LANES` independent accumulators, so the loop vectorises.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// Sum of `a[i] * b[i] * c[i]` with `LANES` independent accumulators.
#[inline]
pub fn dot3(a: &[f32], b: &[f32], c: &[f32]) -> f32 {
    let n = a.len().min(b.len()).min(c.len());
    let mut acc = [0f32; LANES];
    let full = n / LANES * LANES;
    for s in (0..full).step_by(LANES) {
        let (x, y, z) = (&a[s..s + LANES], &b[s..s + LANES], &c[s..s + LANES]);
        for l in 0..LANES {
            acc[l] += x[l] * y[l] * z[l];
        }
    }
    let tail: f32 = (full..n).map(|i| a[i] * b[i] * c[i]).sum();
    acc.iter().sum::<f32>() + tail
}

/// Sum with `LANES` independent accumulators.
#[inline]
pub fn sum(a: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let c = a.chunks_exact(LANES);
    let tail: f32 = c.remainder().iter().sum();
    for x in c {
        for l in 0..LANES {
            acc[l] += x[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += alpha * x`.
#[inline]
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// e^x for f32 (Cephes' expf polynomial, about 1 ulp), written without branches or calls so
/// that loops over it vectorise. Inputs are clamped to [-87.3, 88.3].
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let x = x.clamp(-87.3, 88.3);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    // n as an integer from t's low mantissa bits (t is in [2^23, 2^24), where its ulp is 1):
    // no saturating float-to-int conversion, so the loop stays in vector registers.
    let ni = t.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits((ni.wrapping_add(127) as u32) << 23)
}

/// The standard normal CDF Phi(u) and density phi(u) (Abramowitz & Stegun 7.1.26 for erfc;
/// absolute error below 2e-7).
#[inline(always)]
fn normal_cdf_pdf(u: f32) -> (f32, f32) {
    const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    let x = u.abs() * FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let e = exp(-0.5 * u * u); // e^{-x^2}
    let half_erfc = 0.5 * poly * e; // P(Z > |u|)
    let cdf = if u >= 0.0 { 1.0 - half_erfc } else { half_erfc };
    (cdf, INV_SQRT_2PI * e)
}

/// Exact (erf) GELU: `g = u * Phi(u)` and its derivative `gp = Phi(u) + u * phi(u)`, in place:
/// `u` becomes g.
pub fn gelu_forward(u: &mut [f32], gp: &mut [f32]) {
    let per = (u.len() / rayon::current_num_threads().max(1)).max(4096);
    u.par_chunks_mut(per)
        .zip(gp.par_chunks_mut(per))
        .for_each(|(u, gp)| gelu_chunk(u, gp));
}

/// [`gelu_forward`] on one chunk, with AVX2 + FMA code where the CPU has it (the same
/// operations in the same order, so the results do not depend on the path).
fn gelu_chunk(u: &mut [f32], gp: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports the enabled features (checked just above).
        unsafe { gelu_chunk_avx2(u, gp) };
        return;
    }
    gelu_chunk_portable(u, gp);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_chunk_avx2(u: &mut [f32], gp: &mut [f32]) {
    gelu_chunk_portable(u, gp);
}

#[inline(always)]
fn gelu_chunk_portable(u: &mut [f32], gp: &mut [f32]) {
    for (x, d) in u.iter_mut().zip(gp.iter_mut()) {
        let (cdf, pdf) = normal_cdf_pdf(*x);
        *d = cdf + *x * pdf;
        *x *= cdf;
    }
}

/// LayerNorm of each `d`-wide row of `x` into `out`, keeping (mean, rstd) per row in `stats`.
pub fn layer_norm_forward(
    x: &[f32],
    w: &[f32],
    b: &[f32],
    eps: f32,
    out: &mut [f32],
    stats: &mut [f32],
) {
    let d = w.len();
    let stats_ptr = stats.as_mut_ptr() as usize;
    assert!(stats.len() * d >= out.len() * 2);
    for_rows(out, d, |r, o| {
        let xr = &x[r * d..][..d];
        let mean = sum(xr) / d as f32;
        for i in 0..d {
            o[i] = xr[i] - mean;
        }
        let var = dot(o, o) / d as f32;
        let rstd = 1.0 / (var + eps).sqrt();
        for i in 0..d {
            o[i] = o[i] * rstd * w[i] + b[i];
        }
        // SAFETY: row r owns stats[2r], stats[2r + 1] (checked length above).
        unsafe {
            let s = stats_ptr as *mut f32;
            *s.add(2 * r) = mean;
            *s.add(2 * r + 1) = rstd;
        }
    });
}

/// LayerNorm backward: adds the input gradient of each row to `dx`;
/// `dw`, `db` receive the parameter gradients (overwritten).
pub fn layer_norm_backward(
    dy: &[f32],
    x: &[f32],
    stats: &[f32],
    w: &[f32],
    dx: &mut [f32],
    dw: &mut [f32],
    db: &mut [f32],
) {
    let d = w.len();
    let rows = dy.len() / d;
    let per = rows.div_ceil(REDUCTION_BLOCKS).max(1);
    let partials: Vec<(Vec<f32>, Vec<f32>)> = (0..rows.div_ceil(per))
        .into_par_iter()
        .map(|blk| {
            let (mut pw, mut pb) = (vec![0f32; d], vec![0f32; d]);
            for r in blk * per..((blk + 1) * per).min(rows) {
                let (mean, rstd) = (stats[2 * r], stats[2 * r + 1]);
                let xr = &x[r * d..][..d];
                let g = &dy[r * d..][..d];
                for i in 0..d {
                    pw[i] += g[i] * ((xr[i] - mean) * rstd);
                    pb[i] += g[i];
                }
            }
            (pw, pb)
        })
        .collect();
    dw.fill(0.0);
    db.fill(0.0);
    for (pw, pb) in &partials {
        axpy(1.0, pw, dw);
        axpy(1.0, pb, db);
    }
    for_rows(dx, d, |r, o| {
        let (mean, rstd) = (stats[2 * r], stats[2 * r + 1]);
        let xr = &x[r * d..][..d];
        let g = &dy[r * d..][..d];
        let gw = dot(g, w);
        let m1 = gw / d as f32;
        let m2 = (dot3(g, w, xr) - mean * gw) * rstd / d as f32;
        for i in 0..d {
            let xhat = (xr[i] - mean) * rstd;
            o[i] += rstd * (g[i] * w[i] - m1 - xhat * m2);
        }
    });
}

/// Overwrites `out` with the column sums of `x`, read as rows `out.len()` wide.
pub fn column_sums(x: &[f32], out: &mut [f32]) {
    let width = out.len();
    out.fill(0.0);
    for row in x.chunks_exact(width) {
        for (o, v) in out.iter_mut().zip(row) {
            *o += v;
        }
    }
}

/// Mean cross-entropy of `logits` `[rows, out]` against `targets` `[rows]` over the scored rows
/// (a target of [`crate::objective::IGNORE`] is skipped); the logits become the loss's
/// gradient in place ((softmax - onehot) / scored for a scored row, 0 for a skipped one). Rows
/// run in parallel; their losses are summed in row order, so the result does not depend on
/// the thread count.
pub fn cross_entropy_backward(logits: &mut [f32], out: usize, targets: &[u32]) -> f32 {
    use crate::objective::IGNORE;
    let scored = targets.iter().filter(|&&t| t != IGNORE).count().max(1);
    let inv = 1.0 / scored as f32;
    let losses: Vec<f64> = logits
        .par_chunks_mut(out)
        .zip(targets.par_iter())
        .with_min_len(MIN_ROWS_PER_TASK)
        .map(|(row, &t)| {
            if t == IGNORE {
                row.fill(0.0);
                return 0.0;
            }
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let picked = row[t as usize];
            for v in row.iter_mut() {
                *v = exp(*v - max);
            }
            let total = sum(row);
            let scale = inv / total;
            for v in row.iter_mut() {
                *v *= scale;
            }
            row[t as usize] -= inv;
            f64::from(max + total.ln() - picked)
        })
        .collect();
    (losses.iter().sum::<f64>() / scored as f64) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_of_std() {
        for i in -8700..=8800 {
            let x = i as f32 * 0.01;
            let (got, want) = (exp(x), x.exp());
            assert!(((got - want) / want).abs() < 2.5e-7, "{x}: {got} vs {want}");
        }
    }

    /// The exponent taken from the mantissa bits is the saturating cast's value: `exp` gives
    /// the same bits as with `n as i32` on a dense grid, the clamps, and every 4099th f32.
    #[test]
    fn exp_exponent_bits_equal_the_cast() {
        let with_cast = |x: f32| {
            const LOG2E: f32 = std::f32::consts::LOG2_E;
            const ROUND: f32 = 12_582_912.0;
            let x = x.clamp(-87.3, 88.3);
            let n = (x * LOG2E + ROUND) - ROUND;
            let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
            let mut p = 1.987_569_1e-4f32;
            p = p * r + 1.398_2e-3;
            p = p * r + 8.333_452e-3;
            p = p * r + 4.166_579_6e-2;
            p = p * r + 1.666_666_5e-1;
            p = p * r + 0.5;
            let y = p * r * r + r + 1.0;
            y * f32::from_bits(((n as i32 + 127) as u32) << 23)
        };
        let grid = (-100_000..=100_000).map(|i| i as f32 * 0.001);
        let extremes = [
            f32::MIN,
            f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -87.3,
            88.3,
        ];
        let bits = (0..u32::MAX / 4099).map(|i| f32::from_bits(i * 4099));
        for x in grid.chain(extremes).chain(bits).filter(|x| !x.is_nan()) {
            assert_eq!(exp(x).to_bits(), with_cast(x).to_bits(), "{x}");
        }
    }

    #[test]
    fn gelu_and_its_derivative_match_erf_in_f64() {
        // erf by its Taylor series / continued fraction is overkill: use the integral's
        // definition through a fine Simpson rule of the normal density.
        let cdf = |u: f64| {
            let n = 20_000;
            let (a, b) = (-12.0f64, u);
            let h = (b - a) / n as f64;
            let f = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let mut s = f(a) + f(b);
            for i in 1..n {
                s += f(a + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
            }
            s * h / 3.0
        };
        let us: Vec<f32> = (-60..=60).map(|i| i as f32 * 0.1).collect();
        let mut g = us.clone();
        let mut gp = vec![0f32; us.len()];
        gelu_forward(&mut g, &mut gp);
        for (i, &u) in us.iter().enumerate() {
            let c = cdf(f64::from(u));
            let pdf = (-0.5 * f64::from(u).powi(2)).exp() / (2.0 * std::f64::consts::PI).sqrt();
            assert!((f64::from(g[i]) - f64::from(u) * c).abs() < 2e-6, "g({u})");
            assert!(
                (f64::from(gp[i]) - (c + f64::from(u) * pdf)).abs() < 2e-6,
                "g'({u})"
            );
        }
    }

    #[test]
    fn cross_entropy_gradient_matches_finite_differences() {
        let logits = vec![0.3f32, -1.0, 2.0, 0.5, 0.1, 0.0, -0.4, 1.2];
        let targets = [2u32, 0];
        let loss = |l: &[f32]| {
            let mut c = l.to_vec();
            cross_entropy_backward(&mut c, 4, &targets)
        };
        let mut grad = logits.clone();
        let l0 = cross_entropy_backward(&mut grad, 4, &targets);
        assert!((l0 - loss(&logits)).abs() < 1e-7);
        for i in 0..logits.len() {
            let (mut p, mut m) = (logits.clone(), logits.clone());
            p[i] += 1e-2;
            m[i] -= 1e-2;
            let fd = (loss(&p) - loss(&m)) / 2e-2;
            assert!((fd - grad[i]).abs() < 1e-4, "{i}: {fd} vs {}", grad[i]);
        }
    }
}
