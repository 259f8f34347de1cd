//! `opbench predict RUN --model M --batch B --ctx L [--profile hf-eager|fused]`: one decode
//! step composed from a run's measurements and fits.
//!
//! Every site of the step × its calls per step, for the variants the profile uses. A site
//! measured at exactly this batch (and cache length) is priced at its median; otherwise at
//! its series' fit evaluated at this case's work. Kernels of a step that no op crate
//! measures ([`UNMEASURED`]) are priced at the run's dispatch floor and marked as such.

use std::collections::BTreeMap;
use std::path::PathBuf;

use shapes::{ModelConfig, OpKind, Problem, Step};

use crate::Failure;
use crate::fit_cmd::{Work, fit_run};
use crate::run::{Run, SeriesKey};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run directory (target/opbench/runs/<id>).
    run: PathBuf,
    /// Model name.
    #[arg(long)]
    model: String,
    /// Batch size B.
    #[arg(long)]
    batch: usize,
    /// Cache length L before the step.
    #[arg(long)]
    ctx: usize,
    /// hf-eager (transformers as it runs today) or fused.
    #[arg(long, default_value = "hf-eager")]
    profile: String,
    /// Device label in the run (default: its GPU if it has one, else cpu).
    #[arg(long)]
    device: Option<String>,
    /// dtype (default: f16 on a GPU, f32 on the CPU).
    #[arg(long)]
    dtype: Option<String>,
    /// Timing mode to compose (pipelined is what an eager decode loop sees).
    #[arg(long, default_value = "pipelined")]
    mode: String,
}

/// The variant a profile runs at each (op, site); sites it does not run are absent.
pub fn profile_variant(profile: &str, op: OpKind, site: &str) -> Option<&'static str> {
    let fused = profile == "fused";
    match op {
        OpKind::Linear => match (site, fused) {
            ("qkv_proj", true) => Some("fused_qkv"),
            ("gate_up_proj", true) => Some("fused_gate_up"),
            ("q_proj" | "k_proj" | "v_proj" | "gate_proj" | "up_proj", true) => None,
            ("qkv_proj" | "gate_up_proj", false) => None,
            _ => Some("aten"),
        },
        OpKind::RmsNorm => Some(if fused { "aten" } else { "hf" }),
        OpKind::Rope => Some(if site == "cache" { "hf" } else { "rotate_half" }),
        OpKind::Sdpa => Some("auto"),
        OpKind::KvCache => Some(if fused { "index_copy" } else { "cat" }),
        OpKind::Floor | OpKind::Decode => None,
    }
}

pub const PROFILES: [&str; 2] = ["hf-eager", "fused"];

/// Kernels of a Qwen3 decode step that no op crate measures, with their count per layer and
/// per step, priced at the dispatch floor. The same list serves both profiles: neither fuses
/// the SwiGLU activation or the residual adds.
pub const UNMEASURED: &[(&str, usize, usize, &str)] = &[
    (
        "residual_add",
        2,
        0,
        "hidden + attention output, hidden + MLP output",
    ),
    ("silu", 1, 0, "act_fn(gate_proj(x))"),
    ("swiglu_mul", 1, 0, "act_fn(gate) * up"),
    (
        "attn_transpose",
        1,
        0,
        "attn_output.transpose(1, 2).contiguous() after SDPA",
    ),
    ("embedding", 0, 1, "embed_tokens(input_ids)"),
    (
        "logits_copy",
        0,
        1,
        "generate: logits[:, -1, :] copied to float32",
    ),
    ("argmax", 0, 1, "greedy choice of the next token"),
    ("append_token", 0, 1, "cat(input_ids, next_tokens)"),
];

/// Where a component's price came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Measured,
    Fit,
    Floor,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Fit => "fit",
            Source::Floor => "floor",
        }
    }
}

/// One line of the breakdown.
#[derive(Debug, Clone)]
pub struct Component {
    pub op: String,
    pub variant: String,
    pub site: String,
    pub calls: usize,
    pub per_call_ns: f64,
    /// Fixed per-call share of `per_call_ns`, where a fit can tell.
    pub overhead_ns: Option<f64>,
    pub source: Source,
}

/// A composed step.
#[derive(Debug, Clone)]
pub struct Prediction {
    pub components: Vec<Component>,
    pub step_ns: f64,
    pub batch: usize,
}

