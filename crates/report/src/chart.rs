//! One line chart as SVG, drawn with plotters and the bundled DejaVu Sans (no system fonts):
//! the building block of every figure, with optional shaded bands (mean +- sd) and markers.
//! Non-finite points (and non-positive ones on a log axis) are dropped; a chart with nothing left to draw is a labelled empty panel, never an error.

use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// The bundled font (DejaVu Sans, its licence beside it in `fonts/`).
const FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// Registers the bundled font as plotters' `sans-serif` (once per process).
pub(crate) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in; a failure here is a build defect, caught by every test.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// Width and height of one chart, pixels.
pub const SIZE: (u32, u32) = (560, 340);

/// Colours of successive series (Tableau 10).
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One named line of (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Dashed (e.g. a bound or a reference next to a measurement).
    pub dashed: bool,
    /// Palette index (default: the series' position), so a reference can share its
    /// measurement's colour.
    pub color: Option<usize>,
    /// A shaded band around the line, (x, low, high) per x (e.g. mean +- one sd over seeds).
    pub band: Vec<(f64, f64, f64)>,
    /// Points marked with a dot in the line's colour (e.g. where a head becomes pure).
    pub markers: Vec<(f64, f64)>,
    /// Draw the band as an error bar at each x instead of a shaded area.
    pub error_bars: bool,
}

impl Series {
    /// A solid line.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            dashed: false,
            color: None,
            band: vec![],
            markers: vec![],
            error_bars: false,
        }
    }

    /// The same line with error bars, (x, low, high) per x.
    pub fn with_error_bars(mut self, bars: Vec<(f64, f64, f64)>) -> Self {
        self.band = bars;
        self.error_bars = true;
        self
    }

    /// The same line with a shaded band, (x, low, high) per x.
    pub fn with_band(mut self, band: Vec<(f64, f64, f64)>) -> Self {
        self.band = band;
        self
    }

    /// The same line with dots at `markers`.
    pub fn with_markers(mut self, markers: Vec<(f64, f64)>) -> Self {
        self.markers = markers;
        self
    }

    /// The same line in palette colour `i`.
    pub fn colored(mut self, i: usize) -> Self {
        self.color = Some(i);
        self
    }

    /// The same line, dashed.
    pub fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }
}

/// A series to draw: its index (colour), itself, its drawable points.
type Drawable<'a> = (usize, &'a Series, Vec<(f64, f64)>);

/// The drawable parts of a series besides its line: band polygon and markers.
struct Extras {
    band: Vec<(f64, f64)>,
    markers: Vec<(f64, f64)>,
}

/// A line chart: title, axis labels and scales, series.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// Fixed y range (else the data's, padded).
    pub y_range: Option<(f64, f64)>,
    /// The lines.
    pub series: Vec<Series>,
}

impl Chart {
    /// The points of `s` that can be drawn on this chart's axes.
    fn drawable(&self, s: &Series) -> Vec<(f64, f64)> {
        s.points
            .iter()
            .copied()
            .filter(|&(x, y)| drawable(x, self.log_x) && drawable(y, self.log_y))
            .collect()
    }

    /// The drawable band (as a closed polygon: upper edge, then lower edge backwards) and
    /// markers of `s`; a band with any undrawable edge point is left out whole.
    fn extras(&self, s: &Series) -> Extras {
        let ok = |x: f64, y: f64| drawable(x, self.log_x) && drawable(y, self.log_y);
        let band = if s.band.iter().all(|&(x, lo, hi)| ok(x, lo) && ok(x, hi)) {
            let upper = s.band.iter().map(|&(x, _, hi)| (x, hi));
            let lower = s.band.iter().rev().map(|&(x, lo, _)| (x, lo));
            upper.chain(lower).collect()
        } else {
            vec![]
        };
        let markers = s
            .markers
            .iter()
            .copied()
            .filter(|&(x, y)| ok(x, y))
            .collect();
        Extras { band, markers }
    }

