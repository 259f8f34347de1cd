//! One decoder layer measured in the step's own process: the rows the host models read.

use super::*;

/// One decoder layer of the profile's step measured in the step's own process
/// ([`StepProfile::layer_context`]): its calls in sequence and each repeated alone, ns per
/// layer, at `batch`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerRows {
    pub batch: usize,
    pub in_sequence_ns: f64,
    pub alone_ns: f64,
    /// What the step's rows price one layer's calls for reading their state from memory
    /// (set where the CPU's `in_sequence` part is priced: that part is the excess beyond it).
    pub memory_ns: f64,
}

impl LayerRows {
    /// The CPU's `in_sequence` part per layer: what the calls cost more in their sequence
    /// than each alone, beyond what their rows price for reading state from memory (on the
    /// CPU most of the sequence's excess is that cache effect), floored at 0.
    pub fn excess_ns(&self) -> f64 {
        (self.in_sequence_ns - self.alone_ns - self.memory_ns).max(0.0)
    }
}

/// `q`'s [`LayerRows`] at the smallest batch the run has both (where the host costs come
/// from), in `q.mode`; `None` where it has none.
pub fn layer_rows(run: &Run, q: &Query) -> Option<LayerRows> {
    let (variant, in_sequence, _) = q.profile.layer_context();
    let series = q.decode_key(variant, in_sequence, q.mode).series;
    let mut batches: Vec<usize> = run
        .ok_rows()
        .filter(|r| r.key.series == series)
        .map(|r| r.batch)
        .collect();
    batches.sort_unstable();
    batches
        .into_iter()
        .find_map(|batch| layer_rows_at(run, q, batch))
}

/// `q`'s [`LayerRows`] at `batch`, in `q.mode`; `None` where the run lacks either row.
pub fn layer_rows_at(run: &Run, q: &Query, batch: usize) -> Option<LayerRows> {
    let (variant, in_sequence, alone) = q.profile.layer_context();
    let at = |site: &str| {
        let key = q.decode_key(variant, site, q.mode).series.at(batch);
        run.row(&key).filter(|r| r.is_ok())?.median_ns
    };
    let (seq, each) = (at(in_sequence)?, at(alone)?);
    (each > 0.0).then_some(LayerRows {
        batch,
        in_sequence_ns: seq,
        alone_ns: each,
        memory_ns: 0.0,
    })
}

/// A framework part measured in sequence ([`shapes::OtherCall::in_sequence`]): the first
/// (whole, parts) pair of scripts/peer.py rows the run has at `q`'s shape, and their
/// medians, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InSequence {
    pub whole: &'static str,
    pub parts: &'static str,
    pub whole_ns: f64,
    pub parts_ns: f64,
}

impl InSequence {
    /// The part: whole − parts, floored at 0.
    pub fn ns(&self) -> f64 {
        (self.whole_ns - self.parts_ns).max(0.0)
    }
}

/// `pairs`' first pair with both rows at `q`'s shape in `q.mode` (a difference of two rows
/// in the same state: a difference's own samples have no host state, so their 10th
/// percentile is not the states' difference).
pub fn in_sequence(
    run: &Run,
    q: &Query,
    pairs: &[(&'static str, &'static str)],
) -> Option<InSequence> {
    let at = |site: &str| {
        run.row(&q.decode_key(StepProfile::Transformers.as_str(), site, q.mode))
            .filter(|r| r.is_ok())?
            .median_ns
    };
    pairs.iter().find_map(|&(whole, parts)| {
        Some(InSequence {
            whole,
            parts,
            whole_ns: at(whole)?,
            parts_ns: at(parts)?,
        })
    })
}

/// One decoder layer of `q`'s step timed before each of the step's own samples, ns per
/// layer, at `q`'s batch in `q.mode` (the decode crate's [`StepProfile::layer_beside`]
/// row, scripts/peer.py's for transformers); `None` where the run has none (runs from before
/// it: the peer's since 2026-12-02).
pub fn beside_ns(run: &Run, q: &Query) -> Option<f64> {
    beside_row(run, q)?.median_ns.filter(|t| *t > 0.0)
}

