//! The lens pointed at a real pretrained model (SmolLM2-135M): swap scores of every head on
//! the tasks' natural-language prompts, and RoPE's failure statistics with the model's own
//! query and key vectors.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use ropelab_model::{HookKind, HookPoint, Hooks};
use ropelab_pretrained::llama::Llama;
use ropelab_pretrained::tokenizer::GgufTokenizer;
use ropelab_tasks::TaskKind;
use ropelab_theory::failures::{failure_rows, FailureConfig, FailureRow, Triple};
use ropelab_theory::format::NumberFormat;
use ropelab_theory::schedule::Schedule;
use serde::{Deserialize, Serialize};

use crate::lens::heads::{mean_plane, score_captured};
use crate::lens::purity::{purity, Gamma, HeadKind};
use crate::lens::swap::{SwapScores, Tau};
use crate::{AnalysisError, Captured, Result};

/// What [`score_prompts`] scores.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptScoreOptions {
    /// The task whose 1-hop prompt version is scored.
    pub task: TaskKind,
    /// Target-window size of the prompts.
    pub size: usize,
    /// Prompts (dataset seed 0, instances 0..n); scores are averaged over them.
    pub prompts: usize,
    /// Temperature of the swap weights.
    pub tau: Tau,
}

impl PromptScoreOptions {
    /// Default target-window size of the prompts.
    pub const SIZE: usize = 16;
    /// Default number of prompts.
    pub const PROMPTS: usize = 10;
}

/// One head's scores averaged over the prompts (one JSON line of `pretrained score`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptHead {
    /// Block.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// Mean positional score.
    pub s_pos: f64,
    /// Mean symbolic score.
    pub s_sym: f64,
    /// Mean attention entropy at the query.
    pub entropy: f64,
    /// Type at gamma 0.1 (of the mean scores).
    pub pure_0_1: HeadKind,
    /// Type at gamma 0.05.
    pub pure_0_05: HeadKind,
    /// Mean of the frequency-use weighted plane index.
    pub freq_mean_plane: f64,
    /// The model that made the row (`NAME sha256:PREFIX`, see
    /// `ropelab_pretrained::identity::model_identity`); empty in files written before it was
    /// recorded.
    #[serde(default)]
    pub model: String,
    /// The task of the prompts scored (None in files written before the prompts' settings
    /// were recorded; so are the three below).
    #[serde(default)]
    pub task: Option<TaskKind>,
    /// Target-window size of the prompts.
    #[serde(default)]
    pub size: Option<usize>,
    /// Prompts the scores are averaged over.
    #[serde(default)]
    pub prompts: Option<usize>,
    /// Temperature of the swap weights.
    #[serde(default)]
    pub tau: Option<f64>,
    /// The model's layers and heads per layer (None in files written before it was recorded):
    /// the grid a file of these rows holds whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<(usize, usize)>,
    /// The rotary planes of a head (None in files written before it was recorded): the plane
    /// index `freq_mean_plane` weighs lies in [0, planes - 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planes: Option<usize>,
    /// Tokens of the longest prompt scored (None in files written before it was recorded): a
    /// last token attends over at most that many keys, so its entropy is at most their log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_prompt: Option<usize>,
}

impl PromptHead {
    /// The prompts' settings as a report states them (`number task, size 16, 10 prompts, tau
    /// 0.1`), or None when the row does not record them.
    pub fn settings(&self) -> Option<String> {
        let tau = self.tau?;
        let tau = if tau == 0.0 || (1e-4..1e9).contains(&tau.abs()) {
            format!("{tau}")
        } else {
            format!("{tau:e}")
        };
        Some(format!(
            "{} task, size {}, {} prompts, tau {tau}",
            self.task?, self.size?, self.prompts?
        ))
    }

