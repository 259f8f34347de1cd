//! Small tensor helpers shared by the op crates: seeded inputs and float64 copies.

use tch::{Kind, TchError, Tensor};

use crate::{DType, Device, dtype};

/// Standard-normal values of `shape`, made on `device` from a fixed `seed` in float32 and
/// rounded to `dt`. The reference is always built from the rounded values, so the check
/// measures the op, not the rounding of its inputs.
pub fn randn(shape: &[i64], dt: DType, device: Device, seed: i64) -> Result<Tensor, TchError> {
    tch::manual_seed(seed);
    Tensor::f_randn(shape, (Kind::Float, device.tch()))?.f_to_kind(dtype::kind(dt))
}

/// `1 + scale·N(0,1)`: weights of a norm layer (Qwen3 initialises them to one; the noise
/// makes a wrong broadcast visible).
pub fn near_one(
    shape: &[i64],
    scale: f64,
    dt: DType,
    device: Device,
    seed: i64,
) -> Result<Tensor, TchError> {
    tch::manual_seed(seed);
    Tensor::f_randn(shape, (Kind::Float, device.tch()))?
        .f_mul_scalar(scale)?
        .f_add_scalar(1.0)?
        .f_to_kind(dtype::kind(dt))
}

/// A float64 copy on the CPU, for references.
pub fn f64_cpu(t: &Tensor) -> Result<Tensor, TchError> {
    t.f_to_device(tch::Device::Cpu)?.f_to_kind(Kind::Double)
}

/// Shape as `i64`s, the way tch wants it.
pub fn dims<const N: usize>(d: [usize; N]) -> [i64; N] {
    d.map(|x| x as i64)
}

/// Bytes of the tensors' elements.
pub fn bytes_of(ts: &[&Tensor]) -> u64 {
    ts.iter()
        .map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64)
        .sum()
}

/// A case's model state (weights, a KV cache) as its calls read it: the tensors themselves,
/// or for the cold modes ([`crate::Prepared::spread_state`]) those and clones of them,
/// handed out in turn by [`StateCopies::take`] so that consecutive calls read different
/// memory.
#[derive(Debug)]
pub struct StateCopies {
    sets: Vec<Vec<Tensor>>,
    next: usize,
}

impl StateCopies {
    /// The state as it is: one set of handles to the tensors, no copy.
    pub fn of(state: &[&Tensor]) -> Self {
        StateCopies {
            sets: vec![state.iter().map(|t| t.shallow_clone()).collect()],
            next: 0,
        }
    }

    /// Bytes of one set.
    pub fn bytes(&self) -> u64 {
        bytes_of(&self.sets[0].iter().collect::<Vec<_>>())
    }

    /// Hold `copies` sets (at least 1): the tensors themselves and `copies - 1` clones.
    pub fn spread(&mut self, copies: usize) -> Result<(), TchError> {
        self.sets.truncate(1);
        for _ in 1..copies.max(1) {
            let clones = self.sets[0]
                .iter()
                .map(|t| {
                    let mut c = t.f_empty_like()?;
                    c.f_copy_(t)?;
                    Ok(c)
                })
                .collect::<Result<_, TchError>>()?;
            self.sets.push(clones);
        }
        self.next = 0;
        Ok(())
    }

    /// The next set's tensors, in the order given to [`StateCopies::of`].
    pub fn take(&mut self) -> &[Tensor] {
        let i = self.next;
        self.next = (i + 1) % self.sets.len();
        &self.sets[i]
    }
}

/// Tensors held beside a case so that the case's own land elsewhere in the device's
/// memory, as `seed` picks: 0–7 fillers of just under 1 MB, which push a small tensor
/// into another of the caching allocator's 2-MB small-pool segments (other physical
/// pages), then a pad of 512 B to 1 MB (another offset in it). A process's small cases
/// otherwise all sit where its first allocations did. None on the CPU.
pub fn placement(seed: u64, device: Device) -> Result<Vec<Tensor>, TchError> {
    if !device.is_gpu() {
        return Ok(Vec::new());
    }
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let fillers = rng.random_range(0..8);
    let pad = 512 * rng.random_range(1..2048_i64);
    let bytes = |n: i64| Tensor::f_empty([n], (Kind::Uint8, device.tch()));
    let mut held = (0..fillers)
        .map(|_| bytes((1 << 20) - 512))
        .collect::<Result<Vec<_>, _>>()?;
    held.push(bytes(pad)?);
    Ok(held)
}
