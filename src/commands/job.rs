//! A job run as shards, seen as one: the shard directories of a parent (`out/shard-K-of-N`, as
//! `--shard` makes them) or several directories given, each with its manifest (which shard it
//! holds, under which model and parameters), its state file and its ledger. `status` shows
//! the job's totals, a row per shard, and which shards are missing, present twice or from
//! another config; `export` writes the shards' rows as one training set.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::domain::Usd;
use crate::engine::{Manifest, RunState, Snapshot, manifest_path, state_path};

/// One shard directory as found.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub(crate) dir: PathBuf,
    pub(crate) manifest: Option<Manifest>,
    /// Why the manifest that is there could not be read (the parse or read error).
    pub(crate) manifest_error: Option<String>,
    pub(crate) snapshot: Option<Snapshot>,
    /// The ledger's total: what the shard was billed.
    pub(crate) spent: Usd,
    /// What could not be read: a state file that is there but damaged, ledger lines that are
    /// not counted (reliability-probe-4 N12: these were silent).
    pub(crate) unreadable: Vec<String>,
}

/// A shard's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct ShardRow {
    pub(crate) dir: String,
    /// `K/N`; `None` for a directory that is no shard (a whole job's).
    pub(crate) shard: Option<String>,
    pub(crate) state: Option<RunState>,
    pub(crate) done: u64,
    pub(crate) rejected: u64,
    pub(crate) total: u64,
    pub(crate) spent: Usd,
    pub(crate) budget: Option<Usd>,
}

/// The job.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct JobView {
    pub(crate) shards: Vec<ShardRow>,
    /// How many shards the job has (the most common N among the shards).
    pub(crate) of: Option<u32>,
    /// Shard indexes with no directory.
    pub(crate) missing: Vec<u32>,
    /// Shards found in more than one directory.
    pub(crate) duplicated: Vec<String>,
    /// Directories whose model, parameters or N differ from the job's (the first shard's), and
    /// directories that are no shard: each with why.
    pub(crate) other_config: Vec<(String, String)>,
    /// Directories whose records could not all be read, each with what.
    pub(crate) unreadable: Vec<(String, String)>,
    /// Directories whose manifest is there but cannot be read: which shard they hold, of
    /// which model and parameters, is unknown.
    pub(crate) damaged: Vec<DamagedManifest>,
    pub(crate) done: u64,
    pub(crate) rejected: u64,
    pub(crate) total: u64,
    pub(crate) spent: Usd,
}

/// A shard directory's manifest that is there but cannot be read.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct DamagedManifest {
    pub(crate) dir: String,
    /// The manifest's path.
    pub(crate) path: String,
    /// The parse or read error.
    pub(crate) error: String,
    /// `K/N`, from a directory named as `--shard` names it (`shard-K-of-N`).
    pub(crate) named: Option<String>,
}

impl DamagedManifest {
    /// What status says of it: the file, the error, what is (not) known.
    pub(crate) fn said(&self) -> String {
        let named = match &self.named {
            Some(s) => {
                let (k, n) = s.split_once('/').unwrap_or((s, "?"));
                format!("its directory's name says shard {k} of {n}; ")
            }
            None => String::new(),
        };
        format!(
            "{}: {} ({named}its model and parameters are unknown)",
            self.path, self.error
        )
    }
}

/// The directories a status or an export reads as one job: several given, or the shard
/// directories of one parent that is not itself an output directory. `None`: `dirs` is one
/// run's directory.
pub(crate) fn shard_dirs(dirs: &[PathBuf]) -> Option<Vec<PathBuf>> {
    match dirs {
        [] => None,
        [one] => {
            if manifest_path(one).exists() || state_path(one).exists() {
                return None;
            }
            let mut found: Vec<PathBuf> = std::fs::read_dir(one)
                .ok()?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("shard-"))
                        && manifest_path(p).exists()
                })
                .collect();
            found.sort();
            (!found.is_empty()).then_some(found)
        }
        many => Some(many.to_vec()),
    }
}

/// The directories that hold a job's records: the shard directories under `dir`, or `dir`
/// itself when it is one run's (or holds nothing yet).
pub(crate) fn job_dirs(dir: &Path) -> Vec<PathBuf> {
    shard_dirs(&[dir.to_path_buf()]).unwrap_or_else(|| vec![dir.to_path_buf()])
}

