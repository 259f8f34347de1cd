//! What the CLI test files share: the v1 column lists of hand-made runs, and running the
//! `opbench` binary.
#![allow(dead_code)] // each test file uses its own part

use std::process::Command;

/// results.csv columns of the first schema (the readers add the later ones).
pub const RESULTS: &str = "run_id,op,variant,site,model,phase,batch,q_len,kv_len,dtype,dims,device,mode,status,samples,median_ns,mean_ns,ci_low_ns,ci_high_ns,mad_ns,flops,bytes,gflops,gbps,kernel,max_rel_err,note";
/// samples.csv columns of the first schema, with `execution`.
pub const SAMPLES: &str =
    "op,variant,site,model,phase,batch,q_len,kv_len,dtype,device,mode,execution,iters,total_ns";

/// Run `opbench ARGS`: exit code, stdout, stderr.
pub fn opbench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_opbench"))
        .args(args)
        .output()
        .expect("opbench runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
