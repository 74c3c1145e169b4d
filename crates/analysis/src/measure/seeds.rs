//! Summaries over seeds: the mean and sample standard deviation of a quantity, and of a curve
//! (one value per x) measured in several replicates, at the x every replicate measured.

use std::collections::BTreeMap;

/// Mean and sample standard deviation (0 for one value; NaN mean for none).
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// A curve's mean and standard deviation over replicates at one x.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BandPoint {
    /// The x (step, length).
    pub x: f64,
    /// Mean over replicates.
    pub mean: f64,
    /// Sample standard deviation over replicates.
    pub sd: f64,
}

/// The mean +- sd of `curves` (one (x, y) list per replicate) at every x that all of them
/// measured, ascending in x; empty when there is no curve.
pub fn band(curves: &[Vec<(f64, f64)>]) -> Vec<BandPoint> {
    let mut at: BTreeMap<u64, (f64, Vec<f64>)> = BTreeMap::new();
    for curve in curves {
        for &(x, y) in curve {
            // Keyed by the bits of x: replicates measure the same steps and lengths exactly.
            at.entry(x.to_bits()).or_insert((x, vec![])).1.push(y);
        }
    }
    let mut out: Vec<BandPoint> = at
        .into_values()
        .filter(|(_, ys)| !curves.is_empty() && ys.len() == curves.len())
        .map(|(x, ys)| {
            let (mean, sd) = mean_sd(&ys);
            BandPoint { x, mean, sd }
        })
        .collect();
    out.sort_by(|a, b| a.x.total_cmp(&b.x));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_band_is_taken_where_every_replicate_measured() {
        let curves = vec![
            vec![(0.0, 0.0), (10.0, 0.5), (20.0, 1.0)],
            vec![(0.0, 0.2), (20.0, 0.8), (30.0, 1.0)],
        ];
        let b = band(&curves);
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!((b[0].x, b[1].x), (0.0, 20.0));
        assert!((b[0].mean - 0.1).abs() < 1e-12);
        // Two values 0.2 apart: sample sd = 0.2 / sqrt 2.
        assert!((b[1].sd - 0.2 / 2f64.sqrt()).abs() < 1e-12);
        assert!(band(&[]).is_empty());
        assert_eq!(band(&curves[..1]).len(), 3);
        assert_eq!(band(&curves[..1])[1].sd, 0.0);
    }
}
