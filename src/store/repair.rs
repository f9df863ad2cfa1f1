//! The only changes made to an output directory's JSONL files outside the writer, all by a
//! starting run that holds the directory's lock (readers never call this): cutting a torn last
//! line (any resume), and, when the operator asked with `harvest run --repair`, moving damaged
//! lines to `<file>.damaged` and rebuilding a lost ledger from the outputs. See
//! [`super::scan`] for what counts as torn and what as damaged.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::domain::Usd;

use super::kept_booking::{book_kept_answers, kept_answers_note};
use super::output::{
    OutputRecord, RejectRecord, SpendEntry, SpendKind, append_spend, ledger_path, output_path,
    rejects_path, turns_path,
};
use super::scan::{self, DirScan, LineClass, ScanError, Torn};

/// The `attempt` of ledger lines this file rebuilds (defined where the ledger is read).
pub(crate) use super::scan::REBUILT;

#[derive(Debug, thiserror::Error)]
pub(crate) enum RepairError {
    /// The directory needs `--repair` (or another look) before a run may start.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Scan(#[from] ScanError),
    #[error("cannot repair {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} changed while it was being repaired (is another program writing it?)")]
    Changed { path: PathBuf },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RepairError + '_ {
    move |source| RepairError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The quarantine file of `path`: `<file>.damaged`.
pub(crate) fn damaged_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".damaged");
    path.with_file_name(name)
}

/// Cuts the torn last line `torn` found by a scan, after checking that the file is still the
/// length the scan saw (a torn line is only ever cut as it was read).
pub(crate) fn cut_torn_tail(path: &Path, torn: Torn) -> Result<(), RepairError> {
    let f = super::no_follow(OpenOptions::new().write(true))
        .open(path)
        .map_err(io(path))?;
    let len = f.metadata().map_err(io(path))?.len();
    if len != torn.offset + torn.len {
        return Err(RepairError::Changed {
            path: path.to_path_buf(),
        });
    }
    f.set_len(torn.offset).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// What quarantining one file did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Quarantined {
    pub kept: u64,
    pub moved: u64,
}

/// One line of a `.damaged` file.
#[derive(serde::Serialize)]
struct DamagedLine<'a> {
    at: String,
    line: u64,
    offset: u64,
    error: &'a str,
    /// The line as it was, without its `\n` (lossy when it was not UTF-8; then `raw_hex` too).
    raw: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw_hex: Option<String>,
}

/// Moves every damaged line of `path` (read as `T`) to `<file>.damaged`, one JSON line each with
/// its line number, byte offset, serde's reason and the raw text, and keeps every other byte:
/// the kept lines are written to a temporary file that replaces the original atomically, after
/// the quarantine file is synced (a crash in between leaves a line in both, never in neither).
pub(crate) fn quarantine<T: DeserializeOwned>(path: &Path) -> Result<Quarantined, RepairError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.repair.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
    ));
    let src = File::open(path).map_err(io(path))?;
    let mut input = BufReader::with_capacity(1 << 20, src);
    let tmp_file = super::create_replacement(&tmp).map_err(io(&tmp))?;
    let mut kept = BufWriter::with_capacity(1 << 20, tmp_file);
    let qpath = damaged_path(path);
    let mut quarantine: Option<File> = None;
    let mut report = Quarantined::default();
    let (mut buf, mut offset, mut number) = (Vec::new(), 0u64, 0u64);
    let at = chrono::Utc::now().to_rfc3339();
    loop {
        buf.clear();
        let n = input.read_until(b'\n', &mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        number += 1;
        match scan::classify::<T>(&buf) {
            LineClass::Damaged(error) => {
                let body = &buf[..buf.len() - 1];
                let (raw, raw_hex) = match std::str::from_utf8(body) {
                    Ok(s) => (s.to_string(), None),
                    Err(_) => (
                        String::from_utf8_lossy(body).into_owned(),
                        Some(body.iter().map(|b| format!("{b:02x}")).collect()),
                    ),
                };
                let mut line = serde_json::to_vec(&DamagedLine {
                    at: at.clone(),
                    line: number,
                    offset,
                    error: &error,
                    raw,
                    raw_hex,
                })
                .map_err(|e| io(&qpath)(std::io::Error::other(e)))?;
                line.push(b'\n');
                let q = match quarantine.as_mut() {
                    Some(q) => q,
                    None => quarantine.insert(
                        super::no_follow(OpenOptions::new().create(true).append(true))
                            .open(&qpath)
                            .map_err(io(&qpath))?,
                    ),
                };
                q.write_all(&line).map_err(io(&qpath))?;
                report.moved += 1;
            }
            other => {
                if matches!(other, LineClass::Good(_)) {
                    report.kept += 1;
                }
                kept.write_all(&buf).map_err(io(&tmp))?;
            }
        }
        offset += n as u64;
    }
    if let Some(q) = quarantine {
        q.sync_all().map_err(io(&qpath))?;
    }
    replace_with(kept, &tmp, path)?;
    Ok(report)
}

