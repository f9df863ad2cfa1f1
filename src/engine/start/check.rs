//! `harvest run --check`: the start's checks, and what the run would do.

use crate::config::Config;

use super::super::supervisor::DatasetRun;
use super::super::{EngineError, RunOptions};
use super::*;

/// What `harvest run --check` found: the run would start, and this is what it would do.
#[derive(Debug)]
pub struct CheckReport {
    /// What a run's start would say (the same notes).
    pub notes: Vec<String>,
    /// Per dataset: what its prompt file holds and what the run would send.
    pub datasets: Vec<CheckDataset>,
    /// The endpoints the policy allows now, of those listed (own servers included).
    pub endpoints: (usize, usize),
    /// The key's usage and limit, when the key could be read.
    pub key: Option<crate::openrouter::KeyInfo>,
}

/// One dataset as `harvest run --check` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckDataset {
    pub name: String,
    /// The prompts of its file (this shard's), bad lines not included.
    pub prompts: u64,
    /// Those earlier runs finished or rejected.
    pub finished: u64,
    /// The prompts the run would send: `prompts` less `finished`.
    pub to_send: u64,
    /// The file's bad lines (`on_bad_line = "skip"`): input rejects, never sent.
    pub bad_lines: u64,
    /// Of those, the ones earlier runs rejected already.
    pub bad_lines_rejected: u64,
}

impl CheckDataset {
    /// Splits a dataset's book: its total counts the bad lines that skip mode rejects, and its
    /// finished ids the bad lines earlier runs rejected (`@line:N`); neither is work to send.
    fn of(d: &DatasetRun) -> CheckDataset {
        let bad_done = (d.book.done_ids.iter())
            .filter(|id| id.starts_with(crate::store::prompts::BAD_LINE_ID))
            .count() as u64;
        let prompts = d.book.total.saturating_sub(d.bad_lines);
        let finished = (d.book.done_ids.len() as u64).saturating_sub(bad_done);
        CheckDataset {
            name: d.book.name.clone(),
            prompts,
            finished,
            to_send: prompts.saturating_sub(finished),
            bad_lines: d.bad_lines,
            bad_lines_rejected: bad_done.min(d.bad_lines),
        }
    }
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
        datasets: r.datasets.iter().map(CheckDataset::of).collect(),
        endpoints: (allowed, r.endpoints.len()),
        key: r.key,
    })
}
