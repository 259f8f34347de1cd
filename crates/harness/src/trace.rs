//! The trace pass (`OPBENCH_TRACE`): which kernels a case's call runs, which library
//! chose them, whether it synchronizes the host or copies back to it, and so whether
//! anything fell back to the CPU.
//!
//! A trace is taken in its own process, after timing (`scripts/bench` runs it as a second
//! pass): Kineto leaves the process slower after it profiled (CUPTI stays attached), so a
//! trace never shares a process with timed rows.
//!
//! - `OPBENCH_TRACE=kineto` (or `1`): PyTorch's Kineto profiler in-process: per case, a
//!   warm-up, then `calls` calls back to back and one synchronize inside the trace. The
//!   first trace of the process, which records initialisation, is discarded. On a GPU whose
//!   trace shows no device activity for a call that must launch one (the probe is the
//!   dispatch floor's add), device tracing is unavailable, and every GPU case goes to the
//!   library logs instead.
//! - `OPBENCH_TRACE=logs`: the library logs only: each GPU case runs in a child process
//!   with the GEMM and convolution libraries' logging switched on (cuBLASLt, rocBLAS,
//!   hipBLASLt, MIOpen), and what they name is parsed. This is the path where Kineto is
//!   missing (AMD's Windows builds have `USE_KINETO=OFF`).
//!
//! What a trace finds goes to `traces.csv` (one row per case) and `kernels.csv` (one row
//! per activity); a case that cannot be traced says "trace unavailable: why", never an empty
//! list that reads as "no kernels".

use std::collections::BTreeMap;
use std::process::Command;

use atenx::{Activity as Kin, TraceEvent};
use rundir::{Activity, CaseKey, KernelRow, TraceRow, TraceSource, TraceStatus};

use crate::op::{Prepared, first_line};
use crate::{DType, Device};

/// What `OPBENCH_TRACE` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceMode {
    /// Kineto in-process, library logs where it sees no device activity.
    Kineto,
    /// Library logs from a child process only.
    Logs,
    /// The child of a logs trace: run the one selected case a few times, write nothing.
    Child,
}

impl TraceMode {
    /// `OPBENCH_TRACE`'s value: unset or `0` is no trace pass.
    pub fn parse(v: &str) -> Result<Option<TraceMode>, String> {
        match v {
            "" | "0" => Ok(None),
            "1" | "kineto" => Ok(Some(TraceMode::Kineto)),
            "logs" => Ok(Some(TraceMode::Logs)),
            "child" => Ok(Some(TraceMode::Child)),
            other => Err(format!(
                "OPBENCH_TRACE: unknown value `{other}` (expected kineto, logs, 1 or 0)"
            )),
        }
    }
}

/// Calls per traced case: a few, so that per-call counts are not one call's accident; a whole
/// decode step once.
pub fn calls_for(graph_calls: u64) -> u64 {
    if graph_calls <= 1 { 1 } else { 3 }
}

/// Runtime API calls that make the host wait for the device. `hipMemcpyWithStream` is
/// ROCm's blocking copy (c10's `memcpy_and_sync` on HIP, behind `.item()` and `.cpu()`).
fn is_sync(name: &str) -> bool {
    name.contains("Synchronize")
        || matches!(
            name,
            "cudaMemcpy"
                | "hipMemcpy"
                | "cudaMemcpy2D"
                | "hipMemcpy2D"
                | "cuMemcpyDtoH_v2"
                | "hipMemcpyWithStream"
        )
}

/// A copy back to the host, as CUPTI (`Memcpy DtoH (Device -> Pageable)`) and roctracer
/// (`CopyDeviceToHost`) name it.
fn is_d2h(name: &str) -> bool {
    name.contains("DtoH") || name.contains("DeviceToHost")
}

/// The ATen ops a call dispatched at the top level: CPU ops not inside another CPU op of the
/// same thread.
fn top_level_ops(events: &[TraceEvent]) -> Vec<&TraceEvent> {
    let mut ops: Vec<&TraceEvent> = events
        .iter()
        .filter(|e| e.activity == Kin::CpuOp && !e.on_device)
        .collect();
    // outer before inner: by start, then longest first
    ops.sort_by_key(|e| (e.resource, e.start_ns, std::cmp::Reverse(e.duration_ns)));
    let mut out = Vec::new();
    let mut open: Option<(i64, u64)> = None; // (thread, end) of the current top-level op
    for e in ops {
        let inside = open.is_some_and(|(t, end)| t == e.resource && e.start_ns < end);
        if !inside {
            open = Some((e.resource, e.start_ns + e.duration_ns));
            out.push(e);
        }
    }
    out
}

