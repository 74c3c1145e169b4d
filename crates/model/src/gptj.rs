//! The GPT-J decoder: token embedding, blocks with parallel attention and MLP off one
//! LayerNorm, final LayerNorm, and an unembedding with bias. Every tensor passes through the
//! named hook points of [`crate::hooks`].

use candle_core::{DType, Device, Tensor, Var, D};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use crate::attention::{attend_in_blocks, ATTENTION_BLOCK};
use crate::hooks::{HookKind, HookPoint, Hooks};
use crate::layout::{BlockParams, GptjLayout, NormParams, OuterParams};
use crate::ops::{layer_norm, Dropout};
use crate::{ModelConfig, Result};

/// A GPT-J-style decoder whose parameters are candle `Var`s (trainable in place), stored in
/// the order of its [`GptjLayout`].
#[derive(Debug, Clone)]
pub struct GptJ {
    config: ModelConfig,
    layout: GptjLayout,
    vars: Vec<Var>, // one per tensor of the layout, in its order
    device: Device,
    /// Forward passes read detached parameters: no autograd graph is kept (see [`GptJ::frozen`]).
    frozen: bool,
    /// The position of the first token (0; randomised positions train at others, see
    /// [`GptJ::starting_at`]).
    start: usize,
}

/// x [..., in] times the transpose of a Linear weight [out, in].
fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let (rows, inner) = (x.elem_count() / dims[dims.len() - 1], dims[dims.len() - 1]);
    let y = x.reshape((rows, inner))?.matmul(&w.t()?)?;
    let mut out = dims;
    *out.last_mut().expect("linear input has a last dim") = w.dim(0)?;
    Ok(y.reshape(out)?)
}

impl GptJ {
    /// A freshly initialised model: Linear and embedding weights N(0, 0.02), biases 0,
    /// LayerNorm weights 1, the padding row of the embedding 0. `seed` fixes every value.
    pub fn new(config: ModelConfig, seed: u64, device: &Device) -> Result<Self> {
        config.check()?;
        let layout = GptjLayout::new(&config);
        let tensors = layout
            .params()
            .specs()
            .iter()
            .enumerate()
            .map(|(i, spec)| init(&spec.name, &spec.shape, seed, i as u64, device))
            .collect::<Result<Vec<_>>>()?;
        Self::from_tensors(config, layout, tensors, device)
    }

