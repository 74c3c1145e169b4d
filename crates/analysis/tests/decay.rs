//! The fitted discrepancy rate against a plain least-squares solve: the within-head slope and
//! its interval equal those of the regression of log y on log x with one indicator column per
//! head, solved by Gaussian elimination on the normal equations.

mod common;

use common::{solve, uniform};
use ropelab_analysis::measure::decay::{log_log_fit, t_975};

/// Inverts a small dense matrix column by column.
fn inverse(a: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let n = a.len();
    let cols: Vec<Vec<f64>> = (0..n)
        .map(|j| {
            solve(
                a.to_vec(),
                (0..n).map(|i| f64::from(u8::from(i == j))).collect(),
            )
        })
        .collect();
    (0..n)
        .map(|i| (0..n).map(|j| cols[j][i]).collect())
        .collect()
}

#[test]
fn the_within_head_fit_is_the_dummy_variable_regression() {
    // Three heads, noisy power laws of different levels and lengths.
    let mut next = uniform(7);
    let mut noise = || next() * 0.4;
    let groups: Vec<Vec<(f64, f64)>> = [(2.0, -1.2, 5), (0.5, -0.8, 4), (9.0, -1.0, 6)]
        .iter()
        .map(|&(c, rate, n)| {
            (0..n)
                .map(|i| {
                    let x = 17.0 * 2f64.powi(i);
                    (x, c * x.powf(rate) * noise().exp())
                })
                .collect()
        })
        .collect();
    let fit = log_log_fit(&groups).unwrap();

    // Design: [log x, head indicators]; normal equations X'X beta = X'y.
    let k = groups.len();
    let mut rows = vec![];
    for (g, pts) in groups.iter().enumerate() {
        for &(x, y) in pts {
            let mut row = vec![x.ln()];
            row.extend((0..k).map(|h| f64::from(u8::from(h == g))));
            rows.push((row, y.ln()));
        }
    }
    let p = k + 1;
    let xtx: Vec<Vec<f64>> = (0..p)
        .map(|i| {
            (0..p)
                .map(|j| rows.iter().map(|r| r.0[i] * r.0[j]).sum())
                .collect()
        })
        .collect();
    let xty: Vec<f64> = (0..p)
        .map(|i| rows.iter().map(|r| r.0[i] * r.1).sum())
        .collect();
    let beta = solve(xtx.clone(), xty);
    let rss: f64 = rows
        .iter()
        .map(|r| {
            let fitted: f64 = r.0.iter().zip(&beta).map(|(a, b)| a * b).sum();
            (r.1 - fitted).powi(2)
        })
        .sum();
    let df = rows.len() - p;
    let se = (rss / df as f64 * inverse(&xtx)[0][0]).sqrt();
    let half = t_975(df) * se;
    assert!(
        (fit.slope - beta[0]).abs() < 1e-10,
        "{fit:?} vs {}",
        beta[0]
    );
    assert!(
        (fit.hi - fit.slope - half).abs() < 1e-10,
        "{fit:?} vs +-{half}"
    );
    assert!(half > 0.01, "the noise widens the interval: {half}");
    assert_eq!((fit.points, fit.groups), (15, 3));
}
