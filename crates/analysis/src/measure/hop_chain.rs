//! Hand-built number-task models whose hop routes are known by construction, to check the hop
//! map and its verdict (docs/multihead.md, "Hop map"). The theory lab's hand-built heads are the
//! template: every layer is one real softmax RoPE head run through the trained models' attention
//! code (`ropelab_model::attention::attend`, so the hop map's hooks capture and replace its
//! pattern), with per-state query rows and constant keys; what a trained model's MLPs would
//! compute between layers is an exact lookup on each position's decoded state.
//!
//! Each position p holds a state: `Letter(x)` (its chain ends on letter x), `Dist(d)` (the next
//! position it must read is p - d) or `Unknown`. Its own token starts it: a letter is
//! `Letter`, an integer o is `Dist(o)`. A layer's query for `Dist(d)` is rho(-d theta_i) v in
//! every plane i (keys v everywhere), so the head attends p - d; other states attend p itself
//! (d = 0, read and ignored). The value is a one-hot (of the key's token or state, below),
//! decoded by argmax.
//!
//! - [`Route::OneHopPerLayer`]: the value is the key's *token*, so layer l (from 0) reads
//!   hop_(l+1)(p), one more offset per layer; 4 layers solve 4 hops.
//! - [`Route::Doubling`]: the value is the key's *state* after the layers below, so p adds the
//!   distance the key already knows: layer l reads hop_(2^l)(p) (pointer doubling); 3 layers
//!   solve up to 7 hops.
//!
//! A knock-out that removes the read edge leaves the row's weight on wrong positions, whose
//! decoded state is wrong: the edge is causal, as in a model that uses it.

use candle_core::{DType, Device, Tensor};
use ropelab_model::attention::attend;
use ropelab_model::{AttentionKind, Hooks, PositionEncoding, RopeLayout};
use ropelab_tasks::Vocab;

use super::hops::Routed;
use crate::{AnalysisError, Result};

/// How a hand-built chain composes its hops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Layer l reads the token at hop_(l+1): one hop per layer.
    OneHopPerLayer,
    /// Layer l reads the state of hop_(2^l): pointer doubling.
    Doubling,
}

/// RoPE planes of every layer; plane i turns by pi / 2^i per position, so a head's logit is
/// largest at exactly p - d for any d below 2^PLANES.
const PLANES: usize = 12;

/// Softmax inverse temperature: the logit gap to the next position is at least ~1, so the
/// read edge carries all but ~e^-40 of the weight.
const BETA: f64 = 40.0;

/// Logit of the answer at the last position (every other logit is 0).
const ANSWER_LOGIT: f32 = 10.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Unknown,
    Letter(u32),
    Dist(usize),
}

/// A hand-built number-task model with a known hop route (see the module docs).
#[derive(Debug, Clone)]
pub struct HopChain {
    route: Route,
    layers: usize,
    /// Per vocabulary id: `Some(o)` for the integer offset o, `None` otherwise.
    offsets: Vec<Option<usize>>,
    /// Per vocabulary id: whether it is a letter (an answer).
    letters: Vec<bool>,
    position: PositionEncoding,
}

impl HopChain {
    /// The chain over the number task's vocabulary `vocab` with enough layers for chains of up
    /// to `max_hops` hops: `max_hops` layers one hop at a time, ceil(log2(max_hops + 1))
    /// doubling.
    pub fn new(route: Route, vocab: &Vocab, max_hops: usize) -> Result<Self> {
        if max_hops == 0 {
            return Err(AnalysisError::Invalid(
                "a hop chain needs at least 1 hop".into(),
            ));
        }
        let tokens = vocab.tokens();
        let offsets: Vec<Option<usize>> = tokens
            .iter()
            .map(|t| t.parse::<usize>().ok().filter(|&o| o > 0))
            .collect();
        let letters: Vec<bool> = tokens
            .iter()
            .zip(&offsets)
            .map(|(t, o)| o.is_none() && t.chars().all(|c| c.is_ascii_lowercase()) && !t.is_empty())
            .collect();
        if !letters.iter().any(|&l| l) || !offsets.iter().any(Option::is_some) {
            return Err(AnalysisError::Invalid(
                "a hop chain needs the number task's vocabulary (integers and letters)".into(),
            ));
        }
        let layers = match route {
            Route::OneHopPerLayer => max_hops,
            Route::Doubling => (usize::BITS - max_hops.leading_zeros()) as usize,
        };
        let thetas = (0..PLANES)
            .map(|i| std::f64::consts::PI / f64::from(1u32 << i))
            .collect();
        Ok(Self {
            route,
            layers,
            offsets,
            letters,
            position: PositionEncoding::angles(thetas, RopeLayout::Interleaved),
        })
    }

