//! The host's and the GPU's state around each sample (issue 31: record the state, don't only
//! survive it). The host: the process's CPU time and involuntary context switches
//! (`getrusage` on unix; the CPU time only, `GetProcessTimes`, on Windows), and the steal
//! time of the CPU the measuring thread runs on (`/proc/stat`'s line of that CPU; Linux). The GPU:
//! its SM clock, utilization, temperature and the reasons its clocks are held down, from
//! NVML (`libnvidia-ml`, loaded at run time, never a build dependency) or, for an AMD GPU on
//! Linux, the amdgpu driver's sysfs files. What a platform does not offer is `None`: an
//! empty column in samples.csv, never a guess.

use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::path::{Path, PathBuf};

/// Counters of the host that only grow: read before and after a sample, their difference
/// is the sample's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostCounters {
    /// The process's CPU time, user + system (ns).
    pub cpu_ns: Option<f64>,
    /// The process's involuntary context switches.
    pub nivcsw: Option<u64>,
    /// The steal time of the CPU the thread ran on (ticks of `/proc/stat`'s line of
    /// [`Self::on_cpu`]): the hypervisor's time taken from *this* vCPU; another vCPU's
    /// steal does not slow the measuring thread.
    pub steal: Option<u64>,
    /// The CPU the calling thread ran on when read (Linux's `sched_getcpu`).
    pub on_cpu: Option<u32>,
}

impl HostCounters {
    /// Now.
    pub fn read() -> Self {
        let (cpu_ns, nivcsw) = rusage();
        let on_cpu = this_cpu();
        HostCounters {
            cpu_ns,
            nivcsw,
            steal: on_cpu.and_then(|c| proc_stat_steal(Path::new("/proc/stat"), c)),
            on_cpu,
        }
    }

    /// What grew from `before` to `self`.
    pub fn since(&self, before: &HostCounters) -> HostCounters {
        HostCounters {
            cpu_ns: self
                .cpu_ns
                .zip(before.cpu_ns)
                .map(|(a, b)| (a - b).max(0.0)),
            nivcsw: self
                .nivcsw
                .zip(before.nivcsw)
                .map(|(a, b)| a.saturating_sub(b)),
            // the same CPU's line at both ends; a thread that moved has no steal to tell
            steal: self
                .steal
                .zip(before.steal)
                .filter(|_| self.on_cpu == before.on_cpu)
                .map(|(a, b)| a.saturating_sub(b)),
            on_cpu: self.on_cpu,
        }
    }
}

/// The CPU the calling thread runs on now.
#[cfg(target_os = "linux")]
fn this_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes no arguments; it returns -1 on failure.
    u32::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// Not Linux: no per-CPU steal to read.
#[cfg(not(target_os = "linux"))]
fn this_cpu() -> Option<u32> {
    None
}

#[cfg(unix)]
fn rusage() -> (Option<f64>, Option<u64>) {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return (None, None);
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e9 + t.tv_usec as f64 * 1e3;
    (
        Some(tv(u.ru_utime) + tv(u.ru_stime)),
        u64::try_from(u.ru_nivcsw).ok(),
    )
}

/// Windows: the CPU time from `GetProcessTimes` (user + kernel, in 100-ns units); Windows
/// counts no involuntary switches per process. (Not compiled or run here: no Windows build
/// has been made.)
#[cfg(windows)]
fn rusage() -> (Option<f64>, Option<u64>) {
    use windows_sys::Win32::Foundation::FILETIME;
    use windows_sys::Win32::System::Threading::{GetCurrentProcess, GetProcessTimes};
    let zero = || FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero(), zero(), zero(), zero());
    // SAFETY: GetCurrentProcess returns a pseudo-handle that needs no closing;
    // GetProcessTimes fills the four structs it is given.
    let ok = unsafe {
        GetProcessTimes(
            GetCurrentProcess(),
            &mut created,
            &mut exited,
            &mut kernel,
            &mut user,
        )
    };
    if ok == 0 {
        return (None, None);
    }
    let ns = |t: FILETIME| {
        ((u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime)) as f64 * 100.0
    };
    (Some(ns(kernel) + ns(user)), None)
}

/// Neither unix nor Windows: not read.
#[cfg(not(any(unix, windows)))]
fn rusage() -> (Option<f64>, Option<u64>) {
    (None, None)
}

