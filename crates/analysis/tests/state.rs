//! What the state columns showed on the H200: the flags (`opbench state`'s tally, on the
//! readers' own rule) against the pipelined samples that ran slow, over 1.3× their case's
//! median in their execution — issue 31 asks ≥ 80% of those flagged and ≤ 10% of the others.
//!
//! The rule: steal on the thread's CPU, involuntary switches over one per 4 ms, the mean of
//! the host control's ratios before and after the sample over 1.2 (the torch control where
//! the sample records it after too, since 2026-12-02: `state-2026-12-02`; else the
//! build-independent one), a stretch of the
//! sample's calls slower than 2× the case's median per call, a GPU throttled below its
//! case's median clock (the relative rule since 2026-12-02: a power cap that holds every
//! sample of a case is its usual state; the counts below are of this rule). The runs of
//! `state-2026-12-01`, `generate-2026-12-01/gen2` and `moe-2026-12-01` predate the stretches
//! and the per-CPU steal (their steal is the machine's): they show the controls alone.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use analysis::state::{Scope, Timer};
use rundir::{Mode, Run};

/// (slow samples, of them flagged, other samples, of them flagged).
type Counts = (usize, usize, usize, usize);

/// Issue 31's bars: ≥ 80% of the slow samples flagged and ≤ 10% of the others.
fn meets_bars(&(slow, caught, others, flagged): &Counts) -> bool {
    caught as f64 >= 0.8 * slow as f64 && flagged as f64 <= 0.1 * others as f64
}

/// Who timed a case, as the tests name it: `op` (the bench binaries), `hf` (the peer's HF
/// rows), `py` (its Python op rows).
fn name(t: Timer) -> &'static str {
    match t {
        Timer::Rust => "op",
        Timer::PeerHf => "hf",
        Timer::PeerOps => "py",
    }
}

fn group(variant: &str) -> &'static str {
    name(Timer::of(variant))
}

/// [`Counts`] in `mode` per (group, execution), by `opbench state`'s tally within each
/// execution (the bars as judged until 2026-12-02's level flag).
fn counts(run: &Run, mode: Mode) -> BTreeMap<(&'static str, u32), Counts> {
    scoped_counts(run, mode, Scope::Execution)
}

/// [`Counts`] in `mode` per (group, execution), by `opbench state`'s tally in `scope`.
fn scoped_counts(run: &Run, mode: Mode, scope: Scope) -> BTreeMap<(&'static str, u32), Counts> {
    analysis::state::tally(run, mode, scope)
        .unwrap()
        .into_iter()
        .map(|((t, e), c)| {
            let counts = (c.slow, c.slow_flagged, c.others, c.others_flagged);
            ((name(t), e), counts)
        })
        .collect()
}

/// Per (timer, execution), the (slow, other) pipelined samples that carry the level flag,
/// judged in `scope`.
fn level_flagged(run: &Run, scope: Scope) -> BTreeMap<(Timer, u32), (usize, usize)> {
    let at = analysis::state::FLAGS
        .iter()
        .position(|f| *f == rundir::SampleFlag::HostLevel)
        .unwrap();
    analysis::state::tally(run, Mode::Pipelined, scope)
        .unwrap()
        .into_iter()
        .map(|(k, t)| (k, t.by_flag[at]))
        .collect()
}

