//! The implicit-bias experiment (docs/offset.md): small attention models trained on
//! fixed-offset retrieval at short lengths with rotary, learned absolute (APE) or no position
//! encoding, softmax or linear attention, and tested at up to 8 x the training length.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use ropelab_analysis::claims::files::record_table;
pub use ropelab_analysis::measure::offset::{
    attention_name, parse_attention, CarrierRow, MechanismLine, OffsetAccuracyRow, OffsetPe,
    OffsetRunRow,
};
use ropelab_model::{AttentionKind, Beyond, Head, ModelConfig, Objective};
pub use ropelab_sweep::measure::offset::{EQUIVARIANCE_SHIFT, MECHANISM_ROWS};
use ropelab_sweep::{Job, MeasureOptions};
use ropelab_tasks::{Layout, OffsetTask, TaskKind};
use ropelab_train::lengths::LengthAccuracy;
use ropelab_train::{DataConfig, OffsetData, OptimConfig, RunConfig};
use serde::{Deserialize, Serialize};
use toml::Value;

use crate::{grid, Progress};

/// Everything one experiment runs: the grid, the model and the training and test settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    /// Position encodings.
    pub pes: Vec<OffsetPe>,
    /// Attention kinds.
    pub attentions: Vec<AttentionKind>,
    /// Offsets k.
    pub ks: Vec<usize>,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Token symbols.
    pub vocab: usize,
    /// Layers.
    pub layers: usize,
    /// Heads per layer.
    pub heads: usize,
    /// Model width.
    pub d_model: usize,
    /// Longest training sequence (training lengths are k + 1 ..= train_len); the APE table
    /// has this many rows.
    pub train_len: usize,
    /// Tested lengths (ascending).
    pub test_lens: Vec<usize>,
    /// Sequences per tested length.
    pub per_length: usize,
    /// Optimizer steps per run.
    pub steps: usize,
    /// Sequences per batch.
    pub batch: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Score every position i >= k (the full-sequence variant) instead of the last.
    pub full_sequence: bool,
    /// What APE does beyond its table: reuse the last row (`clamp`) or refuse (`error`).
    pub ape_beyond: Beyond,
}

impl Default for Experiment {
    /// The single-head comparison: rotary, APE and NoPE, softmax and linear attention,
    /// k = 1, 2, 4, 8, three seeds; one attention-only layer with one head of 64 dims, trained
    /// at lengths up to 16 and tested at 1 to 8 x 16.
    fn default() -> Self {
        Experiment {
            pes: vec![
                OffsetPe::Rope(ropelab_model::rope::DEFAULT_BASE),
                OffsetPe::Ape,
                OffsetPe::Nope,
            ],
            attentions: vec![AttentionKind::Softmax, AttentionKind::Linear],
            ks: vec![1, 2, 4, 8],
            seeds: vec![0, 1, 2],
            vocab: 16,
            layers: 1,
            heads: 1,
            d_model: 64,
            train_len: 16,
            test_lens: Experiment::test_lens_for(16),
            per_length: 256,
            steps: 1000,
            batch: 64,
            lr: 3e-3,
            full_sequence: false,
            ape_beyond: Beyond::Clamp,
        }
    }
}

impl Experiment {
    /// The default test lengths for a training length L: 1, 1.5, 2, 3, 4, 6 and 8 x L.
    pub fn test_lens_for(train_len: usize) -> Vec<usize> {
        [2, 3, 4, 6, 8, 12, 16]
            .iter()
            .map(|x| x * train_len / 2)
            .collect()
    }

