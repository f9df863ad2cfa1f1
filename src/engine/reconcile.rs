//! What generations really cost, from `GET /generation`: for streams we closed (booked at our
//! estimate) and for generations a crash of an earlier run left open. Each look-up has its own
//! deadline and a bounded number of tries with back-off (the API answers 404 for a moment after
//! a generation ends), and each result is handed over as it arrives, so that one slow or
//! unknown generation never costs the others their answer.

use std::time::Duration;

use futures::StreamExt;

use crate::openrouter::OpenRouterClient;
use crate::store::output::SpendEntry;

pub(crate) use super::look_ups::{LookedUp, Until};

/// How long the end of a run waits for look-ups still running (of a crash's leftovers, of
/// streams it closed): the rest are left for the next start, never holding a finished run.
pub(crate) const END_GRACE: Duration = Duration::from_secs(3);

/// The most the end of a run waits for the first pass of a crash's look-ups (every open id
/// asked once), so that a no-op run still ends within seconds.
pub(crate) const FIRST_PASS_GRACE: Duration = Duration::from_secs(8);

/// The most the end of a run spends asking what the streams it closed really cost: those the
/// API answers later are confirmed by the next start (their hold kept till then), so a drain
/// ends within its grace and a few seconds.
pub(crate) const CLOSED_DEADLINE: Duration = Duration::from_secs(8);

/// A generation the API still does not know this long after it started is taken to be lost
/// (a provider finishes or drops a generation within minutes; the API records it when it
/// ends): booked once, marked estimated, and closed, at what the core says a lost attempt
/// costs (`Core::lost_cost`: its worst case where a close did not stop the bill under the
/// hard budget, its expectation elsewhere). Younger ones stay open for the next start or
/// `harvest status DIR --reconcile`.
pub(crate) const UNKNOWN_AFTER: Duration = Duration::from_secs(15 * 60);

/// How a generation a crash left open (or a stream a run closed) is settled, given what the
/// look-up found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Settle {
    /// The API reports its cost, and it can be a bill ([`crate::booked_cost`]).
    Found(crate::domain::Usd),
    /// Unknown to the API (or its figure refused) past [`UNKNOWN_AFTER`]: booked at what the
    /// core says a lost attempt costs.
    Lost,
    /// Unknown, but recent: left open.
    Wait,
    /// The API's figure cannot be a bill (below zero, not a number, above the attempt's worst
    /// case): not booked; left open as an unknown one is, and named.
    Refused(crate::booked_cost::CostRefused),
}

/// Decides how to close `entry` (a `started` line left open, or a closed stream) at `now`,
/// given the look-up's `total_cost`.
pub(crate) fn settle(
    entry: &SpendEntry,
    cost: Option<f64>,
    now: chrono::DateTime<chrono::Utc>,
) -> Settle {
    let refused = match cost.map(|c| crate::booked_cost::check(c, entry.worst_usd)) {
        Some(Ok(usd)) => return Settle::Found(usd),
        Some(Err(why)) => Some(why),
        None => None,
    };
    if age(entry, now) >= UNKNOWN_AFTER {
        Settle::Lost
    } else {
        refused.map_or(Settle::Wait, Settle::Refused)
    }
}

/// How old `entry` (an attempt's line) is at `now` (zero if its time does not parse).
pub(crate) fn age(entry: &SpendEntry, now: chrono::DateTime<chrono::Utc>) -> Duration {
    chrono::DateTime::parse_from_rfc3339(&entry.at)
        .ok()
        .and_then(|t| (now - t.to_utc()).to_std().ok())
        .unwrap_or(Duration::ZERO)
}

/// Asks the API what each generation cost (see [`super::look_ups`]); yields each answer as it
/// lands.
pub(crate) fn look_up(
    client: OpenRouterClient,
    items: Vec<(String, SpendEntry)>,
    until: Until,
) -> impl futures::Stream<Item = LookedUp> {
    let now = chrono::Utc::now();
    let items = (items.into_iter())
        .map(|(id, e)| {
            let a = age(&e, now);
            (id, e, a)
        })
        .collect();
    super::look_ups::look_up(client, items, until)
}

/// Looks `items` up and hands each answer to `tx` (one per id and pass at most: bounded by
/// the items), until done or nobody listens.
async fn forward(
    client: OpenRouterClient,
    items: Vec<(String, SpendEntry)>,
    until: Until,
    tx: tokio::sync::mpsc::UnboundedSender<LookedUp>,
) {
    let mut found = std::pin::pin!(look_up(client, items, until));
    while let Some(f) = found.next().await {
        if tx.send(f).is_err() {
            break;
        }
    }
}

/// The look-ups of what earlier runs left open, asked once at the start and running beside
/// the new work until each is found or ages out; the channel closes when all are in.
pub(super) struct Background {
    pub rx: tokio::sync::mpsc::UnboundedReceiver<LookedUp>,
    task: tokio::task::JoinHandle<()>,
}

