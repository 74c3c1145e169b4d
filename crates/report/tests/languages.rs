//! The formal-language experiment's figures and report section on hand-made rows: one line per
//! encoding with a vertex per tested length, the N* heat table's cell values and shading, and
//! the report of a directory holding `nstar.csv` and `accuracy.csv`.

use ropelab_analysis::languages::{LengthRow, NStarRow};
use ropelab_report::chart::PALETTE;
use ropelab_report::languages::{accuracy_vs_length, n_star_table};

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
            rows.push(length("ab-star", "rope-periodic", seed, n, 1.0));
            // Seeds 0 and 1 disagree; the line shows their mean.
            let acc = if seed == 0 { 1.0 - 0.2 * i as f64 } else { 1.0 };
            rows.push(length("ab-star", "nope", seed, n, acc));
        }
        rows.push(length("parity", "nope", seed, 10, 0.5));
    }
    let svg = accuracy_vs_length(&rows, "ab-star");
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
    let html = ropelab_report::report(dir.path(), "ropelab languages").unwrap();
    assert!(html.contains("Formal languages: N* per position encoding"));
    assert!(html.contains("ab-star: accuracy versus string length"));
    assert!(html.contains("<td>12</td>"));
    assert!(!html.contains("config.toml is missing"));
    // A broken file is an error naming it.
    std::fs::write(dir.path().join("nstar.csv"), "language,pe\nx").unwrap();
    let err = ropelab_report::report(dir.path(), "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("nstar.csv"), "{err}");
}