    /// Why this row (read back from a file) is not one [`score_prompts`] writes: scores outside
    /// [0, 1], an entropy that is no entropy, or a type its own scores do not give.
    pub fn defect(&self) -> Option<String> {
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        if !(unit(self.s_pos) && unit(self.s_sym)) {
            return Some(format!(
                "layer {} head {}: scores s_pos {} and s_sym {} must lie in [0, 1]",
                self.layer, self.head, self.s_pos, self.s_sym
            ));
        }
        if !(self.entropy.is_finite() && self.entropy >= 0.0) {
            return Some(format!(
                "layer {} head {}: entropy {} is not a finite non-negative number",
                self.layer, self.head, self.entropy
            ));
        }
        // Bounds a measured row keeps (twenty-fifth pass, B-S5): a mean plane index among the
        // head's planes, an entropy at most the log of the keys attended.
        if !(self.freq_mean_plane.is_finite() && self.freq_mean_plane >= 0.0) {
            return Some(format!(
                "layer {} head {}: freq_mean_plane {} is no mean of plane indices (0 or more)",
                self.layer, self.head, self.freq_mean_plane
            ));
        }
        if let Some(planes) = self.planes {
            if planes == 0 || self.freq_mean_plane > (planes - 1) as f64 + 1e-9 {
                return Some(format!(
                    "layer {} head {}: freq_mean_plane {} lies beyond the {planes} rotary planes \
                     (indices 0 to {})",
                    self.layer,
                    self.head,
                    self.freq_mean_plane,
                    planes.saturating_sub(1)
                ));
            }
        }
        if let Some(keys) = self.longest_prompt {
            let most = (keys.max(1) as f64).ln();
            if self.entropy > most + 1e-6 {
                return Some(format!(
                    "layer {} head {}: entropy {} exceeds ln({keys}) = {most:.4}, the most a \
                     last token attending over at most {keys} keys can have",
                    self.layer, self.head, self.entropy
                ));
            }
        }

        let scores = SwapScores {
            s_pos: self.s_pos,
            s_sym: self.s_sym,
        };
        for (key, gamma, kind) in [
            ("pure_0_1", Gamma::DEFAULT, self.pure_0_1),
            ("pure_0_05", Gamma::STRICT, self.pure_0_05),
        ] {
            let own = purity(scores, gamma);
            if own != kind {
                return Some(format!(
                    "layer {} head {}: {key} is {kind}, but its scores make it {own}",
                    self.layer, self.head
                ));
            }
        }
        None
    }
}

/// Bytes of captured attention patterns one batch of [`score_prompts`] may hold (every layer's
/// [rows, heads, pos, pos] in f32); a batch takes as many prompts as fit, at least one.
pub const SCORE_BATCH_BYTES: u64 = 256 << 20;

/// Swap scores of every head at the last token of `options.prompts` prompts of the task's
/// natural-language version, averaged over prompts; `progress(done)` after each batch. The
/// prompts run in batches (right-padded: a causal model's positions before the padding do not
/// see it, and each prompt is scored at its own last token over its own keys) of as many as
/// [`SCORE_BATCH_BYTES`] of patterns allow; the same scores as one prompt at a time to f32
/// rounding (a test).
pub fn score_prompts(
    model: &Llama,
    tokenizer: &GgufTokenizer,
    options: &PromptScoreOptions,
    progress: impl FnMut(usize),
) -> Result<Vec<PromptHead>> {
    score_prompts_in_batches(model, tokenizer, options, SCORE_BATCH_BYTES, progress)
}

