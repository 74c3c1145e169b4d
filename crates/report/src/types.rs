//! Head types as grids, drawn with plotters and the bundled font: every head's type (pure
//! positional, pure symbolic, neither) at the last checkpoint as a layer x head grid with its
//! swap scores, and over training as a head x checkpoint map. With one head per layer the grid
//! is one column (the paper's layer types).

use std::collections::BTreeMap;

use plotters::prelude::*;
use ropelab_analysis::claims::kind_letter;
use ropelab_analysis::measure::dynamics::{purity, Gamma, HeadKind, HeadStep};
use ropelab_analysis::SwapScores;

use crate::chart::{empty_chart, register_font, SIZE};

/// The colour of a head type: blue positional, orange symbolic, light grey neither.
pub fn kind_colour(kind: HeadKind) -> RGBColor {
    match kind {
        HeadKind::Positional => RGBColor(31, 119, 180),
        HeadKind::Symbolic => RGBColor(255, 127, 14),
        HeadKind::Mixed => RGBColor(215, 215, 215),
    }
}

/// A map of type cells: `cells[row][col]` with a label each (may be empty).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TypeMap {
    /// Title above the map.
    pub title: String,
    /// What the columns are.
    pub x_label: String,
    /// What the rows are.
    pub y_label: String,
    /// Column names, left to right.
    pub col_names: Vec<String>,
    /// Row names, bottom to top.
    pub row_names: Vec<String>,
    /// The cells, each row as long as `col_names`.
    pub cells: Vec<Vec<(HeadKind, String)>>,
}

