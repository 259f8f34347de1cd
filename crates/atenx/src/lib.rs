//! atenx: the few libtorch calls tch 0.24 does not wrap, through a small C++ shim
//! (`cpp/atenx.cpp`) compiled against the same libtorch headers tch uses.
//!
//! - SDPA forwards that tch cannot express: [`sdpa_flash`] (its return tuple holds SymInts)
//!   and [`sdpa_cudnn`]; [`sdp_backend_name`] names what `_fused_sdp_choice` returns;
//!   [`sdp_enabled`] reads the global SDP switches.
//! - Build facts: [`torch_version`], [`show_config`], [`has_rocm`], [`runtime_version`],
//!   cuDNN / MIOpen / hipBLASLt versions.
//! - [`Graph`]: capture calls into a CUDA (or HIP) graph and replay them, through libtorch's
//!   own `at::cuda::CUDAGraph`, resolved by name from the GPU library ([`GraphApi`]).
//! - [`trace_start`] / [`trace_stop`]: PyTorch's Kineto profiler (what `torch.profiler`
//!   drives), CPU ops and device activities as [`TraceEvent`]s.
//! - [`DeviceTimer`]: GPU events on the stream PyTorch uses, through c10's device-generic
//!   event, so one binary times kernels on CUDA and ROCm builds alike.
//!
//! The shim includes only CPU-side ATen/c10 headers, so it builds against CPU-only, CUDA and
//! ROCm libtorch. Every call returns a [`tch::TchError`] instead of throwing.
//!
//! ```no_run
//! let version = atenx::torch_version(); // "2.11.0"
//! assert!(!version.is_empty());
//! ```

use std::ffi::{CStr, c_char, c_int, c_long, c_void};

use tch::{TchError, Tensor};
use torch_sys::C_tensor;

unsafe extern "C" {
    fn atx_free(p: *mut c_char);
    fn atx_sdpa_flash(
        out: *mut *mut C_tensor,
        q: *const C_tensor,
        k: *const C_tensor,
        v: *const C_tensor,
        is_causal: c_int,
        scale: f64,
    ) -> *mut c_char;
    fn atx_sdpa_cudnn(
        out: *mut *mut C_tensor,
        q: *const C_tensor,
        k: *const C_tensor,
        v: *const C_tensor,
        is_causal: c_int,
        scale: f64,
    ) -> *mut c_char;
    fn atx_sdp_backend_name(b: i64) -> *const c_char;
    fn atx_sdp_enabled_mask() -> c_int;
    fn atx_torch_version() -> *mut c_char;
    fn atx_show_config() -> *mut c_char;
    fn atx_has_rocm() -> c_int;
    fn atx_runtime_version() -> c_long;
    fn atx_cudnn_version() -> c_long;
    fn atx_miopen_version() -> c_long;
    fn atx_hipblaslt_version() -> c_long;
    fn atx_gpu_count() -> c_int;
    fn atx_blas_backend() -> *const c_char;
    fn atx_rocm_fa_backend() -> *const c_char;
    fn atx_timer_new(out: *mut *mut c_void, device: c_int) -> *mut c_char;
    fn atx_timer_free(t: *mut c_void);
    fn atx_timer_start(t: *mut c_void) -> *mut c_char;
    fn atx_timer_stop(t: *mut c_void) -> *mut c_char;
    fn atx_timer_elapsed_ms(t: *mut c_void, ms: *mut f64) -> *mut c_char;
    fn atx_graph_new(out: *mut *mut c_void, f: *const GraphFns, device: c_int) -> *mut c_char;
    fn atx_graph_free(g: *mut c_void);
    fn atx_graph_enter(g: *mut c_void) -> *mut c_char;
    fn atx_graph_leave(g: *mut c_void) -> *mut c_char;
    fn atx_graph_begin(g: *mut c_void) -> *mut c_char;
    fn atx_graph_end(g: *mut c_void) -> *mut c_char;
    fn atx_graph_replay(g: *mut c_void) -> *mut c_char;
    fn atx_graph_storage() -> usize;
    fn atx_trace_start(gpu: c_int) -> *mut c_char;
    fn atx_trace_stop(out: *mut *mut c_char) -> *mut c_char;
}

