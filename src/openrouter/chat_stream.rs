//! One streamed chat completion in progress: [`ChatStream`] reads what the connection holds
//! in one wake-up, decodes its SSE events into the accumulator, and keeps the first-token,
//! idle and total deadlines.

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
    /// The `[DONE]` event or the body's end was seen.
    pub(super) ended: bool,
    /// The body ended; the events before its end are still to be counted.
    pub(super) eof: bool,
    /// The body failed; returned once the events before it are counted.
    pub(super) failed: Option<Failure>,
    /// For scrubbing what the stream says.
    pub(super) key: Option<ApiKey>,
}

/// How much one wake-up reads from a stream before it hands the events over: enough to take
/// everything a real-pace stream has buffered, little enough that a full-speed stream does not
/// hold the thread.
const READ_AHEAD: usize = 64 * 1024;

impl ChatStream {
    /// Waits for the next token-bearing data, and reports every such event that one read
    /// brought (often many). `Ok(None)` when the stream has ended (complete or not:
    /// [`ChatStream::finish`] decides).
    pub async fn next(&mut self) -> Result<Option<Progress>, ApiError> {
        std::future::poll_fn(|cx| self.poll_progress(cx)).await
    }

    /// One wake-up's work: every chunk the connection already holds is read and every event in
    /// them folded into one report, so the caller runs once per wake-up, not once per token
    /// (at real pace a wake-up finds a token or a few per stream; see BENCHMARKS.md).
    fn poll_progress(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Progress>, ApiError>> {
        loop {
            let progress = self.drain_events()?;
            if progress.token_events > 0 {
                self.last_token = tokio::time::Instant::now();
                if self.ttft.is_none() {
                    self.ttft = Some(self.started.elapsed());
                }
                return Poll::Ready(Ok(Some(progress)));
            }
            if self.ended {
                return Poll::Ready(Ok(None));
            }
            if let Some(e) = self.failed.take() {
                return Poll::Ready(Err(super::scrub::transport_error(
                    self.key.as_ref().map(ApiKey::expose),
                    e,
                )));
            }
            if self.eof {
                self.ended = true;
                return Poll::Ready(Ok(None));
            }
            if self.read_ready(cx) {
                continue;
            }
            // Nothing to read: wait, under the timeout.
            self.sse.release_idle();
            return match self.poll_deadline(cx) {
                Poll::Ready(kind) => Poll::Ready(Err(ApiError::Timeout(kind))),
                Poll::Pending => Poll::Pending,
            };
        }
    }

    /// Reads the chunks that are ready now, up to [`READ_AHEAD`] bytes. True if it read any or
    /// the body ended or failed (the caller then looks at what it has).
    fn read_ready(&mut self, cx: &mut Context<'_>) -> bool {
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
                        return true;
                    }
                }
                // Kept until the events before it are counted: the tokens were streamed.
                Poll::Ready(Some(Err(e))) => {
                    self.failed = Some(e);
                    return true;
                }
                Poll::Ready(None) => {
                    self.eof = true;
                    return true;
                }
                Poll::Pending => return read > 0,
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
            // Role-only, finish and usage chunks add nothing: keep reading.
        }
        Ok(progress)
    }

    /// The first-token or idle timeout. One timer per stream, moved only when it fires early:
    /// re-arming it on every token would cost a timer-wheel insert and remove per token.
    /// Keep-alive comments and partial reads do not extend it (a provider that stalls behind
    /// keep-alives is still stalled).
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<TimeoutKind> {
        let (deadline, kind) = match self.ttft {
            None => (
                self.started_at + self.timeouts.first_token,
                TimeoutKind::FirstToken,
            ),
            Some(_) => (self.last_token + self.timeouts.idle, TimeoutKind::Idle),
        };
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
        while self.next().await?.is_some() {}
        self.finish()
    }

    /// The completion, if the stream ended complete (finish reason and usage seen).
    pub fn finish(self) -> Result<Completion, ApiError> {
        let latency = self.started.elapsed();
        self.acc.finish(self.ttft, latency)
    }
}
