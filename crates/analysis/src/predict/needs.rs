//! What a query needs that its run lacks, said at once (the cases, the crates that time
//! them, the dispatch floor, the batch or length no grid profile has), with the one command
//! that adds them into the same run: `OPBENCH_RUN=<its id> … scripts/bench -p … -- FILTER`.

use std::collections::BTreeSet;
use std::fmt;

use super::*;

/// A case a step needs that its run neither measured nor can fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingCase {
    pub op: OpKind,
    pub variant: String,
    pub site: String,
    pub batch: usize,
    pub kv_len: Option<usize>,
}

impl fmt::Display for MissingCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{} B={}",
            self.op, self.variant, self.site, self.batch
        )?;
        if let Some(kv) = self.kv_len {
            write!(f, " kv_len={kv}")?;
        }
        Ok(())
    }
}

impl MissingCase {
    /// The case of planned problem `p` in `variant`.
    pub fn of(p: &Problem, variant: &str) -> Self {
        MissingCase {
            op: p.op,
            variant: variant.to_string(),
            site: p.site.to_string(),
            batch: p.batch,
            kv_len: p.kv_len,
        }
    }

    /// What times it: an op crate (`cargo bench -p <it>`), or `None` for scripts/peer.py's
    /// rows (the `py-*` variants and transformers' own parts).
    pub fn bench_crate(&self) -> Option<&'static str> {
        bench_crate(self.op, &self.variant)
    }
}

pub(super) fn bench_crate(op: OpKind, variant: &str) -> Option<&'static str> {
    if rundir::Timer::of(variant) != rundir::Timer::Rust {
        return None;
    }
    Some(match op {
        OpKind::Floor | OpKind::Ceiling => "harness",
        other => other.as_str(),
    })
}

/// Everything one query's step lacks in its run.
#[derive(Debug, Clone, Default)]
pub struct Lack {
    pub cases: Vec<MissingCase>,
    /// The dispatch floor's variant, where the run lacks it.
    pub floor: Option<&'static str>,
    /// The run has no row at all in the query's dtype, mode and device.
    pub no_rows: bool,
    /// Op crates the run has no rows of whose calls are priced at the dispatch floors (as a
    /// run from before the crate was): timed along with what is missing.
    pub floored: Vec<&'static str>,
}

impl Lack {
    pub fn is_empty(&self) -> bool {
        self.cases.is_empty() && self.floor.is_none()
    }

    /// The op crates that time what is missing, in the plan's order, and whether
    /// scripts/peer.py's rows are among it.
    pub fn crates(&self, q: &Query) -> (Vec<&'static str>, bool) {
        let mut crates: Vec<&'static str> = Vec::new();
        let mut peer = false;
        let floor = self.floor.map(|v| (OpKind::Floor, v));
        let all = floor
            .into_iter()
            .chain(self.cases.iter().map(|c| (c.op, c.variant.as_str())));
        for (op, variant) in all {
            match bench_crate(op, variant) {
                Some(c) if !crates.contains(&c) => crates.push(c),
                Some(_) => {}
                None => peer = true,
            }
        }
        for c in &self.floored {
            if !crates.contains(c) {
                crates.push(c);
            }
        }
        // the peer's floors and op calls are timed beside the libtorch floor's
        if peer && q.profile == StepProfile::Transformers && crates.is_empty() {
            crates.push("harness");
        }
        (crates, peer)
    }

    /// What is missing and the command that adds it into the same run, the command on a
    /// line of its own as it runs ([`command_lines`]); or, where what is asked cannot be
    /// measured into this run as it is (a batch or length no grid profile has), one line of
    /// bad input saying what to give.
    pub fn message(&self, run: &Run, q: &Query) -> String {
        let mut parts = Vec::new();
        let (crates, peer) = self.crates(q);
        if !self.cases.is_empty() {
            let named: Vec<String> = self.cases.iter().take(3).map(|c| c.to_string()).collect();
            let more = match self.cases.len().saturating_sub(3) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            let of: Vec<&str> = crates.iter().copied().filter(|c| *c != "harness").collect();
            let by = match (of.is_empty(), peer) {
                (false, true) => format!("rows of {} and of scripts/peer.py", of.join(", ")),
                (false, false) => format!("rows of {}", of.join(", ")),
                _ => "rows of scripts/peer.py".to_string(),
            };
            parts.push(format!(
                "{by} ({} case(s): {}{more})",
                self.cases.len(),
                named.join(", ")
            ));
        }
        if let Some(v) = self.floor {
            parts.push(format!("the dispatch floor `{v}`"));
        }
        let none = if self.no_rows {
            format!(
                "the run has no {} {} rows on {}: ",
                q.dtype, q.mode, q.device
            )
        } else {
            String::new()
        };
        let head = format!(
            "{}: {none}{}'s {} step at B={} {}={} {} {} {} lacks {}",
            run.dir.display(),
            q.model.name,
            q.profile,
            q.batch,
            if q.phase == Phase::Prefill { "S" } else { "L" },
            q.ctx,
            q.dtype,
            q.device,
            q.mode,
            parts.join("; ")
        );
        match add_command(run, q, &crates, peer, self.floor.is_some(), &self.cases) {
            // the peer's HF rows need transformers where the peer runs: without it the
            // same command adds only its op rows, and this message would come back
            Ok(cmd) if peer && q.profile == StepProfile::Transformers => format!(
                "{head}; its Python needs HF transformers (`python -m pip install \
                 transformers`; scripts/doctor says whether it has it); add them into the same \
                 run{}:\n{}",
                cmd.note,
                command_lines(&cmd.line)
            ),
            Ok(cmd) => format!(
                "{head}; add them into the same run{}:\n{}",
                cmd.note,
                command_lines(&cmd.line)
            ),
            Err(why) => why,
        }
    }
}

