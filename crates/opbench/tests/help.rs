//! Help is text a person reads: every verb's `--help` keeps its lines within 100
//! characters, `opbench --help` lists every verb, and `--help` never runs the verb.
#![allow(clippy::unwrap_used)]

use std::process::Command;

fn opbench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_opbench"))
        .args(args)
        .output()
        .unwrap()
}

/// The verbs `opbench --help` lists.
fn verbs() -> Vec<String> {
    let out = String::from_utf8(opbench(&["--help"]).stdout).unwrap();
    out.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|v| v != "help")
        .collect()
}

#[test]
fn every_verb_is_listed_and_its_help_fits_100_columns() {
    let verbs = verbs();
    for v in [
        "doctor", "shapes", "env", "settings", "peer", "ingest", "state", "fit", "predict",
        "merge", "ab", "compare", "report", "publish", "history", "export",
    ] {
        assert!(
            verbs.iter().any(|x| x == v),
            "{v} not in `opbench --help`: {verbs:?}"
        );
    }
    let top = String::from_utf8(opbench(&["--help"]).stdout).unwrap();
    let first = top
        .lines()
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    for v in ["doctor", "ab", "peer", "state"] {
        assert!(first.contains(v), "the first line leaves out {v}: {first}");
    }
    for v in std::iter::once(String::new()).chain(verbs) {
        let args: Vec<&str> = [v.as_str(), "--help"]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let out = opbench(&args);
        assert!(out.status.success(), "{v} --help: {:?}", out.status);
        let text = String::from_utf8(out.stdout).unwrap();
        let long: Vec<&str> = text.lines().filter(|l| l.chars().count() > 100).collect();
        assert!(
            long.is_empty(),
            "`opbench {v} --help` has lines over 100: {long:?}"
        );
    }
}

/// A run its env.json says was made on a busy machine: predict's and compare's first line
/// says so, before any figure.
#[test]
fn predict_and_compare_open_with_the_busy_machine_line() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let src = root.join("results/2026-12-01-intel-r-xeon-r-processor-cpu-torch2.11.0-stack-x1");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("busy");
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        if e.path().is_file() {
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
    let env_path = dir.join("env.json");
    let mut env: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&env_path).unwrap()).unwrap();
    env["busy"] = "busy machine: 28 of 28 linear samples stalled (planted)".into();
    std::fs::write(&env_path, env.to_string()).unwrap();
    let d = dir.to_str().unwrap();
    let out = opbench(&["predict", d, "--batch", "1"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("busy machine: 28 of 28 linear samples"),
        "{}",
        &text[..text.len().min(300)]
    );
    let out = opbench(&["compare", src.to_str().unwrap(), d]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("cand: busy machine: 28 of 28"),
        "{}",
        &text[..text.len().min(300)]
    );
    // the published run itself is not busy: no such line
    let out = opbench(&["predict", src.to_str().unwrap(), "--batch", "1"]);
    assert!(
        !String::from_utf8(out.stdout)
            .unwrap()
            .contains("busy machine")
    );
}

/// scripts/doctor's help is text run.py prints without building opbench (issue 81: it built
/// first): it names every option of `opbench doctor --help`, the one it stands for.
#[test]
fn scripts_doctor_help_names_every_option_of_opbench_doctor() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let ours = Command::new("python3")
        .arg(root.join("scripts/run.py"))
        .args(["doctor", "--help"])
        .output()
        .unwrap();
    assert!(ours.status.success(), "{ours:?}");
    let ours = String::from_utf8(ours.stdout).unwrap();
    let clap = String::from_utf8(opbench(&["doctor", "--help"]).stdout).unwrap();
    let options: Vec<&str> = clap
        .split_whitespace()
        .filter(|w| w.starts_with("--") && *w != "--help")
        .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
        .collect();
    assert!(options.len() >= 4, "{clap}");
    for o in options {
        assert!(ours.contains(o), "scripts/doctor --help lacks {o}:\n{ours}");
    }
}
