//! The trace pass: each case's kernels under the profiler, instead of timing.

use super::*;

/// The trace pass of `op` (`OPBENCH_TRACE`): every selected case traced, nothing timed.
pub(super) fn trace_op(
    op: &dyn Op,
    selection: &Selection,
    config: &Config,
    devices: &[Device],
    sink: &mut Sink,
    mode: crate::trace::TraceMode,
) -> Result<RunSummary, BenchError> {
    use crate::trace::{self, TraceMode};
    use rundir::{TraceRow, TraceSource, TraceStatus};
    let problems = op.problems(config);
    let child = mode == TraceMode::Child;
    if !child {
        sink.open()?;
    }
    let mut written = 0usize;
    for &device in devices {
        for dt in config.dtypes_for(device.is_gpu()) {
            // Kineto's first trace records initialisation; it also shows whether device
            // activity is visible at all
            let kineto = match mode {
                TraceMode::Kineto => trace::probe(device, dt),
                TraceMode::Logs => Err("OPBENCH_TRACE=logs".to_string()),
                TraceMode::Child => Err(String::new()),
            };
            for problem in &problems {
                for variant in op.variants() {
                    if !op.applies(variant, problem) {
                        continue;
                    }
                    let key = key_for(op, variant, problem, dt, device, Mode::Pipelined);
                    if !selection.matches(&key.to_string())
                        || sink.run.as_ref().is_some_and(|r| r.has_trace(&key))
                    {
                        continue;
                    }
                    let cap = crate::plan::cap_for(config, problem);
                    let prepared = preflight(op, variant, problem, dt, device, cap);
                    if child {
                        // the logs' child: a few calls for the libraries to log, nothing written
                        if let Ok((mut p, _)) = prepared {
                            for _ in 0..3 {
                                let _ = p.run();
                            }
                            device.sync();
                        }
                        continue;
                    }
                    let (row, kernels) = match prepared {
                        Err(refused) => {
                            let mut row = TraceRow::unavailable(
                                key.clone(),
                                TraceSource::Kineto,
                                format!(
                                    "the case is {}: {}",
                                    refused.failure.status, refused.failure.reason
                                ),
                            );
                            // a case this build does not provide has nothing to trace; one
                            // that failed is an error
                            if refused.failure.status != Status::Unsupported {
                                row.status = TraceStatus::Error;
                            }
                            (row, Vec::new())
                        }
                        Ok((p, _)) => trace_one(p, &key, device, &kineto, mode),
                    };
                    if let Some(run) = sink.run.as_mut() {
                        run.write_trace(&row, &kernels)?;
                        written += 1;
                        eprintln!(
                            "opbench: traced {key}: {} kernels/call{}",
                            row.kernels,
                            row.dominant_kernel
                                .as_deref()
                                .map_or(String::new(), |k| format!(", mostly {k}"))
                        );
                    }
                }
            }
        }
    }
    Ok(RunSummary {
        rows: written,
        path: sink.run.as_ref().map(|r| r.path.clone()),
    })
}

/// One prepared case traced: by Kineto where it shows device activity, else (on a GPU) by
/// the libraries' logs, else a row saying why not.
fn trace_one(
    mut p: Box<dyn Prepared>,
    key: &CaseKey,
    device: Device,
    kineto: &Result<(), String>,
    mode: crate::trace::TraceMode,
) -> (rundir::TraceRow, Vec<rundir::KernelRow>) {
    use crate::trace::{self, TraceMode};
    use rundir::{TraceRow, TraceSource, TraceStatus};
    match kineto {
        Ok(()) => {
            let calls = trace::calls_for(p.graph_calls());
            match trace::trace_kineto(p.as_mut(), device, calls) {
                Ok(events) => {
                    trace::summarize(key, &events, calls, device.is_gpu(), trace::TRACER_SYNCS)
                }
                Err(why) => {
                    let mut row = TraceRow::unavailable(key.clone(), TraceSource::Kineto, why);
                    row.status = TraceStatus::Error;
                    (row, Vec::new())
                }
            }
        }
        Err(why) if device.is_gpu() => {
            drop(p);
            let (mut row, k) = trace::trace_logs(key);
            if mode == TraceMode::Kineto {
                let n = format!("no Kineto trace: {why}");
                row.note = Some(match row.note.take() {
                    Some(x) => format!("{x}; {n}"),
                    None => n,
                });
            }
            (row, k)
        }
        Err(why) => (
            TraceRow::unavailable(key.clone(), TraceSource::Kineto, why.clone()),
            Vec::new(),
        ),
    }
}

/// The id inside the op's criterion group: the case key without its leading op name.
pub(super) fn id_in_group(key: &CaseKey) -> String {
    let full = key.to_string();
    full.split_once('/')
        .map_or(full.clone(), |(_, rest)| rest.to_string())
}
