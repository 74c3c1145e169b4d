//! One file per subcommand; each parses its arguments and calls the library crates.

/// Prints a command's human summary: to standard output, or to standard error when the
/// command's table itself goes to standard output (`--out -`, see [`table_on_stdout`]), so
/// that stream holds the table alone.
macro_rules! say {
    ($($arg:tt)*) => {
        if $crate::commands::summary_on_stderr() {
            eprint!($($arg)*)
        } else {
            print!($($arg)*)
        }
    };
}

/// [`say!`] with a newline.
macro_rules! sayln {
    ($($arg:tt)*) => {
        if $crate::commands::summary_on_stderr() {
            eprintln!($($arg)*)
        } else {
            println!($($arg)*)
        }
    };
}

static TABLE_ON_STDOUT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records that this command writes its table to standard output when `out` is `-`: its
/// summary ([`say!`]) then goes to standard error (seventh pass, TP6).
pub fn table_on_stdout(out: &std::path::Path) {
    if out.as_os_str() == "-" {
        TABLE_ON_STDOUT.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether the summary goes to standard error ([`table_on_stdout`]).
pub fn summary_on_stderr() -> bool {
    TABLE_ON_STDOUT.load(std::sync::atomic::Ordering::Relaxed)
}

mod ablate;
mod attention;
mod bench;
mod bench_train;
mod bias;
mod canonical;
mod eval;
mod gen;
mod hops;
mod languages;
mod lengthgen;
mod mask;
mod offset;
mod pretrained;
mod probe;
mod pure_heads;
mod report;
mod reproduce;
mod score;
mod sweep;
mod theory;
mod train;

use anyhow::Result;
use clap::Subcommand;

/// The subcommands of `ropelab`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the study end to end from an embedded config (datasets, one model per task and seed,
    /// scores, length generalisation, theory, a verdict per claim); `--paper` for the
    /// full-scale study.
    Reproduce(reproduce::ReproduceArgs),
    /// Generate a task dataset (or its natural-language prompt version) as JSON Lines.
    Gen(gen::GenArgs),
    /// Train a GPT-J on a task from a preset or config; checkpoints and metrics go to --out.
    Train(train::TrainArgs),
    /// Test accuracy of a run's checkpoint, overall and per hop, optionally on longer inputs.
    Eval(eval::EvalArgs),
    /// Accuracy of a checkpoint on length-extended inputs, per hop, with each head's
    /// discrepancy at the query (CSV).
    Lengthgen(lengthgen::LengthgenArgs),
    /// A trained number/letter model with some layers restricted to a band of rotary planes:
    /// the accuracy drop per hop count (mask.csv).
    Mask(mask::MaskArgs),
    /// The hop map of a number-task model: per layer and head, the attention mass on the
    /// position j hops along each query position's chain, and the accuracy with that edge
    /// knocked out (hops.csv).
    Hops(hops::HopsArgs),
    /// Linear probes on a number-task model's residual stream: after each layer, whether the
    /// token at hop j (and its distance) can be read at each position, and what that says of
    /// how the hops compose (probes.csv).
    Probe(probe::ProbeArgs),
    /// Pure heads and successful learning across every number/letter model found in a
    /// directory: each model's pure-head share against its test accuracy, and per task the
    /// rank correlation with its verdict (pure_heads.csv, pure_heads.svg).
    PureHeads(pure_heads::PureHeadsArgs),
    /// Necessity by ablation: a number/letter model's accuracy per hop count with each group of
    /// heads (pure positional, pure symbolic, neither, each layer) knocked out by mean and by
    /// zero ablation (ablation.csv).
    Ablate(ablate::AblateArgs),
    /// Positional/symbolic scores of every head at every checkpoint of a run (scores.jsonl).
    Score(score::ScoreArgs),
    /// The expressivity experiment: EOS classifiers on formal languages per position
    /// encoding, tested beyond their training lengths (N*, nstar.csv).
    Languages(languages::LanguagesArgs),
    /// Frequency-band training on the canonical tasks (Index, Retrieval, Partial Induction):
    /// one-layer attention-only RoPE models with the head restricted to a band of planes
    /// (summary.json, per_position.csv)
    Canonical(canonical::CanonicalArgs),
    /// The implicit-bias experiment: fixed-offset retrieval with rotary, learned absolute or no
    /// position encoding and softmax or linear attention, tested at up to 8 x the training
    /// length (accuracy.csv)
    Offset(offset::OffsetArgs),
    /// The bias experiment: RoPE models trained on the ambiguous task under one training bias
    /// each (base, planes kept unrotated, partial rotary, NoPE layers, randomised positions);
    /// which rule each follows on the conflict split, and its length generalisation
    /// (mechanism.csv, report.html)
    Bias(bias::BiasArgs),
    /// Run a sweep file's jobs here (in parallel, by shard, resumable), list them, or write
    /// them as a Slurm job array (docs/sweeps.md).
    Sweep(sweep::SweepArgs),
    /// Merge the finished jobs of a sweep (or of a reproduce directory) into tables, with means
    /// over seeds (collected/).
    Collect(sweep::CollectArgs),
    /// A real pretrained RoPE model (SmolLM2-135M from its GGUF file) under the same lens.
    #[command(subcommand)]
    Pretrained(pretrained::PretrainedCommand),
    /// The theory lab: exact discrepancy curves and RoPE failure statistics (CSV).
    #[command(subcommand)]
    Theory(theory::TheoryCommand),
    /// Every head's attention on one test input of a run, with its swap scores (for the
    /// report's attention viewer).
    Attention(attention::AttentionArgs),
    /// One self-contained HTML report (every figure, inline) of a run or study directory.
    Report(report::ReportArgs),
    /// One figure of a run or study directory as an SVG file.
    Plot(report::PlotArgs),
    /// Measure the speed of ropelab's hot paths on this machine.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

impl Command {
    /// Runs the subcommand; `force` skips the up-front memory and disk check.
    pub fn run(self, force: bool) -> Result<()> {
        let guard = Guard { force };
        if let Some(out) = self.table_out() {
            check_out_file(out)?;
        }
        match self {
            Command::Reproduce(args) => reproduce::run(args, guard),
            Command::Gen(args) => gen::run(args, guard),
            Command::Train(args) => train::run(args, guard),
            Command::Eval(args) => eval::run(args, guard),
            Command::Score(args) => score::run(args, guard),
            Command::Lengthgen(args) => lengthgen::run(args, guard),
            Command::Mask(args) => mask::run(args, guard),
            Command::Hops(args) => hops::run(args, guard),
            Command::Ablate(args) => ablate::run(args, guard),
            Command::Probe(args) => probe::run(args, guard),
            Command::PureHeads(args) => pure_heads::run(args),
            Command::Languages(args) => languages::run_command(args, guard),
            Command::Offset(args) => offset::run_command(args, guard),
            Command::Bias(args) => bias::run_command(args, guard),
            Command::Canonical(args) => canonical::run_command(args, guard),
            Command::Sweep(args) => sweep::run(args, guard),
            Command::Collect(args) => sweep::collect_command(args),
            Command::Theory(cmd) => theory::run(cmd, guard),
            Command::Pretrained(cmd) => pretrained::run(cmd, guard),
            Command::Attention(args) => attention::run(args, guard),
            Command::Report(args) => report::run(args),
            Command::Plot(args) => report::plot(args),
            Command::Bench(cmd) => bench::run(cmd, guard),
        }
    }
}

impl Command {
    /// The file `--out` names for the commands that compute a whole table before writing it
    /// (the theory and pretrained commands, which read no run of their own), checked before the
    /// work starts.
    fn table_out(&self) -> Option<&std::path::Path> {
        use pretrained::PretrainedCommand as P;
        use theory::TheoryCommand as T;
        match self {
            Command::Theory(T::Discrepancy(a)) => Some(&a.out),
            Command::Theory(T::RopeStats(a)) => Some(&a.out),
            Command::Theory(T::Margins(a)) => Some(&a.out),
            Command::Theory(T::Periodic(a)) => Some(&a.out),
            Command::Theory(T::OffsetRange(a)) => Some(&a.out),
            Command::Pretrained(P::Tasks(a)) => Some(&a.out),
            Command::Pretrained(P::Score(a)) => Some(&a.out),
            Command::Pretrained(P::RopeStats(a)) => Some(&a.out),
            Command::Pretrained(P::IndexTask(a)) => Some(&a.out),
            _ => None,
        }
    }
}

/// Refuses, before any work, an output file that is a directory or one ropelab keeps or a
/// ledger lists (the check [`crate::output::Output::create`] makes again with the bytes).
pub fn check_out_file(out: &std::path::Path) -> Result<()> {
    if out.as_os_str() == "-" {
        return Ok(());
    }
    anyhow::ensure!(
        !out.is_dir(),
        "cannot write {}: it is a directory",
        out.display()
    );
    ropelab_io::refuse_listed(out, None)?;
    Ok(())
}

/// Refuses an output file `out` of a command reading the run `run` that would stand among
/// another directory's files: inside another run, study, sweep or experiment directory, in a
/// folder of `ropelab pretrained` output, or in a model directory (weights beside a
/// `config.json`). Beside the run itself, or outside all of them, is let through.
pub fn out_of_others(run: &std::path::Path, out: &std::path::Path) -> Result<()> {
    if out.as_os_str() == "-" {
        return Ok(());
    }
    let own = ropelab_io::resolved(run)?;
    if let Some(owner) = ropelab_io::owning_dir(out)? {
        anyhow::ensure!(
            owner == own || owner.starts_with(&own),
            "{} lies in {}, another ropelab directory than the run {}: write it beside the run \
             or outside any run, study or sweep",
            out.display(),
            owner.display(),
            run.display()
        );
        return Ok(());
    }
    if let Some(parent) = ropelab_io::resolved(out)?.parent() {
        anyhow::ensure!(
            !ropelab_report::compose::holds_pretrained_output(parent),
            "{} lies in {}, which holds `ropelab pretrained` output: write it elsewhere",
            out.display(),
            parent.display()
        );
        let weights = std::fs::read_dir(parent).is_ok_and(|mut entries| {
            entries.any(|e| {
                e.is_ok_and(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.ends_with(".safetensors") || name.ends_with(".gguf")
                })
            })
        });
        anyhow::ensure!(
            !(weights && parent.join("config.json").is_file()),
            "{} lies in {}, a model directory (its weights and config.json): write it elsewhere",
            out.display(),
            parent.display()
        );
    }
    Ok(())
}

/// The up-front resource check of one command (see `ropelab_io::resources`).
#[derive(Debug, Clone, Copy)]
pub struct Guard {
    force: bool,
}

impl Guard {
    /// Refuses `command` (as the user would name it) when `need` exceeds this machine's
    /// available memory or disk, unless `--force` was given.
    pub fn check(self, command: &str, need: &ropelab_io::Need) -> Result<()> {
        need.check(command, self.force)?;
        if let Some(note) = need.long_note(command) {
            eprintln!("{note}");
        }
        Ok(())
    }
}

/// The ropelab directory above `out` that a new run or study must not be made in: a run (its
/// `config.toml` and `checkpoints/`), a checkpoint (`ropelab.json`), or a sweep's, study's or
/// experiment's directory (`plan.json`). Studies and sweeps place their own runs; a command's
/// `--out` does not.
pub fn nested_in(out: &std::path::Path) -> Result<Option<String>> {
    let out = ropelab_io::resolved(out)?;
    for dir in out.ancestors().skip(1) {
        if dir.join("config.toml").is_file() && dir.join("checkpoints").is_dir() {
            return Ok(Some(format!("the run {}", dir.display())));
        }
        if dir.join("ropelab.json").is_file() {
            return Ok(Some(format!("the checkpoint {}", dir.display())));
        }
        if dir.join("plan.json").is_file() {
            return Ok(Some(format!(
                "the sweep, study or experiment directory {}",
                dir.display()
            )));
        }
    }
    Ok(None)
}

/// Refuses an output directory `out` that is a file, that lies inside another run, checkpoint,
/// sweep or study ([`nested_in`]), or, for a grid of runs (`grid`: a study, sweep or
/// experiment; not `train`, whose own run directory is its `--out`), that is itself a run.
pub fn check_out_dir(out: &std::path::Path, grid: bool) -> Result<()> {
    if out.is_file() {
        anyhow::bail!("--out {} is a file, not a directory", out.display());
    }
    // A model directory (weights beside a config.json) holds another model's files.
    let weights = std::fs::read_dir(out).is_ok_and(|mut entries| {
        entries.any(|e| {
            e.is_ok_and(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.ends_with(".safetensors") || name.ends_with(".gguf")
            })
        })
    });
    if weights && out.join("config.json").is_file() {
        anyhow::bail!(
            "--out {} is a model directory (its weights and config.json); choose another --out",
            out.display()
        );
    }
    // A run goes into a new or empty directory (or its own, resumed): one holding other
    // files (a sweep's or experiment's root, an experiment's runs/ folder) would mix a run
    // into them (twenty-fourth pass, S7).
    if !grid && !out.join("config.toml").exists() {
        // What marks another kind of directory: a plan, a ledger, claims, or runs inside it
        // (a killed start's checkpoints/ alone is this run's, trained again).
        let foreign = std::fs::read_dir(out)
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                ["plan.json", "measured.json", "claims.json"].contains(&name.as_str())
                    || holds_runs(&e.path(), 3)
            });
        if let Some(first) = foreign {
            anyhow::bail!(
                "--out {} holds another kind of directory's files ({}) and no run: train writes \
                 a run into a new or empty directory; choose another --out",
                out.display(),
                first.file_name().to_string_lossy().escape_debug(),
            );
        }
    }
    if grid && out.join("config.toml").is_file() && out.join("checkpoints").is_dir() {
        anyhow::bail!(
            "--out {} is a run directory; a study, sweep or experiment needs its own",
            out.display()
        );
    }
    if let Some(within) = nested_in(out)? {
        anyhow::bail!(
            "--out {} is inside {within}: what is written there would be another's files (its \
             reports, plans and ledgers do not list them); choose another --out",
            out.display()
        );
    }
    Ok(())
}

