//! The trained models' claims (the main paper): what each model learned, its heads' types and
//! their frequency use, when each hop count is learned, and how far each model generalises in
//! length.

use std::collections::BTreeMap;

use ropelab_train::Accuracy;

use super::{
    accuracy_at_least, per_seed, seed_claim, Claim, Measure, Outcome, RunFiles, StudyFiles,
    Thresholds,
};
use crate::measure::dynamics::{summarize_heads, Gamma, HeadKind, HeadStep};
use crate::measure::hop_route::HopRoute;
use crate::measure::hops::Source;
use crate::measure::layer_sets::{LayerSetRoute, ANSWER_ACCURACY};
use crate::measure::lengthgen::first_length_below;
use crate::measure::probe::{stream_name, ProbeRoute, ProbeVerdict, Target, READ_ACCURACY};

/// The final step's lines of a run.
fn last_step(scores: &[HeadStep]) -> Vec<&HeadStep> {
    let last = scores.iter().map(|l| l.step).max().unwrap_or(0);
    scores.iter().filter(|l| l.step == last).collect()
}

/// A head line's type at tolerance `gamma`.
fn pure(l: &HeadStep, gamma: Gamma) -> HeadKind {
    crate::measure::dynamics::purity(
        crate::SwapScores {
            s_pos: l.s_pos,
            s_sym: l.s_sym,
        },
        gamma,
    )
}

/// Every head's type at the final checkpoint, per layer: `grid[layer][head]` (layers and heads
/// in order; a layer's heads as scored).
pub fn head_grid(scores: &[HeadStep], gamma: Gamma) -> Vec<Vec<HeadKind>> {
    let mut by_layer: BTreeMap<usize, BTreeMap<usize, HeadKind>> = BTreeMap::new();
    for l in last_step(scores) {
        by_layer
            .entry(l.layer)
            .or_default()
            .insert(l.head, pure(l, gamma));
    }
    by_layer
        .into_values()
        .map(|heads| heads.into_values().collect())
        .collect()
}

/// A head type's letter: P (pure positional), S (pure symbolic), - (neither).
pub fn kind_letter(kind: HeadKind) -> char {
    match kind {
        HeadKind::Positional => 'P',
        HeadKind::Symbolic => 'S',
        HeadKind::Mixed => '-',
    }
}

/// [`head_grid`] in letters: one letter per head (P, S, -), a layer's heads together and the
/// layers separated by `|` when a layer has several heads (`PP|P-|SS`), one letter per layer
/// otherwise (`-PP-SS`).
pub fn grid_letters(grid: &[Vec<HeadKind>]) -> String {
    let layers: Vec<String> = grid
        .iter()
        .map(|heads| heads.iter().map(|&k| kind_letter(k)).collect())
        .collect();
    let sep = if grid.iter().any(|heads| heads.len() > 1) {
        "|"
    } else {
        ""
    };
    layers.join(sep)
}

/// Layer types at the final checkpoint in letters ([`grid_letters`] of [`head_grid`]): with
/// one head per layer, one letter per layer.
pub fn layer_types(scores: &[HeadStep], gamma: Gamma) -> String {
    grid_letters(&head_grid(scores, gamma))
}

/// The layers holding at least one head of `kind`, in order.
pub fn layers_with(grid: &[Vec<HeadKind>], kind: HeadKind) -> Vec<usize> {
    grid.iter()
        .enumerate()
        .filter(|(_, heads)| heads.contains(&kind))
        .map(|(l, _)| l)
        .collect()
}

/// Heads of `kind` in the grid.
pub fn heads_of(grid: &[Vec<HeadKind>], kind: HeadKind) -> usize {
    grid.iter().flatten().filter(|&&k| k == kind).count()
}

/// [`grid_letters`] for the claims, with the head counts when a layer has several heads.
fn grid_text(grid: &[Vec<HeadKind>]) -> String {
    let letters = grid_letters(grid);
    if grid.iter().all(|heads| heads.len() <= 1) {
        return format!("layers {letters}");
    }
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let p = layers_with(grid, HeadKind::Positional).len();
    format!(
        "layers {letters} ({} in {}, {})",
        count(heads_of(grid, HeadKind::Positional), "positional head"),
        count(p, "layer"),
        count(heads_of(grid, HeadKind::Symbolic), "symbolic head")
    )
}

