//! Starting a run: the preflight (key, lock, manifest), what the output directory holds (resume,
//! damage, crash leftovers), one read of each prompt file (counts, bad lines, duplicate ids),
//! the model's listing and the endpoint pool, the policy's check that something may serve, and
//! the shared state the workers and the supervisor use. Then the supervisor is spawned.
//!
//! `ready.rs` reads and checks (shared with `run --check`, `check.rs`); `datasets.rs` readies
//! each dataset; `marks.rs` checks and records the prompt files' marks in the manifest;
//! `second_chance.rs` does `--retry-*`'s moves; `preflight.rs` says what the
//! policy, the account and the endpoints make of the run; this file starts it.

mod check;
mod datasets;
mod marks;
mod preflight;
mod ready;
mod second_chance;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::config::Config;
use crate::domain::Usd;
use crate::openrouter::OpenRouterClient;
use crate::store::writer::Writer;

use super::endpoint::RunEndpoint;
use super::live_money::LiveMoney;
use super::shared::Shared;
use super::stats::Counters;
use super::{EngineError, EngineHandle, RunOptions, supervisor};

pub use check::{CheckDataset, CheckReport, check};
use datasets::*;
use preflight::*;
use ready::*;
pub(super) use second_chance::restore_superseded;
use second_chance::*;

/// Endpoints that may join a run when the listing shows them (statistics slots kept free).
const SPARE_ENDPOINTS: usize = 32;

/// Starts a run: checks everything that can be checked before a request leaves, then spawns
/// the supervisor. Bad input is [`EngineError::Input`] (exit code 2).
pub async fn start(cfg: Config, opts: RunOptions) -> Result<EngineHandle, EngineError> {
    let r = ready(cfg, &opts, Mode::Run).await?;
    let dir_lock =
        (r.lock).ok_or_else(|| EngineError::Startup("the output directory's lock".into()))?;
    let key_usage_start = r.key.as_ref().map(|k| k.usage);
    let (writer, writer_thread) =
        Writer::start(&r.dir, &r.names).map_err(|e| EngineError::Input(e.to_string()))?;
    let shared = shared(
        &r.cfg,
        (r.endpoints, r.own_clients),
        r.datasets.len(),
        &writer,
        &r.client,
        r.carried,
    );
    let mut sup = supervisor::Supervisor::new(supervisor::Launch {
        cfg: r.cfg,
        shared,
        writer,
        datasets: r.datasets,
        carried_over: r.carried,
        carried_by_endpoint: r.ledger.by_endpoint,
        key_usage_start,
        key_base: r.ledger.key_base,
        shard: opts.shard,
        state_path: super::state_path(&r.dir),
        leftovers: r.leftovers,
        probe: r.probe,
        closes_before: r.ledger.closes,
        streams_before: r.ledger.streamed,
        drain_grace: opts.drain_grace.unwrap_or(super::DRAIN_GRACE),
    });
    let (cmd_tx, cmd_rx) = mpsc::channel(256);
    let (snap_tx, snap_rx) = watch::channel(Arc::new(sup.snapshot()));
    let tick = opts.tick.unwrap_or(Duration::from_millis(200));
    let task = tokio::spawn(sup.run(cmd_rx, snap_tx, tick));
    Ok(EngineHandle {
        commands: cmd_tx,
        snapshots: snap_rx,
        task,
        writer_thread: Some(writer_thread),
        client: r.client,
        output_dir: r.dir,
        datasets: r.names,
        start_notes: r.notes,
        _lock: dir_lock,
    })
}

/// What the workers share with the supervisor: the pool, the counters, the money.
fn shared(
    cfg: &Config,
    (endpoints, own_clients): (Vec<RunEndpoint>, HashMap<String, OpenRouterClient>),
    datasets: usize,
    writer: &Writer,
    client: &OpenRouterClient,
    carried: Usd,
) -> Arc<Shared> {
    let mut by_provider = HashMap::new();
    for (i, e) in endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| e.custom.is_none())
    {
        by_provider.entry(e.provider.clone()).or_insert(i);
    }
    let budget = cfg.budget();
    let n = endpoints.len();
    let text_rate = (endpoints.first())
        .map_or(super::core::wire_rate::PRIOR_BYTES_PER_TOKEN, |e| {
            e.bytes_per_token
        });
    Arc::new(Shared {
        writer: writer.clone(),
        client: client.clone(),
        own_clients,
        // Spare slots for endpoints that appear in the listing during the run.
        endpoint_stats: (0..n + SPARE_ENDPOINTS)
            .map(|_| Counters::default())
            .collect(),
        dataset_stats: (0..datasets).map(|_| Counters::default()).collect(),
        totals: Counters::default(),
        endpoint_list: std::sync::RwLock::new(Arc::new(endpoints)),
        by_provider: std::sync::RwLock::new(by_provider),
        money: LiveMoney::new(budget, carried),
        timeouts: cfg.timeouts.stream(),
        total_timeout: cfg.timeouts.total(),
        attempts_started: AtomicU64::new(0),
        finishing_past_cap: AtomicU64::new(0),
        text_bytes_per_token: AtomicU64::new(text_rate.to_bits()),
    })
}
