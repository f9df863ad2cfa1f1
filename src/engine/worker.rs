//! One attempt at one prompt: send the request, stream the answer, accrue its cost token by
//! token into shared atomics (and trip the dollar cap the moment it is reached), and hand back
//! the completion or the failure. Knows nothing of retries or routing: the supervisor decides.

use std::ops::ControlFlow;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Instant;

use crate::openrouter::{ApiError, ChatStream, Completion, Progress, TimeoutKind};

use super::alarm::Alarm;
use super::core::attempt::{AttemptOutcome, AttemptResult, Dispatch};
use super::core::attempt_money::{self, Ending, cut_after_tokens};
use super::core::cancel_check::CHECK_AFTER_TOKENS;
use super::shared::Shared;

/// One dispatched attempt as the worker runs it: the core's decision itself (one value from
/// the core to the worker, not its fields copied into another struct), and its running cost.
pub(crate) struct AttemptSpec {
    pub d: Dispatch,
    /// This attempt's running cost and tokens, also read by the supervisor for the core.
    pub running: Arc<Running>,
}

/// What an attempt has streamed so far, as the core reads it through its port: its running
/// cost (its reservations) and its whole tokens received (how long its answer is already).
#[derive(Debug, Default)]
pub(crate) struct Running {
    pub pico: AtomicI64,
    pub tokens: AtomicU64,
}

impl AttemptSpec {
    /// Its worst case held against the dollar cap (the supervisor added it to
    /// the live money's hold at the spawn, `LiveMoney::hold`); zero for a stream the cap closes.
    fn held_worst_pico(&self) -> i64 {
        self.d.held_worst.pico()
    }
}

