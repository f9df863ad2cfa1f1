//! The directory scan's tests: torn tails, damage, the ledger's open lines and checkpoints.

use super::*;
use crate::store::output::{SpendKind, ledger_path};

#[derive(Debug, PartialEq, serde::Deserialize)]
struct Id {
    id: String,
}

fn scan(text: &str) -> (Vec<String>, FileScan) {
    let mut ids = Vec::new();
    let s =
        read_lines::<Id>(Path::new("x.jsonl"), text.as_bytes(), |r| ids.push(r.id)).expect("read");
    (ids, s)
}

#[test]
fn the_rule_as_a_table() {
    // (text, ids read, damaged line numbers, torn (offset, len))
    type Case = (
        &'static str,
        &'static [&'static str],
        &'static [u64],
        Option<(u64, u64)>,
    );
    let cases: &[Case] = &[
        ("", &[], &[], None),
        ("{\"id\":\"a\"}\n{\"id\":\"b\"}\n", &["a", "b"], &[], None),
        // An unterminated last line is torn, even when it parses.
        (
            "{\"id\":\"a\"}\n{\"id\":\"b\"}",
            &["a"],
            &[],
            Some((11, 10)),
        ),
        ("{\"id\":\"a\"}\n{\"id\":", &["a"], &[], Some((11, 6))),
        // A bad middle line is damage, and everything after it is still read.
        (
            "{\"id\":\"a\"}\n{\"id\":\x00GARBAGE\n{\"id\":\"c\"}\n",
            &["a", "c"],
            &[2],
            None,
        ),
        // A terminated last line that does not parse is damage, not a torn line.
        ("{\"id\":\"a\"}\n{\"id\":\n", &["a"], &[2], None),
        // Valid JSON of the wrong shape is damage too.
        ("[1,2]\n{\"id\":\"b\"}\n", &["b"], &[1], None),
        // Blank lines carry nothing.
        (
            "{\"id\":\"a\"}\n\n  \n{\"id\":\"b\"}\n",
            &["a", "b"],
            &[],
            None,
        ),
        // Damage and a torn tail in one file: both found.
        ("x\n{\"id\":\"b\"}\n{\"i", &["b"], &[1], Some((13, 3))),
    ];
    for (text, ids, damaged, torn) in cases {
        let (got, s) = scan(text);
        assert_eq!(&got, ids, "{text:?}");
        let lines: Vec<u64> = s.damage.iter().map(|d| d.line).collect();
        assert_eq!(&lines, damaged, "{text:?}");
        assert_eq!(s.damaged, damaged.len() as u64, "{text:?}");
        assert_eq!(
            s.torn,
            torn.map(|(offset, len)| Torn { offset, len }),
            "{text:?}"
        );
        assert_eq!(s.good, ids.len() as u64);
    }
}

#[test]
fn invalid_utf8_is_damage_with_its_offset() {
    let mut bytes = b"{\"id\":\"a\"}\n".to_vec();
    bytes.extend_from_slice(b"{\"id\":\"\xff\"}\n");
    let s = read_lines::<Id>(Path::new("x"), &bytes[..], |_| {}).expect("read");
    assert_eq!(s.damage.len(), 1);
    assert_eq!((s.damage[0].line, s.damage[0].offset), (2, 11));
}

#[test]
fn damage_text_names_file_line_byte_and_reason() {
    let (_, s) = scan("{\"id\":\"a\"}\nnope\nnope\n");
    let t = s.damage_text().expect("damage");
    assert!(
        t.starts_with("x.jsonl:2 (byte 11): not a valid record: expected"),
        "{t}"
    );
    assert!(t.ends_with("(and 1 more damaged line)"), "{t}");
}

#[test]
fn only_the_first_few_damaged_lines_are_kept() {
    let text = "x\n".repeat(1000);
    let (_, s) = scan(&text);
    assert_eq!((s.damaged, s.damage.len()), (1000, KEPT_DAMAGE));
}