    /// The route it was built with.
    pub fn route(&self) -> Route {
        self.route
    }

    fn token_state(&self, id: u32, p: usize) -> State {
        let i = id as usize;
        if self.letters.get(i).copied().unwrap_or(false) {
            return State::Letter(id);
        }
        match self.offsets.get(i).copied().flatten() {
            Some(o) if o <= p => State::Dist(o),
            _ => State::Unknown,
        }
    }

    /// The one-hot index of `state` among `vocab + t` values.
    fn index(&self, state: State) -> usize {
        match state {
            State::Unknown => 0,
            State::Letter(x) => x as usize,
            State::Dist(d) => self.letters.len() + d,
        }
    }

    /// Runs the layers on ids [batch, pos], through `hooks`: every position's state before
    /// layer 0 and after each layer, and what each layer's head wrote.
    fn walk(&self, ids: &Tensor, hooks: &mut Hooks) -> Result<Walk> {
        let (b, t) = ids.dims2()?;
        let ids: Vec<u32> = ids.flatten_all()?.to_dtype(DType::U32)?.to_vec1()?;
        let tokens: Vec<State> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| self.token_state(id, i % t))
            .collect();
        let width = self.letters.len() + t;
        let mut state = tokens.clone();
        let mut states = vec![state.clone()];
        let mut reads = vec![];
        let device = Device::Cpu;
        for layer in 0..self.layers {
            let mut q = vec![0f32; b * t * 2 * PLANES];
            let mut k = vec![0f32; b * t * 2 * PLANES];
            let mut v = vec![0f32; b * t * width];
            for i in 0..b * t {
                for plane in 0..PLANES {
                    let theta = std::f64::consts::PI / f64::from(1u32 << plane);
                    k[(i * PLANES + plane) * 2..][..2].copy_from_slice(&rot(0.0));
                    let d = match state[i] {
                        State::Dist(d) => d,
                        _ => 0,
                    };
                    q[(i * PLANES + plane) * 2..][..2].copy_from_slice(&rot(-(d as f64) * theta));
                }
                // One hop per layer writes the key's token (its vocabulary id), doubling the
                // key's state.
                let value = match self.route {
                    Route::OneHopPerLayer => ids[i] as usize,
                    Route::Doubling => self.index(state[i]),
                };
                v[i * width + value] = 1.0;
            }
            let q = Tensor::from_vec(q, (b, 1, t, 2 * PLANES), &device)?; // [batch, 1, pos, 2 planes]
            let k = Tensor::from_vec(k, (b, 1, t, 2 * PLANES), &device)?;
            let v = Tensor::from_vec(v, (b, 1, t, width), &device)?; // [batch, 1, pos, states]
            let z = attend(
                layer,
                q,
                k,
                &v,
                &self.position,
                AttentionKind::Softmax,
                BETA,
                hooks,
                None,
            )?; // [batch, 1, pos, states]
            let read: Vec<u32> = z.squeeze(1)?.argmax_keepdim(2)?.flatten_all()?.to_vec1()?;
            for (i, s) in state.iter_mut().enumerate() {
                if let State::Dist(d) = *s {
                    let p = i % t;
                    let read = match self.route {
                        Route::OneHopPerLayer => self.token_state(read[i], usize::MAX),
                        Route::Doubling => self.state_of(read[i] as usize),
                    };
                    *s = match read {
                        State::Letter(x) => State::Letter(x),
                        State::Dist(e) if d + e <= p => State::Dist(d + e),
                        _ => State::Unknown,
                    };
                }
            }
            states.push(state.clone());
            reads.push(z.squeeze(1)?); // [batch, pos, states]
        }
        Ok(Walk { ids, states, reads })
    }

    fn state_of(&self, index: usize) -> State {
        let n = self.letters.len();
        if index >= n {
            State::Dist(index - n)
        } else if self.letters[index] {
            State::Letter(index as u32)
        } else {
            State::Unknown
        }
    }
}

