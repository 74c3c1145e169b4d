//! A heatmap as SVG (rows x columns of non-negative values, white to dark blue), drawn with
//! plotters and the bundled font: the layer x RoPE-plane frequency-use map. Non-finite cells
//! are drawn grey; an empty map is a labelled empty panel.

use plotters::prelude::*;

use crate::chart::{empty_chart, register_font, tick, SIZE};

/// Rows of cells with names, and what the axes mean.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Heatmap {
    /// Title above the map.
    pub title: String,
    /// What the columns are.
    pub x_label: String,
    /// What the rows are.
    pub y_label: String,
    /// Row names, bottom to top.
    pub row_names: Vec<String>,
    /// Cell values, `rows[r][c]`, each row as long as the first.
    pub rows: Vec<Vec<f64>>,
}

/// The colour of `v` on a 0..=`max` scale: white to dark blue; grey when not finite.
pub fn shade(v: f64, max: f64) -> RGBColor {
    if !v.is_finite() {
        return RGBColor(190, 190, 190);
    }
    let t = if max > 0.0 {
        (v / max).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(mix(255.0, 8.0), mix(255.0, 48.0), mix(255.0, 107.0))
}

impl Heatmap {
    /// The map as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        register_font();
        let cols = self.rows.first().map_or(0, Vec::len);
        if cols == 0 || self.rows.iter().any(|r| r.len() != cols) {
            return empty_chart(&self.title);
        }
        let max = self
            .rows
            .iter()
            .flatten()
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
                root.fill(&WHITE)?;
                let rows = self.rows.len();
                let mut chart = ChartBuilder::on(&root)
                    .caption(&self.title, ("sans-serif", 16))
                    .margin(10)
                    .x_label_area_size(36)
                    .y_label_area_size(52)
                    .build_cartesian_2d(0.0..cols as f64, 0.0..rows as f64)?;
                let names = &self.row_names;
                chart
                    .configure_mesh()
                    .disable_mesh()
                    .x_desc(self.x_label.as_str())
                    .y_desc(self.y_label.as_str())
                    .label_style(("sans-serif", 12))
                    .x_label_formatter(&|x| tick(*x))
                    // Ticks every half row; names at the row centres only.
                    .y_labels(2 * rows + 1)
                    .y_label_formatter(&|y| {
                        if (y.fract() - 0.5).abs() < 1e-6 {
                            names.get(y.floor() as usize).cloned().unwrap_or_default()
                        } else {
                            String::new()
                        }
                    })
                    .draw()?;
                chart.draw_series(self.rows.iter().enumerate().flat_map(|(r, row)| {
                    row.iter().enumerate().map(move |(c, &v)| {
                        Rectangle::new(
                            [(c as f64, r as f64), (c as f64 + 1.0, r as f64 + 1.0)],
                            shade(v, max).filled(),
                        )
                    })
                }))?;
                Ok(())
            })();
            if drawn.is_err() {
                let _ = root.fill(&WHITE);
            }
            let _ = root.present();
        }
        svg
    }
}
