//! The engine: everything that decides and runs requests. No terminal imports here.
//!
//! [`start`] checks the config and the output directory (resume, manifest), counts the prompts,
//! lists the model's endpoints, starts the writer and spawns the supervisor. The caller gets an
//! [`EngineHandle`]: a command sender, a `watch` of snapshots, and the summary at the end.

pub mod clock;
pub mod control;
pub mod core;
pub mod health;
pub mod pool;
mod publish;
pub mod quality;
pub mod reason;
pub mod reconcile;
pub mod snapshot;
pub mod stats;
mod supervisor;
pub mod worker;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, OnDuplicate, RequestParams};
use crate::domain::Usd;
use crate::openrouter::{ApiError, ApiKey, ClientOptions, ModelEndpoints, OpenRouterClient};
use crate::store::lock::{self, DirLock};
use crate::store::output::{self, Writer, WriterThread};
use crate::store::prompts::{PromptReader, count_prompts_in_shard};
use crate::store::{repair, scan};

pub use control::{Command, ShutdownMode};
pub use reason::{OffReason, StopReason};
pub use snapshot::{RunState, Snapshot};
pub use supervisor::RunSummary;

use stats::Counters;
use worker::Shared;

/// Endpoints that may join a run when the listing shows them (statistics slots kept free).
const SPARE_ENDPOINTS: usize = 32;

/// Options of one run that are not in the config file.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Run only the prompts whose id hashes to shard `k` of `n`.
    pub shard: Option<(u32, u32)>,
    /// Resume even if the manifest pins other parameters.
    pub force: bool,
    /// How often snapshots are published (default 200 ms).
    pub tick: Option<Duration>,
    /// The API key, when not from the environment variable the config names (library use).
    pub api_key: Option<ApiKey>,
    /// Quarantine damaged lines and rebuild a lost ledger instead of refusing to start
    /// (`harvest run --repair`).
    pub repair: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The user's input (config, prompt files, output dir of another run): exit code 2.
    #[error("{0}")]
    Input(String),
    /// The API or the machine failed before the run could start: exit code 1.
    #[error("{0}")]
    Startup(String),
}

/// What an output directory is pinned to: a resume with other parameters would mix two
/// distributions in one training set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub model: String,
    pub params: HashMap<String, RequestParams>,
    pub created_at: String,
    pub harvest_version: String,
}

pub fn manifest_path(dir: &Path) -> PathBuf {
    dir.join("manifest.json")
}

pub fn state_path(dir: &Path) -> PathBuf {
    dir.join("state.json")
}

/// A running engine.
pub struct EngineHandle {
    pub commands: mpsc::Sender<Command>,
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    task: tokio::task::JoinHandle<RunSummary>,
    writer_thread: Option<WriterThread>,
    client: OpenRouterClient,
    output_dir: PathBuf,
    datasets: Vec<String>,
    /// What the start changed in the output directory (a torn tail cut, damaged lines moved, a
    /// ledger rebuilt), one sentence each, for the operator.
    pub start_notes: Vec<String>,
    /// The output directory's lock, held until the run is finished (or the process dies).
    _lock: DirLock,
}

impl EngineHandle {
    /// Waits for the end of the run; reconciles with `GET /key` when the key allows.
    pub async fn finish(mut self) -> Result<RunSummary, EngineError> {
        let mut summary = (&mut self.task)
            .await
            .map_err(|e| EngineError::Startup(format!("the engine task failed: {e}")))?;
        if let Some(t) = self.writer_thread.take() {
            // The supervisor (and with it every Writer handle) is gone: the thread ends.
            tokio::task::spawn_blocking(move || t.join())
                .await
                .map_err(|e| EngineError::Startup(e.to_string()))?
                .map_err(|e| EngineError::Startup(format!("writing outputs failed: {e}")))?;
        }
        // After a stop-now the operator wants out: the key's usage gets 2 s, not 10.
        let wait = if summary.stopped_now {
            Duration::from_secs(2)
        } else {
            Duration::from_secs(10)
        };
        if self.client.has_key()
            && let Ok(Ok(k)) = tokio::time::timeout(wait, self.client.key_info()).await
        {
            summary.snapshot.key_usage_now = Some(k.usage);
            // Kept in the state file for `harvest status --report`.
            supervisor::write_state(&state_path(&self.output_dir), &summary.snapshot);
        }
        summary.output_dir = self.output_dir.clone();
        summary.datasets = std::mem::take(&mut self.datasets);
        Ok(summary)
    }
}

