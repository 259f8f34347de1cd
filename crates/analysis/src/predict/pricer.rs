//! The pricer: one query's step, call by call.

use super::*;

/// What pricing one query's step needs from its run, worked out once: the rows, the
/// dispatch floors, the host speed and context to price at, the kernel-switch cost and the
/// copy ceiling. Its methods price one call each.
pub(super) struct Pricer<'a> {
    pub(super) run: &'a Run,
    pub(super) fits: &'a Fits,
    pub(super) q: &'a Query<'a>,
    pub(super) rows: Vec<&'a ResultRow>,
    pub(super) gpu: bool,
    /// A replayed graph: no host dispatch per call; each call costs its time in a graph.
    pub(super) graph: bool,
    pub(super) elem: usize,
    pub(super) floor_kernel: f64,
    pub(super) floor_view: f64,
    pub(super) floor_device: Option<f64>,
    /// `controlled` on a GPU's eager step.
    pub(super) adjust: bool,
    pub(super) layer: Option<LayerRows>,
    pub(super) beside: Option<f64>,
    /// The host speed (control ns) every row's host cost is scaled to, and whether it is
    /// the measured step's own.
    pub(super) control_speed: Option<(f64, bool)>,
    pub(super) context: Option<Context>,
    pub(super) factor: f64,
    pub(super) switch_ns: Option<f64>,
    pub(super) kernel_factor: f64,
    pub(super) view_factor: f64,
    /// The measured copy ceiling (bytes/ns).
    pub(super) copy_gbps: Option<f64>,
    /// The dispatch floor's variant where the run lacks it.
    pub(super) floor_missing: Option<&'static str>,
}

impl<'a> Pricer<'a> {
    pub(super) fn new(
        run: &'a Run,
        fits: &'a Fits,
        q: &'a Query<'a>,
    ) -> Result<Self, AnalysisError> {
        let gpu = q.device.is_gpu();
        if !gpu && q.mode.is_device() {
            return Err(AnalysisError::Input(format!(
                "--mode {}: {} a GPU, and the device is {} (--mode pipelined prices its step)",
                q.mode,
                if q.mode == Mode::Graph {
                    "CUDA/HIP graphs need"
                } else {
                    "GPU events need"
                },
                q.device
            )));
        }
        // the step's phase and tokens per sequence (a prefill's rows at its prompt length);
        // the floors and ceilings, measured once, serve both phases
        let step = q.step();
        let rows: Vec<&ResultRow> = run
            .ok_rows()
            .filter(|r| r.dtype == q.dtype && r.device == q.device)
            .filter(|r| {
                matches!(r.op, OpKind::Floor | OpKind::Ceiling)
                    || (r.phase == step.phase && r.q_len == step.q_len)
            })
            .collect();
        let mut p = Pricer {
            run,
            fits,
            q,
            rows,
            gpu,
            graph: q.mode == Mode::Graph,
            elem: q.dtype.size(),
            floor_kernel: 0.0,
            floor_view: 0.0,
            floor_device: None,
            // the host models (context factor, host-speed scaling) apply to a GPU's eager
            // step, whose host cost is dispatch and launch; on the CPU a call's host time is
            // its work too, which neither describes, and a graph has no host cost per call
            adjust: gpu && q.mode != Mode::Graph && q.host == HostModel::Controlled,
            layer: None,
            beside: None,
            control_speed: None,
            context: None,
            factor: 1.0,
            switch_ns: None,
            kernel_factor: 1.0,
            view_factor: 1.0,
            copy_gbps: None,
            floor_missing: None,
        };
        p.set_floors();
        p.set_host_speed();
        p.set_context();
        let (add, view) = q.profile.floors();
        p.kernel_factor = p.factor * p.at_speed(p.floor_row(add, q.mode));
        p.view_factor =
            p.factor * p.at_speed(p.floor_row(view, q.mode).or(p.floor_row(add, q.mode)));
        // a step streams every weight and the KV cache from memory, while an op benchmarked
        // alone re-reads the same buffers and may be served from cache; no call can move
        // its bytes faster than the ceiling
        p.copy_gbps = copy_gbps(run, q.device, q.dtype, Some(q.mode));
        Ok(p)
    }

