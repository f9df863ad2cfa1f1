//! The start's reading and checking, shared by a run and `run --check`: the key, the open
//! files, the output directory (its lock, manifest, damage, crash leftovers), the prompt
//! files, the listing and the pool, the policy, the key's limits and the account's preflight.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::config::Config;
use crate::domain::Usd;
use crate::openrouter::{ApiError, ApiKey, ClientOptions, ModelEndpoints, OpenRouterClient};
use crate::store::lock;
use crate::store::repair;

use super::super::core::settle::Leftovers;
use super::super::endpoint::RunEndpoint;
use super::super::supervisor::DatasetRun;
use super::super::{EngineError, RunOptions, pool};
use super::*;

/// Files a run holds open besides its datasets' (the ledger, the log, the lock, the control
/// socket and its viewers, the standard streams, the runtime's own, a few streams' sockets).
pub(super) const OPEN_FILES_BESIDES_DATASETS: u64 = 128;

/// Each dataset holds three files open for the whole run (its prompt reader, its outputs, its
/// rejects). A run that cannot have them all is refused before it creates a file, rather than
/// failing with "Too many open files" after thousands of empty ones (reliability probe 3, D16).
/// `limit`: the process's open-files limit (already raised to its hard limit by `main`).
pub(super) fn check_open_files(datasets: usize, limit: u64) -> Result<(), EngineError> {
    let needed = 3 * datasets as u64 + OPEN_FILES_BESIDES_DATASETS;
    if needed <= limit {
        return Ok(());
    }
    Err(EngineError::Input(format!(
        "{datasets} datasets need about {needed} open files (three each: prompts, outputs, \
         rejects), above this process's limit of {limit}: raise it (ulimit -n, or the hard \
         limit in /etc/security/limits.conf) or merge datasets. Nothing was written"
    )))
}

/// What the start does to the output directory: a run creates it, takes its lock and puts it
/// in order (torn tails cut, `--retry-*`'s moves, the manifest, the turns file); a check only
/// reads it, and leaves no trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Run,
    Check,
}

/// Everything the start read and checked before a request may leave.
pub(super) struct Ready {
    pub(super) cfg: Config,
    pub(super) dir: std::path::PathBuf,
    pub(super) names: Vec<String>,
    pub(super) notes: Vec<String>,
    pub(super) datasets: Vec<DatasetRun>,
    pub(super) carried: Usd,
    pub(super) ledger: crate::store::scan::LedgerScan,
    /// What earlier runs left open with the API, for the start to settle.
    pub(super) leftovers: Leftovers,
    pub(super) client: OpenRouterClient,
    pub(super) endpoints: Vec<RunEndpoint>,
    pub(super) own_clients: HashMap<String, OpenRouterClient>,
    pub(super) probe: HashMap<String, f64>,
    pub(super) key: Option<crate::openrouter::KeyInfo>,
    /// Held from the directory's first read to the end of the run (none for a check).
    pub(super) lock: Option<lock::DirLock>,
}

