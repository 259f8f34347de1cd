//! The worker protocol: one JSON object a line, a request on the worker's stdin, its reply
//! on the worker's stdout.
//!
//! A worker is a bench binary started with [`WORKER_FLAG`] (or any program that speaks
//! this: scripts/peer.py can be one). It knows how to build and time its cases; the driver
//! decides everything else: which cases, warm-up, how many calls a sample holds, the order
//! of the two sides, when to stop, the estimate and the rows.
//!
//! ```text
//! → {"req":"hello"}
//! ← {"reply":"hello","protocol":1,"ops":["linear"],"env":{…env.json…}}
//! → {"req":"cases","filter":"/decode/b1/"}
//! ← {"reply":"cases","cases":[{"key":"linear/aten/q_proj/…/pipelined","fields":[…]}],"unsupported":[]}
//! → {"req":"prepare","key":"linear/aten/q_proj/…/pipelined"}
//! ← {"reply":"prepared","key":"…","status":"ok","rel_err":1.2e-4,"dims":"…","flops":…,…}
//! → {"req":"prepare","key":"…/device","place":7}   (made again where seed 7 places it)
//! → {"req":"sample","key":"…","iters":400}
//! ← {"reply":"sample","key":"…","calls":400,"total_ns":4.1e6,"control_ns":812.0,"state":{…}}
//! → {"req":"release","key":"…"}      ← {"reply":"released","key":"…"}
//! → {"req":"quit"}                    ← {"reply":"bye"}
//! ```
//!
//! Any request the worker cannot serve is answered `{"reply":"error","message":"…"}`, and
//! the worker goes on reading.

use serde::{Deserialize, Serialize};

/// The version of this protocol; a worker of another version is refused.
pub const PROTOCOL: u32 = 1;

/// The argument that starts a bench binary as a worker.
pub const WORKER_FLAG: &str = "--opbench-worker";

/// A request to a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "req", rename_all = "snake_case")]
pub enum Request {
    /// Who are you: the protocol, the ops, the environment fingerprint.
    Hello,
    /// The worker's cases under its `OPBENCH_*` settings, those whose key matches the
    /// regular expression `filter` (all without one).
    Cases { filter: Option<String> },
    /// Build a case and check one call against its float64 reference. With `place`, the
    /// case's tensors are made (again, if it is prepared) in the placement this seed
    /// picks in the device's memory, with the same values, so that its check stands.
    Prepare {
        key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        place: Option<u64>,
    },
    /// Time one sample of `iters` calls of a prepared case in its key's mode.
    Sample { key: String, iters: u64 },
    /// Drop a prepared case (its memory).
    Release { key: String },
    /// End the worker.
    Quit,
}

/// A case as a worker names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CaseName {
    /// The key as text (`CaseKey`'s display form): the name requests use.
    pub key: String,
    /// The key's fields in `CaseKey::COLUMNS` order.
    pub fields: Vec<String>,
    /// How a single run's driver (duet's `solo`) samples it; a bench binary's cases
    /// leave it empty (each case alone).
    #[serde(default, skip_serializing_if = "Sampling::is_alone")]
    pub sampling: Sampling,
}

/// How the cases of one worker are sampled in a single run (duet's `solo`): alone (its
/// samples back to back), or in interleaved rounds with the other cases of its group, so
/// that all see the same host states and a reader can take their differences round by
/// round. The worker says which cases belong together; the driver decides the rounds,
/// the calls a sample holds and the order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Sampling {
    /// The group sampled in interleaved rounds (`None`: alone).
    pub group: Option<String>,
    /// What the group's cases are, which sets the driver's rule for its rounds
    /// (`None`: any other group).
    pub kind: Option<GroupKind>,
    /// Within a group's round, the cases of one block run back to back (the blocks and
    /// the cases in a block shuffled each round).
    pub block: Option<String>,
    /// A case (its key) sampled right before each sample of this one, outside its rounds:
    /// a companion read pair by pair with it.
    pub before: Option<String>,
    /// At most this many calls a sample (a whole step or a generate() call is long).
    pub max_iters: Option<u64>,
    /// At least this many calls a sample (with `max_iters` the same: a fixed count, as the
    /// layer beside the step takes 8).
    pub min_iters: Option<u64>,
}

impl Sampling {
    /// Sampled alone, as every bench binary's case.
    pub fn is_alone(&self) -> bool {
        *self == Sampling::default()
    }
}

/// What a group of interleaved cases is: the driver samples each kind in rounds of its own
/// rule (duet's `solo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    /// A decoder layer five ways: a reader takes differences of ~10% of each row.
    Layers,
    /// The step and generate() taken apart: each sample a whole step or generate() call.
    Step,
}

/// A case the worker lists but cannot time in this protocol, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotServed {
    pub case: CaseName,
    pub reason: String,
}

/// What preparing a case gave: its status (`ok`, `unsupported`, `mismatch`, `error`,
/// `oom`, `skipped` on the wire), with its reason where it is not `ok`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Prepared {
    pub key: String,
    pub status: rundir::Status,
    pub reason: Option<String>,
    /// The relative error of one call against the float64 reference.
    pub rel_err: Option<f64>,
    pub dims: String,
    pub flops: u64,
    pub bytes: u64,
    pub kernel: Option<String>,
    pub note: Option<String>,
    /// How the output was checked against float64 (`op`, `step`; `None`: not checked):
    /// a worker that reports its error for the driver to judge (scripts/peer.py) names
    /// it, and the driver applies the one tolerance table.
    pub check: Option<rundir::Check>,
    /// Bytes of model state the prepared case holds on its device.
    pub state_bytes: u64,
}

