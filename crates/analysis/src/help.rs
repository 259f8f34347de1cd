//! What would make the step faster: the changes a user can make, each priced from the run
//! where it can be, beside its measured counterpart where the run has one, ranked by
//! tokens/s: first those for the query's own sequences, then serving more of them a step
//! ([`rank`]). A change the run cannot price says what to run to price it.
//!
//! Each row is one [`Lever`]. The step's price comes from [`predict_with`] with one thing
//! of the query changed (the profile, the mode, the dtype, the batch), or from arithmetic on
//! the prediction itself (a faster host, the best SDPA backend, the bandwidth bound).

use rundir::{DType, Mode, OpKind, Run};
use shapes::StepProfile;

use crate::fit::Fits;
use crate::knob::KnobPair;
use crate::predict::{Prediction, Query, predict_with, step_row};
use crate::stack::{Check, Stack};

pub use crate::ceiling::bandwidth_bound;

/// The name of the row every gain is read against.
pub const AS_IS: &str = "the step as it is";

/// How much faster the host of the "faster host" row is.
pub const HOST_SPEEDUP: f64 = 1.5;

/// One change the user could make.
#[derive(Debug, Clone, PartialEq)]
pub struct Lever {
    /// What it is, in a few words.
    pub name: String,
    /// What the user does, in one line.
    pub action: String,
    /// Sequences a step serves.
    pub batch: usize,
    /// The predicted step (ns), where the run can price it.
    pub predicted_ns: Option<f64>,
    /// The measured counterpart (ns a step or a token), where the run has one.
    pub measured_ns: Option<f64>,
    /// Why it is not priced, and what to run to price it.
    pub unpriced: Option<String>,
    /// A change measured in pairs (a knob): the pair's verdict on the step (or, where the
    /// pair did not time the step, on its host-bound cases).
    pub verdict: Option<stats::Verdict>,
    /// Where `measured_ns` is derived rather than measured with the change: how (a knob's
    /// is the run's own step times the pair's ratio of the step).
    pub derived: Option<String>,
    /// The predicted step's interval (ns, low and high), where the price has one (a knob's:
    /// [`crate::knob::Priced`]).
    pub interval: Option<(f64, f64)>,
    /// Whether the change can run on this stack ([`crate::stack::Stack`]).
    pub here: Here,
}

/// Whether a change can run on the user's stack, from doctor's checks or the run's rows.
#[derive(Debug, Clone, PartialEq)]
pub enum Here {
    /// It can; what says so.
    Runs(String),
    /// It cannot, and why.
    Not(String),
    /// Nothing checked it: what would.
    Unchecked(String),
}

impl Here {
    /// The word a table prints: `yes`, `no`, `?`.
    pub fn word(&self) -> &'static str {
        match self {
            Here::Runs(_) => "yes",
            Here::Not(_) => "no",
            Here::Unchecked(_) => "?",
        }
    }

    /// What says so, or why not.
    pub fn why(&self) -> &str {
        match self {
            Here::Runs(w) | Here::Not(w) | Here::Unchecked(w) => w,
        }
    }

    /// Ranked first: those that can run, then the unchecked, then those that cannot.
    fn order(&self) -> u8 {
        match self {
            Here::Runs(_) => 0,
            Here::Unchecked(_) => 1,
            Here::Not(_) => 2,
        }
    }
}

impl Lever {
    /// A row the run prices at `ns` a step.
    pub(crate) fn priced(
        name: impl Into<String>,
        action: impl Into<String>,
        batch: usize,
        ns: f64,
        measured_ns: Option<f64>,
    ) -> Self {
        Lever {
            name: name.into(),
            action: action.into(),
            batch,
            predicted_ns: Some(ns),
            measured_ns,
            unpriced: None,
            verdict: None,
            derived: None,
            interval: None,
            here: Here::Runs("a change of the user's own code".into()),
        }
    }

