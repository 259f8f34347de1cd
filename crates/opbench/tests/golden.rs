//! `opbench fit`, `predict` (both profiles, B = 1, 8, 64) and `compare` print the same
//! numbers on every published run as recorded in tests/golden/. fit and predict were
//! recorded with the binary of commit ec5a212, before the typed run model, and must not
//! move. compare was re-recorded when it learned executions (issue 13): a run with one
//! execution per side no longer gets a speed verdict for host-timed cases, so those lines
//! changed on purpose; the device-mode verdicts, ratios and intervals did not. predict's
//! refusal of the crosscheck run (which lacks cases) was re-recorded when it learned to name
//! every missing case at once instead of the first (issue 14); no number moved. predict's
//! outputs were re-recorded when it learned `--host-state` (issue 14, 2026-11-30): each
//! gained one line, the step in the other host state beside the chosen one; no line of the
//! recording changed (checked line by line when re-recorded). compare's outputs were
//! re-recorded when one-execution device rows learned the 20% between-process spread (issue
//! 14, 2026-11-30): 29 device lines moved from slower/faster to ambiguous with the flag
//! `single-execution`, the summary counts and the note above the table changed; no ratio,
//! interval or p moved. compare's outputs were re-recorded again when it learned
//! families, the moderated per-case test and the equivalence verdict (issue 30): every
//! ratio is the same median ratio; intervals and p are now Wald intervals on the log ratio
//! (one execution a side: from the samples' bootstrap standard error), the CSV gained the
//! `mde` and `divided_by` columns, the Markdown leads with the families; on the crosscheck
//! pair 22 device lines moved from same to ambiguous. compare's outputs were re-recorded
//! when `same` came to mean within ± the threshold alone (issue 46, 2026-12-03): on the
//! crosscheck pair one device line moved from same to ambiguous, on 3-4 one; the Markdown
//! opens with its verdict and reasons and explains its terms; no ratio or interval moved.
//! predict's outputs were re-recorded on 2026-12-03 (issue 49): the table sorted by cost,
//! a line naming the three costliest ops, and a note where the measured step's interval is
//! wider than ±10%; sorted line by line, nothing else changed. Then once more the same day
//! (issue 48): each output gained its closing "what would help" table; no line above it
//! changed. The transformers screens were re-recorded when the static cache was priced
//! from its parts (issue 48, 2026-12-03): on these runs, which lack the parts, only the
//! static row's reason changed, and again on 2026-12-04 when that reason named the
//! dynamic cache's parts it is priced against (one line each). history's output was
//! re-recorded on 2026-12-05, when nine published runs left the fixtures (issue 47): the H200
//! series lists fewer runs and builds; no change point or verdict moved. predict's outputs
//! were re-recorded on 2026-12-07 (issue 81): the command that adds what a run lacks repeats
//! the run's samples and budgets and stands on lines of its own (on the refusals), its note
//! before it; no number moved. Then the same day, when what would help came to rank by the
//! gain, a change that gains nothing ("no gain here") below every one that gains: rows
//! moved and gained that note; no number moved. compare's outputs were re-recorded the same
//! day: its verdict says the verdict (`same`, `faster`, or `ambiguous (±X%), not a pass` in
//! place of "no regression found" where a global family is ambiguous), its prose wraps at
//! 160, the 2× list is a line a case, those from a base below the no-op call counted; no
//! ratio, interval or verdict of a case or family moved. Every output is
//! compared line by line in its order (fit and compare were
//! compared as sorted lines until 2026-12-03, when they were re-recorded in the schema's
//! key order with the same lines).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::{Path, PathBuf};
use std::process::Command;

const RUNS: [(&str, &str, &str); 5] = [
    (
        "2026-11-29-intel-r-xeon-r-processor-cpu-torch2.11.0",
        "qwen3-0.6b",
        "128",
    ),
    (
        "2026-11-29-nvidia-h200-cuda-torch2.11.0",
        "qwen3-0.6b",
        "1024",
    ),
    (
        "2026-11-29-nvidia-h200-cuda-torch2.11.0-crosscheck",
        "qwen3-0.6b",
        "1024",
    ),
    (
        "2026-11-29-nvidia-h200-cuda-torch2.11.0-decode-device",
        "qwen3-1.7b",
        "1024",
    ),
    (
        "2026-11-29-nvidia-h200-cuda-torch2.11.0-qwen3-1.7b",
        "qwen3-1.7b",
        "1024",
    ),
];

