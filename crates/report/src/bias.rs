//! Figures of the bias experiment (`ropelab bias`, docs/bias.md): the conflict split's
//! mechanism fractions per bias as grouped bars with one-sd whiskers over seeds, and accuracy
//! versus input length per bias.

use plotters::prelude::*;

use crate::chart::{register_font, Chart, Series, PALETTE, SIZE};

/// One bias's bars: its name and (mean, sd) of each fraction (positional, symbolic, neither).
pub type BarGroup = (String, [(f64, f64); 3]);

/// The names of the bars in a group.
pub const FRACTIONS: [&str; 3] = ["positional", "symbolic", "neither"];

/// Grouped bars: per bias, the fraction of conflict samples answered by position, by content
/// and by neither (mean over seeds), each with a whisker of one sd.
pub fn mechanism_bars(groups: &[BarGroup]) -> String {
    register_font();
    let mut svg = String::new();
    {
        let (w, h) = (SIZE.0.max(90 * groups.len() as u32 + 120), SIZE.1 + 40);
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        let _ = draw_bars(&root, groups);
        let _ = root.present();
    }
    svg
}

fn draw_bars(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    groups: &[BarGroup],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n = groups.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Conflict split: which rule the answer follows (mean, whisker 1 sd over seeds)",
            ("sans-serif", 15),
        )
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..n, 0f64..1.3)
        .map_err(|e| err(&e))?;
    let names: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len().max(1) * 2 + 1)
        .x_label_formatter(&|x| {
            let i = (x - 0.5).round();
            if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("fraction of conflict samples")
        .draw()
        .map_err(|e| err(&e))?;
    for (k, name) in FRACTIONS.iter().enumerate() {
        let color = PALETTE[k];
        let bars = groups.iter().enumerate().map(|(i, g)| {
            let x0 = i as f64 + 0.12 + 0.26 * k as f64;
            Rectangle::new([(x0, 0.0), (x0 + 0.24, g.1[k].0)], color.filled())
        });
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
        let whiskers = groups.iter().enumerate().map(|(i, g)| {
            let x = i as f64 + 0.24 + 0.26 * k as f64;
            let (m, sd) = g.1[k];
            PathElement::new(
                vec![(x, (m - sd).max(0.0)), (x, (m + sd).min(1.0))],
                BLACK.stroke_width(1),
            )
        });
        chart.draw_series(whiskers).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperMiddle)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    Ok(())
}

/// One bias's length curve: its name and `(items, mean accuracy, sd)` per tested length.
pub type LengthLine = (String, Vec<(f64, f64, f64)>);

/// Accuracy versus input length (`x_label`), one line per bias (mean over seeds, a band of one
/// sd); the training length is the first point.
pub fn length_curves(title: &str, x_label: &str, lines: &[LengthLine]) -> String {
    let series = lines
        .iter()
        .enumerate()
        .map(|(i, (name, points))| {
            Series::new(
                name.clone(),
                points.iter().map(|&(x, m, _)| (x, m)).collect(),
            )
            .with_band(
                points
                    .iter()
                    .map(|&(x, m, sd)| (x, (m - sd).max(0.0), (m + sd).min(1.0)))
                    .collect(),
            )
            .colored(i)
        })
        .collect();
    Chart {
        title: title.into(),
        x_label: x_label.into(),
        y_label: "accuracy".into(),
        log_x: true,
        y_range: Some((-0.02, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_draw_every_bias_and_a_whisker_per_bar() {
        let groups = vec![
            ("none".to_string(), [(0.5, 0.1), (0.3, 0.05), (0.2, 0.0)]),
            ("nope:0".to_string(), [(0.0, 0.0), (1.0, 0.0), (0.0, 0.0)]),
        ];
        let svg = mechanism_bars(&groups);
        assert!(svg.contains("none") && svg.contains("nope:0"), "{svg}");
        assert!(svg.contains("symbolic"));
        // 6 bars, 6 whiskers.
        assert!(svg.matches("<rect").count() >= 6);
        assert!(svg.matches("<polyline").count() + svg.matches("<path").count() >= 6);
        let curves = length_curves(
            "t",
            "items",
            &[("none".into(), vec![(16.0, 1.0, 0.0), (128.0, 0.9, 0.05)])],
        );
        assert!(curves.contains("none"));
    }
}
