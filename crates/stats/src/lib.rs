//! Statistics for benchmark samples, with no tch and no I/O: numbers in, numbers out.
//!
//! - [`estimate()`]: per-case median, bootstrap CI of the median, MAD, from raw
//!   `(iters, total_ns)` samples.
//!
//! Degenerate input (no samples, NaN, negative times) is a [`StatsError`], never a panic
//! and never a NaN in a result.

pub mod estimate;

pub use estimate::{Estimate, bootstrap_ci, estimate, mad, median, per_call};

/// What these functions refuse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    #[error("need at least {need} points, got {got}")]
    TooFew { need: usize, got: usize },
    #[error("bad sample: {0}")]
    BadSample(String),
    #[error("degenerate input: {0}")]
    Degenerate(String),
}
