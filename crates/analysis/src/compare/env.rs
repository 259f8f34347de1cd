//! What makes two runs comparable: the same cases, the same boot, the environment's
//! differences.

use super::*;

/// Whether two runs were measured in one boot: the same boot of the same machine where
/// both record a boot id, else started within [`SAME_BOOT_HOURS`] of each other. A run
/// without env.json is of another boot.
pub fn same_boot(base: Option<&Env>, cand: Option<&Env>) -> bool {
    let (Some(b), Some(c)) = (base, cand) else {
        return false;
    };
    if let (Some(x), Some(y)) = (b.host_state.get("boot_id"), c.host_state.get("boot_id")) {
        return x == y;
    }
    let at = |e: &Env| chrono::DateTime::parse_from_rfc3339(&e.started_at).ok();
    match (at(b), at(c)) {
        (Some(x), Some(y)) => (x - y).num_minutes().abs() <= (SAME_BOOT_HOURS * 60.0) as i64,
        _ => false,
    }
}

/// How far apart two runs without boot ids may start and count as one boot.
pub const SAME_BOOT_HOURS: f64 = 3.0;

/// Refuse runs with nothing to compare.
pub(super) fn check_comparable(base: &Run, cand: &Run) -> Result<(), AnalysisError> {
    for run in [base, cand] {
        if run.ok_rows().next().is_none() {
            return Err(AnalysisError::Input(format!(
                "{}: no ok row to compare",
                run.dir.display()
            )));
        }
    }
    let base_keys: BTreeSet<&CaseKey> = base.results.iter().map(|r| &r.key).collect();
    if !cand.results.iter().any(|r| base_keys.contains(&r.key)) {
        let devices = |run: &Run| {
            let d: BTreeSet<String> = run.results.iter().map(|r| r.device.to_string()).collect();
            d.into_iter().collect::<Vec<_>>().join(", ")
        };
        return Err(AnalysisError::Input(format!(
            "{} and {}: no case in common (devices {} against {}): compare two runs of one device",
            base.dir.display(),
            cand.dir.display(),
            devices(base),
            devices(cand)
        )));
    }
    Ok(())
}

/// A line per case in either run, with its identity flags (new, gone, status and kernel
/// changes, upper bounds) and no speed verdict yet.
pub(super) fn identity_lines(base: &Run, cand: &Run) -> Result<Vec<Line>, AnalysisError> {
    let index = |run: &Run| -> BTreeMap<CaseKey, ResultRow> {
        run.results
            .iter()
            .map(|r| (r.key.clone(), r.clone()))
            .collect()
    };
    let (bi, ci) = (index(base), index(cand));
    // the trace pass's dominant kernel of each case (traces are keyed in pipelined mode)
    let dominant = |run: &Run| -> Result<BTreeMap<CaseKey, String>, AnalysisError> {
        Ok(run
            .traces()?
            .into_iter()
            .filter_map(|t| Some((t.key, t.dominant_kernel?)))
            .collect())
    };
    let (bd, cd) = (dominant(base)?, dominant(cand)?);
    let keys: BTreeSet<&CaseKey> = bi.keys().chain(ci.keys()).collect();
    let mut lines = Vec::new();
    for key in keys {
        let (b, c) = (bi.get(key), ci.get(key));
        let mut line = Line {
            key: key.clone(),
            base: b.and_then(|r| r.median_ns),
            cand: c.and_then(|r| r.median_ns),
            ratio: None,
            ratio_ci: None,
            p: None,
            mde: None,
            verdict: None,
            flags: Vec::new(),
            fails: false,
            both_ok: false,
            divided_by: None,
        };
        match (b, c) {
            (Some(_), None) => line.flags.push(Flag::Gone),
            (None, Some(_)) => line.flags.push(Flag::New),
            (Some(b), Some(c)) => {
                if b.status != c.status {
                    line.flags.push(Flag::StatusChanged(b.status, c.status));
                    line.fails |= b.status == Status::Ok;
                }
                if b.kernel != c.kernel {
                    let (bk, ck) = (
                        b.kernel.clone().unwrap_or_default(),
                        c.kernel.clone().unwrap_or_default(),
                    );
                    // falling back to the composite kernel from another is the regression
                    // users must see (a case that ran no kernel before, one skipped or out
                    // of memory, did not fall back: its status change says what it did)
                    line.fails |= ck == "math" && !bk.is_empty() && bk != "math";
                    line.flags.push(Flag::KernelChanged(bk, ck));
                } else {
                    let traced = key.in_mode(rundir::Mode::Pipelined);
                    if let (Some(bk), Some(ck)) = (bd.get(&traced), cd.get(&traced)) {
                        if bk != ck {
                            line.flags.push(Flag::KernelChanged(bk.clone(), ck.clone()));
                        }
                    }
                }
                let ok = b.status == Status::Ok && c.status == Status::Ok;
                let bound = key.mode.is_device() && (b.is_upper_bound() || c.is_upper_bound());
                if ok && bound {
                    line.flags.push(Flag::UpperBound);
                }
                line.both_ok = ok && !bound;
            }
            (None, None) => {}
        }
        lines.push(line);
    }
    Ok(lines)
}

