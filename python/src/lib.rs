//! `ropelab._core`: the Rust side of the `ropelab` Python package (python/ropelab). A run
//! directory and its checkpoints' hooked models, the tasks' samples and validators, and the
//! exact fast swap scores of captured queries and keys of any model. Every error is a
//! `ropelab.RopelabError` (a `ValueError`) with ropelab's one-line message; long work runs with
//! the interpreter released (`Python::detach`). Tables cross the boundary as JSON text, which
//! the Python side turns into pandas DataFrames.

use std::path::PathBuf;
use std::str::FromStr;

use candle_core::{Device, Tensor};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{IntoPyArray, PyArrayDyn, PyReadonlyArray2, PyReadonlyArrayDyn};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use ropelab_analysis::lens::heads::{mean_plane, score_captured};
use ropelab_analysis::lens::purity::{purity, Gamma};
use ropelab_analysis::lens::swap::Tau;
use ropelab_analysis::Captured;
use ropelab_model::{rope, GptJ, HookKind, HookPoint, Hooks, PositionEncoding, RopeLayout, Turn};
use ropelab_tasks::{Dataset, Layout, Sample, SampleRecord, Split, Task, TaskKind};
use ropelab_train::{RunConfig, RunDir};

mod other_tasks;

pyo3::create_exception!(
    _core,
    RopelabError,
    PyValueError,
    "An error of ropelab: bad input, a bad file, or a failed computation (one line)."
);

/// ropelab's error as a Python exception, on one line.
fn err(e: impl std::fmt::Display) -> PyErr {
    RopelabError::new_err(e.to_string().replace('\n', " "))
}

/// A numpy array of `data` with `dims`.
fn array<'py, T: numpy::Element>(
    py: Python<'py>,
    data: Vec<T>,
    dims: &[usize],
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let a = ArrayD::from_shape_vec(IxDyn(dims), data).map_err(err)?;
    Ok(a.into_pyarray(py))
}

/// The elements of a numpy array in C order, and its shape.
fn flat(a: &PyReadonlyArrayDyn<'_, f32>) -> (Vec<f32>, Vec<usize>) {
    let view = a.as_array();
    (view.iter().copied().collect(), view.shape().to_vec())
}

/// A task by name (`number`, `letter`).
fn task_kind(name: &str) -> PyResult<TaskKind> {
    TaskKind::from_str(name).map_err(err)
}

/// The task `kind` with `layout` (JSON of the layout's fields; missing ones take defaults).
fn task_of(kind: &str, layout: Option<&str>) -> PyResult<Task> {
    let layout: Layout = match layout {
        Some(json) => serde_json::from_str(json).map_err(|e| err(format!("layout: {e}")))?,
        None => Layout::default(),
    };
    Task::new(task_kind(kind)?, layout).map_err(err)
}

/// JSON lines of samples `0..n` of `task`'s dataset (`seed`, `split`, `extra` inserted tokens)
/// as `ropelab gen` writes them.
fn sample_records(task: Task, seed: u64, split: &str, n: usize, extra: usize) -> PyResult<String> {
    let split = Split::from_str(split).map_err(err)?;
    let data = Dataset::new(task.clone(), seed, split, n, extra).map_err(err)?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let s = data.sample(i).map_err(err)?;
        let record = SampleRecord::new(i, &s, task.vocab());
        out.push(serde_json::to_value(&record).map_err(err)?);
    }
    serde_json::to_string(&out).map_err(err)
}

/// Samples of a number or letter task (JSON list of records: index, tokens, ids, answer,
/// answer_id, hops, target_pos).
#[pyfunction]
#[pyo3(signature = (task, n, seed=0, split="train", extra=0, layout=None))]
fn generate(
    py: Python<'_>,
    task: &str,
    n: usize,
    seed: u64,
    split: &str,
    extra: usize,
    layout: Option<&str>,
) -> PyResult<String> {
    let task = task_of(task, layout)?;
    let split = split.to_owned();
    py.detach(move || sample_records(task, seed, &split, n, extra))
}

