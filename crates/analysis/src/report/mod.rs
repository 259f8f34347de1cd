//! RUN/report.md with SVG plots (`opbench report`).
//!
//! Per device: per op, time per call against batch on log axes for each variant at a
//! representative site, with the fitted model and the dispatch floor drawn in; achieved
//! GB/s against the measured copy ceiling (or the DRAM peak); host versus device time per
//! call at B=1 where the run has device-mode rows; the predicted decode step per profile
//! and batch next to the measured one. Then GPU-over-CPU speedup per op and batch when the
//! run holds both devices.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use rundir::{DType, DeviceId, Mode, OpKind, Phase, ResultRow, Run};
use shapes::{ModelConfig, StepProfile};

use crate::fit::{Fits, fit_run};
use crate::predict::{HostModel, Query, predict_with};
use crate::{AnalysisError, slug};

mod help;
mod ops;
mod step;
mod traced;

use help::*;
use ops::*;
use step::*;
use traced::*;

/// The variants drawn on the bandwidth plot: one per op, as the hf-eager profile runs it
/// (rmsnorm and rope: the single-kernel forms, whose GB/s mean something).
const BANDWIDTH_SERIES: &[(OpKind, &str)] = &[
    (OpKind::Linear, "aten"),
    (OpKind::RmsNorm, "fused"),
    (OpKind::Rope, "halves"),
    (OpKind::Sdpa, "auto"),
    (OpKind::KvCache, "cat"),
];

/// The ops plotted per device, in order.
const PLOTTED: [OpKind; 7] = [
    OpKind::Linear,
    OpKind::RmsNorm,
    OpKind::Rope,
    OpKind::Sdpa,
    OpKind::KvCache,
    OpKind::Eltwise,
    OpKind::Decode,
];

/// The site each op is plotted at (the others behave alike or are in the CSV).
fn representative_site(op: OpKind) -> &'static str {
    match op {
        OpKind::Linear => "q_proj",
        OpKind::RmsNorm => "input_norm",
        OpKind::Rope => "q",
        OpKind::Sdpa => "attn",
        OpKind::KvCache => "k",
        OpKind::Eltwise => "silu",
        OpKind::Decode => "step",
        OpKind::Moe => "experts",
        OpKind::Floor | OpKind::Ceiling => "",
    }
}

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

type Series = BTreeMap<String, Vec<(f64, f64)>>;

fn draw_err(path: &Path, e: impl std::fmt::Display) -> AnalysisError {
    AnalysisError::output(path, e)
}

/// Tick values 1, 2, 5 × 10^k inside `lo..hi`, so every log axis has several labels.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let t = decade * m;
            if t >= lo && t <= hi {
                out.push(t);
            }
        }
        decade *= 10.0;
    }
    out
}

/// The cache length to plot for sdpa / kvcache / decode: the measured one closest to 1025.
fn plotted_kv(rows: &[&ResultRow], op: OpKind) -> Option<usize> {
    rows.iter()
        .filter(|r| r.op == op && r.phase == Phase::Decode)
        .filter_map(|r| r.kv_len)
        .min_by_key(|k| (*k as i64 - 1025).abs())
}

/// A run and what every section reads from it.
struct Ctx<'a> {
    run: &'a Run,
    dir: &'a Path,
    fits: Fits,
    ok: Vec<&'a ResultRow>,
    traces: crate::traced::Traces,
}

/// One device's rows in one dtype.
#[derive(Clone, Copy)]
struct On {
    device: DeviceId,
    dtype: DType,
}

fn text(v: Option<impl ToString>) -> String {
    v.map_or("-".into(), |x| x.to_string())
}