#[test]
fn with_stretches_and_the_threads_own_steal_the_hf_and_python_rows_reach_four_in_five() {
    // gen4 (one execution, the decode grid's op crates and the peer, 2026-12-01): the first
    // run with the stretches, the mean-of-controls rule and the thread's own steal, all
    // chosen before it ran (on the probe below). Caught: HF rows 39 of 44 (89%), Python op
    // rows 9 of 10, op crates 12 of 18 (67%); of the others 11.1%, 9.7%, 6.4% flagged —
    // issue 31's two bars met together by the Python op rows only
    let run = common::fixture("state-2026-12-01/gen4");
    let c = counts(&run, Mode::Pipelined);
    assert_eq!(
        c.into_values().collect::<Vec<_>>(),
        [(44, 39, 496, 55), (18, 12, 1572, 100), (10, 9, 780, 76)]
    );
    // the op crates' samples of 4 calls or more record their slowest stretch, per call, and
    // it lies within the sample's whole time
    let samples = run.samples().unwrap();
    let mut with = 0;
    for s in samples.values().flatten() {
        if s.key.mode == Mode::Pipelined && group(&s.key.variant) == "op" && s.iters >= 4 {
            let x = s.state.slowest_ns.unwrap();
            assert!(x > 0.0 && x <= s.total_ns, "{s:?}");
            with += 1;
        }
    }
    assert!(with > 1500, "{with}");
    // what two of the flags add over the op crates' pipelined samples (slow, others): the
    // GPU's power cap (throttle 0x4) was on in 31 samples, none of them slow, each at or over
    // its case's median clock — no flag (it flagged all 31 under the absolute rule); a
    // stalled stretch 3 slow and 24 others
    let capped = samples
        .values()
        .flatten()
        .filter(|s| s.key.mode == Mode::Pipelined && s.state.throttle.is_some_and(|t| t != 0))
        .count();
    assert!(capped > 0);
    let op =
        analysis::state::tally(&run, Mode::Pipelined, Scope::Execution).unwrap()[&(Timer::Rust, 1)];
    let of = |f| op.by_flag[analysis::state::FLAGS.iter().position(|x| *x == f).unwrap()];
    assert_eq!(of(rundir::SampleFlag::GpuThrottled), (0, 0));
    let (slow, others) = of(rundir::SampleFlag::Stalled);
    assert!(
        slow + others > 0 && others * 10 <= op.others,
        "{slow} {others}"
    );
}

/// Which control's flag [`recount`] judges a sample by, and over what mean ratio.
#[derive(Clone, Copy)]
enum Control {
    /// The build-independent host control (`host_ns`, `host_after_ns`): the chase in the
    /// op crates, the pure-Python loop in the peer's rows — the rule's own on runs that
    /// lack `control_after_ns`, at another threshold.
    Host(f64),
    /// The torch control (`control_ns` before the sample, the dispatch floor over ~200 µs,
    /// and `control_after_ns` after it where recorded), in place of the host control's.
    Torch(f64),
}

/// The pipelined [`Counts`] of `run`'s `timer` with the host control's flag replaced by
/// `control`'s: the mean of its ratios before and after the sample (each to its case's
/// median in the execution; one where only one was recorded) over the threshold, the
/// other flags as they are. The runs before `state-2026-12-02` lack `control_after_ns`:
/// their torch control is read before the sample only.
fn recount(run: &Run, timer: Timer, control: Control) -> Counts {
    let mut c = (0, 0, 0, 0);
    for (key, samples) in run.samples().unwrap() {
        if key.mode != Mode::Pipelined || Timer::of(&key.variant) != timer {
            continue;
        }
        for (_, of) in rundir::by_execution(&samples) {
            // as `opbench state`: a case none of whose samples records a state is not judged
            if !of.iter().any(|s| s.records_state()) {
                continue;
            }
            let m = rundir::CaseMedians::of(&of);
            type Read = fn(&rundir::Sample) -> Option<f64>;
            let (reads, over): ([Read; 2], f64) = match control {
                Control::Host(x) => ([|s| s.host_ns, |s| s.state.host_after_ns], x),
                Control::Torch(x) => ([|s| s.control_ns, |s| s.state.control_after_ns], x),
            };
            let medians = reads.map(|read| {
                let v: Vec<f64> = of.iter().filter_map(|s| read(s)).collect();
                (!v.is_empty()).then(|| stats::median(&v))
            });
            let per_call = m.per_call.unwrap();
            for s in &of {
                let ratios: Vec<f64> = reads
                    .iter()
                    .zip(medians)
                    .filter_map(|(read, m)| read(s).zip(m).map(|(x, m)| x / m))
                    .collect();
                let slow_control =
                    !ratios.is_empty() && ratios.iter().sum::<f64>() / ratios.len() as f64 > over;
                let flagged = slow_control
                    || s.flags(&m)
                        .iter()
                        .any(|f| *f != rundir::SampleFlag::HostSlow);
                if s.per_call_ns() > analysis::state::SLOW * per_call {
                    c.0 += 1;
                    c.1 += usize::from(flagged);
                } else {
                    c.2 += 1;
                    c.3 += usize::from(flagged);
                }
            }
        }
    }
    c
}