    /// The dispatch floors, and the device's cost of switching kernels: op cases repeat
    /// one kernel, a step switches on every call (graph mode: each node after another).
    pub(super) fn set_floors(&mut self) {
        let q = self.q;
        let (add, view) = q.profile.floors();
        // a missing floor is named with every case the step lacks ([`Pricer::missing`])
        match self.floor(add, q.mode) {
            Some(k) => self.floor_kernel = k,
            None => self.floor_missing = Some(add),
        }
        // a run without the view floor prices a view as a kernel's dispatch: an upper bound
        self.floor_view = self.floor(view, q.mode).unwrap_or(self.floor_kernel);
        self.floor_device = self.floor("add", Mode::Device);
        let device_mode = if self.graph {
            Mode::Graph
        } else {
            Mode::Device
        };
        self.switch_ns = match (
            self.floor("mixed", device_mode),
            self.floor("blocked", device_mode),
        ) {
            (Some(m), Some(b)) if self.gpu => Some((m - b).max(0.0)),
            _ => None,
        };
    }

    pub(super) fn switch(&self) -> f64 {
        self.switch_ns.unwrap_or(0.0)
    }

    pub(super) fn row_of(
        &self,
        op: OpKind,
        variant: &str,
        site: &str,
        batch: usize,
        kv: Option<usize>,
        mode: Mode,
    ) -> Option<&'a ResultRow> {
        let model = &self.q.model.name;
        self.rows.iter().copied().find(|r| {
            r.op == op
                && r.variant == variant
                && r.site == site
                && (&r.model == model || r.model == "none")
                && r.batch == batch
                && r.kv_len == kv
                && r.mode == mode
        })
    }

    pub(super) fn find(
        &self,
        op: OpKind,
        variant: &str,
        site: &str,
        batch: usize,
        kv: Option<usize>,
        mode: Mode,
    ) -> Option<f64> {
        self.row_of(op, variant, site, batch, kv, mode)
            .and_then(|r| r.median_ns)
    }

    pub(super) fn floor_row(&self, variant: &str, mode: Mode) -> Option<&'a ResultRow> {
        self.row_of(OpKind::Floor, variant, "add1", 1, None, mode)
    }

    pub(super) fn floor(&self, variant: &str, mode: Mode) -> Option<f64> {
        self.floor_row(variant, mode).and_then(|r| r.median_ns)
    }

    /// A row's host cost at the priced speed: scaled by (reference control / the row's).
    pub(super) fn at_speed(&self, r: Option<&ResultRow>) -> f64 {
        match (self.control_speed, r.and_then(|r| r.control_ns)) {
            (Some((want, _)), Some(had)) if had > 0.0 => want / had,
            _ => 1.0,
        }
    }

    /// Whether the run measured a site in a variant at all: runs from before a site or
    /// variant existed price it as they did then (eltwise sites at the floors, a stand-in
    /// variant).
    pub(super) fn has_site(&self, op: OpKind, variant: &str, site: &str) -> bool {
        self.rows
            .iter()
            .any(|r| r.op == op && r.variant == variant && r.site == site)
    }

    /// A call priced at the dispatch floors: its host cost, device time, and where the
    /// device time came from.
    pub(super) fn at_floor(&self, kind: CallKind) -> (f64, f64, DeviceSource) {
        let (graph, k, switch) = (self.graph, self.floor_kernel, self.switch());
        match (kind, self.floor_device) {
            (CallKind::View, _) if graph => (0.0, 0.0, DeviceSource::None),
            (CallKind::Kernel, _) if graph => (0.0, k + switch, DeviceSource::Graph),
            (CallKind::View, _) => (self.floor_view * self.view_factor, 0.0, DeviceSource::None),
            (CallKind::Kernel, _) if !self.gpu => (k, k, DeviceSource::Pipelined),
            (CallKind::Kernel, Some(d)) => {
                (k * self.kernel_factor, d + switch, DeviceSource::Floor)
            }
            (CallKind::Kernel, None) => (k * self.kernel_factor, k, DeviceSource::Bound),
            (CallKind::Framework, _) => (0.0, 0.0, DeviceSource::None),
        }
    }

    /// A component priced at the floors.
    pub(super) fn floor_component(
        &self,
        op: Option<OpKind>,
        variant: &'static str,
        site: &'static str,
        calls: usize,
        kind: CallKind,
    ) -> Component {
        let (host, device, device_source) = self.at_floor(kind);
        Component {
            op,
            variant,
            site,
            calls,
            per_call_ns: host.max(device),
            host_ns: host,
            device_ns: device,
            memory_ns: 0.0,
            source: Source::Floor,
            device_source,
        }
    }

    /// One call an op crate measures: its pipelined time at this batch (measured, else its
    /// series' fit), its host cost (the series at its smallest batch) and its device time.
    /// `Err` names a case the run lacks.
    pub(super) fn measured_call(
        &self,
        call: &PlannedCall,
    ) -> Result<Option<Component>, MissingCase> {
        let (q, p) = (self.q, &call.problem);
        // a run from before this variant existed: what it measured in its place
        let variant = match StepProfile::stand_in(call.variant) {
            Some(old) if !self.has_site(p.op, call.variant, p.site) => old,
            _ => call.variant,
        };
        let series = SeriesKey {
            op: p.op,
            variant: variant.into(),
            site: p.site.into(),
            model: p.model.clone(),
            phase: p.phase,
            q_len: p.q_len,
            kv_len: p.kv_len,
            dtype: q.dtype,
            device: q.device,
            mode: q.mode,
        };
        let fit = self.fits.get(&series);
        let bytes = call_bytes(p, variant, self.elem) as f64;
        let work = match fit {
            Some(f) if f.work == Work::Flops => p.flops() as f64,
            _ => bytes,
        };
        let in_mode = |mode| self.find(p.op, variant, p.site, p.batch, p.kv_len, mode);
        let measured = if self.graph {
            in_mode(Mode::GraphCold).or(in_mode(Mode::Graph))
        } else {
            in_mode(q.mode)
        };
        let (per_call, source) = match (measured, fit) {
            (Some(t), _) => (t, Source::Measured),
            (None, Some(f)) => (f.fit.predict(work).max(self.floor_kernel), Source::Fit),
            (None, None) if p.op == OpKind::Eltwise && !self.has_site(p.op, variant, p.site) => {
                // no kernel when it moves nothing (attn_contiguous at q = 1)
                let kind = if p.bytes(self.elem) == 0 {
                    CallKind::View
                } else {
                    CallKind::Kernel
                };
                return Ok(Some(self.floor_component(
                    Some(p.op),
                    variant,
                    p.site,
                    p.calls_per_step,
                    kind,
                )));
            }
            (None, None) => {
                return Err(MissingCase::of(p, variant));
            }
        };
        // host cost: the series at its smallest batch, where dispatch dominates (noise on a
        // shared host makes a minimum over batches biased low)
        let host_row = self
            .rows
            .iter()
            .copied()
            .filter(|r| r.key.series == series)
            .min_by_key(|r| r.batch);
        let speed = self.at_speed(host_row);
        let host = host_row
            .and_then(|r| r.median_ns)
            .map_or(per_call, |h| h.min(per_call))
            * speed;
        let kernel = q.profile.kernel_variant(p.op, p.site).unwrap_or(variant);
        let warm = per_call;
        let (per_call, source, cold) = self.with_memory(p, kernel, bytes, per_call, source);
        let (host, device, device_source) =
            if self.gpu && shapes::moe::waits_for_device(p.op, variant) {
                // a call that waits for its kernels is serial: its whole time on the host's path
                (per_call * speed * self.factor, 0.0, DeviceSource::Waited)
            } else {
                let host = if self.graph { 0.0 } else { host * self.factor };
                let (device, from) =
                    self.device_time(p, variant, kernel, fit, work, per_call, host, source, cold);
                (host, device, from)
            };
        Ok(Some(Component {
            op: Some(p.op),
            variant,
            site: p.site,
            calls: p.calls_per_step,
            per_call_ns: per_call,
            host_ns: host,
            device_ns: device,
            memory_ns: (per_call - warm).max(0.0),
            source,
            device_source,
        }))
    }

    /// What reading the call's state from memory adds: its kernels' (`kernel` variant's)
    /// cold row over their warm one.
    pub(super) fn penalty(&self, p: &Problem, kernel: &str, cold: Mode, warm: Mode) -> Option<f64> {
        let at = |mode| self.find(p.op, kernel, p.site, p.batch, p.kv_len, mode);
        at(cold).zip(at(warm)).map(|(c, w)| (c - w).max(0.0))
    }

    /// The call's time with its state read from memory: on the CPU its `pipelined_cold`
    /// penalty where the run timed one, and never faster than the copy ceiling moves its
    /// bytes. Returns the time, its source, and the ceiling's time (0 without one).
    pub(super) fn with_memory(
        &self,
        p: &Problem,
        kernel: &str,
        bytes: f64,
        per_call: f64,
        source: Source,
    ) -> (f64, Source, f64) {
        let cpu_cold = if !self.gpu && self.q.mode == Mode::Pipelined {
            self.penalty(p, kernel, Mode::PipelinedCold, Mode::Pipelined)
        } else {
            None
        };
        let (per_call, source) = match cpu_cold {
            Some(penalty) if source == Source::Measured => (per_call + penalty, Source::Cold),
            _ => (per_call, source),
        };
        // a call timed cold already read its bytes from memory
        let cold = match (source, self.copy_gbps) {
            (Source::Cold, _) | (_, None) => 0.0,
            (_, Some(g)) => bytes / g,
        };
        if cold > per_call {
            (cold, Source::Ceiling, cold)
        } else {
            (per_call, source, cold)
        }
    }

    /// The call's device time: GPU events where measured at this case (plus its graph-cold
    /// penalty), else the fit's work / rate (for a Python call, where that is under its
    /// pipelined time), else the pipelined time when it is more than twice the host cost,
    /// else only bounded ([`DeviceSource::Bound`]); never faster than
    /// the copy ceiling, and each kernel pays the switch cost.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn device_time(
        &self,
        p: &Problem,
        variant: &str,
        kernel: &str,
        fit: Option<&crate::fit::SeriesFit>,
        work: f64,
        per_call: f64,
        host: f64,
        source: Source,
        cold: f64,
    ) -> (f64, DeviceSource) {
        let gpu = self.gpu;
        let python = from_python(variant);
        let cold_graph = self
            .find(p.op, kernel, p.site, p.batch, p.kv_len, Mode::GraphCold)
            .is_some();
        let cold_penalty = self
            .penalty(p, kernel, Mode::GraphCold, Mode::Graph)
            .unwrap_or(0.0);
        let (device, from) = if !gpu {
            (per_call, DeviceSource::Pipelined)
        } else if self.graph && source != Source::Ceiling {
            let from = if cold_graph {
                DeviceSource::GraphCold
            } else {
                DeviceSource::Graph
            };
            (per_call, from)
        } else if cold > 0.0 && source == Source::Ceiling {
            (cold, DeviceSource::Ceiling)
        } else if let Some(t) = self.find(p.op, kernel, p.site, p.batch, p.kv_len, Mode::Device) {
            if cold_penalty > 0.0 {
                (t + cold_penalty, DeviceSource::EventsCold)
            } else {
                (t, DeviceSource::Events)
            }
        } else if let Some(rate) = fit
            .and_then(|f| f.fit.rate())
            .filter(|&rate| !python || work / rate < per_call)
        {
            let t = (work / rate)
                .max(self.floor_device.unwrap_or(0.0))
                .min(per_call);
            (t, DeviceSource::Fit)
        } else if per_call > 2.0 * host {
            (per_call, DeviceSource::Pipelined)
        } else if python {
            // a Python call's pipelined time is the interpreter's pace: as a bound on its
            // kernels it says nothing, so they are priced at the lower end, one small kernel
            (self.floor_device.unwrap_or(per_call), DeviceSource::Bound)
        } else {
            (per_call, DeviceSource::Bound)
        };
        let (device, from) = if gpu && cold > device {
            (cold, DeviceSource::Ceiling)
        } else {
            (device, from)
        };
        // a call that launches nothing (a view-like call) switches no kernel
        if gpu && device > 0.0 {
            (device + self.switch(), from)
        } else {
            (device, from)
        }
    }

    /// A call no op crate measures: a framework part (scripts/peer.py's rows at this
    /// batch, host only) or a call at the dispatch floors. `Err` names a missing part.
    pub(super) fn other_call(&self, u: &OtherCall) -> Result<Option<Component>, MissingCase> {
        if u.kind != CallKind::Framework {
            return Ok(Some(
                self.floor_component(None, "-", u.name, u.calls, u.kind),
            ));
        }
        let q = self.q;
        let framework = |site: &str| {
            self.rows.iter().copied().find(|r| {
                r.op == OpKind::Decode
                    && r.variant == "transformers"
                    && r.site == site
                    && r.model == q.model.name
                    && r.batch == q.batch
                    && r.mode == q.mode
            })
        };
        // a part measured alone takes the host's context, one measured in sequence has it
        let alone = |r: &ResultRow| Some(r.median_ns? * self.factor * self.at_speed(Some(r)));
        let in_sequence =
            in_sequence(self.run, q, u.in_sequence).map(|d| (d.ns(), d.ns(), Source::Measured));
        let priced = match (in_sequence, framework(u.name)) {
            (Some(p), _) => Some(p),
            (None, Some(r)) if u.in_sequence.is_empty() => r
                .median_ns
                .zip(alone(r))
                .map(|(t, h)| (t, h, Source::Measured)),
            // a run from before the part was measured: its old parts
            (None, _) if !u.stand_in.is_empty() => u
                .stand_in
                .iter()
                .map(|&(part, n)| {
                    let r = framework(part)?;
                    Some((r.median_ns? * n as f64, alone(r)? * n as f64))
                })
                .try_fold((0.0, 0.0), |(t, h), x| x.map(|(a, b)| (t + a, h + b)))
                .map(|(t, h)| (t, h, Source::Parts)),
            (None, _) => None,
        };
        let (t, host, source) = priced.ok_or_else(|| MissingCase {
            op: OpKind::Decode,
            variant: "transformers".into(),
            site: u.name.into(),
            batch: q.batch,
            kv_len: None,
        })?;
        Ok(Some(Component {
            op: None,
            variant: "-",
            site: u.name,
            calls: u.calls,
            per_call_ns: t,
            host_ns: host,
            device_ns: 0.0,
            memory_ns: 0.0,
            source,
            device_source: DeviceSource::None,
        }))
    }

    /// On the CPU a call's time is its work and the calls' times add up: what a layer's
    /// calls cost more in their sequence than each repeated alone (the profile's layer rows
    /// at this batch) is a part of the step where the calls are made from Python; on a GPU
    /// the same rows are the host's context factor, and only a host model applies it.
    pub(super) fn cpu_sequence(&self) -> Option<LayerRows> {
        if self.gpu || !self.q.profile.cpu_sequence() {
            None
        } else {
            layer_rows_at(self.run, self.q, self.q.batch)
        }
    }

    /// The error naming every case the run lacks, the floor too, and the one command that
    /// adds them into the same run ([`Lack::message`]).
    pub(super) fn missing(
        &self,
        missing: Vec<MissingCase>,
        components: &[Component],
    ) -> AnalysisError {
        let q = self.q;
        let lack = Lack {
            cases: missing,
            floor: self.floor_missing,
            no_rows: !self.rows.iter().any(|r| r.mode == q.mode),
            floored: components
                .iter()
                .filter(|c| c.source == Source::Floor)
                .filter_map(|c| bench_crate(c.op?, c.variant))
                .collect(),
        };
        AnalysisError::Input(lack.message(self.run, self.q))
    }
}
