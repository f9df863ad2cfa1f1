//! One chat response as it goes out: the producer task that paces the stream (or builds the
//! whole body), and the billing of what was sent.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use rand::Rng;
use rand::rngs::SmallRng;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::domain::Usd;

use crate::sim::billing::{BillingEntry, Outcome};
use crate::sim::chat::plan::*;
use crate::sim::faults::Fault;
use crate::sim::generate::{ChunkWriter, DONE, KEEPALIVE, pico_to_json};
use crate::sim::state::*;

pub(crate) type Chunk = Result<Bytes, std::io::Error>;

pub(crate) fn respond(
    state: Arc<SimState>,
    plan: Plan,
    rng: SmallRng,
    ticket: Option<crate::sim::account::Ticket>,
) -> Response {
    let (tx, rx) = mpsc::channel::<Chunk>(2);
    let stream = plan.stream;
    let id = plan.id.clone();
    let header_id = state.live().generation_header;
    tokio::spawn(async move {
        // Counted against the in-flight budget until the generation ends.
        let _ticket = ticket;
        produce(state, plan, rng, tx).await;
    });
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (c, rx))
    }));
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    if stream {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    } else {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if header_id && let Ok(v) = HeaderValue::from_str(&id) {
        h.insert("x-generation-id", v);
    }
    resp
}

/// Decrements the endpoint's in-flight count however the producer ends.
pub(crate) struct InFlight(pub(crate) Arc<SimState>, pub(crate) usize);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight[self.1].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sends one piece of the body; `false` when the client has gone.
pub(crate) struct Sender {
    pub(crate) tx: mpsc::Sender<Chunk>,
    pub(crate) rng: SmallRng,
    pub(crate) split: bool,
}

impl Sender {
    pub(crate) async fn send(&mut self, s: String) -> bool {
        let bytes = Bytes::from(s);
        if self.split && bytes.len() > 1 && self.rng.random::<f64>() < 0.25 {
            // Anywhere, even inside a multi-byte character or the `data:` prefix.
            let at = self.rng.random_range(1..bytes.len());
            if self.tx.send(Ok(bytes.slice(..at))).await.is_err() {
                return false;
            }
            return self.tx.send(Ok(bytes.slice(at..))).await.is_ok();
        }
        self.tx.send(Ok(bytes)).await.is_ok()
    }
}

/// Paces one response: keep-alives during the wait for the first token, tokens at the
/// endpoint's decode speed (an event when its last token is decoded), then the
/// finish and usage chunks and `[DONE]`, or the planned fault. Bills as the module doc says.
pub(crate) async fn produce(
    state: Arc<SimState>,
    plan: Plan,
    rng: SmallRng,
    tx: mpsc::Sender<Chunk>,
) {
    let _in_flight = InFlight(state.clone(), plan.endpoint);
    let started = Instant::now();
    let mut out = Sender {
        tx,
        rng,
        split: state.cfg.split_writes && plan.stream,
    };
    let hidden = if plan.reasoning_visible {
        0
    } else {
        plan.reasoning_tokens
    };
    // Token j is decoded at `origin + j × per_token`; hidden reasoning is decoded unseen.
    let origin = started + plan.ttft;
    let first_at = origin + plan.per_token.mul_f64(hidden as f64);
    let mut p = Producer {
        state: &state,
        plan: &plan,
        writer: ChunkWriter::new(&plan.id, plan.created, &plan.model, &plan.provider),
        stopping: state.stopping.clone(),
        text: Text::default(),
        event: Event::default(),
    };
    let sent = match p.wait_first_token(&mut out, first_at).await {
        Ok(()) => p.stream_tokens(&mut out, origin, hidden).await,
        Err(gone) => Err(gone),
    };
    match sent {
        Ok(sent) => p.end(&mut out, sent, started).await,
        Err(Gone::Client(sent)) => closed_by_client(&state, &plan, sent, started),
        Err(Gone::Stopping) => {}
    }
}

/// Why a response ended early.
enum Gone {
    /// The client went away after this many tokens were sent.
    Client(u64),
    /// The simulator is shutting down: nothing is billed.
    Stopping,
}