/// [`score_prompts`] with the batch's pattern budget given (`0`: one prompt at a time).
pub fn score_prompts_in_batches(
    model: &Llama,
    tokenizer: &GgufTokenizer,
    options: &PromptScoreOptions,
    batch_bytes: u64,
    mut progress: impl FnMut(usize),
) -> Result<Vec<PromptHead>> {
    if options.prompts == 0 {
        return Err(AnalysisError::Invalid("score at least one prompt".into()));
    }
    let c = model.config();
    let (n_layers, n_heads) = (c.n_layers, c.n_heads);
    let prompts = (0..options.prompts)
        .map(|i| -> Result<Vec<u32>> {
            let p = ropelab_tasks::prompt::prompt(options.task, options.size, 0, i)?;
            let ids = tokenizer.encode(&p.prompt)?;
            if ids.len() > c.context_length {
                return Err(AnalysisError::Invalid(format!(
                    "prompt {i} of the {} task at size {} is {} tokens, beyond the model's \
                     context of {} tokens",
                    options.task,
                    options.size,
                    ids.len(),
                    c.context_length
                )));
            }
            Ok(ids)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut sums = vec![[0.0f64; 4]; n_layers * n_heads];
    let mut planes = None;
    let mut done = 0;
    while done < prompts.len() {
        // As many prompts as the budget allows (patterns grow with the longest squared).
        let (mut end, mut longest) = (done + 1, prompts[done].len());
        while end < prompts.len() {
            let wider = longest.max(prompts[end].len());
            let rows = (end - done + 1) as u64;
            let bytes = 4 * rows * (n_layers * n_heads) as u64 * (wider * wider) as u64;
            if bytes > batch_bytes {
                break;
            }
            (end, longest) = (end + 1, wider);
        }
        let batch = &prompts[done..end];
        let mut ids = vec![0u32; batch.len() * longest];
        for (r, p) in batch.iter().enumerate() {
            ids[r * longest..r * longest + p.len()].copy_from_slice(p);
        }
        let input = Tensor::from_vec(ids, (batch.len(), longest), &Device::Cpu)?;
        let mut hooks: Hooks = Captured::hooks(n_layers, false);
        model.trunk(&input, &mut hooks)?;
        let cap = Captured::from_hooks(&hooks, vec![model.position().clone(); n_layers], false)?;
        for (r, p) in batch.iter().enumerate() {
            // This row alone, at its own last token.
            let mut queries = vec![vec![]; batch.len()];
            queries[r] = vec![p.len() - 1];
            let heads = score_captured(&cap, &queries, options.tau, None, false)?;
            for (slot, h) in sums.iter_mut().zip(&heads) {
                planes = Some(h.freq_use.len());
                let values = [
                    h.scores.s_pos,
                    h.scores.s_sym,
                    h.entropy,
                    mean_plane(&h.freq_use),
                ];
                for (s, v) in slot.iter_mut().zip(values) {
                    *s += v;
                }
            }
        }
        done = end;
        progress(done);
    }
    let n = options.prompts as f64;
    Ok(sums
        .iter()
        .enumerate()
        .map(|(idx, s)| {
            let scores = SwapScores {
                s_pos: s[0] / n,
                s_sym: s[1] / n,
            };
            PromptHead {
                layer: idx / n_heads,
                head: idx % n_heads,
                s_pos: scores.s_pos,
                s_sym: scores.s_sym,
                entropy: s[2] / n,
                pure_0_1: purity(scores, Gamma::DEFAULT),
                pure_0_05: purity(scores, Gamma::STRICT),
                freq_mean_plane: s[3] / n,
                model: String::new(),
                task: Some(options.task),
                size: Some(options.size),
                prompts: Some(options.prompts),
                tau: Some(options.tau.get()),
                shape: Some((sums.len() / n_heads, n_heads)),
                planes,
                longest_prompt: prompts.iter().map(Vec::len).max(),
            }
        })
        .collect())
}

/// What [`model_rope_failures`] measures.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRopeOptions {
    /// Layers whose heads supply q and k.
    pub layers: Vec<usize>,
    /// Context lengths M (each at least 3).
    pub lengths: Vec<usize>,
    /// (q, k1, k2) triples per layer, drawn from the prompt's positions.
    pub draws: usize,
    /// Number format of the aliasing events.
    pub format: NumberFormat,
}

impl Default for ModelRopeOptions {
    fn default() -> Self {
        Self {
            layers: vec![0, 15, 29],
            lengths: vec![256, 2048, 8192],
            draws: 100,
            format: NumberFormat::Bf16,
        }
    }
}

impl ModelRopeOptions {
    /// Tokens of the text run through the model: the longest context length, at most the
    /// model's context of `context` tokens.
    pub fn text_tokens(&self, context: usize) -> usize {
        self.lengths.iter().copied().max().unwrap_or(2).min(context)
    }

    /// Memory of [`model_rope_failures`] on `config`'s model: a hooked forward pass over
    /// [`ModelRopeOptions::text_tokens`] tokens (attention in key blocks: no full pattern is
    /// kept), the captured q and k of the chosen layers, and the failure statistics' draws and
    /// score curves (see [`FailureConfig::need`]).
    pub fn need(&self, config: &ropelab_pretrained::gguf::LlamaConfig) -> ropelab_io::Need {
        use ropelab_io::resources::bytes;
        let t = self.text_tokens(config.context_length);
        let captured = bytes(&[
            4,
            2,
            self.layers.len(),
            config.n_heads,
            t,
            config.head_dim(),
        ]);
        FailureConfig {
            d: config.head_dim(),
            lengths: self.lengths.clone(),
            draws: self.draws,
            ..FailureConfig::default()
        }
        .need()
        .memory(
            config.forward_bytes(t, false, 0),
            format!("a forward pass over {t} tokens"),
        )
        .memory(
            captured,
            format!("q and k of {} layers at {t} positions", self.layers.len()),
        )
    }
}

/// The English text whose q and k vectors [`model_rope_failures`] reads, repeated to the length
/// asked for.
pub const ROPE_TEXT: &str = "Rotary position embeddings rotate each pair of query and key \
    dimensions by an angle proportional to the position, so attention scores depend on relative \
    distance. The lowest frequencies turn so slowly that they barely move across a long \
    document, while the highest ones wrap around many times within a single sentence. A model \
    that reads a long report, a story or a table of numbers must still find the token it needs, \
    whether it sits in the previous line or thousands of positions earlier. ";

/// One layer's failure rates at one context length (one CSV row of `pretrained rope-stats`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerFailureRow {
    /// Block.
    pub layer: usize,
    /// Context length M.
    pub length: usize,
    /// Position inversion rate.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub position_inversion: f64,
    /// Position aliasing rate.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub position_aliasing: f64,
    /// Token inversion rate.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub token_inversion: f64,
    /// Token aliasing rate.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub token_aliasing: f64,
    /// Empirical mean of the scores.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub mu_empirical: f64,
    /// Empirical standard deviation of the scores.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub sigma_empirical: f64,
    /// The model's context length (0 in files written before it was recorded): an M beyond
    /// it is an extrapolation, which the report says (tenth pass, S3).
    #[serde(default)]
    pub context: usize,
    /// Number format of the aliasing events (`f64`, `f32`, `bf16`, ...; empty in files
    /// written before it was recorded).
    #[serde(default)]
    pub format: String,
    /// (q, k1, k2) triples drawn (0 in files written before it was recorded).
    #[serde(default)]
    pub draws: usize,
    /// The model that made the row (`NAME sha256:PREFIX`, see
    /// `ropelab_pretrained::identity::model_identity`); empty in files written before it was
    /// recorded.
    #[serde(default)]
    pub model: String,
}

