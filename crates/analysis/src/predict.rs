//! One decode step composed from a run's measurements and fits (`opbench predict`).
//!
//! Every call of the step's [`StepPlan`] × its calls per step. A site measured at exactly
//! this batch (and cache length) is priced at its median; otherwise at its series' fit
//! evaluated at this case's work. Calls no op crate measures ([`StepPlan::other`]) are
//! priced at the run's dispatch floors and marked as such.
//!
//! Each part gets a host cost (dispatch + launch) and a device cost (kernel time); on a GPU
//! the step is max(Σ host, Σ device), because eager PyTorch queues kernels ahead of the
//! device: adding up per-op times would count the overlap twice. See [`predict`].
//!
//! In `graph` mode the step is what a captured step replays: every call at its `graph_cold`
//! time where the run has one (its model state — weights, KV cache — read from memory, as a
//! step that streams every layer's state reads it), else its `graph` time (kernel plus the
//! graph's gap to the next node, no host dispatch), summed; the host launches one replay per
//! step, which the device time hides. The eager prediction's device time adds the same cold
//! penalty (`graph_cold` − `graph`) to a call's `device` row.

use rundir::{CaseKey, DType, DeviceId, Mode, OpKind, Phase, ResultRow, Run, SeriesKey, Work};
use shapes::{
    CallKind, ModelConfig, OtherCall, Pairing, PlannedCall, Problem, Step, StepPlan, StepProfile,
};

use crate::AnalysisError;
use crate::fit::{Fits, fit_run};

/// Where a component's pipelined price came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Measured,
    Fit,
    Floor,
    /// Its bytes over the run's measured copy ceiling exceed what it cost alone (its
    /// buffers were cached when measured alone; in a step they stream from memory).
    Ceiling,
    /// On the CPU: its time alone plus what reading its state from memory adds (its
    /// kernel variant's `pipelined_cold` row over its `pipelined` row): a step streams every
    /// layer's weights, while a case timed alone finds them in cache.
    Cold,
    /// A framework part the run did not measure, priced at the parts a run from before it
    /// measured ([`shapes::OtherCall::stand_in`]).
    Parts,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Fit => "fit",
            Source::Floor => "floor",
            Source::Ceiling => "ceiling",
            Source::Cold => "cold",
            Source::Parts => "parts",
        }
    }
}

/// Where a component's device time came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSource {
    /// A `device`-mode row (GPU events) at this very case.
    Events,
    /// The case is device-bound: its pipelined time is its device time.
    Pipelined,
    /// work / rate of its series' fit.
    Fit,
    /// The dispatch floor's device time (one small kernel).
    Floor,
    /// Nothing better: the pipelined time bounds it from above. A libtorch call (the
    /// bench binaries' rows) is priced at that bound: its host cost is a dispatch, and its
    /// kernels can take most of its pipelined time (fused q_norm at B = 64: 14.8 µs, where
    /// its step's GPU events want ~16). A Python call (scripts/peer.py's `py-*` rows) is
    /// priced at the lower end, the dispatch floor's kernel (what a series' fit gives such
    /// calls where it holds), where the run has it: its pipelined time is the
    /// interpreter's pace, and summed over a step's Python calls it is the host's time
    /// again (docs/findings.md 11, gen14). For a Python call, a series' fit that would put
    /// it at or over its pipelined time says no more than the bound and is read as one.
    Bound,
    /// Its bytes over the run's measured copy ceiling.
    Ceiling,
    /// A `graph`-mode row: the call's time inside a replayed graph.
    Graph,
    /// A `graph_cold`-mode row: inside a replayed graph, its state read from memory.
    GraphCold,
    /// A `device` row plus the cold penalty its `graph_cold` and `graph` rows measure.
    EventsCold,
    /// The call waits for its own kernels ([`shapes::moe::waits_for_device`]): they are in
    /// its pipelined time, which is priced as host time (the step cannot run ahead of it).
    Waited,
    /// No kernel.
    None,
}

impl DeviceSource {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceSource::Events => "events",
            DeviceSource::Pipelined => "pipelined",
            DeviceSource::Fit => "fit",
            DeviceSource::Floor => "floor",
            DeviceSource::Bound => "bound",
            DeviceSource::Ceiling => "ceiling",
            DeviceSource::Graph => "graph",
            DeviceSource::GraphCold => "graph_cold",
            DeviceSource::EventsCold => "events+cold",
            DeviceSource::Waited => "waited",
            DeviceSource::None => "-",
        }
    }
}

/// The CPU's component of what one decoder layer's calls cost more in their sequence than
/// each repeated alone ([`Prediction::sequence`]), one call per layer.
pub const IN_SEQUENCE: &str = "in_sequence";

/// One line of the breakdown; times per call in ns.
#[derive(Debug, Clone)]
pub struct Component {
    /// The op, or `None` for a call no op crate measures.
    pub op: Option<OpKind>,
    pub variant: &'static str,
    pub site: &'static str,
    pub calls: usize,
    /// What one call costs alone, back to back: max(host, device).
    pub per_call_ns: f64,
    /// Host dispatch + launch per call: its series at the smallest batch.
    pub host_ns: f64,
    /// Kernel time per call.
    pub device_ns: f64,
    pub source: Source,
    pub device_source: DeviceSource,
}

/// A composed step.
#[derive(Debug, Clone)]
pub struct Prediction {
    pub plan: StepPlan,
    pub components: Vec<Component>,
    /// Σ calls × host, Σ calls × device, Σ calls × per call.
    pub host_ns: f64,
    pub device_ns: f64,
    pub serial_ns: f64,
    /// The predicted step: max(host, device) on a GPU, where the host queues kernels ahead
    /// of the device; the plain sum on the CPU, where every call runs as it is made.
    pub step_ns: f64,
    pub batch: usize,
    pub gpu: bool,
    /// The host's context factor applied to every host cost measured alone (GPU, eager,
    /// adjusted): a call inside a step of different calls over the same call repeated
    /// alone; `None` where not applied.
    pub context: Option<Context>,
    /// The CPU only: one decoder layer's calls in their sequence and each repeated alone
    /// at the step's batch ([`StepProfile::layer_context`]), whose difference per layer the
    /// step is priced with (component `in_sequence`, [`StepProfile::cpu_sequence`]);
    /// `None` on a GPU, where the same rows give the host's context factor, for the tch
    /// profiles, and where the run lacks them.
    pub sequence: Option<LayerRows>,
    /// The host speed every host cost was scaled to (`controlled`); `None` where not
    /// applied.
    pub host_speed: Option<HostSpeed>,
    /// What a kernel costs the device more among other kinds of kernel than among its own
    /// (floor `mixed` − `blocked` in `graph` mode for a graph, in `device` mode otherwise),
    /// added to each kernel call's device time on a GPU; `None` where the run lacks them.
    pub switch_ns: Option<f64>,
    /// The measured step the prediction is checked against, where the run has it: the
    /// decode crate's (or scripts/peer.py's) row of this step in the query's mode, and its
    /// GPU-event time (`device` mode). Every renderer (print, report) reads these.
    pub measured: Option<ResultRow>,
    pub measured_device: Option<ResultRow>,
}

impl Prediction {
    pub fn tokens_per_s(&self) -> f64 {
        self.batch as f64 / (self.step_ns * 1e-9)
    }

    /// The host's time per step (on the CPU, dispatch and work together).
    pub fn host_time_ns(&self) -> f64 {
        if self.gpu {
            self.host_ns
        } else {
            self.serial_ns
        }
    }

