//! A number/letter job's measurement: the test split, every checkpoint's swap scores and the
//! layer types, the length test and (on request) the attention viewer's file and a number
//! model's hop map and the head-group ablations, each recorded in
//! the run's ledger and reused only when it vouches for it.

use std::path::Path;

use candle_core::Device;
use ropelab_analysis::claims::{head_grid, layer_types};
use ropelab_analysis::lens::attention::{attention_view, write_view, AttentionView};
use ropelab_analysis::measure::ablation::{
    ablate_run, AblationOptions, AblationRow, ABLATION_FILE,
};
use ropelab_analysis::measure::dynamics::Gamma;
use ropelab_analysis::measure::dynamics::{score_run, HeadStep};
use ropelab_analysis::measure::hops::{hop_run, ledger_key, HopOptions, HopRow};
use ropelab_analysis::measure::keys;
use ropelab_analysis::measure::layer_sets::{layer_sets_run, LayerSetRow, LAYER_SETS_FILE};
use ropelab_analysis::measure::lengthgen::{self, length_generalisation, LengthRow};
use ropelab_analysis::measure::probe::{probe_run, ProbeRow, PROBES_FILE};
use ropelab_io::{write_atomic, Ledger, Progress, LEDGER};
use ropelab_tasks::TaskKind;
use ropelab_train::eval::{eval_checkpoint, EvalReport};
use ropelab_train::RunDir;
use ropelab_train::EVAL_MEMORY;

use super::{io, owned, read_scores, write_json, MeasureOptions, Measured};
use crate::Result;

/// Measures the number/letter run in `run` (see the module docs), labelled `label` in
/// progress bars.
pub fn multi_hop(
    run: &Path,
    options: &MeasureOptions,
    label: &str,
    progress: &dyn Progress,
    device: &Device,
) -> Result<Measured> {
    let test = eval_checkpoint(run, None, 0, None, EVAL_MEMORY, device)?;
    let eval_file = format!("eval/{}", test.file_name(true));
    let eval_key = keys::test_split(test.step);
    Ledger::begin(run, &eval_file, &eval_key).map_err(|e| io(&run.join(LEDGER), e))?;
    write_json(&run.join(&eval_file), &test)?;
    Ledger::finish(run, &eval_file, &eval_key).map_err(|e| io(&run.join(LEDGER), e))?;

    let start = std::time::Instant::now();
    let s = &options.score;
    let score_key = keys::scores(s);
    let scores: Vec<HeadStep> = owned(run, "scores.jsonl", &score_key, read_scores, || {
        let stage = progress.stage(&format!("score {label}"), 0);
        Ok(score_run(run, &options.score, device, |done, total| {
            stage.set_total(total as u64);
            stage.set(done as u64);
        })?
        .lines)
    })?;
    let score_seconds = start.elapsed().as_secs_f64();

    let start = std::time::Instant::now();
    let l = &options.length;
    let length_key = keys::lengths(l);
    let read_lengths = |path: &Path| -> Result<Vec<LengthRow>> {
        let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
        Ok(lengthgen::from_csv(&text, &path.display().to_string())?)
    };
    // A table its ledger vouches for but whose rows contradict its settings (edited under a
    // re-sealed ledger) is measured again, never reused (twenty-fifth pass, S1).
    if Ledger::check(run, "lengthgen.csv", &length_key).map_err(|e| io(&run.join(LEDGER), e))?
        == ropelab_io::Standing::Own
    {
        let (dir, config) = RunDir::open(run)?;
        let step = dir.latest_checkpoint()?;
        let path = run.join("lengthgen.csv");
        let fits = read_lengths(&path)
            .is_ok_and(|rows| lengths_contradict(&rows, &config, &length_key, step).is_none());
        if !fits {
            std::fs::remove_file(&path).map_err(|e| io(&path, e))?;
        }
    }
    let lengths = owned(run, "lengthgen.csv", &length_key, read_lengths, || {
        let stage = progress.stage(&format!("length {label}"), l.extras.len() as u64);
        let rows = length_generalisation(run, l, device, |done, _| stage.set(done as u64))?;
        let path = run.join("lengthgen.csv");
        write_atomic(&path, lengthgen::to_csv(&rows)?.as_bytes()).map_err(|e| io(&path, e))?;
        Ok(rows)
    })?;
    let length_seconds = start.elapsed().as_secs_f64();

    if options.attention_view {
        let file = format!("attention/{}", AttentionView::file_name(test.step, 0));
        let key = keys::attention(test.step);
        owned(
            run,
            &file,
            &key,
            |_| Ok(()),
            || {
                let view = attention_view(run, Some(test.step), 0, device)?;
                write_view(run, &view)?;
                Ok(())
            },
        )?;
    }
    if let Some(n) = options.hop_samples {
        hop_map_file(run, n, label, progress, device)?;
    }
    if let Some((p, s)) = options.route_samples {
        route_files(run, p, s, label, progress, device)?;
    }
    if let Some(n) = options.ablation_samples {
        ablation_file(run, &scores, n, options.gamma, label, progress, device)?;
    }
    Ok(Measured {
        score_seconds,
        length_seconds,
        ..summary(test, &scores, &lengths, options.gamma)
    })
}

