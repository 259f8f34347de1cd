//! Appending one step's keys or values to a layer's KV cache.
//!
//! Variants (sites `k` and `v`, per layer):
//! - `cat`: transformers' DynamicCache: `cat([cache, new], dim=-2)`, a fresh allocation
//!   that grows with L every step. Each timed call appends to the same L-long cache (the
//!   cache is not re-grown across iterations), so a row is the cost of the step at L. Its
//!   `bytes` count the whole copy: read L + q rows, write L + q rows.
//! - `index_copy`: StaticCache: a preallocated `[B, Hkv, Lmax, D]` buffer (Lmax = L + q) and
//!   `index_copy_(2, positions, new)` at the step's positions.
//! - `slice_copy`: `narrow(2, L, q).copy_(new)` into the same kind of buffer.
//!
//! The cost of `cat` grows with L; the other two do not. Reference: the float64 `cat` of
//! the first sequence's cache and new rows (appends are exact copies, so any error is a
//! wrong position or a wrong layout).

use harness::tensors::{StateCopies, f64_cpu, randn};
use harness::{DType, Device, Failure, Op, Prepared};
use shapes::{Dims, OpKind, Problem};
use tch::{Kind, TchError, Tensor};

/// The KV-cache append op.
#[derive(Debug, Clone, Copy, Default)]
pub struct KvCache;

enum Prep {
    Cat,
    IndexCopy { buf: Tensor, pos: Tensor },
    SliceCopy { buf: Tensor, window: Tensor },
}

struct PreparedAppend {
    cache: Tensor,
    new: Tensor,
    prep: Prep,
    bytes: Option<u64>,
    /// The cache as `cat` reads it (copies of it in turn in the cold modes).
    state: StateCopies,
}

impl PreparedAppend {
    /// One append: the tensor the call returns, or `None` for `copy_`, which returns
    /// nothing (so the timed call allocates no extra handle).
    fn forward(&mut self) -> Result<Option<Tensor>, TchError> {
        match &mut self.prep {
            Prep::Cat => Tensor::f_cat(&[&self.state.take()[0], &self.new], -2).map(Some),
            Prep::IndexCopy { buf, pos } => buf.f_index_copy_(2, pos, &self.new).map(Some),
            Prep::SliceCopy { window, .. } => window.f_copy_(&self.new).map(|()| None),
        }
    }

    /// The cache after one append, for the check.
    fn result(&mut self) -> Result<Tensor, TchError> {
        match (self.forward()?, &self.prep) {
            (Some(t), _) => Ok(t),
            (None, Prep::SliceCopy { buf, .. }) => Ok(buf.shallow_clone()),
            (None, _) => Err(TchError::Kind("kvcache: no output".into())),
        }
    }
}

impl Prepared for PreparedAppend {
    fn run(&mut self) -> Result<(), TchError> {
        self.forward().map(drop)
    }
    /// `cat` reads the whole cache; the in-place appends touch only the new rows, which no
    /// number of copies would make cold.
    fn state_bytes(&self) -> u64 {
        match self.prep {
            Prep::Cat => self.state.bytes(),
            _ => 0,
        }
    }
    fn spread_state(&mut self, copies: usize) -> Result<(), TchError> {
        self.state.spread(copies)
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        self.result()?.f_narrow(0, 0, 1)
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        let cache = f64_cpu(&self.cache.f_narrow(0, 0, 1)?)?;
        let new = f64_cpu(&self.new.f_narrow(0, 0, 1)?)?;
        Tensor::f_cat(&[&cache, &new], -2)
    }
    fn bytes(&self) -> Option<u64> {
        self.bytes
    }
}

impl Op for KvCache {
    fn kind(&self) -> OpKind {
        OpKind::KvCache
    }

    fn variants(&self) -> Vec<&'static str> {
        vec!["cat", "index_copy", "slice_copy"]
    }

    /// `cat` reads the whole cache each call (none before a prefill); the in-place writes
    /// touch one position.
    fn holds_state(&self, variant: &str, problem: &Problem) -> bool {
        variant == "cat" && problem.cache_len > 0
    }

    fn prepare(
        &self,
        variant: &str,
        problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let Dims::KvCache {
            batch,
            kv_heads,
            cache_len,
            new_len,
            head_dim,
        } = problem.dims
        else {
            return Err(Failure::error(format!("kvcache got dims {}", problem.dims)));
        };
        let (b, h, l, q, d) = (
            batch as i64,
            kv_heads as i64,
            cache_len as i64,
            new_len as i64,
            head_dim as i64,
        );
        let cache = randn(&[b, h, l, d], dt, device, 6)?;
        let new = randn(&[b, h, q, d], dt, device, 7)?;
        let buffer = || -> Result<Tensor, TchError> {
            let buf = Tensor::f_empty([b, h, l + q, d], (cache.kind(), device.tch()))?;
            buf.f_narrow(2, 0, l)?.f_copy_(&cache)?;
            Ok(buf)
        };
        let (prep, bytes) = match variant {
            "cat" => (Prep::Cat, problem.cat_bytes(dt.size())),
            "index_copy" => {
                let pos = Tensor::f_arange_start(l, l + q, (Kind::Int64, device.tch()))?;
                (
                    Prep::IndexCopy {
                        buf: buffer()?,
                        pos,
                    },
                    None,
                )
            }
            "slice_copy" => {
                let buf = buffer()?;
                let window = buf.f_narrow(2, l, q)?;
                (Prep::SliceCopy { buf, window }, None)
            }
            other => return Err(Failure::error(format!("unknown kvcache variant `{other}`"))),
        };
        Ok(Box::new(PreparedAppend {
            state: StateCopies::of(&[&cache]),
            cache,
            new,
            prep,
            bytes,
        }))
    }
}