/// Whether `dir` is a run, or holds one within `depth` levels of folders (an experiment's
/// `runs/PE/k-K/seed-S`; twenty-fifth pass, S6).
fn holds_runs(dir: &std::path::Path, depth: usize) -> bool {
    if dir.join("config.toml").is_file() {
        return true;
    }
    depth > 0
        && std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_type().is_ok_and(|t| t.is_dir()) && holds_runs(&e.path(), depth - 1))
}

/// Refuses a list flag that names one value twice (`--lengths 256,256`): a repeated value
/// repeats its work and its rows, and a table keyed by it would hold two rows for one key.
pub fn each_once<T: PartialEq + std::fmt::Debug>(flag: &str, values: &[T]) -> Result<()> {
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            anyhow::bail!(
                "{flag}: {v:?} is given twice; give each value once (a repeated value repeats \
                 its work and its rows)"
            );
        }
    }
    Ok(())
}

/// A progress bar on standard error (drawn only when it is a terminal).
pub fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    styled(indicatif::ProgressBar::new(len), what)
}

/// The study's progress as bars on standard error, one line per running stage.
#[derive(Debug, Default)]
pub struct Bars {
    multi: indicatif::MultiProgress,
}

impl Bars {
    /// An overall bar (e.g. over a sweep's jobs) drawn above the stages.
    pub fn overall(&self, len: u64, what: &str) -> indicatif::ProgressBar {
        styled(self.multi.add(indicatif::ProgressBar::new(len)), what)
    }
}

