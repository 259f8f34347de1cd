//! `cargo bench -p linear`: every variant at every site of the grid (see README, OPBENCH_*).
harness::opbench_bench!(linear::Linear);
