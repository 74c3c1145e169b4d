//! A study configured at another purity tolerance draws its figures at that tolerance: the
//! `[claims] gamma` of the study's config reaches every head type the report shows, not only
//! the verdicts.

use std::collections::BTreeMap;
use std::path::Path;

use ropelab_analysis::measure::dynamics::{Gamma, HeadKind, HeadStep};
use ropelab_report::compose::configured_gamma;
use ropelab_report::types::type_grid;

/// A number model whose only head ends at s_pos 0.93, s_sym 0.04: pure positional at gamma
/// 0.1, neither at 0.05.
fn scores() -> Vec<HeadStep> {
    [0, 100]
        .iter()
        .map(|&step| HeadStep {
            step,
            layer: 0,
            head: 0,
            s_pos: 0.93,
            s_sym: 0.04,
            entropy: 1.0,
            entropy_norm: 0.5,
            pure_0_1: HeadKind::Positional,
            pure_0_05: HeadKind::Mixed,
            freq_use: vec![1.0],
            freq_mean_plane: 0.0,
            accuracy: 1.0,
            accuracy_per_hop: BTreeMap::new(),
            block: None,
            planes: vec![],
            run: String::new(),
            settings: String::new(),
        })
        .collect()
}

fn study(root: &Path, gamma: &str) {
    std::fs::write(
        root.join("config.toml"),
        format!("name = \"g\"\nseeds = [0]\n\n[claims]\n{gamma}\n"),
    )
    .unwrap();
    let run = root.join("seed-0/number");
    std::fs::create_dir_all(&run).unwrap();
    let text: String = scores()
        .iter()
        .map(|l| serde_json::to_string(l).unwrap() + "\n")
        .collect();
    std::fs::write(run.join("scores.jsonl"), text).unwrap();
    // The ledgers a study writes (a study, or one of its models, without one is refused).
    ropelab_io::Ledger::finish(root, "config.toml", "study config").unwrap();
    ropelab_io::Ledger::finish(&run, "scores.jsonl", "scores").unwrap();
}

#[test]
fn a_study_at_gamma_0_05_draws_its_figures_at_0_05() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    study(root, "gamma = 0.05");
    let strict = Gamma::new(0.05).unwrap();
    assert_eq!(configured_gamma(root).unwrap(), strict);
    // The study's model, two folders down, takes the study's gamma.
    assert_eq!(
        configured_gamma(&root.join("seed-0/number")).unwrap(),
        strict
    );
    let title = "seed 0, number task";
    let at_005 = type_grid(&scores(), title, strict);
    let at_01 = type_grid(&scores(), title, Gamma::DEFAULT);
    assert_ne!(
        at_005, at_01,
        "the head's type differs between the tolerances"
    );
    let html = ropelab_report::report(root, "test").unwrap();
    assert!(html.contains(&at_005), "the type grid is drawn at 0.05");
    assert!(!html.contains(&at_01));
    assert!(html.contains("gamma 0.05"));
    assert!(!html.contains("dot: pure from here, gamma 0.1"));
    // `ropelab plot` of the model draws at the study's gamma too.
    let svg =
        ropelab_report::plot(ropelab_report::PlotKind::SPos, &root.join("seed-0/number")).unwrap();
    assert!(svg.contains("gamma 0.05"), "{svg}");

    // Without a gamma the default 0.1; an out-of-range one is an error naming the file.
    study(root, "");
    assert_eq!(configured_gamma(root).unwrap(), Gamma::DEFAULT);
    study(root, "gamma = 0.7");
    let err = configured_gamma(root).unwrap_err().to_string();
    assert!(
        err.contains("config.toml") && err.contains("gamma"),
        "{err}"
    );
}
