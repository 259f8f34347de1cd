//! `opbench shapes`: the derived problems of a model's step.

use shapes::{Grid, ModelConfig, OpKind, Phase, Step, derive};

use crate::CliError as Failure;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model: a shapes/ name (`qwen3-0.6b`, `llama-3.2-1b`, ...) or a path to a Hugging Face
    /// config.json.
    #[arg(long, default_value = "qwen3-0.6b")]
    model: String,
    /// decode, prefill or all.
    #[arg(long, default_value = "decode")]
    phase: String,
    /// Batch sizes, comma-separated (default: the grid's).
    #[arg(long, value_delimiter = ',')]
    batch: Vec<usize>,
    /// Cache lengths L for decode, prompt lengths S for prefill (default: the grid's).
    #[arg(long, value_delimiter = ',')]
    ctx: Vec<usize>,
    /// Element type the byte counts assume: f32, f16, bf16.
    #[arg(long, default_value = "f16")]
    dtype: String,
    /// Only this op (linear, rmsnorm, rope, sdpa, kvcache).
    #[arg(long)]
    op: Option<String>,
    /// csv or md.
    #[arg(long, default_value = "csv")]
    format: String,
}

const COLUMNS: [&str; 11] = [
    "op",
    "site",
    "model",
    "phase",
    "batch",
    "q_len",
    "kv_len",
    "dims",
    "flops",
    "bytes",
    "calls_per_step",
];

pub fn run(args: &Args) -> Result<u8, Failure> {
    let (cfg, dtype, phases, op) = checked(args)?;
    let grid = Grid::load_default().map_err(|e| Failure::input(e.to_string()))?;
    let profile = grid
        .profile("default")
        .map_err(|e| Failure::input(e.to_string()))?;
    let mut rows: Vec<Vec<String>> = Vec::new();
    // a row that does not depend on L (the projections, the norms) is the same at every L
    // of the grid: each is printed once
    let mut seen = std::collections::BTreeSet::new();
    for phase in phases {
        let batches = match (args.batch.is_empty(), phase) {
            (false, _) => args.batch.clone(),
            (true, Phase::Decode) => profile.batches.clone(),
            (true, Phase::Prefill) => profile.prefill_batches.clone(),
        };
        let ctxs = match (args.ctx.is_empty(), phase) {
            (false, _) => args.ctx.clone(),
            (true, Phase::Decode) => profile.decode_ctx.clone(),
            (true, Phase::Prefill) => profile.prefill_len.clone(),
        };
        if phase == Phase::Prefill && ctxs.contains(&0) {
            return Err(Failure::input("--ctx: prefill lengths must be positive"));
        }
        for &b in &batches {
            for &l in &ctxs {
                let step = match phase {
                    Phase::Decode => Step::decode(b, l),
                    Phase::Prefill => Step::prefill(b, l),
                };
                for p in derive(&cfg, step) {
                    if op.is_some_and(|o| o != p.op) {
                        continue;
                    }
                    let row = problem_row(&p, dtype.size(), b, l)?;
                    if seen.insert(row.clone()) {
                        rows.push(row);
                    }
                }
            }
        }
    }
    write_rows(&args.format, &rows)?;
    Ok(0)
}

/// The model, dtype, phases and op `args` ask for, each checked; a bad one is a
/// one-line error.
fn checked(
    args: &Args,
) -> Result<(ModelConfig, shapes::DTypeName, Vec<Phase>, Option<OpKind>), Failure> {
    let cfg = ModelConfig::by_name(&args.model).map_err(|e| Failure::input(e.to_string()))?;
    let dtype = shapes::DTypeName::parse(&args.dtype).ok_or_else(|| {
        Failure::input(format!("--dtype {}: expected f32, f16 or bf16", args.dtype))
    })?;
    let phases = match args.phase.as_str() {
        "all" => vec![Phase::Decode, Phase::Prefill],
        p => vec![Phase::parse(p).ok_or_else(|| {
            Failure::input(format!("--phase {p}: expected decode, prefill or all"))
        })?],
    };
    let op = match &args.op {
        None => None,
        Some(o) => {
            Some(OpKind::parse(o).ok_or_else(|| Failure::input(format!("--op {o}: unknown op")))?)
        }
    };
    if args.batch.contains(&0) {
        return Err(Failure::input("--batch: sizes must be positive"));
    }
    if let Some(b) = args.batch.iter().find(|b| **b > shapes::MAX_BATCH) {
        return Err(Failure::input(format!(
            "--batch {b}: above {}, more than any device holds",
            shapes::MAX_BATCH
        )));
    }
    if let Some(l) = args.ctx.iter().find(|l| **l > shapes::MAX_LEN) {
        return Err(Failure::input(format!(
            "--ctx {l}: above {}, more than any device holds",
            shapes::MAX_LEN
        )));
    }
    Ok((cfg, dtype, phases, op))
}

/// One problem's row at batch `b`, length `l`, elements of `elem` bytes.
fn problem_row(
    p: &shapes::Problem,
    elem: usize,
    b: usize,
    l: usize,
) -> Result<Vec<String>, Failure> {
    let (Some(flops), Some(bytes)) = (p.checked_flops(), p.checked_bytes(elem)) else {
        return Err(Failure::input(format!(
            "{} {} at B={b} L={l}: its FLOP or byte count does not fit 64 bits",
            p.op, p.site
        )));
    };
    Ok(vec![
        p.op.to_string(),
        p.site.to_string(),
        p.model.clone(),
        p.phase.to_string(),
        p.batch.to_string(),
        p.q_len.to_string(),
        p.kv_len.map_or(String::new(), |k| k.to_string()),
        p.dims.to_string(),
        flops.to_string(),
        bytes.to_string(),
        p.calls_per_step.to_string(),
    ])
}

/// The rows as CSV or a Markdown table on stdout.
fn write_rows(format: &str, rows: &[Vec<String>]) -> Result<(), Failure> {
    match format {
        "csv" => {
            let mut w = csv::Writer::from_writer(std::io::stdout());
            let io = |e: csv::Error| Failure {
                code: 1,
                message: format!("stdout: {e}"),
            };
            w.write_record(COLUMNS).map_err(io)?;
            for r in rows {
                w.write_record(r).map_err(io)?;
            }
            w.flush().map_err(|e| Failure {
                code: 1,
                message: format!("stdout: {e}"),
            })?;
        }
        "md" => {
            println!("| {} |", COLUMNS.join(" | "));
            println!("|{}", "---|".repeat(COLUMNS.len()));
            for r in rows {
                println!("| {} |", r.join(" | "));
            }
        }
        f => return Err(Failure::input(format!("--format {f}: expected csv or md"))),
    }
    Ok(())
}
