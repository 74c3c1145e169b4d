//! The figure functions on small hand-made rows: well-formed SVG, one line per series with one
//! vertex per data point inside the canvas, labelled empty panels for empty or NaN input.

use std::collections::BTreeMap;

use ropelab_analysis::measure::dynamics::{Gamma, HeadKind, HeadStep};
use ropelab_analysis::measure::lengthgen::LengthRow;
use ropelab_report::chart::{Chart, Series, PALETTE, SIZE};
use ropelab_report::figures;
use ropelab_theory::discrepancy::DiscrepancyRow;

/// The vertices of every `<polyline>` stroked with `color` (#RRGGBB).
fn lines_of(svg: &str, color: &str) -> Vec<Vec<(f64, f64)>> {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| {
            n.attribute("stroke")
                .is_some_and(|s| s.eq_ignore_ascii_case(color))
        })
        .map(points)
        .collect()
}

/// The vertices of a `<polyline>` or `<polygon>`.
fn points(n: roxmltree::Node) -> Vec<(f64, f64)> {
    n.attribute("points")
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

fn hex(i: usize) -> String {
    let c = PALETTE[i];
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

#[test]
fn each_series_is_one_line_with_a_vertex_per_point_inside_the_canvas() {
    let chart = Chart {
        title: "t".into(),
        series: vec![
            Series::new("a", vec![(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)]),
            Series::new("b", vec![(0.0, -5.0), (10.0, 40.0)]),
            Series::new("nan", vec![(f64::NAN, 1.0), (1.0, f64::INFINITY)]),
        ],
        ..Chart::default()
    };
    let svg = chart.to_svg();
    for (i, n) in [(0, 3), (1, 2)] {
        // The data line, and the legend's short line.
        let lines = lines_of(&svg, &hex(i));
        assert_eq!(lines.len(), 2, "series {i}: {lines:?}");
        let data = lines.iter().find(|l| l.len() == n).expect("the data line");
        for &(x, y) in data {
            assert!((0.0..=f64::from(SIZE.0)).contains(&x), "{x}");
            assert!((0.0..=f64::from(SIZE.1)).contains(&y), "{y}");
        }
    }
    // Nothing drawable: no line, no legend entry.
    assert!(lines_of(&svg, &hex(2)).is_empty());
    assert!(
        !svg.contains(">\nnan\n<"),
        "legend lists an undrawable series"
    );
}

#[test]
fn higher_values_are_drawn_higher_and_ranges_cover_the_data() {
    let svg = Chart {
        series: vec![Series::new(
            "a",
            vec![(1.0, 10.0), (2.0, 1000.0), (3.0, 100.0)],
        )],
        log_y: true,
        ..Chart::default()
    }
    .to_svg();
    let lines = lines_of(&svg, &hex(0));
    let data = lines.iter().find(|l| l.len() == 3).unwrap();
    // SVG y grows downwards: 1000 is the top vertex, 10 the bottom.
    assert!(data[1].1 < data[2].1 && data[2].1 < data[0].1, "{data:?}");
    assert!(data[0].0 < data[1].0 && data[1].0 < data[2].0);
}

#[test]
fn empty_or_unplottable_input_gives_a_labelled_empty_panel() {
    for chart in [
        Chart::default(),
        Chart {
            title: "log".into(),
            log_x: true,
            series: vec![Series::new("zero", vec![(0.0, 1.0), (-1.0, 2.0)])],
            ..Chart::default()
        },
    ] {
        let svg = chart.to_svg();
        roxmltree::Document::parse(&svg).unwrap();
        assert!(svg.contains("no data to draw"), "{svg}");
    }
    // Magnitudes beyond 1e100 are dropped (plotters' tick search never finished on a
    // -1e308..1e308 axis: found by the random-data proptest below).
    let huge = Chart {
        series: vec![Series::new("huge", vec![(-1e308, 0.0), (1e308, 1.0)])],
        ..Chart::default()
    };
    assert!(huge.to_svg().contains("no data to draw"));
    assert!(figures::accuracy_by_hop(&[], "run").contains("no data to draw"));
    assert!(figures::discrepancy(&[], "Index").contains("no data to draw"));
}

fn line(step: usize, layer: usize, s_pos: f64, s_sym: f64, acc: f64) -> HeadStep {
    HeadStep {
        step,
        layer,
        head: 0,
        s_pos,
        s_sym,
        entropy: 1.0,
        entropy_norm: 0.5,
        pure_0_1: HeadKind::Mixed,
        pure_0_05: HeadKind::Mixed,
        freq_use: vec![],
        freq_mean_plane: 0.0,
        accuracy: acc,
        accuracy_per_hop: BTreeMap::from([(1, acc), (2, acc / 2.0)]),
        block: None,
        planes: vec![],
        run: String::new(),
        settings: String::new(),
    }
}

#[test]
fn run_figures_draw_one_line_per_hop_and_per_head() {
    let lines: Vec<HeadStep> = (0..4)
        .flat_map(|s| {
            [
                line(s * 10, 0, 0.95, 0.02, 0.25 * s as f64),
                line(s * 10, 1, 0.1, 0.5 + 0.1 * s as f64, 0.25 * s as f64),
            ]
        })
        .collect();
    let acc = figures::accuracy_by_hop(&lines, "run");
    // Two hop counts (solid, 4 points each) and the overall line.
    for i in 0..2 {
        assert!(
            lines_of(&acc, &hex(i)).iter().any(|l| l.len() == 4),
            "hop {i}"
        );
    }
    let heads = figures::head_scores(
        &lines,
        "run",
        figures::Score::Positional,
        ropelab_analysis::measure::dynamics::Gamma::DEFAULT,
    );
    assert_eq!(
        lines_of(&heads, &hex(0))
            .iter()
            .filter(|l| l.len() == 4)
            .count(),
        1
    );
    assert_eq!(
        lines_of(&heads, &hex(1))
            .iter()
            .filter(|l| l.len() == 4)
            .count(),
        1
    );
    // Layer 0 is pure positional at every step: one pure positional head throughout.
    let purity = figures::purity_counts(&lines, "run", Gamma::DEFAULT);
    roxmltree::Document::parse(&purity).unwrap();
    let rows = vec![LengthRow {
        step: 30,
        extra: 0,
        length: 17,
        n: 8,
        accuracy: 1.0,
        loss: 0.1,
        per_hop: BTreeMap::from([(1, 1.0)]),
        heads: vec![],
        seconds: 0.0,
        run: String::new(),
    }];
    roxmltree::Document::parse(&figures::accuracy_vs_length(&rows, "run")).unwrap();
    // One head measured at two lengths: one line of two vertices.
    let mut two = rows.clone();
    two.push(LengthRow {
        length: 40,
        extra: 23,
        ..rows[0].clone()
    });
    for r in &mut two {
        r.heads = vec![ropelab_analysis::measure::lengthgen::HeadMargin {
            layer: 0,
            head: 0,
            margin: 1.0 / r.length as f64,
            top_weight: 0.5,
        }];
    }
    let margins = figures::margins_vs_length(&two, "run");
    assert!(lines_of(&margins, &hex(0)).iter().any(|l| l.len() == 2));
    let d = vec![
        DiscrepancyRow {
            n: 1,
            delta: 1.0,
            bound: 2.0,
            delta_max: 1.0,
            mechanism: None,
        },
        DiscrepancyRow {
            n: 10,
            delta: 0.01,
            bound: 0.02,
            delta_max: 0.01,
            mechanism: None,
        },
    ];
    let svg = figures::discrepancy(&d, "Index");
    assert!(lines_of(&svg, &hex(0)).iter().any(|l| l.len() == 2));
}

#[test]
fn tick_labels_are_short() {
    use ropelab_report::chart::tick;
    assert_eq!(tick(0.0), "0");
    assert_eq!(tick(500.0), "500");
    assert_eq!(tick(0.25), "0.25");
    assert_eq!(tick(0.1 + 0.2), "0.3");
    assert_eq!(tick(1.6e-7), "2e-7");
    assert_eq!(tick(2.0e6), "2e6");
}

#[test]
fn heatmap_cells_take_the_colour_of_their_value() {
    use ropelab_report::heatmap::{shade, Heatmap};
    let map = Heatmap {
        title: "map".into(),
        row_names: vec!["L0".into(), "L1".into()],
        rows: vec![vec![0.0, 0.5, 1.0], vec![0.25, f64::NAN, 0.0]],
        ..Heatmap::default()
    };
    let svg = map.to_svg();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let fills: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect"))
        .filter_map(|n| n.attribute("fill").map(str::to_uppercase))
        .collect();
    let hex = |c: plotters::style::RGBColor| format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
    // The largest value is the darkest cell, once; NaN is grey, once.
    assert_eq!(
        fills.iter().filter(|f| **f == hex(shade(1.0, 1.0))).count(),
        1
    );
    assert_eq!(
        fills
            .iter()
            .filter(|f| **f == hex(shade(f64::NAN, 1.0)))
            .count(),
        1
    );
    assert_eq!(
        fills.iter().filter(|f| **f == hex(shade(0.5, 1.0))).count(),
        1
    );
    assert!(Heatmap::default().to_svg().contains("no data to draw"));
}

mod random {
    use proptest::prelude::*;
    use ropelab_report::chart::{Chart, Series};
    use ropelab_report::heatmap::Heatmap;

    fn value() -> impl Strategy<Value = f64> {
        prop_oneof![
            4 => -1e3f64..1e3,
            1 => Just(0.0),
            1 => Just(f64::NAN),
            1 => Just(f64::INFINITY),
            1 => prop::num::f64::ANY,
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

        /// Any numbers, on any axes: a well-formed SVG, never a panic.
        #[test]
        fn any_data_gives_a_well_formed_svg(
            series in prop::collection::vec(prop::collection::vec((value(), value()), 0..12), 0..4),
            log_x in any::<bool>(),
            log_y in any::<bool>(),
            cells in prop::collection::vec(prop::collection::vec(value(), 3), 0..4),
        ) {
            let chart = Chart {
                title: "random".into(),
                log_x,
                log_y,
                series: series.into_iter().enumerate().map(|(i, p)| Series::new(format!("s{i}"), p)).collect(),
                ..Chart::default()
            };
            roxmltree::Document::parse(&chart.to_svg()).unwrap();
            let map = Heatmap { rows: cells, ..Heatmap::default() };
            roxmltree::Document::parse(&map.to_svg()).unwrap();
        }
    }
}

#[test]
fn moments_draw_measured_and_approximated_lines_per_base() {
    use ropelab_theory::failures::FailureRow;
    let row = |base: f64, length: usize| FailureRow {
        base,
        length,
        position_inversion: 0.1,
        position_aliasing: 0.0,
        position_alias_pairs: 0.0,
        token_inversion: 0.2,
        token_aliasing: 0.0,
        mu_approx: 1.0 / length as f64,
        mu_empirical: 1.1 / length as f64,
        sigma_approx: 0.5,
        sigma_empirical: 0.6,
    };
    let rows = vec![
        row(100.0, 256),
        row(100.0, 2048),
        row(1e4, 256),
        row(1e4, 2048),
    ];
    for moment in [figures::Moment::Mean, figures::Moment::Sd] {
        let svg = figures::moments(&rows, moment);
        // Per base one colour: measured solid (one 2-vertex line), approximated dashed (more
        // pieces), and the legend's two entries.
        for base in 0..2 {
            let lines = lines_of(&svg, &hex(base));
            assert!(lines.iter().any(|l| l.len() == 2), "base {base}");
            assert!(lines.len() > 4, "base {base}: {} pieces", lines.len());
        }
        assert!(lines_of(&svg, &hex(2)).is_empty());
    }
    for rate in figures::Rate::ALL {
        roxmltree::Document::parse(&figures::failure_rates(&rows, rate)).unwrap();
    }
}

/// Every `<polygon>` filled with `color` (#RRGGBB): its vertices.
fn polygons_of(svg: &str, color: &str) -> Vec<Vec<(f64, f64)>> {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("polygon"))
        .filter(|n| {
            n.attribute("fill")
                .is_some_and(|s| s.eq_ignore_ascii_case(color))
        })
        .map(points)
        .collect()
}

#[test]
fn a_band_surrounds_its_line_and_markers_are_dots() {
    let chart = Chart {
        title: "band".into(),
        series: vec![Series::new("m", vec![(0.0, 1.0), (1.0, 2.0), (2.0, 1.5)])
            .with_band(vec![(0.0, 0.5, 1.5), (1.0, 1.0, 3.0), (2.0, 1.5, 1.5)])
            .with_markers(vec![(1.0, 2.0)])],
        ..Chart::default()
    };
    let svg = chart.to_svg();
    let bands = polygons_of(&svg, &hex(0));
    assert_eq!(bands.len(), 1, "{svg}");
    // Upper edge then lower edge: six vertices; at every x the line lies between them.
    let band = &bands[0];
    assert_eq!(band.len(), 6);
    let line = lines_of(&svg, &hex(0))
        .into_iter()
        .find(|l| l.len() == 3)
        .unwrap();
    for (i, &(x, y)) in line.iter().enumerate() {
        let (upper, lower) = (band[i], band[5 - i]);
        assert!((upper.0 - x).abs() < 1.0 && (lower.0 - x).abs() < 1.0);
        // SVG y grows downwards.
        assert!(
            upper.1 <= y + 0.5 && y <= lower.1 + 0.5,
            "{upper:?} {y} {lower:?}"
        );
    }
    // The range covers the band (3.0 at x = 1 is above every line point).
    let top = band.iter().map(|p| p.1).fold(f64::MAX, f64::min);
    assert!(top >= 0.0);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let dots = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .count();
    assert_eq!(dots, 1);
}

#[test]
fn log_axes_get_ticks_in_every_decade() {
    use ropelab_report::chart::log_ticks;
    assert_eq!(log_ticks(17.0, 867.0), [20.0, 50.0, 100.0, 200.0, 500.0]);
    assert_eq!(log_ticks(1.0, 1e6), [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
    assert_eq!(log_ticks(1.0, 1e12).len(), 7);
    assert_eq!(log_ticks(3.0, 4.0), [3.0, 4.0]);
    assert!(log_ticks(0.0, 1.0).is_empty());
    assert!(log_ticks(5.0, 1.0).is_empty());
}

#[test]
fn seed_figures_draw_a_mean_line_and_a_band_per_series() {
    let run = |shift: f64| -> Vec<HeadStep> {
        (0..4)
            .map(|s| line(s * 100, 0, 0.5, 0.5, (0.2 * s as f64 + shift).min(1.0)))
            .collect()
    };
    let (a, b, c) = (run(0.0), run(0.1), run(0.2));
    let runs: Vec<&[HeadStep]> = vec![&a, &b, &c];
    let svg = figures::accuracy_over_seeds(&runs, "number task");
    // Hop 1 is the first series: one band in its colour.
    let bands = polygons_of(&svg, &hex(0));
    assert_eq!(bands.len(), 1);
    assert!(svg.contains("n=3"));
    let mean = lines_of(&svg, &hex(0))
        .into_iter()
        .find(|l| l.len() == 4)
        .expect("the mean line, one vertex per step");
    assert_eq!(mean.len(), 4);
    // One seed: no band drawn for a missing step; an empty input is an empty panel.
    let short: Vec<HeadStep> = a[..2].to_vec();
    let svg = figures::accuracy_over_seeds(&[&a, &short], "t");
    let mean = lines_of(&svg, &hex(0))
        .into_iter()
        .find(|l| l.len() > 2)
        .map(|l| l.len());
    assert_eq!(mean, None, "only the two common steps are drawn");
    assert!(figures::accuracy_over_seeds(&[], "t").contains("no data to draw"));
    let svg = figures::purity_over_seeds(&runs, "t", Gamma::DEFAULT);
    assert_eq!(polygons_of(&svg, &hex(0)).len(), 1);
    assert_eq!(polygons_of(&svg, &hex(1)).len(), 1);
}