/// The text of a non-streamed response, sent whole at the end.
#[derive(Default)]
struct Text {
    content: String,
    reasoning: String,
}

/// One response's producer: what it answers and what it has built so far.
struct Producer<'a> {
    state: &'a SimState,
    plan: &'a Plan,
    writer: ChunkWriter,
    stopping: tokio_util::sync::CancellationToken,
    text: Text,
    event: Event,
}

/// The streamed event being filled: tokens of one kind until it holds its drawn count
/// ([`crate::sim::table::TokensPerEvent`]).
#[derive(Default)]
struct Event {
    /// Escaped text so far.
    text: String,
    reasoning: bool,
    tokens: u32,
    /// The count this event goes out at (0 until drawn).
    holds: u32,
}

impl Producer<'_> {
    /// The tokens the response streams before its planned end or fault.
    fn limit(&self) -> u64 {
        if self.plan.fault == Fault::None {
            self.plan.completion_tokens
        } else {
            self.plan.fault_at
        }
    }

    /// Waits for the first token, with a keep-alive comment every second.
    async fn wait_first_token(&self, out: &mut Sender, first_at: Instant) -> Result<(), Gone> {
        let stream = self.plan.stream;
        if stream && !out.send(KEEPALIVE.to_string()).await {
            return Err(Gone::Client(0));
        }
        loop {
            let now = Instant::now();
            if now >= first_at {
                return Ok(());
            }
            let next = (now + Duration::from_secs(1)).min(first_at);
            tokio::select! {
                _ = tokio::time::sleep_until(next.into()) => {
                    if next < first_at && stream && !out.send(KEEPALIVE.to_string()).await {
                        return Err(Gone::Client(0));
                    }
                }
                _ = out.tx.closed() => return Err(Gone::Client(0)),
                _ = self.stopping.cancelled() => return Err(Gone::Stopping),
            }
        }
    }

    /// Sends the tokens at the endpoint's decode speed; returns how many were decoded.
    ///
    /// An event goes out when its last token is decoded, in a write of its own: a provider that
    /// decodes speculatively accepts several tokens in one step and flushes them as one event,
    /// and a streaming server writes each event as it has it. Writes of one stream are at
    /// least `min_tick` apart (events due meanwhile go out together), which at real pace no
    /// endpoint of the built-in table comes near. A close mid-event finds that step unfinished:
    /// its tokens are not yet decoded, and a provider that stops the bill bills what it decodes
    /// before it notices the close (`close_notice_tokens`).
    async fn stream_tokens(
        &mut self,
        out: &mut Sender,
        origin: Instant,
        hidden: u64,
    ) -> Result<u64, Gone> {
        let limit = self.limit();
        let per_token = self.plan.per_token;
        let mut i = hidden.min(limit);
        let min_tick = self.state.cfg.min_tick;
        let keepalive_at = if out.rng.random::<f64>() < 0.1 && limit > 2 {
            out.rng.random_range(1..limit)
        } else {
            u64::MAX
        };
        // The tokens decoded by now.
        let due = || {
            let since = Instant::now().saturating_duration_since(origin);
            ((since.as_secs_f64() / per_token.as_secs_f64()).floor() as u64 + 1).min(limit)
        };
        while i < limit {
            let end = if per_token.is_zero() {
                limit
            } else {
                // The event being filled goes out with its last token.
                let event_end = (i + self.event_left(&mut out.rng)).min(limit);
                if due() < event_end {
                    let last_due = origin + per_token.mul_f64((event_end - 1) as f64);
                    let wake = last_due.max(Instant::now() + min_tick);
                    tokio::select! {
                        _ = tokio::time::sleep_until(wake.into()) => {}
                        _ = out.tx.closed() => return Err(Gone::Client(self.decoded(i))),
                        _ = self.stopping.cancelled() => return Err(Gone::Stopping),
                    }
                    continue;
                }
                due()
            }
            .min(i + MAX_BATCH);
            let mut buf = String::with_capacity(((end - i) as usize) * 220);
            for j in i..end {
                if j == keepalive_at && self.plan.stream {
                    // Between events: the event being filled is not in `buf` yet.
                    buf.push_str(KEEPALIVE);
                }
                self.word(j, &mut buf, &mut out.rng);
            }
            if end == limit {
                // The answer's last event goes out part-filled.
                self.flush(&mut buf);
            }
            if !buf.is_empty() && !out.send(buf).await {
                return Err(Gone::Client(self.decoded(end)));
            }
            i = end;
            if per_token.is_zero() {
                tokio::task::yield_now().await;
            }
        }
        Ok(i)
    }

    /// Of the first `pushed` tokens, those of events finished: the event being filled is a
    /// step still decoding.
    fn decoded(&self, pushed: u64) -> u64 {
        pushed.saturating_sub(u64::from(self.event.tokens))
    }

    /// The tokens the event being filled still takes before it goes out (its count is drawn
    /// with its first token, or here when the pacing asks first).
    fn event_left(&mut self, rng: &mut SmallRng) -> u64 {
        if self.event.holds == 0 {
            self.event.holds = self.plan.tokens_per_event.draw(rng).max(1);
        }
        u64::from(self.event.holds.saturating_sub(self.event.tokens).max(1))
    }

    /// Token `j` joins the event being filled: one of the other kind, or a full one, goes out
    /// into `buf` first.
    fn push(&mut self, escaped: &str, reasoning: bool, buf: &mut String, rng: &mut SmallRng) {
        if self.event.tokens > 0 && self.event.reasoning != reasoning {
            self.flush(buf);
        }
        if self.event.tokens == 0 {
            self.event.reasoning = reasoning;
        }
        self.event_left(rng);
        self.event.text.push_str(escaped);
        self.event.tokens += 1;
        if self.event.tokens >= self.event.holds {
            self.flush(buf);
        }
    }

    /// The event being filled, as one SSE chunk into `buf`; the next event's count is drawn
    /// afresh.
    fn flush(&mut self, buf: &mut String) {
        if self.event.tokens == 0 {
            return;
        }
        if self.event.reasoning {
            self.writer.reasoning(&self.event.text, buf);
        } else {
            self.writer.content(&self.event.text, buf);
        }
        self.event.text.clear();
        self.event.tokens = 0;
        self.event.holds = 0;
    }

    /// Token `j`: into the streamed event being filled, or onto the text (a whole body).
    fn word(&mut self, j: u64, buf: &mut String, rng: &mut SmallRng) {
        use crate::sim::table::ReasoningFormat as RF;
        let (plan, state) = (self.plan, self.state);
        let w = plan.text.word(j, state.vocab.len());
        let thinking = j < plan.reasoning_tokens || plan.reasoning_format == RF::Only;
        if plan.reasoning_format == RF::Inline && plan.reasoning_visible {
            // No reasoning parser: the thinking is part of the text.
            let mut word = String::new();
            if j == 0 && plan.reasoning_tokens > 0 {
                word.push_str("<think>");
            }
            if j == plan.reasoning_tokens && j > 0 {
                word.push_str("</think>");
            }
            word.push_str(state.vocab.raw(w));
            if plan.stream {
                let mut escaped = String::new();
                crate::sim::generate::json_escape(&word, &mut escaped);
                self.push(&escaped, false, buf, rng);
            } else {
                self.text.content.push_str(&word);
            }
        } else if thinking {
            if plan.reasoning_visible {
                if plan.stream {
                    self.push(state.vocab.escaped(w), true, buf, rng);
                } else {
                    self.text.reasoning.push_str(state.vocab.raw(w));
                }
            }
        } else if plan.stream {
            self.push(state.vocab.escaped(w), false, buf, rng);
        } else {
            self.text.content.push_str(state.vocab.raw(w));
        }
    }

    /// The response's end once `sent` tokens are out: finish, usage and `[DONE]`, or the
    /// planned fault. Bills as the module doc says.
    async fn end(&self, out: &mut Sender, sent: u64, started: Instant) {
        let (state, plan) = (self.state, self.plan);
        match plan.fault {
            Fault::None | Fault::Empty => {
                let n = plan.completion_tokens;
                if !out.send(self.final_body(n)).await {
                    return cancelled(state, plan, n, started);
                }
                if plan.fault == Fault::None {
                    bill(state, plan, n, Outcome::Complete, started);
                }
            }
            Fault::MidStream => {
                let code = if out.rng.random::<bool>() {
                    "502"
                } else {
                    "\"server_error\""
                };
                let _ = out.send(self.error_body(code)).await;
            }
            Fault::Reset => {
                let _ = out
                    .tx
                    .send(Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "simulated connection reset",
                    )))
                    .await;
                // Not covered by zero completion insurance once tokens were sent (see `cancelled`).
                cancelled(state, plan, sent, started);
            }
            Fault::Truncate => {
                if !plan.stream {
                    let body =
                        non_stream_body(plan, &self.text.content, &self.text.reasoning, sent, "0");
                    let _ = out.send(body[..body.len() / 2].to_string()).await;
                }
                // Dropping the sender ends the body cleanly: no finish, no usage, no [DONE].
                // Billed like a reset.
                cancelled(state, plan, sent, started);
            }
            Fault::Stall => {
                tokio::select! {
                    _ = out.tx.closed() => cancelled(state, plan, sent, started),
                    _ = tokio::time::sleep(STALL_LIMIT) => {}
                    _ = self.stopping.cancelled() => {}
                }
            }
            Fault::RateLimit | Fault::ServerError => {}
        }
    }

    /// The finish and usage of a response that ran to its end (`Fault::Empty` bills $0).
    fn final_body(&self, n: u64) -> String {
        let plan = self.plan;
        let cost = if plan.fault == Fault::Empty {
            Usd::ZERO
        } else {
            plan.cost(n)
        };
        let cost_json = pico_to_json(cost.pico());
        if !plan.stream {
            return non_stream_body(
                plan,
                &self.text.content,
                &self.text.reasoning,
                n,
                &cost_json,
            );
        }
        let mut b = String::new();
        self.writer.finish(plan.finish_reason, &mut b);
        self.writer.usage(
            (plan.prompt_tokens, plan.cached_tokens),
            n,
            plan.reasoning_tokens,
            &cost_json,
            &mut b,
        );
        b.push_str(DONE);
        b
    }

    /// A mid-stream error: the forced one, or a provider's 502 with `code`.
    fn error_body(&self, code: &str) -> String {
        let plan = self.plan;
        if let Some(f) = &plan.forced {
            let err = f.error_object();
            if !plan.stream {
                return json!({ "error": err }).to_string();
            }
            let mut b = String::new();
            self.writer.error_object(&err, &mut b);
            b.push_str(DONE);
            return b;
        }
        if !plan.stream {
            return json!({"error": {"code": 502, "message": "Provider returned error",
                   "metadata": {"provider_name": plan.provider}}})
            .to_string();
        }
        let mut b = String::new();
        self.writer
            .error(code, "Provider returned error", &plan.provider, &mut b);
        b.push_str(DONE);
        b
    }
}

