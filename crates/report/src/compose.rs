//! The report of a directory: a study written by `reproduce` (seeds, claims, theory) or one run
//! written by `train` (and `score`, `lengthgen`). Every figure the directory's files allow is
//! drawn; a missing input is listed as "not run".

use std::collections::BTreeMap;
use std::path::Path;

use ropelab_analysis::claims::{Claim, RunFiles, SeedFiles, StudyFiles};
use ropelab_analysis::measure::ablation::{AblationRow, Knockout};
use ropelab_analysis::measure::canonical::{BandSummary, PerPositionRow};
use ropelab_analysis::measure::dynamics::Gamma;
use ropelab_analysis::measure::hop_route::{HopRoute, CARRY_MASS};
use ropelab_analysis::measure::hops::{HopRow, Source};
use ropelab_analysis::measure::languages::{offset_table_cells, LengthRow, NStarRow, OffsetRow};
use ropelab_analysis::measure::layer_sets::{LayerSetRoute, LayerSetRow, ANSWER_ACCURACY};
use ropelab_analysis::measure::modular::{strongest_per_run, ModHeadRow, MOD_THRESHOLD};
use ropelab_analysis::measure::offset::{MechanismLine, OffsetAccuracyRow, OffsetRunRow};
use ropelab_analysis::measure::partial::{HandReport, TwoAngles, TWO_ANGLE_RATIO};
use ropelab_analysis::measure::probe::{
    stream_name, ProbeRoute, ProbeRow, ProbeVerdict, READ_ACCURACY,
};
use ropelab_analysis::StudyDir;
use ropelab_io::read_csv;
use ropelab_sweep::collect::{ConfigSummary, LengthSummary};
use ropelab_theory::discrepancy::{DiscrepancyRow, Mechanism};
use ropelab_theory::failures::FailureRow;

use crate::figures::{self, Moment, Rate, Score};
use crate::html::{page, Section};
use crate::pretrained;
use crate::{ReportError, Result};
use ropelab_analysis::lens::pretrained::{LayerFailureRow, PromptHead};
use ropelab_pretrained::tasks::SizeRow;
use ropelab_tasks::{CanonicalKind, Language, TaskKind};