/// Reads and checks everything before a request may leave; in `Mode::Run` it also takes the
/// output directory and puts it in order.
pub(super) async fn ready(
    mut cfg: Config,
    opts: &RunOptions,
    mode: Mode,
) -> Result<Ready, EngineError> {
    if cfg.datasets.is_empty() {
        return Err(EngineError::Input("no [[dataset]] in the config".into()));
    }
    // Preflight: a run through OpenRouter without a key would send a wave of requests only to
    // learn it from 401s.
    if cfg.openrouter && opts.api_key.is_none() && ApiKey::from_env(&cfg.api_key_env).is_none() {
        return Err(EngineError::Input(super::super::missing_key(
            &cfg.api_key_env,
        )));
    }
    let soft_limit = rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(u64::MAX, |(soft, _)| soft);
    check_open_files(cfg.datasets.len(), soft_limit)?;
    let dir = cfg.output_dir.clone();
    // Before anything in the directory is read or changed: one run per directory (a check
    // only makes sure no other run holds it).
    let lock = take_dir(&dir, mode)?;
    let write = mode == Mode::Run;
    let earlier = super::super::check_manifest(
        &dir,
        &cfg,
        (opts.force, opts.retry_truncated),
        opts.shard,
        write,
    )?;

    // What earlier runs left: finished ids, and the spend ledger (refused when damaged unless
    // repairing; a torn tail is cut).
    let names: Vec<String> = cfg.datasets.iter().map(|d| d.name.clone()).collect();
    let prepared = repair::prepare(&dir, &names, opts.repair, write).map_err(|e| match e {
        repair::RepairError::Refused(_) | repair::RepairError::Scan(_) => {
            EngineError::Input(e.to_string())
        }
        other => EngineError::Startup(other.to_string()),
    })?;
    let mut notes = prepared.notes;
    let prepared = match mode {
        Mode::Run => second_chance(&dir, &names, opts, prepared.scan, &mut notes)?,
        Mode::Check => prepared.scan,
    };
    for n in &notes {
        tracing::warn!("{n}");
    }
    // Outputs whose ledger line was lost in a crash still cost money.
    let carried = prepared.carried();
    let leftovers = Leftovers::from_scan(&prepared);
    let ledger = prepared.ledger;
    let mut datasets = Vec::new();
    // Prompt bytes and prompts, for a typical prompt's size in the account's preflight.
    let mut sizes = (0u64, 0u64);
    // Each file also hashed at the length an earlier start counted (`marks.rs`).
    let paths: Vec<_> = cfg
        .datasets
        .iter()
        .map(|d| {
            let earlier = earlier.get(&d.name).map(|m| m.bytes);
            (d.prompts.clone(), d.fields(), earlier)
        })
        .collect();
    let progress = opts.scan_progress.clone().unwrap_or_default();
    let counts = crate::store::prescan::count_all(&paths, opts.shard, &progress);
    let mut marks_now = super::super::PromptMarks::new();
    for ((d, found), counted) in cfg.datasets.iter().zip(prepared.datasets).zip(counts) {
        let counted = counted.map_err(|e| EngineError::Input(e.to_string()))?;
        let shown = d.prompts.display().to_string();
        notes.extend(marks::check(
            &dir,
            d,
            earlier.get(&d.name),
            &counted,
            opts.force,
        )?);
        marks_now.insert(
            d.name.clone(),
            crate::store::prompts::PromptMark::of(&shown, &counted.prefix),
        );
        datasets.push(ready_dataset(
            &cfg, opts, d, found, counted, &mut notes, &mut sizes,
        )?);
    }
    // Each dataset's spend starts from its ledger lines, closed and failed streams' with its
    // answers', as the providers' does: both tables sum to what the ledger holds.
    for d in &mut datasets {
        d.book.spent = (ledger.by_dataset.get(&d.book.name).copied()).unwrap_or_default();
    }
    if write {
        marks::record(&dir, marks_now)?;
    }
    resume_rows(&dir, &mut datasets, &mut notes, write)?;

    let client = client(&cfg, opts)?;
    let listing = listing(&cfg, &client).await?;
    if cfg.openrouter && cfg.provider.zdr {
        cfg.policy.guards.zdr_tags = Some(zdr_tags(&cfg, &client).await?);
    }
    let endpoints = pool::build(&cfg, &listing);
    let own_clients = pool::own_clients(&cfg)?;
    // The probe's verdict on who serves the real model, when one was run for this model.
    let probe = crate::store::probe_file::ProbeReport::agreement_in(&dir, &cfg.model)
        .map_err(|e| EngineError::Input(e.to_string()))?;
    check_policy(&cfg, &endpoints, &probe)?;
    notes.extend(parameter_notes(&cfg, &endpoints, &probe)?);
    let key = if client.has_key() {
        match tokio::time::timeout(Duration::from_secs(10), client.key_info()).await {
            Ok(Ok(k)) => Some(k),
            _ => None,
        }
    } else {
        None
    };
    if cfg.openrouter && client.has_key() {
        let plan = account_plan(&cfg, &endpoints, &probe, &datasets, sizes);
        let preflight = crate::account::preflight(&plan, key.as_ref());
        for n in &preflight.notes {
            tracing::info!("{n}");
        }
        notes.extend(preflight.notes);
    }
    Ok(Ready {
        cfg,
        dir,
        names,
        notes,
        datasets,
        carried,
        ledger,
        leftovers,
        client,
        endpoints,
        own_clients,
        probe,
        key,
        lock,
    })
}

/// OpenRouter's client; without OpenRouter no key is read and the client is never called.
pub(super) fn client(cfg: &Config, opts: &RunOptions) -> Result<OpenRouterClient, EngineError> {
    if cfg.openrouter {
        super::super::client_for(cfg, opts.api_key.clone())
    } else {
        OpenRouterClient::new(ClientOptions::new(cfg.base_url.clone(), None))
            .map_err(|e| EngineError::Input(e.to_string()))
    }
}

/// The model's endpoint listing (empty without OpenRouter).
pub(super) async fn listing(
    cfg: &Config,
    client: &OpenRouterClient,
) -> Result<ModelEndpoints, EngineError> {
    if !cfg.openrouter {
        return Ok(ModelEndpoints::default());
    }
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
    })
}

/// The output directory for this mode: a run creates and locks it; a check only makes sure it
/// could (it exists or can be made, and no other run holds it).
fn take_dir(dir: &std::path::Path, mode: Mode) -> Result<Option<lock::DirLock>, EngineError> {
    match mode {
        Mode::Run => {
            super::super::create_output_dir(dir)?;
            Ok(Some(
                lock::lock_dir(dir).map_err(|e| EngineError::Input(e.to_string()))?,
            ))
        }
        Mode::Check => {
            super::super::check_output_dir(dir)?;
            if let Some(h) = lock::live_holder(dir) {
                let busy = lock::LockError::Busy {
                    dir: dir.to_path_buf(),
                    pid: h.pid.to_string(),
                    started_at: h.started_at,
                };
                return Err(EngineError::Input(busy.to_string()));
            }
            Ok(None)
        }
    }
}

/// The endpoints OpenRouter lists as zero-data-retention, for `[provider] zdr = true`.
async fn zdr_tags(cfg: &Config, client: &OpenRouterClient) -> Result<HashSet<String>, EngineError> {
    client.zdr_tags(&cfg.model).await.map_err(|e| {
        EngineError::Startup(format!(
            "[provider] zdr = true: cannot read the ZDR endpoint list at {}: {e}",
            client.base_url()
        ))
    })
}