/// Turn the shim's error convention (null or a malloc'd message) into a Result.
fn check(err: *mut c_char) -> Result<(), TchError> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null return is a NUL-terminated string from malloc, ours to free.
    let msg = unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned();
    unsafe { atx_free(err) };
    Err(TchError::Torch(msg))
}

/// Take ownership of a malloc'd string from the shim.
fn owned_string(p: *mut c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: as in `check`.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    unsafe { atx_free(p) };
    s
}

type Sdpa = unsafe extern "C" fn(
    *mut *mut C_tensor,
    *const C_tensor,
    *const C_tensor,
    *const C_tensor,
    c_int,
    f64,
) -> *mut c_char;

fn call_sdpa(
    f: Sdpa,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    is_causal: bool,
    scale: Option<f64>,
) -> Result<Tensor, TchError> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: the tensors outlive the call; on success `out` is a fresh at::Tensor* that the
    // returned Tensor owns.
    check(unsafe {
        f(
            &mut out,
            q.as_ptr(),
            k.as_ptr(),
            v.as_ptr(),
            c_int::from(is_causal),
            scale.unwrap_or(-1.0),
        )
    })?;
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// `at::_scaled_dot_product_flash_attention` forward, output only. Inputs are
/// `[batch, heads, seq, head_dim]` with equal head counts (flash takes no GQA here).
pub fn sdpa_flash(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    is_causal: bool,
    scale: Option<f64>,
) -> Result<Tensor, TchError> {
    call_sdpa(atx_sdpa_flash, q, k, v, is_causal, scale)
}

/// `at::_scaled_dot_product_cudnn_attention` forward, output only.
pub fn sdpa_cudnn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    is_causal: bool,
    scale: Option<f64>,
) -> Result<Tensor, TchError> {
    call_sdpa(atx_sdpa_cudnn, q, k, v, is_causal, scale)
}

/// The backend name for a value of ATen's `SDPBackend` (what `_fused_sdp_choice` returns):
/// `math`, `flash`, `efficient`, `cudnn`, `overrideable`, `error`.
pub fn sdp_backend_name(backend: i64) -> &'static str {
    // SAFETY: returns a pointer to a static string literal.
    let p = unsafe { atx_sdp_backend_name(backend) };
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("unknown")
}

/// Which SDP backends the global context allows, as (name, enabled) pairs.
pub fn sdp_enabled() -> Vec<(&'static str, bool)> {
    // SAFETY: reads global flags.
    let mask = unsafe { atx_sdp_enabled_mask() };
    ["math", "flash", "efficient", "cudnn", "overrideable"]
        .into_iter()
        .enumerate()
        .map(|(i, n)| (n, mask & (1 << i) != 0))
        .collect()
}

/// libtorch's version as its headers state it (`2.11.0`).
pub fn torch_version() -> String {
    owned_string(unsafe { atx_torch_version() })
}

/// `at::show_config()`: how this libtorch was built (compilers, CUDA/ROCm, BLAS, flags).
pub fn show_config() -> String {
    owned_string(unsafe { atx_show_config() })
}

/// True on a ROCm (HIP) build of libtorch whose GPU library is loaded.
pub fn has_rocm() -> bool {
    unsafe { atx_has_rocm() != 0 }
}

// c_long is 32 bits on Windows, 64 elsewhere
#[allow(clippy::useless_conversion)]
fn positive(v: c_long) -> Option<i64> {
    (v > 0).then_some(i64::from(v))
}

/// The CUDA runtime version (13000 = 13.0) or, on ROCm builds, the HIP runtime version.
pub fn runtime_version() -> Option<i64> {
    positive(unsafe { atx_runtime_version() })
}
pub fn cudnn_version() -> Option<i64> {
    positive(unsafe { atx_cudnn_version() })
}
pub fn miopen_version() -> Option<i64> {
    positive(unsafe { atx_miopen_version() })
}
pub fn hipblaslt_version() -> Option<i64> {
    positive(unsafe { atx_hipblaslt_version() })
}
fn static_str(p: *const c_char) -> &'static str {
    // SAFETY: the shim returns pointers to static string literals.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("unknown")
}

