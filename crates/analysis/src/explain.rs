//! One prediction and everything that stands beside it, computed once: what `opbench
//! predict` prints. The CLI formats an [`Explanation`]; it prices nothing and looks up no
//! row of the run.

use std::path::PathBuf;

use rundir::{Mode, Phase, Run};
use shapes::StepProfile;

use crate::AnalysisError;
use crate::fit::{Fits, fit_run};
use crate::generate::Generate;
use crate::help::Lever;
use crate::knob::KnobPair;
use crate::predict::{
    HostModel, HostState, InSequence, LayerSlope, Prediction, Query, Split, at_host_state,
    in_sequence, layer_slope, predict, predict_with, step_row,
};
use crate::traced::{StepCheck, Traces};

/// What `opbench predict` says of one query.
#[derive(Debug, Clone)]
pub struct Explanation<'a> {
    pub query: Query<'a>,
    /// The host state the run's rows were read at.
    pub state: HostState,
    /// The run's directory, as given.
    pub run_dir: PathBuf,
    pub prediction: Prediction,
    /// The step under the other host models, where one of them prices it differently
    /// (a GPU's pipelined step only).
    pub host_models: Vec<(HostModel, Prediction)>,
    /// The step read at the other host state, where the run's samples make it differ.
    pub other_state: Option<OtherState>,
    /// The transformers profile's split, layer and generate() readings.
    pub transformers: Option<Transformers>,
    /// The step priced from graph-mode rows (a GPU, not already the graph mode).
    pub graph: Option<Measured>,
    /// The traced step beside the plan, where the run has a trace pass.
    pub step_check: Option<StepCheck>,
    /// What would help (decode only): the levers ranked, and the bandwidth bound.
    pub help: Option<(Vec<Lever>, Lever)>,
}

/// A prediction and its measured counterpart (median ns), where the run has one.
#[derive(Debug, Clone)]
pub struct Measured {
    pub prediction: Prediction,
    pub measured_ns: Option<f64>,
}

/// The step at the other host state.
#[derive(Debug, Clone)]
pub struct OtherState {
    pub state: HostState,
    pub step: Measured,
}

/// The transformers profile's readings beside its prediction.
#[derive(Debug, Clone)]
pub struct Transformers {
    pub split: Option<Split>,
    /// The measured transformers step (pipelined), where the run has it.
    pub step_ns: Option<f64>,
    /// The same step measured in tch (the decode crate's hf-eager, pipelined).
    pub tch_step_ns: Option<f64>,
    /// The tch step as it would run in the transformers step's host state: where both
    /// steps are host-bound and both predictions scale the host to their own process
    /// (`controlled`), the tch step × the transformers process's host scale over the tch
    /// process's, with the two scales. The measured split in one host state with the
    /// predicted one.
    pub tch_at_step_host: Option<HostShift>,
    /// One decoder layer: as called (in sequence), its calls flat, each alone.
    pub layer: Option<LayerReading>,
    pub slope: Option<LayerSlope>,
    pub generate: Option<Generate>,
    /// generate() from a prompt as the user calls it: (how, ns a token) for the peer's
    /// `generate`, `generate_static`, `generate_graph` rows the run has.
    pub from_prompt: Vec<(&'static str, f64)>,
}

/// The tch step moved into the transformers step's host state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostShift {
    pub ns: f64,
    /// The tch step's process's host scale, and the transformers step's (× the rows').
    pub tch_scale: f64,
    pub step_scale: f64,
}

/// The host scale a prediction priced its host costs at ([`Prediction::host_scale`]), where
/// it scaled them to its own process (`controlled` with a layer).
fn host_scale(pred: &Prediction) -> Option<f64> {
    use crate::predict::HostSpeed::{Beside, Layer};
    matches!(pred.host_speed, Some(Beside { .. } | Layer { .. })).then(|| pred.host_scale())
}

/// `tch_ns`, the tch step measured in its own process, in the host state `pred` (the
/// transformers step's) priced its host at: both host-bound, both scaled to their process.
fn tch_in_step_host(
    run: &Run,
    fits: &Fits,
    tch: &Query,
    tch_ns: Option<f64>,
    pred: &Prediction,
) -> Option<HostShift> {
    let tch_pred = predict_with(run, fits, tch).ok()?;
    if !(tch_pred.host_bound() && pred.host_bound()) {
        return None;
    }
    let (tch_scale, step_scale) = (host_scale(&tch_pred)?, host_scale(pred)?);
    Some(HostShift {
        ns: tch_ns? * step_scale / tch_scale,
        tch_scale,
        step_scale,
    })
}

/// One decoder layer read from the peer's interleaved layer rows.
#[derive(Debug, Clone, Copy)]
pub struct LayerReading {
    pub own: InSequence,
    pub flat_ns: f64,
    pub calls_ns: f64,
}