impl LayerFailureRow {
    /// Why this row (read back from a file) is not one [`model_rope_failures`] writes: a rate
    /// outside [0, 1] (NaN included), a context length below 3, or a spread that is no
    /// standard deviation.
    pub fn defect(&self) -> Option<String> {
        let at = format!("layer {} at M = {}", self.layer, self.length);
        for (name, rate) in [
            ("position_inversion", self.position_inversion),
            ("position_aliasing", self.position_aliasing),
            ("token_inversion", self.token_inversion),
            ("token_aliasing", self.token_aliasing),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Some(format!("{at}: {name} {rate} is no rate in [0, 1]"));
            }
        }
        if self.length < 3 {
            return Some(format!("{at}: context lengths are at least 3"));
        }
        // Every row names its settings (ninth pass, S11): a row without them cannot be told
        // from one measured otherwise.
        if self
            .format
            .parse::<ropelab_theory::format::NumberFormat>()
            .is_err()
        {
            return Some(format!(
                "{at}: format {:?} is no number format of ropelab (a file from before rows \
                 named their format, or edited: measure again)",
                self.format.chars().take(20).collect::<String>()
            ));
        }
        if self.draws == 0 {
            return Some(format!("{at}: draws must be at least 1"));
        }
        // Each rate is a mean over the draws of a count over the row's length: over the
        // near x far distance pairs in halves (ties count half), the M distances, or the M - 1
        // steps between neighbours (twenty-seventh pass). The f64 sum over draws keeps it
        // whole to a part in 1e12.
        let (m, draws) = (self.length as f64, self.draws as f64);
        let near = (self.length / 2) as f64;
        for (name, rate, out_of) in [
            (
                "position_inversion",
                self.position_inversion,
                2.0 * near * (m - near),
            ),
            ("position_aliasing", self.position_aliasing, m),
            ("token_inversion", self.token_inversion, m - 1.0),
            ("token_aliasing", self.token_aliasing, m),
        ] {
            let count = rate * out_of * draws;
            if (count - count.round()).abs() > 1e-6 + count * 1e-12 {
                return Some(format!(
                    "{at}: {name} {rate} is no mean over {} draws of whole counts out of {}: a \
                     damaged or edited file",
                    self.draws, out_of
                ));
            }
        }
        if !(self.mu_empirical.is_finite()
            && self.sigma_empirical.is_finite()
            && self.sigma_empirical >= 0.0)
        {
            return Some(format!(
                "{at}: mean {} and standard deviation {} are not finite (the deviation \
                 non-negative)",
                self.mu_empirical, self.sigma_empirical
            ));
        }
        None
    }

    fn new(layer: usize, r: &FailureRow, options: &ModelRopeOptions, context: usize) -> Self {
        Self {
            context,
            layer,
            length: r.length,
            position_inversion: r.position_inversion,
            position_aliasing: r.position_aliasing,
            token_inversion: r.token_inversion,
            token_aliasing: r.token_aliasing,
            mu_empirical: r.mu_empirical,
            sigma_empirical: r.sigma_empirical,
            format: options.format.to_string(),
            draws: options.draws,
            model: String::new(),
        }
    }
}