/// The GEMM library ATen prefers: `default`, `cublas` (rocBLAS on ROCm), `cublaslt`
/// (hipBLASLt on ROCm) or `ck`; it follows `TORCH_BLAS_PREFER_HIPBLASLT` / `_CUBLASLT`.
pub fn blas_backend() -> &'static str {
    static_str(unsafe { atx_blas_backend() })
}

/// The flash-attention implementation ROCm builds prefer: `default`, `aotriton` or `ck`.
pub fn rocm_fa_backend() -> &'static str {
    static_str(unsafe { atx_rocm_fa_backend() })
}

/// GPUs the loaded GPU library sees (0 when none is loaded).
pub fn gpu_count() -> usize {
    usize::try_from(unsafe { atx_gpu_count() }).unwrap_or(0)
}

/// A pair of GPU events recorded on the current stream of one device.
#[derive(Debug)]
pub struct DeviceTimer {
    raw: *mut c_void,
}

impl DeviceTimer {
    pub fn new(device: usize) -> Result<Self, TchError> {
        let mut raw = std::ptr::null_mut();
        let index = c_int::try_from(device).map_err(|e| TchError::Convert(e.to_string()))?;
        check(unsafe { atx_timer_new(&mut raw, index) })?;
        Ok(DeviceTimer { raw })
    }
    /// Record the start event (returns at once; the GPU timestamps it when it gets there).
    pub fn start(&mut self) -> Result<(), TchError> {
        check(unsafe { atx_timer_start(self.raw) })
    }
    /// Record the stop event.
    pub fn stop(&mut self) -> Result<(), TchError> {
        check(unsafe { atx_timer_stop(self.raw) })
    }
    /// Wait for the stop event and return the device time between the two, in ms.
    pub fn elapsed_ms(&mut self) -> Result<f64, TchError> {
        let mut ms = 0.0;
        check(unsafe { atx_timer_elapsed_ms(self.raw, &mut ms) })?;
        Ok(ms)
    }
}

impl Drop for DeviceTimer {
    fn drop(&mut self) {
        unsafe { atx_timer_free(self.raw) }
    }
}

/// The members of `at::cuda::CUDAGraph` the shim calls, resolved from the GPU library.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GraphFns {
    ctor: *const c_void,
    dtor: *const c_void,
    begin: *const c_void,
    end: *const c_void,
    replay: *const c_void,
}

/// The declarations of `at::cuda::CUDAGraph` this shim's opaque storage and calls were
/// checked against: (fingerprint of the struct in `ATen/cuda/CUDAGraph.h`, the torch
/// versions that declare it so, `sizeof` on x86-64 Linux counted from its members). The
/// calls use only the constructor `(bool)`, the destructor, `capture_begin(MempoolId_t,
/// cudaStreamCaptureMode)`, `capture_end()` and `replay()`, whose signatures all four
/// share; the storage is [`graph_storage_bytes`].
pub const CHECKED_GRAPH_LAYOUTS: &[(&str, &str, usize)] = &[
    ("7003571e14bff02e", "2.9", 104),
    ("41f7b7dff8bbce36", "2.10, 2.11", 104),
    ("dadfd8ccc3790ed0", "2.13", 344),
    ("6b2b2010e17639fb", "2.15", 448),
];

/// The fingerprint of the `CUDAGraph` declaration in the headers this crate was built
/// against (`none` without the header).
pub const GRAPH_FINGERPRINT: &str = env!("ATENX_CUDAGRAPH_FINGERPRINT");

/// Bytes of opaque storage the shim gives a `CUDAGraph`.
pub fn graph_storage_bytes() -> usize {
    unsafe { atx_graph_storage() }
}

/// The checked layout matching the headers built against, or why graphs are not offered.
pub fn graph_layout() -> Result<(&'static str, usize), String> {
    CHECKED_GRAPH_LAYOUTS
        .iter()
        .find(|(fp, _, _)| *fp == GRAPH_FINGERPRINT)
        .map(|&(_, versions, size)| (versions, size))
        .ok_or_else(|| {
            format!(
                "at::cuda::CUDAGraph as declared by torch {}'s headers (fingerprint {GRAPH_FINGERPRINT}) \
                 was not checked against the shim's storage and signatures",
                torch_version()
            )
        })
}