    /// What every host cost measured alone was multiplied by to price this step: the
    /// `controlled` host model's scale (with the context factor where that applies on
    /// top), else the context factor, else 1. A cost measured alone elsewhere (a part
    /// scripts/peer.py times) is priced in this step's host state by it.
    pub fn host_scale(&self) -> f64 {
        let context = self.context.map_or(1.0, |c| c.factor);
        match self.host_speed {
            Some(HostSpeed::Layer { scale, .. }) => scale * context,
            Some(HostSpeed::Beside { scale, .. }) => scale,
            _ => context,
        }
    }

    /// The host's time per step in the framework's own work (the plan's framework calls:
    /// nn.Module calls, the causal mask, the cache's bookkeeping); 0 for a libtorch profile.
    pub fn framework_ns(&self) -> f64 {
        let framework: Vec<&str> = self
            .plan
            .other
            .iter()
            .filter(|u| u.kind == CallKind::Framework)
            .map(|u| u.name)
            .collect();
        self.components
            .iter()
            .filter(|c| c.op.is_none() && framework.contains(&c.site))
            .map(|c| c.calls as f64 * self.host_per_call(c))
            .sum()
    }

    /// What one call of `c` costs the host: its dispatch and launch on a GPU, the whole
    /// call on the CPU (where the host does the work too).
    fn host_per_call(&self, c: &Component) -> f64 {
        if self.gpu { c.host_ns } else { c.per_call_ns }
    }

    /// The host sets the pace (on a GPU).
    pub fn host_bound(&self) -> bool {
        self.host_ns >= self.device_ns
    }

    /// The Python calls whose kernels only their pipelined time bounds, priced at the
    /// dispatch floor's kernel ([`DeviceSource::Bound`]).
    pub fn python_bounded(&self) -> impl Iterator<Item = &Component> {
        self.components
            .iter()
            .filter(|c| c.device_source == DeviceSource::Bound && from_python(c.variant))
    }
}

/// Whether a row of `variant` times its call from Python (scripts/peer.py's rows): its
/// pipelined time is the interpreter's pace, no bound on its kernels
/// ([`DeviceSource::Bound`]).
fn from_python(variant: &str) -> bool {
    rundir::Timer::of(variant) != rundir::Timer::Rust
}

/// How the `controlled` host model scaled the rows' host costs to one host speed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HostSpeed {
    /// Each row by its control (the floor's add timed beside each sample, ns per add) to
    /// this one: the measured step's own control, or the run's median.
    Control { ns: f64, from_step: bool },
    /// Every host cost measured alone by `scale`: the step's own process's layer (its calls
    /// each repeated alone, [`StepProfile::layer_context`], at `batch`) over what the rows
    /// price the same calls at.
    Layer { batch: usize, scale: f64 },
    /// Every host cost measured alone by `scale`: one decoder layer timed before each of the
    /// step's own samples (the decode crate's [`StepProfile::layer_beside`] row at the
    /// step's `batch`: the step's host state, its calls in sequence) over what the rows
    /// price the same calls at. The layer's calls ran in their sequence, so the context is
    /// in `scale`; no context factor is applied on top.
    Beside { batch: usize, scale: f64 },
}

/// The host's context factor and where it was measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Context {
    pub factor: f64,
    pub from: ContextFrom,
}

/// Where a [`Context`] factor was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextFrom {
    /// The floor's `mixed` over `blocked` rows (the profile's
    /// [`StepProfile::context_floors`]): eight kinds of one-element call, switching kind on
    /// every call or in runs of a kind, each at its own control.
    Floors,
    /// One decoder layer's calls in their sequence over the same calls each repeated alone
    /// ([`StepProfile::layer_context`]: the decode crate's `layer` / `layer_blocked`,
    /// scripts/peer.py's `layer_flat` / `layer_calls` for transformers), at this batch: the
    /// step's own sequence of calls.
    Layer { batch: usize },
}

/// How host costs measured alone become host costs inside a step (docs/method.md,
/// "Composing a step"). GPU eager steps only: a graph has no host cost per call, and on the
/// CPU a call's host time is its work too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostModel {
    /// Host costs as each row measured them alone.
    AsMeasured,
    /// Times the context factor ([`Context`]): the profile's own layer, its calls in
    /// sequence over each repeated alone, where the run has those rows; else the floor's
    /// `mixed` over `blocked` (the same one-element calls switching kind on every call, or
    /// in runs of a kind), each at its own control.
    Context,
    /// Each host cost scaled to one host speed first ([`HostSpeed`]): where the run has the
    /// layer timed beside the step's own samples ([`beside_ns`]), to that layer (its calls
    /// in sequence: the context included); else where it has the profile's layer rows, the
    /// step's own process's (the layer's calls each alone over what the rows price them
    /// at), then times the context factor; else each row by its control (the floor's add
    /// timed beside each sample: to the measured step's own control where the decode crate
    /// measured it, else to the run's median), then times the context factor.
    Controlled,
}

impl HostModel {
    /// The default host model, the one `opbench predict` and the report both price `q`'s
    /// step with unless told otherwise: `controlled` on a GPU where the run has the
    /// profile's [`layer_rows`] or its layer beside the step ([`beside_ns`]) — the
    /// best-measured (docs/findings.md: the tch steps within ±2%, the HF step within ±8% in
    /// the host's fast state, H200, 2026-12-01) — else `as-measured`.
    pub fn default_for(run: &Run, q: &Query) -> HostModel {
        let layer = layer_rows(run, q).is_some() || beside_ns(run, q).is_some();
        if q.device.is_gpu() && q.mode != Mode::Graph && layer {
            HostModel::Controlled
        } else {
            HostModel::AsMeasured
        }
    }

    pub const ALL: [HostModel; 3] = [
        HostModel::AsMeasured,
        HostModel::Context,
        HostModel::Controlled,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            HostModel::AsMeasured => "as-measured",
            HostModel::Context => "context",
            HostModel::Controlled => "controlled",
        }
    }
}

impl std::str::FromStr for HostModel {
    type Err = rundir::UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        rundir::UnknownValue::find(s, &Self::ALL, Self::as_str)
    }
}

/// Which of a host-timed case's samples price it (docs/method.md, "The host's state").
///
/// A host whose speed switches between states (the H200 VM: whole processes, sometimes
/// whole rows, at 1.5–2× the fast state's step time) makes a row's median a mix of states
/// that differs from row to row; the fast state is the host at its undisturbed speed,
/// the same state for every row and for the measured step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostState {
    /// Each row's median, as the run publishes it.
    Typical,
    /// Each host-timed row (and the measured step) at the [`FAST_QUANTILE`] of its samples
    /// pooled over the run's executions.
    Fast,
}

/// The quantile of a case's pooled samples that [`HostState::Fast`] prices it at: low
/// enough to leave out the slow state where one execution of several was fast, high
/// enough that one sample's luck does not set it.
pub const FAST_QUANTILE: f64 = 0.1;

impl HostState {
    pub const ALL: [HostState; 2] = [HostState::Typical, HostState::Fast];
    /// The state printed beside this one.
    pub fn other(self) -> Self {
        match self {
            HostState::Typical => HostState::Fast,
            HostState::Fast => HostState::Typical,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Typical => "typical",
            HostState::Fast => "fast",
        }
    }
}

impl std::str::FromStr for HostState {
    type Err = rundir::UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        rundir::UnknownValue::find(s, &Self::ALL, Self::as_str)
    }
}