/// The step each hop count is first learned (validation accuracy >= threshold), per hop.
fn hop_steps(val: &[(usize, Accuracy)], threshold: f64) -> BTreeMap<usize, Option<usize>> {
    let mut out: BTreeMap<usize, Option<usize>> = BTreeMap::new();
    for (step, acc) in val {
        for (&h, &a) in &acc.per_hop {
            let e = out.entry(h).or_insert(None);
            if e.is_none() && a >= threshold {
                *e = Some(*step);
            }
        }
    }
    out
}

/// When each hop count of a run is learned.
struct HopTiming {
    /// In words.
    text: String,
    /// Why the timing cannot be read (a hop count never learned, every hop count learned by
    /// the first evaluation); None when it can.
    unreadable: Option<String>,
    /// The learned steps are non-decreasing in the hop count.
    ordered: bool,
    /// Spread of the learned steps as a fraction of the run's steps.
    spread: f64,
    /// The coarsest gap between evaluations as a fraction of the run's steps.
    resolution: f64,
}

/// When each hop count of `r` is learned (validation accuracy >= `threshold`).
fn hop_timing(r: &RunFiles, threshold: f64) -> HopTiming {
    let steps = hop_steps(&r.val, threshold);
    let learned: Vec<usize> = steps.values().filter_map(|s| *s).collect();
    let never: Vec<String> = steps
        .iter()
        .filter(|(_, s)| s.is_none())
        .map(|(h, _)| h.to_string())
        .collect();
    let first_eval = r.val.iter().map(|v| v.0).min();
    let unreadable = if !never.is_empty() {
        Some(format!(
            "hop count {} never reaches {threshold} validation accuracy, so its learning step \
             is unknown",
            never.join(", ")
        ))
    } else if learned.len() > 1 && learned.iter().all(|&s| Some(s) == first_eval) {
        Some(
            "every hop count is learned by the first evaluation, so their order cannot be seen"
                .into(),
        )
    } else {
        None
    };
    let ordered = learned.windows(2).all(|w| w[0] <= w[1]);
    let spread = learned.iter().max().unwrap_or(&0) - learned.iter().min().unwrap_or(&0);
    let gap = r.val.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap_or(0);
    let text = format!(
        "learned at {} (spread {spread} of {} steps)",
        fmt_steps(&steps),
        r.steps
    );
    let total = r.steps.max(1) as f64;
    HopTiming {
        text,
        unreadable,
        ordered,
        spread: spread as f64 / total,
        resolution: gap as f64 / total,
    }
}

