//! What criterion was asked to do, read from the same command line it reads.
//!
//! Criterion decides per benchmark id whether to run it, but a case must be prepared and
//! checked before `bench_function` is called (a failure is a row, not a benchmark). So we
//! read the filter, `--exact`, `--list` and `--test` the way criterion 0.8 does, and skip
//! preparing cases criterion would skip. Criterion 0.8 keeps its parsed command line
//! private (`Criterion::filter_matches` is not public, and a benchmark's routine must
//! iterate), so this is the one place that reads it after criterion: the filter, the mode,
//! `--sample-size` and whether a baseline is named (`front.rs` asks here).

use regex::Regex;

/// Criterion's mode for this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    /// `cargo bench`: measure and write the run directory.
    Bench,
    /// `cargo bench -- --test` / `cargo test --benches`: run each case once, check it,
    /// write nothing.
    Test,
    /// `--list`: name the benchmarks, touch nothing.
    List,
}

#[derive(Debug, Clone)]
pub struct Selection {
    pub mode: RunMode,
    filter: Filter,
    /// `--sample-size` when given on the command line (it overrides OPBENCH_SAMPLES).
    pub sample_size: Option<usize>,
    /// Whether the command line names a criterion baseline (`--save-baseline`,
    /// `--baseline`, `--baseline-lenient`, `--discard-baseline`): then criterion compares
    /// as it is told, else only with the baseline opbench names.
    pub names_baseline: bool,
}

#[derive(Debug, Clone)]
enum Filter {
    All,
    Regex(Regex),
    Exact(String),
    None,
}

/// Options of criterion 0.8 that name a baseline and take its name (`--discard-baseline`
/// names one too, with no value).
const BASELINE: &[&str] = &[
    "-s",
    "--save-baseline",
    "-b",
    "--baseline",
    "--baseline-lenient",
];

/// Options of criterion 0.8 that take a value (so the value is not the filter), besides
/// [`BASELINE`]'s.
const WITH_VALUE: &[&str] = &[
    "-c",
    "--color",
    "--colour",
    "--format",
    "--profile-time",
    "--load-baseline",
    "--sample-size",
    "--warm-up-time",
    "--measurement-time",
    "--nresamples",
    "--noise-threshold",
    "--confidence-level",
    "--significance-level",
    "--plotting-backend",
    "--output-format",
];

impl Selection {
    pub fn from_args() -> Result<Self, String> {
        Self::parse(std::env::args().skip(1))
    }

    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let (mut bench, mut test, mut list, mut exact, mut ignored) =
            (false, false, false, false, false);
        let mut filter: Option<String> = None;
        let (mut sample_size, mut names_baseline) = (None, false);
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            let (name, inline) = match a.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
                _ => (a.clone(), None),
            };
            let baseline = BASELINE.contains(&name.as_str());
            names_baseline |= baseline || name == "--discard-baseline";
            match name.as_str() {
                "--bench" => bench = true,
                "--test" => test = true,
                "--list" => list = true,
                "--exact" => exact = true,
                "--ignored" => ignored = true,
                n if baseline || WITH_VALUE.contains(&n) => {
                    let value = inline.or_else(|| it.next());
                    if n == "--sample-size" {
                        sample_size = value.and_then(|v| v.parse().ok());
                    }
                }
                n if n.starts_with('-') => {}
                _ => {
                    if filter.is_none() {
                        filter = Some(a);
                    }
                }
            }
        }
        let mode = if list {
            RunMode::List
        } else if test || !bench {
            RunMode::Test
        } else {
            RunMode::Bench
        };
        let filter = match (ignored, filter, exact) {
            (true, _, _) => Filter::None,
            (false, None, _) => Filter::All,
            (false, Some(f), true) => Filter::Exact(f),
            (false, Some(f), false) => {
                Filter::Regex(Regex::new(&f).map_err(|e| format!("benchmark filter `{f}`: {e}"))?)
            }
        };
        Ok(Selection {
            mode,
            filter,
            sample_size,
            names_baseline,
        })
    }

    /// Would criterion run the benchmark with this full id (`group/function/parameter`)?
    pub fn matches(&self, id: &str) -> bool {
        match &self.filter {
            Filter::All => true,
            Filter::Regex(r) => r.is_match(id),
            Filter::Exact(e) => e == id,
            Filter::None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(args: &[&str]) -> Selection {
        Selection::parse(args.iter().map(|s| s.to_string())).unwrap()
    }

    #[test]
    fn reads_criterion_arguments() {
        let s = sel(&["--bench"]);
        assert_eq!(s.mode, RunMode::Bench);
        assert!(s.matches("linear/aten/q_proj"));
        let s = sel(&["--bench", "--save-baseline", "new", "q_proj"]);
        assert!(s.matches("linear/aten/q_proj/x") && !s.matches("linear/aten/k_proj/x"));
        let s = sel(&["--bench", "--test"]);
        assert_eq!(s.mode, RunMode::Test);
        assert_eq!(sel(&[]).mode, RunMode::Test);
        assert_eq!(sel(&["--bench", "--list"]).mode, RunMode::List);
        let s = sel(&["--bench", "--exact", "a/b"]);
        assert!(s.matches("a/b") && !s.matches("a/b/c"));
        assert_eq!(sel(&["--bench", "--sample-size=30"]).sample_size, Some(30));
        assert!(!sel(&["--bench", "--ignored"]).matches("x"));
        assert!(Selection::parse(["--bench".into(), "(".into()]).is_err());
        // a named baseline, its value not the filter
        let s = sel(&["--bench", "--baseline", "old", "q_proj"]);
        assert!(s.names_baseline && s.matches("linear/aten/q_proj/x"));
        assert!(sel(&["--bench", "--save-baseline=new"]).names_baseline);
        assert!(sel(&["--bench", "--discard-baseline"]).names_baseline);
        assert!(!sel(&["--bench", "--sample-size", "30"]).names_baseline);
    }
}
