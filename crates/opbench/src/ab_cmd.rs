//! `opbench ab`: two builds compared in pairs (the `duet` crate): one worker per side per
//! bench binary, turns sample by sample, each case until it is decided or its share of the
//! budget is spent.

use std::path::PathBuf;
use std::time::Duration;

use duet::driver::{Budget, Group, Progress, Settings};
use duet::worker::{Spawn, Worker};

use crate::CliError;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The base (old) build's bench binaries (`bench-linear`, `target/release/deps/linear-…`),
    /// each started as a worker; repeat the option for each.
    #[arg(long, required_unless_present_any = ["judge", "base_python"], num_args = 1..)]
    base: Vec<PathBuf>,
    /// The candidate (new) build's bench binaries, in the same order as --base.
    #[arg(long, required_unless_present_any = ["judge", "base_python"], num_args = 1..)]
    cand: Vec<PathBuf>,
    /// The base build's Python (its torch, and transformers where installed): scripts/peer.py
    /// runs in it as a worker too (group `peer`), so that the comparison covers your stack
    /// from Python: HF transformers' step and generate() taken apart, a decoder layer, the op
    /// calls. The model, batches and cache length are OPBENCH_MODEL's and OPBENCH_PROFILE's.
    #[arg(long, requires = "cand_python", conflicts_with = "judge")]
    base_python: Option<PathBuf>,
    /// The candidate build's Python, as --base-python.
    #[arg(long, requires = "base_python")]
    cand_python: Option<PathBuf>,
    /// With --base-python: only the Python op calls (`ops`) or only the HF step's sites
    /// (`step`).
    #[arg(long, requires = "base_python", value_parser = ["ops", "step"])]
    peer_only: Option<String>,
    /// Judge a stored comparison again instead of running one: RUNS/RUN names the
    /// `RUN-base` and `RUN-cand` run directories an earlier `opbench ab` wrote. Prints its
    /// summary by this opbench's estimator and writes its verdicts to `RUN-judged-ab.csv`.
    #[arg(long, value_name = "RUNS/RUN", conflicts_with_all = ["base", "cand"])]
    judge: Option<PathBuf>,
    /// A variable set for the base's workers only, NAME=VALUE (its torch's library folder,
    /// say); repeatable. Without OPBENCH_THREADS set, each side's workers get half the
    /// cores' worth of threads (both sides are alive at once), and without OPBENCH_CPUS
    /// both sides run on the same CPUs, the last of this process's, as many as a side's
    /// threads (they take turns, so each sample runs where the other side's just ran).
    #[arg(long, value_name = "NAME=VALUE")]
    base_env: Vec<String>,
    /// A variable set for the candidate's workers only, NAME=VALUE; repeatable. Calibration
    /// plants go here: `--cand-env OPBENCH_PLANT_PCT=10 --cand-env OPBENCH_PLANT_SCOPE=torch`
    /// (every torch call 10% dearer), `--cand-env OPBENCH_PLANT_DEVICE_PCT=3`.
    #[arg(long, value_name = "NAME=VALUE")]
    cand_env: Vec<String>,
    /// A regular expression on the case keys (`/decode/b(1|8|64)/`).
    #[arg(long)]
    filter: Option<String>,
    /// The comparison's time in seconds, kept: the first two rounds are planned inside it
    /// before any timing (fewer pairs a visit, else fewer cases, the rest listed as not
    /// run; exit 2 naming the least budget where not even half fit), a visit starts only if
    /// it ends inside it, and a later round only if it fits, then rounds of the
    /// device-timed cases alone while those fit. Default: one second a case, at most 600.
    #[arg(long)]
    budget: Option<f64>,
    /// A case is `same` when its interval lies inside ± this percentage, `slower` or
    /// `faster` when wholly beyond it. Default: from the term the run measured, per kind
    /// of case (3 × a case's between-round sd, from 1% to 3%; docs/method.md,
    /// "Tolerances").
    #[arg(long)]
    tolerance: Option<f64>,
    /// The same for a family of cases and the global verdicts. Default: 3 × the
    /// measured process term of the kind, from 0.5% to 1.5%.
    #[arg(long)]
    family_tolerance: Option<f64>,
    /// The wall-clock time each sample aims at, in ms.
    #[arg(long, default_value_t = 10.0)]
    sample_ms: f64,
    /// Warm-up per side per case, in ms.
    #[arg(long, default_value_t = 50.0)]
    warmup_ms: f64,
    /// Pairs a case takes in each of the first two rounds.
    #[arg(long, default_value_t = 8)]
    pairs: usize,
    /// After the first two rounds, at most this many pairs a visit, as those rounds'
    /// spreads make best (docs/method.md, "Pairs a visit").
    #[arg(long, default_value_t = 32)]
    max_pairs: usize,
    /// The most rounds (each in fresh worker processes, each case prepared afresh); cases
    /// are judged after 2, 4, 8 and 16 (and at the last round) and the decided ones drop
    /// out. The budget ends the rounds first where it is shorter.
    #[arg(long, default_value_t = 16)]
    rounds: usize,
    /// Where a device-timed case's tensors sit: made once a visit (`once`), or again in a
    /// fresh placement on both sides before each pair (`each-pair`: on an H100 it left the
    /// crates' shared device terms and halved the rounds; docs/method.md, "Placement").
    #[arg(long, value_enum, default_value_t = PlacementArg::Once)]
    placement: PlacementArg,
    /// Seed of the case order (default: the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Where `runs/` goes (default: OPBENCH_OUT, else target/opbench).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The run id: runs/RUN-base, -cand, -ab.csv, -compare.md (default: the time).
    #[arg(long)]
    run: Option<String>,
    /// How the summary names the base.
    #[arg(long, default_value = "base")]
    base_name: String,
    /// How the summary names the candidate.
    #[arg(long, default_value = "candidate")]
    cand_name: String,
}