    /// The chart as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        register_font();
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            // Drawing into a string cannot fail for I/O reasons; a plotters error leaves a
            // partial SVG, which the empty-panel fallback below replaces.
            if self.draw(&root).is_err() {
                let _ = root.fill(&WHITE);
                let _ = empty_panel(&root, &self.title);
            }
            let _ = root.present();
        }
        svg
    }

    fn draw(&self, root: &DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let lines: Vec<Drawable<'_>> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s, self.drawable(s)))
            .filter(|(_, _, p)| !p.is_empty())
            .collect();
        if lines.is_empty() {
            return empty_panel(root, &self.title);
        }
        let extras: Vec<Extras> = lines.iter().map(|(_, s, _)| self.extras(s)).collect();
        let all = || {
            lines
                .iter()
                .flat_map(|(_, _, p)| p.iter().copied())
                .chain(extras.iter().flat_map(|e| e.band.iter().copied()))
                .chain(extras.iter().flat_map(|e| e.markers.iter().copied()))
        };
        let bars = lines.iter().any(|(_, s, _)| s.error_bars);
        let (x0, x1) = padded(all().map(|p| p.0), self.log_x, bars);
        let (y0, y1) = self
            .y_range
            .unwrap_or_else(|| padded(all().map(|p| p.1), self.log_y, true));
        let mut builder = ChartBuilder::on(root);
        builder
            .caption(&self.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(52);
        macro_rules! finish {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(self.x_label.as_str())
                    .y_desc(self.y_label.as_str())
                    .label_style(("sans-serif", 12))
                    .x_labels(8)
                    .x_label_formatter(&|x| tick(*x))
                    .y_label_formatter(&|y| tick(*y))
                    .light_line_style(RGBColor(235, 235, 235))
                    .draw()
                    .map_err(|e| err(&e))?;
                // Bands first, under every line.
                for ((i, s, _), e) in lines.iter().zip(&extras) {
                    if s.error_bars {
                        let color = PALETTE[s.color.unwrap_or(*i) % PALETTE.len()];
                        let n = e.band.len() / 2;
                        let bars = (0..n).map(|j| {
                            let (upper, lower) = (e.band[j], e.band[e.band.len() - 1 - j]);
                            PathElement::new(vec![upper, lower], color.stroke_width(2))
                        });
                        chart.draw_series(bars).map_err(|e| err(&e))?;
                    } else if e.band.len() >= 3 {
                        let color = PALETTE[s.color.unwrap_or(*i) % PALETTE.len()];
                        chart
                            .draw_series(std::iter::once(Polygon::new(
                                e.band.clone(),
                                color.mix(0.18).filled(),
                            )))
                            .map_err(|e| err(&e))?;
                    }
                }
                for (i, s, points) in &lines {
                    let color = PALETTE[s.color.unwrap_or(*i) % PALETTE.len()];
                    let style = color.stroke_width(2);
                    if s.dashed {
                        chart
                            .draw_series(DashedLineSeries::new(points.iter().copied(), 6, 4, style))
                            .map_err(|e| err(&e))?
                    } else {
                        chart
                            .draw_series(LineSeries::new(points.iter().copied(), style))
                            .map_err(|e| err(&e))?
                    }
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
                }
                for ((i, s, _), e) in lines.iter().zip(&extras) {
                    let color = PALETTE[s.color.unwrap_or(*i) % PALETTE.len()];
                    chart
                        .draw_series(e.markers.iter().map(|&p| Circle::new(p, 4, color.filled())))
                        .map_err(|e| err(&e))?;
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(RGBColor(200, 200, 200))
                    .label_font(("sans-serif", 11))
                    .position(SeriesLabelPosition::LowerRight)
                    .draw()
                    .map_err(|e| err(&e))?;
            }};
        }
        match (self.log_x, self.log_y) {
            (false, false) => finish!(builder
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|e| err(&e))?),
            (true, false) => finish!(builder
                .build_cartesian_2d(
                    (x0..x1).log_scale().with_key_points(log_ticks(x0, x1)),
                    y0..y1
                )
                .map_err(|e| err(&e))?),
            (false, true) => finish!(builder
                .build_cartesian_2d(
                    x0..x1,
                    (y0..y1).log_scale().with_key_points(log_ticks(y0, y1))
                )
                .map_err(|e| err(&e))?),
            (true, true) => finish!(builder
                .build_cartesian_2d(
                    (x0..x1).log_scale().with_key_points(log_ticks(x0, x1)),
                    (y0..y1).log_scale().with_key_points(log_ticks(y0, y1))
                )
                .map_err(|e| err(&e))?),
        }
        Ok(())
    }
}

