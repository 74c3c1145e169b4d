//! Partial Induction's head (docs/canonical.md): which planes match content and which carry
//! recency, in a trained head and in the hand-built two-angle head.
//!
//! On a sample whose answer (the last item of the queried symbol) sits at position `a`, with
//! earlier items of that symbol at `e` and items of other symbols at `o`, plane p's
//! contribution `c_p(i, j)` to the query's logit of the content at `j` placed at `i` splits the
//! head's decision in two:
//! - **content margin**: `c_p(a, a) - c_p(a, o)`, the answer's content against another
//!   symbol's at the same position (mean over `o`);
//! - **recency margin**: `c_p(a, e) - c_p(e, e)`, an earlier item of the queried symbol moved
//!   to the answer's position against where it is (mean over `e`): what the plane prefers in
//!   the later of two positions with the same content.
//!
//! A plane that never turns has recency margin 0 exactly; a plane whose key ignores content has
//! content margin 0.

use ropelab_tasks::CanonicalTask;
use ropelab_theory::construct::HandHead;
use serde::{Deserialize, Serialize};

use crate::lens::head::HeadView;
use crate::{AnalysisError, Result};

/// The mean margins of one plane over the scored samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlaneMargin {
    /// Plane.
    pub plane: usize,
    /// Its angle per position (radians).
    pub theta: f64,
    /// Content margin (logits).
    pub content: f64,
    /// Recency margin (logits).
    pub recency: f64,
}

/// A head's two kinds of planes, summarised from its plane margins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TwoAngles {
    /// Sum of the positive content margins.
    pub content: f64,
    /// Sum of the positive recency margins.
    pub recency: f64,
    /// Angle of the plane with the largest content margin.
    pub content_theta: f64,
    /// Angle of the plane with the largest recency margin.
    pub recency_theta: f64,
    /// Content-margin-weighted mean angle (positive margins).
    pub content_mean_theta: f64,
    /// Recency-margin-weighted mean angle (positive margins).
    pub recency_mean_theta: f64,
}

/// The hand-built two-angle head on the experiment's test samples (`hand_head.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandReport {
    /// Its two planes' angles.
    pub thetas: Vec<f64>,
    /// Test samples checked.
    pub n: usize,
    /// Accuracy on them.
    pub accuracy: f64,
    /// Accuracy with the recency plane's weight set to 0 (content alone).
    pub content_only: f64,
    /// Accuracy with the content plane's weight set to 0 (recency alone).
    pub recency_only: f64,
    /// Mean s_pos at the query over the scored samples.
    pub s_pos: f64,
    /// Mean s_sym.
    pub s_sym: f64,
    /// Its plane margins.
    pub margins: Vec<PlaneMargin>,
}

/// Recency must ride on planes turning at least this many times faster (margin-weighted mean
/// angles) than the planes that match content for a head to "use two kinds of planes".
pub const TWO_ANGLE_RATIO: f64 = 4.0;

impl TwoAngles {
    /// Column names of [`TwoAngles::cells`] for a table (after the head's name).
    pub const HEADER: [&'static str; 5] = [
        "content margin",
        "recency margin",
        "content theta",
        "recency theta",
        "two kinds",
    ];

    /// The summary as table cells: both margins (logits), their margin-weighted mean angles
    /// (radians per position) and whether the head has two kinds of planes.
    pub fn cells(&self) -> Vec<String> {
        vec![
            format!("{:.2}", self.content),
            format!("{:.2}", self.recency),
            format!("{:.4}", self.content_mean_theta),
            format!("{:.4}", self.recency_mean_theta),
            if self.holds() { "yes" } else { "no" }.into(),
        ]
    }

    /// Summarises plane margins.
    pub fn of(margins: &[PlaneMargin]) -> Self {
        let weighted = |f: &dyn Fn(&PlaneMargin) -> f64| {
            let total: f64 = margins.iter().map(|m| f(m).max(0.0)).sum();
            let mean = margins.iter().map(|m| f(m).max(0.0) * m.theta).sum::<f64>()
                / total.max(f64::MIN_POSITIVE);
            let top = margins
                .iter()
                .max_by(|x, y| f(x).total_cmp(&f(y)))
                .map_or(f64::NAN, |m| m.theta);
            (total, mean, top)
        };
        let (content, content_mean_theta, content_theta) = weighted(&|m| m.content);
        let (recency, recency_mean_theta, recency_theta) = weighted(&|m| m.recency);
        Self {
            content,
            recency,
            content_theta,
            recency_theta,
            content_mean_theta,
            recency_mean_theta,
        }
    }

