//! Property tests: model and grid files of any text never make the parsers panic, and shape
//! arithmetic on any sizes never wraps: a count either fits 64 bits or is refused.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::Path;

use proptest::prelude::*;
use shapes::{Grid, ModelConfig, Phase, Step};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_text_never_panics_the_parsers(text in "\\PC{0,300}") {
        let _ = ModelConfig::parse(&text, Path::new("x.toml"));
        let _ = Grid::parse(&text, Path::new("grid.toml"));
    }

    #[test]
    fn model_values_out_of_range_are_errors_not_panics(key in 0usize..8, v in any::<i64>()) {
        let base = ModelConfig::builtin("qwen3-0.6b").unwrap();
        let keys = ["hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                    "max_position_embeddings"];
        let text = format!(
            "name = \"x\"\nsource = \"s\"\nrope_theta = {}\nrms_norm_eps = {}\ntie_word_embeddings = true\n{}",
            base.rope_theta, base.rms_norm_eps,
            keys.iter().enumerate().map(|(i, k)| {
                let val = if i == key { v.to_string() } else { "64".to_string() };
                format!("{k} = {val}\n")
            }).collect::<String>()
        );
        let _ = ModelConfig::parse(&text, Path::new("x.toml"));
    }

    #[test]
    fn counts_never_wrap(batch in 1usize..usize::MAX, len in 0usize..usize::MAX,
                         prefill in any::<bool>()) {
        let cfg = ModelConfig::builtin("qwen3-235b-a22b").unwrap();
        let step = if prefill { Step::prefill(batch, len.max(1)) } else { Step::decode(batch, len) };
        for p in shapes::derive(&cfg, step) {
            // a count either fits or is refused; the saturating forms never wrap below it
            if let Some(f) = p.checked_flops() {
                prop_assert_eq!(p.flops(), f);
            } else {
                prop_assert_eq!(p.flops(), u64::MAX);
            }
            if p.checked_bytes(2).is_none() {
                prop_assert_eq!(p.bytes(2), u64::MAX);
            }
            prop_assert!(p.phase == Phase::Prefill || p.phase == Phase::Decode);
        }
    }
}
