//! Where each hop lives (`ropelab probe`, docs/multihead.md, "Where each hop lives"): linear probes on a
//! number-task model's residual stream. At every position p whose own chain reaches j hops,
//! a probe reads, from the stream after each layer, what hop_j(p) is: the **token** there (what
//! a chain must fetch) and its **distance** p - hop_j(p) (where a chain must look). Each probe
//! is a least-squares classifier (ridge regression onto one-hot classes, argmax), fitted on the
//! first half of the samples and scored on the second half.
//!
//! One hop per layer predicts that the token at hop j becomes readable at the stream after
//! layer j - 1 and not before; a model that composes hops (e.g. pointer doubling, 2^(l+1) - 1
//! hops after layer l) makes some hop readable earlier. A control probe fitted on what one hop
//! per layer knows at each stream says how much an early read exceeds it ([`ProbeRoute`]).

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{Device, D};
use ropelab_tasks::Dataset;
use ropelab_train::batch;
use serde::{Deserialize, Serialize};

use crate::measure::hops::{number_run, sample_hops, Routed, Source, MAX_HOP};
use crate::{AnalysisError, Result};

/// Test samples a model is probed on by default (half to fit, half to score).
pub const DEFAULT_SAMPLES: usize = 2048;

/// The file a run keeps its probes in.
pub const PROBES_FILE: &str = "probes.csv";

/// A probe "reads" its target when its held-out accuracy reaches this.
pub const READ_ACCURACY: f64 = 0.9;

/// Ridge penalty, relative to the mean diagonal of the centred features' Gram matrix.
pub const RIDGE: f64 = 1e-3;

/// What a probe reads about hop_j(p).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// The token at hop_j(p).
    Token,
    /// The distance p - hop_j(p).
    Distance,
}

impl Target {
    /// Both targets.
    pub const ALL: [Target; 2] = [Target::Token, Target::Distance];
}

/// One line of `probes.csv`: a probe of one stream, target and hop count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRow {
    /// The positions probed: the last token (the query) or every position whose chain
    /// reaches j hops.
    #[serde(rename = "from")]
    pub source: Source,
    /// The residual stream: 0 the embeddings, l + 1 the stream after layer l.
    pub stream: usize,
    /// What the probe reads.
    pub target: Target,
    /// Hops along the position's own chain.
    pub j: usize,
    /// Positions it was fitted on.
    pub n_train: usize,
    /// Positions it was scored on.
    pub n_test: usize,
    /// Test positions left out because their class never occurs among the fitted ones (no
    /// classifier can name it).
    #[serde(default)]
    pub unseen: usize,
    /// Test samples those positions come from (the intervals count samples, not positions:
    /// the positions of one sample are not independent).
    pub test_samples: usize,
    /// Held-out accuracy.
    pub accuracy: f64,
    /// Held-out accuracy of always answering the training set's most common class.
    pub chance: f64,
    /// Held-out accuracy of the control: what one hop per layer knows at this stream, where that
    /// does not already determine the target (empty otherwise): the better of the same
    /// classifier on the one-hot tokens at hops 0 ..= stream of the position's chain plus its
    /// one-hot position, and the most common target for each (position, position of hop
    /// stream + 1), which one hop per layer knows from the offsets it has read. A partial
    /// control: neither predictor sees every combination of what one hop per layer knows.
    pub control: Option<f64>,
}

/// The distinct labels of `y`, sorted, and each one's index among them.
fn class_index(y: &[u32]) -> (Vec<u32>, BTreeMap<u32, usize>) {
    let mut classes: Vec<u32> = y.to_vec();
    classes.sort_unstable();
    classes.dedup();
    let index = classes.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    (classes, index)
}

/// Ridge solve of the normal equations `gram` W = `xty` (`gram` [a][a], `xty` [a][classes]):
/// adds RIDGE x the diagonal's sum over `d` features (`d` >= a: the others are all zero) and
/// `jitter` to the diagonal, factors by Cholesky and returns W per class, `w[class][feature]`;
/// None when `gram` is not positive definite.
fn ridge_solve(
    mut gram: Vec<Vec<f64>>,
    xty: &[Vec<f64>],
    jitter: f64,
    d: usize,
) -> Option<Vec<Vec<f64>>> {
    let a = gram.len();
    let scale = (0..a).map(|i| gram[i][i]).sum::<f64>() / d.max(1) as f64;
    for (i, row) in gram.iter_mut().enumerate() {
        row[i] += RIDGE * scale.max(1e-12) + jitter;
    }
    let chol = cholesky(gram)?;
    let classes = xty.first().map_or(0, Vec::len);
    Some(
        (0..classes)
            .map(|c| {
                let b: Vec<f64> = xty.iter().map(|r| r[c]).collect();
                cholesky_solve(&chol, &b)
            })
            .collect(),
    )
}

