//! # ropelab-model
//!
//! A hookable GPT-J-style decoder in candle (docs/model.md): parallel attention and MLP off
//! one LayerNorm, exact GELU, untied unembedding with bias, and one position encoding per layer
//! (RoPE in the GPT-J interleaved or NeoX/Llama half-split layout, or none). Every tensor of
//! the forward pass passes through a named hook point that can be captured or intervened on;
//! checkpoints use Hugging Face GPT-J tensor names and a `config.json` that
//! `transformers.GPTJForCausalLM` loads.

pub mod attention;
pub mod checkpoint;
mod config;
mod error;
mod gptj;
pub mod hooks;
pub mod kernel;
pub mod layout;
pub mod objective;
pub mod ops;
mod position;
pub mod rope;

pub use config::{AttentionKind, Head, ModelConfig};
pub use error::{ModelError, Result};
pub use gptj::{argmax_last, GptJ};
pub use hooks::{Ablation, HookKind, HookPoint, Hooks, Intervention};
pub use layout::{
    BlockParams, GptjLayout, MlpParams, NormParams, OuterParams, ParamLayout, ParamSpec,
};
pub use objective::Objective;
pub use position::{
    number_text, Beyond, PeriodicTables, PlaneMask, PlaneMode, PositionEncoding, RopeLayout,
    Rotation, Turn, BASE_RANGE,
};
