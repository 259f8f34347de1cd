//! Which machine, timing method and build a run is: what `opbench history` orders runs
//! by and never puts in one series across.

use std::collections::{BTreeMap, BTreeSet};

use rundir::Env;

/// The machine a run measured on, and how: runs of two machines, or timed by two methods,
/// are never one series, so a change of method is never a change point (as asv restarts a
/// benchmark's history when its code changes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Machine {
    pub backend: String,
    pub device: String,
    pub arch: String,
    pub cpu: String,
    /// The timing method and the settings that change what a sample measures
    /// ([`method_of`]); empty for a run that records none of them.
    pub method: String,
}

/// A run's timing method as history keys series by it: `timing_method`, warm-up,
/// measurement time and samples, where recorded.
pub fn method_of(env: &Env) -> String {
    [
        rundir::TIMING_METHOD_SETTING,
        "warmup_ms",
        "measure_ms",
        "samples",
    ]
    .iter()
    .filter_map(|k| env.settings.get(*k).map(|v| format!("{k}={v}")))
    .collect::<Vec<_>>()
    .join(" ")
}

impl Machine {
    pub(crate) fn of(env: &Env) -> Self {
        Machine {
            backend: env.backend_name().to_string(),
            device: env.device_name.clone().unwrap_or_else(|| "cpu".to_string()),
            arch: env.arch.clone().unwrap_or_default(),
            cpu: env.cpu_model.clone(),
            method: method_of(env),
        }
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.backend == "cpu" {
            write!(f, "{} (cpu)", self.cpu)?;
        } else {
            write!(
                f,
                "{} ({}, {}) on {}",
                self.device, self.arch, self.backend, self.cpu
            )?;
        }
        if !self.method.is_empty() {
            write!(f, " [{}]", self.method)?;
        }
        Ok(())
    }
}

/// The settings of a run that change kernels or timings: a point holds one of them.
pub fn kernel_settings(env: &Env) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = env.env.clone();
    for (k, on) in &env.sdp_enabled {
        if !on {
            out.insert(format!("sdp.{k}"), "off".into());
        }
    }
    out.insert("threads".into(), env.threads.to_string());
    for &k in rundir::PLANT_SETTINGS {
        if let Some(p) = env.settings.get(k) {
            out.insert(k.into(), p.clone());
        }
    }
    out
}

/// A version as an ordering key: numeric components, then a pre-release (`a0`, `rc1`,
/// `.dev20260101`) before the release; local parts (`+cu130`, `+rocm7.1`) are ignored.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct VersionKey {
    nums: Vec<u64>,
    /// (0, n) for a pre-release, (1, 0) for a release: pre-releases sort first.
    pre: (u8, u64),
    text: String,
}

impl VersionKey {
    pub fn parse(s: &str) -> Self {
        let public = s.split('+').next().unwrap_or("");
        let mut nums = Vec::new();
        let mut rest = public;
        loop {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if digits.is_empty() {
                break;
            }
            nums.push(digits.parse().unwrap_or(u64::MAX));
            rest = &rest[digits.len()..];
            match rest.strip_prefix('.') {
                Some(r) if r.starts_with(|c: char| c.is_ascii_digit()) => rest = r,
                _ => break,
            }
        }
        let pre_num: String = rest.chars().filter(char::is_ascii_digit).take(18).collect();
        let pre = if rest.is_empty() {
            (1, 0)
        } else {
            (0, pre_num.parse().unwrap_or(0))
        };
        VersionKey {
            nums,
            pre,
            text: s.to_string(),
        }
    }
}

/// A build: what is being tracked. Runs of one build on one machine are replicates.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Build {
    pub torch: VersionKey,
    pub runtime: VersionKey,
    pub driver: VersionKey,
    /// libtorch's git commit (`COMMIT_SHA` of `at::show_config()`), where it says.
    pub torch_commit: String,
    /// [`kernel_settings`] of its runs.
    pub settings: BTreeMap<String, String>,
}

impl Build {
    pub(crate) fn of(env: &Env) -> Self {
        let v = |s: &Option<String>| VersionKey::parse(s.as_deref().unwrap_or(""));
        Build {
            torch: VersionKey::parse(&env.libtorch_version),
            runtime: v(&env.runtime_version),
            driver: v(&env.driver_version),
            torch_commit: commit_sha(&env.build_config).unwrap_or_default(),
            settings: kernel_settings(env),
        }
    }

    /// `torch 2.11.0 (70d99e99), runtime 13.0, driver 13.0`.
    pub fn label(&self) -> String {
        let mut s = format!("torch {}", self.torch.text);
        if !self.torch_commit.is_empty() {
            s += &format!(
                " ({})",
                &self.torch_commit[..self.torch_commit.len().min(8)]
            );
        }
        if !self.runtime.text.is_empty() {
            s += &format!(", runtime {}", self.runtime.text);
        }
        if !self.driver.text.is_empty() {
            s += &format!(", driver {}", self.driver.text);
        }
        for (k, v) in self.settings.iter().filter(|(k, _)| *k != "threads") {
            s += &format!(", {k}={v}");
        }
        s
    }

    /// What differs from `prev`, as `torch 2.10.0 -> 2.11.0`.
    pub fn changes_from(&self, prev: &Build) -> Vec<String> {
        let mut out = Vec::new();
        let mut diff = |what: &str, a: &str, b: &str| {
            if a != b {
                out.push(format!("{what} {a} -> {b}"));
            }
        };
        diff("torch", &prev.torch.text, &self.torch.text);
        diff("torch commit", &prev.torch_commit, &self.torch_commit);
        diff("runtime", &prev.runtime.text, &self.runtime.text);
        diff("driver", &prev.driver.text, &self.driver.text);
        let keys: BTreeSet<&String> = prev.settings.keys().chain(self.settings.keys()).collect();
        for k in keys {
            let v = |m: &BTreeMap<String, String>| m.get(k).cloned().unwrap_or_else(|| "-".into());
            diff(k, &v(&prev.settings), &v(&self.settings));
        }
        out
    }
}

/// `COMMIT_SHA=<hex>` from `at::show_config()`.
pub fn commit_sha(build_config: &str) -> Option<String> {
    let at = build_config.find("COMMIT_SHA=")? + "COMMIT_SHA=".len();
    let sha: String = build_config[at..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    (!sha.is_empty()).then_some(sha)
}