/// The steal ticks of CPU `cpu` in `/proc/stat` (its `cpuN` line), where the file exists.
pub fn proc_stat_steal(path: &Path, cpu: u32) -> Option<u64> {
    parse_steal(&std::fs::read_to_string(path).ok()?, cpu)
}

/// `cpuN user nice system idle iowait irq softirq steal …`: the eighth number of CPU `cpu`'s
/// line.
pub fn parse_steal(text: &str, cpu: u32) -> Option<u64> {
    let name = format!("cpu{cpu}");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    line.split_whitespace().nth(8)?.parse().ok()
}

/// The GPU's state right after a sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuState {
    pub sm_mhz: Option<u32>,
    /// Percent of the last sampling period a kernel ran.
    pub util_pct: Option<u32>,
    pub temp_c: Option<u32>,
    /// The reasons the clocks are held below their maximum that are throttling (power
    /// cap, thermal, hardware slowdown), as NVML's bitmask without the benign ones (GPU
    /// idle, the application clock setting, the display clock); 0 for none.
    pub throttle: Option<u64>,
}

impl GpuState {
    /// Whether the GPU was held down by power or heat.
    pub fn throttled(&self) -> bool {
        self.throttle.is_some_and(|t| t != 0)
    }
}

/// NVML's clock-event reasons that are not throttling: GPU idle (0x1), the application
/// clock setting (0x2), the display clock setting (0x100).
pub const BENIGN_REASONS: u64 = 0x1 | 0x2 | 0x100;

type NvmlInit = unsafe extern "C" fn() -> c_int;
type NvmlHandle = unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_int;
type NvmlClock = unsafe extern "C" fn(*mut c_void, c_int, *mut c_uint) -> c_int;
type NvmlUtil = unsafe extern "C" fn(*mut c_void, *mut [c_uint; 2]) -> c_int;
type NvmlTemp = unsafe extern "C" fn(*mut c_void, c_int, *mut c_uint) -> c_int;
type NvmlReasons = unsafe extern "C" fn(*mut c_void, *mut c_ulonglong) -> c_int;

/// Where the GPU's state is read from.
pub enum GpuProbe {
    Nvml {
        // kept loaded while the functions below are used
        _lib: libloading::Library,
        dev: *mut c_void,
        clock: NvmlClock,
        util: NvmlUtil,
        temp: NvmlTemp,
        reasons: Option<NvmlReasons>,
    },
    /// An amdgpu card's sysfs folder (`/sys/class/drm/cardN/device`).
    Amdgpu(PathBuf),
}

impl std::fmt::Debug for GpuProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuProbe::Nvml { .. } => f.write_str("GpuProbe::Nvml"),
            GpuProbe::Amdgpu(p) => write!(f, "GpuProbe::Amdgpu({})", p.display()),
        }
    }
}