/// `run` with its rows priced in host state `state`: [`HostState::Typical`] is the run as
/// loaded; [`HostState::Fast`] prices every ok row timed by the host's clock (not GPU
/// events or graph replays) at the median of its clean samples (none flagged by
/// [`rundir::Sample::flags`]: no steal, no burst of switches, the host control around it
/// within [`rundir::HOST_SLOW`]× its median, no stalled stretch of its calls, no GPU
/// throttled below its case's usual clock; in a run of several executions, over all of them,
/// less an execution the case ran slow through: [`rundir::SampleFlag::HostLevel`]), where
/// its samples record their state and at least
/// three are clean; else at the [`FAST_QUANTILE`] of its samples pooled over executions.
/// The row's interval is dropped (it was the median's) and its note says which and how
/// many samples priced it. Rows without samples keep their median. In either state, a row
/// sampled in rounds with a base row ([`StepProfile::paired_sites`]) is then read against
/// it pair by pair ([`read_in_pairs`]). Errors: samples.csv unreadable in the fast state
/// (in the typical state such a run is returned as loaded).
pub fn at_host_state(run: &Run, state: HostState) -> Result<Run, AnalysisError> {
    let mut out = run.clone();
    let samples = match (state, run.samples()) {
        (_, Ok(s)) => s,
        // a run without readable samples has no pairs to read: as loaded
        (HostState::Typical, Err(_)) => return Ok(out),
        (HostState::Fast, Err(e)) => return Err(e.into()),
    };
    if state == HostState::Fast {
        for r in out
            .results
            .iter_mut()
            .filter(|r| r.is_ok() && !r.key.mode.is_device())
        {
            let of: &[rundir::Sample] = samples.get(&r.key).map_or(&[], Vec::as_slice);
            at_fast_state(r, of);
        }
    }
    read_in_pairs(&mut out, &samples, state);
    Ok(out)
}

/// `r` at the median of its clean samples `of`, else at their [`FAST_QUANTILE`].
fn at_fast_state(r: &mut ResultRow, of: &[rundir::Sample]) {
    let mut v: Vec<f64> = of.iter().map(|s| s.per_call_ns()).collect();
    if v.is_empty() {
        return;
    }
    let clean = clean_samples(of);
    let how = if clean.len() >= 3 {
        let clean: Vec<f64> = clean.iter().map(|s| s.per_call_ns()).collect();
        r.median_ns = Some(stats::median(&clean));
        format!(
            "fast state: the median of its {} clean samples of {}",
            clean.len(),
            v.len()
        )
    } else {
        v.sort_by(f64::total_cmp);
        r.median_ns = Some(stats::quantile_sorted(&v, FAST_QUANTILE));
        format!(
            "fast state: the {:.0}th percentile of its {} samples",
            100.0 * FAST_QUANTILE,
            v.len()
        )
    };
    append_note(r, &how);
    r.ci_low_ns = None;
    r.ci_high_ns = None;
}

/// The samples of `of` that carry no state flag (none where they record no state).
fn clean_samples(of: &[rundir::Sample]) -> Vec<&rundir::Sample> {
    rundir::flag_each(of)
        .map(|flags| {
            of.iter()
                .zip(flags)
                .filter(|(_, f)| !f)
                .map(|(s, _)| s)
                .collect()
        })
        .unwrap_or_default()
}

fn append_note(r: &mut ResultRow, how: &str) {
    r.note = Some(match r.note.take() {
        Some(n) => format!("{n}; {how}"),
        None => how.to_string(),
    });
}

/// The pairs of `a`'s and `b`'s samples taken in the same round: the i-th of each in an
/// execution that took as many of one as of the other (an execution that did not is left
/// out). With `clean_only`, the pairs where neither sample carries a state flag, where at
/// least three are.
fn round_pairs<'s>(
    a: &'s [rundir::Sample],
    b: &'s [rundir::Sample],
    clean_only: bool,
) -> Vec<(&'s rundir::Sample, &'s rundir::Sample)> {
    type Marked<'s> = std::collections::BTreeMap<u32, Vec<(&'s rundir::Sample, bool)>>;
    // each sample by execution, in order, with whether it is clean (none where no state)
    let marked = |of: &'s [rundir::Sample]| -> Marked<'s> {
        let flags = rundir::flag_each(of);
        let mut out = Marked::new();
        for (i, s) in of.iter().enumerate() {
            let clean = flags.as_ref().is_some_and(|f| !f[i]);
            out.entry(s.execution).or_default().push((s, clean));
        }
        out
    };
    let (ea, eb) = (marked(a), marked(b));
    let pairs: Vec<_> = ea
        .iter()
        .filter_map(|(e, xs)| Some((xs, eb.get(e)?)))
        .filter(|(xs, ys)| xs.len() == ys.len())
        .flat_map(|(xs, ys)| xs.iter().zip(ys))
        .collect();
    let clean = pairs.iter().filter(|((_, x), (_, y))| *x && *y).count();
    pairs
        .into_iter()
        .filter(|((_, x), (_, y))| !clean_only || clean < 3 || (*x && *y))
        .map(|((x, _), (y, _))| (*x, *y))
        .collect()
}

/// Every ok row of `run` sampled in rounds with a base row ([`StepProfile::paired_sites`])
/// read against it pair by pair: its median becomes the base's (as priced in `state`) plus
/// the median of the rounds' differences, or times the median of their ratios — the two
/// rows' difference or ratio within each round, where one state held both, not between
/// two medians that may each come from a different state of the host. In the fast state
/// the pairs whose two samples are clean (all, where fewer than three are). A row whose
/// samples do not pair keeps its median.
pub fn read_in_pairs(
    run: &mut Run,
    samples: &std::collections::BTreeMap<CaseKey, Vec<rundir::Sample>>,
    state: HostState,
) {
    for profile in StepProfile::EVERY {
        for p in profile.paired_sites() {
            let keys: Vec<(CaseKey, CaseKey)> = run
                .ok_rows()
                .filter(|r| r.key.op == OpKind::Decode)
                .filter(|r| r.key.variant == profile.as_str() && r.key.site == p.site)
                .map(|r| {
                    let mut base = r.key.clone();
                    base.series.site = p.base.into();
                    (r.key.clone(), base)
                })
                .collect();
            for (key, base_key) in keys {
                let (Some(a), Some(b)) = (samples.get(&key), samples.get(&base_key)) else {
                    continue;
                };
                let Some(base) = run
                    .row(&base_key)
                    .filter(|r| r.is_ok())
                    .and_then(|r| r.median_ns)
                else {
                    continue;
                };
                let pairs = round_pairs(a, b, state == HostState::Fast);
                if pairs.len() < 3 {
                    continue;
                }
                let per = |(x, y): &(&rundir::Sample, &rundir::Sample)| match p.how {
                    Pairing::Difference => x.per_call_ns() - y.per_call_ns(),
                    Pairing::Ratio => x.per_call_ns() / y.per_call_ns().max(f64::MIN_POSITIVE),
                };
                let m = stats::median(&pairs.iter().map(per).collect::<Vec<_>>());
                let (median, how) = match p.how {
                    Pairing::Difference => (base + m, "plus the median of their differences"),
                    Pairing::Ratio => (base * m, "times the median of their ratios"),
                };
                if let Some(r) = run.results.iter_mut().find(|r| r.key == key) {
                    r.median_ns = Some(median);
                    r.ci_low_ns = None;
                    r.ci_high_ns = None;
                    append_note(
                        r,
                        &format!(
                            "read against {} in {} rounds that sampled both: its median {how}",
                            p.base,
                            pairs.len()
                        ),
                    );
                }
            }
        }
    }
}

/// What to compose.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    pub model: &'a ModelConfig,
    pub batch: usize,
    /// A decode step: the cache length L before it; a prefill: the prompt's length S.
    pub ctx: usize,
    /// A decode step (one new token per sequence on a cache of `ctx`) or a prefill (a prompt
    /// of `ctx` tokens into an empty cache: the time to first token).
    pub phase: Phase,
    pub profile: StepProfile,
    pub device: DeviceId,
    pub dtype: DType,
    pub mode: Mode,
    pub host: HostModel,
}

