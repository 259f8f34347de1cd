//! The house's layers: the engine does not know the A/B driver, no module of duet or
//! shapes imports one that imports it back, and the test fixtures hold data whose source
//! is said, not scripts.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_engine_does_not_depend_on_the_ab_driver() {
    let toml = std::fs::read_to_string(root().join("crates/harness/Cargo.toml")).unwrap();
    let deps: Vec<&str> = toml
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split(['.', '=', ' ']).next())
        .filter(|n| !n.is_empty())
        .collect();
    assert!(
        deps.contains(&"wire"),
        "harness speaks the protocol: {deps:?}"
    );
    assert!(!deps.contains(&"duet"), "harness imports duet: {deps:?}");
}

/// The modules of a crate's `src/lib.rs` and what each refers to of the others: `crate::m`
/// paths, `use crate::{m::…, …}` groups, and names the crate root re-exports from `m`
/// (`crate::Name`). Comments and `#[cfg(test)]` modules do not count.
fn imports(lib: &str, files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    // the crate root's re-exports: name -> module
    let mut from: BTreeMap<String, String> = BTreeMap::new();
    for l in lib
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("pub use "))
    {
        let rest = l.trim_start_matches("pub use ").trim_end_matches(';');
        if let Some((m, names)) = rest.split_once("::") {
            for n in names.trim_matches(['{', '}']).split(',') {
                from.insert(n.trim().to_string(), m.to_string());
            }
        }
    }
    let code = |text: &str| -> String {
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        lines.join("\n")
    };
    let mut out = BTreeMap::new();
    for (m, text) in files {
        let text = code(text);
        let mut deps = BTreeSet::new();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                group.split(',').collect()
            } else {
                vec![rest]
            };
            for n in names {
                let n: String = n
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let target = if files.contains_key(&n) {
                    Some(n)
                } else {
                    from.get(&n).cloned()
                };
                deps.extend(target.filter(|t| t != m));
            }
        }
        out.insert(m.clone(), deps);
    }
    out
}

/// Each module that reaches itself through the others, with the way back.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    fn path(g: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> Option<Vec<String>> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![vec![from.to_string()]];
        while let Some(p) = stack.pop() {
            let last = p.last().unwrap().clone();
            for n in g.get(&last).into_iter().flatten() {
                if n == to {
                    return Some(p);
                }
                if seen.insert(n.clone()) {
                    let mut q = p.clone();
                    q.push(n.clone());
                    stack.push(q);
                }
            }
        }
        None
    }
    g.keys()
        .filter_map(|m| Some(format!("{m} -> {}", path(g, m, m)?[1..].join(" -> "))))
        .collect()
}

fn crate_modules(name: &str) -> (String, BTreeMap<String, String>) {
    let src = root().join("crates").join(name).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_string_lossy().to_string();
        if p.extension().is_some_and(|x| x == "rs") && stem != "lib" {
            files.insert(stem, std::fs::read_to_string(&p).unwrap());
        } else if p.is_dir() && p.join("mod.rs").is_file() {
            files.insert(stem, std::fs::read_to_string(p.join("mod.rs")).unwrap());
        }
    }
    (lib, files)
}

#[test]
fn a_module_cycle_is_found_through_paths_groups_and_the_roots_reexports() {
    let files: BTreeMap<String, String> = [
        ("a", "use crate::b::X;\n// crate::c in a comment\n"),
        ("b", "use crate::{Y, d};\n"),
        ("c", "fn f() { crate::a::g() }\n"),
        ("d", "#[cfg(test)]\nmod tests { use crate::a; }\n"),
        ("e", "use crate::d::Z;\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let lib = "mod a;\npub use c::Y;\n";
    let g = imports(lib, &files);
    assert_eq!(g["a"], BTreeSet::from(["b".to_string()]));
    // b reaches c through the root's re-export of Y, and c calls back into a
    assert_eq!(g["b"], BTreeSet::from(["c".to_string(), "d".to_string()]));
    assert!(g["d"].is_empty(), "a test module's imports do not count");
    let found = cycles(&g);
    assert!(
        found.iter().any(|c| c.starts_with("a -> b -> c")),
        "{found:?}"
    );
    assert!(!found.iter().any(|c| c.starts_with("e ")), "{found:?}");
}

#[test]
fn no_module_of_duet_or_shapes_imports_one_that_imports_it_back() {
    for name in ["duet", "shapes"] {
        let (lib, files) = crate_modules(name);
        let found = cycles(&imports(&lib, &files));
        assert!(found.is_empty(), "{name}: module cycles: {found:?}");
    }
}

#[test]
fn every_fixture_says_where_its_data_came_from_and_holds_no_script_or_notes() {
    for c in std::fs::read_dir(root().join("crates")).unwrap() {
        let fixtures = c.unwrap().path().join("tests/fixtures");
        let Ok(entries) = std::fs::read_dir(&fixtures) else {
            continue;
        };
        for e in entries {
            let dir = e.unwrap().path();
            if !dir.is_dir() {
                continue;
            }
            let files = walk(&dir);
            let scripts: Vec<&PathBuf> = files
                .iter()
                .filter(|p| p.extension().is_some_and(|x| x == "py" || x == "sh"))
                .collect();
            assert!(
                scripts.is_empty(),
                "scripts belong in docs/experiments: {scripts:?}"
            );
            // notes too: the one README.md a folder may have is read below
            let notes: Vec<&PathBuf> = files
                .iter()
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .filter(|p| p.parent() != Some(dir.as_path()) || !p.ends_with("README.md"))
                .collect();
            assert!(
                notes.is_empty(),
                "notes belong in docs/experiments: {notes:?}"
            );
            // a published run is kept once, in results/ (the file names it)
            if dir.join("published").is_file() {
                continue;
            }
            // its own README.md, or the fixtures' README.md naming it
            let name = dir.file_name().unwrap().to_string_lossy().to_string();
            let common = std::fs::read_to_string(fixtures.join("README.md")).unwrap_or_default();
            let readme = std::fs::read_to_string(dir.join("README.md")).unwrap_or_else(|_| {
                if common.contains(&name) {
                    common
                } else {
                    String::new()
                }
            });
            let says = [
                "results/",
                "docs/experiments/",
                "git show",
                "scripts/",
                "opbench ",
                "Hugging Face",
            ]
            .iter()
            .any(|w| readme.contains(w));
            assert!(
                says,
                "{}: no README.md names its source (a command, a results/ run, a commit)",
                dir.display()
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
