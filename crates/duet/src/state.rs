//! What a comparison holds, apart from how it is driven: its groups and settings, each
//! case's pairs and end, the outcome, and the errors. The driver ([`crate::driver`]), the
//! visits, the plan, the verdicts and the writers all read these; none of them is read back
//! by this module.

use std::time::Duration;

use rundir::{CaseKey, Status};
use stats::paired::{Looks, PairedCase};

use crate::protocol::{CaseName, Prepared, Sampled};
use crate::worker::{Worker, WorkerError};

/// Makes a fresh worker of one side of a group.
pub type Factory<'a> = Box<dyn FnMut() -> Result<Box<dyn Worker>, WorkerError> + 'a>;

/// One group of cases: the same bench binary on both sides.
pub struct Group<'a> {
    pub name: String,
    pub base: Factory<'a>,
    pub cand: Factory<'a>,
}

impl std::fmt::Debug for Group<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("name", &self.name).finish()
    }
}

/// What the driver is told: every knob is an `opbench ab` option.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// A case is `same` when its interval lies inside ± this (a fraction); `None`: from
    /// the term the run measured ([`crate::tolerance`]).
    pub tolerance: Option<f64>,
    /// The same for a family and the global verdicts.
    pub family_tolerance: Option<f64>,
    /// The time one sample aims at.
    pub sample: Duration,
    /// Warm-up per side per visit.
    pub warmup: Duration,
    /// The whole comparison's time: rounds go on while the next one fits.
    pub budget: Budget,
    /// Rounds: judged after `first`, then twice as many, up to `max`.
    pub looks: Looks,
    /// Pairs a case takes in each of the first two rounds.
    pub pairs: usize,
    /// The most pairs a visit takes after them ([`Outcome::pairs`] for its kind of case, as
    /// those rounds' spreads make best).
    pub max_pairs: usize,
    pub seed: u64,
    /// A regular expression on the case keys.
    pub filter: Option<String>,
    /// The CPUs both sides' workers run on (`OPBENCH_CPUS`), for the summary; `None`:
    /// where the OS put them.
    pub cpus: Option<String>,
    /// The one CPU a GPU case's samples run their thread on, both sides
    /// (`OPBENCH_TIMING_CPU`; `None`: not set).
    pub timing_cpu: Option<String>,
    /// Where a device-timed case's tensors sit for each pair.
    pub placement: Placement,
}

/// Where a device-timed case's tensors sit in the device's memory. A worker process's
/// small cases all sit where its first allocations did, and on the H200 a process's small
/// device cases moved together by up to ±5% from one round to the next while its pairs
/// agreed within 0.1% (docs/method.md, "Placement"). Whether their placement is what moves
/// them has not been measured on a GPU yet, so `Once` is the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Made once a visit, as the worker's allocator puts it.
    Once,
    /// Made again before each pair on both sides, each side in its own placement
    /// ([`crate::protocol::Request::Prepare`]'s `place`): the pairs average it.
    EachPair,
}

impl Placement {
    /// As `--placement` and the run's `placement` setting name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Once => "once",
            Placement::EachPair => "each-pair",
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tolerance: None,
            family_tolerance: None,
            sample: Duration::from_millis(10),
            warmup: Duration::from_millis(50),
            budget: Budget::Total(Duration::from_secs(600)),
            looks: Looks::default(),
            pairs: 8,
            max_pairs: 32,
            seed: 1,
            filter: None,
            cpus: None,
            timing_cpu: None,
            placement: Placement::Once,
        }
    }
}

/// The comparison's time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// This long in all.
    Total(Duration),
    /// `each` a case (counted once both sides have listed theirs), at most `cap`.
    PerCase { each: Duration, cap: Duration },
}

impl Budget {
    /// The time for `cases` timed cases.
    pub fn for_cases(self, cases: usize) -> Duration {
        match self {
            Budget::Total(t) => t,
            Budget::PerCase { each, cap } => (each * cases.max(1) as u32).min(cap),
        }
    }
}

/// Which side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Base,
    Cand,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Base => "base",
            Side::Cand => "cand",
        }
    }
}

/// One pair: the two sides' samples of a case, taken back to back.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    /// The round that took it (from 0).
    pub round: u32,
    pub index: u32,
    pub base: Sampled,
    pub cand: Sampled,
    /// The base's sample came first (pairs alternate).
    pub base_first: bool,
    /// The driver's clock around the pair (warm-up calls and a fresh placement included):
    /// what the plan prices a pair by, as a device-timed sample reports only its GPU time.
    /// `None` where not known (a replayed run).
    pub wall_ns: Option<f64>,
}

impl Pair {
    /// (base, cand) time per call.
    pub fn per_call(&self) -> (f64, f64) {
        let per = |s: &Sampled| s.total_ns / s.calls.max(1) as f64;
        (per(&self.base), per(&self.cand))
    }

    /// What the pair took: the driver's clock where known, else the samples' own times.
    pub fn cost_ns(&self) -> f64 {
        self.wall_ns
            .unwrap_or(self.base.total_ns + self.cand.total_ns)
    }
}

/// A case that did not end as pairs: which side, what status, why.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub side: Option<Side>,
    pub status: Status,
    pub reason: String,
}