    /// Both margins positive and recency on planes at least [`TWO_ANGLE_RATIO`] times faster
    /// than content.
    pub fn holds(&self) -> bool {
        self.content > 0.0
            && self.recency > 0.0
            && self.recency_mean_theta >= TWO_ANGLE_RATIO * self.content_mean_theta
    }
}

/// Per-plane content and recency margins of one sample (`None`: not measurable on it).
pub type SampleMargins = (Option<Vec<f64>>, Option<Vec<f64>>);

/// Per-plane (content, recency) margins of `view` (a head at the query of Partial Induction
/// sample `ids`); `None` for a margin the sample cannot measure (no earlier item of the
/// queried symbol, or no item of another symbol).
pub fn sample_margins(view: &HeadView, task: &CanonicalTask, ids: &[u32]) -> Result<SampleMargins> {
    let (_, a) = task.solve(ids)?;
    if view.n() != task.len {
        return Err(AnalysisError::Invalid(format!(
            "a head view at query {} for a task of {} items",
            view.n(),
            task.len
        )));
    }
    let symbol = |id: u32| id as usize / task.attributes;
    let queried = symbol(ids[a]);
    let planes = view.d_head() / 2;
    let at_answer = view.plane_contributions(a, a);
    let others: Vec<usize> = (0..task.len)
        .filter(|&j| symbol(ids[j]) != queried)
        .collect();
    let content = if others.is_empty() {
        None
    } else {
        let mut out = vec![0.0; planes];
        for &o in &others {
            let other = view.plane_contributions(a, o);
            for ((s, x), y) in out.iter_mut().zip(&at_answer).zip(other) {
                *s += (x - y) / others.len() as f64;
            }
        }
        Some(out)
    };
    let earlier: Vec<usize> = (0..a).filter(|&j| symbol(ids[j]) == queried).collect();
    let recency = if earlier.is_empty() {
        None
    } else {
        let mut out = vec![0.0; planes];
        for &e in &earlier {
            let moved = view.plane_contributions(a, e);
            let stay = view.plane_contributions(e, e);
            for ((o, m), s) in out.iter_mut().zip(moved).zip(stay) {
                *o += (m - s) / earlier.len() as f64;
            }
        }
        Some(out)
    };
    Ok((content, recency))
}

/// Mean per-plane margins over `samples` (each a head view and its sample's ids); `thetas`
/// gives each plane's angle.
pub fn plane_margins(
    samples: &[(HeadView, Vec<u32>)],
    task: &CanonicalTask,
    thetas: &[f64],
) -> Result<Vec<PlaneMargin>> {
    let planes = thetas.len();
    let (mut content, mut recency) = (vec![0.0; planes], vec![0.0; planes]);
    let (mut nc, mut nr) = (0usize, 0usize);
    for (view, ids) in samples {
        let (c, r) = sample_margins(view, task, ids)?;
        if let Some(c) = c {
            content.iter_mut().zip(c).for_each(|(s, v)| *s += v);
            nc += 1;
        }
        if let Some(r) = r {
            recency.iter_mut().zip(r).for_each(|(s, v)| *s += v);
            nr += 1;
        }
    }
    Ok((0..planes)
        .map(|p| PlaneMargin {
            plane: p,
            theta: thetas[p],
            content: content[p] / nc.max(1) as f64,
            recency: recency[p] / nr.max(1) as f64,
        })
        .collect())
}

/// The hand-built two-angle head for `task` (theory crate): plane 0 at angle 0 matching
/// content (weight 1), plane 1 at pi / (2 len) carrying recency (weight 1/2, so content always
/// wins and cos(theta d) falls over the whole context), softmax at inverse temperature 200.
pub fn hand_head(task: &CanonicalTask) -> Result<HandHead> {
    let theta = std::f64::consts::PI / (2.0 * task.len as f64);
    Ok(HandHead::partial(
        task.symbols,
        task.attributes,
        theta,
        1.0,
        0.5,
        200.0,
    )?)
}

/// The hand-built head seen at the query of sample `ids` (logit scale: its beta).
pub fn hand_view(head: &HandHead, ids: &[u32]) -> Result<HeadView> {
    let rows = ids
        .iter()
        .map(|&t| head.query_key(t as usize))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let q = rows.last().map(|(q, _)| q.clone()).unwrap_or_default();
    Ok(HeadView {
        q,
        keys: rows.into_iter().map(|(_, k)| k).collect(),
        encoding: head.position().clone(),
        scale: head.beta(),
        dims: None,
    })
}
