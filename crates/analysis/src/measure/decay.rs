//! The discrepancy law, fitted (docs/theory.md, "Trained heads"): the least-squares slope of
//! log(discrepancy) against log(length), pooled over heads with one intercept per head (each
//! head's own level, one common rate), with its 95% interval (Student's t on the residuals).
//! The theorem predicts a worst-input rate of -2 for a positional (Index) head and none for a
//! symbolic (Retrieval) head.

/// A fitted log-log slope with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlopeFit {
    /// The common slope.
    pub slope: f64,
    /// Lower end of its 95% interval.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
    /// Points fitted (positive x and y only).
    pub points: usize,
    /// Groups (heads) they came from, each with its own intercept.
    pub groups: usize,
}

impl std::fmt::Display for SlopeFit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:+.3} (95% {:+.3} to {:+.3}; {} points of {} head{})",
            self.slope,
            self.lo,
            self.hi,
            self.points,
            self.groups,
            if self.groups == 1 { "" } else { "s" }
        )
    }
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom (exact table to 10, the
/// Cornish-Fisher expansion beyond, within 0.001).
pub fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 10] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    ];
    if df == 0 {
        return f64::INFINITY;
    }
    if df <= TABLE.len() {
        return TABLE[df - 1];
    }
    let z: f64 = 1.959_963_984_540_054;
    let v = df as f64;
    z + (z.powi(3) + z) / (4.0 * v)
        + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v * v)
        + (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / (384.0 * v.powi(3))
}

/// The slope of log y against log x over `groups` of (x, y) points, one intercept per group
/// (the within-group estimator), with its 95% interval; points with x or y not positive are
/// left out. None when fewer points remain than groups + 2 (no residual degree of freedom) or
/// no group has two distinct x.
pub fn log_log_fit(groups: &[Vec<(f64, f64)>]) -> Option<SlopeFit> {
    let logs: Vec<Vec<(f64, f64)>> = groups
        .iter()
        .map(|g| {
            g.iter()
                .filter(|p| p.0 > 0.0 && p.1 > 0.0 && p.0.is_finite() && p.1.is_finite())
                .map(|p| (p.0.ln(), p.1.ln()))
                .collect::<Vec<_>>()
        })
        .filter(|g| !g.is_empty())
        .collect();
    let points: usize = logs.iter().map(Vec::len).sum();
    let k = logs.len();
    if points < k + 2 {
        return None;
    }
    // Centre each group on its own means: the common slope is then a plain regression.
    let centred: Vec<(f64, f64)> = logs
        .iter()
        .flat_map(|g| {
            let n = g.len() as f64;
            let (mx, my) = (
                g.iter().map(|p| p.0).sum::<f64>() / n,
                g.iter().map(|p| p.1).sum::<f64>() / n,
            );
            g.iter().map(move |p| (p.0 - mx, p.1 - my))
        })
        .collect();
    let sxx: f64 = centred.iter().map(|p| p.0 * p.0).sum();
    if sxx <= 0.0 {
        return None;
    }
    let slope = centred.iter().map(|p| p.0 * p.1).sum::<f64>() / sxx;
    let rss: f64 = centred.iter().map(|p| (p.1 - slope * p.0).powi(2)).sum();
    let df = points - k - 1;
    let se = (rss / df as f64 / sxx).sqrt();
    let half = t_975(df) * se;
    Some(SlopeFit {
        slope,
        lo: slope - half,
        hi: slope + half,
        points,
        groups: k,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_the_tables() {
        for (df, t) in [
            (1, 12.706),
            (5, 2.571),
            (11, 2.201),
            (20, 2.086),
            (30, 2.042),
            (60, 2.000),
            (120, 1.980),
        ] {
            assert!((t_975(df) - t).abs() < 1e-3, "df {df}: {}", t_975(df));
        }
        assert!(t_975(0).is_infinite());
    }

    #[test]
    fn an_exact_power_law_is_recovered_with_a_zero_width_interval() {
        // Two heads on y = c x^-2 with their own constants.
        let g = |c: f64| -> Vec<(f64, f64)> {
            [17.0, 33.0, 65.0, 129.0]
                .iter()
                .map(|&x: &f64| (x, c * x.powf(-2.0)))
                .collect()
        };
        let fit = log_log_fit(&[g(3.0), g(50.0)]).unwrap();
        assert!((fit.slope + 2.0).abs() < 1e-12, "{fit:?}");
        assert!(fit.hi - fit.lo < 1e-9);
        assert_eq!((fit.points, fit.groups), (8, 2));
        // Too few points, non-positive values left out.
        assert!(log_log_fit(&[vec![(1.0, 1.0), (2.0, 0.5)]]).is_none());
        let fit = log_log_fit(&[vec![(1.0, 1.0), (2.0, 0.5), (4.0, 0.0), (4.0, 0.25)]]).unwrap();
        assert_eq!(fit.points, 3);
        assert!((fit.slope + 1.0).abs() < 1e-12);
    }
}
