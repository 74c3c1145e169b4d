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

/// Logits at the last position of a random model of `config` on fixed ids, its inputs read at
/// positions `start ..`.
fn last_logits(config: ropelab_model::ModelConfig, start: usize) -> Vec<f32> {
    use candle_core::Tensor;
    let model = ropelab_model::GptJ::new(config, 5, &Device::Cpu)
        .unwrap()
        .starting_at(start);
    let ids: Vec<u32> = (0..24).map(|i| (i * 7 % 11) as u32).collect();
    let ids = Tensor::from_vec(ids, (2, 12), &Device::Cpu).unwrap();
    let logits = model
        .forward_last(&ids, &mut ropelab_model::Hooks::new(), None)
        .unwrap();
    logits.flatten_all().unwrap().to_vec1().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn randomised_positions_keep_relative_angles_and_shift_absolute_ones() {
    use ropelab_model::ModelConfig;
    // Rotary attention sees relative angles only: shifting every position leaves the logits
    // equal (to f32 rounding of the larger angles), at any layout and base, NoPE layers too.
    let mut rope = ModelConfig::tiny(PositionEncoding::gptj(4));
    rope.layer_positions = vec![
        PositionEncoding::rope(100.0, 4, RopeLayout::HalfSplit),
        PositionEncoding::None,
    ];
    let at_zero = last_logits(rope.clone(), 0);
    for start in [1, 37, 1000] {
        let d = max_diff(&at_zero, &last_logits(rope.clone(), start));
        assert!(d < 1e-4, "rope, start {start}: logits moved by {d}");
    }
    // The rotation itself does shift: the table at p + 37 is the table of position p + 37.
    let r = PositionEncoding::gptj(4).rotation().unwrap();
    let (c37, _) = r.table(37..40);
    let (c0, _) = r.table(0..3);
    assert_ne!(c37, c0);
    assert_eq!(c37, r.table([37, 38, 39]).0);
    // An absolute encoding is added to the embeddings: the shift changes what the model reads.
    let sinusoidal = ModelConfig::tiny(PositionEncoding::Sinusoidal { base: 10_000.0 });
    let at_zero = last_logits(sinusoidal.clone(), 0);
    let d = max_diff(&at_zero, &last_logits(sinusoidal, 37));
    assert!(d > 1e-3, "sinusoidal: logits moved by only {d}");
}
