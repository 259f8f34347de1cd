//! Facts about a GPU that libtorch does not expose without vendor headers: name,
//! architecture, SM / CU count, memory, L2, driver. Read from the vendor runtime loaded at
//! run time (the CUDA driver API, or HIP's runtime), so one binary serves both builds and a
//! CPU-only machine simply has none.

use std::ffi::{CStr, c_char, c_int};

/// What could be read; missing fields stay `None` rather than guessed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuFacts {
    pub name: Option<String>,
    /// `sm_90` on CUDA; the gcnArchName (`gfx1032`, `gfx90a:sramecc+:xnack-`) on ROCm.
    pub arch: Option<String>,
    pub memory_bytes: Option<u64>,
    /// Streaming multiprocessors (CUDA) or compute units (ROCm).
    pub sm_count: Option<u32>,
    pub l2_cache_bytes: Option<u64>,
    /// Peak DRAM bandwidth from memory clock and bus width, GB/s (CUDA only).
    pub peak_dram_gbps: Option<f64>,
    pub driver_version: Option<String>,
}

type CuInit = unsafe extern "C" fn(u32) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuDeviceTotalMem = unsafe extern "C" fn(*mut usize, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type CuDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;

/// CUDA facts for device `index` through the driver API (libcuda / nvcuda).
pub fn cuda(index: usize) -> GpuFacts {
    let mut facts = GpuFacts::default();
    let name = if cfg!(windows) {
        "nvcuda.dll"
    } else {
        "libcuda.so.1"
    };
    // SAFETY: the CUDA driver library; symbols are used with their documented C signatures.
    let Ok(lib) = (unsafe { libloading::Library::new(name) }) else {
        return facts;
    };
    let ordinal = c_int::try_from(index).unwrap_or(0);
    unsafe {
        let (Ok(init), Ok(get)) = (
            lib.get::<CuInit>(b"cuInit\0"),
            lib.get::<CuDeviceGet>(b"cuDeviceGet\0"),
        ) else {
            return facts;
        };
        let mut dev: c_int = 0;
        if init(0) != 0 || get(&mut dev, ordinal) != 0 {
            return facts;
        }
        if let Ok(f) = lib.get::<CuDeviceGetName>(b"cuDeviceGetName\0") {
            let mut buf = [0 as c_char; 256];
            if f(buf.as_mut_ptr(), 256, dev) == 0 {
                facts.name = Some(CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned());
            }
        }
        if let Ok(f) = lib.get::<CuDeviceTotalMem>(b"cuDeviceTotalMem_v2\0") {
            let mut bytes = 0usize;
            if f(&mut bytes, dev) == 0 {
                facts.memory_bytes = Some(bytes as u64);
            }
        }
        if let Ok(f) = lib.get::<CuDeviceGetAttribute>(b"cuDeviceGetAttribute\0") {
            let attr = |a: c_int| {
                let mut v: c_int = 0;
                (f(&mut v, a, dev) == 0).then_some(v)
            };
            // CUdevice_attribute values from cuda.h (stable since CUDA 5)
            const SM_COUNT: c_int = 16;
            const MEM_CLOCK_KHZ: c_int = 36;
            const BUS_WIDTH_BITS: c_int = 37;
            const L2_BYTES: c_int = 38;
            const CC_MAJOR: c_int = 75;
            const CC_MINOR: c_int = 76;
            if let (Some(ma), Some(mi)) = (attr(CC_MAJOR), attr(CC_MINOR)) {
                facts.arch = Some(format!("sm_{ma}{mi}"));
            }
            facts.sm_count = attr(SM_COUNT).and_then(|v| u32::try_from(v).ok());
            facts.l2_cache_bytes = attr(L2_BYTES).and_then(|v| u64::try_from(v).ok());
            if let (Some(khz), Some(bits)) = (attr(MEM_CLOCK_KHZ), attr(BUS_WIDTH_BITS)) {
                if khz > 0 && bits > 0 {
                    // double data rate: two transfers per clock
                    facts.peak_dram_gbps =
                        Some(2.0 * f64::from(khz) * 1e3 * f64::from(bits) / 8.0 / 1e9);
                }
            }
        }
        if let Ok(f) = lib.get::<CuDriverGetVersion>(b"cuDriverGetVersion\0") {
            let mut v: c_int = 0;
            if f(&mut v) == 0 {
                facts.driver_version = Some(format!("{}.{}", v / 1000, (v % 1000) / 10));
            }
        }
    }
    facts
}

type HipGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type HipTotalMem = unsafe extern "C" fn(*mut usize, c_int) -> c_int;
type HipGetProps = unsafe extern "C" fn(*mut u8, c_int) -> c_int;
type HipVersion = unsafe extern "C" fn(*mut c_int) -> c_int;

/// HIP facts for device `index` through the HIP runtime (libamdhip64 / amdhip64).
///
/// The architecture is the gcnArchName field of hipDeviceProp_t; its offset differs between
/// ROCm releases, so the properties are read into a generous buffer and the one string that
/// starts with `gfx` is taken. Not yet exercised on an AMD GPU.
pub fn hip(index: usize) -> GpuFacts {
    let mut facts = GpuFacts::default();
    let names: &[&str] = if cfg!(windows) {
        &["amdhip64_6.dll", "amdhip64.dll"]
    } else {
        &["libamdhip64.so", "libamdhip64.so.6"]
    };
    // SAFETY: the HIP runtime, used with its documented C signatures.
    let Some(lib) = names
        .iter()
        .find_map(|n| unsafe { libloading::Library::new(n) }.ok())
    else {
        return facts;
    };
    let dev = c_int::try_from(index).unwrap_or(0);
    unsafe {
        if let Ok(f) = lib.get::<HipGetName>(b"hipDeviceGetName\0") {
            let mut buf = [0 as c_char; 256];
            if f(buf.as_mut_ptr(), 256, dev) == 0 {
                facts.name = Some(CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned());
            }
        }
        if let Ok(f) = lib.get::<HipTotalMem>(b"hipDeviceTotalMem\0") {
            let mut bytes = 0usize;
            if f(&mut bytes, dev) == 0 {
                facts.memory_bytes = Some(bytes as u64);
            }
        }
        let props = lib
            .get::<HipGetProps>(b"hipGetDevicePropertiesR0600\0")
            .or_else(|_| lib.get::<HipGetProps>(b"hipGetDeviceProperties\0"));
        if let Ok(f) = props {
            let mut buf = vec![0u8; 16 * 1024];
            if f(buf.as_mut_ptr(), dev) == 0 {
                facts.arch = find_gfx(&buf);
            }
        }
        if let Ok(f) = lib.get::<HipVersion>(b"hipDriverGetVersion\0") {
            let mut v: c_int = 0;
            if f(&mut v) == 0 {
                facts.driver_version = Some(v.to_string());
            }
        }
    }
    facts
}

/// The first NUL-terminated string in `buf` that starts with `gfx` followed by a digit.
fn find_gfx(buf: &[u8]) -> Option<String> {
    let mut i = 0;
    while i + 4 <= buf.len() {
        if &buf[i..i + 3] == b"gfx" && buf[i + 3].is_ascii_digit() && (i == 0 || buf[i - 1] == 0) {
            let end = buf[i..].iter().position(|&b| b == 0)? + i;
            let s = std::str::from_utf8(&buf[i..end]).ok()?;
            if s.chars()
                .all(|c| c.is_ascii_alphanumeric() || ":+-_".contains(c))
            {
                return Some(s.to_string());
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_arch_string_in_a_property_blob() {
        let mut blob = vec![0u8; 64];
        blob[..21].copy_from_slice(b"AMD Radeon RX 6650 XT");
        blob[40..47].copy_from_slice(b"gfx1032");
        assert_eq!(super::find_gfx(&blob).as_deref(), Some("gfx1032"));
        assert_eq!(super::find_gfx(b"no arch here\0"), None);
    }
}