/// Where the runs are read from, as `results/RUN`: the fixture copy of the published runs
/// (the printed paths are relative to it, as they were when read from the repository's
/// results/).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../analysis/tests/fixtures/published")
}

/// Run opbench in `cwd`; stdout then stderr, and the exit line the recording script wrote.
fn output(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_opbench"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    format!(
        "{}{}exit {}\n",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.status.code().unwrap()
    )
}

/// `got` is golden file `name`'s text; with UPDATE_GOLDEN=1 set it becomes it (for a change
/// of output that is meant: review the diff before committing it).
fn assert_golden(name: &str, got: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(name);
        std::fs::write(path, got).unwrap();
        return;
    }
    assert_eq!(got, golden(name), "{name}");
}

fn golden(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(name),
    )
    .unwrap()
}

/// The table's `ms alone` column (a step's calls of the op, each alone) adds up to the "each op alone … would add up to" total it
/// shares are of, within 0.5% (a refusal has no table).
fn table_adds_up(text: &str, name: &str) {
    let Some(total) = text.lines().find_map(|l| {
        let rest = l.split("would add up to ").nth(1)?;
        rest.split(" ms").next()?.parse::<f64>().ok()
    }) else {
        return;
    };
    // each row ends "… ms-alone share source device"
    let sum: f64 = text
        .lines()
        .skip_while(|l| !l.starts_with("op "))
        .skip(1)
        .take_while(|l| !l.starts_with("sources:"))
        .map(|l| {
            l.split_whitespace()
                .nth_back(3)
                .unwrap()
                .parse::<f64>()
                .unwrap()
        })
        .sum();
    assert!(
        (sum - total).abs() <= 0.005 * total,
        "{name}: the rows add up to {sum:.3} ms, the total is {total:.3} ms"
    );
}

#[test]
fn predict_prints_what_it_printed() {
    let mut checked = 0;
    for (i, (run, model, ctx)) in RUNS.iter().enumerate() {
        let dir = format!("results/{run}");
        for profile in ["hf-eager", "fused"] {
            for b in ["1", "8", "64"] {
                let args = [
                    "predict",
                    &dir,
                    "--model",
                    model,
                    "--batch",
                    b,
                    "--ctx",
                    ctx,
                    "--profile",
                    profile,
                ];
                let name = format!("predict-{i}-{profile}-{b}.txt");
                assert_golden(&name, &output(&root(), &args));
                table_adds_up(&golden(&name), &format!("predict-{i}-{profile}-{b}"));
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 30);
}

#[test]
fn fit_prints_what_it_printed() {
    for (i, (run, ..)) in RUNS.iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("run");
        std::fs::create_dir(&copy).unwrap();
        let from = root().join("results").join(run);
        for f in [
            "env.json",
            "results.csv",
            "results.csv.gz",
            "samples.csv.gz",
        ] {
            // a fixture keeps its larger files gzip'd: whichever is there
            if from.join(f).is_file() {
                std::fs::copy(from.join(f), copy.join(f)).unwrap();
            }
        }
        let got = output(tmp.path(), &["fit", "run"]);
        let want = golden(&format!("fit-{i}.txt"));
        assert_eq!(got, want, "fit {run}");
    }
}

#[test]
fn compare_prints_what_it_printed() {
    let dir = |i: usize| format!("results/{}", RUNS[i].0);
    for (a, b, extra, name) in [
        (1, 2, None, "compare-1-2.txt"),
        (1, 2, Some("csv"), "compare-1-2-csv.txt"),
        (3, 4, None, "compare-3-4.txt"),
        (0, 0, None, "compare-0-0.txt"),
    ] {
        let (da, db) = (dir(a), dir(b));
        let mut args = vec!["compare", &da, &db];
        if let Some(f) = extra {
            args.extend(["--format", f]);
        }
        let got = output(&root(), &args);
        assert_golden(name, &got);
    }
}

/// The published run a fixture folder's `published` file names, as a path from the
/// fixtures' folder (crates/analysis/tests/fixtures, four levels under the root).
fn published(fixtures: &Path, name: &str) -> String {
    let rel = std::fs::read_to_string(fixtures.join(name).join("published")).unwrap();
    format!("../../../../{}", rel.trim())
}

/// The transformers profile's first screen, on the GPU (the H200 run of what would help)
/// and the CPU (the published CPU run): recorded 2026-12-03 (issue 49), and its split adds
/// up to its total.
#[test]
fn predict_transformers_prints_what_it_printed_and_its_parts_add_up() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../analysis/tests/fixtures");
    // the H200 run of what would help, published in results/
    let help = published(&fixtures, "help-2026-12-03");
    let cpu = published(&fixtures, "stack-2026-12-01");
    let cases = [
        (help.as_str(), "1024", "1", "gpu-1"),
        (help.as_str(), "1024", "64", "gpu-64"),
        (cpu.as_str(), "128", "1", "cpu-1"),
    ];
    for (run, ctx, b, name) in cases {
        let args = [
            "predict",
            run,
            "--model",
            "qwen3-0.6b",
            "--batch",
            b,
            "--ctx",
            ctx,
            "--profile",
            "transformers",
        ];
        let got = output(&fixtures, &args);
        assert_golden(&format!("predict-transformers-{name}.txt"), &got);
        table_adds_up(&got, name);
        let ms = |line: &str| -> Vec<f64> {
            line.split(" ms")
                .filter_map(|s| s.rsplit(' ').next()?.parse().ok())
                .collect()
        };
        let split = got
            .lines()
            .find(|l| l.starts_with("split of the predicted step"))
            .unwrap();
        let v = ms(split);
        assert!(v.len() >= 3, "{split}");
        assert!(
            (v[0] + v[1] - v[2]).abs() <= 0.005 * v[2],
            "{name}: {split}"
        );
        if let Some(token) = logical(&got, "  where a token's time goes") {
            let parts: f64 = ms(&token).iter().sum();
            let total = ms(&logical(&got, "generate() per new token").unwrap())[0];
            assert!(
                (parts - total).abs() <= 0.005 * total,
                "{name}: {parts} vs {total}"
            );
        }
    }
}

