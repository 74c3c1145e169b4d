//! The trained models' claims (the main paper): what each model learned, its heads' types and
//! their frequency use, when each hop count is learned, and how far each model generalises in
//! length.

use std::collections::BTreeMap;

use ropelab_train::Accuracy;

use super::{claim, per_seed, Claim, RunFiles, StudyFiles, Thresholds};
use crate::measure::dynamics::{summarize_heads, Gamma, HeadKind, HeadStep};
use crate::measure::hop_route::HopRoute;
use crate::measure::hops::Source;
use crate::measure::lengthgen::first_length_below;

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

/// When each hop count of a run is learned: (description, every hop count learned, learned in
/// order of hop count, spread of the learned steps as a fraction of the run's steps).
fn hop_timing(r: &RunFiles, threshold: f64) -> (String, bool, bool, f64) {
    let steps = hop_steps(&r.val, threshold);
    let learned: Vec<usize> = steps.values().filter_map(|s| *s).collect();
    let all = learned.len() == steps.len();
    let ordered = learned.windows(2).all(|w| w[0] <= w[1]);
    let spread = learned.iter().max().unwrap_or(&0) - learned.iter().min().unwrap_or(&0);
    let text = format!(
        "learned at {} (spread {spread} of {} steps)",
        fmt_steps(&steps),
        r.steps
    );
    (text, all, ordered, spread as f64 / r.steps.max(1) as f64)
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

/// A run's length generalisation: the first tested length below the threshold (None: never),
/// and the longest tested length; None without `lengthgen.csv`.
fn length_drop(r: &Option<RunFiles>, t: &Thresholds) -> Option<(Option<usize>, usize)> {
    let r = r.as_ref().filter(|r| !r.lengths.is_empty())?;
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

/// `both_tasks_learned`: Both tasks learned: each model's test accuracy reaches the threshold.
pub fn both_tasks_learned(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "both_tasks_learned",
        "Both tasks are learned to about 100% test accuracy.",
        format!("test accuracy >= {} on both tasks", t.learned_accuracy),
        per_seed(files, |s| {
            let acc =
                |r: &Option<RunFiles>| r.as_ref().and_then(|r| r.test.as_ref()).map(|a| a.accuracy);
            match (acc(&s.number), acc(&s.letter)) {
                (Some(a), Some(b)) => (
                    format!("number {a:.4}, letter {b:.4}"),
                    Some(a >= t.learned_accuracy && b >= t.learned_accuracy),
                ),
                _ => ("no test evaluation".into(), None),
            }
        }),
        files.seeds.len(),
    )
}

/// `number_positional_then_symbolic`: The number model's layers: pure positional layers before pure symbolic ones.
pub fn number_positional_then_symbolic(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "number_positional_then_symbolic",
        "Number task: the early layers end as pure positional heads (they perform the hops), \
         the later layers as pure symbolic heads.",
        format!(
            "at the last checkpoint, gamma {}: >= {} layers with a pure positional head, >= 1 \
             pure symbolic head, every pure positional head in a layer below every pure \
             symbolic head (head types: P positional, S symbolic, - neither; one letter per \
             layer, or per head with the layers separated by | when a layer has several)",
            t.gamma, t.min_positional_layers
        ),
        per_seed(files, |s| match &s.number {
            Some(r) if !r.scores.is_empty() => {
                let grid = head_grid(&r.scores, t.gamma);
                let p = layers_with(&grid, HeadKind::Positional);
                let s = layers_with(&grid, HeadKind::Symbolic);
                let ok = p.len() >= t.min_positional_layers
                    && matches!((p.last(), s.first()), (Some(p), Some(s)) if p < s);
                (grid_text(&grid), Some(ok))
            }
            _ => ("no scores".into(), None),
        }),
        files.seeds.len(),
    )
}

