//! Model configurations (Qwen3's shipped, any supported Hugging Face decoder's from its
//! `config.json`) and the per-op problems of one decoder step.
//!
//! This crate never touches tch: it is pure data and arithmetic, so every other crate (and
//! the tests) can reason about shapes, FLOPs and bytes without libtorch.
//!
//! - [`ModelConfig`]: one `shapes/<model>.toml`, the values of the model's `config.json`.
//! - [`Grid`]: the sweep (`shapes/grid.toml`): batches, cache lengths, prefill lengths, dtypes.
//! - [`Problem`]: one op at one site for one step (`phase`, `batch`, `q_len`, cache length),
//!   with its [`Dims`], FLOPs, bytes and calls per decode step. [`derive()`] makes every
//!   problem of a step; [`Profile::problems`] every problem of a sweep.
//! - [`StepPlan`]: every call of one step under a [`StepProfile`] (hf-eager or fused),
//!   with the variant each site runs and the calls no op crate measures.
//!
//! ```
//! use shapes::{ModelConfig, OpKind, Step};
//! let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
//! let q = shapes::derive(&cfg, Step::decode(8, 1024))
//!     .into_iter()
//!     .find(|p| p.op == OpKind::Linear && p.site == "q_proj")
//!     .unwrap();
//! assert_eq!(q.dims.to_string(), "m=8 n=2048 k=1024");
//! assert_eq!(q.flops(), 2 * 8 * 2048 * 1024);
//! ```

mod config;
mod derive;
mod family;
mod grid;
pub mod moe;
mod plan;
mod problem;
mod work;

pub use config::{ModelConfig, ShapesError, builtin_models, check_shapes_env, shapes_dir};
pub use derive::derive;
pub use family::Family;
pub use grid::{Check, DTypeName, Grid, MAX_BATCH, MAX_LEN, Profile};
pub use plan::{
    BESIDE_PAIRED_AT_MOST_NS, CallKind, GENERATE_LOOP, GenerateLoop, LAYER_REPEATS, OtherCall,
    PairedSite, Pairing, PlannedCall, STATIC_GENERATE, StepPlan, StepProfile,
};
pub use problem::{Dims, OpKind, Phase, Problem, Step, StepWork, UnknownValue};
pub use work::step_work;
