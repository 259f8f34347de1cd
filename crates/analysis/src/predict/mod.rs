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

mod host;
mod layer;
mod needs;
mod pricer;
mod split;
mod state;

pub use layer::*;
pub use needs::*;
use pricer::Pricer;
pub use split::*;
pub use state::*;

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
    /// What reading the call's state from memory adds to `per_call_ns`: on the CPU its
    /// `pipelined_cold` penalty, or the copy ceiling over its warm time; 0 where none.
    pub memory_ns: f64,
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
    Beside {
        batch: usize,
        scale: f64,
        /// The layer was read against the step's samples pair by pair, not from its median.
        paired: bool,
    },
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
    compose(run, fits, q, None)
}

/// [`predict_with`] with the host speed `held` (another prediction's, of the same query)
/// instead of the one this run's rows give: a change priced on the rows (a knob, say) that
/// the layer the scale is read from was not measured with moves that layer as it moves its
/// calls, which leaves the scale as it was. A `Control` speed is each row's own and is
/// read as usual.
pub fn predict_holding(
    run: &Run,
    fits: &Fits,
    q: &Query,
    held: Option<HostSpeed>,
) -> Result<Prediction, AnalysisError> {
    compose(run, fits, q, held)
}

fn compose(
    run: &Run,
    fits: &Fits,
    q: &Query,
    held: Option<HostSpeed>,
) -> Result<Prediction, AnalysisError> {
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
    let mut missing: Vec<MissingCase> = Vec::new();
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
    let sequence = pricer.cpu_sequence().map(|l| {
        // what the calls' rows already price for reading their state from memory is taken
        // off the sequence's excess: on the CPU it is mostly the same cache effect (issue
        // 69: counted twice, a step priced 1.34× its measurement)
        let layers = q.model.num_hidden_layers.max(1);
        let memory_ns = components
            .iter()
            .map(|c| (c.calls / layers) as f64 * c.memory_ns)
            .sum();
        LayerRows { memory_ns, ..l }
    });
    if let Some(l) = sequence {
        let t = l.excess_ns();
        components.push(Component {
            op: None,
            variant: "-",
            site: IN_SEQUENCE,
            calls: q.model.num_hidden_layers,
            per_call_ns: t,
            host_ns: t,
            device_ns: 0.0,
            memory_ns: 0.0,
            source: Source::Measured,
            device_source: DeviceSource::None,
        });
    }
    if !missing.is_empty() || pricer.floor_missing.is_some() {
        return Err(pricer.missing(missing, &components));
    }
    let host_speed = pricer.host_speed(&plan, &mut components, held);
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

/// The device's measured copy rate (GB/s: bytes read + written per ns): the harness's copy
/// ceiling in `mode`, or with `None` the fastest over the modes it was timed in (a bound on
/// a step's time takes the highest rate the device was seen to copy at); in the dtype asked
/// for, else in any (bytes are bytes). The one place it is read: the pricer's ceiling on
/// every call (the query's mode), the bandwidth bound and the report's ceilings (`None`).
pub fn copy_gbps(run: &Run, device: DeviceId, dtype: DType, mode: Option<Mode>) -> Option<f64> {
    let copy = |exact: bool| {
        run.ok_rows()
            .filter(|r| r.op == OpKind::Ceiling && r.site == "copy" && r.device == device)
            .filter(|r| mode.is_none_or(|m| r.mode == m) && (!exact || r.dtype == dtype))
            .filter_map(|r| r.gbps.filter(|g| *g > 0.0))
            .reduce(f64::max)
    };
    copy(true).or_else(|| copy(false))
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

/// The cache lengths L before a decode step that `run`'s attention and cache rows of `model`
/// timed (a row's `kv_len` is L + 1: the new token's entry included; generate()'s rows,
/// whose cache grows over the call, are not a length of the grid).
pub fn measured_lengths(run: &Run, model: &str) -> std::collections::BTreeSet<usize> {
    run.results
        .iter()
        .filter(|r| r.key.model == model && r.key.phase == Phase::Decode)
        .filter(|r| matches!(r.key.op, OpKind::Sdpa | OpKind::KvCache))
        .filter_map(|r| r.key.kv_len)
        .map(|kv| kv.saturating_sub(1))
        .collect()
}

/// The batch sizes `run`'s decode rows of `model` timed.
pub fn measured_batches(run: &Run, model: &str) -> std::collections::BTreeSet<usize> {
    use std::collections::{BTreeMap, BTreeSet};
    // the batches every op crate measured: the peer's rows (Python ops, the HF step) time
    // batches of their own, which a step composed from the crates cannot take alone
    let mut by_op: BTreeMap<rundir::OpKind, BTreeSet<usize>> = BTreeMap::new();
    for r in run.results.iter().filter(|r| {
        r.key.model == model
            && r.key.phase == Phase::Decode
            && !r.key.variant.starts_with("py-")
            && !matches!(r.key.variant.as_str(), "transformers" | "python")
    }) {
        by_op.entry(r.key.op).or_default().insert(r.key.batch);
    }
    let mut sets = by_op.into_values();
    let first = sets.next().unwrap_or_default();
    sets.fold(first, |all, s| all.intersection(&s).copied().collect())
}
