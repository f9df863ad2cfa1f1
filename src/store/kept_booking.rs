//! The start's booking of kept answers whose `complete` line a crash cut. The writer puts an
//! answer's row or turn on disk before its ledger line, so a kill between the two leaves the
//! answer kept and its attempt open; the scan finds such rows in its own pass
//! (`scan::KeptOpen`), this books them and the turns file's, at each record's own cost, under
//! the open attempt's name. `repair::prepare` appends the lines (or says what a run would).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::answer_shape::Shape;
use crate::booked_cost::CostRefused;
use crate::domain::Usd;
use crate::openrouter::ErrorKind;

use super::output::{
    SpendEntry, SpendKind, TurnLine, TurnRecord, ledger_path, output_path, turns_path,
};
use super::repair::RepairError;
use super::scan::{self, DirScan};

/// What the start books of the kept answers a crash left without their line, and what it
/// refused to take from their records.
#[derive(Debug, Default)]
pub(crate) struct KeptBooking {
    /// The `complete` lines to append.
    pub(crate) lines: Vec<SpendEntry>,
    /// Kept answers whose record's cost may not be booked (`booked_cost`): their attempts stay
    /// open and are looked up at `/generation` as a crash's leftovers are.
    pub(crate) refused: Vec<RefusedKept>,
}

/// A kept answer whose record's cost was refused.
#[derive(Debug)]
pub(crate) struct RefusedKept {
    pub(crate) dataset: String,
    pub(crate) id: String,
    pub(crate) why: CostRefused,
}

/// What the start books (or would book) of the kept answers a crash left without their line,
/// and the records whose cost it would not take (each named).
pub(crate) fn kept_answers_note(dir: &Path, booking: &KeptBooking, verb: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let booked = &booking.lines;
    if !booked.is_empty() {
        let usd: Usd = booked.iter().map(|e| e.usd).sum();
        let n = booked.len();
        notes.push(format!(
            "{}: {verb} {n} kept answer{} ({usd}) whose `complete` line a crash cut, at each \
             record's own cost",
            ledger_path(dir).display(),
            if n == 1 { "" } else { "s" },
        ));
    }
    for r in &booking.refused {
        notes.push(format!(
            "{}: the kept answer of id {:?} records {}: not booked from its record (damage, or \
             an edit after a crash); its generation is looked up at /generation instead, \
             holding its worst case until then",
            output_path(dir, &r.dataset).display(),
            r.id,
            r.why
        ));
    }
    notes
}

/// Kept answers whose `complete` line a crash cut: the writer puts an answer's row or turn on
/// disk before its ledger line, so a kill between the two leaves the answer kept and its
/// attempt open (`started`, no closing line). Each such answer is booked at its record's own
/// cost, under the open attempt's name, which closes it: no look-up and no key needed, and
/// nothing counted twice (a kept answer closes at most one open attempt). The rows' come from
/// the scan's pass ([`DirScan::kept_open`]); the turns file is read here. Returns the lines to
/// append.
pub(crate) fn book_kept_answers(dir: &Path, scan: &DirScan) -> Result<KeptBooking, RepairError> {
    let ledger = &scan.ledger;
    let mut booking = KeptBooking::default();
    for k in &scan.kept_open {
        match k.cost() {
            Ok(_) => booking.lines.push(kept_line(
                &k.attempt,
                &k.record,
                (&k.content, k.reasoning.as_deref(), &k.calls),
                &k.at,
            )),
            Err(why) => booking.refused.push(RefusedKept {
                dataset: k.attempt.dataset.clone(),
                id: k.attempt.id.clone(),
                why,
            }),
        }
    }
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
            let Some(e) = attempt else { return };
            match crate::booked_cost::check_usd(t.record.cost_usd, e.worst_usd) {
                Ok(_) => {
                    // A turn before the last is never a tool call (`outcome.rs`).
                    let text = (t.content.as_str(), t.reasoning_content.as_deref(), &[][..]);
                    booking.lines.push(kept_line(e, &t.record, text, &start));
                }
                // The turn's attempt stays open: its generation is not among the outputs, so
                // the start looks it up.
                Err(why) => booking.refused.push(RefusedKept {
                    dataset: t.dataset.clone(),
                    id: t.id.clone(),
                    why,
                }),
            }
        })?;
    }
    Ok(booking)
}