impl Background {
    /// Starts looking up `items` on a task of its own, in the order given; results arrive on
    /// `rx`.
    pub(super) fn start(
        client: OpenRouterClient,
        items: Vec<(String, SpendEntry)>,
        until: Until,
    ) -> Background {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(forward(client, items, until, tx));
        Background { rx, task }
    }

    /// Ends the look-ups still running: their lines stay open for the next start.
    pub(super) fn abort(&self) {
        self.task.abort();
    }
}

/// The GETs to `/generation` the core asked for ([`Effect::LookUp`](super::core::Effect)),
/// by whose they are; each answer goes back through the core's door.
pub(super) struct LookUps {
    /// This run's closed streams, a batch a tick.
    pub closes: Closed,
    /// What earlier runs left (`None` once all are in, or when none was asked).
    pub leftovers: Option<Background>,
}

impl LookUps {
    pub(super) fn new() -> LookUps {
        LookUps {
            closes: Closed::new(),
            leftovers: None,
        }
    }
}

/// What a look-up may still add to the ledger: an open attempt's expected cost; for a stream
/// already booked at an estimate (`cancelled`), its expected cost past that estimate.
pub(crate) fn open_part(e: &SpendEntry) -> crate::domain::Usd {
    let expected = e.expected_usd.unwrap_or_default();
    match e.kind {
        crate::store::output::SpendKind::Cancelled => {
            (expected - e.usd).max(crate::domain::Usd::ZERO)
        }
        _ => expected,
    }
}

/// The GETs of the streams this run closed, asked while it runs (a batch each tick, as the
/// core asks: [`Closes`](super::core::settle::Closes) keeps what they settle).
pub(super) struct Closed {
    tx: tokio::sync::mpsc::UnboundedSender<LookedUp>,
    pub rx: tokio::sync::mpsc::UnboundedReceiver<LookedUp>,
    tasks: tokio::task::JoinSet<()>,
    /// Asked and not back yet.
    pub out: usize,
}

impl Closed {
    pub(super) fn new() -> Closed {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Closed {
            tx,
            rx,
            tasks: tokio::task::JoinSet::new(),
            out: 0,
        }
    }

    /// Starts looking up `items`; their answers arrive on `rx`.
    pub(super) fn ask(
        &mut self,
        client: OpenRouterClient,
        items: Vec<(String, SpendEntry)>,
        until: Until,
    ) {
        // Finished batches leave the set (a long run starts one a tick).
        while self.tasks.try_join_next().is_some() {}
        if items.is_empty() {
            return;
        }
        self.out += items.len();
        let tx = self.tx.clone();
        self.tasks.spawn(forward(client, items, until, tx));
    }

    /// Ends every look-up still running: their streams keep their estimates.
    pub(super) fn abort(&mut self) {
        self.tasks.abort_all();
    }
}

/// How far a key's usage may outrun the ledger's crash estimates and still be put down to
/// them: an answer may run to `max_tokens`, about 8x the 2,048-token prior an estimate uses.
pub(crate) const TRUE_UP_CAP: f64 = 8.0;

/// What the key's own count says of the ledger since the last quiet checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum KeyVerdict {
    /// Key and ledger agree (to a micro-dollar), or nothing was estimated and nothing differs.
    Agrees,
    /// The crash estimates were off: one adjustment line of `usd`, saying why.
    TrueUp {
        usd: crate::domain::Usd,
        note: String,
    },
    /// The key's usage grew by what the ledger cannot explain (a key shared with other work,
    /// or usage the API has not counted yet): estimates stay.
    Unexplained { usd: crate::domain::Usd },
}

/// Compares the key's usage growth with the ledger's since `base` (pure).
pub(crate) fn key_verdict(
    base: &crate::store::scan::KeyBase,
    key_now: f64,
    ledger_now: crate::domain::Usd,
) -> KeyVerdict {
    use crate::domain::Usd;
    let grew = Usd::from_f64(key_now - base.checkpoint.key_usage_usd);
    let booked = ledger_now - base.checkpoint.ledger_usd;
    let d = grew - booked;
    if d.pico().abs() <= Usd::from_f64(1e-6).pico() {
        return KeyVerdict::Agrees;
    }
    let e = base.estimated;
    let explained = e > Usd::ZERO
        && d.pico() >= -e.pico()
        && (d.pico() as f64) <= e.pico() as f64 * TRUE_UP_CAP;
    if explained {
        KeyVerdict::TrueUp {
            usd: d,
            note: format!(
                "key true-up: the key's usage grew {:.6} USD since {}, the ledger {:.6}: the {} \
                 requests crashes left unanswered, booked at {:.6} USD expected, cost {:.6}",
                grew.as_f64(),
                "the last quiet checkpoint",
                booked.as_f64(),
                base.estimated_lines,
                e.as_f64(),
                (e + d).as_f64()
            ),
        }
    } else {
        KeyVerdict::Unexplained { usd: d }
    }
}

