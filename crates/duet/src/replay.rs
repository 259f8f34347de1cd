//! A stored paired comparison read back (`opbench ab --judge RUNS/RUN`): the two run
//! directories `opbench ab` wrote, `<RUN>-base` and `<RUN>-cand`, turned back into the
//! [`Outcome`] the verdicts are judged from. Its pairs are the samples with the same pair
//! index; a pair's round is its index over the pairs a round took (`pairs_per_round` in
//! env.json's settings), as the driver numbered them.

use std::time::Duration;

use rundir::{ResultRow, Run, Sample, Status};
use stats::paired::Looks;

use crate::protocol::{Prepared, Sampled};
use crate::state::{CaseRun, Ended, Outcome, Pair, Placement, Settings, Side};

/// Why a stored comparison cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Run(#[from] rundir::RunError),
    #[error("{0}: not a run `opbench ab` wrote (env.json's settings lack `{1}`)")]
    NotPaired(String, &'static str),
}

/// The comparison stored in `base` and `cand` (the two sides' run directories).
pub fn outcome(base: &Run, cand: &Run) -> Result<Outcome, ReplayError> {
    let setting = |run: &Run, name: &'static str| -> Result<String, ReplayError> {
        run.env
            .as_ref()
            .and_then(|e| e.settings.get(name).cloned())
            .ok_or_else(|| ReplayError::NotPaired(run.dir.display().to_string(), name))
    };
    let (settings, rounds) = stored_settings(base)?;
    let (bs, cs) = (base.samples()?, cand.samples()?);
    let none = Vec::new();
    let mut cases = Vec::new();
    for b in &base.results {
        let c = cand.row(&b.key);
        let by_pair = |s: &[Sample]| -> std::collections::BTreeMap<u32, Sampled> {
            s.iter()
                .filter_map(|s| Some((s.pair?, sampled(s))))
                .collect()
        };
        let bp = by_pair(bs.get(&b.key).unwrap_or(&none));
        let cp = by_pair(cs.get(&b.key).unwrap_or(&none));
        let mut timed: Vec<Pair> = bp
            .iter()
            .filter_map(|(i, s)| {
                Some(Pair {
                    round: rounds.round_of(*i, b.key.mode.is_device()),
                    index: *i,
                    base: s.clone(),
                    cand: cp.get(i)?.clone(),
                    base_first: i % 2 == 0,
                    wall_ns: None,
                })
            })
            .collect();
        // a side's uncovered chunks are kept as its row's count, carried by the first pair
        if let Some(first) = timed.first_mut() {
            first.base.uncovered = b.uncovered_chunks;
            first.cand.uncovered = c.and_then(|c| c.uncovered_chunks);
        }
        let rounds = timed.iter().map(|p| p.round + 1).max().unwrap_or(0);
        cases.push(CaseRun {
            key: b.key.clone(),
            name: b.key.to_string(),
            group: b.key.op.to_string(),
            base: Some(prepared(b)),
            cand: c.map(prepared),
            ended: ended(b, c),
            pairs: timed,
            decided: false,
            visits: rounds,
            spent: Duration::ZERO,
            unpaired: b
                .note
                .as_deref()
                .filter(|n| n.contains("unpaired"))
                .map(str::to_string),
        });
    }
    let env = |r: &Run| r.env.as_ref().and_then(|e| serde_json::to_value(e).ok());
    Ok(Outcome {
        cases,
        base_env: env(base),
        cand_env: env(cand),
        took: Duration::ZERO,
        budget: Duration::ZERO,
        settings,
        pairs: (rounds.later.0 as usize, rounds.later.1 as usize),
        // a run from before the device-only rounds had none
        device_only_rounds: setting(base, "device_only_rounds")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
        budget_plan: None,
    })
}

/// The settings a paired run was made with, as its base side's env.json records them, and
/// how its pairs fall into rounds.
fn stored_settings(base: &Run) -> Result<(Settings, rundir::paired::PairRounds), ReplayError> {
    let setting = |run: &Run, name: &'static str| -> Result<String, ReplayError> {
        run.env
            .as_ref()
            .and_then(|e| e.settings.get(name).cloned())
            .ok_or_else(|| ReplayError::NotPaired(run.dir.display().to_string(), name))
    };
    setting(base, "pairs_per_round")?;
    let rounds = base
        .env
        .as_ref()
        .and_then(rundir::paired::PairRounds::of)
        .ok_or_else(|| ReplayError::NotPaired(base.dir.display().to_string(), "design"))?;
    let pairs = rounds.first;
    let mut settings = Settings {
        pairs: pairs as usize,
        ..Settings::default()
    };
    // a number where one was given (or before tolerances came from the term), else
    // `from the term`
    settings.tolerance = setting(base, "tolerance_pct")?
        .parse::<f64>()
        .ok()
        .map(|t| t / 100.0);
    settings.family_tolerance = setting(base, "family_tolerance_pct")
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .map(|t| t / 100.0);
    // the looks it was judged at: "first..max" (runs before the setting existed ran 2..8)
    settings.looks = setting(base, "rounds")
        .ok()
        .and_then(|r| Looks::from_setting(&r))
        .unwrap_or(Looks {
            max: 8,
            ..Looks::default()
        });
    // where the workers ran (runs before a setting existed lack it)
    settings.cpus = setting(base, "cpus").ok().filter(|c| c != "any");
    settings.timing_cpu = setting(base, "timing_cpu").ok();
    // a run from before the option was placed once a visit
    if setting(base, "placement").is_ok_and(|p| p == Placement::EachPair.as_str()) {
        settings.placement = Placement::EachPair;
    }
    Ok((settings, rounds))
}

fn sampled(s: &Sample) -> Sampled {
    Sampled {
        key: s.key.to_string(),
        calls: s.iters,
        total_ns: s.total_ns,
        spent_ns: None,
        control_ns: s.control_ns,
        host_ns: s.host_ns,
        state: s.state,
        uncovered: None,
        planted_ns: None,
    }
}

fn prepared(r: &ResultRow) -> Prepared {
    Prepared {
        key: r.key.to_string(),
        status: r.status,
        reason: (r.status != Status::Ok).then(|| r.note.clone().unwrap_or_default()),
        rel_err: r.max_rel_err,
        dims: r.dims.clone(),
        flops: r.flops,
        bytes: r.bytes,
        kernel: r.kernel.clone(),
        note: r.note.clone(),
        check: None,
        state_bytes: 0,
    }
}

/// Why a case was not timed in pairs: the side whose row is not `ok` (a `skipped` row is the
/// side that was fine while the other ended).
fn ended(b: &ResultRow, c: Option<&ResultRow>) -> Option<Ended> {
    let Some(c) = c else {
        return Some(Ended {
            side: Some(Side::Cand),
            status: Status::Unsupported,
            reason: "the candidate has no row of this case".into(),
        });
    };
    let end = |side, r: &ResultRow| Ended {
        side: Some(side),
        status: r.status,
        reason: r.note.clone().unwrap_or_default(),
    };
    match (b.status, c.status) {
        (Status::Ok, Status::Ok) => None,
        (Status::Ok | Status::Skipped, s) if s != Status::Skipped => Some(end(Side::Cand, c)),
        _ => Some(end(Side::Base, b)),
    }
}
