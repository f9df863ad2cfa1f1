//! One streamed chat completion in progress: [`ChatStream`] reads what the connection holds
//! in one wake-up, decodes its SSE events into the accumulator, and keeps the first-token,
//! idle and total deadlines on one timer.

use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::Body as _;

use super::error::{ApiError, TimeoutKind};
use super::key::ApiKey;
use super::response::{Completion, Progress, StreamAccumulator};
use super::sse::SseDecoder;
use super::transport::{self, Failure};

/// Timers for one streamed completion.
#[derive(Clone, Copy, Debug)]
pub struct StreamTimeouts {
    /// From sending the request to the first content or reasoning token.
    pub first_token: Duration,
    /// Longest silence between two data events once tokens flow (keep-alive comments do not
    /// count: a provider that stalls behind keep-alives is still stalled).
    pub idle: Duration,
}

impl Default for StreamTimeouts {
    fn default() -> Self {
        StreamTimeouts {
            first_token: Duration::from_secs(120),
            idle: Duration::from_secs(60),
        }
    }
}

/// One streamed completion in progress. Call [`ChatStream::next`] until it returns `Ok(None)`,
/// then [`ChatStream::finish`]. Dropping it closes the connection (the provider may stop billing).
pub struct ChatStream {
    pub(super) generation_id: Option<String>,
    pub(super) body: transport::Body,
    pub(super) sse: SseDecoder,
    pub(super) acc: StreamAccumulator,
    pub(super) timeouts: StreamTimeouts,
    pub(super) started: Instant,
    /// `started` on tokio's clock, which the timeouts run on (and tests can pause).
    pub(super) started_at: tokio::time::Instant,
    pub(super) last_token: tokio::time::Instant,
    pub(super) timer: Pin<Box<tokio::time::Sleep>>,
    pub(super) ttft: Option<Duration>,
    /// The attempt's total deadline, if its caller set one ([`ChatStream::set_deadline`]).
    pub(super) total: Option<tokio::time::Instant>,
    /// The `[DONE]` event or the body's end was seen.
    pub(super) ended: bool,
    /// The body ended; the events before its end are still to be counted.
    pub(super) eof: bool,
    /// The body failed; returned once the events before it are counted.
    pub(super) failed: Option<Failure>,
    /// For scrubbing what the stream says.
    pub(super) key: Option<ApiKey>,
    /// Its decode pace, reported to the runtime's read pause.
    pub(super) pace: super::pace::Pace,
}

/// How much one wake-up reads from a stream before it hands the events over: enough to take
/// everything a real-pace stream has buffered, little enough that a full-speed stream does not
/// hold the thread.
const READ_AHEAD: usize = 64 * 1024;

/// What one [`ChatStream::read_ready`] found.
struct Read {
    /// It read some bytes, or the body ended or failed: the caller looks at what it has.
    any: bool,
    /// The body has nothing more now and will wake the task when it has.
    waiting: bool,
}

impl ChatStream {
    /// Waits for the next token-bearing data, and reports every such event that one read
    /// brought (often many). `Ok(None)` when the stream has ended (complete or not:
    /// [`ChatStream::finish`] decides).
    pub async fn next(&mut self) -> Result<Option<Progress>, ApiError> {
        let mut got = None;
        let ended = std::future::poll_fn(|cx| {
            self.poll_drive(cx, &mut |p| {
                got = Some(p);
                ControlFlow::Break(())
            })
        })
        .await?;
        Ok(if ended { None } else { got })
    }

    /// Reads the stream to its end (`Ok(true)`; [`ChatStream::finish`] then decides whether it
    /// is complete), handing `on_tokens` what each wake-up brought, until it says stop
    /// (`Ok(false)`). The cheap way to read a whole stream: one poll of the connection per
    /// wake-up, where calling [`ChatStream::next`] in a loop polls it a second time only to
    /// find it still empty.
    pub async fn drive(
        &mut self,
        mut on_tokens: impl FnMut(Progress) -> ControlFlow<()>,
    ) -> Result<bool, ApiError> {
        std::future::poll_fn(|cx| self.poll_drive(cx, &mut on_tokens)).await
    }

    /// Stops the stream with [`TimeoutKind::Total`] at `deadline`, on the stream's one timer:
    /// a wrapping `tokio::time::timeout` would be polled on every wake-up besides it.
    pub fn set_deadline(&mut self, deadline: tokio::time::Instant) {
        self.total = Some(deadline);
    }

