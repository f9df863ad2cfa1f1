//! Whether a cost that comes from outside harvest's own arithmetic may be booked: an output
//! row's `cost_usd` (the start books kept answers a crash cut from their records), a
//! `/generation` answer's `total_cost` (a crash's leftovers, closed streams, rebuilt lines) and
//! a stream's `usage.cost`. Each is a figure someone else wrote: a cleaning script or anyone with
//! write access to the output directory, a hostile or buggy gateway at `--base-url`
//! (reliability-probe-5 P3: a planted row at −$0.25 took a $0.30 budget to +50%, one at $100
//! booked $50.07 against a $0.07 bill, `total_cost: -1` booked −$64). A cost is refused when it
//! is not a number, below zero, or above the attempt's worst case (its prompt and `max_tokens`
//! at the dearest price it could go to, recorded on its `dispatched` line as `worst_usd`). A
//! refused cost is never booked: the caller leaves the attempt to its look-up (which holds its
//! money meanwhile) or to `--repair`, and names what it refused.

use crate::domain::Usd;

/// Room above an attempt's worst case for the API's rounding of `total_cost` (a float of a few
/// significant digits) and for a price raised while the answer streamed: a real bill is never
/// further above the worst case than this, a planted or damaged one usually is far above it.
const WORST_CASE_SLACK_PERCENT: i64 = 5;

/// Why a cost was not booked.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub(crate) enum CostRefused {
    #[error("a cost that is not a number")]
    NotANumber,
    #[error("a negative cost ({0:.6} USD)")]
    Negative(f64),
    #[error("a cost of {usd:.6} USD, above the attempt's worst case of {worst}")]
    AboveWorstCase { usd: f64, worst: Usd },
}

/// `usd` as a bookable amount, given the attempt's worst case where it is known (ledgers
/// written before harvest recorded it have none: then only the sign is checked).
pub(crate) fn check(usd: f64, worst: Option<Usd>) -> Result<Usd, CostRefused> {
    if !usd.is_finite() {
        return Err(CostRefused::NotANumber);
    }
    check_usd(Usd::from_f64(usd), worst)
}

/// [`check`] of an amount already in dollars (an output row's `cost_usd`).
pub(crate) fn check_usd(usd: Usd, worst: Option<Usd>) -> Result<Usd, CostRefused> {
    if usd < Usd::ZERO {
        return Err(CostRefused::Negative(usd.as_f64()));
    }
    if let Some(worst) = worst {
        let room = worst.pico().saturating_mul(WORST_CASE_SLACK_PERCENT) / 100;
        if usd.pico() > worst.pico().saturating_add(room) {
            return Err(CostRefused::AboveWorstCase {
                usd: usd.as_f64(),
                worst,
            });
        }
    }
    Ok(usd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_from_outside_are_booked_only_when_they_can_be_bills() {
        let worst = Some(Usd::from_f64(0.07));
        type Case = (&'static str, f64, Option<Usd>, Result<Usd, CostRefused>);
        let cases: &[Case] = &[
            ("a bill", 0.031, worst, Ok(Usd::from_f64(0.031))),
            ("free", 0.0, worst, Ok(Usd::ZERO)),
            (
                "the worst case itself",
                0.07,
                worst,
                Ok(Usd::from_f64(0.07)),
            ),
            (
                "rounded just above the worst case",
                0.0735,
                worst,
                Ok(Usd::from_f64(0.0735)),
            ),
            (
                "a planted row at $100",
                100.0,
                worst,
                Err(CostRefused::AboveWorstCase {
                    usd: 100.0,
                    worst: Usd::from_f64(0.07),
                }),
            ),
            (
                "a planted row at -0.25",
                -0.25,
                worst,
                Err(CostRefused::Negative(-0.25)),
            ),
            (
                "a gateway's total_cost -1",
                -1.0,
                None,
                Err(CostRefused::Negative(-1.0)),
            ),
            ("NaN", f64::NAN, worst, Err(CostRefused::NotANumber)),
            (
                "infinite",
                f64::INFINITY,
                None,
                Err(CostRefused::NotANumber),
            ),
            (
                "no worst case recorded: only the sign",
                100.0,
                None,
                Ok(Usd::from_f64(100.0)),
            ),
        ];
        for (name, usd, worst, want) in cases {
            assert_eq!(&check(*usd, *worst), want, "{name}");
        }
    }
}