mod run_into;
pub(crate) use run_into::{Around, check_run_into};

/// Reads each directory's manifest, state and ledger.
pub(crate) fn read(dirs: &[PathBuf]) -> Result<Vec<Found>, String> {
    dirs.iter()
        .map(|dir| {
            if !dir.is_dir() {
                return Err(format!("{} is not a directory", dir.display()));
            }
            let mut unreadable = Vec::new();
            let (manifest, manifest_error) = match read_json(&manifest_path(dir)) {
                Ok(m) => (m, None),
                Err(e) => (None, Some(e)),
            };
            let snapshot: Option<Snapshot> = read_json(&state_path(dir)).unwrap_or_else(|e| {
                unreadable.push(format!("state.json cannot be read: {e}"));
                None
            });
            if snapshot.is_none() && !state_path(dir).exists() {
                unreadable.push(
                    "no state.json (not started, or stopped before its first save): its counts \
                     are not known"
                        .to_string(),
                );
            }
            let ledger = crate::store::scan::scan_ledger(dir, |_| {})
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            if let Some(first) = ledger.file.damage_text() {
                unreadable.push(format!(
                    "{} ledger lines cannot be read and are not in its spend (first: {first}; \
                     `harvest run --repair` quarantines them)",
                    ledger.file.damaged
                ));
            }
            Ok(Found {
                dir: dir.clone(),
                manifest,
                manifest_error,
                snapshot,
                spent: ledger.total,
                unreadable,
            })
        })
        .collect()
}

/// A JSON file of a shard's directory; `None` when it is absent, an error when it cannot be
/// read or parsed: a damaged file is not an absent one.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// `K/N` of a directory named as `--shard` names it: `shard-K-of-N`.
fn named_shard(dir: &Path) -> Option<(u32, u32)> {
    let name = dir.file_name()?.to_str()?.strip_prefix("shard-")?;
    let (k, n) = name.split_once("-of-")?;
    parse(&format!("{k}/{n}"))
}

/// `K/N` as numbers.
fn parse(s: &str) -> Option<(u32, u32)> {
    crate::store::prompts::parse_shard(s).ok()
}

