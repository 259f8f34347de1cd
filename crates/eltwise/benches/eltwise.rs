//! `cargo bench -p eltwise`: every variant at every site of the grid (see README, OPBENCH_*).
harness::opbench_bench!(eltwise::Eltwise);
