//! Rotary position encodings: plane frequencies, angles for any position, and the rotation of
//! q and k in either layout.

use std::ops::{Add, Mul, Neg, Sub};

use candle_core::{Device, Tensor, D};

use crate::{Result, RopeLayout, Rotation};

/// The RoPE base of GPT-J, Llama 2 and the papers' models when none is given: 10,000.
pub const DEFAULT_BASE: f64 = 10_000.0;

/// Plane frequencies g_k = base^(-2k / rotary_dim), k = 0 .. rotary_dim / 2 - 1.
pub fn frequencies(base: f64, rotary_dim: usize) -> Vec<f64> {
    (0..rotary_dim / 2)
        .map(|k| base.powf(-2.0 * k as f64 / rotary_dim as f64))
        .collect()
}

/// `gain * cos` and `gain * sin` of `rotation`'s angles as tensors [positions, planes] each
/// (from [`Rotation::table`]: f64 angles rounded once).
pub fn angles_of(
    positions: &[usize],
    rotation: &Rotation,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let (cos, sin) = rotation.table(positions.iter().copied());
    let shape = (positions.len(), rotation.planes());
    Ok((
        Tensor::from_vec(cos, shape, device)?,
        Tensor::from_vec(sin, shape, device)?,
    ))
}

/// Rotates the planes `pairs` (dims (i, j) of plane p) of one head vector `x` by the angles
/// with cosines `cos[p]` and sines `sin[p]` (with `inverse`, by minus those angles):
/// (x_i, x_j) <- (x_i c - x_j s, x_j c + x_i s). The one plane rotation on plain slices (the
/// fused kernel in f32, the analysis of a head in f64).
pub fn rotate_planes<T>(x: &mut [T], pairs: &[(usize, usize)], cos: &[T], sin: &[T], inverse: bool)
where
    T: Copy + Mul<Output = T> + Add<Output = T> + Sub<Output = T> + Neg<Output = T>,
{
    for (p, &(i, j)) in pairs.iter().enumerate() {
        let (c, s) = (cos[p], if inverse { -sin[p] } else { sin[p] });
        let (x0, x1) = (x[i], x[j]);
        x[i] = x0 * c - x1 * s;
        x[j] = x1 * c + x0 * s;
    }
}

/// Rotates the first `rotary_dim` dims of `x` plane by plane.
/// `x`: [batch, heads, pos, d_head]; `cos`, `sin`: [pos, rotary_dim / 2].
pub fn rotate(
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    rotary_dim: usize,
    layout: RopeLayout,
) -> Result<Tensor> {
    let (b, h, t, d_head) = x.dims4()?;
    let half = rotary_dim / 2;
    let rot = x.narrow(D::Minus1, 0, rotary_dim)?;
    let rotated = match layout {
        RopeLayout::Interleaved => {
            let pairs = rot.reshape((b, h, t, half, 2))?; // [b, h, t, plane, 2]
            let x0 = pairs.narrow(D::Minus1, 0, 1)?;
            let x1 = pairs.narrow(D::Minus1, 1, 1)?;
            let cos = cos.reshape((t, half, 1))?;
            let sin = sin.reshape((t, half, 1))?;
            let y0 = (x0.broadcast_mul(&cos)? - x1.broadcast_mul(&sin)?)?;
            let y1 = (x1.broadcast_mul(&cos)? + x0.broadcast_mul(&sin)?)?;
            Tensor::cat(&[y0, y1], D::Minus1)?.reshape((b, h, t, rotary_dim))?
        }
        RopeLayout::HalfSplit => {
            let x0 = rot.narrow(D::Minus1, 0, half)?; // [b, h, t, plane]
            let x1 = rot.narrow(D::Minus1, half, half)?;
            let y0 = (x0.broadcast_mul(cos)? - x1.broadcast_mul(sin)?)?;
            let y1 = (x1.broadcast_mul(cos)? + x0.broadcast_mul(sin)?)?;
            Tensor::cat(&[y0, y1], D::Minus1)?
        }
    };
    if rotary_dim == d_head {
        return Ok(rotated);
    }
    let pass = x.narrow(D::Minus1, rotary_dim, d_head - rotary_dim)?;
    Ok(Tensor::cat(&[rotated, pass], D::Minus1)?)
}

/// The two dims of plane `plane` of a head. Planes below `rotary_dim / 2` follow the layout;
/// the unrotated dims after `rotary_dim` form planes in consecutive pairs.
pub fn plane_dims(layout: RopeLayout, rotary_dim: usize, plane: usize) -> (usize, usize) {
    let half = rotary_dim / 2;
    if plane >= half {
        let j = rotary_dim + 2 * (plane - half);
        return (j, j + 1);
    }
    match layout {
        RopeLayout::Interleaved => (2 * plane, 2 * plane + 1),
        RopeLayout::HalfSplit => (plane, plane + half),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Explicit 2x2 rotation per plane, in f64.
    fn rotate_slow(x: &[f32], pos: usize, base: f64, rd: usize, layout: RopeLayout) -> Vec<f32> {
        let mut y: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for (k, g) in frequencies(base, rd).into_iter().enumerate() {
            let (i, j) = plane_dims(layout, rd, k);
            let (s, c) = (pos as f64 * g).sin_cos();
            let (a, b) = (x[i] as f64, x[j] as f64);
            y[i] = a * c - b * s;
            y[j] = b * c + a * s;
        }
        y.into_iter().map(|v| v as f32).collect()
    }

    #[test]
    fn rotation_matches_explicit_plane_rotations() {
        let dev = Device::Cpu;
        for layout in [RopeLayout::Interleaved, RopeLayout::HalfSplit] {
            for (d_head, rd) in [(8, 8), (8, 4), (6, 2)] {
                let (b, h, t) = (2, 3, 5);
                let n = b * h * t * d_head;
                let data: Vec<f32> = (0..n)
                    .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
                    .collect();
                let x = Tensor::from_vec(data.clone(), (b, h, t, d_head), &dev).unwrap();
                let positions: Vec<usize> = (0..t).map(|p| p * 37 + 1000).collect();
                let rotation = crate::PositionEncoding::rope(500.0, rd, layout)
                    .rotation()
                    .unwrap();
                let (cos, sin) = angles_of(&positions, &rotation, &dev).unwrap();
                let y = rotate(&x, &cos, &sin, rd, layout).unwrap();
                let y: Vec<f32> = y.flatten_all().unwrap().to_vec1().unwrap();
                for row in 0..b * h * t {
                    let pos = positions[row % t];
                    let xs = &data[row * d_head..(row + 1) * d_head];
                    let want = rotate_slow(xs, pos, 500.0, rd, layout);
                    for (a, w) in y[row * d_head..(row + 1) * d_head].iter().zip(want) {
                        assert!((a - w).abs() < 1e-5, "{layout:?} {d_head} {rd}: {a} vs {w}");
                    }
                }
            }
        }
    }

    #[test]
    fn gptj_frequencies() {
        let f = frequencies(10_000.0, 128);
        assert_eq!(f.len(), 64);
        assert_eq!(f[0], 1.0);
        // The theory spec's g_2 (about 0.866) and g_42 (about 0.0027) number planes from 1.
        assert!((f[1] - 0.866).abs() < 1e-3, "{}", f[1]);
        assert!((f[41] - 0.0027).abs() < 1e-4, "{}", f[41]);
    }
}