#[test]
fn a_missing_file_is_empty_and_a_scan_never_writes() {
    let dir = tempfile::tempdir().expect("tmp");
    let none = read_file::<Id>(&dir.path().join("missing"), |_| {}).expect("missing");
    assert!(!none.exists);
    assert_eq!(none.good, 0);
    let p = dir.path().join("x.jsonl");
    let text = "{\"id\":\"a\"}\nbad\n{\"id\":";
    std::fs::write(&p, text).expect("write");
    let s = read_file::<Id>(&p, |_| {}).expect("read");
    assert!(s.exists && s.torn.is_some() && s.damaged == 1);
    assert_eq!(std::fs::read_to_string(&p).expect("read"), text);
    assert!(!dir.path().join("missing").exists());
}

/// Which attempts the ledger leaves open, whatever order their lines came in.
#[test]
fn open_and_unknown_attempts_as_a_table() {
    use crate::store::output::{SpendEntry, SpendKind};
    let line = |attempt: &str, kind: SpendKind, expected: Option<f64>| SpendEntry {
        estimated: true,
        attempt: Some(attempt.into()),
        expected_usd: expected.map(Usd::from_f64),
        ..SpendEntry::new(
            kind,
            "2026-12-02T00:00:00.000Z".into(),
            format!("p-{attempt}"),
            "d",
        )
    };
    use SpendKind::*;
    // (lines, unknown attempts, open attempts with their expected cost)
    type Case = (
        Vec<SpendEntry>,
        Vec<&'static str>,
        Vec<(&'static str, Option<f64>)>,
    );
    let table: Vec<Case> = vec![
        // Closed in order: nothing open.
        (
            vec![
                line("a", Dispatched, Some(0.5)),
                line("a", Started, None),
                line("a", Complete, None),
                line("b", Dispatched, None),
                line("b", Failed, None),
            ],
            vec![],
            vec![],
        ),
        // Dispatched only: unknown. Started: open, with the dispatched line's cost.
        (
            vec![
                line("a", Dispatched, Some(0.5)),
                line("b", Dispatched, Some(0.25)),
                line("b", Started, None),
            ],
            vec!["a"],
            vec![("b", Some(0.25))],
        ),
        // A started line's own expected cost wins.
        (
            vec![
                line("a", Dispatched, Some(0.5)),
                line("a", Started, Some(0.75)),
            ],
            vec![],
            vec![("a", Some(0.75))],
        ),
        // Out of order: a close before its lines keeps them closed; a start before its
        // dispatch is open once, with the dispatch's cost.
        (
            vec![
                line("a", Unknown, None),
                line("a", Dispatched, Some(0.5)),
                line("a", Started, None),
                line("b", Started, None),
                line("b", Dispatched, Some(0.125)),
            ],
            vec![],
            vec![("b", Some(0.125))],
        ),
        // Closed twice (unknown, then recovered): still closed.
        (
            vec![
                line("a", Dispatched, None),
                line("a", Started, None),
                line("a", Unknown, None),
                line("a", Recovered, None),
            ],
            vec![],
            vec![],
        ),
    ];
    for (lines, unknown, open) in table {
        let dir = tempfile::tempdir().expect("tmp");
        let text: String = lines
            .iter()
            .map(|l| serde_json::to_string(l).expect("json") + "\n")
            .collect();
        std::fs::write(ledger_path(dir.path()), text).expect("write");
        let scan = scan_ledger(dir.path(), |_| {}).expect("scan");
        let mut got_unknown: Vec<String> = scan
            .unknown
            .iter()
            .filter_map(|e| e.attempt.clone())
            .collect();
        got_unknown.sort();
        let mut got_open: Vec<(String, Option<Usd>)> = scan
            .open
            .iter()
            .map(|e| (e.attempt.clone().unwrap_or_default(), e.expected_usd))
            .collect();
        got_open.sort_by(|x, y| x.0.cmp(&y.0));
        let want_open: Vec<(String, Option<Usd>)> = open
            .iter()
            .map(|(a, u)| (a.to_string(), u.map(Usd::from_f64)))
            .collect();
        assert_eq!(got_unknown, unknown, "{lines:?}");
        assert_eq!(got_open, want_open, "{lines:?}");
    }
}

/// Which streams a run closed are still to confirm at `/generation`: a `cancelled` line booked
/// at an estimate, with a generation id, and no `adjustment` of its attempt after it; it
/// carries its `dispatched` line's expected cost.
#[test]
fn closed_streams_wait_for_a_confirming_adjustment() {
    use crate::store::output::{SpendEntry, SpendKind};
    let line = |attempt: &str, kind: SpendKind, estimated: bool, gen_id: bool| SpendEntry {
        estimated,
        attempt: Some(attempt.into()),
        generation_id: gen_id.then(|| format!("gen-{attempt}")),
        expected_usd: (kind == SpendKind::Dispatched).then(|| Usd::from_f64(0.5)),
        ..SpendEntry::new(
            kind,
            "2026-12-02T00:00:00.000Z".into(),
            format!("p-{attempt}"),
            "d",
        )
    };
    use SpendKind::*;
    // (name, lines, attempts left to confirm, with their expected cost)
    type Case = (
        &'static str,
        Vec<SpendEntry>,
        Vec<(&'static str, Option<f64>)>,
    );
    let reckoned = |attempt: &str, usd: f64| SpendEntry {
        expected_usd: Some(Usd::from_f64(usd)),
        ..line(attempt, Reckoned, true, true)
    };
    let table: Vec<Case> = vec![
        (
            "still unknown when its run stopped asking, reckoned again: the last reckoning",
            vec![
                line("a", Dispatched, false, false),
                line("a", Started, false, true),
                line("a", Cancelled, true, true),
                reckoned("a", 0.8),
                reckoned("a", 0.9),
            ],
            vec![("a", Some(0.9))],
        ),
        (
            "reckoned, then confirmed by its adjustment",
            vec![
                line("a", Dispatched, false, false),
                line("a", Cancelled, true, true),
                reckoned("a", 0.8),
                line("a", Adjustment, false, true),
            ],
            vec![],
        ),
        (
            "another attempt's reckoning says nothing of it",
            vec![
                line("a", Dispatched, false, false),
                line("a", Cancelled, true, true),
                reckoned("b", 0.9),
            ],
            vec![("a", Some(0.5))],
        ),
        (
            "closed at an estimate, never looked up",
            vec![
                line("a", Dispatched, false, false),
                line("a", Started, false, true),
                line("a", Cancelled, true, true),
            ],
            vec![("a", Some(0.5))],
        ),
        (
            "confirmed by its adjustment (even one of zero)",
            vec![
                line("a", Dispatched, false, false),
                line("a", Started, false, true),
                line("a", Cancelled, true, true),
                line("a", Adjustment, false, true),
            ],
            vec![],
        ),
        (
            "another attempt's adjustment confirms nothing of it",
            vec![
                line("a", Dispatched, false, false),
                line("a", Cancelled, true, true),
                line("b", Adjustment, false, true),
            ],
            vec![("a", Some(0.5))],
        ),
        (
            "no generation id: nothing to ask about",
            vec![
                line("a", Dispatched, false, false),
                line("a", Cancelled, true, false),
            ],
            vec![],
        ),
        (
            "the API's own figure: nothing to confirm",
            vec![
                line("a", Dispatched, false, false),
                line("a", Cancelled, false, true),
            ],
            vec![],
        ),
        (
            "a failed attempt is not a closed stream",
            vec![
                line("a", Dispatched, false, false),
                line("a", Failed, true, true),
            ],
            vec![],
        ),
    ];
    for (name, lines, want) in table {
        let dir = tempfile::tempdir().expect("tmp");
        let text: String = (lines.iter())
            .map(|l| serde_json::to_string(l).expect("json") + "\n")
            .collect();
        std::fs::write(ledger_path(dir.path()), text).expect("write");
        let scan = scan_ledger(dir.path(), |_| {}).expect("scan");
        let mut got: Vec<(String, Option<Usd>)> = (scan.closed_unconfirmed.iter())
            .map(|e| (e.attempt.clone().unwrap_or_default(), e.expected_usd))
            .collect();
        got.sort_by(|x, y| x.0.cmp(&y.0));
        let want: Vec<(String, Option<Usd>)> = (want.iter())
            .map(|(a, u)| (a.to_string(), u.map(Usd::from_f64)))
            .collect();
        assert_eq!(got, want, "{name}");
        assert!(scan.open.is_empty(), "{name}: the close closes the attempt");
    }
}

#[test]
fn the_readings_of_closes_are_tallied_by_endpoint() {
    use crate::close_reading::Close;
    let reading = |tag: &str, close: Option<Close>, kind: SpendKind, at: &str| SpendEntry {
        endpoint: Some(tag.into()),
        close,
        ..SpendEntry::new(kind, at.into(), "p", "d")
    };
    #[rustfmt::skip]
    let mut lines = [
        reading("chutes/int4", Some(Close::Stopped), SpendKind::Adjustment, "2026-12-06T09:00:00Z"),
        reading("chutes/int4", Some(Close::Stopped), SpendKind::Adjustment, "2026-12-06T10:00:00Z"),
        reading("chutes/int4", Some(Close::Unclear), SpendKind::Adjustment, "2026-12-06T11:00:00Z"),
        reading("novita", Some(Close::BilledPast), SpendKind::Adjustment, "2026-12-06T08:00:00Z"),
        // An adjustment of something else (a key true-up, a crash's open line): no reading.
        reading("novita", None, SpendKind::Adjustment, "2026-12-06T12:00:00Z"),
        // A reading only counts on the look-up's own line.
        reading("together/int4", Some(Close::Stopped), SpendKind::Cancelled, "2026-12-06T12:00:00Z"),
    ];
    // Two checks' lines say how long `/generation` took to have them.
    lines[1].found_after_ms = Some(3_200);
    lines[2].found_after_ms = Some(18_000);
    let scan = scanned(&lines);
    let mut got: Vec<(String, u32, u32, Option<String>)> = (scan.closes.iter())
        .map(|(t, s)| {
            (
                t.clone(),
                s.stopped,
                s.billed_past,
                s.last.map(|l| l.to_rfc3339()),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (
                "chutes/int4".into(),
                2,
                0,
                Some("2026-12-06T10:00:00+00:00".into())
            ),
            (
                "novita".into(),
                0,
                1,
                Some("2026-12-06T08:00:00+00:00".into())
            ),
        ]
    );
    assert_eq!(
        scan.closes["chutes/int4"].found_within,
        Some(std::time::Duration::from_millis(18_000))
    );
    assert_eq!(scan.closes["novita"].found_within, None);
}

#[test]
fn the_latest_streams_are_kept_by_endpoint() {
    use crate::store::output::Streamed;
    let line = |tag: &str, n: u64, streamed: bool| SpendEntry {
        endpoint: Some(tag.into()),
        streamed: streamed.then_some(Streamed {
            events: n,
            text_bytes: 5 * n,
            tokens: n,
        }),
        ..SpendEntry::new(SpendKind::Complete, "2026-12-06T09:00:00Z".into(), "p", "d")
    };
    let mut lines: Vec<SpendEntry> = (0..40).map(|n| line("chutes/int4", n, true)).collect();
    lines.push(line("novita", 7, true));
    // A line without the API's usage says nothing of the wire.
    lines.push(line("together/int4", 9, false));
    let scan = scanned(&lines);
    let events = |tag: &str| -> Vec<u64> {
        scan.streamed
            .get(tag)
            .map(|k| k.iter().map(|s| s.events).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        events("chutes/int4"),
        (8..40).collect::<Vec<u64>>(),
        "the latest 32"
    );
    assert_eq!(events("novita"), [7]);
    assert!(events("together/int4").is_empty());
}

/// The scan of a ledger of `lines`.
fn scanned(lines: &[SpendEntry]) -> LedgerScan {
    let dir = tempfile::tempdir().expect("tmp");
    let text: String = (lines.iter())
        .map(|l| serde_json::to_string(l).expect("json") + "\n")
        .collect();
    std::fs::write(ledger_path(dir.path()), text).expect("write");
    scan_ledger(dir.path(), |_| {}).expect("scan")
}