    /// A row the run cannot price, and why.
    pub(crate) fn unpriced(
        name: impl Into<String>,
        action: impl Into<String>,
        batch: usize,
        measured_ns: Option<f64>,
        why: impl Into<String>,
    ) -> Self {
        Lever {
            name: name.into(),
            action: action.into(),
            batch,
            predicted_ns: None,
            measured_ns,
            unpriced: Some(why.into()),
            verdict: None,
            derived: None,
            interval: None,
            here: Here::Runs("a change of the user's own code".into()),
        }
    }

    /// The step the row stands for: predicted, else measured.
    pub fn step_ns(&self) -> Option<f64> {
        self.predicted_ns.or(self.measured_ns)
    }

    /// Tokens per second, all sequences together.
    pub fn tokens_per_s(&self) -> Option<f64> {
        self.step_ns().map(|ns| self.batch as f64 * 1e9 / ns)
    }

    /// Tokens per second of one sequence.
    pub fn per_stream(&self) -> Option<f64> {
        self.step_ns().map(|ns| 1e9 / ns)
    }

    /// The row with whether it can run here.
    pub(crate) fn at(mut self, here: Here) -> Self {
        self.here = here;
        self
    }

    /// predicted / measured, where the row has both.
    pub fn check(&self) -> Option<f64> {
        Some(self.predicted_ns? / self.measured_ns?)
    }

    /// Its tokens/s (all sequences together) over `base`'s, the step as it is.
    pub fn gain(&self, base: &Lever) -> Option<f64> {
        Some(self.tokens_per_s()? / base.tokens_per_s()?)
    }

    /// Whether it gains nothing over `base`: a gain under [`NO_GAIN`] (it prints as 1.00×,
    /// or less), or a priced interval that holds the step as it is. The step as it is
    /// itself, and a row with no figure, are neither.
    pub fn no_gain(&self, base: &Lever) -> bool {
        if self.name == AS_IS {
            return false;
        }
        let Some(g) = self.gain(base) else {
            return false;
        };
        let held = match (self.interval, base.step_ns()) {
            // the interval is of this row's step; `base` is at one sequence's batch, so
            // compare tokens/s: the base's step scaled to this row's batch
            (Some((lo, hi)), Some(b)) => {
                let at = b * self.batch as f64 / base.batch as f64;
                lo <= at && at <= hi
            }
            _ => false,
        };
        g < NO_GAIN || held
    }

    /// Where it ranks among its group ([`rank`]): those that gain, the step as it is, those
    /// that gain nothing ([`Lever::no_gain`]), those with no figure.
    fn class(&self, base: Option<&Lever>) -> u8 {
        match (self.name == AS_IS, base.and_then(|b| self.gain(b))) {
            (true, _) => 1,
            (false, None) if self.tokens_per_s().is_none() => 3,
            (false, Some(_)) if base.is_some_and(|b| self.no_gain(b)) => 2,
            (false, Some(_)) => 0,
            (false, None) => 0,
        }
    }
}

/// A gain under this prints as 1.00× (two decimals): no gain to rank a change by.
pub const NO_GAIN: f64 = 1.005;