/// `letter_all_symbolic`: The letter model: pure symbolic heads and no positional one.
pub fn letter_all_symbolic(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "letter_all_symbolic",
        "Letter task: the heads that become pure are all symbolic; there is no positional head.",
        format!(
            "at the last checkpoint, gamma {}: no pure positional head and >= 1 pure symbolic head",
            t.gamma
        ),
        per_seed(files, |s| match &s.letter {
            Some(r) if !r.scores.is_empty() => {
                let grid = head_grid(&r.scores, t.gamma);
                let ok = heads_of(&grid, HeadKind::Positional) == 0
                    && heads_of(&grid, HeadKind::Symbolic) > 0;
                (grid_text(&grid), Some(ok))
            }
            _ => ("no scores".into(), None),
        }),
        files.seeds.len(),
    )
}

/// `pure_before_accuracy_peak`: Accuracy peaks only once the heads are pure (both tasks).
pub fn pure_before_accuracy_peak(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "pure_before_accuracy_peak",
        "Test accuracy peaks only once the heads are pure.",
        format!(
            "per task, the last step at which a head that ends pure (gamma {}) becomes pure for \
             good is <= the first checkpoint whose test accuracy is within {} of the run's best",
            t.gamma, t.peak_tolerance
        ),
        per_seed(files, |s| {
            let mut parts = vec![];
            let mut ok = Some(true);
            for (name, run) in [("number", &s.number), ("letter", &s.letter)] {
                let Some(r) = run.as_ref().filter(|r| !r.scores.is_empty()) else {
                    return ("no scores".into(), None);
                };
                let Ok(summary) = summarize_heads(&r.scores, t.gamma) else {
                    return ("bad gamma".into(), None);
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
                        if p > k {
                            ok = Some(false);
                        }
                    }
                    _ => {
                        parts.push(format!("{name}: no pure head"));
                        ok = Some(false);
                    }
                }
            }
            (parts.join("; "), ok)
        }),
        files.seeds.len(),
    )
}

/// `number_hops_in_order`: Number task: hop counts learned one after another, in order.
pub fn number_hops_in_order(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "number_hops_in_order",
        "Number task: hop counts are learned one after another, 1 hop first.",
        format!(
            "step at which each hop count's validation accuracy first reaches {}: \
             non-decreasing in the hop count, spanning more than {} of the training steps",
            t.hop_accuracy, t.hop_spread
        ),
        per_seed(files, |s| match &s.number {
            Some(r) if !r.val.is_empty() => {
                let (text, all, ordered, spread) = hop_timing(r, t.hop_accuracy);
                (text, Some(all && ordered && spread > t.hop_spread))
            }
            _ => ("no validation metrics".into(), None),
        }),
        files.seeds.len(),
    )
}

/// `number_hops_composed`: the main paper's open question (shortcuts): does a layer of the
/// number model compose hops, reading further along the chain than one hop per layer allows
/// (pointer doubling)? Reported as measured from the hop map ([`HopRoute`]).
pub fn number_hops_composed(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "number_hops_composed",
        "Open question (shortcuts): the number model composes hops, a layer reading further \
         along a position's own chain than one hop per layer allows (e.g. pointer doubling: \
         hop 1, then 2, then 4).",
        format!(
            "hop map of the last checkpoint (hops.csv, every position): a layer reads hop j \
             when a head puts >= {} of the attention on hop_j; holds when some layer reads a \
             hop past 1 + the hops its lower layers read",
            t.hop_mass
        ),
        per_seed(files, |s| match &s.number {
            Some(r) if !r.hops.is_empty() => {
                let route = HopRoute::of(&r.hops, t.hop_mass);
                let (drop, layer) = route.layers.iter().map(|l| (l.drop, l.layer)).fold(
                    ((f64::NEG_INFINITY, 0, Source::Last, 0), 0),
                    |a, b| {
                        if b.0 .0 > a.0 .0 {
                            b
                        } else {
                            a
                        }
                    },
                );
                let from = match drop.2 {
                    Source::Last => "last",
                    Source::Every => "every",
                };
                let text = format!(
                    "{}; largest knock-out drop {:.3} (L{layer}H{} from {from}, j = {})",
                    route.summary(),
                    drop.0,
                    drop.1,
                    drop.3
                );
                (text, Some(route.composes()))
            }
            _ => ("no hop map (hops.csv)".into(), None),
        }),
        files.seeds.len(),
    )
}