/// The HTML report of `dir` (a study or a single run); `command` is how it was produced,
/// shown verbatim.
pub fn report(dir: &Path, command: &str) -> Result<String> {
    if !dir.is_dir() {
        return Err(ReportError::Input(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let name = dir.display().to_string();
    let mut sections = vec![];
    let pretrained = pretrained_section(dir)?;
    let kind = DirKind::detect(dir, pretrained.is_some());
    // A run has its config.toml: a directory with nothing ropelab reads (an empty one, a
    // checkpoint) would give a page of "not run" sections under a run's title.
    if matches!(kind, DirKind::Run) && !dir.join("config.toml").is_file() {
        // `ropelab bias` writes its own page (seventh pass, t6).
        if dir.join("mechanism.csv").is_file() && dir.join("claims.csv").is_file() {
            return Err(ReportError::Input(format!(
                "{} is a `ropelab bias` directory: its report is {}, which the bias command \
                 writes itself",
                dir.display(),
                dir.join("report.html").display()
            )));
        }
        // A sweep not yet collected has its plan but no tables: named as such (twentieth
        // pass, U6).
        if dir.join("plan.json").is_file() {
            return Err(ReportError::Input(format!(
                "{} is a sweep whose jobs are not collected (plan.json, no collected/summary.csv): \
                 run `ropelab collect {}` first",
                dir.display(),
                dir.display()
            )));
        }
        // Tables it holds are named: a `pretrained` table with a damaged header is not
        // recognised, and the reader should learn which file was passed over (ninth pass, F4c).
        let mut tables: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".csv") || n.ends_with(".jsonl"))
                    .collect()
            })
            .unwrap_or_default();
        tables.sort();
        // `pretrained index-task` tables are ropelab's, but no figure draws them: said as such
        // (fifteenth pass, SG3).
        let is_index = |name: &String| {
            read_text(&dir.join(name))
                .ok()
                .flatten()
                .is_some_and(|t| t.starts_with(INDEX_HEADER))
        };
        let (index, mut tables): (Vec<String>, Vec<String>) =
            tables.into_iter().partition(is_index);
        if !index.is_empty() && tables.is_empty() {
            return Err(ReportError::Input(format!(
                "{}: {} {} `ropelab pretrained index-task` output, a table the report draws no \
                 figure of (read it as it is); nothing else here to report",
                dir.display(),
                index.join(", "),
                if index.len() == 1 { "is" } else { "are" }
            )));
        }
        let passed = if tables.is_empty() {
            String::new()
        } else {
            let more = tables.len().saturating_sub(5);
            tables.truncate(5);
            format!(
                "; its table(s) {}{} are none ropelab writes (a changed header, or another \
                 program's)",
                tables.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            )
        };
        return Err(ReportError::Input(format!(
            "{} is not a run, study, sweep or experiment directory (no config.toml, claims.json, \
             plan.json or experiment tables) and holds no `ropelab pretrained` output{passed}: \
             nothing to report",
            dir.display()
        )));
    }
    let mut about = Section::new("about", "How this was produced");
    about.text("Command:");
    about.pre(command);
    // A study's config is the one it ran while its ledger vouches for it (an edit after the
    // run would be shown as the config its results were measured with).
    match read_vouched(dir, "config.toml")? {
        Some(config) => {
            about.text("Config (config.toml):");
            about.pre(&config);
            if let Some(line) = extended_length(dir, &config) {
                about.text(&line);
            }
        }
        None if kind.has_no_config() => {}
        None => about.not_run("config.toml is missing"),
    }
    // Directories ropelab writes with a ledger are read only with it (twentieth pass, S1, S2).
    match kind {
        DirKind::Languages | DirKind::Offset | DirKind::Canonical | DirKind::Study { .. } => {
            required_ledger(dir, kind.describe())?
        }
        DirKind::Run if in_study(dir) => required_ledger(dir, "model a study measures")?,
        _ => {}
    }
    match kind {
        DirKind::Sweep => sections.push(sweep_section(dir)?),
        DirKind::Languages => sections.push(languages_section(dir)?),
        DirKind::Offset => sections.push(offset_section(dir)?),
        DirKind::Canonical => sections.push(canonical_section(dir, "canonical")?),
        DirKind::Pretrained => sections.extend(pretrained),
        DirKind::Heads => sections.extend(crate::heads::sections(dir)?),
        DirKind::Study { collected } => {
            let gamma = configured_gamma(dir)?;
            let study = StudyDir::new(dir);
            let present = study.seeds().map_err(|e| ReportError::io(dir, e))?;
            // Only the seeds the study's config lists are its own (the claims were judged on
            // them); a `seed-S/` a rerun with another --seeds left is named, not mixed in.
            let listed = configured_seeds(dir)?;
            let (seeds, left): (Vec<u64>, Vec<u64>) = present
                .into_iter()
                .partition(|s| listed.as_ref().is_none_or(|l| l.contains(s)));
            // A folder of an unlisted seed holding a listed seed's model is a renamed folder,
            // not another run's leftovers (seventeenth pass, SILENT-8).
            for &seed in &left {
                for task in [TaskKind::Number, TaskKind::Letter] {
                    let model = study.model(seed, task);
                    let held = read_text(&model.join("config.toml"))
                        .ok()
                        .flatten()
                        .and_then(|t| t.parse::<toml::Table>().ok())
                        .and_then(|t| t.get("seed").and_then(|s| s.as_integer()));
                    if let Some(held) = held.filter(|&h| u64::try_from(h) != Ok(seed)) {
                        return Err(ReportError::Input(format!(
                            "{} holds the {task} model of seed {held}, not of seed {seed} its \
                             folder names: move the folders back",
                            model.display(),
                        )));
                    }
                }
            }
            let missing: Vec<u64> = listed
                .iter()
                .flatten()
                .copied()
                .filter(|s| !seeds.contains(s))
                .collect();
            let files = study_files(dir, &seeds)?;
            sections.push(claims_section(
                dir,
                "claims",
                "Claims of the paper, as measured",
            )?);
            if !left.is_empty() {
                let mut s = Section::new("other-seeds", "Seeds this study does not list");
                s.text(&format!(
                    "{} hold models of seeds this study's config.toml does not list (seeds = \
                     {:?}), left by a run with another --seeds: not shown, and not in the claims",
                    left.iter()
                        .map(|s| format!("seed-{s}/"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    listed.clone().unwrap_or_default()
                ));
                sections.push(s);
            }
            if !missing.is_empty() {
                let mut s = Section::new("missing-seeds", "Seeds this study lists but lacks");
                s.not_run(&format!(
                    "{} listed by config.toml (seeds = {:?}) {} missing: the claims were \
                     measured on their models, which cannot be shown or checked here",
                    missing
                        .iter()
                        .map(|s| format!("seed-{s}/"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    listed.clone().unwrap_or_default(),
                    if missing.len() == 1 { "is" } else { "are" }
                ));
                sections.push(s);
            }
            sections.push(seeds_section(&files, gamma));
            if collected {
                sections.push(sweep_section(dir)?);
            }
            for seed in &files.seeds {
                sections.extend(seed_sections(seed, gamma));
            }
            sections.push(theory_section(dir)?);
            if is_offset(&study.offset()) {
                sections.push(offset_section(&study.offset())?);
            }
            for task in CanonicalKind::ALL {
                let sub = study.canonical(task);
                if is_canonical(&sub) {
                    let id = format!("canonical-{}", task.name());
                    sections.push(canonical_section(&sub, &id)?);
                }
            }
            sections.push(pretrained.unwrap_or_else(|| {
                let mut s = Section::new("pretrained", "The pretrained model");
                s.not_run(
                    "pretrained/ holds no `ropelab pretrained` output (the study's [pretrained] stage was skipped or could not fetch the model: see reproduce's output)",
                );
                s
            }));
        }
        DirKind::Run => {
            // A pretrained model's output is no part of a run: drawn in its report, it would
            // stand there as if measured with it (tenth pass, S1).
            if pretrained.is_some() {
                let origin = pretrained_files(dir)?
                    .model
                    .map_or_else(|| dir.display().to_string(), |(_, first)| first);
                return Err(ReportError::Input(format!(
                    "{origin} is `ropelab pretrained` output inside the run {}: a run's report \
                     draws the run alone (move the file out, and report its folder)",
                    dir.display()
                )));
            }
            let files = RunFiles::load(dir).map_err(ReportError::from_display)?;
            let gamma = configured_gamma(dir)?;
            sections.extend(run_sections("run", "this run", &files, gamma));
        }
    }
    sections.push(about);
    let kind = kind.describe();
    Ok(page(
        &format!("ropelab report: {name}"),
        &format!("Every figure of the {kind} in {name}, drawn from its files."),
        &sections,
    ))
}

/// The expressivity experiment of `ropelab languages`: the N* heat table, N* per run, and
/// accuracy versus length per language.
fn languages_section(dir: &Path) -> Result<Section> {
    let mut s = Section::new("languages", "Formal languages: N* per position encoding");
    let read = |name: &str| read_vouched(dir, name);
    let nstar: Vec<NStarRow> = match read("nstar.csv")? {
        Some(text) => read_csv(&text, &dir.join("nstar.csv").display().to_string())
            .map_err(ReportError::from_display)?,
        None => vec![],
    };
    s.text(
        "N* is the longest test length up to which every test length is classified 100% \
         correctly (the longest training length when the shortest test length is not); train \
         and test accuracy are means over the training lengths (fresh strings) and the lengths \
         beyond them (docs/languages.md).",
    );
    s.figures(&[crate::languages::n_star_table(&nstar)]);
    let cells: Vec<Vec<String>> = nstar.iter().map(NStarRow::cells).collect();
    s.table(&NStarRow::HEADER, &cells);
    match read("accuracy.csv")? {
        Some(text) => {
            let rows: Vec<LengthRow> =
                read_csv(&text, &dir.join("accuracy.csv").display().to_string())
                    .map_err(ReportError::from_display)?;
            let mut names: Vec<&str> = vec![];
            for r in &rows {
                if !names.contains(&r.language.as_str()) {
                    names.push(&r.language);
                }
            }
            let svgs: Vec<String> = names
                .iter()
                .map(|l| crate::languages::accuracy_vs_length(&rows, l))
                .collect();
            s.figures(&svgs);
        }
        None => s.not_run("accuracy.csv is missing"),
    }
    match read("heads.csv")? {
        Some(text) => {
            let rows: Vec<ModHeadRow> =
                read_csv(&text, &dir.join("heads.csv").display().to_string())
                    .map_err(ReportError::from_display)?;
            s.text(&format!(
                "MOD heads: a head's MOD_m^r contrast is its mean attention weight on BOS at \
                 query positions i = r (mod m) minus that at the other positions (1 for the \
                 hand-built periodic-RoPE head of the theory lab, 0 for a head blind to i mod \
                 m); the residue is chosen on the positions of training strings and kept for \
                 the positions beyond them, up to the longest tested string. A run has a MOD \
                 head when one head reaches {MOD_THRESHOLD} on both."
            ));
            s.figures(&[crate::languages::mod_head_table(&rows)]);
            let best = strongest_per_run(&rows);
            let cells: Vec<Vec<String>> = best.iter().map(ModHeadRow::cells).collect();
            s.table(&ModHeadRow::HEADER, &cells);
        }
        None => s.not_run("heads.csv is missing"),
    }
    if let Some(text) = read("offset.csv")? {
        let rows: Vec<OffsetRow> = read_csv(&text, &dir.join("offset.csv").display().to_string())
            .map_err(ReportError::from_display)?;
        if !rows.is_empty() {
            s.text(
                "Conventional RoPE: each run's N* beside the range over which a hand-built \
                 fixed-offset head (looking back k positions, score scale C) on the run's \
                 best plane (rate g) is certified to pick the right key in f32 \
                 (`ropelab theory offset-range`), at multiples of the smallest scale that \
                 separates neighbouring keys, C_min = 2 f_large / (1 - cos g).",
            );
            let (header, cells) = offset_table_cells(&rows);
            let header: Vec<&str> = header.iter().map(String::as_str).collect();
            s.table(&header, &cells);
        }
    }
    Ok(s)
}

/// A collected sweep (`ropelab collect`): accuracy per configuration over seeds, the summary
/// table and the per-job table.
fn sweep_section(dir: &Path) -> Result<Section> {
    let mut s = Section::new("sweep", "Sweep: every configuration over its seeds");
    let path = dir.join("collected/summary.csv");
    ropelab_sweep::collect::vouch_collected(&path).map_err(ReportError::Input)?;
    ropelab_sweep::collect::current(dir).map_err(ReportError::Input)?;
    let rows: Vec<ConfigSummary> = match read_text(&path)? {
        Some(t) => read_csv(&t, &path.display().to_string()).map_err(ReportError::from_display)?,
        None => vec![],
    };
    s.text(
        "The jobs of `ropelab sweep` (docs/sweeps.md), merged by `ropelab collect`: test accuracy \
         (validation accuracy where the task has no test evaluation) per configuration, the mean \
         over its seeds with an error bar of one standard deviation.",
    );
    // A partial collect is said to be partial here too (tenth pass, SILENT-3).
    let unfinished = dir
        .join("collected")
        .join(ropelab_sweep::collect::UNFINISHED);
    if let Some(text) = read_text(&unfinished)? {
        let missing = text.lines().filter(|l| !l.trim().is_empty()).count();
        if missing > 0 {
            s.text(&format!(
                "Partial: {missing} planned or started job(s) had no result when collected \
                 (listed in collected/{}); the tables and figures below leave them out.",
                ropelab_sweep::collect::UNFINISHED
            ));
        }
    }
    let mut figures = vec![crate::sweep::accuracy_by_config(&rows)];
    let path = dir.join("collected/lengths.csv");
    ropelab_sweep::collect::vouch_collected(&path).map_err(ReportError::Input)?;
    let lengths: Vec<LengthSummary> = match read_text(&path)? {
        Some(t) => read_csv(&t, &path.display().to_string()).map_err(ReportError::from_display)?,
        None => vec![],
    };
    if let Some(svg) = crate::sweep::accuracy_vs_length(&rows, &lengths) {
        s.text(&format!(
            "The second figure, accuracy against input length: each job's length test (docs/sweeps.md, \"What a job \
             measures\"), the mean over seeds with a band of one standard deviation; the first \
             {} configurations are drawn.",
            crate::sweep::MAX_LENGTH_LINES
        ));
        figures.push(svg);
    }
    s.figures(&figures);
    let with_star = rows.iter().any(|r| r.n_star_mean.is_some());
    let cells: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = vec![
                (i + 1).to_string(),
                r.config.clone(),
                r.n.to_string(),
                format!("{:.4}", r.accuracy_mean),
                r.accuracy_sd
                    .map_or("n/a (1 job)".into(), |sd| format!("{sd:.4}")),
                r.layer_types.clone(),
            ];
            if with_star {
                row.push(match (r.n_star_mean, r.n_star_sd) {
                    (Some(m), Some(sd)) => format!("{m:.1} +- {sd:.1}"),
                    (Some(m), None) => format!("{m:.1} (1 job)"),
                    _ => "-".into(),
                });
            }
            row
        })
        .collect();
    let mut header = vec![
        "#",
        "configuration",
        "n",
        "accuracy",
        "sd",
        "layer types per seed",
    ];
    if with_star {
        header.push("N* (mean +- sd)");
    }
    s.table(&header, &cells);
    Ok(s)
}

/// A `ropelab canonical` directory holds `summary.json` and `per_position.csv`.
fn is_canonical(dir: &Path) -> bool {
    dir.join("summary.json").exists() && dir.join("per_position.csv").exists()
}

/// Frequency-band training on a canonical task: accuracy and w_max per answer position per
/// band, the band sweep, and the summary per band.
fn canonical_section(dir: &Path, id: &str) -> Result<Section> {
    let task = read_vouched(dir, "summary.json")?
        .and_then(|t| serde_json::from_str::<Vec<BandSummary>>(&t).ok())
        .and_then(|b| b.first().map(|b| b.task.clone()))
        .unwrap_or_default();
    let mut s = Section::new(
        id,
        format!("Canonical task {task}: which frequency bands solve it"),
    );
    let positions: Vec<PerPositionRow> = match read_vouched(dir, "per_position.csv")? {
        Some(t) => read_csv(&t, &dir.join("per_position.csv").display().to_string())
            .map_err(ReportError::from_display)?,
        None => vec![],
    };
    let summary: Vec<BandSummary> = match read_vouched(dir, "summary.json")? {
        Some(t) => serde_json::from_str(&t).map_err(|e| {
            ReportError::Input(format!("{}: {e}", dir.join("summary.json").display()))
        })?,
        None => vec![],
    };
    s.text(
        "One attention-only RoPE head trained with only a band of its planes (the others zeroed \
         in q and k; docs/canonical.md): test accuracy and the largest attention weight the \
         query put on each position (w_max), per answer position, and accuracy against the \
         band's centre frequency.",
    );
    s.figures(&[
        crate::canonical::accuracy_by_position(&positions),
        crate::canonical::w_max_by_position(&positions),
        crate::canonical::sweep(&summary),
    ]);
    let cells: Vec<Vec<String>> = summary
        .iter()
        .map(|b| std::iter::once(b.task.clone()).chain(b.cells()).collect())
        .collect();
    let header: Vec<&str> = std::iter::once("task").chain(BandSummary::HEADER).collect();
    s.table(&header, &cells);
    two_angles_table(dir, &summary, &mut s)?;
    Ok(s)
}

/// Partial Induction: each band's content and recency margins and the angles carrying them,
/// beside the hand-built two-angle head (`hand_head.json`).
fn two_angles_table(dir: &Path, summary: &[BandSummary], s: &mut Section) -> Result<()> {
    let mut rows: Vec<(String, TwoAngles)> = summary
        .iter()
        .filter_map(|b| Some((format!("trained, {}", b.band), b.two_angles.clone()?)))
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    let hand: Option<HandReport> = match read_text(&dir.join("hand_head.json"))? {
        Some(t) => Some(serde_json::from_str(&t).map_err(|e| {
            ReportError::Input(format!("{}: {e}", dir.join("hand_head.json").display()))
        })?),
        None => None,
    };
    if let Some(h) = &hand {
        rows.push(("hand-built".into(), TwoAngles::of(&h.margins)));
    }
    s.text(&format!(
        "Which planes decide at the query (docs/canonical.md): per plane, the content margin (the \
         answer's content against another symbol's at the answer's position) and the recency \
         margin (an earlier item of the queried symbol moved to the answer's position against \
         where it is), summed over planes, with the margin-weighted mean angle of each. \
         \"Two kinds\": both margins positive and recency on planes at least {TWO_ANGLE_RATIO}x \
         faster than content."
    ));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(name, a)| std::iter::once(name.clone()).chain(a.cells()).collect())
        .collect();
    let header: Vec<&str> = std::iter::once("head").chain(TwoAngles::HEADER).collect();
    s.table(&header, &cells);
    if let Some(h) = hand {
        s.text(&format!(
            "The hand-built head (planes at {:.4} and {:.4} rad per position) on {} test samples: \
             accuracy {:.4}; its content plane alone {:.4}, its recency plane alone {:.4}; \
             s_pos {:.3}, s_sym {:.3}.",
            h.thetas.first().copied().unwrap_or(f64::NAN),
            h.thetas.get(1).copied().unwrap_or(f64::NAN),
            h.n,
            h.accuracy,
            h.content_only,
            h.recency_only,
            h.s_pos,
            h.s_sym
        ));
    }
    Ok(())
}

