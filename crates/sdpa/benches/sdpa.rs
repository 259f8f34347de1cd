//! `cargo bench -p sdpa`: every variant at every site of the grid (see README, OPBENCH_*).
harness::opbench_bench!(sdpa::Sdpa);