fn fmt_steps(steps: &BTreeMap<usize, Option<usize>>) -> String {
    steps
        .iter()
        .map(|(h, s)| match s {
            Some(s) => format!("{h}:{s}"),
            None => format!("{h}:never"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why a run cannot carry a claim about a learned model: its test evaluation is missing, or
/// its test accuracy is below the threshold (a point estimate: heads of a model that did not
/// learn say nothing about the task). None when it learned.
fn not_learned(r: &RunFiles, task: &str, t: &Thresholds) -> Option<String> {
    match &r.test {
        None => Some(format!("the {task} model has no test evaluation")),
        Some(a) if a.accuracy < t.learned_accuracy => Some(format!(
            "the {task} model did not learn its task (test accuracy {:.3} < {})",
            a.accuracy, t.learned_accuracy
        )),
        Some(_) => None,
    }
}

/// A seed's measurement when `what` was not measured: its text and the undetermined outcome.
pub(crate) fn missing(text: &str, what: &str) -> Measure {
    (
        text.into(),
        Outcome::undetermined(format!("not measured: {what}")),
    )
}

/// Combines outcomes that must all hold: any failure fails, else any undetermined one makes
/// the whole undetermined (reasons joined), else it holds.
fn all_of(outcomes: impl IntoIterator<Item = Outcome>) -> Outcome {
    let mut why = vec![];
    for o in outcomes {
        match o {
            Outcome::Fails => return Outcome::Fails,
            Outcome::Undetermined(w) => why.push(w),
            Outcome::Holds => {}
        }
    }
    if why.is_empty() {
        Outcome::Holds
    } else {
        Outcome::Undetermined(why.join("; "))
    }
}

/// A run's length generalisation: the first tested length below the threshold (None: never),
/// and the longest tested length; None without `lengthgen.csv`.
fn length_drop(r: &RunFiles, t: &Thresholds) -> Option<(Option<usize>, usize)> {
    let longest = r.lengths.iter().map(|l| l.length).max()?;
    Some((first_length_below(&r.lengths, t.length_accuracy), longest))
}

/// [`length_drop`] in words.
fn fmt_drop(d: (Option<usize>, usize), t: &Thresholds) -> String {
    match d.0 {
        Some(l) => format!("first below {} at length {l}", t.length_accuracy),
        None => format!("never below {} up to length {}", t.length_accuracy, d.1),
    }
}

/// The run of `task` that learned it, or the seed's measurement saying why it cannot be used.
fn learned_run<'a>(
    run: &'a Option<RunFiles>,
    task: &str,
    t: &Thresholds,
) -> std::result::Result<&'a RunFiles, Measure> {
    let Some(r) = run.as_ref() else {
        return Err((
            format!("no {task} run"),
            Outcome::undetermined(format!("not measured: the {task} run is missing")),
        ));
    };
    match not_learned(r, task, t) {
        Some(why) => Err((why.clone(), Outcome::Undetermined(why))),
        None => Ok(r),
    }
}

/// The head types at the last checkpoint (gamma `t.gamma`) of the run of `task` that learned
/// it, or the seed's measurement saying why they cannot be used.
pub(crate) fn learned_grid(
    run: &Option<RunFiles>,
    task: &str,
    t: &Thresholds,
) -> std::result::Result<Vec<Vec<HeadKind>>, Measure> {
    let r = learned_run(run, task, t)?;
    if r.scores.is_empty() {
        return Err(missing("no scores", "no scores.jsonl"));
    }
    Ok(head_grid(&r.scores, t.gamma))
}

/// `both_tasks_learned`: Both tasks learned: each model's test accuracy reaches the threshold.
pub fn both_tasks_learned(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "both_tasks_learned",
        "Both tasks are learned to about 100% test accuracy.",
        format!(
            "test accuracy >= {} on both tasks, decided by the 95% Wilson interval over the \
             test samples (undetermined when it contains the threshold)",
            t.learned_accuracy
        ),
        per_seed(files, |s| {
            fn acc(r: &Option<RunFiles>) -> Option<&Accuracy> {
                r.as_ref().and_then(|r| r.test.as_ref())
            }
            match (acc(&s.number), acc(&s.letter)) {
                (Some(a), Some(b)) => (
                    format!(
                        "number {:.4} (n {}), letter {:.4} (n {})",
                        a.accuracy, a.n, b.accuracy, b.n
                    ),
                    all_of([
                        accuracy_at_least(a.accuracy, a.n, t.learned_accuracy),
                        accuracy_at_least(b.accuracy, b.n, t.learned_accuracy),
                    ]),
                ),
                _ => missing("no test evaluation", "a test evaluation is missing"),
            }
        }),
        t,
    )
}

/// `number_positional_then_symbolic`: The number model's layers: pure positional layers before
/// pure symbolic ones.
pub fn number_positional_then_symbolic(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "number_positional_then_symbolic",
        "Number task: the early layers end as pure positional heads (they perform the hops), \
         the later layers as pure symbolic heads.",
        format!(
            "in a number model that learned its task (test accuracy >= {}), at the last \
             checkpoint, gamma {}: >= {} layers with a pure positional head, >= 1 pure symbolic \
             head, every pure positional head in a layer below every pure symbolic head (head \
             types: P positional, S symbolic, - neither; one letter per layer, or per head \
             with the layers separated by | when a layer has several)",
            t.learned_accuracy, t.gamma, t.min_positional_layers
        ),
        per_seed(files, |s| {
            let grid = match learned_grid(&s.number, "number", t) {
                Ok(g) => g,
                Err(m) => return m,
            };
            let p = layers_with(&grid, HeadKind::Positional);
            let s = layers_with(&grid, HeadKind::Symbolic);
            let ok = p.len() >= t.min_positional_layers
                && matches!((p.last(), s.first()), (Some(p), Some(s)) if p < s);
            (grid_text(&grid), Outcome::of(ok))
        }),
        t,
    )
}

