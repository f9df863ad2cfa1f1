//! The account behind the simulated key: OpenRouter's in-flight spending budget, and errors
//! forced on every request (for tests of systematic failures).
//!
//! The in-flight budget, as the docs describe it (openrouter.ai/docs/api-reference/limits,
//! "In-flight spending budget"; live docs, not in the Aug-2026 docs repository snapshot; our
//! notes in research/openrouter-api.md §7.4): a paid request is charged when it ends, so
//! OpenRouter caps the *estimated* cost of the requests running or recently finished, each
//! estimated from its prompt and its `max_tokens` at the serving price. Past the cap a request
//! gets `402` with `error.metadata.limit_source = "openrouter_in_flight_budget"` and a
//! `Retry-After`; a request whose own estimate is over the whole budget gets a `402` without
//! one ("This request requires more credits, or fewer max_tokens"), which no wait cures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::domain::Usd;

/// The in-flight budget's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct InFlightBudget {
    /// The cap on the estimated cost of running and recently finished requests.
    pub usd: f64,
    /// How long a finished request still counts ("recently finished").
    pub recent: Duration,
    /// The `Retry-After` sent with the 402, in seconds at real pace.
    pub retry_after_s: f64,
}

/// Why a request was refused by the account.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// The running and recent estimates plus this one are over the budget: wait and retry.
    Busy { in_flight: Usd, budget: Usd },
    /// This request alone is over the budget: `affordable` output tokens at most.
    TooBig { requested: u64, affordable: u64 },
}

#[derive(Default)]
struct Book {
    next: u64,
    running: HashMap<u64, i64>,
    /// Finished requests still counted, oldest first: (when, estimate in picodollars).
    recent: std::collections::VecDeque<(Instant, i64)>,
    refused: u64,
}

/// The account's live estimates. Cheap to share.
#[derive(Clone, Default)]
pub struct Account {
    budget: Option<InFlightBudget>,
    book: Arc<Mutex<Book>>,
}

/// A request counted against the in-flight budget; dropping it moves it to "recently finished".
pub struct Ticket {
    book: Arc<Mutex<Book>>,
    id: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut b = lock(&self.book);
        if let Some(p) = b.running.remove(&self.id) {
            b.recent.push_back((Instant::now(), p));
        }
    }
}

fn lock(m: &Mutex<Book>) -> MutexGuard<'_, Book> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Account {
    pub fn new(budget: Option<InFlightBudget>) -> Self {
        Account {
            budget,
            book: Arc::default(),
        }
    }

    pub fn budget(&self) -> Option<&InFlightBudget> {
        self.budget.as_ref()
    }

    /// Admits a request estimated at `estimate` (its prompt, `prompt_cost`, plus `max_tokens`
    /// output tokens), or says why not; `speed` scales the "recently finished" window as it
    /// scales every delay. `None` when the account has no in-flight budget.
    pub fn admit(
        &self,
        estimate: Usd,
        max_tokens: u64,
        prompt_cost: Usd,
        now: Instant,
        speed: f64,
    ) -> Result<Option<Ticket>, Refusal> {
        let Some(b) = &self.budget else {
            return Ok(None);
        };
        let budget = Usd::from_f64(b.usd);
        let mut book = lock(&self.book);
        if estimate > budget {
            book.refused += 1;
            // What the budget leaves for output once the prompt is paid for.
            let per_token = if max_tokens > 0 {
                (estimate - prompt_cost).pico() as f64 / max_tokens as f64
            } else {
                0.0
            };
            let room = (budget - prompt_cost).pico().max(0) as f64;
            let affordable = if per_token > 0.0 {
                (room / per_token) as u64
            } else {
                0
            };
            return Err(Refusal::TooBig {
                requested: max_tokens,
                affordable,
            });
        }
        let recent = b.recent.mul_f64(speed.max(0.0));
        while book
            .recent
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= recent)
        {
            book.recent.pop_front();
        }
        let in_flight: i64 =
            book.running.values().sum::<i64>() + book.recent.iter().map(|(_, p)| p).sum::<i64>();
        if in_flight + estimate.pico() > budget.pico() {
            book.refused += 1;
            return Err(Refusal::Busy {
                in_flight: Usd::from_pico(in_flight),
                budget,
            });
        }
        book.next += 1;
        let id = book.next;
        book.running.insert(id, estimate.pico());
        Ok(Some(Ticket {
            book: self.book.clone(),
            id,
        }))
    }

    /// Requests refused by the budget so far.
    pub fn refused(&self) -> u64 {
        lock(&self.book).refused
    }

    /// Requests counted as running now.
    pub fn running(&self) -> usize {
        lock(&self.book).running.len()
    }
}