/// Checks one sample (its ids, answer id, hop count and target position) against the task's
/// rules; raises RopelabError naming the first broken one.
#[pyfunction]
#[pyo3(signature = (task, ids, answer_id, hops, target_pos, layout=None))]
fn validate(
    task: &str,
    ids: Vec<u32>,
    answer_id: u32,
    hops: usize,
    target_pos: usize,
    layout: Option<&str>,
) -> PyResult<()> {
    let task = task_of(task, layout)?;
    let sample = Sample {
        ids,
        answer_id,
        hops,
        target_pos,
    };
    task.validate(&sample).map_err(err)
}

/// Samples of the related papers' tasks (`language`, `offset`, `canonical`, `ambiguous`) with
/// their parameters as a JSON object (JSON list of records).
#[pyfunction]
#[pyo3(signature = (task, n, seed=0, split="train", params="{}"))]
fn generate_other(
    py: Python<'_>,
    task: &str,
    n: usize,
    seed: u64,
    split: &str,
    params: &str,
) -> PyResult<String> {
    let (task, split, params) = (task.to_owned(), split.to_owned(), params.to_owned());
    py.detach(move || other_tasks::generate(&task, n, seed, &split, &params))
        .map_err(err)
}

/// Checks one record of a related paper's task against the answer its tokens give.
#[pyfunction]
#[pyo3(signature = (task, record, params="{}"))]
fn validate_other(task: &str, record: &str, params: &str) -> PyResult<()> {
    other_tasks::validate(task, record, params).map_err(err)
}

/// The natural-language prompt version of a task (JSON: prompt, answer, question, size).
#[pyfunction]
#[pyo3(signature = (task, size, seed=0, index=0))]
fn prompt(task: &str, size: usize, seed: u64, index: usize) -> PyResult<String> {
    let p = ropelab_tasks::prompt::prompt(task_kind(task)?, size, seed, index).map_err(err)?;
    serde_json::to_string(&p).map_err(err)
}

/// RoPE's plane angles base^(-2k / rotary_dim), k < rotary_dim / 2 (radians per position), as
/// ropelab computes them.
#[pyfunction]
fn rope_frequencies(base: f64, rotary_dim: usize) -> PyResult<Vec<f64>> {
    if !(base.is_finite() && base > 0.0) || rotary_dim < 2 || rotary_dim % 2 == 1 {
        return Err(err(format!(
            "RoPE needs a positive base and an even rotary_dim of at least 2, got {base} and {rotary_dim}"
        )));
    }
    Ok(rope::frequencies(base, rotary_dim))
}

/// The vocabulary of a task: token strings by id.
#[pyfunction]
#[pyo3(signature = (task, layout=None))]
fn vocabulary(task: &str, layout: Option<&str>) -> PyResult<Vec<String>> {
    let task = task_of(task, layout)?;
    let vocab = task.vocab();
    Ok((0..vocab.len() as u32)
        .map(|id| vocab.token(id).unwrap_or("<unk>").to_owned())
        .collect())
}

/// The position encoding of `layout` (`interleaved` or `half_split`) with plane angles
/// `thetas` (radians per position); no rotation when `thetas` is empty.
fn encoding(layout: &str, thetas: Vec<f64>) -> PyResult<PositionEncoding> {
    if thetas.is_empty() {
        return Ok(PositionEncoding::None);
    }
    let layout = match layout {
        "interleaved" => RopeLayout::Interleaved,
        "half_split" => RopeLayout::HalfSplit,
        other => {
            return Err(err(format!(
                "layout {other:?} is not interleaved or half_split"
            )))
        }
    };
    if thetas.iter().any(|t| !t.is_finite()) {
        return Err(err("RoPE angles must be finite"));
    }
    Ok(PositionEncoding::angles(thetas, layout))
}

