//! The engine: everything that decides and runs requests. No terminal imports here.
//!
//! [`start`] checks the config and the output directory (resume, manifest), counts the prompts,
//! lists the model's endpoints, starts the writer and spawns the supervisor. The caller gets an
//! [`EngineHandle`]: a command sender, a `watch` of snapshots, and the summary at the end.

mod alarm;
pub(crate) mod clock;
pub(crate) mod control;
pub(crate) mod core;
pub(crate) mod endpoint;
pub(crate) mod health;
mod live_money;
mod look_ups;
pub(crate) mod outlook;
pub(crate) mod pool;
mod publish;
pub(crate) mod quality;
pub(crate) mod reason;
pub(crate) mod reconcile;
pub(crate) mod shared;
pub(crate) mod snapshot;
mod start;
pub(crate) mod stats;
mod supervisor;
pub(crate) mod worker;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::config::{Config, RequestParams};
use crate::domain::Usd;
use crate::openrouter::{ApiKey, ClientOptions, OpenRouterClient};
use crate::store::lock::DirLock;
use crate::store::output;
use crate::store::scan;
use crate::store::writer::WriterThread;

pub use control::{Command, ShutdownMode};
pub use reason::{OffReason, Scheduler, StopReason};
pub use snapshot::{RunState, Snapshot};
pub use start::{CheckDataset, CheckReport, check, start};
pub use supervisor::RunSummary;

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
    /// `--retry-rejects`: send rejected prompts again (`Some(empty)`: all kinds).
    pub retry_rejects: Option<Vec<String>>,
    /// `--retry-truncated`: send again prompts whose answer was cut at `max_tokens`.
    pub retry_truncated: bool,
    /// Filled while the prompt files are counted at start, for a progress line.
    pub scan_progress: Option<std::sync::Arc<crate::store::prescan::ScanProgress>>,
    /// How long a drain (a signal, the TUI's, `harvest stop`'s, a lost output) may let what
    /// is in flight finish before it closes it ([`DRAIN_GRACE`] when not set).
    pub drain_grace: Option<Duration>,
}

/// A drain's grace when the run does not set one (`--drain-grace-s`'s default).
pub const DRAIN_GRACE: Duration = Duration::from_secs(30);

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
    /// The shard whose rows the directory holds (`K/N`), when the run is one shard of a job:
    /// another shard, or the whole job, is refused there (their rows would mix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// Each dataset's names for its rows' fields (`id_field`, `prompt_field`, ...): another
    /// mapping reads other ids, and would buy every prompt again (reliability-probe-4 N8).
    /// Absent in manifests written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<HashMap<String, crate::store::prompts::PromptFields>>,
    /// Each dataset's prompt file as the last start counted it (its lines as one hash): a
    /// later start refuses a file whose counted lines changed, unless `--force`
    /// (reliability-probe-5 P10; `start/marks.rs`). Absent in manifests written before it was
    /// recorded; the next start records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_files: Option<PromptMarks>,
    /// The API the latest run asked, where `status --reconcile` asks about what it left open.
    /// Not recorded when the URL carries a user or password (a secret stays in the config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The name of the environment variable the latest run read its key from (never the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
}