/// A `ropelab offset` directory holds `runs.csv` and `accuracy.csv`.
fn is_offset(dir: &Path) -> bool {
    dir.join("runs.csv").exists() && dir.join("accuracy.csv").exists()
}

/// The rows of an offset `accuracy.csv` (text `text`, named `origin`), each an accuracy in
/// [0, 1] over at least one sequence (a table edited by hand is not drawn as measured).
fn offset_accuracy(text: &str, origin: &str) -> Result<Vec<OffsetAccuracyRow>> {
    let rows: Vec<OffsetAccuracyRow> = read_csv(text, origin).map_err(ReportError::from_display)?;
    if let Some(r) = rows
        .iter()
        .find(|r| r.n == 0 || !(0.0..=1.0).contains(&r.accuracy))
    {
        return Err(ReportError::Input(format!(
            "{origin}: {} {} k = {} seed {} at length {}: accuracy {} over {} sequences is no \
             measured accuracy (it lies in [0, 1], over at least one)",
            r.pe, r.attention, r.k, r.seed, r.test_len, r.accuracy, r.n
        )));
    }
    Ok(rows)
}

/// The implicit-bias experiment of `ropelab offset` (or a study's `offset/`): accuracy versus
/// test length, the dilution law, pinning, and the mechanisms per run.
fn offset_section(dir: &Path) -> Result<Section> {
    let mut s = Section::new(
        "offset",
        "Fixed-offset retrieval: rotary, learned absolute, none",
    );
    let rows = |name: &str| read_vouched(dir, name);
    let origin = |name: &str| dir.join(name).display().to_string();
    let accuracy: Vec<OffsetAccuracyRow> = match rows("accuracy.csv")? {
        Some(t) => offset_accuracy(&t, &origin("accuracy.csv"))?,
        None => vec![],
    };
    let runs: Vec<OffsetRunRow> = match rows("runs.csv")? {
        Some(t) => read_csv(&t, &origin("runs.csv")).map_err(ReportError::from_display)?,
        None => vec![],
    };
    let lines: Vec<MechanismLine> = match rows("mechanism.csv")? {
        Some(t) => read_csv(&t, &origin("mechanism.csv")).map_err(ReportError::from_display)?,
        None => vec![],
    };
    s.text(
        "Single-head models trained on fixed-offset retrieval (the target at position i is the \
         token at i - k) at short lengths and tested at up to 8 x the training length \
         (docs/offset.md). Accuracy is read at the last position; the mechanisms come from the \
         first layer: the dilution law's predicted target weight from the carrier s(r) (the \
         last query's mean logit at offset r) against the measured one, the same law applied \
         to each sequence's own logits and averaged (per-sequence error), where the carrier \
         re-peaks (its highest local maximum away from k), and the key where the last query's \
         attention peaks.",
    );
    s.figures(&[
        crate::offset::accuracy_vs_length(&accuracy),
        crate::offset::dilution(&lines),
        crate::offset::pinning(&lines),
    ]);
    let cell = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    let cells: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.pe.clone(),
                r.attention.clone(),
                r.k.to_string(),
                r.seed.to_string(),
                format!("{:.1e}", r.equivariance),
                cell(r.dilution_error, 3),
                cell(r.per_sequence_error, 3),
                r.repeak_offset.map_or("-".into(), |k| k.to_string()),
                cell(r.repeak_margin, 2),
                r.mode_key.map_or("-".into(), |k| k.to_string()),
                cell(r.mode_fraction, 3),
                cell(r.carrier_rank, 2),
                cell(r.carrier_alignment, 3),
            ]
        })
        .collect();
    s.table(
        &[
            "pe",
            "attention",
            "k",
            "seed",
            "equivariance",
            "dilution error",
            "per-sequence error",
            "carrier re-peak r",
            "its margin s(k) - s(r)",
            "argmax mode (longest)",
            "its share",
            "carrier rank",
            "carrier alignment",
        ],
        &cells,
    );
    Ok(s)
}

/// What a directory holds, decided once from its files: the report's sections and its
/// one-line description follow from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DirKind {
    /// A sweep (`collected/summary.csv`, no study).
    Sweep,
    /// `ropelab languages` output (`nstar.csv`).
    Languages,
    /// `ropelab offset` output (`runs.csv` and `accuracy.csv`).
    Offset,
    /// `ropelab canonical` output (`summary.json` and `per_position.csv`).
    Canonical,
    /// `ropelab pretrained` files only (no study, no run config).
    Pretrained,
    /// A study (`claims.json` or `seed-S/`), maybe with `ropelab collect`'s tables.
    Study {
        /// `collected/summary.csv` is there.
        collected: bool,
    },
    /// A study per head count (`heads-H/` studies beside `config.toml`).
    Heads,
    /// One run directory.
    Run,
}

impl DirKind {
    /// The kind of `dir`, where `pretrained` says whether it (or its `pretrained/`) holds
    /// `ropelab pretrained` output.
    fn detect(dir: &Path, pretrained: bool) -> Self {
        let study = StudyDir::new(dir).is_study();
        let collected = dir.join("collected/summary.csv").exists();
        if collected && !study {
            DirKind::Sweep
        } else if dir.join("nstar.csv").exists() {
            DirKind::Languages
        } else if is_offset(dir) {
            DirKind::Offset
        } else if is_canonical(dir) {
            DirKind::Canonical
        } else if study {
            DirKind::Study { collected }
        } else if !StudyDir::new(dir).head_counts().is_empty() && dir.join("config.toml").exists() {
            DirKind::Heads
        } else if pretrained && !dir.join("config.toml").exists() {
            DirKind::Pretrained
        } else {
            DirKind::Run
        }
    }

    /// Kinds that have no `config.toml` of their own (not listed as missing).
    fn has_no_config(self) -> bool {
        !matches!(self, DirKind::Study { .. } | DirKind::Heads | DirKind::Run)
    }

    /// The words of the report's subtitle.
    fn describe(self) -> &'static str {
        match self {
            DirKind::Sweep => "sweep",
            DirKind::Languages => "formal-language experiment",
            DirKind::Offset => "fixed-offset experiment",
            DirKind::Canonical => "frequency-band experiment",
            DirKind::Study { .. } => "study",
            DirKind::Heads => "studies per head count",
            DirKind::Pretrained => "pretrained-model results",
            DirKind::Run => "run",
        }
    }
}

pub(crate) fn read_text(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ReportError::io(path, e)),
    }
}

/// The purity tolerance the figures of `dir` use: the `[claims] gamma` of the study config in
/// `dir` or in the study above it (a study's model is two folders down, a head-count study's
/// part one), so that a study run at gamma 0.05 draws what it judges; the default 0.1 where no
/// study config sets one. A study config whose gamma is out of range is an error naming it.
/// A line saying that the run in `dir` was extended by `train --resume --steps` past the
/// length its `config.toml` (text `config`) gives: the latest checkpoint records the new length
/// (config.toml keeps the one it started with, which keys what was measured of it).
fn extended_length(dir: &Path, config: &str) -> Option<String> {
    let started = toml::from_str::<toml::Value>(config)
        .ok()?
        .get("optim")?
        .get("steps")?
        .as_integer()?;
    let (latest, checkpoint) = std::fs::read_dir(dir.join("checkpoints"))
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let step: u64 = name.strip_prefix("step-")?.parse().ok()?;
            e.path()
                .join("state.json")
                .is_file()
                .then(|| (step, e.path()))
        })
        .max()?;
    let path = checkpoint.join("ropelab.json");
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
    let steps = recorded.get("optim")?.get("steps")?.as_i64()?;
    (steps > started).then(|| {
        format!(
            "Extended with train --resume --steps: trained towards {steps} steps (its latest \
             checkpoint, step-{latest}, records them); config.toml keeps the {started} it \
             started with."
        )
    })
}

/// The seeds a study's `config.toml` lists (None when it has none, or cannot be read: every
/// `seed-S/` is then shown).
fn configured_seeds(dir: &Path) -> Result<Option<Vec<u64>>> {
    Ok(StudyDir::new(dir).listed_seeds())
}

pub fn configured_gamma(dir: &Path) -> Result<Gamma> {
    for up in dir.ancestors().take(4) {
        let path = up.join("config.toml");
        let Some(text) = read_text(&path)? else {
            continue;
        };
        let Ok(value) = text.parse::<toml::Table>() else {
            continue;
        };
        let Some(claims) = value.get("claims").and_then(|c| c.as_table()) else {
            continue;
        };
        return match claims.get("gamma") {
            None => Ok(Gamma::DEFAULT),
            Some(g) => g
                .as_float()
                .ok_or_else(|| "must be a number".to_string())
                .and_then(|g| Gamma::new(g).map_err(|e| e.to_string()))
                .map_err(|e| {
                    ReportError::Input(format!("{}: [claims] gamma: {e}", path.display()))
                }),
        };
    }
    Ok(Gamma::DEFAULT)
}

/// The verdict per claim of the study in `dir` (`claims.json`) as a table.
pub(crate) fn claims_section(dir: &Path, id: &str, title: &str) -> Result<Section> {
    let mut s = Section::new(id, title);
    let path = StudyDir::new(dir).claims();
    let Some(text) = read_text(&path)? else {
        s.not_run("claims.json is missing (the study has not finished)");
        return Ok(s);
    };
    // The verdicts the study wrote, unchanged since (a study from before the ledger recorded
    // them is shown as it is).
    unchanged_since_recorded(dir, "claims.json")?;
    let claims: Vec<Claim> = serde_json::from_str(&text)
        .map_err(|e| ReportError::Input(format!("{}: {e}", path.display())))?;
    s.text(&format!(
        "{}. A claim holds when every measurement meets its threshold, does not hold when one \
         is a counterexample, and is undetermined when the evidence cannot decide (the reason \
         says what is missing); exact checks of hand-built constructions are counted apart.",
        ropelab_analysis::claims::counts_text(&claims)
    ));
    let rows: Vec<Vec<String>> = claims
        .iter()
        .map(|c| {
            let verdict = match &c.reason {
                Some(why) => format!("{} ({why})", c.verdict),
                None => c.verdict.to_string(),
            };
            vec![
                c.id.clone(),
                c.category.to_string(),
                verdict,
                {
                    let (lo, hi) = ropelab_analysis::claims::wilson(c.holding, c.n);
                    format!("{} of {} (95% {lo:.2}-{hi:.2})", c.holding, c.n)
                },
                c.paper.clone(),
                c.threshold.clone(),
                c.measured.join("; "),
            ]
        })
        .collect();
    s.table(
        &[
            "claim",
            "kind",
            "verdict",
            "holding",
            "the paper",
            "threshold",
            "measured",
        ],
        &rows,
    );
    Ok(s)
}