/// An error every chat request gets (while `remaining` lasts), as the API would send it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForcedError {
    /// The HTTP status (for a mid-stream error, the chunk's `code`).
    pub status: u16,
    /// The typed `error_type` (docs: api_reference/errors-and-debugging, typed error codes).
    pub error_type: String,
    /// An availability code (`privacy_restricted`, `constraint_filtered`, ...): the error then
    /// carries `error.availability` as the docs show it.
    #[serde(default)]
    pub availability: Option<String>,
    /// After a few tokens of a 200 stream, as an error chunk with `finish_reason: "error"`.
    #[serde(default)]
    pub mid_stream: bool,
    #[serde(default)]
    pub message: Option<String>,
    /// How many requests get it; unset: every request until cleared.
    #[serde(default)]
    pub remaining: Option<u64>,
    /// The provider OpenRouter blames and its own words (`error.metadata.provider_name` and
    /// `.raw`, as on a real "Provider returned error": tests/fixtures/recorded).
    #[serde(default)]
    pub provider_name: Option<String>,
    #[serde(default)]
    pub raw: Option<String>,
}

impl ForcedError {
    pub fn message(&self) -> String {
        self.message.clone().unwrap_or_else(|| match self.availability.as_deref() {
            Some("privacy_restricted") => {
                "No endpoints available matching your guardrail restrictions and data policy. Configure: https://openrouter.ai/settings/privacy".into()
            }
            Some(code) => format!("No endpoints available ({code})"),
            None => format!("Provider returned error ({})", self.error_type),
        })
    }

    /// The `error` object of the response body or the mid-stream chunk.
    pub fn error_object(&self) -> serde_json::Value {
        let mut err = serde_json::json!({
            "code": self.status,
            "message": self.message(),
            "metadata": {"error_type": self.error_type},
        });
        if let Some(p) = &self.provider_name {
            err["metadata"]["provider_name"] = serde_json::json!(p);
        }
        if let Some(r) = &self.raw {
            err["metadata"]["raw"] = serde_json::json!(r);
        }
        if let Some(code) = &self.availability {
            err["error_type"] = serde_json::json!(self.error_type);
            err["availability"] = serde_json::json!({
                "code": code,
                "retryable": false,
                "excluded_by": if code == "privacy_restricted" { serde_json::json!(["data_policy:zdr"]) } else { serde_json::json!([]) },
            });
        }
        err
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(usd: f64, recent_ms: u64) -> Account {
        Account::new(Some(InFlightBudget {
            usd,
            recent: Duration::from_millis(recent_ms),
            retry_after_s: 2.0,
        }))
    }

    #[test]
    fn running_and_recent_requests_count_until_they_age_out() {
        let a = budget(1.0, 100);
        let t0 = Instant::now();
        let x = a
            .admit(Usd::from_f64(0.6), 100, Usd::ZERO, t0, 1.0)
            .expect("fits")
            .expect("ticket");
        assert!(matches!(
            a.admit(Usd::from_f64(0.5), 100, Usd::ZERO, t0, 1.0),
            Err(Refusal::Busy { .. })
        ));
        drop(x);
        // Finished, but recent: still counted.
        assert!(
            a.admit(Usd::from_f64(0.5), 100, Usd::ZERO, Instant::now(), 1.0)
                .is_err()
        );
        let later = Instant::now() + Duration::from_millis(150);
        assert!(
            a.admit(Usd::from_f64(0.5), 100, Usd::ZERO, later, 1.0)
                .is_ok()
        );
        assert_eq!(a.refused(), 2);
    }

    #[test]
    fn one_request_over_the_whole_budget_is_told_what_it_can_afford() {
        let a = budget(1.0, 0);
        // 10,000 output tokens at $0.0002 each ($2) plus a $0.2 prompt.
        let r = a.admit(
            Usd::from_f64(2.2),
            10_000,
            Usd::from_f64(0.2),
            Instant::now(),
            1.0,
        );
        assert_eq!(
            r.err(),
            Some(Refusal::TooBig {
                requested: 10_000,
                affordable: 4_000
            })
        );
        assert!(
            Account::new(None)
                .admit(Usd::from_f64(1e6), 1, Usd::ZERO, Instant::now(), 1.0)
                .expect("no budget")
                .is_none()
        );
    }
}
