//! The expressivity experiment (docs/languages.md): 5-layer EOS classifiers trained on formal
//! languages at short lengths with each position encoding, tested at longer lengths, and N*,
//! the longest length up to which every tested length is classified perfectly.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, ensure, Context, Result};
use candle_core::Device;
pub use ropelab_analysis::languages::{n_star, offset_rows, LengthRow, NStarRow, OffsetRow};
use ropelab_analysis::modular::{bos_curves, mod_head_rows, RunLabel};
pub use ropelab_analysis::modular::{ModHeadRow, MOD_THRESHOLD};
use ropelab_io::{read_csv_file, write_csv};
use ropelab_model::{
    AttentionKind, Head, ModelConfig, Objective, PeriodicTables, PositionEncoding,
};
use ropelab_tasks::{language, Language, LanguageSamples, Layout, Negatives, Split, TaskKind};
use ropelab_train::language_data::{accuracy_at_lengths, LengthAccuracy};
use ropelab_train::{
    DataConfig, LanguageData, OptimConfig, Retention, RunConfig, RunDir, Trainer, EVAL_MEMORY,
};

use crate::job::train_with_progress;
use crate::Progress;

/// The periods of the periodic encodings' planes (uniform tables, T_m(s) = 2 pi s / m): period
/// 2 gives the parity of a position (enough for `(aa)*` and `(ab)*`), and 2, 3, 5, 7 together
/// tell positions apart modulo 210.
pub const PERIODS: [usize; 4] = [2, 3, 5, 7];

/// The offset a conventional-RoPE head looks back in `offset.csv` (the previous symbol, what
/// `(ab)*` and `Sigma* ab Sigma*` need).
pub const OFFSET_K: usize = 1;

/// Multiples of the minimal score scale in `offset.csv`.
pub const OFFSET_SCALES: [f64; 3] = [1.0, 10.0, 100.0];

/// Longest range `offset.csv` searches.
pub const OFFSET_CAP: usize = 1_000_000;

/// Strings whose heads are scored for MOD predicates, at the longest tested length.
pub const HEAD_STRINGS: usize = 4;

/// One position encoding of the experiment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pe {
    /// No position encoding.
    Nope,
    /// Conventional RoPE at a base, on every dim of each head.
    Rope(f64),
    /// Sinusoidal absolute encoding at a base.
    Sipe(f64),
    /// Periodic RoPE: the planes of [`PERIODS`] (the rest of each head passes unrotated).
    RopePeriodic,
    /// Periodic sinusoidal absolute encoding with [`PERIODS`].
    SipePeriodic,
}

impl Pe {
    /// The kind without its base (`nope`, `rope`, `sipe`, `rope-periodic`, `sipe-periodic`).
    pub fn kind(&self) -> &'static str {
        match self {
            Pe::Nope => "nope",
            Pe::Rope(_) => "rope",
            Pe::Sipe(_) => "sipe",
            Pe::RopePeriodic => "rope-periodic",
            Pe::SipePeriodic => "sipe-periodic",
        }
    }

    /// The base of a conventional encoding.
    pub fn base(&self) -> Option<f64> {
        match self {
            Pe::Rope(b) | Pe::Sipe(b) => Some(*b),
            _ => None,
        }
    }

    /// The model's encoding for heads of `d_head` dims.
    pub fn encoding(&self, d_head: usize) -> PositionEncoding {
        let layout = ropelab_model::RopeLayout::Interleaved;
        match *self {
            Pe::Nope => PositionEncoding::None,
            Pe::Rope(base) => PositionEncoding::rope(base, d_head, layout),
            Pe::Sipe(base) => PositionEncoding::Sinusoidal { base },
            Pe::RopePeriodic => PositionEncoding::Periodic {
                periods: PERIODS.to_vec(),
                tables: PeriodicTables::default(),
                layout,
                planes: Default::default(),
            },
            Pe::SipePeriodic => PositionEncoding::PeriodicSinusoidal {
                periods: PERIODS.to_vec(),
                tables: PeriodicTables::default(),
            },
        }
    }
}

impl fmt::Display for Pe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.base() {
            Some(b) => write!(f, "{}:{b:e}", self.kind()),
            None => f.write_str(self.kind()),
        }
    }
}

