//! Starting a run: the preflight (key, lock, manifest), what the output directory holds (resume,
//! damage, crash leftovers), one read of each prompt file (counts, bad lines, duplicate ids),
//! the model's listing and the endpoint pool, the policy's check that something may serve, and
//! the shared state the workers and the supervisor use. Then the supervisor is spawned.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, DatasetConfig, OnBadLine, OnDuplicate, RequestParams, Routing};
use crate::domain::Usd;
use crate::openrouter::{ApiError, ApiKey, ClientOptions, ModelEndpoints, OpenRouterClient};
use crate::store::lock;
use crate::store::output::{SpendEntry, Writer};
use crate::store::prompts::{PromptCount, PromptReader};
use crate::store::repair;
use crate::store::scan::{DatasetScan, ExistingDataset};

use super::core::DatasetBook;
use super::endpoint::RunEndpoint;
use super::shared::Shared;
use super::stats::Counters;
use super::supervisor::DatasetRun;
use super::{EngineError, EngineHandle, RunOptions, pool, supervisor};

/// Endpoints that may join a run when the listing shows them (statistics slots kept free).
const SPARE_ENDPOINTS: usize = 32;

/// Files a run holds open besides its datasets' (the ledger, the log, the lock, the control
/// socket and its viewers, the standard streams, the runtime's own, a few streams' sockets).
const OPEN_FILES_BESIDES_DATASETS: u64 = 128;

