//! The machine's facts, one of the harness's jobs split out: which devices there are and
//! how to load their GPU library ([`device`]), what the GPU is (clocks, L2, bandwidth, the
//! libraries' versions: [`gpu_facts`]), and the fingerprint every run records in env.json
//! ([`mod@env`]), and the host's and GPU's state around each sample ([`state`]). The harness
//! re-exports these modules.

pub mod device;
pub mod env;
pub mod gpu_facts;
pub mod hip;
pub mod libsearch;
pub mod state;
