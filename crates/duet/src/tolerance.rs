//! The tolerances a comparison judges by, per kind of case: `--tolerance` and
//! `--family-tolerance` where given, else from the term this run measured. A case's
//! rounds differ by what each round's two processes share among their samples (its
//! between-round spread); a family's by what they share among all its cases (the process
//! term). A tolerance of three times that spread is the least a verdict of a few rounds can
//! hold; it never goes below the floor (±1% a case and ±0.5% a family, nvbench's 0.5% gap
//! beside them), which graph replays (a process term of ~0.1% on an H100) reach, nor above
//! the fixed ±3% and ±1.5% of before: the intervals already carry the spread (a family's is
//! widened by the process term), so a wider tolerance would only hide a change a noisy
//! machine can still resolve. Where no term was measured (one round, or too few cases of
//! the kind), the fixed ±3% and ±1.5%.

use std::collections::BTreeMap;

use crate::kind::Kind;

/// The least tolerance a case's verdict takes, and a family's.
pub const CASE_FLOOR: f64 = 0.01;
pub const FAMILY_FLOOR: f64 = 0.005;
/// Without a measured term.
pub const CASE_FIXED: f64 = 0.03;
pub const FAMILY_FIXED: f64 = 0.015;
/// The tolerance from a measured term: this many of its sd (what a spread of that sd
/// reaches by chance in one round in three hundred, were it normal).
pub const TERMS: f64 = 3.0;

/// Where a tolerance came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// `--tolerance` / `--family-tolerance`.
    Given,
    /// Three times the term the run measured (sd, a fraction), between the floor and the
    /// fixed default.
    Term(f64),
    /// No term measured: the fixed default.
    Fixed,
}

/// One tolerance (a fraction) and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tol {
    pub frac: f64,
    pub source: Source,
}

impl Tol {
    /// `given`, else from the measured `term` between `floor` and `fixed`, else `fixed`.
    pub fn of(given: Option<f64>, term: Option<f64>, floor: f64, fixed: f64) -> Tol {
        match (given, term) {
            (Some(frac), _) => Tol {
                frac,
                source: Source::Given,
            },
            // a term the rounds could not tell from their sampling (0) is no measurement
            (None, Some(t)) if t.is_finite() && t > 0.0 => Tol {
                frac: (TERMS * t).clamp(floor, fixed),
                source: Source::Term(t),
            },
            _ => Tol {
                frac: fixed,
                source: Source::Fixed,
            },
        }
    }

    /// `±1.0% (the floor; measured term ±0.12%)`.
    pub fn describe(&self) -> String {
        let why = match self.source {
            Source::Given => "given".to_string(),
            Source::Term(t) if TERMS * t > self.frac => {
                format!("the cap; measured term ±{:.2}%", t * 100.0)
            }
            Source::Term(t) if TERMS * t >= self.frac - 1e-12 => {
                format!("3 × the measured term ±{:.2}%", t * 100.0)
            }
            Source::Term(t) => format!("the floor; measured term ±{:.2}%", t * 100.0),
            Source::Fixed => "fixed: no term measured".to_string(),
        };
        format!("±{:.1}% ({why})", self.frac * 100.0)
    }
}

/// Each kind's case and family tolerance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tolerances {
    pub case: BTreeMap<Kind, Tol>,
    pub family: BTreeMap<Kind, Tol>,
}

impl Tolerances {
    /// From the settings' given ones and each kind's measured terms: a case's
    /// between-round sd (`case_terms`) and a round's process term (`family_terms`).
    pub fn of(
        given: (Option<f64>, Option<f64>),
        case_terms: &BTreeMap<Kind, f64>,
        family_terms: &BTreeMap<Kind, f64>,
    ) -> Tolerances {
        let mut t = Tolerances::default();
        for k in [
            Kind::HostBound,
            Kind::HostTimedBound,
            Kind::Device,
            Kind::Launch,
        ] {
            let case = Tol::of(given.0, case_terms.get(&k).copied(), CASE_FLOOR, CASE_FIXED);
            t.case.insert(k, case);
            let fam = Tol::of(
                given.1,
                family_terms.get(&k).copied(),
                FAMILY_FLOOR,
                FAMILY_FIXED,
            );
            t.family.insert(k, fam);
        }
        t
    }

    /// A case of `kind`'s tolerance.
    pub fn case(&self, kind: Kind) -> Tol {
        self.case.get(&kind).copied().unwrap_or(Tol {
            frac: CASE_FIXED,
            source: Source::Fixed,
        })
    }

    /// A family of `kind`'s tolerance.
    pub fn family(&self, kind: Kind) -> Tol {
        self.family.get(&kind).copied().unwrap_or(Tol {
            frac: FAMILY_FIXED,
            source: Source::Fixed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tolerance_is_given_or_twice_the_term_above_its_floor_or_fixed() {
        let t = Tol::of(None, Some(0.001), CASE_FLOOR, CASE_FIXED);
        assert_eq!(t.frac, 0.01);
        assert!(t.describe().contains("floor"), "{}", t.describe());
        let t = Tol::of(None, Some(0.005), CASE_FLOOR, CASE_FIXED);
        assert!((t.frac - 0.015).abs() < 1e-12);
        assert!(t.describe().contains("3 ×"), "{}", t.describe());
        let t = Tol::of(None, Some(0.02), CASE_FLOOR, CASE_FIXED);
        assert_eq!(t.frac, CASE_FIXED);
        assert!(t.describe().contains("cap"), "{}", t.describe());
        assert_eq!(Tol::of(Some(0.05), Some(0.02), 0.01, 0.03).frac, 0.05);
        assert_eq!(Tol::of(None, None, 0.01, 0.03).source, Source::Fixed);
        assert_eq!(Tol::of(None, Some(0.0), 0.01, 0.03).source, Source::Fixed);
    }
}
