//! `cargo bench -p moe`: the routed experts of the MoE models in `OPBENCH_MODEL` (see README).
harness::opbench_bench!(moe::Moe);
