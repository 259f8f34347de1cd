//! `cargo bench -p rmsnorm`: every variant at every site of the grid (see README, OPBENCH_*).
harness::opbench_bench!(rmsnorm::RmsNorm);
