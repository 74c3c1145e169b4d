//! Every buffer the fused step allocates, described once: [`Buffers<u64>`] holds their lengths
//! (saturating, the up-front memory estimate) and [`Buffers<Vec<f32>>`] the buffers allocated
//! from exactly those lengths, so the estimate counts what a step holds.

use ropelab_io::resources::bytes;

use crate::{ModelConfig, Objective, PositionEncoding, Result};

/// Activations of one block kept for the backward pass (`T`: a buffer, or its length).
#[derive(Debug)]
pub struct LayerCache<T> {
    pub stats: T,   // [N, 2] LayerNorm mean and rstd
    pub h: T,       // [N, d] LayerNorm output
    pub qkv: T,     // [N, 3d] q, k rotated; v
    pub pattern: T, // [B, H, T, T] softmax rows of the query positions
    pub z: T,       // [NQ, d] merged head outputs
    pub g: T,       // [NQ, m] GELU output
    pub gp: T,      // [NQ, m] GELU derivative
    /// Dropout masks (with dropout only): pattern [B, H, T, T], attention and MLP outputs
    /// [N, d] (no MLP mask in an attention-only block).
    pub pattern_mask: Option<T>,
    pub attn_mask: Option<T>,
    pub mlp_mask: Option<T>,
}

/// Buffers reused by every layer (two in the forward pass, the rest in the backward pass).
#[derive(Debug)]
pub struct Scratch<T> {
    pub a: T,    // [N, d] attention output (forward)
    pub mo: T,   // [N, d] MLP output (forward)
    pub dx: T,   // [N, d] gradient of the residual stream
    pub dh: T,   // [N, d]
    pub dqkv: T, // [N, 3d]
    pub dz: T,   // [N, d]
    pub da: T,   // [N, d]
    pub dmo: T,  // [N, d]
    pub dg: T,   // [N, m]
    pub dhf: T,  // [R, d]
    pub dxq: T,  // [R, d]
    pub dp: T,   // [B, 2 T^2] attention scratch of each batch row
}

/// The float buffers of one step (`T`: a buffer, or its length). N = batch * seq rows; R rows
/// with logits (the last position of each sequence, or every position); NQ = R in the last
/// block, N elsewhere.
#[derive(Debug)]
pub struct Buffers<T> {
    pub layers: Vec<LayerCache<T>>,
    /// The input of each block ([N, d]) and the last block's output ([R, d]).
    pub resid: Vec<T>,
    /// The embedding dropout mask [N, d] (with dropout only).
    pub emb_mask: Option<T>,
    pub final_stats: T, // [R, 2]
    pub final_h: T,     // [R, d]
    pub logits: T,      // [R, out]
    pub scratch: Scratch<T>,
}

impl<T> LayerCache<T> {
    fn map<U>(&self, f: &impl Fn(&T) -> U) -> LayerCache<U> {
        LayerCache {
            stats: f(&self.stats),
            h: f(&self.h),
            qkv: f(&self.qkv),
            pattern: f(&self.pattern),
            z: f(&self.z),
            g: f(&self.g),
            gp: f(&self.gp),
            pattern_mask: self.pattern_mask.as_ref().map(f),
            attn_mask: self.attn_mask.as_ref().map(f),
            mlp_mask: self.mlp_mask.as_ref().map(f),
        }
    }

    fn all(&self) -> impl Iterator<Item = &T> {
        [
            &self.stats,
            &self.h,
            &self.qkv,
            &self.pattern,
            &self.z,
            &self.g,
            &self.gp,
        ]
        .into_iter()
        .chain(&self.pattern_mask)
        .chain(&self.attn_mask)
        .chain(&self.mlp_mask)
    }
}

impl<T> Scratch<T> {
    fn map<U>(&self, f: &impl Fn(&T) -> U) -> Scratch<U> {
        Scratch {
            a: f(&self.a),
            mo: f(&self.mo),
            dx: f(&self.dx),
            dh: f(&self.dh),
            dqkv: f(&self.dqkv),
            dz: f(&self.dz),
            da: f(&self.da),
            dmo: f(&self.dmo),
            dg: f(&self.dg),
            dhf: f(&self.dhf),
            dxq: f(&self.dxq),
            dp: f(&self.dp),
        }
    }

    fn all(&self) -> [&T; 12] {
        [
            &self.a, &self.mo, &self.dx, &self.dh, &self.dqkv, &self.dz, &self.da, &self.dmo,
            &self.dg, &self.dhf, &self.dxq, &self.dp,
        ]
    }
}

impl<T> Buffers<T> {
    /// The same buffers mapped by `f`.
    pub fn map<U>(&self, f: impl Fn(&T) -> U) -> Buffers<U> {
        Buffers {
            layers: self.layers.iter().map(|c| c.map(&f)).collect(),
            resid: self.resid.iter().map(&f).collect(),
            emb_mask: self.emb_mask.as_ref().map(&f),
            final_stats: f(&self.final_stats),
            final_h: f(&self.final_h),
            logits: f(&self.logits),
            scratch: self.scratch.map(&f),
        }
    }