/// The least-squares classifier of `classes` from rows of `x` (each `d` features): centred on
/// the training mean, ridge-regressed onto one-hot classes by a Cholesky solve of the normal
/// equations (f64), with each class's share of the training rows as its intercept (the
/// unpenalised intercept of centred least squares).
#[derive(Debug, Clone)]
pub struct Probe {
    mean: Vec<f64>,
    /// Each class's share of the training rows (the intercept of its one-hot column).
    prior: Vec<f64>,
    /// [d][classes]
    weights: Vec<Vec<f64>>,
    classes: Vec<u32>,
}

impl Probe {
    /// Fits the probe on `x` (`n` rows of `d`, row-major) and labels `y`; None without rows.
    pub fn fit(x: &[f32], d: usize, y: &[u32]) -> Option<Probe> {
        let n = y.len();
        if n == 0 || x.len() != n * d {
            return None;
        }
        let (classes, index) = class_index(y);
        let mut mean = vec![0.0f64; d];
        for row in x.chunks(d) {
            for (m, &v) in mean.iter_mut().zip(row) {
                *m += f64::from(v);
            }
        }
        mean.iter_mut().for_each(|m| *m /= n as f64);
        // Features constant over the training rows centre to zero: their least-squares weight
        // is exactly zero, so the system is solved over the others only (one-hot streams have
        // many such columns). The ridge penalty still scales with the mean over all d.
        let active: Vec<usize> = (0..d)
            .filter(|&i| x.chunks(d).any(|row| f64::from(row[i]) != mean[i]))
            .collect();
        let a = active.len();
        let mut gram = vec![vec![0.0f64; a]; a];
        let mut xty = vec![vec![0.0f64; classes.len()]; a];
        let mut centred = vec![0.0f64; a];
        for (row, label) in x.chunks(d).zip(y) {
            for (c, &i) in centred.iter_mut().zip(&active) {
                *c = f64::from(row[i]) - mean[i];
            }
            for i in 0..a {
                let ci = centred[i];
                if ci == 0.0 {
                    continue;
                }
                for (g, &cj) in gram[i].iter_mut().zip(&centred) {
                    *g += ci * cj;
                }
                xty[i][index[label]] += ci;
            }
        }
        let weights_t = ridge_solve(gram, &xty, 0.0, d)?;
        let mut weights = vec![vec![0.0f64; classes.len()]; d];
        for (k, &i) in active.iter().enumerate() {
            weights[i] = weights_t.iter().map(|w| w[k]).collect();
        }
        let mut prior = vec![0.0f64; classes.len()];
        for label in y {
            prior[index[label]] += 1.0 / n as f64;
        }
        Some(Probe {
            mean,
            prior,
            weights,
            classes,
        })
    }

    /// The predicted class of one row of `d` features.
    pub fn predict(&self, row: &[f32]) -> u32 {
        let mut scores = self.prior.clone();
        for ((&v, m), w) in row.iter().zip(&self.mean).zip(&self.weights) {
            let c = f64::from(v) - m;
            for (s, wc) in scores.iter_mut().zip(w) {
                *s += c * wc;
            }
        }
        let best = scores
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i);
        self.classes[best]
    }
}

/// The lower-triangular Cholesky factor of a symmetric positive definite matrix (None when it
/// is not).
fn cholesky(a: Vec<Vec<f64>>) -> Option<Vec<Vec<f64>>> {
    let n = a.len();
    let mut l = vec![vec![0.0f64; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let v = a[i][i] - s;
                if v <= 0.0 {
                    return None;
                }
                l[i][j] = v.sqrt();
            } else {
                l[i][j] = (a[i][j] - s) / l[j][j];
            }
        }
    }
    Some(l)
}

/// Solves L L' x = b.
fn cholesky_solve(l: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let n = b.len();
    let mut y = vec![0.0f64; n];
    for i in 0..n {
        let s: f64 = (0..i).map(|k| l[i][k] * y[k]).sum();
        y[i] = (b[i] - s) / l[i][i];
    }
    let mut x = vec![0.0f64; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|k| l[k][i] * x[k]).sum();
        x[i] = (y[i] - s) / l[i][i];
    }
    x
}