fn seed_sections(seed: &SeedFiles, gamma: Gamma) -> Vec<Section> {
    let mut out = vec![];
    for task in TaskKind::ALL {
        let id = format!("seed-{}-{task}", seed.seed);
        let title = format!("seed {}, {task} task", seed.seed);
        match seed.run(task) {
            Some(files) => out.extend(run_sections(&id, &title, files, gamma)),
            None => {
                let mut s = Section::new(id, title);
                s.not_run("the run directory is missing");
                out.push(s);
            }
        }
    }
    out
}

/// Each task over seeds: accuracy, pure-head counts and length generalisation as the mean with
/// a band of one standard deviation.
fn seeds_section(files: &StudyFiles, gamma: Gamma) -> Section {
    let mut s = Section::new("seeds", "Over seeds: mean and one standard deviation");
    if files.seeds.len() < 2 {
        s.not_run("one seed only (run `reproduce --seeds 0,1,2` for bands over seeds)");
        return s;
    }
    let mut svgs = vec![];
    for task in TaskKind::ALL {
        let runs: Vec<&RunFiles> = files.seeds.iter().filter_map(|s| s.run(task)).collect();
        let seeds = runs.len();
        let title = format!("{task} task, {seeds} seeds");
        let scores: Vec<&[_]> = runs
            .iter()
            .map(|r| r.scores.as_slice())
            .filter(|l| !l.is_empty())
            .collect();
        if scores.len() == seeds && seeds >= 2 {
            svgs.push(figures::accuracy_over_seeds(&scores, &title));
            svgs.push(figures::purity_over_seeds(&scores, &title, gamma));
        } else {
            s.not_run(&format!("{task} task: scores.jsonl of every seed"));
        }
        let lengths: Vec<&[_]> = runs
            .iter()
            .map(|r| r.lengths.as_slice())
            .filter(|l| !l.is_empty())
            .collect();
        if lengths.len() == seeds && seeds >= 2 {
            svgs.push(figures::length_over_seeds(&lengths, &title));
        } else {
            s.not_run(&format!("{task} task: lengthgen.csv of every seed"));
        }
    }
    s.figures(&svgs);
    s
}

/// `, older than the run's latest step L` when `step` is before `latest` (a run extended
/// after it was measured), else nothing (tenth pass, S5).
fn stale_note(step: usize, latest: usize) -> String {
    if step < latest {
        format!(", older than the run's latest step {latest} (an earlier checkpoint's measurement)")
    } else {
        String::new()
    }
}

/// The length test's title: the run and the checkpoint it was measured at, marked when a later
/// checkpoint exists (tenth pass, S5).
fn length_title(title: &str, files: &RunFiles) -> String {
    match files.lengths.iter().map(|r| r.step).max() {
        Some(step) => format!("{title} at step {step}{}", stale_note(step, files.steps)),
        None => title.to_owned(),
    }
}

/// Learning dynamics, purity, length generalisation, attention and (number models) the hop map
/// of one run.
fn run_sections(id: &str, title: &str, files: &RunFiles, gamma: Gamma) -> Vec<Section> {
    let mut dynamics = Section::new(
        format!("{id}-dynamics"),
        format!("{title}: learning dynamics"),
    );
    if let Some(test) = &files.test {
        let step = files.test_step.unwrap_or_default();
        dynamics.text(&format!(
            "Test accuracy at step {step}{}: {:.4} on {} samples.",
            stale_note(step, files.steps),
            test.accuracy,
            test.n
        ));
    }
    if files.scores.is_empty() {
        dynamics.not_run("scores.jsonl is missing (run `ropelab score`)");
    } else {
        // What the scores were measured with, as the file records it.
        let settings = &files.scores[0].settings;
        dynamics.text(&if settings.is_empty() {
            "Scores: the file does not record the settings they were measured with (written \
             by an older ropelab)."
                .to_owned()
        } else {
            format!(
                "Scores: {}.",
                settings.replace("swap scores of every checkpoint: ", "")
            )
        });
        dynamics.figures(&[
            figures::accuracy_by_hop(&files.scores, title),
            figures::purity_counts(&files.scores, title, gamma),
            figures::head_scores(&files.scores, title, Score::Positional, gamma),
            figures::head_scores(&files.scores, title, Score::Symbolic, gamma),
            figures::frequency_use(&files.scores, title),
            crate::types::type_grid(&files.scores, title, gamma),
            crate::types::types_over_training(&files.scores, title, gamma),
        ]);
    }
    let mut length = Section::new(
        format!("{id}-length"),
        format!("{title}: length generalisation"),
    );
    if files.lengths.is_empty() {
        length.not_run("lengthgen.csv is missing (run `ropelab lengthgen`)");
    } else {
        let title = length_title(title, files);
        length.text(&format!("Measured on {title}."));
        length.figures(&[
            figures::accuracy_vs_length(&files.lengths, &title),
            figures::margins_vs_length(&files.lengths, &title),
        ]);
    }
    let mut attention = Section::new(
        format!("{id}-attention"),
        format!("{title}: attention on a test input"),
    );
    if files.attention.is_empty() {
        attention.not_run("attention/*.json is missing (run `ropelab attention`)");
    }
    for (i, view) in files.attention.iter().enumerate() {
        // An older checkpoint's attention is marked as such (eleventh pass, at04).
        let note = stale_note(view.step, files.steps);
        if !note.is_empty() {
            attention.text(&format!("Attention at step {}{note}.", view.step));
        }
        attention.viewer(view, &format!("{id}-{i}"), gamma);
    }
    let mut out = vec![dynamics, length, attention];
    // Each table's checkpoint is named, and marked when a later one exists (thirteenth pass,
    // S5): a hop map of step 0 is not the trained model's.
    let at = |file: &str| match files.measured_at.get(file) {
        Some(&step) => format!("{title} at step {step}{}", stale_note(step, files.steps)),
        None => title.to_owned(),
    };
    out.extend(hops_section(id, &at("hops.csv"), &files.hops));
    out.extend(route_section(
        id,
        &at(ropelab_analysis::measure::probe::PROBES_FILE),
        &files.probes,
        &files.layer_sets,
    ));
    out.extend(ablation_section(
        id,
        &at(ropelab_analysis::measure::ablation::ABLATION_FILE),
        &files.ablation,
    ));
    out
}

/// Where each hop lives in a number-task run (`probes.csv`, `layer_sets.csv`, written by
/// `ropelab probe` or a study job), when present: the probes' and the layer sets' verdicts and
/// a map of each.
fn route_section(
    id: &str,
    title: &str,
    probes: &[ProbeRow],
    sets: &[LayerSetRow],
) -> Option<Section> {
    if probes.is_empty() && sets.is_empty() {
        return None;
    }
    let mut s = Section::new(
        format!("{id}-route"),
        format!("{title}: where each hop lives (probes and layer sets)"),
    );
    s.text(
        "From `probes.csv` and `layer_sets.csv` (docs/multihead.md, \"Where each hop lives\"): \
         linear probes of the residual stream after each layer read the token at hop j of \
         every position's own chain (held-out accuracy; one hop per layer reads hop j after \
         layer j - 1 at the earliest); the layer sets leave only some layers moving \
         information (the others' attention held on each query's own position) and measure \
         the accuracy per hop count (one hop per layer needs j moving layers for j hops).",
    );
    let mut words = vec![];
    if !probes.is_empty() {
        let max_hop = probes.iter().map(|r| r.j).max().unwrap_or(1);
        for from in Source::ALL {
            let route = ProbeRoute::of(probes, from, READ_ACCURACY);
            let v = match route.verdict(max_hop) {
                ProbeVerdict::Composes(b) => format!(
                    "composes: hop {} ({:?}) read {} at {:.3} against a control of {:.3}",
                    b.j,
                    b.target,
                    stream_name(b.stream),
                    b.accuracy,
                    b.control
                ),
                ProbeVerdict::OneHopPerLayer => "one hop per layer".into(),
                ProbeVerdict::Undetermined(why) => format!("undetermined: {why}"),
            };
            let from = match from {
                Source::Last => "the last token",
                Source::Every => "every position",
            };
            words.push(format!("Probes from {from}: {}; {v}.", route.text()));
        }
    }
    if !sets.is_empty() {
        words.push(format!(
            "Layer sets: {}.",
            LayerSetRoute::of(sets, ANSWER_ACCURACY).text()
        ));
    }
    for w in &words {
        s.text(w);
    }
    let mut svgs = vec![];
    if !probes.is_empty() {
        svgs.push(figures::probe_map(probes, Source::Every));
        svgs.push(figures::probe_map(probes, Source::Last));
    }
    if !sets.is_empty() {
        svgs.push(figures::layer_set_map(sets));
    }
    s.figures(&svgs);
    Some(s)
}

/// The head groups knocked out (`ablation.csv`, written by `ropelab ablate` or a study job),
/// when present: a table of every group's accuracy under mean and zero ablation, and the map of
/// the mean-ablated accuracy per hop count.
fn ablation_section(id: &str, title: &str, rows: &[AblationRow]) -> Option<Section> {
    if rows.is_empty() {
        return None;
    }
    let mut s = Section::new(
        format!("{id}-ablation"),
        format!("{title}: what the model needs (ablation)"),
    );
    s.text(
        "From `ablation.csv` (docs/ablation.md): the test accuracy with a group of heads \
         knocked out, by mean ablation (each head's output replaced by its mean over the \
         evaluated test samples) and by zero ablation; the groups are typed at the study's \
         gamma. The 95% interval is Wilson's over the samples.",
    );
    let table: Vec<Vec<String>> = ropelab_analysis::measure::ablation::group_lines(rows, &[])
        .into_iter()
        .map(|l| vec![l.label, l.heads, l.mean, l.zero, l.n.to_string()])
        .collect();
    s.table(
        &[
            "group",
            "heads (layer.head)",
            "mean-ablated (95%)",
            "zero-ablated",
            "n",
        ],
        &table,
    );
    s.figures(&[figures::ablation_map(rows, Knockout::Mean)]);
    Some(s)
}

