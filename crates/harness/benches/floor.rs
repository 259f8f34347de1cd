//! The dispatch floor: a one-element add on every selected device, in every timing mode.
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    harness::bench_op(c, &harness::Floor);
}

criterion_group! { name = benches; config = harness::criterion_config(); targets = bench }
criterion_main!(benches);
