//! Every OPBENCH_* value is checked before criterion or libtorch sees it: bad values are a
//! one-line error naming the variable, never a panic, a thousand threads or a silent
//! fall-back. One test function, since it sets process-wide variables.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::Config;

/// `Config::from_env` with `vars` set (and unset afterwards).
fn with(vars: &[(&str, &str)]) -> Result<Config, String> {
    for (k, v) in vars {
        // SAFETY: this test binary has one test function, so no other thread reads the
        // environment while it changes.
        unsafe { std::env::set_var(k, v) };
    }
    let out = Config::from_env();
    for (k, _) in vars {
        // SAFETY: as above.
        unsafe { std::env::remove_var(k) };
    }
    out
}

fn err(vars: &[(&str, &str)]) -> String {
    let e = with(vars).unwrap_err();
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

#[test]
fn bad_settings_are_named_errors() {
    assert!(with(&[]).is_ok());
    assert!(err(&[("OPBENCH_MEASURE_MS", "0")]).contains("OPBENCH_MEASURE_MS=0"));
    assert!(err(&[("OPBENCH_THREADS", "0")]).contains("OPBENCH_THREADS=0"));
    assert!(err(&[("OPBENCH_THREADS", "100000")]).contains("OPBENCH_THREADS=100000"));
    assert!(with(&[("OPBENCH_THREADS", "1")]).unwrap().threads == Some(1));
    // the default modes: the CPU also times its calls with their state read from memory
    use harness::timing::Mode::{Pipelined, PipelinedCold, Synced};
    let default = with(&[]).unwrap();
    assert_eq!(default.modes_for(false), [Pipelined, Synced, PipelinedCold]);
    assert_eq!(default.modes_for(true), [Pipelined, Synced]);
    let given = with(&[("OPBENCH_MODES", "pipelined")]).unwrap();
    assert_eq!(given.modes_for(false), [Pipelined]);
    assert!(
        err(&[("OPBENCH_MODES", "pipelined,synced,pipelined")]).contains("`pipelined` given twice")
    );
    assert!(
        err(&[("OPBENCH_MODEL", "qwen3-0.6b,qwen3-0.6b")])
            .contains("model `qwen3-0.6b` given twice")
    );
    assert!(err(&[("OPBENCH_DTYPE", "f16,f16")]).contains("`f16` given twice"));
    assert!(err(&[("OPBENCH_EXECUTION", "0")]).contains("OPBENCH_EXECUTION=0"));
    assert!(err(&[("OPBENCH_PLANT_PCT", "-5")]).contains("OPBENCH_PLANT_PCT"));
    assert!(err(&[("OPBENCH_SAMPLES", "abc")]).contains("OPBENCH_SAMPLES=abc"));
    // the timing CPU: one of the process's CPUs, or `any`
    let mine = wire::cpus::allowed();
    let last = mine.last().unwrap().to_string();
    assert_eq!(
        with(&[("OPBENCH_TIMING_CPU", &last)]).unwrap().timing_cpu,
        mine.last().copied()
    );
    assert_eq!(
        with(&[("OPBENCH_TIMING_CPU", "any")]).unwrap().timing_cpu,
        None
    );
    assert!(err(&[("OPBENCH_TIMING_CPU", "x")]).contains("OPBENCH_TIMING_CPU=x"));
    assert!(err(&[("OPBENCH_TIMING_CPU", "100000")]).contains("not one of this process's CPUs"));

    // OPBENCH_SHAPES: missing, a file, a folder without grid.toml — all refused
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    assert!(err(&[("OPBENCH_SHAPES", missing.to_str().unwrap())]).contains("no such folder"));
    let file = dir.path().join("f.toml");
    std::fs::write(&file, "").unwrap();
    assert!(err(&[("OPBENCH_SHAPES", file.to_str().unwrap())]).contains("not a folder"));
    assert!(err(&[("OPBENCH_SHAPES", dir.path().to_str().unwrap())]).contains("no grid.toml"));

    // a grid with an empty list, and a model file whose name is not its file name
    let shapes = dir.path().join("shapes");
    std::fs::create_dir(&shapes).unwrap();
    let grid = "[default]\nbatches = []\ndecode_ctx = [128]\nprefill_len = [32]\nprefill_batches = [1]\ndtypes_gpu = [\"f16\"]\ndtypes_cpu = [\"f32\"]\n";
    std::fs::write(shapes.join("grid.toml"), grid).unwrap();
    let s = shapes.to_str().unwrap();
    assert!(err(&[("OPBENCH_SHAPES", s)]).contains("key `batches`: empty"));
    std::fs::write(
        shapes.join("grid.toml"),
        grid.replace("batches = []", "batches = [1]"),
    )
    .unwrap();
    let model = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shapes/qwen3-0.6b.toml"),
    )
    .unwrap();
    std::fs::write(
        shapes.join("qwen3-0.6b.toml"),
        model.replace("name = \"qwen3-0.6b\"", "name = \"qwen3-8b\""),
    )
    .unwrap();
    assert!(err(&[("OPBENCH_SHAPES", s)]).contains("differs from the file name"));
    std::fs::write(shapes.join("qwen3-0.6b.toml"), &model).unwrap();
    assert!(with(&[("OPBENCH_SHAPES", s)]).is_ok());
}