    /// Checks the grid, the lengths and the APE extension rule.
    pub fn check(&self) -> Result<()> {
        for (what, empty) in [
            ("position encodings", self.pes.is_empty()),
            ("attention kinds", self.attentions.is_empty()),
            ("offsets", self.ks.is_empty()),
            ("seeds", self.seeds.is_empty()),
            ("test lengths", self.test_lens.is_empty()),
        ] {
            ensure!(!empty, "the experiment needs at least one of its {what}");
        }
        ropelab_train::check_lr("learning rate", self.lr)?;
        grid::each_once(
            "the position encodings",
            self.pes.iter().map(|p| p.to_string()),
        )?;
        grid::each_once(
            "the attention kinds",
            self.attentions
                .iter()
                .map(|a| attention_name(*a).to_string()),
        )?;
        grid::each_once("the offsets", self.ks.iter().map(|k| k.to_string()))?;
        grid::each_once("the seeds", self.seeds.iter().map(|s| s.to_string()))?;
        ensure!(
            self.steps >= 1 && self.batch >= 1 && self.per_length >= 1,
            "steps, batch and sequences per length must be at least 1"
        );
        ensure!(
            self.layers >= 1 && self.heads >= 1 && self.d_model.is_multiple_of(2 * self.heads),
            "the model needs at least one layer and head, and d_model ({}) a multiple of twice \
             the heads ({})",
            self.d_model,
            self.heads
        );
        ensure!(
            (2..=MAX_TRAIN_LEN).contains(&self.train_len),
            "the training length must be between 2 and {MAX_TRAIN_LEN}, got {}",
            self.train_len
        );
        for &k in &self.ks {
            ensure!(k >= 1, "the offset k must be at least 1");
            ensure!(
                k < self.train_len,
                "offset {k} is not shorter than the training length {}: no training sequence \
                 would have a position {k} back",
                self.train_len
            );
        }
        ensure!(
            self.test_lens.windows(2).all(|w| w[0] < w[1]),
            "test lengths must be ascending"
        );
        let longest = *self.test_lens.last().unwrap_or(&0);
        let max_k = self.ks.iter().copied().max().unwrap_or(0);
        if let Some(&short) = self.test_lens.iter().find(|&&n| n <= max_k) {
            bail!("test length {short} is not longer than the offset {max_k}");
        }
        if self.pes.contains(&OffsetPe::Ape)
            && self.ape_beyond == Beyond::Error
            && longest > self.train_len
        {
            bail!(
                "test length {longest} is beyond the learned position table of {} rows (the \
                 training length) and --ape-beyond is error: pass --ape-beyond clamp to reuse \
                 the last row, or test at most {}",
                self.train_len,
                self.train_len
            );
        }
        OffsetTask::new(self.vocab, 1)?;
        Ok(())
    }

    /// The run config of one grid point.
    pub fn run_config(
        &self,
        pe: OffsetPe,
        attention: AttentionKind,
        k: usize,
        seed: u64,
    ) -> RunConfig {
        let d_head = self.d_model / self.heads;
        let model = ModelConfig {
            vocab_size: self.vocab,
            n_layers: self.layers,
            n_heads: self.heads,
            d_model: self.d_model,
            d_mlp: 4 * self.d_model,
            ln_eps: 1e-5,
            dropout: 0.0,
            tied_embeddings: false,
            position: pe.encoding(d_head, self.train_len, self.ape_beyond),
            layer_positions: vec![],
            attention,
            mlp: false,
            layer_norm: true,
            head: Head::Lm,
        };
        RunConfig {
            preset: "offset".into(),
            task: TaskKind::Offset,
            seed,
            objective: if self.full_sequence {
                Objective::EveryPosition
            } else {
                Objective::LastToken
            },
            layout: Layout::default(),
            language: None,
            canonical: None,
            ambiguous: None,
            position_shift: 0,
            precision: Default::default(),
            offset: Some(OffsetData {
                vocab: self.vocab,
                k,
                lengths: [k + 1, self.train_len],
            }),
            data: DataConfig {
                train: self.steps.saturating_mul(self.batch),
                val: 4 * (self.train_len - k),
                test: self.per_length,
            },
            model,
            optim: OptimConfig::adamw(self.steps, self.batch, self.lr),
        }
    }

    /// Every grid point: (encoding, attention, k, seed).
    pub fn grid(&self) -> Vec<(OffsetPe, AttentionKind, usize, u64)> {
        let mut out = vec![];
        for &pe in &self.pes {
            for &a in &self.attentions {
                for &k in &self.ks {
                    for &seed in &self.seeds {
                        out.push((pe, a, k, seed));
                    }
                }
            }
        }
        out
    }
}

/// The longest training sequence of the experiment (each length from k + 1 to it is a
/// training shape of its own, with its own kernel buffers).
pub const MAX_TRAIN_LEN: usize = 4096;

/// The implicit-bias part of a study (its `[offset]` table): the grid and the settings of
/// [`Experiment`] that differ from its defaults, written out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyOffset {
    /// Position encodings (`rope`, `rope:BASE`, `ape`, `nope`).
    pub pe: Vec<String>,
    /// Attention kinds (`softmax`, `linear`).
    pub attention: Vec<String>,
    /// Offsets.
    pub k: Vec<usize>,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Optimizer steps per run.
    pub steps: usize,
    /// Longest training sequence.
    pub train_len: usize,
    /// Test lengths (ascending).
    pub test_lens: Vec<usize>,
    /// Sequences per test length.
    pub per_length: usize,
}

impl StudyOffset {
    /// The experiment this table describes, checked.
    pub fn experiment(&self) -> Result<Experiment> {
        let e = Experiment {
            pes: self
                .pe
                .iter()
                .map(|p| p.parse().map_err(anyhow::Error::from))
                .collect::<Result<_>>()?,
            attentions: self
                .attention
                .iter()
                .map(|a| parse_attention(a).map_err(anyhow::Error::from))
                .collect::<Result<_>>()?,
            ks: self.k.clone(),
            seeds: self.seeds.clone(),
            steps: self.steps,
            train_len: self.train_len,
            test_lens: self.test_lens.clone(),
            per_length: self.per_length,
            ..Experiment::default()
        };
        e.check()?;
        Ok(e)
    }
}