/// `letter_hops_together`: Letter task: hop counts learned together.
pub fn letter_hops_together(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "letter_hops_together",
        "Letter task: hop counts are learned almost together.",
        format!(
            "step at which each hop count's validation accuracy first reaches {}: all within {} \
             of the training steps",
            t.hop_accuracy, t.hop_spread
        ),
        per_seed(files, |s| match &s.letter {
            Some(r) if !r.val.is_empty() => {
                let (text, all, _, spread) = hop_timing(r, t.hop_accuracy);
                (text, Some(all && spread <= t.hop_spread))
            }
            _ => ("no validation metrics".into(), None),
        }),
        files.seeds.len(),
    )
}

/// `frequency_use`: Positional heads use lower plane ids (higher frequencies) than symbolic heads.
pub fn frequency_use(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "frequency_use",
        "Positional heads use high RoPE frequencies (low plane ids), symbolic heads low \
         frequencies (high plane ids).",
        format!(
            "at the last checkpoint of both models, the mean over pure positional heads (gamma \
             {}) of the frequency-weighted mean plane id is below the mean over pure symbolic heads",
            t.gamma
        ),
        per_seed(files, |s| {
            let (mut p, mut q) = (vec![], vec![]);
            for r in [&s.number, &s.letter].into_iter().flatten() {
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
                return ("no pure positional or no pure symbolic head".into(), None);
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
                Some(mean(&p) < mean(&q)),
            )
        }),
        files.seeds.len(),
    )
}

/// `length_contrast`: The letter model's first failing length against the number model's.
pub fn length_contrast(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "length_contrast",
        "Length generalisation: the letter model stays accurate far beyond its training length \
         while the number model collapses almost at once.",
        format!(
            "the first tested length where the letter model's accuracy falls below {} is >= {} \
             times the number model's (a model that never falls counts with its longest tested \
             length)",
            t.length_accuracy, t.length_ratio
        ),
        per_seed(files, |s| {
            match (length_drop(&s.number, t), length_drop(&s.letter, t)) {
                (Some(a), Some(b)) => {
                    let letter = b.0.unwrap_or(b.1) as f64;
                    let ok = match a.0 {
                        Some(num) => letter >= t.length_ratio * num as f64,
                        None => false,
                    };
                    (
                        format!("number {}; letter {}", fmt_drop(a, t), fmt_drop(b, t)),
                        Some(ok),
                    )
                }
                _ => ("no lengthgen.csv".into(), None),
            }
        }),
        files.seeds.len(),
    )
}

/// `letter_50x_context`: The letter model stays accurate to 50 times its context.
pub fn letter_50x_context(files: &StudyFiles, t: &Thresholds) -> Claim {
    claim(
        "letter_50x_context",
        "A letter-task model stays above 90% accuracy up to length about 850, about 53 times \
         its 16-token context.",
        format!(
            "letter accuracy >= {} at every tested length up to {} tokens (50 x 16), with a \
             length of at least {} tested",
            t.length_accuracy, t.letter_length, t.letter_length
        ),
        per_seed(files, |s| match length_drop(&s.letter, t) {
            Some(d) if d.1 >= t.letter_length => {
                let ok = d.0.is_none_or(|l| l > t.letter_length);
                (fmt_drop(d, t), Some(ok))
            }
            Some(d) => (format!("longest tested length {} is too short", d.1), None),
            None => ("no lengthgen.csv".into(), None),
        }),
        files.seeds.len(),
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