impl TypeMap {
    /// The map as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        register_font();
        let cols = self.col_names.len();
        if cols == 0 || self.cells.is_empty() || self.cells.iter().any(|r| r.len() != cols) {
            return empty_chart(&self.title);
        }
        let rows = self.cells.len();
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
                root.fill(&WHITE)?;
                let mut chart = ChartBuilder::on(&root)
                    .caption(&self.title, ("sans-serif", 14))
                    .margin(10)
                    .x_label_area_size(36)
                    .y_label_area_size(52)
                    .build_cartesian_2d(0.0..cols as f64, 0.0..rows as f64)?;
                let (cols_n, rows_n) = (&self.col_names, &self.row_names);
                // Ticks every half cell; names at the cell centres only.
                let centre = |v: f64, names: &[String]| {
                    if (v.fract() - 0.5).abs() < 1e-6 {
                        names.get(v.floor() as usize).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                };
                chart
                    .configure_mesh()
                    .disable_mesh()
                    .x_desc(self.x_label.as_str())
                    .y_desc(self.y_label.as_str())
                    .label_style(("sans-serif", 11))
                    .x_labels(2 * cols.min(24) + 1)
                    .x_label_formatter(&|x| centre(*x, cols_n))
                    .y_labels(2 * rows + 1)
                    .y_label_formatter(&|y| centre(*y, rows_n))
                    .draw()?;
                chart.draw_series(self.cells.iter().enumerate().flat_map(|(r, row)| {
                    row.iter().enumerate().map(move |(c, (kind, _))| {
                        Rectangle::new(
                            [(c as f64, r as f64), (c as f64 + 0.95, r as f64 + 0.95)],
                            kind_colour(*kind).filled(),
                        )
                    })
                }))?;
                let style = ("sans-serif", 11).into_font().color(&BLACK);
                for (r, row) in self.cells.iter().enumerate() {
                    for (c, (_, label)) in row.iter().enumerate() {
                        if !label.is_empty() {
                            chart.draw_series(std::iter::once(Text::new(
                                label.clone(),
                                (c as f64 + 0.08, r as f64 + 0.6),
                                style.clone(),
                            )))?;
                        }
                    }
                }
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

/// The legend the titles carry.
const LEGEND: &str = "blue P positional, orange S symbolic, grey neither";

fn kind_of(l: &HeadStep, gamma: Gamma) -> HeadKind {
    purity(
        SwapScores {
            s_pos: l.s_pos,
            s_sym: l.s_sym,
        },
        gamma,
    )
}

/// Every head's type at the last scored step as a layer x head grid, each cell with its type
/// letter and its s_pos / s_sym.
pub fn type_grid(lines: &[HeadStep], title: &str, gamma: Gamma) -> String {
    let last = lines.iter().map(|l| l.step).max();
    let mut grid: BTreeMap<usize, BTreeMap<usize, &HeadStep>> = BTreeMap::new();
    for l in lines.iter().filter(|l| Some(l.step) == last) {
        grid.entry(l.layer).or_default().insert(l.head, l);
    }
    let heads = grid.values().map(BTreeMap::len).max().unwrap_or(0);
    let mut cells = vec![];
    let mut row_names = vec![];
    for (layer, row) in &grid {
        row_names.push(format!("L{layer}"));
        cells.push(
            (0..heads)
                .map(|h| match row.get(&h) {
                    Some(l) => {
                        let kind = kind_of(l, gamma);
                        let text = format!("{} {:.2}/{:.2}", kind_letter(kind), l.s_pos, l.s_sym);
                        (kind, text)
                    }
                    None => (HeadKind::Mixed, String::new()),
                })
                .collect(),
        );
    }
    TypeMap {
        title: format!(
            "{title}: head types at step {} (gamma {gamma}; {LEGEND}; s_pos/s_sym)",
            last.unwrap_or(0)
        ),
        x_label: "head".into(),
        y_label: "layer".into(),
        col_names: (0..heads).map(|h| format!("H{h}")).collect(),
        row_names,
        cells,
    }
    .to_svg()
}

/// Every head's type at every scored step: one row per (layer, head), one column per
/// checkpoint.
pub fn types_over_training(lines: &[HeadStep], title: &str, gamma: Gamma) -> String {
    let steps: Vec<usize> = {
        let mut s: Vec<usize> = lines.iter().map(|l| l.step).collect();
        s.sort_unstable();
        s.dedup();
        s
    };
    let mut heads: BTreeMap<(usize, usize), BTreeMap<usize, HeadKind>> = BTreeMap::new();
    for l in lines {
        heads
            .entry((l.layer, l.head))
            .or_default()
            .insert(l.step, kind_of(l, gamma));
    }
    let (row_names, cells) = heads
        .iter()
        .map(|(&(layer, head), by_step)| {
            let row = steps
                .iter()
                .map(|s| {
                    (
                        by_step.get(s).copied().unwrap_or(HeadKind::Mixed),
                        String::new(),
                    )
                })
                .collect();
            (format!("L{layer}H{head}"), row)
        })
        .unzip();
    TypeMap {
        title: format!("{title}: head types over training (gamma {gamma}; {LEGEND})"),
        x_label: "step".into(),
        y_label: "head".into(),
        col_names: steps.iter().map(|s| s.to_string()).collect(),
        row_names,
        cells,
    }
    .to_svg()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(step: usize, layer: usize, head: usize, s_pos: f64, s_sym: f64) -> HeadStep {
        HeadStep {
            step,
            layer,
            head,
            s_pos,
            s_sym,
            entropy: 1.0,
            entropy_norm: 0.5,
            pure_0_1: HeadKind::Mixed,
            pure_0_05: HeadKind::Mixed,
            freq_use: vec![],
            freq_mean_plane: 0.0,
            accuracy: 1.0,
            accuracy_per_hop: BTreeMap::new(),
            block: None,
            planes: vec![],
            run: String::new(),
            settings: String::new(),
        }
    }

    /// The fill colours of the cells drawn, in drawing order.
    fn fills(svg: &str) -> Vec<String> {
        svg.split("<rect")
            .skip(1)
            .filter_map(|r| {
                let f = r.split("fill=\"").nth(1)?.split('"').next()?;
                Some(f.to_string())
            })
            .collect()
    }

    #[test]
    fn the_grid_colours_each_head_by_its_type() {
        let lines = vec![
            line(0, 0, 0, 0.5, 0.5),
            line(9, 0, 0, 0.99, 0.01),
            line(9, 0, 1, 0.01, 0.99),
            line(9, 1, 0, 0.5, 0.5),
            line(9, 1, 1, 0.97, 0.02),
        ];
        let svg = type_grid(&lines, "t", Gamma::DEFAULT);
        assert!(
            svg.contains("P 0.99/0.01") && svg.contains("S 0.01/0.99"),
            "{svg}"
        );
        let hex = |k| {
            let RGBColor(r, g, b) = kind_colour(k);
            format!("#{r:02X}{g:02X}{b:02X}")
        };
        let f = fills(&svg);
        for k in [HeadKind::Positional, HeadKind::Symbolic, HeadKind::Mixed] {
            assert!(f.iter().any(|c| c.eq_ignore_ascii_case(&hex(k))), "{f:?}");
        }
        // Over training: 4 heads x 2 steps, the first step's missing heads drawn as neither.
        let svg = types_over_training(&lines, "t", Gamma::DEFAULT);
        let p = f_count(&fills(&svg), &hex(HeadKind::Positional));
        assert_eq!(p, 2, "{svg}");
        assert!(svg.contains("L1H1"));
    }

    fn f_count(fills: &[String], colour: &str) -> usize {
        fills
            .iter()
            .filter(|c| c.eq_ignore_ascii_case(colour))
            .count()
    }

    #[test]
    fn an_empty_run_draws_an_empty_panel() {
        assert!(type_grid(&[], "t", Gamma::DEFAULT).contains("<svg"));
        assert!(types_over_training(&[], "t", Gamma::DEFAULT).contains("<svg"));
    }
}