/// Held-out accuracy of a probe fitted on (`x_train`, `y_train`) and scored on (`x_test`,
/// `y_test`), and that of the training set's most common class; None when either set is empty.
pub fn probe_accuracy(
    (x_train, y_train): (&[f32], &[u32]),
    (x_test, y_test): (&[f32], &[u32]),
    d: usize,
) -> Option<(f64, f64)> {
    if y_test.is_empty() {
        return None;
    }
    let probe = Probe::fit(x_train, d, y_train)?;
    let right = x_test
        .chunks(d)
        .zip(y_test)
        .filter(|(row, &y)| probe.predict(row) == y)
        .count();
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for &y in y_train {
        *counts.entry(y).or_default() += 1;
    }
    let common = counts.iter().max_by_key(|(_, &c)| c).map(|(&k, _)| k);
    let chance = y_test.iter().filter(|&&y| Some(y) == common).count();
    let n = y_test.len() as f64;
    Some((right as f64 / n, chance as f64 / n))
}

/// Held-out accuracy of the least-squares classifier on one-hot features given as the active
/// indices of each row (below `dim`; an intercept is added), fitted on `train` and scored on
/// `test`; None when either set is empty or the system is singular.
pub fn sparse_accuracy(
    (x_train, y_train): (&[Vec<usize>], &[u32]),
    (x_test, y_test): (&[Vec<usize>], &[u32]),
    dim: usize,
) -> Option<f64> {
    if y_train.is_empty() || y_test.is_empty() {
        return None;
    }
    let d = dim + 1; // + intercept
    let (classes, index) = class_index(y_train);
    let mut gram = vec![vec![0.0f64; d]; d];
    let mut xty = vec![vec![0.0f64; classes.len()]; d];
    for (row, y) in x_train.iter().zip(y_train) {
        let active: Vec<usize> = row.iter().copied().chain([dim]).collect();
        for &a in &active {
            for &b in &active {
                gram[a][b] += 1.0;
            }
            xty[a][index[y]] += 1.0;
        }
    }
    let weights = ridge_solve(gram, &xty, 1e-9, d)?;
    let right = x_test
        .iter()
        .zip(y_test)
        .filter(|(row, &y)| {
            let score = |w: &Vec<f64>| row.iter().chain(&[dim]).map(|&a| w[a]).sum::<f64>();
            let best = weights
                .iter()
                .enumerate()
                .max_by(|a, b| score(a.1).total_cmp(&score(b.1)))
                .map_or(0, |(i, _)| i);
            classes[best] == y
        })
        .count();
    Some(right as f64 / y_test.len() as f64)
}

/// A position's own chain: the ids at hops 0 ..= MAX_HOP (hop 0: the position itself) and
/// the positions of hops 1 ..= MAX_HOP.
type Chain = ([Option<u32>; MAX_HOP + 1], [Option<usize>; MAX_HOP]);

/// Every position's own chain, per sample of `data`.
fn chains(data: &Dataset) -> Result<Vec<Vec<Chain>>> {
    (0..data.len())
        .map(|i| {
            let (ids, targets) = sample_hops(data, i)?;
            Ok(targets
                .iter()
                .enumerate()
                .map(|(p, hops)| {
                    let mut out = [None; MAX_HOP + 1];
                    out[0] = Some(ids[p]);
                    for (k, at) in hops.iter().enumerate() {
                        out[k + 1] = at.map(|q| ids[q]);
                    }
                    (out, *hops)
                })
                .collect())
        })
        .collect()
}

/// Held-out accuracy of answering, for each key, the most common training label of that key
/// (the training set's most common label for a key it never saw); None without test rows.
pub fn mode_accuracy<K: Ord + Clone>(
    (k_train, y_train): (&[K], &[u32]),
    (k_test, y_test): (&[K], &[u32]),
) -> Option<f64> {
    if y_test.is_empty() || y_train.is_empty() {
        return None;
    }
    let mode = |counts: &BTreeMap<u32, usize>| {
        counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(&y, _)| y)
    };
    let mut by_key: BTreeMap<K, BTreeMap<u32, usize>> = BTreeMap::new();
    let mut all: BTreeMap<u32, usize> = BTreeMap::new();
    for (k, &y) in k_train.iter().zip(y_train) {
        *by_key.entry(k.clone()).or_default().entry(y).or_default() += 1;
        *all.entry(y).or_default() += 1;
    }
    let fallback = mode(&all);
    let right = k_test
        .iter()
        .zip(y_test)
        .filter(|(k, &y)| by_key.get(*k).and_then(mode).or(fallback) == Some(y))
        .count();
    Some(right as f64 / y_test.len() as f64)
}