/// The printed line that starts with `start` and its continuations (predict breaks a line
/// over 160 characters at a space, continuing it 4 spaces beyond its indent), joined.
fn logical(text: &str, start: &str) -> Option<String> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(start));
    let first = lines.next()?;
    let indent = |l: &str| l.len() - l.trim_start().len();
    let cont = " ".repeat(indent(first) + 4);
    let mut out = first.to_string();
    for l in lines.take_while(|l| l.starts_with(&cont) && indent(l) == cont.len()) {
        out.push(' ');
        out.push_str(l.trim_start());
    }
    Some(out)
}

/// An inconclusive pair: the CPU reference's torch 2.11.0 against 2.15.0, five executions
/// a side (recorded 2026-12-03, issue 49): exit 0 with the resolution it reached and what
/// would resolve ±3%.
#[test]
fn compare_of_an_inconclusive_pair_prints_what_it_printed() {
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../analysis/tests/fixtures/published");
    let got = output(
        &fixtures,
        &[
            "compare",
            "results/2026-11-30-intel-r-xeon-r-processor-cpu-torch2.11.0-x5",
            "results/2026-11-30-intel-r-xeon-r-processor-cpu-torch2.15.0-x5",
        ],
    );
    assert_golden("compare-cpu-inconclusive.txt", &got);
}

/// compare's first screen gives its exit code and, for exit 1, every reason, within its
/// first 10 lines (issue 49), on each recorded comparison; exit 3 says why no speed
/// verdict; exit 0 the smallest change it could call, and where that is beyond ±5%, the
/// `--against` command (issue 80).
#[test]
fn compare_says_its_exit_and_why_in_its_first_ten_lines() {
    for name in [
        "compare-0-0.txt",
        "compare-1-2.txt",
        "compare-3-4.txt",
        "compare-cpu-inconclusive.txt",
    ] {
        let text = golden(name);
        let exit = text.lines().last().unwrap();
        let head: Vec<&str> = text.lines().take(10).collect();
        assert!(head.iter().any(|l| l.starts_with("**Verdict")), "{name}");
        let verdict = &logical(&text, "**Verdict").unwrap();
        if exit == "exit 1" {
            assert!(
                verdict.contains("exit 1") && verdict.contains("because"),
                "{name}"
            );
            assert!(
                head.iter().any(|l| l.starts_with("- ")),
                "{name}: no reason"
            );
        } else {
            assert!(verdict.contains(exit), "{name}: {verdict}");
            if exit == "exit 3" {
                assert!(verdict.contains("no speed verdict: "), "{name}: {verdict}");
            } else {
                assert_eq!(exit, "exit 0", "{name}");
                assert!(
                    verdict.contains("the smallest change it could call"),
                    "{name}"
                );
            }
            if verdict.contains("cannot resolve") {
                assert!(verdict.contains("--against"), "{name}: no next step");
            }
        }
    }
}

