//! Model files: `shapes/<name>.toml`, parsed strictly, and a Hugging Face `config.json`
//! read into a [`ModelConfig`] (`--model PATH/config.json`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::Value;

use crate::family::Family;

/// What can go wrong reading shapes files. Every message names the file and, where there is
/// one, the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ShapesError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: key `{key}`: {message}")]
    Invalid {
        path: PathBuf,
        key: &'static str,
        message: String,
    },
    #[error("{what} `{name}` given twice")]
    Duplicate { what: &'static str, name: String },
    #[error("unknown model `{name}` (known: {known})")]
    UnknownModel { name: String, known: String },
    #[error("unknown grid profile `{name}` in {path} (known: {known})")]
    UnknownProfile {
        name: String,
        path: PathBuf,
        known: String,
    },
}

/// The largest size a model file may give (hidden size, heads, vocabulary, …).
pub const MAX_DIM: usize = 1 << 24;

/// One model, as its `config.json` says. Unknown keys are an error, so a typo in a
/// shapes file never silently falls back to a default.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Short name used on the command line and in CSV (`qwen3-0.6b`).
    pub name: String,
    /// Where the values were copied from.
    pub source: String,
    /// The layout's family (`model_type`); a shapes file without it is Qwen3.
    #[serde(default)]
    pub family: Family,
    /// A bias on the q, k and v projections (Qwen2).
    #[serde(default)]
    pub attention_bias: bool,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    /// MoE only: the expert MLP width.
    #[serde(default)]
    pub moe_intermediate_size: Option<usize>,
    #[serde(default)]
    pub num_experts: Option<usize>,
    #[serde(default)]
    pub num_experts_per_tok: Option<usize>,
}

/// The model files shipped in `shapes/`, embedded so a copied binary still knows them.
const BUILTIN: &[(&str, &str)] = &[
    (
        "qwen3-0.6b",
        include_str!("../../../shapes/qwen3-0.6b.toml"),
    ),
    (
        "qwen3-1.7b",
        include_str!("../../../shapes/qwen3-1.7b.toml"),
    ),
    ("qwen3-4b", include_str!("../../../shapes/qwen3-4b.toml")),
    ("qwen3-8b", include_str!("../../../shapes/qwen3-8b.toml")),
    ("qwen3-14b", include_str!("../../../shapes/qwen3-14b.toml")),
    ("qwen3-32b", include_str!("../../../shapes/qwen3-32b.toml")),
    (
        "qwen3-30b-a3b",
        include_str!("../../../shapes/qwen3-30b-a3b.toml"),
    ),
    (
        "qwen3-235b-a22b",
        include_str!("../../../shapes/qwen3-235b-a22b.toml"),
    ),
    (
        "llama-3.2-1b",
        include_str!("../../../shapes/llama-3.2-1b.toml"),
    ),
    (
        "llama-3.2-3b",
        include_str!("../../../shapes/llama-3.2-3b.toml"),
    ),
    (
        "llama-3.1-8b",
        include_str!("../../../shapes/llama-3.1-8b.toml"),
    ),
    (
        "qwen2.5-0.5b",
        include_str!("../../../shapes/qwen2.5-0.5b.toml"),
    ),
    (
        "qwen2.5-7b",
        include_str!("../../../shapes/qwen2.5-7b.toml"),
    ),
    (
        "gemma-3-1b",
        include_str!("../../../shapes/gemma-3-1b.toml"),
    ),
    (
        "phi-3-mini",
        include_str!("../../../shapes/phi-3-mini.toml"),
    ),
];
pub(crate) const BUILTIN_GRID: &str = include_str!("../../../shapes/grid.toml");

/// Names of the shipped models, in size order.
pub fn builtin_models() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// The `shapes/` folder to read: `OPBENCH_SHAPES` if set, else the first `shapes/` with a
/// `grid.toml` in the current directory or one of its parents. `None` means "use the copies
/// embedded in the binary". Use [`check_shapes_env`] to refuse an `OPBENCH_SHAPES` that is
/// not a shapes folder rather than fall back.
pub fn shapes_dir() -> Option<PathBuf> {
    if let Some(dir) = settings::var_os("OPBENCH_SHAPES") {
        return Some(PathBuf::from(dir));
    }
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors()
        .map(|d| d.join("shapes"))
        .find(|d| d.join("grid.toml").is_file())
}

