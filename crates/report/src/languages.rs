//! Figures of the expressivity experiment (`ropelab languages`, docs/languages.md): accuracy
//! versus string length per language, one line per position encoding, and the N* heat table
//! (language x position encoding, mean N* over seeds and learning rates, shaded by N* / the
//! longest tested length).

use std::collections::BTreeMap;
use std::fmt::Write;

use ropelab_analysis::measure::languages::{LengthRow, NStarRow};
use ropelab_analysis::measure::modular::{strongest_per_run, ModHeadRow, MOD_THRESHOLD};
use ropelab_tasks::Language;

use crate::chart::{empty_chart, Chart, Series, SIZE};
use crate::heatmap::shade;
use crate::html::escape;

/// A position encoding's label: its kind and base (`rope 1e4`, `nope`).
fn label(pe: &str, base: Option<f64>) -> String {
    match base {
        Some(b) => format!("{pe} {b:e}"),
        None => pe.to_owned(),
    }
}

/// The encodings of `rows` in the order they first appear (the experiment's order).
fn encodings<'a>(keys: impl Iterator<Item = (&'a str, Option<f64>)>) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for (pe, base) in keys {
        let l = label(pe, base);
        if !out.contains(&l) {
            out.push(l);
        }
    }
    out
}

/// Accuracy versus string length on `language`, one line per position encoding (mean over
/// seeds and learning rates); lengths up to the training maximum are marked with dots. For
/// `(aa)*` and `(ab)*`, whose odd lengths have no members, even and odd lengths are drawn as
/// separate lines (solid and dashed, one colour per encoding): a model that always answers
/// "no" is right at every odd length and wrong at every even one, which one line would draw
/// as a zigzag.
pub fn accuracy_vs_length(rows: &[LengthRow], language: &str) -> String {
    let mine: Vec<&LengthRow> = rows.iter().filter(|r| r.language == language).collect();
    let order = encodings(mine.iter().map(|r| (r.pe.as_str(), r.base)));
    let mut sums: BTreeMap<(String, usize), (f64, usize, bool)> = BTreeMap::new();
    for r in &mine {
        let e = sums.entry((label(&r.pe, r.base), r.length)).or_default();
        *e = (e.0 + r.accuracy, e.1 + 1, r.trained);
    }
    let by_parity = language
        .parse::<Language>()
        .is_ok_and(|l| !l.has_members(1) && !l.has_members(3));
    let parts: &[(&str, Option<usize>)] = if by_parity {
        &[(", even lengths", Some(0)), (", odd lengths", Some(1))]
    } else {
        &[("", None)]
    };
    let mut series = vec![];
    for (i, pe) in order.iter().enumerate() {
        for &(suffix, parity) in parts {
            let points: Vec<(f64, f64, bool)> = sums
                .iter()
                .filter(|((p, n), _)| p == pe && parity.is_none_or(|q| n % 2 == q))
                .map(|((_, n), &(sum, count, trained))| (*n as f64, sum / count as f64, trained))
                .collect();
            if points.is_empty() {
                continue;
            }
            let line = Series::new(
                format!("{pe}{suffix}"),
                points.iter().map(|&(x, y, _)| (x, y)).collect(),
            )
            .with_markers(
                points
                    .iter()
                    .filter(|p| p.2)
                    .map(|&(x, y, _)| (x, y))
                    .collect(),
            )
            .colored(i);
            series.push(if parity == Some(1) {
                line.dashed()
            } else {
                line
            });
        }
    }
    Chart {
        title: format!("{language}: accuracy versus string length (dots: training lengths)"),
        x_label: "string length".into(),
        y_label: "accuracy".into(),
        y_range: Some((-0.02, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// The N* heat table: a cell per (language, position encoding) with the mean N* over its
/// runs, shaded from white (0) to dark blue (the longest tested length).
pub fn n_star_table(rows: &[NStarRow]) -> String {
    let title = "N*: the longest test length up to which every test length is 100% correct";
    let max_len = rows.iter().map(|r| r.max_len).max().unwrap_or(1).max(1) as f64;
    let keys = rows
        .iter()
        .map(|r| (r.language.as_str(), r.pe.as_str(), r.base));
    heat_table(title, keys, max_len, |language, pe| {
        let runs: Vec<&NStarRow> = rows
            .iter()
            .filter(|x| x.language == language && label(&x.pe, x.base) == pe)
            .collect();
        if runs.is_empty() {
            return None;
        }
        let mean = runs.iter().map(|x| x.n_star as f64).sum::<f64>() / runs.len() as f64;
        let best = runs.iter().map(|x| x.n_star).max().unwrap_or(0);
        Some(Cell {
            value: mean,
            text: format!("{mean:.0}"),
            tooltip: format!("N* mean {mean:.1}, max {best} over {} run(s)", runs.len()),
        })
    })
}

/// The MOD-head heat table: a cell per (language, position encoding) with the strongest
/// head's weaker contrast (training positions or beyond; mean over runs) and its predicate,
/// shaded from white (0 or less) to dark blue (1, the exact MOD head).
pub fn mod_head_table(rows: &[ModHeadRow]) -> String {
    let title =
        format!("MOD heads: the strongest head's contrast (MOD head: at least {MOD_THRESHOLD})");
    let best = strongest_per_run(rows);
    let keys = best
        .iter()
        .map(|r| (r.language.as_str(), r.pe.as_str(), r.base));
    heat_table(&title, keys, 1.0, |language, pe| {
        let runs: Vec<&ModHeadRow> = best
            .iter()
            .filter(|x| x.language == language && label(&x.pe, x.base) == pe)
            .collect();
        let first = runs.first()?;
        let mean = runs.iter().map(|x| x.strength()).sum::<f64>() / runs.len() as f64;
        let heads = runs.iter().filter(|x| x.is_mod_head()).count();
        Some(Cell {
            value: mean.max(0.0),
            text: format!("{mean:.2} ({}^{})", first.period, first.residue),
            tooltip: format!(
                "strongest head L{}H{} MOD_{}^{} (first run); weaker contrast mean {mean:.3}; \
                 {heads} of {} run(s) have a MOD head",
                first.layer,
                first.head,
                first.period,
                first.residue,
                runs.len()
            ),
        })
    })
}

/// One cell of a heat table: the shaded value, its text and its tooltip.
struct Cell {
    value: f64,
    text: String,
    tooltip: String,
}

/// A heat table of languages (rows) by position encodings (columns, in first-seen order);
/// `cell(language, encoding label)` gives a cell or leaves it blank; values shade from white
/// (0) to dark blue (`max`).
fn heat_table<'a>(
    title: &str,
    keys: impl Iterator<Item = (&'a str, &'a str, Option<f64>)> + Clone,
    max: f64,
    cell: impl Fn(&str, &str) -> Option<Cell>,
) -> String {
    let mut languages: Vec<&str> = vec![];
    for (l, _, _) in keys.clone() {
        if !languages.contains(&l) {
            languages.push(l);
        }
    }
    if languages.is_empty() {
        return empty_chart(title);
    }
    let pes = encodings(keys.map(|(_, pe, base)| (pe, base)));
    let (left, top, cell_w, cell_h) = (130.0, 40.0, 96.0, 34.0);
    let w = (left + cell_w * pes.len() as f64 + 16.0).max(f64::from(SIZE.0) / 2.0);
    let h = top + cell_h * (languages.len() as f64 + 1.0) + 16.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" xmlns=\"http://www.w3.org/2000/svg\" \
         font-family=\"sans-serif\"><rect width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"13\">{}</text>",
        w / 2.0,
        escape(title)
    );
    for (c, pe) in pes.iter().enumerate() {
        let x = left + (c as f64 + 0.5) * cell_w;
        let _ = write!(
            svg,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
            top + cell_h * 0.6,
            escape(pe)
        );
    }
    for (r, language) in languages.iter().enumerate() {
        let y = top + cell_h * (r as f64 + 1.0);
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">{}</text>",
            left - 8.0,
            y + cell_h * 0.6,
            escape(language)
        );
        for (c, pe) in pes.iter().enumerate() {
            let Some(Cell {
                value,
                text,
                tooltip,
            }) = cell(language, pe)
            else {
                continue;
            };
            let fill = shade(value, max);
            let ink = if value / max > 0.55 {
                "#ffffff"
            } else {
                "#222222"
            };
            let x = left + c as f64 * cell_w;
            let _ = write!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{cell_w}\" height=\"{cell_h}\" \
                 fill=\"rgb({},{},{})\" stroke=\"#ffffff\"><title>{}, {}: {}</title></rect>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12\" \
                 fill=\"{ink}\">{}</text>",
                fill.0,
                fill.1,
                fill.2,
                escape(language),
                escape(pe),
                escape(&tooltip),
                x + cell_w / 2.0,
                y + cell_h * 0.62,
                escape(&text),
            );
        }
    }
    svg.push_str("</svg>");
    svg
}
