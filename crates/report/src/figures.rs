//! One function per figure: parsed run-file rows in, SVG out. Nothing is recomputed that a
//! run file already holds; the paper's figure each one mirrors is named in its doc.

use std::collections::BTreeMap;

use ropelab_analysis::measure::dynamics::{summarize_heads, Gamma, HeadStep};
use ropelab_analysis::measure::lengthgen::LengthRow;
use ropelab_analysis::measure::seeds::band;
use ropelab_theory::discrepancy::DiscrepancyRow;
use ropelab_theory::failures::FailureRow;

use crate::chart::{Chart, Series};

/// (x, y) points of one line.
type Curve = Vec<(f64, f64)>;

/// Test accuracy per hop count and overall, versus step: one (step, accuracy) curve per hop
/// count and the overall curve (the first line of each step carries the step's accuracies).
fn accuracy_curves(lines: &[HeadStep]) -> (BTreeMap<usize, Curve>, Curve) {
    let mut by_step: BTreeMap<usize, &HeadStep> = BTreeMap::new();
    for l in lines {
        by_step.entry(l.step).or_insert(l);
    }
    let mut hops: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
    let mut overall = vec![];
    for (&step, l) in &by_step {
        overall.push((step as f64, l.accuracy));
        for (&h, &a) in &l.accuracy_per_hop {
            hops.entry(h).or_default().push((step as f64, a));
        }
    }
    (hops, overall)
}

/// Accuracy per hop count and overall versus input length: one (length, accuracy) curve per
/// hop count and the overall curve.
fn length_curves(rows: &[LengthRow]) -> (BTreeMap<usize, Curve>, Curve) {
    let mut hops: BTreeMap<usize, Curve> = BTreeMap::new();
    for r in rows {
        for (&h, &a) in &r.per_hop {
            hops.entry(h).or_default().push((r.length as f64, a));
        }
    }
    let overall = rows.iter().map(|r| (r.length as f64, r.accuracy)).collect();
    (hops, overall)
}

/// Legend name of hop count `h`.
fn hop_name(h: usize) -> String {
    format!("{h} hop{}", if h == 1 { "" } else { "s" })
}