/// Whether `q`'s layer beside the step was read against the step pair by pair
/// ([`super::read_in_pairs`]), not from its own median.
pub fn beside_paired(run: &Run, q: &Query) -> bool {
    let (_, site) = q.profile.layer_beside();
    let base = q
        .profile
        .paired_sites()
        .into_iter()
        .find(|p| p.site == site);
    beside_row(run, q)
        .zip(base)
        .is_some_and(|(r, p)| super::was_read_against(r, p.base))
}

fn beside_row<'r>(run: &'r Run, q: &Query) -> Option<&'r ResultRow> {
    let (variant, site) = q.profile.layer_beside();
    run.row(&q.decode_key(variant, site, q.mode))
        .filter(|r| r.is_ok())
}

/// One decoder layer inside the HF step, and the step's own work, from the step measured
/// with only its first few layers (scripts/peer.py's `layers<N>` rows, N = 1 and 8): the
/// framework's per-layer Python measured where it runs, not as a residual.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerSlope {
    /// The fewest and most layers measured, and the step at each.
    pub few: (usize, f64),
    pub many: (usize, f64),
    /// (many − few) per layer between them.
    pub per_layer_ns: f64,
    /// The step at `few` layers less those layers: embedding, mask, rotary, final norm,
    /// lm_head, argmax and the model's own Python.
    pub per_step_ns: f64,
    /// The two steps' intervals do not overlap (the difference is measured, not noise), or
    /// do; `None` where a row has no interval (the fast host state drops them).
    pub resolved: Option<bool>,
}

impl LayerSlope {
    /// The step with `layers` layers, were each layer to cost what the measured ones did.
    pub fn step_ns(&self, layers: usize) -> f64 {
        self.per_step_ns + layers as f64 * self.per_layer_ns
    }
}

/// The HF step's [`LayerSlope`] at `q`'s shape in `q.mode`, from its `layers<N>` rows with
/// the fewest and the most layers; `None` where the run has fewer than two such counts.
pub fn layer_slope(run: &Run, q: &Query) -> Option<LayerSlope> {
    let mut at: Vec<(usize, &ResultRow)> = run
        .ok_rows()
        .filter_map(|r| Some((r.key.site.strip_prefix("layers")?.parse().ok()?, r)))
        .filter(|(_, r)| {
            r.key == q.decode_key(StepProfile::Transformers.as_str(), &r.key.site, q.mode)
        })
        .collect();
    at.sort_by_key(|(n, _)| *n);
    let (&(n0, r0), &(n1, r1)) = (at.first()?, at.last()?);
    let (t0, t1) = (r0.median_ns?, r1.median_ns?);
    if n1 == n0 {
        return None;
    }
    let per_layer_ns = (t1 - t0) / (n1 - n0) as f64;
    let resolved = match (r0.ci_high_ns, r1.ci_low_ns) {
        (Some(hi0), Some(lo1)) => Some(lo1 > hi0),
        _ => None,
    };
    Some(LayerSlope {
        few: (n0, t0),
        many: (n1, t1),
        per_layer_ns,
        per_step_ns: t0 - n0 as f64 * per_layer_ns,
        resolved,
    })
}

#[cfg(test)]
mod tests {
    use super::LayerRows;

    /// A layer whose calls cost 2 ms more in sequence than alone, 1.5 ms of it the cache
    /// the cold rows already price: 0.5 ms is left as its own part; where the cold rows
    /// price more than the whole excess, nothing is.
    #[test]
    fn the_in_sequence_part_is_what_the_cold_rows_do_not_already_price() {
        let rows = |memory_ns| LayerRows {
            batch: 1,
            in_sequence_ns: 5.0e6,
            alone_ns: 3.0e6,
            memory_ns,
        };
        assert!((rows(1.5e6).excess_ns() - 0.5e6).abs() < 1e-6);
        assert_eq!(rows(2.5e6).excess_ns(), 0.0);
        assert!((rows(0.0).excess_ns() - 2.0e6).abs() < 1e-6);
    }
}