impl Query<'_> {
    /// The step this query composes.
    pub fn step(&self) -> Step {
        match self.phase {
            Phase::Decode => Step::decode(self.batch, self.ctx),
            Phase::Prefill => Step::prefill(self.batch, self.ctx),
        }
    }

    /// The decode crate's whole-step case for this query, in `mode`.
    pub fn step_key(&self, mode: Mode) -> CaseKey {
        self.decode_key(self.profile.as_str(), "step", mode)
    }

    /// A decode-crate (or peer) case of this query's shape: `variant`, `site`, `mode`.
    pub fn decode_key(&self, variant: &str, site: &str, mode: Mode) -> CaseKey {
        let step = self.step();
        SeriesKey {
            op: OpKind::Decode,
            variant: variant.into(),
            site: site.into(),
            model: self.model.name.clone(),
            phase: self.phase,
            q_len: step.q_len,
            kv_len: Some(step.kv_len()),
            dtype: self.dtype,
            device: self.device,
            mode,
        }
        .at(self.batch)
    }
}

/// One decoder layer of the profile's step measured in the step's own process
/// ([`StepProfile::layer_context`]): its calls in sequence and each repeated alone, ns per
/// layer, at `batch`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerRows {
    pub batch: usize,
    pub in_sequence_ns: f64,
    pub alone_ns: f64,
}

/// `q`'s [`LayerRows`] at the smallest batch the run has both (where the host costs come
/// from), in `q.mode`; `None` where it has none.
pub fn layer_rows(run: &Run, q: &Query) -> Option<LayerRows> {
    let (variant, in_sequence, _) = q.profile.layer_context();
    let series = q.decode_key(variant, in_sequence, q.mode).series;
    let mut batches: Vec<usize> = run
        .ok_rows()
        .filter(|r| r.key.series == series)
        .map(|r| r.batch)
        .collect();
    batches.sort_unstable();
    batches
        .into_iter()
        .find_map(|batch| layer_rows_at(run, q, batch))
}

/// `q`'s [`LayerRows`] at `batch`, in `q.mode`; `None` where the run lacks either row.
pub fn layer_rows_at(run: &Run, q: &Query, batch: usize) -> Option<LayerRows> {
    let (variant, in_sequence, alone) = q.profile.layer_context();
    let at = |site: &str| {
        let key = q.decode_key(variant, site, q.mode).series.at(batch);
        run.row(&key).filter(|r| r.is_ok())?.median_ns
    };
    let (seq, each) = (at(in_sequence)?, at(alone)?);
    (each > 0.0).then_some(LayerRows {
        batch,
        in_sequence_ns: seq,
        alone_ns: each,
    })
}

/// A framework part measured in sequence ([`shapes::OtherCall::in_sequence`]): the first
/// (whole, parts) pair of scripts/peer.py rows the run has at `q`'s shape, and their
/// medians, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InSequence {
    pub whole: &'static str,
    pub parts: &'static str,
    pub whole_ns: f64,
    pub parts_ns: f64,
}

impl InSequence {
    /// The part: whole − parts, floored at 0.
    pub fn ns(&self) -> f64 {
        (self.whole_ns - self.parts_ns).max(0.0)
    }
}

/// `pairs`' first pair with both rows at `q`'s shape in `q.mode` (a difference of two rows
/// in the same state: a difference's own samples have no host state, so their 10th
/// percentile is not the states' difference).
pub fn in_sequence(
    run: &Run,
    q: &Query,
    pairs: &[(&'static str, &'static str)],
) -> Option<InSequence> {
    let at = |site: &str| {
        run.row(&q.decode_key(StepProfile::Transformers.as_str(), site, q.mode))
            .filter(|r| r.is_ok())?
            .median_ns
    };
    pairs.iter().find_map(|&(whole, parts)| {
        Some(InSequence {
            whole,
            parts,
            whole_ns: at(whole)?,
            parts_ns: at(parts)?,
        })
    })
}

/// One decoder layer of `q`'s step timed before each of the step's own samples, ns per
/// layer, at `q`'s batch in `q.mode` (the decode crate's [`StepProfile::layer_beside`]
/// row, scripts/peer.py's for transformers); `None` where the run has none (runs from before
/// it: the peer's since 2026-12-02).
pub fn beside_ns(run: &Run, q: &Query) -> Option<f64> {
    let (variant, site) = q.profile.layer_beside();
    run.row(&q.decode_key(variant, site, q.mode))
        .filter(|r| r.is_ok())?
        .median_ns
        .filter(|t| *t > 0.0)
}

/// One decoder layer inside the HF step, and the step's own work, from the step measured
/// with only its first few layers (scripts/peer.py's `layers<N>` rows, N = 1 and 8): the
/// framework's per-layer Python measured where it runs, not as a residual.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerSlope {
    /// The fewest and most layers measured, and the step at each.
    pub few: (usize, f64),
    pub many: (usize, f64),
    /// (many − few) per layer between them.
    pub per_layer_ns: f64,
    /// The step at `few` layers less those layers: embedding, mask, rotary, final norm,
    /// lm_head, argmax and the model's own Python.
    pub per_step_ns: f64,
    /// The two steps' intervals do not overlap (the difference is measured, not noise), or
    /// do; `None` where a row has no interval (the fast host state drops them).
    pub resolved: Option<bool>,
}

impl LayerSlope {
    /// The step with `layers` layers, were each layer to cost what the measured ones did.
    pub fn step_ns(&self, layers: usize) -> f64 {
        self.per_step_ns + layers as f64 * self.per_layer_ns
    }
}

/// The HF step's [`LayerSlope`] at `q`'s shape in `q.mode`, from its `layers<N>` rows with
/// the fewest and the most layers; `None` where the run has fewer than two such counts.
pub fn layer_slope(run: &Run, q: &Query) -> Option<LayerSlope> {
    let mut at: Vec<(usize, &ResultRow)> = run
        .ok_rows()
        .filter_map(|r| Some((r.key.site.strip_prefix("layers")?.parse().ok()?, r)))
        .filter(|(_, r)| {
            r.key == q.decode_key(StepProfile::Transformers.as_str(), &r.key.site, q.mode)
        })
        .collect();
    at.sort_by_key(|(n, _)| *n);
    let (&(n0, r0), &(n1, r1)) = (at.first()?, at.last()?);
    let (t0, t1) = (r0.median_ns?, r1.median_ns?);
    if n1 == n0 {
        return None;
    }
    let per_layer_ns = (t1 - t0) / (n1 - n0) as f64;
    let resolved = match (r0.ci_high_ns, r1.ci_low_ns) {
        (Some(hi0), Some(lo1)) => Some(lo1 > hi0),
        _ => None,
    };
    Some(LayerSlope {
        few: (n0, t0),
        many: (n1, t1),
        per_layer_ns,
        per_step_ns: t0 - n0 as f64 * per_layer_ns,
        resolved,
    })
}

impl Prediction {
    /// What the plan's calls of one layer cost the host: every component's calls that
    /// recur per layer, divided among the `layers`.
    pub fn per_layer_ns(&self, layers: usize) -> f64 {
        self.components
            .iter()
            .map(|c| (c.calls / layers.max(1)) as f64 * self.host_per_call(c))
            .sum()
    }
}

/// Bytes a planned call moves as its crate counts them.
fn call_bytes(p: &Problem, variant: &str, elem: usize) -> u64 {
    match (p.op, variant) {
        (OpKind::KvCache, "cat") => p.cat_bytes(elem).unwrap_or(p.bytes(elem)),
        _ => p.bytes(elem),
    }
}

