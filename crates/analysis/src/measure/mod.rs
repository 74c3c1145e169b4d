//! Measurements of the experiments, from their runs and files: necessity by ablation
//! ([`ablation`]), the discrepancy law fitted ([`decay`]), the learning dynamics of a run
//! ([`dynamics`]: every checkpoint scored), length generalisation ([`lengthgen`]), summaries over
//! seeds ([`seeds`]), the formal languages' N* ([`languages`]) and MOD heads ([`modular`]),
//! studies per head count
//! ([`multihead`]), the number task's hop map ([`hops`]), its verdict ([`hop_route`]), joint knock-outs of layers ([`layer_sets`]) and hand-built chains that check it ([`hop_chain`]), fixed-offset retrieval's tables and mechanisms ([`offset`]), the canonical tasks' files
//! ([`canonical`]), linear probes of the residual stream ([`probe`]), pure heads against success across models ([`pure_heads`]), frequency bands and evaluation-time masking ([`band`], [`mask`]) and
//! Partial Induction's head ([`partial`]).

pub mod ablation;
pub mod band;
pub mod canonical;
pub mod decay;
pub mod dynamics;
pub mod hop_chain;
pub mod hop_route;
pub mod hops;
pub mod keys;
pub mod languages;
pub mod layer_sets;
pub mod lengthgen;
pub mod mask;
pub mod modular;
pub mod multihead;
pub mod offset;
pub mod partial;
pub mod probe;
pub mod pure_heads;
pub mod seeds;
