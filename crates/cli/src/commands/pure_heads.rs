//! `ropelab pure-heads`: pure heads and successful learning across every number/letter model in
//! a directory (docs/study.md, "Pure heads and successful learning").

use std::path::PathBuf;

use crate::output::write_csv;
use anyhow::{Context, Result};
use clap::Args;
use ropelab_analysis::claims::Outcome;
use ropelab_analysis::measure::dynamics::Gamma;
use ropelab_analysis::measure::pure_heads::{collect, tasks, Association, FILE};
use ropelab_io::{write_atomic, Align::Left, Align::Right, Table};

/// Arguments of `ropelab pure-heads`.
#[derive(Debug, Args)]
pub struct PureHeadsArgs {
    /// Directory searched for number/letter runs (studies, sweeps, bias experiments; every
    /// folder with a `config.toml` and a `scores.jsonl`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Purity tolerance the heads are typed at, in (0, 0.5).
    #[arg(long, default_value = "0.1")]
    pub gamma: Gamma,
    /// CSV output (default: DIR/pure_heads.csv; the figure goes beside it as .svg).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `ropelab pure-heads`.
pub fn run(args: PureHeadsArgs) -> Result<()> {
    // The figure goes beside the CSV as .svg: a CSV path ending in .svg would be both.
    if let Some(out) = &args.out {
        anyhow::ensure!(
            out.extension().is_none_or(|e| e != "svg"),
            "--out {} names the figure's path (the figure goes beside the CSV as .svg): give \
             the CSV's path",
            out.display()
        );
    }
    anyhow::ensure!(
        args.dir.is_dir(),
        "{}: no such directory",
        args.dir.display()
    );
    // A file a ledger lists is refused before the work, not after it (tenth pass).
    if let Some(out) = &args.out {
        ropelab_io::refuse_listed(out, None)?;
    }
    let mut found = collect(&args.dir, args.gamma)?;
    // A run whose job result says other numbers than its measured files (one of them edited
    // and its ledger re-sealed) is not read (twenty-third pass, PH3).
    let mut kept = vec![];
    for row in std::mem::take(&mut found.rows) {
        match contradicted(&args.dir.join(&row.run))? {
            Some(why) => found.skipped.push((row.run.clone(), why)),
            None => kept.push(row),
        }
    }
    found.rows = kept;
    if found.rows.is_empty() {
        // Runs that were found but not read say why (tenth pass, U1).
        if let Some((run, why)) = found.skipped.first() {
            anyhow::bail!(
                "{}: no run could be read; {run}: {why}{}",
                args.dir.display(),
                match found.skipped.len() - 1 {
                    0 => String::new(),
                    n => format!(" (and {n} more not read)"),
                }
            );
        }
        anyhow::bail!(
            "{}: no scored number or letter run found (a folder with config.toml and \
             scores.jsonl)",
            args.dir.display()
        );
    }
    let mut table = Table::new(&[
        ("run", Left),
        ("task", Left),
        ("step", Right),
        ("pure / heads", Right),
        ("accuracy", Right),
        ("pure from", Right),
        ("rise (val >= 0.9)", Right),
    ]);
    let step = |s: Option<usize>| s.map_or_else(|| "-".into(), |s| s.to_string());
    for r in &found.rows {
        table.row(vec![
            r.run.clone(),
            r.task.clone(),
            r.step.to_string(),
            format!("{} / {}", r.positional + r.symbolic, r.heads),
            format!("{:.4}{}", r.accuracy, if r.tested { "" } else { " (val)" }),
            step(r.pure_step),
            step(r.rise_step),
        ]);
    }
    print!("{table}");
    for (copy, of) in &found.copies {
        println!("{copy}: the same final weights as {of}, counted once");
    }
    for (copy, of) in &found.same_run {
        println!(
            "{copy}: the same run as {of} (one config, trained to another length), counted once"
        );
    }
    for (run, why) in &found.skipped {
        println!("{run}: not read ({why})");
    }
    println!("heads typed at gamma {}", args.gamma.get());
    for task in tasks(&found.rows) {
        let a = Association::of(&found.rows, &task);
        let verdict = match &a.outcome {
            Outcome::Holds => "holds".to_string(),
            Outcome::Fails => "does not hold".to_string(),
            Outcome::Undetermined(why) => format!("undetermined: {why}"),
        };
        println!("{}; {verdict}", a.text());
    }
    let out = args.out.unwrap_or_else(|| args.dir.join(FILE));
    ropelab_io::refuse_owned(&args.dir, &out, None)?;
    write_csv(&out, &found.rows).with_context(|| format!("cannot write {}", out.display()))?;
    let svg = out.with_extension("svg");
    write_atomic(
        &svg,
        ropelab_report::figures::pure_heads(&found.rows).as_bytes(),
    )
    .with_context(|| format!("cannot write {}", svg.display()))?;
    println!("wrote {} and {}", out.display(), svg.display());
    Ok(())
}

/// Why the job result beside the run in `run` (its own `result.json`, or its job directory's
/// one level up, as a sweep lays them out) contradicts the run's measured files, or None
/// when it agrees or there is none.
fn contradicted(run: &std::path::Path) -> Result<Option<String>> {
    let beside = [Some(run), run.parent().filter(|_| run.ends_with("run"))];
    for dir in beside.into_iter().flatten() {
        let path = dir.join(ropelab_sweep::local::RESULT);
        let Some(result) = ropelab_sweep::local::read_result(&path)? else {
            continue;
        };
        // A result from before settings were recorded is measured again by its next rerun.
        let Some(settings) = result.measure.clone() else {
            continue;
        };
        if let Some(why) = result.contradiction(run, &settings)? {
            return Ok(Some(format!(
                "{} contradicts its run's files: {why}",
                path.display()
            )));
        }
    }
    Ok(None)
}