/// Write `dir`/report.md and its SVGs; returns the report's path.
pub fn write_report(dir: &Path) -> Result<PathBuf, AnalysisError> {
    // as predict reads it: rows sampled in rounds read pair by pair
    let run = crate::predict::at_host_state(&Run::load(dir)?, crate::predict::HostState::Typical)?;
    let ctx = Ctx {
        fits: fit_run(&run),
        ok: run.ok_rows().collect(),
        traces: crate::traced::Traces::load(&run)?,
        run: &run,
        dir,
    };
    let mut md = header(&ctx);
    let devices: BTreeSet<DeviceId> = ctx.ok.iter().map(|r| r.device).collect();
    for &device in &devices {
        let dtype = ctx
            .ok
            .iter()
            .filter(|r| r.device == device && r.op != OpKind::Floor)
            .map(|r| r.dtype)
            .next()
            .unwrap_or(DType::F32);
        let on = On { device, dtype };
        let _ = writeln!(md, "## {device} ({dtype})\n");
        // the answer first, as `opbench predict` opens
        let (help, answer) = what_would_help(&ctx, on)?;
        if !answer.is_empty() {
            let _ = writeln!(md, "```\n{}\n```\n", answer.join("\n"));
        }
        let floor = ctx
            .ok
            .iter()
            .find(|r| {
                r.op == OpKind::Floor
                    && r.variant == "add"
                    && r.device == device
                    && r.mode == Mode::Pipelined
                    && r.dtype == dtype
            })
            .and_then(|r| r.median_ns)
            .map(|t| t / 1e3);
        if let Some(f) = floor {
            let _ = writeln!(
                md,
                "Dispatch floor (one-element add, pipelined): {f:.2} µs per call.\n"
            );
        }
        // the answer first (the step, where it goes, what graphs would give, the batch),
        // then the evidence (each op, the bandwidth, host against device, the kernels)
        md += &predicted_steps(&ctx, on);
        md += &help;
        md += &breakdown(&ctx, on)?;
        md += &graph_replay(&ctx, on)?;
        md += &batch_curve(&ctx, on)?;
        let _ = writeln!(md, "### The evidence: each op\n");
        md += &op_plots(&ctx, on, floor)?;
        md += &bandwidth(&ctx, on)?;
        md += &host_vs_device(&ctx, on);
        md += &traced_kernels(&ctx, on);
    }
    md += &gpu_over_cpu(&ctx, &devices);
    let path = dir.join("report.md");
    std::fs::write(&path, md).map_err(|e| AnalysisError::output(&path, e))?;
    Ok(path)
}

fn header(ctx: &Ctx) -> String {
    let mut md = String::new();
    let env = ctx.run.env.clone().unwrap_or_default();
    let _ = writeln!(md, "# opbench report: {}\n", env.run_id);
    let _ = writeln!(
        md,
        "Device **{}** ({}, {}), backend `{}`, runtime {}, driver {}; libtorch {}, tch {}, opbench {} (git {}); CPU {}, {} threads; {}.\n",
        text(env.device_name.as_ref()),
        text(env.arch.as_ref()),
        env.device_memory_bytes.map_or("-".into(), |b| format!(
            "{:.0} GiB",
            b as f64 / 1073741824.0
        )),
        env.backend,
        text(env.runtime_version.as_ref()),
        text(env.driver_version.as_ref()),
        env.libtorch_version,
        env.tch_version,
        env.opbench_version,
        env.git_revision,
        env.cpu_model,
        env.threads,
        env.os,
    );
    let statuses: BTreeMap<&str, usize> =
        ctx.run.results.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(r.status.as_str()).or_default() += 1;
            m
        });
    let _ = writeln!(
        md,
        "{} rows: {}. Times are medians per call; `pipelined` = back to back with one synchronize, as an eager decode loop runs.\n",
        ctx.run.results.len(),
        statuses
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    md
}

/// The step a report prices: `profile` at batch `b` and context `ctx_len` on `on`, in
/// `mode`, with the default host model ([`HostModel::default_for`]).
fn report_query<'a>(
    run: &Run,
    cfg: &'a ModelConfig,
    on: On,
    profile: StepProfile,
    b: usize,
    ctx_len: usize,
    mode: Mode,
) -> Query<'a> {
    let q = Query {
        model: cfg,
        batch: b,
        ctx: ctx_len,
        phase: Phase::Decode,
        profile,
        device: on.device,
        dtype: on.dtype,
        mode,
        host: HostModel::AsMeasured,
    };
    Query {
        host: HostModel::default_for(run, &q),
        ..q
    }
}