/// RoPE failure statistics (the theory lab's four events) with the model's own pre-rotation
/// q and k vectors: one hooked forward pass over [`ROPE_TEXT`] repeated to the longest context
/// length M (at most the model's context) captures q and k of the chosen layers; for each layer
/// and each M, `draws` triples (a query at one position, two keys at others, a random head) are
/// drawn from the positions below M (seed 0), so a longer context uses vectors from deeper into
/// the text. A causal model's vectors at positions below M are the same in a pass over M tokens
/// as in the longer one. M beyond the model's context draws from the whole text.
/// `progress(blocks done)` after each block of the forward pass (about 3 s each at 8,192
/// tokens on 2 cores).
pub fn model_rope_failures(
    model: &Llama,
    tokenizer: &GgufTokenizer,
    options: &ModelRopeOptions,
    progress: impl FnMut(usize),
) -> Result<Vec<LayerFailureRow>> {
    let c = model.config();
    if let Some(l) = options.layers.iter().find(|&&l| l >= c.n_layers) {
        return Err(AnalysisError::Invalid(format!(
            "layer {l} does not exist (the model has {} layers)",
            c.n_layers
        )));
    }
    // Positions 1..M hold the query and two distinct keys (position 0 is the first token,
    // which many heads use as a sink): M = 2 would compare a key with itself.
    if options.lengths.iter().any(|&m| m < 3) || options.draws == 0 {
        return Err(AnalysisError::Invalid(
            "context lengths must be at least 3 (a query and two distinct keys after the first \
             token) and draws at least 1"
                .into(),
        ));
    }
    let want = options.text_tokens(c.context_length);
    let mut ids = tokenizer.encode(ROPE_TEXT)?;
    let unit = ids.len().max(1);
    if ids.len() < want {
        ids = tokenizer.encode(&ROPE_TEXT.repeat(want.div_ceil(unit) + 1))?;
    }
    ids.truncate(want);
    let t = ids.len();
    if t < 3 {
        return Err(AnalysisError::Invalid(format!(
            "the text is {t} token(s) long: the statistics need a query and keys at two distinct \
             positions after the first token"
        )));
    }
    let input = Tensor::from_vec(ids, (1, t), &Device::Cpu)?;
    let points: Vec<HookPoint> = options
        .layers
        .iter()
        .flat_map(|&l| {
            [
                HookPoint::new(l, HookKind::Q),
                HookPoint::new(l, HookKind::K),
            ]
        })
        .collect();
    let mut hooks = Hooks::new().capture(points);
    model.trunk_with_progress(&input, &mut hooks, progress)?;
    // The model's own plane frequencies (scaled where its file scales them).
    let freqs: Vec<f64> = match model.position().rotation() {
        Some(r) => r
            .turns
            .iter()
            .map(|t| match t {
                ropelab_model::Turn::Rate(rate) => Ok(*rate),
                ropelab_model::Turn::Table(_) | ropelab_model::Turn::Uniform(_) => Err(
                    AnalysisError::Invalid("a periodic rotation has no constant frequency".into()),
                ),
            })
            .collect::<Result<_>>()?,
        None => Schedule::Plain { base: c.rope_base }.frequencies(c.rope_dim / 2)?,
    };
    let planes: Vec<(usize, usize)> = (0..c.rope_dim / 2)
        .map(|p| model.position().plane_dims(p))
        .collect();
    let hd = c.head_dim();
    let mut rows = vec![];
    for &layer in &options.layers {
        let get = |kind| -> Result<Vec<f32>> {
            let captured = hooks.get(HookPoint::new(layer, kind)).ok_or_else(|| {
                AnalysisError::Invalid(format!("layer {layer}'s {kind:?} was not captured"))
            })?;
            Ok(captured.flatten_all()?.to_vec1()?)
        };
        let (q, k) = (get(HookKind::Q)?, get(HookKind::K)?); // [1, heads, pos, head_dim]
                                                             // The theory's vectors, plane by plane (see `theory_vector`).
        let vec_at = |data: &[f32], head: usize, pos: usize| -> Vec<f64> {
            theory_vector(&data[(head * t + pos) * hd..][..hd], &planes)
        };
        for &m in &options.lengths {
            // Each (layer, length) row draws from its own stream, so a row does not depend on
            // which other rows were asked, nor their order (twenty-fourth pass, B-S4).
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(((layer as u64) << 40) ^ m as u64);
            let below = m.min(t);
            let mut draws = ropelab_theory::failures::room_for_draws(options.draws)?;
            draws.extend((0..options.draws).map(|_| {
                let head = rng.random_range(0..c.n_heads);
                let i = rng.random_range(1..below);
                // Two distinct key positions in 1..below: j2 is j1 moved on by 1 to
                // below - 2 places, wrapping (a key compared with itself aliases always).
                let j1 = rng.random_range(1..below);
                let j2 = 1 + (j1 - 1 + rng.random_range(1..below - 1)) % (below - 1);
                Triple {
                    q: vec_at(&q, head, i),
                    k1: vec_at(&k, head, j1),
                    k2: vec_at(&k, head, j2),
                }
            }));
            rows.extend(
                failure_rows(&draws, &freqs, c.rope_base, &[m], options.format)
                    .iter()
                    .map(|r| LayerFailureRow::new(layer, r, options, c.context_length)),
            );
        }
    }
    Ok(rows)
}

