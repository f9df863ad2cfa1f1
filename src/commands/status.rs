//! `harvest status [DIR]`: the state file of a running or finished run, for a second shell,
//! and whether its engine is live (asked on its control socket: pid, viewers attached);
//! `--report`: the end-of-run report built from the output directory; `--reconcile`: settles
//! what a crashed run left open in it, at the run's own API (its manifest's, unless told).

use super::stdout::{out, outln};
use std::path::{Path, PathBuf};

use crate::cli::StatusArgs;
use crate::domain::Usd;
use crate::engine::{Snapshot, state_path};
use crate::headless;
use crate::report::Report;
use crate::store::kept_booking::{book_kept_answers, kept_answers_note};

use super::BadInput;

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let dirs = match args.dirs.as_slice() {
        [] => vec![PathBuf::from("out")],
        d => d.to_vec(),
    };
    if let Some(shards) = super::job::shard_dirs(&dirs) {
        return job(&shards, &args);
    }
    let dir = dirs[0].clone();
    if args.reconcile {
        return reconcile::reconcile(&dir, &args).await;
    }
    if args.report {
        if !dir.is_dir() {
            return Err(BadInput(format!("{} is not a directory", dir.display())).into());
        }
        let report = Report::from_dir(&dir, None).map_err(|e| BadInput(e.to_string()))?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            out!("{}", crate::printable::printable(&report.render()));
        }
        return Ok(());
    }
    let path = state_path(&dir);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        BadInput(format!(
            "no run state at {}: {e} (is {} a harvest output directory?)",
            path.display(),
            dir.display()
        ))
    })?;
    let snap: Snapshot = serde_json::from_str(&text)
        .map_err(|e| BadInput(format!("{}: not a harvest state file: {e}", path.display())))?;
    let live = live_engine(&dir).await;
    let mut snap = snap;
    let mut kept = crate::store::kept_booking::KeptBooking::default();
    if live.is_none() && crate::store::lock::live_holder(&dir).is_none() {
        // No engine: what the ledger says is the truth (a crash's requests in flight are in
        // no state file, and `--reconcile` books after the last state was written).
        if let Some(l) = in_ledger(&dir) {
            snap.open_look_ups = l.open;
            snap.spent = l.spent;
            kept = l.kept;
        }
    }
    if args.json {
        let mut doc = serde_json::to_value(&snap)?;
        if let Some(o) = doc.as_object_mut() {
            // Kept answers a crash left without their ledger line: the next start books them.
            o.insert(
                "kept_to_book".into(),
                serde_json::json!({
                    "count": kept.lines.len(),
                    "usd": kept.lines.iter().map(|e| e.usd).sum::<Usd>(),
                    "refused": kept.refused.len(),
                }),
            );
            o.insert(
                "engine".into(),
                match &live {
                    Some(e) => {
                        serde_json::json!({"live": true, "pid": e.pid, "viewers": e.viewers})
                    }
                    None => match crate::store::lock::live_holder(&dir) {
                        Some(h) => serde_json::json!({"live": false, "held_by_pid": h.pid}),
                        None => serde_json::json!({"live": false}),
                    },
                },
            );
        }
        outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        out!(
            "{}",
            crate::printable::printable(&headless::summary_of(&snap, live.is_some()))
        );
        for note in kept_answers_note(&dir, &kept, "a run would book") {
            outln!("{}", crate::printable::printable(&note));
        }
        outln!(
            "{}",
            crate::printable::printable(&engine_line(
                live.as_ref(),
                crate::store::lock::live_holder(&dir),
                &snap
            ))
        );
    }
    Ok(())
}