/// One stage's bar: cleared and removed from the display when dropped.
struct StageBar<'a> {
    bar: indicatif::ProgressBar,
    multi: &'a indicatif::MultiProgress,
}

impl ropelab_study::Progress for Bars {
    fn stage(&self, label: &str, total: u64) -> Box<dyn ropelab_study::Stage + '_> {
        let bar = styled(self.multi.add(indicatif::ProgressBar::new(total)), label);
        Box::new(StageBar {
            bar,
            multi: &self.multi,
        })
    }
}

impl ropelab_study::Stage for StageBar<'_> {
    fn set(&self, done: u64) {
        self.bar.set_position(done);
    }

    fn set_total(&self, total: u64) {
        self.bar.set_length(total);
    }

    fn message(&self, message: String) {
        self.bar.set_message(message);
    }
}

impl Drop for StageBar<'_> {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
        self.multi.remove(&self.bar);
    }
}

/// `bar` with ropelab's style and `what` as its message.
fn styled(bar: indicatif::ProgressBar, what: &str) -> indicatif::ProgressBar {
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:>16} [{bar:30}] {human_pos}/{human_len} {per_sec} eta {eta}",
        )
        .expect("the template is valid")
        .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

/// Writes `rows` as CSV to `out`, a file a measured run may own as `name` (its ledger's entry,
/// recorded under `key` when `out` is that file): a ledger-listed file is not replaced by other
/// bytes, nor by the same bytes under other settings (its verdicts read it).
///
/// Every row names the checkpoint `step` measured and the run's identity (its last two columns),
/// so that the table copied into another run, or read after a later checkpoint, is told.
pub fn write_run_csv<T: serde::Serialize>(
    run: &std::path::Path,
    out: &std::path::Path,
    name: &str,
    key: &str,
    step: usize,
    rows: &[T],
) -> Result<()> {
    use ropelab_io::Ledger;
    let (_, config) = ropelab_train::RunDir::open(run)?;
    let text = ropelab_io::to_csv_stamped(rows, step, &config.identity())?;
    ropelab_io::refuse_owned(run, out, Some(text.as_bytes()))?;
    // In a measured run the file is recorded in its ledger under the key a study job uses for
    // the same settings, so the run's report and verdicts read it (and refuse other settings).
    let recorded = out == run.join(name) && Ledger::load(run)?.is_some();
    if recorded {
        refuse_measured(run, out, name, key)?;
        Ledger::begin(run, name, key)?;
    }
    crate::output::write_atomic(out, text.as_bytes())?;
    if recorded {
        Ledger::finish(run, name, key)?;
    }
    Ok(())
}

