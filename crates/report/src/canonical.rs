//! Figures of frequency-band training on the canonical tasks (`ropelab canonical`,
//! docs/canonical.md): accuracy and the largest attention weight per answer position, one line
//! per band, and accuracy against each band's centre frequency (the band sweep).

use ropelab_analysis::measure::canonical::{BandSummary, PerPositionRow};

use crate::chart::{empty_chart, Chart, Series};

/// The bands of `rows` in first-seen order.
fn bands(rows: &[PerPositionRow]) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for r in rows {
        if !out.contains(&r.band) {
            out.push(r.band.clone());
        }
    }
    out
}

/// One line per band of `value` against the answer position (mean over seeds).
fn per_position(
    rows: &[PerPositionRow],
    title: &str,
    y_label: &str,
    value: fn(&PerPositionRow) -> f64,
) -> String {
    let series = bands(rows)
        .into_iter()
        .map(|band| {
            let mut sums: std::collections::BTreeMap<usize, (f64, usize)> = Default::default();
            for r in rows.iter().filter(|r| r.band == band) {
                let e = sums.entry(r.position).or_default();
                *e = (e.0 + value(r), e.1 + 1);
            }
            let points = sums
                .into_iter()
                .map(|(p, (sum, n))| (p as f64, sum / n as f64))
                .collect();
            Series::new(band, points)
        })
        .collect();
    Chart {
        title: title.into(),
        x_label: "answer position".into(),
        y_label: y_label.into(),
        y_range: Some((-0.02, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// Accuracy per answer position, one line per band.
pub fn accuracy_by_position(rows: &[PerPositionRow]) -> String {
    let task = rows.first().map_or("canonical task", |r| r.task.as_str());
    per_position(
        rows,
        &format!("{task}: accuracy per answer position, per band"),
        "accuracy",
        |r| r.accuracy,
    )
}

/// The largest weight the query put on each key position, one line per band.
pub fn w_max_by_position(rows: &[PerPositionRow]) -> String {
    let task = rows.first().map_or("canonical task", |r| r.task.as_str());
    per_position(
        rows,
        &format!("{task}: largest attention weight on each position (w_max), per band"),
        "w_max",
        |r| r.w_max,
    )
}

/// The band sweep: accuracy against each `planes=` band's centre frequency (mean rate of its
/// planes, log scale), with all / high / low as marked points.
pub fn sweep(summary: &[BandSummary]) -> String {
    let task = summary
        .first()
        .map_or("canonical task", |b| b.task.as_str());
    let title = format!("{task}: accuracy versus the band's centre frequency");
    if summary.is_empty() {
        return empty_chart(&title);
    }
    let mut windows: Vec<(f64, f64)> = summary
        .iter()
        .filter(|b| b.band.starts_with("planes="))
        .map(|b| (b.centre, b.accuracy))
        .collect();
    windows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut series = vec![Series::new("planes= windows", windows)];
    for (i, name) in ["all", "high", "low"].iter().enumerate() {
        if let Some(b) = summary.iter().find(|b| b.band == *name) {
            let point = vec![(b.centre, b.accuracy)];
            series.push(
                Series::new(*name, point.clone())
                    .with_markers(point)
                    .colored(i + 1),
            );
        }
    }
    Chart {
        title,
        x_label: "band centre frequency (rad per position)".into(),
        y_label: "test accuracy".into(),
        log_x: true,
        y_range: Some((-0.02, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}