/// Everything `opbench predict` shows for `q` on the run loaded as `loaded`, its rows read
/// at host state `state`, with host model `host` (default: [`HostModel::default_for`],
/// the report's too); each knob measured in pairs (`knobs`) priced among what would help.
pub fn explain<'a>(
    loaded: &Run,
    mut q: Query<'a>,
    host: Option<HostModel>,
    state: HostState,
    knobs: &[KnobPair],
) -> Result<Explanation<'a>, AnalysisError> {
    let run = at_host_state(loaded, state)?;
    q.host = host.unwrap_or_else(|| HostModel::default_for(&run, &q));
    // one fit of the run for every composition below
    let fits = fit_run(&run);
    let prediction = predict_with(&run, &fits, &q)?;
    let traces = Traces::load(&run)?;
    Ok(Explanation {
        host_models: host_models(&run, &fits, &q, &prediction),
        other_state: other_state(loaded, &q, state, &prediction),
        transformers: (q.profile == StepProfile::Transformers)
            .then(|| transformers_of(&run, &fits, &q, &prediction)),
        graph: graph(&run, &fits, &q),
        step_check: crate::traced::step_check(&traces, &q),
        help: (q.phase == Phase::Decode).then(|| help_of(&run, &fits, &q, &prediction, knobs)),
        run_dir: run.dir.clone(),
        prediction,
        query: q,
        state,
    })
}

fn host_models(
    run: &Run,
    fits: &Fits,
    q: &Query,
    pred: &Prediction,
) -> Vec<(HostModel, Prediction)> {
    if q.mode != Mode::Pipelined || !q.device.is_gpu() {
        return Vec::new();
    }
    let others: Vec<_> = HostModel::ALL
        .into_iter()
        .filter(|m| *m != q.host)
        .filter_map(|m| {
            let other = Query {
                host: m,
                ..q.clone()
            };
            Some((m, predict_with(run, fits, &other).ok()?))
        })
        .collect();
    // a run without the floor's mixed / blocked rows (or controls) prices every host
    // model alike: nothing to show
    if others.iter().any(|(_, p)| p.step_ns != pred.step_ns) {
        others
    } else {
        Vec::new()
    }
}

fn other_state(loaded: &Run, q: &Query, state: HostState, pred: &Prediction) -> Option<OtherState> {
    if q.mode.is_device() {
        return None;
    }
    let other = state.other();
    // a run whose samples.csv cannot be read simply has no other state to show
    let other_run = at_host_state(loaded, other).ok()?;
    let p = predict(&other_run, q).ok()?;
    let measured_ns = step_row(&other_run, q, q.mode).and_then(|r| r.median_ns);
    (p.step_ns != pred.step_ns).then_some(OtherState {
        state: other,
        step: Measured {
            prediction: p,
            measured_ns,
        },
    })
}

/// What would help `q` (its levers ranked, and the bandwidth bound): predict's and the
/// report's.
pub fn help_of(
    run: &Run,
    fits: &Fits,
    q: &Query,
    pred: &Prediction,
    knobs: &[KnobPair],
) -> (Vec<Lever>, Lever) {
    let bound = crate::help::bandwidth_bound(run, q, pred);
    (
        crate::help::levers(run, fits, q, pred, &bound, knobs),
        bound,
    )
}

/// The transformers profile's readings beside its prediction `pred`: predict's and the
/// report's.
pub fn transformers_of(run: &Run, fits: &Fits, q: &Query, pred: &Prediction) -> Transformers {
    let split = Split::priced(run, fits, q, pred).ok();
    let measured = |q: &Query| step_row(run, q, Mode::Pipelined).and_then(|r| r.median_ns);
    let tch = Query {
        profile: StepProfile::HfEager,
        ..q.clone()
    };
    let layer_row = |site: &str| {
        run.row(&q.decode_key(StepProfile::Transformers.as_str(), site, q.mode))
            .filter(|r| r.is_ok())?
            .median_ns
    };
    // the layers as called and their calls flat: the plan's in-sequence framework part
    // (`layer_own`); one layer's calls flat and each alone: the profile's context rows
    let (_, flat, each) = q.profile.layer_context();
    let own = pred
        .plan
        .other
        .iter()
        .find_map(|u| in_sequence(run, q, u.in_sequence));
    let layer = match (own, layer_row(flat), layer_row(each)) {
        (Some(own), Some(flat_ns), Some(calls_ns)) => Some(LayerReading {
            own,
            flat_ns,
            calls_ns,
        }),
        _ => None,
    };
    let from_prompt = [
        ("generate", "as it is"),
        ("generate_static", "static cache"),
        ("generate_graph", "static cache + graphs"),
    ]
    .into_iter()
    .filter_map(|(site, how)| Some((how, crate::help::peer_token(run, q, site)?)))
    .collect();
    Transformers {
        generate: crate::generate::price(run, q, pred),
        split,
        step_ns: measured(q),
        tch_step_ns: measured(&tch),
        tch_at_step_host: tch_in_step_host(run, fits, &tch, measured(&tch), pred),
        layer,
        slope: layer_slope(run, q),
        from_prompt,
    }
}

fn graph(run: &Run, fits: &Fits, q: &Query) -> Option<Measured> {
    if q.mode == Mode::Graph || !q.device.is_gpu() {
        return None;
    }
    let gq = Query {
        mode: Mode::Graph,
        ..q.clone()
    };
    let prediction = predict_with(run, fits, &gq).ok()?;
    Some(Measured {
        measured_ns: step_row(run, &gq, Mode::Graph).and_then(|r| r.median_ns),
        prediction,
    })
}