/// `--placement`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PlacementArg {
    EachPair,
    Once,
}

fn pairs_of(vars: &[String], flag: &str) -> Result<Vec<(String, String)>, CliError> {
    vars.iter()
        .map(|v| {
            v.split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| CliError::input(format!("{flag} {v}: expected NAME=VALUE")))
        })
        .collect()
}

/// The group's name from a bench binary's file name: `bench-linear` and
/// `linear-0123abcd` both name `linear`.
fn group_name(exe: &std::path::Path) -> String {
    let stem = exe
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let stem = stem.strip_prefix("bench-").unwrap_or(&stem).to_string();
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            name.to_string()
        }
        _ => stem,
    }
}

fn settings(a: &Args) -> Result<Settings, CliError> {
    let pct = |x: f64, flag: &str| {
        (x > 0.0 && x < 100.0).then_some(x / 100.0).ok_or_else(|| {
            CliError::input(format!("{flag} {x}: expected a percentage in (0, 100)"))
        })
    };
    let ms = |x: f64, flag: &str| {
        (x >= 0.0 && x.is_finite())
            .then(|| Duration::from_secs_f64(x / 1e3))
            .ok_or_else(|| CliError::input(format!("{flag} {x}: expected milliseconds ≥ 0")))
    };
    if a.pairs < 2 {
        return Err(CliError::input(format!(
            "--pairs {}: expected 2 or more",
            a.pairs
        )));
    }
    if a.max_pairs < 2 {
        return Err(CliError::input(format!(
            "--max-pairs {}: expected 2 or more",
            a.max_pairs
        )));
    }
    if a.rounds < 2 {
        return Err(CliError::input(format!(
            "--rounds {}: expected 2 or more",
            a.rounds
        )));
    }
    let budget = match a.budget {
        Some(b) if b > 0.0 && b.is_finite() => Some(Duration::from_secs_f64(b)),
        Some(b) => {
            return Err(CliError::input(format!(
                "--budget {b}: expected seconds > 0"
            )));
        }
        None => None,
    };
    Ok(Settings {
        tolerance: a.tolerance.map(|t| pct(t, "--tolerance")).transpose()?,
        family_tolerance: a
            .family_tolerance
            .map(|t| pct(t, "--family-tolerance"))
            .transpose()?,
        sample: ms(a.sample_ms, "--sample-ms")?.max(Duration::from_micros(100)),
        warmup: ms(a.warmup_ms, "--warmup-ms")?,
        budget: budget.map_or(
            Budget::PerCase {
                each: Duration::from_secs(1),
                cap: Duration::from_secs(600),
            },
            Budget::Total,
        ),
        looks: stats::paired::Looks {
            max: a.rounds,
            ..stats::paired::Looks::default()
        },
        pairs: a.pairs,
        max_pairs: a.max_pairs,
        seed: a.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        }),
        filter: a.filter.clone(),
        cpus: None,
        timing_cpu: None,
        placement: match a.placement {
            PlacementArg::EachPair => duet::driver::Placement::EachPair,
            PlacementArg::Once => duet::driver::Placement::Once,
        },
    })
}

