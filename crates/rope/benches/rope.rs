//! `cargo bench -p rope`: every variant at every site of the grid (see README, OPBENCH_*).
harness::opbench_bench!(rope::Rope);