/// One pass of a hop chain over a batch (positions flattened, sample-major).
struct Walk {
    /// Every position's token.
    ids: Vec<u32>,
    /// Every position's state before layer 0 (`states[0]`) and after each layer.
    states: Vec<Vec<State>>,
    /// What each layer's head wrote, [batch, pos, states] per layer.
    reads: Vec<Tensor>,
}

/// rho(angle) v with v = (0, 1), as in the theory lab's heads.
fn rot(angle: f64) -> [f32; 2] {
    [-angle.sin() as f32, angle.cos() as f32]
}

impl Routed for HopChain {
    fn layers(&self) -> usize {
        self.layers
    }

    fn heads(&self) -> usize {
        1
    }

    fn device(&self) -> &Device {
        &Device::Cpu
    }

    fn batch_size(&self, seq_len: usize, memory: usize) -> usize {
        // The pattern and the one-hot values dominate: [pos, pos] + [pos, vocab + pos] floats.
        let per_sample = 4 * seq_len * (2 * seq_len + self.letters.len()) * 4;
        (memory / per_sample.max(1)).max(1)
    }

    fn last_logits(&self, ids: &Tensor, hooks: &mut Hooks) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let walk = self.walk(ids, hooks)?;
        let state = &walk.states[self.layers];
        let device = Device::Cpu;
        let vocab = self.letters.len();
        let mut logits = vec![0f32; b * vocab];
        for row in 0..b {
            if let State::Letter(x) = state[row * t + t - 1] {
                logits[row * vocab + x as usize] = ANSWER_LOGIT;
            }
        }
        Ok(Tensor::from_vec(logits, (b, vocab), &device)?)
    }

    /// A residual stream of one-hot subspaces, as a trained model's blocks write theirs: the
    /// token (its vocabulary id), then per layer what its head wrote (the soft one-hot value it read) and
    /// the state its lookup (a trained model's MLP) made of it; a layer's subspaces are zero
    /// before it runs. Each subspace has `vocab + pos` entries (one per state).
    fn residual(&self, ids: &Tensor) -> Result<Vec<Tensor>> {
        let (b, t) = ids.dims2()?;
        let walk = self.walk(ids, &mut Hooks::new())?;
        let width = self.letters.len() + t;
        let one_hot = |index: &dyn Fn(usize) -> usize| -> Result<Tensor> {
            let mut x = vec![0f32; b * t * width];
            for i in 0..b * t {
                x[i * width + index(i)] = 1.0;
            }
            Ok(Tensor::from_vec(x, (b, t, width), &Device::Cpu)?) // [batch, pos, states]
        };
        let mut parts = vec![one_hot(&|i| walk.ids[i] as usize)?];
        for layer in 0..self.layers {
            parts.push(walk.reads[layer].clone());
            parts.push(one_hot(&|i| self.index(walk.states[layer + 1][i]))?);
        }
        let zero = Tensor::zeros((b, t, width), DType::F32, &Device::Cpu)?;
        (0..=self.layers)
            .map(|s| {
                let written = 1 + 2 * s;
                let stream: Vec<Tensor> = (0..parts.len())
                    .map(|k| {
                        if k < written {
                            parts[k].clone()
                        } else {
                            zero.clone()
                        }
                    })
                    .collect();
                Ok(Tensor::cat(&stream, 2)?) // [batch, pos, (1 + 2 layers) states]
            })
            .collect()
    }
}