    /// Builds the model from tensors in layout order (shapes already checked).
    fn from_tensors(
        config: ModelConfig,
        layout: GptjLayout,
        tensors: Vec<Tensor>,
        device: &Device,
    ) -> Result<Self> {
        let vars = tensors
            .iter()
            .map(Var::from_tensor)
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            config,
            layout,
            vars,
            device: device.clone(),
            frozen: false,
            start: 0,
        })
    }

    /// This model's parameter layout.
    pub fn layout(&self) -> &GptjLayout {
        &self.layout
    }

    /// Builds a model from named tensors (e.g. a safetensors file); `origin` names the source
    /// in errors. Every expected name must be present with its shape; no others are allowed.
    pub fn from_named(
        config: ModelConfig,
        mut named: std::collections::HashMap<String, Tensor>,
        origin: &std::path::Path,
        device: &Device,
    ) -> Result<Self> {
        config.check()?;
        let layout = GptjLayout::new(&config);
        let mut tensors = Vec::new();
        for spec in layout.params().specs() {
            let (name, shape) = (&spec.name, &spec.shape);
            let t = named.remove(name).ok_or_else(|| {
                crate::ModelError::checkpoint(origin, format!("tensor {name} is missing"))
            })?;
            if t.dims() != shape.as_slice() {
                return Err(crate::ModelError::checkpoint(
                    origin,
                    format!(
                        "tensor {name} has shape {:?}, where the checkpoint's config needs {shape:?}",
                        t.dims()
                    ),
                ));
            }
            tensors.push(t.to_dtype(DType::F32)?.to_device(device)?);
        }
        // A tied model's file may carry the shared matrix again as lm_head.weight.
        if config.tied_embeddings {
            named.remove("lm_head.weight");
        }
        if let Some(extra) = named.keys().min() {
            return Err(crate::ModelError::checkpoint(
                origin,
                format!("unexpected tensor {extra} (does the config match the weights?)"),
            ));
        }
        Self::from_tensors(config, layout, tensors, device)
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The device the parameters live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Every parameter with its Hugging Face name, in layout order.
    pub fn named_vars(&self) -> Vec<(String, &Var)> {
        self.layout
            .params()
            .specs()
            .iter()
            .map(|s| s.name.clone())
            .zip(&self.vars)
            .collect()
    }

    /// Block `layer`'s parameters as forward passes read them.
    fn block_params(&self, layer: usize) -> BlockParams<Tensor> {
        self.layout.block(layer).map(|&i| self.param(&self.vars[i]))
    }

    /// The parameters outside the blocks as forward passes read them.
    fn outer_params(&self) -> OuterParams<Tensor> {
        self.layout.outer().map(|&i| self.param(&self.vars[i]))
    }

    /// Logits at every position: ids [batch, pos] (u32) -> [batch, pos, vocab].
    pub fn forward(
        &self,
        ids: &Tensor,
        hooks: &mut Hooks,
        dropout: Option<&mut Dropout>,
    ) -> Result<Tensor> {
        let x = self.trunk(ids, hooks, dropout)?;
        self.unembed(&x)
    }

    /// Logits at the last position only: ids [batch, pos] -> [batch, vocab].
    pub fn forward_last(
        &self,
        ids: &Tensor,
        hooks: &mut Hooks,
        dropout: Option<&mut Dropout>,
    ) -> Result<Tensor> {
        let x = self.trunk(ids, hooks, dropout)?; // [batch, pos, d_model]
        let last = x.narrow(1, x.dim(1)? - 1, 1)?.squeeze(1)?; // [batch, d_model]
        self.unembed(&last)
    }

    /// The same model (sharing its parameters) reading its inputs at positions
    /// `start .. start + pos` instead of `0 .. pos`: rotary angles and absolute encodings are
    /// those of the shifted positions, the causal mask and relative distances are unchanged.
    /// Randomised positions (docs/bias.md) train each batch at a drawn start.
    pub fn starting_at(mut self, start: usize) -> Self {
        self.start = start;
        self
    }

    /// The position of the first token (see [`GptJ::starting_at`]).
    pub fn start(&self) -> usize {
        self.start
    }

    /// Residual stream after the last block: ids [batch, pos] -> [batch, pos, d_model].
    pub fn trunk(
        &self,
        ids: &Tensor,
        hooks: &mut Hooks,
        mut dropout: Option<&mut Dropout>,
    ) -> Result<Tensor> {
        let c = &self.config;
        hooks.check(c.n_layers, c.n_heads, c.d_head() / 2)?;
        let (b, t) = ids.dims2()?;
        let wte = self.param(&self.vars[self.layout.outer().wte]);
        let emb = wte.index_select(&ids.flatten_all()?, 0)?;
        let mut x = emb.reshape((b, t, c.d_model))?;
        if let Some(pe) = self.absolute_positions(t)? {
            x = x.broadcast_add(&pe)?; // + [pos, d_model]
        }
        if let Some(d) = dropout.as_deref_mut() {
            x = d.apply(&x)?;
        }
        for layer in 0..c.n_layers {
            x = self.block(layer, &x, hooks, dropout.as_deref_mut())?;
        }
        Ok(x)
    }

    /// The absolute position vectors added to the embeddings at positions start..start + t,
    /// [t, d_model]
    /// (`None` when the model has no absolute encoding). A learned table is read through the
    /// encoding's rule for positions beyond `max_len` (an error, or clamped).
    fn absolute_positions(&self, t: usize) -> Result<Option<Tensor>> {
        let c = &self.config;
        let Some(encoding) = c.absolute() else {
            return Ok(None);
        };
        let positions = self.start..self.start + t;
        if let Some(table) = encoding.sinusoid_table(c.d_model, positions.clone()) {
            let pe = Tensor::from_vec(table, (t, c.d_model), &self.device)?;
            return Ok(Some(pe.to_dtype(self.dtype())?));
        }
        let wpe = self.layout.outer().wpe.ok_or_else(|| {
            crate::ModelError::Config("a learned position encoding without its table".into())
        })?;
        let rows = positions
            .map(|p| Ok(encoding.learned_row(p)?.unwrap_or(0) as u32))
            .collect::<Result<Vec<u32>>>()?;
        let rows = Tensor::from_vec(rows, t, &self.device)?;
        Ok(Some(self.param(&self.vars[wpe]).index_select(&rows, 0)?))
    }

    /// Final LayerNorm and unembedding: [..., d_model] -> [..., vocab].
    pub fn unembed(&self, x: &Tensor) -> Result<Tensor> {
        let p = self.outer_params();
        let h = self.norm(x, p.ln_f.as_ref())?;
        Ok(linear(&h, p.unembedding())?.broadcast_add(&p.lm_head_b)?)
    }

    /// `LN(x)` with the given LayerNorm, or `x` itself in a model without LayerNorm.
    fn norm(&self, x: &Tensor, ln: Option<&NormParams<Tensor>>) -> Result<Tensor> {
        match ln {
            Some(n) => layer_norm(x, &n.w, &n.b, self.config.ln_eps),
            None => Ok(x.clone()),
        }
    }

    /// One block: x [batch, pos, d_model] -> x + Attn(LN(x)) + MLP(LN(x)), positions 0..pos
    /// (without the MLP in attention-only blocks, with h = x without LayerNorm).
    pub fn block(
        &self,
        layer: usize,
        x: &Tensor,
        hooks: &mut Hooks,
        mut dropout: Option<&mut Dropout>,
    ) -> Result<Tensor> {
        let p = self.block_params(layer);
        let x = hooks.point(HookPoint::new(layer, HookKind::ResidPre), x.clone())?;
        let h = self.norm(&x, p.ln.as_ref())?;
        let mut attn = self.attention(layer, &p, &h, hooks, dropout.as_deref_mut())?;
        let mut mlp = match &p.mlp {
            Some(mp) => {
                let hidden = linear(&h, &mp.fc_in_w)?
                    .broadcast_add(&mp.fc_in_b)?
                    .gelu_erf()?;
                let out = linear(&hidden, &mp.fc_out_w)?.broadcast_add(&mp.fc_out_b)?;
                Some(hooks.point(HookPoint::new(layer, HookKind::MlpOut), out)?)
            }
            None => None,
        };
        if let Some(d) = dropout {
            attn = d.apply(&attn)?;
            if let Some(m) = mlp.as_mut() {
                *m = d.apply(m)?;
            }
        }
        let x = (x + attn)?;
        Ok(match mlp {
            Some(m) => (x + m)?,
            None => x,
        })
    }

    /// Causal self-attention of one block on h = LN(x): [batch, pos, d_model].
    fn attention(
        &self,
        layer: usize,
        p: &BlockParams<Tensor>,
        h: &Tensor,
        hooks: &mut Hooks,
        dropout: Option<&mut Dropout>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (b, t, _) = h.dims3()?;
        let (n_heads, d_head) = (c.n_heads, c.d_head());
        let point = |kind| HookPoint::new(layer, kind);
        let heads = |w: &Tensor| -> Result<Tensor> {
            Ok(linear(h, w)?
                .reshape((b, t, n_heads, d_head))?
                .transpose(1, 2)?
                .contiguous()?) // [batch, heads, pos, d_head]
        };
        let position = c.layer_position(layer).clone();
        let planes = |p| position.plane_dims(p);
        let q = hooks.restrict(layer, heads(&p.q)?, planes)?;
        let q = hooks.point(point(HookKind::Q), q)?;
        let k = hooks.restrict(layer, heads(&p.k)?, planes)?;
        let k = hooks.point(point(HookKind::K), k)?;
        let v = hooks.point(point(HookKind::V), heads(&p.v)?)?;
        let scale = 1.0 / (d_head as f64).sqrt();
        let z = attend_in_blocks(
            layer,
            (q, k, &v),
            (&position, self.start),
            (c.attention, scale),
            hooks,
            dropout,
            ATTENTION_BLOCK,
        )?;
        let z = hooks.ablate(layer, z)?; // [batch, heads, pos, d_head]
        let z = hooks.point(point(HookKind::Z), z)?;
        let merged = z.transpose(1, 2)?.reshape((b, t, n_heads * d_head))?;
        hooks.point(point(HookKind::AttnOut), linear(&merged, &p.o)?)
    }
}