#[test]
fn with_the_torch_control_around_each_sample_the_op_crates_meet_both_bars_in_four_of_five() {
    // gen5 (the decode grid and the peer, two executions in one lease, 2026-12-02): the
    // first run whose samples record the torch control after them too; the rule to judge
    // on it (its mean ratio before and after over 1.2 in place of the chase's) was written
    // down before it ran. The bench binaries: 20 of 22 and 21 of 23 slow samples flagged
    // (90.9%, 91.3%), 6.0% and 5.5% of the others — both bars met in both executions
    // (gen11, a later lease: 23 of 27 and 28 of 33, both bars; gen16: 10 of 14, under the
    // caught bar; their HF rows 63 of 75, 30 of 39 and 18 of 29)
    let fixture = |g: &str| common::fixture(&format!("state-2026-12-02/{g}"));
    let mut met = 0;
    for (g, e) in [
        ("gen5", 1),
        ("gen5", 2),
        ("gen11", 1),
        ("gen11", 2),
        ("gen16", 1),
    ] {
        let run = fixture(&format!("{g}/{e}"));
        let op = counts(&run, Mode::Pipelined)[&("op", e)];
        met += usize::from(meets_bars(&op));
        // the rule is the torch control's at HOST_SLOW, read from the samples again
        let torch = recount(&run, Timer::Rust, Control::Torch(rundir::HOST_SLOW));
        assert_eq!(torch, op, "{g}/{e}");
        // the chase's control in its place catches no more (16 of 22 in gen5's first)
        let chase = recount(&run, Timer::Rust, Control::Host(rundir::HOST_SLOW));
        assert!(chase.1 <= torch.1, "{g}/{e}: {chase:?} {torch:?}");
    }
    assert!(met >= 4, "{met} of 5");
}

#[test]
fn the_peers_torch_control_flags_its_samples_and_divides_nothing() {
    // gen9 merged: the peer's samples keep Python's torch control (what their flag reads),
    // but neither their merged rows nor the between-process statistics (compare, history)
    // carry it as the host-speed divisor — the harness's floor rows do
    let (_tmp, run) = common::merged("gen9");
    let peer = |v: &str| Timer::of(v) != Timer::Rust;
    let samples = run.samples().unwrap();
    let (py, rust): (Vec<_>, Vec<_>) = samples
        .values()
        .flatten()
        .partition(|s| peer(&s.key.variant));
    assert!(!py.is_empty() && !rust.is_empty());
    // every peer sample but cache_update's (a difference of two timings) has it
    let timed = py.iter().filter(|s| s.key.site != "cache_update");
    assert!(
        timed
            .clone()
            .all(|s| s.control_ns.is_some() && s.state.control_after_ns.is_some())
    );
    for row in run.ok_rows() {
        assert_eq!(
            row.control_ns.is_some(),
            !peer(&row.key.variant),
            "{:?}",
            row.key
        );
    }
    for (key, execs) in run.samples_by_execution().unwrap() {
        let has = execs.iter().all(|e| !e.control_ns.is_empty());
        assert_eq!(has, !peer(&key.variant), "{key:?}");
    }
}

