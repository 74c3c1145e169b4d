//! Every file in `configs/` is a valid study or sweep file: the configs the README and
//! docs/fidelity.md point to parse, and a sweep file expands to its jobs; every file in
//! `configs/runs/` is a valid run config (`ropelab train --config`).

use std::path::Path;

use ropelab_study::StudyConfig;
use ropelab_sweep::Sweep;

#[test]
fn every_shipped_config_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let origin = path.display().to_string();
        // A sweep file varies a run config along axes; anything else is a study.
        if text.contains("[[axis]]") {
            let sweep = Sweep::parse(&text, &origin).unwrap_or_else(|e| panic!("{e}"));
            assert!(!sweep.jobs().unwrap().is_empty(), "{origin}: no jobs");
        } else {
            let study = StudyConfig::parse(&text, &origin).unwrap_or_else(|e| panic!("{e:#}"));
            for s in study.studies() {
                assert!(!s.seeds.is_empty(), "{origin}");
            }
        }
        seen += 1;
    }
    assert!(seen >= 6, "only {seen} configs found in {}", dir.display());

    let runs = dir.join("runs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&runs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let config = ropelab_train::RunConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(config.optim.steps > 0, "{}", path.display());
        seen += 1;
    }
    assert!(
        seen >= 2,
        "only {seen} run configs found in {}",
        runs.display()
    );
}
