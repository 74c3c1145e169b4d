//! The report of a study per head count (`n_heads = [2, 4]`, docs/multihead.md): the
//! comparison model by model (`heads.csv`), then for every head count its claims and every
//! model's head-type grid, at the last checkpoint and over training. Each count's own study
//! (`heads-H/report.html`) has every other figure.

use std::path::Path;

use ropelab_analysis::measure::multihead::HeadCountRow;
use ropelab_analysis::StudyDir;
use ropelab_io::read_csv;
use ropelab_tasks::TaskKind;

use crate::compose::{claims_section, read_text, unchanged_since_recorded};
use crate::html::Section;
use crate::types::{type_grid, types_over_training};
use crate::{ReportError, Result};

/// Every section of the report of the study per head count in `dir`.
pub fn sections(dir: &Path) -> Result<Vec<Section>> {
    let study = StudyDir::new(dir);
    let gamma = crate::compose::configured_gamma(dir)?;
    let mut compare = Section::new("heads", "Heads per layer: every model compared");
    compare.text(
        "Each head count ran as its own study, identical but for n_heads (d_head = d_model / \
         n_heads), in heads-H/ (its full report: heads-H/report.html). Head types at the last \
         checkpoint at the study's gamma (P pure positional, S pure symbolic, - neither; one letter per \
         head, layers separated by |, layer 0 first); the first tested length whose accuracy \
         falls below the study's length threshold.",
    );
    // The comparison is the one the study wrote (recorded in its ledger; an edited or cut
    // table is refused), and each head count's study is the one its folder names, with its
    // config as it ran (twenty-third pass, MH1, MHsw2, MHc1).
    for h in study.head_counts() {
        let sub = study.heads(h);
        crate::compose::required_ledger(sub.root(), "study")?;
        unchanged_since_recorded(sub.root(), "config.toml")?;
        let held = read_text(&sub.config())?
            .and_then(|t| t.parse::<toml::Table>().ok())
            .and_then(|t| {
                t.get("train")
                    .and_then(|m| m.get("n_heads"))
                    .and_then(toml::Value::as_integer)
            });
        if let Some(held) = held.filter(|&n| u64::try_from(n).ok() != Some(h as u64)) {
            return Err(ReportError::Input(format!(
                "{} holds the study of {held} heads per layer, not of the {h} its folder names: \
                 move the folders back",
                sub.root().display()
            )));
        }
    }
    let path = study.heads_csv();
    if path.exists() {
        unchanged_since_recorded(dir, "heads.csv")?;
    }
    match read_text(&path)? {
        Some(text) => {
            let rows: Vec<HeadCountRow> =
                read_csv(&text, &path.display().to_string()).map_err(ReportError::from_display)?;
            let cells: Vec<Vec<String>> = rows.iter().map(HeadCountRow::cells).collect();
            compare.table(&HeadCountRow::HEADER, &cells);
        }
        None => compare.not_run("heads.csv is missing (the studies have not all finished)"),
    }
    let mut out = vec![compare];
    for h in study.head_counts() {
        let sub = study.heads(h);
        out.push(claims_section(
            sub.root(),
            &format!("claims-heads-{h}"),
            &format!("{h} heads per layer: claims of the paper, as measured"),
        )?);
        let mut grids = Section::new(
            format!("types-heads-{h}"),
            format!("{h} heads per layer: head types per seed"),
        );
        let seeds = sub.seeds().map_err(|e| ReportError::io(sub.root(), e))?;
        let files = crate::compose::study_files(sub.root(), &seeds)?;
        let mut svgs = vec![];
        for seed in &files.seeds {
            for task in [TaskKind::Number, TaskKind::Letter] {
                let Some(run) = seed.run(task).filter(|r| !r.scores.is_empty()) else {
                    grids.not_run(&format!("seed {} {task}: scores.jsonl", seed.seed));
                    continue;
                };
                let title = format!("{h} heads, seed {}, {task}", seed.seed);
                svgs.push(type_grid(&run.scores, &title, gamma));
                svgs.push(types_over_training(&run.scores, &title, gamma));
            }
        }
        grids.figures(&svgs);
        out.push(grids);
    }
    Ok(out)
}
