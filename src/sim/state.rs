//! The simulator's state: the provider table and its live behaviour (speed, faults, lengths),
//! the account, the billing, what is in flight, and the control that changes them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::domain::Usd;

use crate::sim::billing::{Billing, BillingEntry, EndpointTotals, RequestEntry};
use crate::sim::faults::FaultMix;
use crate::sim::generate::Vocabulary;
use crate::sim::table::{ProviderTable, SimBehaviour};
use crate::sim::{SimConfig, SimError};

/// Events formatted into one write at most (at full speed).
pub(crate) const MAX_BATCH: u64 = 64;
/// Longest a stalled stream hangs before the simulator gives up on it.
pub(crate) const STALL_LIMIT: Duration = Duration::from_secs(600);

/// Settings that `POST /sim/control` can change while the simulator runs.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Live {
    pub(crate) speed_scale: f64,
    /// Send `X-Generation-Id` (see [`SimConfig::generation_header`]).
    pub(crate) generation_header: bool,
    pub(crate) output_mean: f64,
    pub(crate) output_sigma: f64,
    /// `GET /generation` answers 404 for this long after a generation ends (see
    /// [`SimConfig::generation_visible_after`]).
    #[serde(serialize_with = "ms")]
    pub(crate) generation_visible_after: Duration,
    /// `GET /generation` reports each generation's `total_cost` times this (1: the bill): a
    /// hostile or buggy gateway at `--base-url`, as the fifth probe's P3 planted one (a
    /// negative cost, or far above what the attempt could be billed). The bill is unchanged.
    pub(crate) generation_cost_factor: f64,
    pub(crate) behaviours: Vec<SimBehaviour>,
}

fn ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

/// Everything the handlers share.
pub struct SimState {
    pub(crate) cfg: SimConfig,
    pub(crate) live: RwLock<Live>,
    pub(crate) in_flight: Vec<AtomicU32>,
    /// Times each prompt was seen, so a retry gets a fresh (but deterministic) draw.
    pub(crate) seen: Mutex<HashMap<u64, u32>>,
    pub billing: Billing,
    pub(crate) started: Instant,
    pub(crate) ids: AtomicU64,
    pub(crate) vocab: Vocabulary,
    pub(super) stopping: CancellationToken,
    /// The in-flight budget's live estimates.
    pub account: super::account::Account,
    /// An error forced on every chat request (see `ControlRequest::force_error`).
    pub(crate) forced: Mutex<Option<super::account::ForcedError>>,
    /// System prompts each endpoint has seen: sent again there, they are read from its cache.
    pub(crate) cached: Mutex<std::collections::HashSet<(usize, u64)>>,
    /// Chat requests by the HTTP version they came in (HTTP/1.1, HTTP/2 over TLS).
    pub(crate) http1_requests: AtomicU64,
    pub(crate) http2_requests: AtomicU64,
    /// Connections clients opened (over TLS: handshakes completed), so a benchmark can set a
    /// protocol's connection count and handshakes beside its CPU.
    pub(crate) connections: AtomicU64,
}

/// A change to one endpoint's behaviour: present fields replace the current ones.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointPatch {
    pub ttft_ms: Option<f64>,
    pub tokens_per_s: Option<f64>,
    pub capacity: Option<Option<u32>>,
    pub cancel_stops_billing: Option<bool>,
    /// A whole fault mix.
    pub faults: Option<FaultMix>,
    /// A `name=value,...` spec applied on top of the current mix.
    pub faults_spec: Option<String>,
    pub divergence: Option<f64>,
    pub reasoning_format: Option<super::table::ReasoningFormat>,
    pub down: Option<bool>,
    pub tokens_per_event: Option<super::table::TokensPerEvent>,
    pub close_notice_ms: Option<f64>,
}