/// Compose a decode step from a run.
///
/// Per site: its pipelined time at this batch (measured, else from its series' fit, never
/// below the dispatch floor), its host cost (its series' pipelined time at the smallest
/// batch: dispatch and launch do not grow with the batch) and its device time (GPU events
/// where measured at this case; else the fit's work / rate; else the pipelined time when it
/// is more than twice the host cost, since the device is then what the call waits for; else
/// the pipelined time as an upper bound). Where the run has the copy ceiling, no part moves
/// its bytes faster than that: an op measured alone re-reads buffers that may sit in cache,
/// while a step streams every weight and the KV cache from memory. On the CPU a call the
/// run timed in `pipelined_cold` mode is priced with its state read from memory instead
/// ([`Source::Cold`]), which the ceiling does not raise. On a GPU the step is
/// max(Σ host, Σ device); on the CPU it is the plain sum. Missing measurements are an
/// [`AnalysisError::Input`] naming the case.
pub fn predict(run: &Run, q: &Query) -> Result<Prediction, AnalysisError> {
    predict_with(run, &fit_run(run), q)
}

/// [`predict`] with the run's fits already made.
pub fn predict_with(run: &Run, fits: &Fits, q: &Query) -> Result<Prediction, AnalysisError> {
    if let Some(why) = q.model.family.not_composed() {
        return Err(AnalysisError::Input(format!(
            "{} ({} family): opbench cannot compose its step: {why}",
            q.model.name, q.model.family
        )));
    }
    let pricer = Pricer::new(run, fits, q)?;
    let plan = StepPlan::new(q.model, q.profile, q.step());
    let mut components = Vec::new();
    // every case the run lacks, named together
    let mut missing: Vec<String> = Vec::new();
    let priced = plan
        .measured
        .iter()
        .map(|c| pricer.measured_call(c))
        .chain(plan.other.iter().map(|u| pricer.other_call(u)));
    for c in priced {
        match c {
            Ok(Some(c)) => components.push(c),
            Ok(None) => {}
            Err(m) => missing.push(m),
        }
    }
    let sequence = pricer.cpu_sequence();
    if let Some(l) = sequence {
        let t = (l.in_sequence_ns - l.alone_ns).max(0.0);
        components.push(Component {
            op: None,
            variant: "-",
            site: IN_SEQUENCE,
            calls: q.model.num_hidden_layers,
            per_call_ns: t,
            host_ns: t,
            device_ns: 0.0,
            source: Source::Measured,
            device_source: DeviceSource::None,
        });
    }
    if !missing.is_empty() {
        return Err(pricer.missing(&missing));
    }
    let host_speed = pricer.host_speed(&plan, &mut components);
    // with the layer beside the step, no context factor was applied on top
    let context = match host_speed {
        Some(HostSpeed::Beside { .. }) => None,
        _ => pricer.context,
    };
    let sum = |f: fn(&Component) -> f64| {
        components
            .iter()
            .map(|c| f(c) * c.calls as f64)
            .sum::<f64>()
    };
    let host_ns = sum(|c| c.host_ns);
    let device_ns = sum(|c| c.device_ns);
    let serial_ns = sum(|c| c.per_call_ns);
    let gpu = pricer.gpu;
    let step_ns = if gpu {
        host_ns.max(device_ns)
    } else {
        serial_ns
    };
    Ok(Prediction {
        plan,
        components,
        host_ns,
        device_ns,
        serial_ns,
        step_ns,
        batch: q.batch,
        gpu,
        context,
        sequence,
        host_speed,
        switch_ns: pricer.switch_ns,
        measured: step_row(run, q, q.mode).cloned(),
        measured_device: step_row(run, q, Mode::Device).cloned(),
    })
}

/// What pricing one query's step needs from its run, worked out once: the rows, the
/// dispatch floors, the host speed and context to price at, the kernel-switch cost and the
/// copy ceiling. Its methods price one call each.
struct Pricer<'a> {
    run: &'a Run,
    fits: &'a Fits,
    q: &'a Query<'a>,
    rows: Vec<&'a ResultRow>,
    gpu: bool,
    /// A replayed graph: no host dispatch per call; each call costs its time in a graph.
    graph: bool,
    elem: usize,
    floor_kernel: f64,
    floor_view: f64,
    floor_device: Option<f64>,
    /// `controlled` on a GPU's eager step.
    adjust: bool,
    layer: Option<LayerRows>,
    beside: Option<f64>,
    /// The host speed (control ns) every row's host cost is scaled to, and whether it is
    /// the measured step's own.
    control_speed: Option<(f64, bool)>,
    context: Option<Context>,
    factor: f64,
    switch_ns: Option<f64>,
    kernel_factor: f64,
    view_factor: f64,
    /// The measured copy ceiling (bytes/ns).
    copy_gbps: Option<f64>,
}

impl<'a> Pricer<'a> {
    fn new(run: &'a Run, fits: &'a Fits, q: &'a Query<'a>) -> Result<Self, AnalysisError> {
        let gpu = q.device.is_gpu();
        // the step's phase and tokens per sequence (a prefill's rows at its prompt length);
        // the floors and ceilings, measured once, serve both phases
        let step = q.step();
        let rows: Vec<&ResultRow> = run
            .ok_rows()
            .filter(|r| r.dtype == q.dtype && r.device == q.device)
            .filter(|r| {
                matches!(r.op, OpKind::Floor | OpKind::Ceiling)
                    || (r.phase == step.phase && r.q_len == step.q_len)
            })
            .collect();
        let mut p = Pricer {
            run,
            fits,
            q,
            rows,
            gpu,
            graph: q.mode == Mode::Graph,
            elem: q.dtype.size(),
            floor_kernel: 0.0,
            floor_view: 0.0,
            floor_device: None,
            // the host models (context factor, host-speed scaling) apply to a GPU's eager
            // step, whose host cost is dispatch and launch; on the CPU a call's host time is
            // its work too, which neither describes, and a graph has no host cost per call
            adjust: gpu && q.mode != Mode::Graph && q.host == HostModel::Controlled,
            layer: None,
            beside: None,
            control_speed: None,
            context: None,
            factor: 1.0,
            switch_ns: None,
            kernel_factor: 1.0,
            view_factor: 1.0,
            copy_gbps: None,
        };
        p.set_floors()?;
        p.set_host_speed();
        p.set_context();
        let (add, view) = q.profile.floors();
        p.kernel_factor = p.factor * p.at_speed(p.floor_row(add, q.mode));
        p.view_factor =
            p.factor * p.at_speed(p.floor_row(view, q.mode).or(p.floor_row(add, q.mode)));
        // a step streams every weight and the KV cache from memory, while an op benchmarked
        // alone re-reads the same buffers and may be served from cache; no call can move
        // its bytes faster than the ceiling
        p.copy_gbps = p
            .rows
            .iter()
            .find(|r| r.op == OpKind::Ceiling && r.site == "copy" && r.mode == q.mode)
            .and_then(|r| r.gbps)
            .filter(|g| *g > 0.0);
        Ok(p)
    }

