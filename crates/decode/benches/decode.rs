//! `cargo bench -p decode`: whole decode steps (and prefills) over the grid, both profiles.
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    harness::bench_op(c, &decode::Decode::default());
}

criterion_group! { name = benches; config = harness::criterion_config(); targets = bench }
criterion_main!(benches);