/// The levers for `q`, ranked ([`rank`]: the query's own sequences first, then serving
/// more; the step as it is among them; within each, those that can run on this stack
/// first ([`Here`], from [`Stack::of`]), those the run cannot price last). The physical
/// limit, `bound` ([`bandwidth_bound`]), stands apart; the faster host's row is floored at
/// it. Each knob measured in pairs (`knobs`) is a row of its own ([`KnobPair::lever`]).
pub fn levers(
    run: &Run,
    fits: &Fits,
    q: &Query,
    pred: &Prediction,
    bound: &Lever,
    knobs: &[KnobPair],
) -> Vec<Lever> {
    let stack = Stack::of(run, pred.gpu);
    let measured = |q: &Query| step_row(run, q, q.mode).and_then(|r| r.median_ns);
    let mut out = vec![Lever::priced(
        AS_IS,
        format!("{} profile, {} mode, {}", q.profile, q.mode, q.dtype),
        q.batch,
        pred.step_ns,
        measured(q),
    )];
    // one thing of the query changed, priced by the same composition
    let variant = |name: &str, action: &str, changed: Query| {
        let m = measured(&changed);
        match predict_with(run, fits, &changed) {
            Ok(p) => Lever::priced(name, action, changed.batch, p.step_ns, m),
            Err(e) => Lever::unpriced(
                name,
                action,
                changed.batch,
                m,
                why_unpriced(run, &e.to_string()),
            ),
        }
    };
    if q.profile != StepProfile::Fused {
        out.push(
            variant(
                "fused kernels",
                "fused QKV and gate-up projections, fused RMSNorm and RoPE, called without \
                 Python (opbench's fused profile, as an inference engine runs the step)",
                Query {
                    profile: StepProfile::Fused,
                    ..q.clone()
                },
            )
            .at(Here::Not(
                "not a setting of this stack: an inference engine's kernels (vLLM, llama.cpp), \
                 not checked here"
                    .into(),
            )),
        );
    }
    let python = q.profile == StepProfile::Transformers;
    if pred.gpu && q.mode != Mode::Graph && !python {
        // the tch step replayed from a graph: what a capture without compile gives
        let graph = Query {
            mode: Mode::Graph,
            ..q.clone()
        };
        out.push(variant(NO_COMPILE, NO_COMPILE_ACTION, graph).at(graph_here(&stack, false)));
    }
    if pred.gpu && q.dtype != DType::BF16 {
        out.push(variant(
            "bf16 weights",
            "model.to(torch.bfloat16)",
            Query {
                dtype: DType::BF16,
                ..q.clone()
            },
        ));
    }
    for b in [8, 64].into_iter().filter(|&b| b > q.batch) {
        out.push(variant(
            &format!("batch {b}"),
            &format!("serve {b} sequences a step"),
            Query {
                batch: b,
                ..q.clone()
            },
        ));
    }
    if !pred.gpu {
        let why = "CUDA/HIP graphs need a GPU: this step runs on the CPU";
        for (name, action) in [(NO_COMPILE, NO_COMPILE_ACTION), (COMPILED, COMPILED_ACTION)] {
            out.push(Lever::unpriced(name, action, q.batch, None, why).at(Here::Not(why.into())));
        }
    } else if q.mode != Mode::Graph && python {
        out.extend(graphed_generate(run, fits, q, &stack));
    }
    if python {
        out.push(static_cache(run, q, pred));
    }
    out.push(sdpa_lever(run, q, pred));
    out.push(faster_host(q, pred, bound.predicted_ns).at(Here::Not(
        "another machine (or nothing else running beside the Python thread)".into(),
    )));
    out.push(crate::ceiling::linear_at_bound(run, q, pred, &stack));
    out.extend(knobs.iter().map(|k| k.lever(run, q, pred)));
    rank(&mut out, q.batch);
    out
}

/// The graphs row without compile.
pub const NO_COMPILE: &str = "CUDA/HIP graphs, no compile";
/// What to do for it: the recipe in docs/guide.md.
pub const NO_COMPILE_ACTION: &str = "capture the static-cache step in torch.cuda.CUDAGraph and \
     replay it each token: the recipe in docs/guide.md#cudahip-graphs-without-compile (no \
     torch.compile, no Triton)";
/// The graphs row through torch.compile.
pub const COMPILED: &str = "CUDA/HIP graphs (torch.compile)";
/// What to do for it.
pub const COMPILED_ACTION: &str = "model.generate(..., cache_implementation=\"static\") with \
     torch.compile(mode=\"reduce-overhead\")";