pub(crate) fn non_stream_body(
    plan: &Plan,
    content: &str,
    reasoning: &str,
    n: u64,
    cost_json: &str,
) -> String {
    let message = if reasoning.is_empty() {
        json!({"role": "assistant", "content": content, "refusal": null})
    } else {
        json!({"role": "assistant", "content": content, "refusal": null, "reasoning": reasoning,
               "reasoning_details": [{"type": "reasoning.text", "text": reasoning, "format": "unknown", "index": 0}]})
    };
    let cost: Value = serde_json::from_str(cost_json).unwrap_or(json!(0));
    let body = json!({
        "id": plan.id, "object": "chat.completion", "created": plan.created, "model": plan.model,
        "provider": plan.provider, "system_fingerprint": null,
        "choices": [{"index": 0, "logprobs": null, "finish_reason": plan.finish_reason,
                     "native_finish_reason": plan.finish_reason, "message": message}],
        "usage": {"prompt_tokens": plan.prompt_tokens, "completion_tokens": n,
                  "total_tokens": plan.prompt_tokens + n, "cost": cost, "is_byok": false,
                  "prompt_tokens_details": {"cached_tokens": plan.cached_tokens},
                  "completion_tokens_details": {"reasoning_tokens": plan.reasoning_tokens}}
    });
    // Real non-streamed bodies can start with keep-alive whitespace.
    format!("\n   \n{body}")
}