/// Which host model priced each profile's eager step, in one sentence; empty on the CPU,
/// where none applies.
fn host_models(on: On, chosen: &BTreeMap<StepProfile, HostModel>) -> String {
    if !on.device.is_gpu() {
        return String::new();
    }
    let with = |m: HostModel| -> Vec<&str> {
        chosen
            .iter()
            .filter(|(_, h)| **h == m)
            .map(|(p, _)| p.as_str())
            .collect()
    };
    let (layered, alone) = (with(HostModel::Controlled), with(HostModel::AsMeasured));
    match (layered.is_empty(), alone.is_empty()) {
        (true, _) => "Host costs as each row measured them alone (`--host-model as-measured`): the run has no layer rows.".into(),
        (false, true) => "Host costs scaled to the step's own process and sequence by each profile's layer rows (`--host-model controlled`).".into(),
        (false, false) => format!(
            "Host costs scaled to the step's own process and sequence by the profile's layer rows for {} (`--host-model controlled`), as each row measured them alone for {} (`as-measured`: no layer rows).",
            layered.join(", "),
            alone.join(", ")
        ),
    }
}

/// The batches a device's decode ops were measured at.
fn batches(ctx: &Ctx, on: On) -> Vec<usize> {
    let set: BTreeSet<usize> = ctx
        .ok
        .iter()
        .filter(|r| {
            r.device == on.device
                && r.dtype == on.dtype
                && r.op == OpKind::Sdpa
                && r.phase == Phase::Decode
        })
        .map(|r| r.batch)
        .collect();
    set.into_iter().collect()
}

/// The predicted step per profile and measured batch, beside the decode crate's rows.
fn predicted_steps(ctx: &Ctx, on: On) -> String {
    let mut md = String::new();
    for model in models(ctx, on) {
        let Ok(cfg) = ModelConfig::by_name(model) else {
            continue;
        };
        let ctx_len = plotted_kv(&ctx.ok, OpKind::Sdpa).map_or(1024, |k| k - 1);
        let _ = writeln!(md, "### Predicted decode step: {model}, L = {ctx_len}\n");
        let _ = writeln!(
            md,
            "| profile | B | ms/step | tokens/s | host ms | kernels ms | bound | measured ms/step | measured device ms |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
        let peer = has_peer(ctx);
        let mut chosen = BTreeMap::new();
        for profile in StepProfile::EVERY {
            if profile == StepProfile::Transformers && !peer {
                continue;
            }
            for b in batches(ctx, on) {
                let q = report_query(ctx.run, &cfg, on, profile, b, ctx_len, Mode::Pipelined);
                chosen.insert(profile, q.host);
                match predict_with(ctx.run, &ctx.fits, &q) {
                    Ok(p) => {
                        let measured = p
                            .measured
                            .as_ref()
                            .and_then(|r| r.median_ns)
                            .map_or("-".into(), |m| format!("{:.2}", m / 1e6));
                        let measured_device = p
                            .measured_device
                            .as_ref()
                            .and_then(|r| {
                                let m = r.median_ns? / 1e6;
                                Some(format!(
                                    "{}{m:.2}",
                                    if r.is_upper_bound() { "≤ " } else { "" }
                                ))
                            })
                            .unwrap_or_else(|| "-".into());
                        let _ = writeln!(
                            md,
                            "| {profile} | {b} | {:.2} | {:.0} | {:.2} | {:.2} | {} | {measured} | {measured_device} |",
                            p.step_ns / 1e6,
                            p.tokens_per_s(),
                            p.host_ns / 1e6,
                            p.device_ns / 1e6,
                            if !p.gpu {
                                "cpu (serial)"
                            } else if p.host_bound() {
                                "host"
                            } else {
                                "device"
                            }
                        );
                    }
                    Err(e) => {
                        let _ = writeln!(
                            md,
                            "| {profile} | {b} | n/a: {} | | | | | | |",
                            e.to_string().replace('|', "/")
                        );
                    }
                }
            }
        }
        let _ = writeln!(
            md,
            "\nKernels ms: the predicted device time of the step (Σ GPU-event times of its parts); measured device ms: the decode crate's own `device` row (≤: an upper bound, see its `uncovered_chunks`). {}\n\n`opbench predict {} --model {model} --batch B --ctx {ctx_len}` prints the per-op breakdown and what would help; add `--profile transformers` for your HF transformers `generate()`.\n",
            host_models(on, &chosen),
            ctx.dir.display()
        );
    }
    md
}

/// The models whose decode step the report prices on `on`: those with SDPA rows there.
fn models<'a>(ctx: &Ctx<'a>, on: On) -> BTreeSet<&'a str> {
    ctx.ok
        .iter()
        .filter(|r| r.device == on.device && r.op == OpKind::Sdpa)
        .map(|r| r.model.as_str())
        .collect()
}

