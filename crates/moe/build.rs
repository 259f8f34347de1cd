//! rpath to the libtorch the build used, so bench and test binaries run as built.
include!("../harness/rpath.in.rs");

fn main() {
    libtorch_rpath("DEP_OPBENCH_HARNESS_LIBTORCH_LIB");
}
