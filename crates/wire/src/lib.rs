//! What a bench binary's worker (crates/harness) and the drivers that start it
//! (crates/duet: `opbench ab`, `opbench peer`) share, so that neither depends on the other:
//!
//! - [`protocol`]: the worker protocol, one JSON object a line. A bench binary started with
//!   [`protocol::WORKER_FLAG`] is a worker; the driver decides what it asks.
//! - [`cpus`]: which CPUs a process or a thread runs on (Linux and Windows), so both
//!   sides' workers run on the same ones.
//!
//! Boundary: no tch, no statistics, no driver logic; types (over rundir's) and OS calls only.

pub mod cpus;
pub mod protocol;
