//! What one process shares among all its cases of one op crate and mode: the *process term*,
//! per kind of timing. It is what a run of one execution cannot see in its own samples and
//! what a comparison of two stored runs must carry (`opbench compare`'s families): every
//! case a process times moves with it.
//!
//! `opbench ab` measures it from its rounds (each a fresh pair of processes) and stores it
//! in both sides' env.json settings as [`ProcessNoise::SETTING`]; where a run has none, the
//! figures measured on this project's machines stand in ([`TermKind::fallback`]).

use std::collections::BTreeMap;

use crate::{Env, Mode};

/// The kinds of timing whose process terms differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TermKind {
    /// Host-timed modes (`pipelined`, `synced`, the cold ones): the host's dispatch and the
    /// CPU's speed in that process.
    Host,
    /// Stream-launched GPU-event times (`device`, `device_cold`): each launch's device-side
    /// cost moves with the process.
    Device,
    /// Graph replays (`graph`, `graph_cold`): the kernels alone.
    Graph,
}

impl TermKind {
    pub const ALL: [TermKind; 3] = [TermKind::Host, TermKind::Device, TermKind::Graph];

    pub fn of(mode: Mode) -> Self {
        if mode.is_graph() {
            TermKind::Graph
        } else if mode.is_device() {
            TermKind::Device
        } else {
            TermKind::Host
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TermKind::Host => "host",
            TermKind::Device => "device",
            TermKind::Graph => "graph",
        }
    }

    /// The per-process term (sd of the log) where a run measured none, from `opbench ab`'s
    /// rounds, where a round's crate term is the ratio of two processes (÷ √2 a process):
    /// - device: ±3–6% a round on the H100 and H200 (2026-12-06, a1–a3: rmsnorm −5.2,
    ///   +0.4, −4.2, +5.6, −0.6, −4.9%; rope −5.9, +4.7, −5.1, −5.5%; kvcache +4.2, −4.0,
    ///   +1.3%), 4.3% rms: 3% a process;
    /// - graph: ±0.0–0.7% a round, 0.25% rms (H100, 2026-12-06, docs/experiments/
    ///   process-term): 0.3% a process, rounded up;
    /// - host: pipelined families' process term 0.7–1.0% a round on the H200 and
    ///   0.9–2.3% on the 2-core VM (2026-12-05/06, docs/experiments/ab-2026-12-03): 1% a
    ///   process.
    pub fn fallback(self) -> f64 {
        match self {
            TermKind::Host => 0.01,
            TermKind::Device => 0.03,
            TermKind::Graph => 0.003,
        }
    }
}

/// Per kind of timing, the process term a run measured (sd of the log, a process).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessNoise(pub BTreeMap<TermKind, f64>);

impl ProcessNoise {
    /// The env.json setting that holds it.
    pub const SETTING: &'static str = "process_term_pct";

    /// As the setting is written: `device=0.120,host=0.810` (percent a process).
    pub fn setting(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{}={:.3}", k.as_str(), v * 100.0))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// [`ProcessNoise::setting`] read back; `None` for anything else (a kind unknown, a
    /// value not a non-negative number).
    pub fn from_setting(written: &str) -> Option<Self> {
        let mut out = BTreeMap::new();
        for part in written.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part.split_once('=')?;
            let kind = TermKind::ALL.into_iter().find(|t| t.as_str() == k.trim())?;
            let pct: f64 = v.trim().parse().ok()?;
            if !(pct.is_finite() && pct >= 0.0) {
                return None;
            }
            out.insert(kind, pct / 100.0);
        }
        Some(ProcessNoise(out))
    }

    /// The run's, where its env.json has the setting.
    pub fn of(env: &Env) -> Option<Self> {
        Self::from_setting(env.settings.get(Self::SETTING)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_reads_back_and_refuses_what_it_does_not_write() {
        let n = ProcessNoise(BTreeMap::from([
            (TermKind::Device, 0.0123),
            (TermKind::Host, 0.008),
        ]));
        assert_eq!(n.setting(), "host=0.800,device=1.230");
        assert_eq!(ProcessNoise::from_setting(&n.setting()), Some(n));
        assert_eq!(ProcessNoise::from_setting("gpu=1"), None);
        assert_eq!(ProcessNoise::from_setting("host=-1"), None);
        assert_eq!(ProcessNoise::from_setting("host"), None);
        assert_eq!(TermKind::of(Mode::GraphCold), TermKind::Graph);
        assert_eq!(TermKind::of(Mode::DeviceCold), TermKind::Device);
        assert_eq!(TermKind::of(Mode::Synced), TermKind::Host);
    }
}