/// The `complete` line of a kept answer, under its open attempt's name.
fn kept_line(
    attempt: &SpendEntry,
    t: &TurnRecord,
    (content, reasoning, calls): (&str, Option<&str>, &[crate::openrouter::ToolCall]),
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
        error: (Shape::of(&t.finish_reason, content, reasoning, calls) == Shape::Empty)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::output::output_path;
    use crate::store::output::tests::ledger_line;
    use crate::store::repair::{REBUILT, prepare};

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

    /// reliability-probe-5 P3: a kept answer's record is text anyone with the directory can
    /// edit. A cost below zero or above what its attempt could be billed (its `dispatched`
    /// line's `worst_usd`) is not booked: the attempt stays open and becomes a look-up (its
    /// generation is no longer counted as answered), and the run's carried spend does not
    /// count what the row says. A plausible cost is booked as before.
    #[test]
    fn a_kept_answers_cost_is_booked_only_when_it_can_be_a_bill() {
        use crate::store::output::tests::rec;
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path();
        let worst = Usd::from_f64(0.07);
        let mut ledger = String::new();
        for (attempt, id, g) in [("r-1", "a", "g1"), ("r-2", "b", "g2"), ("r-3", "c", "g3")] {
            for kind in [SpendKind::Dispatched, SpendKind::Started] {
                let line = SpendEntry {
                    attempt: Some(attempt.into()),
                    generation_id: (kind == SpendKind::Started).then(|| g.to_string()),
                    worst_usd: (kind == SpendKind::Dispatched).then_some(worst),
                    ..SpendEntry::new(kind, "2026-12-04T00:00:00.000Z".into(), id, "d")
                };
                ledger += &(serde_json::to_string(&line).expect("json") + "\n");
            }
        }
        std::fs::write(ledger_path(d), ledger).expect("ledger");
        let rows: String = [("a", "g1", -0.25), ("b", "g2", 100.0), ("c", "g3", 0.03)]
            .iter()
            .map(|(id, g, usd)| {
                let mut r = rec(id, 0);
                r.cost_usd = Usd::from_f64(*usd);
                r.generation_id = Some(g.to_string());
                serde_json::to_string(&r).expect("json") + "\n"
            })
            .collect();
        std::fs::write(output_path(d, "d"), rows).expect("rows");
        let names = ["d".to_string()];
        let check = prepare(d, &names, false, false).expect("check");
        assert!(
            (check.notes.iter()).any(|n| n.contains("a run would book 1 kept answer ($0.03)")),
            "{:?}",
            check.notes
        );
        let p = prepare(d, &names, false, true).expect("prepare");
        for (id, why) in [
            ("a", "a negative cost (-0.250000 USD)"),
            ("b", "above the attempt's worst case"),
        ] {
            assert!(
                (p.notes.iter()).any(|n| n.contains(&format!("id {id:?} records"))
                    && n.contains(why)
                    && n.contains("d.jsonl")),
                "{id}: {:?}",
                p.notes
            );
        }
        let mut orphans: Vec<String> = (p.scan.orphans().into_iter())
            .filter_map(|e| e.generation_id)
            .collect();
        orphans.sort();
        assert_eq!(orphans, ["g1", "g2"], "the refused ones are looked up");
        assert_eq!(
            p.scan.carried(),
            Usd::from_f64(0.03),
            "only the plausible record counted"
        );
        let generations = p.scan.output_generations();
        assert!(
            generations.contains(&"g3".to_string()) && !generations.contains(&"g1".to_string())
        );
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
                tool_calls: Vec::new(),
            },
            Turn {
                role: "assistant".into(),
                content: "again".into(),
                reasoning_content: None,
                tool_calls: Vec::new(),
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