impl Prediction {
    pub fn tokens_per_s(&self) -> f64 {
        self.batch as f64 / (self.step_ns * 1e-9)
    }
    /// (overhead ns, ns of components whose split is known).
    pub fn overhead(&self) -> (f64, f64) {
        self.components
            .iter()
            .fold((0.0, 0.0), |(o, k), c| match c.overhead_ns {
                Some(ov) => (o + ov * c.calls as f64, k + c.per_call_ns * c.calls as f64),
                None => (o, k),
            })
    }
}

/// What to compose.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    pub model: &'a ModelConfig,
    pub batch: usize,
    pub ctx: usize,
    pub profile: &'a str,
    pub device: &'a str,
    pub dtype: &'a str,
    pub mode: &'a str,
}

/// Compose a decode step from a run. Missing measurements are a bad-input failure naming
/// the case.
pub fn predict(run: &Run, q: &Query) -> Result<Prediction, Failure> {
    let fits: BTreeMap<SeriesKey, (stats::Fit, Work)> = fit_run(run)
        .into_iter()
        .map(|(k, _, f, w)| (k, (f, w)))
        .collect();
    let find = |op: &str, variant: &str, p: &Problem| {
        run.ok_rows().find(|r| {
            r.op == op
                && r.variant == variant
                && r.site == p.site
                && r.model == p.model
                && r.phase == "decode"
                && r.batch == p.batch
                && r.kv_len == p.kv_len
                && r.dtype == q.dtype
                && r.device == q.device
                && r.mode == q.mode
        })
    };
    let elem = shapes::DTypeName::parse(q.dtype)
        .ok_or_else(|| Failure::input(format!("--dtype {}: expected f32, f16 or bf16", q.dtype)))?
        .size();
    let mut components = Vec::new();
    for p in shapes::derive(q.model, Step::decode(q.batch, q.ctx)) {
        let Some(variant) = profile_variant(q.profile, p.op, p.site) else {
            continue;
        };
        let op = p.op.as_str();
        let series = SeriesKey {
            op: op.into(),
            variant: variant.into(),
            site: p.site.into(),
            model: p.model.clone(),
            phase: "decode".into(),
            q_len: 1,
            kv_len: p.kv_len,
            dtype: q.dtype.into(),
            device: q.device.into(),
            mode: q.mode.into(),
        };
        let fit = fits.get(&series);
        let (per_call, work, source) = match (find(op, variant, &p), fit) {
            (Some(r), _) => {
                let work = fit.map_or(0.0, |(_, w)| w.of(r));
                (r.median_ns.unwrap_or(0.0), work, Source::Measured)
            }
            (None, Some((f, w))) => {
                // the variant's own byte count where it differs (kvcache cat) is only known
                // from its rows; the fit's work unit was measured on the same definition
                let work = match w {
                    Work::Bytes => cat_bytes(op, variant, &p, elem).unwrap_or(p.bytes(elem)) as f64,
                    Work::Flops => p.flops() as f64,
                };
                (f.predict(work), work, Source::Fit)
            }
            (None, None) => {
                return Err(Failure::input(format!(
                    "{}: no measurement or fit for {op}/{variant}/{} {} B={} kv_len={} {} {} {} \
                     (measured decode lengths are the grid's; fits need 3 batches)",
                    run.dir.display(),
                    p.site,
                    p.model,
                    p.batch,
                    p.kv_len.map_or("-".into(), |k| k.to_string()),
                    q.dtype,
                    q.device,
                    q.mode
                )));
            }
        };
        let overhead_ns = fit.map(|(f, _)| f.overhead_share(work) * per_call);
        components.push(Component {
            op: op.into(),
            variant: variant.into(),
            site: p.site.into(),
            calls: p.calls_per_step,
            per_call_ns: per_call,
            overhead_ns,
            source,
        });
    }
    let floor = run
        .ok_rows()
        .find(|r| r.op == "floor" && r.device == q.device && r.dtype == q.dtype && r.mode == q.mode)
        .and_then(|r| r.median_ns)
        .ok_or_else(|| {
            Failure::input(format!(
                "{}: no dispatch floor for {} {} {} (run `cargo bench -p harness` into the same run)",
                run.dir.display(),
                q.device,
                q.dtype,
                q.mode
            ))
        })?;
    let layers = q.model.num_hidden_layers;
    for &(name, per_layer, per_step, _) in UNMEASURED {
        components.push(Component {
            op: "unmeasured".into(),
            variant: "-".into(),
            site: name.into(),
            calls: per_layer * layers + per_step,
            per_call_ns: floor,
            overhead_ns: Some(floor),
            source: Source::Floor,
        });
    }
    let step_ns = components
        .iter()
        .map(|c| c.per_call_ns * c.calls as f64)
        .sum();
    Ok(Prediction {
        components,
        step_ns,
        batch: q.batch,
    })
}