/// history's first screen on the fixture copy of the published runs (one to 25 runs a
/// build; the CPU series has 2 builds): its verdict, exit code and why on its first lines,
/// and what it cannot see (recorded 2026-12-03, issue 49).
#[test]
fn history_prints_what_it_printed_and_says_what_it_cannot_see() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../analysis/tests/fixtures");
    let got = output(&fixtures, &["history", "published/results"]);
    assert_golden("history-published.txt", &got);
    let head: Vec<&str> = got.lines().take(10).collect();
    let verdict = head.iter().find(|l| l.starts_with("**Verdict")).unwrap();
    assert!(
        verdict.contains("exit 0") && got.ends_with("exit 0\n"),
        "{got}"
    );
    // the term it decides by, and the series too short to decide, named up front
    assert!(verdict.contains("change points") && verdict.contains("steps by"));
    assert!(verdict.contains("cannot show a change yet"), "{verdict}");
}

/// Every published run in `results/` keeps its verdicts: predict's answer (B = 1, each
/// run's model and L), `compare`'s verdict and exit for every ordered pair, and history's
/// over the folder. A refactor changes none of them (issue 70); a change of method that
/// moves one shows here, line by line, and its golden is rewritten on purpose
/// (UPDATE_GOLDEN=1, reviewed).
#[test]
fn every_published_run_keeps_its_verdicts() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut runs: Vec<String> = std::fs::read_dir(repo.join("results"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| format!("results/{}", e.file_name().to_string_lossy()))
        .collect();
    runs.sort();
    assert!(runs.len() >= 5, "{runs:?}");
    // the first line that starts so, with its continuations (lines wrap at 160), and the exit
    let first = |text: &str, starts: &[&str]| -> String {
        let line = text
            .lines()
            .find(|l| starts.iter().any(|s| l.starts_with(s)))
            .and_then(|l| logical(text, l));
        line.into_iter()
            .chain(text.lines().last().map(str::to_string))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let mut got = String::new();
    for r in &runs {
        let out = output(&repo, &["predict", r, "--batch", "1"]);
        got += &format!("predict {r}: {}\n", first(&out, &["answer:", "opbench:"]));
    }
    let kind = |r: &str| -> String {
        let env = std::fs::read_to_string(repo.join(r).join("env.json")).unwrap();
        let env: serde_json::Value = serde_json::from_str(&env).unwrap();
        format!("{} {}", env["backend"], env["device_name"])
    };
    let mut judged = 0;
    for a in &runs {
        for b in runs.iter().filter(|b| *b != a) {
            let out = output(&repo, &["compare", a, b]);
            screen_holds(&out, &format!("{a} {b}"), kind(a) == kind(b));
            judged += usize::from(out.ends_with("exit 0\n"));
            got += &format!(
                "compare {a} {b}: {}\n",
                first(&out, &["**Verdict", "opbench:"])
            );
        }
    }
    assert!(judged >= 38, "{judged} pairs exit 0");
    let out = output(&repo, &["history", "results"]);
    got += &format!("history: {}\n", first(&out, &["**Verdict", "opbench:"]));
    assert_golden("published-verdicts.txt", &got);
}

/// compare's screen of two published runs (`out`, its exit line last): a pair of one kind
/// of machine with a case in common exits 0; one of two kinds exits 3 and says so in its
/// verdict line, within the first 8 lines. Either way at most 80 lines, and no printed
/// interval of zero width.
fn screen_holds(out: &str, pair: &str, one_kind: bool) {
    if out.ends_with("exit 2\n") {
        assert!(out.contains("no case in common"), "{pair}: {out}");
        return;
    }
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() <= 81, "{pair}: {} lines", lines.len());
    let verdict = lines
        .iter()
        .take(8)
        .find(|l| l.starts_with("**Verdict"))
        .unwrap_or_else(|| panic!("{pair}: no verdict in the first lines"));
    if one_kind {
        assert!(out.ends_with("exit 0\n"), "{pair}: {verdict}");
    } else {
        assert!(out.ends_with("exit 3\n"), "{pair}: {verdict}");
        assert!(
            verdict.contains("no speed verdict: the runs are of two kinds of machine"),
            "{pair}: {verdict}"
        );
    }
    for part in out.split('[').skip(1) {
        let Some((inside, _)) = part.split_once(']') else {
            continue;
        };
        if let Some((lo, hi)) = inside.split_once(", ") {
            assert_ne!(lo, hi, "{pair}: a zero-width interval [{inside}]");
        }
    }
}