/// The job the directories make.
pub(crate) fn assemble(found: &[Found]) -> JobView {
    let shard_of = |f: &Found| f.manifest.as_ref().and_then(|m| m.shard.clone());
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for f in found {
        if let Some((_, n)) = shard_of(f).as_deref().and_then(parse) {
            *counts.entry(n).or_default() += 1;
        }
    }
    let of = counts
        .iter()
        .max_by_key(|(n, c)| (**c, **n))
        .map(|(n, _)| *n);
    let first = found
        .iter()
        .find(|f| shard_of(f).as_deref().and_then(parse).map(|s| s.1) == of)
        .and_then(|f| f.manifest.as_ref());
    let mut view = JobView {
        shards: Vec::new(),
        of,
        missing: Vec::new(),
        duplicated: Vec::new(),
        other_config: Vec::new(),
        unreadable: Vec::new(),
        damaged: Vec::new(),
        done: 0,
        rejected: 0,
        total: 0,
        spent: Usd::ZERO,
    };
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for f in found {
        let shown = f.dir.display().to_string();
        let shard = shard_of(f);
        if let Some(error) = &f.manifest_error {
            view.damaged.push(DamagedManifest {
                dir: shown.clone(),
                path: manifest_path(&f.dir).display().to_string(),
                error: error.clone(),
                named: named_shard(&f.dir).map(|(k, n)| format!("{k}/{n}")),
            });
        }
        let why = match (&f.manifest, shard.as_deref().and_then(parse), first) {
            // Said as damaged (above).
            (None, ..) if f.manifest_error.is_some() => None,
            (None, ..) => Some("no manifest: not a harvest output directory".to_string()),
            (Some(_), None, _) => Some("not a shard (run without --shard)".to_string()),
            (Some(_), Some((_, n)), _) if Some(n) != of => {
                Some(format!("a shard of {n}, the job has {}", of.unwrap_or(0)))
            }
            (Some(m), Some(_), Some(j)) if m.model != j.model => {
                Some(format!("model {} (the job's: {})", m.model, j.model))
            }
            (Some(m), Some(_), Some(j)) if m.params != j.params => {
                Some("other request parameters than the job's".to_string())
            }
            (Some(m), Some(_), Some(j))
                if m.fields.is_some() && j.fields.is_some() && m.fields != j.fields =>
            {
                Some("other field names (id_field, prompt_field, ...) than the job's".to_string())
            }
            _ => None,
        };
        if let Some(why) = why {
            view.other_config.push((shown.clone(), why));
        }
        for what in &f.unreadable {
            view.unreadable.push((shown.clone(), what.clone()));
        }
        if let Some(s) = &shard {
            *seen.entry(s.clone()).or_default() += 1;
        }
        let snap = f.snapshot.as_ref();
        let row = ShardRow {
            dir: shown,
            shard,
            state: snap.map(|s| s.state),
            done: snap.map_or(0, |s| s.done),
            rejected: snap.map_or(0, |s| s.rejected),
            total: snap.map_or(0, |s| s.total),
            spent: f.spent,
            budget: snap.map(|s| s.budget),
        };
        view.done += row.done;
        view.rejected += row.rejected;
        view.total += row.total;
        view.spent += row.spent;
        view.shards.push(row);
    }
    view.duplicated = seen
        .into_iter()
        .filter(|(_, c)| *c > 1)
        .map(|(s, _)| s)
        .collect();
    if let Some(n) = of {
        // A directory whose manifest is damaged is there: its name says which shard.
        let present: Vec<u32> = view
            .shards
            .iter()
            .filter_map(|r| r.shard.as_deref().and_then(parse))
            .chain(
                view.damaged
                    .iter()
                    .filter_map(|d| d.named.as_deref().and_then(parse)),
            )
            .filter(|s| s.1 == n)
            .map(|s| s.0)
            .collect();
        view.missing = (0..n).filter(|k| !present.contains(k)).collect();
    }
    view.shards
        .sort_by_key(|r| r.shard.as_deref().and_then(parse).map(|s| s.0));
    view
}

/// The job as text: a row per shard, the totals, what is wrong.
pub(crate) fn render(v: &JobView) -> String {
    let g = crate::domain::group_thousands;
    let mut t = format!(
        "job: {} shard directories{}; {} done, {} rejected, {} total; spent {}\n",
        v.shards.len(),
        v.of.map(|n| format!(" of {n} shards")).unwrap_or_default(),
        g(v.done),
        g(v.rejected),
        g(v.total),
        v.spent
    );
    t.push_str(&format!(
        "{:<8} {:<10} {:>10} {:>8} {:>10} {:>12}  dir\n",
        "shard", "state", "done", "rej", "total", "spent"
    ));
    for r in &v.shards {
        let state = r
            .state
            .map_or("-".to_string(), |s| format!("{s:?}").to_uppercase());
        t.push_str(&format!(
            "{:<8} {:<10} {:>10} {:>8} {:>10} {:>12}  {}\n",
            r.shard.as_deref().unwrap_or("-"),
            state,
            g(r.done),
            g(r.rejected),
            g(r.total),
            r.spent.to_string(),
            r.dir
        ));
    }
    if !v.missing.is_empty() {
        let ks: Vec<String> = v.missing.iter().map(u32::to_string).collect();
        t.push_str(&format!(
            "missing: shard {} of {} (no directory: not started, or elsewhere)\n",
            ks.join(", "),
            v.of.unwrap_or(0)
        ));
    }
    if !v.duplicated.is_empty() {
        t.push_str(&format!(
            "duplicated: shard {} in more than one directory: their rows are the same ids, \
             counted twice above\n",
            v.duplicated.join(", ")
        ));
    }
    for (dir, why) in &v.other_config {
        t.push_str(&format!("other config: {dir}: {why}\n"));
    }
    for d in &v.damaged {
        t.push_str(&format!("damaged manifest: {}\n", d.said()));
    }
    for (dir, what) in &v.unreadable {
        t.push_str(&format!("unreadable: {dir}: {what}\n"));
    }
    t
}

#[cfg(test)]
pub(crate) mod tests;