/// Body of `POST /sim/control`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ControlRequest {
    pub speed_scale: Option<f64>,
    /// Send the `X-Generation-Id` header (the chunks' `id` carries the id either way).
    pub generation_header: Option<bool>,
    pub output_tokens_mean: Option<f64>,
    pub output_tokens_sigma: Option<f64>,
    /// How long `GET /generation` answers 404 after a generation ends, in milliseconds: the
    /// real API "often returns 404 briefly after completion" (openrouter.ai/docs, the
    /// generation endpoint; ../shared/research/openrouter-api.md §8), and a probe saw it lag
    /// for minutes; a crash's look-ups are tested against a long lag.
    pub generation_lag_ms: Option<u64>,
    /// `GET /generation` reports `total_cost` times this from now on (1: the bill; -1 or
    /// 1000: a gateway that lies, as the fifth probe's P3 did). The bill is unchanged.
    pub generation_cost_factor: Option<f64>,
    /// Applied to every endpoint.
    pub all: Option<EndpointPatch>,
    /// Per endpoint tag.
    #[serde(default)]
    pub endpoints: HashMap<String, EndpointPatch>,
    /// Every chat request fails with this error (while its `remaining` lasts).
    #[serde(default)]
    pub force_error: Option<super::account::ForcedError>,
    /// Stops forcing an error.
    #[serde(default)]
    pub clear_forced_error: bool,
}

impl EndpointPatch {
    pub(crate) fn apply(&self, b: &mut SimBehaviour) -> Result<(), String> {
        if let Some(v) = self.ttft_ms {
            b.ttft_ms = v.max(0.0);
        }
        if let Some(v) = self.tokens_per_s {
            if v.is_nan() || v <= 0.0 {
                return Err("tokens_per_s must be > 0".into());
            }
            b.tokens_per_s = v;
        }
        if let Some(v) = self.capacity {
            b.capacity = v;
        }
        if let Some(v) = self.cancel_stops_billing {
            b.cancel_stops_billing = v;
        }
        if let Some(f) = &self.faults {
            f.validate()?;
            b.faults = f.clone();
        }
        if let Some(s) = &self.faults_spec {
            b.faults.apply_spec(s)?;
        }
        if let Some(v) = self.reasoning_format {
            b.reasoning_format = v;
        }
        if let Some(v) = self.divergence {
            b.divergence = v.clamp(0.0, 1.0);
        }
        if let Some(v) = self.down {
            b.down = v;
        }
        if let Some(v) = self.tokens_per_event {
            // Through the same checks as the command line's.
            b.tokens_per_event = match v {
                super::table::TokensPerEvent::Fixed(n) => n.to_string(),
                super::table::TokensPerEvent::Mean(m) => format!("mean:{m}"),
            }
            .parse()?;
        }
        if let Some(v) = self.close_notice_ms {
            if !v.is_finite() || v < 0.0 {
                return Err("close_notice_ms must be a number >= 0".into());
            }
            b.close_notice_ms = v;
        }
        Ok(())
    }
}

impl SimState {
    pub(super) fn new(cfg: SimConfig) -> Result<Self, SimError> {
        let billing = match &cfg.billing_log {
            Some(p) => Billing::with_log_file(p).map_err(|source| SimError::BillingLog {
                path: p.display().to_string(),
                source,
            })?,
            None => Billing::default(),
        };
        let live = Live {
            speed_scale: cfg.speed_scale.max(0.0),
            generation_header: cfg.generation_header,
            output_mean: cfg.table.output_tokens.mean,
            output_sigma: cfg.table.output_tokens.sigma,
            generation_visible_after: cfg.generation_visible_after,
            generation_cost_factor: 1.0,
            behaviours: cfg
                .table
                .endpoints
                .iter()
                .map(|e| e.behaviour.clone())
                .collect(),
        };
        let in_flight = cfg
            .table
            .endpoints
            .iter()
            .map(|_| AtomicU32::new(0))
            .collect();
        Ok(SimState {
            account: super::account::Account::new(cfg.inflight_budget.clone()),
            forced: Mutex::new(None),
            cached: Mutex::new(std::collections::HashSet::new()),
            http1_requests: AtomicU64::new(0),
            http2_requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            cfg,
            live: RwLock::new(live),
            in_flight,
            seen: Mutex::new(HashMap::new()),
            billing,
            started: Instant::now(),
            ids: AtomicU64::new(0),
            vocab: Vocabulary::new(),
            stopping: CancellationToken::new(),
        })
    }