/// env.json fields whose difference can change kernels or timings, as `field: a -> b`.
pub fn env_diff(base: Option<&Env>, cand: Option<&Env>) -> Vec<String> {
    let (Some(b), Some(c)) = (base, cand) else {
        return vec!["env.json missing in one run: environments not compared".into()];
    };
    let knobs = knob_diff(b, c);
    let json = |e: &Env| serde_json::to_value(e).unwrap_or_default();
    let (b, c) = (json(b), json(c));
    let mut out = Vec::new();
    for f in ENV_FIELDS {
        let (x, y) = (&b[*f], &c[*f]);
        if x != y {
            out.push(format!("{f}: {x} -> {y}"));
        }
    }
    if b["build_config"] != c["build_config"] {
        out.push("build_config: differs (see env.json of each run)".into());
    }
    out.extend(knobs);
    let setting = |e: &serde_json::Value, k: &str| {
        e["settings"][k]
            .as_str()
            .map_or("-".to_string(), str::to_string)
    };
    for k in SETTINGS_COMPARED.iter().chain(rundir::PLANT_SETTINGS) {
        let (x, y) = (setting(&b, k), setting(&c, k));
        if x != y {
            out.push(format!("{k}: {x} -> {y}"));
        }
    }
    out
}

/// Each recorded variable (env.json `env`: the knobs that change kernels or timings) the
/// two sides set differently, by name: (name, the base's value, the candidate's), `None`
/// where a side left it unset. `compare` names them; `opbench predict --knob` reads the
/// knob a pair set from them.
pub fn knobs_differing<'e>(
    base: &'e Env,
    cand: &'e Env,
) -> Vec<(&'e str, Option<&'e str>, Option<&'e str>)> {
    let names: std::collections::BTreeSet<&String> =
        base.env.keys().chain(cand.env.keys()).collect();
    names
        .into_iter()
        .map(|k| {
            (
                k.as_str(),
                base.env.get(k).map(String::as_str),
                cand.env.get(k).map(String::as_str),
            )
        })
        .filter(|(_, b, c)| b != c)
        .collect()
}

/// [`knobs_differing`], one line each: `knob NAME: base -> cand` (`unset` where a side did
/// not set it).
fn knob_diff(b: &Env, c: &Env) -> Vec<String> {
    knobs_differing(b, c)
        .into_iter()
        .map(|(k, x, y)| {
            format!(
                "knob {k}: {} -> {}",
                x.unwrap_or("unset"),
                y.unwrap_or("unset")
            )
        })
        .collect()
}

/// The settings (env.json `settings`) whose difference can change what a sample measures,
/// besides the plants ([`rundir::PLANT_SETTINGS`]).
const SETTINGS_COMPARED: &[&str] = &[
    rundir::TIMING_METHOD_SETTING,
    "design",
    "profile",
    "samples",
    "warmup_ms",
    "measure_ms",
    "sample_ms",
    "placement",
];

/// Whether `base` and `cand` are the two sides of one paired run (`opbench ab` wrote them
/// side by side, each naming the other as `paired_with`): their rounds are then matched,
/// round r of each side taken in the same window.
pub fn paired_sides(base: Option<&Env>, cand: Option<&Env>) -> bool {
    let (Some(b), Some(c)) = (base, cand) else {
        return false;
    };
    let names = |e: &Env, other: &Env| {
        e.settings.get("design").map(String::as_str) == Some("paired")
            && e.settings.get("paired_with").is_some_and(|p| {
                std::path::Path::new(p)
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy() == other.run_id)
            })
    };
    names(b, c) && names(c, b)
}