/// The last step of a rewrite: the kept lines (written to `tmp`, beside `path`) are synced and
/// renamed over `path`, and the directory synced. The caller has synced whatever the moved
/// lines went to first, so that a crash leaves a line in both places, never in neither.
pub(super) fn replace_with(
    kept: BufWriter<File>,
    tmp: &Path,
    path: &Path,
) -> Result<(), RepairError> {
    let kept = kept.into_inner().map_err(|e| io(tmp)(e.into_error()))?;
    kept.sync_all().map_err(io(tmp))?;
    drop(kept);
    std::fs::rename(tmp, path).map_err(io(path))?;
    if let Ok(d) = File::open(path.parent().unwrap_or(Path::new("."))) {
        // The rename is durable once the directory is synced; a failure here loses nothing.
        let _ = d.sync_all();
    }
    Ok(())
}

/// Appends a `complete` line (attempt [`REBUILT`]) for each output of `datasets` that the ledger
/// has not booked, at the output's own cost. Returns how many lines and dollars.
pub(crate) fn rebuild_ledger(
    dir: &Path,
    datasets: &[String],
    completes: &HashSet<String>,
) -> Result<(u64, Usd), RepairError> {
    let at = chrono::Utc::now().to_rfc3339();
    let mut lines = Vec::new();
    for d in datasets {
        scan::read_file(&output_path(dir, d), |r: OutputRecord| {
            if completes.contains(&r.id) {
                return;
            }
            lines.push(SpendEntry {
                endpoint: r.endpoint_tag,
                usd: r.cost_usd,
                prompt_tokens: r.usage.prompt_tokens,
                completion_tokens: r.usage.completion_tokens,
                generation_id: r.generation_id,
                attempt: Some(REBUILT.to_string()),
                ..SpendEntry::new(SpendKind::Complete, at.clone(), r.id, d.clone())
            });
        })?;
    }
    let usd = lines.iter().map(|e| e.usd).sum();
    if !lines.is_empty() {
        append_spend(dir, &lines).map_err(io(&ledger_path(dir)))?;
    }
    Ok((lines.len() as u64, usd))
}

/// An output directory made ready for a run: what it holds, and what was changed to get there.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub scan: DirScan,
    /// One sentence per change, for the operator.
    pub notes: Vec<String>,
}