/// Bytes DynamicCache's `cat` moves (the whole cache), as the kvcache crate counts them.
fn cat_bytes(op: &str, variant: &str, p: &Problem, elem: usize) -> Option<u64> {
    match (op, variant, p.dims) {
        (
            "kvcache",
            "cat",
            shapes::Dims::KvCache {
                batch,
                kv_heads,
                cache_len,
                new_len,
                head_dim,
            },
        ) => Some((batch * kv_heads * head_dim * 2 * (cache_len + new_len) * elem) as u64),
        _ => None,
    }
}

/// The default device of a run: its GPU when it has one.
pub fn default_device(run: &Run) -> String {
    run.results
        .iter()
        .map(|r| r.device.as_str())
        .find(|d| *d != "cpu")
        .unwrap_or("cpu")
        .to_string()
}

pub fn print(pred: &Prediction, title: &str) {
    println!("{title}");
    let (ov, known) = pred.overhead();
    println!(
        "predicted: {:.3} ms/step, {:.1} tokens/s; fixed per-call overhead {:.0}% of the {:.0}% of the step whose split is known",
        pred.step_ns / 1e6,
        pred.tokens_per_s(),
        if known > 0.0 { 100.0 * ov / known } else { 0.0 },
        100.0 * known / pred.step_ns
    );
    println!(
        "{:<10} {:<13} {:<14} {:>6} {:>10} {:>9} {:>6} {:>9}  {:<8}",
        "op", "variant", "site", "calls", "µs/call", "ms/step", "share", "overhead", "source"
    );
    for c in &pred.components {
        let total = c.per_call_ns * c.calls as f64;
        println!(
            "{:<10} {:<13} {:<14} {:>6} {:>10.2} {:>9.3} {:>5.1}% {:>9}  {}",
            c.op,
            c.variant,
            c.site,
            c.calls,
            c.per_call_ns / 1e3,
            total / 1e6,
            100.0 * total / pred.step_ns,
            c.overhead_ns.map_or("?".into(), |o| format!(
                "{:.0}%",
                100.0 * o / c.per_call_ns.max(1e-9)
            )),
            c.source.as_str()
        );
    }
    let count = |s: Source| pred.components.iter().filter(|c| c.source == s).count();
    println!(
        "sources: {} measured at this batch, {} from fits, {} unmeasured kernels at the dispatch floor ({})",
        count(Source::Measured),
        count(Source::Fit),
        count(Source::Floor),
        UNMEASURED
            .iter()
            .map(|u| u.0)
            .collect::<Vec<_>>()
            .join(", ")
    );
}

pub fn run(args: &Args) -> Result<u8, Failure> {
    let run = Run::load(&args.run)?;
    let model = ModelConfig::by_name(&args.model).map_err(|e| Failure::input(e.to_string()))?;
    if !PROFILES.contains(&args.profile.as_str()) {
        return Err(Failure::input(format!(
            "--profile {}: expected hf-eager or fused",
            args.profile
        )));
    }
    if args.batch == 0 {
        return Err(Failure::input("--batch: must be positive"));
    }
    let device = args.device.clone().unwrap_or_else(|| default_device(&run));
    let dtype = args.dtype.clone().unwrap_or_else(|| {
        if device == "cpu" {
            "f32".into()
        } else {
            "f16".into()
        }
    });
    let q = Query {
        model: &model,
        batch: args.batch,
        ctx: args.ctx,
        profile: &args.profile,
        device: &device,
        dtype: &dtype,
        mode: &args.mode,
    };
    let pred = predict(&run, &q)?;
    print(
        &pred,
        &format!(
            "{} decode B={} L={}, profile {}, {} {} {} (run {})",
            model.name,
            args.batch,
            args.ctx,
            args.profile,
            device,
            dtype,
            args.mode,
            run.dir.display()
        ),
    );
    Ok(0)
}