/// Each dataset holds three files open for the whole run (its prompt reader, its outputs, its
/// rejects). A run that cannot have them all is refused before it creates a file, rather than
/// failing with "Too many open files" after thousands of empty ones (reliability probe 3, D16).
/// `limit`: the process's open-files limit (already raised to its hard limit by `main`).
fn check_open_files(datasets: usize, limit: u64) -> Result<(), EngineError> {
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
enum Mode {
    Run,
    Check,
}

/// Everything the start read and checked before a request may leave.
struct Ready {
    cfg: Config,
    dir: std::path::PathBuf,
    names: Vec<String>,
    notes: Vec<String>,
    datasets: Vec<DatasetRun>,
    carried: Usd,
    ledger: crate::store::scan::LedgerScan,
    output_generations: HashSet<String>,
    client: OpenRouterClient,
    endpoints: Vec<RunEndpoint>,
    own_clients: HashMap<String, OpenRouterClient>,
    probe: HashMap<String, f64>,
    key: Option<crate::openrouter::KeyInfo>,
    /// Held from the directory's first read to the end of the run (none for a check).
    lock: Option<lock::DirLock>,
}

/// What `harvest run --check` found: the run would start, and this is what it would do.
#[derive(Debug)]
pub struct CheckReport {
    /// What a run's start would say (the same notes).
    pub notes: Vec<String>,
    /// Per dataset: its name, the prompts of its file (this shard's), those earlier runs
    /// finished or rejected.
    pub datasets: Vec<(String, u64, u64)>,
    /// The endpoints the policy allows now, of those listed (own servers included).
    pub endpoints: (usize, usize),
    /// The key's usage and limit, when the key could be read.
    pub key: Option<crate::openrouter::KeyInfo>,
}

/// `harvest run --check`: everything a run's start checks (the config, the prompt files, the
/// output directory and its lock, the listing and the policy, the key and the account's
/// preflight), with the same errors and exit codes, but nothing is sent to the chat API and
/// nothing is written. A key the API refuses is a runtime failure (exit code 1), as a run
/// would end on it.
pub async fn check(cfg: Config, opts: RunOptions) -> Result<CheckReport, EngineError> {
    let r = ready(cfg, &opts, Mode::Check).await?;
    if r.client.has_key() && r.cfg.openrouter && r.key.is_none() {
        // The key was asked for and not given: say why, as a run would find out.
        if let Err(e) = r.client.key_info().await
            && matches!(e.status(), Some(401 | 403))
        {
            return Err(EngineError::Startup(format!(
                "the API refused the key ({e}): a run would stop at its first request"
            )));
        }
    }
    let allowed = (0..r.endpoints.len())
        .filter(|&i| {
            let e = &r.endpoints[i];
            let facts = crate::policy::Judged::facts(e);
            let (native, _) = r.cfg.policy.native_for(&r.cfg.model);
            r.cfg
                .policy
                .verdict_with_probe(&native, &facts, r.probe.get(&e.tag).copied())
                .is_none()
        })
        .count();
    Ok(CheckReport {
        notes: r.notes,
        datasets: (r.datasets.iter())
            .map(|d| {
                (
                    d.book.name.clone(),
                    d.book.total,
                    d.book.done_ids.len() as u64,
                )
            })
            .collect(),
        endpoints: (allowed, r.endpoints.len()),
        key: r.key,
    })
}

/// Starts a run: checks everything that can be checked before a request leaves, then spawns
/// the supervisor. Bad input is [`EngineError::Input`] (exit code 2).
pub async fn start(cfg: Config, opts: RunOptions) -> Result<EngineHandle, EngineError> {
    let Ready {
        cfg,
        dir,
        names,
        notes,
        datasets,
        carried,
        ledger,
        output_generations,
        client,
        endpoints,
        own_clients,
        probe,
        key,
        lock,
    } = ready(cfg, &opts, Mode::Run).await?;
    let dir_lock =
        lock.ok_or_else(|| EngineError::Startup("the output directory's lock".into()))?;
    let key_usage_start = key.as_ref().map(|k| k.usage);
    // Generations a crash left open (started, never closed, not among the outputs): the
    // supervisor asks the API what they cost beside the new work.
    let orphans: Vec<SpendEntry> = ledger
        .open
        .into_iter()
        .filter(|e| {
            e.generation_id
                .as_ref()
                .is_some_and(|g| !output_generations.contains(g))
        })
        .collect();
    let (writer, writer_thread) =
        Writer::start(&dir, &names).map_err(|e| EngineError::Input(e.to_string()))?;
    let shared = shared(
        &cfg,
        (endpoints, own_clients),
        datasets.len(),
        &writer,
        &client,
        carried,
    );
    let mut sup = supervisor::Supervisor::new(
        cfg,
        shared,
        writer,
        datasets,
        carried,
        key_usage_start,
        opts.shard,
        super::state_path(&dir),
        orphans,
        ledger.unknown,
    );
    sup.set_key_base(ledger.key_base);
    sup.set_rebuilt(ledger.rebuilt);
    if !probe.is_empty() {
        sup.set_probe(probe);
    }
    let (cmd_tx, cmd_rx) = mpsc::channel(256);
    let (snap_tx, snap_rx) = watch::channel(Arc::new(sup.snapshot()));
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

/// Reads and checks everything before a request may leave; in `Mode::Run` it also takes the
/// output directory and puts it in order.
async fn ready(mut cfg: Config, opts: &RunOptions, mode: Mode) -> Result<Ready, EngineError> {
    if cfg.datasets.is_empty() {
        return Err(EngineError::Input("no [[dataset]] in the config".into()));
    }
    // Preflight: a run through OpenRouter without a key would send a wave of requests only to
    // learn it from 401s.
    if cfg.openrouter && opts.api_key.is_none() && ApiKey::from_env(&cfg.api_key_env).is_none() {
        return Err(EngineError::Input(super::missing_key(&cfg.api_key_env)));
    }
    let soft_limit = rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(u64::MAX, |(soft, _)| soft);
    check_open_files(cfg.datasets.len(), soft_limit)?;
    let dir = cfg.output_dir.clone();
    // Before anything in the directory is read or changed: one run per directory (a check
    // only makes sure no other run holds it).
    let lock = match mode {
        Mode::Run => {
            super::create_output_dir(&dir)?;
            Some(lock::lock_dir(&dir).map_err(|e| EngineError::Input(e.to_string()))?)
        }
        Mode::Check => {
            super::check_output_dir(&dir)?;
            if let Some(h) = lock::live_holder(&dir) {
                let busy = lock::LockError::Busy {
                    dir: dir.clone(),
                    pid: h.pid.to_string(),
                    started_at: h.started_at,
                };
                return Err(EngineError::Input(busy.to_string()));
            }
            None
        }
    };
    let write = mode == Mode::Run;
    super::check_manifest(&dir, &cfg, (opts.force, opts.retry_truncated), write)?;

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
    let ledger = prepared.ledger;
    let mut output_generations = HashSet::new();
    let mut datasets = Vec::new();
    // Prompt bytes and prompts, for a typical prompt's size in the account's preflight.
    let mut sizes = (0u64, 0u64);
    let paths: Vec<_> = cfg.datasets.iter().map(|d| d.prompts.clone()).collect();
    let progress = opts.scan_progress.clone().unwrap_or_default();
    let counts = crate::store::prescan::count_all(&paths, opts.shard, &progress);
    for ((d, found), counted) in cfg.datasets.iter().zip(prepared.datasets).zip(counts) {
        output_generations.extend(found.existing.generation_ids.iter().cloned());
        let counted = counted.map_err(|e| EngineError::Input(e.to_string()))?;
        datasets.push(ready_dataset(
            &cfg, opts, d, found, counted, &mut notes, &mut sizes,
        )?);
    }
    resume_rows(&dir, &mut datasets, &mut notes, write)?;

    let client = client(&cfg, opts)?;
    let listing = listing(&cfg, &client).await?;
    if cfg.openrouter && cfg.provider.zdr {
        let zdr = client.zdr_tags(&cfg.model).await.map_err(|e| {
            EngineError::Startup(format!(
                "[provider] zdr = true: cannot read the ZDR endpoint list at {}: {e}",
                client.base_url()
            ))
        })?;
        cfg.policy.guards.zdr_tags = Some(zdr);
    }
    let endpoints = pool::build(&cfg, &listing);
    let own_clients = pool::own_clients(&cfg)?;
    // The probe's verdict on who serves the real model, when one was run for this model.
    let probe = crate::store::probe_file::ProbeReport::agreement_in(&dir, &cfg.model)
        .map_err(|e| EngineError::Input(e.to_string()))?;
    check_policy(&cfg, &endpoints, &probe)?;
    notes.extend(parameter_notes(&cfg, &endpoints, &probe));
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
        output_generations,
        client,
        endpoints,
        own_clients,
        probe,
        key,
        lock,
    })
}