/// Turn one traced stretch of `calls` calls into the case's row and activity rows. `gpu`:
/// the case runs on a GPU (fallback evidence applies); `own_syncs`: synchronizes the
/// tracer itself issued inside the trace (subtracted).
pub fn summarize(
    key: &CaseKey,
    events: &[TraceEvent],
    calls: u64,
    gpu: bool,
    own_syncs: u64,
) -> (TraceRow, Vec<KernelRow>) {
    let per = |n: f64| n / calls.max(1) as f64;
    let agg = aggregate(events);
    let count = |k: Activity| {
        agg.iter()
            .filter(|((kind, _), _)| *kind == k)
            .map(|(_, a)| a.0)
            .sum::<u64>() as f64
    };
    let kernels = count(Activity::Kernel);
    let syncs = agg
        .iter()
        .filter(|((k, n), _)| *k == Activity::Runtime && is_sync(n))
        .map(|(_, a)| a.0)
        .sum::<u64>()
        .saturating_sub(own_syncs) as f64;
    let d2h = agg
        .iter()
        .filter(|((k, n), _)| *k == Activity::Memcpy && is_d2h(n))
        .map(|(_, a)| a.0)
        .sum::<u64>() as f64;
    let device_ns: u64 = agg
        .iter()
        .filter(|((k, _), _)| matches!(k, Activity::Kernel | Activity::Memcpy | Activity::Memset))
        .map(|(_, a)| a.1)
        .sum();
    let dominant = agg
        .iter()
        .filter(|((k, _), _)| *k == Activity::Kernel)
        .max_by_key(|(_, a)| a.1)
        .map(|((_, n), _)| n.clone());
    let mut fallback = Vec::new();
    // a device-to-device copy is device work too (a copy engine, not a kernel)
    if gpu && kernels + count(Activity::Memcpy) + count(Activity::Memset) == 0.0 {
        fallback.push(
            "no device work: no kernel, copy or memset ran, so it ran on the host or is metadata only"
                .to_string(),
        );
    }
    if gpu && d2h > 0.0 {
        fallback.push(format!("copies device→host {} times per call", per(d2h)));
    }
    let row = TraceRow {
        key: key.clone(),
        status: TraceStatus::Ok,
        source: TraceSource::Kineto,
        calls,
        kernels: per(kernels),
        memcpys: per(count(Activity::Memcpy)),
        memsets: per(count(Activity::Memset)),
        syncs: per(syncs),
        d2h_copies: per(d2h),
        runtime_calls: per(count(Activity::Runtime) + count(Activity::Driver)),
        device_ns: gpu.then(|| per(device_ns as f64)),
        dominant_kernel: dominant,
        fallback: (!fallback.is_empty()).then(|| fallback.join("; ")),
        note: None,
    };
    let rows = agg
        .into_iter()
        .map(
            |((kind, name), (n, ns, launcher, stream, parent))| KernelRow {
                key: key.clone(),
                kind,
                name,
                per_call: per(n as f64),
                ns_per_call: Some(per(ns as f64)),
                launcher: launcher.map(str::to_string),
                stream,
                parent_op: parent.map(str::to_string),
                source: TraceSource::Kineto,
            },
        )
        .collect();
    (row, rows)
}

/// (kind, name) → count, ns, launcher, stream, parent op.
type Agg<'a> = (u64, u64, Option<&'a str>, Option<i64>, Option<&'a str>);