/// A run of two executions of the peer's HF step at B = 8 and 64 (ten samples each, one
/// call of 20 ms, the host control 50 µs around each), where execution 2 ran `b64`× slower
/// at B = 64 throughout, its time and its control alike.
fn slow_part(dir: &std::path::Path, b64: f64) -> Run {
    use rundir::{ResultRow, Sample, Status};
    let mut w = common::h200_writer(dir);
    for batch in [8, 64] {
        let key = common::peer_key("step", batch);
        let mut samples = Vec::new();
        for e in [1, 2] {
            let x = if e == 2 && batch == 64 { b64 } else { 1.0 };
            for i in 0..10 {
                // a little spread, so that no sample of a case is its median exactly
                let jitter = 1.0 + 0.01 * f64::from(i % 3);
                let mut s = Sample::bare(&key, e, &[(1, 20e6 * x * jitter)]).remove(0);
                s.host_ns = Some(50e3 * x);
                s.state.host_after_ns = Some(50e3 * x);
                s.state.nivcsw = Some(0);
                s.state.steal = Some(0);
                samples.push(s);
            }
        }
        let mut row = ResultRow::new("r", key, "batch L=1024".into(), Status::Ok);
        let pairs: Vec<(u64, f64)> = samples.iter().map(|s| (s.iters, s.total_ns)).collect();
        row.summarize(&pairs);
        w.write_case(&row, &samples).unwrap();
    }
    Run::load(dir).unwrap()
}

#[test]
fn a_part_of_an_execution_that_ran_slow_throughout_is_flagged_by_its_level_against_the_other() {
    // planted: execution 2 ran 1.85× at B = 64 (as gen17's did, 2026-12-02), its control
    // too; B = 8 ran alike
    let dir = tempfile::tempdir().unwrap();
    let run = slow_part(dir.path(), 1.85);
    let levels = analysis::state::levels(&run, Mode::Pipelined).unwrap();
    let at = |b: usize, e: u32| levels[&(Timer::PeerHf, b, e)];
    let slow = at(64, 2);
    assert_eq!(slow.cases, 1);
    assert!((slow.control - 1.85).abs() < 1e-9, "{slow:?}");
    assert!((slow.per_call - 1.85).abs() < 1e-9, "{slow:?}");
    assert_eq!((at(64, 1).control, at(64, 1).per_call), (1.0, 1.0));
    assert_eq!((at(8, 2).control, at(8, 2).per_call), (1.0, 1.0));
    // judged within each execution the slow part is its execution's usual state: nothing
    // slow, nothing flagged
    let c = counts(&run, Mode::Pipelined);
    assert_eq!(c[&("hf", 2)], (0, 0, 20, 0));
    assert!(
        level_flagged(&run, Scope::Execution)
            .values()
            .all(|&c| c == (0, 0))
    );
    // across the executions, against each case's fastest: B = 64's ten samples of the
    // second are slow and each carries the level flag; the fastest execution never does
    let across = scoped_counts(&run, Mode::Pipelined, Scope::Run);
    assert_eq!(across[&("hf", 2)], (10, 10, 10, 0));
    assert_eq!(across[&("hf", 1)], (0, 0, 20, 0));
    let level = level_flagged(&run, Scope::Run);
    assert_eq!(level[&(Timer::PeerHf, 2)], (10, 0));
    assert_eq!(level[&(Timer::PeerHf, 1)], (0, 0));
    // under the level's thresholds (1.2× control, 1.3× time) no sample is slow or flagged
    let dir = tempfile::tempdir().unwrap();
    let run = slow_part(dir.path(), 1.15);
    let across = scoped_counts(&run, Mode::Pipelined, Scope::Run);
    assert_eq!(across[&("hf", 2)], (0, 0, 20, 0));
}

/// The fixtures of 2026-12-02 with two executions in one lease, kept in the repository (the
/// others, gen6–gen19's, are in git history: docs/experiments/state-2026-12-02).
const TWO_EXECUTIONS: [&str; 4] = ["gen5", "gen9", "gen11", "gen20"];

