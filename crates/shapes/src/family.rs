//! Model families: how a Hugging Face decoder's `model_type` lays out its layer (a
//! `config.json` is read into a [`crate::ModelConfig`] by the config module).
//!
//! The families share one layout (RMSNorm, RoPE, GQA attention, a SwiGLU MLP); what
//! differs is listed on [`Family`]. A family opbench cannot compose yet is read all the
//! same (its problems' shapes hold), and says why wherever a whole step is needed.

use serde::Deserialize;

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