/// Whether graphs can run here: a capture needs graph capture to work; torch.compile's
/// (`compiled`) Triton too.
fn graph_here(stack: &Stack, compiled: bool) -> Here {
    let check = |c: &Check, what: &str| match c {
        Check::Yes(w) => Here::Runs(w.clone()),
        Check::No(w) => Here::Not(format!("{what}: {w}")),
        Check::Unknown(w) => Here::Unchecked(format!("{what}: {w}")),
    };
    let capture = check(&stack.graph, "graph capture");
    if !compiled || matches!(capture, Here::Not(_)) {
        return capture;
    }
    match check(
        &stack.triton,
        "torch.compile needs Triton, its GPU backend, and it is not importable",
    ) {
        Here::Runs(w) => match capture {
            Here::Runs(c) => Here::Runs(format!("{w}; {c}")),
            other => other,
        },
        Here::Unchecked(_) => Here::Unchecked(format!("Triton: {}", stack.triton.words())),
        not => not,
    }
}

/// Two answers in one list: first what makes the query's own sequences faster (at its
/// batch), ranked by their gain; then serving more sequences a step (another batch),
/// ranked by the gain in tokens/s in all. A person with one chat stream gets nothing from a
/// batch of 64, however many tokens it serves. Within each, those that gain first, then the
/// step as it is, then those that gain nothing here ([`Lever::no_gain`]: never above one
/// that gains), those with no figure last; within those, the ones that can run here first
/// ([`Here`]: then the unchecked, then those that cannot), then by tokens/s.
pub fn rank(levers: &mut [Lever], batch: usize) {
    let base = levers.iter().find(|l| l.name == AS_IS).cloned();
    levers.sort_by(|a, b| {
        let more = |l: &Lever| l.batch != batch;
        more(a)
            .cmp(&more(b))
            .then_with(|| a.class(base.as_ref()).cmp(&b.class(base.as_ref())))
            .then_with(|| a.here.order().cmp(&b.here.order()))
            .then_with(|| match (a.tokens_per_s(), b.tokens_per_s()) {
                (Some(x), Some(y)) => y.total_cmp(&x),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
    });
}

/// What graphs give the user's generate(), two ways, each checked against its own
/// measurement: `cache_implementation="static"` with `torch.compile(mode="reduce-overhead")`
/// ([`COMPILED`]; needs Triton), and the static-cache step captured in a
/// `torch.cuda.CUDAGraph` directly and replayed each token ([`NO_COMPILE`]; the recipe in
/// docs/guide.md). Either replays the step's kernels from a graph, so no Python, module call
/// or dispatch is left of the step, and the cache is written in place. Both are priced as
/// [`graphed_step`] plus generate()'s own loop (the peer's `generate_loop`), which stays
/// outside the graph; Inductor's fusions are not priced, so the two share a price.
/// Checked: the compiled one against the peer's graphed generate() continuing from a static
/// cache of the query's L (`generate_graph_from_l`, else, in runs before it, from a prompt
/// of 16: `generate_graph`); the captured one against generate() with its forward replaying
/// the captured step (`generate_cudagraph_from_l`), else the captured step's replay
/// (`step_cudagraph`) plus the loop, labelled derived.
fn graphed_generate(run: &Run, fits: &Fits, q: &Query, stack: &Stack) -> [Lever; 2] {
    let compiled_m = peer_token(run, q, "generate_graph_from_l")
        .or_else(|| peer_token(run, q, "generate_graph"));
    let lp = peer_token(run, q, "generate_loop");
    let captured = peer_token(run, q, "generate_cudagraph_from_l");
    let replay = peer_token(run, q, "step_cudagraph").zip(lp);
    let step = graphed_step(run, fits, q).and_then(|s| {
        lp.map(|l| s + l).ok_or_else(|| {
            "generate()'s own loop is not in this run: scripts/peer.py measures it \
             (`generate_loop`)"
                .to_string()
        })
    });
    let row = |name: &str, action: &str, m: Option<f64>| match &step {
        Ok(ns) => Lever::priced(name, action, q.batch, *ns, m),
        Err(why) => Lever::unpriced(name, action, q.batch, m, why.clone()),
    };
    let compiled = row(COMPILED, COMPILED_ACTION, compiled_m).at(graph_here(stack, true));
    let mut plain = row(
        NO_COMPILE,
        NO_COMPILE_ACTION,
        captured.or(replay.map(|(s, l)| s + l)),
    )
    .at(graph_here(stack, false));
    if captured.is_none() && replay.is_some() {
        plain.derived = Some(
            "the peer's captured step replayed (`step_cudagraph`) + generate()'s own loop \
             (`generate_loop`): generate() with the captured step was not timed"
                .into(),
        );
    }
    [compiled, plain]
}

/// The transformers step replayed from a graph: transformers' calls replayed (the hf-eager
/// profile — transformers' ops from tch — in the graph mode) with its DynamicCache `cat`s
/// priced as the static cache's writes (the fused profile's `index_copy`, in the same mode).
/// The attention is what the static cache's graph runs where the peer timed it
/// (`sdpa_static_graph`: repeat_kv and SDPA over the whole cache with its mask, replayed
/// from a graph), in place of SDPA over the filled cache.
fn graphed_step(run: &Run, fits: &Fits, q: &Query) -> Result<f64, String> {
    let graphed = |profile| Query {
        profile,
        mode: Mode::Graph,
        ..q.clone()
    };
    let (hf, fused) = predict_with(run, fits, &graphed(StepProfile::HfEager))
        .and_then(|hf| {
            predict_with(run, fits, &graphed(StepProfile::Fused)).map(|fused| (hf, fused))
        })
        .map_err(|e| why_unpriced(run, &e.to_string()))?;
    let of = |p: &Prediction, op: OpKind| -> (f64, usize) {
        p.components
            .iter()
            .filter(|c| c.op == Some(op))
            .fold((0.0, 0), |(ns, n), c| {
                (ns + c.calls as f64 * c.per_call_ns, n + c.calls)
            })
    };
    let (sdpa_ns, sdpa_calls) = of(&hf, OpKind::Sdpa);
    let attention = peer_row(
        run,
        q,
        (OpKind::Decode, "transformers", "sdpa_static_graph"),
        q.batch,
    )
    .map_or(sdpa_ns, |per_call| per_call * sdpa_calls as f64);
    Ok(
        hf.step_ns - of(&hf, OpKind::KvCache).0 + of(&fused, OpKind::KvCache).0 - sdpa_ns
            + attention,
    )
}

/// What the changed step lacks and the command that adds it ([`crate::predict::Lack`]) as
/// one text for a row's note: the error less the run's folder that leads it, its command
/// (printed on lines of its own, to run as they are) joined again, in backticks.
fn why_unpriced(run: &Run, e: &str) -> String {
    let lead = format!("{}: ", run.dir.display());
    let e = e.strip_prefix(&lead).unwrap_or(e);
    let mut lines = e.lines();
    let head = lines.next().unwrap_or_default().to_string();
    let cmd: Vec<&str> = lines
        .map(|l| l.trim().trim_end_matches('\\').trim_end())
        .collect();
    if cmd.is_empty() {
        head
    } else {
        format!("{head} `{}`", cmd.join(" "))
    }
}

/// A token of the peer's `site` (generate() as the user calls it), at the query's batch.
pub fn peer_token(run: &Run, q: &Query, site: &str) -> Option<f64> {
    peer_row(run, q, (OpKind::Decode, q.profile.as_str(), site), q.batch)
}

/// A row of the run at `batch` by its (op, variant, site), the query's dtype and device.
fn peer_row(
    run: &Run,
    q: &Query,
    (op, variant, site): (OpKind, &str, &str),
    batch: usize,
) -> Option<f64> {
    run.ok_rows()
        .find(|r| {
            r.op == op
                && r.variant == variant
                && r.site == site
                && r.batch == batch
                && r.dtype == q.dtype
                && r.device == q.device
        })?
        .median_ns
}

/// (op, variant, site): a part of the user's step as scripts/peer.py times it from Python.
type Part = (OpKind, &'static str, &'static str);

/// A layer's cache write and attention with a DynamicCache, and the step's mask.
const DYNAMIC: ([Part; 4], Part) = (
    [
        (OpKind::Decode, "transformers", "cache_update"),
        (OpKind::KvCache, "py-cat", "k"),
        (OpKind::KvCache, "py-cat", "v"),
        (OpKind::Sdpa, "py-auto", "attn"),
    ],
    (OpKind::Decode, "transformers", "mask"),
);

/// The same with a static cache.
const STATIC: ([Part; 2], Part) = (
    [
        (OpKind::Decode, "transformers", "cache_update_static"),
        (OpKind::Decode, "transformers", "sdpa_static"),
    ],
    (OpKind::Decode, "transformers", "mask_static"),
);

/// A static cache without compile (`cache_implementation="static"`, eager): the step with
/// what a static cache changes added to it, like for like: the static cache's parts less
/// DynamicCache's, each as scripts/peer.py times it from Python. A layer's
/// `StaticCache.update` (`cache_update_static`) and SDPA over the whole cache with its mask
/// (`sdpa_static`) in place of DynamicCache.update (`cache_update` and its two `py-cat`s)
/// and SDPA over the filled cache (`sdpa/py-auto`); the step's mask (`mask_static` for
/// `mask`). Both sides carry the same Python call costs, which the step's price has already
/// (transformers' own code is priced apart): only their difference is added. Plus
/// generate()'s own loop. Checked against generate() continuing from a static cache of L
/// ([`shapes::STATIC_GENERATE`]), as read in the step's host state: against the step's own
/// generate() in the rounds that sampled both ([`crate::predict::read_in_pairs`]).
///
/// A part is timed pipelined, max(host, device) a call. On a GPU its host cost is its time
/// at the run's smallest batch (where the host bounds it, as every row's host cost is
/// read), scaled to the step's host state ([`Prediction::host_scale`]); its device cost
/// its time at the query's batch (an upper bound). The step is max(host, device) again.
/// On the CPU the parts' times at the query's batch are added as they are.
fn static_cache(run: &Run, q: &Query, pred: &Prediction) -> Lever {
    let name = "static cache alone";
    let action = "model.generate(..., cache_implementation=\"static\"), no compile";
    let measured = peer_token(run, q, shapes::STATIC_GENERATE);
    let smallest = run
        .ok_rows()
        .filter(|r| r.op == OpKind::Decode && r.site == "cache_update_static")
        .map(|r| r.batch)
        .min()
        .unwrap_or(q.batch);
    // (host, device) of a layer's parts and the mask, static less dynamic
    let sum = |parts: &[Part]| -> Option<(f64, f64)> {
        parts.iter().try_fold((0.0, 0.0), |(h, d), &p| {
            Some((
                h + peer_row(run, q, p, smallest)?,
                d + peer_row(run, q, p, q.batch)?,
            ))
        })
    };
    let less = |a: (f64, f64), b: (f64, f64)| (a.0 - b.0, a.1 - b.1);
    let delta = (|| {
        let layer = less(sum(&STATIC.0)?, sum(&DYNAMIC.0)?);
        let mask = less(sum(&[STATIC.1])?, sum(&[DYNAMIC.1])?);
        Some((layer, mask))
    })();
    let (Some((layer, mask)), Some(lp)) = (delta, peer_token(run, q, "generate_loop")) else {
        return Lever::unpriced(
            name,
            action,
            q.batch,
            measured.or_else(|| peer_token(run, q, "generate_static")),
            "scripts/peer.py measures its parts (`cache_update_static`, `mask_static`, \
             `sdpa_static`, with the dynamic cache's beside them) and generate()'s loop where \
             generate() is on (its default)",
        );
    };
    let layers = q.model.num_hidden_layers as f64;
    let host = pred.host_ns + (layers * layer.0 + mask.0) * pred.host_scale();
    let device = pred.device_ns + layers * layer.1 + mask.1;
    let step = if pred.gpu {
        host.max(device)
    } else {
        pred.serial_ns + layers * layer.1 + mask.1
    };
    Lever::priced(name, action, q.batch, step + lp, measured)
}

/// The step with the attention call at the fastest SDPA backend the run measured at its
/// shape, where that is faster than the one priced.
fn sdpa_lever(run: &Run, q: &Query, pred: &Prediction) -> Lever {
    let name = "the fastest SDPA backend".to_string();
    let action = "torch.nn.attention.sdpa_kernel(<the backend>) around generate()".to_string();
    let Some(c) = pred.components.iter().find(|c| c.op == Some(OpKind::Sdpa)) else {
        return Lever::unpriced(
            name,
            action,
            q.batch,
            None,
            "the step has no priced SDPA call",
        );
    };
    let call = pred
        .plan
        .measured
        .iter()
        .find(|p| p.problem.op == OpKind::Sdpa)
        .map(|p| &p.problem);
    // tch's own calls at this shape: what SDPA picks (`auto`) and each backend forced
    let at_shape: Vec<(String, f64)> = call.map_or(Vec::new(), |p| {
        run.ok_rows()
            .filter(|r| {
                r.op == OpKind::Sdpa
                    && !r.variant.starts_with("py-")
                    && r.batch == p.batch
                    && r.kv_len == p.kv_len
                    && r.dtype == q.dtype
                    && r.device == q.device
                    && r.mode == q.mode
            })
            .filter_map(|r| Some((r.variant.clone(), r.median_ns?)))
            .collect()
    });
    let picked = at_shape
        .iter()
        .find(|(v, _)| v == "auto")
        .map_or(c.per_call_ns, |(_, ns)| *ns);
    let best = at_shape
        .iter()
        .filter(|(v, _)| v != "auto")
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .cloned();
    match best {
        Some((variant, ns)) => {
            // what the picked backend costs over the fastest, at every call of the step: no
            // more than the step's attention costs as priced (a picked backend's row that
            // read far slower — a stall in its samples — saves no more than the calls)
            let saved = ((picked - ns) * c.calls as f64).clamp(0.0, c.per_call_ns * c.calls as f64);
            Lever::priced(
                format!("{name} ({variant})"),
                action.replace("<the backend>", sdp_backend(&variant)),
                q.batch,
                pred.step_ns - saved,
                None,
            )
        }
        None => Lever::unpriced(
            name,
            action,
            q.batch,
            None,
            "time the backends at this shape: scripts/bench -p sdpa",
        ),
    }
}

/// The step on a host [`HOST_SPEEDUP`]× faster: the host's share scaled; on a GPU the
/// kernels still bound it, and no step goes below the bandwidth bound `floor_ns` (on the
/// CPU the host's time includes reading the weights).
fn faster_host(q: &Query, pred: &Prediction, floor_ns: Option<f64>) -> Lever {
    let step = if pred.gpu {
        (pred.host_ns / HOST_SPEEDUP).max(pred.device_ns)
    } else {
        pred.step_ns / HOST_SPEEDUP
    };
    Lever::priced(
        format!("a host {HOST_SPEEDUP}× faster"),
        "a faster CPU core for the Python thread (or nothing else running beside it)",
        q.batch,
        step.max(floor_ns.unwrap_or(0.0)),
        None,
    )
}

/// PyTorch's name of a backend variant, as `torch.nn.attention.SDPBackend` spells it.
fn sdp_backend(variant: &str) -> &str {
    match variant {
        "flash" | "cpu_flash" => "SDPBackend.FLASH_ATTENTION",
        "efficient" => "SDPBackend.EFFICIENT_ATTENTION",
        "cudnn" => "SDPBackend.CUDNN_ATTENTION",
        "math" => "SDPBackend.MATH",
        other => other,
    }
}