/// Where both sides' workers run, set in their variables unless given: half the cores'
/// worth of threads each (both sides are alive at once: with two intra-op threads each
/// on 2 cores, the idle side's pool contended with the timed side's, and one call read
/// 80 µs to 11 ms), on the same CPUs, the last of `may` (they take turns, so they never
/// contend, and each side's samples run where the other's ran a moment before: on a 2-core
/// VM, left to the scheduler, no case was `same` in an A/A; pinned, most were).
/// `threads` and `cpus` are the driver's OPBENCH_THREADS and OPBENCH_CPUS, which the
/// workers inherit. Returns the CPUs, for the summary.
fn place_workers(
    (threads, cpus): (Option<&str>, Option<&str>),
    may: &[usize],
    can_pin: bool,
    envs: [&mut Vec<(String, String)>; 2],
) -> Result<Option<String>, CliError> {
    let half = (may.len() / 2).max(1);
    let given = |env: &[(String, String)], k: &str| env.iter().any(|(n, _)| n == k);
    let [base_env, cand_env] = envs;
    if threads.is_none() {
        for env in [&mut *base_env, &mut *cand_env] {
            if !given(env, "OPBENCH_THREADS") {
                env.push(("OPBENCH_THREADS".into(), half.to_string()));
            }
        }
    }
    if let Some(list) = cpus {
        duet::cpus::parse(list)
            .map_err(|e| CliError::input(format!("OPBENCH_CPUS={list}: {e}")))?;
        return Ok(Some(list.to_string()));
    }
    if !can_pin
        || may.is_empty()
        || given(base_env, "OPBENCH_CPUS")
        || given(cand_env, "OPBENCH_CPUS")
    {
        return Ok(None);
    }
    let n = threads
        .and_then(|t| t.parse::<usize>().ok())
        .unwrap_or(half);
    let list = duet::cpus::format(&may[may.len() - n.clamp(1, may.len())..]);
    for env in [base_env, cand_env] {
        env.push(("OPBENCH_CPUS".into(), list.clone()));
    }
    Ok(Some(list))
}

/// The one CPU both sides' workers time a GPU case's samples on (`OPBENCH_TIMING_CPU`):
/// unless the driver's variable or a side's says otherwise, the last of the CPUs both run
/// on. Within a set of eight, the two sides' threads sat on different CPUs, and a visit's
/// pairs read one of them 1.3–1.5× slower for a second at a time (the H200,
/// docs/method.md, "CPUs"). Returns the setting, for the summary.
fn place_timing(
    (given, cpus): (Option<&str>, Option<&str>),
    envs: [&mut Vec<(String, String)>; 2],
) -> Option<String> {
    if let Some(g) = given {
        return Some(g.to_string());
    }
    let last = duet::cpus::parse(cpus?).ok()?.last().copied()?;
    let [b, c] = envs;
    if [&*b, &*c]
        .iter()
        .any(|e| e.iter().any(|(n, _)| n == "OPBENCH_TIMING_CPU"))
    {
        return None;
    }
    for env in [b, c] {
        env.push(("OPBENCH_TIMING_CPU".into(), last.to_string()));
    }
    Some(last.to_string())
}