/// The hop map of a number-task run (`hops.csv`, written by `ropelab hops` or a study job) and
/// its verdict, when present.
fn hops_section(id: &str, title: &str, rows: &[HopRow]) -> Option<Section> {
    if rows.is_empty() {
        return None;
    }
    let mut s = Section::new(
        format!("{id}-hops"),
        format!("{title}: hop map, which layer reads which hop"),
    );
    s.text(
        "From `hops.csv` (docs/multihead.md, \"Hop map\"): per layer and head, the mean \
         attention weight a query position puts on the position j backward offsets along its \
         own chain, from the last token and from every position whose chain reaches j hops; \
         each row's name carries the largest test-accuracy drop from knocking out one j's edges \
         in that head (weight zeroed, row renormalised).",
    );
    let route = HopRoute::of(rows, CARRY_MASS);
    s.text(&format!(
        "Hop map: {}. (A layer reads hop j when its heads together put >= {CARRY_MASS} of \
         every position's attention on its own hop_j; one hop per layer lets a layer read at \
         most 1 + the number of reading layers below it. Attention mass that no layer \
         concentrates is not seen: \"no composition detected\" is not \"no composition\".)",
        route.summary()
    ));
    s.figures(&[
        figures::hop_map(rows, Source::Last),
        figures::hop_map(rows, Source::Every),
    ]);
    Some(s)
}

/// The text of `dir/name` (None when it is missing), refused when `dir`'s ledger lists it and
/// it changed since it was recorded (an experiment's tables: seventh pass, t1, t3, t4).
fn read_vouched(dir: &Path, name: &str) -> Result<Option<String>> {
    if dir.join(name).exists() {
        unchanged_since_recorded(dir, name)?;
    }
    read_text(&dir.join(name))
}

/// Refuses `folder/file` when the folder's ledger lists it and it changed since it was
/// recorded (a file the ledger does not list, as in a study from before it did, is read as it
/// is).
pub(crate) fn unchanged_since_recorded(folder: &Path, file: &str) -> Result<()> {
    if let Some(ledger) = ropelab_io::Ledger::load(folder)
        .map_err(|e| ReportError::Input(format!("{}: {e}", folder.display())))?
    {
        ledger
            .vouch(folder, file, ropelab_io::Expect::Any)
            .map_err(|e| ReportError::Input(e.to_string()))?;
    }
    Ok(())
}

/// Refuses discrepancy rows of another head than `mechanism` (a file written under the other
/// head's name would be drawn with its title; eighth pass, PL01). Rows from before the
/// mechanism was recorded are read as the file's name says.
fn one_mechanism(rows: &[DiscrepancyRow], mechanism: Mechanism, origin: &str) -> Result<()> {
    // The worst input's margin is at most the best input's, by definition (twenty-seventh
    // pass); a margin above the theorem's bound is left to the claim, which reports it.
    if let Some(r) = rows.iter().find(|r| {
        let slack = 1e-12 * r.delta_max.abs().max(1.0);
        r.delta.is_nan() || r.delta_max.is_nan() || r.delta > r.delta_max + slack
    }) {
        return Err(ReportError::Input(format!(
            "{origin}: at n = {} the worst input's margin delta {} is above the best input's \
             delta_max {}: a damaged or edited file",
            r.n, r.delta, r.delta_max
        )));
    }
    match rows
        .iter()
        .find_map(|r| r.mechanism.filter(|m| *m != mechanism))
    {
        Some(other) => Err(ReportError::Input(format!(
            "{origin}: its rows are of the {other} head, not the {mechanism} head its name says"
        ))),
        None => Ok(()),
    }
}

fn theory_section(dir: &Path) -> Result<Section> {
    let mut s = Section::new("theory", "Theory: discrepancy and RoPE failures");
    let mut svgs = vec![];
    for (mechanism, file, head) in [
        ("Index head", "discrepancy-index.csv", Mechanism::Index),
        (
            "Retrieval head",
            "discrepancy-retrieval.csv",
            Mechanism::Retrieval,
        ),
    ] {
        let path = StudyDir::new(dir).theory(file);
        match read_text(&path)? {
            Some(text) => {
                let rows: Vec<DiscrepancyRow> =
                    ropelab_io::read_csv(&text, &path.display().to_string())
                        .map_err(ReportError::from_display)?;
                one_mechanism(&rows, head, &path.display().to_string())?;
                svgs.push(figures::discrepancy(&rows, mechanism));
            }
            None => s.not_run(&format!("theory/{file} is missing")),
        }
    }
    let path = dir.join("theory/rope-failures.csv");
    match read_text(&path)? {
        Some(text) => {
            unchanged_since_recorded(&dir.join("theory"), "rope-failures.csv")?;
            let rows: Vec<FailureRow> = ropelab_io::read_csv(&text, &path.display().to_string())
                .map_err(ReportError::from_display)?;
            svgs.extend(Rate::ALL.map(|r| figures::failure_rates(&rows, r)));
            svgs.push(figures::moments(&rows, Moment::Mean));
            svgs.push(figures::moments(&rows, Moment::Sd));
        }
        None => s.not_run("theory/rope-failures.csv is missing"),
    }
    s.figures(&svgs);
    Ok(s)
}

/// The files of the study in `dir` for `seeds`, after checking that every model folder its
/// plan lists holds the run the plan made there (not one copied from another study).
pub(crate) fn study_files(dir: &Path, seeds: &[u64]) -> Result<StudyFiles> {
    ropelab_sweep::plan::Plan::check_models(dir).map_err(ReportError::from_display)?;
    // Every model folder of the study holds the ledger its measurement wrote, and the study's
    // tables are read only as their folders' ledgers list them: a ledger removed would let
    // edited files through (twentieth pass, S2).
    let study = StudyDir::new(dir);
    for &seed in seeds {
        for model in [
            study.model(seed, TaskKind::Number),
            study.model(seed, TaskKind::Letter),
            study.compose(seed),
        ] {
            if model.is_dir() {
                required_ledger(&model, "model a study measures")?;
            }
        }
    }
    let expected = ropelab_analysis::claims::files::Expected {
        tables_recorded: true,
        ..Default::default()
    };
    StudyFiles::load_expecting(dir, seeds, &expected).map_err(ReportError::from_display)
}

/// Refuses `folder` without its ledger (`measured.json`): ropelab writes one with every `what`
/// (a study, an experiment, a model a study measures), and without it no file there can be
/// vouched for: a directory of an older ropelab, or a ledger removed by hand, whose files
/// may have been edited since (twentieth pass, S1, S2).
pub(crate) fn required_ledger(folder: &Path, what: &str) -> Result<()> {
    let ledger = ropelab_io::Ledger::load(folder)
        .map_err(|e| ReportError::Input(format!("{}: {e}", folder.display())))?;
    if ledger.is_none() {
        return Err(ReportError::Input(format!(
            "{} is missing: ropelab writes it with every {what}, and without it nothing in {} \
             can be vouched for (a directory of an older ropelab, or a ledger removed): rerun \
             it into a new --out",
            folder.join(ropelab_io::LEDGER).display(),
            folder.display()
        )));
    }
    Ok(())
}

/// Whether `dir` is a model folder of a study (`STUDY/seed-S/TASK/`): its files are read only
/// as its ledger vouches for them.
fn in_study(dir: &Path) -> bool {
    let seed_folder = dir.parent();
    seed_folder
        .and_then(|p| p.file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))
        && seed_folder
            .and_then(Path::parent)
            .is_some_and(|root| StudyDir::new(root).is_study())
}

/// What `ropelab pretrained` wrote into `dir/pretrained/` or `dir`, recognised by content
/// (any file name): `score` JSON Lines (one line per head, no `step`), `tasks` CSV and
/// `rope-stats` CSV.
#[derive(Debug, Default)]
struct PretrainedFiles {
    /// (file stem, heads) of every `pretrained score` file.
    scores: Vec<(String, Vec<PromptHead>)>,
    /// Rows of every `pretrained tasks` file.
    tasks: Vec<SizeRow>,
    /// Rows of every `pretrained rope-stats` file.
    failures: Vec<LayerFailureRow>,
    /// The model every row names (`NAME sha256:PREFIX`; empty in files from before it was
    /// recorded) and the first file that named it.
    model: Option<(String, String)>,
    /// The settings every `tasks` row (its precision) and every `rope-stats` row (its number
    /// format and draws) was measured with, and the first file that gave them.
    settings: BTreeMap<&'static str, (String, String)>,
}

/// What a score file's heads were measured on, for a figure's title (every line of a file
/// has the same, checked as it is read).
fn prompts_scored(heads: &[PromptHead]) -> String {
    heads
        .first()
        .and_then(PromptHead::settings)
        .unwrap_or_else(|| "prompts not recorded: written by an older ropelab".into())
}