/// `at::cuda::CUDAGraph`'s members by mangled name: Itanium (Linux) and MSVC (Windows), with
/// the capture mode's type as CUDA (`cudaStreamCaptureMode`) or hipified ROCm
/// (`hipStreamCaptureMode`) builds name it.
const GRAPH_SYMBOLS: [&[&str]; 5] = [
    &[
        "_ZN2at4cuda9CUDAGraphC1Eb",
        "??0CUDAGraph@cuda@at@@QEAA@_N@Z",
    ],
    &["_ZN2at4cuda9CUDAGraphD1Ev", "??1CUDAGraph@cuda@at@@QEAA@XZ"],
    &[
        "_ZN2at4cuda9CUDAGraph13capture_beginESt4pairIyyE21cudaStreamCaptureMode",
        "_ZN2at4cuda9CUDAGraph13capture_beginESt4pairIyyE20hipStreamCaptureMode",
        "?capture_begin@CUDAGraph@cuda@at@@QEAAXU?$pair@_K_K@std@@W4cudaStreamCaptureMode@@@Z",
        "?capture_begin@CUDAGraph@cuda@at@@QEAAXU?$pair@_K_K@std@@W4hipStreamCaptureMode@@@Z",
    ],
    &[
        "_ZN2at4cuda9CUDAGraph11capture_endEv",
        "?capture_end@CUDAGraph@cuda@at@@QEAAXXZ",
    ],
    &[
        "_ZN2at4cuda9CUDAGraph6replayEv",
        "?replay@CUDAGraph@cuda@at@@QEAAXXZ",
    ],
];

/// libtorch's graph class, resolved from its GPU library (`libtorch_cuda.so`,
/// `torch_hip.dll`, ...), ready to make [`Graph`]s.
#[derive(Debug, Clone, Copy)]
pub struct GraphApi {
    fns: GraphFns,
}

// SAFETY: the pointers are addresses of functions in a library loaded for the process's life.
unsafe impl Send for GraphApi {}
unsafe impl Sync for GraphApi {}

impl GraphApi {
    /// Resolve the members from `library` (already loaded; this takes another reference and
    /// keeps it). Errors name what is missing: a layout not checked, or a symbol not found.
    pub fn load(library: &str) -> Result<GraphApi, String> {
        graph_layout()?;
        // SAFETY: loading a library that is already loaded runs no initialisers again.
        let lib = unsafe { libloading::Library::new(library) }
            .map_err(|e| format!("cannot open {library}: {e}"))?;
        let mut found = [std::ptr::null(); 5];
        for (slot, names) in found.iter_mut().zip(GRAPH_SYMBOLS) {
            *slot = names
                .iter()
                .find_map(|n| {
                    let mut z = n.as_bytes().to_vec();
                    z.push(0);
                    // SAFETY: only the address is taken; the shim calls it with the declared
                    // signature.
                    unsafe { lib.get::<*const c_void>(&z) }.ok().map(|s| *s)
                })
                .ok_or_else(|| format!("{library} has no {} (at::cuda::CUDAGraph)", names[0]))?;
        }
        std::mem::forget(lib);
        let [ctor, dtor, begin, end, replay] = found;
        Ok(GraphApi {
            fns: GraphFns {
                ctor,
                dtor,
                begin,
                end,
                replay,
            },
        })
    }
}

/// A captured graph: [`Graph::capture`] records what a closure queues on the GPU, and
/// [`Graph::replay`] launches all of it again with one call, on the current stream.
///
/// Capture runs on a side stream from c10's pool (capture needs a non-default stream) after
/// `warmup` eager runs there, in global capture mode: a call that synchronizes the host or
/// allocates outside the graph's private memory pool fails the capture, which then returns
/// the error. Tensors the closure allocates live in the graph's pool and are rewritten by
/// every replay.
#[derive(Debug)]
pub struct Graph {
    raw: *mut c_void,
}

