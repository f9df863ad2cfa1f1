//! The only changes made to an output directory's JSONL files outside the writer, all by a
//! starting run that holds the directory's lock (readers never call this): cutting a torn last
//! line (any resume), and, when the operator asked with `harvest run --repair`, moving damaged
//! lines to `<file>.damaged` and rebuilding a lost ledger from the outputs. See
//! [`super::scan`] for what counts as torn and what as damaged.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::domain::Usd;

use crate::engine::core::verdict::Shape;
use crate::openrouter::ErrorKind;

use super::output::{
    OutputRecord, RejectRecord, SpendEntry, SpendKind, TurnLine, TurnRecord, append_spend,
    ledger_path, output_path, rejects_path, turns_path,
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

/// What the start books (or would book) of the kept answers a crash left without their line.
fn kept_answers_note(dir: &Path, booked: &[SpendEntry], verb: &str) -> String {
    let usd: Usd = booked.iter().map(|e| e.usd).sum();
    let n = booked.len();
    format!(
        "{}: {verb} {n} kept answer{} ({usd}) whose `complete` line a crash cut, at each \
         record's own cost",
        ledger_path(dir).display(),
        if n == 1 { "" } else { "s" },
    )
}

/// Kept answers whose `complete` line a crash cut: the writer puts an answer's row or turn on
/// disk before its ledger line, so a kill between the two leaves the answer kept and its
/// attempt open (`started`, no closing line). Each such answer is booked at its record's own
/// cost, under the open attempt's name, which closes it: no look-up and no key needed, and
/// nothing counted twice (a kept answer closes at most one open attempt). The rows' come from
/// the scan's pass ([`DirScan::kept_open`]); the turns file is read here. Returns the lines to
/// append.
pub(crate) fn book_kept_answers(
    dir: &Path,
    scan: &DirScan,
) -> Result<Vec<SpendEntry>, RepairError> {
    let ledger = &scan.ledger;
    let mut lines: Vec<SpendEntry> = (scan.kept_open.iter())
        .map(|k| {
            kept_line(
                &k.attempt,
                &k.record,
                (&k.content, k.reasoning.as_deref()),
                &k.at,
            )
        })
        .collect();
    // What the rows left open, by generation, for the turns of rows still in progress.
    let booked: HashSet<&str> = (scan.kept_open.iter())
        .filter_map(|k| k.record.generation_id.as_deref())
        .collect();
    let mut open: HashMap<&str, &SpendEntry> = (ledger.open.iter())
        .filter_map(|e| Some((e.generation_id.as_deref()?, e)))
        .filter(|(g, _)| !booked.contains(g) && !ledger.rebuilt_generations.contains(*g))
        .collect();
    if !open.is_empty() {
        let start = chrono::Utc::now().to_rfc3339();
        scan::read_file(&turns_path(dir), |t: TurnLine| {
            let attempt = (t.record.generation_id.as_deref()).and_then(|g| open.remove(g));
            if let Some(e) = attempt {
                let text = (t.content.as_str(), t.reasoning_content.as_deref());
                lines.push(kept_line(e, &t.record, text, &start));
            }
        })?;
    }
    Ok(lines)
}

/// The `complete` line of a kept answer, under its open attempt's name.
fn kept_line(
    attempt: &SpendEntry,
    t: &TurnRecord,
    (content, reasoning): (&str, Option<&str>),
    at: &str,
) -> SpendEntry {
    SpendEntry {
        endpoint: t.endpoint_tag.clone(),
        usd: t.cost_usd,
        prompt_tokens: t.usage.prompt_tokens,
        completion_tokens: t.usage.completion_tokens,
        estimated: t.cost_estimated,
        generation_id: t.generation_id.clone(),
        attempt: attempt.attempt.clone(),
        // As the answer's own line said it: a paid answer with nothing in it (judged, as the
        // core does, once thinking inline in the text was moved out).
        error: (Shape::of(&t.finish_reason, content, reasoning) == Shape::Empty)
            .then(|| ErrorKind::Empty.to_string()),
        note: Some("booked at the start from the kept answer: a crash cut its line".into()),
        ..SpendEntry::new(
            SpendKind::Complete,
            at.into(),
            attempt.id.clone(),
            attempt.dataset.clone(),
        )
    }
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
        let booked = book_kept_answers(dir, &scan)?;
        if !booked.is_empty() {
            notes.push(kept_answers_note(dir, &booked, "a run would book"));
        }
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
    let booked = book_kept_answers(dir, &scan)?;
    if !booked.is_empty() {
        append_spend(dir, &booked).map_err(io(&ledger_path(dir)))?;
        notes.push(kept_answers_note(dir, &booked, "booked"));
    }
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

    /// A ledger line of prompt `id` of dataset `d` (a `complete` line at 1 microdollar).
    fn ledger_line(kind: SpendKind, attempt: &str, id: &str, generation: Option<&str>) -> String {
        serde_json::to_string(&SpendEntry {
            attempt: Some(attempt.into()),
            generation_id: generation.map(str::to_string),
            usd: if kind == SpendKind::Complete {
                Usd::from_pico(1_000_000)
            } else {
                Usd::ZERO
            },
            ..SpendEntry::new(kind, "2026-12-04T00:00:00.000Z".into(), id, "d")
        })
        .expect("json")
            + "\n"
    }

    /// A kill between an answer's row (or turn) and its `complete` line: the next start books
    /// the answer from its record, under its open attempt, once; a second start books nothing.
    #[test]
    fn a_kept_answer_whose_complete_line_a_kill_cut_is_booked_from_its_record() {
        use crate::store::output::{TurnLine, TurnRecord, tests::rec, turns_path};
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path();
        let ledger = [
            ledger_line(SpendKind::Dispatched, "r-1", "a", None),
            ledger_line(SpendKind::Started, "r-1", "a", Some("g1")),
            ledger_line(SpendKind::Dispatched, "r-2", "b", None),
            ledger_line(SpendKind::Started, "r-2", "b", Some("g2")),
            // Killed in flight, nothing kept: left to the look-ups.
            ledger_line(SpendKind::Dispatched, "r-3", "c", None),
            ledger_line(SpendKind::Started, "r-3", "c", Some("g3")),
        ]
        .concat();
        std::fs::write(ledger_path(d), ledger).expect("ledger");
        let mut row = rec("a", 3_000_000);
        row.generation_id = Some("g1".into());
        std::fs::write(
            output_path(d, "d"),
            serde_json::to_string(&row).expect("json") + "\n",
        )
        .expect("row");
        // The first turn of a row still in progress, kept empty (`on_empty = "keep"`).
        let turn = TurnLine {
            dataset: "d".into(),
            id: "b".into(),
            turn: 0,
            conversation: "c".into(),
            content: " ".into(),
            reasoning_content: None,
            record: TurnRecord {
                provider: "Chutes".into(),
                endpoint_tag: Some("chutes/int4".into()),
                finish_reason: "stop".into(),
                usage: row.usage.clone(),
                cost_usd: Usd::from_pico(2_000_000),
                attempts: 1,
                generation_id: Some("g2".into()),
                ttft_ms: None,
                latency_ms: 10,
                inline_think: false,
                cost_estimated: false,
            },
        };
        std::fs::write(
            turns_path(d),
            serde_json::to_string(&turn).expect("json") + "\n",
        )
        .expect("turn");
        let names = ["d".to_string()];
        // `run --check` says what a run would book, and writes nothing.
        let before = std::fs::read(ledger_path(d)).expect("ledger");
        let check = prepare(d, &names, false, false).expect("check");
        assert!(
            (check.notes.iter()).any(|n| n.contains("a run would book 2 kept answers")),
            "{:?}",
            check.notes
        );
        assert_eq!(std::fs::read(ledger_path(d)).expect("ledger"), before);
        let p = prepare(d, &names, false, true).expect("prepare");
        assert!(
            p.notes.iter().any(|n| n.contains("booked 2 kept answers")),
            "{:?}",
            p.notes
        );
        let open: Vec<_> = (p.scan.ledger.open.iter())
            .filter_map(|e| e.generation_id.clone())
            .collect();
        assert_eq!(
            open,
            ["g3"],
            "only the answer kept nowhere is left to look up"
        );
        assert_eq!(p.scan.ledger.total, Usd::from_pico(5_000_000));
        assert_eq!(p.scan.carried(), Usd::from_pico(5_000_000), "counted once");
        let orphans: Vec<String> = p.scan.orphans().into_iter().map(|e| e.id).collect();
        assert_eq!(orphans, ["c"]);
        // Booked under their own attempts, at their records' costs and times, the empty answer
        // as the failure by kind its own line would have said.
        let booked: Vec<(Option<String>, Usd, Option<String>, String)> =
            std::fs::read_to_string(ledger_path(d))
                .expect("ledger")
                .lines()
                .filter_map(|l| serde_json::from_str::<SpendEntry>(l).ok())
                .filter(|e| e.kind == SpendKind::Complete)
                .map(|e| (e.attempt, e.usd, e.error, e.at))
                .collect();
        assert_eq!(booked.len(), 2, "{booked:?}");
        assert_eq!(
            booked[0],
            (
                Some("r-1".into()),
                Usd::from_pico(3_000_000),
                None,
                row.created_at.clone()
            )
        );
        let (attempt, usd, error, _) = &booked[1];
        assert_eq!(
            (attempt.as_deref(), *usd, error.as_deref()),
            (Some("r-2"), Usd::from_pico(2_000_000), Some("empty"))
        );
        let again = prepare(d, &names, false, true).expect("prepare");
        assert!(again.notes.is_empty(), "{:?}", again.notes);
        assert_eq!(again.scan.carried(), Usd::from_pico(5_000_000));
    }

    /// What else the ledger may say of a kept answer: a line rebuilt by `--repair` booked it
    /// already; its row's earlier turns are booked and only the last is open; the same answer
    /// is both a row's turn and a line of the turns file; its server named no generation (only
    /// a `dispatched` line); a torn tail of the turns file. Each is booked once or not at all.
    #[test]
    fn a_start_books_each_kept_answer_once_whatever_else_the_ledger_says() {
        use crate::store::output::{Turn, TurnLine, tests::rec, turns_path};
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path();
        let ledger = [
            // Booked by a rebuilt line; its first attempt still looks open.
            ledger_line(SpendKind::Dispatched, "r-1", "a", None),
            ledger_line(SpendKind::Started, "r-1", "a", Some("g1")),
            ledger_line(SpendKind::Complete, REBUILT, "a", Some("g1")),
            // Two turns: the first booked, the second's line cut.
            ledger_line(SpendKind::Dispatched, "r-2", "b", None),
            ledger_line(SpendKind::Started, "r-2", "b", Some("g2")),
            ledger_line(SpendKind::Complete, "r-2", "b", Some("g2")),
            ledger_line(SpendKind::Dispatched, "r-3", "b", None),
            ledger_line(SpendKind::Started, "r-3", "b", Some("g3")),
            // A server that names no generation.
            ledger_line(SpendKind::Dispatched, "r-4", "e", None),
        ]
        .concat();
        std::fs::write(ledger_path(d), ledger).expect("ledger");
        let mut a = rec("a", 3_000_000);
        a.generation_id = Some("g1".into());
        let mut b = rec("b", 5_000_000);
        let second = |g: &str, usd: i64| TurnRecord {
            generation_id: Some(g.into()),
            cost_usd: Usd::from_pico(usd),
            ..a.answer_record()
        };
        b.turns = vec![second("g2", 1_000_000), second("g3", 4_000_000)];
        b.conversations.extend([
            Turn {
                role: "user".into(),
                content: "more".into(),
                reasoning_content: None,
            },
            Turn {
                role: "assistant".into(),
                content: "again".into(),
                reasoning_content: None,
            },
        ]);
        let e = rec("e", 2_000_000);
        let rows: String = [&a, &b, &e]
            .iter()
            .map(|r| serde_json::to_string(r).expect("json") + "\n")
            .collect();
        std::fs::write(output_path(d, "d"), rows).expect("rows");
        // The row's last turn, still in the turns file, then a torn line.
        let turn = TurnLine {
            dataset: "d".into(),
            id: "b".into(),
            turn: 1,
            conversation: "c".into(),
            content: "again".into(),
            reasoning_content: None,
            record: second("g3", 4_000_000),
        };
        std::fs::write(
            turns_path(d),
            serde_json::to_string(&turn).expect("json") + "\n{\"dataset\":\"d\",\"id",
        )
        .expect("turns");
        let names = ["d".to_string()];
        let p = prepare(d, &names, false, true).expect("prepare");
        let booked: Vec<(Option<String>, Option<String>, Usd)> =
            std::fs::read_to_string(ledger_path(d))
                .expect("ledger")
                .lines()
                .filter_map(|l| serde_json::from_str::<SpendEntry>(l).ok())
                .filter(|e| {
                    e.note
                        .as_deref()
                        .is_some_and(|n| n.starts_with("booked at the start"))
                })
                .map(|e| (e.attempt, e.generation_id, e.usd))
                .collect();
        assert_eq!(
            booked,
            [
                (
                    Some("r-3".into()),
                    Some("g3".into()),
                    Usd::from_pico(4_000_000)
                ),
                (Some("r-4".into()), None, Usd::from_pico(2_000_000)),
            ],
            "{:?}",
            p.notes
        );
        assert!(
            std::fs::read_to_string(turns_path(d))
                .expect("turns")
                .ends_with("}\n"),
            "the torn tail cut"
        );
        assert!(
            p.notes.iter().any(|n| n.contains("cut a torn last line")),
            "{:?}",
            p.notes
        );
        assert_eq!(p.scan.ledger.unknown.len(), 0);
        // g1 stays open (its rebuilt line booked it): the look-ups confirm it, as before.
        let open: Vec<_> = (p.scan.ledger.open.iter())
            .filter_map(|e| e.generation_id.clone())
            .collect();
        assert_eq!(open, ["g1"]);
        // Each answer once, nothing carried twice: the ledger's 1 (the rebuilt line) + 1 (b's
        // first turn), and the 4 + 2 booked now.
        assert_eq!(p.scan.carried(), Usd::from_pico(8_000_000));
        assert_eq!(p.scan.ledger.total, p.scan.carried());
    }
}