/// What a number/letter job's result records of its test-split evaluation, its `scores.jsonl`
/// (the layer types at `gamma`) and its `lengthgen.csv` rows.
pub fn summary(
    test: EvalReport,
    scores: &[HeadStep],
    lengths: &[LengthRow],
    gamma: Gamma,
) -> Measured {
    Measured {
        test_accuracy: Some(test.accuracy.accuracy),
        per_hop: test.accuracy.per_hop.clone(),
        layer_types: Some(layer_types(scores, gamma)),
        length_accuracy: lengths.iter().map(|r| (r.length, r.accuracy)).collect(),
        n_star: None,
        test: Some(test),
        ..Measured::default()
    }
}

/// The measurement of the number/letter run in `run` as its ledger vouches for it, with
/// settings `score_key` and `length_key` ([`keys::scores`], [`keys::lengths`]) and layer types
/// at `gamma`: its test split at the latest checkpoint, `scores.jsonl` and `lengthgen.csv`,
/// each read only when the ledger vouches for it (else an error naming the file). Nothing is
/// computed or written.
pub fn recorded(
    run: &Path,
    config: &ropelab_train::RunConfig,
    score_key: &str,
    length_key: &str,
    gamma: Gamma,
) -> Result<Measured> {
    let step = RunDir::new(run).latest_checkpoint()?;
    let bad = |message: String| crate::SweepError::Job {
        id: run.display().to_string(),
        message,
    };
    let eval_file = format!("eval/step-{step:06}-extra-0.json");
    let test: EvalReport = super::vouched(run, &eval_file, &keys::test_split(step), |p| {
        let text = std::fs::read_to_string(p).map_err(|e| io(p, e))?;
        read_eval(&text).map_err(|e| crate::SweepError::Job {
            id: run.display().to_string(),
            message: format!("{} is not a test-split evaluation: {e}", p.display()),
        })
    })?;
    let scores = super::vouched(run, "scores.jsonl", score_key, read_scores)?;
    let lengths = super::vouched(run, "lengthgen.csv", length_key, |p| {
        let text = std::fs::read_to_string(p).map_err(|e| io(p, e))?;
        Ok(lengthgen::from_csv(&text, &p.display().to_string())?)
    })?;
    if let Some(why) = lengths_contradict(&lengths, config, length_key, step) {
        return Err(bad(format!(
            "{}: {why}",
            run.join("lengthgen.csv").display()
        )));
    }
    // The test evaluation counts whole samples of the whole test split (twenty-fifth pass,
    // S3).
    let a = &test.accuracy;
    if a.n != config.data.test
        || !whole(a.accuracy * a.n as f64)
        || !within_hops(a.accuracy, &a.per_hop)
    {
        return Err(bad(format!(
            "{eval_file} says accuracy {} of {} samples (per hop {:?}); the run's test split \
             has {} samples, and an accuracy is a whole count of them within its per-hop range",
            a.accuracy, a.n, a.per_hop, config.data.test
        )));
    }
    // Every file names the run it was measured on: one copied in from another job (another
    // seed of the same sweep, say) is not this run's measurement (twenty-fourth pass, S2).
    let identity = config.identity();
    let foreign = [
        (
            "the test evaluation",
            (test.run != identity).then(|| test.run.clone()),
        ),
        (
            "scores.jsonl",
            scores
                .iter()
                .find(|l| !l.run.is_empty() && l.run != identity)
                .map(|l| l.run.clone()),
        ),
        (
            "lengthgen.csv",
            lengths
                .iter()
                .find(|r| !r.run.is_empty() && r.run != identity)
                .map(|r| r.run.clone()),
        ),
    ];
    if let Some((what, other)) = foreign.iter().find_map(|(w, o)| o.as_ref().map(|o| (w, o))) {
        return Err(bad(format!(
            "{what} of {} was measured on run {other}, this run is {identity}: a file copied \
             in from another run",
            run.display()
        )));
    }
    // The test split, the length test's row without extension tokens and the scores' own
    // accuracy at the checkpoint measure one checkpoint on draws of the same test inputs:
    // accuracies this far apart no sampling gives (twenty-fourth pass, S3; twenty-fifth, S2).
    let (a, na) = (test.accuracy.accuracy, test.accuracy.n as f64);
    let mut others: Vec<(&str, f64, f64)> = lengths
        .iter()
        .filter(|r| r.extra == 0)
        .map(|r| ("its lengthgen.csv", r.accuracy, r.n as f64))
        .collect();
    if let Some(n) = keys::parse_score_samples(score_key) {
        if let Some(line) = scores.iter().find(|l| l.step == step) {
            others.push(("its scores.jsonl", line.accuracy, n as f64));
        }
    }
    for (what, b, nb) in others {
        if let Some(z) = two_proportion_z(a, na, b, nb).filter(|z| z.abs() > AGREEMENT_Z) {
            return Err(bad(format!(
                "its test evaluation says accuracy {a} on {na} inputs, {what} says {b} on {nb} \
                 inputs of the same checkpoint (z = {z:.1}, beyond {AGREEMENT_Z}): one of them \
                 is not what was measured"
            )));
        }
    }
    Ok(summary(test, &scores, &lengths, gamma))
}