#[test]
fn across_leases_executions_the_level_flag_catches_what_ran_slow_between_them() {
    // each two-execution fixture of 2026-12-02 merged, slow against each case's fastest
    // execution (the rule chosen on ten such runs, after them: control over 1.2× and time
    // per call over 1.3× the case's fastest execution's). On the four kept here: bench
    // binaries 1470 of 1594 slow samples flagged (92.2%) and 7.2% of the others, both bars
    // in 7 of 8 executions; HF rows 948 of 1111 (85.3%), 11.3%, in 2 of 8. On all ten
    // (git history): 91.7% and 8.0%, 16 of 20; 81.2%, 11.4%, 4 of 20
    let mut sum: BTreeMap<&str, (Counts, usize)> = BTreeMap::new();
    for g in TWO_EXECUTIONS {
        let (_tmp, run) = common::merged(g);
        for ((timer, _), c) in scoped_counts(&run, Mode::Pipelined, Scope::Run) {
            let (t, met) = sum.entry(timer).or_default();
            *t = (t.0 + c.0, t.1 + c.1, t.2 + c.2, t.3 + c.3);
            *met += usize::from(meets_bars(&c));
        }
    }
    // the bench binaries meet both bars over the four and in most executions; the HF rows
    // catch their slow samples as often, and flag more of the others
    let (op, op_met) = sum["op"];
    assert!(
        meets_bars(&op) && op_met * 2 > TWO_EXECUTIONS.len() * 2,
        "{op:?} {op_met}"
    );
    let (hf, _) = sum["hf"];
    assert!(hf.1 as f64 >= 0.8 * hf.0 as f64, "{hf:?}");
}

#[test]
fn between_executions_the_controls_level_follows_the_rows() {
    // each two-execution fixture of 2026-12-02: per timer and batch, the second
    // execution's level over the first's — the host control's against the rows' time per
    // call — moves with them: wherever the rows moved by more than 10%, the control moved
    // the same way by more than 5%, while the flags judge each sample within its case
    let mut cells = Vec::new();
    for g in TWO_EXECUTIONS {
        let (_tmp, run) = common::merged(g);
        let levels = analysis::state::levels(&run, Mode::Pipelined).unwrap();
        for (&(t, b, e), second) in &levels {
            if e == 2 {
                let first = levels[&(t, b, 1)];
                let ratio = |f: fn(&analysis::state::Level) -> f64| (f(second) / f(&first)).ln();
                cells.push((g, t, b, ratio(|l| l.control), ratio(|l| l.per_call)));
            }
        }
    }
    // 34 cells, 15 of them moved on 2026-12-06 (76 and 30 or more on all ten fixtures)
    let moved: Vec<_> = cells.iter().filter(|c| c.4.abs() > 1.1f64.ln()).collect();
    assert!(moved.len() >= 5, "{} of {}", moved.len(), cells.len());
    for (g, t, b, c, r) in &moved {
        assert!(
            c * r > 0.0 && c.abs() > 1.05f64.ln(),
            "{g} {t:?} B={b}: control {c}, rows {r}"
        );
    }
    let (x, y): (Vec<f64>, Vec<f64>) = cells.iter().map(|c| (c.3, c.4)).unzip();
    let r = pearson(&x, &y);
    assert!(r > 0.9, "{r}");
}

fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let var = |v: &[f64], m: f64| v.iter().map(|a| (a - m).powi(2)).sum::<f64>();
    cov / (var(x, mx) * var(y, my)).sqrt()
}