/// `letter_all_symbolic`: The letter model: pure symbolic heads and no positional one.
pub fn letter_all_symbolic(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "letter_all_symbolic",
        "Letter task: the heads that become pure are all symbolic; there is no positional head.",
        format!(
            "in a letter model that learned its task (test accuracy >= {}), at the last \
             checkpoint, gamma {}: no pure positional head and >= 1 pure symbolic head",
            t.learned_accuracy, t.gamma
        ),
        per_seed(files, |s| {
            let grid = match learned_grid(&s.letter, "letter", t) {
                Ok(g) => g,
                Err(m) => return m,
            };
            let ok = heads_of(&grid, HeadKind::Positional) == 0
                && heads_of(&grid, HeadKind::Symbolic) > 0;
            (grid_text(&grid), Outcome::of(ok))
        }),
        t,
    )
}

/// `pure_before_accuracy_peak`: Accuracy peaks only once the heads are pure (both tasks).
pub fn pure_before_accuracy_peak(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "pure_before_accuracy_peak",
        "Test accuracy peaks only once the heads are pure.",
        format!(
            "per task, in models that learned it (test accuracy >= {}): the last step at which \
             a head that ends pure (gamma {}) becomes pure for good is <= the first checkpoint \
             whose test accuracy is within {} of the run's best (a model with no pure head \
             fails: its accuracy peaked without one)",
            t.learned_accuracy, t.gamma, t.peak_tolerance
        ),
        per_seed(files, |s| {
            let mut parts = vec![];
            let mut outcomes = vec![];
            for (name, run) in [("number", &s.number), ("letter", &s.letter)] {
                let r = match learned_run(run, name, t) {
                    Ok(r) => r,
                    Err((text, o)) => {
                        parts.push(text);
                        outcomes.push(o);
                        continue;
                    }
                };
                if r.scores.is_empty() {
                    parts.push(format!("{name}: no scores"));
                    outcomes.push(Outcome::undetermined("not measured: no scores.jsonl"));
                    continue;
                }
                let Ok(summary) = summarize_heads(&r.scores, t.gamma) else {
                    parts.push(format!("{name}: bad gamma"));
                    outcomes.push(Outcome::undetermined("gamma out of range"));
                    continue;
                };
                let pure_step = summary.iter().filter_map(|h| h.pure_from).max();
                let mut acc: BTreeMap<usize, f64> = BTreeMap::new();
                for l in &r.scores {
                    acc.insert(l.step, l.accuracy);
                }
                let best = acc.values().copied().fold(0.0, f64::max);
                let peak = acc
                    .iter()
                    .find(|(_, &a)| a >= best - t.peak_tolerance)
                    .map(|(&s, _)| s);
                match (pure_step, peak) {
                    (Some(p), Some(k)) => {
                        parts.push(format!("{name}: heads pure by {p}, accuracy peaks at {k}"));
                        outcomes.push(Outcome::of(p <= k));
                    }
                    _ => {
                        parts.push(format!("{name}: no pure head"));
                        outcomes.push(Outcome::Fails);
                    }
                }
            }
            (parts.join("; "), all_of(outcomes))
        }),
        t,
    )
}

/// `number_hops_in_order`: Number task: hop counts learned one after another, in order.
pub fn number_hops_in_order(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "number_hops_in_order",
        "Number task: hop counts are learned one after another, 1 hop first.",
        format!(
            "step at which each hop count's validation accuracy first reaches {}: \
             non-decreasing in the hop count, spanning more than {} of the training steps \
             (undetermined when a hop count never reaches it or all reach it by the first \
             evaluation)",
            t.hop_accuracy, t.hop_spread
        ),
        per_seed(files, |s| match &s.number {
            Some(r) if !r.val.is_empty() => {
                let h = hop_timing(r, t.hop_accuracy);
                let outcome = match h.unreadable {
                    Some(why) => Outcome::Undetermined(why),
                    None => Outcome::of(h.ordered && h.spread > t.hop_spread),
                };
                (h.text, outcome)
            }
            _ => missing(
                "no validation metrics",
                "no validation lines in metrics.jsonl",
            ),
        }),
        t,
    )
}