/// A tick label: whole numbers without decimals, others with up to three significant digits,
/// very small or large ones in scientific notation.
pub fn tick(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.0e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let digits = (2 - a.log10().floor() as i32).clamp(0, 4) as usize;
        let s = format!("{v:.digits$}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Tick values of a log axis over [lo, hi] (positive): 1, 2 and 5 times each power of ten
/// across up to three decades, powers of ten alone across more (every other power beyond
/// eight decades); at least the two ends when no such value falls inside.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return vec![];
    }
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let decades = last - first;
    let (mantissas, step): (&[f64], usize) = match decades {
        ..=3 => (&[1.0, 2.0, 5.0], 1),
        4..=8 => (&[1.0], 1),
        _ => (&[1.0], 2),
    };
    let ticks: Vec<f64> = (first..=last)
        .step_by(step)
        .flat_map(|e| mantissas.iter().map(move |m| m * 10f64.powi(e)))
        .filter(|v| (lo..=hi).contains(v))
        .collect();
    if ticks.len() >= 2 {
        ticks
    } else {
        vec![lo, hi]
    }
}

/// Largest magnitude drawn (and smallest, on a log axis): beyond it plotters' tick search
/// does not finish, so such points are dropped like non-finite ones.
const LIMIT: f64 = 1e100;

/// Whether `v` can be drawn on a linear (or log) axis.
fn drawable(v: f64, log: bool) -> bool {
    if log {
        (1.0 / LIMIT..=LIMIT).contains(&v)
    } else {
        v.is_finite() && v.abs() <= LIMIT
    }
}

/// The range of `values`, padded by 5% (linear) or a factor 1.2 (log). A range narrower than
/// a billionth of its magnitude (one value, or values equal to rounding) is widened around its
/// middle, so the axis always has room for ticks.
fn padded(values: impl Iterator<Item = f64>, log: bool, pad: bool) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if log {
        let (lo, hi) = if hi / lo < 1.0 + 1e-9 {
            (lo / 2.0, hi * 2.0)
        } else {
            (lo, hi)
        };
        return if pad { (lo / 1.2, hi * 1.2) } else { (lo, hi) };
    }
    let scale = lo.abs().max(hi.abs());
    let (lo, hi) = if hi - lo <= 1e-9 * scale || scale == 0.0 {
        let half = if scale == 0.0 { 0.5 } else { 0.5 * scale };
        let mid = 0.5 * (lo + hi);
        (mid - half, mid + half)
    } else {
        (lo, hi)
    };
    let margin = if pad { 0.05 * (hi - lo) } else { 0.0 };
    (lo - margin, hi + margin)
}

/// A standalone SVG of an empty panel titled `title`.
pub(crate) fn empty_chart(title: &str) -> String {
    register_font();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let _ = root.fill(&WHITE);
        let _ = empty_panel(&root, title);
        let _ = root.present();
    }
    svg
}

/// A framed panel saying there is nothing to draw.
fn empty_panel(root: &DrawingArea<SVGBackend<'_>, Shift>, title: &str) -> Result<(), String> {
    let (w, h) = SIZE;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    root.draw(&Rectangle::new(
        [(1, 1), (w as i32 - 2, h as i32 - 2)],
        RGBColor(200, 200, 200).stroke_width(1),
    ))
    .map_err(|e| err(&e))?;
    root.draw(&Text::new(title.to_owned(), (16, 24), ("sans-serif", 16)))
        .map_err(|e| err(&e))?;
    root.draw(&Text::new(
        "no data to draw".to_owned(),
        (w as i32 / 2 - 50, h as i32 / 2),
        ("sans-serif", 14)
            .into_font()
            .color(&RGBColor(120, 120, 120)),
    ))
    .map_err(|e| err(&e))?;
    Ok(())
}
