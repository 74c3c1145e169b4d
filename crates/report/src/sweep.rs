//! The figures of a collected sweep (`ropelab collect`): accuracy per configuration, the mean
//! over seeds with an error bar of one standard deviation, and accuracy against input length
//! per configuration with a band of one standard deviation over seeds.

use ropelab_sweep::collect::{ConfigSummary, LengthSummary};

use crate::chart::{Chart, Series};

/// When every configuration sets one and the same numeric parameter: its name and values.
fn one_numeric_axis(rows: &[ConfigSummary]) -> Option<(String, Vec<f64>)> {
    let mut name = None;
    let mut values = vec![];
    for r in rows {
        let (k, v) = r.config.split_once('=')?;
        if k.contains(' ') || v.contains(' ') || name.get_or_insert(k) != &k {
            return None;
        }
        values.push(v.parse().ok()?);
    }
    Some((name?.to_string(), values))
}

/// Mean accuracy (+- sd over seeds) of every configuration: against the one parameter the
/// sweep varies besides the seed when it is a number (log scale when it spans 10x or more),
/// else against the configuration's number in `summary.csv` order.
pub fn accuracy_by_config(rows: &[ConfigSummary]) -> String {
    let axis = one_numeric_axis(rows);
    let xs: Vec<f64> = match &axis {
        Some((_, v)) => v.clone(),
        None => (1..=rows.len()).map(|i| i as f64).collect(),
    };
    let x = |i: usize| xs[i];
    // Points in increasing x, so the line runs left to right.
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let log_x = axis.as_ref().is_some_and(|(_, v)| {
        let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        lo > 0.0 && hi >= 10.0 * lo
    });
    let series = Series::new(
        "mean +- sd over seeds",
        rows.iter()
            .enumerate()
            .map(|(i, r)| (x(i), r.accuracy_mean))
            .collect(),
    )
    .with_error_bars(
        rows.iter()
            .enumerate()
            .map(|(i, r)| {
                // One job has no spread to draw: a bar of zero length.
                let sd = r.accuracy_sd.unwrap_or(0.0);
                (x(i), r.accuracy_mean - sd, r.accuracy_mean + sd)
            })
            .collect(),
    );
    Chart {
        title: "Sweep: accuracy per configuration".into(),
        x_label: axis.map_or(
            "configuration (numbered as in the table)".into(),
            |(k, _)| k,
        ),
        log_x,
        y_label: "accuracy".into(),
        y_range: Some((-0.02, 1.02)),
        series: vec![series],
        ..Chart::default()
    }
    .to_svg()
}

/// Configurations drawn in the accuracy-vs-length figure (the table lists them all).
pub const MAX_LENGTH_LINES: usize = 8;

/// Accuracy against input length, one line per configuration (the first
/// [`MAX_LENGTH_LINES`] in `summary.csv` order, numbered as in the table) with a band of one
/// standard deviation over seeds; `None` when no job measured more than one length.
pub fn accuracy_vs_length(configs: &[ConfigSummary], rows: &[LengthSummary]) -> Option<String> {
    let mut series = vec![];
    for (i, c) in configs.iter().enumerate().take(MAX_LENGTH_LINES) {
        let mine: Vec<&LengthSummary> = rows.iter().filter(|r| r.config == c.config).collect();
        if mine.len() < 2 {
            continue;
        }
        let name = if c.config.is_empty() {
            format!("#{}", i + 1)
        } else {
            format!("#{} {}", i + 1, c.config)
        };
        series.push(
            Series::new(
                name,
                mine.iter().map(|r| (r.length as f64, r.mean)).collect(),
            )
            .with_band(
                mine.iter()
                    .map(|r| {
                        let sd = r.sd.unwrap_or(0.0); // one seed: no band
                        (r.length as f64, r.mean - sd, r.mean + sd)
                    })
                    .collect(),
            )
            .colored(i),
        );
    }
    if series.is_empty() {
        return None;
    }
    let lengths = || rows.iter().map(|r| r.length as f64);
    let lo = lengths().fold(f64::INFINITY, f64::min);
    let hi = lengths().fold(f64::NEG_INFINITY, f64::max);
    Some(
        Chart {
            title: "Sweep: accuracy against input length (mean +- sd over seeds)".into(),
            x_label: "input length (tokens; string length for formal languages)".into(),
            log_x: lo > 0.0 && hi >= 8.0 * lo,
            y_label: "accuracy".into(),
            y_range: Some((-0.02, 1.02)),
            series,
            ..Chart::default()
        }
        .to_svg(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(config: &str, mean: f64) -> ConfigSummary {
        ConfigSummary {
            config: config.into(),
            n: 2,
            accuracy_mean: mean,
            accuracy_sd: Some(0.1),
            layer_types: "- -".into(),
            n_star_mean: None,
            n_star_sd: None,
        }
    }

    fn length(config: &str, length: usize, mean: f64) -> LengthSummary {
        LengthSummary {
            config: config.into(),
            length,
            n: 2,
            mean,
            sd: Some(0.05),
        }
    }

    #[test]
    fn one_line_per_configuration_with_two_or_more_lengths() {
        let configs = [row("optim.lr=0.01", 0.5), row("optim.lr=0.001", 0.9)];
        let rows = [
            length("optim.lr=0.01", 17, 0.9),
            length("optim.lr=0.01", 33, 0.4),
            length("optim.lr=0.001", 17, 0.8),
        ];
        let svg = accuracy_vs_length(&configs, &rows).expect("one configuration has a curve");
        assert!(svg.contains("#1 optim.lr=0.01"), "{svg}");
        assert!(!svg.contains("#2 optim.lr=0.001"), "{svg}");
        assert_eq!(accuracy_vs_length(&configs, &rows[2..]), None);
    }

    #[test]
    fn one_numeric_parameter_is_the_x_axis() {
        let rows = [row("optim.lr=0.01", 0.5), row("optim.lr=0.001", 0.9)];
        assert_eq!(
            one_numeric_axis(&rows),
            Some(("optim.lr".to_string(), vec![0.01, 0.001]))
        );
        let svg = accuracy_by_config(&rows);
        assert!(svg.contains("optim.lr"), "{svg}");
        for mixed in [
            vec![row("optim.lr=0.01 model.d_model=8", 0.5)],
            vec![row("a=1", 0.5), row("b=2", 0.5)],
            vec![row("pe=rope", 0.5)],
            vec![row("", 0.5)],
        ] {
            assert_eq!(one_numeric_axis(&mixed), None);
            assert!(accuracy_by_config(&mixed).contains("configuration (numbered"));
        }
    }
}