/// Reads `dir` for a starting run of `datasets`; refuses damage and a lost ledger unless
/// `repair`, then cuts torn tails (and with `repair` quarantines damaged lines and rebuilds the
/// ledger). Nothing is changed when it refuses. The caller must hold the directory's lock.
/// `write`: false for `run --check`, which changes nothing and says what a run would do.
pub(crate) fn prepare(
    dir: &Path,
    datasets: &[String],
    repair: bool,
    write: bool,
) -> Result<Prepared, RepairError> {
    let scan = scan::scan_dir(dir, datasets)?;
    let problems = scan.problems();
    if !problems.is_empty() && !repair {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(RepairError::Refused(format!(
            "{}. Nothing was sent and no file was changed. `harvest run --repair` moves each \
             damaged line to <file>.damaged, keeps every good line, and rebuilds a missing \
             ledger from the outputs' costs",
            list.join("; ")
        )));
    }
    let mut notes = Vec::new();
    // The turns file's torn tail too: the next run appends to it, and a line it joined onto an
    // unterminated one would spoil both.
    let turns = scan::read_file(&turns_path(dir), |_: serde::de::IgnoredAny| {})?;
    if !write {
        for f in scan.files().chain([&turns]) {
            if let Some(t) = f.torn {
                notes.push(format!(
                    "{}: a run would cut a torn last line ({} bytes at byte {}) left by a crash",
                    f.path.display(),
                    t.len,
                    t.offset
                ));
            }
        }
        let booking = book_kept_answers(dir, &scan)?;
        notes.extend(kept_answers_note(dir, &booking, "a run would book"));
        if repair && !problems.is_empty() {
            notes.push(format!(
                "--repair would move the damaged lines aside: {}",
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        return Ok(Prepared { scan, notes });
    }
    for f in scan.files().chain([&turns]) {
        if let Some(t) = f.torn {
            cut_torn_tail(&f.path, t)?;
            tracing::warn!(
                "{}: cut {} bytes of a torn last line",
                f.path.display(),
                t.len
            );
            notes.push(format!(
                "{}: cut a torn last line ({} bytes at byte {}) left by a crash",
                f.path.display(),
                t.len,
                t.offset
            ));
        }
    }
    let booking = book_kept_answers(dir, &scan)?;
    if !booking.lines.is_empty() {
        append_spend(dir, &booking.lines).map_err(io(&ledger_path(dir)))?;
    }
    notes.extend(kept_answers_note(dir, &booking, "booked"));
    if repair {
        let ledger = ledger_path(dir);
        let mut damaged = vec![(ledger.clone(), scan.ledger.file.damaged)];
        for d in &scan.datasets {
            damaged.push((output_path(dir, &d.name), d.outputs_file.damaged));
            damaged.push((rejects_path(dir, &d.name), d.rejects_file.damaged));
        }
        for (path, n) in damaged.into_iter().filter(|(_, n)| *n > 0) {
            let q = if path == ledger {
                quarantine::<SpendEntry>(&path)?
            } else if path.to_string_lossy().ends_with(".rejects.jsonl") {
                quarantine::<RejectRecord>(&path)?
            } else {
                quarantine::<OutputRecord>(&path)?
            };
            if q.moved != n {
                return Err(RepairError::Changed { path });
            }
            notes.push(format!(
                "{}: moved {} damaged line{} to {}, kept {} good ones",
                path.display(),
                q.moved,
                if q.moved == 1 { "" } else { "s" },
                damaged_path(&path).display(),
                q.kept
            ));
        }
        let ledger_lost = scan
            .problems()
            .iter()
            .any(|p| matches!(p, scan::Problem::LedgerMissing { .. }));
        if ledger_lost || scan.ledger.file.damaged > 0 {
            // The ledger has lost lines: the outputs' costs are the least that was spent.
            let after = scan::scan_ledger(dir, |_| {})?;
            let (n, usd) = rebuild_ledger(dir, datasets, &after.completes)?;
            notes.push(format!(
                "{}: rebuilt {n} `complete` line{} ({usd}) from the outputs' costs (marked \
                 attempt \"{REBUILT}\"; the run confirms each at /generation as it goes); \
                 failed and cancelled attempts of earlier runs cannot be rebuilt and are not \
                 counted",
                ledger.display(),
                if n == 1 { "" } else { "s" },
            ));
        }
    }
    if notes.is_empty() {
        return Ok(Prepared { scan, notes });
    }
    // Read again what is now on disk, so that the run counts exactly what it will resume from.
    let scan = scan::scan_dir(dir, datasets)?;
    Ok(Prepared { scan, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Id {
        id: String,
    }

    #[test]
    fn quarantine_keeps_good_lines_and_moves_bad_ones() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("a.jsonl");
        std::fs::write(&p, b"{\"id\":\"a\"}\nbad \xff\n{\"id\":\"c\"}\nworse\n").expect("write");
        let q = quarantine::<Id>(&p).expect("quarantine");
        assert_eq!(q, Quarantined { kept: 2, moved: 2 });
        assert_eq!(
            std::fs::read_to_string(&p).expect("read"),
            "{\"id\":\"a\"}\n{\"id\":\"c\"}\n"
        );
        let d = std::fs::read_to_string(damaged_path(&p)).expect("damaged");
        let lines: Vec<serde_json::Value> = d
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            (lines[0]["line"].as_u64(), lines[0]["offset"].as_u64()),
            (Some(2), Some(11))
        );
        assert_eq!(lines[0]["raw_hex"], "62616420ff");
        assert_eq!(
            (lines[1]["line"].as_u64(), lines[1]["raw"].as_str()),
            (Some(4), Some("worse"))
        );
        assert!(
            lines[1]["error"]
                .as_str()
                .expect("error")
                .contains("expected")
        );
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 2);
    }

    #[test]
    fn a_torn_tail_is_cut_only_as_it_was_read() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("a.jsonl");
        std::fs::write(&p, "{\"id\":\"a\"}\n{\"id\"").expect("write");
        let t = Torn { offset: 11, len: 5 };
        std::fs::write(&p, "{\"id\":\"a\"}\n{\"id\":\"b\"").expect("grew");
        assert!(matches!(
            cut_torn_tail(&p, t),
            Err(RepairError::Changed { .. })
        ));
        std::fs::write(&p, "{\"id\":\"a\"}\n{\"id\"").expect("write");
        cut_torn_tail(&p, t).expect("cut");
        assert_eq!(
            std::fs::read_to_string(&p).expect("read"),
            "{\"id\":\"a\"}\n"
        );
    }
}
