//! The formal-language experiment's figures and report section on hand-made rows: one line per
//! encoding with a vertex per tested length, the N* heat table's cell values and shading, and
//! the report of a directory holding `nstar.csv` and `accuracy.csv`.

use ropelab_analysis::measure::languages::{LengthRow, NStarRow};
use ropelab_analysis::measure::modular::ModHeadRow;
use ropelab_report::chart::PALETTE;
use ropelab_report::languages::{accuracy_vs_length, mod_head_table, n_star_table};

fn nstar(language: &str, pe: &str, base: Option<f64>, seed: u64, n_star: usize) -> NStarRow {
    NStarRow {
        language: language.into(),
        pe: pe.into(),
        base,
        seed,
        lr: 1e-3,
        train_accuracy: 1.0,
        accuracy: 0.5,
        n_star,
        max_len: 500,
    }
}

fn length(language: &str, pe: &str, seed: u64, n: usize, accuracy: f64) -> LengthRow {
    LengthRow {
        language: language.into(),
        pe: pe.into(),
        base: None,
        seed,
        lr: 1e-3,
        length: n,
        n: 32,
        accuracy,
        trained: n <= 40,
    }
}

fn hex(i: usize) -> String {
    let c = PALETTE[i];
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

#[test]
fn accuracy_curves_have_a_line_per_encoding_averaged_over_seeds() {
    let mut rows = vec![];
    for seed in [0, 1] {
        for (i, n) in [10, 40, 60, 100].into_iter().enumerate() {
            rows.push(length("sigma-a", "rope-periodic", seed, n, 1.0));
            // Seeds 0 and 1 disagree; the line shows their mean.
            let acc = if seed == 0 { 1.0 - 0.2 * i as f64 } else { 1.0 };
            rows.push(length("sigma-a", "nope", seed, n, acc));
        }
        rows.push(length("parity", "nope", seed, 10, 0.5));
    }
    let svg = accuracy_vs_length(&rows, "sigma-a");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    for (i, want) in [(0, 4), (1, 4)] {
        let lines: Vec<usize> = doc
            .descendants()
            .filter(|n| n.has_tag_name("polyline"))
            .filter(|n| {
                n.attribute("stroke")
                    .is_some_and(|s| s.eq_ignore_ascii_case(&hex(i)))
            })
            .map(|n| n.attribute("points").unwrap().split_whitespace().count())
            .collect();
        assert!(lines.contains(&want), "series {i}: {lines:?}");
    }
    assert!(svg.contains("rope-periodic") && svg.contains("nope"));
    assert!(!svg.contains("parity"));
}

#[test]
fn even_and_odd_lengths_get_their_own_lines_where_odd_lengths_have_no_members() {
    // A model that always answers "no" on (aa)*: right at odd lengths, wrong at even ones.
    let rows: Vec<LengthRow> = (30..=60)
        .map(|n| length("aa-star", "nope", 0, n, if n % 2 == 1 { 1.0 } else { 0.0 }))
        .collect();
    let svg = accuracy_vs_length(&rows, "aa-star");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    // Polylines of the first colour, as y pixels; the legend's 16-pixel samples left out.
    let lines: Vec<Vec<f64>> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| {
            let xs: Vec<f64> = n
                .attribute("points")
                .unwrap()
                .split_whitespace()
                .map(|p| p.split(',').next().unwrap().parse::<f64>().unwrap())
                .collect();
            !(xs.len() == 2 && (xs[1] - xs[0] - 16.0).abs() < 1e-9)
        })
        .filter(|n| {
            n.attribute("stroke")
                .is_some_and(|s| s.eq_ignore_ascii_case(&hex(0)))
        })
        .map(|n| {
            n.attribute("points")
                .unwrap()
                .split_whitespace()
                .map(|p| p.split(',').nth(1).unwrap().parse::<f64>().unwrap())
                .collect()
        })
        .collect();
    // Two flat lines in one colour: the 16 even lengths solid (one polyline), the 15 odd
    // lengths dashed (drawn as short segments) at another height.
    let flat = |ys: &[f64]| ys.iter().all(|&y| (y - ys[0]).abs() < 1e-9);
    let solid: Vec<&Vec<f64>> = lines.iter().filter(|l| l.len() == 16).collect();
    assert_eq!(solid.len(), 1, "{lines:?}");
    assert!(flat(solid[0]));
    let dashes: Vec<f64> = lines
        .iter()
        .filter(|l| l.len() < 16)
        .flat_map(|l| l.iter().copied())
        .collect();
    assert!(dashes.len() > 4 && flat(&dashes), "{dashes:?}");
    assert!(
        (dashes[0] - solid[0][0]).abs() > 50.0,
        "0 and 1 are far apart"
    );
    assert!(svg.contains("nope, even lengths") && svg.contains("nope, odd lengths"));
    // Languages with members at odd lengths keep one line per encoding.
    let rows: Vec<LengthRow> = (30..=60)
        .map(|n| length("sigma-ab-sigma", "nope", 0, n, 1.0))
        .collect();
    assert!(!accuracy_vs_length(&rows, "sigma-ab-sigma").contains("even lengths"));
}

