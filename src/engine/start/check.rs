//! `harvest run --check`: the start's checks, and what the run would do.

use crate::config::Config;

use super::super::{EngineError, RunOptions};
use super::*;

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
