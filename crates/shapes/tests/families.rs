//! Any Hugging Face decoder from its config.json: three families' problems against
//! hand-computed dims, FLOPs and bytes (f16) at B = 1 and 64, L = 1024; a config.json of
//! a shipped model reads as its shapes file; an unknown `model_type` is an error that
//! names the field and the known families.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use shapes::{Family, ModelConfig, OpKind, Problem, Step, derive, step_work};

fn config(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
        .join("config.json")
}

fn site<'a>(ps: &'a [Problem], op: OpKind, site: &str) -> Option<&'a Problem> {
    ps.iter().find(|p| p.op == op && p.site == site)
}

/// (site, FLOPs, f16 bytes) of four linear sites, then the step's weight and KV elements.
type Want = ([(&'static str, u64, u64); 4], u64, u64);

fn check(cfg: &ModelConfig, batch: usize, want: Want) {
    let ps = derive(cfg, Step::decode(batch, 1024));
    for (name, flops, bytes) in want.0 {
        let p = site(&ps, OpKind::Linear, name).unwrap();
        assert_eq!(p.flops(), flops, "{} B={batch} {name}", cfg.name);
        assert_eq!(p.bytes(2), bytes, "{} B={batch} {name}", cfg.name);
    }
    let w = step_work(cfg, Step::decode(batch, 1024));
    assert_eq!(w.weight_elems, want.1, "{} B={batch} weights", cfg.name);
    assert_eq!(w.kv_elems, want.2, "{} B={batch} kv", cfg.name);
    // qk-norm only where the family has it
    let qk = site(&ps, OpKind::RmsNorm, "q_norm").is_some();
    assert_eq!(qk, cfg.family.qk_norm(), "{}", cfg.name);
}

#[test]
fn llama_from_its_config_json() {
    let cfg = ModelConfig::by_name(config("Llama-3.2-1B").to_str().unwrap()).unwrap();
    assert_eq!(cfg.name, "llama-3.2-1b");
    assert_eq!(cfg.family, Family::Llama);
    assert_eq!((cfg.head_dim, cfg.num_key_value_heads), (64, 8));
    assert!(cfg.tie_word_embeddings && cfg.family.not_composed().is_none());
    // per layer: attention 2048·2048 + 2·512·2048 + 2048·2048, MLP 3·2048·8192, two
    // norms of 2048; 16 layers, the final norm, the tied lm_head and B embedding rows
    check(
        &cfg,
        1,
        (
            [
                ("q_proj", 2 * 2048 * 2048, (2048 + 2048 * 2048 + 2048) * 2),
                ("k_proj", 2 * 512 * 2048, (2048 + 2048 * 512 + 512) * 2),
                (
                    "down_proj",
                    2 * 2048 * 8192,
                    (8192 + 8192 * 2048 + 2048) * 2,
                ),
                (
                    "lm_head",
                    2 * 128256 * 2048,
                    (2048 + 2048 * 128256 + 128256) * 2,
                ),
            ],
            1_235_816_448,
            2 * 16 * 8 * 1025 * 64,
        ),
    );
    check(
        &cfg,
        64,
        (
            [
                ("q_proj", 536_870_912, 8_912_896),
                ("k_proj", 134_217_728, 2_424_832),
                ("down_proj", 2_147_483_648, 34_865_152),
                ("lm_head", 33_621_540_864, 542_015_488),
            ],
            1_235_945_472,
            1_074_790_400,
        ),
    );
    // the name is known from then on, as the op crates look it up from a problem
    assert_eq!(ModelConfig::by_name("llama-3.2-1b").unwrap(), cfg);
}

#[test]
fn mistral_derives_head_dim_and_keeps_its_own_lm_head() {
    let cfg = ModelConfig::from_hf_json(&config("Mistral-7B-v0.1")).unwrap();
    assert_eq!(cfg.family, Family::Mistral);
    assert_eq!(
        cfg.head_dim,
        4096 / 32,
        "head_dim derived from hidden / heads"
    );
    assert!(!cfg.tie_word_embeddings);
    check(
        &cfg,
        1,
        (
            [
                ("q_proj", 33_554_432, 33_570_816),
                ("k_proj", 8_388_608, 8_398_848),
                ("down_proj", 117_440_512, 117_477_376),
                ("lm_head", 262_144_000, 262_216_192),
            ],
            7_110_664_192,
            67_174_400,
        ),
    );
    check(
        &cfg,
        64,
        (
            [
                ("q_proj", 2_147_483_648, 34_603_008),
                ("k_proj", 536_870_912, 9_043_968),
                ("down_proj", 7_516_192_768, 119_799_808),
                ("lm_head", 16_777_216_000, 266_764_288),
            ],
            7_110_922_240,
            4_299_161_600,
        ),
    );
}

#[test]
fn qwen2_carries_a_bias_on_q_k_and_v_and_derives_head_dim() {
    // no `attention_bias` field: Qwen2 has the bias in its code; (14 + 2·2)·64 bias
    // elements a layer among its weights; the projections' own problems count no bias
    let cfg = ModelConfig::from_hf_json(&config("Qwen2.5-0.5B")).unwrap();
    assert_eq!(cfg.family, Family::Qwen2);
    assert!(cfg.attention_bias && cfg.tie_word_embeddings);
    assert_eq!((cfg.head_dim, cfg.family.not_composed()), (896 / 14, None));
    // a layer: attention 1,835,008 + MLP 13,074,432 + norms 1,792 + bias 1,152 elements
    let layer = 1_835_008 + 13_074_432 + 1_792 + 1_152;
    check(
        &cfg,
        1,
        (
            [
                ("q_proj", 1_605_632, 1_609_216),
                ("k_proj", 229_376, 231_424),
                ("down_proj", 8_716_288, 8_727_808),
                ("lm_head", 272_269_312, 272_574_976),
            ],
            24 * layer + 896 + 151_936 * 896 + 896,
            2 * 24 * 2 * 1025 * 64,
        ),
    );
    check(
        &cfg,
        64,
        (
            [
                ("q_proj", 102_760_448, 1_835_008),
                ("k_proj", 14_680_064, 360_448),
                ("down_proj", 557_842_432, 9_453_568),
                ("lm_head", 17_425_235_968, 291_831_808),
            ],
            24 * layer + 896 + 151_936 * 896 + 64 * 896,
            64 * 2 * 24 * 2 * 1025 * 64,
        ),
    );
}

#[test]
fn qwen3s_config_json_reads_as_its_shapes_file() {
    let cfg = ModelConfig::from_hf_json(&config("Qwen3-0.6B")).unwrap();
    let shipped = ModelConfig::builtin("qwen3-0.6b").unwrap();
    assert_eq!(
        ModelConfig {
            name: shipped.name.clone(),
            source: shipped.source.clone(),
            ..cfg.clone()
        },
        shipped
    );
    for b in [1, 64] {
        let step = Step::decode(b, 1024);
        assert_eq!(derive(&cfg, step).len(), derive(&shipped, step).len());
    }
    check(
        &cfg,
        64,
        (
            [
                ("q_proj", 268_435_456, 4_587_520),
                ("k_proj", 134_217_728, 2_359_296),
                ("down_proj", 402_653_184, 6_815_744),
                ("lm_head", 19_914_555_392, 330_743_808),
            ],
            596_115_456,
            3_761_766_400,
        ),
    );
}

#[test]
fn a_family_opbench_cannot_compose_reads_and_says_why() {
    let cfg = ModelConfig::from_hf_json(&config("gemma-3-1b-it")).unwrap();
    assert_eq!(cfg.family, Family::Gemma);
    assert!(
        cfg.tie_word_embeddings,
        "Gemma ties unless it says otherwise"
    );
    let why = cfg.family.not_composed().unwrap();
    assert!(why.contains("GeGLU"), "{why}");
}

#[test]
fn an_unknown_model_type_names_the_field_and_the_families() {
    let e = ModelConfig::from_hf_json(&config("bert"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("model_type") && e.contains("`bert`"), "{e}");
    assert!(e.contains("llama") && e.contains("qwen3"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
    let missing = ModelConfig::from_hf_json(&config("nope"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("nope"), "{missing}");
}
