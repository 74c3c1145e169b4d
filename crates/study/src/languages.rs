//! The expressivity experiment (docs/languages.md): 5-layer EOS classifiers trained on formal
//! languages at short lengths with each position encoding, tested at longer lengths, and N*,
//! the longest length up to which every tested length is classified perfectly.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, ensure, Result};
pub use ropelab_analysis::measure::languages::{
    n_star, offset_rows, LengthRow, NStarRow, OffsetRow, Pe, PERIODS,
};
pub use ropelab_analysis::measure::modular::{ModHeadRow, MOD_THRESHOLD};
use ropelab_model::{AttentionKind, Head, ModelConfig, Objective};
pub use ropelab_sweep::measure::language::HEAD_STRINGS;
use ropelab_sweep::{Job, MeasureOptions};
use ropelab_tasks::{language, Language, Layout, Negatives, TaskKind};
use ropelab_train::lengths::LengthAccuracy;
use ropelab_train::{DataConfig, LanguageData, OptimConfig, RunConfig};
use toml::Value;

use crate::{grid, Progress};

/// The offset a conventional-RoPE head looks back in `offset.csv` (the previous symbol, what
/// `(ab)*` and `Sigma* ab Sigma*` need).
pub const OFFSET_K: usize = 1;

/// Multiples of the minimal score scale in `offset.csv`.
pub const OFFSET_SCALES: [f64; 3] = [1.0, 10.0, 100.0];

/// Longest range `offset.csv` searches.
pub const OFFSET_CAP: usize = 1_000_000;

/// How much to train and test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// What fits about 30 minutes on 2 cores (docs/languages.md).
    Quick,
    /// The paper's: 1,000,000 steps at batch 128, 5 seeds x 3 learning rates, 512 strings at
    /// every test length (cluster scale).
    Paper,
}

impl FromStr for Protocol {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "quick" => Ok(Protocol::Quick),
            "paper" => Ok(Protocol::Paper),
            other => bail!("unknown protocol {other:?} (expected quick or paper)"),
        }
    }
}

/// Everything one experiment runs: the grid and the training and test settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    /// Languages.
    pub languages: Vec<Language>,
    /// Position encodings.
    pub pes: Vec<Pe>,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Peak learning rates.
    pub lrs: Vec<f64>,
    /// Optimizer steps per run.
    pub steps: usize,
    /// Strings per batch.
    pub batch: usize,
    /// Shortest and longest training string.
    pub train_lengths: [usize; 2],
    /// Tested lengths longer than the training ones (ascending).
    pub test_lengths: Vec<usize>,
    /// Strings per tested length (at the training lengths too).
    pub per_length: usize,
    /// How negatives are drawn.
    pub negatives: Negatives,
}

impl Experiment {
    /// The protocol's settings for a grid; `None` keeps the protocol's defaults.
    pub fn new(
        protocol: Protocol,
        languages: Option<Vec<Language>>,
        pes: Option<Vec<Pe>>,
        seeds: Option<Vec<u64>>,
        lrs: Option<Vec<f64>>,
    ) -> Result<Self> {
        let e = match protocol {
            Protocol::Quick => Experiment {
                languages: vec![Language::EvenA, Language::AbStar, Language::EndsA],
                pes: vec![Pe::RopePeriodic, Pe::Nope, Pe::Rope(1e4), Pe::Rope(1.0)],
                seeds: vec![0],
                lrs: vec![1e-3],
                steps: 1200,
                batch: 64,
                train_lengths: [1, 40],
                test_lengths: (41..=120).chain((140..=500).step_by(20)).collect(),
                per_length: 32,
                negatives: Negatives::Uniform,
            },
            Protocol::Paper => Experiment {
                languages: Language::ALL.to_vec(),
                pes: [Pe::Nope, Pe::RopePeriodic, Pe::SipePeriodic]
                    .into_iter()
                    .chain([1e-12, 1e-8, 1e-4, 1.0, 1e4, 1e8, 1e12].map(Pe::Rope))
                    .chain([Pe::Sipe(1e4)])
                    .collect(),
                seeds: (0..5).collect(),
                lrs: vec![1e-4, 3e-4, 5e-4],
                steps: 1_000_000,
                batch: 128,
                train_lengths: [1, 40],
                test_lengths: (41..=500).collect(),
                per_length: 512,
                negatives: Negatives::Uniform,
            },
        };
        let e = Experiment {
            languages: languages.unwrap_or(e.languages),
            pes: pes.unwrap_or(e.pes),
            seeds: seeds.unwrap_or(e.seeds),
            lrs: lrs.unwrap_or(e.lrs),
            ..e
        };
        e.check()?;
        Ok(e)
    }