/// The run directory of one grid point.
pub fn run_dir(out: &Path, pe: OffsetPe, attention: AttentionKind, k: usize, seed: u64) -> PathBuf {
    let pe = pe.to_string().replace(':', "-");
    out.join("runs")
        .join(format!("{pe}-{}", attention_name(attention)))
        .join(format!("k-{k}"))
        .join(format!("seed-{seed}"))
}

/// What one experiment measured (each also written to `out/`).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Accuracy per run and test length (`accuracy.csv`).
    pub accuracy: Vec<OffsetAccuracyRow>,
    /// Per run (`runs.csv`).
    pub runs: Vec<OffsetRunRow>,
    /// Per softmax run, test length and head (`mechanism.csv`).
    pub mechanisms: Vec<MechanismLine>,
}

impl Experiment {
    /// Every grid point as a sweep job in its run directory ([`run_dir`], relative to the
    /// experiment's directory).
    pub fn jobs(&self) -> Vec<Job> {
        self.grid()
            .into_iter()
            .map(|(pe, attention, k, seed)| {
                let params = [
                    ("pe", Value::String(pe.to_string())),
                    ("attention", Value::String(attention_name(attention).into())),
                    ("k", Value::Integer(k as i64)),
                    ("seed", Value::Integer(seed as i64)),
                ];
                let config = self.run_config(pe, attention, k, seed);
                grid::job(
                    &params,
                    config,
                    run_dir(Path::new(""), pe, attention, k, seed),
                )
            })
            .collect()
    }

    /// What running the experiment in `out` needs (its jobs trained and measured, `parallel`
    /// at a time): the one estimate every entry point checks.
    pub fn need(&self, out: &Path, parallel: Option<usize>) -> ropelab_io::Need {
        grid::need(&self.jobs(), out, &self.measure_options(), parallel)
    }

    /// What every job measures: accuracy at the test lengths, `per_length` sequences each,
    /// and the mechanisms.
    pub fn measure_options(&self) -> MeasureOptions {
        MeasureOptions {
            lengths: Some(self.test_lens.clone()),
            per_length: self.per_length,
            heads: true,
            ..MeasureOptions::default()
        }
    }
}

/// Trains (or reuses) every grid point's model in `out/runs/...` as a sweep job (`parallel`
/// at a time, default one per core), each tested at every test length with its mechanisms
/// measured (`ropelab_sweep::measure::offset`), and writes `out/accuracy.csv`, `out/runs.csv`
/// and `out/mechanism.csv` from the runs' files.
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
        accuracy: vec![],
        runs: vec![],
        mechanisms: vec![],
    };
    for (pe, attention, k, seed) in experiment.grid() {
        let dir = run_dir(out, pe, attention, k, seed);
        let rows: Vec<LengthAccuracy> =
            ropelab_sweep::measure::read_run_lengths(&dir, Some(&experiment.test_lens), false)?;
        let run_path = dir.join("run.csv");
        let run_row = ropelab_sweep::measure::read_run_csv::<OffsetRunRow>(&dir, "run.csv")?
            .pop()
            .with_context(|| format!("{} is empty", run_path.display()))?;
        if attention == AttentionKind::Softmax {
            outcome
                .mechanisms
                .extend(ropelab_sweep::measure::read_run_csv::<MechanismLine>(
                    &dir,
                    "mechanism.csv",
                )?);
        }
        outcome
            .accuracy
            .extend(rows.iter().map(|r| OffsetAccuracyRow {
                pe: pe.to_string(),
                attention: attention_name(attention).into(),
                k,
                seed,
                train_len: experiment.train_len,
                test_len: r.length,
                n: r.n,
                accuracy: r.accuracy(),
                loss: r.loss,
            }));
        outcome.runs.push(run_row);
    }
    // The tables the verdicts read are recorded in the ledger of `out` (docs/study.md).
    record_table(
        &out.join("accuracy.csv"),
        "offset",
        ropelab_io::to_csv(&outcome.accuracy)?.as_bytes(),
    )?;
    record_table(
        &out.join("runs.csv"),
        "offset",
        ropelab_io::to_csv(&outcome.runs)?.as_bytes(),
    )?;
    crate::record_csv(&out.join("mechanism.csv"), "offset", &outcome.mechanisms)?;
    Ok(outcome)
}

/// One (encoding, attention) line of [`summary`]: pe, attention, (test length, mean accuracy).
pub type SummaryLine = (String, String, Vec<(usize, f64)>);

