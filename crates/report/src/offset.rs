//! Figures of the implicit-bias experiment (`ropelab offset`, docs/offset.md): accuracy versus
//! test length per encoding and attention kind, the dilution law against the measured target
//! weight, and where the last query's attention peaks.

use ropelab_analysis::measure::offset::{MechanismLine, OffsetAccuracyRow};

use crate::chart::{Chart, Series};

/// The keys of `items` in first-seen order.
fn ordered<T: PartialEq + Clone>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = vec![];
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// Mean of `(x, y)` points by x, ascending.
fn mean_by_x(points: impl Iterator<Item = (usize, f64)>) -> Vec<(f64, f64)> {
    let mut sums: std::collections::BTreeMap<usize, (f64, usize)> = Default::default();
    for (x, y) in points {
        let e = sums.entry(x).or_default();
        *e = (e.0 + y, e.1 + 1);
    }
    sums.into_iter()
        .map(|(x, (sum, n))| (x as f64, sum / n as f64))
        .collect()
}

/// Accuracy at the last position versus test length, one line per (encoding, attention kind)
/// (mean over offsets and seeds; linear attention dashed, one colour per encoding); the
/// training length is marked with dots.
pub fn accuracy_vs_length(rows: &[OffsetAccuracyRow]) -> String {
    let pes = ordered(rows.iter().map(|r| r.pe.clone()));
    let mut series = vec![];
    for (i, pe) in pes.iter().enumerate() {
        for attention in ordered(
            rows.iter()
                .filter(|r| &r.pe == pe)
                .map(|r| r.attention.clone()),
        ) {
            let mine = || {
                rows.iter()
                    .filter(|r| &r.pe == pe && r.attention == attention)
            };
            let points = mean_by_x(mine().map(|r| (r.test_len, r.accuracy)));
            let trained: Vec<(f64, f64)> = points
                .iter()
                .copied()
                .filter(|&(x, _)| mine().any(|r| r.train_len as f64 == x))
                .collect();
            let line = Series::new(format!("{pe} {attention}"), points)
                .with_markers(trained)
                .colored(i);
            series.push(if attention == "linear" {
                line.dashed()
            } else {
                line
            });
        }
    }
    Chart {
        title: "Fixed-offset retrieval: accuracy versus test length (dots: training length)".into(),
        x_label: "test length".into(),
        y_label: "accuracy at the last position".into(),
        y_range: Some((-0.02, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// Rotary softmax runs: the measured mean weight on the target (solid) and the dilution law's
/// prediction from the carrier (dashed) versus test length, one colour per offset (mean over
/// seeds; head 0).
pub fn dilution(lines: &[MechanismLine]) -> String {
    let rope = || {
        lines
            .iter()
            .filter(|l| l.pe.starts_with("rope") && l.attention == "softmax" && l.head == 0)
    };
    let ks = ordered(rope().map(|l| l.k));
    let mut series = vec![];
    for (i, k) in ks.iter().enumerate() {
        let mine = || rope().filter(|l| l.k == *k);
        series.push(
            Series::new(
                format!("k {k}: measured w_L"),
                mean_by_x(mine().map(|l| (l.test_len, l.target_weight))),
            )
            .colored(i),
        );
        series.push(
            Series::new(
                format!("k {k}: predicted p_L"),
                mean_by_x(mine().map(|l| (l.test_len, l.predicted_weight))),
            )
            .colored(i)
            .dashed(),
        );
    }
    Chart {
        title: "Rotary: target weight and the dilution law e^s(k) / sum_r<L e^s(r)".into(),
        x_label: "test length L".into(),
        y_label: "mean attention weight on the target".into(),
        y_range: Some((-0.02, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// Where the last query's attention peaks: the most frequent argmax key position versus test
/// length, per encoding (softmax) and offset (seed of the first run of each). A rotary head
/// follows the target (L - 1 - k); a learned absolute one stays at a fixed position.
pub fn pinning(lines: &[MechanismLine]) -> String {
    let soft = || {
        lines
            .iter()
            .filter(|l| l.attention == "softmax" && l.head == 0)
    };
    let pes = ordered(soft().map(|l| l.pe.clone()));
    let mut series = vec![];
    for (i, pe) in pes.iter().enumerate() {
        for k in ordered(soft().filter(|l| &l.pe == pe).map(|l| l.k)) {
            let Some(seed) = soft().find(|l| &l.pe == pe && l.k == k).map(|l| l.seed) else {
                continue;
            };
            let points: Vec<(f64, f64)> = soft()
                .filter(|l| &l.pe == pe && l.k == k && l.seed == seed)
                .map(|l| (l.test_len as f64, l.mode_key as f64))
                .collect();
            let line = Series::new(format!("{pe} k {k}"), points).colored(i);
            series.push(if pe == "ape" { line.dashed() } else { line });
        }
    }
    Chart {
        title: "Where the last query's attention peaks (most frequent argmax key)".into(),
        x_label: "test length L".into(),
        y_label: "argmax key position".into(),
        series,
        ..Chart::default()
    }
    .to_svg()
}
