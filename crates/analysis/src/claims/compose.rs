//! `composing_generalises_worse`: the main paper's conjecture that shortcuts could worsen
//! length generalisation, tested on the study's `[compose]` models (number models with fewer
//! layers than hops, which cannot work one hop per layer) against its one-hop-per-layer number
//! models of the same seeds (docs/multihead.md, "A model with fewer layers than hops").

use super::files::{RunFiles, StudyFiles};
use super::verdict::{welch_difference, Category, Outcome, Tally};
use super::{Claim, Thresholds};

/// Layers of a model, from its scored heads (None without scores).
fn layers(r: &RunFiles) -> Option<usize> {
    r.scores.iter().map(|l| l.layer + 1).max()
}

/// A model's accuracy on `hop`-hop samples at the first tested length beyond training, from
/// the last checkpoint's `lengthgen.csv` rows: (tokens, accuracy).
fn first_beyond(r: &RunFiles, hop: usize) -> Option<(usize, f64)> {
    let last = r.lengths.iter().map(|l| l.step).max()?;
    r.lengths
        .iter()
        .filter(|l| l.step == last && l.extra > 0)
        .min_by_key(|l| l.extra)
        .and_then(|l| l.per_hop.get(&hop).map(|&a| (l.length, a)))
}

/// A model's test accuracy on `hop`-hop samples (the full test split).
fn learned_hop(r: &RunFiles, hop: usize) -> Option<f64> {
    r.test.as_ref().and_then(|t| t.per_hop.get(&hop).copied())
}

fn values(v: &[f64]) -> String {
    v.iter()
        .map(|a| format!("{a:.2}"))
        .collect::<Vec<_>>()
        .join("/")
}

/// `composing_generalises_worse` (docs/study.md): per hop count the composing models must
/// compose (more hops than their layers), over the seeds where both the composing and the
/// one-hop-per-layer model answer it at >= `hop_accuracy` on the test split (equal accuracy at
/// the training length), the difference d of their mean accuracies at the first tested length
/// beyond training (composing minus one hop per layer) with its Welch 95% interval: the hop
/// count holds when d <= -`compose_drop` and the interval lies below 0, does not hold when the
/// interval lies above -`compose_drop`, and is undetermined otherwise or with fewer than 2 such
/// seeds. Over hop counts as every claim ([`super::decide`]).
pub fn composing_generalises_worse(files: &StudyFiles, t: &Thresholds) -> Claim {
    let paper = "Conjecture (shortcuts): a model that composes hops rather than taking one per \
                 layer could generalise worse to longer inputs.";
    let threshold = format!(
        "per hop count h the [compose] models must compose (h > their layers), over the seeds \
         where both the composing and the one-hop-per-layer number model answer h-hop test \
         samples at >= {} (equal accuracy at the training length): d = mean accuracy of the \
         composing models minus the one-hop models' on h-hop samples at the first tested length \
         beyond training, with a Welch 95% interval over seeds; holds when d <= -{} and the \
         interval lies below 0, does not hold when it lies above -{}, undetermined otherwise or \
         with fewer than 2 such seeds",
        t.hop_accuracy, t.compose_drop, t.compose_drop
    );
    let claim = |tally: Tally| {
        Claim::new(
            "composing_generalises_worse",
            Category::Empirical,
            paper,
            threshold.clone(),
            tally,
            1,
        )
    };
    let pairs: Vec<(u64, &RunFiles, &RunFiles)> = files
        .seeds
        .iter()
        .filter_map(|s| Some((s.seed, s.compose.as_ref()?, s.number.as_ref()?)))
        .collect();
    let mut tally = Tally::default();
    let Some(&(_, first, _)) = pairs.first() else {
        tally.push(
            "",
            "no composing model".into(),
            Outcome::undetermined(
                "not measured: the study has no [compose] stage (docs/multihead.md)",
            ),
        );
        return claim(tally);
    };
    let Some(depth) = layers(first) else {
        tally.push(
            "",
            "no scores".into(),
            Outcome::undetermined("not measured: the composing model has no scores.jsonl"),
        );
        return claim(tally);
    };
    let hops: Vec<usize> = first
        .test
        .as_ref()
        .map(|a| a.per_hop.keys().copied().filter(|&h| h > depth).collect())
        .unwrap_or_default();
    if hops.is_empty() {
        tally.push(
            "",
            format!("{depth} layers"),
            Outcome::undetermined(format!(
                "no hop count above the composing models' {depth} layers was tested"
            )),
        );
        return claim(tally);
    }
    for h in hops {
        let label = format!("{h} hops");
        let (mut composing, mut one_hop, mut seeds, mut tokens) = (vec![], vec![], vec![], None);
        for &(seed, c, n) in &pairs {
            let learned = |r: &RunFiles| learned_hop(r, h).is_some_and(|a| a >= t.hop_accuracy);
            if !(learned(c) && learned(n)) || layers(c) != Some(depth) {
                continue;
            }
            if let (Some((len, a)), Some((_, b))) = (first_beyond(c, h), first_beyond(n, h)) {
                composing.push(a);
                one_hop.push(b);
                seeds.push(seed.to_string());
                tokens = Some(len);
            }
        }
        let Some((d, lo, hi)) = welch_difference(&one_hop, &composing) else {
            tally.push(
                &label,
                format!(
                    "both learned in {} seed(s) ({})",
                    seeds.len(),
                    seeds.join(", ")
                ),
                Outcome::undetermined(format!(
                    "{label}: fewer than 2 seeds where both models answer it at >= {}",
                    t.hop_accuracy
                )),
            );
            continue;
        };
        let text = format!(
            "at {} tokens, seeds {}: {depth} layers (composing) {}, one hop per layer {}; d \
             {d:+.3}, 95% interval [{lo:+.3}, {hi:+.3}]",
            tokens.unwrap_or(0),
            seeds.join("/"),
            values(&composing),
            values(&one_hop)
        );
        let outcome = if d <= -t.compose_drop && hi < 0.0 {
            Outcome::Holds
        } else if lo > -t.compose_drop {
            Outcome::Fails
        } else {
            Outcome::undetermined(format!(
                "{label}: the interval [{lo:+.3}, {hi:+.3}] cannot separate d from 0 and -{}",
                t.compose_drop
            ))
        };
        tally.push(&label, text, outcome);
    }
    claim(tally)
}