impl Graph {
    /// Capture `f` on `device`; returns the graph and what `f` returned during capture (its
    /// tensors are the ones every replay writes).
    pub fn capture<T>(
        api: &GraphApi,
        device: usize,
        warmup: usize,
        mut f: impl FnMut() -> Result<T, TchError>,
    ) -> Result<(Graph, T), TchError> {
        let index = c_int::try_from(device).map_err(|e| TchError::Convert(e.to_string()))?;
        let mut raw = std::ptr::null_mut();
        check(unsafe { atx_graph_new(&mut raw, &api.fns, index) })?;
        let graph = Graph { raw };
        check(unsafe { atx_graph_enter(graph.raw) })?;
        let captured: Result<T, TchError> = (|| {
            for _ in 0..warmup {
                drop(f()?);
            }
            tch::Cuda::synchronize(device as i64);
            check(unsafe { atx_graph_begin(graph.raw) })?;
            let out = f();
            // end the capture whatever happened, or the stream stays in capture mode
            let ended = check(unsafe { atx_graph_end(graph.raw) });
            let out = out?;
            ended?;
            Ok(out)
        })();
        let left = check(unsafe { atx_graph_leave(graph.raw) });
        let out = captured?;
        left?;
        Ok((graph, out))
    }

    /// Launch the graph on the current stream (returns at once).
    pub fn replay(&mut self) -> Result<(), TchError> {
        check(unsafe { atx_graph_replay(self.raw) })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        unsafe { atx_graph_free(self.raw) }
    }
}

/// The kind of a traced activity: libkineto's `ActivityType`, whose first twelve values are
/// the same in torch 2.9 to 2.15. Any other value is kept as its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Activity {
    /// An ATen op (or other RecordFunction) on the host.
    CpuOp,
    UserAnnotation,
    GpuUserAnnotation,
    /// A device copy (host↔device or device↔device).
    Memcpy,
    Memset,
    /// A kernel on the device.
    Kernel,
    ExternalCorrelation,
    /// A CUDA (or HIP) runtime API call on the host: launches, syncs, copies.
    Runtime,
    /// A driver API call (`cuLaunchKernelEx`).
    Driver,
    CpuInstant,
    PythonFunction,
    Overhead,
    /// A kind this table does not name, by libkineto's number.
    Other(u8),
}

impl Activity {
    pub fn from_kineto(n: u8) -> Activity {
        use Activity::*;
        match n {
            0 => CpuOp,
            1 => UserAnnotation,
            2 => GpuUserAnnotation,
            3 => Memcpy,
            4 => Memset,
            5 => Kernel,
            6 => ExternalCorrelation,
            7 => Runtime,
            8 => Driver,
            9 => CpuInstant,
            10 => PythonFunction,
            11 => Overhead,
            n => Other(n),
        }
    }
}

/// One event of a trace, as Kineto reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEvent {
    pub activity: Activity,
    /// It ran on the GPU (kernels, copies, memsets), not the host.
    pub on_device: bool,
    pub name: String,
    pub duration_ns: u64,
    /// Ties a device activity to the runtime or driver call that launched it.
    pub correlation: u64,
    /// For a device activity: the correlation of the CPU op that launched it.
    pub linked_correlation: u64,
    /// The stream (device activities) or thread (host events).
    pub resource: i64,
    pub start_ns: u64,
}

fn parse_event(line: &str) -> Option<TraceEvent> {
    let mut f = line.splitn(8, '\t');
    let activity = Activity::from_kineto(f.next()?.parse().ok()?);
    let device_type: i32 = f.next()?.parse().ok()?;
    Some(TraceEvent {
        activity,
        // c10::DeviceType::CPU is 0
        on_device: device_type != 0,
        duration_ns: f.next()?.parse().ok()?,
        correlation: f.next()?.parse().ok()?,
        linked_correlation: f.next()?.parse().ok()?,
        resource: f.next()?.parse().ok()?,
        start_ns: f.next()?.parse().ok()?,
        name: f.next()?.to_string(),
    })
}

/// Start PyTorch's Kineto profiler: CPU ops, and with `gpu` the device activities. The
/// first trace of a process also records initialisation: trace once and discard it.
pub fn trace_start(gpu: bool) -> Result<(), TchError> {
    check(unsafe { atx_trace_start(c_int::from(gpu)) })
}

