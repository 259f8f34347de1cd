//! Timing modes and the criterion glue that runs an [`Op`]'s grid.
//!
//! Each case is prepared and checked against its float64 reference once ([`preflight`]),
//! then timed in every configured mode with criterion's `iter_custom`: criterion picks the
//! iteration counts (flat sampling, budgets from [`Config`]), we time the calls and keep
//! the raw `(iters, total_ns)` of every sample for `samples.csv`. A case that fails at any
//! point becomes a row with its status and reason; the sweep goes on.
//!
//! By job: `front` (criterion and the run directory), `measure` (criterion's measurement of
//! the device modes), `grid` (each case's modes, rows and the case beside), `sample` (one
//! sample and the host controls around it: what the worker uses too), `plant`
//! (calibration's slowdowns), `preflight` and `trace_pass`.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use shapes::Problem;
use tch::TchError;

use crate::devtime::DeviceClock;
use crate::op::{Failure, Op, Prepared, Status, first_line, rel_err};
use crate::record::{CaseKey, ResultRow, RunWriter, Sample, SeriesKey, default_run_id};
use crate::select::{RunMode, Selection};
use crate::{Config, DType, Device, dtype, select_devices};

pub use rundir::Mode;

mod case_row;
mod front;
mod grid;
mod measure;
mod plant;
mod preflight;
mod sample;
mod trace_pass;

pub(crate) use case_row::case_bytes;
pub use front::{
    BenchError, CRITERION_BASELINE, Fronts, RunSummary, bench_op, criterion_config,
    criterion_for_main, run_op,
};
pub(crate) use grid::{grid_cases, key_for, panic_message};
pub use measure::{DeviceEvents, EventsFormatter};
pub use plant::{Plant, PlantScope, planted_total, time_calls_planted};
pub use preflight::{Refused, preflight};
pub(crate) use sample::{Controls, sample_in_state};
pub use sample::{SampleTime, Stretches, time_calls, time_sample};

use case_row::*;
use front::*;
use grid::*;
use plant::*;
use trace_pass::*;