/// Refuses to write `out`, the measured run's own `name`, under `key` when the run's ledger
/// lists it under other settings (a study's measurement, which its verdicts read): what
/// [`write_run_csv`] checks, callable before the work that would make the file.
pub fn refuse_measured(
    run: &std::path::Path,
    out: &std::path::Path,
    name: &str,
    key: &str,
) -> Result<()> {
    use ropelab_io::{Ledger, Standing};
    if out != run.join(name) || Ledger::load(run)?.is_none() {
        return Ok(());
    }
    if let Standing::Foreign(why) = Ledger::check(run, name, key)? {
        anyhow::bail!(
            "{}: {why}; it is the measured run's own, so it is not replaced (write this one \
             elsewhere with --out)",
            out.display()
        );
    }
    Ok(())
}

/// Refuses a run whose attention is linear for a measurement that reads attention weights as
/// shares (`what`): linear attention's weights are unnormalised (they may be negative and need
/// not sum to 1), so a mass or a view of them would be read as damaged (twenty-first pass, N3).
pub fn softmax_attention(
    config: &ropelab_train::RunConfig,
    run: &std::path::Path,
    what: &str,
) -> Result<()> {
    anyhow::ensure!(
        config.model.attention != ropelab_model::AttentionKind::Linear,
        "{}: its attention is linear (unnormalised weights, docs/model.md), and {what} are \
         shares of softmax attention",
        run.display()
    );
    Ok(())
}

