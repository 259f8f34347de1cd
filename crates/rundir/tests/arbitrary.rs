//! Property tests: no bytes in a run directory's files make a reader panic, and whatever a
//! reader accepts holds only finite, positive times.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use proptest::prelude::*;
use rundir::{ResultRow, Run, Sample};

const ROW: &str = "r,linear,aten,q_proj,qwen3-0.6b,decode,1,1,,f16,cuda:0,pipelined,m=1 n=2 k=3,ok,10,1000,1001,990,1010,3,12,34,0.1,0.2,,0.0001,,800,5,0.05,a note,0";
const ENV: &str = r#"{"schema_version": 2, "started_at": "2026-12-01T10:00:00Z", "backend": "cuda",
    "devices": ["cuda:0"], "device_name": "NVIDIA H200", "libtorch_version": "2.11.0"}"#;
const SAMPLE: &str = "linear,aten,q_proj,qwen3-0.6b,decode,1,1,,f16,cuda:0,pipelined,1,10,10000,800,52000,9900,0,0,1980,23,41,0,52100,1040,805,1010,3";

fn write(dir: &std::path::Path, env: &[u8], results: &[u8], samples: &[u8]) {
    std::fs::write(dir.join("env.json"), env).unwrap();
    std::fs::write(dir.join("results.csv"), results).unwrap();
    std::fs::write(dir.join("samples.csv"), samples).unwrap();
}

/// What a reader must guarantee of what it accepts.
fn sane(run: &Run) {
    for r in &run.results {
        for v in [
            r.median_ns,
            r.mean_ns,
            r.ci_low_ns,
            r.ci_high_ns,
            r.control_ns,
        ]
        .into_iter()
        .flatten()
        {
            assert!(v.is_finite() && v > 0.0, "{v}");
        }
        assert!(r.mad_ns.is_none_or(|m| m.is_finite() && m >= 0.0));
    }
    if let Ok(samples) = run.samples() {
        for s in samples.values().flatten() {
            assert!(s.iters > 0 && s.total_ns.is_finite() && s.total_ns > 0.0);
            assert!(s.per_call_ns().is_finite());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn arbitrary_bytes_never_panic(env in prop::collection::vec(any::<u8>(), 0..200),
                                   results in prop::collection::vec(any::<u8>(), 0..400),
                                   samples in prop::collection::vec(any::<u8>(), 0..400)) {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &env, &results, &samples);
        if let Ok(run) = Run::load(dir.path()) {
            sane(&run);
        }
    }

    #[test]
    fn arbitrary_field_values_never_panic(field in 0usize..31,
                                          value in prop_oneof![
                                              Just(String::new()), Just("inf".to_string()),
                                              Just("NaN".to_string()), Just("-1".to_string()),
                                              Just("0".to_string()), Just("1e309".to_string()),
                                              Just("18446744073709551616".to_string()),
                                              "\\PC{0,12}",
                                          ],
                                          sfield in 0usize..15,
                                          svalue in "\\PC{0,12}") {
        let dir = tempfile::tempdir().unwrap();
        let mut fields: Vec<String> = ROW.split(',').map(str::to_string).collect();
        fields[field] = value.replace([',', '"', '\n', '\r'], "");
        let mut sfields: Vec<String> = SAMPLE.split(',').map(str::to_string).collect();
        sfields[sfield] = svalue.replace([',', '"', '\n', '\r'], "");
        let results = format!("{}\n{}\n", ResultRow::columns().join(","), fields.join(","));
        let samples = format!("{}\n{}\n", Sample::columns().join(","), sfields.join(","));
        write(dir.path(), ENV.as_bytes(), results.as_bytes(), samples.as_bytes());
        if let Ok(run) = Run::load(dir.path()) {
            sane(&run);
        }
    }
}

#[test]
fn the_template_rows_are_valid() {
    // the property tests spoil these: they must be accepted as they are
    let dir = tempfile::tempdir().unwrap();
    let results = format!("{}\n{ROW}\n", ResultRow::columns().join(","));
    let samples = format!("{}\n{SAMPLE}\n", Sample::columns().join(","));
    write(
        dir.path(),
        ENV.as_bytes(),
        results.as_bytes(),
        samples.as_bytes(),
    );
    let run = Run::load(dir.path()).unwrap();
    assert_eq!(run.results.len(), 1);
    assert_eq!(run.samples().unwrap().values().flatten().count(), 1);
}
