//! [`StepPlan`]: every call of one decode or prefill step, per [`StepProfile`].
//!
//! The one description of what a Qwen3 forward calls: the decode crate builds its step
//! from the profile, `opbench predict` prices the plan, and the tests check the two agree.

use std::fmt;
use std::str::FromStr;

use crate::ModelConfig;
use crate::derive::derive;
use crate::problem::{OpKind, Problem, Step, UnknownValue};

/// How a step is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StepProfile {
    /// transformers' modeling_qwen3 as it runs eagerly: HF RMSNorm (pow/mean/rsqrt/mul),
    /// separate projections, rotate_half RoPE, DynamicCache `cat`, SDPA.
    HfEager,
    /// aten `rms_norm`, fused QKV and gate-up projections, a static cache written with
    /// `index_copy`, SDPA.
    Fused,
    /// The user's own stack: HF transformers' Qwen3 step from Python (scripts/peer.py): the
    /// hf-eager calls as transformers makes them from Python (`py-` variants), plus the
    /// framework's own work (each decoder layer's own code, the model's module calls, mask
    /// creation).
    Transformers,
}

impl StepProfile {
    /// The profiles the decode crate builds in tch.
    pub const ALL: [StepProfile; 2] = [StepProfile::HfEager, StepProfile::Fused];
    /// Every profile `predict` composes.
    pub const EVERY: [StepProfile; 3] = [
        StepProfile::HfEager,
        StepProfile::Fused,
        StepProfile::Transformers,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StepProfile::HfEager => "hf-eager",
            StepProfile::Fused => "fused",
            StepProfile::Transformers => "transformers",
        }
    }

    /// The variant whose kernels this profile's call at a site runs: the call itself, except
    /// for transformers, whose calls from Python run the same kernels as hf-eager's from tch
    /// (device time comes from those rows).
    pub fn kernel_variant(self, op: OpKind, site: &str) -> Option<&'static str> {
        match self {
            // its experts' default implementation is the fused profile's grouped GEMMs
            StepProfile::Transformers if op == OpKind::Moe => StepProfile::Fused.variant(op, site),
            StepProfile::Transformers => StepProfile::HfEager.variant(op, site),
            p => p.variant(op, site),
        }
    }

    /// The dispatch floors (`floor` variants: a kernel launch, a view) this profile's calls
    /// pay: Python's for transformers (scripts/peer.py), libtorch's otherwise.
    pub fn floors(self) -> (&'static str, &'static str) {
        match self {
            StepProfile::Transformers => ("py-add", "py-view"),
            _ => ("add", "view"),
        }
    }

    /// The floor variants whose ratio is the host's context factor for this profile's calls
    /// (`mixed`, `blocked`: the same one-element calls switching kind on every call or in
    /// runs of a kind): Python's for transformers, libtorch's otherwise.
    pub fn context_floors(self) -> (&'static str, &'static str) {
        match self {
            StepProfile::Transformers => ("py-mixed", "py-blocked"),
            _ => ("mixed", "blocked"),
        }
    }

    /// The `decode` rows whose ratio is this profile's own context factor — one decoder
    /// layer's calls in their sequence over the same calls each repeated alone — as
    /// (variant, in-sequence site, alone site): the decode crate's `layer` and
    /// `layer_blocked` for the tch profiles, scripts/peer.py's `layer_flat` and
    /// `layer_calls` for transformers.
    pub fn layer_context(self) -> (&'static str, &'static str, &'static str) {
        match self {
            StepProfile::Transformers => ("transformers", "layer_flat", "layer_calls"),
            p => (p.as_str(), "layer", "layer_blocked"),
        }
    }

    /// Whether a CPU step of this profile is priced with what its layer's calls cost more in
    /// their sequence than each repeated alone ([`StepProfile::layer_context`]'s rows'
    /// difference, per layer): transformers' calls, made from Python, whose interpreter
    /// state shares the caches with the calls' data. On the 2-core CPU the peer's layer
    /// cost 0.3–1.1 ms more in sequence in 11 of 12 batch-runs; the decode crate's tch layer
    /// −0.6 to +0.86 ms with no pattern, and adding it made the tch steps' predictions worse
    /// (docs/findings.md, 2026-12-01).
    pub fn cpu_sequence(self) -> bool {
        self == StepProfile::Transformers
    }

    /// The `decode` site of one decoder layer timed once before every sample of this
    /// profile's step, at the step's batch, as a row of its own: the layer in the step's own
    /// host state (a control interleaved with the step at the scale of one sample). The
    /// decode crate times it for the tch profiles; scripts/peer.py for transformers (layer
    /// 0's calls written out flat, since 2026-12-02).
    pub fn layer_beside(self) -> (&'static str, &'static str) {
        (self.as_str(), "layer_beside")
    }

    /// The rows of this profile's step that scripts/peer.py samples in rounds with another
    /// row of the same shape (one sample of each per round, in the same order, each a few
    /// tens of ms), and how a row is read against its base, pair by pair: its layer beside
    /// the step (one before each step sample), its step variants
    /// ([`GenerateLoop::step_sites`], each against the one before it), generate() per token
    /// ([`GenerateLoop::measured_site`], against the last of them), generate() from a static
    /// cache ([`STATIC_GENERATE`], against generate()) and its framework
    /// parts' whole rows against their parts ([`OtherCall::in_sequence`]). A base comes
    /// before the rows read against it. For the tch profiles only the decode crate's layer
    /// beside, and only where a step sample is at most [`BESIDE_PAIRED_AT_MOST_NS`] long:
    /// with the step's ten samples in two host states ~1.5× apart, its median and its
    /// beside's could each fall in another (H200, help3, fused B = 64: priced 1.21× the
    /// measured from the two medians, 1.02× in pairs); beside a MoE step of 0.16–1.4 s the
    /// pairs read worse than the medians (hf-eager B = 8: 0.90 against 0.97).
    pub fn paired_sites(self) -> Vec<PairedSite> {
        let (_, beside) = self.layer_beside();
        let tch = self != StepProfile::Transformers;
        let mut out = vec![PairedSite {
            site: beside,
            base: "step",
            how: Pairing::Ratio,
            base_at_most_ns: tch.then_some(BESIDE_PAIRED_AT_MOST_NS),
        }];
        if tch {
            return out;
        }
        let s = GENERATE_LOOP.step_sites;
        out.extend(s.windows(2).map(|w| PairedSite {
            site: w[1],
            base: w[0],
            how: Pairing::Difference,
            base_at_most_ns: None,
        }));
        out.push(PairedSite {
            site: GENERATE_LOOP.measured_site,
            base: s[s.len() - 1],
            how: Pairing::Difference,
            base_at_most_ns: None,
        });
        // generate() from a static cache, sampled in the same rounds: what the static cache
        // lever is checked against, read in the step's host state like the step's own
        // generate() (a whole host-bound generate(): by its ratio)
        out.push(PairedSite {
            site: STATIC_GENERATE,
            base: GENERATE_LOOP.measured_site,
            how: Pairing::Ratio,
            base_at_most_ns: None,
        });
        out.extend(
            OTHER
                .iter()
                .flat_map(|o| framework_part(o.0).0)
                .map(|&(whole, parts)| PairedSite {
                    site: whole,
                    base: parts,
                    how: Pairing::Difference,
                    base_at_most_ns: None,
                }),
        );
        out
    }

    /// What a run from before `variant` existed measured in its place: the same call over a
    /// contiguous input (`aten_split` → `aten`). `None`: no stand-in.
    pub fn stand_in(variant: &str) -> Option<&'static str> {
        match variant {
            "aten_split" => Some("aten"),
            _ => None,
        }
    }

    /// The variant this profile runs at an op's site; `None` where it does not call that
    /// site (a fused profile's separate q/k/v, say).
    pub fn variant(self, op: OpKind, site: &str) -> Option<&'static str> {
        if self == StepProfile::Transformers {
            // transformers 5.x runs an MoE block's experts by its default experts
            // implementation, `grouped_mm` (modeling_utils' get_correct_experts_implementation;
            // `experts_implementation="eager"` is hf-eager's loop). The peer times none of
            // them from Python yet: it measures the HF MoE step whole
            if op == OpKind::Moe {
                return Some("py-grouped");
            }
            // what transformers calls, timed from Python by scripts/peer.py
            return match StepProfile::HfEager.variant(op, site)? {
                "aten" => Some("py-aten"),
                "hf" => Some("py-hf"),
                "rotate_half" => Some("py-rotate_half"),
                "auto" => Some("py-auto"),
                "cat" => Some("py-cat"),
                _ => None,
            };
        }
        let fused = self == StepProfile::Fused;
        match op {
            OpKind::Linear => match (site, fused) {
                ("qkv_proj", true) => Some("fused_qkv"),
                ("gate_up_proj", true) => Some("fused_gate_up"),
                ("q_proj" | "k_proj" | "v_proj" | "gate_proj" | "up_proj", true) => None,
                ("qkv_proj" | "gate_up_proj", false) => None,
                _ => Some("aten"),
            },
            // the fused step's q and k are views of the fused projection's output
            OpKind::RmsNorm => Some(match (fused, site) {
                (true, "q_norm" | "k_norm") => "aten_split",
                (true, _) => "aten",
                (false, _) => "hf",
            }),
            OpKind::Rope => Some(if site == "cache" { "hf" } else { "rotate_half" }),
            OpKind::Sdpa => Some("auto"),
            OpKind::KvCache => Some(if fused { "index_copy" } else { "cat" }),
            // the fused step's SiLU and product read the halves of one gate_up output
            OpKind::Eltwise => Some(match (fused, site) {
                (true, "silu" | "swiglu_mul") => "chunk",
                _ => "aten",
            }),
            // the routed experts: a loop over the experts hit as transformers writes it;
            // the fused step groups them into one GEMM per projection
            OpKind::Moe => Some(if fused { "grouped" } else { "loop" }),
            OpKind::Floor | OpKind::Decode | OpKind::Ceiling => None,
        }
    }
}