/// The traced events by (kind, name): counts and time, and for device work its launcher,
/// stream and parent op; the top-level CPU ops too.
fn aggregate(events: &[TraceEvent]) -> BTreeMap<(Activity, String), Agg<'_>> {
    let launcher: BTreeMap<u64, &str> = events
        .iter()
        .filter(|e| matches!(e.activity, Kin::Runtime | Kin::Driver))
        .map(|e| (e.correlation, e.name.as_str()))
        .collect();
    let cpu_op: BTreeMap<u64, &str> = events
        .iter()
        .filter(|e| e.activity == Kin::CpuOp)
        .map(|e| (e.correlation, e.name.as_str()))
        .collect();
    let mut agg: BTreeMap<(Activity, String), Agg<'_>> = BTreeMap::new();
    let mut add = |kind: Activity, name: String, e: &TraceEvent, dev: bool| {
        let a = agg.entry((kind, name)).or_insert((0, 0, None, None, None));
        a.0 += 1;
        a.1 += e.duration_ns;
        if dev {
            a.2 = a.2.or_else(|| launcher.get(&e.correlation).copied());
            a.3 = a.3.or(Some(e.resource));
            a.4 = a.4.or_else(|| cpu_op.get(&e.linked_correlation).copied());
        }
    };
    for e in events {
        match e.activity {
            Kin::Kernel => add(Activity::Kernel, e.name.clone(), e, true),
            Kin::Memcpy => add(Activity::Memcpy, e.name.clone(), e, true),
            Kin::Memset => add(Activity::Memset, e.name.clone(), e, true),
            Kin::Runtime => add(Activity::Runtime, e.name.clone(), e, false),
            Kin::Driver => add(Activity::Driver, e.name.clone(), e, false),
            Kin::Other(n) => add(
                Activity::Other,
                format!("activity {n}: {}", e.name),
                e,
                e.on_device,
            ),
            _ => {}
        }
    }
    for e in top_level_ops(events) {
        add(Activity::CpuOp, e.name.clone(), e, false);
    }
    agg
}

/// Synchronizes [`trace_kineto`] itself issues inside the trace (not the case's).
pub const TRACER_SYNCS: u64 = 1;

/// Trace `calls` calls of a prepared case with Kineto. `Err` is why no trace could be taken.
pub fn trace_kineto(
    p: &mut dyn Prepared,
    device: Device,
    calls: u64,
) -> Result<Vec<TraceEvent>, String> {
    let e = |e: tch::TchError| first_line(&e.to_string());
    for _ in 0..2 {
        p.run().map_err(e)?;
    }
    device.sync();
    atenx::trace_start(device.is_gpu()).map_err(e)?;
    let ran = (0..calls).try_for_each(|_| p.run());
    device.sync();
    let events = atenx::trace_stop().map_err(e)?;
    ran.map_err(e)?;
    Ok(events)
}

/// One throw-away trace (the first of a process records initialisation) that also tells
/// whether the device's activities are visible: a one-element add on a GPU must show a
/// kernel. `Err` says why device tracing is unavailable.
pub fn probe(device: Device, dt: DType) -> Result<(), String> {
    use crate::op::Op;
    let mut add = crate::Floor
        .prepare("add", &shapes::Problem::floor(), dt, device)
        .map_err(|f| f.reason)?;
    let events = trace_kineto(add.as_mut(), device, 1)?;
    if device.is_gpu() && !events.iter().any(|e| e.activity == Kin::Kernel) {
        return Err(
            "the profiler recorded no device activity for a one-element add after warm-up \
             (a build without Kineto or CUPTI/roctracer, or a known ROCm bug when HIP work starts \
             before the profiler registers)"
                .into(),
        );
    }
    Ok(())
}

/// The logging variables of the GPU libraries a child runs with.
pub const LOG_VARS: &[(&str, &str)] = &[
    // cuBLASLt: API trace, which names the algorithm, tile, stages and cluster it ran
    ("CUBLASLT_LOG_LEVEL", "5"),
    // rocBLAS: bench-style command lines
    ("ROCBLAS_LAYER", "2"),
    // hipBLASLt: bench command lines (solution index)
    ("HIPBLASLT_LOG_MASK", "32"),
    // MIOpen: driver command lines and the solver chosen
    ("MIOPEN_ENABLE_LOGGING_CMD", "1"),
    ("MIOPEN_LOG_LEVEL", "5"),
];

/// Run `key` in a child process (this bench executable, `--exact`) with the libraries'
/// logging on, and parse what they name.
pub fn trace_logs(key: &CaseKey) -> (TraceRow, Vec<KernelRow>) {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            return (
                TraceRow::unavailable(key.clone(), TraceSource::Logs, e.to_string()),
                vec![],
            );
        }
    };
    let mut cmd = Command::new(exe);
    cmd.args(["--bench", "--exact", &key.to_string()])
        .env("OPBENCH_TRACE", "child")
        .env("OPBENCH_MODES", "pipelined");
    for (k, v) in LOG_VARS {
        cmd.env(k, v);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => {
            return (
                TraceRow::unavailable(
                    key.clone(),
                    TraceSource::Logs,
                    format!("cannot start the child: {e}"),
                ),
                vec![],
            );
        }
    };
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return (
            TraceRow::unavailable(
                key.clone(),
                TraceSource::Logs,
                format!("the child failed ({}): {}", out.status, first_line(&text)),
            ),
            vec![],
        );
    }
    from_logs(key, &text)
}

