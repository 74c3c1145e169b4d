//! The verdict per claim of the main paper (docs/study.md): each claim the study measures, the
//! paper's statement, this study's measured values, the explicit threshold, and whether it
//! holds, computed only from the files the study wrote (`scores.jsonl`, `metrics.jsonl`, the
//! test evaluation, `lengthgen.csv`, the theory CSVs). A claim without its numbers is "not
//! measured", never "holds".
//!
//! One function per claim: [`multi_hop`] (the trained models' claims), [`ablation`] (what
//! the trained models need, by knocking heads out), [`decay`] (the discrepancy law fitted on
//! the trained heads), [`theory`] (the
//! hand-built heads), [`offset`] (the implicit-bias paper), [`canonical`] (the frequency-band
//! paper); [`files`] reads what they measure; this module holds the thresholds, the verdict
//! rule and [`verdicts`], the list of them all.

pub mod ablation;
pub mod canonical;
pub mod compose;
pub mod decay;
pub mod files;
pub mod learning;
pub mod multi_hop;
pub mod offset;
pub mod theory;
pub mod verdict;

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::measure::dynamics::Gamma;

pub use files::{load_curve, Curve, RunFiles, SeedFiles, StudyFiles};
pub use multi_hop::{grid_letters, head_grid, heads_of, kind_letter, layer_types, layers_with};
pub use verdict::{
    accuracy_at_least, decide, spearman, spearman_interval, welch_difference, wilson, Category,
    Outcome, Tally, Verdict,
};

/// The thresholds every verdict uses (config keys of the study's `[claims]` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// A task is learned when its test accuracy reaches this.
    pub learned_accuracy: f64,
    /// Purity tolerance gamma (checked when it is parsed).
    pub gamma: Gamma,
    /// Fewest layers with a pure positional head in the number model.
    pub min_positional_layers: usize,
    /// A hop count is learned at the first evaluation where its validation accuracy reaches
    /// this.
    pub hop_accuracy: f64,
    /// Hop counts are learned "together" when their learned steps span at most this fraction
    /// of the training steps, and "one after another" when they span more (in order).
    pub hop_spread: f64,
    /// Accuracy "peaks" at the first checkpoint within this of the run's best accuracy.
    pub peak_tolerance: f64,
    /// A model generalises to a length while its accuracy stays at or above this.
    pub length_accuracy: f64,
    /// The letter model's first failing length must be at least this many times the number
    /// model's.
    pub length_ratio: f64,
    /// The letter model must stay above `length_accuracy` up to this many tokens (the paper:
    /// about 850, 53 times the 16-token context; 50 x 16 = 800 here).
    pub letter_length: usize,
    /// The Retrieval head's discrepancy must stay above this fraction of its value at n = 1
    /// for every n up to `retrieval_n`.
    pub retrieval_fraction: f64,
    /// The range of the Retrieval curve the paper plots (n up to 100).
    pub retrieval_n: usize,
    /// Fixed-offset retrieval: rotary softmax accuracy must reach `offset_accuracy` at this
    /// many times the training length.
    pub offset_factor: usize,
    /// Fixed-offset retrieval: the accuracy that counts as extrapolating.
    pub offset_accuracy: f64,
    /// Fixed-offset retrieval: at twice the training length, APE softmax accuracy at most this
    /// (chance is 1 / vocabulary).
    pub offset_fail_accuracy: f64,
    /// Fixed-offset retrieval: the dilution law fits a rotary softmax run when its prediction
    /// is within this of the measured target weight at every test length.
    pub dilution_error: f64,
    /// Fixed-offset retrieval: linear attention fails out of range when its accuracy at twice
    /// the training length is at most this.
    pub linear_fail_accuracy: f64,
    /// Canonical tasks: a band "fails" a task when its accuracy stays below this.
    pub canonical_fail_accuracy: f64,
    /// Hop map: a head reads hop j when it puts at least this attention mass on every
    /// position's own hop_j.
    pub hop_mass: f64,
    /// Fewest seeds a claim over seeds needs to hold (fewer is undetermined).
    pub min_seeds: usize,
    /// Ablation: a model needs a group of heads when knocking it out (mean ablation) leaves its
    /// test accuracy below this (the 95% Wilson interval entirely below).
    pub needed_accuracy: f64,
    /// Ablation: a model does not need a group when knocking it out leaves its test accuracy at
    /// or above this (the 95% Wilson interval entirely at or above).
    pub kept_accuracy: f64,
    /// Composing against one hop per layer (`composing_generalises_worse`): the composing
    /// models generalise worse when their mean accuracy on a composed hop count, at the first
    /// length beyond training, is at least this much below the one-hop-per-layer models'.
    pub compose_drop: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            learned_accuracy: 0.99,
            gamma: Gamma::DEFAULT,
            min_positional_layers: 2,
            hop_accuracy: 0.9,
            hop_spread: 0.1,
            peak_tolerance: 0.01,
            length_accuracy: 0.9,
            length_ratio: 4.0,
            letter_length: 800,
            retrieval_fraction: 0.1,
            retrieval_n: 100,
            offset_factor: 4,
            offset_accuracy: 0.9,
            offset_fail_accuracy: 0.2,
            dilution_error: 0.1,
            linear_fail_accuracy: 0.5,
            canonical_fail_accuracy: 0.95,
            hop_mass: crate::measure::hop_route::CARRY_MASS,
            min_seeds: 3,
            needed_accuracy: 0.5,
            kept_accuracy: 0.9,
            compose_drop: 0.05,
        }
    }
}