/// The prompt files' marks of a manifest, by dataset.
pub type PromptMarks = std::collections::BTreeMap<String, crate::store::prompts::PromptMark>;

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
    /// The run's output directory (where its lock, state and control socket are).
    pub fn output_dir(&self) -> &Path {
        &self.output_dir
    }

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
        // A --retry-* run that stopped before buying everything again: what it superseded and
        // did not replace is current again, so a paid outcome is never left out.
        match start::restore_superseded(&self.output_dir, &self.datasets) {
            Ok(notes) => {
                for n in notes {
                    tracing::warn!("{n}");
                    summary.restored.push(n);
                }
            }
            Err(e) => tracing::error!("restoring superseded lines: {e}"),
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

/// `max_tokens_may_change`: `--retry-truncated` sends cut answers again with the config's
/// `max_tokens`, so that one parameter may differ (the manifest then records the new one).
/// `write`: record this run's settings (a check only compares). Returns the prompt files'
/// marks the manifest holds, which the start checks once it has counted the files.
fn check_manifest(
    dir: &Path,
    cfg: &Config,
    (force, max_tokens_may_change): (bool, bool),
    shard: Option<(u32, u32)>,
    write: bool,
) -> Result<PromptMarks, EngineError> {
    let path = manifest_path(dir);
    let mut marks = PromptMarks::new();
    let mut mine = Manifest {
        model: cfg.model.clone(),
        params: cfg
            .datasets
            .iter()
            .map(|d| (d.name.clone(), cfg.request_for(d)))
            .collect(),
        created_at: chrono::Utc::now().to_rfc3339(),
        harvest_version: env!("CARGO_PKG_VERSION").to_string(),
        shard: shard.map(|(k, n)| format!("{k}/{n}")),
        fields: Some(
            cfg.datasets
                .iter()
                .map(|d| (d.name.clone(), d.fields()))
                .collect(),
        ),
        prompt_files: None,
        base_url: Some(cfg.base_url.clone())
            .filter(|u| crate::openrouter::client::shown_url(u) == u.as_str()),
        api_key_env: Some(cfg.api_key_env.clone()),
    };
    if let Ok(text) = std::fs::read_to_string(&path) {
        let old: Manifest = serde_json::from_str(&text).map_err(|e| {
            EngineError::Input(format!("{}: not a harvest manifest: {e}", path.display()))
        })?;
        // Kept whatever else is written: the start records this run's once it has counted.
        mine.prompt_files.clone_from(&old.prompt_files);
        marks = old.prompt_files.clone().unwrap_or_default();
        // A shard's directory holds that shard's rows alone. A whole job's directory may take
        // a run of one of its shards (a retry of that part, `--shard-dir`): its rows are the
        // job's own, and its manifest stays the whole job's.
        if old.shard.is_some() && old.shard != mine.shard {
            let holds = |s: &Option<String>| match s {
                Some(s) => format!("shard {s}"),
                None => "a whole job (no --shard)".to_string(),
            };
            return Err(EngineError::Input(format!(
                "{} holds the rows of {}, not of {}: their rows would mix. Each shard writes to \
                 its own directory (output_dir/shard-K-of-N unless --shard-dir)",
                dir.display(),
                holds(&old.shard),
                holds(&mine.shard)
            )));
        }
        let mut diffs = Vec::new();
        if old.model != mine.model {
            diffs.push(format!("model {} (now {})", old.model, mine.model));
        }
        for (name, p) in &mine.params {
            let same = |o: &RequestParams| {
                o == p
                    || (max_tokens_may_change
                        && RequestParams {
                            max_tokens: p.max_tokens,
                            ..o.clone()
                        } == *p)
            };
            if let Some(o) = old.params.get(name)
                && !same(o)
            {
                diffs.push(format!("request parameters of dataset {name}"));
            }
        }
        let (old_fields, my_fields) = (old.fields.as_ref(), mine.fields.as_ref());
        for (name, f) in my_fields.into_iter().flatten() {
            if let Some(o) = old_fields.and_then(|m| m.get(name))
                && o != f
            {
                diffs.push(format!(
                    "the field names of dataset {name} ({}; now {}): other ids or prompts, \
                     and every prompt bought again",
                    describe_fields(o),
                    describe_fields(f)
                ));
            }
        }
        // A directory with no records yet (a run refused at its start, before any request)
        // has nothing to mix: its manifest is this run's.
        if !diffs.is_empty() && !force && holds_records(dir, old.params.keys()) {
            return Err(EngineError::Input(format!(
                "{} holds a run with other settings: {}. Use another output_dir, or --force to mix them",
                dir.display(),
                diffs.join(", ")
            )));
        }
        if (diffs.is_empty() && old.params == mine.params && old.fields == mine.fields)
            || old.shard != mine.shard
            || !write
        {
            return record_api(&path, old, &mine, write).map(|()| marks);
        }
    }
    if write {
        write_manifest(dir, &mine)?;
    }
    Ok(marks)
}

/// Writes `dir`'s manifest (replacing it whole).
fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), EngineError> {
    let path = manifest_path(dir);
    let bytes = serde_json::to_vec_pretty(m).map_err(|e| EngineError::Startup(e.to_string()))?;
    output::write_atomic(&path, &bytes)
        .map_err(|e| EngineError::Input(format!("cannot write {}: {e}", path.display())))
}

/// A manifest kept as it is but for the API it names: this run's (`mine`'s), if another (or
/// none, in a manifest written before it was recorded), so that `status --reconcile` asks
/// where the generations this run leaves open are.
fn record_api(path: &Path, old: Manifest, mine: &Manifest, write: bool) -> Result<(), EngineError> {
    if !write || (old.base_url == mine.base_url && old.api_key_env == mine.api_key_env) {
        return Ok(());
    }
    let kept = Manifest {
        base_url: mine.base_url.clone(),
        api_key_env: mine.api_key_env.clone(),
        ..old
    };
    let bytes =
        serde_json::to_vec_pretty(&kept).map_err(|e| EngineError::Startup(e.to_string()))?;
    output::write_atomic(path, &bytes)
        .map_err(|e| EngineError::Input(format!("cannot write {}: {e}", path.display())))
}

/// Whether `dir` holds any record: a ledger line, or an answer or reject of `datasets`.
fn holds_records<'a>(dir: &Path, datasets: impl Iterator<Item = &'a String>) -> bool {
    let written = |p: PathBuf| std::fs::metadata(p).is_ok_and(|m| m.len() > 0);
    written(output::ledger_path(dir))
        || datasets
            .into_iter()
            .any(|d| written(output::output_path(dir, d)) || written(output::rejects_path(dir, d)))
}