#[test]
fn the_mod_head_table_shows_each_cells_strongest_head() {
    let head = |pe: &str, seed: u64, layer: usize, train: f64, test: f64| ModHeadRow {
        language: "aa-star".into(),
        pe: pe.into(),
        base: None,
        seed,
        lr: 1e-3,
        layer,
        head: 2,
        period: 2,
        residue: 1,
        contrast_train: train,
        contrast_test: test,
        bos_weight: 0.4,
    };
    let rows = vec![
        head("rope-periodic", 0, 0, 0.98, 0.84),
        head("rope-periodic", 0, 1, 0.99, 0.10),
        head("rope-periodic", 1, 0, 0.90, 0.70),
        head("nope", 0, 0, 0.05, -0.01),
    ];
    let svg = mod_head_table(&rows);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let titles: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .map(|n| n.text().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(titles.len(), 2, "{titles:?}");
    // Strength is the weaker contrast: seed 0's layer 0 (0.84) beats layer 1 (0.10); mean
    // over the two seeds (0.84 + 0.70) / 2.
    assert!(titles.iter().any(|t| t.contains("rope-periodic")
        && t.contains("L0H2 MOD_2^1")
        && t.contains("mean 0.770")
        && t.contains("2 of 2 run(s)")));
    assert!(titles
        .iter()
        .any(|t| t.contains("nope") && t.contains("0 of 1 run(s)")));
}

#[test]
fn the_heat_table_shows_the_mean_n_star_per_cell() {
    let rows = vec![
        nstar("aa-star", "rope-periodic", None, 0, 500),
        nstar("aa-star", "rope-periodic", None, 1, 500),
        nstar("aa-star", "rope", Some(1e4), 0, 40),
        nstar("aa-star", "rope", Some(1e4), 1, 61),
        nstar("parity", "nope", None, 0, 0),
    ];
    let svg = n_star_table(&rows);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let titles: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .map(|n| n.text().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(titles.len(), 3, "{titles:?}");
    assert!(titles
        .iter()
        .any(|t| t.contains("rope-periodic") && t.contains("mean 500.0")));
    assert!(titles
        .iter()
        .any(|t| t.contains("rope 1e4") && t.contains("mean 50.5, max 61")));
    let cells: Vec<(String, String)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.children().any(|c| c.has_tag_name("title")))
        .map(|n| {
            let title = n.children().find(|c| c.has_tag_name("title")).unwrap();
            (
                title.text().unwrap().to_owned(),
                n.attribute("fill").unwrap().to_owned(),
            )
        })
        .collect();
    let fill = |needle: &str| {
        cells
            .iter()
            .find(|c| c.0.contains(needle))
            .unwrap()
            .1
            .clone()
    };
    // The longest tested length is the darkest, 0 is white.
    assert_eq!(fill("parity"), "rgb(255,255,255)");
    assert_eq!(fill("rope-periodic"), "rgb(8,48,107)");
}

#[test]
fn a_languages_directory_gets_its_own_report() {
    let dir = tempfile::tempdir().unwrap();
    let rows = vec![nstar("ab-star", "nope", None, 0, 12)];
    ropelab_io::write_csv(&dir.path().join("nstar.csv"), &rows).unwrap();
    let lengths = vec![
        length("ab-star", "nope", 0, 12, 1.0),
        length("ab-star", "nope", 0, 41, 0.4),
    ];
    ropelab_io::write_csv(&dir.path().join("accuracy.csv"), &lengths).unwrap();
    ledgered(dir.path(), &["nstar.csv", "accuracy.csv"]);
    let html = ropelab_report::report(dir.path(), "ropelab languages").unwrap();
    assert!(html.contains("Formal languages: N* per position encoding"));
    assert!(html.contains("ab-star: accuracy versus string length"));
    assert!(html.contains("<td>12</td>"));
    assert!(!html.contains("config.toml is missing"));
    assert!(html.contains("heads.csv is missing"));
    // With the heads and the conventional-RoPE offsets: the MOD-head table and the offset
    // table, one line per run with a column per scale.
    let heads = vec![ModHeadRow {
        language: "ab-star".into(),
        pe: "nope".into(),
        base: None,
        seed: 0,
        lr: 1e-3,
        layer: 3,
        head: 5,
        period: 2,
        residue: 0,
        contrast_train: 0.25,
        contrast_test: 0.125,
        bos_weight: 0.5,
    }];
    ropelab_io::write_csv(&dir.path().join("heads.csv"), &heads).unwrap();
    let run = nstar("ab-star", "rope", Some(1.0), 0, 500);
    let offsets =
        ropelab_analysis::measure::languages::offset_rows(&run, 1.0, 8, 1, &[1.0, 10.0], 1000)
            .unwrap();
    ropelab_io::write_csv(&dir.path().join("offset.csv"), &offsets).unwrap();
    ledgered(dir.path(), &["heads.csv", "offset.csv"]);
    let html = ropelab_report::report(dir.path(), "ropelab languages").unwrap();
    assert!(html.contains("MOD heads: the strongest head"));
    assert!(html.contains("<td>L3H5</td>") && html.contains("<td>0.125</td>"));
    assert!(html.contains("range at 10 C_min"));
    assert!(html.contains("<td>500</td>"));
    // A broken file is an error naming it.
    std::fs::write(dir.path().join("heads.csv"), "language\nx").unwrap();
    let err = ropelab_report::report(dir.path(), "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("heads.csv"), "{err}");
    std::fs::write(dir.path().join("nstar.csv"), "language,pe\nx").unwrap();
    let err = ropelab_report::report(dir.path(), "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("nstar.csv"), "{err}");
}

/// Records `files` of `dir` in its ledger, as the experiment command does when it writes them
/// (a directory of experiment tables without its ledger is refused).
fn ledgered(dir: &std::path::Path, files: &[&str]) {
    for file in files {
        ropelab_io::Ledger::finish(dir, file, "experiment table").unwrap();
    }
}
