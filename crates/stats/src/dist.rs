//! The distributions every test in this crate reads, from statrs, in one place: the
//! Student-t quantile and CDF (normal beyond a million degrees of freedom) and digamma.
//! One rule for degenerate degrees of freedom (zero, negative or NaN: no information), so
//! no two tests of one comparison widen an interval differently.

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// From this many degrees of freedom on, the t is the standard normal.
const NORMAL_DF: f64 = 1e6;

/// The Student-t with `df` degrees of freedom as statrs has it: `None` where it is the
/// normal (df ≥ [`NORMAL_DF`] or infinite), `Some(Err)` where df carries no information.
fn t(df: f64) -> Option<Result<StudentsT, ()>> {
    if df.is_finite() && df >= NORMAL_DF || df == f64::INFINITY {
        return None;
    }
    Some(StudentsT::new(0.0, 1.0, df).map_err(|_| ()))
}

fn normal() -> Normal {
    Normal::standard()
}

/// The Student-t quantile at probability `p` with `df` degrees of freedom (real: a
/// Welch–Satterthwaite df below 1 keeps its wide t). No information (df ≤ 0 or NaN):
/// infinite, on the side of `p`.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    match t(df) {
        None => normal().inverse_cdf(p),
        Some(Ok(d)) => d.inverse_cdf(p),
        Some(Err(())) if p < 0.5 => f64::NEG_INFINITY,
        Some(Err(())) if p > 0.5 => f64::INFINITY,
        Some(Err(())) => 0.0,
    }
}

/// The Student-t CDF at `x` with `df` degrees of freedom; no information (df ≤ 0 or NaN):
/// 0.5, so a p-value from it is 1.
pub fn t_cdf(x: f64, df: f64) -> f64 {
    match t(df) {
        None => normal().cdf(x),
        Some(Ok(d)) => d.cdf(x),
        Some(Err(())) => 0.5,
    }
}

/// ψ(x), the digamma function (statrs's).
pub fn digamma(x: f64) -> f64 {
    statrs::function::gamma::digamma(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_t_matches_its_tables_and_has_one_fallback() {
        // t(0.975; 1) = 12.706, t(0.975; 10) = 2.228, z(0.975) = 1.960
        assert!((t_quantile(0.975, 1.0) - 12.706).abs() < 1e-3);
        assert!((t_quantile(0.975, 10.0) - 2.228).abs() < 1e-3);
        assert!((t_quantile(0.975, f64::INFINITY) - 1.960).abs() < 1e-3);
        assert!((t_quantile(0.975, 2e6) - 1.960).abs() < 1e-3);
        // a Satterthwaite df below 1 is wider than df 1, not the normal
        assert!(t_quantile(0.975, 0.5) > t_quantile(0.975, 1.0));
        for df in [0.0, -1.0, f64::NAN] {
            assert_eq!(t_quantile(0.975, df), f64::INFINITY);
            assert_eq!(t_quantile(0.025, df), f64::NEG_INFINITY);
            assert_eq!(t_cdf(3.0, df), 0.5);
        }
        assert!((t_cdf(2.228, 10.0) - 0.975).abs() < 1e-4);
        assert!((t_cdf(1.960, f64::INFINITY) - 0.975).abs() < 1e-4);
        // ψ(1) = −γ
        assert!((digamma(1.0) + 0.577_215_664_9).abs() < 1e-9);
    }
}
