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
    pub(crate) snapshot: Option<Snapshot>,
    /// The ledger's total: what the shard was billed.
    pub(crate) spent: Usd,
    /// What could not be read: a manifest or state file that is there but damaged, ledger
    /// lines that are not counted (reliability-probe-4 N12: these were silent).
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
    pub(crate) done: u64,
    pub(crate) rejected: u64,
    pub(crate) total: u64,
    pub(crate) spent: Usd,
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
            let manifest: Option<Manifest> =
                read_json(&manifest_path(dir), "manifest.json", &mut unreadable);
            let snapshot: Option<Snapshot> =
                read_json(&state_path(dir), "state.json", &mut unreadable);
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
                snapshot,
                spent: ledger.total,
                unreadable,
            })
        })
        .collect()
}

/// A JSON file of a shard's directory; `None` when it is absent, or (said in `unreadable`)
/// cannot be read or parsed: a damaged file is not an absent one.
fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
    unreadable: &mut Vec<String>,
) -> Option<T> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            unreadable.push(format!("{what}: {e}"));
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(v) => Some(v),
        Err(e) => {
            unreadable.push(format!("{what} is damaged: {e}"));
            None
        }
    }
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
        done: 0,
        rejected: 0,
        total: 0,
        spent: Usd::ZERO,
    };
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for f in found {
        let shown = f.dir.display().to_string();
        let shard = shard_of(f);
        let why = match (&f.manifest, shard.as_deref().and_then(parse), first) {
            (None, ..) if manifest_path(&f.dir).exists() => {
                Some("its manifest cannot be read (below)".to_string())
            }
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
        let present: Vec<u32> = view
            .shards
            .iter()
            .filter_map(|r| r.shard.as_deref().and_then(parse))
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
    for (dir, what) in &v.unreadable {
        t.push_str(&format!("unreadable: {dir}: {what}\n"));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn found(dir: &str, shard: Option<&str>, model: &str, done: u64, usd: f64) -> Found {
        let mut snapshot = crate::tui::testkit::kimi_snapshot();
        snapshot.state = RunState::Done;
        snapshot.done = done;
        snapshot.rejected = 1;
        snapshot.total = done + 1;
        Found {
            dir: dir.into(),
            manifest: Some(Manifest {
                model: model.into(),
                params: HashMap::new(),
                created_at: String::new(),
                harvest_version: String::new(),
                shard: shard.map(Into::into),
                fields: None,
                prompt_files: None,
                base_url: None,
                api_key_env: None,
            }),
            snapshot: Some(snapshot),
            spent: Usd::from_f64(usd),
            unreadable: Vec::new(),
        }
    }

    #[test]
    fn a_run_beside_a_jobs_shards_stays_within_the_job() {
        let tmp = tempfile::tempdir().expect("tmp");
        let out = tmp.path().join("out");
        for k in 0..3 {
            let dir = out.join(format!("shard-{k}-of-3"));
            std::fs::create_dir_all(&dir).expect("dir");
            let m = found("", Some(&format!("{k}/3")), "m", 0, 0.0).manifest;
            std::fs::write(
                manifest_path(&dir),
                serde_json::to_string(&m).expect("json"),
            )
            .expect("manifest");
        }
        let whole = check_run_into(&out, &out, None).expect_err("a whole-job run");
        assert!(
            whole.contains(
                "holds the shard directories of a job (shard-0-of-3, shard-1-of-3, \
                 shard-2-of-3), and is none of them"
            ),
            "{whole}"
        );
        assert!(
            whole.contains("Run one of its shards (--shard K/3"),
            "{whole}"
        );
        let other = check_run_into(&out, &out.join("shard-0-of-4"), Some((0, 4)))
            .expect_err("another split");
        assert!(
            other.contains("holds shard 0/3 of this job: --shard 0/4"),
            "{other}"
        );
        // Given as its own directory, the parent is refused too.
        assert!(check_run_into(&out, &out, Some((1, 3))).is_err());
        let own = check_run_into(&out, &out.join("shard-1-of-3"), Some((1, 3))).expect("shard");
        assert_eq!(own.siblings, 2, "the other two shards count");
        // A shard elsewhere (--shard-dir) still counts the job's shards beside the parent.
        let away = tmp.path().join("scratch");
        let there = check_run_into(&out, &away, Some((1, 3))).expect("shard");
        assert_eq!(there.siblings, 2);
        // Nothing there yet: a first run.
        let fresh = tmp.path().join("new");
        assert_eq!(
            check_run_into(&fresh, &fresh, None)
                .expect("fresh")
                .siblings,
            0
        );
    }

    /// The other direction of N6 (reliability-probe-5 P5): a shard into its own directory
    /// under a directory that holds a run's records would buy that run's ids again, unseen by
    /// it; refused, naming the files. The directory itself (`--shard-dir`) sees them and may
    /// take the shard; a manifest alone, or nothing, is no run.
    #[test]
    fn a_shard_under_a_directory_that_holds_a_run_is_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let out = tmp.path().join("out");
        std::fs::create_dir_all(&out).expect("dir");
        let shard = out.join("shard-0-of-3");
        let write_manifest = |shard: Option<&str>| {
            let m = found("", shard, "m", 0, 0.0).manifest;
            std::fs::write(
                manifest_path(&out),
                serde_json::to_string(&m).expect("json"),
            )
            .expect("manifest");
        };
        write_manifest(None);
        assert!(
            check_run_into(&out, &shard, Some((0, 3))).is_ok(),
            "a manifest alone holds nothing to buy again"
        );
        std::fs::write(crate::store::output::ledger_path(&out), "{}\n").expect("ledger");
        let e = check_run_into(&out, &shard, Some((0, 3))).expect_err("beside a whole run");
        assert!(
            e.contains("holds the records of a run without --shard (spend.jsonl): --shard 0/3")
                && e.contains("--shard 0/3 --shard-dir"),
            "{e}"
        );
        // Elsewhere (--shard-dir) too: the ids are the same.
        let away = tmp.path().join("away");
        assert!(check_run_into(&out, &away, Some((0, 3))).is_err());
        // Into the run's own directory: it sees what that run did.
        assert!(check_run_into(&out, &out, Some((0, 3))).is_ok());
        write_manifest(Some("1/3"));
        let e = check_run_into(&out, &shard, Some((0, 3))).expect_err("beside a shard's run");
        assert!(
            e.contains("holds the records of a run of shard 1/3")
                && e.contains("Run shard 1/3 there"),
            "{e}"
        );
    }

    /// What cannot be read is said, not counted as nothing (reliability-probe-4 N12): a
    /// damaged manifest is not an absent one, a shard with no state.json has unknown counts,
    /// and damaged ledger lines are not in the spend.
    #[test]
    fn a_shard_whose_records_cannot_all_be_read_is_named() {
        let tmp = tempfile::tempdir().expect("tmp");
        let out = tmp.path().join("out");
        let dirs: Vec<PathBuf> = (0..2)
            .map(|k| out.join(format!("shard-{k}-of-2")))
            .collect();
        for d in &dirs {
            std::fs::create_dir_all(d).expect("dir");
        }
        std::fs::write(manifest_path(&dirs[0]), "{\"model\": ").expect("damaged");
        let m = found("", Some("1/2"), "m", 0, 0.0).manifest;
        std::fs::write(
            manifest_path(&dirs[1]),
            serde_json::to_string(&m).expect("json"),
        )
        .expect("manifest");
        std::fs::write(
            crate::store::output::ledger_path(&dirs[1]),
            "not a ledger line\n",
        )
        .expect("ledger");
        let v = assemble(&read(&dirs).expect("read"));
        let text = render(&v);
        assert!(
            text.contains("shard-0-of-2: its manifest cannot be read (below)"),
            "{text}"
        );
        assert!(
            text.contains("shard-0-of-2: manifest.json is damaged"),
            "{text}"
        );
        assert!(
            text.contains(
                "shard-1-of-2: no state.json (not started, or stopped before its first save)"
            ),
            "{text}"
        );
        assert!(
            text.contains("shard-1-of-2: 1 ledger lines cannot be read and are not in its spend"),
            "{text}"
        );
    }

    #[test]
    fn the_job_names_what_is_missing_twice_or_from_another_config() {
        let k = "moonshotai/kimi-k2.5";
        let v = assemble(&[
            found("out/shard-2-of-4", Some("2/4"), k, 10, 1.5),
            found("out/shard-0-of-4", Some("0/4"), k, 20, 2.0),
            found("copy/shard-0-of-4", Some("0/4"), k, 20, 2.0),
            found("old/shard-1-of-3", Some("1/3"), k, 5, 0.5),
            found("other/shard-3-of-4", Some("3/4"), "other/model", 7, 0.7),
            found("whole", None, k, 100, 9.0),
        ]);
        assert_eq!(v.of, Some(4));
        assert_eq!(v.missing, vec![1], "shard 1 of 4 has no directory");
        assert_eq!(v.duplicated, vec!["0/4".to_string()]);
        assert_eq!(
            v.other_config,
            vec![
                (
                    "old/shard-1-of-3".to_string(),
                    "a shard of 3, the job has 4".to_string()
                ),
                (
                    "other/shard-3-of-4".to_string(),
                    "model other/model (the job's: moonshotai/kimi-k2.5)".to_string()
                ),
                (
                    "whole".to_string(),
                    "not a shard (run without --shard)".to_string()
                ),
            ]
        );
        assert_eq!((v.done, v.rejected, v.total), (162, 6, 168));
        assert_eq!(v.spent, Usd::from_f64(15.7));
        let order: Vec<Option<&str>> = v.shards.iter().map(|r| r.shard.as_deref()).collect();
        assert_eq!(
            order,
            [
                None,
                Some("0/4"),
                Some("0/4"),
                Some("1/3"),
                Some("2/4"),
                Some("3/4")
            ]
        );
        let text = render(&v);
        assert!(text.starts_with("job: 6 shard directories of 4 shards; 162 done, 6 rejected, 168 total; spent $15.70\n"), "{text}");
        assert!(text.contains("missing: shard 1 of 4"), "{text}");
        assert!(
            text.contains("duplicated: shard 0/4 in more than one directory"),
            "{text}"
        );
    }
}