/// Why the rows of a `lengthgen.csv` contradict the length-test settings `length_key` of a run
/// (config `config`, latest checkpoint `step`): other (step, extra, samples) than the settings
/// ask for, or a row whose accuracy is no whole count of its samples or lies outside its
/// per-hop range (twenty-fourth pass, S1; twenty-fifth, S3).
pub fn lengths_contradict(
    rows: &[LengthRow],
    config: &ropelab_train::RunConfig,
    length_key: &str,
    step: usize,
) -> Option<String> {
    let Some((extras, samples, asked_step)) = keys::parse_lengths(length_key) else {
        return Some(format!(
            "the length-test setting {length_key:?} is not one ropelab writes"
        ));
    };
    let n = samples.unwrap_or(config.data.test);
    let got: Vec<(usize, usize, usize)> = rows.iter().map(|r| (r.step, r.extra, r.n)).collect();
    let at = asked_step.unwrap_or(step);
    let want: Vec<(usize, usize, usize)> = extras.iter().map(|&e| (at, e, n)).collect();
    if got != want {
        return Some(format!(
            "it holds (step, extra, samples) {got:?}, its job measures {want:?}"
        ));
    }
    rows.iter()
        .find(|r| !whole(r.accuracy * r.n as f64) || !within_hops(r.accuracy, &r.per_hop))
        .map(|r| {
            format!(
                "its row of extra {} says accuracy {} of {} samples with per-hop {:?}, which no \
                 count gives",
                r.extra, r.accuracy, r.n, r.per_hop
            )
        })
}

/// Whether `x` is a whole number (a count of samples), but for float rounding.
fn whole(x: f64) -> bool {
    (x - x.round()).abs() < 1e-6
}

/// Whether an accuracy lies within the range of its per-hop accuracies (a weighted mean of
/// them; an empty table bounds nothing).
fn within_hops(accuracy: f64, per_hop: &std::collections::BTreeMap<usize, f64>) -> bool {
    let lo = per_hop.values().copied().fold(f64::INFINITY, f64::min);
    let hi = per_hop.values().copied().fold(f64::NEG_INFINITY, f64::max);
    per_hop.is_empty() || (lo - 1e-9..=hi + 1e-9).contains(&accuracy)
}

/// The |z| beyond which two accuracies of one checkpoint on draws of the same test inputs
/// contradict each other (two-sided p below 2e-9 under the pooled normal approximation).
pub const AGREEMENT_Z: f64 = 6.0;

/// The two-proportion z statistic of accuracies `a` on `na` inputs and `b` on `nb` (pooled
/// variance); None when it is undefined (both all right or all wrong, or no inputs).
fn two_proportion_z(a: f64, na: f64, b: f64, nb: f64) -> Option<f64> {
    if na < 1.0 || nb < 1.0 {
        return None;
    }
    let p = (a * na + b * nb) / (na + nb);
    let var = p * (1.0 - p) * (1.0 / na + 1.0 / nb);
    (var > 0.0).then(|| (a - b) / var.sqrt())
}

/// Measures the hop map of the number-task run in `run` at its latest checkpoint on `n` test
/// samples into `hops.csv`, recorded in the run's ledger (reused when it vouches for it, so
/// calling this on a finished job only measures a map it lacks); a run of another task is left
/// alone.
pub fn hop_map_file(
    run: &Path,
    n: usize,
    label: &str,
    progress: &dyn Progress,
    device: &Device,
) -> Result<()> {
    let Some(step) = number_step(run)? else {
        return Ok(());
    };
    let options = HopOptions {
        step: Some(step),
        n,
        memory: EVAL_MEMORY,
    };
    owned_rows::<HopRow>(
        run,
        "hops.csv",
        &ledger_key(step, n),
        step,
        &format!("hops {label}"),
        progress,
        |p| Ok(hop_run(run, &options, device, p)?.rows),
    )
}