/// Whether a run's start may be a key true-up's new base (a quiet checkpoint): nothing an
/// earlier run left is open (`left_open`), and no crash estimate booked since the last base
/// still waits for a true-up (`estimates_waiting`). A base taken after such estimates would
/// leave them out of every later true-up, and the ledger would keep them for good.
pub(crate) fn start_is_quiet(left_open: bool, estimates_waiting: crate::domain::Usd) -> bool {
    !left_open && estimates_waiting == crate::domain::Usd::ZERO
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Usd;
    use crate::store::output::SpendKind;

    #[test]
    fn a_start_is_a_new_base_only_with_nothing_open_and_no_estimate_waiting() {
        // (left open, estimates waiting since the last base, quiet)
        let cases = [
            (false, 0.0, true),
            // A crash's open attempts, closed streams or rebuilt lines: not a base.
            (true, 0.0, false),
            // Everything settled, but a crash's estimate ($0.0009) still waits for a
            // true-up from the older base (the detached-run test's over-count).
            (false, 0.0009, false),
            (true, 0.0009, false),
        ];
        for (open, waiting, want) in cases {
            assert_eq!(
                start_is_quiet(open, Usd::from_f64(waiting)),
                want,
                "open {open} waiting {waiting}"
            );
        }
    }

    fn open_line(at: &str, expected: Option<f64>) -> SpendEntry {
        SpendEntry {
            prompt_tokens: 10,
            estimated: true,
            generation_id: Some("gen-1".into()),
            attempt: Some("run-1".into()),
            expected_usd: expected.map(Usd::from_f64),
            worst_usd: Some(Usd::from_f64(0.05)),
            ..SpendEntry::new(SpendKind::Started, at.into(), "p1", "D")
        }
    }

    /// Found, waited for, lost; and what `/generation` says checked before it is booked
    /// (reliability-probe-5 P3: a gateway's `total_cost: -1` booked −$64).
    #[test]
    fn open_generations_are_found_waited_for_or_booked_as_lost() {
        use crate::booked_cost::CostRefused;
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z")
            .expect("time")
            .to_utc();
        let recent = "2026-12-01T11:50:00Z";
        let old = "2026-11-30T12:00:00Z";
        let cases = [
            (
                "found",
                "2026-12-01T11:59:00Z",
                Some(0.012),
                Settle::Found(Usd::from_f64(0.012)),
            ),
            (
                "found long ago",
                old,
                Some(0.012),
                Settle::Found(Usd::from_f64(0.012)),
            ),
            ("unknown, recent", recent, None, Settle::Wait),
            (
                "unknown, just past the limit",
                "2026-12-01T11:45:00Z",
                None,
                Settle::Lost,
            ),
            ("unknown, a day old", old, None, Settle::Lost),
            ("unreadable time: waits", "yesterday", None, Settle::Wait),
            (
                "a negative cost, recent: refused, left open",
                recent,
                Some(-1.0),
                Settle::Refused(CostRefused::Negative(-1.0)),
            ),
            (
                "above the worst case: refused",
                recent,
                Some(64.0),
                Settle::Refused(CostRefused::AboveWorstCase {
                    usd: 64.0,
                    worst: Usd::from_f64(0.05),
                }),
            ),
            (
                "not a number: refused",
                recent,
                Some(f64::NAN),
                Settle::Refused(CostRefused::NotANumber),
            ),
            ("refused and old: lost", old, Some(-1.0), Settle::Lost),
        ];
        for (name, at, cost, want) in cases {
            assert_eq!(
                settle(&open_line(at, Some(0.004)), cost, now),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn the_key_trues_up_crash_estimates_or_says_it_cannot() {
        use crate::store::output::KeyCheckpoint;
        use crate::store::scan::KeyBase;
        let base = |estimated: f64| KeyBase {
            checkpoint: KeyCheckpoint {
                key_usage_usd: 10.0,
                ledger_usd: Usd::from_f64(4.0),
                quiet: true,
            },
            estimated: Usd::from_f64(estimated),
            estimated_lines: 3,
        };
        let cases: [(&str, f64, f64, f64, &str); 7] = [
            ("agrees", 0.0, 12.0, 6.0, "agrees"),
            ("agrees with estimates", 0.3, 12.0, 6.0, "agrees"),
            ("estimates too low", 0.3, 12.2, 6.0, "up 0.200000"),
            (
                "estimates too high: down to zero at most",
                0.3,
                11.75,
                6.0,
                "up -0.250000",
            ),
            (
                "less than even the estimates",
                0.3,
                11.5,
                6.0,
                "unexplained -0.500000",
            ),
            ("a shared key", 0.3, 15.0, 6.0, "unexplained 3.000000"),
            (
                "nothing estimated, usage grew",
                0.0,
                12.5,
                6.0,
                "unexplained 0.500000",
            ),
        ];
        for (name, est, key_now, ledger_now, want) in cases {
            let got = match key_verdict(&base(est), key_now, Usd::from_f64(ledger_now)) {
                KeyVerdict::Agrees => "agrees".to_string(),
                KeyVerdict::TrueUp { usd, .. } => format!("up {:.6}", usd.as_f64()),
                KeyVerdict::Unexplained { usd } => format!("unexplained {:.6}", usd.as_f64()),
            };
            assert_eq!(got, want, "{name}");
        }
    }
}
