//! Position encodings at the extremes: RoPE and sinusoidal bases from 1e-12 to 1e12 and
//! positions up to 10^6 give finite angles equal to the f64 reference within 1e-6, on the angle
//! table both engines read and on the composed path's tensors.

use candle_core::Device;
use ropelab_model::rope::angles_of;
use ropelab_model::{PositionEncoding, RopeLayout};

const POSITIONS: [usize; 6] = [0, 1, 7, 4_097, 123_457, 1_000_000];

/// The f64 reference: plane k of a `dims`-wide encoding turns by pos * base^(-2k / dims).
fn reference(base: f64, dims: usize, k: usize, pos: usize) -> (f64, f64) {
    let g = base.powf(-2.0 * k as f64 / dims as f64);
    let (s, c) = (pos as f64 * g).sin_cos();
    (c, s)
}

#[test]
fn rope_angles_at_extreme_bases_match_the_f64_reference() {
    for base in [1e-12, 1e-3, 10_000.0, 1e12] {
        let rotation = PositionEncoding::rope(base, 64, RopeLayout::Interleaved)
            .rotation()
            .unwrap();
        let (cos, sin) = rotation.table(POSITIONS);
        let (tc, ts) = angles_of(&POSITIONS, &rotation, &Device::Cpu).unwrap();
        let (tc, ts): (Vec<Vec<f32>>, Vec<Vec<f32>>) =
            (tc.to_vec2().unwrap(), ts.to_vec2().unwrap());
        for (row, &pos) in POSITIONS.iter().enumerate() {
            for k in 0..32 {
                let (c, s) = reference(base, 64, k, pos);
                for (got_c, got_s) in [
                    (cos[row * 32 + k], sin[row * 32 + k]),
                    (tc[row][k], ts[row][k]),
                ] {
                    assert!(
                        got_c.is_finite() && got_s.is_finite(),
                        "base {base} pos {pos} plane {k}"
                    );
                    assert!(
                        (got_c as f64 - c).abs() <= 1e-6 && (got_s as f64 - s).abs() <= 1e-6,
                        "base {base} pos {pos} plane {k}: ({got_c}, {got_s}) vs ({c}, {s})"
                    );
                }
            }
        }
    }
}

#[test]
fn sinusoid_tables_at_extreme_bases_match_the_f64_reference() {
    for base in [1e-12, 1e12] {
        let d = 16;
        let table = PositionEncoding::Sinusoidal { base }
            .sinusoid_table(d, POSITIONS)
            .unwrap();
        for (row, &pos) in POSITIONS.iter().enumerate() {
            for k in 0..d / 2 {
                let (c, s) = reference(base, d, k, pos);
                let (got_s, got_c) = (table[row * d + 2 * k], table[row * d + 2 * k + 1]);
                assert!(got_s.is_finite() && got_c.is_finite());
                assert!((got_s as f64 - s).abs() <= 1e-6 && (got_c as f64 - c).abs() <= 1e-6);
            }
        }
    }
}

/// The check above has teeth: computing the angle in f32 first (as a table built from f32
/// tensors would) misses the reference by far at base 1e-12 and position 10^6.
#[test]
fn an_f32_angle_would_fail_the_reference() {
    let (pos, k) = (1_000_000usize, 5);
    let g = 1e-12f64.powf(-2.0 * k as f64 / 64.0);
    let (c, _) = reference(1e-12, 64, k, pos);
    let naive = (pos as f32 * g as f32).cos() as f64;
    assert!((naive - c).abs() > 1e-3, "{naive} vs {c}");
}
