//! Paired A/B comparisons of two builds (duet benchmarking): both alive at once, taking
//! turns sample by sample, each case measured until its verdict is sure or its share of
//! the budget is spent.
//!
//! - [`protocol`] and [`cpus`] (from the `wire` crate, below this one and the engine): the
//!   worker protocol, one JSON object a line, and which CPUs a process runs on; `opbench ab`
//!   puts both sides' workers on the same ones.
//! - [`worker`]: the driver's side of a worker ([`worker::Worker`]; [`worker::Process`], a
//!   child process).
//! - [`driver`]: which cases, the calibration of calls per sample, warm-up, the A B / B A
//!   turns, the sequential stop, the budget ([`driver::run`] → [`driver::Outcome`]).
//! - [`budget`]: the obligatory rounds fitted inside the budget before any timing (fewer
//!   pairs, fewer cases, or a refusal naming the least budget), and no visit started that
//!   would end past it.
//! - `plan`: the pairs a visit takes after two rounds (Cochran's optimum from the spreads
//!   they showed) and a round's cost.
//! - [`verdict`]: each case's, each family's and the global verdicts, and the exit code
//!   with its reasons ([`verdict::judge`]).
//! - [`replay`]: a stored comparison read back, to judge it again.
//! - [`mod@write`]: the two run directories, `<RUN>-ab.csv` and `<RUN>-compare.md`.
//!
//! Boundary: this crate never touches tch; a worker is any process that speaks the
//! protocol. Statistics live in `stats::paired`.

mod ask;
pub mod budget;
pub mod driver;
pub mod kind;
mod plan;
pub mod replay;
pub mod solo;
pub mod state;
pub mod tolerance;
pub mod verdict;
mod visit;
pub mod worker;
pub mod write;

pub use driver::{Group, Settings, run};
pub use verdict::{Verdicts, judge};
pub use wire::{cpus, protocol};