impl Thresholds {
    /// Checks every threshold's range (a study checks them when its config is parsed, before
    /// any training): the error names the key, its value and the range it must be in.
    pub fn check(&self) -> std::result::Result<(), String> {
        let within = |key: &str, v: f64, lo: f64, hi: f64, open_lo: bool| {
            let above = if open_lo { v > lo } else { v >= lo };
            if v.is_finite() && above && v <= hi {
                Ok(())
            } else {
                let bracket = if open_lo { "(" } else { "[" };
                // An unbounded range says so, not f64::MAX in 309 digits.
                let range = if hi == f64::MAX {
                    format!(
                        "a finite number {} {lo}",
                        if open_lo { "above" } else { "at least" }
                    )
                } else {
                    format!("in {bracket}{lo}, {hi}]")
                };
                Err(format!("{key} = {v} is out of range: it must be {range}"))
            }
        };
        // Tolerances may be 0; an accuracy, a mass or a drop of 0 would make its claim hold
        // (or fail) whatever was measured, so those lie in (0, 1].
        within("hop_spread", self.hop_spread, 0.0, 1.0, false)?;
        within("peak_tolerance", self.peak_tolerance, 0.0, 1.0, false)?;
        for (key, v) in [
            ("learned_accuracy", self.learned_accuracy),
            ("hop_accuracy", self.hop_accuracy),
            ("length_accuracy", self.length_accuracy),
            ("offset_accuracy", self.offset_accuracy),
            ("offset_fail_accuracy", self.offset_fail_accuracy),
            ("linear_fail_accuracy", self.linear_fail_accuracy),
            ("canonical_fail_accuracy", self.canonical_fail_accuracy),
            ("hop_mass", self.hop_mass),
            ("needed_accuracy", self.needed_accuracy),
            ("kept_accuracy", self.kept_accuracy),
            ("compose_drop", self.compose_drop),
        ] {
            within(key, v, 0.0, 1.0, true)?;
        }
        within(
            "retrieval_fraction",
            self.retrieval_fraction,
            0.0,
            1.0,
            true,
        )?;
        within("length_ratio", self.length_ratio, 0.0, f64::MAX, true)?;
        within("dilution_error", self.dilution_error, 0.0, f64::MAX, false)?;
        // A knock-out leaving accuracy between the two would count as needed and as not
        // needed at once (seventh pass, r12).
        if self.needed_accuracy > self.kept_accuracy {
            return Err(format!(
                "needed_accuracy = {} is above kept_accuracy = {}: a knock-out leaving accuracy \
                 between them would be both needed and not needed",
                self.needed_accuracy, self.kept_accuracy
            ));
        }
        for (key, v) in [
            ("letter_length", self.letter_length),
            ("retrieval_n", self.retrieval_n),
            ("offset_factor", self.offset_factor),
            ("min_seeds", self.min_seeds),
            ("min_positional_layers", self.min_positional_layers),
        ] {
            if v == 0 {
                return Err(format!("{key} must be at least 1"));
            }
        }
        Ok(())
    }
}

/// One claim's row of `claims.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// Short identifier.
    pub id: String,
    /// Empirical, or an exact check of a construction (counted apart).
    pub category: Category,
    /// What the paper says.
    pub paper: String,
    /// The threshold this verdict used, in words and numbers.
    pub threshold: String,
    /// What this study measured, per seed (or once, for the theory).
    pub measured: Vec<String>,
    /// Measurements (seeds, runs, curves) looked at.
    pub n: usize,
    /// Measurements meeting the threshold.
    pub holding: usize,
    /// Measurements failing it.
    pub failing: usize,
    /// Measurements that could not decide.
    pub undetermined: usize,
    /// Holds, does not hold, or undetermined (docs/study.md, "The verdict per claim").
    pub verdict: Verdict,
    /// Why the claim is undetermined (what is missing); None otherwise.
    pub reason: Option<String>,
}