impl GpuProbe {
    /// NVML's device `index` (NVML counts in PCI order, as CUDA does with one GPU or with
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID`). `Err` says why not (no NVML: not an NVIDIA
    /// machine, or a driver without it).
    pub fn nvml(index: usize) -> Result<GpuProbe, String> {
        let name = if cfg!(windows) {
            "nvml.dll"
        } else {
            "libnvidia-ml.so.1"
        };
        // SAFETY: NVML's documented C entry points, called with their signatures; the
        // library stays loaded in the probe.
        unsafe {
            let lib = libloading::Library::new(name).map_err(|e| format!("{name}: {e}"))?;
            let sym = |n: &[u8]| -> Result<*mut c_void, String> {
                lib.get::<*mut c_void>(n)
                    .map(|s| *s)
                    .map_err(|e| format!("{name}: {e}"))
            };
            let init: NvmlInit = std::mem::transmute(sym(b"nvmlInit_v2\0")?);
            let handle: NvmlHandle = std::mem::transmute(sym(b"nvmlDeviceGetHandleByIndex_v2\0")?);
            let clock: NvmlClock = std::mem::transmute(sym(b"nvmlDeviceGetClockInfo\0")?);
            let util: NvmlUtil = std::mem::transmute(sym(b"nvmlDeviceGetUtilizationRates\0")?);
            let temp: NvmlTemp = std::mem::transmute(sym(b"nvmlDeviceGetTemperature\0")?);
            let reasons = sym(b"nvmlDeviceGetCurrentClocksEventReasons\0")
                .or_else(|_| sym(b"nvmlDeviceGetCurrentClocksThrottleReasons\0"))
                .ok()
                .map(|p| std::mem::transmute::<*mut c_void, NvmlReasons>(p));
            if init() != 0 {
                return Err(format!("{name}: nvmlInit failed"));
            }
            let mut dev = std::ptr::null_mut();
            let i = c_uint::try_from(index).map_err(|e| e.to_string())?;
            if handle(i, &mut dev) != 0 {
                return Err(format!("{name}: no device {index}"));
            }
            Ok(GpuProbe::Nvml {
                _lib: lib,
                dev,
                clock,
                util,
                temp,
                reasons,
            })
        }
    }

    /// The `index`-th amdgpu card under `drm` (`/sys/class/drm`), by card number.
    pub fn amdgpu(drm: &Path, index: usize) -> Result<GpuProbe, String> {
        let mut cards: Vec<(u32, PathBuf)> = std::fs::read_dir(drm)
            .map_err(|e| format!("{}: {e}", drm.display()))?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let n: u32 = name.strip_prefix("card")?.parse().ok()?;
                let dev = e.path().join("device");
                let vendor = std::fs::read_to_string(dev.join("vendor")).ok()?;
                (vendor.trim() == "0x1002").then_some((n, dev))
            })
            .collect();
        cards.sort();
        cards
            .into_iter()
            .nth(index)
            .map(|(_, d)| GpuProbe::Amdgpu(d))
            .ok_or_else(|| format!("{}: no amdgpu card {index}", drm.display()))
    }

    /// The state now; a field the source does not give is `None`.
    pub fn read(&self) -> GpuState {
        match self {
            GpuProbe::Nvml {
                dev,
                clock,
                util,
                temp,
                reasons,
                ..
            } => {
                let mut mhz: c_uint = 0;
                let mut u: [c_uint; 2] = [0; 2];
                let mut t: c_uint = 0;
                let mut r: c_ulonglong = 0;
                // SAFETY: the handle and functions are NVML's, alive with the probe.
                unsafe {
                    GpuState {
                        sm_mhz: (clock(*dev, 1, &mut mhz) == 0).then_some(mhz),
                        util_pct: (util(*dev, &mut u) == 0).then_some(u[0]),
                        temp_c: (temp(*dev, 0, &mut t) == 0).then_some(t),
                        throttle: reasons
                            .filter(|f| f(*dev, &mut r) == 0)
                            .map(|_| r & !BENIGN_REASONS),
                    }
                }
            }
            GpuProbe::Amdgpu(dev) => amdgpu_state(dev),
        }
    }
}

/// An amdgpu card's state from its sysfs folder: the current SCLK level (the line of
/// `pp_dpm_sclk` marked `*`), `gpu_busy_percent`, and the first hwmon's `temp1_input`
/// (millidegrees). The driver does not say why clocks are low: `throttle` is `None`.
pub fn amdgpu_state(dev: &Path) -> GpuState {
    let read = |f: &str| std::fs::read_to_string(dev.join(f)).ok();
    let sm_mhz = read("pp_dpm_sclk").and_then(|t| {
        let line = t.lines().find(|l| l.trim_end().ends_with('*'))?;
        let mhz = line.split_whitespace().nth(1)?;
        mhz.trim_end_matches("Mhz")
            .trim_end_matches("MHz")
            .parse()
            .ok()
    });
    let temp_c = std::fs::read_dir(dev.join("hwmon"))
        .ok()
        .and_then(|d| d.flatten().next())
        .and_then(|h| std::fs::read_to_string(h.path().join("temp1_input")).ok())
        .and_then(|t| t.trim().parse::<u32>().ok())
        .map(|m| m / 1000);
    GpuState {
        sm_mhz,
        util_pct: read("gpu_busy_percent").and_then(|t| t.trim().parse().ok()),
        temp_c,
        throttle: None,
    }
}

/// The probe for `device`'s state: NVML for CUDA, the amdgpu sysfs for HIP (Linux); none
/// on the CPU or where neither is there.
pub fn probe_for(device: crate::device::Device) -> Option<GpuProbe> {
    match device.backend {
        crate::device::Backend::Cuda => GpuProbe::nvml(device.index).ok(),
        crate::device::Backend::Hip => {
            GpuProbe::amdgpu(Path::new("/sys/class/drm"), device.index).ok()
        }
        _ => None,
    }
}

/// The GPU's state as env.json `host_state` entries named `gpu_<field>_<when>` (`when`:
/// `start` or `end` of a process), those the probe gives.
pub fn state_entries(when: &str, probe: Option<&GpuProbe>) -> Vec<(String, String)> {
    let Some(s) = probe.map(GpuProbe::read) else {
        return Vec::new();
    };
    [
        ("sm_mhz", s.sm_mhz.map(u64::from)),
        ("util_pct", s.util_pct.map(u64::from)),
        ("temp_c", s.temp_c.map(u64::from)),
        ("throttle", s.throttle),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((format!("gpu_{k}_{when}"), v?.to_string())))
    .collect()
}

// SAFETY: the NVML handle is used from the one thread that times (the probe is not shared
// between threads; Send only lets it live in the per-device setup).
unsafe impl Send for GpuProbe {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_number_of_the_threads_cpu_line() {
        let text = "cpu  4705 356 584 3699 23 23 0 71 0 0\ncpu0 1393280 32966 572056 13343292 0 0 0 0 0 0\ncpu1 1 2 3 4 5 6 7 71 0 0\ncpu10 1 2 3 4 5 6 7 9 0 0\nintr 1\n";
        // the machine's 71 ticks are all cpu1's: cpu0 had none; cpu1 is not cpu10
        assert_eq!(parse_steal(text, 0), Some(0));
        assert_eq!(parse_steal(text, 1), Some(71));
        assert_eq!(parse_steal(text, 10), Some(9));
        // a CPU the file does not list, a kernel without the column
        assert_eq!(parse_steal(text, 2), None);
        assert_eq!(parse_steal("cpu0  4705 356 584 3699 23 23 0\n", 0), None);
        assert_eq!(parse_steal("intr 1\n", 0), None);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("stat");
        std::fs::write(&f, text).unwrap();
        assert_eq!(proc_stat_steal(&f, 1), Some(71));
        assert_eq!(proc_stat_steal(&dir.path().join("missing"), 1), None);
    }

    #[test]
    fn counters_grow_and_their_difference_is_the_samples() {
        let before = HostCounters {
            cpu_ns: Some(1e6),
            nivcsw: Some(3),
            steal: Some(10),
            on_cpu: Some(2),
        };
        let after = HostCounters {
            cpu_ns: Some(3e6),
            nivcsw: Some(5),
            steal: None,
            on_cpu: Some(2),
        };
        let d = after.since(&before);
        assert_eq!((d.cpu_ns, d.nivcsw, d.steal), (Some(2e6), Some(2), None));
        // on the same CPU: its steal grew; moved to another CPU: two lines, no difference
        let stolen = HostCounters {
            steal: Some(13),
            ..after
        };
        assert_eq!(stolen.since(&before).steal, Some(3));
        let moved = HostCounters {
            on_cpu: Some(5),
            ..stolen
        };
        assert_eq!(moved.since(&before).steal, None);
        #[cfg(unix)]
        {
            let a = HostCounters::read();
            let mut x = 0u64;
            for i in 0..2_000_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
            let d = HostCounters::read().since(&a);
            assert!(d.cpu_ns.is_some_and(|c| c > 0.0), "{d:?}");
            assert!(d.nivcsw.is_some());
        }
    }

    #[test]
    fn without_nvml_the_probe_says_why_and_an_amdgpu_card_reads_from_sysfs() {
        // this test machine has no NVIDIA driver; where it has one, the probe opens
        if let Err(why) = GpuProbe::nvml(0) {
            assert!(why.contains("nvidia-ml") || why.contains("nvml"), "{why}");
        }
        let drm = tempfile::tempdir().unwrap();
        assert!(GpuProbe::amdgpu(drm.path(), 0).is_err());
        let dev = drm.path().join("card1/device");
        std::fs::create_dir_all(dev.join("hwmon/hwmon3")).unwrap();
        std::fs::write(dev.join("vendor"), "0x1002\n").unwrap();
        std::fs::write(
            dev.join("pp_dpm_sclk"),
            "0: 500Mhz \n1: 1800Mhz \n2: 2635Mhz *\n",
        )
        .unwrap();
        std::fs::write(dev.join("gpu_busy_percent"), "37\n").unwrap();
        std::fs::write(dev.join("hwmon/hwmon3/temp1_input"), "61000\n").unwrap();
        let probe = GpuProbe::amdgpu(drm.path(), 0).unwrap();
        let s = probe.read();
        assert_eq!(
            s,
            GpuState {
                sm_mhz: Some(2635),
                util_pct: Some(37),
                temp_c: Some(61),
                throttle: None,
            }
        );
        assert!(!s.throttled());
        assert!(
            GpuState {
                throttle: Some(0x4),
                ..s
            }
            .throttled()
        );
    }
}