impl fmt::Display for StepProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StepProfile {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        UnknownValue::find(s, &Self::EVERY, Self::as_str)
    }
}

/// What a call that no op crate measures is: a kernel launch or a view (dispatch only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    Kernel,
    View,
    /// The framework's own work between the ops (transformers from Python), priced from
    /// scripts/peer.py's `decode/transformers/<name>` rows.
    Framework,
}

/// A kind of call of the step that no op crate measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtherCall {
    pub name: &'static str,
    pub kind: CallKind,
    /// Calls per step.
    pub calls: usize,
    /// What it is, in the model's code.
    pub what: &'static str,
    /// A framework part measured in sequence, as the difference of two scripts/peer.py rows
    /// (whole, parts), the first pair the run has (`layer_own`: every decoder layer called
    /// in turn as the model calls them, less their calls written out flat; before those rows,
    /// one layer called alone less its calls flat): its host cost already includes the
    /// host's context. Empty: a row of its own name, measured alone.
    pub in_sequence: &'static [(&'static str, &'static str)],
    /// What a run from before this framework part was measured prices it at: other
    /// framework rows × their count per call (`layer_own`: the old plan's four module calls
    /// and cache update per layer). Empty: no stand-in.
    pub stand_in: &'static [(&'static str, usize)],
}

