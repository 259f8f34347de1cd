//! atenx: the few libtorch calls tch 0.24 does not wrap, through a small C++ shim
//! (`cpp/atenx.cpp`) compiled against the same libtorch headers tch uses.
//!
//! - SDPA forwards that tch cannot express: [`sdpa_flash`] (its return tuple holds SymInts)
//!   and [`sdpa_cudnn`]; [`sdp_backend_name`] names what `_fused_sdp_choice` returns;
//!   [`sdp_enabled`] reads the global SDP switches.
//! - Build facts: [`torch_version`], [`show_config`], [`has_rocm`], [`runtime_version`],
//!   cuDNN / MIOpen / hipBLASLt versions.
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