/// The widest line of a command printed to be run as it is: a longer one is continued
/// with ` \` on the next line, indented 4 (a POSIX shell reads it as one).
pub const COMMAND_WIDTH: usize = 160;

/// `cmd` as lines a shell runs as printed: broken at spaces outside quotes into lines of at
/// most [`COMMAND_WIDTH`] characters, each but the last ending in ` \`.
pub fn command_lines(cmd: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut last = String::new();
    let mut quoted = false;
    let mut word = String::new();
    let mut words = Vec::new();
    for c in cmd.chars() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c == ' ' && !quoted {
            words.push(std::mem::take(&mut word));
        } else {
            word.push(c);
        }
    }
    words.push(word);
    for w in words.into_iter().filter(|w| !w.is_empty()) {
        if last.trim().is_empty() {
            last.push_str(&w);
        } else if last.chars().count() + 1 + w.chars().count() + 2 <= COMMAND_WIDTH {
            last.push(' ');
            last.push_str(&w);
        } else {
            last.push_str(" \\");
            lines.push(std::mem::replace(&mut last, format!("    {w}")));
        }
    }
    lines.push(last);
    lines.join("\n")
}

/// A command that adds rows into a run: the line to run, and what to do first where the run
/// is not where scripts/bench writes (` (…: copy the run there first)`, else empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCommand {
    pub line: String,
    pub note: String,
}

/// The grid profile a run was made with (its env.json's settings), else `default`.
pub fn run_profile(run: &Run) -> String {
    run.env
        .as_ref()
        .and_then(|e| e.settings.get("profile").cloned())
        .unwrap_or_else(|| "default".into())
}

/// The run's own measurement settings that scripts/bench would otherwise set to their
/// defaults (its env.json's `samples`, `warmup_ms`, `measure_ms`): the rows added into it are
/// measured as its others were.
fn own_settings(run: &Run) -> Vec<String> {
    let Some(env) = run.env.as_ref() else {
        return Vec::new();
    };
    [
        ("samples", "OPBENCH_SAMPLES"),
        ("warmup_ms", "OPBENCH_WARMUP_MS"),
        ("measure_ms", "OPBENCH_MEASURE_MS"),
    ]
    .into_iter()
    .filter_map(|(key, var)| {
        let v = env.settings.get(key)?;
        let default = settings::find(var).map(|s| s.default.trim_matches('`'));
        (default != Some(v.as_str())).then(|| format!("{var}={v}"))
    })
    .collect()
}