/// What one hop per layer knows at stream `stream` of position `p` (of `seq_len`) with chain ids
/// `chain`: the one-hot ids at hops 0 ..= stream (`vocab` ids each), one "chain ended" index
/// per hop, and the one-hot position; [`control_dim`] indices in all.
fn control_features(
    chain: &[Option<u32>; MAX_HOP + 1],
    stream: usize,
    vocab: usize,
    p: usize,
) -> Vec<usize> {
    let known = stream.min(MAX_HOP) + 1;
    let mut out: Vec<usize> = (0..known)
        .map(|k| match chain[k] {
            Some(id) => k * vocab + id as usize,
            None => known * vocab + k,
        })
        .collect();
    out.push(known * (vocab + 1) + p);
    out
}

/// The number of control features at `stream` for a vocabulary of `vocab` ids and inputs of
/// `seq_len` positions.
fn control_dim(stream: usize, vocab: usize, seq_len: usize) -> usize {
    (stream.min(MAX_HOP) + 1) * (vocab + 1) + seq_len
}

/// Whether one hop per layer already determines `target` of hop `j` at stream `stream`: the
/// token at hop j is fetched by stream j, the distance is the sum of the offsets at hops
/// 0 .. j - 1.
fn determined(target: Target, j: usize, stream: usize) -> bool {
    match target {
        Target::Token => j <= stream,
        Target::Distance => j <= stream + 1,
    }
}

/// Every residual stream of `model` on `data` ([`Routed::residual`]): `streams[s]` is
/// [samples, pos, width] (f32, row-major), s = 0 before layer 0, s = l + 1 after layer l; and
/// the width.
pub fn residual_streams(
    model: &impl Routed,
    data: &Dataset,
    memory: usize,
) -> Result<(Vec<Vec<f32>>, usize)> {
    let size = model.batch_size(data.seq_len(), memory).max(1);
    let mut streams: Vec<Vec<f32>> = vec![vec![]; model.layers() + 1];
    let mut width = 0;
    for start in (0..data.len()).step_by(size) {
        let indices: Vec<usize> = (start..data.len().min(start + size)).collect();
        let b = batch(data, &indices, model.device())?;
        for (s, x) in model.residual(&b.ids)?.into_iter().enumerate() {
            width = x.dim(D::Minus1)?; // x: [batch, pos, width]
            streams
                .get_mut(s)
                .ok_or_else(|| AnalysisError::Invalid(format!("no stream {s}")))?
                .extend(x.flatten_all()?.to_vec1::<f32>()?);
        }
    }
    Ok((streams, width))
}

/// One probed item: (sample, position, target value).
type Item = (usize, usize, u32);

/// The items of every position whose own chain reaches `j` hops (only the last position with
/// [`Source::Last`]), per target, over the samples of `data`.
fn labels(data: &Dataset, j: usize, from: Source) -> Result<BTreeMap<Target, Vec<Item>>> {
    let mut out: BTreeMap<Target, Vec<Item>> = BTreeMap::new();
    for i in 0..data.len() {
        let (ids, targets) = sample_hops(data, i)?;
        let last = ids.len().saturating_sub(1);
        for (p, hops) in targets.iter().enumerate() {
            if from == Source::Last && p != last {
                continue;
            }
            if let Some(at) = hops[j - 1] {
                out.entry(Target::Token).or_default().push((i, p, ids[at]));
                out.entry(Target::Distance)
                    .or_default()
                    .push((i, p, (p - at) as u32));
            }
        }
    }
    Ok(out)
}