/// Why speed verdicts are withheld: the runs were timed by different timing code (their
/// `timing_method` settings differ; a run from before it was recorded has none), so a
/// change between them may be the method's. `None` when both record the same, or neither.
pub fn method_changed(base: Option<&Env>, cand: Option<&Env>) -> Option<String> {
    let method =
        |e: Option<&Env>| e.and_then(|e| e.settings.get(rundir::TIMING_METHOD_SETTING).cloned());
    let (b, c) = (method(base), method(cand));
    (b != c).then(|| {
        let name = |m: Option<String>| m.unwrap_or_else(|| "unrecorded (an older opbench)".into());
        format!(
            "the runs were timed by different timing code ({} {} -> {}): their times are not \
             comparable, so no case or family is called slower, faster or same; measure both \
             builds with one opbench (opbench ab pairs them)",
            rundir::TIMING_METHOD_SETTING,
            name(b),
            name(c)
        )
    })
}

/// Why no speed verdict: the runs are of two kinds of machine (another card, or a CPU
/// against a GPU; on CPU runs, another CPU model), so a change between them is the
/// machine's. `None` when both are of one kind, or a side records none.
pub fn machine_changed(base: Option<&Env>, cand: Option<&Env>) -> Option<String> {
    let (b, c) = (base?, cand?);
    let kind = |e: &Env| -> String {
        match &e.device_name {
            Some(d) if e.backend != "cpu" => format!("{} {d}", e.backend),
            _ => format!("{} {}", e.backend, e.cpu_model),
        }
    };
    let (kb, kc) = (kind(b), kind(c));
    (kb != kc).then(|| {
        format!(
            "the runs are of two kinds of machine ({kb} -> {kc}): a change between them is the \
             machine's, not the build's; compare runs of one kind of machine"
        )
    })
}

/// Why no speed verdict where both sides are one run (the same directory, or the same
/// `run_id`): every ratio is 1 by construction, so the comparison tests nothing.
pub fn same_run(base: &Run, cand: &Run) -> Option<String> {
    let canon = |r: &Run| std::fs::canonicalize(&r.dir).unwrap_or_else(|_| r.dir.clone());
    let id = |r: &Run| {
        r.env
            .as_ref()
            .map(|e| e.run_id.clone())
            .filter(|i| !i.is_empty())
    };
    let one = canon(base) == canon(cand) || (id(base).is_some() && id(base) == id(cand));
    one.then(|| {
        "base and candidate are one run: every ratio is 1 by construction, so this tests \
         nothing; compare two runs of the build (A/A) or of two builds"
            .to_string()
    })
}

/// env.json fields whose difference can change kernels or timings.
const ENV_FIELDS: &[&str] = &[
    "libtorch_version",
    "tch_version",
    "backend",
    "runtime_version",
    "device_name",
    "arch",
    "driver_version",
    "cudnn_version",
    "miopen_version",
    "hipblaslt_version",
    "sdp_enabled",
    "threads",
    "cpu_model",
    "os",
    "git_revision",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// A knob set on one side only, or to another value, is named with both sides; one set
    /// alike on both is not.
    #[test]
    fn a_knob_that_differs_is_named_with_both_sides() {
        let env = |vars: &[(&str, &str)]| Env {
            env: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Env::default()
        };
        let base = env(&[("HIP_FORCE_DEV_KERNARG", "1"), ("OMP_NUM_THREADS", "2")]);
        let cand = env(&[
            ("TORCH_BLAS_PREFER_HIPBLASLT", "1"),
            ("OMP_NUM_THREADS", "2"),
        ]);
        let diff = env_diff(Some(&base), Some(&cand));
        assert_eq!(
            diff,
            vec![
                "knob HIP_FORCE_DEV_KERNARG: 1 -> unset".to_string(),
                "knob TORCH_BLAS_PREFER_HIPBLASLT: unset -> 1".to_string(),
            ]
        );
        assert!(env_diff(Some(&base), Some(&base)).is_empty());
    }
}