/// Whether `model` is an identity `pretrained` writes (`NAME sha256:` and 16 hex digits): a
/// cut-off one is a damaged file.
fn identity_shape(model: &str) -> bool {
    model.rsplit_once(" sha256:").is_some_and(|(name, hex)| {
        !name.is_empty() && hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

impl PretrainedFiles {
    /// Records that `origin` holds rows of `model`: outputs of two models (or an unrecorded
    /// model beside a recorded one) are refused, naming both files, rather than drawn as one
    /// model's section.
    fn same_model(&mut self, model: &str, origin: &str) -> Result<()> {
        if model.is_empty() {
            // A file without its model (its `model` column removed, or written before outputs
            // named their model) cannot be told apart from another model's (ninth pass).
            return Err(ReportError::Input(format!(
                "{origin} does not name the model it measured (no `model` value: written by an \
                 older ropelab, or edited): measure again with `ropelab pretrained`"
            )));
        }
        if !identity_shape(model) {
            return Err(ReportError::Input(format!(
                "{origin}: model {:?} is no identity ropelab writes (NAME sha256: and 16 hex \
                 digits): a damaged or cut-off file",
                model.chars().take(80).collect::<String>()
            )));
        }
        match &self.model {
            None => {
                self.model = Some((model.to_owned(), origin.to_owned()));
                Ok(())
            }
            Some((seen, _)) if seen == model => Ok(()),
            Some((seen, first)) if first == origin => Err(ReportError::Input(format!(
                "{origin}: its rows name two models ({seen} and {model}): one table is one \
                 model's (a damaged or edited file)"
            ))),
            Some((seen, first)) => Err(ReportError::Input(format!(
                "{origin} holds output of {model}, but {first} of {seen}: one directory's \
                 pretrained output must come from one model (move the other model's files \
                 elsewhere)"
            ))),
        }
    }

    /// Records that `origin` measured `what` with `value`: two files of one kind measured with
    /// other settings (a bf16 and an f32 accuracy table, rope statistics in two number formats
    /// or draw counts) are refused, naming both, rather than drawn as one curve (eighth pass,
    /// P010, P021).
    fn same_settings(&mut self, what: &'static str, value: String, origin: &str) -> Result<()> {
        match self.settings.get(what) {
            None => {
                self.settings.insert(what, (value, origin.to_owned()));
                Ok(())
            }
            Some((seen, _)) if *seen == value => Ok(()),
            Some((seen, first)) if first == origin => Err(ReportError::Input(format!(
                "{origin}: its rows were measured with different {what} settings, {seen:?} \
                 and {value:?}: one table is measured with one setting (a damaged or edited \
                 file)"
            ))),
            Some((seen, first)) => Err(ReportError::Input(format!(
                "{origin} was measured with {what} {value:?}, but {first} with {seen:?}: one \
                 chart draws one setting (move one file elsewhere)"
            ))),
        }
    }
}

/// Header of a `pretrained tasks` CSV.
const TASKS_HEADER: &str = "task,size,prompt_tokens,mean,sd,runs";

/// How a `pretrained index-task` CSV begins (not drawn, but that model's output: a page of
/// another directory is not written beside it; fourteenth pass, S-G).
const INDEX_HEADER: &str = "length,min_elements,max_elements";
/// Header of a `pretrained rope-stats` CSV.
const FAILURES_HEADER: &str = "layer,length,position_inversion,position_aliasing";

/// Refuses a study's pretrained stage folder whose ledger lists a file that is gone, naming
/// it: its chart would otherwise be left out silently.
fn listed_files_exist(folder: &Path) -> Result<()> {
    let Some(ledger) = ropelab_io::Ledger::load(folder).map_err(ReportError::from_display)? else {
        return Ok(());
    };
    match ledger.files.keys().find(|f| !folder.join(f).is_file()) {
        Some(file) => Err(ReportError::Input(format!(
            "{}: listed in {} but missing: rerun `ropelab reproduce` to measure it again",
            folder.join(file).display(),
            folder.join(ropelab_io::LEDGER).display()
        ))),
        None => Ok(()),
    }
}

fn pretrained_files(dir: &Path) -> Result<PretrainedFiles> {
    let mut out = PretrainedFiles::default();
    let study_stage = StudyDir::new(dir).pretrained();
    // A study that records its tables (a ledger at its root) vouches for its pretrained stage's
    // files too: another model's file dropped in, or an edited one, is refused (sixteenth pass,
    // O17, O21).
    let study_records = dir.join(ropelab_io::LEDGER).is_file();
    listed_files_exist(&study_stage)?;
    for folder in [study_stage.clone(), dir.to_owned()] {
        let vouched =
            folder.join(ropelab_io::LEDGER).is_file() || (folder == study_stage && study_records);
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !path.is_file() || !(ext == "jsonl" || ext == "csv") {
                continue;
            }
            let Some(text) = read_text(&path)? else {
                continue;
            };
            // A name that is no UTF-8 is shown with its bytes escaped, so the file can be
            // found from the message (twenty-first pass, U-A).
            let origin = match path.to_str() {
                Some(name) => name.to_owned(),
                None => path
                    .as_os_str()
                    .as_encoded_bytes()
                    .escape_ascii()
                    .to_string(),
            };
            let first = text.lines().next().unwrap_or("");
            // ropelab ends every line it writes: a file that does not was cut off.
            let pretrained_output = (ext == "csv"
                && (first.starts_with(TASKS_HEADER) || first.starts_with(FAILURES_HEADER)))
                || (ext == "jsonl" && first.contains("\"pure_0_1\""));
            if vouched && pretrained_output && !first.contains("\"step\"") {
                ropelab_analysis::claims::files::vouched_table(&path, "pretrained", true)
                    .map_err(ReportError::from_display)?;
            }
            if pretrained_output && !text.ends_with('\n') {
                return Err(ReportError::Input(format!(
                    "{origin}: the last line ends without a newline: the file was cut off \
                     (write it again)"
                )));
            }
            if pretrained_output && ext == "csv" && text.lines().nth(1).is_none() {
                return Err(ReportError::Input(format!(
                    "{origin}: a `ropelab pretrained` table with no rows (its header alone): \
                     measure again or remove it"
                )));
            }
            if ext == "csv" && first.starts_with(TASKS_HEADER) {
                let rows: Vec<SizeRow> =
                    ropelab_io::read_csv(&text, &origin).map_err(ReportError::from_display)?;
                // Rows no `pretrained tasks` writes, or a second table of the same windows
                // (another model's, or another run's), are not drawn as one chart.
                for (i, row) in rows.iter().enumerate() {
                    if let Some(why) = row.defect() {
                        return Err(ReportError::Input(format!("{origin}: {why}")));
                    }
                    // A window given twice in one table is that table's defect (twenty-fifth
                    // pass, B-U3), not a second output's.
                    if rows[..i]
                        .iter()
                        .any(|r| (r.task, r.size) == (row.task, row.size))
                    {
                        return Err(ReportError::Input(format!(
                            "{origin}: {} at size {} has two rows in this table (a table of \
                             `pretrained tasks` has one per window size): a damaged or edited \
                             file",
                            row.task, row.size
                        )));
                    }
                    if out
                        .tasks
                        .iter()
                        .any(|t| (t.task, t.size) == (row.task, row.size))
                    {
                        return Err(ReportError::Input(format!(
                            "{origin}: {} at size {} is in another table of {} too (two \
                             `pretrained tasks` outputs in one directory): keep one",
                            row.task,
                            row.size,
                            folder.display()
                        )));
                    }
                    out.same_model(&row.model, &origin)?;
                    // A table of accuracies over no prompts was never measured (twenty-sixth
                    // pass, B-S-C: `pretrained tasks --n 0` is refused).
                    if row.n == 0 {
                        return Err(ReportError::Input(format!(
                            "{origin}: {} at size {} records 0 prompts per run (no `n`: written \
                             by an older ropelab, or edited): measure again with `ropelab \
                             pretrained tasks`",
                            row.task, row.size
                        )));
                    }
                    out.same_settings("precision", row.precision.clone(), &origin)?;
                    // Points of 1 and of 9 prompts per run are not one curve (fourteenth
                    // pass, S-C).
                    out.same_settings("prompts per run", row.n.to_string(), &origin)?;
                    // Nor are means of 2 and of 3 runs.
                    out.same_settings("runs per window size", row.runs.len().to_string(), &origin)?;
                    out.tasks.push(row.clone());
                }
            } else if ext == "csv" && first.starts_with(INDEX_HEADER) {
                // No figure draws an index-task table, but its model is the directory's model
                // too: another model's table beside it is refused (twenty-second pass, N3).
                #[derive(serde::Deserialize)]
                struct ModelColumn {
                    #[serde(default)]
                    model: String,
                }
                let rows: Vec<ModelColumn> =
                    ropelab_io::read_csv(&text, &origin).map_err(ReportError::from_display)?;
                for row in &rows {
                    out.same_model(&row.model, &origin)?;
                }
            } else if ext == "csv" && first.starts_with(FAILURES_HEADER) {
                let rows: Vec<LayerFailureRow> =
                    ropelab_io::read_csv(&text, &origin).map_err(ReportError::from_display)?;
                for row in &rows {
                    if let Some(why) = row.defect() {
                        return Err(ReportError::Input(format!("{origin}: {why}")));
                    }
                    out.same_model(&row.model, &origin)?;
                    out.same_settings(
                        "number format and draws",
                        format!("{} x {}", row.format, row.draws),
                        &origin,
                    )?;
                    // One model, one context: a row of another says the table was edited
                    // (fourteenth pass, S-D).
                    out.same_settings("context length", row.context.to_string(), &origin)?;
                    if out
                        .failures
                        .iter()
                        .any(|f| (f.layer, f.length) == (row.layer, row.length))
                    {
                        return Err(ReportError::Input(format!(
                            "{origin}: layer {} at M = {} is in another `pretrained rope-stats` \
                             table of {} too: keep one",
                            row.layer,
                            row.length,
                            folder.display()
                        )));
                    }
                    out.failures.push(row.clone());
                }
                // `rope-stats` measures every layer it is given at every length: a table whose
                // (layer, length) pairs are not that whole grid was edited (twenty-sixth pass,
                // B-S-E).
                let layers: std::collections::BTreeSet<usize> =
                    rows.iter().map(|r| r.layer).collect();
                let lengths: std::collections::BTreeSet<usize> =
                    rows.iter().map(|r| r.length).collect();
                let pairs: std::collections::BTreeSet<(usize, usize)> =
                    rows.iter().map(|r| (r.layer, r.length)).collect();
                if let Some((l, m)) = layers
                    .iter()
                    .flat_map(|&l| lengths.iter().map(move |&m| (l, m)))
                    .find(|p| !pairs.contains(p))
                {
                    return Err(ReportError::Input(format!(
                        "{origin}: layer {l} has no row at M = {m}, which the table measures for \
                         other layers (`pretrained rope-stats` measures every layer at every \
                         length): a damaged or edited file"
                    )));
                }
                if pairs.len() != rows.len() {
                    return Err(ReportError::Input(format!(
                        "{origin}: a (layer, M) row is given twice: a damaged or edited file"
                    )));
                }
            } else if ext == "jsonl" {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(first) else {
                    // A damaged first line of a `score` output is no "not run" (P013).
                    if first.contains("\"pure_0_1\"") {
                        return Err(ReportError::Input(format!(
                            "{origin}: line 1 is not valid JSON (a damaged `pretrained score` \
                             output)"
                        )));
                    }
                    continue;
                };
                if v.get("step").is_some() || v.get("pure_0_1").is_none() {
                    continue; // a training run's scores, not the pretrained model's
                }
                let heads = text
                    .lines()
                    .enumerate()
                    .map(|(i, l)| {
                        serde_json::from_str(l).map_err(|e| {
                            ReportError::Input(format!("{origin}: line {}: {e}", i + 1))
                        })
                    })
                    .collect::<Result<Vec<PromptHead>>>()?;
                let mut seen = std::collections::BTreeSet::new();
                for h in &heads {
                    if let Some(why) = h.defect() {
                        return Err(ReportError::Input(format!("{origin}: {why}")));
                    }
                    out.same_model(&h.model, &origin)?;
                    // One file, one set of prompts (thirteenth pass, S6).
                    if h.settings() != heads[0].settings() {
                        return Err(ReportError::Input(format!(
                            "{origin}: layer {} head {} was scored on other prompts ({}) than \
                             layer {} head {} ({})",
                            h.layer,
                            h.head,
                            h.settings().unwrap_or_else(|| "not recorded".into()),
                            heads[0].layer,
                            heads[0].head,
                            heads[0].settings().unwrap_or_else(|| "not recorded".into())
                        )));
                    }
                    if !seen.insert((h.layer, h.head)) {
                        return Err(ReportError::Input(format!(
                            "{origin}: layer {} head {} is listed twice",
                            h.layer, h.head
                        )));
                    }
                    // One model's planes, one set of prompts' longest: the bounds each row is
                    // checked against are the file's, not the row's own (twenty-sixth pass,
                    // B-S-D).
                    if (h.planes, h.longest_prompt) != (heads[0].planes, heads[0].longest_prompt) {
                        let show =
                            |v: Option<usize>| v.map_or("none".to_owned(), |v| v.to_string());
                        return Err(ReportError::Input(format!(
                            "{origin}: layer {} head {} records {} rotary planes and a longest \
                             prompt of {} tokens, layer {} head {} {} and {}: one model and one \
                             set of prompts have one of each (a damaged or edited file)",
                            h.layer,
                            h.head,
                            show(h.planes),
                            show(h.longest_prompt),
                            heads[0].layer,
                            heads[0].head,
                            show(heads[0].planes),
                            show(heads[0].longest_prompt)
                        )));
                    }
                }
                // Every head of a layers x heads grid, once: a head cut out, or one past the
                // model's heads, is a damaged file (fourteenth pass, S-A, S-B).
                // A file that records the model's shape holds that grid (a whole layer, or
                // one head of every layer, cut out would leave a smaller complete grid;
                // fifteenth pass, S-1).
                let spanned = (
                    heads.iter().map(|h| h.layer + 1).max().unwrap_or(0),
                    heads.iter().map(|h| h.head + 1).max().unwrap_or(0),
                );
                let shape = heads.first().and_then(|h| h.shape);
                if let Some(h) = heads.iter().find(|h| h.shape != shape) {
                    return Err(ReportError::Input(format!(
                        "{origin}: layer {} head {} records another model shape ({}) than \
                         layer {} head {} ({})",
                        h.layer,
                        h.head,
                        shape_text(h.shape),
                        heads[0].layer,
                        heads[0].head,
                        shape_text(shape)
                    )));
                }
                if let Some((l, hd)) = shape {
                    if spanned.0 > l || spanned.1 > hd {
                        return Err(ReportError::Input(format!(
                            "{origin}: its lines span {} x {} heads, past the model's {l} \
                             layers x {hd} heads it records (an edited file)",
                            spanned.0, spanned.1
                        )));
                    }
                }
                let (layers, per_layer) = shape.unwrap_or(spanned);
                let missing = (0..layers)
                    .flat_map(|l| (0..per_layer).map(move |h| (l, h)))
                    .find(|key| !seen.contains(key));
                if let Some((l, h)) = missing {
                    return Err(ReportError::Input(format!(
                        "{origin}: layer {l} head {h} is missing from the {layers} x {per_layer} \
                         grid of heads (a cut or edited file; score the model again)"
                    )));
                }
                let stem = path
                    .file_stem()
                    .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
                out.scores.push((stem, heads));
            }
        }
    }
    Ok(out)
}

/// A score file's recorded model shape as people write it (`2 layers x 4 heads`).
fn shape_text(shape: Option<(usize, usize)>) -> String {
    match shape {
        Some((l, h)) => format!("{l} layers x {h} heads"),
        None => "none recorded".to_owned(),
    }
}

/// Whether `dir` (or its `pretrained/`) holds `ropelab pretrained` output: its files, and a
/// report of them, are that model's. A file is such output by its first line (as
/// `pretrained_files` tells them), so damaged output counts and an unreadable file of
/// another kind does not (thirteenth pass, U3).
pub fn holds_pretrained_output(dir: &Path) -> bool {
    use std::io::{BufRead, Read};
    [StudyDir::new(dir).pretrained(), dir.to_owned()]
        .iter()
        .filter_map(|folder| std::fs::read_dir(folder).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()))
        .any(|path| {
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !path.is_file() || !(ext == "jsonl" || ext == "csv") {
                return false;
            }
            let Ok(file) = std::fs::File::open(&path) else {
                return false;
            };
            let mut first = Vec::new();
            if std::io::BufReader::new(file.take(1 << 20))
                .read_until(b'\n', &mut first)
                .is_err()
            {
                return false;
            }
            let first = String::from_utf8_lossy(&first);
            (ext == "csv"
                && (first.starts_with(TASKS_HEADER)
                    || first.starts_with(FAILURES_HEADER)
                    || first.starts_with(INDEX_HEADER)))
                || (ext == "jsonl" && first.contains("\"pure_0_1\"") && !first.contains("\"step\""))
        })
}

/// The pretrained model's section, when `dir` holds any `ropelab pretrained` output.
fn pretrained_section(dir: &Path) -> Result<Option<Section>> {
    let files = pretrained_files(dir)?;
    if files.scores.is_empty() && files.tasks.is_empty() && files.failures.is_empty() {
        return Ok(None);
    }
    let mut s = Section::new("pretrained", "The pretrained model");
    match files.model.as_ref().map(|m| m.0.as_str()) {
        Some("") | None => s.text(
            "The files do not name their model (written before ropelab recorded it): that they \
             come from one model is not checked.",
        ),
        Some(model) => s.text(&format!(
            "Model: {model} (every file names it; the prefix of the SHA-256 of the model's files)."
        )),
    }
    let mut svgs = vec![];
    let gamma = configured_gamma(dir)?;
    for (stem, heads) in &files.scores {
        // Without the model's shape, a layer or a head of every layer cut out of the file
        // cannot be told (sixteenth pass, S-1f): said, not passed over.
        if heads.first().is_some_and(|h| h.shape.is_none()) {
            s.text(&format!(
                "{stem}: the file does not record the model's shape (written by an older \
                 ropelab, or edited): its map is checked only against the heads its lines span."
            ));
        }
        svgs.push(pretrained::head_type_map(
            heads,
            &format!(
                "Pretrained heads ({stem}: {}; hover a cell, gamma {gamma})",
                prompts_scored(heads)
            ),
            gamma,
        ));
    }
    if files.scores.is_empty() {
        s.not_run("no `pretrained score` output");
    }
    if files.tasks.is_empty() {
        s.not_run("no `pretrained tasks` output");
    } else {
        svgs.push(pretrained::task_accuracy(&files.tasks));
    }
    if files.failures.is_empty() {
        s.not_run("no `pretrained rope-stats` output");
    } else {
        // What the rates were measured with, and which lengths the model never attended over
        // (tenth pass, S3).
        let first = &files.failures[0];
        let mut text = format!(
            "RoPE failure rates measured in {} with {} draws per layer and length.",
            first.format, first.draws
        );
        let context = files.failures.iter().map(|r| r.context).max().unwrap_or(0);
        let mut beyond: Vec<usize> = files
            .failures
            .iter()
            .filter(|r| context > 0 && r.length > context)
            .map(|r| r.length)
            .collect();
        beyond.sort_unstable();
        beyond.dedup();
        if !beyond.is_empty() {
            let lengths: Vec<String> = beyond.iter().map(usize::to_string).collect();
            text.push_str(&format!(
                " M = {} lie beyond the model's context of {context} tokens: an extrapolation \
                 (q and k rotated to distances the model never attended over).",
                lengths.join(", ")
            ));
        } else if context == 0 {
            text.push_str(" The files do not record the model's context length.");
        }
        s.text(&text);
        svgs.extend(Rate::ALL.map(|r| pretrained::model_failures(&files.failures, r)));
    }
    s.figures(&svgs);
    if !files.tasks.is_empty() {
        let rows: Vec<Vec<String>> = files
            .tasks
            .iter()
            .map(|r| {
                vec![
                    r.task.to_string(),
                    r.size.to_string(),
                    r.prompt_tokens.to_string(),
                    format!("{:.3}", r.mean),
                    r.sd.map_or("n/a".into(), |sd| format!("{sd:.3}")),
                    r.runs.len().to_string(),
                ]
            })
            .collect();
        s.table(
            &[
                "task",
                "window size",
                "prompt tokens",
                "accuracy",
                "sd",
                "runs",
            ],
            &rows,
        );
    }
    Ok(Some(s))
}

/// A single figure `ropelab plot` renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotKind {
    /// Accuracy per hop and overall versus step (a run's `scores.jsonl`).
    Accuracy,
    /// Pure-head counts versus step (`scores.jsonl`).
    Purity,
    /// s_pos of every head versus step (`scores.jsonl`).
    SPos,
    /// s_sym of every head versus step (`scores.jsonl`).
    SSym,
    /// Frequency use per layer at the last step (`scores.jsonl`).
    Frequency,
    /// Accuracy versus input length (`lengthgen.csv`).
    Length,
    /// The hand-built Index head's discrepancy (a study's `theory/discrepancy-index.csv`).
    DiscrepancyIndex,
    /// The hand-built Retrieval head's discrepancy (`theory/discrepancy-retrieval.csv`).
    DiscrepancyRetrieval,
    /// Position inversion rate versus context length (`theory/rope-failures.csv`).
    Failures,
    /// Test accuracy over seeds, number task (a study's `seed-S/number/scores.jsonl`).
    SeedsNumber,
    /// Test accuracy over seeds, letter task (`seed-S/letter/scores.jsonl`).
    SeedsLetter,
    /// The pretrained model's layer x head type map (the first `pretrained score` file found
    /// in the directory or its `pretrained/`).
    PretrainedHeads,
    /// The pretrained model's prompt-task accuracy per window size (`pretrained tasks` files).
    PretrainedTasks,
    /// The N* heat table of a `ropelab languages` directory (`nstar.csv`).
    NStar,
    /// The MOD-head heat table of a `ropelab languages` directory (`heads.csv`).
    ModHeads,
    /// Accuracy versus string length on one language (`accuracy.csv`), written
    /// `language-accuracy:NAME`.
    LanguageAccuracy(Language),
    /// Fixed-offset accuracy versus test length (a `ropelab offset` directory's `accuracy.csv`).
    OffsetAccuracy,
    /// The dilution law against the measured target weight (`mechanism.csv`).
    OffsetDilution,
    /// The most frequent argmax key versus test length (`mechanism.csv`).
    OffsetPinning,
    /// Accuracy per answer position per band (a `ropelab canonical` directory).
    CanonicalPositions,
    /// w_max per position per band (`per_position.csv`).
    CanonicalWmax,
    /// Accuracy versus the band's centre frequency (`summary.json`).
    CanonicalSweep,
}