/// Both sides' CPUs ([`place_workers`]) and timing CPU ([`place_timing`]), from the
/// driver's variables.
fn place_both(
    base_env: &mut Vec<(String, String)>,
    cand_env: &mut Vec<(String, String)>,
) -> Result<(Option<String>, Option<String>), CliError> {
    let cpus = place_workers(
        (
            settings::var("OPBENCH_THREADS").as_deref(),
            settings::var("OPBENCH_CPUS").as_deref(),
        ),
        &duet::cpus::allowed(),
        duet::cpus::CAN_PIN,
        [&mut *base_env, &mut *cand_env],
    )?;
    let timing = place_timing(
        (
            settings::var("OPBENCH_TIMING_CPU").as_deref(),
            cpus.as_deref(),
        ),
        [base_env, cand_env],
    );
    Ok((cpus, timing))
}

pub fn run(a: &Args) -> Result<u8, CliError> {
    if let Some(prefix) = &a.judge {
        return judge_stored(a, prefix);
    }
    if a.base.len() != a.cand.len() {
        return Err(CliError::input(format!(
            "--base names {} bench binaries and --cand {}: they pair in order",
            a.base.len(),
            a.cand.len()
        )));
    }
    for exe in a.base.iter().chain(&a.cand) {
        if !exe.is_file() {
            return Err(CliError::input(format!(
                "{}: no such bench binary",
                exe.display()
            )));
        }
    }
    let mut base_env = pairs_of(&a.base_env, "--base-env")?;
    let mut cand_env = pairs_of(&a.cand_env, "--cand-env")?;
    let (cpus, timing_cpu) = place_both(&mut base_env, &mut cand_env)?;
    let s = Settings {
        cpus,
        timing_cpu,
        ..settings(a)?
    };
    let mut groups = groups(a, &base_env, &cand_env)?;
    let out = a
        .out
        .clone()
        .or_else(|| settings::var("OPBENCH_OUT").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target/opbench"));
    let runs = out.join(rundir::layout::RUNS);
    std::fs::create_dir_all(&runs)
        .map_err(|e| CliError::input(format!("{}: {e}", runs.display())))?;
    let run_id = a.run.clone().unwrap_or_else(duet::write::default_run_id);
    // one line every ~10 s at most: a round's end does not print the same line again
    let mut last = std::time::Instant::now();
    let mut tell = |p: &Progress| {
        if let Some(plan) = &p.plan {
            eprintln!("{}", plan.line());
            return;
        }
        if last.elapsed() >= Duration::from_secs(10) {
            last = std::time::Instant::now();
            eprintln!(
                "opbench ab: {} of {} cases visited, {} decided, {:.0} s of {:.0} s",
                p.visited.min(p.cases),
                p.cases,
                p.decided,
                p.elapsed.as_secs_f64(),
                p.budget.as_secs_f64()
            );
        }
    };
    let outcome =
        duet::run(&mut groups, &s, &mut tell).map_err(|e| CliError::input(e.to_string()))?;
    let verdicts = duet::judge(&outcome);
    let w = duet::write::write(
        &runs,
        &run_id,
        &outcome,
        &verdicts,
        [a.base_name.as_str(), a.cand_name.as_str()],
    )
    .map_err(CliError::from)?;
    print!(
        "{}",
        duet::write::summary_md(&outcome, &verdicts, [&a.base_name, &a.cand_name])
    );
    println!(
        "\nopbench: base {}\nopbench: candidate {}\nopbench: verdicts {}\nopbench: summary {}",
        w.base.display(),
        w.cand.display(),
        w.csv.display(),
        w.summary.display()
    );
    Ok(verdicts.exit_code() as u8)
}

/// One group per bench binary (the same bench on both sides), and the peer's where both
/// sides name a Python: each side's workers started with that side's variables.
fn groups<'a>(
    a: &'a Args,
    base_env: &'a Vec<(String, String)>,
    cand_env: &'a Vec<(String, String)>,
) -> Result<Vec<Group<'a>>, CliError> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for (b, c) in a.base.iter().zip(&a.cand) {
        let name = group_name(b);
        if group_name(c) != name {
            return Err(CliError::input(format!(
                "--base {} and --cand {} are not the same bench",
                b.display(),
                c.display()
            )));
        }
        let spawn = |exe: &PathBuf, env: &Vec<(String, String)>, side: &str| {
            let sp = Spawn::bench(exe.clone(), env.clone(), format!("{side} {name}"));
            Box::new(move || sp.start().map(|p| Box::new(p) as Box<dyn Worker>))
                as duet::driver::Factory<'_>
        };
        groups.push(Group {
            name: name.clone(),
            base: spawn(b, base_env, "base"),
            cand: spawn(c, cand_env, "cand"),
        });
    }
    if let (Some(bp), Some(cp)) = (&a.base_python, &a.cand_python) {
        let w = peer_worker_args(a)?;
        let spawn = |py: &PathBuf, env: &Vec<(String, String)>, side: &str| {
            let sp =
                crate::peer_cmd::worker_spawn(py.clone(), &w, env.clone(), format!("{side} peer"));
            sp.map(|sp| {
                Box::new(move || sp.start().map(|p| Box::new(p) as Box<dyn Worker>))
                    as duet::driver::Factory<'_>
            })
        };
        groups.push(Group {
            name: "peer".into(),
            base: spawn(bp, base_env, "base")?,
            cand: spawn(cp, cand_env, "cand")?,
        });
    }
    Ok(groups)
}