/// Several shard directories as one job: the job's view, and with `--report` each shard's
/// report after it.
fn job(shards: &[PathBuf], args: &StatusArgs) -> anyhow::Result<()> {
    if args.reconcile {
        return Err(BadInput(
            "status --reconcile settles one output directory at a time: give one shard's".into(),
        )
        .into());
    }
    let found = super::job::read(shards).map_err(BadInput)?;
    let view = super::job::assemble(&found);
    let reports = if args.report {
        shards
            .iter()
            .map(|d| Report::from_dir(d, None).map_err(|e| BadInput(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    if args.json {
        let mut doc = serde_json::json!({ "job": view });
        if args.report {
            doc["reports"] = serde_json::to_value(&reports)?;
        }
        outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        let mut text = super::job::render(&view);
        for (dir, r) in shards.iter().zip(&reports) {
            text.push_str(&format!("\n== {}\n{}", dir.display(), r.render()));
        }
        out!("{}", crate::printable::printable(&text));
    }
    Ok(())
}

/// What the ledger of `dir` says when no engine runs there.
struct InLedger {
    /// The generations it leaves open (sent and never settled, answer not among the outputs;
    /// or closed and not confirmed) and what they may still cost.
    open: crate::engine::snapshot::OpenLookUps,
    /// Its total.
    spent: Usd,
    /// The lines the next start books for kept answers whose `complete` line a crash cut
    /// (`run --check` says the same), and those whose record's cost it refuses.
    kept: crate::store::kept_booking::KeptBooking,
}

/// What the ledger of `dir` says; `None` if the directory cannot be read.
fn in_ledger(dir: &Path) -> Option<InLedger> {
    let names = crate::report::dataset_names(dir).ok()?;
    let scan = crate::store::scan::scan_dir(dir, &names).ok()?;
    let kept = book_kept_answers(dir, &scan).ok()?;
    // As a start reads them: a closed stream's look-up may add what the provider went on to
    // generate, at most its expected cost past what it was booked at.
    let (count, expected) =
        crate::engine::core::settle::Leftovers::from_scan(&scan).open_look_ups();
    let open = crate::engine::snapshot::OpenLookUps {
        count: count as u64,
        expected,
    };
    Some(InLedger {
        open,
        spent: scan.carried(),
        kept,
    })
}

/// The engine of `dir`, when one answers on its control socket within 3 s.
async fn live_engine(dir: &Path) -> Option<crate::remote::client::EngineInfo> {
    let conn = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        crate::remote::client::connect(dir),
    )
    .await
    .ok()?
    .ok()?;
    Some(conn.engine)
}

/// `engine: live (pid 4242), 2 viewers attached`, or why no engine is there.
fn engine_line(
    live: Option<&crate::remote::client::EngineInfo>,
    holder: Option<crate::store::lock::Holder>,
    snap: &Snapshot,
) -> String {
    use crate::engine::RunState;
    match live {
        Some(e) => format!(
            "engine: live (pid {}), {} attached",
            e.pid,
            match e.viewers {
                1 => "1 viewer".to_string(),
                n => format!("{n} viewers"),
            }
        ),
        None if matches!(snap.state, RunState::Done | RunState::Stopped) => {
            "engine: not running".to_string()
        }
        None => match holder {
            // Alive and holding the directory, but deaf to its socket: stopped or stuck.
            Some(h) => format!(
                "engine: pid {} holds the directory (since {}) but does not answer on its \
                 control socket: stopped (SIGSTOP, `kill -CONT {}`), stuck, or started without \
                 its socket",
                h.pid, h.started_at, h.pid
            ),
            None => format!(
                "engine: not running, though its last state says {}: it ended without saving \
                 (killed or crashed); `harvest run` resumes it",
                snap.state.label()
            ),
        },
    }
}

mod reconcile;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::output::tests::{ledger_line, rec};
    use crate::store::output::{SpendKind, ledger_path, output_path};

    /// With no engine, status reads what the ledger says, and what the next start books of the
    /// answers a kill kept without their `complete` line (`run --check` says the same).
    #[test]
    fn status_says_what_the_next_start_books_of_kept_answers() {
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path();
        // Answer `a` was written, then the kill came before its `complete` line; `b` was in
        // flight with nothing kept: left to the look-ups.
        let ledger = [
            ledger_line(SpendKind::Dispatched, "r-1", "a", Some("g1")),
            ledger_line(SpendKind::Started, "r-1", "a", Some("g1")),
            ledger_line(SpendKind::Dispatched, "r-2", "b", Some("g2")),
            ledger_line(SpendKind::Started, "r-2", "b", Some("g2")),
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
        let l = in_ledger(d).expect("a readable directory");
        assert_eq!(l.open.count, 1, "b is looked up");
        assert_eq!(l.kept.lines.len(), 1);
        assert_eq!(
            l.kept.lines[0].usd,
            Usd::from_pico(3_000_000),
            "at the record's cost"
        );
        let notes = kept_answers_note(d, &l.kept, "a run would book");
        assert!(
            notes[0].contains("a run would book 1 kept answer ($0.000003)"),
            "{notes:?}"
        );
    }
}