impl Default for Prepared {
    fn default() -> Self {
        Prepared {
            key: String::new(),
            status: rundir::Status::Ok,
            reason: None,
            rel_err: None,
            dims: String::new(),
            flops: 0,
            bytes: 0,
            kernel: None,
            note: None,
            check: None,
            state_bytes: 0,
        }
    }
}

/// One timed sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Sampled {
    pub key: String,
    /// Calls the sample holds (iters × the calls one run makes).
    pub calls: u64,
    pub total_ns: f64,
    /// Where `total_ns` is derived rather than timed (scripts/peer.py's `cache_update`: the
    /// update's calls less twice as many cats), the time the sample's calls took: what the
    /// driver sizes the next sample by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spent_ns: Option<f64>,
    /// The dispatch floor's per-call time right before the sample (the torch control).
    pub control_ns: Option<f64>,
    /// The build-independent host control right before the sample.
    pub host_ns: Option<f64>,
    pub state: rundir::SampleState,
    /// Device-timed chunks of the sample whose enqueue outlasted the lead after every
    /// retry: their events hold time the GPU waited for the host, so the sample is an upper
    /// bound (`None`: not device-timed, or a worker that does not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncovered: Option<u64>,
    /// Device ns of the planted spins inside `total_ns` (`OPBENCH_PLANT_DEVICE_PCT`,
    /// `OPBENCH_PLANT_LAUNCH_NS`), as
    /// their own events timed them: what a calibration's plant delivered (`None`: no plant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planted_ns: Option<f64>,
}

/// A worker's reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Hello {
        protocol: u32,
        ops: Vec<String>,
        /// The worker's env.json (`rundir::Env`).
        env: serde_json::Value,
    },
    Cases {
        cases: Vec<CaseName>,
        #[serde(default)]
        unsupported: Vec<NotServed>,
    },
    Prepared(Prepared),
    Sample(Sampled),
    Released {
        key: String,
    },
    Bye,
    Error {
        message: String,
    },
}

impl Prepared {
    /// Judge the error a worker reported (`check` set: scripts/peer.py reports it for the
    /// driver to judge) by the one tolerance table: an `ok` case over its tolerance becomes
    /// `mismatch`, with the reason. A bench binary's cases, judged by the worker, pass.
    pub fn judge(&mut self, dtype: rundir::DType) {
        if let Some(why) = self.over_tolerance(dtype) {
            self.status = rundir::Status::Mismatch;
            self.reason = Some(why);
        }
    }

    /// Why an `ok` case that reported its error (`check` set) is over the tolerance of
    /// `dtype`; `None` where it is within it, or was judged by its worker.
    pub fn over_tolerance(&self, dtype: rundir::DType) -> Option<String> {
        let (Some(c), rundir::Status::Ok) = (self.check, self.status) else {
            return None;
        };
        match self.rel_err {
            Some(e) if e <= dtype.tolerance(c) => None,
            Some(e) => Some(format!(
                "relative error {e:.3e} against the float64 reference, over the {} tolerance {:e}",
                c.as_str(),
                dtype.tolerance(c)
            )),
            None => Some("checked, but no error reported".into()),
        }
    }
}

impl Request {
    /// The request as one line of JSON, newline included.
    pub fn line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|_| "{}".into());
        s.push('\n');
        s
    }

    /// A request from one line; the error names what is wrong.
    pub fn parse(line: &str) -> Result<Self, String> {
        serde_json::from_str(line.trim()).map_err(|e| format!("malformed request: {e}"))
    }
}

impl Reply {
    /// The reply as one line of JSON, newline included.
    pub fn line(&self) -> String {
        let mut s = serde_json::to_string(self)
            .unwrap_or_else(|e| format!(r#"{{"reply":"error","message":"{e}"}}"#));
        s.push('\n');
        s
    }

    /// Whether a line of a worker's stdout is a reply (anything else a library printed
    /// there is skipped).
    pub fn is_reply(line: &str) -> bool {
        line.trim_start().starts_with("{\"reply\"")
    }

    /// A reply from one line.
    pub fn parse(line: &str) -> Result<Self, String> {
        serde_json::from_str(line.trim()).map_err(|e| format!("malformed reply: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip_as_lines() {
        let r = Request::Sample {
            key: "k".into(),
            iters: 7,
        };
        assert_eq!(r.line(), "{\"req\":\"sample\",\"key\":\"k\",\"iters\":7}\n");
        assert_eq!(Request::parse(&r.line()), Ok(r));
        let s = Reply::Sample(Sampled {
            key: "k".into(),
            calls: 7,
            total_ns: 70.0,
            ..Sampled::default()
        });
        assert!(Reply::is_reply(&s.line()));
        assert_eq!(Reply::parse(&s.line()), Ok(s));
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_it() {
        let e = Request::parse("{\"req\":\"frobnicate\"}").unwrap_err();
        assert!(e.starts_with("malformed request"), "{e}");
        assert!(Request::parse("not json").is_err());
    }
}
