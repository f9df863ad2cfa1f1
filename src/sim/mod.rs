//! The OpenRouter simulator: an axum server on 127.0.0.1 that serves `/api/v1/models`,
//! `/models/{author}/{slug}/endpoints`, `/chat/completions` (streaming and not), `/key`,
//! `/generation` and `/credits` from a provider table, with each provider's price, latency,
//! decode speed, capacity and failure mix, and a billing log that is the ground truth tests
//! compare harvest's ledger against. Deterministic for a seed (per prompt, whatever the
//! interleaving). Used by `harvest sim`, `harvest demo`, the tests and the benchmarks.
//!
//! Billing rules: a completed response is billed at the serving endpoint's price; a response
//! the client cancels is billed for the tokens sent when the endpoint stops billing on cancel,
//! in full otherwise; provider-side failures (errors, resets, truncations) are not billed.
//!
//! Control routes (not part of OpenRouter): `GET /sim/state`, `POST /sim/control`,
//! `GET /sim/requests?since=N`, `GET /sim/billing`.
//!
//! Plain HTTP/1.1 by default; with [`SimConfig::tls`] HTTPS with HTTP/2 or HTTP/1.1 by ALPN,
//! as the real API is served ([`tls`]).

pub(crate) mod account;
mod auth;
pub(crate) mod billing;
mod chat;
mod errors;
pub(crate) mod faults;
pub(crate) mod generate;
pub mod replay;
mod routes;
pub(crate) mod routing;
mod state;
pub(crate) mod table;
pub(crate) mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use account::{ForcedError, InFlightBudget};
pub use billing::{BillingEntry, EndpointTotals, Outcome, RequestEntry};
pub use faults::FaultMix;
pub use state::{ControlRequest, EndpointPatch, SimState};
pub use table::{ProviderTable, SimBehaviour, TokensPerEvent};

/// How to run a simulator.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    /// Multiplies every artificial delay: 1.0 is real pace, 0.0 serves as fast as possible.
    pub speed_scale: f64,
    pub table: ProviderTable,
    /// Append every billed generation as JSON to this file.
    pub billing_log: Option<PathBuf>,
    /// When set, requests must carry exactly this bearer token; otherwise any non-empty one.
    pub api_key: Option<String>,
    /// Accept requests with no key at all, as a local server does (tests of own endpoints).
    pub open_access: bool,
    /// A credit limit on the key, in USD: past it, requests get 402.
    pub key_limit_usd: Option<f64>,
    /// Chop some SSE writes at random byte offsets (even inside a UTF-8 character).
    pub split_writes: bool,
    /// Shortest interval between two writes of one stream at real pace (tokens due meanwhile
    /// go out together).
    pub min_tick: Duration,
    /// `GET /generation` answers 404 for this long after a generation ends (a real quirk).
    pub generation_visible_after: Duration,
    /// The account's in-flight spending budget (see [`account`]); none by default.
    pub inflight_budget: Option<InFlightBudget>,
    /// Keep each routed request's JSON body in the request log (`/sim/requests`).
    pub log_bodies: bool,
    /// Serve HTTPS (HTTP/2 and HTTP/1.1 by ALPN) with a certificate made at start.
    pub tls: bool,
    /// Over HTTPS, the HTTP/2 streams one connection may carry at once.
    pub h2_max_streams: u32,
    /// Send the `X-Generation-Id` response header. The real API's recorded chat responses
    /// carry none (tests/fixtures/recorded/README.md): the id is in every chunk's `id`.
    pub generation_header: bool,
    /// Answer chat completions with recorded real responses (`harvest sim --replay DIR`).
    pub replay: Option<std::sync::Arc<replay::Replay>>,
}