    /// Checks the grid and the lengths.
    pub fn check(&self) -> Result<()> {
        for (what, empty) in [
            ("languages", self.languages.is_empty()),
            ("position encodings", self.pes.is_empty()),
            ("seeds", self.seeds.is_empty()),
            ("learning rates", self.lrs.is_empty()),
        ] {
            ensure!(!empty, "the experiment needs at least one of its {what}");
        }
        for &lr in &self.lrs {
            ropelab_train::check_lr("learning rate", lr)?;
        }
        grid::each_once(
            "the languages",
            self.languages.iter().map(|l| l.to_string()),
        )?;
        grid::each_once(
            "the position encodings",
            self.pes.iter().map(|p| p.to_string()),
        )?;
        grid::each_once("the seeds", self.seeds.iter().map(|s| s.to_string()))?;
        grid::each_once("the learning rates", self.lrs.iter().map(|r| r.to_string()))?;
        let [lo, hi] = self.train_lengths;
        ensure!(
            1 <= lo && lo <= hi,
            "training lengths [{lo}, {hi}] are not a range"
        );
        if let Some(&t) = self.test_lengths.iter().find(|&&t| t <= hi) {
            bail!("test length {t} is not longer than the training lengths (up to {hi})");
        }
        ensure!(
            self.test_lengths.windows(2).all(|w| w[0] < w[1]),
            "test lengths must be ascending"
        );
        // N* over lengths with one label only would count a constant answer as generalising.
        for language in &self.languages {
            if let Some(why) = language.one_label(lo..=hi) {
                bail!("training lengths [{lo}, {hi}] of {language}: {why}");
            }
            if let Some(why) = language.one_label(self.test_lengths.iter().copied()) {
                bail!("test lengths of {language}: {why}; test lengths with both labels");
            }
        }
        let need = ropelab_analysis::measure::languages::mod_heads_need(hi);
        if let Some(&longest) = self.test_lengths.last().filter(|&&t| t < need) {
            bail!(
                "the longest test length {longest} leaves {} positions beyond the training \
                 lengths (up to {hi}); the MOD heads are scored on at least {} of them (every \
                 residue of period {}): test up to {need} or more",
                longest - hi,
                need - hi,
                need - hi
            );
        }
        ensure!(
            self.steps >= 1 && self.batch >= 1 && self.per_length >= 1,
            "steps, batch and strings per length must be at least 1"
        );
        Ok(())
    }

    /// The run config of one grid point.
    pub fn run_config(&self, language: Language, pe: Pe, seed: u64, lr: f64) -> RunConfig {
        let (d_model, n_heads) = (64, 8);
        let model = ModelConfig {
            vocab_size: language::vocab().len(),
            n_layers: 5,
            n_heads,
            d_model,
            d_mlp: 256,
            ln_eps: 1e-5,
            dropout: 0.0,
            tied_embeddings: false,
            position: pe.encoding(d_model / n_heads),
            layer_positions: vec![],
            attention: AttentionKind::Softmax,
            mlp: true,
            layer_norm: true,
            head: Head::Classifier { classes: 2 },
        };
        RunConfig {
            preset: "languages".into(),
            task: TaskKind::Language,
            seed,
            objective: Objective::EosClass,
            layout: Layout::default(),
            language: Some(LanguageData {
                name: language,
                lengths: self.train_lengths,
                negatives: self.negatives,
            }),
            offset: None,
            canonical: None,
            ambiguous: None,
            position_shift: 0,
            precision: Default::default(),
            data: DataConfig {
                train: self.steps.saturating_mul(self.batch),
                val: 4 * (self.train_lengths[1] - self.train_lengths[0] + 1),
                test: self.per_length,
            },
            model,
            optim: OptimConfig::adamw(self.steps, self.batch, lr),
        }
    }

