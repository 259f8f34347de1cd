//! The file scripts/peer.py hands to Rust (`RUN/peer.csv`): one line per sample of each case
//! it timed, with the case's fields repeated, or one line without a sample for a case it did
//! not time, and optionally the host's state over each sample (the columns of samples.csv
//! that [`STATE_COLUMNS`] names). `opbench ingest` judges each case by the one tolerance table and makes its row
//! with the one estimator ([`crate::ResultRow::summarize`]); Python computes neither.

use std::path::Path;

use shapes::Check;

use crate::csvio::Line;
use crate::key::{CaseKey, Status};
use crate::sample::{Sample, SampleState};
use crate::{RunError, run::read_records};

/// The file's columns: the case key, then these.
pub const PEER_TAIL: [&str; 10] = [
    "dims",
    "flops",
    "bytes",
    "check",
    "rel_err",
    "status",
    "note",
    "execution",
    "iters",
    "total_ns",
];

/// The peer file's optional columns: the host's state over each sample, as in samples.csv
/// (the Python control before and after it, CPU time, involuntary switches, steal, the
/// slowest stretch of its calls, the torch control — Python's one-element add — before
/// and after it, and the median stretch of its calls).
pub const STATE_COLUMNS: [&str; 9] = [
    "host_ns",
    "host_after_ns",
    "cpu_ns",
    "nivcsw",
    "steal",
    "slowest_ns",
    "control_ns",
    "control_after_ns",
    "typical_ns",
];

/// One case of the peer's file.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerCase {
    pub key: CaseKey,
    pub dims: String,
    pub flops: u64,
    pub bytes: u64,
    /// How its output was checked against float64 (`None`: not checked, a framework part
    /// timed by difference or a call that computes nothing).
    pub check: Option<Check>,
    /// ‖out − ref‖ / ‖ref‖ against the float64 reference.
    pub rel_err: Option<f64>,
    /// `ok` when timed, else why not (the peer's word; the tolerance is judged again).
    pub status: Status,
    pub note: Option<String>,
    pub execution: u32,
    /// Its samples in file order, with the host's state where the file has it.
    pub samples: Vec<Sample>,
}

impl PeerCase {
    /// (calls, total ns) per sample, in file order.
    pub fn pairs(&self) -> Vec<(u64, f64)> {
        self.samples.iter().map(|s| (s.iters, s.total_ns)).collect()
    }
}

/// One line: the case's fields and its sample, if the line has one.
fn read_line(l: &Line<'_>) -> Result<(PeerCase, Option<Sample>), RunError> {
    let check = match l.text("check") {
        "" => None,
        s => Some(s.parse().map_err(|e: String| l.error("check", e))?),
    };
    let key = CaseKey::read(l)?;
    let execution = l.opt("execution")?.unwrap_or(1);
    let sample = match (l.opt::<u64>("iters")?, l.positive("total_ns", false)?) {
        (Some(0), _) => return Err(l.error("iters", "0: a sample times at least one call")),
        (Some(iters), Some(total_ns)) => Some(Sample {
            key: key.clone(),
            execution,
            iters,
            total_ns,
            control_ns: l.positive("control_ns", false)?,
            host_ns: l.positive("host_ns", false)?,
            state: SampleState::read(l)?,
            pair: None,
        }),
        (None, None) => None,
        _ => return Err(l.error("total_ns", "iters and total_ns go together")),
    };
    let note = l.text("note");
    Ok((
        PeerCase {
            key,
            dims: l.text("dims").to_string(),
            flops: l.opt("flops")?.unwrap_or(0),
            bytes: l.opt("bytes")?.unwrap_or(0),
            check,
            rel_err: l.positive("rel_err", true)?,
            status: l.req("status")?,
            note: (!note.is_empty()).then(|| note.to_string()),
            execution,
            samples: Vec::new(),
        },
        sample,
    ))
}

/// Append one case to the peer's file (its header first where the file is new): one line
/// per sample, or one line without a sample for a case not timed. `opbench peer` writes
/// it; [`read_peer`] reads it back.
pub fn append_peer(path: &Path, case: &PeerCase) -> Result<(), RunError> {
    let io = |source: std::io::Error| RunError::Io {
        path: path.to_path_buf(),
        source,
    };
    let new = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    let mut w = csv::Writer::from_writer(std::io::BufWriter::new(file));
    let csv_err = |e: csv::Error| io(std::io::Error::other(e.to_string()));
    if new {
        let mut head: Vec<&str> = CaseKey::COLUMNS.to_vec();
        head.extend(PEER_TAIL);
        head.extend(STATE_COLUMNS);
        w.write_record(&head).map_err(csv_err)?;
    }
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.1}"));
    let int = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
    let mut head = case.key.fields();
    head.extend([
        case.dims.clone(),
        case.flops.to_string(),
        case.bytes.to_string(),
        case.check.map_or(String::new(), |c| c.as_str().to_string()),
        case.rel_err.map_or(String::new(), |e| format!("{e:.6e}")),
        case.status.to_string(),
        case.note.clone().unwrap_or_default(),
        case.execution.to_string(),
    ]);
    if case.samples.is_empty() {
        let mut line = head.clone();
        line.resize(head.len() + 2 + STATE_COLUMNS.len(), String::new());
        w.write_record(&line).map_err(csv_err)?;
    }
    for s in &case.samples {
        let st = &s.state;
        let mut line = head.clone();
        line.extend([s.iters.to_string(), format!("{:.1}", s.total_ns)]);
        line.extend([
            opt(s.host_ns),
            opt(st.host_after_ns),
            opt(st.cpu_ns),
            int(st.nivcsw),
            int(st.steal),
            opt(st.slowest_ns),
            opt(s.control_ns),
            opt(st.control_after_ns),
            opt(st.typical_ns),
        ]);
        w.write_record(&line).map_err(csv_err)?;
    }
    w.flush().map_err(io)
}

/// Read the peer's file: its cases in first-seen order, each with its samples.
pub fn read_peer(path: &Path) -> Result<Vec<PeerCase>, RunError> {
    let mut required: Vec<&'static str> = CaseKey::COLUMNS.to_vec();
    required.extend(PEER_TAIL);
    let lines = read_records(path, &required, read_line)?;
    let mut out: Vec<PeerCase> = Vec::new();
    for (case, sample) in lines {
        let at = match out.iter().position(|c| c.key == case.key) {
            Some(i) => i,
            None => {
                out.push(case);
                out.len() - 1
            }
        };
        out[at].samples.extend(sample);
    }
    Ok(out)
}
