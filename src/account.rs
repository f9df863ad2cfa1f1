//! What the API key and the account allow, read against a run's settings before anything is
//! sent (pure: the key's `GET /key` answer and the figures in, sentences out). Used by `run`
//! (start notes) and `estimate`.
//!
//! OpenRouter caps the *estimated* cost of the requests in flight on the account, each
//! estimated from its prompt and `max_tokens` at the serving price (docs: api_reference/limits,
//! "In-flight spending budget"; research/openrouter-api.md §7.4); a key's `limit_remaining`
//! caps what it may spend at all (docs: api_reference/limits, "Credit limits").

use serde::Serialize;

use crate::domain::{Price, Usd, group_thousands};
use crate::openrouter::KeyInfo;

/// The run's settings that decide what it may hold in flight.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    pub budget: Usd,
    pub concurrency: u32,
    /// The largest `max_tokens` of the datasets.
    pub max_tokens: u32,
    /// A typical prompt's tokens (the estimate counts the prompt too).
    pub prompt_tokens: u64,
    /// The cheapest and dearest (input, output) prices among the OpenRouter endpoints the
    /// policy allows; `None` when the run uses only own servers.
    pub prices: Option<((Price, Price), (Price, Price))>,
}

/// The verdict, as figures (for `--json`) and sentences.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Preflight {
    /// What one request is estimated at, at the cheapest and the dearest allowed endpoint.
    pub per_request_usd: Option<(Usd, Usd)>,
    /// `concurrency` requests in flight, at the dearest endpoint.
    pub in_flight_usd: Option<Usd>,
    /// The key's remaining limit, when it has one.
    pub limit_remaining_usd: Option<f64>,
    /// Streams whose estimate fits the key's remaining limit (at the dearest endpoint).
    pub streams_that_fit: Option<u64>,
    pub notes: Vec<String>,
}

