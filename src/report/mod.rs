//! The end-of-run report: per dataset and endpoint, what was produced (prompts, tokens), at what
//! speed (tokens per second per stream, time to first token), with which failures, and what it
//! cost; then the totals and the spend reconciliation (harvest's ledger, the records, and the
//! API's own usage figure when the run had one).
//!
//! Built from the output directory alone (records, ledger, rejects, state file), so it is the
//! same after a TUI run, a headless run, or later from `harvest status --report`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::domain::Usd;
use crate::engine::{Manifest, Snapshot, manifest_path, state_path};
use crate::store::output::{
    FailureCause, OutputRecord, RejectRecord, SpendEntry, SpendKind, rejects_path,
};
use crate::store::scan::{self, FileScan, ScanError};

/// Version of the JSON form; bumped when a field changes meaning or goes away.
pub const SCHEMA: u32 = 1;

/// Rows whose endpoint is not known (OpenRouter routing, failed before a provider was named).
pub const UNRESOLVED: &str = "(openrouter)";

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: {msg}")]
    File { path: PathBuf, msg: String },
}

/// One dataset × endpoint, or a total.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub dataset: String,
    pub endpoint: String,
    /// Prompts answered (records written).
    pub prompts: u64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// Dollars booked in the ledger for this row: answers, closed and failed attempts.
    pub usd: Usd,
    /// Output tokens per second of generation (after the first token), per stream.
    pub tok_per_s: Option<f64>,
    pub ttft_p50_ms: Option<u64>,
    pub ttft_p95_ms: Option<u64>,
    pub mean_output_tokens: Option<f64>,
    /// Share of answers cut at max_tokens (`finish_reason: length`).
    pub truncation_rate: Option<f64>,
    /// Answers kept although cut at `max_tokens` before any content (the model still
    /// thinking): rows of reasoning and an empty answer, counted in `truncation_rate` too.
    #[serde(default)]
    pub cut_thinking: u64,
    /// Answers (requests; each turn of a regenerated conversation) that make up the row.
    #[serde(default)]
    pub answers: u64,
    /// Answers whose thinking came inline in the content and was moved to the reasoning (an
    /// endpoint without a reasoning parser).
    #[serde(default)]
    pub inline_think: u64,
    /// Failed attempts by kind (`429`, `5xx`, `timeout`, `truncated`, ...), retried or not.
    pub errors: BTreeMap<String, u64>,
    /// Prompts given up on (dataset and total rows only: a reject has no single endpoint).
    pub rejected: u64,
    /// Prompt-file lines skipped because an earlier line had their id, as the last run
    /// counted them (dataset and total rows; the run's start notes name the first lines).
    #[serde(default)]
    pub duplicates: u64,
}

/// Harvest's count against the API's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpendCheck {
    /// Everything in the ledger (`spend.jsonl`), all runs in this directory.
    pub ledger: Usd,
    /// Of which: answers written as records.
    pub answers: Usd,
    /// Of which: streams closed before the end (budget cap, timeouts, operator stops).
    pub closed: Usd,
    /// Of which: corrections from `GET /generation` and recovered crash leftovers.
    pub adjustments: Usd,
    /// Ledger amounts that are harvest's estimate rather than the server's figure.
    pub estimated: Usd,
    /// Of `answers`: those written as records (matched by generation id); the rest were paid
    /// for and not kept (empty answers retried, answers rejected).
    #[serde(default)]
    pub answers_kept: Usd,
    /// Sum of `cost_usd` over the records; equals `answers_kept` when nothing was lost.
    pub records: Usd,
    /// The API key's usage growth over the last run (`GET /key` before and after), when known:
    /// key-wide, so other use of the same key counts too.
    pub api_usage_delta_usd: Option<f64>,
    /// What harvest counted over that same run.
    pub run_spent: Option<Usd>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: u32,
    pub output_dir: String,
    pub model: Option<String>,
    pub elapsed_s: Option<f64>,
    pub rows: Vec<Row>,
    /// One per dataset, over its endpoints.
    pub datasets: Vec<Row>,
    pub total: Row,
    pub spend: SpendCheck,
    /// The rejects by kind and by what the provider said, most first.
    #[serde(default)]
    pub reject_causes: Vec<RejectCause>,
}

/// Rejects of one kind with one cause.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RejectCause {
    /// `error_kind` of the rejects (`policy`, `empty`, `400`, ...).
    pub kind: String,
    #[serde(flatten)]
    pub cause: FailureCause,
    pub rejects: u64,
}

