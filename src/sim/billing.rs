//! The simulator's ground truth: what it billed (the log tests compare harvest's ledger
//! against), which endpoint each request was routed to, and recent generations for
//! `GET /generation`. Memory is bounded: logs keep the most recent entries, totals are exact.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::domain::Usd;

/// Recent entries kept in memory for `/sim/requests`, `/sim/billing` and `/generation`.
pub(crate) const LOG_CAPACITY: usize = 200_000;

/// How a billed generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Complete,
    /// The client closed the connection before the end.
    Cancelled,
}

/// One line of the billing log.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BillingEntry {
    pub id: String,
    pub at: String,
    pub tag: String,
    pub provider: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub reasoning_tokens: u64,
    pub cost_usd: Usd,
    pub outcome: Outcome,
    pub streamed: bool,
    pub finish_reason: Option<String>,
    pub latency_ms: u64,
}

/// One routed attempt: the request log that proves where requests went.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RequestEntry {
    pub seq: u64,
    /// Milliseconds since the simulator started, when the request reached the endpoint.
    pub at_ms: u64,
    pub tag: String,
    /// HTTP status answered (200 for streams, even those that fail later).
    pub status: u16,
    /// `ok`, `rate_limit`, `server_error`, `mid_stream`, `stall`, `reset`, `empty`, `truncate`.
    pub fault: String,
    pub prompt_hash: u64,
    /// The request's JSON body as received, when the simulator logs bodies (`--log-bodies`):
    /// tests compare it with what a row says was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
}

/// Per-endpoint sums.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct EndpointTotals {
    pub requests: u64,
    pub billed: u64,
    pub cancelled: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: Usd,
}

#[derive(Default)]
struct Inner {
    total: Usd,
    per_tag: HashMap<String, EndpointTotals>,
    billing: VecDeque<BillingEntry>,
    requests: VecDeque<RequestEntry>,
    next_seq: u64,
    generations: HashMap<String, (BillingEntry, std::time::Instant)>,
    generation_order: VecDeque<String>,
    file: Option<std::io::BufWriter<std::fs::File>>,
}

/// Shared by all request handlers; one short lock per billed or routed request.
#[derive(Default)]
pub struct Billing {
    inner: Mutex<Inner>,
}

fn push_bounded<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() >= LOG_CAPACITY {
        q.pop_front();
    }
    q.push_back(v);
}

impl Billing {
    /// Also appends every billing entry as a JSON line to `path`.
    pub fn with_log_file(path: &Path) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let b = Billing::default();
        b.lock().file = Some(std::io::BufWriter::new(f));
        Ok(b)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn record_request(
        &self,
        at_ms: u64,
        tag: &str,
        status: u16,
        fault: &str,
        prompt_hash: u64,
    ) {
        self.record_request_with_body(at_ms, tag, status, fault, prompt_hash, None);
    }

    /// [`Billing::record_request`], keeping the request's body.
    pub fn record_request_with_body(
        &self,
        at_ms: u64,
        tag: &str,
        status: u16,
        fault: &str,
        prompt_hash: u64,
        body: Option<serde_json::Value>,
    ) {
        let mut g = self.lock();
        let seq = g.next_seq;
        g.next_seq += 1;
        g.per_tag.entry(tag.to_string()).or_default().requests += 1;
        push_bounded(
            &mut g.requests,
            RequestEntry {
                seq,
                at_ms,
                tag: tag.to_string(),
                status,
                fault: fault.to_string(),
                prompt_hash,
                body,
            },
        );
    }

    pub fn bill(&self, entry: BillingEntry) {
        self.bill_ending_in(entry, std::time::Duration::ZERO);
    }

    /// Bills `entry` now, for a generation the provider goes on with for `ends_in`:
    /// `/generation` knows it only from then (its stats are recorded when it ends).
    pub fn bill_ending_in(&self, entry: BillingEntry, ends_in: std::time::Duration) {
        let mut g = self.lock();
        g.total += entry.cost_usd;
        let t = g.per_tag.entry(entry.tag.clone()).or_default();
        t.billed += 1;
        if entry.outcome == Outcome::Cancelled {
            t.cancelled += 1;
        }
        t.prompt_tokens += entry.prompt_tokens;
        t.completion_tokens += entry.completion_tokens;
        t.cost_usd += entry.cost_usd;
        if let Some(f) = g.file.as_mut() {
            // The log is a test instrument: a failed write is reported, not fatal.
            let line = serde_json::to_string(&entry).unwrap_or_default();
            if writeln!(f, "{line}").and_then(|_| f.flush()).is_err() {
                tracing::warn!("simulator billing log write failed");
            }
        }
        if g.generation_order.len() >= LOG_CAPACITY
            && let Some(old) = g.generation_order.pop_front()
        {
            g.generations.remove(&old);
        }
        g.generation_order.push_back(entry.id.clone());
        g.generations.insert(
            entry.id.clone(),
            (entry.clone(), std::time::Instant::now() + ends_in),
        );
        push_bounded(&mut g.billing, entry);
    }

    pub fn total(&self) -> Usd {
        self.lock().total
    }

    pub fn per_tag(&self) -> HashMap<String, EndpointTotals> {
        self.lock().per_tag.clone()
    }

    /// Routed requests with `seq >= since`.
    pub fn requests_since(&self, since: u64) -> Vec<RequestEntry> {
        let g = self.lock();
        g.requests
            .iter()
            .filter(|r| r.seq >= since)
            .cloned()
            .collect()
    }

    pub fn billing_entries(&self) -> Vec<BillingEntry> {
        self.lock().billing.iter().cloned().collect()
    }

    /// Billed generations their providers are still running (`/generation` does not know them
    /// yet).
    pub fn running_generations(&self) -> usize {
        let now = std::time::Instant::now();
        (self.lock().generations.values())
            .filter(|(_, ends)| *ends > now)
            .count()
    }

    /// A generation that has ended, and how long ago.
    pub fn generation(&self, id: &str) -> Option<(BillingEntry, std::time::Duration)> {
        let g = self.lock();
        let (e, ended) = g.generations.get(id)?;
        let ago = std::time::Instant::now().checked_duration_since(*ended)?;
        Some((e.clone(), ago))
    }
}