/// A framework part's pricing: [`OtherCall::in_sequence`] and [`OtherCall::stand_in`].
type FrameworkPart = (
    &'static [(&'static str, &'static str)],
    &'static [(&'static str, usize)],
);

fn framework_part(name: &str) -> FrameworkPart {
    match name {
        "layer_own" => (
            &[("stack", "stack_flat"), ("layer", "layer_flat")],
            &[("module_call", 4), ("cache_update", 1)],
        ),
        _ => (&[], &[]),
    }
}

/// Calls of a Qwen3 decode step that no op crate measures, as modeling_qwen3 makes them:
/// name, kind, calls per layer and per step for [hf-eager, fused], what it is.
/// generate()'s own bookkeeping (logits copy, appending the token, stopping checks) is not
/// part of the model forward and is not counted here: [`StepPlan::generate_loop`].
/// (name, kind, calls per layer [hf-eager, fused, transformers], calls per step [the same],
/// what).
type OtherRow = (&'static str, CallKind, [usize; 3], [usize; 3], &'static str);

const OTHER: &[OtherRow] = &[
    (
        "positions",
        CallKind::Kernel,
        [0, 0, 0],
        [1, 2, 1],
        "position ids (fused: and the static cache's positions)",
    ),
    (
        "views",
        CallKind::View,
        [8, 12, 8],
        [6, 6, 6],
        "view/transpose/reshape of q, k, v and the attention output (fused: also split, chunk \
         and the cache narrows); per step: position and cos/sin unsqueezes, last-token narrow, squeeze",
    ),
    (
        "layer_own",
        CallKind::Framework,
        [0, 0, 1],
        [0, 0, 0],
        "transformers' own code in a decoder layer: the layer, self_attn and mlp module calls, \
         kwargs, the attention interface lookup, DynamicCache.update's bookkeeping (every layer \
         called in turn as the model calls them, less their calls written out flat, per layer)",
    ),
    (
        "module_call",
        CallKind::Framework,
        [0, 0, 0],
        [0, 0, 4],
        "nn.Module calls beyond the measured ones, per step: the causal LM, the model, \
         embed_tokens and the final norm's caller",
    ),
    (
        "mask",
        CallKind::Framework,
        [0, 0, 0],
        [0, 0, 1],
        "create_causal_mask (returns None for SDPA decode, after its checks)",
    ),
];