/// Probes every stream of `streams` (from [`residual_streams`], `d` features per position,
/// `seq_len` positions per sample) for every source, target and hop count on `data`: samples
/// before `data.len() / 2` fit, the rest score. `progress(done, total)` after each stream.
pub fn probe_streams(
    streams: &[Vec<f32>],
    d: usize,
    data: &Dataset,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<ProbeRow>> {
    let t = data.seq_len();
    let split = data.len() / 2;
    let vocab = data.task().vocab().len();
    let chains = chains(data)?;
    let mut plans = vec![];
    for from in Source::ALL {
        for j in 1..=MAX_HOP {
            for (target, items) in labels(data, j, from)? {
                plans.push((from, target, j, items));
            }
        }
    }
    let mut rows = vec![];
    for (s, stream) in streams.iter().enumerate() {
        for (from, target, j, all) in &plans {
            // A probe cannot name a class it never saw fitted: test items of such a class are
            // left out (and counted), for the probe and its control alike.
            let seen: std::collections::BTreeSet<u32> = all
                .iter()
                .filter(|it| it.0 < split)
                .map(|it| it.2)
                .collect();
            let items: Vec<Item> = all
                .iter()
                .copied()
                .filter(|it| it.0 < split || seen.contains(&it.2))
                .collect();
            let unseen = all.len() - items.len();
            let (mut xtr, mut ytr, mut xte, mut yte) = (vec![], vec![], vec![], vec![]);
            for &(i, p, y) in &items {
                let at = (i * t + p) * d;
                let row = stream.get(at..at + d).ok_or_else(|| {
                    AnalysisError::Invalid(format!("stream {s} has no position {p} of sample {i}"))
                })?;
                if i < split {
                    xtr.extend_from_slice(row);
                    ytr.push(y);
                } else {
                    xte.extend_from_slice(row);
                    yte.push(y);
                }
            }
            let Some((accuracy, chance)) = probe_accuracy((&xtr, &ytr), (&xte, &yte), d) else {
                continue;
            };
            let control = if determined(*target, *j, s) {
                None
            } else {
                let (mut ftr, mut fte, mut ktr, mut kte) = (vec![], vec![], vec![], vec![]);
                for &(i, p, _) in &items {
                    let (ids, positions) = &chains[i][p];
                    let f = control_features(ids, s, vocab, p);
                    // Where the next hop is: known to one hop per layer at this stream.
                    let key = (p, positions.get(s).copied().flatten());
                    if i < split {
                        ftr.push(f);
                        ktr.push(key);
                    } else {
                        fte.push(f);
                        kte.push(key);
                    }
                }
                let linear = sparse_accuracy((&ftr, &ytr), (&fte, &yte), control_dim(s, vocab, t));
                let table = mode_accuracy((&ktr, &ytr), (&kte, &yte));
                match (linear, table) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                }
            };
            rows.push(ProbeRow {
                source: *from,
                stream: s,
                target: *target,
                j: *j,
                n_train: ytr.len(),
                n_test: yte.len(),
                unseen,
                test_samples: {
                    let mut ids: Vec<usize> = items
                        .iter()
                        .map(|it| it.0)
                        .filter(|&i| i >= split)
                        .collect();
                    ids.dedup();
                    ids.len()
                },
                accuracy,
                chance,
                control,
            });
        }
        progress(s + 1, streams.len());
    }
    Ok(rows)
}

/// Probes the latest checkpoint of the number-task run in `root` on `n` test samples (see the
/// module docs); an error naming the run for another task.
pub fn probe_run(
    root: &Path,
    n: usize,
    memory: usize,
    device: &Device,
    progress: impl FnMut(usize, usize),
) -> Result<(usize, Vec<ProbeRow>)> {
    if n < 2 {
        return Err(AnalysisError::Invalid(
            "probing needs at least 2 test samples (half fit, half score)".into(),
        ));
    }
    let (step, _, data, model) = number_run(root, None, n, device, "the probes read")?;
    let (streams, width) = residual_streams(&model, &data, memory)?;
    let rows = probe_streams(&streams, width, &data, progress)?;
    Ok((step, rows))
}

/// What the probes say about how a model composes its hops.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRoute {
    /// Per hop count j (index j - 1): the first stream at which a probe reads the token at
    /// hop j, None when none does.
    pub token: Vec<Option<usize>>,
    /// Per hop count j: the first stream at which a probe reads the distance to hop j.
    pub distance: Vec<Option<usize>>,
    /// Every probe that knows more than one hop per layer can at its stream (see
    /// [`ProbeRoute::of`]), earliest stream first.
    pub beyond: Vec<Beyond>,
    /// The read threshold.
    pub threshold: f64,
    /// Hop counts whose probes were all scored on fewer than [`MIN_TEST_SAMPLES`] test
    /// samples, or that have no probe: neither read nor unread.
    pub thin: Vec<usize>,
}

/// A probe that reads more about hop j than one hop per layer can know at its stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Beyond {
    /// The hop count.
    pub j: usize,
    /// What was read.
    pub target: Target,
    /// The stream.
    pub stream: usize,
    /// The probe's held-out accuracy.
    pub accuracy: f64,
    /// The control probe's.
    pub control: f64,
}

