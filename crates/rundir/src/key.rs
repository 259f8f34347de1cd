//! The identity of a case ([`CaseKey`]) and of a series ([`SeriesKey`]), and the closed
//! sets their fields come from.

use std::fmt;
use std::str::FromStr;

use shapes::{DTypeName as DType, OpKind, Phase, UnknownValue};

use crate::RunError;
use crate::csvio::Line;

/// A closed set of names with one text form each: `as_str`, `Display`, `FromStr` (whose
/// error lists the accepted names) and serde as that text.
macro_rules! names {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $v),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $name {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, UnknownValue> {
                match s {
                    $($s => Ok($name::$v),)+
                    _ => Err(UnknownValue::new(s, &[$($s),+])),
                }
            }
        }
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

names! {
    /// How a case ended (`status` column).
    Status {
        Ok = "ok",
        /// The backend, build or dtype does not provide this variant or shape.
        Unsupported = "unsupported",
        /// The device ran out of memory.
        Oom = "oom",
        /// It ran but its answer is off the float64 reference by more than the tolerance.
        Mismatch = "mismatch",
        /// Anything else went wrong.
        Error = "error",
        /// Not measured on purpose: its first two calls each took longer than the cap (schema 3).
        Skipped = "skipped",
    }
}

names! {
    /// How calls are timed (docs/method.md, "Timing modes").
    Mode {
        /// n calls back to back, one synchronize after them: what an eager decode loop
        /// sees, max(host dispatch + launch, device time) per call.
        Pipelined = "pipelined",
        /// Synchronize after every call: launch + execution + round trip.
        Synced = "synced",
        /// GPU events around n back-to-back calls queued behind a lead, so only kernel time
        /// counts (warm: same buffers). GPU only.
        Device = "device",
        /// GPU events around each call after an L2 flush. GPU only.
        DeviceCold = "device_cold",
        /// n calls captured into one CUDA graph (hipGraph on ROCm), replays timed by GPU
        /// events behind a lead, per call: kernel time plus the graph's own gaps, no host
        /// dispatch. GPU only (schema 4).
        Graph = "graph",
        /// As `graph`, but each captured call reads its own copy of the case's model state
        /// (weights, KV cache), enough copies to pass twice the last-level cache: the state
        /// comes from memory, as in a step that streams every layer's weights. Cases with no
        /// such state get no row. GPU only (schema 5).
        GraphCold = "graph_cold",
        /// As `pipelined`, but each call reads its own copy of the case's model state, as in
        /// `graph_cold`: what the call costs when its weights come from memory, as in a step.
        /// Cases with no such state get no row (schema 5).
        PipelinedCold = "pipelined_cold",
    }
}

impl Mode {
    /// Timed by GPU events (device time), not by the host's clock.
    pub fn is_device(self) -> bool {
        matches!(
            self,
            Mode::Device | Mode::DeviceCold | Mode::Graph | Mode::GraphCold
        )
    }

    /// Replays of a captured graph (`graph`, `graph_cold`).
    pub fn is_graph(self) -> bool {
        matches!(self, Mode::Graph | Mode::GraphCold)
    }
}

names! {
    /// What a line of `kernels.csv` counts (schema 4).
    Activity {
        /// A kernel on the device.
        Kernel = "kernel",
        /// A device copy; `DtoH` in its name is a copy back to the host.
        Memcpy = "memcpy",
        Memset = "memset",
        /// An ATen op the call dispatched at the top level (host).
        CpuOp = "cpu_op",
        /// A GPU runtime API call (launches, copies, syncs).
        Runtime = "runtime",
        /// A GPU driver API call.
        Driver = "driver",
        /// What a GPU library's log named (GEMM algorithm, solution, MIOpen solver).
        Library = "library",
        /// A kind the tracer reported that opbench does not name; `name` keeps it raw.
        Other = "other",
    }
}

names! {
    /// How a case's trace ended (`traces.csv`, schema 4).
    TraceStatus {
        Ok = "ok",
        /// No trace could be taken (no Kineto, no device events after warm-up); `note`
        /// says why. Never read as "no kernels".
        Unavailable = "unavailable",
        /// The case failed while traced.
        Error = "error",
    }
}

