//! The harness every op crate stands on.
//!
//! - [`Device`] / [`Backend`]: `cpu`, `cuda:i` or `hip:i`, one [`Device::sync`];
//!   [`load_gpu_library`] keeps libtorch's GPU library from being dropped by the linker
//!   (re-exported from the `machine` crate, with the GPU facts and [`EnvInfo`]).
//! - [`Op`] / [`Prepared`]: the one trait every op implements: variants, prepare inputs,
//!   one call, a float64 CPU reference.
//! - [`bench_op`]: the criterion glue: preflight every case against its reference, time it
//!   in each [`Mode`], and append rows to the run directory ([`RunWriter`]) as it goes.
//! - [`EnvInfo`]: the environment fingerprint (`env.json`, `opbench env`).
//! - [`Config`]: the `OPBENCH_*` variables.
//! - [`Floor`]: the dispatch floor (a one-element add, a view); [`Ceiling`]: a large copy
//!   and a large GEMM, what the device really does.
//!
//! - [`worker`]: the same binary as a worker of `opbench ab` (`--opbench-worker`): it
//!   prepares, checks and times single samples on request, one JSON line each.
//!
//! A bench target is one line: `harness::opbench_bench!(linear::Linear);`.
//!
//! Boundary: this crate knows tch and criterion; it knows no op in particular (beyond the
//! floor and ceilings, which stay here because the timing engine's host-speed control is the
//! floor's add). It depends on `machine` for devices and the fingerprint, `shapes` for
//! problems, `rundir` and `stats` for rows and estimates, and `atenx` for what tch does not
//! wrap.

pub mod ceiling;
// the machine's facts live in their own crate
pub use machine::{device, env, gpu_facts, hip, libsearch};
pub mod cold;
pub mod config;
pub mod devtime;
pub mod dtype;
pub mod floor;
pub mod graph;
pub mod hostspeed;
pub mod op;
pub mod plan;
pub mod record;
pub mod select;
pub mod tensors;

/// This build's timing code, hashed (comments left out) by build.rs: every run records it
/// as [`rundir::TIMING_METHOD_SETTING`] ([`stamp_timing_method`]).
pub const TIMING_METHOD: &str = env!("TIMING_METHOD_HASH");

/// Record [`TIMING_METHOD`] in `env`'s settings: a bench run's env.json, and a worker's
/// hello (which `opbench ab` writes as each side's env.json).
pub fn stamp_timing_method(env: &mut rundir::Env) {
    env.settings
        .insert(rundir::TIMING_METHOD_SETTING.into(), TIMING_METHOD.into());
}
pub mod timing;
pub mod trace;
pub mod worker;

pub use ceiling::Ceiling;
pub use config::Config;
pub use device::{Backend, Device, DeviceChoice, gpu_count, load_gpu_library, select_devices};
pub use devtime::DeviceClock;
pub use dtype::DType;
pub use env::{EnvInfo, collect as collect_env};
pub use floor::Floor;
pub use op::{Check, Failure, Op, Prepared, Status, classify, rel_err};
pub use record::{CaseKey, ResultRow, RunWriter, Sample, SeriesKey};
pub use timing::{
    BenchError, Mode, Plant, Refused, RunSummary, SampleTime, bench_op, criterion_config,
    preflight, run_op, time_calls, time_sample,
};

/// A bench target's `main`: runs each op through [`bench_op`] under criterion and ends
/// the process with a one-line message and exit code 2 when a bench cannot run (bad
/// `OPBENCH_*` settings, no such device, an unwritable run directory). Started with
/// [`worker::WORKER_FLAG`], it serves `opbench ab` instead ([`worker::serve`]).
///
/// ```text
/// harness::opbench_bench!(linear::Linear);
/// ```
#[macro_export]
macro_rules! opbench_bench {
    ($($op:expr),+ $(,)?) => {
        fn main() {
            if std::env::args().any(|a| a == $crate::worker::WORKER_FLAG) {
                if let Err(e) = $crate::worker::serve(&[$(&$op as &dyn $crate::Op),+]) {
                    eprintln!("opbench: {e}");
                    std::process::exit(2);
                }
                return;
            }
            let mut c = $crate::timing::criterion_for_main();
            $(
                if let Err(e) = $crate::bench_op(&mut c, &$op) {
                    eprintln!("opbench: {e}");
                    std::process::exit(2);
                }
            )+
            c.final_summary();
        }
    };
}
