//! `cargo bench -p decode`: whole decode steps (and prefills) over the grid, both profiles.
harness::opbench_bench!(decode::Decode::default());