/// generate()'s side of a decode token: what transformers' `generate()` adds to each
/// step, as scripts/peer.py measures it (issue 31). The site names are the peer's rows,
/// `decode/transformers/<site>` at the step's batch and cache length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerateLoop {
    /// generate()'s own work per new token: the same call with the model's forward
    /// replaced by a stand-in returning fixed logits (input preparation, cache positions,
    /// logits to float32, argmax, the eos masking, appending the token, the stopping
    /// criteria, and the host's synchronization with the device every token).
    pub site: &'static str,
    /// generate() per new token from the step's cache of L, greedy: what predict's
    /// generate price is checked against.
    pub measured_site: &'static str,
    /// The HF step pipelined, synchronized after every step (as generate() is), and that
    /// called with generate()'s inputs to the forward: the differences are what the
    /// per-token sync and generate()'s inputs cost the step.
    pub step_sites: [&'static str; 3],
    /// The step's own call that generate()'s loop makes in its place (the token's argmax).
    pub replaces: (OpKind, &'static str),
    /// The step's last kernel before it (the logits' GEMM), whose device time the host
    /// waits out at the loop's per-token synchronization.
    pub last: (OpKind, &'static str),
}

/// The transformers profile's generate loop.
pub const GENERATE_LOOP: GenerateLoop = GenerateLoop {
    site: "generate_loop",
    measured_site: "generate_from_l",
    step_sites: ["step", "step_synced", "step_as_generate"],
    replaces: (OpKind::Eltwise, "argmax"),
    last: (OpKind::Linear, "lm_head"),
};

/// generate() per token continuing from a static cache of L, as scripts/peer.py times it in
/// the step's rounds (the static cache lever's counterpart).
pub const STATIC_GENERATE: &str = "generate_static_from_l";

/// A row sampled in rounds with its base row ([`StepProfile::paired_sites`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairedSite {
    pub site: &'static str,
    pub base: &'static str,
    pub how: Pairing,
    /// Read in pairs only where the base's median sample is at most this long, ns: one host
    /// state holds a sample that short (`None`: any).
    pub base_at_most_ns: Option<f64>,
}

/// The longest step sample the decode crate's layer beside is read against pair by pair:
/// the H200's host switched states within seconds, and beside a MoE step of 0.16–1.4 s a
/// layer timed first no longer saw the state its sample ran in (docs/method.md, host models).
pub const BESIDE_PAIRED_AT_MOST_NS: f64 = 100e6;

/// Layers one timed call of a decoder-layer case makes: the decode crate's `layer` and
/// `layer_blocked` (each call repeated so often in a row under `layer_blocked`) and the
/// peer's `layer_beside` (`opbench peer` passes it to scripts/peer.py); rows are per layer.
pub const LAYER_REPEATS: usize = 8;

/// How a row sampled beside a base is read against it: what a prediction uses of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// Its difference from the base (a framework part, what a sync adds).
    Difference,
    /// Its ratio to the base (a control of the base's host state).
    Ratio,
}