/// Most reject causes listed in the text form.
const CAUSES_SHOWN: usize = 5;

/// One answer's figures, from a row or from one of its turns.
struct Answer<'a> {
    prompt_tokens: u64,
    output_tokens: u64,
    ttft_ms: Option<u64>,
    latency_ms: u64,
    finish_reason: &'a str,
    inline_think: bool,
    cut_thinking: bool,
}

/// The answers a row is made of: itself, or each turn of a regenerated conversation, with the
/// endpoint that served it.
fn answers_of(r: &OutputRecord) -> Vec<(String, Answer<'_>)> {
    if r.turns.is_empty() {
        let ep = r.endpoint_tag.clone().unwrap_or_else(|| r.provider.clone());
        return vec![(
            ep,
            Answer {
                prompt_tokens: r.usage.prompt_tokens,
                output_tokens: r.usage.completion_tokens,
                ttft_ms: r.ttft_ms,
                latency_ms: r.latency_ms,
                finish_reason: &r.finish_reason,
                inline_think: r.inline_think,
                cut_thinking: r.cut_thinking,
            },
        )];
    }
    let last = r.turns.len() - 1;
    (r.turns.iter().enumerate())
        .map(|(i, t)| {
            (
                t.endpoint_tag.clone().unwrap_or_else(|| t.provider.clone()),
                Answer {
                    prompt_tokens: t.usage.prompt_tokens,
                    output_tokens: t.usage.completion_tokens,
                    ttft_ms: t.ttft_ms,
                    latency_ms: t.latency_ms,
                    finish_reason: &t.finish_reason,
                    inline_think: t.inline_think,
                    // Only the last turn may be cut while thinking (an earlier one is no
                    // history to go on from).
                    cut_thinking: i == last && r.cut_thinking,
                },
            )
        })
        .collect()
}

/// Everything about one dataset × endpoint before it is summed up.
#[derive(Default)]
struct Acc {
    row: Row,
    ttfts: Vec<u64>,
    gen_ms: u64,
    gen_tokens: u64,
    truncated: u64,
}

impl Acc {
    /// One written row: counted once, at its (last answer's) endpoint.
    fn add_row(&mut self) {
        self.row.prompts += 1;
    }

    /// One answer: a row's, or one turn of a regenerated conversation, at its endpoint.
    fn add_answer(&mut self, a: Answer) {
        self.row.answers += 1;
        self.row.prompt_tokens += a.prompt_tokens;
        self.row.output_tokens += a.output_tokens;
        if let Some(t) = a.ttft_ms {
            self.ttfts.push(t);
            let generating = a.latency_ms.saturating_sub(t);
            if generating > 0 && a.output_tokens > 1 {
                self.gen_ms += generating;
                self.gen_tokens += a.output_tokens - 1;
            }
        }
        if a.finish_reason == "length" {
            self.truncated += 1;
        }
        if a.inline_think {
            self.row.inline_think += 1;
        }
        if a.cut_thinking {
            self.row.cut_thinking += 1;
        }
    }

    fn merge(&mut self, o: &Acc) {
        self.row.prompts += o.row.prompts;
        self.row.answers += o.row.answers;
        self.row.inline_think += o.row.inline_think;
        self.row.cut_thinking += o.row.cut_thinking;
        self.row.prompt_tokens += o.row.prompt_tokens;
        self.row.output_tokens += o.row.output_tokens;
        self.row.usd += o.row.usd;
        self.row.rejected += o.row.rejected;
        for (k, n) in &o.row.errors {
            *self.row.errors.entry(k.clone()).or_default() += n;
        }
        self.ttfts.extend_from_slice(&o.ttfts);
        self.gen_ms += o.gen_ms;
        self.gen_tokens += o.gen_tokens;
        self.truncated += o.truncated;
    }

    fn finish(mut self) -> Row {
        self.ttfts.sort_unstable();
        let pct = |p: f64| -> Option<u64> {
            let n = self.ttfts.len();
            (n > 0).then(|| self.ttfts[((n as f64 * p).ceil() as usize).clamp(1, n) - 1])
        };
        let mut row = self.row;
        row.ttft_p50_ms = pct(0.50);
        row.ttft_p95_ms = pct(0.95);
        row.tok_per_s =
            (self.gen_ms > 0).then(|| self.gen_tokens as f64 * 1000.0 / self.gen_ms as f64);
        if row.prompts > 0 {
            row.mean_output_tokens = Some(row.output_tokens as f64 / row.prompts as f64);
        }
        if row.answers > 0 {
            row.truncation_rate = Some(self.truncated as f64 / row.answers as f64);
        }
        row
    }
}