/// x [n, heads, pos, hd] with the rotation of `position` undone (the pre-rotation vectors).
fn unrotate(x: Vec<f32>, dims: [usize; 4], position: &PositionEncoding) -> PyResult<Vec<f32>> {
    let Some(rotation) = position.rotation() else {
        return Ok(x);
    };
    if rotation.rotary_dim > dims[3] {
        return Err(err(format!(
            "{} rotated dims do not fit heads of {} dims",
            rotation.rotary_dim, dims[3]
        )));
    }
    let positions: Vec<usize> = (0..dims[2]).collect();
    let run = || -> ropelab_model::Result<Vec<f32>> {
        let t = Tensor::from_vec(x, dims.to_vec(), &Device::Cpu)?;
        let (cos, sin) = rope::angles_of(&positions, &rotation, &Device::Cpu)?;
        // R(-theta) = (cos, -sin).
        Ok(
            rope::rotate(&t, &cos, &sin.neg()?, rotation.rotary_dim, rotation.layout)?
                .flatten_all()?
                .to_vec1()?,
        )
    };
    run().map_err(err)
}

/// Per-layer flat [batch, heads, pos, hd] of x [layers, batch, heads_x, pos, hd], each key
/// head repeated for the `heads / heads_x` query heads it serves.
fn per_layer(x: &[f32], dims: &[usize], heads: usize) -> Vec<Vec<f32>> {
    let (layers, batch, hx, pos, hd) = (dims[0], dims[1], dims[2], dims[3], dims[4]);
    let group = heads / hx;
    let block = pos * hd;
    (0..layers)
        .map(|l| {
            let mut out = Vec::with_capacity(batch * heads * block);
            for b in 0..batch {
                for h in 0..heads {
                    let start = ((l * batch + b) * hx + h / group) * block;
                    out.extend_from_slice(&x[start..start + block]);
                }
            }
            out
        })
        .collect()
}

/// Swap scores of every head from captured queries and keys: q [layers, batch, heads, pos,
/// head_dim] and k [layers, batch, kv_heads, pos, head_dim] (kv_heads dividing heads), rotated
/// (`rotated`) or not, with RoPE of `layout` and plane angles `thetas`; scored at the
/// positions `queries[b]` of each row (default: each row's last) and averaged over every
/// (row, query). JSON list, one object per (layer, head), as `ropelab score` writes them.
#[pyfunction]
#[pyo3(signature = (q, k, layout, thetas, rotated=true, queries=None, tau=None, blocks=None, planes=false))]
#[allow(clippy::too_many_arguments)]
fn swap_scores(
    py: Python<'_>,
    q: PyReadonlyArrayDyn<'_, f32>,
    k: PyReadonlyArrayDyn<'_, f32>,
    layout: &str,
    thetas: Vec<f64>,
    rotated: bool,
    queries: Option<Vec<Vec<usize>>>,
    tau: Option<f64>,
    blocks: Option<usize>,
    planes: bool,
) -> PyResult<String> {
    let (q, qd) = flat(&q);
    let (k, kd) = flat(&k);
    if qd.len() != 5 || kd.len() != 5 {
        return Err(err(format!(
            "q and k must be [layers, batch, heads, pos, head_dim], got {qd:?} and {kd:?}"
        )));
    }
    let (layers, batch, heads, pos, hd) = (qd[0], qd[1], qd[2], qd[3], qd[4]);
    if kd[0] != layers || kd[1] != batch || kd[3] != pos || kd[4] != hd {
        return Err(err(format!("k {kd:?} does not match q {qd:?}")));
    }
    if kd[2] == 0 || heads % kd[2] != 0 || pos == 0 || hd < 2 {
        return Err(err(format!(
            "{heads} query heads do not group over {} key heads (or empty q/k {qd:?})",
            kd[2]
        )));
    }
    // One default for the CLI, the study and Python: `Tau::DEFAULT`.
    let tau = match tau {
        Some(t) => Tau::new(t).map_err(err)?,
        None => Tau::DEFAULT,
    };
    let position = encoding(layout, thetas)?;
    let queries = queries.unwrap_or_else(|| vec![vec![pos - 1]; batch]);
    if queries.len() != batch {
        return Err(err(format!(
            "{} query lists for {batch} rows",
            queries.len()
        )));
    }
    if let Some(&bad) = queries.iter().flatten().find(|&&n| n >= pos || n < 1) {
        return Err(err(format!(
            "query position {bad} is outside 1..{pos} (a query needs an earlier key)"
        )));
    }
    py.detach(move || {
        let mut qs = per_layer(&q, &qd, heads);
        let mut ks = per_layer(&k, &kd, heads);
        if rotated {
            let dims = [batch, heads, pos, hd];
            for x in qs.iter_mut().chain(ks.iter_mut()) {
                *x = unrotate(std::mem::take(x), dims, &position)?;
            }
        }
        let cap = Captured::from_parts(qs, ks, (batch, heads, pos, hd), vec![position; layers])
            .map_err(err)?;
        let heads = score_captured(&cap, &queries, tau, blocks, planes).map_err(err)?;
        let rows: Vec<serde_json::Value> = heads
            .iter()
            .map(|h| {
                let mut row = serde_json::json!({
                    "layer": h.layer,
                    "head": h.head,
                    "s_pos": h.scores.s_pos,
                    "s_sym": h.scores.s_sym,
                    "entropy": h.entropy,
                    "pure_0_1": purity(h.scores, Gamma::DEFAULT),
                    "pure_0_05": purity(h.scores, Gamma::STRICT),
                    "freq_use": h.freq_use,
                    "freq_mean_plane": mean_plane(&h.freq_use),
                });
                if let Some(b) = h.block {
                    row["block"] = serde_json::json!({"s_pos": b.s_pos, "s_sym": b.s_sym});
                }
                if planes {
                    row["planes"] = serde_json::to_value(&h.planes).unwrap_or_default();
                }
                row
            })
            .collect();
        serde_json::to_string(&rows).map_err(err)
    })
}

