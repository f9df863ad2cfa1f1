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
