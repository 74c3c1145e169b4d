//! The lens: the swap-score metric and what it is computed from, for any head of any hooked
//! model (docs/metric.md). A head seen from one query ([`head`]), the captured activations
//! ([`capture`]), the fast swap scores ([`swap`]) and their brute-force twin ([`reference`](mod@reference)),
//! the head's type ([`purity`]), every head of a model on a batch ([`heads`]), the query
//! positions ([`query`]), the discrepancy of trained heads ([`margin`]), one input's attention
//! for the viewer ([`attention`]), and the lens pointed at a pretrained model ([`pretrained`]).

pub mod attention;
pub mod capture;
pub mod head;
pub mod heads;
pub mod margin;
pub mod pretrained;
pub mod purity;
pub mod query;
pub mod reference;
pub mod swap;
