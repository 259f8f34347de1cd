//! What the user's stack can run, for what would help: doctor's checks (scripts/doctor.py
//! `--checks`: Triton importable, a CUDA/HIP graph captured and replayed, the SDPA
//! backends that ran — on ROCm flash and efficient are AOTriton's — and each knob's arch
//! rule, hipBLASLt's among them), which `scripts/bench` writes into the run as
//! `stack.json`; where a run has none, what its own rows show (a CPU run has no graphs; the
//! peer's graph rows ran or said why not), else "not checked". The ROCm checks (AOTriton,
//! hipBLASLt by arch) follow PyTorch's and ROCm's sources; no AMD GPU has written a
//! stack.json, and the tests plant CUDA and CPU ones only.

use std::path::Path;

use rundir::{Mode, OpKind, Run};

/// The file of doctor's checks in a run directory.
pub const STACK_JSON: &str = "stack.json";

/// One check's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// It works here; how that is known.
    Yes(String),
    /// It does not, and why.
    No(String),
    /// Nothing says: what would check it.
    Unknown(String),
}

impl Check {
    pub fn is_no(&self) -> bool {
        matches!(self, Check::No(_))
    }

    /// The reason or the source, in a few words.
    pub fn words(&self) -> &str {
        match self {
            Check::Yes(w) | Check::No(w) | Check::Unknown(w) => w,
        }
    }
}

/// The checks the remedies need.
#[derive(Debug, Clone, PartialEq)]
pub struct Stack {
    /// The run's device is a GPU.
    pub gpu: bool,
    /// `cuda`, `rocm` or `cpu`.
    pub backend: String,
    /// Triton importable (torch.compile's GPU backend).
    pub triton: Check,
    /// A torch.cuda.CUDAGraph captured and replayed, matching eager.
    pub graph: Check,
    /// On ROCm: flash or efficient SDPA (AOTriton's kernels) ran on this arch.
    pub aotriton: Check,
    /// On ROCm: hipBLASLt's knob acts on this arch (knobs/rocm.toml's `archs`).
    pub hipblaslt: Check,
}

const DOCTOR: &str = "scripts/doctor checks it";

impl Stack {
    /// The stack of `run`'s `device` (`cpu`, `cuda:0`, …): `stack.json` where the run has
    /// it, else what the run's rows show.
    pub fn of(run: &Run, gpu: bool) -> Stack {
        let backend = run
            .env
            .as_ref()
            .map_or("cpu".to_string(), |e| e.backend.clone());
        let mut s = Stack {
            gpu,
            backend: if gpu { backend } else { "cpu".into() },
            triton: Check::Unknown(DOCTOR.into()),
            graph: Check::Unknown(DOCTOR.into()),
            aotriton: Check::Unknown(DOCTOR.into()),
            hipblaslt: Check::Unknown(DOCTOR.into()),
        };
        if !gpu {
            let no = || Check::No("this is the CPU: graphs and these libraries need a GPU".into());
            (s.triton, s.graph, s.aotriton, s.hipblaslt) = (no(), no(), no(), no());
            return s;
        }
        s.learn_from_rows(run);
        if let Some(doc) = read_json(&run.dir.join(STACK_JSON)) {
            s.learn_from_doctor(&doc);
        }
        s
    }

    /// What the run's rows show: graph-mode rows or the peer's graph captured (graphs), the
    /// peer's torch.compile graphs ran or said why not (Triton).
    fn learn_from_rows(&mut self, run: &Run) {
        let site = |names: &[&str]| {
            run.results
                .iter()
                .filter(|r| r.op == OpKind::Decode && names.contains(&r.site.as_str()))
                .map(|r| (r.is_ok(), r.note.clone().unwrap_or_default()))
                .collect::<Vec<_>>()
        };
        let compiled = site(&[
            "generate_graph_from_l",
            "generate_graph",
            "sdpa_static_graph",
        ]);
        if compiled.iter().any(|(ok, _)| *ok) {
            self.triton = Check::Yes("the peer ran torch.compile's graphs here".into());
        } else if let Some((_, note)) = compiled.first() {
            self.triton = Check::No(note.clone());
        }
        let captured = run.ok_rows().any(|r| r.mode == Mode::Graph);
        let peer = site(&["step_cudagraph", "generate_cudagraph_from_l"]);
        if captured || peer.iter().any(|(ok, _)| *ok) {
            self.graph = Check::Yes("this run replayed captured graphs".into());
        } else if let Some((_, note)) = peer.first() {
            self.graph = Check::No(note.clone());
        }
    }

    /// doctor's checks (`stack.json`), over what the rows showed.
    fn learn_from_doctor(&mut self, doc: &serde_json::Value) {
        let said = |v: &serde_json::Value, ok: &str, yes: &str| -> Option<Check> {
            let why = v
                .get("why")
                .and_then(|w| w.as_str())
                .unwrap_or("no reason given");
            Some(match v.get(ok)?.as_bool()? {
                true => Check::Yes(yes.into()),
                false => Check::No(why.into()),
            })
        };
        if let Some(c) = doc
            .get("triton")
            .and_then(|t| said(t, "importable", "Triton imports (doctor)"))
        {
            self.triton = c;
        }
        if let Some(c) = doc
            .get("graph")
            .and_then(|g| said(g, "ok", "a graph captured and replayed (doctor)"))
        {
            self.graph = c;
        }
        if self.backend != "rocm" {
            let na = || Check::Yes(format!("not needed on {}", self.backend));
            (self.aotriton, self.hipblaslt) = (na(), na());
            return;
        }
        if let Some(rows) = doc.get("sdpa").and_then(|s| s.as_array()) {
            let ran = rows.iter().any(|r| {
                let name = r
                    .get("backend")
                    .and_then(|n| n.as_str())
                    .unwrap_or_default();
                matches!(name, "flash" | "efficient")
                    && r.get("ran").and_then(|o| o.as_bool()) == Some(true)
            });
            self.aotriton = match ran {
                true => Check::Yes("flash or efficient SDPA ran (AOTriton, doctor)".into()),
                false => Check::No("no AOTriton SDPA ran on this arch (doctor)".into()),
            };
        }
        let knobs = doc.pointer("/knobs/knobs").and_then(|k| k.as_array());
        let hipblaslt = knobs.into_iter().flatten().find(|k| {
            k.get("name").and_then(|n| n.as_str()) == Some("TORCH_BLAS_PREFER_HIPBLASLT")
        });
        if let Some(c) =
            hipblaslt.and_then(|k| said(k, "applies", "hipBLASLt's knob applies to this arch"))
        {
            self.hipblaslt = c;
        }
    }
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}
