//! Where long work reports progress: the command line draws an indicatif bar per stage, tests
//! draw nothing ([`Quiet`]).

/// Where a long stage reports progress (the command line draws a bar per stage).
pub trait Progress: Sync {
    /// A stage of `total` units starts (`label`, e.g. "train s0 number"); dropping the returned
    /// handle ends it.
    fn stage(&self, label: &str, total: u64) -> Box<dyn Stage + '_>;
}

/// A running stage.
pub trait Stage {
    /// Units done so far.
    fn set(&self, done: u64);
    /// The total, when it is learned late.
    fn set_total(&self, total: u64);
    /// A short status message (e.g. the current loss).
    fn message(&self, message: String);
}

/// Progress that goes nowhere (tests, quiet runs).
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn stage(&self, _: &str, _: u64) -> Box<dyn Stage + '_> {
        Box::new(Quiet)
    }
}

impl Stage for Quiet {
    fn set(&self, _: u64) {}
    fn set_total(&self, _: u64) {}
    fn message(&self, _: String) {}
}