names! {
    /// Where a trace row came from.
    TraceSource {
        /// PyTorch's Kineto profiler (CUPTI, roctracer or rocprofiler-sdk underneath).
        Kineto = "kineto",
        /// The GPU libraries' own logs, from a child process (cuBLASLt, rocBLAS,
        /// hipBLASLt, MIOpen).
        Logs = "logs",
    }
}

names! {
    /// What a device runs on. ROCm builds of PyTorch run HIP through the `cuda` device API;
    /// opbench labels such a GPU `hip`.
    Backend {
        Cpu = "cpu",
        Cuda = "cuda",
        Hip = "hip",
    }
}

/// A device label: `cpu`, `cuda:0`, `hip:1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    pub backend: Backend,
    pub index: usize,
}

impl DeviceId {
    pub const CPU: DeviceId = DeviceId {
        backend: Backend::Cpu,
        index: 0,
    };
    pub fn is_gpu(self) -> bool {
        self.backend != Backend::Cpu
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.backend {
            Backend::Cpu => f.write_str("cpu"),
            b => write!(f, "{b}:{}", self.index),
        }
    }
}

impl FromStr for DeviceId {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        if s == "cpu" {
            return Ok(DeviceId::CPU);
        }
        let parsed = s.split_once(':').and_then(|(b, i)| {
            let backend = match b {
                "cuda" => Backend::Cuda,
                "hip" => Backend::Hip,
                _ => return None,
            };
            Some(DeviceId {
                backend,
                index: i.parse().ok()?,
            })
        });
        parsed.ok_or_else(|| UnknownValue::new(s, &["cpu", "cuda:N", "hip:N"]))
    }
}

impl serde::Serialize for DeviceId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for DeviceId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A series: every batch of one case (docs/schema.md). Fits are per series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    pub op: OpKind,
    /// The op crate's variant (`aten`, `fused_qkv`, `flash`, …): an open set.
    pub variant: String,
    /// The model site (`q_proj`, `attn`, …), `add1` for the floor, `step` for decode.
    pub site: String,
    /// The model name, `none` for cases that belong to no model (floor, ceilings).
    pub model: String,
    pub phase: Phase,
    pub q_len: usize,
    /// L + q for ops that read the cache (sdpa, kvcache, decode); empty otherwise.
    pub kv_len: Option<usize>,
    pub dtype: DType,
    pub device: DeviceId,
    pub mode: Mode,
}

/// The case key: a series at one batch.
///
/// It dereferences to its [`SeriesKey`], so `key.op`, `key.mode` read through.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CaseKey {
    pub series: SeriesKey,
    pub batch: usize,
}

impl std::ops::Deref for CaseKey {
    type Target = SeriesKey;
    fn deref(&self) -> &SeriesKey {
        &self.series
    }
}

impl SeriesKey {
    /// Its columns, in file order: the case key's without `batch`.
    pub fn columns() -> Vec<&'static str> {
        CaseKey::COLUMNS
            .into_iter()
            .filter(|c| *c != "batch")
            .collect()
    }

    pub fn at(&self, batch: usize) -> CaseKey {
        CaseKey {
            series: self.clone(),
            batch,
        }
    }

    /// The fields as text, in [`Self::columns`] order; `batch`, when given, goes after
    /// `phase` (the case key's order).
    pub(crate) fn fields(&self, batch: Option<usize>) -> Vec<String> {
        let mut out = vec![
            self.op.to_string(),
            self.variant.clone(),
            self.site.clone(),
            self.model.clone(),
            self.phase.to_string(),
        ];
        out.extend(batch.map(|b| b.to_string()));
        out.extend([
            self.q_len.to_string(),
            crate::csvio::opt(&self.kv_len),
            self.dtype.to_string(),
            self.device.to_string(),
            self.mode.to_string(),
        ]);
        out
    }

    pub(crate) fn read(l: &Line<'_>) -> Result<Self, RunError> {
        let text = |c: &'static str| -> Result<String, RunError> {
            let s = l.text(c);
            if s.is_empty() {
                return Err(l.error(c, "empty, a value is required"));
            }
            Ok(s.to_string())
        };
        Ok(SeriesKey {
            op: l.req("op")?,
            variant: text("variant")?,
            site: text("site")?,
            model: text("model")?,
            phase: l.req("phase")?,
            q_len: l.req("q_len")?,
            kv_len: l.opt("kv_len")?,
            dtype: l.req("dtype")?,
            device: l.req("device")?,
            mode: l.req("mode")?,
        })
    }
}

