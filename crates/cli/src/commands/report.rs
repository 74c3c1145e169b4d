//! `ropelab report`: one self-contained HTML page with every figure of a run or study
//! directory.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;

use crate::output::write_atomic;

/// Arguments of `ropelab report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run directory (`train`) or a study directory (`reproduce`).
    pub dir: PathBuf,
    /// Output file (default: DIR/report.html).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `ropelab report`.
pub fn run(args: ReportArgs) -> Result<()> {
    let out = args.out.unwrap_or_else(|| args.dir.join("report.html"));
    let command = format!(
        "ropelab report {} --out {}",
        args.dir.display(),
        out.display()
    );
    super::table_on_stdout(&out);
    own_directory_or_none(&args.dir, &out, "report")?;
    let path = write_report(&args.dir, &out, &command)?;
    sayln!("wrote {}", path.display());
    Ok(())
}

/// Refuses an `out` inside another ropelab directory (a run, study, sweep or experiment) than
/// `dir`: a page or figure there would stand as that directory's (eighth pass, W021, W036;
/// ninth pass, S9). `what` names the output in the message.
fn own_directory_or_none(dir: &Path, out: &Path, what: &str) -> Result<()> {
    if out.as_os_str() == "-" {
        return Ok(());
    }
    let dir_resolved = ropelab_io::resolved(dir)?;
    if let Some(owner) = ropelab_io::owning_dir(out)? {
        anyhow::ensure!(
            owner == dir_resolved,
            "{} lies in {}, another ropelab directory than {}: its {what} would stand there as \
             that directory's; write it into {} or outside any run, study or sweep",
            out.display(),
            owner.display(),
            dir.display(),
            dir.display()
        );
        return Ok(());
    }
    // A folder of `ropelab pretrained` output has no marker file, but its files (and its
    // report) are one model's: another directory's page there would replace its report
    // (ninth pass, F12l). Another run, study or sweep is named as that above (eighteenth pass,
    // RO1).
    if let Some(parent) = ropelab_io::resolved(out)?.parent() {
        anyhow::ensure!(
            parent == dir_resolved
                || parent.starts_with(&dir_resolved)
                || !ropelab_report::compose::holds_pretrained_output(parent),
            "{} lies in {}, which holds `ropelab pretrained` output: its {what} would stand \
             there as that model's; write it into {} or elsewhere",
            out.display(),
            parent.display(),
            dir.display()
        );
    }
    Ok(())
}

/// Writes the report of `dir` to `out` (atomically); `command` is shown in it.
pub fn write_report(dir: &Path, out: &Path, command: &str) -> Result<PathBuf> {
    let html = ropelab_report::report(dir, command)?;
    // A study's verdicts are drawn only while its files still give them.
    ropelab_study::run::claims_current(dir)?;
    write_atomic(out, html.as_bytes())?;
    Ok(out.to_owned())
}

/// Arguments of `ropelab plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The figure: accuracy, purity, s-pos, s-sym, frequency, length (from a run directory),
    /// discrepancy-index, discrepancy-retrieval, failures, seeds-number, seeds-letter (from a
    /// study directory), pretrained-heads, pretrained-tasks (from a directory holding
    /// `ropelab pretrained` output, or a study's with it in pretrained/), n-star, mod-heads,
    /// language-accuracy:LANGUAGE (from a `ropelab languages` directory), offset-accuracy,
    /// offset-dilution, offset-pinning (from a `ropelab offset` directory or a study's
    /// offset/), canonical-positions, canonical-wmax, canonical-sweep (from a `ropelab
    /// canonical` directory).
    pub kind: ropelab_report::PlotKind,
    /// The run or study directory holding the figure's file.
    #[arg(long)]
    pub dir: PathBuf,
    /// Output SVG file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `ropelab plot`.
pub fn plot(args: PlotArgs) -> Result<()> {
    super::table_on_stdout(&args.out);
    own_directory_or_none(&args.dir, &args.out, "figure")?;
    let svg = ropelab_report::plot(args.kind, &args.dir)?;
    write_atomic(&args.out, svg.as_bytes())?;
    sayln!("wrote {}", args.out.display());
    Ok(())
}