/// What the libraries' logs name, as a case's rows. No line from any library is
/// "unavailable" with the reason, not an empty answer.
pub fn from_logs(key: &CaseKey, text: &str) -> (TraceRow, Vec<KernelRow>) {
    let mut named: BTreeMap<String, u64> = BTreeMap::new();
    for line in text.lines() {
        if let Some(n) = parse_log_line(line) {
            *named.entry(n).or_default() += 1;
        }
    }
    if named.is_empty() {
        return (
            TraceRow::unavailable(
                key.clone(),
                TraceSource::Logs,
                "no GPU library logged a GEMM or convolution for this case (it calls none, or the \
                 library ignores the logging variables)",
            ),
            vec![],
        );
    }
    let dominant = named
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(k, _)| k.clone());
    let rows = named
        .into_iter()
        .map(|(name, n)| KernelRow {
            key: key.clone(),
            kind: Activity::Library,
            name,
            per_call: n as f64,
            ns_per_call: None,
            launcher: None,
            stream: None,
            parent_op: None,
            source: TraceSource::Logs,
        })
        .collect();
    let row = TraceRow {
        dominant_kernel: dominant,
        note: Some(
            "from the GPU libraries' logs (per_call counts log lines over the child's whole run, \
             its check included): names what the library chose, not every kernel"
                .into(),
        ),
        ..TraceRow::empty(key.clone(), TraceStatus::Ok, TraceSource::Logs)
    };
    (row, rows)
}