pub(crate) fn bill(
    state: &SimState,
    plan: &Plan,
    completion: u64,
    outcome: Outcome,
    started: Instant,
) {
    bill_ending_in(state, plan, completion, outcome, started, Duration::ZERO);
}

/// Bills a generation that ends `ends_in` from now (see `Billing::bill_ending_in`).
fn bill_ending_in(
    state: &SimState,
    plan: &Plan,
    completion: u64,
    outcome: Outcome,
    started: Instant,
    ends_in: Duration,
) {
    state.billing.bill_ending_in(
        BillingEntry {
            id: plan.id.clone(),
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            tag: plan.tag.clone(),
            provider: plan.provider.clone(),
            prompt_tokens: plan.prompt_tokens,
            completion_tokens: completion,
            reasoning_tokens: plan.reasoning_tokens.min(completion),
            cost_usd: plan.cost(completion),
            outcome,
            streamed: plan.stream,
            finish_reason: (outcome == Outcome::Complete).then(|| plan.finish_reason.to_string()),
            latency_ms: started.elapsed().as_millis() as u64,
        },
        ends_in,
    );
}

/// The client closed the connection after `sent` tokens.
/// Bills a generation whose stream ended early: closed by the client, reset, or cut cleanly
/// after `sent` tokens. OpenRouter's zero completion insurance (docs: guides/features/
/// zero-completion-insurance) covers only "the response has zero completion tokens AND a
/// blank/null finish reason" and "the response has an error finish reason": a stream cut after
/// tokens is neither, so it is billed as a cancel (the tokens sent where cancelling stops the
/// bill, the whole generation elsewhere). One with no token yet is free.
pub(crate) fn cancelled(state: &SimState, plan: &Plan, sent: u64, started: Instant) {
    ended_early(state, plan, sent, 0, started);
}

