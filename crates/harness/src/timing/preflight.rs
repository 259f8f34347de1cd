//! Preflight: prepare a case and check one call against its float64 reference.

use super::*;

/// Why preflight refused a case, with the reference error where one was measured.
#[derive(Debug)]
pub struct Refused {
    pub failure: Failure,
    pub rel_err: Option<f64>,
}

/// Prepare one case and check one call against the float64 reference: the prepared case
/// and its relative error, or why it cannot be timed. A panic inside the op is caught and
/// becomes an `error`.
pub fn preflight(
    op: &dyn Op,
    variant: &str,
    problem: &Problem,
    dt: DType,
    device: Device,
    cap: Option<Duration>,
) -> Result<(Box<dyn Prepared>, f64), Refused> {
    catch_unwind(AssertUnwindSafe(|| {
        preflight_inner(op, variant, problem, dt, device, cap)
    }))
    .unwrap_or_else(|panic| {
        Err(Refused {
            failure: Failure::error(format!("panicked: {}", panic_message(&panic))),
            rel_err: None,
        })
    })
}

pub(super) fn preflight_inner(
    op: &dyn Op,
    variant: &str,
    problem: &Problem,
    dt: DType,
    device: Device,
    cap: Option<Duration>,
) -> Result<(Box<dyn Prepared>, f64), Refused> {
    let refuse = |failure: Failure| Refused {
        failure,
        rel_err: None,
    };
    let mut p = op.prepare(variant, problem, dt, device).map_err(refuse)?;
    if let Some(cap) = cap {
        // before the float64 reference (which costs more than the call): a case whose
        // single call is over the cap would hold the run for samples × that long. A first
        // call may pay one-time setup (a kernel module loaded, a cuDNN plan built: 1.1 s
        // for SDPA at B = 64 on the H200), so only a second call over the cap skips it
        let mut one_call = || -> Result<Duration, Refused> {
            let t0 = Instant::now();
            p.run().map_err(|e| refuse(e.into()))?;
            device.sync();
            Ok(t0.elapsed())
        };
        let first = one_call()?;
        if first > cap {
            let second = one_call()?;
            if second > cap {
                let ms = |t: Duration| t.as_secs_f64() * 1e3;
                return Err(refuse(Failure {
                    status: Status::Skipped,
                    reason: format!(
                        "two calls took {:.0} ms and {:.0} ms, over the {} ms cap (OPBENCH_CALL_CAP_MS; 0 measures it)",
                        ms(first),
                        ms(second),
                        cap.as_millis()
                    ),
                }));
            }
        }
    }
    let check = p.check().map_err(|e| refuse(e.into()))?;
    let err = rel_err(&check).map_err(|e| refuse(e.into()))?;
    drop(check);
    let tol = p.tolerance().unwrap_or_else(|| dtype::tolerance(dt));
    // NaN (a kernel that produced NaN) is a mismatch too
    if err.is_nan() || err > tol {
        return Err(Refused {
            failure: Failure {
                status: Status::Mismatch,
                reason: format!(
                    "relative error {err:.3e} against the float64 reference exceeds {tol:e}"
                ),
            },
            rel_err: Some(err),
        });
    }
    device.sync();
    Ok((p, err))
}