/// The value after `key=` inside a `[...]` log field, up to a space or `]`.
fn field<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let i = s.find(key)? + key.len();
    let rest = &s[i..];
    let end = rest.find([' ', ']']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// One log line's choice, normalized: what the library says it ran.
pub fn parse_log_line(line: &str) -> Option<String> {
    let line = line.trim();
    // cuBLASLt API trace: [..][cublasLt][pid][Trace][cublasLtHSHMatmul] ... algo=[algoId=66
    // tile=MATMUL_TILE_8x64 stages=MATMUL_STAGES_64xAUTO clusterShape=CLUSTER_SHAPE_2x1x1]
    if line.contains("[cublasLt]") && line.contains("[Trace]") && line.contains("algo=[") {
        let api = line
            .split("][")
            .filter_map(|p| p.split(']').next())
            .find(|p| p.starts_with("cublasLt") && p.ends_with("Matmul"))
            .unwrap_or("cublasLtMatmul");
        let algo = &line[line.find("algo=[")?..];
        let id = field(algo, "algoId=").unwrap_or("?");
        let tile = field(algo, "tile=").map(|t| t.trim_start_matches("MATMUL_TILE_"));
        let stages = field(algo, "stages=").map(|t| t.trim_start_matches("MATMUL_STAGES_"));
        let cluster = field(algo, "clusterShape=").map(|t| t.trim_start_matches("CLUSTER_SHAPE_"));
        let mut s = format!("{api} algo {id}");
        for (k, v) in [("tile", tile), ("stages", stages), ("cluster", cluster)] {
            if let Some(v) = v {
                s.push_str(&format!(" {k} {v}"));
            }
        }
        return Some(s);
    }
    // hipBLASLt (mask 32) and rocBLAS (layer 2) print bench command lines
    for tool in ["hipblaslt-bench", "rocblas-bench"] {
        if let Some(i) = line.find(tool) {
            let cmd = &line[i..];
            let arg = |flag: &str| {
                let mut it = cmd.split_whitespace();
                it.find(|a| *a == flag).and(it.next())
            };
            let mut s = tool.to_string();
            for (flag, name) in [
                ("-f", "f"),
                // hipblaslt-bench writes --transA, rocblas-bench --transposeA
                ("--transA", "transA"),
                ("--transposeA", "transA"),
                ("--transB", "transB"),
                ("--transposeB", "transB"),
                ("-m", "m"),
                ("-n", "n"),
                ("-k", "k"),
                ("--solution_index", "solution"),
            ] {
                if let Some(v) = arg(flag) {
                    s.push_str(&format!(" {name}={v}"));
                }
            }
            return Some(s);
        }
    }
    // MIOpen: "MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver conv ..." and
    // the solver it picked, "... Solver: ConvBinWinogradRxSf2x3g1 ..."
    if line.contains("MIOpen") {
        if let Some(i) = line.find("Solver: ").or_else(|| line.find("solver: ")) {
            let name = line[i + 8..].split_whitespace().next()?;
            return Some(format!("MIOpen solver {name}"));
        }
        if let Some(i) = line.find("MIOpenDriver") {
            let cmd: String = line[i..].chars().take(160).collect();
            return Some(cmd);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_values() {
        assert_eq!(TraceMode::parse("").unwrap(), None);
        assert_eq!(TraceMode::parse("1").unwrap(), Some(TraceMode::Kineto));
        assert_eq!(TraceMode::parse("logs").unwrap(), Some(TraceMode::Logs));
        assert!(
            TraceMode::parse("yes")
                .unwrap_err()
                .contains("OPBENCH_TRACE")
        );
    }

    /// The blocking copies of both runtimes are syncs (HIP's `hipMemcpyWithStream` is c10's
    /// `memcpy_and_sync` on ROCm); launches and async copies are not.
    #[test]
    fn blocking_copies_are_syncs() {
        for n in [
            "cudaDeviceSynchronize",
            "hipStreamSynchronize",
            "cudaMemcpy",
            "hipMemcpyWithStream",
        ] {
            assert!(is_sync(n), "{n}");
        }
        for n in ["hipLaunchKernel", "hipMemcpyAsync", "cudaLaunchKernel"] {
            assert!(!is_sync(n), "{n}");
        }
    }

    /// Lines as cuBLASLt 13.1 printed them on the H200 (CUBLASLT_LOG_LEVEL=5).
    #[test]
    fn cublaslt_names_its_algorithm() {
        let line = "[2026-11-30 08:05:29][cublasLt][474][Trace][cublasLtHSHMatmul] A=0X7F639C000000 Adesc=[type=R_16F rows=1024 cols=1024 ld=1024] computeDesc=[computeType=COMPUTE_32F scaleType=R_32F transa=OP_T smCountTarget=132] algo=[algoId=66 tile=MATMUL_TILE_8x64 stages=MATMUL_STAGES_64xAUTO clusterShape=CLUSTER_SHAPE_2x1x1] workSpace=0X0 workSpaceSizeInBytes=0 beta=0 outOfPlace=0 stream=0X0";
        assert_eq!(
            parse_log_line(line).unwrap(),
            "cublasLtHSHMatmul algo 66 tile 8x64 stages 64xAUTO cluster 2x1x1"
        );
        // the API line without the algorithm is not a choice
        assert_eq!(
            parse_log_line(
                "[2026-11-30 08:05:29][cublasLt][474][Api][cublasLtHSHMatmul] A=0X7F algo=0X7FFC"
            ),
            None
        );
    }

    /// Formats from the ROCm libraries' documentation (not run here: no AMD GPU).
    #[test]
    fn rocm_bench_lines_and_solvers() {
        let h = "hipblaslt-bench --api_method c -m 1024 -n 1 -k 1024 --lda 1024 --transA T --transB N --a_type f16_r --solution_index 12345";
        assert_eq!(
            parse_log_line(h).unwrap(),
            "hipblaslt-bench transA=T transB=N m=1024 n=1 k=1024 solution=12345"
        );
        let r = "./rocblas-bench -f gemm_ex --transposeA T --transposeB N -m 1024 -n 1 -k 1024 --a_type f16_r";
        assert_eq!(
            parse_log_line(r).unwrap(),
            "rocblas-bench f=gemm_ex transA=T transB=N m=1024 n=1 k=1024"
        );
        assert_eq!(
            parse_log_line(
                "MIOpen(HIP): Info2 [SearchForSolutions] Solver: ConvBinWinogradRxSf2x3g1 found"
            )
            .unwrap(),
            "MIOpen solver ConvBinWinogradRxSf2x3g1"
        );
        let key = key();
        let (row, rows) = from_logs(&key, "nothing here\n");
        assert_eq!(row.status, TraceStatus::Unavailable);
        assert!(row.note.unwrap().starts_with("trace unavailable: "));
        assert!(rows.is_empty());
    }

    fn key() -> CaseKey {
        rundir::SeriesKey {
            op: shapes::OpKind::Linear,
            variant: "aten".into(),
            site: "q_proj".into(),
            model: "qwen3-0.6b".into(),
            phase: shapes::Phase::Decode,
            q_len: 1,
            kv_len: None,
            dtype: DType::F16,
            device: rundir::DeviceId {
                backend: rundir::Backend::Cuda,
                index: 0,
            },
            mode: rundir::Mode::Pipelined,
        }
        .at(1)
    }

    fn ev(
        activity: Kin,
        name: &str,
        start: u64,
        dur: u64,
        corr: u64,
        linked: u64,
        dev: bool,
    ) -> TraceEvent {
        TraceEvent {
            activity,
            on_device: dev,
            name: name.into(),
            duration_ns: dur,
            correlation: corr,
            linked_correlation: linked,
            resource: if dev { 7 } else { 1 },
            start_ns: start,
        }
    }

    #[test]
    fn a_trace_is_summarized_per_call_with_launchers_and_fallback() {
        let key = key();
        let mut events = Vec::new();
        for i in 0..2u64 {
            let t = i * 1000;
            events.push(ev(Kin::CpuOp, "aten::linear", t, 100, 10 + i, 0, false));
            events.push(ev(Kin::CpuOp, "aten::mm", t + 10, 50, 20 + i, 0, false));
            events.push(ev(
                Kin::Driver,
                "cuLaunchKernelEx",
                t + 20,
                5,
                30 + i,
                0,
                false,
            ));
            events.push(ev(
                Kin::Kernel,
                "nvjet_a",
                t + 30,
                3300,
                30 + i,
                20 + i,
                true,
            ));
        }
        events.push(ev(
            Kin::Runtime,
            "cudaDeviceSynchronize",
            5000,
            10,
            99,
            0,
            false,
        ));
        events.push(ev(Kin::Other(42), "new thing", 6000, 1, 98, 0, false));
        let (row, rows) = summarize(&key, &events, 2, true, 1);
        assert_eq!(row.kernels, 1.0);
        assert_eq!(
            row.syncs, 0.0,
            "the tracer's own synchronize is not the case's"
        );
        assert_eq!(row.device_ns, Some(3300.0));
        assert_eq!(row.dominant_kernel.as_deref(), Some("nvjet_a"));
        assert_eq!(row.fallback, None);
        let k = rows.iter().find(|r| r.kind == Activity::Kernel).unwrap();
        assert_eq!(k.launcher.as_deref(), Some("cuLaunchKernelEx"));
        assert_eq!(k.parent_op.as_deref(), Some("aten::mm"));
        assert_eq!(k.per_call, 1.0);
        // aten::mm runs inside aten::linear: only linear is top level
        let ops: Vec<&str> = rows
            .iter()
            .filter(|r| r.kind == Activity::CpuOp)
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(ops, ["aten::linear"]);
        assert!(
            rows.iter()
                .any(|r| r.kind == Activity::Other && r.name == "activity 42: new thing")
        );
        // a GPU call with no kernel and a copy back is flagged
        let host_only = vec![
            ev(Kin::CpuOp, "aten::add", 0, 100, 1, 0, false),
            ev(
                Kin::Memcpy,
                "Memcpy DtoH (Device -> Pageable)",
                10,
                800,
                2,
                1,
                true,
            ),
        ];
        let (row, _) = summarize(&key, &host_only, 1, true, 0);
        let why = row.fallback.unwrap();
        assert!(why.contains("device→host"), "{why}");
        let metadata = vec![ev(Kin::CpuOp, "aten::transpose", 0, 100, 1, 0, false)];
        let (row, _) = summarize(&key, &metadata, 1, true, 0);
        assert!(row.fallback.unwrap().starts_with("no device work"));
        // a device-to-device copy is device work, not a fallback
        let copy = vec![ev(
            Kin::Memcpy,
            "Memcpy DtoD (Device -> Device)",
            0,
            100,
            1,
            0,
            true,
        )];
        assert_eq!(summarize(&key, &copy, 1, true, 0).0.fallback, None);
    }
}