/// Mean accuracy over seeds and offsets per (encoding, attention) at each test length, in
/// grid order.
pub fn summary(rows: &[OffsetAccuracyRow]) -> Vec<SummaryLine> {
    // (pe, attention, [(test length, sum, count)])
    type Sums = (String, String, Vec<(usize, f64, usize)>);
    let mut out: Vec<Sums> = vec![];
    for r in rows {
        let i = match out
            .iter()
            .position(|(p, a, _)| *p == r.pe && *a == r.attention)
        {
            Some(i) => i,
            None => {
                out.push((r.pe.clone(), r.attention.clone(), vec![]));
                out.len() - 1
            }
        };
        let cells = &mut out[i].2;
        match cells.iter_mut().find(|c| c.0 == r.test_len) {
            Some(c) => {
                c.1 += r.accuracy;
                c.2 += 1;
            }
            None => cells.push((r.test_len, r.accuracy, 1)),
        }
    }
    out.into_iter()
        .map(|(p, a, cells)| {
            let mut means: Vec<(usize, f64)> = cells
                .into_iter()
                .map(|(n, sum, count)| (n, sum / count as f64))
                .collect();
            means.sort_by_key(|c| c.0);
            (p, a, means)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_and_attention_parse_and_bad_ones_are_one_line_errors() {
        assert_eq!("rope".parse::<OffsetPe>().unwrap(), OffsetPe::Rope(1e4));
        assert_eq!(
            "rope:100".parse::<OffsetPe>().unwrap(),
            OffsetPe::Rope(100.0)
        );
        assert_eq!("ape".parse::<OffsetPe>().unwrap(), OffsetPe::Ape);
        assert_eq!(OffsetPe::Rope(1e4).to_string(), "rope");
        assert_eq!(OffsetPe::Rope(100.0).to_string(), "rope:1e2");
        for (bad, want) in [
            ("rope:0", "must lie in"),
            ("rope:1e300", "must lie in"),
            ("rope:x", "not a number"),
            ("alibi", "unknown position encoding"),
        ] {
            let err = bad.parse::<OffsetPe>().unwrap_err().to_string();
            assert!(err.contains(want), "{bad}: {err}");
        }
        assert_eq!(parse_attention("linear").unwrap(), AttentionKind::Linear);
        assert!(parse_attention("flash")
            .unwrap_err()
            .to_string()
            .contains("unknown attention"));
    }

    #[test]
    fn the_default_grid_checks_and_bad_settings_are_errors() {
        let e = Experiment::default();
        e.check().unwrap();
        assert_eq!(e.grid().len(), 3 * 2 * 4 * 3);
        for (pe, a, k, seed) in e.grid() {
            e.run_config(pe, a, k, seed).check().unwrap();
        }
        let bad = |f: &dyn Fn(&mut Experiment), want: &str| {
            let mut x = Experiment::default();
            f(&mut x);
            let err = x.check().unwrap_err().to_string();
            assert!(err.contains(want), "want {want:?}: {err}");
            assert_eq!(err.lines().count(), 1);
        };
        bad(
            &|x| x.ks = vec![16],
            "offset 16 is not shorter than the training length 16",
        );
        bad(
            &|x| x.ape_beyond = Beyond::Error,
            "beyond the learned position table of 16 rows",
        );
        bad(&|x| x.test_lens = vec![32, 16], "ascending");
        bad(
            &|x| x.test_lens = vec![4, 32],
            "test length 4 is not longer than the offset 8",
        );
        bad(&|x| x.vocab = 1, "at least 2 symbols");
        bad(&|x| x.d_model = 63, "d_model");
        // Without APE, error beyond the table is no concern.
        let mut x = Experiment {
            ape_beyond: Beyond::Error,
            ..Experiment::default()
        };
        x.pes = vec![OffsetPe::Rope(1e4)];
        x.check().unwrap();
    }

    #[test]
    fn the_summary_averages_seeds_and_offsets_per_length() {
        let row = |pe: &str, k: usize, seed: u64, n: usize, accuracy: f64| OffsetAccuracyRow {
            pe: pe.into(),
            attention: "softmax".into(),
            k,
            seed,
            train_len: 16,
            test_len: n,
            n: 10,
            accuracy,
            loss: 0.0,
        };
        let rows = vec![
            row("rope", 1, 0, 16, 1.0),
            row("rope", 1, 0, 32, 0.8),
            row("rope", 2, 1, 16, 0.5),
            row("rope", 2, 1, 32, 0.6),
            row("ape", 1, 0, 16, 1.0),
        ];
        let s = summary(&rows);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].0, "rope");
        assert_eq!(s[0].2, vec![(16, 0.75), (32, (0.8 + 0.6) / 2.0)]);
        assert_eq!(s[1].2, vec![(16, 1.0)]);
    }
}