fn check_manifest(dir: &Path, cfg: &Config, force: bool) -> Result<(), EngineError> {
    let path = manifest_path(dir);
    let mine = Manifest {
        model: cfg.model.clone(),
        params: cfg
            .datasets
            .iter()
            .map(|d| (d.name.clone(), cfg.request_for(d)))
            .collect(),
        created_at: chrono::Utc::now().to_rfc3339(),
        harvest_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    if let Ok(text) = std::fs::read_to_string(&path) {
        let old: Manifest = serde_json::from_str(&text).map_err(|e| {
            EngineError::Input(format!("{}: not a harvest manifest: {e}", path.display()))
        })?;
        let mut diffs = Vec::new();
        if old.model != mine.model {
            diffs.push(format!("model {} (now {})", old.model, mine.model));
        }
        for (name, p) in &mine.params {
            if let Some(o) = old.params.get(name)
                && o != p
            {
                diffs.push(format!("request parameters of dataset {name}"));
            }
        }
        if !diffs.is_empty() && !force {
            return Err(EngineError::Input(format!(
                "{} holds a run with other settings: {}. Use another output_dir, or --force to mix them",
                dir.display(),
                diffs.join(", ")
            )));
        }
        if diffs.is_empty() {
            return Ok(());
        }
    }
    let bytes =
        serde_json::to_vec_pretty(&mine).map_err(|e| EngineError::Startup(e.to_string()))?;
    output::write_atomic(&path, &bytes)
        .map_err(|e| EngineError::Input(format!("cannot write {}: {e}", path.display())))
}

/// The OpenRouter client for the config (key from the named environment variable unless given).
pub fn client_for(cfg: &Config, key: Option<ApiKey>) -> Result<OpenRouterClient, EngineError> {
    let key = key.or_else(|| ApiKey::from_env(&cfg.api_key_env));
    let mut opts = ClientOptions::new(cfg.base_url.clone(), key);
    opts.connect_timeout = cfg.timeouts.connect();
    OpenRouterClient::new(opts).map_err(|e| EngineError::Input(e.to_string()))
}

/// The client for one of the config's own servers (`[[endpoint]]`): its URL, its key variable
/// (no `Authorization` without one), the config's connect timeout, and whether it must send usage.
pub fn own_server_client(
    cfg: &Config,
    c: &crate::config::EndpointConfig,
) -> Result<OpenRouterClient, EngineError> {
    let mut o = ClientOptions::new(
        c.base_url.clone(),
        c.api_key_env.as_deref().and_then(ApiKey::from_env),
    );
    o.connect_timeout = cfg.timeouts.connect();
    o.require_usage = c.require_usage;
    OpenRouterClient::new(o).map_err(|e| EngineError::Input(format!("endpoint {}: {e}", c.name)))
}

/// Starts a run.
pub async fn start(cfg: Config, opts: RunOptions) -> Result<EngineHandle, EngineError> {
    if cfg.datasets.is_empty() {
        return Err(EngineError::Input("no [[dataset]] in the config".into()));
    }
    // Preflight: a run through OpenRouter without a key would send a wave of requests only to
    // learn it from 401s.
    if cfg.openrouter && opts.api_key.is_none() && ApiKey::from_env(&cfg.api_key_env).is_none() {
        return Err(EngineError::Input(missing_key(&cfg.api_key_env)));
    }
    let dir = cfg.output_dir.clone();
    create_output_dir(&dir)?;
    // Before anything in the directory is read or changed: one run per directory.
    let dir_lock = lock::lock_dir(&dir).map_err(|e| EngineError::Input(e.to_string()))?;
    check_manifest(&dir, &cfg, opts.force)?;

    // What earlier runs left: finished ids, and the spend ledger (refused when damaged unless
    // repairing; a torn tail is cut).
    let names: Vec<String> = cfg.datasets.iter().map(|d| d.name.clone()).collect();
    let prepared = repair::prepare(&dir, &names, opts.repair).map_err(|e| match e {
        repair::RepairError::Refused(_) | repair::RepairError::Scan(_) => {
            EngineError::Input(e.to_string())
        }
        other => EngineError::Startup(other.to_string()),
    })?;
    for n in &prepared.notes {
        tracing::warn!("{n}");
    }
    let mut notes = prepared.notes;
    // Outputs whose ledger line was lost in a crash still cost money.
    let carried = prepared.scan.carried();
    let ledger = prepared.scan.ledger;
    let mut output_generations = std::collections::HashSet::new();
    let mut datasets = Vec::new();
    for (d, found) in cfg.datasets.iter().zip(prepared.scan.datasets) {
        let existing = found.existing;
        output_generations.extend(existing.generation_ids.iter().cloned());
        // Count this run's prompts in one read of the file (and refuse bad lines and ids
        // reused with other content up front unless told to skip them).
        let counted = count_prompts_in_shard(&d.prompts, opts.shard)
            .map_err(|e| EngineError::Input(e.to_string()))?;
        if counted.invalid > 0 && !supervisor::skip_bad_lines(&cfg) {
            return Err(EngineError::Input(match &counted.first_error {
                Some(e) => format!(
                    "{e} ({} bad lines in all; set on_bad_line = \"skip\" to reject them and go on)",
                    counted.invalid
                ),
                None => format!("{}: {} bad lines", d.prompts.display(), counted.invalid),
            }));
        }
        if let Some(dup) = counted.first_duplicates.iter().find(|x| x.differs)
            && cfg.on_duplicate == OnDuplicate::Error
        {
            return Err(EngineError::Input(format!(
                "{}:{}: id {:?} is already the id of line {} with other content ({} ids reused \
                 with other content in all; an integer id and the same digits as a string are \
                 one id). Give each prompt its own id, or set on_duplicate = \"skip\" to keep \
                 the first",
                d.prompts.display(),
                dup.line,
                dup.id,
                dup.first_line,
                counted.differing
            )));
        }
        if counted.duplicates > 0 {
            let lines: Vec<String> = counted
                .first_duplicates
                .iter()
                .take(3)
                .map(|x| x.line.to_string())
                .collect();
            let note = format!(
                "dataset {}: {} duplicate ids skipped ({} with other content; first: lines {})",
                d.name,
                counted.duplicates,
                counted.differing,
                lines.join(", ")
            );
            tracing::warn!("{note}");
            notes.push(note);
        }
        // In skip mode bad lines become rejects (of shard 0 only, when sharded).
        let bad = if supervisor::skip_bad_lines(&cfg) && opts.shard.is_none_or(|(k, _)| k == 0) {
            counted.invalid
        } else {
            0
        };
        let total = bad + counted.in_shard;
        if total == 0 {
            return Err(EngineError::Input(format!(
                "dataset {}: {} holds no prompts{}",
                d.name,
                d.prompts.display(),
                if opts.shard.is_some() {
                    " in this shard"
                } else {
                    ""
                }
            )));
        }
        let reader = PromptReader::open_prescanned(&d.prompts, &counted)
            .map_err(|e| EngineError::Input(e.to_string()))?;
        datasets.push(supervisor::ready_dataset(
            d,
            cfg.request_for(d),
            reader,
            existing,
            total,
            counted.duplicates,
        ));
    }

    // Without OpenRouter no key is read: the client stays keyless and is never called.
    let client = if cfg.openrouter {
        client_for(&cfg, opts.api_key.clone())?
    } else {
        OpenRouterClient::new(ClientOptions::new(cfg.base_url.clone(), None))
            .map_err(|e| EngineError::Input(e.to_string()))?
    };
    let listing = if !cfg.openrouter {
        ModelEndpoints::default()
    } else {
        client.endpoints(&cfg.model).await.map_err(|e| match e {
            ApiError::Http {
                status: 400 | 404, ..
            } => EngineError::Input(format!(
                "model {} not found at {}: {e}",
                cfg.model,
                client.base_url()
            )),
            ApiError::Http { status: 401, .. } => EngineError::Input(format!(
                "the API key in {} was refused: {e}",
                cfg.api_key_env
            )),
            other => EngineError::Startup(format!(
                "cannot list the endpoints of {} at {}: {other}",
                cfg.model,
                client.base_url()
            )),
        })?
    };
    let endpoints = pool::build(&cfg, &listing)?;
    let mut by_provider = HashMap::new();
    for (i, e) in endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| e.custom.is_none())
    {
        by_provider.entry(e.provider.clone()).or_insert(i);
    }
    // The probe's verdict on who serves the real model, when one was run for this model.
    let probe = crate::probe::ProbeReport::agreement_in(&dir, &cfg.model)
        .map_err(|e| EngineError::Input(e.to_string()))?;
    // A run whose policy allows no endpoint at all would wait forever: say so now.
    let (native, _) = cfg.policy.native_for(&cfg.model);
    let allowed = endpoints.iter().any(|e| {
        cfg.policy
            .judge(&native, e, probe.get(&e.tag).copied())
            .is_none()
    });
    if !allowed {
        let seen: Vec<String> = endpoints
            .iter()
            .map(|e| format!("{} ({})", e.tag, e.quantization))
            .collect();
        return Err(EngineError::Input(format!(
            "the policy ({:?}, native {native}) allows none of the {} endpoints of {}: {}. \
             Set policy.mode = \"any\", or list tags in policy.include",
            cfg.policy.mode,
            endpoints.len(),
            cfg.model,
            seen.join(", ")
        )));
    }
    let key_usage_start = if client.has_key() {
        match tokio::time::timeout(Duration::from_secs(10), client.key_info()).await {
            Ok(Ok(k)) => Some(k.usage),
            _ => None,
        }
    } else {
        None
    };

    // Generations a crash left open (started, never closed, not among the outputs): the
    // supervisor asks the API what they cost before it dispatches anything.
    let unknown = ledger.unknown;
    let key_base = ledger.key_base;
    let orphans: Vec<output::SpendEntry> = ledger
        .open
        .into_iter()
        .filter(|e| {
            e.generation_id
                .as_ref()
                .is_some_and(|g| !output_generations.contains(g))
        })
        .collect();
    let (writer, writer_thread): (Writer, WriterThread) =
        Writer::start(&dir, &names).map_err(|e| EngineError::Input(e.to_string()))?;

    let budget = cfg.budget();
    let n = endpoints.len();
    let shared = Arc::new(Shared {
        writer: writer.clone(),
        client: client.clone(),
        // Spare slots for endpoints that appear in the listing during the run.
        endpoint_stats: (0..n + SPARE_ENDPOINTS)
            .map(|_| Counters::default())
            .collect(),
        dataset_stats: (0..datasets.len()).map(|_| Counters::default()).collect(),
        totals: Counters::default(),
        endpoint_list: std::sync::RwLock::new(Arc::new(endpoints)),
        by_provider: std::sync::RwLock::new(by_provider),
        accrued_pico: AtomicI64::new(0),
        spent_pico: AtomicI64::new(carried.pico()),
        budget_pico: budget.pico(),
        budget_hit: CancellationToken::new(),
        timeouts: cfg.timeouts.stream(),
        total_timeout: cfg.timeouts.total(),
        attempts_started: AtomicU64::new(0),
        finishing_past_cap: AtomicU64::new(0),
    });
    if carried >= budget {
        shared.budget_hit.cancel();
    }
    let sup = supervisor::Supervisor::new(
        cfg,
        shared,
        writer,
        datasets,
        carried,
        key_usage_start,
        opts.shard,
        state_path(&dir),
        orphans,
        unknown,
    );
    let (cmd_tx, cmd_rx) = mpsc::channel(256);
    let mut sup = sup;
    sup.set_key_base(key_base);
    if !probe.is_empty() {
        sup.set_probe(probe);
    }
    let first = Arc::new(sup.snapshot());
    let (snap_tx, snap_rx) = watch::channel(first);
    let tick = opts.tick.unwrap_or(Duration::from_millis(200));
    let task = tokio::spawn(sup.run(cmd_rx, snap_tx, tick));
    Ok(EngineHandle {
        commands: cmd_tx,
        snapshots: snap_rx,
        task,
        writer_thread: Some(writer_thread),
        client,
        output_dir: dir,
        datasets: names,
        start_notes: notes,
        _lock: dir_lock,
    })
}

/// The message for an unset or empty key variable.
pub fn missing_key(var: &str) -> String {
    format!(
        "the API key variable {var} is unset or empty: export {var}=sk-or-... (or set \
         api_key_env to the variable that holds it). Nothing was sent"
    )
}

/// Creates the output directory, saying so plainly when the path is a file.
pub fn create_output_dir(dir: &Path) -> Result<(), EngineError> {
    if dir.exists() && !dir.is_dir() {
        return Err(EngineError::Input(format!(
            "output_dir {} is not a directory (a file of that name is in the way)",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| EngineError::Input(format!("cannot create {}: {e}", dir.display())))
}

/// Spend already recorded in an output directory (ledger plus outputs missing from it).
/// Read-only: a live run's torn last line is not counted, damaged lines are not either.
pub fn recorded_spend(dir: &Path, datasets: &[String]) -> Result<Usd, EngineError> {
    scan::scan_dir(dir, datasets)
        .map(|s| s.carried())
        .map_err(|e| EngineError::Input(e.to_string()))
}
