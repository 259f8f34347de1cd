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
    /// The HIP runtime's own version (`6.4.43484`); CUDA's comes from libtorch.
    pub runtime_version: Option<String>,
    /// Where the HIP runtime that answered was loaded from.
    pub runtime_path: Option<String>,
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

/// The HIP runtime's file names, newest ABI first: ROCm 7 ships `amdhip64_7`, ROCm 6
/// `amdhip64_6`; on Windows the driver also puts `amdhip64_6.dll` / `amdhip64.dll` in
/// System32, which may not be the runtime PyTorch uses.
const HIP_RUNTIMES: &[&str] = if cfg!(windows) {
    &["amdhip64_7.dll", "amdhip64_6.dll", "amdhip64.dll"]
} else {
    &["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so"]
};

/// The first of `names` that this process has loaded already, without loading anything:
/// `RTLD_NOLOAD` on Unix, `GetModuleHandleExW` on Windows.
pub fn already_loaded(names: &[&str]) -> Option<(libloading::Library, String)> {
    for &n in names {
        #[cfg(unix)]
        // SAFETY: RTLD_NOLOAD never loads (so runs no initialiser); it returns a handle to
        // the module only if the process has it already.
        let lib = unsafe {
            libloading::os::unix::Library::open(
                Some(n),
                libloading::os::unix::RTLD_LAZY | libc::RTLD_NOLOAD,
            )
        }
        .ok()
        .map(libloading::Library::from);
        #[cfg(windows)]
        let lib = libloading::os::windows::Library::open_already_loaded(n)
            .ok()
            .map(libloading::Library::from);
        #[cfg(not(any(unix, windows)))]
        let lib: Option<libloading::Library> = None;
        if let Some(lib) = lib {
            return Some((lib, n.to_string()));
        }
    }
    None
}

/// The HIP runtime libtorch uses: the one already loaded into the process (libtorch_hip
/// pulls it in), else the first that loads by name. With the path it came from, where the
/// OS says (Linux: `dladdr`).
fn hip_runtime() -> Option<(libloading::Library, String)> {
    let (lib, name) = already_loaded(HIP_RUNTIMES).or_else(|| {
        HIP_RUNTIMES.iter().find_map(|n| {
            // SAFETY: the HIP runtime; its initialisers only set up the runtime.
            unsafe { libloading::Library::new(n) }.ok().map(|l| {
                (
                    l,
                    format!("{n} (loaded by name: libtorch had not loaded it)"),
                )
            })
        })
    })?;
    let path = module_path(&lib).unwrap_or(name);
    Some((lib, path))
}

/// The file a library was loaded from, via one of its symbols (glibc / musl `dladdr`).
#[cfg(target_os = "linux")]
fn module_path(lib: &libloading::Library) -> Option<String> {
    // SAFETY: a symbol the HIP runtime exports; only its address is used.
    let sym = unsafe { lib.get::<HipVersion>(b"hipRuntimeGetVersion\0") }.ok()?;
    let addr = *sym as *const libc::c_void;
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr fills `info` for an address inside a loaded module.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    Some(
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned(),
    )
}

#[cfg(not(target_os = "linux"))]
fn module_path(_lib: &libloading::Library) -> Option<String> {
    None
}

/// Field offsets of `hipDeviceProp_tR0600` (hip_runtime_api.h, ROCm 6.0 and later) on 64-bit
/// Linux and Windows: the layout of CUDA 12's `cudaDeviceProp`, then HIP's own fields.
/// Derived from the header's field list (int 4 bytes, size_t 8, aligned); a test checks the
/// arithmetic against the field list.
pub mod r0600 {
    pub const TOTAL_GLOBAL_MEM: usize = 288;
    pub const MULTI_PROCESSOR_COUNT: usize = 388;
    pub const MEMORY_CLOCK_RATE: usize = 608;
    pub const MEMORY_BUS_WIDTH: usize = 612;
    pub const L2_CACHE_SIZE: usize = 616;
    pub const GCN_ARCH_NAME: usize = 1160;
    /// Bytes read up to and including `gcnArchName`.
    pub const PREFIX: usize = GCN_ARCH_NAME + 256;
}