    /// The dispatch floors, and the device's cost of switching kernels: op cases repeat
    /// one kernel, a step switches on every call (graph mode: each node after another).
    fn set_floors(&mut self) -> Result<(), AnalysisError> {
        let q = self.q;
        let (add, view) = q.profile.floors();
        let has_mode = self
            .rows
            .iter()
            .any(|r| r.mode == q.mode && r.dtype == q.dtype && r.device == q.device);
        self.floor_kernel = self.floor(add, q.mode).ok_or_else(|| {
            if !has_mode {
                // the fix is the mode, not the floor
                return AnalysisError::Input(format!(
                    "{}: the run has no {} {} rows on {}: time them into the same run \
                     (`OPBENCH_MODES={} OPBENCH_DTYPE={} OPBENCH_RUN=<its run id> scripts/bench`)",
                    self.run.dir.display(),
                    q.dtype,
                    q.mode,
                    q.device,
                    if q.mode == Mode::Graph {
                        "graph,graph_cold".to_string()
                    } else {
                        q.mode.to_string()
                    },
                    q.dtype
                ));
            }
            AnalysisError::Input(format!(
                "{}: no dispatch floor `{add}` for {} {} {} (run `cargo bench -p harness`{} into the same run)",
                self.run.dir.display(),
                q.device,
                q.dtype,
                q.mode,
                if self.python() { " and scripts/peer.py" } else { "" }
            ))
        })?;
        // a run without the view floor prices a view as a kernel's dispatch: an upper bound
        self.floor_view = self.floor(view, q.mode).unwrap_or(self.floor_kernel);
        self.floor_device = self.floor("add", Mode::Device);
        let device_mode = if self.graph {
            Mode::Graph
        } else {
            Mode::Device
        };
        self.switch_ns = match (
            self.floor("mixed", device_mode),
            self.floor("blocked", device_mode),
        ) {
            (Some(m), Some(b)) if self.gpu => Some((m - b).max(0.0)),
            _ => None,
        };
        Ok(())
    }

    /// The host speed to price at under `controlled`: the measured step's control, else
    /// the run's median; none where the layer's rows (or the layer beside the step) scale
    /// the host costs after the composition instead ([`Pricer::host_speed`]).
    fn set_host_speed(&mut self) {
        let q = self.q;
        let controls: Vec<f64> = self
            .rows
            .iter()
            .filter(|r| r.mode == q.mode)
            .filter_map(|r| r.control_ns)
            .collect();
        let step_control = step_row(self.run, q, q.mode).and_then(|r| r.control_ns);
        self.layer = layer_rows(self.run, q);
        self.beside = beside_ns(self.run, q).filter(|_| self.adjust);
        let per_row = self.adjust && self.layer.is_none() && self.beside.is_none();
        self.control_speed = match (per_row, step_control) {
            (false, _) => None,
            (true, Some(c)) => Some((c, true)),
            (true, None) if !controls.is_empty() => Some((stats::median(&controls), false)),
            (true, None) => None,
        };
    }

    /// What switching between kinds of call costs the host: the layer's calls in sequence
    /// over each alone, else the mixed floor over the blocked one (host models other than
    /// `as-measured`, a GPU's eager step).
    fn set_context(&mut self) {
        let q = self.q;
        if !(self.gpu && !self.graph && q.host != HostModel::AsMeasured) {
            return;
        }
        let (mixed, blocked) = q.profile.context_floors();
        let per_call_at_speed = |variant: &str| {
            self.floor_row(variant, q.mode)
                .and_then(|r| Some(r.median_ns? * self.at_speed(Some(r))))
        };
        let layer = self.layer.map(|l| Context {
            factor: l.in_sequence_ns / l.alone_ns,
            from: ContextFrom::Layer { batch: l.batch },
        });
        let floors = || match (per_call_at_speed(mixed), per_call_at_speed(blocked)) {
            (Some(m), Some(b)) if b > 0.0 => Some(Context {
                factor: m / b,
                from: ContextFrom::Floors,
            }),
            _ => None,
        };
        self.context = layer.or_else(floors);
        self.factor = self.context.map_or(1.0, |c| c.factor);
    }

    fn python(&self) -> bool {
        self.q.profile == StepProfile::Transformers
    }

    fn switch(&self) -> f64 {
        self.switch_ns.unwrap_or(0.0)
    }