/// One measured call site of a plan: the problem (with its calls per step) and the variant
/// the profile runs there.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCall {
    pub problem: Problem,
    pub variant: &'static str,
}

/// Every call of one step of a model under a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct StepPlan {
    pub profile: StepProfile,
    pub step: Step,
    /// Sites an op crate measures, in the model's order.
    pub measured: Vec<PlannedCall>,
    /// Calls no op crate measures.
    pub other: Vec<OtherCall>,
}

impl StepPlan {
    pub fn new(cfg: &ModelConfig, profile: StepProfile, step: Step) -> Self {
        // a site with no call in the step (the MoE worst-case bound) is not part of it
        let measured = derive(cfg, step)
            .into_iter()
            .filter(|problem| problem.calls_per_step > 0)
            .filter_map(|problem| {
                let variant = profile.variant(problem.op, problem.site)?;
                Some(PlannedCall { problem, variant })
            })
            .collect();
        let which = match profile {
            StepProfile::HfEager => 0,
            StepProfile::Fused => 1,
            StepProfile::Transformers => 2,
        };
        let layers = cfg.num_hidden_layers;
        let other = OTHER
            .iter()
            .map(|&(name, kind, per_layer, per_step, what)| {
                let (in_sequence, stand_in) = framework_part(name);
                OtherCall {
                    name,
                    kind,
                    calls: per_layer[which] * layers + per_step[which],
                    what,
                    in_sequence,
                    stand_in,
                }
            })
            .chain(routing_calls(cfg))
            .filter(|c| c.calls > 0)
            .collect();
        StepPlan {
            profile,
            step,
            measured,
            other,
        }
    }

    /// What generate() adds to each step of this profile: transformers' loop for the
    /// transformers profile (the user's `model.generate()`); `None` for the tch profiles,
    /// whose decode loop is the caller's own.
    pub fn generate_loop(&self) -> Option<GenerateLoop> {
        (self.profile == StepProfile::Transformers).then_some(GENERATE_LOOP)
    }

    /// Kernel launches per step: every measured call counted once per call (an op crate's
    /// call may launch several), plus the other kernel calls.
    pub fn calls(&self) -> usize {
        self.measured
            .iter()
            .map(|c| c.problem.calls_per_step)
            .sum::<usize>()
            + self
                .other
                .iter()
                .filter(|c| c.kind == CallKind::Kernel)
                .map(|c| c.calls)
                .sum::<usize>()
    }
}

/// The routing's own calls per layer, which no op crate measures (the routed experts' case
/// takes the routing as given): the router logits' softmax, top-k, the k weights' sum and
/// division, and their cast back to the model's dtype (Qwen3MoeTopKRouter) — priced at the
/// dispatch floor. None for a dense model.
pub fn routing_calls(cfg: &ModelConfig) -> Option<OtherCall> {
    cfg.is_moe().then_some(OtherCall {
        name: "routing",
        kind: CallKind::Kernel,
        calls: 5 * cfg.num_hidden_layers,
        what: "the MoE router logits' softmax, top-k, the k weights' sum and division, and their cast",
        in_sequence: &[],
        stand_in: &[],
    })
}
