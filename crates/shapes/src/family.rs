//! Model families: how a Hugging Face decoder's `model_type` lays out its layer, and a
//! `config.json` read into a [`ModelConfig`] (`--model PATH/config.json`).
//!
//! The families share one layout (RMSNorm, RoPE, GQA attention, a SwiGLU MLP); what
//! differs is listed on [`Family`]. A family opbench cannot compose yet is read all the
//! same (its problems' shapes hold), and says why wherever a whole step is needed.

use std::path::Path;
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::Value;

use crate::config::{ModelConfig, ShapesError};

/// A decoder family, by its `config.json`'s `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Qwen3: RMSNorm over each head's q and k (qk-norm) before RoPE.
    #[default]
    Qwen3,
    /// Qwen3's MoE (qk-norm, routed experts).
    Qwen3Moe,
    /// Llama 2 / 3: no qk-norm, no attention bias.
    Llama,
    /// Mistral: Llama's layout.
    Mistral,
    /// Qwen2 / Qwen2.5: a bias on the q, k and v projections (the decode crate adds it;
    /// predict prices those projections as the linear crate's calls without one: the bias
    /// rides in the same addmm kernel and dispatch, one read of n elements more).
    Qwen2,
    /// Gemma 1 / 2 / 3: (1 + w) RMSNorm, a scaled embedding, GeGLU.
    Gemma,
    /// Phi-3: fused qkv and gate_up projections.
    Phi3,
}

impl Family {
    /// `model_type` values and their family.
    pub const MODEL_TYPES: [(&'static str, Family); 9] = [
        ("qwen3", Family::Qwen3),
        ("qwen3_moe", Family::Qwen3Moe),
        ("llama", Family::Llama),
        ("mistral", Family::Mistral),
        ("qwen2", Family::Qwen2),
        ("gemma", Family::Gemma),
        ("gemma2", Family::Gemma),
        ("gemma3_text", Family::Gemma),
        ("phi3", Family::Phi3),
    ];

    pub fn from_model_type(s: &str) -> Option<Family> {
        Self::MODEL_TYPES
            .iter()
            .find(|(t, _)| *t == s)
            .map(|(_, f)| *f)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Qwen3 => "qwen3",
            Family::Qwen3Moe => "qwen3_moe",
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen2 => "qwen2",
            Family::Gemma => "gemma",
            Family::Phi3 => "phi3",
        }
    }

    /// RMSNorm over each head's q and k before RoPE.
    pub fn qk_norm(self) -> bool {
        matches!(self, Family::Qwen3 | Family::Qwen3Moe)
    }

    /// Why opbench cannot compose this family's step yet; `None`: it can.
    pub fn not_composed(self) -> Option<&'static str> {
        match self {
            Family::Gemma => {
                Some("its (1 + w) RMSNorm, scaled embedding and GeGLU MLP are not modelled yet")
            }
            Family::Phi3 => Some(
                "its fused qkv and gate_up projections are not modelled as transformers calls them yet",
            ),
            _ => None,
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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