    /// Every grid point: (language, encoding, seed, learning rate).
    pub fn grid(&self) -> Vec<(Language, Pe, u64, f64)> {
        let mut out = vec![];
        for &l in &self.languages {
            for &pe in &self.pes {
                for &seed in &self.seeds {
                    for &lr in &self.lrs {
                        out.push((l, pe, seed, lr));
                    }
                }
            }
        }
        out
    }
}

/// The run directory of one grid point.
pub fn run_dir(out: &Path, language: Language, pe: Pe, seed: u64, lr: f64) -> PathBuf {
    let pe = pe.to_string().replace(':', "-");
    out.join("runs")
        .join(language.name())
        .join(pe)
        .join(format!("seed-{seed}-lr-{lr:e}"))
}

/// What one experiment measured (each also written to `out/`).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// N* per run, in grid order (`nstar.csv`).
    pub nstar: Vec<NStarRow>,
    /// Every head's fit to MOD_m^r for each period of [`PERIODS`] (`heads.csv`).
    pub heads: Vec<ModHeadRow>,
    /// Conventional-RoPE runs' N* beside the certified fixed-offset range (`offset.csv`).
    pub offsets: Vec<OffsetRow>,
}

impl Experiment {
    /// Every grid point as a sweep job in its run directory ([`run_dir`], relative to the
    /// experiment's directory).
    pub fn jobs(&self) -> Vec<Job> {
        self.grid()
            .into_iter()
            .map(|(language, pe, seed, lr)| {
                let params = [
                    ("language", Value::String(language.name().into())),
                    ("pe", Value::String(pe.to_string())),
                    ("seed", Value::Integer(seed as i64)),
                    ("lr", Value::Float(lr)),
                ];
                let config = self.run_config(language, pe, seed, lr);
                grid::job(
                    &params,
                    config,
                    run_dir(Path::new(""), language, pe, seed, lr),
                )
            })
            .collect()
    }

    /// What running the experiment in `out` needs (its jobs trained and measured, `parallel`
    /// at a time): the one estimate every entry point checks.
    pub fn need(&self, out: &Path, parallel: Option<usize>) -> ropelab_io::Need {
        grid::need(&self.jobs(), out, &self.measure_options(), parallel)
    }

    /// What every job measures: accuracy at the training and test lengths, `per_length`
    /// strings each, and the MOD heads.
    pub fn measure_options(&self) -> MeasureOptions {
        MeasureOptions {
            lengths: Some(self.test_lengths.clone()),
            per_length: self.per_length,
            heads: true,
            ..MeasureOptions::default()
        }
    }
}