/// A damaged file (see [`crate::store::scan`]) is an error naming its first bad line: a report
/// that silently left rows out would misstate the spend.
fn refuse_damage(f: &FileScan) -> Result<(), ReportError> {
    match (f.damage.first(), f.damaged) {
        (Some(d), n) => Err(ReportError::File {
            path: f.path.clone(),
            msg: format!(
                "line {} (byte {}): {}{}",
                d.line,
                d.offset,
                d.error,
                if n > 1 {
                    format!(" ({n} damaged lines in all; `harvest run --repair` quarantines them)")
                } else {
                    " (`harvest run --repair` quarantines it)".to_string()
                }
            ),
        }),
        _ => Ok(()),
    }
}

fn scan_error(e: ScanError) -> ReportError {
    match e {
        ScanError::Io { path, source } => ReportError::File {
            path,
            msg: source.to_string(),
        },
    }
}

/// The datasets of an output directory: the manifest's, else every `<name>.jsonl` there.
pub fn dataset_names(dir: &Path) -> Result<Vec<String>, ReportError> {
    if let Ok(text) = std::fs::read_to_string(manifest_path(dir)) {
        let m: Manifest = serde_json::from_str(&text).map_err(|e| ReportError::File {
            path: manifest_path(dir),
            msg: format!("not a harvest manifest: {e}"),
        })?;
        let mut names: Vec<String> = m.params.into_keys().collect();
        names.sort();
        return Ok(names);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| ReportError::File {
        path: dir.to_path_buf(),
        msg: e.to_string(),
    })?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter_map(|f| f.strip_suffix(".jsonl").map(str::to_string))
        .filter(|n| n != "spend" && !n.ends_with(".rejects") && !n.ends_with(".superseded"))
        .collect();
    names.sort();
    Ok(names)
}

impl Report {
    /// Reads an output directory. `order` lists datasets in the config's order when known.
    pub fn from_dir(dir: &Path, order: Option<&[String]>) -> Result<Report, ReportError> {
        let names = match order {
            Some(o) => o.to_vec(),
            None => dataset_names(dir)?,
        };
        let snapshot: Option<Snapshot> = std::fs::read_to_string(state_path(dir))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let mut g = gather(dir, &names)?;
        if let Some(s) = &snapshot
            && let (Some(a), Some(b)) = (s.key_usage_start, s.key_usage_now)
        {
            g.spend.api_usage_delta_usd = Some(b - a);
            g.spend.run_spent = Some(s.spent - s.carried_over);
        }
        Ok(assemble(dir, &names, snapshot.as_ref(), g))
    }
}

/// What reading a run's files gathers, before it is summed into a report.
struct Gathered {
    /// By (dataset index, endpoint).
    accs: BTreeMap<(usize, String), Acc>,
    spend: SpendCheck,
    /// Final rejects by dataset index.
    rejected: Vec<u64>,
    causes: HashMap<(String, FailureCause), u64>,
}

/// A generation id as 8 bytes, for the table of what each answer booked.
fn gid_key(g: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    g.hash(&mut h);
    h.finish()
}