impl SimConfig {
    pub fn new(table: ProviderTable) -> Self {
        SimConfig {
            seed: 0,
            speed_scale: 1.0,
            table,
            billing_log: None,
            api_key: None,
            open_access: false,
            key_limit_usd: None,
            split_writes: true,
            min_tick: Duration::from_millis(25),
            generation_visible_after: Duration::from_millis(300),
            inflight_budget: None,
            log_bodies: false,
            tls: false,
            h2_max_streams: tls::DEFAULT_H2_MAX_STREAMS,
            generation_header: true,
            replay: None,
        }
    }

    /// The Kimi K2.5 table, seed 0, as fast as possible, no faults: for tests.
    pub fn fast_no_faults() -> Self {
        Self::fast_no_faults_with(ProviderTable::kimi_k25())
    }

    /// [`SimConfig::fast_no_faults`] over another table.
    pub fn fast_no_faults_with(mut table: ProviderTable) -> Self {
        for e in &mut table.endpoints {
            e.behaviour.faults = FaultMix::none();
            e.behaviour.capacity = None;
        }
        let mut c = SimConfig::new(table);
        c.speed_scale = 0.0;
        c.generation_visible_after = Duration::ZERO;
        c
    }

    /// Applies a `--faults` spec to every endpoint.
    pub fn apply_faults_to_all(&mut self, spec: &str) -> Result<(), String> {
        for e in &mut self.table.endpoints {
            e.behaviour.faults.apply_spec(spec)?;
        }
        Ok(())
    }
}

/// A running simulator.
pub struct SimHandle {
    pub addr: SocketAddr,
    pub state: Arc<SimState>,
    /// Over HTTPS: the certificate authority clients must trust, PEM.
    pub ca_pem: Option<String>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl SimHandle {
    /// `http://127.0.0.1:PORT/api/v1` (or `https://`), the base URL clients use.
    pub fn base_url(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}/api/v1", self.addr)
    }

    /// Stops accepting, lets open responses end, and waits.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }

    /// Waits until the server stops (Ctrl-C in `harvest sim`).
    pub async fn wait(self) {
        let _ = self.task.await;
    }

    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot make the simulator's TLS certificate: {0}")]
    Tls(String),
    #[error("cannot open billing log {path}: {source}")]
    BillingLog {
        path: String,
        source: std::io::Error,
    },
}

/// Starts a simulator on `127.0.0.1:port` (0 for any free port).
pub async fn start(cfg: SimConfig, port: u16) -> Result<SimHandle, SimError> {
    let addr = format!("127.0.0.1:{port}");
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|source| SimError::Bind { addr, source })?;
    start_on(cfg, listener)
}

/// Starts a simulator on a listener the caller bound.
pub fn start_on(cfg: SimConfig, listener: TcpListener) -> Result<SimHandle, SimError> {
    let addr = listener.local_addr().map_err(|source| SimError::Bind {
        addr: "listener".into(),
        source,
    })?;
    let tls = if cfg.tls {
        Some(tls::generate().map_err(SimError::Tls)?)
    } else {
        None
    };
    let h2_max_streams = cfg.h2_max_streams;
    let state = Arc::new(SimState::new(cfg)?);
    // Stopping the server also ends paced and stalled responses, so shutdown never hangs.
    let shutdown = state.stopping.clone();
    let app = routes::router(state.clone());
    let token = shutdown.clone();
    let ca_pem = tls.as_ref().map(|t| t.ca_pem.clone());
    let state_for_count = state.clone();
    let task = match tls {
        Some(tls) => tokio::spawn(tls::serve(
            listener,
            app,
            tls,
            h2_max_streams,
            state.clone(),
            token,
        )),
        None => tokio::spawn(async move {
            use axum::serve::ListenerExt;
            let counted = state_for_count.clone();
            let listener = listener.tap_io(move |_| counted.count_connection());
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                token.cancelled().await;
            });
            if let Err(e) = serve.await {
                tracing::error!("simulator stopped: {e}");
            }
        }),
    };
    Ok(SimHandle {
        addr,
        state,
        ca_pem,
        shutdown,
        task,
    })
}
