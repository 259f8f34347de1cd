//! The cold modes' copies of a case's model state (`graph_cold`, `pipelined_cold`): enough
//! copies of its weights or KV cache, taken in turn by [`Prepared::run`], that consecutive
//! calls read memory the last-level cache no longer holds — as in a step, where every other
//! layer's state passes through the cache between two calls of a site.

use tch::TchError;

use crate::Prepared;

/// Most copies of a case's state the cold modes make (their memory is bounded by twice the
/// last-level cache plus one copy).
pub const MAX_COLD_COPIES: usize = 64;

/// Copies of `state_bytes` of state that pass twice `llc_bytes` together (at least 1, at
/// most [`MAX_COLD_COPIES`]), and the calls a run of at least `calls` calls holds to visit
/// each copy equally often.
pub fn cold_copies(state_bytes: u64, llc_bytes: u64, calls: u64) -> (usize, u64) {
    let copies = (2 * llc_bytes)
        .div_ceil(state_bytes.max(1))
        .clamp(1, MAX_COLD_COPIES as u64);
    (copies as usize, calls.max(copies).div_ceil(copies) * copies)
}

/// What [`spread`] did: the calls to make (a whole number of rounds over the copies) and the
/// row's note.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    pub calls: u64,
    pub note: String,
}

/// Give `p` its copies of the state against a last-level cache of `llc_bytes`, for at least
/// `calls` calls.
pub fn spread(p: &mut dyn Prepared, llc_bytes: u64, calls: u64) -> Result<Spread, TchError> {
    let state = p.state_bytes();
    let (copies, calls) = cold_copies(state, llc_bytes, calls);
    p.spread_state(copies)?;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let all = state * copies as u64;
    Ok(Spread {
        calls,
        note: format!(
            "{copies} copies of the state taken in turn ({:.1} MiB each, {:.1} MiB in all; last-level cache {:.1} MiB){}",
            mib(state),
            mib(all),
            mib(llc_bytes),
            if all < 2 * llc_bytes {
                ": fewer than would pass twice the cache, so partly warm"
            } else {
                ""
            }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cold_copies_pass_twice_the_cache_within_bounds() {
        const MIB: u64 = 1 << 20;
        // 2 MiB of weights against a 50 MiB cache: 50 copies, 100 MiB, 50 calls
        assert_eq!(cold_copies(2 * MIB, 50 * MIB, 16), (50, 50));
        // state larger than twice the cache: one copy already streams
        assert_eq!(cold_copies(268 * MIB, 50 * MIB, 16), (1, 16));
        // 33.6 MB of K/V: 4 copies, a graph of 16 calls visits each 4 times
        assert_eq!(cold_copies(33_600_000, 50 * MIB, 16), (4, 16));
        // tiny state: capped, and the graph holds a whole number of rounds
        assert_eq!(cold_copies(1024, 50 * MIB, 16), (MAX_COLD_COPIES, 64));
        assert_eq!(cold_copies(0, 50 * MIB, 16), (MAX_COLD_COPIES, 64));
    }
}