impl GptJ {
    /// A copy of the model with every parameter in `dtype` (e.g. f64 for gradient checks).
    pub fn to_dtype(&self, dtype: DType) -> Result<Self> {
        let tensors = self
            .vars
            .iter()
            .map(|v| Ok(v.as_tensor().to_dtype(dtype)?))
            .collect::<Result<Vec<_>>>()?;
        Self::from_tensors(
            self.config.clone(),
            self.layout.clone(),
            tensors,
            &self.device,
        )
    }

    /// The same model for inference only: forward passes read detached parameters, so candle
    /// records no autograd graph and every intermediate tensor is freed as soon as it is used
    /// (with trainable `Var`s, a forward keeps every activation alive until its output is
    /// dropped: gigabytes at long lengths). Parameters are shared, not copied.
    pub fn frozen(mut self) -> Self {
        self.frozen = true;
        self
    }

    /// Whether forward passes run without autograd (see [`GptJ::frozen`]).
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// A parameter as forward passes read it: detached when the model is frozen.
    fn param(&self, v: &Var) -> Tensor {
        if self.frozen {
            v.as_tensor().detach()
        } else {
            v.as_tensor().clone()
        }
    }

    /// The dtype of the parameters.
    pub fn dtype(&self) -> DType {
        self.vars[self.layout.outer().wte].dtype()
    }
}

/// The initial value of parameter `name` (index `index` in the fixed order).
fn init(name: &str, shape: &[usize], seed: u64, index: u64, device: &Device) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let is_ln_weight = name.ends_with("ln_1.weight") || name.ends_with("ln_f.weight");
    let values = if name.ends_with(".bias") {
        vec![0f32; n]
    } else if is_ln_weight {
        vec![1f32; n]
    } else {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (index << 32) ^ 0x1A17);
        let normal = Normal::new(0f32, 0.02).expect("valid normal");
        let mut v: Vec<f32> = (0..n).map(|_| normal.sample(&mut rng)).collect();
        if name == "transformer.wte.weight" {
            v[..shape[1]].fill(0.0); // the padding row
        }
        v
    };
    Ok(Tensor::from_vec(values, shape, device)?)
}

/// Greedy answer ids: argmax of logits `[batch, vocab]` -> `[batch]` (u32).
pub fn argmax_last(logits: &Tensor) -> Result<Vec<u32>> {
    Ok(logits.argmax(D::Minus1)?.to_vec1()?)
}