/// One dataset: its prompt file's count (the shard's share, bad lines and duplicate ids
/// refused or noted), and what earlier runs finished.
fn ready_dataset(
    cfg: &Config,
    opts: &RunOptions,
    d: &DatasetConfig,
    found: DatasetScan,
    counted: PromptCount,
    notes: &mut Vec<String>,
    sizes: &mut (u64, u64),
) -> Result<DatasetRun, EngineError> {
    sizes.0 += counted.bytes;
    sizes.1 += counted.in_shard + counted.invalid;
    check_prompts(cfg, d, &counted, notes)?;
    if counted.without_system > 0 && d.system_prompt.is_none() {
        // The provider then renders the model's own default system prompt, which the row does
        // not show, while a trainer's template may insert its own: the two contexts differ.
        notes.push(format!(
            "dataset {}: {} prompt{} without a system message and no system_prompt configured: \
             the provider applies the model's default system prompt, which the rows do not \
             record; set system_prompt to send (and record) one",
            d.name,
            crate::domain::group_thousands(counted.without_system),
            if counted.without_system == 1 { "" } else { "s" }
        ));
    }
    // In skip mode bad lines become rejects (of shard 0 only, when sharded).
    let skip = cfg.on_bad_line == OnBadLine::Skip;
    let bad = if skip && opts.shard.is_none_or(|(k, _)| k == 0) {
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
    let max_tokens = cfg.request_for(d).max_tokens;
    // Earlier answers cut while thinking at this max_tokens (not at a lower one since raised).
    if u64::from(max_tokens) <= found.existing.cut_thinking_at
        && let Some(line) = crate::engine::core::cut_watch::earlier_cuts(
            &d.name,
            found.existing.cut_thinking,
            found.existing.outputs,
            max_tokens,
        )
    {
        notes.push(line);
    }
    Ok(dataset_run(
        d,
        cfg.request_for(d),
        reader,
        found.existing,
        total,
        counted.duplicates,
    ))
}

/// Refuses bad lines (unless `on_bad_line = "skip"`) and ids reused with other content (unless
/// `on_duplicate = "skip"`); notes the duplicates skipped.
fn check_prompts(
    cfg: &Config,
    d: &DatasetConfig,
    counted: &PromptCount,
    notes: &mut Vec<String>,
) -> Result<(), EngineError> {
    if counted.invalid > 0 && cfg.on_bad_line == OnBadLine::Error {
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
    Ok(())
}

/// Multi-turn rows earlier runs left in progress (the turns file): each dataset's book takes
/// its own, to continue them from their last finished turn. Rows finished since are dropped
/// from the file; a dataset no longer in the config keeps its rows there.
fn resume_rows(
    dir: &std::path::Path,
    datasets: &mut [DatasetRun],
    notes: &mut Vec<String>,
    write: bool,
) -> Result<(), EngineError> {
    let finished = |d: &str, id: &str| {
        datasets
            .iter()
            .any(|r| r.book.name == d && r.book.done_ids.contains(id))
    };
    let mut loaded = crate::store::turns_file::load(dir, finished, write).map_err(|e| {
        EngineError::Input(format!(
            "cannot read {}: {e}",
            crate::store::turns_file::turns_path(dir).display()
        ))
    })?;
    let (mut rows, mut turns) = (0, 0);
    for r in datasets.iter_mut() {
        if r.book.turns != crate::config::Turns::All {
            continue;
        }
        if let Some(in_progress) = loaded.rows.remove(&r.book.name) {
            rows += in_progress.len();
            turns += in_progress.values().map(Vec::len).sum::<usize>();
            r.book.in_progress = in_progress;
        }
    }
    if rows > 0 {
        notes.push(format!(
            "{rows} multi-turn rows continue from their last finished turn ({turns} turns an \
             earlier run paid for, kept in {})",
            crate::store::turns_file::TURNS_FILE
        ));
    }
    if loaded.unreadable > 0 {
        notes.push(format!(
            "{}: {} unreadable lines left out (a torn tail after a crash costs at most one turn \
             each, generated again)",
            crate::store::turns_file::TURNS_FILE,
            loaded.unreadable
        ));
    }
    Ok(())
}

/// The dataset's book as the core keeps it, and its reader.
fn dataset_run(
    d: &DatasetConfig,
    params: RequestParams,
    reader: PromptReader,
    existing: ExistingDataset,
    total: u64,
    duplicates: u64,
) -> DatasetRun {
    DatasetRun {
        book: DatasetBook {
            name: d.name.clone(),
            params,
            system_prompt: d.system_prompt.clone(),
            turns: d.turns,
            done_ids: existing.done.into_keys().collect(),
            total,
            done: existing.outputs,
            rejected: existing.rejects,
            output_tokens: existing.output_tokens,
            spent: existing.cost,
            budget: d.output_token_budget,
            max_samples: d.max_samples,
            duplicates,
            ..DatasetBook::default()
        },
        reader: Some(reader),
    }
}

/// OpenRouter's client; without OpenRouter no key is read and the client is never called.
fn client(cfg: &Config, opts: &RunOptions) -> Result<OpenRouterClient, EngineError> {
    if cfg.openrouter {
        super::client_for(cfg, opts.api_key.clone())
    } else {
        OpenRouterClient::new(ClientOptions::new(cfg.base_url.clone(), None))
            .map_err(|e| EngineError::Input(e.to_string()))
    }
}

/// The model's endpoint listing (empty without OpenRouter).
async fn listing(cfg: &Config, client: &OpenRouterClient) -> Result<ModelEndpoints, EngineError> {
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

/// A run whose policy allows no endpoint at all would wait forever: say so now.
/// `--retry-rejects` and `--retry-truncated`: the chosen rejects and cut answers of the shard
/// move to the superseded files (see `store::supersede`), their prompts are pending again, and
/// the directory is read again. First, whatever an earlier such run superseded and never
/// replaced (it crashed) is current again.
fn second_chance(
    dir: &std::path::Path,
    names: &[String],
    opts: &RunOptions,
    scan: crate::store::scan::DirScan,
    notes: &mut Vec<String>,
) -> Result<crate::store::scan::DirScan, EngineError> {
    use crate::store::output::{OutputRecord, RejectRecord, output_path, rejects_path};
    use crate::store::supersede::{supersede, superseded_path};
    let failed = |e: crate::store::repair::RepairError| EngineError::Startup(e.to_string());
    let restored = restore_superseded(dir, names).map_err(failed)?;
    notes.extend(restored);
    if opts.retry_rejects.is_none() && !opts.retry_truncated {
        return if notes.is_empty() {
            Ok(scan)
        } else {
            crate::store::scan::scan_dir(dir, names).map_err(|e| EngineError::Input(e.to_string()))
        };
    }
    // Only the shard's own lines: another shard's answers are its business (D4).
    let mine = |id: &str| {
        opts.shard
            .is_none_or(|(k, n)| crate::store::prompts::shard_of(id, n) == k)
    };
    for name in names {
        if let Some(kinds) = &opts.retry_rejects {
            let path = rejects_path(dir, name);
            let n = supersede::<RejectRecord>(&path, |r| {
                mine(&r.id) && (kinds.is_empty() || kinds.iter().any(|k| k == &r.error_kind))
            })
            .map_err(failed)?;
            if n > 0 {
                notes.push(format!(
                    "dataset {name}: {n} rejected prompt{} sent again (the rejects moved to {}; \
                     back if the run ends without a new outcome)",
                    if n == 1 { "" } else { "s" },
                    superseded_path(&path).display()
                ));
            }
        }
        if opts.retry_truncated {
            let path = output_path(dir, name);
            let n = supersede::<OutputRecord>(&path, |r| {
                mine(&r.id) && (r.truncated || r.finish_reason == "length")
            })
            .map_err(failed)?;
            if n > 0 {
                notes.push(format!(
                    "dataset {name}: {n} answer{} cut at max_tokens sent again (moved to {}; \
                     back if the run ends without a new answer)",
                    if n == 1 { "" } else { "s" },
                    superseded_path(&path).display()
                ));
            }
        }
    }
    crate::store::scan::scan_dir(dir, names).map_err(|e| EngineError::Input(e.to_string()))
}

/// Superseded answers and rejects whose ids have no current outcome, back in the current files
/// (a `--retry-*` run that stopped or crashed before buying them again): one note per file.
pub(crate) fn restore_superseded(
    dir: &std::path::Path,
    names: &[String],
) -> Result<Vec<String>, crate::store::repair::RepairError> {
    use crate::store::output::{output_path, rejects_path};
    use crate::store::supersede::restore_unanswered;
    let mut notes = Vec::new();
    for name in names {
        let (out, rej) = (output_path(dir, name), rejects_path(dir, name));
        for (path, other, what) in [(&out, &rej, "answer"), (&rej, &out, "reject")] {
            let n = restore_unanswered(path, other)?;
            if n > 0 {
                notes.push(format!(
                    "dataset {name}: {n} superseded {what}{} with no new outcome made current \
                     again",
                    if n == 1 { "" } else { "s" }
                ));
            }
        }
    }
    Ok(notes)
}

/// The run's settings as the account sees them: the largest `max_tokens`, a typical prompt
/// (bytes / 4), and the price range of the OpenRouter endpoints the policy allows.
fn account_plan(
    cfg: &Config,
    endpoints: &[RunEndpoint],
    probe: &HashMap<String, f64>,
    datasets: &[DatasetRun],
    (bytes, prompts): (u64, u64),
) -> crate::account::Plan {
    let (native, _) = cfg.policy.native_for(&cfg.model);
    let allowed: Vec<&RunEndpoint> = endpoints
        .iter()
        .filter(|e| e.custom.is_none())
        .filter(|e| {
            cfg.policy
                .judge(&native, *e, probe.get(&e.tag).copied())
                .is_none()
        })
        .collect();
    let cheapest = allowed.iter().min_by_key(|e| (e.price_out, e.price_in));
    let dearest = allowed.iter().max_by_key(|e| (e.price_out, e.price_in));
    crate::account::Plan {
        budget: cfg.budget(),
        concurrency: cfg.concurrency,
        max_tokens: datasets
            .iter()
            .map(|d| d.book.params.max_tokens)
            .max()
            .unwrap_or(cfg.request.max_tokens),
        prompt_tokens: (bytes / prompts.max(1)).div_ceil(4).max(1),
        prices: cheapest
            .zip(dearest)
            .map(|(c, d)| ((c.price_in, c.price_out), (d.price_in, d.price_out))),
    }
}

fn check_policy(
    cfg: &Config,
    endpoints: &[RunEndpoint],
    probe: &HashMap<String, f64>,
) -> Result<(), EngineError> {
    let (native, _) = cfg.policy.native_for(&cfg.model);
    let allowed = endpoints.iter().any(|e| {
        cfg.policy
            .judge(&native, e, probe.get(&e.tag).copied())
            .is_none()
    });
    if allowed {
        return Ok(());
    }
    let seen: Vec<String> = endpoints
        .iter()
        .map(|e| format!("{} ({})", e.tag, e.quantization))
        .collect();
    Err(EngineError::Input(format!(
        "the policy ({:?}, native {native}) allows none of the {} endpoints of {}: {}. \
         Set policy.mode = \"any\", or list tags in policy.include",
        cfg.policy.mode,
        endpoints.len(),
        cfg.model,
        seen.join(", ")
    )))
}

/// Allowed endpoints that do not list a parameter the requests set: with `require_parameters`
/// (openrouter routing) OpenRouter sends them nothing; pinned routing drops the parameter for
/// them (and the row's `params` says so).
fn parameter_notes(
    cfg: &Config,
    endpoints: &[RunEndpoint],
    probe: &HashMap<String, f64>,
) -> Vec<String> {
    let (native, _) = cfg.policy.native_for(&cfg.model);
    let mut sent: Vec<&'static str> = Vec::new();
    for d in &cfg.datasets {
        for p in cfg
            .request_for(d)
            .chat_request(&cfg.model, Vec::new())
            .parameters_sent()
        {
            if !sent.contains(&p) {
                sent.push(p);
            }
        }
    }
    let mut notes = Vec::new();
    for e in endpoints.iter().filter(|e| e.custom.is_none()) {
        let Some(listed) = &e.supported_parameters else {
            continue;
        };
        if cfg
            .policy
            .judge(&native, e, probe.get(&e.tag).copied())
            .is_some()
        {
            continue;
        }
        let missing: Vec<&str> = (sent.iter().copied())
            .filter(|p| !listed.iter().any(|l| l == p))
            .collect();
        if missing.is_empty() {
            continue;
        }
        let what = missing.join(", ");
        notes.push(match cfg.routing {
            Routing::Openrouter if cfg.provider.require_parameters => format!(
                "{} does not list {what}: with [provider] require_parameters OpenRouter sends \
                 it nothing (require_parameters = false lets it serve without them)",
                e.tag
            ),
            Routing::Openrouter => format!(
                "{} does not list {what}: OpenRouter drops them there, and rows it serves \
                 claim them ([provider] require_parameters = true avoids it)",
                e.tag
            ),
            Routing::Pinned => format!(
                "{} does not list {what}: its requests go without them (its rows' params \
                 say so)",
                e.tag
            ),
        });
    }
    notes
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
    let shared = Arc::new(Shared {
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
    shared
}

#[cfg(test)]
mod open_files_tests {
    use super::check_open_files;

    #[test]
    fn a_run_needs_three_files_per_dataset_within_the_limit() {
        // (datasets, limit, refused)
        let cases = [
            (1, 1024, false),
            (298, 1024, false),
            (299, 1024, true),
            (10_000, 20_000, true),
            (10_000, 1 << 20, false),
        ];
        for (datasets, limit, refused) in cases {
            let got = check_open_files(datasets, limit);
            assert_eq!(
                got.is_err(),
                refused,
                "{datasets} datasets at {limit}: {got:?}"
            );
            if let Err(e) = got {
                let text = e.to_string();
                assert!(
                    text.contains(&format!("above this process's limit of {limit}")),
                    "{text}"
                );
                assert!(text.contains("ulimit -n"), "{text}");
            }
        }
    }
}