impl PlotKind {
    /// Every kind with its command-line name.
    pub const ALL: [(PlotKind, &'static str); 21] = [
        (PlotKind::Accuracy, "accuracy"),
        (PlotKind::Purity, "purity"),
        (PlotKind::SPos, "s-pos"),
        (PlotKind::SSym, "s-sym"),
        (PlotKind::Frequency, "frequency"),
        (PlotKind::Length, "length"),
        (PlotKind::DiscrepancyIndex, "discrepancy-index"),
        (PlotKind::DiscrepancyRetrieval, "discrepancy-retrieval"),
        (PlotKind::Failures, "failures"),
        (PlotKind::SeedsNumber, "seeds-number"),
        (PlotKind::SeedsLetter, "seeds-letter"),
        (PlotKind::PretrainedHeads, "pretrained-heads"),
        (PlotKind::PretrainedTasks, "pretrained-tasks"),
        (PlotKind::NStar, "n-star"),
        (PlotKind::ModHeads, "mod-heads"),
        (PlotKind::OffsetAccuracy, "offset-accuracy"),
        (PlotKind::OffsetDilution, "offset-dilution"),
        (PlotKind::OffsetPinning, "offset-pinning"),
        (PlotKind::CanonicalPositions, "canonical-positions"),
        (PlotKind::CanonicalWmax, "canonical-wmax"),
        (PlotKind::CanonicalSweep, "canonical-sweep"),
    ];
}

impl std::str::FromStr for PlotKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if let Some(name) = s.strip_prefix("language-accuracy:") {
            return name
                .parse::<Language>()
                .map(PlotKind::LanguageAccuracy)
                .map_err(|e| e.to_string());
        }
        PlotKind::ALL
            .iter()
            .find(|(_, name)| *name == s)
            .map(|(k, _)| *k)
            .ok_or_else(|| {
                let names: Vec<&str> = PlotKind::ALL.iter().map(|(_, n)| *n).collect();
                format!(
                    "unknown figure {s:?}: choose one of {} or language-accuracy:LANGUAGE",
                    names.join(", ")
                )
            })
    }
}