/// The largest hop count a number model answers: the largest in its test evaluation (4 when
/// it has none).
fn largest_hop(r: &RunFiles) -> usize {
    r.test
        .as_ref()
        .and_then(|a| a.per_hop.keys().max().copied())
        .unwrap_or(crate::measure::hops::MAX_HOP)
}

/// `number_hops_composed`: the main paper's open question (shortcuts): does the number model
/// compose hops, knowing further along a position's own chain than one hop per layer allows
/// (pointer doubling)? Three kinds of evidence (docs/multihead.md, "Where each hop lives"):
/// the hop map's attention mass ([`HopRoute`]), the residual-stream probes ([`ProbeRoute`]) and
/// the joint layer knock-outs ([`LayerSetRoute`]). Holds when any of them finds composition at
/// its read level; does not hold when none does and the layer sets tried every set of fewer
/// moving layers than hops for every hop count the model answers (its answers need one moving
/// layer per hop); undetermined otherwise.
pub fn number_hops_composed(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "number_hops_composed",
        "Open question (shortcuts): the number model composes hops, knowing further along a \
         position's own chain than one hop per layer allows (e.g. pointer doubling: hop 1, \
         then 2, then 4).",
        format!(
            "last checkpoint of a number model that learned its task; holds when (a) a layer's \
             heads together put >= {} of the attention on a hop past 1 + the hops the layers \
             below account for (hops.csv), or (b) a linear probe of the residual stream reads \
             (held-out accuracy >= {READ_ACCURACY}) the token at or distance to a hop that one \
             hop per layer cannot know at that layer, beating its control (probes.csv), or (c) \
             with only k layers moving information (the others' attention held on each query's \
             own position) the model answers chains of j > k hops at >= {ANSWER_ACCURACY} \
             (layer_sets.csv); does not hold when none does, every hop count the model answers \
             is answered at >= {ANSWER_ACCURACY} intact and every set of fewer moving layers \
             than its hops was tried and answers below {} (the model needs one moving layer \
             per hop); undetermined otherwise (partial probe knowledge below the read level is \
             reported, not counted)",
            t.hop_mass, t.needed_accuracy
        ),
        per_seed(files, |s| {
            let r = match learned_run(&s.number, "number", t) {
                Ok(r) => r,
                Err(m) => return m,
            };
            if r.hops.is_empty() || r.probes.is_empty() || r.layer_sets.is_empty() {
                let lacking: Vec<&str> = [
                    (r.hops.is_empty(), "hops.csv"),
                    (r.probes.is_empty(), "probes.csv"),
                    (r.layer_sets.is_empty(), "layer_sets.csv"),
                ]
                .iter()
                .filter(|x| x.0)
                .map(|x| x.1)
                .collect();
                let lacking = lacking.join(", ");
                return missing(&format!("no {lacking}"), &format!("no {lacking}"));
            }
            let largest = largest_hop(r);
            let map = HopRoute::of(&r.hops, t.hop_mass);
            let probe_verdicts: Vec<(Source, ProbeVerdict)> = Source::ALL
                .iter()
                .map(|&from| {
                    let v = ProbeRoute::of(&r.probes, from, READ_ACCURACY).verdict(largest);
                    (from, v)
                })
                .collect();
            let sets = LayerSetRoute::of(&r.layer_sets, ANSWER_ACCURACY);
            let probe_text = probe_verdicts
                .iter()
                .map(|(from, v)| {
                    let from = match from {
                        Source::Last => "last token",
                        Source::Every => "every position",
                    };
                    let v = match v {
                        ProbeVerdict::Composes(b) => format!(
                            "composes ({} hop {} read {} at {:.3}, control {:.3})",
                            match b.target {
                                Target::Token => "token at",
                                Target::Distance => "distance to",
                            },
                            b.j,
                            stream_name(b.stream),
                            b.accuracy,
                            b.control
                        ),
                        ProbeVerdict::OneHopPerLayer => "one hop per layer".into(),
                        ProbeVerdict::Undetermined(why) => format!("not decided: {why}"),
                    };
                    format!("{from}: {v}")
                })
                .collect::<Vec<_>>()
                .join("; ");
            let text = format!(
                "hop map: {}; probes ({probe_text}); layer sets: {}",
                map.summary(),
                sets.text()
            );
            let probe_composes = probe_verdicts
                .iter()
                .any(|(_, v)| matches!(v, ProbeVerdict::Composes(_)));
            if map.composes() || probe_composes || !sets.beyond.is_empty() {
                return (text, Outcome::Holds);
            }
            let layers = r
                .layer_sets
                .iter()
                .map(|x| x.size)
                .max()
                .unwrap_or(0)
                .max(map.layers.len());
            let per_hop = r
                .test
                .as_ref()
                .map(|a| a.per_hop.clone())
                .unwrap_or_default();
            let unanswered: Vec<String> = (1..=largest)
                .filter(|j| per_hop.get(j).is_none_or(|&a| a < ANSWER_ACCURACY))
                .map(|j| j.to_string())
                .collect();
            let untried: Vec<String> = (2..=largest)
                .filter(|j| sets.tried.get(j).is_none_or(|&k| k < (j - 1).min(layers)))
                .map(|j| j.to_string())
                .collect();
            // Partly answered with fewer moving layers: more than one hop per layer allows,
            // less than an answer.
            let partly: Vec<String> = sets
                .best_below
                .iter()
                .filter(|(j, (a, _))| **j <= largest && *a >= t.needed_accuracy)
                .map(|(j, (a, set))| format!("{j} hops at {a:.3} with only {set} moving"))
                .collect();
            let outcome = if !unanswered.is_empty() {
                Outcome::undetermined(format!(
                    "the intact model answers {} hop(s) below {ANSWER_ACCURACY}: fewer moving \
                     layers failing them says nothing",
                    unanswered.join(", ")
                ))
            } else if !untried.is_empty() {
                Outcome::undetermined(format!(
                    "not every set of fewer moving layers than hops was tried for {} hop(s)",
                    untried.join(", ")
                ))
            } else if !partly.is_empty() {
                Outcome::undetermined(format!(
                    "chains are partly answered with fewer moving layers than hops ({}; >= {} \
                     but below {ANSWER_ACCURACY}): more than one hop per layer allows, less \
                     than an answer",
                    partly.join(", "),
                    t.needed_accuracy
                ))
            } else {
                Outcome::Fails
            };
            (text, outcome)
        }),
        t,
    )
}