/// The peer workers' model, batches and cache length: OPBENCH_MODEL's first model and
/// OPBENCH_PROFILE's grid, as the bench binaries read them; OPBENCH_DEVICE and
/// OPBENCH_DTYPE where set.
fn peer_worker_args(a: &Args) -> Result<crate::peer_cmd::WorkerArgs, CliError> {
    let (model, batches, ctx) = crate::peer_cmd::model_and_grid(
        settings::var("OPBENCH_MODEL").as_deref(),
        settings::var("OPBENCH_PROFILE").as_deref(),
    )?;
    let device = match settings::var("OPBENCH_DEVICE").as_deref() {
        Some("cpu") => Some("cpu".to_string()),
        Some("gpu") => Some("cuda".to_string()),
        _ => None,
    };
    Ok(crate::peer_cmd::WorkerArgs {
        model,
        batches,
        ctx,
        device,
        dtype: settings::var("OPBENCH_DTYPE").and_then(|d| d.split(',').next().map(str::to_string)),
        only: a.peer_only.clone(),
        user_generate: false,
    })
}

/// `--judge RUNS/RUN`: the stored comparison's summary, judged again.
fn judge_stored(a: &Args, prefix: &std::path::Path) -> Result<u8, CliError> {
    let bad =
        |e: &dyn std::fmt::Display| CliError::input(format!("--judge {}: {e}", prefix.display()));
    let run = prefix
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .ok_or_else(|| bad(&"names no run"))?;
    let runs = prefix.parent().unwrap_or(std::path::Path::new(""));
    let w = duet::write::Written::at(runs, &run);
    let load = |dir: &PathBuf| rundir::Run::load(dir).map_err(|e| bad(&e));
    let (base, cand) = (load(&w.base)?, load(&w.cand)?);
    let outcome = duet::replay::outcome(&base, &cand).map_err(|e| bad(&e))?;
    let verdicts = duet::judge(&outcome);
    print!(
        "{}",
        duet::write::summary_md(&outcome, &verdicts, [&a.base_name, &a.cand_name])
    );
    let csv = duet::write::Written::judged_csv(runs, &run);
    std::fs::write(&csv, duet::write::ab_csv(&verdicts))
        .map_err(|e| CliError::input(format!("{}: {e}", csv.display())))?;
    println!("\nopbench: verdicts {}", csv.display());
    Ok(verdicts.exit_code() as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bench_binary_names_its_group_whatever_cargo_called_it() {
        for (path, name) in [
            ("devbin/bench-linear", "linear"),
            ("target/release/deps/linear-c178e6e1e72cf1f1", "linear"),
            ("target/release/deps/bench-kv-cache", "kv-cache"),
            ("C:/x/rmsnorm-0123456789abcdef.exe", "rmsnorm"),
        ] {
            assert_eq!(group_name(std::path::Path::new(path)), name, "{path}");
        }
    }

    #[test]
    fn side_variables_are_name_value_pairs() {
        let ok = pairs_of(&["A=1".into(), "B=x=y".into()], "--cand-env").expect("pairs");
        assert_eq!(
            ok,
            vec![("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        let e = pairs_of(&["=1".into()], "--cand-env").expect_err("no name");
        assert!(e.message.contains("--cand-env =1"), "{}", e.message);
    }

    fn var<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    #[test]
    fn both_sides_run_on_the_same_cpus_the_last_half() {
        let (mut b, mut c) = (Vec::new(), vec![("OPBENCH_PLANT_PCT".into(), "10".into())]);
        let cpus = place_workers((None, None), &[0, 1, 2, 3], true, [&mut b, &mut c]).unwrap();
        assert_eq!(cpus.as_deref(), Some("2-3"));
        for env in [&b, &c] {
            assert_eq!(var(env, "OPBENCH_CPUS"), Some("2-3"));
            assert_eq!(var(env, "OPBENCH_THREADS"), Some("2"));
        }
        // one core: both on it
        let (mut b, mut c) = (Vec::new(), Vec::new());
        let one = place_workers((None, None), &[5], true, [&mut b, &mut c]).unwrap();
        assert_eq!(
            (one.as_deref(), var(&c, "OPBENCH_THREADS")),
            (Some("5"), Some("1"))
        );
    }

    #[test]
    fn both_sides_time_a_gpu_case_on_the_last_of_their_cpus_unless_told() {
        let (mut b, mut c) = (Vec::new(), Vec::new());
        let t = place_timing((None, Some("8-15")), [&mut b, &mut c]);
        assert_eq!(t.as_deref(), Some("15"));
        for env in [&b, &c] {
            assert_eq!(var(env, "OPBENCH_TIMING_CPU"), Some("15"));
        }
        // the driver's own setting reaches the workers as it is; no CPUs: no timing CPU
        let (mut b, mut c) = (Vec::new(), Vec::new());
        let t = place_timing((Some("any"), Some("8-15")), [&mut b, &mut c]);
        assert_eq!(t.as_deref(), Some("any"));
        assert!(b.is_empty() && c.is_empty());
        assert_eq!(place_timing((None, None), [&mut b, &mut c]), None);
        // a side told its own: neither is set
        let (mut b, mut c) = (vec![("OPBENCH_TIMING_CPU".into(), "3".into())], Vec::new());
        assert_eq!(place_timing((None, Some("2-3")), [&mut b, &mut c]), None);
        assert_eq!(var(&c, "OPBENCH_TIMING_CPU"), None);
    }

    #[test]
    fn what_the_user_set_stands() {
        // the driver's OPBENCH_CPUS and OPBENCH_THREADS reach the workers as they are
        let (mut b, mut c) = (Vec::new(), Vec::new());
        let cpus = place_workers((Some("1"), Some("0")), &[0, 1], true, [&mut b, &mut c]).unwrap();
        assert_eq!(cpus.as_deref(), Some("0"));
        assert!(b.is_empty() && c.is_empty());
        assert!(place_workers((None, Some("x")), &[0, 1], true, [&mut b, &mut c]).is_err());
        // threads from the driver set how many CPUs
        let (mut b, mut c) = (Vec::new(), Vec::new());
        let cpus = place_workers((Some("3"), None), &[0, 1, 2, 3], true, [&mut b, &mut c]).unwrap();
        assert_eq!(cpus.as_deref(), Some("1-3"));
        // a side given its own CPUs, or an OS that cannot pin: left where they are
        let (mut b, mut c) = (vec![("OPBENCH_CPUS".into(), "0".into())], Vec::new());
        assert_eq!(
            place_workers((None, None), &[0, 1], true, [&mut b, &mut c]).unwrap(),
            None
        );
        assert_eq!(var(&c, "OPBENCH_CPUS"), None);
        let (mut b, mut c) = (Vec::new(), Vec::new());
        assert_eq!(
            place_workers((None, None), &[0, 1], false, [&mut b, &mut c]).unwrap(),
            None
        );
    }
}
