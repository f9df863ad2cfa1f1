//! What every worker shares with the driver: the API client and the own servers' clients, the
//! run's endpoint pool (which grows when the listing shows a new endpoint), the writer for
//! `started` lines, the live money ([`LiveMoney`]: spent, accrued, the dollar cap) and the views'
//! counters, with the one place that adds what the driver saw to them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::openrouter::{ErrorKind, OpenRouterClient, StreamTimeouts};

use super::endpoint::RunEndpoint;
use super::live_money::LiveMoney;
use super::stats::Counters;
use crate::answer_shape::Shape;

/// What every worker shares with the supervisor.
pub(crate) struct Shared {
    pub client: OpenRouterClient,
    /// The clients of the operator's own servers (`[[endpoint]]`), by endpoint tag.
    pub own_clients: HashMap<String, OpenRouterClient>,
    /// The endpoints of the run; grows when the listing shows a new one (read with
    /// [`Shared::endpoints`]).
    pub endpoint_list: std::sync::RwLock<Arc<Vec<RunEndpoint>>>,
    /// For the `started` ledger line of each generation.
    pub writer: crate::store::writer::Writer,
    /// Display name → endpoint index, for attributing OpenRouter-routed responses.
    pub by_provider: std::sync::RwLock<HashMap<String, usize>>,
    pub endpoint_stats: Vec<Counters>,
    pub dataset_stats: Vec<Counters>,
    pub totals: Counters,
    /// Spent, accrued, the dollar cap's sum and its alarm.
    pub money: LiveMoney,
    pub timeouts: StreamTimeouts,
    pub total_timeout: Duration,
    pub attempts_started: AtomicU64,
    /// Streams let run past the dollar cap because closing them would not stop the bill.
    pub finishing_past_cap: AtomicU64,
    /// The run's bytes of text a token (`RunEndpoint::bytes_per_token`, the same at every
    /// endpoint), as `f64` bits: what a stream is counted by until its endpoint's tokens an
    /// event are learned. Every wake-up of a stream reads it, so that one begun under the prior
    /// is counted by the learned figure from then on (read once at its first chunk, the first
    /// wave of a run was counted five times too high to its end, and so were its closes).
    pub text_bytes_per_token: AtomicU64,
}

impl Shared {
    /// The run's bytes of text a token, as the workers count by it now.
    pub(crate) fn bytes_per_token(&self) -> f64 {
        f64::from_bits(self.text_bytes_per_token.load(Ordering::Relaxed))
    }

    pub(crate) fn endpoint_by_provider(&self, name: &str) -> Option<usize> {
        self.by_provider
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied()
    }

    /// The endpoint a response naming provider `name` came from, among `over` (where its
    /// request could go): a provider listed under several tags (`together` and
    /// `together/int4`) is told apart by the set the request allowed. Else by name alone.
    pub(crate) fn endpoint_serving(&self, name: &str, over: &[usize]) -> Option<usize> {
        let eps = self.endpoints();
        over.iter()
            .copied()
            .find(|&i| {
                eps.get(i)
                    .is_some_and(|e| e.provider.eq_ignore_ascii_case(name))
            })
            .or_else(|| self.endpoint_by_provider(name))
    }

    /// The endpoints as they are now (a cheap shared copy).
    pub(crate) fn endpoints(&self) -> Arc<Vec<RunEndpoint>> {
        self.endpoint_list
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Puts endpoint `i`'s new entry (new prices) in the pool the workers read.
    pub(crate) fn replace_endpoint(&self, i: usize, e: RunEndpoint) {
        let mut list = self
            .endpoint_list
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if i < list.len() {
            (self.text_bytes_per_token).store(e.bytes_per_token.to_bits(), Ordering::Relaxed);
            let mut next = list.as_ref().clone();
            next[i] = e;
            *list = Arc::new(next);
        }
    }

    /// Adds an endpoint the listing newly shows, when a statistics slot is free; its index.
    pub(crate) fn add_endpoint(&self, e: RunEndpoint) -> Option<usize> {
        let mut list = self
            .endpoint_list
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if list.len() >= self.endpoint_stats.len() {
            return None;
        }
        let mut next = list.as_ref().clone();
        let i = next.len();
        self.by_provider
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(e.provider.clone())
            .or_insert(i);
        next.push(e);
        *list = Arc::new(next);
        Some(i)
    }
}

/// The views' counters follow the attempts: one place that adds what the driver saw.
impl Shared {
    /// An attempt left: in flight for its dataset, the totals and, when pinned, its endpoint
    /// (OpenRouter-routed ones count at their endpoint once the stream names it).
    pub(crate) fn count_dispatch(&self, dataset: usize, pinned: Option<usize>) {
        for c in [&self.totals, &self.dataset_stats[dataset]] {
            c.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(e) = pinned {
            self.endpoint_stats[e]
                .in_flight
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An attempt came back: no longer in flight; an answer's tokens, truncation and timings,
    /// or a failure's kind, at the totals, its dataset and the endpoint that served. (What it
    /// cost goes where its ledger line says: `core::books`.)
    pub(crate) fn count_result(
        &self,
        r: &super::core::attempt::AttemptResult,
        dataset: usize,
        pinned: Option<usize>,
    ) {
        use super::core::attempt::AttemptOutcome;
        for c in [&self.totals, &self.dataset_stats[dataset]] {
            c.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(e) = pinned {
            self.endpoint_stats[e]
                .in_flight
                .fetch_sub(1, Ordering::Relaxed);
        }
        let at = r.endpoint.map(|e| &self.endpoint_stats[e]);
        let counters = [Some(&self.totals), Some(&self.dataset_stats[dataset]), at];
        match &r.outcome {
            AttemptOutcome::Done(c) => {
                let shape = Shape::of_completion(c);
                for k in counters.into_iter().flatten() {
                    k.prompt_tokens
                        .fetch_add(c.usage.prompt_tokens, Ordering::Relaxed);
                    k.output_tokens
                        .fetch_add(c.usage.completion_tokens, Ordering::Relaxed);
                    // An empty answer is paid for and counted as the endpoint's failure, as
                    // the core's breaker counts it; any other is an answer.
                    if shape == Shape::Empty {
                        k.error(ErrorKind::Empty);
                    } else {
                        k.answers.fetch_add(1, Ordering::Relaxed);
                    }
                    if shape.is_cut() {
                        k.truncated.fetch_add(1, Ordering::Relaxed);
                    }
                    if matches!(shape, Shape::CutThinking { .. }) {
                        k.cut_thinking.fetch_add(1, Ordering::Relaxed);
                    }
                    k.record_timing(
                        c.ttft.map(|t| t.as_millis() as u64),
                        r.elapsed.as_millis() as u64,
                    );
                }
            }
            AttemptOutcome::Failed(err) => {
                for k in counters.into_iter().flatten() {
                    k.error(err.kind());
                }
            }
            AttemptOutcome::Cancelled | AttemptOutcome::Checked => {}
        }
    }

    /// An answer was kept (written to the outputs).
    pub(crate) fn count_kept(&self, dataset: usize, endpoint: Option<usize>) {
        let at = endpoint.map(|e| &self.endpoint_stats[e]);
        for c in [Some(&self.totals), Some(&self.dataset_stats[dataset]), at]
            .into_iter()
            .flatten()
        {
            c.done.fetch_add(1, Ordering::Relaxed);
        }
    }
}