/// Stop the profiler and return what it recorded.
pub fn trace_stop() -> Result<Vec<TraceEvent>, TchError> {
    let mut out: *mut c_char = std::ptr::null_mut();
    check(unsafe { atx_trace_stop(&mut out) })?;
    Ok(owned_string(out).lines().filter_map(parse_event).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_match_aten_enum() {
        assert_eq!(sdp_backend_name(0), "math");
        assert_eq!(sdp_backend_name(1), "flash");
        assert_eq!(sdp_backend_name(2), "efficient");
        assert_eq!(sdp_backend_name(3), "cudnn");
        assert_eq!(sdp_backend_name(-1), "error");
    }

    #[test]
    fn version_and_config() {
        let v = torch_version();
        assert!(v.starts_with("2."), "{v}");
        assert!(show_config().contains("PyTorch built with"));
        assert!(sdp_enabled().iter().any(|(n, on)| *n == "math" && *on));
    }

    #[test]
    fn flash_on_cpu_tensors_is_an_error_not_a_crash() {
        let q = Tensor::zeros([1, 2, 4, 8], (tch::Kind::Float, tch::Device::Cpu));
        // the fused kernels have no CPU dispatch in any build, GPU or not
        assert!(sdpa_flash(&q, &q, &q, false, None).is_err());
        assert!(sdpa_cudnn(&q, &q, &q, false, None).is_err());
    }

    /// The declaration built against must be one whose storage and signatures were checked:
    /// a new torch whose `CUDAGraph` changed fails here until someone checks it.
    #[test]
    fn graph_layout_is_checked_for_the_linked_torch() {
        let (versions, size) = graph_layout().unwrap_or_else(|e| panic!("{e}"));
        let v = torch_version();
        let minor = v.split('.').take(2).collect::<Vec<_>>().join(".");
        assert!(
            versions.split(", ").any(|x| x == minor),
            "torch {v}'s CUDAGraph matches the layout checked for {versions}: add {minor} there \
             after checking it"
        );
        assert!(
            size * 4 <= graph_storage_bytes(),
            "{size} vs {}",
            graph_storage_bytes()
        );
    }

    #[test]
    fn graph_symbols_missing_is_an_error_naming_them() {
        // libtorch_cpu (loaded: the test links it) has no CUDAGraph
        let cpu = if cfg!(windows) {
            "torch_cpu.dll"
        } else {
            "libtorch_cpu.so"
        };
        let e = GraphApi::load(cpu).unwrap_err();
        assert!(e.contains("_ZN2at4cuda9CUDAGraphC1Eb"), "{e}");
        let e = GraphApi::load("no-such-library-opbench").unwrap_err();
        assert!(e.contains("cannot open no-such-library-opbench"), "{e}");
    }

    #[test]
    fn a_cpu_trace_lists_the_aten_ops_of_a_call() {
        let x = Tensor::ones([4, 8], (tch::Kind::Float, tch::Device::Cpu));
        trace_start(false).unwrap();
        drop(trace_stop().unwrap());
        trace_start(false).unwrap();
        let y = x.f_mul_scalar(2.0).unwrap().f_add(&x).unwrap();
        let events = trace_stop().unwrap();
        assert_eq!(y.double_value(&[0, 0]), 3.0);
        let ops: Vec<&str> = events
            .iter()
            .filter(|e| e.activity == Activity::CpuOp)
            .map(|e| e.name.as_str())
            .collect();
        assert!(ops.contains(&"aten::mul"), "{ops:?}");
        assert!(ops.contains(&"aten::add"), "{ops:?}");
        assert!(events.iter().all(|e| !e.on_device), "{events:?}");
    }

    #[test]
    fn unknown_activity_kinds_keep_their_number() {
        assert_eq!(Activity::from_kineto(5), Activity::Kernel);
        assert_eq!(Activity::from_kineto(42), Activity::Other(42));
        let e = parse_event("5\t1\t3300\t7\t3\t12\t100\tnvjet_sm90_hsh 64x8").unwrap();
        assert_eq!(e.activity, Activity::Kernel);
        assert!(e.on_device);
        assert_eq!(e.name, "nvjet_sm90_hsh 64x8");
        assert_eq!(parse_event("garbage"), None);
    }

    #[test]
    fn a_timer_works_exactly_when_a_gpu_is_visible() {
        let timed = DeviceTimer::new(0).and_then(|mut t| {
            t.start()?;
            t.stop()?;
            t.elapsed_ms()
        });
        if gpu_count() == 0 {
            assert!(timed.is_err());
        } else {
            let ms = timed.expect("GPU events on a visible GPU");
            assert!((0.0..1000.0).contains(&ms), "{ms} ms between two events");
        }
    }
}