/// The three verdicts of the probes.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeVerdict {
    /// Something about hop j that one hop per layer cannot know at its stream is *read* there
    /// (held-out accuracy >= the read threshold) and beats its control: composition, or a
    /// route other than the chain.
    Composes(Beyond),
    /// Every hop's token is read, and no probe knows more than one hop per layer can at its
    /// stream (none beats its control).
    OneHopPerLayer,
    /// Some probe knows more than one hop per layer can but does not read its target (partial
    /// knowledge: composition in part, or attention spread over several positions whose tokens
    /// a probe partly tells apart), or some hop's token is never read: not decided.
    Undetermined(String),
}

/// Stream `s` in words: `in the embeddings`, `after layer 2`.
pub fn stream_name(s: usize) -> String {
    if s == 0 {
        "in the embeddings".into()
    } else {
        format!("after layer {}", s - 1)
    }
}

/// The fewest test samples a probe is judged on: below it, one lucky answer would read a hop
/// (ninth pass: a probe scored on one sample read hop 4), so the probe neither reads nor beats
/// its control, and a hop with no better probe is left undetermined.
pub const MIN_TEST_SAMPLES: usize = 30;

/// A probe beats its control when it is at least this much more accurate, and their 95%
/// Wilson intervals do not overlap.
pub const BEYOND_MARGIN: f64 = 0.1;

impl ProbeRoute {
    /// The route of the `rows` probing from `from`: a probe *reads* when its held-out accuracy
    /// is >= `threshold` and >= chance + 0.1; a probe knows *beyond* one hop per layer when the
    /// target is not determined by its stream's chain tokens and it beats its control probe
    /// (>= [`BEYOND_MARGIN`] more accurate, 95% Wilson intervals apart), or, without a control,
    /// reads. A probe scored on fewer than [`MIN_TEST_SAMPLES`] test samples does neither.
    pub fn of(rows: &[ProbeRow], from: Source, threshold: f64) -> Self {
        let enough = |r: &ProbeRow| r.test_samples >= MIN_TEST_SAMPLES;
        let reads =
            |r: &ProbeRow| enough(r) && r.accuracy >= threshold && r.accuracy >= r.chance + 0.1;
        let first = |target: Target| -> Vec<Option<usize>> {
            (1..=MAX_HOP)
                .map(|j| {
                    rows.iter()
                        .filter(|r| r.source == from && r.j == j && r.target == target && reads(r))
                        .map(|r| r.stream)
                        .min()
                })
                .collect()
        };
        let beats = |r: &ProbeRow| -> Option<f64> {
            if !enough(r) || determined(r.target, r.j, r.stream) {
                return None;
            }
            match r.control {
                Some(c) => {
                    // Counted over test samples, not positions (conservative for `every`).
                    let n = r.test_samples.clamp(1, r.n_test.max(1));
                    let k = |a: f64| (a * n as f64).round() as usize;
                    let (lo, _) = crate::claims::wilson(k(r.accuracy), n);
                    let (_, hi) = crate::claims::wilson(k(c), n);
                    (r.accuracy >= c + BEYOND_MARGIN && lo > hi).then_some(c)
                }
                None => reads(r).then_some(r.chance),
            }
        };
        let beyond = rows
            .iter()
            .filter(|r| r.source == from)
            .filter_map(|r| {
                beats(r).map(|control| Beyond {
                    j: r.j,
                    target: r.target,
                    stream: r.stream,
                    accuracy: r.accuracy,
                    control,
                })
            })
            .collect::<Vec<_>>();
        let mut beyond = beyond;
        beyond.sort_by_key(|b| (b.stream, b.j));
        // A hop with no probe at all (none could be fitted on so few samples) is thin too
        // (tenth pass, SILENT-5).
        let thin = (1..=MAX_HOP)
            .filter(|&j| {
                rows.iter()
                    .filter(|r| r.source == from && r.j == j)
                    .all(|r| !enough(r))
            })
            .collect();
        ProbeRoute {
            token: first(Target::Token),
            distance: first(Target::Distance),
            beyond,
            threshold,
            thin,
        }
    }