    /// One wake-up's work: every chunk the connection already holds is read and every event in
    /// them folded into one report per read for `on_tokens`, so the caller runs once per
    /// wake-up, not once per token (at real pace a wake-up finds a token or a few per stream;
    /// see BENCHMARKS.md). `Ready(Ok(true))` at the stream's end, `Ready(Ok(false))` when
    /// `on_tokens` stopped it.
    fn poll_drive(
        &mut self,
        cx: &mut Context<'_>,
        on_tokens: &mut dyn FnMut(Progress) -> ControlFlow<()>,
    ) -> Poll<Result<bool, ApiError>> {
        // The body said it holds nothing more, and will wake this task when it does.
        let mut waiting = false;
        loop {
            let progress = self.drain_events()?;
            if progress.token_events > 0 {
                let now = tokio::time::Instant::now();
                self.last_token = now;
                if self.ttft.is_none() {
                    self.ttft = Some(self.started.elapsed());
                }
                if self.total.is_some_and(|t| now >= t) {
                    return Poll::Ready(Err(ApiError::Timeout(TimeoutKind::Total)));
                }
                if let Some(pace) = self.pace.read(progress.token_events, now) {
                    crate::runtime::STREAM_PACE.report(pace);
                }
                if on_tokens(progress).is_break() {
                    return Poll::Ready(Ok(false));
                }
            }
            if self.ended {
                return Poll::Ready(Ok(true));
            }
            if let Some(e) = self.failed.take() {
                return Poll::Ready(Err(super::scrub::transport_error(
                    self.key.as_ref().map(ApiKey::expose),
                    e,
                )));
            }
            if self.eof {
                self.ended = true;
                return Poll::Ready(Ok(true));
            }
            if !waiting {
                let read = self.read_ready(cx);
                waiting = read.waiting;
                if read.any {
                    continue;
                }
            }
            // Nothing to read: wait, under the timeout.
            self.sse.release_idle();
            return match self.poll_deadline(cx) {
                Poll::Ready(kind) => Poll::Ready(Err(ApiError::Timeout(kind))),
                Poll::Pending => Poll::Pending,
            };
        }
    }

    /// Reads the chunks that are ready now, up to [`READ_AHEAD`] bytes.
    fn read_ready(&mut self, cx: &mut Context<'_>) -> Read {
        let mut read = 0usize;
        loop {
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers carry no events.
                    let Ok(chunk) = frame.into_data() else {
                        continue;
                    };
                    self.sse.push(&chunk);
                    read += chunk.len();
                    if read >= READ_AHEAD {
                        return Read {
                            any: true,
                            waiting: false,
                        };
                    }
                }
                // Kept until the events before it are counted: the tokens were streamed.
                Poll::Ready(Some(Err(e))) => {
                    self.failed = Some(e);
                    return Read {
                        any: true,
                        waiting: false,
                    };
                }
                Poll::Ready(None) => {
                    self.eof = true;
                    return Read {
                        any: true,
                        waiting: false,
                    };
                }
                Poll::Pending => {
                    return Read {
                        any: read > 0,
                        waiting: true,
                    };
                }
            }
        }
    }

    /// Every complete event buffered, folded into one report.
    fn drain_events(&mut self) -> Result<Progress, ApiError> {
        let mut progress = Progress::default();
        while !self.ended {
            let Some(ev) = self.sse.next_event() else {
                break;
            };
            let data = ev.map_err(|e| ApiError::Decode {
                what: "stream",
                detail: e.to_string(),
            })?;
            let p = self
                .acc
                .feed(data)
                .map_err(|e| super::scrub::api_error(self.key.as_ref().map(ApiKey::expose), e))?;
            if self.acc.saw_done() {
                self.ended = true;
            }
            progress.token_events += p.token_events;
            progress.content_events += p.content_events;
            progress.text_bytes = progress.text_bytes.saturating_add(p.text_bytes);
            // Role-only, finish and usage chunks add nothing: keep reading.
        }
        Ok(progress)
    }

    /// The first-token or idle timeout. One timer per stream, moved only when it fires early:
    /// re-arming it on every token would cost a timer-wheel insert and remove per token.
    /// Keep-alive comments and partial reads do not extend it (a provider that stalls behind
    /// keep-alives is still stalled).
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<TimeoutKind> {
        let (mut deadline, mut kind) = match self.ttft {
            None => (
                self.started_at + self.timeouts.first_token,
                TimeoutKind::FirstToken,
            ),
            Some(_) => (self.last_token + self.timeouts.idle, TimeoutKind::Idle),
        };
        if let Some(total) = self.total.filter(|&t| t <= deadline) {
            (deadline, kind) = (total, TimeoutKind::Total);
        }
        if self.timer.deadline() > deadline {
            // The first token came: the idle deadline is usually sooner.
            self.timer.as_mut().reset(deadline);
        }
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if self.timer.deadline() >= deadline {
                return Poll::Ready(kind);
            }
            self.timer.as_mut().reset(deadline);
        }
    }

    /// The generation id: from the `X-Generation-Id` header, else from the first chunk.
    pub fn generation_id(&self) -> Option<&str> {
        self.generation_id.as_deref().or(self.acc.id())
    }

    /// Display name of the serving provider, once a chunk has named it.
    pub fn provider(&self) -> Option<&str> {
        self.acc.provider()
    }

    pub fn events(&self) -> u64 {
        self.acc.events()
    }

    pub fn ttft(&self) -> Option<Duration> {
        self.ttft
    }

    /// Reads the stream to its end and returns the completion or the failure.
    pub async fn collect(mut self) -> Result<Completion, ApiError> {
        self.drive(|_| ControlFlow::Continue(())).await?;
        self.finish()
    }

    /// The completion, if the stream ended complete (finish reason and usage seen).
    pub fn finish(self) -> Result<Completion, ApiError> {
        let latency = self.started.elapsed();
        self.acc.finish(self.ttft, latency)
    }
}