    /// Every buffer.
    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.layers
            .iter()
            .flat_map(LayerCache::all)
            .chain(&self.resid)
            .chain(&self.emb_mask)
            .chain([&self.final_stats, &self.final_h, &self.logits])
            .chain(self.scratch.all())
    }
}

impl Buffers<u64> {
    /// The lengths of every buffer of a step over `batch` sequences of `seq` tokens trained on
    /// `objective` (masks where the model has dropout). Saturating.
    pub fn lens(config: &ModelConfig, batch: usize, seq: usize, objective: Objective) -> Self {
        // Attention-only blocks keep no MLP activations.
        let (d, m, h, v) = (
            config.d_model as u64,
            if config.mlp { config.d_mlp as u64 } else { 0 },
            config.n_heads,
            config.out_dim() as u64,
        );
        let n = bytes(&[batch, seq]);
        let r = if objective.every_position() {
            n
        } else {
            batch as u64
        };
        let dropout = config.dropout > 0.0;
        let rows = |rows: u64, width: u64| rows.saturating_mul(width);
        let pattern = bytes(&[batch, h, seq, seq]);
        let layers = (0..config.n_layers)
            .map(|l| {
                let nq = if l + 1 == config.n_layers { r } else { n };
                LayerCache {
                    stats: rows(n, 2),
                    h: rows(n, d),
                    qkv: rows(n, 3 * d),
                    pattern,
                    z: rows(nq, d),
                    g: rows(nq, m),
                    gp: rows(nq, m),
                    pattern_mask: dropout.then_some(pattern),
                    attn_mask: dropout.then_some(rows(n, d)),
                    mlp_mask: (dropout && config.mlp).then_some(rows(n, d)),
                }
            })
            .collect();
        let mut resid: Vec<u64> = (0..config.n_layers).map(|_| rows(n, d)).collect();
        resid.push(rows(r, d));
        Buffers {
            layers,
            resid,
            emb_mask: dropout.then_some(rows(n, d)),
            final_stats: rows(r, 2),
            final_h: rows(r, d),
            logits: rows(r, v),
            scratch: Scratch {
                a: rows(n, d),
                mo: rows(n, d),
                dx: rows(n, d),
                dh: rows(n, d),
                dqkv: rows(n, 3 * d),
                dz: rows(n, d),
                da: rows(n, d),
                dmo: rows(n, d),
                dg: rows(n, m),
                dhf: rows(r, d),
                dxq: rows(r, d),
                dp: bytes(&[batch, 2, seq, seq]),
            },
        }
    }

    /// Floats of every buffer together.
    pub fn floats(&self) -> u64 {
        self.all().fold(0, |a, &x| a.saturating_add(x))
    }

    /// The buffers themselves, zeroed.
    pub fn allocate(&self) -> Buffers<Vec<f32>> {
        self.map(|&len| vec![0.0; len as usize])
    }
}

/// The absolute position encoding added to the embeddings, prepared for `seq` positions.
#[derive(Debug)]
pub enum Absolute {
    /// No absolute encoding.
    None,
    /// A fixed sinusoid table [seq, d_model].
    Sinusoid(Vec<f32>),
    /// The row of the learned table (`transformer.wpe.weight`) each position reads [seq].
    Learned(Vec<usize>),
}

impl Absolute {
    /// The encoding of `config` at `positions` (row i holds position `positions.start + i`).
    pub fn new(config: &ModelConfig, positions: std::ops::Range<usize>) -> Result<Self> {
        let Some(encoding) = config.absolute() else {
            return Ok(Absolute::None);
        };
        if let Some(table) = encoding.sinusoid_table(config.d_model, positions.clone()) {
            return Ok(Absolute::Sinusoid(table));
        }
        let rows = positions
            .map(|p| Ok(encoding.learned_row(p)?.unwrap_or(0)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Absolute::Learned(rows))
    }

    /// Bytes held (a row index counts 8).
    pub fn bytes(config: &ModelConfig, seq: usize) -> u64 {
        match config.absolute() {
            None => 0,
            Some(PositionEncoding::Learned { .. }) => bytes(&[seq, 8]),
            Some(_) => bytes(&[seq, config.d_model, 4]),
        }
    }

    /// Bytes this encoding holds (as [`Absolute::bytes`] counts them).
    #[cfg(test)]
    pub fn held_bytes(&self) -> u64 {
        match self {
            Absolute::None => 0,
            Absolute::Sinusoid(t) => 4 * t.len() as u64,
            Absolute::Learned(rows) => 8 * rows.len() as u64,
        }
    }
}
