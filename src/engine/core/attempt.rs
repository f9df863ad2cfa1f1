//! One attempt, as the core and the worker exchange it: the [`Dispatch`] the core hands out
//! (what to send, where, at what prices) and the [`AttemptResult`] the worker hands back (how
//! it ended, where, and what it cost so far). Plain data.

use std::time::Duration;

use crate::domain::{Price, Usd};
use crate::openrouter::{ApiError, ChatRequest, Completion};
use crate::store::output::SpendEntry;

/// One attempt to start.
#[derive(Debug)]
pub(crate) struct Dispatch {
    pub key: u64,
    pub dataset: usize,
    pub prompt_id: String,
    /// `<run>-<n>`: ties the attempt's ledger lines together.
    pub attempt: String,
    pub request: ChatRequest,
    /// The endpoint it is pinned to (pinned routing, own servers).
    pub pinned: Option<usize>,
    pub price_in: Price,
    pub price_out: Price,
    /// The request fee, paid once the provider has the prompt.
    pub fee: Usd,
    /// The endpoints it may reach.
    pub over: Vec<usize>,
    pub prompt_tokens: u64,
    /// Close it after [`super::cancel_check::CHECK_AFTER_TOKENS`] tokens: it checks whether a
    /// close stops its endpoint's bill ([`AttemptOutcome::Checked`]).
    pub check: bool,
    /// Its worst case, held against the dollar cap while it streams: it runs to its end at the
    /// cap (billed in full when closed, under the hard budget). Zero for a stream the cap closes.
    pub held_worst: Usd,
    /// The `dispatched` line, written before the request leaves.
    pub ledger: SpendEntry,
}

impl Dispatch {
    /// The attempt's `started` line, written when its generation `g` is known (its first
    /// chunk), served at the endpoint tagged `endpoint` when known: a crash after it leaves the
    /// attempt open with a generation the next start looks up.
    pub(crate) fn started_line(&self, g: &str, endpoint: Option<String>, at: String) -> SpendEntry {
        SpendEntry {
            endpoint,
            prompt_tokens: self.prompt_tokens,
            estimated: true,
            generation_id: Some(g.to_string()),
            attempt: Some(self.attempt.clone()),
            ..SpendEntry::new(
                crate::store::output::SpendKind::Started,
                at,
                self.prompt_id.clone(),
                self.ledger.dataset.clone(),
            )
        }
    }
}

/// How one attempt ended.
#[derive(Debug)]
pub(crate) enum AttemptOutcome {
    Done(Box<Completion>),
    Failed(ApiError),
    /// We closed it: stop-now or the dollar cap.
    Cancelled,
    /// A worker closed it after a few tokens, as the core asked ([`Dispatch::check`]), to see
    /// whether a close stops its endpoint's bill.
    Checked,
}

#[derive(Debug)]
pub(crate) struct AttemptResult {
    pub key: u64,
    pub outcome: AttemptOutcome,
    /// The endpoint that served (pinned, or named by the stream), when known.
    pub endpoint: Option<usize>,
    pub streamed_tokens: u64,
    /// The whole output tokens received (events and text at the endpoint's tokens an event):
    /// what its running cost accrued by.
    pub received_tokens: u64,
    /// What the worker booked into the confirmed spend: the reported cost of a finished
    /// response, our estimate for one we closed (cancelled, timed out), zero otherwise.
    pub booked_pico: i64,
    /// The generation id, for looking up later what a closed stream really cost.
    pub generation_id: Option<String>,
    pub elapsed: Duration,
}
