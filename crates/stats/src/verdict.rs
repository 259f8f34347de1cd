//! opbench's one verdict vocabulary and its rule: `same`, `slower`, `faster`, `ambiguous`.
//! `opbench ab` (pairs and rounds), `opbench compare` (stored executions) and `history`
//! judge a change with it, each from its own intervals of the ratio candidate / base.
//!
//! The rule, as BenchmarkTools.jl's `judge` and nvbench's SAME / SLOW / FAST / AMBG:
//! - `slower`: the change's interval lies wholly above 1 + tol, and the change is a
//!   discovery over the comparison (Benjamini–Hochberg over its cases or families);
//! - `faster`: wholly below 1 / (1 + tol), and a discovery;
//! - `same`: the equivalence interval lies wholly inside [1 / (1 + tol), 1 + tol] (the
//!   tolerance is symmetric in the log: a change and its inverse are judged alike);
//! - `ambiguous`: anything else; it does not mean "no change".

/// A verdict on a change against a tolerance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// The whole equivalence interval lies inside ± the tolerance.
    Same,
    /// The whole interval lies above + the tolerance, and the change is a discovery.
    Slower,
    /// The whole interval lies below − the tolerance, and the change is a discovery.
    Faster,
    /// Neither: the interval straddles a bound of the tolerance, or the change is not a
    /// discovery.
    Ambiguous,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Slower => "slower",
            Verdict::Faster => "faster",
            Verdict::Ambiguous => "ambiguous",
        }
    }

    /// Whether the verdict is final (a sequential design stops on it).
    pub fn is_decided(self) -> bool {
        self != Verdict::Ambiguous
    }
}

impl std::str::FromStr for Verdict {
    type Err = String;

    /// The word [`Verdict::as_str`] writes (a table read back).
    fn from_str(s: &str) -> Result<Self, String> {
        [
            Verdict::Same,
            Verdict::Slower,
            Verdict::Faster,
            Verdict::Ambiguous,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
        .ok_or_else(|| format!("`{s}` is not a verdict (same, slower, faster, ambiguous)"))
    }
}

/// The intervals of one change, ratios candidate / base: `change` decides `slower` and
/// `faster`, `equivalence` decides `same` (the same interval where a tool uses one; a
/// two one-sided tests' (1 − 2α) interval where it tests equivalence at α).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Intervals {
    pub change: (f64, f64),
    pub equivalence: (f64, f64),
}

impl Intervals {
    /// One interval for both.
    pub fn one(interval: (f64, f64)) -> Self {
        Intervals {
            change: interval,
            equivalence: interval,
        }
    }

    /// One interval of the log ratio, for both.
    pub fn of_log((low, high): (f64, f64)) -> Self {
        Self::one((low.exp(), high.exp()))
    }
}

/// The rule (see the module): `tol` a fraction (0.03 for ±3%), `discovered` whether the
/// change is a discovery over its comparison.
pub fn judge(i: Intervals, tol: f64, discovered: bool) -> Verdict {
    judge_beyond(i, tol, tol, discovered)
}

/// [`judge`] where a change must clear more than the tolerance `same` is judged by:
/// `beyond` ≥ `tol` (`opbench compare`'s device rows with one execution a side, whose
/// processes alone move them by up to 20%).
pub fn judge_beyond(i: Intervals, tol: f64, beyond: f64, discovered: bool) -> Verdict {
    let (up, down) = (1.0 + beyond.max(tol), 1.0 / (1.0 + beyond.max(tol)));
    let (same_up, same_down) = (1.0 + tol, 1.0 / (1.0 + tol));
    let ((low, high), (eq_low, eq_high)) = (i.change, i.equivalence);
    if discovered && low > up {
        Verdict::Slower
    } else if discovered && high < down {
        Verdict::Faster
    } else if eq_low >= same_down && eq_high <= same_up {
        Verdict::Same
    } else {
        Verdict::Ambiguous
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_only_inside_slower_only_beyond_and_discovered() {
        let t = 0.03;
        let one = |lo: f64, hi: f64| Intervals::one((lo, hi));
        assert_eq!(judge(one(0.99, 1.01), t, true), Verdict::Same);
        assert_eq!(judge(one(0.99, 1.05), t, true), Verdict::Ambiguous);
        assert_eq!(judge(one(1.04, 1.06), t, true), Verdict::Slower);
        // beyond, but not a discovery over the comparison
        assert_eq!(judge(one(1.04, 1.06), t, false), Verdict::Ambiguous);
        assert_eq!(judge(one(0.92, 0.96), t, true), Verdict::Faster);
        // symmetric in the log: 1/1.03 = 0.97087 is the lower bound, not 0.97
        assert_eq!(judge(one(0.9710, 0.99), t, false), Verdict::Same);
        assert_eq!(judge(one(0.9705, 0.99), t, false), Verdict::Ambiguous);
        assert_eq!(judge(one(0.0, f64::INFINITY), t, true), Verdict::Ambiguous);
        // a tool whose equivalence interval is narrower than its change interval
        let tost = Intervals {
            change: (0.96, 1.04),
            equivalence: (0.98, 1.02),
        };
        assert_eq!(judge(tost, t, false), Verdict::Same);
        assert_eq!(Intervals::of_log((0.0, 0.0)).change, (1.0, 1.0));
        assert_eq!("slower".parse::<Verdict>(), Ok(Verdict::Slower));
        assert!("status-changed".parse::<Verdict>().is_err());
    }
}