/// One case of the comparison and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseRun {
    pub key: CaseKey,
    pub name: String,
    pub group: String,
    pub base: Option<Prepared>,
    pub cand: Option<Prepared>,
    pub pairs: Vec<Pair>,
    /// Why it has no verdict of its times (a side refused it, a worker died).
    pub ended: Option<Ended>,
    /// Decided at its last look (the sequential stop).
    pub decided: bool,
    /// Rounds that visited it.
    pub visits: u32,
    pub spent: Duration,
    /// Why it runs unpaired: it does not fit in the device's memory twice, so each round
    /// times one side alone and then the other, each in a process of its own.
    pub unpaired: Option<String>,
}

impl CaseRun {
    /// The uncovered device chunks of its samples, (base, candidate), or `None` where no
    /// sample of either side said; see
    /// [`Sampled::uncovered`](crate::protocol::Sampled::uncovered).
    pub fn uncovered(&self) -> Option<(u64, u64)> {
        let told = |s: &crate::protocol::Sampled| s.uncovered;
        self.pairs
            .iter()
            .any(|p| told(&p.base).or(told(&p.cand)).is_some())
            .then(|| {
                let count = |s| told(s).unwrap_or(0);
                self.pairs
                    .iter()
                    .fold((0, 0), |(b, c), p| (b + count(&p.base), c + count(&p.cand)))
            })
    }

    /// The planted device spin each side's samples held, as a fraction of the rest of their
    /// time (base, candidate), or `None` where no sample said
    /// ([`Sampled::planted_ns`](crate::protocol::Sampled::planted_ns)).
    pub fn planted(&self) -> Option<(f64, f64)> {
        let told = |s: &crate::protocol::Sampled| s.planted_ns;
        if !self.plant_told() {
            return None;
        }
        let share = |side: fn(&Pair) -> &crate::protocol::Sampled| {
            let (spin, all) = self.pairs.iter().map(side).fold((0.0, 0.0), |(sp, al), s| {
                (sp + told(s).unwrap_or(0.0), al + s.total_ns)
            });
            if all > spin { spin / (all - spin) } else { 0.0 }
        };
        Some((share(|p| &p.base), share(|p| &p.cand)))
    }

    /// Whether a side's worker told a planted spin in any pair.
    fn plant_told(&self) -> bool {
        self.pairs
            .iter()
            .any(|p| p.base.planted_ns.or(p.cand.planted_ns).is_some())
    }

    /// The planted spins' device ns a call (base, candidate), where a plant told any: a
    /// launch plant (`OPBENCH_PLANT_LAUNCH_NS`) delivers a fixed ns a call.
    pub fn planted_per_call(&self) -> Option<(f64, f64)> {
        if !self.plant_told() {
            return None;
        }
        let per_call = |side: fn(&Pair) -> &crate::protocol::Sampled| {
            let (spin, calls) = self.pairs.iter().map(side).fold((0.0, 0u64), |(sp, n), s| {
                (sp + s.planted_ns.unwrap_or(0.0), n + s.calls)
            });
            spin / calls.max(1) as f64
        };
        Some((per_call(|p| &p.base), per_call(|p| &p.cand)))
    }

    pub(crate) fn new(name: &CaseName, group: &str) -> Result<Self, String> {
        Ok(CaseRun {
            key: CaseKey::from_fields(&name.fields).map_err(|e| format!("{}: {e}", name.key))?,
            name: name.key.clone(),
            group: group.to_string(),
            base: None,
            cand: None,
            pairs: Vec::new(),
            ended: None,
            decided: false,
            visits: 0,
            spent: Duration::ZERO,
            unpaired: None,
        })
    }

    /// Each round's estimate: the median log ratio of its pairs, in round order.
    pub fn round_estimates(&self) -> Vec<f64> {
        let mut by: std::collections::BTreeMap<u32, Vec<(f64, f64)>> = Default::default();
        for p in &self.pairs {
            by.entry(p.round).or_default().push(p.per_call());
        }
        by.values()
            .map(|v| PairedCase::from_pairs(v))
            .filter(|c| c.n() > 0)
            .map(|c| c.median())
            .collect()
    }
}

/// A finished comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub cases: Vec<CaseRun>,
    /// Each side's env.json, from its first worker's hello.
    pub base_env: Option<serde_json::Value>,
    pub cand_env: Option<serde_json::Value>,
    pub took: Duration,
    /// The budget the cases were given.
    pub budget: Duration,
    pub settings: Settings,
    /// Pairs a visit took after the first two rounds, for host-timed and device-timed
    /// cases ([`stats::paired::pairs_per_visit`] from what those rounds showed).
    pub pairs: (usize, usize),
    /// Rounds that visited the device-timed cases alone, a full round no longer fitting
    /// the budget.
    pub device_only_rounds: u32,
    /// The obligatory rounds' plan in the budget (`None`: a replayed run).
    pub budget_plan: Option<crate::budget::BudgetPlan>,
}

/// Progress, after each case visit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub visited: usize,
    pub cases: usize,
    pub decided: usize,
    pub elapsed: Duration,
    pub budget: Duration,
    /// The budget's plan, told once before any timing.
    pub plan: Option<crate::budget::BudgetPlan>,
}

/// Why a comparison could not run at all (a case that fails is a row, never this).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error("{0}")]
    Protocol(String),
    #[error("--filter: {0}")]
    Filter(String),
    #[error(transparent)]
    Budget(#[from] crate::budget::TooShort),
}

pub(crate) fn ended(side: Option<Side>, status: Status, reason: &str) -> Ended {
    Ended {
        side,
        status,
        reason: reason.to_string(),
    }
}
