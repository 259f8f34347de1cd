//! `cargo bench -p sdpa`: every variant at every site of the grid (see README, OPBENCH_*).
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    harness::bench_op(c, &sdpa::Sdpa);
}

criterion_group! { name = benches; config = harness::criterion_config(); targets = bench }
criterion_main!(benches);