/// Probes the residual stream of the number-task run in `run` at its latest checkpoint on
/// `probe_n` test samples (`probes.csv`) and knocks out every set of fewer layers than hops on
/// `set_n` test samples each (`layer_sets.csv`, both as `ropelab probe` does), each recorded in
/// the run's ledger and reused when it vouches for it; a run of another task is left alone.
pub fn route_files(
    run: &Path,
    probe_n: usize,
    set_n: usize,
    label: &str,
    progress: &dyn Progress,
    device: &Device,
) -> Result<()> {
    let Some(step) = number_step(run)? else {
        return Ok(());
    };
    owned_rows::<ProbeRow>(
        run,
        PROBES_FILE,
        &keys::probes(step, probe_n),
        step,
        &format!("probe {label}"),
        progress,
        |p| Ok(probe_run(run, probe_n, EVAL_MEMORY, device, p)?.1),
    )?;
    owned_rows::<LayerSetRow>(
        run,
        LAYER_SETS_FILE,
        &keys::layer_sets(step, set_n),
        step,
        &format!("layer sets {label}"),
        progress,
        |p| Ok(layer_sets_run(run, set_n, EVAL_MEMORY, device, p)?.1),
    )
}

/// Knocks out the head groups of the number/letter run in `run` at its latest checkpoint on `n`
/// test samples into `ablation.csv` (`ropelab ablate`), the heads typed at `gamma` from the
/// run's `scores` at that checkpoint; recorded in the run's ledger and reused when it vouches for
/// it (so calling this on a finished job only measures what it lacks).
pub fn ablation_file(
    run: &Path,
    scores: &[HeadStep],
    n: usize,
    gamma: Gamma,
    label: &str,
    progress: &dyn Progress,
    device: &Device,
) -> Result<()> {
    let step = RunDir::new(run).latest_checkpoint()?;
    if !scores.iter().any(|l| l.step == step) {
        return Err(crate::SweepError::Job {
            id: run.display().to_string(),
            message: format!("scores.jsonl has no line of step {step}, whose heads are ablated"),
        });
    }
    let grid = head_grid(scores, gamma);
    let options = AblationOptions {
        samples: n,
        memory: EVAL_MEMORY,
    };
    owned_rows::<AblationRow>(
        run,
        ABLATION_FILE,
        &keys::ablation(step, n, gamma.get()),
        step,
        &format!("ablate {label}"),
        progress,
        |p| Ok(ablate_run(run, &grid, &options, device, p)?.rows),
    )
}

/// A test-split evaluation from its file's JSON text (its accuracy flattened beside the
/// step, the extension, the length and the run, as [`EvalReport`] writes it).
fn read_eval(text: &str) -> serde_json::Result<EvalReport> {
    #[derive(serde::Deserialize)]
    struct Head {
        step: usize,
        extra: usize,
        seq_len: usize,
        run: String,
    }
    let mut value: serde_json::Value = serde_json::from_str(text)?;
    let head: Head = serde_json::from_value(value.clone())?;
    if let Some(map) = value.as_object_mut() {
        for key in ["step", "extra", "seq_len", "run"] {
            map.remove(key);
        }
    }
    Ok(EvalReport {
        step: head.step,
        extra: head.extra,
        seq_len: head.seq_len,
        accuracy: serde_json::from_value(value)?,
        run: head.run,
    })
}

/// The latest checkpoint of the run in `run` when it is a number-task run (None otherwise).
fn number_step(run: &Path) -> Result<Option<usize>> {
    let (dir, config) = RunDir::open(run)?;
    if config.task != TaskKind::Number {
        return Ok(None);
    }
    Ok(Some(dir.latest_checkpoint()?))
}

/// `file` of `run` as CSV rows of `R`, through [`owned`]: checked to parse when the run's
/// ledger vouches for it under `key`, else made by `make` (its progress shown as stage
/// `stage`) and written.
fn owned_rows<R: serde::Serialize + serde::de::DeserializeOwned>(
    run: &Path,
    file: &str,
    key: &str,
    step: usize,
    stage: &str,
    progress: &dyn Progress,
    make: impl FnOnce(&mut dyn FnMut(usize, usize)) -> Result<Vec<R>>,
) -> Result<()> {
    let read = |path: &Path| -> Result<()> {
        ropelab_io::read_csv_file::<R>(path)?;
        Ok(())
    };
    owned(run, file, key, read, || {
        let bar = progress.stage(stage, 0);
        let rows = make(&mut |done, total| {
            bar.set_total(total as u64);
            bar.set(done as u64);
        })?;
        // Each row names the checkpoint and the run it was measured on.
        let (_, config) = RunDir::open(run)?;
        let text = ropelab_io::to_csv_stamped(&rows, step, &config.identity())?;
        let path = run.join(file);
        write_atomic(&path, text.as_bytes()).map_err(|e| io(&path, e))?;
        Ok(())
    })
}