impl FromStr for Pe {
    type Err = anyhow::Error;
    /// `nope`, `rope:BASE`, `sipe:BASE`, `rope-periodic` or `sipe-periodic`.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let base = |text: &str| -> Result<f64> {
            let b: f64 = text
                .parse()
                .with_context(|| format!("position encoding {s:?}: {text:?} is not a number"))?;
            ensure!(
                b.is_finite() && b > 0.0,
                "position encoding {s:?}: the base must be positive and finite, got {b}"
            );
            Ok(b)
        };
        Ok(match s.split_once(':') {
            Some(("rope", b)) => Pe::Rope(base(b)?),
            Some(("sipe", b)) => Pe::Sipe(base(b)?),
            None if s == "nope" => Pe::Nope,
            None if s == "rope-periodic" => Pe::RopePeriodic,
            None if s == "sipe-periodic" => Pe::SipePeriodic,
            _ => bail!(
                "unknown position encoding {s:?} (expected nope, rope:BASE, sipe:BASE, \
                 rope-periodic or sipe-periodic)"
            ),
        })
    }
}

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
            ensure!(
                lr.is_finite() && lr > 0.0,
                "learning rate {lr} must be positive"
            );
        }
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
        let checkpoints = (self.steps / 4).max(1);
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
            data: DataConfig {
                train: self.steps.saturating_mul(self.batch),
                val: 4 * (self.train_lengths[1] - self.train_lengths[0] + 1),
                test: self.per_length,
            },
            model,
            optim: OptimConfig {
                steps: self.steps,
                batch_size: self.batch,
                lr,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
                warmup: (self.steps / 10).min(1000),
                eval_every: checkpoints,
                save_every: checkpoints,
                log_every: (self.steps / 100).max(1),
                keep: Retention {
                    last: Some(1),
                    every: None,
                },
            },
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

/// Trains (or reuses) every grid point's model in `out/runs/...`, tests it at the training
/// and test lengths (reusing a run's `lengths.csv`), scores its heads for MOD predicates
/// (reusing a run's `heads.csv`), and writes `out/accuracy.csv`, `out/nstar.csv`,
/// `out/heads.csv` and `out/offset.csv`.
pub fn run(experiment: &Experiment, out: &Path, progress: &dyn Progress) -> Result<Outcome> {
    experiment.check()?;
    let device = Device::Cpu;
    let mut outcome = Outcome {
        nstar: vec![],
        heads: vec![],
        offsets: vec![],
    };
    let mut all = vec![];
    let hi = experiment.train_lengths[1];
    for (language, pe, seed, lr) in experiment.grid() {
        let dir = run_dir(out, language, pe, seed, lr);
        let label = format!("{} {pe} s{seed} lr {lr:e}", language.name());
        let samples = LanguageSamples {
            language,
            negatives: experiment.negatives,
            seed,
        };
        let lengths_path = dir.join("lengths.csv");
        let heads_path = dir.join("heads.csv");
        let mut trained: Option<Trainer> = None;
        let rows: Vec<LengthAccuracy> = if lengths_path.exists() {
            read_csv_file(&lengths_path)?
        } else {
            let config = experiment.run_config(language, pe, seed, lr);
            let mut trainer = Trainer::start_or_resume(&dir, config, &device)?;
            train_with_progress(&mut trainer, &label, progress)?;
            let [lo, hi] = experiment.train_lengths;
            let plan: Vec<(usize, usize)> = (lo..=hi)
                .chain(experiment.test_lengths.iter().copied())
                .map(|n| (n, experiment.per_length))
                .collect();
            let stage = progress.stage(&format!("test {label}"), 1);
            let rows =
                accuracy_at_lengths(trainer.model(), &samples, Split::Test, &plan, EVAL_MEMORY)?;
            drop(stage);
            write_csv(&lengths_path, &rows)?;
            trained = Some(trainer);
            rows
        };
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
        let heads: Vec<ModHeadRow> = if heads_path.exists() {
            read_csv_file(&heads_path)?
        } else {
            let loaded;
            let model = match &trained {
                Some(t) => t.model(),
                None => {
                    let (run, config) = RunDir::open(&dir)?;
                    loaded = run.load_model(run.latest_checkpoint()?, &config, &device)?;
                    &loaded
                }
            };
            let stage = progress.stage(&format!("heads {label}"), 1);
            let longest = experiment.test_lengths.last().copied().unwrap_or(hi);
            let ids: Vec<u32> = (0..HEAD_STRINGS as u64)
                .flat_map(|i| samples.sample(Split::Test, longest, i).ids)
                .collect();
            let ids = candle_core::Tensor::from_vec(ids, (HEAD_STRINGS, longest + 2), &device)?;
            let curves = bos_curves(model, &ids)?;
            let label = RunLabel {
                language: run_row.language.clone(),
                pe: run_row.pe.clone(),
                base: run_row.base,
                seed,
                lr,
            };
            // Query positions 1 ..= hi + 1 are those of training strings (w and EOS).
            let heads = mod_head_rows(&label, &curves, &PERIODS, hi + 1)?;
            drop(stage);
            write_csv(&heads_path, &heads)?;
            heads
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
    write_csv(&out.join("accuracy.csv"), &all)?;
    write_csv(&out.join("nstar.csv"), &outcome.nstar)?;
    write_csv(&out.join("heads.csv"), &outcome.heads)?;
    write_csv(&out.join("offset.csv"), &outcome.offsets)?;
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
            ("rope:0", "positive"),
            ("rope:-1", "positive"),
            ("sipe:inf", "positive"),
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
    }
}