    /// The verdict for a model answering up to `max_hop` hops. One hop per layer reads the
    /// token at hop j after layer j - 1 (stream j) at the earliest and the distance to hop j
    /// one stream sooner (it sums the offsets at hops 0 .. j - 1; the distance to hop 1 is the
    /// position's own token).
    pub fn verdict(&self, max_hop: usize) -> ProbeVerdict {
        let beyond: Vec<&Beyond> = self.beyond.iter().filter(|b| b.j <= max_hop).collect();
        if let Some(b) = beyond.iter().find(|b| b.accuracy >= self.threshold) {
            return ProbeVerdict::Composes(**b);
        }
        if let Some(b) = beyond.first() {
            return ProbeVerdict::Undetermined(format!(
                "{} hop {} is partly known {} ({:.3} against its control {:.3}, below the read \
                 threshold {}): more than one hop per layer knows there, less than a read: \
                 composition in part, or attention spread over several positions, not told \
                 apart",
                match b.target {
                    Target::Token => "the token at",
                    Target::Distance => "the distance to",
                },
                b.j,
                stream_name(b.stream),
                b.accuracy,
                b.control,
                self.threshold
            ));
        }
        let unread: Vec<String> = (0..max_hop.min(MAX_HOP))
            .filter(|&jm1| self.token[jm1].is_none())
            .map(|jm1| (jm1 + 1).to_string())
            .collect();
        let thin: Vec<String> = (1..=max_hop.min(MAX_HOP))
            .filter(|j| self.thin.contains(j))
            .map(|j| j.to_string())
            .collect();
        if unread.is_empty() {
            ProbeVerdict::OneHopPerLayer
        } else if !thin.is_empty() {
            ProbeVerdict::Undetermined(format!(
                "the probes of hop {} were scored on fewer than {MIN_TEST_SAMPLES} test samples \
                 (or none could be fitted): too few to say whether the hop is read (probe more \
                 samples)",
                thin.join(", ")
            ))
        } else {
            ProbeVerdict::Undetermined(format!(
                "no probe reads the token at hop {} at any layer and none knows more than one \
                 hop per layer can: where the hops are carried is not seen",
                unread.join(", ")
            ))
        }
    }