    fn row_of(
        &self,
        op: OpKind,
        variant: &str,
        site: &str,
        batch: usize,
        kv: Option<usize>,
        mode: Mode,
    ) -> Option<&'a ResultRow> {
        let model = &self.q.model.name;
        self.rows.iter().copied().find(|r| {
            r.op == op
                && r.variant == variant
                && r.site == site
                && (&r.model == model || r.model == "none")
                && r.batch == batch
                && r.kv_len == kv
                && r.mode == mode
        })
    }

    fn find(
        &self,
        op: OpKind,
        variant: &str,
        site: &str,
        batch: usize,
        kv: Option<usize>,
        mode: Mode,
    ) -> Option<f64> {
        self.row_of(op, variant, site, batch, kv, mode)
            .and_then(|r| r.median_ns)
    }

    fn floor_row(&self, variant: &str, mode: Mode) -> Option<&'a ResultRow> {
        self.row_of(OpKind::Floor, variant, "add1", 1, None, mode)
    }

    fn floor(&self, variant: &str, mode: Mode) -> Option<f64> {
        self.floor_row(variant, mode).and_then(|r| r.median_ns)
    }

    /// A row's host cost at the priced speed: scaled by (reference control / the row's).
    fn at_speed(&self, r: Option<&ResultRow>) -> f64 {
        match (self.control_speed, r.and_then(|r| r.control_ns)) {
            (Some((want, _)), Some(had)) if had > 0.0 => want / had,
            _ => 1.0,
        }
    }

    /// Whether the run measured a site in a variant at all: runs from before a site or
    /// variant existed price it as they did then (eltwise sites at the floors, a stand-in
    /// variant).
    fn has_site(&self, op: OpKind, variant: &str, site: &str) -> bool {
        self.rows
            .iter()
            .any(|r| r.op == op && r.variant == variant && r.site == site)
    }

    /// A call priced at the dispatch floors: its host cost, device time, and where the
    /// device time came from.
    fn at_floor(&self, kind: CallKind) -> (f64, f64, DeviceSource) {
        let (graph, k, switch) = (self.graph, self.floor_kernel, self.switch());
        match (kind, self.floor_device) {
            (CallKind::View, _) if graph => (0.0, 0.0, DeviceSource::None),
            (CallKind::Kernel, _) if graph => (0.0, k + switch, DeviceSource::Graph),
            (CallKind::View, _) => (self.floor_view * self.view_factor, 0.0, DeviceSource::None),
            (CallKind::Kernel, _) if !self.gpu => (k, k, DeviceSource::Pipelined),
            (CallKind::Kernel, Some(d)) => {
                (k * self.kernel_factor, d + switch, DeviceSource::Floor)
            }
            (CallKind::Kernel, None) => (k * self.kernel_factor, k, DeviceSource::Bound),
            (CallKind::Framework, _) => (0.0, 0.0, DeviceSource::None),
        }
    }

    /// A component priced at the floors.
    fn floor_component(
        &self,
        op: Option<OpKind>,
        variant: &'static str,
        site: &'static str,
        calls: usize,
        kind: CallKind,
    ) -> Component {
        let (host, device, device_source) = self.at_floor(kind);
        Component {
            op,
            variant,
            site,
            calls,
            per_call_ns: host.max(device),
            host_ns: host,
            device_ns: device,
            source: Source::Floor,
            device_source,
        }
    }

    /// One call an op crate measures: its pipelined time at this batch (measured, else its
    /// series' fit), its host cost (the series at its smallest batch) and its device time.
    /// `Err` names a case the run lacks.
    fn measured_call(&self, call: &PlannedCall) -> Result<Option<Component>, String> {
        let (q, p) = (self.q, &call.problem);
        // a run from before this variant existed: what it measured in its place
        let variant = match StepProfile::stand_in(call.variant) {
            Some(old) if !self.has_site(p.op, call.variant, p.site) => old,
            _ => call.variant,
        };
        let series = SeriesKey {
            op: p.op,
            variant: variant.into(),
            site: p.site.into(),
            model: p.model.clone(),
            phase: p.phase,
            q_len: p.q_len,
            kv_len: p.kv_len,
            dtype: q.dtype,
            device: q.device,
            mode: q.mode,
        };
        let fit = self.fits.get(&series);
        let bytes = call_bytes(p, variant, self.elem) as f64;
        let work = match fit {
            Some(f) if f.work == Work::Flops => p.flops() as f64,
            _ => bytes,
        };
        let in_mode = |mode| self.find(p.op, variant, p.site, p.batch, p.kv_len, mode);
        let measured = if self.graph {
            in_mode(Mode::GraphCold).or(in_mode(Mode::Graph))
        } else {
            in_mode(q.mode)
        };
        let (per_call, source) = match (measured, fit) {
            (Some(t), _) => (t, Source::Measured),
            (None, Some(f)) => (f.fit.predict(work).max(self.floor_kernel), Source::Fit),
            (None, None) if p.op == OpKind::Eltwise && !self.has_site(p.op, variant, p.site) => {
                // no kernel when it moves nothing (attn_contiguous at q = 1)
                let kind = if p.bytes(self.elem) == 0 {
                    CallKind::View
                } else {
                    CallKind::Kernel
                };
                return Ok(Some(self.floor_component(
                    Some(p.op),
                    variant,
                    p.site,
                    p.calls_per_step,
                    kind,
                )));
            }
            (None, None) => {
                return Err(format!(
                    "{}/{variant}/{} B={} kv_len={}",
                    p.op,
                    p.site,
                    p.batch,
                    p.kv_len.map_or("-".into(), |k| k.to_string()),
                ));
            }
        };
        // host cost: the series at its smallest batch, where dispatch dominates (noise on a
        // shared host makes a minimum over batches biased low)
        let host_row = self
            .rows
            .iter()
            .copied()
            .filter(|r| r.key.series == series)
            .min_by_key(|r| r.batch);
        let speed = self.at_speed(host_row);
        let host = host_row
            .and_then(|r| r.median_ns)
            .map_or(per_call, |h| h.min(per_call))
            * speed;
        let kernel = q.profile.kernel_variant(p.op, p.site).unwrap_or(variant);
        let (per_call, source, cold) = self.with_memory(p, kernel, bytes, per_call, source);
        let (host, device, device_source) =
            if self.gpu && shapes::moe::waits_for_device(p.op, variant) {
                // a call that waits for its kernels is serial: its whole time on the host's path
                (per_call * speed * self.factor, 0.0, DeviceSource::Waited)
            } else {
                let host = if self.graph { 0.0 } else { host * self.factor };
                let (device, from) =
                    self.device_time(p, variant, kernel, fit, work, per_call, host, source, cold);
                (host, device, from)
            };
        Ok(Some(Component {
            op: Some(p.op),
            variant,
            site: p.site,
            calls: p.calls_per_step,
            per_call_ns: per_call,
            host_ns: host,
            device_ns: device,
            source,
            device_source,
        }))
    }

    /// What reading the call's state from memory adds: its kernels' (`kernel` variant's)
    /// cold row over their warm one.
    fn penalty(&self, p: &Problem, kernel: &str, cold: Mode, warm: Mode) -> Option<f64> {
        let at = |mode| self.find(p.op, kernel, p.site, p.batch, p.kv_len, mode);
        at(cold).zip(at(warm)).map(|(c, w)| (c - w).max(0.0))
    }

    /// The call's time with its state read from memory: on the CPU its `pipelined_cold`
    /// penalty where the run timed one, and never faster than the copy ceiling moves its
    /// bytes. Returns the time, its source, and the ceiling's time (0 without one).
    fn with_memory(
        &self,
        p: &Problem,
        kernel: &str,
        bytes: f64,
        per_call: f64,
        source: Source,
    ) -> (f64, Source, f64) {
        let cpu_cold = if !self.gpu && self.q.mode == Mode::Pipelined {
            self.penalty(p, kernel, Mode::PipelinedCold, Mode::Pipelined)
        } else {
            None
        };
        let (per_call, source) = match cpu_cold {
            Some(penalty) if source == Source::Measured => (per_call + penalty, Source::Cold),
            _ => (per_call, source),
        };
        // a call timed cold already read its bytes from memory
        let cold = match (source, self.copy_gbps) {
            (Source::Cold, _) | (_, None) => 0.0,
            (_, Some(g)) => bytes / g,
        };
        if cold > per_call {
            (cold, Source::Ceiling, cold)
        } else {
            (per_call, source, cold)
        }
    }

    /// The call's device time: GPU events where measured at this case (plus its graph-cold
    /// penalty), else the fit's work / rate (for a Python call, where that is under its
    /// pipelined time), else the pipelined time when it is more than twice the host cost,
    /// else only bounded ([`DeviceSource::Bound`]); never faster than
    /// the copy ceiling, and each kernel pays the switch cost.
    #[allow(clippy::too_many_arguments)]
    fn device_time(
        &self,
        p: &Problem,
        variant: &str,
        kernel: &str,
        fit: Option<&crate::fit::SeriesFit>,
        work: f64,
        per_call: f64,
        host: f64,
        source: Source,
        cold: f64,
    ) -> (f64, DeviceSource) {
        let gpu = self.gpu;
        let python = from_python(variant);
        let cold_graph = self
            .find(p.op, kernel, p.site, p.batch, p.kv_len, Mode::GraphCold)
            .is_some();
        let cold_penalty = self
            .penalty(p, kernel, Mode::GraphCold, Mode::Graph)
            .unwrap_or(0.0);
        let (device, from) = if !gpu {
            (per_call, DeviceSource::Pipelined)
        } else if self.graph && source != Source::Ceiling {
            let from = if cold_graph {
                DeviceSource::GraphCold
            } else {
                DeviceSource::Graph
            };
            (per_call, from)
        } else if cold > 0.0 && source == Source::Ceiling {
            (cold, DeviceSource::Ceiling)
        } else if let Some(t) = self.find(p.op, kernel, p.site, p.batch, p.kv_len, Mode::Device) {
            if cold_penalty > 0.0 {
                (t + cold_penalty, DeviceSource::EventsCold)
            } else {
                (t, DeviceSource::Events)
            }
        } else if let Some(rate) = fit
            .and_then(|f| f.fit.rate())
            .filter(|&rate| !python || work / rate < per_call)
        {
            let t = (work / rate)
                .max(self.floor_device.unwrap_or(0.0))
                .min(per_call);
            (t, DeviceSource::Fit)
        } else if per_call > 2.0 * host {
            (per_call, DeviceSource::Pipelined)
        } else if python {
            // a Python call's pipelined time is the interpreter's pace: as a bound on its
            // kernels it says nothing, so they are priced at the lower end, one small kernel
            (self.floor_device.unwrap_or(per_call), DeviceSource::Bound)
        } else {
            (per_call, DeviceSource::Bound)
        };
        let (device, from) = if gpu && cold > device {
            (cold, DeviceSource::Ceiling)
        } else {
            (device, from)
        };
        // a call that launches nothing (a view-like call) switches no kernel
        if gpu && device > 0.0 {
            (device + self.switch(), from)
        } else {
            (device, from)
        }
    }

    /// A call no op crate measures: a framework part (scripts/peer.py's rows at this
    /// batch, host only) or a call at the dispatch floors. `Err` names a missing part.
    fn other_call(&self, u: &OtherCall) -> Result<Option<Component>, String> {
        if u.kind != CallKind::Framework {
            return Ok(Some(
                self.floor_component(None, "-", u.name, u.calls, u.kind),
            ));
        }
        let q = self.q;
        let framework = |site: &str| {
            self.rows.iter().copied().find(|r| {
                r.op == OpKind::Decode
                    && r.variant == "transformers"
                    && r.site == site
                    && r.model == q.model.name
                    && r.batch == q.batch
                    && r.mode == q.mode
            })
        };
        // a part measured alone takes the host's context, one measured in sequence has it
        let alone = |r: &ResultRow| Some(r.median_ns? * self.factor * self.at_speed(Some(r)));
        let in_sequence =
            in_sequence(self.run, q, u.in_sequence).map(|d| (d.ns(), d.ns(), Source::Measured));
        let priced = match (in_sequence, framework(u.name)) {
            (Some(p), _) => Some(p),
            (None, Some(r)) if u.in_sequence.is_empty() => r
                .median_ns
                .zip(alone(r))
                .map(|(t, h)| (t, h, Source::Measured)),
            // a run from before the part was measured: its old parts
            (None, _) if !u.stand_in.is_empty() => u
                .stand_in
                .iter()
                .map(|&(part, n)| {
                    let r = framework(part)?;
                    Some((r.median_ns? * n as f64, alone(r)? * n as f64))
                })
                .try_fold((0.0, 0.0), |(t, h), x| x.map(|(a, b)| (t + a, h + b)))
                .map(|(t, h)| (t, h, Source::Parts)),
            (None, _) => None,
        };
        let (t, host, source) =
            priced.ok_or_else(|| format!("decode/transformers/{} B={}", u.name, q.batch))?;
        Ok(Some(Component {
            op: None,
            variant: "-",
            site: u.name,
            calls: u.calls,
            per_call_ns: t,
            host_ns: host,
            device_ns: 0.0,
            source,
            device_source: DeviceSource::None,
        }))
    }

    /// On the CPU a call's time is its work and the calls' times add up: what a layer's
    /// calls cost more in their sequence than each repeated alone (the profile's layer rows
    /// at this batch) is a part of the step where the calls are made from Python; on a GPU
    /// the same rows are the host's context factor, and only a host model applies it.
    fn cpu_sequence(&self) -> Option<LayerRows> {
        if self.gpu || !self.q.profile.cpu_sequence() {
            None
        } else {
            layer_rows_at(self.run, self.q, self.q.batch)
        }
    }

    /// The error naming every case the run lacks.
    fn missing(&self, missing: &[String]) -> AnalysisError {
        let q = self.q;
        AnalysisError::Input(format!(
            "{}: no measurement or fit for {} case(s) of the {} step at {} {} {}: {} \
             (measured decode lengths are the grid's; fits need 3 batches{})",
            self.run.dir.display(),
            missing.len(),
            q.profile,
            q.dtype,
            q.device,
            q.mode,
            missing.join(", "),
            if self.python() {
                "; the transformers profile's rows come from scripts/peer.py, which needs \
                 transformers for the framework rows"
            } else {
                ""
            }
        ))
    }

    /// `controlled` with the layer: every host cost measured alone scaled so that the
    /// layer's calls cost what the step's own process measured them at (the layer beside
    /// the step's samples, else the layer's rows); else the control speed set up front.
    fn host_speed(&self, plan: &StepPlan, components: &mut [Component]) -> Option<HostSpeed> {
        let in_sequence_parts: Vec<&str> = plan
            .other
            .iter()
            .filter(|u| !u.in_sequence.is_empty())
            .map(|u| u.name)
            .collect();
        let alone_part = |c: &Component| !(c.op.is_none() && in_sequence_parts.contains(&c.site));
        let layers = self.q.model.num_hidden_layers.max(1);
        // what the rows price one layer's calls at, each alone (before any context factor)
        let priced: f64 = components
            .iter()
            .filter(|c| alone_part(c))
            .map(|c| (c.calls / layers) as f64 * c.host_ns / self.factor)
            .sum();
        // every host cost measured alone × `by` (the context factor already in them)
        let mut rescale = |by: f64| {
            for c in components.iter_mut().filter(|c| alone_part(c)) {
                c.host_ns *= by;
            }
        };
        match (self.adjust, self.beside, self.layer) {
            (true, Some(ns), _) if priced > 0.0 => {
                let scale = ns / priced;
                rescale(scale / self.factor);
                Some(HostSpeed::Beside {
                    batch: self.q.batch,
                    scale,
                })
            }
            (
                true,
                _,
                Some(LayerRows {
                    batch, alone_ns, ..
                }),
            ) if priced > 0.0 => {
                let scale = alone_ns / priced;
                rescale(scale);
                Some(HostSpeed::Layer { batch, scale })
            }
            _ => self
                .control_speed
                .map(|(ns, from_step)| HostSpeed::Control { ns, from_step }),
        }
    }
}

