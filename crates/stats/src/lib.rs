//! Statistics for benchmark samples, with no tch and no I/O: numbers in, numbers out.
//!
//! - [`estimate()`]: per-case median, bootstrap CI of the median, MAD, from raw
//!   `(iters, total_ns)` samples.
//! - [`fit`]: per series, `t = overhead + work / rate` and `t = max(overhead, work / rate)`
//!   by weighted least squares with Student-t intervals, the better one by AIC, the
//!   crossover batch and the overhead share.
//! - [`twosample`]: the Mann-Whitney U test and a bootstrap interval of the ratio of
//!   medians, for comparing two runs' samples of a case.
//! - [`decide`]: per-case tests with a minimum detectable effect and Benjamini–Hochberg
//!   across cases; [`family`]: a family's shared shift, whose interval carries what a
//!   process shares among its cases.
//! - [`paired`]: duet comparisons: each case's paired log ratios, the order-statistic
//!   interval of their median, a sequential design; [`verdict`]: the one vocabulary and
//!   rule every comparison judges by.
//! - [`changepoint`]: E-Divisive means with a t-test (as Apache Otava): where in a sequence
//!   of builds a case's time changed.
//!
//! - [`dist`]: the Student-t quantile and CDF and digamma every test reads (statrs).
//!
//! Degenerate input (no samples, NaN, negative times) is a [`StatsError`], never a panic
//! and never a NaN in a result.

pub mod changepoint;
pub mod decide;
pub mod dist;
pub mod estimate;
pub mod family;
pub mod fit;
pub mod paired;
pub mod twosample;
pub mod verdict;

pub use changepoint::{ChangePoint, CpSettings, change_points};
pub use estimate::{
    Estimate, ROW_LEVEL, ROW_RESAMPLES, bootstrap_ci, cv, estimate, mad, median, per_call,
    pooled_sd, quantile_sorted, sum_sq,
};
pub use fit::{Fit, ModelKind, Point, crossover_batch, fit_affine, fit_best, fit_floor};
pub use twosample::{hier_median_ci, hier_ratio_ci, mann_whitney, ratio_ci};
pub use verdict::Verdict;

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