/// The tables an experiment writes in its output directory as they stood before it ran: when
/// a run of another grid (or other settings) replaces one, [`TablesBefore::note`] says so, so
/// an earlier command's tables do not change under a reader without a word.
pub struct TablesBefore {
    dir: std::path::PathBuf,
    tables: Vec<(String, String)>,
}

impl TablesBefore {
    /// The SHA-256 of each of `names` that exists in `dir` now.
    pub fn take(dir: &std::path::Path, names: &[&str]) -> Self {
        let tables = names
            .iter()
            .filter_map(|n| {
                let sha = ropelab_io::sha256_file(&dir.join(n)).ok()?;
                Some(((*n).to_owned(), sha))
            })
            .collect();
        Self {
            dir: dir.to_owned(),
            tables,
        }
    }

    /// Says on stderr which of the tables that existed now hold other contents.
    pub fn note(&self) {
        let changed: Vec<&str> = self
            .tables
            .iter()
            .filter(|(n, sha)| {
                ropelab_io::sha256_file(&self.dir.join(n)).is_ok_and(|now| &now != sha)
            })
            .map(|(n, _)| n.as_str())
            .collect();
        if !changed.is_empty() {
            eprintln!(
                "note: replaced {} in {}, written by an earlier command with another grid or \
                 other settings; the runs they were made from stay under runs/ (rerun that \
                 command to write its tables again: it reuses them)",
                changed.join(", "),
                self.dir.display()
            );
        }
    }
}