/// The run has scripts/peer.py's rows (the transformers profile).
fn has_peer(ctx: &Ctx) -> bool {
    ctx.ok
        .iter()
        .any(|r| r.op == OpKind::Decode && r.variant == StepProfile::Transformers.as_str())
}

/// A chart's file name beside report.md: `<device>-<model>-<what>.svg`.
fn chart_name(on: On, model: &str, what: &str) -> String {
    format!(
        "{}-{}-{what}.svg",
        slug(&on.device.to_string()),
        slug(model)
    )
}

/// The whole-step rows (the decode crate's and the peer's, site `step`) of a device and
/// dtype in `mode`, both phases.
fn step_rows<'a>(ctx: &'a Ctx, on: On, mode: Mode) -> impl Iterator<Item = &'a ResultRow> + 'a {
    ctx.ok.iter().copied().filter(move |r| {
        r.device == on.device
            && r.dtype == on.dtype
            && r.op == OpKind::Decode
            && r.site == "step"
            && r.mode == mode
    })
}

/// Pipelined decode medians of the same case on the CPU and the GPU.
fn gpu_over_cpu(ctx: &Ctx, devices: &BTreeSet<DeviceId>) -> String {
    let mut md = String::new();
    let Some(&gpu) = devices.iter().find(|d| d.is_gpu()) else {
        return md;
    };
    if !devices.contains(&DeviceId::CPU) {
        return md;
    }
    let _ = writeln!(
        md,
        "## {gpu} over cpu\n\nPipelined decode medians of the same case on both devices, each in the dtype the run \
         gave it (the CPU usually f32, the GPU f16 or bf16): the speed-up a user sees by moving the op.\n\n\
         | op | variant | site | batch | cpu µs | {gpu} µs | speedup |\n|---|---|---|---|---|---|---|"
    );
    for r in ctx.ok.iter().filter(|r| {
        r.device == gpu
            && r.mode == Mode::Pipelined
            && r.phase == Phase::Decode
            && r.site == representative_site(r.op)
    }) {
        if let Some(c) = ctx.ok.iter().find(|c| {
            c.device == DeviceId::CPU
                && c.op == r.op
                && c.variant == r.variant
                && c.site == r.site
                && c.batch == r.batch
                && c.kv_len == r.kv_len
                && c.mode == Mode::Pipelined
                && c.phase == Phase::Decode
        }) {
            if let (Some(ct), Some(gt)) = (c.median_ns, r.median_ns) {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1}× |",
                    r.op,
                    r.variant,
                    r.site,
                    r.batch,
                    ct / 1e3,
                    gt / 1e3,
                    ct / gt
                );
            }
        }
    }
    md.push('\n');
    md
}