impl Claim {
    /// A claim from its tallied measurements, needing at least `min_n` of them ([`decide`]).
    pub(crate) fn new(
        id: &str,
        category: Category,
        paper: &str,
        threshold: String,
        tally: Tally,
        min_n: usize,
    ) -> Self {
        let (verdict, reason) = decide(&tally, min_n);
        Claim {
            id: id.into(),
            category,
            paper: paper.into(),
            threshold,
            n: tally.n(),
            holding: tally.holding,
            failing: tally.failing,
            undetermined: tally.undetermined.len(),
            measured: tally.measured,
            verdict,
            reason,
        }
    }
}

/// One per-seed measurement: its text and its outcome.
pub(crate) type Measure = (String, Outcome);

/// Tallies `f` over the study's seeds, each labelled `seed S`.
pub(crate) fn per_seed(files: &StudyFiles, f: impl Fn(&SeedFiles) -> Measure) -> Tally {
    let mut tally = Tally::default();
    for s in &files.seeds {
        let (text, outcome) = f(s);
        tally.push(&format!("seed {}", s.seed), text, outcome);
    }
    tally
}

/// An empirical claim over the study's seeds: a seed whose files are missing is undetermined
/// (so every seed of the study counts), and it needs at least `min_seeds` holding seeds.
pub(crate) fn seed_claim(
    id: &str,
    paper: &str,
    threshold: String,
    tally: Tally,
    t: &Thresholds,
) -> Claim {
    Claim::new(
        id,
        Category::Empirical,
        paper,
        threshold,
        tally,
        t.min_seeds,
    )
}

/// The counts of a claims list: (holding, not holding, undetermined) among the claims of
/// `category`.
pub fn counts(claims: &[Claim], category: Category) -> (usize, usize, usize) {
    let of = |v: Verdict| {
        claims
            .iter()
            .filter(|c| c.category == category && c.verdict == v)
            .count()
    };
    (
        of(Verdict::Holds),
        of(Verdict::DoesNotHold),
        of(Verdict::Undetermined),
    )
}

/// The counts in words: `12 empirical claims: 8 hold, 2 do not hold, 2 undetermined; 2 exact
/// checks: 2 hold`.
pub fn counts_text(claims: &[Claim]) -> String {
    let mut parts = vec![];
    for (category, name) in [
        (Category::Empirical, "empirical claim"),
        (Category::ExactCheck, "exact check"),
    ] {
        let all = claims.iter().filter(|c| c.category == category).count();
        if all == 0 {
            continue;
        }
        let (h, f, u) = counts(claims, category);
        parts.push(format!(
            "{all} {name}{}: {h} hold, {f} do{} not hold, {u} undetermined",
            if all == 1 { "" } else { "s" },
            if f == 1 { "es" } else { "" }
        ));
    }
    parts.join("; ")
}

/// Every verdict of the study from its files, in the order of docs/study.md's table.
pub fn verdicts(files: &StudyFiles, t: &Thresholds) -> Vec<Claim> {
    let mut out = vec![
        multi_hop::both_tasks_learned(files, t),
        multi_hop::number_positional_then_symbolic(files, t),
        multi_hop::letter_all_symbolic(files, t),
        multi_hop::pure_before_accuracy_peak(files, t),
        learning::pure_heads_with_learning(files, t),
        multi_hop::number_hops_in_order(files, t),
        multi_hop::number_hops_composed(files, t),
        multi_hop::letter_hops_together(files, t),
        multi_hop::frequency_use(files, t),
        multi_hop::length_contrast(files, t),
        multi_hop::letter_50x_context(files, t),
        ablation::number_needs_positional(files, t),
        ablation::number_needs_symbolic(files, t),
        ablation::letter_needs_symbolic(files, t),
        ablation::letter_needs_only_symbolic(files, t),
        decay::discrepancy_rates(files, t),
        compose::composing_generalises_worse(files, t),
        theory::index_discrepancy_decays(files),
        theory::retrieval_discrepancy_holds(files, t),
    ];
    out.extend(offset::verdicts(files.offset.as_ref(), t));
    out.extend(canonical::verdicts(files.canonical.as_ref(), t));
    out
}

/// The verdicts as a text table.
pub fn table(claims: &[Claim]) -> String {
    let mut s = String::new();
    for c in claims {
        let (lo, hi) = wilson(c.holding, c.n);
        let _ = writeln!(
            s,
            "{:<32} {:<14} {} of {} hold, 95% {lo:.2}-{hi:.2} ({})",
            c.id,
            c.verdict.to_string(),
            c.holding,
            c.n,
            c.category
        );
        if let Some(why) = &c.reason {
            let _ = writeln!(s, "    why:       {why}");
        }
        let _ = writeln!(s, "    paper:     {}", c.paper);
        let _ = writeln!(s, "    threshold: {}", c.threshold);
        for m in &c.measured {
            let _ = writeln!(s, "    measured:  {m}");
        }
    }
    s.trim_end().to_owned()
}