/// One figure of `dir` (a run directory, or a study directory for the theory figures) as SVG;
/// the file it needs must exist (an explicit request, unlike the report's "not run").
pub fn plot(kind: PlotKind, dir: &Path) -> Result<String> {
    // A missing folder is named as such, not as one holding no output (eighteenth pass, RO9).
    if !dir.is_dir() {
        return Err(ReportError::Input(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let title = dir.display().to_string();
    let need = |file: &str| -> Result<String> {
        let path = dir.join(file);
        read_text(&path)?.ok_or_else(|| {
            ReportError::Input(format!(
                "{} is missing: this figure is drawn from it",
                path.display()
            ))
        })
    };
    let scores = || -> Result<Vec<ropelab_analysis::measure::dynamics::HeadStep>> {
        need("scores.jsonl")?;
        Ok(RunFiles::load(dir)
            .map_err(ReportError::from_display)?
            .scores)
    };
    // A table the study recorded is drawn only while its ledger vouches for it.
    let csv = |file: &str| {
        let text = need(file)?;
        let path = dir.join(file);
        if let (Some(folder), Some(name)) = (path.parent(), path.file_name()) {
            unchanged_since_recorded(folder, &name.to_string_lossy())?;
        }
        Ok::<_, ReportError>((text, path.display().to_string()))
    };
    // A study's config edited after it ran is refused here as by the report (sixteenth pass,
    // S-2c).
    if dir.join("config.toml").is_file() {
        unchanged_since_recorded(dir, "config.toml")?;
    }
    let gamma = configured_gamma(dir)?;
    // An experiment's figure of another experiment's directory is named as such, not as the
    // columns its table lacks (fifteenth pass, U).
    let wants = match kind {
        PlotKind::OffsetAccuracy | PlotKind::OffsetDilution | PlotKind::OffsetPinning => {
            Some(DirKind::Offset)
        }
        PlotKind::LanguageAccuracy(_) | PlotKind::ModHeads | PlotKind::NStar => {
            Some(DirKind::Languages)
        }
        PlotKind::CanonicalPositions | PlotKind::CanonicalWmax | PlotKind::CanonicalSweep => {
            Some(DirKind::Canonical)
        }
        _ => None,
    };
    let found = DirKind::detect(dir, false);
    let experiments = [DirKind::Offset, DirKind::Languages, DirKind::Canonical];
    if let Some(want) = wants {
        if found != want && experiments.contains(&found) {
            return Err(ReportError::Input(format!(
                "{} holds a {}, not the {} this figure is drawn from",
                dir.display(),
                found.describe(),
                want.describe()
            )));
        }
    }
    // As the report: a directory ropelab writes with a ledger is drawn only with it
    // (twentieth pass, S1, S2).
    match found {
        DirKind::Languages | DirKind::Offset | DirKind::Canonical | DirKind::Study { .. } => {
            required_ledger(dir, found.describe())?
        }
        DirKind::Run if in_study(dir) => required_ledger(dir, "model a study measures")?,
        _ => {}
    }
    Ok(match kind {
        PlotKind::Accuracy => figures::accuracy_by_hop(&scores()?, &title),
        PlotKind::Purity => figures::purity_counts(&scores()?, &title, gamma),
        PlotKind::SPos => figures::head_scores(&scores()?, &title, Score::Positional, gamma),
        PlotKind::SSym => figures::head_scores(&scores()?, &title, Score::Symbolic, gamma),
        PlotKind::Frequency => figures::frequency_use(&scores()?, &title),
        PlotKind::Length => {
            need("lengthgen.csv")?;
            let files = RunFiles::load(dir).map_err(ReportError::from_display)?;
            figures::accuracy_vs_length(&files.lengths, &length_title(&title, &files))
        }
        PlotKind::DiscrepancyIndex | PlotKind::DiscrepancyRetrieval => {
            let (file, name, mechanism) = if kind == PlotKind::DiscrepancyIndex {
                (
                    "theory/discrepancy-index.csv",
                    "Index head",
                    Mechanism::Index,
                )
            } else {
                (
                    "theory/discrepancy-retrieval.csv",
                    "Retrieval head",
                    Mechanism::Retrieval,
                )
            };
            let (text, origin) = csv(file)?;
            let rows: Vec<DiscrepancyRow> =
                ropelab_io::read_csv(&text, &origin).map_err(ReportError::from_display)?;
            one_mechanism(&rows, mechanism, &origin)?;
            figures::discrepancy(&rows, name)
        }
        PlotKind::Failures => {
            let (text, origin) = csv("theory/rope-failures.csv")?;
            let rows: Vec<FailureRow> =
                ropelab_io::read_csv(&text, &origin).map_err(ReportError::from_display)?;
            figures::failure_rates(&rows, Rate::PositionInversion)
        }
        PlotKind::SeedsNumber | PlotKind::SeedsLetter => {
            let task = if kind == PlotKind::SeedsNumber {
                TaskKind::Number
            } else {
                TaskKind::Letter
            };
            let seeds = StudyDir::new(dir)
                .seeds()
                .map_err(|e| ReportError::io(dir, e))?;
            let files = study_files(dir, &seeds)?;
            let runs: Vec<&[_]> = files
                .seeds
                .iter()
                .filter_map(|s| s.run(task))
                .map(|r| r.scores.as_slice())
                .filter(|l| !l.is_empty())
                .collect();
            if runs.is_empty() {
                return Err(ReportError::Input(format!(
                    "{} has no seed-S/{task}/scores.jsonl: this figure is drawn from them",
                    dir.display()
                )));
            }
            figures::accuracy_over_seeds(&runs, &format!("{task} task, {} seeds", runs.len()))
        }
        PlotKind::PretrainedHeads => {
            let files = pretrained_files(dir)?;
            let (stem, heads) = files.scores.first().ok_or_else(|| {
                ReportError::Input(format!(
                    "{} holds no `ropelab pretrained score` output",
                    dir.display()
                ))
            })?;
            // A folder of several score files (a study's, one per task): the figure says
            // which it draws.
            let of = match files.scores.len() {
                1 => String::new(),
                n => format!(
                    "; the first of {n} score files: {}",
                    files
                        .scores
                        .iter()
                        .map(|(s, _)| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let unshaped = if heads.first().is_some_and(|h| h.shape.is_none()) {
                "; the file records no model shape: a cut layer would not show"
            } else {
                ""
            };
            pretrained::head_type_map(
                heads,
                &format!(
                    "Pretrained heads ({stem}: {}{of}{unshaped})",
                    prompts_scored(heads)
                ),
                gamma,
            )
        }
        PlotKind::PretrainedTasks => {
            let files = pretrained_files(dir)?;
            if files.tasks.is_empty() {
                return Err(ReportError::Input(format!(
                    "{} holds no `ropelab pretrained tasks` output",
                    dir.display()
                )));
            }
            pretrained::task_accuracy(&files.tasks)
        }
        PlotKind::NStar => {
            let (text, origin) = csv("nstar.csv")?;
            let rows: Vec<NStarRow> =
                ropelab_io::read_csv(&text, &origin).map_err(ReportError::from_display)?;
            crate::languages::n_star_table(&rows)
        }
        PlotKind::ModHeads => {
            let (text, origin) = csv("heads.csv")?;
            let rows: Vec<ModHeadRow> =
                ropelab_io::read_csv(&text, &origin).map_err(ReportError::from_display)?;
            crate::languages::mod_head_table(&rows)
        }
        PlotKind::LanguageAccuracy(language) => {
            let (text, origin) = csv("accuracy.csv")?;
            let rows: Vec<LengthRow> =
                ropelab_io::read_csv(&text, &origin).map_err(ReportError::from_display)?;
            if !rows.iter().any(|r| r.language == language.name()) {
                return Err(ReportError::Input(format!(
                    "{origin} has no rows of {}",
                    language.name()
                )));
            }
            crate::languages::accuracy_vs_length(&rows, language.name())
        }
        PlotKind::OffsetAccuracy => {
            let (text, origin) = csv("accuracy.csv")?;
            crate::offset::accuracy_vs_length(&offset_accuracy(&text, &origin)?)
        }
        PlotKind::OffsetDilution | PlotKind::OffsetPinning => {
            let (text, origin) = csv("mechanism.csv")?;
            let rows: Vec<MechanismLine> =
                ropelab_io::read_csv(&text, &origin).map_err(ReportError::from_display)?;
            if kind == PlotKind::OffsetDilution {
                crate::offset::dilution(&rows)
            } else {
                crate::offset::pinning(&rows)
            }
        }
        PlotKind::CanonicalPositions | PlotKind::CanonicalWmax => {
            let (text, origin) = csv("per_position.csv")?;
            let rows: Vec<PerPositionRow> =
                ropelab_io::read_csv(&text, &origin).map_err(ReportError::from_display)?;
            if kind == PlotKind::CanonicalPositions {
                crate::canonical::accuracy_by_position(&rows)
            } else {
                crate::canonical::w_max_by_position(&rows)
            }
        }
        PlotKind::CanonicalSweep => {
            let (text, origin) = csv("summary.json")?;
            let rows: Vec<BandSummary> = serde_json::from_str(&text)
                .map_err(|e| ReportError::Input(format!("{origin}: {e}")))?;
            crate::canonical::sweep(&rows)
        }
    })
}
