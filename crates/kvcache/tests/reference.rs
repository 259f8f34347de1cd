//! Every variant against the float64 reference, and the byte counts that show `cat` copying
//! the whole cache.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::{DType, Device, Op, rel_err};
use shapes::{ModelConfig, OpKind, Step};

#[test]
fn every_variant_appends_exactly() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let op = kvcache::KvCache;
    for step in [Step::decode(2, 100), Step::prefill(1, 16)] {
        for p in shapes::derive(&cfg, step)
            .iter()
            .filter(|p| p.op == OpKind::KvCache)
        {
            for v in op.variants() {
                for dt in [DType::F32, DType::BF16] {
                    let mut prepared = op.prepare(v, p, dt, Device::CPU).unwrap();
                    prepared.run().unwrap();
                    // the op's word on its state (the plan's cold cases) is the prepared case's
                    assert_eq!(
                        op.holds_state(v, p),
                        prepared.state_bytes() > 0,
                        "{v} {p:?}"
                    );
                    let err = rel_err(&prepared.check().unwrap()).unwrap();
                    assert_eq!(err, 0.0, "{v} {} {dt}", p.site);
                }
            }
        }
    }
}

#[test]
fn cat_moves_the_whole_cache_and_static_caches_do_not() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let op = kvcache::KvCache;
    let bytes = |l: usize, v: &str| {
        let p = shapes::derive(&cfg, Step::decode(1, l))
            .into_iter()
            .find(|p| p.op == OpKind::KvCache && p.site == "k")
            .unwrap();
        let prepared = op.prepare(v, &p, DType::F16, Device::CPU).unwrap();
        prepared.bytes().unwrap_or(p.bytes(2))
    };
    // cat at L=1024: read 1025 rows and write 1025 rows of Hkv·D halves
    assert_eq!(bytes(1024, "cat"), 8 * 128 * 2 * 1025 * 2);
    assert!(bytes(4096, "cat") > 3 * bytes(1024, "cat"));
    assert_eq!(bytes(4096, "index_copy"), bytes(128, "index_copy"));
    assert_eq!(bytes(4096, "slice_copy"), 2 * 8 * 128 * 2);
}