/// A run directory written by `ropelab train` (or a study's model).
#[pyclass(module = "ropelab._core", frozen)]
struct Run {
    dir: RunDir,
    config: RunConfig,
    root: PathBuf,
}

#[pymethods]
impl Run {
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        let (dir, config) = RunDir::open(&path).map_err(err)?;
        Ok(Self {
            dir,
            config,
            root: path,
        })
    }

    /// The run's directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.root.clone()
    }

    /// The steps of the checkpoints on disk, ascending.
    fn steps(&self) -> PyResult<Vec<usize>> {
        self.dir.checkpoints().map_err(err)
    }

    /// The run's configuration (JSON of config.toml).
    fn config_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.config).map_err(err)
    }

    /// Samples `0..n` of the run's task and seed in `split` (JSON list, see `generate`): the
    /// test split's first n are the samples `ropelab score --samples n` scores.
    #[pyo3(signature = (n, split="test", extra=0))]
    fn samples(&self, py: Python<'_>, n: usize, split: &str, extra: usize) -> PyResult<String> {
        let task = Task::new(self.config.task, self.config.layout.clone()).map_err(err)?;
        let (seed, split) = (self.config.seed, split.to_owned());
        py.detach(move || sample_records(task, seed, &split, n, extra))
    }

    /// The model of checkpoint `step` (verified against its manifest).
    fn model(&self, py: Python<'_>, step: usize) -> PyResult<Model> {
        let model = py
            .detach(|| self.dir.load_model(step, &self.config, &Device::Cpu))
            .map_err(err)?;
        Ok(Model { model })
    }
}

/// A checkpoint's GPT-J, hooked as ropelab's model is (TransformerLens hook names).
#[pyclass(module = "ropelab._core", frozen)]
struct Model {
    model: GptJ,
}

/// TransformerLens' layout of a hooked tensor: ropelab's [batch, heads, pos, d_head] as
/// [batch, pos, heads, d_head] for q, k, v, z and the rotated q, k; others unchanged.
fn transformer_lens_layout(kind: HookKind, t: &Tensor) -> candle_core::Result<Tensor> {
    match kind {
        HookKind::Q | HookKind::K | HookKind::V | HookKind::Z | HookKind::RotQ | HookKind::RotK => {
            t.transpose(1, 2)?.contiguous()
        }
        _ => Ok(t.clone()),
    }
}

#[pymethods]
impl Model {
    /// The model's configuration (JSON).
    fn config_json(&self) -> PyResult<String> {
        serde_json::to_string(self.model.config()).map_err(err)
    }