/// Reads the ledger and every dataset's answers and rejects. Read-only and safe beside a live
/// run: its half-written last lines are not read.
fn gather(dir: &Path, names: &[String]) -> Result<Gathered, ReportError> {
    let index: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut g = Gathered {
        accs: BTreeMap::new(),
        spend: SpendCheck::default(),
        rejected: vec![0u64; names.len()],
        causes: HashMap::new(),
    };
    let (accs, spend) = (&mut g.accs, &mut g.spend);
    // What each answer's `complete` line booked, by a hash of its generation id (16 bytes an
    // answer), so that the records are compared with the answers they hold.
    let mut booked: HashMap<u64, Usd> = HashMap::new();
    let ledger = scan::scan_ledger(dir, |e: &SpendEntry| {
        spend.ledger += e.usd;
        if e.estimated {
            spend.estimated += e.usd;
        }
        match e.kind {
            SpendKind::Complete => {
                spend.answers += e.usd;
                if let Some(g) = &e.generation_id {
                    *booked.entry(gid_key(g)).or_default() += e.usd;
                }
            }
            SpendKind::Cancelled | SpendKind::Failed => spend.closed += e.usd,
            _ => spend.adjustments += e.usd,
        }
        let Some(&i) = index.get(e.dataset.as_str()) else {
            return;
        };
        let ep = e.endpoint.clone().unwrap_or_else(|| UNRESOLVED.to_string());
        let acc = accs.entry((i, ep)).or_default();
        acc.row.usd += e.usd;
        if let Some(kind) = &e.error {
            *acc.row.errors.entry(kind.clone()).or_default() += 1;
        }
    })
    .map_err(scan_error)?;
    for d in names {
        let i = index[d.as_str()];
        let found = scan::scan_dataset(dir, d, &ledger.completes, |r: &OutputRecord| {
            spend.records += r.cost_usd;
            let gids: Vec<&str> = if r.turns.is_empty() {
                r.generation_id.iter().map(String::as_str).collect()
            } else {
                r.turns
                    .iter()
                    .filter_map(|t| t.generation_id.as_deref())
                    .collect()
            };
            if gids.is_empty() {
                // A server that names no generation: the row is its own evidence.
                spend.answers_kept += r.cost_usd;
            }
            for g in gids {
                spend.answers_kept += booked.remove(&gid_key(g)).unwrap_or_default();
            }
            let mut last = None;
            for (ep, a) in answers_of(r) {
                accs.entry((i, ep.clone())).or_default().add_answer(a);
                last = Some(ep);
            }
            if let Some(ep) = last {
                accs.entry((i, ep)).or_default().add_row();
            }
        })
        .map_err(scan_error)?;
        refuse_damage(&found.outputs_file)?;
        refuse_damage(&found.rejects_file)?;
        g.rejected[i] = found.existing.rejects;
        if found.existing.rejects > 0 {
            scan::read_file(&rejects_path(dir, d), |r: RejectRecord| {
                *g.causes.entry((r.error_kind, r.cause)).or_default() += 1;
            })
            .map_err(scan_error)?;
        }
    }
    refuse_damage(&ledger.file)?;
    Ok(g)
}

/// Sums what was gathered into rows per (dataset, endpoint), per dataset and in total.
fn assemble(dir: &Path, names: &[String], snapshot: Option<&Snapshot>, g: Gathered) -> Report {
    let mut rows = Vec::new();
    let mut per_dataset: Vec<Acc> = names.iter().map(|_| Acc::default()).collect();
    let mut total = Acc::default();
    for ((i, ep), mut acc) in g.accs {
        acc.row.dataset = names[i].clone();
        acc.row.endpoint = ep;
        per_dataset[i].merge(&acc);
        total.merge(&acc);
        // A row with nothing in it (only `dispatched` lines, booked at $0) says nothing.
        let r = &acc.row;
        let empty = r.answers == 0 && r.usd == Usd::ZERO && r.errors.is_empty();
        if !empty {
            rows.push(acc.finish());
        }
    }
    let datasets = per_dataset
        .into_iter()
        .zip(names)
        .zip(&g.rejected)
        .map(|((mut a, n), &rej)| {
            a.row.dataset = n.clone();
            a.row.rejected = rej;
            total.row.rejected += rej;
            a.row.duplicates = snapshot
                .and_then(|s| s.datasets.iter().find(|d| &d.name == n))
                .map_or(0, |d| d.duplicates);
            total.row.duplicates += a.row.duplicates;
            a.row.endpoint = "all".into();
            a.finish()
        })
        .collect();
    total.row.dataset = "all".into();
    total.row.endpoint = "all".into();
    Report {
        schema: SCHEMA,
        output_dir: dir.display().to_string(),
        model: snapshot.map(|s| s.model.clone()),
        elapsed_s: snapshot.map(|s| s.elapsed_s),
        rows,
        datasets,
        total: total.finish(),
        spend: g.spend,
        reject_causes: reject_causes(g.causes),
    }
}

/// The final rejects by kind and cause, the most common first.
fn reject_causes(causes: HashMap<(String, FailureCause), u64>) -> Vec<RejectCause> {
    let mut v: Vec<RejectCause> = causes
        .into_iter()
        .map(|((kind, cause), rejects)| RejectCause {
            kind,
            cause,
            rejects,
        })
        .collect();
    v.sort_by(|a, b| {
        (b.rejects.cmp(&a.rejects)).then_with(|| (&a.kind, &a.cause).cmp(&(&b.kind, &b.cause)))
    });
    v
}

/// The report of `dir`, for printing after a run; a failure to read it is logged, not fatal.
pub fn after_run(dir: &Path, order: &[String]) -> Option<Report> {
    match Report::from_dir(dir, Some(order)) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!("could not build the end-of-run report: {e}");
            None
        }
    }
}

mod render;
#[cfg(test)]
mod tests;