    pub(crate) fn live(&self) -> std::sync::RwLockReadGuard<'_, Live> {
        self.live.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn table(&self) -> &ProviderTable {
        &self.cfg.table
    }

    /// Applies a control request (the same as `POST /sim/control`).
    pub fn control(&self, req: &ControlRequest) -> Result<(), String> {
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        let mut next = live.clone();
        if let Some(s) = req.speed_scale {
            next.speed_scale = s.max(0.0);
        }
        if let Some(g) = req.generation_header {
            next.generation_header = g;
        }
        if let Some(m) = req.output_tokens_mean {
            next.output_mean = m.max(1.0);
        }
        if let Some(s) = req.output_tokens_sigma {
            next.output_sigma = s.clamp(0.0, 3.0);
        }
        if let Some(ms) = req.generation_lag_ms {
            next.generation_visible_after = Duration::from_millis(ms);
        }
        if let Some(f) = req.generation_cost_factor {
            if !f.is_finite() {
                return Err("generation_cost_factor must be a number".into());
            }
            next.generation_cost_factor = f;
        }
        if let Some(all) = &req.all {
            for b in &mut next.behaviours {
                all.apply(b)?;
            }
        }
        for (tag, patch) in &req.endpoints {
            let i = self
                .cfg
                .table
                .endpoints
                .iter()
                .position(|e| e.tag.as_str() == tag)
                .ok_or_else(|| format!("no endpoint with tag {tag:?}"))?;
            patch.apply(&mut next.behaviours[i])?;
        }
        *live = next;
        let mut forced = self.forced.lock().unwrap_or_else(|p| p.into_inner());
        if req.clear_forced_error {
            *forced = None;
        }
        if let Some(f) = &req.force_error {
            *forced = Some(f.clone());
        }
        Ok(())
    }

    /// The forced error this request gets, if any (counting down its `remaining`).
    pub(crate) fn take_forced(&self) -> Option<super::account::ForcedError> {
        let mut forced = self.forced.lock().unwrap_or_else(|p| p.into_inner());
        let f = forced.as_mut()?;
        let out = f.clone();
        if let Some(n) = f.remaining.as_mut() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                *forced = None;
            }
        }
        Some(out)
    }

    /// Requests streaming now, at every endpoint together.
    pub fn in_flight_total(&self) -> u32 {
        self.in_flight
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum()
    }

    /// A client opened a connection (over TLS: finished its handshake).
    pub(super) fn count_connection(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections clients opened so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Chat requests that came over HTTP/1.x and over HTTP/2.
    pub fn requests_by_http_version(&self) -> (u64, u64) {
        (
            self.http1_requests.load(Ordering::Relaxed),
            self.http2_requests.load(Ordering::Relaxed),
        )
    }

    /// Total billed, the figure `/key` reports as usage.
    pub fn billed_total(&self) -> Usd {
        self.billing.total()
    }

    pub fn requests_since(&self, since: u64) -> Vec<RequestEntry> {
        self.billing.requests_since(since)
    }

    pub fn billing_per_tag(&self) -> HashMap<String, EndpointTotals> {
        self.billing.per_tag()
    }

    /// Billed generations their providers are still running: `/generation` learns of them
    /// when they end.
    pub fn running_generations(&self) -> usize {
        self.billing.running_generations()
    }

    pub fn billing_entries(&self) -> Vec<BillingEntry> {
        self.billing.billing_entries()
    }

    /// Streams open right now at each endpoint, by tag.
    pub fn in_flight(&self) -> Vec<(String, u32)> {
        self.cfg
            .table
            .endpoints
            .iter()
            .zip(&self.in_flight)
            .map(|(e, n)| (e.tag.to_string(), n.load(Ordering::Relaxed)))
            .collect()
    }

    pub(super) fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub(crate) fn occurrence(&self, h: u64) -> u32 {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() > 2_000_000 {
            seen.clear();
        }
        let n = seen.entry(h).or_insert(0);
        let k = *n;
        *n += 1;
        k
    }
}