impl CaseKey {
    /// Its columns, in file order.
    pub const COLUMNS: [&'static str; 11] = [
        "op", "variant", "site", "model", "phase", "batch", "q_len", "kv_len", "dtype", "device",
        "mode",
    ];

    /// The fields as text, in [`Self::COLUMNS`] order (empty `kv_len` when it has none).
    pub fn fields(&self) -> Vec<String> {
        self.series.fields(Some(self.batch))
    }

    /// The same case timed in `mode`.
    pub fn in_mode(&self, mode: Mode) -> CaseKey {
        CaseKey {
            series: SeriesKey {
                mode,
                ..self.series.clone()
            },
            batch: self.batch,
        }
    }

    /// The key from its fields in [`Self::COLUMNS`] order (as [`Self::fields`] writes
    /// them): how a worker names a case to `opbench ab`. The error names the field.
    pub fn from_fields(f: &[String]) -> Result<Self, String> {
        if f.len() != Self::COLUMNS.len() {
            return Err(format!(
                "a case key has {} fields, got {}",
                Self::COLUMNS.len(),
                f.len()
            ));
        }
        fn parse<T: FromStr>(f: &[String], i: usize) -> Result<T, String> {
            f[i].parse()
                .map_err(|_| format!("{}: `{}` is not a valid value", CaseKey::COLUMNS[i], f[i]))
        }
        let text = |i: usize| -> Result<String, String> {
            Some(f[i].clone())
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("{}: empty", Self::COLUMNS[i]))
        };
        Ok(CaseKey {
            series: SeriesKey {
                op: parse(f, 0)?,
                variant: text(1)?,
                site: text(2)?,
                model: text(3)?,
                phase: parse(f, 4)?,
                q_len: parse(f, 6)?,
                kv_len: if f[7].is_empty() {
                    None
                } else {
                    Some(parse(f, 7)?)
                },
                dtype: parse(f, 8)?,
                device: parse(f, 9)?,
                mode: parse(f, 10)?,
            },
            batch: parse(f, 5)?,
        })
    }

    pub(crate) fn read(l: &Line<'_>) -> Result<Self, RunError> {
        Ok(CaseKey {
            series: SeriesKey::read(l)?,
            batch: l.req("batch")?,
        })
    }
}

impl fmt::Display for CaseKey {
    /// `op/variant/site/model/phase/b<batch>/q<q_len>[/kv<kv_len>]/dtype/device/mode`, the
    /// criterion id of the case too.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.series;
        write!(
            f,
            "{}/{}/{}/{}/{}/b{}/q{}",
            s.op, s.variant, s.site, s.model, s.phase, self.batch, s.q_len
        )?;
        if let Some(kv) = s.kv_len {
            write!(f, "/kv{kv}")?;
        }
        write!(f, "/{}/{}/{}", s.dtype, s.device, s.mode)
    }
}

/// Who timed a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// The Rust bench binaries (op crates, the decode crate).
    Rust,
    /// scripts/peer.py's HF transformers rows (variant `transformers`: the step, generate()'s
    /// sites, the layer rows).
    PeerHf,
    /// scripts/peer.py's Python op rows (variants `py-*`, and `python`: its framework rows
    /// made without transformers installed).
    PeerOps,
}

impl Timer {
    /// Whether its cases' `control_ns` is the harness's torch control, the host-speed
    /// divisor of merge, compare, history and predict. The peer's rows record Python's
    /// torch control beside each sample (since 2026-12-02) for their state flag only:
    /// Python's floor is not the harness's, and runs before lack it.
    pub fn divides_by_control(self) -> bool {
        self == Timer::Rust
    }

    /// Who timed a case of `variant`.
    pub fn of(variant: &str) -> Timer {
        if variant == "transformers" {
            Timer::PeerHf
        } else if variant.starts_with("py-") || variant == "python" {
            Timer::PeerOps
        } else {
            Timer::Rust
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Timer::Rust => "bench binaries",
            Timer::PeerHf => "peer: HF rows",
            Timer::PeerOps => "peer: Python ops",
        }
    }
}