/// Accuracy per hop count and overall versus training step, at every scored checkpoint
/// (the paper's Fig. 2, top): `title` names the run.
pub fn accuracy_by_hop(lines: &[HeadStep], title: &str) -> String {
    let (hops, overall) = accuracy_curves(lines);
    let mut series: Vec<Series> = hops
        .into_iter()
        .map(|(h, p)| Series::new(hop_name(h), p))
        .collect();
    series.push(Series::new("overall", overall).dashed());
    Chart {
        title: format!("{title}: test accuracy per hop count"),
        x_label: "training step".into(),
        y_label: "accuracy".into(),
        y_range: Some((0.0, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// One score of every head versus step (the paper's Fig. 2, bottom): `which` picks s_pos or
/// s_sym; one line per (layer, head), named `L{layer}H{head}`, with a dot at the step from
/// which a head that ends pure (at tolerance `gamma`) stays pure.
pub fn head_scores(lines: &[HeadStep], title: &str, which: Score, gamma: Gamma) -> String {
    let mut heads: BTreeMap<(usize, usize), Vec<(f64, f64)>> = BTreeMap::new();
    for l in lines {
        let v = match which {
            Score::Positional => l.s_pos,
            Score::Symbolic => l.s_sym,
        };
        heads
            .entry((l.layer, l.head))
            .or_default()
            .push((l.step as f64, v));
    }
    // A dot where each head that ends pure becomes pure for good.
    let pure_from: BTreeMap<(usize, usize), usize> = summarize_heads(lines, gamma)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|h| h.pure_from.map(|s| ((h.layer, h.head), s)))
        .collect();
    let series = heads
        .into_iter()
        .map(|((l, h), p)| {
            let dot = pure_from
                .get(&(l, h))
                .and_then(|&s| p.iter().find(|q| q.0 == s as f64).copied());
            Series::new(format!("L{l}H{h}"), p).with_markers(dot.into_iter().collect())
        })
        .collect();
    Chart {
        title: format!(
            "{title}: {} of every head (dot: pure from here, gamma {})",
            which.name(),
            gamma
        ),
        x_label: "training step".into(),
        y_label: which.name().into(),
        y_range: Some((0.0, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// One line per (layer, head), named `L{layer}H{head}`.
fn head_lines(heads: BTreeMap<(usize, usize), Vec<(f64, f64)>>) -> Vec<Series> {
    heads
        .into_iter()
        .map(|((l, h), p)| Series::new(format!("L{l}H{h}"), p))
        .collect()
}

/// Which swap score a figure shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Score {
    /// s_pos.
    Positional,
    /// s_sym.
    Symbolic,
}

impl Score {
    fn name(self) -> &'static str {
        match self {
            Score::Positional => "s_pos",
            Score::Symbolic => "s_sym",
        }
    }
}

/// Pure positional and pure symbolic head counts at each step at tolerance `gamma`: two
/// (step, count) curves.
fn purity_curves(lines: &[HeadStep], gamma: Gamma) -> [Vec<(f64, f64)>; 2] {
    let counts = ropelab_analysis::measure::dynamics::pure_counts(lines, gamma);
    let line = |f: fn(&(usize, usize, usize)) -> usize| {
        counts
            .iter()
            .map(|(&s, c)| (s as f64, f(c) as f64))
            .collect::<Vec<_>>()
    };
    [line(|c| c.1), line(|c| c.2)]
}

/// Number of (layer, head) pairs in `lines`.
fn head_count(lines: &[HeadStep]) -> usize {
    lines
        .iter()
        .map(|l| (l.layer, l.head))
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// Number of pure positional and pure symbolic heads at each step, at purity threshold
/// `gamma` (the paper's Fig. 7).
pub fn purity_counts(lines: &[HeadStep], title: &str, gamma: Gamma) -> String {
    let [positional, symbolic] = purity_curves(lines, gamma);
    Chart {
        title: format!("{title}: pure heads (gamma {gamma})"),
        x_label: "training step".into(),
        y_label: "heads".into(),
        y_range: Some((0.0, head_count(lines) as f64 + 0.5)),
        series: vec![
            Series::new("pure positional", positional),
            Series::new("pure symbolic", symbolic),
        ],
        ..Chart::default()
    }
    .to_svg()
}

/// A mean line over replicates with its band of one standard deviation, the band clipped to
/// `clip` (e.g. accuracies to [0, 1]); `name` gets the replicate count.
fn band_series(name: &str, curves: &[Vec<(f64, f64)>], clip: (f64, f64)) -> Series {
    let points = band(curves);
    Series::new(
        format!("{name} (mean +- sd, n={})", curves.len()),
        points.iter().map(|p| (p.x, p.mean)).collect(),
    )
    .with_band(
        points
            .iter()
            .map(|p| {
                let lo = (p.mean - p.sd).clamp(clip.0, clip.1);
                let hi = (p.mean + p.sd).clamp(clip.0, clip.1);
                (p.x, lo, hi)
            })
            .collect(),
    )
}

/// Curves of every replicate grouped by key: `per_run` maps one replicate to keyed curves.
fn grouped<K: Ord>(
    runs: usize,
    per_run: impl Iterator<Item = BTreeMap<K, Vec<(f64, f64)>>>,
) -> BTreeMap<K, Vec<Vec<(f64, f64)>>> {
    let mut out: BTreeMap<K, Vec<Vec<(f64, f64)>>> = BTreeMap::new();
    for curves in per_run {
        for (k, c) in curves {
            out.entry(k).or_default().push(c);
        }
    }
    // A key missing from some replicate has no band over all of them.
    out.retain(|_, c| c.len() == runs);
    out
}

/// Test accuracy per hop count and overall versus step over seeds: the mean with a band of one
/// standard deviation (clipped to [0, 1]) at the steps every seed scored; `runs` holds each
/// seed's `scores.jsonl` lines.
pub fn accuracy_over_seeds(runs: &[&[HeadStep]], title: &str) -> String {
    let curves: Vec<_> = runs.iter().map(|l| accuracy_curves(l)).collect();
    let hops = grouped(runs.len(), curves.iter().map(|c| c.0.clone()));
    let mut series: Vec<Series> = hops
        .into_iter()
        .map(|(h, c)| band_series(&hop_name(h), &c, (0.0, 1.0)))
        .collect();
    let overall: Vec<_> = curves.into_iter().map(|c| c.1).collect();
    series.push(band_series("overall", &overall, (0.0, 1.0)).dashed());
    Chart {
        title: format!("{title}: test accuracy over seeds"),
        x_label: "training step".into(),
        y_label: "accuracy".into(),
        y_range: Some((0.0, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// Pure positional and pure symbolic head counts versus step over seeds (mean +- sd).
pub fn purity_over_seeds(runs: &[&[HeadStep]], title: &str, gamma: Gamma) -> String {
    let curves: Vec<[Vec<(f64, f64)>; 2]> = runs.iter().map(|l| purity_curves(l, gamma)).collect();
    let heads = runs.iter().map(|l| head_count(l)).max().unwrap_or(0) as f64;
    let kind = |i: usize| curves.iter().map(|c| c[i].clone()).collect::<Vec<_>>();
    Chart {
        title: format!("{title}: pure heads over seeds (gamma {gamma})"),
        x_label: "training step".into(),
        y_label: "heads".into(),
        y_range: Some((0.0, heads + 0.5)),
        series: vec![
            band_series("pure positional", &kind(0), (0.0, heads)),
            band_series("pure symbolic", &kind(1), (0.0, heads)),
        ],
        ..Chart::default()
    }
    .to_svg()
}

/// Accuracy per hop count and overall versus input length over seeds (mean +- sd, clipped to
/// [0, 1]); `runs` holds each seed's `lengthgen.csv` rows.
pub fn length_over_seeds(runs: &[&[LengthRow]], title: &str) -> String {
    let curves: Vec<_> = runs.iter().map(|rows| length_curves(rows)).collect();
    let hops = grouped(runs.len(), curves.iter().map(|c| c.0.clone()));
    let mut series: Vec<Series> = hops
        .into_iter()
        .map(|(h, c)| band_series(&hop_name(h), &c, (0.0, 1.0)))
        .collect();
    let overall: Vec<Curve> = curves.into_iter().map(|c| c.1).collect();
    series.push(band_series("overall", &overall, (0.0, 1.0)).dashed());
    Chart {
        title: format!("{title}: accuracy versus input length over seeds"),
        x_label: "input length (tokens)".into(),
        y_label: "accuracy".into(),
        log_x: true,
        y_range: Some((0.0, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// Frequency use per layer at the last scored step (the paper's Fig. 4C / Fig. 8): a layer x
/// RoPE-plane map of each plane's share of the layer's |logit contribution| at the attended
/// key (each row normalised to sum 1), and each row's weighted mean plane in its name (low
/// plane ids are high frequencies). With several heads per layer, one row per head
/// (`L{layer}H{head}`).
pub fn frequency_use(lines: &[HeadStep], title: &str) -> String {
    let last = lines.iter().map(|l| l.step).max();
    let at_last: Vec<&HeadStep> = lines.iter().filter(|l| Some(l.step) == last).collect();
    let per_head = at_last.iter().any(|l| l.head > 0);
    let mut rows_by: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    for l in at_last {
        let key = (l.layer, if per_head { l.head } else { 0 });
        let row = rows_by
            .entry(key)
            .or_insert_with(|| vec![0.0; l.freq_use.len()]);
        if row.len() == l.freq_use.len() {
            for (r, f) in row.iter_mut().zip(&l.freq_use) {
                *r += f;
            }
        }
    }
    let mut names = vec![];
    let mut rows = vec![];
    for ((layer, head), row) in rows_by {
        let total: f64 = row.iter().sum();
        let row: Vec<f64> = row
            .iter()
            .map(|f| if total > 0.0 { f / total } else { 0.0 })
            .collect();
        let mean = ropelab_analysis::measure::dynamics::mean_plane(&row);
        names.push(if per_head {
            format!("L{layer}H{head} ({mean:.1})")
        } else {
            format!("L{layer} ({mean:.1})")
        });
        rows.push(row);
    }
    let what = if per_head { "head" } else { "layer" };
    crate::heatmap::Heatmap {
        title: format!("{title}: frequency use per {what} (mean plane)"),
        x_label: "RoPE plane (0 = highest frequency)".into(),
        y_label: what.into(),
        row_names: names,
        rows,
    }
    .to_svg()
}

/// Accuracy per hop count and overall versus input length (the paper's Fig. 5B), from
/// `lengthgen.csv`.
pub fn accuracy_vs_length(rows: &[LengthRow], title: &str) -> String {
    let (hops, overall) = length_curves(rows);
    let mut series: Vec<Series> = hops
        .into_iter()
        .map(|(h, p)| Series::new(hop_name(h), p))
        .collect();
    series.push(Series::new("overall", overall).dashed());
    Chart {
        title: format!("{title}: accuracy versus input length"),
        x_label: "input length (tokens)".into(),
        y_label: "accuracy".into(),
        log_x: true,
        y_range: Some((0.0, 1.02)),
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// Each trained head's discrepancy at the query (largest minus second-largest attention logit,
/// mean over the test inputs) versus input length, one line per (layer, head), from
/// `lengthgen.csv`: the trained counterpart of the hand-built heads' curves.
pub fn margins_vs_length(rows: &[LengthRow], title: &str) -> String {
    let mut heads: BTreeMap<(usize, usize), Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        for h in &r.heads {
            heads
                .entry((h.layer, h.head))
                .or_default()
                .push((r.length as f64, h.margin));
        }
    }
    Chart {
        title: format!("{title}: trained heads' discrepancy versus length"),
        x_label: "input length (tokens)".into(),
        y_label: "mean top-1 minus top-2 logit".into(),
        log_x: true,
        series: head_lines(heads),
        ..Chart::default()
    }
    .to_svg()
}

/// The RoPE score's measured mean (`Moment::Mean`) or standard deviation over positions
/// against the normal approximation's, versus context length: per base, measured solid and
/// approximation dashed.
pub fn moments(rows: &[FailureRow], moment: Moment) -> String {
    let mut measured: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut approx: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        let (m, a) = match moment {
            Moment::Mean => (r.mu_empirical, r.mu_approx),
            Moment::Sd => (r.sigma_empirical, r.sigma_approx),
        };
        let base = format!("base {}", r.base);
        measured
            .entry(base.clone())
            .or_default()
            .push((r.length as f64, m));
        approx.entry(base).or_default().push((r.length as f64, a));
    }
    let mut series = vec![];
    for (i, ((base, m), (_, a))) in measured.into_iter().zip(approx).enumerate() {
        series.push(Series::new(format!("{base} measured"), m).colored(i));
        series.push(
            Series::new(format!("{base} normal approx."), a)
                .dashed()
                .colored(i),
        );
    }
    let name = match moment {
        Moment::Mean => "mean",
        Moment::Sd => "standard deviation",
    };
    Chart {
        title: format!("RoPE scores: {name}, measured and approximated"),
        x_label: "context length M".into(),
        y_label: name.into(),
        log_x: true,
        series,
        ..Chart::default()
    }
    .to_svg()
}

/// A moment of the RoPE scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// The mean.
    Mean,
    /// The standard deviation.
    Sd,
}

/// The exact worst-case discrepancy of a hand-built head versus n, with the theorem's bound,
/// on log-log axes (the paper's Fig. 5A).
pub fn discrepancy(rows: &[DiscrepancyRow], title: &str) -> String {
    Chart {
        title: format!("{title}: discrepancy versus n"),
        x_label: "query position n".into(),
        y_label: "discrepancy (worst input)".into(),
        log_x: true,
        log_y: true,
        series: vec![
            Series::new(
                "measured",
                rows.iter().map(|r| (r.n as f64, r.delta)).collect(),
            ),
            Series::new(
                "bound",
                rows.iter().map(|r| (r.n as f64, r.bound)).collect(),
            )
            .dashed(),
        ],
        ..Chart::default()
    }
    .to_svg()
}

/// One failure rate of the RoPE failure table versus context length, one line per base.
pub fn failure_rates(rows: &[FailureRow], rate: Rate) -> String {
    let mut bases: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        let v = rate.pick([
            r.position_inversion,
            r.position_aliasing,
            r.token_inversion,
            r.token_aliasing,
        ]);
        bases
            .entry(format!("base {}", r.base))
            .or_default()
            .push((r.length as f64, v));
    }
    Chart {
        title: format!("RoPE failures: {}", rate.name()),
        x_label: "context length M".into(),
        y_label: "rate".into(),
        log_x: true,
        series: bases.into_iter().map(|(b, p)| Series::new(b, p)).collect(),
        ..Chart::default()
    }
    .to_svg()
}

/// A failure event of the RoPE failure table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// Position inversion.
    PositionInversion,
    /// Position aliasing.
    PositionAliasing,
    /// Token inversion.
    TokenInversion,
    /// Token aliasing.
    TokenAliasing,
}

impl Rate {
    /// This event's rate among the four, given in the order position inversion, position
    /// aliasing, token inversion, token aliasing (the failure tables' column order).
    pub fn pick(self, rates: [f64; 4]) -> f64 {
        match self {
            Rate::PositionInversion => rates[0],
            Rate::PositionAliasing => rates[1],
            Rate::TokenInversion => rates[2],
            Rate::TokenAliasing => rates[3],
        }
    }

    /// Every event.
    pub const ALL: [Rate; 4] = [
        Rate::PositionInversion,
        Rate::PositionAliasing,
        Rate::TokenInversion,
        Rate::TokenAliasing,
    ];

    /// The event's name.
    pub fn name(self) -> &'static str {
        match self {
            Rate::PositionInversion => "position inversion",
            Rate::PositionAliasing => "position aliasing",
            Rate::TokenInversion => "token inversion",
            Rate::TokenAliasing => "token aliasing",
        }
    }
}

/// The hop map of a number-task model (`hops.csv`, docs/multihead.md): one layer-and-head x j
/// map of the attention mass on hop_j per source (the last token, every position), each row
/// named with the largest accuracy drop a knock-out of one of its edges caused.
pub fn hop_map(
    rows: &[ropelab_analysis::measure::hops::HopRow],
    source: ropelab_analysis::measure::hops::Source,
) -> String {
    use ropelab_analysis::measure::hops::{Source, MAX_HOP};
    let mut heads: BTreeMap<(usize, usize), (Vec<f64>, f64)> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.source == source && (1..=MAX_HOP).contains(&r.j))
    {
        let e = heads
            .entry((r.layer, r.head))
            .or_insert_with(|| (vec![f64::NAN; MAX_HOP], 0.0));
        e.0[r.j - 1] = r.mass;
        e.1 = e.1.max(r.accuracy - r.knockout_accuracy);
    }
    let what = match source {
        Source::Last => "from the last token",
        Source::Every => "from every position",
    };
    let (row_names, cells) = heads
        .into_iter()
        .map(|((l, h), (masses, drop))| (format!("L{l}H{h} (-{drop:.2})"), masses))
        .unzip();
    crate::heatmap::Heatmap {
        title: format!("hop map {what}: attention mass on hop j (row: largest knock-out drop)"),
        x_label: "j (hops along the position's own chain, 1 at the left)".into(),
        y_label: "layer, head".into(),
        row_names,
        rows: cells,
    }
    .to_svg()
}

/// The ablations of a model (`ablation.csv`, docs/ablation.md): one row per head group knocked
/// out `how` (the intact model at the bottom), one column per hop count, the test accuracy.
pub fn ablation_map(
    rows: &[ropelab_analysis::measure::ablation::AblationRow],
    how: ropelab_analysis::measure::ablation::Knockout,
) -> String {
    use ropelab_analysis::measure::ablation::Knockout;
    let hops = ropelab_analysis::measure::ablation::hop_counts(rows);
    let mut groups: Vec<&str> = vec![];
    for r in rows
        .iter()
        .filter(|r| r.ablation == how || r.ablation == Knockout::None)
    {
        if !groups.contains(&r.group.as_str()) {
            groups.push(&r.group);
        }
    }
    let (row_names, cells) = groups
        .into_iter()
        .map(|g| {
            let cells = hops
                .iter()
                .map(|h| {
                    rows.iter()
                        .find(|r| {
                            r.group == g
                                && (r.ablation == how || r.ablation == Knockout::None)
                                && &r.hop == h
                        })
                        .map_or(f64::NAN, |r| r.accuracy)
                })
                .collect::<Vec<f64>>();
            (
                if g == "none" {
                    "intact".to_string()
                } else {
                    g.to_string()
                },
                cells,
            )
        })
        .unzip();
    crate::heatmap::Heatmap {
        title: format!("test accuracy with a group {}-ablated", how.as_str()),
        x_label: format!("hop count (columns {}, left to right)", hops.join(", ")),
        y_label: "group knocked out".into(),
        row_names,
        rows: cells,
    }
    .to_svg()
}

/// The probes' held-out accuracy of the token at hop j (columns) per residual stream (rows),
/// from `from`.
pub fn probe_map(
    rows: &[ropelab_analysis::measure::probe::ProbeRow],
    from: ropelab_analysis::measure::hops::Source,
) -> String {
    use ropelab_analysis::measure::probe::{stream_name, Target};
    let js = distinct(rows.iter().map(|r| r.j));
    let streams = rows.iter().map(|r| r.stream).max().map_or(0, |s| s + 1);
    let (row_names, cells) = (0..streams)
        .map(|s| {
            let cells = js
                .iter()
                .map(|&j| {
                    rows.iter()
                        .find(|r| {
                            r.source == from
                                && r.stream == s
                                && r.j == j
                                && r.target == Target::Token
                        })
                        .map_or(f64::NAN, |r| r.accuracy)
                })
                .collect::<Vec<f64>>();
            (stream_name(s), cells)
        })
        .unzip();
    let from = match from {
        ropelab_analysis::measure::hops::Source::Last => "the last token",
        ropelab_analysis::measure::hops::Source::Every => "every position",
    };
    crate::heatmap::Heatmap {
        title: format!("probe accuracy: token at hop j, from {from}"),
        x_label: columns("hop j", &js),
        y_label: "residual stream".into(),
        row_names,
        rows: cells,
    }
    .to_svg()
}

/// The best test accuracy per hop count (columns) over the sets of k moving layers, one row
/// per k (the sets themselves are in `layer_sets.csv`; 42 rows of a 6-layer model would not
/// be legible).
pub fn layer_set_map(rows: &[ropelab_analysis::measure::layer_sets::LayerSetRow]) -> String {
    let hops = distinct(rows.iter().map(|r| r.hop));
    let sizes = distinct(rows.iter().map(|r| r.size));
    let (row_names, cells) = sizes
        .iter()
        .map(|&k| {
            let cells = hops
                .iter()
                .map(|&h| {
                    rows.iter()
                        .filter(|r| r.size == k && r.hop == h)
                        .map(|r| r.accuracy)
                        .fold(f64::NAN, f64::max)
                })
                .collect::<Vec<f64>>();
            (format!("{k} moving"), cells)
        })
        .unzip();
    crate::heatmap::Heatmap {
        title: "best test accuracy with only k layers moving information".into(),
        x_label: columns("hop count", &hops),
        y_label: "layers left moving".into(),
        row_names,
        rows: cells,
    }
    .to_svg()
}

/// The distinct values, ascending.
fn distinct(values: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut v: Vec<usize> = values.collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A heat map's x label: `what (columns 1, 2, 3, left to right)`.
fn columns(what: &str, values: &[usize]) -> String {
    let names: Vec<String> = values.iter().map(usize::to_string).collect();
    format!("{what} (columns {}, left to right)", names.join(", "))
}

/// Each model's test accuracy against its share of pure heads, one marker colour per task.
pub fn pure_heads(rows: &[ropelab_analysis::measure::pure_heads::ModelRow]) -> String {
    let series = ropelab_analysis::measure::pure_heads::tasks(rows)
        .into_iter()
        .enumerate()
        .map(|(i, task)| {
            let points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.task == task)
                .map(|r| (r.pure_share, r.accuracy))
                .collect();
            Series::new(format!("{task} ({} models)", points.len()), vec![])
                .with_markers(points)
                .colored(i)
        })
        .collect();
    Chart {
        title: "pure heads and successful learning, one marker per model".into(),
        x_label: "share of pure heads at the last checkpoint".into(),
        y_label: "test accuracy".into(),
        log_x: false,
        log_y: false,
        y_range: Some((0.0, 1.0)),
        series,
    }
    .to_svg()
}