    /// The rotation of every layer as (layout, plane angles per position), or None where a
    /// layer has no rotation or one that angles cannot state (periodic tables, masked planes).
    fn rotation(&self) -> Vec<Option<(String, Vec<f64>)>> {
        let c = self.model.config();
        (0..c.n_layers)
            .map(|l| {
                let r = c.layer_position(l).rotation()?;
                if r.gains.iter().any(|&g| g != 1.0) {
                    return None;
                }
                let layout = match r.layout {
                    RopeLayout::Interleaved => "interleaved",
                    RopeLayout::HalfSplit => "half_split",
                };
                let thetas = r
                    .turns
                    .iter()
                    .map(|t| match t {
                        Turn::Rate(x) => Some(*x),
                        Turn::Table(_) | Turn::Uniform(_) => None,
                    })
                    .collect::<Option<Vec<f64>>>()?;
                Some((layout.to_owned(), thetas))
            })
            .collect()
    }

    /// Logits [batch, pos, vocab] of `tokens` [batch, pos] and the tensors at `hooks`
    /// (TransformerLens names, e.g. `blocks.0.attn.hook_pattern`) as numpy arrays.
    fn run<'py>(
        &self,
        py: Python<'py>,
        tokens: PyReadonlyArray2<'py, u32>,
        hooks: Vec<String>,
    ) -> PyResult<(Bound<'py, PyArrayDyn<f32>>, Bound<'py, PyDict>)> {
        let view = tokens.as_array();
        let (b, t) = (view.shape()[0], view.shape()[1]);
        let ids: Vec<u32> = view.iter().copied().collect();
        let vocab = self.model.config().vocab_size as u32;
        if let Some(bad) = ids.iter().find(|&&id| id >= vocab) {
            return Err(err(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        let points = hooks
            .iter()
            .map(|h| HookPoint::from_str(h).map_err(err))
            .collect::<PyResult<Vec<_>>>()?;
        if let Some(p) = points
            .iter()
            .find(|p| p.layer >= self.model.config().n_layers)
        {
            return Err(err(format!(
                "hook {p}: the model has {} layers",
                self.model.config().n_layers
            )));
        }
        let model = &self.model;
        let (logits, captured) = py
            .detach(|| -> ropelab_model::Result<_> {
                let ids = Tensor::from_vec(ids, (b, t), &Device::Cpu)?;
                let mut hooks = Hooks::new().capture(points.clone());
                let logits = model.forward(&ids, &mut hooks, None)?;
                let mut out = vec![];
                for p in &points {
                    if let Some(x) = hooks.get(*p) {
                        let x = transformer_lens_layout(p.kind, x)?;
                        out.push((p.to_string(), x.dims().to_vec(), flat_f32(&x)?));
                    }
                }
                Ok(((logits.dims().to_vec(), flat_f32(&logits)?), out))
            })
            .map_err(err)?;
        let dict = PyDict::new(py);
        for (name, dims, data) in captured {
            dict.set_item(name, array(py, data, &dims)?)?;
        }
        Ok((array(py, logits.1, &logits.0)?, dict))
    }
}

/// Every element of `t` as f32, in C order.
fn flat_f32(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.to_dtype(candle_core::DType::F32)?
        .flatten_all()?
        .to_vec1()
}

/// The module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RopelabError", m.py().get_type::<RopelabError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_TAU", Tau::DEFAULT.get())?;
    m.add("DEFAULT_GAMMA", Gamma::DEFAULT.get())?;
    m.add_function(wrap_pyfunction!(swap_scores, m)?)?;
    m.add_function(wrap_pyfunction!(generate, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(prompt, m)?)?;
    m.add_function(wrap_pyfunction!(generate_other, m)?)?;
    m.add_function(wrap_pyfunction!(validate_other, m)?)?;
    m.add_function(wrap_pyfunction!(vocabulary, m)?)?;
    m.add_function(wrap_pyfunction!(rope_frequencies, m)?)?;
    m.add_class::<Run>()?;
    m.add_class::<Model>()?;
    Ok(())
}