/// `letter_hops_together`: Letter task: hop counts learned together.
pub fn letter_hops_together(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "letter_hops_together",
        "Letter task: hop counts are learned almost together.",
        format!(
            "step at which each hop count's validation accuracy first reaches {}: all within {} \
             of the training steps (undetermined when a hop count never reaches it, all reach \
             it by the first evaluation, or evaluations are too far apart to resolve {})",
            t.hop_accuracy, t.hop_spread, t.hop_spread
        ),
        per_seed(files, |s| match &s.letter {
            Some(r) if !r.val.is_empty() => {
                let h = hop_timing(r, t.hop_accuracy);
                let outcome = match h.unreadable {
                    Some(why) => Outcome::Undetermined(why),
                    None if h.spread > t.hop_spread => Outcome::Fails,
                    None if h.resolution > t.hop_spread => Outcome::undetermined(format!(
                        "evaluations {:.3} of the training apart cannot resolve a spread of {}",
                        h.resolution, t.hop_spread
                    )),
                    None => Outcome::Holds,
                };
                (h.text, outcome)
            }
            _ => missing(
                "no validation metrics",
                "no validation lines in metrics.jsonl",
            ),
        }),
        t,
    )
}

/// `frequency_use`: Positional heads use lower plane ids (higher frequencies) than symbolic heads.
pub fn frequency_use(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "frequency_use",
        "Positional heads use high RoPE frequencies (low plane ids), symbolic heads low \
         frequencies (high plane ids).",
        format!(
            "at the last checkpoint of both models (each learned: test accuracy >= {}), the \
             mean over pure positional heads (gamma {}) of the frequency-weighted mean plane id \
             is below the mean over pure symbolic heads (undetermined without a head of each \
             kind)",
            t.learned_accuracy, t.gamma
        ),
        per_seed(files, |s| {
            let (mut p, mut q) = (vec![], vec![]);
            for (name, run) in [("number", &s.number), ("letter", &s.letter)] {
                let r = match learned_run(run, name, t) {
                    Ok(r) => r,
                    Err(m) => return m,
                };
                for l in last_step(&r.scores) {
                    match pure(l, t.gamma) {
                        HeadKind::Positional => p.push(l.freq_mean_plane),
                        HeadKind::Symbolic => q.push(l.freq_mean_plane),
                        HeadKind::Mixed => {}
                    }
                }
            }
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            let range = |v: &[f64]| {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                format!("{lo:.1}..{hi:.1}")
            };
            if p.is_empty() || q.is_empty() {
                let what = if p.is_empty() {
                    "positional"
                } else {
                    "symbolic"
                };
                return (
                    format!("no pure {what} head"),
                    Outcome::undetermined(format!(
                        "no pure {what} head at gamma {}: nothing to compare",
                        t.gamma
                    )),
                );
            }
            (
                format!(
                    "mean plane: positional {:.2} ({} heads, {}), symbolic {:.2} ({} heads, {})",
                    mean(&p),
                    p.len(),
                    range(&p),
                    mean(&q),
                    q.len(),
                    range(&q)
                ),
                Outcome::of(mean(&p) < mean(&q)),
            )
        }),
        t,
    )
}