/// The command that times `crates` (and the peer) into `run` at the query's batch and
/// length: `OPBENCH_RUN=<the run's folder name>`, `OPBENCH_OUT` where the run is not under
/// target/opbench, the grid profile that has the batch and length (the run's own where it
/// does), the run's own samples and budgets (those not at their defaults), the query's device, dtype
/// and modes, and a filter of its phase and batch (the floor's B = 1 too). `Err` says why
/// none can, in one line: no profile of the grid has them.
pub fn add_command(
    run: &Run,
    q: &Query,
    crates: &[&str],
    peer: bool,
    floor: bool,
    cases: &[MissingCase],
) -> Result<AddCommand, String> {
    let profile = profile_for(run, q)?;
    let id = run.dir.file_name().map_or_else(
        || "<its run id>".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut env = vec![format!("OPBENCH_RUN={id}")];
    let parent = run.dir.parent();
    let under_runs = parent
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == "runs");
    let mut note = String::new();
    match parent.and_then(|p| p.parent()) {
        Some(out) if under_runs => {
            let out = out.to_string_lossy();
            if !out.trim_end_matches('/').ends_with("target/opbench") {
                env.push(format!("OPBENCH_OUT={out}"));
            }
        }
        _ => note = format!(" (it adds to OPBENCH_OUT/runs/{id}: copy the run there first)"),
    }
    // the model asked for (the default's name is left out)
    if q.model.name != "qwen3-0.6b" {
        env.push(format!("OPBENCH_MODEL={}", q.model.name));
    }
    env.push(format!("OPBENCH_PROFILE={profile}"));
    env.extend(own_settings(run));
    env.push(format!(
        "OPBENCH_DEVICE={}",
        if q.device.is_gpu() { "gpu" } else { "cpu" }
    ));
    env.push(format!("OPBENCH_DTYPE={}", q.dtype));
    match q.mode {
        Mode::Pipelined => {}
        Mode::Graph => env.push("OPBENCH_MODES=graph,graph_cold".into()),
        m => env.push(format!("OPBENCH_MODES={m}")),
    }
    if peer {
        env.push("OPBENCH_PEER=1".into());
    }
    let step = q.step();
    let mut filter = vec![format!("{}/b{}/", step.phase, q.batch)];
    // only cache-length cases: their own length
    if !floor && !cases.is_empty() && cases.iter().all(|c| c.kv_len.is_some()) {
        let kv: BTreeSet<usize> = cases.iter().filter_map(|c| c.kv_len).collect();
        if kv.len() == 1 {
            filter[0] = format!(
                "{}/b{}/q{}/kv{}/",
                step.phase,
                q.batch,
                step.q_len,
                kv.iter().next().copied().unwrap_or_default()
            );
        }
    }
    if floor && filter[0] != "decode/b1/" {
        filter.push("decode/b1/".into());
    }
    let filter = match filter.as_slice() {
        [one] => format!("/{one}"),
        many => format!(
            "/({})/",
            many.iter()
                .map(|f| f.trim_end_matches('/'))
                .collect::<Vec<_>>()
                .join("|")
        ),
    };
    let ps: Vec<String> = crates.iter().map(|c| format!("-p {c}")).collect();
    Ok(AddCommand {
        line: format!(
            "{} scripts/bench {} -- '{filter}'",
            env.join(" "),
            ps.join(" ")
        ),
        note,
    })
}

/// The profile of the grid whose sweep has the query's batch and length: the run's own
/// where it does, else the one with the fewest steps that does; `Err` names what the
/// grid's profiles have and what predict can price instead.
pub fn profile_for(run: &Run, q: &Query) -> Result<String, String> {
    let grid = shapes::Grid::load_default().map_err(|e| e.to_string())?;
    let prefill = q.phase == Phase::Prefill;
    let has = |p: &shapes::Profile| {
        if prefill {
            p.prefill_batches.contains(&q.batch) && p.prefill_len.contains(&q.ctx)
        } else {
            p.batches.contains(&q.batch) && p.decode_ctx.contains(&q.ctx)
        }
    };
    let own = run_profile(run);
    if grid.profiles.get(&own).is_some_and(has) {
        return Ok(own);
    }
    if let Some((name, _)) = grid
        .profiles
        .iter()
        .filter(|(_, p)| has(p))
        .min_by_key(|(_, p)| p.steps().len())
    {
        return Ok(name.clone());
    }
    let list = |xs: BTreeSet<usize>| {
        xs.iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let lengths: BTreeSet<usize> = grid
        .profiles
        .values()
        .flat_map(|p| {
            if prefill {
                p.prefill_len.clone()
            } else {
                p.decode_ctx.clone()
            }
        })
        .collect();
    let (len, opt) = if prefill {
        ("S", "--prompt")
    } else {
        ("L", "--ctx")
    };
    let or_none = |s: String| if s.is_empty() { "none".into() } else { s };
    let file = grid.path.file_name().map_or_else(
        || grid.path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    if !lengths.contains(&q.ctx) {
        // attention and the cache are fit over batches at each length, not across lengths
        return Err(format!(
            "{opt} {}: no profile of {file} times {len} = {} (they time {}): give {opt} the run \
             measured ({})",
            q.ctx,
            q.ctx,
            list(lengths),
            or_none(list(measured_lengths(run, &q.model.name)))
        ));
    }
    Err(format!(
        "--batch {}: no profile of {file} times B = {} at {len} = {} and not every call has a fit \
         there: give a --batch the run measured ({})",
        q.batch,
        q.batch,
        q.ctx,
        or_none(list(measured_batches(run, &q.model.name)))
    ))
}
