//! # ropelab-train
//!
//! Trains ropelab's GPT-J on a task (docs/model.md, docs/tasks.md "Layout") or a formal
//! language (docs/tasks.md "Formal languages"): the objectives of docs/model.md "Objectives", AdamW with linear warm-up and decay, validation every k steps, `metrics.jsonl`,
//! checkpoints with Hugging Face names, exact resume, and evaluation (overall and per hop,
//! optionally on length-extended inputs).

pub mod ambiguous_data;
pub mod canonical_data;
mod config;
pub mod data;
mod error;
pub mod eval;
pub mod language_data;
pub mod lengths;
pub mod offset_data;
pub mod optim;
pub mod resources;
mod run_dir;
pub mod step;
mod trainer;

pub use config::{
    check_lr, AmbiguousData, DataConfig, LanguageData, OffsetData, OptimConfig, Preset, Retention,
    RunConfig, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, CONFIG_ORIGINS, MAX_POSITION_SHIFT,
    MAX_TEST_SAMPLES,
};
pub use data::{
    batch, batch_for_budget, evaluate, evaluate_intervened, evaluate_objective, forward_bytes,
    tally_intervened, Accuracy, EVAL_BATCH, EVAL_MEMORY,
};
pub use error::{Result, TrainError};
pub use resources::{forward_flops, inference_need, training_memory, training_need};
pub use run_dir::{CheckpointState, RunDir};
pub use step::{Engine, Stepper};
pub use trainer::{MetricsLine, Progress, Trainer};
