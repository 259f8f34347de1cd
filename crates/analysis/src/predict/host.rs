//! The host's speed and context a step's host costs are priced at: the control speed set
//! up front, the context factor, and the `controlled` scale to the step's own process
//! applied after the composition.

use super::pricer::Pricer;
use super::*;

impl Pricer<'_> {
    /// The host speed to price at under `controlled`: the measured step's control, else
    /// the run's median; none where the layer's rows (or the layer beside the step) scale
    /// the host costs after the composition instead ([`Pricer::host_speed`]).
    pub(super) fn set_host_speed(&mut self) {
        let q = self.q;
        let controls: Vec<f64> = self
            .rows
            .iter()
            .filter(|r| r.mode == q.mode)
            .filter_map(|r| r.control_ns)
            .collect();
        let step_control = step_row(self.run, q, q.mode).and_then(|r| r.control_ns);
        self.layer = layer_rows(self.run, q);
        self.beside = beside_ns(self.run, q).filter(|_| self.adjust);
        let per_row = self.adjust && self.layer.is_none() && self.beside.is_none();
        self.control_speed = match (per_row, step_control) {
            (false, _) => None,
            (true, Some(c)) => Some((c, true)),
            (true, None) if !controls.is_empty() => Some((stats::median(&controls), false)),
            (true, None) => None,
        };
    }

    /// What switching between kinds of call costs the host: the layer's calls in sequence
    /// over each alone, else the mixed floor over the blocked one (host models other than
    /// `as-measured`, a GPU's eager step).
    pub(super) fn set_context(&mut self) {
        let q = self.q;
        if !(self.gpu && !self.graph && q.host != HostModel::AsMeasured) {
            return;
        }
        let (mixed, blocked) = q.profile.context_floors();
        let per_call_at_speed = |variant: &str| {
            self.floor_row(variant, q.mode)
                .and_then(|r| Some(r.median_ns? * self.at_speed(Some(r))))
        };
        let layer = self.layer.map(|l| Context {
            factor: l.in_sequence_ns / l.alone_ns,
            from: ContextFrom::Layer { batch: l.batch },
        });
        let floors = || match (per_call_at_speed(mixed), per_call_at_speed(blocked)) {
            (Some(m), Some(b)) if b > 0.0 => Some(Context {
                factor: m / b,
                from: ContextFrom::Floors,
            }),
            _ => None,
        };
        self.context = layer.or_else(floors);
        self.factor = self.context.map_or(1.0, |c| c.factor);
    }

    /// `controlled` with the layer: every host cost measured alone scaled so that the
    /// layer's calls cost what the step's own process measured them at (the layer beside
    /// the step's samples, else the layer's rows); else the control speed set up front.
    pub(super) fn host_speed(
        &self,
        plan: &StepPlan,
        components: &mut [Component],
        held: Option<HostSpeed>,
    ) -> Option<HostSpeed> {
        let in_sequence_parts: Vec<&str> = plan
            .other
            .iter()
            .filter(|u| !u.in_sequence.is_empty())
            .map(|u| u.name)
            .collect();
        let alone_part = |c: &Component| !(c.op.is_none() && in_sequence_parts.contains(&c.site));
        let layers = self.q.model.num_hidden_layers.max(1);
        // what the rows price one layer's calls at, each alone (before any context factor)
        let priced: f64 = components
            .iter()
            .filter(|c| alone_part(c))
            .map(|c| (c.calls / layers) as f64 * c.host_ns / self.factor)
            .sum();
        // every host cost measured alone × `by` (the context factor already in them)
        let mut rescale = |by: f64| {
            for c in components.iter_mut().filter(|c| alone_part(c)) {
                c.host_ns *= by;
            }
        };
        match (held, self.adjust, self.beside, self.layer) {
            (Some(HostSpeed::Beside { scale, .. }), ..) => {
                rescale(scale / self.factor);
                held
            }
            (Some(HostSpeed::Layer { scale, .. }), ..) => {
                rescale(scale);
                held
            }
            (_, true, Some(ns), _) if priced > 0.0 => {
                let scale = ns / priced;
                rescale(scale / self.factor);
                Some(HostSpeed::Beside {
                    batch: self.q.batch,
                    scale,
                    paired: beside_paired(self.run, self.q),
                })
            }
            (
                _,
                true,
                _,
                Some(LayerRows {
                    batch, alone_ns, ..
                }),
            ) if priced > 0.0 => {
                let scale = alone_ns / priced;
                rescale(scale);
                Some(HostSpeed::Layer { batch, scale })
            }
            _ => self
                .control_speed
                .map(|(ns, from_step)| HostSpeed::Control { ns, from_step }),
        }
    }
}