/// `length_contrast`: The letter model's first failing length against the number model's.
pub fn length_contrast(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "length_contrast",
        "Length generalisation: the letter model stays accurate far beyond its training length \
         while the number model collapses almost at once.",
        format!(
            "in models that learned their tasks (test accuracy >= {}): the first tested length \
             where the letter model's accuracy falls below {} is >= {} times the number \
             model's; a number model that never falls does not hold; a letter model that never \
             falls is undetermined unless its longest tested length already reaches the ratio",
            t.learned_accuracy, t.length_accuracy, t.length_ratio
        ),
        per_seed(files, |s| {
            let number = match learned_run(&s.number, "number", t) {
                Ok(r) => r,
                Err(m) => return m,
            };
            let letter = match learned_run(&s.letter, "letter", t) {
                Ok(r) => r,
                Err(m) => return m,
            };
            match (length_drop(number, t), length_drop(letter, t)) {
                (Some(a), Some(b)) => {
                    let text = format!("number {}; letter {}", fmt_drop(a, t), fmt_drop(b, t));
                    let outcome = match (a.0, b.0) {
                        (None, _) => Outcome::Fails,
                        (Some(num), Some(let_)) => {
                            Outcome::of(let_ as f64 >= t.length_ratio * num as f64)
                        }
                        (Some(num), None) if b.1 as f64 >= t.length_ratio * num as f64 => {
                            Outcome::Holds
                        }
                        (Some(num), None) => Outcome::undetermined(format!(
                            "the letter model never falls below {} up to length {}, short of \
                             {} x the number model's {num}: the ratio is not reached by any \
                             tested length",
                            t.length_accuracy, b.1, t.length_ratio
                        )),
                    };
                    (text, outcome)
                }
                _ => missing("no lengthgen.csv", "no lengthgen.csv"),
            }
        }),
        t,
    )
}