/// `OPBENCH_SHAPES`, when set, must be a folder holding `grid.toml`: a missing folder, a
/// file or a folder without a grid is an error, never a silent fall-back to the built-in
/// shapes.
pub fn check_shapes_env() -> Result<(), ShapesError> {
    let Some(dir) = settings::var_os("OPBENCH_SHAPES") else {
        return Ok(());
    };
    let dir = PathBuf::from(dir);
    let why = if !dir.exists() {
        "OPBENCH_SHAPES: no such folder"
    } else if !dir.is_dir() {
        "OPBENCH_SHAPES: not a folder"
    } else if !dir.join("grid.toml").is_file() {
        "OPBENCH_SHAPES: the folder has no grid.toml"
    } else {
        return Ok(());
    };
    Err(ShapesError::Parse {
        path: dir,
        message: why.into(),
    })
}

impl ModelConfig {
    /// Columns of q, k and v in a fused QKV projection's output, in that order: H·D, Hkv·D,
    /// Hkv·D.
    pub fn qkv_widths(&self) -> [usize; 3] {
        let kv = self.num_key_value_heads * self.head_dim;
        [self.num_attention_heads * self.head_dim, kv, kv]
    }

    /// Parse one model file's text; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ShapesError> {
        let cfg: ModelConfig = toml::from_str(text).map_err(|e| ShapesError::Parse {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Read and parse one model file.
    pub fn load(path: &Path) -> Result<Self, ShapesError> {
        let text = std::fs::read_to_string(path).map_err(|source| ShapesError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// A model by name: from [`shapes_dir`] when there is one, else the embedded copy. A
    /// file whose `name` differs from its file name is an error (its rows would carry the
    /// wrong model).
    ///
    /// A path to a Hugging Face `config.json` reads that file
    /// ([`ModelConfig::from_hf_json`]); the name it gives is known from then on in this
    /// process.
    pub fn by_name(name: &str) -> Result<Self, ShapesError> {
        if name.ends_with(".json") {
            return Self::from_hf_json(Path::new(name));
        }
        if let Some(cfg) = read_before(name) {
            return Ok(cfg);
        }
        if let Some(dir) = shapes_dir() {
            let path = dir.join(format!("{name}.toml"));
            if path.is_file() && name != "grid" {
                let cfg = Self::load(&path)?;
                if cfg.name != name {
                    return Err(ShapesError::Invalid {
                        path,
                        key: "name",
                        message: format!("`{}` differs from the file name `{name}`", cfg.name),
                    });
                }
                return Ok(cfg);
            }
        }
        Self::builtin(name)
    }

    /// A shipped model by name, from the copy embedded at build time.
    pub fn builtin(name: &str) -> Result<Self, ShapesError> {
        match BUILTIN.iter().find(|(n, _)| *n == name) {
            Some((n, text)) => Self::parse(text, Path::new(&format!("shapes/{n}.toml"))),
            None => Err(ShapesError::UnknownModel {
                name: name.to_string(),
                known: builtin_models().join(", "),
            }),
        }
    }

    /// Names given on the command line: `all` means every dense Qwen3 model.
    pub fn resolve_list(spec: &str) -> Result<Vec<Self>, ShapesError> {
        if spec == "all" {
            let all: Result<Vec<_>, _> = builtin_models().into_iter().map(Self::by_name).collect();
            return Ok(all?
                .into_iter()
                .filter(|m| m.family == Family::Qwen3 && !m.is_moe())
                .collect());
        }
        let names: Vec<&str> = spec.split(',').map(str::trim).collect();
        if let Some(dup) = names
            .iter()
            .enumerate()
            .find_map(|(i, n)| names[..i].contains(n).then_some(*n))
        {
            return Err(ShapesError::Duplicate {
                what: "model",
                name: dup.to_string(),
            });
        }
        names.into_iter().map(Self::by_name).collect()
    }

    /// Mixture-of-experts model (its MLP is a router and routed experts: [`crate::moe`]).
    pub fn is_moe(&self) -> bool {
        self.num_experts.is_some()
    }

    pub(crate) fn validate(&self, path: &Path) -> Result<(), ShapesError> {
        let invalid = |key, message: &str| ShapesError::Invalid {
            path: path.to_path_buf(),
            key,
            message: message.to_string(),
        };
        let positive = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        for (key, v) in positive {
            if v == 0 {
                return Err(invalid(key, "must be positive"));
            }
            // no real model comes near; keeps every product of two sizes within 64 bits
            if v > MAX_DIM {
                return Err(invalid(key, &format!("{v} is above {MAX_DIM}")));
            }
        }
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            return Err(invalid(
                "num_key_value_heads",
                "must divide num_attention_heads (GQA groups)",
            ));
        }
        if self.head_dim % 2 != 0 {
            return Err(invalid("head_dim", "must be even (RoPE rotates halves)"));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(invalid("rope_theta", "must be a positive number"));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return Err(invalid("rms_norm_eps", "must be a positive number"));
        }
        let moe = [
            self.moe_intermediate_size.is_some(),
            self.num_experts.is_some(),
            self.num_experts_per_tok.is_some(),
        ];
        if moe.iter().any(|&b| b) && !moe.iter().all(|&b| b) {
            return Err(invalid(
                "num_experts",
                "MoE needs moe_intermediate_size, num_experts and num_experts_per_tok together",
            ));
        }
        Ok(())
    }
}

// ---- a Hugging Face config.json
/// The configs read from `config.json` files in this process, so that a problem's model
/// name finds its config again ([`ModelConfig::by_name`]).
static READ: Mutex<Vec<ModelConfig>> = Mutex::new(Vec::new());

/// A config read earlier in this process by [`ModelConfig::from_hf_json`], by its name.
pub(crate) fn read_before(name: &str) -> Option<ModelConfig> {
    READ.lock().ok()?.iter().find(|c| c.name == name).cloned()
}

/// The name a `config.json` is known by: its folder's name in lower case
/// (`Llama-3.2-1B/config.json` → `llama-3.2-1b`), else the file's stem.
fn name_of(path: &Path) -> String {
    let dir = path
        .parent()
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().to_string())
        .filter(|n| !n.is_empty());
    let stem = path
        .file_stem()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    dir.unwrap_or(stem)
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

impl ModelConfig {
    /// A Hugging Face `config.json`: the fields the problems need, the family from
    /// `model_type`. The name is its folder's in lower case (`Llama-3.2-1B/config.json` →
    /// `llama-3.2-1b`), else the file's stem; `OPBENCH_SHAPES` and
    /// the shipped models are not consulted.
    pub fn from_hf_json(path: &Path) -> Result<Self, ShapesError> {
        let text = std::fs::read_to_string(path).map_err(|source| ShapesError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let v: Value = serde_json::from_str(&text).map_err(|e| ShapesError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let invalid = |key: &'static str, message: String| ShapesError::Invalid {
            path: path.to_path_buf(),
            key,
            message,
        };
        let model_type = v
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("model_type", "missing".into()))?;
        let family = Family::from_model_type(model_type).ok_or_else(|| {
            let known: Vec<&str> = Family::MODEL_TYPES.iter().map(|(t, _)| *t).collect();
            invalid(
                "model_type",
                format!(
                    "`{model_type}` is not a family opbench knows (known: {})",
                    known.join(", ")
                ),
            )
        })?;
        let size = |key: &'static str| -> Result<Option<usize>, ShapesError> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x
                    .as_u64()
                    .map(|n| Some(n as usize))
                    .ok_or_else(|| invalid(key, format!("{x} is not a whole number"))),
            }
        };
        let need = |key: &'static str| size(key)?.ok_or_else(|| invalid(key, "missing".into()));
        let number = |key: &'static str, default: f64| -> Result<f64, ShapesError> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(x) => x
                    .as_f64()
                    .ok_or_else(|| invalid(key, format!("{x} is not a number"))),
            }
        };
        let (hidden, heads) = (need("hidden_size")?, need("num_attention_heads")?);
        // Gemma ties its embeddings unless it says otherwise; the others untie them
        let tied = v
            .get("tie_word_embeddings")
            .and_then(Value::as_bool)
            .unwrap_or(family == Family::Gemma);
        let cfg = ModelConfig {
            name: name_of(path),
            source: path.display().to_string(),
            family,
            attention_bias: v
                .get("attention_bias")
                .and_then(Value::as_bool)
                .unwrap_or(family == Family::Qwen2),
            hidden_size: hidden,
            intermediate_size: need("intermediate_size")?,
            num_hidden_layers: need("num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: size("num_key_value_heads")?.unwrap_or(heads),
            head_dim: size("head_dim")?.unwrap_or(hidden / heads.max(1)),
            vocab_size: need("vocab_size")?,
            rope_theta: number("rope_theta", 10000.0)?,
            rms_norm_eps: number("rms_norm_eps", number("layer_norm_eps", 1e-6)?)?,
            max_position_embeddings: size("max_position_embeddings")?.unwrap_or(4096),
            tie_word_embeddings: tied,
            moe_intermediate_size: size("moe_intermediate_size")?,
            num_experts: size("num_experts")?,
            num_experts_per_tok: size("num_experts_per_tok")?,
        };
        cfg.validate(path)?;
        if let Ok(mut read) = READ.lock()
            && !read.iter().any(|c| c.name == cfg.name)
        {
            read.push(cfg.clone());
        }
        Ok(cfg)
    }
}