#[test]
fn on_gen20_generates_per_token_stretches_are_on_every_sample_and_none_a_stall() {
    // gen20 (2026-12-02) timed generate() per token for the first time: its counts are in
    // docs/experiments/state-2026-12-02/replay-counts.csv
    let (_tmp, run) = common::merged("gen20");
    // generate()'s new per-token stretches: on every sample, and none a stall (no token
    // over 2× its case's median per token), so the catch above is the rule's as before
    let mut generate = 0;
    for (key, samples) in run.samples().unwrap() {
        if key.site != "generate_from_l" {
            continue;
        }
        let medians = rundir::case_medians(&samples);
        for s in &samples {
            let (slowest, typical) = (s.state.slowest_ns.unwrap(), s.state.typical_ns.unwrap());
            assert!(typical <= slowest, "{s:?}");
            let flags = s.flags(&medians[&s.execution]);
            assert!(!flags.contains(&rundir::SampleFlag::Stalled), "{s:?}");
            generate += 1;
        }
    }
    let rows: usize = run
        .ok_rows()
        .filter(|r| r.key.site == "generate_from_l")
        .filter_map(|r| r.samples)
        .sum();
    assert!(
        generate > 0 && generate == rows,
        "{generate} samples, rows say {rows}"
    );
}

/// The recorded runs replayed, the cases `replay.csv` (state-2026-12-02) lists: per run,
/// group and execution, the pipelined samples that ran slow and the others, and how many
/// of each are flagged — by `opbench state`'s rule (judged within each execution or across
/// a merged run), or with the host control's flag read from the build-independent control
/// (`host`) or the torch control (`torch`) at a threshold. The rule must keep two
/// relations on every one: it flags a slow sample at least twice as often as another, and
/// a higher threshold flags no more of either. The counts each gave on 2026-12-02:
/// docs/experiments/state-2026-12-02/replay-counts.csv.
#[test]
fn recorded_runs_flag_slow_samples_far_more_often_and_fewer_at_higher_thresholds() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/state-2026-12-02/replay.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut runs: BTreeMap<(String, String), (Option<tempfile::TempDir>, Run)> = BTreeMap::new();
    // per (run, group, control, execution): (threshold, caught, flagged) in file order
    let mut sweeps: BTreeMap<String, Vec<(f64, usize, usize)>> = BTreeMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (_, run) = runs
            .entry((f[0].to_string(), f[1].to_string()))
            .or_insert_with(|| match f[1] {
                "merged" => {
                    let (tmp, run) = common::merged(f[0]);
                    (Some(tmp), run)
                }
                _ => (None, common::fixture(f[0])),
            });
        let scope = if f[2] == "run" {
            Scope::Run
        } else {
            Scope::Execution
        };
        let group: &'static str = match f[3] {
            "op" => "op",
            "hf" => "hf",
            _ => "py",
        };
        let timer = [Timer::Rust, Timer::PeerHf, Timer::PeerOps]
            .into_iter()
            .find(|t| name(*t) == group)
            .unwrap();
        // a control's flag is counted over every execution (`all`)
        let (slow, caught, others, flagged) = match (f[4], f[5].parse::<f64>()) {
            ("host", Ok(x)) => recount(run, timer, Control::Host(x)),
            ("torch", Ok(x)) => recount(run, timer, Control::Torch(x)),
            _ => scoped_counts(run, Mode::Pipelined, scope)[&(group, f[6].parse().unwrap())],
        };
        assert!(slow > 0 && others > 0, "{line}");
        let (hit, false_alarm) = (caught as f64 / slow as f64, flagged as f64 / others as f64);
        assert!(
            hit >= 2.0 * false_alarm,
            "{line}: {hit:.2} of slow, {false_alarm:.3} of others"
        );
        if let Ok(x) = f[5].parse::<f64>() {
            let sweep = format!("{} {} {} {}", f[0], f[3], f[4], f[6]);
            sweeps.entry(sweep).or_default().push((x, caught, flagged));
        }
    }
    assert!(
        sweeps.values().any(|s| s.len() >= 3),
        "a threshold sweep is replayed"
    );
    for (what, mut sweep) in sweeps {
        sweep.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in sweep.windows(2) {
            assert!(w[1].1 <= w[0].1 && w[1].2 <= w[0].2, "{what}: {sweep:?}");
        }
    }
}
