//! The rounds of a paired run (`opbench ab`'s sides): which round, and so which pair of
//! fresh worker processes, each of a case's pairs came from. Both the ab replay
//! (`opbench ab --judge`) and the between-process statistics of `compare` and `history`
//! read a side's rounds here: a side's rounds are its processes, as a plain run's
//! executions are.

use crate::Env;

/// How a paired run numbered its pairs: `first` pairs in each of the first two rounds, then
/// `later.0` (host-timed) or `later.1` (device-timed) in each round after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairRounds {
    pub first: u32,
    pub later: (u32, u32),
}

impl PairRounds {
    /// From a side's env.json: `None` unless `design = paired` with `pairs_per_round`
    /// (`pairs_after_round_2` absent: `first` throughout, as runs before it took).
    pub fn of(env: &Env) -> Option<Self> {
        let s = &env.settings;
        if s.get("design").map(String::as_str) != Some("paired") {
            return None;
        }
        let first: u32 = s.get("pairs_per_round")?.parse().ok()?;
        let later = s
            .get("pairs_after_round_2")
            .and_then(|v| {
                let (h, d) = v.split_once(',')?;
                Some((h.trim().parse().ok()?, d.trim().parse().ok()?))
            })
            .unwrap_or((first, first));
        Some(PairRounds { first, later })
    }

    /// The round (from 0) of pair `index` of a host-timed or a device-timed case.
    pub fn round_of(&self, index: u32, device: bool) -> u32 {
        let first = self.first.max(1);
        let later = if device { self.later.1 } else { self.later.0 }.max(1);
        if index < 2 * first {
            index / first
        } else {
            2 + (index - 2 * first) / later
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_follow_the_pairs_each_round_took() {
        let mut env = Env::default();
        assert_eq!(PairRounds::of(&env), None, "not a paired run");
        env.settings.insert("design".into(), "paired".into());
        env.settings.insert("pairs_per_round".into(), "8".into());
        env.settings
            .insert("pairs_after_round_2".into(), "16,2".into());
        let r = PairRounds::of(&env).unwrap();
        // 8 and 8 in rounds 0 and 1, then 16 a round (host) or 2 (device)
        assert_eq!(r.round_of(7, false), 0);
        assert_eq!(r.round_of(8, true), 1);
        assert_eq!(r.round_of(16, false), 2);
        assert_eq!(r.round_of(31, false), 2);
        assert_eq!(r.round_of(32, false), 3);
        assert_eq!(r.round_of(19, true), 3);
        env.settings.remove("pairs_after_round_2");
        assert_eq!(PairRounds::of(&env).unwrap().round_of(16, true), 2);
    }
}
