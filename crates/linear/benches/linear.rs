//! `cargo bench -p linear`: every variant at every site of the grid (see README, OPBENCH_*).
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    harness::bench_op(c, &linear::Linear);
}

criterion_group! { name = benches; config = harness::criterion_config(); targets = bench }
criterion_main!(benches);
