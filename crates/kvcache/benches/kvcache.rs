//! `cargo bench -p kvcache`: every variant at every site of the grid (see README, OPBENCH_*).
harness::opbench_bench!(kvcache::KvCache);