/// The client closed the stream while tokens were being decoded: [`cancelled`], with the
/// tokens decoded before the provider noticed billed where a close stops the bill.
fn closed_by_client(state: &SimState, plan: &Plan, sent: u64, started: Instant) {
    ended_early(state, plan, sent, plan.close_notice_tokens, started);
}

/// See [`cancelled`]: `late` tokens more are decoded (and billed) before the end is noticed.
fn ended_early(state: &SimState, plan: &Plan, sent: u64, late: u64, started: Instant) {
    if matches!(plan.fault, Fault::MidStream | Fault::Empty) {
        // An error finish reason, or nothing at all: covered by the insurance.
        return;
    }
    if sent == 0 && plan.fault != Fault::None && plan.fault != Fault::Stall {
        return;
    }
    if plan.cancel_stops_billing {
        // The provider notices the close after a while, decoding on meanwhile; the bill stops
        // there (never past the answer's planned end).
        let noticed = (sent + late).min(plan.completion_tokens.max(sent));
        if noticed == sent {
            bill(state, plan, sent, Outcome::Cancelled, started);
        } else {
            let ends_in = plan
                .per_token
                .saturating_mul(u32::try_from(noticed - sent).unwrap_or(u32::MAX));
            bill_ending_in(state, plan, noticed, Outcome::Cancelled, started, ends_in);
        }
    } else {
        // The provider goes on to the end, and the whole answer is billed (docs:
        // api-reference/streaming, "Stream Cancellation"); `/generation` records it when it
        // ends.
        let rest = plan.completion_tokens.saturating_sub(sent);
        let ends_in = plan
            .per_token
            .saturating_mul(u32::try_from(rest).unwrap_or(u32::MAX));
        bill_ending_in(
            state,
            plan,
            plan.completion_tokens,
            Outcome::Cancelled,
            started,
            ends_in,
        );
    }
}