/// Trains (or reuses) every grid point's model in `out/runs/...` as a sweep job (`parallel`
/// at a time, default one per core), each tested at the training and test lengths with its
/// heads scored for MOD predicates (`ropelab_sweep::measure::language`), and writes
/// `out/accuracy.csv`, `out/nstar.csv`, `out/heads.csv` and `out/offset.csv` from the runs'
/// files.
pub fn run(
    experiment: &Experiment,
    out: &Path,
    parallel: Option<usize>,
    progress: &dyn Progress,
) -> Result<Outcome> {
    experiment.check()?;
    let jobs = experiment.jobs();
    grid::run(
        &jobs,
        out,
        &experiment.measure_options(),
        parallel,
        progress,
    )?;
    let mut outcome = Outcome {
        nstar: vec![],
        heads: vec![],
        offsets: vec![],
    };
    let mut all = vec![];
    let hi = experiment.train_lengths[1];
    for (language, pe, seed, lr) in experiment.grid() {
        let dir = run_dir(out, language, pe, seed, lr);
        let rows: Vec<LengthAccuracy> =
            ropelab_sweep::measure::read_run_lengths(&dir, Some(&experiment.test_lengths), true)?;
        let heads: Vec<ModHeadRow> = ropelab_sweep::measure::read_run_csv(&dir, "heads.csv")?;
        let mean = |test: bool| {
            let part: Vec<f64> = rows
                .iter()
                .filter(|r| (r.length > hi) == test)
                .map(|r| r.accuracy())
                .collect();
            part.iter().sum::<f64>() / part.len().max(1) as f64
        };
        let run_row = NStarRow {
            language: language.name().into(),
            pe: pe.kind().into(),
            base: pe.base(),
            seed,
            lr,
            train_accuracy: mean(false),
            accuracy: mean(true),
            n_star: n_star(&rows, hi),
            max_len: rows.last().map_or(0, |r| r.length),
        };
        if let Pe::Rope(base) = pe {
            let d_head = experiment.run_config(language, pe, seed, lr).model.d_head();
            outcome.offsets.extend(offset_rows(
                &run_row,
                base,
                d_head,
                OFFSET_K,
                &OFFSET_SCALES,
                OFFSET_CAP,
            )?);
        }
        all.extend(rows.iter().map(|r| LengthRow {
            language: language.name().into(),
            pe: pe.kind().into(),
            base: pe.base(),
            seed,
            lr,
            length: r.length,
            n: r.n,
            accuracy: r.accuracy(),
            trained: r.length <= hi,
        }));
        outcome.nstar.push(run_row);
        outcome.heads.extend(heads);
    }
    crate::record_csv(&out.join("accuracy.csv"), "languages", &all)?;
    crate::record_csv(&out.join("nstar.csv"), "languages", &outcome.nstar)?;
    crate::record_csv(&out.join("heads.csv"), "languages", &outcome.heads)?;
    crate::record_csv(&out.join("offset.csv"), "languages", &outcome.offsets)?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_parse_and_bad_ones_are_one_line_errors() {
        assert_eq!("rope:1e4".parse::<Pe>().unwrap(), Pe::Rope(1e4));
        assert_eq!("sipe:1e-12".parse::<Pe>().unwrap(), Pe::Sipe(1e-12));
        assert_eq!("nope".parse::<Pe>().unwrap(), Pe::Nope);
        assert_eq!("rope-periodic".parse::<Pe>().unwrap(), Pe::RopePeriodic);
        assert_eq!(Pe::Rope(1e-8).to_string(), "rope:1e-8");
        for (bad, want) in [
            ("rope:0", "must lie in"),
            ("rope:-1", "must lie in"),
            ("sipe:inf", "must lie in"),
            ("rope:1e300", "must lie in"),
            ("rope:abc", "not a number"),
            ("alibi", "unknown position encoding"),
            ("rope", "unknown position encoding"),
        ] {
            let err = bad.parse::<Pe>().unwrap_err().to_string();
            assert!(err.contains(want), "{bad}: {err}");
        }
        // Every encoding gives a model that passes its own check.
        let e = Experiment::new(Protocol::Paper, None, None, None, None).unwrap();
        for pe in &e.pes {
            let c = e.run_config(Language::Parity, *pe, 0, 1e-4);
            c.check().unwrap_or_else(|err| panic!("{pe}: {err}"));
        }
    }

    #[test]
    fn protocols_and_bad_grids() {
        let quick = Experiment::new(Protocol::Quick, None, None, None, None).unwrap();
        assert_eq!(quick.grid().len(), 12);
        let paper = Experiment::new(Protocol::Paper, None, None, None, None).unwrap();
        assert_eq!(paper.grid().len(), 6 * 11 * 5 * 3);
        assert_eq!(paper.test_lengths.len(), 460);
        let mut e = quick.clone();
        e.test_lengths = vec![30, 50];
        assert!(e
            .check()
            .unwrap_err()
            .to_string()
            .contains("test length 30"));
        let err = Experiment::new(Protocol::Quick, Some(vec![]), None, None, None).unwrap_err();
        assert!(err.to_string().contains("languages"));
        let err = Experiment::new(Protocol::Quick, None, None, None, Some(vec![0.0])).unwrap_err();
        assert!(err.to_string().contains("learning rate"));
        // Odd test lengths of (aa)* and (ab)* hold non-members only: "no" would be perfect
        // there, and N* would count it as generalising (issue 55, f07).
        let mut e = quick.clone();
        let need = ropelab_analysis::measure::languages::mod_heads_need(40);
        e.test_lengths = (41..=need + 1).step_by(2).collect();
        let err = e.check().unwrap_err().to_string();
        assert!(
            err.contains("test lengths of aa-star") && err.contains("answers no"),
            "{err}"
        );
        e.test_lengths = (41..=need + 1).collect();
        e.check().expect("odd and even lengths");
    }
}
