//! `opbench predict RUN --model M --batch B --ctx L [--profile hf-eager|fused]`: one decode
//! step composed from a run's measurements and fits.
//!
//! Every site of the step × its calls per step, for the variants the profile uses. A site
//! measured at exactly this batch (and cache length) is priced at its median; otherwise at
//! its series' fit evaluated at this case's work. Calls of a step that no op crate
//! measures ([`UNMEASURED`]) are priced at the run's dispatch floors and marked as such.
//!
//! Each part gets a host cost (dispatch + launch) and a device cost (kernel time); on a GPU
//! the step is max(Σ host, Σ device), because eager PyTorch queues kernels ahead of the
//! device: adding up per-op times would count the overlap twice. See [`predict`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use shapes::{ModelConfig, OpKind, Problem, Step};

use crate::Failure;
use crate::fit_cmd::{Work, fit_run};
use crate::run::{Run, SeriesKey};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run directory (target/opbench/runs/RUN_ID).
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
        OpKind::Floor | OpKind::Decode | OpKind::Ceiling => None,
    }
}

pub const PROFILES: [&str; 2] = ["hf-eager", "fused"];

/// What a call that no op crate measures is: a kernel launch or a view (dispatch only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmeasured {
    Kernel,
    View,
}

/// Calls of a Qwen3 decode step that no op crate measures, as the decode crate's forward
/// (which mirrors transformers' modeling_qwen3) makes them: name, kind, count per layer
/// for hf-eager and for fused, count per step, what it is. Kernels are
/// priced at the `add` dispatch floor, views at the `view` floor. generate()'s own
/// bookkeeping (logits copy, appending the token, stopping checks) is not part of the model
/// forward and is not counted.
/// One kind of call that no op crate measures.
#[derive(Debug, Clone, Copy)]
pub struct UnmeasuredCall {
    pub name: &'static str,
    pub kind: Unmeasured,
    /// Calls per layer: [hf-eager, fused].
    pub per_layer: [usize; 2],
    /// Calls per step outside the layers: [hf-eager, fused].
    pub per_step: [usize; 2],
    pub what: &'static str,
}

pub const UNMEASURED: &[UnmeasuredCall] = &[
    UnmeasuredCall {
        name: "residual_add",
        kind: Unmeasured::Kernel,
        per_layer: [2, 2],
        per_step: [0, 0],
        what: "hidden + attention output, hidden + MLP output",
    },
    UnmeasuredCall {
        name: "silu",
        kind: Unmeasured::Kernel,
        per_layer: [1, 1],
        per_step: [0, 0],
        what: "act_fn(gate_proj(x))",
    },
    UnmeasuredCall {
        name: "swiglu_mul",
        kind: Unmeasured::Kernel,
        per_layer: [1, 1],
        per_step: [0, 0],
        what: "act_fn(gate) * up",
    },
    UnmeasuredCall {
        name: "attn_contiguous",
        kind: Unmeasured::Kernel,
        per_layer: [1, 1],
        per_step: [0, 0],
        what: "attn_output.transpose(1, 2).contiguous()",
    },
    UnmeasuredCall {
        name: "embedding",
        kind: Unmeasured::Kernel,
        per_layer: [0, 0],
        per_step: [1, 1],
        what: "embed_tokens(input_ids)",
    },
    UnmeasuredCall {
        name: "positions",
        kind: Unmeasured::Kernel,
        per_layer: [0, 0],
        per_step: [1, 2],
        what: "position ids (fused: and the static cache's positions)",
    },
    UnmeasuredCall {
        name: "argmax",
        kind: Unmeasured::Kernel,
        per_layer: [0, 0],
        per_step: [1, 1],
        what: "greedy choice of the next token",
    },
    UnmeasuredCall {
        name: "views",
        kind: Unmeasured::View,
        per_layer: [8, 12],
        per_step: [6, 6],
        what: "view/transpose/reshape of q, k, v and the attention output (fused: also split, chunk \
         and the cache narrows); per step: position and cos/sin unsqueezes, last-token narrow, squeeze",
    },
];