    /// In words: where each hop's token is first read (`hop 1 after layer 0, ..., hop 3
    /// unread`).
    pub fn text(&self) -> String {
        self.token
            .iter()
            .enumerate()
            .map(|(jm1, s)| match *s {
                Some(s) => format!("hop {} {}", jm1 + 1, stream_name(s)),
                None => format!("hop {} unread", jm1 + 1),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_linearly_coded_label_is_read_and_noise_is_not() {
        // 3 classes coded on 2 of 4 features, the other 2 noise.
        let mut state = 11u64;
        let mut r = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f64 / (1u64 << 31) as f64 - 0.5) as f32
        };
        let code = [[1.0f32, 0.0], [0.0, 1.0], [-1.0, -1.0]];
        let mut make = |n: usize| {
            let (mut x, mut y) = (vec![], vec![]);
            for i in 0..n {
                let c = (i % 3) as u32;
                let k = code[c as usize];
                x.extend([k[0] + 0.1 * r(), k[1] + 0.1 * r(), r(), r()]);
                y.push(c);
            }
            (x, y)
        };
        let (xtr, ytr) = make(90);
        let (xte, yte) = make(60);
        let (acc, chance) = probe_accuracy((&xtr, &ytr), (&xte, &yte), 4).unwrap();
        assert_eq!(acc, 1.0);
        assert!((chance - 1.0 / 3.0).abs() < 1e-9);
        // Labels unrelated to the features: near chance.
        let shuffled: Vec<u32> = (0..90).map(|i| ((i * 7 + i / 5) % 3) as u32).collect();
        let (acc, _) = probe_accuracy((&xtr, &shuffled), (&xte, &yte), 4).unwrap();
        assert!(acc < 0.7, "{acc}");
    }

    #[test]
    fn the_route_reads_the_first_stream_of_each_hop() {
        let row = |stream, j, accuracy| ProbeRow {
            source: Source::Every,
            stream,
            target: Target::Token,
            j,
            n_train: 100,
            n_test: 100,
            unseen: 0,
            test_samples: 100,
            accuracy,
            chance: 0.1,
            control: None,
        };
        // One hop per layer: hop j at stream j.
        let one: Vec<ProbeRow> = (1..=4).map(|j| row(j, j, 0.95)).collect();
        assert_eq!(
            ProbeRoute::of(&one, Source::Every, 0.9).verdict(4),
            ProbeVerdict::OneHopPerLayer
        );
        // No probe at all from the last token (too few samples to fit one): said so.
        let v = ProbeRoute::of(&one, Source::Last, 0.9).verdict(4);
        assert!(
            matches!(v, ProbeVerdict::Undetermined(ref w) if w.contains("none could be fitted")),
            "{v:?}"
        );
        // Hop 4 probed on one test sample: its perfect score reads nothing (ninth pass).
        let mut thin = one.clone();
        thin[3].test_samples = 1;
        thin[3].n_test = 1;
        thin[3].accuracy = 1.0;
        let v = ProbeRoute::of(&thin, Source::Every, 0.9).verdict(4);
        assert!(
            matches!(v, ProbeVerdict::Undetermined(ref w) if w.contains("hop 4 were scored on fewer than 30")),
            "{v:?}"
        );
        assert_eq!(
            ProbeRoute::of(&thin, Source::Every, 0.9).verdict(3),
            ProbeVerdict::OneHopPerLayer
        );
        // A composing read on one sample is no read either.
        thin.push(ProbeRow {
            test_samples: 1,
            n_test: 1,
            ..row(3, 4, 1.0)
        });
        assert!(matches!(
            ProbeRoute::of(&thin, Source::Every, 0.9).verdict(4),
            ProbeVerdict::Undetermined(_)
        ));
        // Hop 4's token at stream 3: composes.
        let mut doubling = one.clone();
        doubling.push(row(3, 4, 0.99));
        assert!(matches!(
            ProbeRoute::of(&doubling, Source::Every, 0.9).verdict(4),
            ProbeVerdict::Composes(Beyond {
                j: 4,
                target: Target::Token,
                stream: 3,
                ..
            })
        ));
        // With a control probe: 0.5 against a control of 0.1 on 1,000 positions is beyond one
        // hop per layer; 0.15 against 0.1 is not.
        let mut weak = one.clone();
        weak.push(ProbeRow {
            n_test: 1000,
            test_samples: 1000,
            control: Some(0.1),
            ..row(2, 4, 0.15)
        });
        assert_eq!(
            ProbeRoute::of(&weak, Source::Every, 0.9).verdict(4),
            ProbeVerdict::OneHopPerLayer
        );
        weak.push(ProbeRow {
            n_test: 1000,
            test_samples: 1000,
            control: Some(0.1),
            ..row(2, 3, 0.5)
        });
        // Partial knowledge beyond one hop per layer (0.5 against 0.1) is not a read: not
        // decided.
        let v = ProbeRoute::of(&weak, Source::Every, 0.9).verdict(3);
        assert!(
            matches!(v, ProbeVerdict::Undetermined(ref w) if w.contains("hop 3 is partly known after layer 1")),
            "{v:?}"
        );
        // A read beyond (0.95 against 0.0) at hop 4 in the embeddings does not hide the partial
        // hit on hop 3 from a model of 3 hops, and decides a model of 4.
        weak.push(ProbeRow {
            n_test: 1000,
            test_samples: 1000,
            control: Some(0.0),
            ..row(0, 4, 0.95)
        });
        assert!(matches!(
            ProbeRoute::of(&weak, Source::Every, 0.9).verdict(3),
            ProbeVerdict::Undetermined(_)
        ));
        assert!(matches!(
            ProbeRoute::of(&weak, Source::Every, 0.9).verdict(4),
            ProbeVerdict::Composes(Beyond {
                j: 4,
                stream: 0,
                ..
            })
        ));
        // The distance to hop 1 in the embeddings (the position's own token) and to hop 3
        // after layer 1 are what one hop per layer allows; to hop 3 in stream 1, not.
        let distance = |stream, j| ProbeRow {
            target: Target::Distance,
            ..row(stream, j, 0.95)
        };
        let mut allowed = one.clone();
        allowed.extend([distance(0, 1), distance(2, 3)]);
        assert_eq!(
            ProbeRoute::of(&allowed, Source::Every, 0.9).verdict(4),
            ProbeVerdict::OneHopPerLayer
        );
        allowed.push(distance(1, 3));
        assert!(matches!(
            ProbeRoute::of(&allowed, Source::Every, 0.9).verdict(4),
            ProbeVerdict::Composes(Beyond {
                j: 3,
                target: Target::Distance,
                stream: 1,
                ..
            })
        ));
        // Hop 3 never read.
        let gap: Vec<ProbeRow> = one.iter().filter(|r| r.j != 3).cloned().collect();
        let v = ProbeRoute::of(&gap, Source::Every, 0.9).verdict(4);
        assert!(
            matches!(v, ProbeVerdict::Undetermined(ref w) if w.contains("hop 3")),
            "{v:?}"
        );
        assert_eq!(
            ProbeRoute::of(&gap, Source::Every, 0.9).text(),
            "hop 1 after layer 0, hop 2 after layer 1, hop 3 unread, hop 4 after layer 3"
        );
    }
}
