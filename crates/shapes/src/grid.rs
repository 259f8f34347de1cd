//! The sweep: `shapes/grid.toml`, one table per profile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ModelConfig;
use crate::config::{BUILTIN_GRID, ShapesError, shapes_dir};
use crate::derive::derive;
use crate::problem::{OpKind, Problem, Step};

/// Element type names as written in grid files and CSV.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, serde::Serialize,
)]
pub enum DTypeName {
    #[serde(rename = "f32")]
    F32,
    #[serde(rename = "f16")]
    F16,
    #[serde(rename = "bf16")]
    BF16,
}

/// What a case's output is checked as against its float64 CPU reference: one op's call, or
/// a whole decoder step or layer (many ops chained, each adding its rounding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Op,
    Step,
}

impl Check {
    pub fn as_str(self) -> &'static str {
        match self {
            Check::Op => "op",
            Check::Step => "step",
        }
    }
}

impl std::str::FromStr for Check {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "op" => Ok(Check::Op),
            "step" => Ok(Check::Step),
            _ => Err(format!("`{s}`: expected op or step")),
        }
    }
}

/// As its text (`op`, `step`): the worker protocol carries it.
impl serde::Serialize for Check {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Check {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl DTypeName {
    /// The largest relative error ‖out − ref‖ / ‖ref‖ a case may show against the float64
    /// reference before it is a `mismatch`: the one table every case is judged by (the
    /// bench binaries, and `opbench ingest` for the rows scripts/peer.py measures).
    ///
    /// An op's bound is set from the type's unit roundoff (f32 2⁻²⁴, f16 2⁻¹¹, bf16 2⁻⁸)
    /// with room for accumulation over long reductions (k up to 25600 and softmax over 4k
    /// keys) and for reduced-precision accumulation in fast GPU kernels. A whole forward's
    /// logits are wider: every layer adds its rounding to the residual stream (seen on
    /// Qwen3-0.6B on the CPU: f16 ≈ 3e-3, bf16 ≈ 2.5e-2).
    pub fn tolerance(self, check: Check) -> f64 {
        match (check, self) {
            (Check::Op, DTypeName::F32) => 1e-4,
            (Check::Op, DTypeName::F16) => 5e-3,
            (Check::Op, DTypeName::BF16) => 4e-2,
            (Check::Step, DTypeName::F32) => 1e-3,
            (Check::Step, DTypeName::F16) => 1.5e-2,
            (Check::Step, DTypeName::BF16) => 1e-1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DTypeName::F32 => "f32",
            DTypeName::F16 => "f16",
            DTypeName::BF16 => "bf16",
        }
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DTypeName::F32 => 4,
            DTypeName::F16 | DTypeName::BF16 => 2,
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "f32" => Some(DTypeName::F32),
            "f16" => Some(DTypeName::F16),
            "bf16" => Some(DTypeName::BF16),
            _ => None,
        }
    }
}

impl std::str::FromStr for DTypeName {
    type Err = crate::UnknownValue;
    fn from_str(s: &str) -> Result<Self, crate::UnknownValue> {
        Self::parse(s).ok_or_else(|| crate::UnknownValue::new(s, &["f32", "f16", "bf16"]))
    }
}

impl std::fmt::Display for DTypeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The largest batch opbench accepts (grid, `opbench shapes`): far beyond any device's
/// memory at these models' sizes, small enough that no count overflows.
pub const MAX_BATCH: usize = 1 << 16;
/// The largest sequence or cache length opbench accepts, likewise.
pub const MAX_LEN: usize = 1 << 22;

/// One profile of the grid.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub batches: Vec<usize>,
    pub decode_ctx: Vec<usize>,
    pub prefill_len: Vec<usize>,
    pub prefill_batches: Vec<usize>,
    pub dtypes_gpu: Vec<DTypeName>,
    pub dtypes_cpu: Vec<DTypeName>,
}

/// The grid file: profiles by name.
#[derive(Debug, Clone)]
pub struct Grid {
    pub path: PathBuf,
    pub profiles: BTreeMap<String, Profile>,
}

impl Grid {
    pub fn parse(text: &str, path: &Path) -> Result<Self, ShapesError> {
        let profiles: BTreeMap<String, Profile> =
            toml::from_str(text).map_err(|e| ShapesError::Parse {
                path: path.to_path_buf(),
                message: e.message().to_string(),
            })?;
        for p in profiles.values() {
            let lists = [
                ("batches", &p.batches, MAX_BATCH),
                ("decode_ctx", &p.decode_ctx, MAX_LEN),
                ("prefill_len", &p.prefill_len, MAX_LEN),
                ("prefill_batches", &p.prefill_batches, MAX_BATCH),
            ];
            for (key, list, max) in lists {
                let invalid = |message: String| ShapesError::Invalid {
                    path: path.to_path_buf(),
                    key,
                    message,
                };
                // no prefill lengths: a decode-only profile
                if list.is_empty() && !key.starts_with("prefill") {
                    return Err(invalid("empty: a profile needs at least one value".into()));
                }
                if key != "decode_ctx" && list.contains(&0) {
                    return Err(invalid("values must be positive".into()));
                }
                if let Some(v) = list.iter().find(|v| **v > max) {
                    return Err(invalid(format!("{v} is above {max}")));
                }
            }
            if p.dtypes_gpu.is_empty() || p.dtypes_cpu.is_empty() {
                return Err(ShapesError::Invalid {
                    path: path.to_path_buf(),
                    key: "dtypes_gpu",
                    message: "dtypes_gpu and dtypes_cpu need at least one dtype each".into(),
                });
            }
        }
        Ok(Grid {
            path: path.to_path_buf(),
            profiles,
        })
    }

    /// `shapes/grid.toml` from [`shapes_dir`], else the embedded copy.
    pub fn load_default() -> Result<Self, ShapesError> {
        crate::config::check_shapes_env()?;
        if let Some(dir) = shapes_dir() {
            let path = dir.join("grid.toml");
            if path.is_file() {
                let text = std::fs::read_to_string(&path).map_err(|source| ShapesError::Io {
                    path: path.clone(),
                    source,
                })?;
                return Self::parse(&text, &path);
            }
        }
        Self::parse(BUILTIN_GRID, Path::new("shapes/grid.toml"))
    }

    pub fn profile(&self, name: &str) -> Result<&Profile, ShapesError> {
        self.profiles
            .get(name)
            .ok_or_else(|| ShapesError::UnknownProfile {
                name: name.to_string(),
                path: self.path.clone(),
                known: self.profiles.keys().cloned().collect::<Vec<_>>().join(", "),
            })
    }
}

impl Profile {
    /// Every step of the sweep: decode at each batch × cache length, prefill at each
    /// prefill batch × length.
    pub fn steps(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        for &b in &self.batches {
            for &l in &self.decode_ctx {
                steps.push(Step::decode(b, l));
            }
        }
        for &b in &self.prefill_batches {
            for &s in &self.prefill_len {
                steps.push(Step::prefill(b, s));
            }
        }
        steps
    }

    /// Every distinct problem of `op` over the sweep, in a stable order. Problems whose dims
    /// do not depend on the cache length (linear, rmsnorm, rope) appear once per batch.
    pub fn problems(&self, cfg: &ModelConfig, op: OpKind) -> Vec<Problem> {
        let mut out: Vec<Problem> = Vec::new();
        for step in self.steps() {
            for p in derive(cfg, step) {
                if p.op == op && !out.iter().any(|o| o.same_case(&p)) {
                    out.push(p);
                }
            }
        }
        out
    }
}