/// A step split three ways, from the transformers prediction and the same step's
/// libtorch-only (hf-eager) prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    /// Σ kernel time on a GPU (it overlaps the host's work); `None` on the CPU, where a
    /// call's work and dispatch are one pipelined time.
    pub kernels_ns: Option<f64>,
    /// The host time the same calls cost when made from tch: ATen's dispatch and launch (on
    /// the CPU, dispatch and work together).
    pub dispatch_ns: f64,
    /// The rest of the host's time: Python, nn.Module calls, transformers' own work.
    pub python_ns: f64,
}

impl Split {
    /// The transformers step `transformers` (predicted for `q`) split three ways. The
    /// libtorch share is the same calls as tch makes them (the hf-eager profile's rows) at
    /// the host speed and context of the transformers step's own process: where its host
    /// costs were scaled to its own layer, the hf-eager rows as measured alone times that
    /// scale (and, for [`HostSpeed::Layer`], the context factor; [`HostSpeed::Beside`]'s
    /// layer ran in sequence, its context in the scale) — not hf-eager's own `controlled`
    /// price, which follows the tch step's process (its own layer beside its step: at
    /// whatever state that process was in); else the hf-eager step under `q`'s host model.
    pub fn priced(
        run: &Run,
        fits: &Fits,
        q: &Query,
        transformers: &Prediction,
    ) -> Result<Split, AnalysisError> {
        let tch = Query {
            profile: StepProfile::HfEager,
            ..q.clone()
        };
        let alone = Query {
            host: HostModel::AsMeasured,
            ..tch.clone()
        };
        let libtorch = match transformers.host_speed {
            Some(HostSpeed::Layer { scale, .. }) => {
                let factor = transformers.context.map_or(1.0, |c| c.factor);
                predict_with(run, fits, &alone)?.host_time_ns() * scale * factor
            }
            // the layer beside the step ran its calls in sequence: the context is in `scale`
            Some(HostSpeed::Beside { scale, .. }) => {
                predict_with(run, fits, &alone)?.host_time_ns() * scale
            }
            _ => predict_with(run, fits, &tch)?.host_time_ns(),
        };
        Ok(Split::of(transformers, libtorch))
    }

    /// The split where the same calls cost libtorch `libtorch_ns` of host time.
    fn of(transformers: &Prediction, libtorch_ns: f64) -> Split {
        let host = transformers.host_time_ns();
        // the framework's own work is Python's whatever the calls cost; where the calls
        // from Python priced below tch's (noise: on the CPU a call's work dwarfs its
        // dispatch), Python added nothing to them and dispatch is all their time
        let calls = host - transformers.framework_ns();
        let dispatch = libtorch_ns.min(calls);
        Split {
            kernels_ns: transformers.gpu.then_some(transformers.device_ns),
            dispatch_ns: dispatch,
            python_ns: host - dispatch,
        }
    }
}

/// The default device of a run: its GPU when it has one.
pub fn default_device(run: &Run) -> DeviceId {
    run.results
        .iter()
        .map(|r| r.device)
        .find(|d| d.is_gpu())
        .unwrap_or(DeviceId::CPU)
}

/// The decode crate's ok row for the query's step in `mode`, if the run has it.
pub fn step_row<'r>(run: &'r Run, q: &Query, mode: Mode) -> Option<&'r ResultRow> {
    let key = q.step_key(mode);
    run.row(&key).filter(|r| r.is_ok())
}