/// Runs one attempt to its end; `stop_now` closes it (with every other stream in flight).
pub(crate) async fn run_attempt(
    shared: Arc<Shared>,
    spec: AttemptSpec,
    stop_now: Arc<Alarm>,
    handed: Option<tokio::sync::oneshot::Receiver<()>>,
) -> AttemptResult {
    let started = Instant::now();
    // The request leaves only once its `dispatched` line is with the OS
    // (`Writer::spend_handed`): a crash may then lose the answer, never the record that the
    // request was sent. A writer gone first sends nothing (the run is failing on it).
    let handed = match handed {
        Some(rx) => rx.await.is_ok(),
        None => false,
    };
    let deadline = tokio::time::Instant::now() + shared.total_timeout;
    shared.attempts_started.fetch_add(1, Ordering::Relaxed);
    // The serving endpoint as soon as it is known, for the decision at the dollar cap.
    let known = AtomicUsize::new(spec.d.pinned.unwrap_or(usize::MAX));
    // Reserved as a stream the cap closes (from its first chunk): closed at the cap whatever
    // its endpoint is believed to do by then (`attempt_money::closed_by_cap`).
    let reserved_to_close = AtomicBool::new(false);
    let mut track = Track {
        endpoint: spec.d.pinned,
        price_out: spec.d.price_out.pico_per_token(),
        streamed: 0,
        text_bytes: 0,
        per_event: None,
        tokens: 0,
        // Until the serving endpoint is known: the most any it may reach allows.
        transit_tokens: (spec.d.over.iter())
            .filter_map(|&j| shared.endpoints().get(j).map(|e| e.transit_tokens))
            .fold(attempt_money::TRANSIT_TOKENS as f64, f64::max),
        generation_id: None,
        transit: 0,
    };
    let serving = (&known, &reserved_to_close);
    let outcome = if handed {
        let work = stream_answer(&shared, &spec, &mut track, serving, deadline);
        race_the_cap(&shared, &stop_now, serving, work).await
    } else {
        AttemptOutcome::Cancelled
    };
    let attributed = known.load(Ordering::Relaxed);
    if spec.d.pinned.is_none() && attributed != usize::MAX {
        shared.endpoint_stats[attributed]
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
    settle(&shared, &spec, outcome, track, started)
}

/// What an attempt has learnt while it streams.
struct Track {
    /// The endpoint serving it (pinned, or named by the stream).
    endpoint: Option<usize>,
    /// The completion price accrued per token, in picodollars.
    price_out: i64,
    /// Stream events received (what a close is read by: `core::close_read::read_close`),
    /// and the UTF-8 bytes of their text.
    streamed: u64,
    text_bytes: u64,
    /// Tokens an event carries at its endpoint, once the run has learned it
    /// (`RunEndpoint::tokens_per_event`), and the whole tokens received so far
    /// ([`tokens_received`]): what its cost accrues by.
    /// Until `per_event` is, the run's bytes of text a token count them
    /// ([`Shared::bytes_per_token`], read at every wake-up).
    per_event: Option<f64>,
    tokens: u64,
    /// Tokens it may be billed past what was read when the cap closes it, at its endpoint
    /// (`RunEndpoint::transit_tokens`).
    transit_tokens: f64,
    generation_id: Option<String>,
    /// Its tokens in transit, held against the cap while it streams (a stream the cap closes).
    transit: i64,
}

/// Adds `pico` to the attempt's running cost and to the run's.
fn accrue(shared: &Shared, spec: &AttemptSpec, pico: i64) {
    let before = spec.running.pico.fetch_add(pico, Ordering::Relaxed);
    let released = if spec.held_worst_pico() > 0 {
        attempt_money::hold_released(spec.held_worst_pico(), before, pico)
    } else {
        0
    };
    shared.money.accrue(pico, released);
}

/// Sends the request and streams the answer, accruing its cost token by token; all of it by
/// `deadline` (the total timeout).
async fn stream_answer(
    shared: &Shared,
    spec: &AttemptSpec,
    track: &mut Track,
    (known, reserved_to_close): (&AtomicUsize, &AtomicBool),
    deadline: tokio::time::Instant,
) -> Result<Option<Completion>, ApiError> {
    let by_deadline = |_| ApiError::Timeout(TimeoutKind::Total);
    let eps = shared.endpoints();
    let own = spec
        .d
        .pinned
        .filter(|&e| eps[e].custom.is_some())
        .and_then(|e| shared.own_clients.get(&eps[e].tag));
    let client = own.unwrap_or(&shared.client);
    let mut stream = tokio::time::timeout_at(
        deadline,
        client.chat_stream(&spec.d.request, shared.timeouts),
    )
    .await
    .map_err(by_deadline)??;
    // From here the stream keeps the total deadline on its own timer.
    stream.set_deadline(deadline);
    track.generation_id = stream.generation_id().map(str::to_string);
    // The provider has the prompt: it is paid for from here on.
    let prompt_cost = (spec.d.price_in.cost(spec.d.prompt_tokens) + spec.d.fee).pico();
    accrue(shared, spec, prompt_cost);
    if let Some(g) = &track.generation_id {
        let started = write_started(shared, spec, g, spec.d.pinned);
        tokio::time::timeout_at(deadline, started)
            .await
            .map_err(by_deadline)?;
    }
    let ended = match stream.next().await? {
        None => true,
        Some(first) => {
            let named = on_first_chunk(shared, spec, track, known, &stream);
            tokio::time::timeout_at(deadline, named)
                .await
                .map_err(by_deadline)?;
            let e = known.load(Ordering::Relaxed);
            let stops = (e != usize::MAX).then(|| shared.endpoints()[e].cancel_stops_billing);
            if spec.held_worst_pico() == 0 && attempt_money::close_at_cap(stops) {
                // A stream the cap closes (`race_the_cap`'s rule): its tokens in transit count
                // against the cap, as many as its endpoint's closes are billed past what was
                // read. One that runs to its end at the cap holds none: nothing is in transit
                // past a close that does not come.
                track.transit = attempt_money::transit_hold(track.price_out, track.transit_tokens);
                shared.money.hold(track.transit);
                reserved_to_close.store(true, Ordering::Relaxed);
            }
            // The rest of the stream in one loop per wake-up (`ChatStream::drive`).
            count_tokens(shared, spec, track, first).is_continue()
                && stream
                    .drive(|p| count_tokens(shared, spec, track, p))
                    .await?
        }
    };
    if !ended {
        // Closed to see what a close costs here (dropping the stream closes it).
        return Ok(None);
    }
    if track.endpoint.is_none() {
        track.endpoint = stream
            .provider()
            .and_then(|name| shared.endpoint_serving(name, &spec.d.over));
    }
    if track.generation_id.is_none() {
        track.generation_id = stream.generation_id().map(str::to_string);
    }
    stream.finish().map(Some)
}

/// Accrues and counts the tokens one wake-up brought; stops the stream of an attempt sent to
/// see what a close costs once it has streamed enough.
fn count_tokens(
    shared: &Shared,
    spec: &AttemptSpec,
    track: &mut Track,
    p: Progress,
) -> ControlFlow<()> {
    track.streamed += u64::from(p.token_events);
    track.text_bytes += u64::from(p.text_bytes);
    let by = track
        .per_event
        .map_or_else(|| CountBy::Text(shared.bytes_per_token()), CountBy::Events);
    let now = tokens_received(track.streamed, track.text_bytes, by)
        .min(u64::from(spec.d.request.max_tokens));
    // Taken back too when the count falls: a stream begun under the prior's byte a token is
    // counted by the learned figure once the run has one (kept at its highest, a run's first
    // wave stayed counted at up to five times its tokens, and its closes were booked so). Not
    // a stream that holds its worst case: the core reads the running cost live but its
    // reservations at each tick, so money taken back there showed as room before the hold grew
    // back by as much, went to another worst case, and tripped the cap (`harvest demo` at $0.30
    // stopped at $0.04).
    let now = if spec.held_worst_pico() > 0 {
        now.max(track.tokens)
    } else {
        now
    };
    let n = now as i64 - track.tokens as i64;
    track.tokens = now;
    spec.running.tokens.store(now, Ordering::Relaxed);
    accrue(shared, spec, track.price_out * n);
    let counters = [
        Some(&shared.totals),
        Some(&shared.dataset_stats[spec.d.dataset]),
        track.endpoint.map(|e| &shared.endpoint_stats[e]),
    ];
    for c in counters.into_iter().flatten() {
        if n >= 0 {
            c.streamed_tokens.fetch_add(n as u64, Ordering::Relaxed);
        } else {
            c.streamed_tokens
                .fetch_sub(n.unsigned_abs(), Ordering::Relaxed);
        }
    }
    if spec.d.check && track.streamed >= CHECK_AFTER_TOKENS {
        ControlFlow::Break(())
    } else {
        ControlFlow::Continue(())
    }
}

/// What a stream's tokens are counted by.
#[derive(Clone, Copy, Debug)]
enum CountBy {
    /// Its endpoint's tokens an event, once learned.
    Events(f64),
    /// Until then, the run's bytes of text a token.
    Text(f64),
}

/// The whole tokens a stream has received, from its `events` and their text's `bytes`: by its
/// endpoint's tokens an event once learned; until then at least an event's worth each, and as
/// many as the text holds (an endpoint that sends eight tokens an event would otherwise be
/// counted at an eighth of its cost until eight of its streams complete). The caller keeps it
/// at most the request's `max_tokens`: no provider bills more, and a count past it (a prior
/// that overcounts) would trip the dollar cap, which ends the run, on money that cannot be
/// spent.
fn tokens_received(events: u64, bytes: u64, by: CountBy) -> u64 {
    match by {
        CountBy::Events(per_event) => (events as f64 * per_event) as u64,
        CountBy::Text(bytes_per_token) => {
            events.max((bytes as f64 / bytes_per_token).ceil() as u64)
        }
    }
}

/// The first chunk names the provider and carries the generation id: from here on the
/// attempt accrues at its endpoint's own price and counts in flight there.
async fn on_first_chunk(
    shared: &Shared,
    spec: &AttemptSpec,
    track: &mut Track,
    known: &AtomicUsize,
    stream: &ChatStream,
) {
    if track.endpoint.is_none() {
        track.endpoint = stream
            .provider()
            .and_then(|name| shared.endpoint_serving(name, &spec.d.over));
    }
    if track.generation_id.is_none() {
        // No `X-Generation-Id` header (the real API's recorded responses carry none): the id
        // every chunk carries will do for a crash's look-up.
        track.generation_id = stream.generation_id().map(str::to_string);
        if let Some(g) = &track.generation_id {
            write_started(shared, spec, g, track.endpoint).await;
        }
    }
    if let Some(e) = track.endpoint {
        // Its own completion price for this prompt now (overrides, discount).
        let at = crate::pricing::hhmm(&chrono::Utc::now());
        track.price_out = (shared.endpoints()[e].tariff)
            .rates(spec.d.prompt_tokens, at)
            .completion
            .pico_per_token();
        track.per_event = shared.endpoints()[e].tokens_per_event.map(|k| k.max(1.0));
        track.transit_tokens = shared.endpoints()[e].transit_tokens;
        known.store(e, Ordering::Relaxed);
        if spec.d.pinned.is_none() {
            // Routed by OpenRouter: in flight at the endpoint it named, from now.
            shared.endpoint_stats[e]
                .in_flight
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs the attempt to its end, its total timeout, or a stop-now. At the dollar cap a stream
/// is closed where that stops the bill, or where it was reserved as one the cap closes; where
/// the provider bills the whole generation anyway, it runs to the end so that what is paid
/// for is kept. The stop and the cap are looked at
/// first on every wake-up, through [`Alarm`]s: an atomic read each while the task is the same.
async fn race_the_cap(
    shared: &Shared,
    stop_now: &Alarm,
    (known, reserved_to_close): (&AtomicUsize, &AtomicBool),
    work: impl Future<Output = Result<Option<Completion>, ApiError>>,
) -> AttemptOutcome {
    let mut work = pin!(work);
    let mut stop = pin!(stop_now.watch());
    let mut cap = pin!(shared.money.cap().watch());
    let mut past_cap = false;
    std::future::poll_fn(|cx| {
        if stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(AttemptOutcome::Cancelled);
        }
        if !past_cap && cap.as_mut().poll(cx).is_ready() {
            let e = known.load(Ordering::Relaxed);
            let stops = (e != usize::MAX).then(|| shared.endpoints()[e].cancel_stops_billing);
            if attempt_money::closed_by_cap(stops, reserved_to_close.load(Ordering::Relaxed)) {
                return Poll::Ready(AttemptOutcome::Cancelled);
            }
            past_cap = true;
            shared.finishing_past_cap.fetch_add(1, Ordering::Relaxed);
        }
        work.as_mut().poll(cx).map(|r| match r {
            Ok(Some(c)) => AttemptOutcome::Done(Box::new(c)),
            Ok(None) => AttemptOutcome::Checked,
            Err(e) => AttemptOutcome::Failed(e),
        })
    })
    .await
}

/// Books what the attempt cost and hands back its result.
fn settle(
    shared: &Shared,
    spec: &AttemptSpec,
    outcome: AttemptOutcome,
    track: Track,
    started: Instant,
) -> AttemptResult {
    let accrued = spec.running.pico.load(Ordering::Relaxed);
    let endpoint = track.endpoint.or_else(|| match &outcome {
        AttemptOutcome::Failed(e) => e
            .provider_name()
            .and_then(|n| shared.endpoint_serving(n, &spec.d.over)),
        _ => None,
    });
    // OpenRouter named a provider with several of the request's endpoints: the bill says which.
    let endpoint = match (&outcome, endpoint) {
        (AttemptOutcome::Done(c), Some(e)) if spec.d.pinned.is_none() => {
            Some(billed_endpoint(shared, c, e, &spec.d.over))
        }
        (_, e) => e,
    };
    // What the attempt is booked at, what its running cost was, and what is left of its hold
    // leave or join the live money together (`LiveMoney::end_attempt`): the cap's sum moves
    // once, by the net.
    let ending = match &outcome {
        AttemptOutcome::Done(c) => Ending::Done {
            final_pico: final_cost(shared, c, endpoint).pico(),
        },
        AttemptOutcome::Cancelled | AttemptOutcome::Checked => Ending::Closed,
        AttemptOutcome::Failed(e) if e.kind() == crate::openrouter::ErrorKind::Timeout => {
            Ending::Closed
        }
        AttemptOutcome::Failed(e) => Ending::Failed {
            cut_after_tokens: track.streamed > 0 && cut_after_tokens(e.kind()),
        },
    };
    let booked = attempt_money::booked(ending, accrued);
    // What is left of its held worst case, and of its tokens in transit.
    let left = (spec.held_worst_pico() - accrued).max(0) + track.transit;
    shared.money.end_attempt(booked, accrued, left);
    AttemptResult {
        key: spec.d.key,
        outcome,
        endpoint,
        streamed_tokens: track.streamed,
        received_tokens: track.tokens,
        booked_pico: booked,
        generation_id: track.generation_id,
        elapsed: started.elapsed(),
    }
}

/// Writes the attempt's `started` ledger line: if we crash now, the next start finds it open
/// and asks the API what generation `g` cost. A failed write stops the run through the
/// supervisor's own writes.
async fn write_started(shared: &Shared, spec: &AttemptSpec, g: &str, endpoint: Option<usize>) {
    let endpoint = endpoint.map(|e| shared.endpoints()[e].tag.clone());
    let at = crate::domain::rfc3339(chrono::Utc::now());
    let _ = (shared.writer)
        .spend(&spec.d.started_line(g, endpoint, at))
        .await;
}

/// Of the request's endpoints of the provider that served `c` (first guessed as `e`), the one
/// whose tariff puts the answer nearest its billed cost (`core::attribution`); `e` when the
/// provider has one endpoint there or no cost came.
fn billed_endpoint(shared: &Shared, c: &Completion, e: usize, over: &[usize]) -> usize {
    let Some(billed) = c.cost() else {
        return e;
    };
    let eps = shared.endpoints();
    let Some(provider) = eps.get(e).map(|x| x.provider.clone()) else {
        return e;
    };
    let at = crate::pricing::hhmm(&chrono::Utc::now());
    let listed: Vec<(usize, i64)> = over
        .iter()
        .copied()
        .filter(|&i| {
            eps.get(i)
                .is_some_and(|x| x.provider.eq_ignore_ascii_case(&provider))
        })
        .map(|i| (i, eps[i].tariff.cost(c.usage.token_use(), at).pico()))
        .collect();
    if listed.len() < 2 {
        return e;
    }
    super::core::attribution::by_bill(&listed, billed.pico()).unwrap_or(e)
}

/// What a finished response cost: the reported `usage.cost`, else the serving endpoint's price.
pub(crate) fn final_cost(
    shared: &Shared,
    c: &Completion,
    endpoint: Option<usize>,
) -> crate::domain::Usd {
    // An operator's own server costs what the config says, whatever it reports.
    let priced = |e: usize| {
        let at = crate::pricing::hhmm(&chrono::Utc::now());
        shared.endpoints()[e].tariff.cost(c.usage.token_use(), at)
    };
    if let Some(e) = endpoint.filter(|&e| shared.endpoints()[e].custom.is_some()) {
        return priced(e);
    }
    c.cost()
        .unwrap_or_else(|| endpoint.map_or(crate::domain::Usd::ZERO, priced))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streams_tokens_are_counted_from_its_text_until_its_endpoints_rate_is_learned() {
        use CountBy::{Events, Text};
        // (what, events, bytes, counted by, tokens counted)
        #[rustfmt::skip]
        let cases: [(&str, u64, u64, CountBy, u64); 6] = [
            ("learned: events by the rate", 64, 2_000, Events(8.0), 512),
            ("learned: the text does not count", 64, 10, Events(2.5), 160),
            ("eight tokens an event of prose, four bytes a token", 64, 2_048, Text(4.0), 512),
            ("the prior: a byte a token", 64, 2_048, Text(1.0), 2_048),
            ("text thinner than a token an event: the events", 64, 10, Text(4.0), 64),
            ("nothing yet", 0, 0, Text(4.0), 0),
        ];
        for (what, events, bytes, by, want) in cases {
            assert_eq!(tokens_received(events, bytes, by), want, "{what}");
        }
    }
}
