//! Figures of a real pretrained model (SmolLM2-135M in the study, or any `--model`), from the
//! files of the `ropelab pretrained` commands: the layer x head type map of `pretrained score`
//! (hover a cell for its scores), the prompt tasks' accuracy per window size with error bars
//! (`pretrained tasks`), and the RoPE failure events measured with the model's own q and k
//! (`pretrained rope-stats`).

use std::collections::BTreeMap;
use std::fmt::Write;

use ropelab_analysis::lens::pretrained::{LayerFailureRow, PromptHead};
use ropelab_analysis::lens::purity::{purity, Gamma, HeadKind};
use ropelab_analysis::lens::swap::SwapScores;
use ropelab_pretrained::tasks::SizeRow;

use crate::chart::{empty_chart, Chart, Series, SIZE};
use crate::figures::Rate;
use crate::html::escape;

/// The fill of a head type: positional red, symbolic blue, neither grey (the viewer's colours).
fn fill(kind: HeadKind) -> &'static str {
    match kind {
        HeadKind::Positional => "#d62728",
        HeadKind::Symbolic => "#1f77b4",
        HeadKind::Mixed => "#cfcfcf",
    }
}

/// Every head of the model as a cell of a layer (rows, layer 0 at the top) x head (columns)
/// grid, coloured by its type at tolerance `gamma` (of its mean scores); each cell's tooltip
/// (SVG `<title>`, shown on hover) gives its s_pos, s_sym and entropy. `title` names the
/// prompts scored.
pub fn head_type_map(heads: &[PromptHead], title: &str, gamma: Gamma) -> String {
    let kind = |hd: &PromptHead| {
        purity(
            SwapScores {
                s_pos: hd.s_pos,
                s_sym: hd.s_sym,
            },
            gamma,
        )
    };
    let layers = heads.iter().map(|h| h.layer + 1).max().unwrap_or(0);
    let cols = heads.iter().map(|h| h.head + 1).max().unwrap_or(0);
    if heads.is_empty() {
        return empty_chart(title);
    }
    let (w, h) = (f64::from(SIZE.0), f64::from(SIZE.1) + 160.0);
    let (left, top, legend) = (56.0, 34.0, 40.0);
    let cell_w = (w - left - 12.0) / cols as f64;
    let cell_h = (h - top - legend) / layers as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" xmlns=\"http://www.w3.org/2000/svg\">\
         <rect width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"13\">{}</text>",
        w / 2.0,
        escape(title)
    );
    for hd in heads {
        let (x, y) = (
            left + hd.head as f64 * cell_w,
            top + hd.layer as f64 * cell_h,
        );
        let _ = write!(
            svg,
            "<rect class=\"head\" x=\"{x:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{:.2}\" \
             fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"1\"><title>L{}H{}: {}, s_pos {:.3}, \
             s_sym {:.3}, entropy {:.2}</title></rect>",
            cell_w,
            cell_h,
            fill(kind(hd)),
            hd.layer,
            hd.head,
            kind(hd),
            hd.s_pos,
            hd.s_sym,
            hd.entropy
        );
    }
    let label = |svg: &mut String, x: f64, y: f64, anchor: &str, text: &str| {
        let _ = write!(
            svg,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\" font-family=\"sans-serif\" \
             font-size=\"10\">{}</text>",
            escape(text)
        );
    };
    let every = layers.div_ceil(15).max(1);
    for l in (0..layers).step_by(every) {
        let y = top + (l as f64 + 0.5) * cell_h + 3.5;
        label(&mut svg, left - 6.0, y, "end", &format!("layer {l}"));
    }
    for c in 0..cols {
        let x = left + (c as f64 + 0.5) * cell_w;
        label(&mut svg, x, h - legend + 12.0, "middle", &format!("H{c}"));
    }
    let counts = |k| heads.iter().filter(|h| kind(h) == k).count();
    let mut x = left;
    for kind in [HeadKind::Positional, HeadKind::Symbolic, HeadKind::Mixed] {
        let _ = write!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
            h - 20.0,
            fill(kind)
        );
        let name = if kind == HeadKind::Mixed {
            "neither".to_owned()
        } else {
            kind.to_string()
        };
        label(
            &mut svg,
            x + 16.0,
            h - 10.0,
            "start",
            &format!("{name} ({})", counts(kind)),
        );
        x += 150.0;
    }
    svg.push_str("</svg>");
    svg
}

/// Accuracy of the prompt versions of the tasks versus target-window size: per task the mean
/// over runs with an error bar of one standard deviation (as `pretrained tasks` wrote it).
pub fn task_accuracy(rows: &[SizeRow]) -> String {
    let mut tasks: BTreeMap<String, Vec<&SizeRow>> = BTreeMap::new();
    for r in rows {
        tasks.entry(r.task.to_string()).or_default().push(r);
    }
    let series = tasks
        .into_iter()
        .map(|(task, rows)| {
            Series::new(
                format!("{task} task (mean +- sd over runs)"),
                rows.iter().map(|r| (r.size as f64, r.mean)).collect(),
            )
            .with_error_bars(
                // A single run has no spread to draw.
                rows.iter()
                    .filter_map(|r| r.sd.map(|sd| (r.size as f64, r.mean - sd, r.mean + sd)))
                    .collect(),
            )
        })
        .collect();
    Chart {
        title: "Pretrained model: prompt-task accuracy versus window size".into(),
        x_label: "target-window size".into(),
        y_label: "accuracy".into(),
        log_x: true,
        y_range: Some((-0.02, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// One RoPE failure event measured with the model's own pre-rotation q and k, versus context
/// length, one line per layer (as `pretrained rope-stats` wrote it).
pub fn model_failures(rows: &[LayerFailureRow], rate: Rate) -> String {
    let mut layers: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        let v = rate.pick([
            r.position_inversion,
            r.position_aliasing,
            r.token_inversion,
            r.token_aliasing,
        ]);
        layers
            .entry(r.layer)
            .or_default()
            .push((r.length as f64, v));
    }
    Chart {
        title: format!("The model's own q, k: {}", rate.name()),
        x_label: "context length M".into(),
        y_label: "rate".into(),
        log_x: true,
        series: layers
            .into_iter()
            .map(|(l, p)| Series::new(format!("layer {l}"), p))
            .collect(),
        ..Chart::default()
    }
    .to_svg()
}
