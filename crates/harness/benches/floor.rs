//! The dispatch floor (a one-element add, a view) and the ceilings (a large copy, a large
//! GEMM) on every selected device, in every timing mode: what every op is read against.
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    harness::bench_op(c, &harness::Floor);
    harness::bench_op(c, &harness::Ceiling);
}

criterion_group! { name = benches; config = harness::criterion_config(); targets = bench }
criterion_main!(benches);