/// CU count, L2 bytes and arch from a `hipDeviceProp_tR0600` as bytes. The arch is taken at
/// its offset when it reads as `gfx…`, else searched for (older layouts).
pub fn parse_r0600(buf: &[u8]) -> (Option<u32>, Option<u64>, Option<String>) {
    let int = |off: usize| -> Option<i32> {
        let b = buf.get(off..off + 4)?;
        Some(i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    let positive = |v: Option<i32>| v.filter(|&v| v > 0);
    let cus = positive(int(r0600::MULTI_PROCESSOR_COUNT)).and_then(|v| u32::try_from(v).ok());
    let l2 = positive(int(r0600::L2_CACHE_SIZE)).and_then(|v| u64::try_from(v).ok());
    let arch = buf
        .get(r0600::GCN_ARCH_NAME..)
        .and_then(|tail| find_gfx(&tail[..tail.len().min(256)]))
        .filter(|_| buf.get(r0600::GCN_ARCH_NAME..r0600::GCN_ARCH_NAME + 3) == Some(b"gfx"))
        .or_else(|| find_gfx(buf));
    (cus, l2, arch)
}

/// HIP facts for device `index` through the HIP runtime libtorch loaded.
///
/// Not yet exercised on an AMD GPU: the offsets come from the header (see [`r0600`]).
pub fn hip(index: usize) -> GpuFacts {
    let mut facts = GpuFacts::default();
    let Some((lib, path)) = hip_runtime() else {
        return facts;
    };
    facts.runtime_path = Some(path);
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
        // the R0600 entry point fills the layout `r0600` describes; the unversioned one is
        // older and differs, so only the arch search is trusted from it
        let (props, versioned) = match lib.get::<HipGetProps>(b"hipGetDevicePropertiesR0600\0") {
            Ok(f) => (Some(f), true),
            Err(_) => (
                lib.get::<HipGetProps>(b"hipGetDeviceProperties\0").ok(),
                false,
            ),
        };
        if let Some(f) = props {
            // generous: newer runtimes may append fields
            let mut buf = vec![0u8; 16 * 1024];
            if f(buf.as_mut_ptr(), dev) == 0 {
                if versioned {
                    let (cus, l2, arch) = parse_r0600(&buf);
                    facts.sm_count = cus;
                    facts.l2_cache_bytes = l2;
                    facts.arch = arch;
                } else {
                    facts.arch = find_gfx(&buf);
                }
            }
        }
        if let Ok(f) = lib.get::<HipVersion>(b"hipDriverGetVersion\0") {
            let mut v: c_int = 0;
            if f(&mut v) == 0 {
                facts.driver_version = Some(v.to_string());
            }
        }
        if let Ok(f) = lib.get::<HipVersion>(b"hipRuntimeGetVersion\0") {
            let mut v: c_int = 0;
            if f(&mut v) == 0 && v > 0 {
                facts.runtime_version = Some(hip_version(v));
            }
        }
    }
    facts
}

/// HIP_VERSION's encoding: major × 10⁷ + minor × 10⁵ + patch.
pub fn hip_version(v: i32) -> String {
    format!("{}.{}.{}", v / 10_000_000, (v / 100_000) % 100, v % 100_000)
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
    use super::*;

    /// hipDeviceProp_tR0600's fields up to gcnArchName, in header order, as (name, size,
    /// alignment).
    fn r0600_fields() -> Vec<(&'static str, usize, usize)> {
        let int = |n: &'static str| (n, 4usize, 4usize);
        let ints = |n: &'static str, k: usize| (n, 4 * k, 4usize);
        let size_t = |n: &'static str| (n, 8usize, 8usize);
        let mut fields = vec![
            ("name", 256, 1),
            ("uuid", 16, 1),
            ("luid", 8, 1),
            int("luidDeviceNodeMask"),
            size_t("totalGlobalMem"),
            size_t("sharedMemPerBlock"),
            int("regsPerBlock"),
            int("warpSize"),
            size_t("memPitch"),
            int("maxThreadsPerBlock"),
            ints("maxThreadsDim", 3),
            ints("maxGridSize", 3),
            int("clockRate"),
            size_t("totalConstMem"),
            int("major"),
            int("minor"),
            size_t("textureAlignment"),
            size_t("texturePitchAlignment"),
            int("deviceOverlap"),
            int("multiProcessorCount"),
        ];
        for n in [
            "kernelExecTimeoutEnabled",
            "integrated",
            "canMapHostMemory",
            "computeMode",
            "maxTexture1D",
            "maxTexture1DMipmap",
            "maxTexture1DLinear",
        ] {
            fields.push(int(n));
        }
        for (n, k) in [
            ("maxTexture2D", 2),
            ("maxTexture2DMipmap", 2),
            ("maxTexture2DLinear", 3),
            ("maxTexture2DGather", 2),
            ("maxTexture3D", 3),
            ("maxTexture3DAlt", 3),
            ("maxTextureCubemap", 1),
            ("maxTexture1DLayered", 2),
            ("maxTexture2DLayered", 3),
            ("maxTextureCubemapLayered", 2),
            ("maxSurface1D", 1),
            ("maxSurface2D", 2),
            ("maxSurface3D", 3),
            ("maxSurface1DLayered", 2),
            ("maxSurface2DLayered", 3),
            ("maxSurfaceCubemap", 1),
            ("maxSurfaceCubemapLayered", 2),
        ] {
            fields.push(ints(n, k));
        }
        fields.push(size_t("surfaceAlignment"));
        r0600_fields_tail(&mut fields);
        fields
    }

    /// r0600_fields from concurrentKernels on.
    fn r0600_fields_tail(fields: &mut Vec<(&'static str, usize, usize)>) {
        let int = |n: &'static str| (n, 4usize, 4usize);
        let ints = |n: &'static str, k: usize| (n, 4 * k, 4usize);
        let size_t = |n: &'static str| (n, 8usize, 8usize);
        for n in [
            "concurrentKernels",
            "ECCEnabled",
            "pciBusID",
            "pciDeviceID",
            "pciDomainID",
            "tccDriver",
            "asyncEngineCount",
            "unifiedAddressing",
            "memoryClockRate",
            "memoryBusWidth",
            "l2CacheSize",
            "persistingL2CacheMaxSize",
            "maxThreadsPerMultiProcessor",
            "streamPrioritiesSupported",
            "globalL1CacheSupported",
            "localL1CacheSupported",
        ] {
            fields.push(int(n));
        }
        fields.push(size_t("sharedMemPerMultiprocessor"));
        for n in [
            "regsPerMultiprocessor",
            "managedMemory",
            "isMultiGpuBoard",
            "multiGpuBoardGroupID",
            "hostNativeAtomicSupported",
            "singleToDoublePrecisionPerfRatio",
            "pageableMemoryAccess",
            "concurrentManagedAccess",
            "computePreemptionSupported",
            "canUseHostPointerForRegisteredMem",
            "cooperativeLaunch",
            "cooperativeMultiDeviceLaunch",
        ] {
            fields.push(int(n));
        }
        fields.push(size_t("sharedMemPerBlockOptin"));
        for n in [
            "pageableMemoryAccessUsesHostPageTables",
            "directManagedMemAccessFromHost",
            "maxBlocksPerMultiProcessor",
            "accessPolicyMaxWindowSize",
        ] {
            fields.push(int(n));
        }
        fields.push(size_t("reservedSharedMemPerBlock"));
        for n in [
            "hostRegisterSupported",
            "sparseHipArraySupported",
            "hostRegisterReadOnlySupported",
            "timelineSemaphoreInteropSupported",
            "memoryPoolsSupported",
            "gpuDirectRDMASupported",
            "gpuDirectRDMAFlushWritesOptions",
            "gpuDirectRDMAWritesOrdering",
            "memoryPoolSupportedHandleTypes",
            "deferredMappingHipArraySupported",
            "ipcEventSupported",
            "clusterLaunch",
            "unifiedFunctionPointers",
        ] {
            fields.push(int(n));
        }
        fields.push(ints("reserved", 63));
        fields.push(ints("hipReserved", 32));
        fields.push(("gcnArchName", 256, 1));
    }

    /// The offsets in `r0600` follow from hipDeviceProp_tR0600's fields in header order.
    #[test]
    fn r0600_offsets_follow_from_the_header() {
        let fields = r0600_fields();
        let mut off = 0usize;
        let mut at = std::collections::HashMap::new();
        for (n, size, align) in fields {
            off = off.div_ceil(align) * align;
            at.insert(n, off);
            off += size;
        }
        assert_eq!(at["totalGlobalMem"], r0600::TOTAL_GLOBAL_MEM);
        assert_eq!(at["multiProcessorCount"], r0600::MULTI_PROCESSOR_COUNT);
        assert_eq!(at["memoryClockRate"], r0600::MEMORY_CLOCK_RATE);
        assert_eq!(at["memoryBusWidth"], r0600::MEMORY_BUS_WIDTH);
        assert_eq!(at["l2CacheSize"], r0600::L2_CACHE_SIZE);
        assert_eq!(at["gcnArchName"], r0600::GCN_ARCH_NAME);
    }

    /// A properties blob as an RX 6650 XT (gfx1032, 16 CUs, 2 MiB L2) would fill it.
    #[test]
    fn reads_cus_l2_and_arch_from_an_r0600_blob() {
        let mut blob = vec![0u8; 16 * 1024];
        blob[..21].copy_from_slice(b"AMD Radeon RX 6650 XT");
        blob[r0600::MULTI_PROCESSOR_COUNT..][..4].copy_from_slice(&16i32.to_ne_bytes());
        blob[r0600::L2_CACHE_SIZE..][..4].copy_from_slice(&(2i32 << 20).to_ne_bytes());
        blob[r0600::GCN_ARCH_NAME..][..7].copy_from_slice(b"gfx1032");
        assert_eq!(
            parse_r0600(&blob),
            (Some(16), Some(2 << 20), Some("gfx1032".into()))
        );
        // zeros read as unknown, never as 0 CUs
        assert_eq!(parse_r0600(&[0u8; 2048]), (None, None, None));
        assert_eq!(hip_version(60_443_484), "6.4.43484");
        assert_eq!(hip_version(70_151_234), "7.1.51234");
    }

    /// A library the test process has loaded is found without loading anything; one it has
    /// not is not loaded by asking.
    #[cfg(target_os = "linux")]
    #[test]
    fn finds_a_loaded_library_without_loading_one() {
        let (_, name) = already_loaded(&["libnot-a-library.so.9", "libc.so.6"]).expect("libc");
        assert_eq!(name, "libc.so.6");
        assert!(
            already_loaded(HIP_RUNTIMES).is_none(),
            "no HIP runtime here"
        );
        assert!(already_loaded(&["libnot-a-library.so.9"]).is_none());
    }

    #[test]
    fn finds_arch_string_in_a_property_blob() {
        let mut blob = vec![0u8; 64];
        blob[..21].copy_from_slice(b"AMD Radeon RX 6650 XT");
        blob[40..47].copy_from_slice(b"gfx1032");
        assert_eq!(super::find_gfx(&blob).as_deref(), Some("gfx1032"));
        assert_eq!(super::find_gfx(b"no arch here\0"), None);
    }
}
