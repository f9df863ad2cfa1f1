//! What generations really cost, from `GET /generation`: for streams we closed (booked at our
//! estimate) and for generations a crash of an earlier run left open. Each look-up has its own
//! deadline and a bounded number of tries with back-off (the API answers 404 for a moment after
//! a generation ends), and each result is handed over as it arrives, so that one slow or
//! unknown generation never costs the others their answer.

use std::time::Duration;

use futures::{Stream, StreamExt};

use crate::openrouter::OpenRouterClient;
use crate::store::output::SpendEntry;

/// Look-ups in flight at once.
const PARALLEL: usize = 32;
/// Tries per generation; the waits between them grow 250 ms, 500 ms, ... (about 9 s in all).
const TRIES: u32 = 8;
/// The most one look-up may take, tries and waits included.
const DEADLINE: Duration = Duration::from_secs(20);

/// One look-up's result: the entry it was asked for, and the cost the API reports (`None`:
/// unknown to the API, or no answer in time).
pub type Found = (SpendEntry, Option<f64>);

/// A generation the API still does not know this long after it started is taken to be lost
/// (a provider finishes or drops a generation within minutes; the API records it when it
/// ends): booked once at its expected cost, marked estimated, and closed. Younger ones stay
/// open for the next start or `harvest status DIR --reconcile`.
pub const UNKNOWN_AFTER: Duration = Duration::from_secs(15 * 60);

/// How a generation a crash left open is closed, given what the look-up found.
#[derive(Clone, Debug, PartialEq)]
pub enum Settle {
    /// The API reports its cost.
    Found(crate::domain::Usd),
    /// Unknown to the API past [`UNKNOWN_AFTER`]: booked at its expected cost.
    Lost(crate::domain::Usd),
    /// Unknown, but recent: left open.
    Wait,
}

/// Decides how to close `entry` (a `started` line left open) at `now`, given the look-up.
pub fn settle(entry: &SpendEntry, cost: Option<f64>, now: chrono::DateTime<chrono::Utc>) -> Settle {
    if let Some(c) = cost {
        return Settle::Found(crate::domain::Usd::from_f64(c));
    }
    let started = chrono::DateTime::parse_from_rfc3339(&entry.at).map(|t| t.to_utc());
    let age = started
        .ok()
        .and_then(|t| (now - t).to_std().ok())
        .unwrap_or(Duration::ZERO);
    if age >= UNKNOWN_AFTER {
        Settle::Lost(entry.expected_usd.unwrap_or_default())
    } else {
        Settle::Wait
    }
}

/// Asks the API what each generation cost; yields each result as it lands.
pub fn look_up(
    client: OpenRouterClient,
    items: Vec<(String, SpendEntry)>,
) -> impl Stream<Item = Found> {
    futures::stream::iter(items.into_iter().map(move |(id, entry)| {
        let client = client.clone();
        async move {
            let one = async {
                for attempt in 0..TRIES {
                    match client.generation(&id).await {
                        Ok(g) => return g.total_cost,
                        Err(e) if e.status() == Some(404) || e.is_retryable() => {
                            let wait = Duration::from_millis(250 * u64::from(attempt + 1));
                            tokio::time::sleep(wait).await;
                        }
                        Err(_) => return None,
                    }
                }
                None
            };
            let cost = tokio::time::timeout(DEADLINE, one).await.ok().flatten();
            (entry, cost)
        }
    }))
    .buffer_unordered(PARALLEL)
}

/// The look-ups of what a crash left open, running beside the new work.
#[derive(Default)]
pub(super) struct Recovery {
    pub rx: Option<tokio::sync::mpsc::Receiver<Found>>,
    pub task: Option<tokio::task::JoinHandle<()>>,
    pub asked: usize,
    pub booked: usize,
    /// Booked at their expected cost, unknown to the API past [`UNKNOWN_AFTER`].
    pub lost: usize,
    pub total: crate::domain::Usd,
}

impl Recovery {
    /// Starts looking up `items` on a task of its own; results arrive on `rx`.
    pub(super) fn start(client: OpenRouterClient, items: Vec<(String, SpendEntry)>) -> Recovery {
        let asked = items.len();
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let task = tokio::spawn(async move {
            let mut found = std::pin::pin!(look_up(client, items));
            while let Some(f) = found.next().await {
                if tx.send(f).await.is_err() {
                    break;
                }
            }
        });
        Recovery {
            rx: Some(rx),
            task: Some(task),
            asked,
            ..Recovery::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Usd;
    use crate::store::output::SpendKind;

    fn open_line(at: &str, expected: Option<f64>) -> SpendEntry {
        SpendEntry {
            at: at.into(),
            id: "p1".into(),
            dataset: "D".into(),
            endpoint: None,
            kind: SpendKind::Started,
            usd: Usd::ZERO,
            prompt_tokens: 10,
            completion_tokens: 0,
            estimated: true,
            generation_id: Some("gen-1".into()),
            attempt: Some("run-1".into()),
            expected_usd: expected.map(Usd::from_f64),
            error: None,
        }
    }

    #[test]
    fn open_generations_are_found_waited_for_or_booked_as_lost() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z")
            .expect("time")
            .to_utc();
        let cases = [
            (
                "found",
                "2026-12-01T11:59:00Z",
                Some(0.012),
                Some(0.004),
                Settle::Found(Usd::from_f64(0.012)),
            ),
            (
                "found long ago",
                "2026-11-30T12:00:00Z",
                Some(0.012),
                Some(0.004),
                Settle::Found(Usd::from_f64(0.012)),
            ),
            (
                "unknown, recent",
                "2026-12-01T11:50:00Z",
                None,
                Some(0.004),
                Settle::Wait,
            ),
            (
                "unknown, just past the limit",
                "2026-12-01T11:45:00Z",
                None,
                Some(0.004),
                Settle::Lost(Usd::from_f64(0.004)),
            ),
            (
                "unknown, a day old",
                "2026-11-30T12:00:00Z",
                None,
                Some(0.004),
                Settle::Lost(Usd::from_f64(0.004)),
            ),
            (
                "unknown, no expectation",
                "2026-11-30T12:00:00Z",
                None,
                None,
                Settle::Lost(Usd::ZERO),
            ),
            (
                "unreadable time: waits",
                "yesterday",
                None,
                Some(0.004),
                Settle::Wait,
            ),
        ];
        for (name, at, cost, expected, want) in cases {
            assert_eq!(settle(&open_line(at, expected), cost, now), want, "{name}");
        }
    }
}