/// A dataset's field names as its config would set them.
fn describe_fields(f: &crate::store::prompts::PromptFields) -> String {
    let mut said = Vec::new();
    if !f.prompt.is_empty() {
        said.push(format!("prompt_field {:?}", f.prompt));
    }
    for (key, v) in [
        ("messages_field", &f.messages),
        ("system_field", &f.system),
        ("id_field", &f.id),
    ] {
        if let Some(v) = v {
            said.push(format!("{key} {v:?}"));
        }
    }
    if said.is_empty() {
        "harvest's own".to_string()
    } else {
        said.join(", ")
    }
}

/// The OpenRouter client for the config (key from the named environment variable unless given).
pub fn client_for(cfg: &Config, key: Option<ApiKey>) -> Result<OpenRouterClient, EngineError> {
    let key = key.or_else(|| ApiKey::from_env(&cfg.api_key_env));
    let mut opts = ClientOptions::new(cfg.base_url.clone(), key);
    opts.connect_timeout = cfg.timeouts.connect();
    opts.http2 = cfg.http2;
    opts.h2_connections = ClientOptions::h2_connections_for(cfg.concurrency);
    opts.ca_certs.extend(cfg.ca_cert.clone());
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
    o.ca_certs.extend(cfg.ca_cert.clone());
    OpenRouterClient::new(o).map_err(|e| EngineError::Input(format!("endpoint {}: {e}", c.name)))
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
    check_output_dir(dir)?;
    crate::store::create_private_dir(dir)
        .map_err(|e| EngineError::Input(format!("cannot create {}: {e}", dir.display())))
}

/// The output directory can be one: it is, or nothing is in its way.
fn check_output_dir(dir: &Path) -> Result<(), EngineError> {
    if dir.exists() && !dir.is_dir() {
        return Err(EngineError::Input(format!(
            "output_dir {} is not a directory (a file of that name is in the way)",
            dir.display()
        )));
    }
    Ok(())
}

/// Spend already recorded in an output directory (ledger plus outputs missing from it).
/// Read-only: a live run's torn last line is not counted, damaged lines are not either.
pub fn recorded_spend(dir: &Path, datasets: &[String]) -> Result<Usd, EngineError> {
    scan::scan_dir(dir, datasets)
        .map(|s| s.carried())
        .map_err(|e| EngineError::Input(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(base_url: &str, key_var: &str) -> Config {
        let text = format!(
            "base_url = \"{base_url}\"\napi_key_env = \"{key_var}\"\n\
             [[dataset]]\nname = \"A\"\nprompts = \"a.jsonl\"\n"
        );
        Config::parse_unchecked(&text, Path::new("harvest.toml")).expect("config")
    }

    fn read(dir: &Path) -> Manifest {
        let text = std::fs::read_to_string(manifest_path(dir)).expect("manifest");
        serde_json::from_str(&text).expect("a manifest")
    }

    /// The manifest names the API and the key's variable of the latest run (for `status
    /// --reconcile`), never a URL's password; one written before they were recorded loads,
    /// and the next run adds them without changing the rest.
    #[test]
    fn the_manifest_names_the_runs_api_and_key_variable() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        let (url, var) = ("http://127.0.0.1:9/api/v1", "MY_RUN_KEY");
        check_manifest(d, &cfg(url, var), (false, false), None, true).expect("first run");
        let m = read(d);
        assert_eq!(
            (m.base_url.as_deref(), m.api_key_env.as_deref()),
            (Some(url), Some(var))
        );
        // Written before these fields: they are absent from the file, and it still loads.
        let mut old = serde_json::to_value(&m).expect("json");
        let o = old.as_object_mut().expect("object");
        o.remove("base_url");
        o.remove("api_key_env");
        o.insert("created_at".into(), "2025-01-01T00:00:00Z".into());
        std::fs::write(manifest_path(d), old.to_string()).expect("old manifest");
        assert_eq!(read(d).base_url, None);
        // A check compares only; a run records them and keeps the rest as it was.
        check_manifest(d, &cfg(url, var), (false, false), None, false).expect("check");
        assert_eq!(read(d).api_key_env, None);
        check_manifest(d, &cfg(url, var), (false, false), None, true).expect("resume");
        let m = read(d);
        assert_eq!(m.created_at, "2025-01-01T00:00:00Z");
        assert_eq!(
            (m.base_url.as_deref(), m.api_key_env.as_deref()),
            (Some(url), Some(var))
        );
        // A URL with a password in it is not copied out of the config.
        let secret = "http://user:s3cret@127.0.0.1:9/api/v1";
        check_manifest(d, &cfg(secret, var), (false, false), None, true).expect("resume");
        let text = std::fs::read_to_string(manifest_path(d)).expect("manifest");
        assert!(!text.contains("s3cret"), "{text}");
        assert_eq!(read(d).base_url, None);
    }
}