/// A head's q or k vector as the theory reads it: plane p is the pair (x[a], -x[b]) for the
/// model's own plane dims (a, b). The theory numbers planes as consecutive pairs and scores
/// S(m) = q^T R(m) k, while the model's logit at distance m = i - j is q . R(-m) k; negating the
/// second dim of every plane in both vectors turns one into the other, whatever the layout.
fn theory_vector(x: &[f32], planes: &[(usize, usize)]) -> Vec<f64> {
    planes
        .iter()
        .flat_map(|&(a, b)| [f64::from(x[a]), -f64::from(x[b])])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ropelab_model::{PositionEncoding, RopeLayout};

    /// Both layouts give the same theory vector for the same planes.
    #[test]
    fn theory_vectors_follow_the_models_plane_layout() {
        let rope = |layout| PositionEncoding::rope(10_000.0, 4, layout);
        let planes = |p: &PositionEncoding| (0..2).map(|i| p.plane_dims(i)).collect::<Vec<_>>();
        // Plane 0 = (1, 2), plane 1 = (3, 4) in each layout's own dim order.
        let interleaved = [1.0f32, 2.0, 3.0, 4.0];
        let half_split = [1.0f32, 3.0, 2.0, 4.0];
        let want = vec![1.0, -2.0, 3.0, -4.0];
        let il = rope(RopeLayout::Interleaved);
        let hs = rope(RopeLayout::HalfSplit);
        assert_eq!(theory_vector(&interleaved, &planes(&il)), want);
        assert_eq!(theory_vector(&half_split, &planes(&hs)), want);
    }
}