/// Where a component's pipelined price came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Measured,
    Fit,
    Floor,
    /// Its bytes over the run's measured copy ceiling exceed what it cost alone (its
    /// buffers were cached when measured alone; in a step they stream from memory).
    Ceiling,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Fit => "fit",
            Source::Floor => "floor",
            Source::Ceiling => "ceiling",
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
    /// Nothing better: the pipelined time, an upper bound.
    Bound,
    /// Its bytes over the run's measured copy ceiling.
    Ceiling,
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
            DeviceSource::None => "-",
        }
    }
}

/// One line of the breakdown; times per call in ns.
#[derive(Debug, Clone)]
pub struct Component {
    pub op: String,
    pub variant: String,
    pub site: String,
    pub calls: usize,
    /// What one call costs alone, back to back: max(host, device).
    pub per_call_ns: f64,
    /// Host dispatch + launch per call: the least its series costs at any batch.
    pub host_ns: f64,
    /// Kernel time per call.
    pub device_ns: f64,
    pub source: Source,
    pub device_source: DeviceSource,
}

/// A composed step.
#[derive(Debug, Clone)]
pub struct Prediction {
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
}

impl Prediction {
    pub fn tokens_per_s(&self) -> f64 {
        self.batch as f64 / (self.step_ns * 1e-9)
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

/// Compose a decode step from a run.
///
/// Per site: its pipelined time at this batch (measured, else from its series' fit, never
/// below the dispatch floor), its host cost (its series' pipelined time at the smallest
/// batch: dispatch and launch do not grow with the batch) and its device time (GPU events
/// where measured at this case; else the fit's work / rate; else the pipelined time when it
/// is more than twice the host cost, since the device is then what the call waits for; else
/// the pipelined time as an upper bound). Where the run has the copy ceiling, no part moves
/// its bytes faster than that: an op measured alone re-reads buffers that may sit in cache,
/// while a step streams every weight and the KV cache from memory. On a GPU the step is
/// max(Σ host, Σ device); on the CPU it is the plain sum. Missing measurements are a
/// bad-input failure naming the case.
pub fn predict(run: &Run, q: &Query) -> Result<Prediction, Failure> {
    let fits: BTreeMap<SeriesKey, (stats::Fit, Work)> = fit_run(run)
        .into_iter()
        .map(|(k, _, f, w)| (k, (f, w)))
        .collect();
    let gpu = q.device != "cpu";
    let rows: Vec<&harness::ResultRow> = run
        .ok_rows()
        .filter(|r| r.dtype == q.dtype && r.device == q.device && r.phase == "decode")
        .collect();
    let find =
        |op: &str, variant: &str, site: &str, batch: usize, kv: Option<usize>, mode: &str| {
            rows.iter()
                .find(|r| {
                    r.op == op
                        && r.variant == variant
                        && r.site == site
                        && (r.model == q.model.name || r.model == "none")
                        && r.batch == batch
                        && r.kv_len == kv
                        && r.mode == mode
                })
                .and_then(|r| r.median_ns)
        };
    let elem = shapes::DTypeName::parse(q.dtype)
        .ok_or_else(|| Failure::input(format!("--dtype {}: expected f32, f16 or bf16", q.dtype)))?
        .size();
    let floor = |variant: &str, mode: &str| find("floor", variant, "add1", 1, None, mode);
    let floor_kernel = floor("add", q.mode).ok_or_else(|| {
        Failure::input(format!(
            "{}: no dispatch floor for {} {} {} (run `cargo bench -p harness` into the same run)",
            run.dir.display(),
            q.device,
            q.dtype,
            q.mode
        ))
    })?;
    // a run without the view floor prices a view as a kernel's dispatch: an upper bound
    let floor_view = floor("view", q.mode).unwrap_or(floor_kernel);
    let floor_device = floor("add", "device");
    // the measured copy ceiling (bytes/ns): a step streams every weight and the KV cache
    // from memory, while an op benchmarked alone re-reads the same buffers and may be
    // served from cache; no call can move its bytes faster than the ceiling
    let copy_gbps = rows
        .iter()
        .find(|r| r.op == "ceiling" && r.site == "copy" && r.mode == q.mode)
        .and_then(|r| r.gbps)
        .filter(|g| *g > 0.0);

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
        let work = match fit {
            Some((_, Work::Flops)) => p.flops() as f64,
            _ => cat_bytes(op, variant, &p, elem).unwrap_or(p.bytes(elem)) as f64,
        };
        let (per_call, source) = match (find(op, variant, p.site, p.batch, p.kv_len, q.mode), fit) {
            (Some(t), _) => (t, Source::Measured),
            (None, Some((f, _))) => (f.predict(work).max(floor_kernel), Source::Fit),
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
        // host cost: the series at its smallest batch, where dispatch dominates (noise on a
        // shared host makes a minimum over batches biased low)
        let host = rows
            .iter()
            .filter(|r| SeriesKey::of(r) == series)
            .min_by_key(|r| r.batch)
            .and_then(|r| r.median_ns)
            .map_or(per_call, |h| h.min(per_call));
        let bytes = cat_bytes(op, variant, &p, elem).unwrap_or(p.bytes(elem)) as f64;
        let cold = copy_gbps.map_or(0.0, |g| bytes / g);
        let (per_call, source) = if cold > per_call {
            (cold, Source::Ceiling)
        } else {
            (per_call, source)
        };
        let (device, device_source) = if !gpu {
            (per_call, DeviceSource::Pipelined)
        } else if cold > 0.0 && source == Source::Ceiling {
            (cold, DeviceSource::Ceiling)
        } else if let Some(t) = find(op, variant, p.site, p.batch, p.kv_len, "device") {
            (t, DeviceSource::Events)
        } else if let Some(rate) = fit.and_then(|(f, _)| f.rate()) {
            let t = (work / rate).max(floor_device.unwrap_or(0.0)).min(per_call);
            (t, DeviceSource::Fit)
        } else if per_call > 2.0 * host {
            (per_call, DeviceSource::Pipelined)
        } else {
            (per_call, DeviceSource::Bound)
        };
        let (device, device_source) = if gpu && cold > device {
            (cold, DeviceSource::Ceiling)
        } else {
            (device, device_source)
        };
        components.push(Component {
            op: op.into(),
            variant: variant.into(),
            site: p.site.into(),
            calls: p.calls_per_step,
            per_call_ns: per_call,
            host_ns: host,
            device_ns: device,
            source,
            device_source,
        });
    }
    let layers = q.model.num_hidden_layers;
    let which = usize::from(q.profile == "fused");
    for u in UNMEASURED {
        let (name, kind) = (u.name, u.kind);
        let calls = u.per_layer[which] * layers + u.per_step[which];
        if calls == 0 {
            continue;
        }
        let (host, device, device_source) = match (kind, floor_device) {
            (Unmeasured::View, _) => (floor_view, 0.0, DeviceSource::None),
            (Unmeasured::Kernel, _) if !gpu => {
                (floor_kernel, floor_kernel, DeviceSource::Pipelined)
            }
            (Unmeasured::Kernel, Some(d)) => (floor_kernel, d, DeviceSource::Floor),
            (Unmeasured::Kernel, None) => (floor_kernel, floor_kernel, DeviceSource::Bound),
        };
        components.push(Component {
            op: "unmeasured".into(),
            variant: "-".into(),
            site: name.into(),
            calls,
            per_call_ns: host,
            host_ns: host,
            device_ns: device,
            source: Source::Floor,
            device_source,
        });
    }
    let sum = |f: fn(&Component) -> f64| {
        components
            .iter()
            .map(|c| f(c) * c.calls as f64)
            .sum::<f64>()
    };
    let host_ns = sum(|c| c.host_ns);
    let device_ns = sum(|c| c.device_ns);
    let serial_ns = sum(|c| c.per_call_ns);
    let step_ns = if gpu {
        host_ns.max(device_ns)
    } else {
        serial_ns
    };
    Ok(Prediction {
        components,
        host_ns,
        device_ns,
        serial_ns,
        step_ns,
        batch: q.batch,
        gpu,
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
    println!(
        "predicted: {:.3} ms/step, {:.1} tokens/s",
        pred.step_ns / 1e6,
        pred.tokens_per_s()
    );
    if pred.gpu {
        let bound = if pred.host_ns >= pred.device_ns {
            "host-bound: launch overhead sets the pace"
        } else {
            "device-bound: the kernels set the pace"
        };
        println!(
            "  host dispatch+launch {:.3} ms, kernels {:.3} ms per step ({bound}); the GPU is busy ~{:.0}% of the step",
            pred.host_ns / 1e6,
            pred.device_ns / 1e6,
            100.0 * pred.device_ns / pred.step_ns
        );
        println!(
            "  (each op alone, back to back, would add up to {:.3} ms)",
            pred.serial_ns / 1e6
        );
    }
    println!(
        "{:<10} {:<13} {:<15} {:>6} {:>9} {:>9} {:>9} {:>8} {:>6}  {:<8} {:<9}",
        "op",
        "variant",
        "site",
        "calls",
        "µs/call",
        "host µs",
        "dev µs",
        "ms/step",
        "share",
        "source",
        "device"
    );
    for c in &pred.components {
        let total = c.per_call_ns * c.calls as f64;
        println!(
            "{:<10} {:<13} {:<15} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>8.3} {:>5.1}%  {:<8} {:<9}",
            c.op,
            c.variant,
            c.site,
            c.calls,
            c.per_call_ns / 1e3,
            c.host_ns / 1e3,
            c.device_ns / 1e3,
            total / 1e6,
            100.0 * total / pred.serial_ns,
            c.source.as_str(),
            c.device_source.as_str()
        );
    }
    let count = |s: Source| pred.components.iter().filter(|c| c.source == s).count();
    println!(
        "sources: {} sites measured at this batch, {} from fits, {} kinds of call no op crate measures, priced at the dispatch floors:",
        count(Source::Measured),
        count(Source::Fit),
        count(Source::Floor),
    );
    for u in UNMEASURED {
        println!("  {:<16} {}", u.name, u.what);
    }
}

/// The measured whole step for the query (median, CI low, CI high), if the run has the
/// decode crate's row.
pub fn measured_step(run: &Run, q: &Query) -> Option<(f64, f64, f64)> {
    step_row(run, q).and_then(|r| Some((r.median_ns?, r.ci_low_ns?, r.ci_high_ns?)))
}

/// The decode crate's ok row for the query.
pub fn step_row<'r>(run: &'r Run, q: &Query) -> Option<&'r harness::ResultRow> {
    run.ok_rows().find(|r| {
        r.op == "decode"
            && r.variant == q.profile
            && r.model == q.model.name
            && r.phase == "decode"
            && r.batch == q.batch
            && r.kv_len == Some(q.ctx + 1)
            && r.dtype == q.dtype
            && r.device == q.device
            && r.mode == q.mode
    })
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
    if let Some((m, lo, hi)) = measured_step(&run, &q) {
        println!(
            "measured (decode crate): {:.3} ms/step [{:.3}, {:.3}], {:.1} tokens/s; predicted / measured = {:.3} ({:+.1}%)",
            m / 1e6,
            lo / 1e6,
            hi / 1e6,
            q.batch as f64 / (m * 1e-9),
            pred.step_ns / m,
            100.0 * (pred.step_ns / m - 1.0)
        );
    }
    if pred.gpu {
        let dq = Query {
            mode: "device",
            ..q.clone()
        };
        if let Some(row) = step_row(&run, &dq) {
            if let (Some(m), Some(lo), Some(hi)) = (row.median_ns, row.ci_low_ns, row.ci_high_ns) {
                println!(
                    "measured device time of the step (GPU events, decode crate): {:.3} ms [{:.3}, {:.3}]; predicted kernels / measured = {:.3} ({:+.1}%)",
                    m / 1e6,
                    lo / 1e6,
                    hi / 1e6,
                    pred.device_ns / m,
                    100.0 * (pred.device_ns / m - 1.0)
                );
                if let Some(gaps) = row
                    .note
                    .as_deref()
                    .and_then(harness::devtime::upper_bound_in)
                {
                    println!("  {gaps}");
                }
            }
        }
    }
    Ok(0)
}
