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
