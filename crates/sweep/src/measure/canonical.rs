//! A canonical-task job's measurement (docs/canonical.md): accuracy per answer position and
//! (with `heads`) what the one trained head does: its swap scores, each rotating plane's
//! projection scores, the largest weight it puts on each key position and, for Partial
//! Induction, every plane's content and recency margins.

use std::path::Path;

use candle_core::{Device, Tensor};
use ropelab_analysis::lens::swap::{swap_scores, Tau};
use ropelab_analysis::measure::partial::{plane_margins, PlaneMargin};
use ropelab_analysis::Captured;

use ropelab_model::{GptJ, PlaneMode, PositionEncoding};
use ropelab_tasks::{CanonicalKind, CanonicalTask, Split};
use ropelab_train::canonical_data::{accuracy_by_position, PositionAccuracy};
use ropelab_train::{RunConfig, EVAL_MEMORY};
use serde::{Deserialize, Serialize};

use super::{MeasureOptions, Measured};
use crate::{Result, SweepError};

/// Tests a canonical run on `options.per_length` test samples, an equal share per answer
/// position (`per_position.csv`); with `options.heads`, also scores its head on
/// `options.head_samples` of them (`head.json`).
pub fn measure(
    model: &GptJ,
    config: &RunConfig,
    options: &MeasureOptions,
    run: &Path,
) -> Result<Measured> {
    let task = config
        .canonical
        .as_ref()
        .expect("a checked canonical run has [canonical]");
    let positions = accuracy_by_position(
        model,
        task,
        config.seed,
        Split::Test,
        options.per_length,
        EVAL_MEMORY,
    )?;
    super::write_run_csv(run, "per_position.csv", &positions)?;
    let accuracy = pooled(&positions);
    if options.heads {
        let PositionEncoding::Rope {
            base,
            rotary_dim,
            planes,
            ..
        } = &config.model.position
        else {
            return Err(SweepError::Job {
                id: run.display().to_string(),
                message: "a canonical head is scored for RoPE runs only".into(),
            });
        };
        let rates = ropelab_model::rope::frequencies(*base, *rotary_dim);
        let keep: Vec<usize> = (0..rates.len())
            .filter(|&p| planes.mode(p) == PlaneMode::Rotate)
            .collect();
        let scores = score_head(
            model,
            task,
            config.seed,
            options.head_samples,
            &rates,
            &keep,
        )?;
        let report = HeadReport {
            accuracy,
            s_pos: scores.s_pos,
            s_sym: scores.s_sym,
            planes: scores.planes,
            w_max: scores.w_max,
            margins: scores.margins,
        };
        super::write_run_file(
            run,
            "head.json",
            serde_json::to_string_pretty(&report)?.as_bytes(),
        )?;
    }
    Ok(summary(&positions))
}

/// Test accuracy pooled over a canonical job's `per_position.csv` rows.
fn pooled(positions: &[PositionAccuracy]) -> f64 {
    let n: usize = positions.iter().map(|r| r.n).sum();
    let correct: usize = positions.iter().map(|r| r.correct).sum();
    correct as f64 / n.max(1) as f64
}

/// What a canonical job's result records of its `per_position.csv` rows: the pooled test
/// accuracy.
pub fn summary(positions: &[PositionAccuracy]) -> Measured {
    Measured {
        test_accuracy: Some(pooled(positions)),
        ..Measured::default()
    }
}

/// What one trained head does (a run's `head.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadReport {
    /// Test accuracy.
    pub accuracy: f64,
    /// Mean positional swap score at the query over the scored samples.
    pub s_pos: f64,
    /// Mean symbolic swap score.
    pub s_sym: f64,
    /// Per-plane projection heads' (s_pos, s_sym), planes that rotate only.
    pub planes: Vec<PlaneScore>,
    /// Largest attention weight the query put on each key position over the scored samples.
    pub w_max: Vec<f64>,
    /// Partial Induction: every plane's content and recency margins (docs/canonical.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub margins: Vec<PlaneMargin>,
}

/// The swap scores of one plane's projection head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlaneScore {
    /// Plane.
    pub plane: usize,
    /// Its rate (radians per position).
    pub theta: f64,
    /// Positional score.
    pub s_pos: f64,
    /// Symbolic score.
    pub s_sym: f64,
}

/// The head's scores, weights and (Partial Induction) plane margins on `n` test samples.
fn score_head(
    model: &GptJ,
    task: &CanonicalTask,
    seed: u64,
    n: usize,
    rates: &[f64],
    keep: &[usize],
) -> ropelab_analysis::Result<HeadScores> {
    let samples: Vec<_> = (0..n as u64)
        .map(|i| task.sample(seed, Split::Test, i))
        .collect();
    let ids: Vec<u32> = samples.iter().flat_map(|s| s.ids.iter().copied()).collect();
    let seq = task.seq_len();
    let ids = Tensor::from_vec(ids, (n, seq), &Device::Cpu)?;
    let captured = Captured::run(model, &ids, false)?;
    let query = seq - 1;
    let (mut s_pos, mut s_sym) = (0.0, 0.0);
    let mut planes: Vec<PlaneScore> = keep
        .iter()
        .map(|&p| PlaneScore {
            plane: p,
            theta: rates[p],
            s_pos: 0.0,
            s_sym: 0.0,
        })
        .collect();
    let mut w_max = vec![0f64; task.len];
    let mut views = vec![];
    for (b, sample) in samples.iter().enumerate() {
        let view = captured.head_view(0, b, 0, query)?;
        let s = swap_scores(&view, Tau::DEFAULT);
        s_pos += s.s_pos / n as f64;
        s_sym += s.s_sym / n as f64;
        for p in planes.iter_mut() {
            let ps = swap_scores(&view.plane(p.plane), Tau::DEFAULT);
            p.s_pos += ps.s_pos / n as f64;
            p.s_sym += ps.s_sym / n as f64;
        }
        let row = captured.pattern_row(0, b, 0, query)?;
        for (j, w) in w_max.iter_mut().enumerate() {
            *w = w.max(row[j]);
        }
        if task.kind == CanonicalKind::Partial {
            views.push((view, sample.ids.clone()));
        }
    }
    let margins = if views.is_empty() {
        vec![]
    } else {
        plane_margins(&views, task, rates)?
    };
    Ok(HeadScores {
        s_pos,
        s_sym,
        planes,
        w_max,
        margins,
    })
}

/// What [`score_head`] measures.
struct HeadScores {
    s_pos: f64,
    s_sym: f64,
    planes: Vec<PlaneScore>,
    w_max: Vec<f64>,
    margins: Vec<PlaneMargin>,
}