/// Reads the key against the plan. `key` is `None` when `GET /key` could not be read.
pub(crate) fn preflight(plan: &Plan, key: Option<&KeyInfo>) -> Preflight {
    let mut notes = Vec::new();
    let per = plan.prices.map(|((li, lo), (hi, ho))| {
        let cost = |pi: Price, po: Price| {
            pi.cost(plan.prompt_tokens) + po.cost(u64::from(plan.max_tokens))
        };
        (cost(li, lo), cost(hi, ho))
    });
    let in_flight = per.map(|(_, hi)| Usd::from_pico(hi.pico() * i64::from(plan.concurrency)));
    let remaining = key.and_then(|k| k.limit_remaining);
    match (key, remaining) {
        (None, _) => notes.push(
            "the key's limits could not be read (GET /key): the budget is enforced by harvest \
             alone"
                .into(),
        ),
        (Some(_), Some(r)) if r < plan.budget.as_f64() => notes.push(format!(
            "the key's limit leaves ${r:.2}, less than budget_usd {}: the API will refuse \
             requests (402) at about ${r:.2}",
            plan.budget
        )),
        (Some(k), Some(r)) => notes.push(format!(
            "the key's limit ({}, ${r:.2} left) covers budget_usd {}",
            k.limit.map_or("?".into(), |l| format!("${l:.2}")),
            plan.budget
        )),
        (Some(_), None) => notes.push(format!(
            "the key has no credit limit: give the run its own key with a limit equal to \
             budget_usd ({}), and OpenRouter enforces the budget too",
            plan.budget
        )),
    }
    let mut fit = None;
    if let (Some((lo, hi)), Some(total)) = (per, in_flight) {
        let mut text = format!(
            "in flight at concurrency {} and max_tokens {}, as OpenRouter estimates it (prompt + \
             max_tokens at the serving price, ${:.4} to ${:.4} a request): up to {total}",
            group_thousands(u64::from(plan.concurrency)),
            group_thousands(u64::from(plan.max_tokens)),
            lo.as_f64(),
            hi.as_f64(),
        );
        if let Some(r) = remaining
            && hi > Usd::ZERO
        {
            let n = (Usd::from_f64(r).pico() / hi.pico()).max(0) as u64;
            fit = Some(n);
            if n < u64::from(plan.concurrency) {
                text.push_str(&format!(
                    ", more than the key's ${r:.2} left: the account's in-flight budget will \
                     refuse requests past about {} streams (harvest learns that ceiling and \
                     waits); a realistic max_tokens, or concurrency = {}, avoids it",
                    group_thousands(n),
                    group_thousands(n)
                ));
            }
        } else if total > plan.budget {
            text.push_str(&format!(
                ", more than budget_usd {}: if the account's balance is near it, its in-flight \
                 budget will refuse requests (harvest learns the ceiling and waits); a \
                 realistic max_tokens avoids it",
                plan.budget
            ));
        }
        notes.push(text);
    }
    Preflight {
        per_request_usd: per,
        in_flight_usd: in_flight,
        limit_remaining_usd: remaining,
        streams_that_fit: fit,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(concurrency: u32, max_tokens: u32, budget: f64) -> Plan {
        let p = |x: f64| Price::per_million_f64(x).expect("price");
        Plan {
            budget: Usd::from_f64(budget),
            concurrency,
            max_tokens,
            prompt_tokens: 1_000,
            prices: Some(((p(0.6), p(2.5)), (p(0.6), p(3.0)))),
        }
    }

    fn key(limit: Option<f64>, remaining: Option<f64>) -> KeyInfo {
        KeyInfo {
            label: None,
            limit,
            limit_remaining: remaining,
            limit_reset: None,
            usage: 0.0,
            usage_daily: None,
            is_free_tier: Some(false),
        }
    }

    #[test]
    fn the_seed_job_is_told_its_in_flight_estimate_and_what_fits() {
        // 2,000 x (1,000 x $0.6/M + 16,384 x $3/M) = 2,000 x $0.049752 = $99.50.
        let f = preflight(
            &plan(2_000, 16_384, 100.0),
            Some(&key(Some(100.0), Some(90.0))),
        );
        assert_eq!(f.in_flight_usd, Some(Usd::from_f64(99.504)));
        assert_eq!(f.streams_that_fit, Some(1_808));
        assert!(f.notes[0].contains("less than budget_usd"), "{:?}", f.notes);
        assert!(
            f.notes[1].contains("past about 1,808 streams"),
            "{:?}",
            f.notes
        );
        assert!(f.notes[1].contains("concurrency = 1,808"), "{:?}", f.notes);
    }

    #[test]
    fn a_key_that_covers_the_budget_and_a_realistic_max_tokens_says_so() {
        let f = preflight(
            &plan(100, 2_048, 50.0),
            Some(&key(Some(200.0), Some(150.0))),
        );
        assert!(f.notes[0].contains("covers budget_usd"), "{:?}", f.notes);
        assert!(!f.notes[1].contains("refuse"), "{:?}", f.notes);
        assert_eq!(f.streams_that_fit, Some(150_000_000 / 6_744));
    }

    #[test]
    fn no_limit_no_key_and_own_servers_only() {
        let f = preflight(&plan(2_000, 16_384, 50.0), Some(&key(None, None)));
        assert!(f.notes[0].contains("own key with a limit"), "{:?}", f.notes);
        assert!(
            f.notes[1].contains("$0.0416 to $0.0498 a request"),
            "{:?}",
            f.notes
        );
        assert!(f.notes[1].contains("more than budget_usd"), "{:?}", f.notes);
        let f = preflight(&plan(10, 100, 1.0), None);
        assert!(f.notes[0].contains("could not be read"));
        let mut own = plan(10, 100, 1.0);
        own.prices = None;
        let f = preflight(&own, Some(&key(None, None)));
        assert_eq!((f.in_flight_usd, f.notes.len()), (None, 1));
    }
}
