//! The dispatch floor (a one-element add, a view) and the ceilings (a large copy, a large
//! GEMM) on every selected device, in every timing mode: what every op is read against.
harness::opbench_bench!(harness::Floor, harness::Ceiling);