/// `letter_50x_context`: The letter model stays accurate to 50 times its context.
pub fn letter_50x_context(files: &StudyFiles, t: &Thresholds) -> Claim {
    seed_claim(
        "letter_50x_context",
        "A letter-task model stays above 90% accuracy up to length about 850, about 53 times \
         its 16-token context.",
        format!(
            "in a letter model that learned its task (test accuracy >= {}): accuracy >= {} at \
             every tested length up to {} tokens (the paper's 50 x 16 is 800), each decided by \
             its 95% Wilson \
             interval, and the length {} itself tested (undetermined when it is not, or when an \
             interval contains the threshold)",
            t.learned_accuracy, t.length_accuracy, t.letter_length, t.letter_length
        ),
        per_seed(files, |s| {
            let r = match learned_run(&s.letter, "letter", t) {
                Ok(r) => r,
                Err(m) => return m,
            };
            if r.lengths.is_empty() {
                return missing("no lengthgen.csv", "no lengthgen.csv");
            }
            let mut rows: Vec<_> = r
                .lengths
                .iter()
                .filter(|l| l.length <= t.letter_length)
                .collect();
            rows.sort_by_key(|l| l.length);
            let tested: Vec<String> = rows.iter().map(|l| l.length.to_string()).collect();
            let text = format!(
                "{}; lengths tested up to {}: {}",
                fmt_drop(length_drop(r, t).unwrap_or((None, 0)), t),
                t.letter_length,
                if tested.is_empty() {
                    "none".into()
                } else {
                    rows.iter()
                        .map(|l| format!("{} ({:.3})", l.length, l.accuracy))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
            let per_length = all_of(rows.iter().map(|l| {
                match accuracy_at_least(l.accuracy, l.n, t.length_accuracy) {
                    Outcome::Undetermined(why) => {
                        Outcome::Undetermined(format!("at length {}: {why}", l.length))
                    }
                    o => o,
                }
            }));
            let claimed = rows.iter().any(|l| l.length == t.letter_length);
            let outcome = match per_length {
                Outcome::Fails => Outcome::Fails,
                _ if !claimed => Outcome::undetermined(format!(
                    "length {} was not tested (tested up to it: {})",
                    t.letter_length,
                    if tested.is_empty() {
                        "none".into()
                    } else {
                        tested.join(", ")
                    }
                )),
                o => o,
            };
            (text, outcome)
        }),
        t,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last (and only) step's lines of a model: `types[layer][head]` as (s_pos, s_sym).
    fn lines(types: &[&[(f64, f64)]]) -> Vec<HeadStep> {
        let mut out = vec![];
        for (layer, heads) in types.iter().enumerate() {
            for (head, &(s_pos, s_sym)) in heads.iter().enumerate() {
                out.push(HeadStep {
                    step: 100,
                    layer,
                    head,
                    s_pos,
                    s_sym,
                    entropy: 1.0,
                    entropy_norm: 0.5,
                    pure_0_1: HeadKind::Mixed,
                    pure_0_05: HeadKind::Mixed,
                    freq_use: vec![],
                    freq_mean_plane: 0.0,
                    accuracy: 1.0,
                    accuracy_per_hop: BTreeMap::new(),
                    block: None,
                    planes: vec![],
                    run: String::new(),
                    settings: String::new(),
                });
            }
        }
        out
    }

    const P: (f64, f64) = (0.99, 0.01);
    const S: (f64, f64) = (0.01, 0.99);
    const M: (f64, f64) = (0.5, 0.5);

    #[test]
    fn one_head_per_layer_reads_one_letter_per_layer() {
        let scores = lines(&[&[M], &[P], &[P], &[M], &[S], &[S]]);
        assert_eq!(layer_types(&scores, Gamma::DEFAULT), "-PP-SS");
        assert_eq!(
            grid_text(&head_grid(&scores, Gamma::DEFAULT)),
            "layers -PP-SS"
        );
    }

    #[test]
    fn several_heads_per_layer_read_one_letter_per_head() {
        // Heads listed out of order still land in their columns.
        let mut scores = lines(&[&[P, M], &[P, S], &[S, S]]);
        scores.reverse();
        let grid = head_grid(&scores, Gamma::DEFAULT);
        assert_eq!(grid_letters(&grid), "P-|PS|SS");
        assert_eq!(layers_with(&grid, HeadKind::Positional), vec![0, 1]);
        assert_eq!(layers_with(&grid, HeadKind::Symbolic), vec![1, 2]);
        assert_eq!(heads_of(&grid, HeadKind::Symbolic), 3);
        assert_eq!(
            grid_text(&grid),
            "layers P-|PS|SS (2 positional heads in 2 layers, 3 symbolic heads)"
        );
    }
}
