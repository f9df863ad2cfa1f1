//! What can go wrong talking to OpenRouter (or an OpenAI-compatible server), as a taxonomy the
//! engine can act on: retry or not, wait how long, count under which kind.
//!
//! Classified by the typed `error_type` first, then by HTTP status: OpenRouter's docs
//! (api_reference/errors-and-debugging, "Typed error codes") say to switch on `error_type`
//! (in `error.metadata`, or directly on `error` for availability errors), which is the same
//! whether the error came as a response body or as a mid-stream chunk. An `error_type` this
//! code does not know falls back to the status, as the docs advise for new codes.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// Which timer fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutKind {
    Connect,
    FirstToken,
    Idle,
    Total,
}

impl fmt::Display for TimeoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutKind::Connect => "connect",
            TimeoutKind::FirstToken => "first token",
            TimeoutKind::Idle => "next chunk (idle stream)",
            TimeoutKind::Total => "whole request",
        })
    }
}

/// A failed call. Request failures are data for the engine, so every variant carries what is
/// needed to decide (status, Retry-After) and to show (message, metadata); none carries the key.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// A non-2xx response, or a 200 whose whole body is `{"error": ...}`.
    #[error("HTTP {status}: {message}")]
    Http {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
        /// The `error` object as sent: code (number or string), metadata, availability.
        detail: Box<ErrorBody>,
    },
    /// HTTP 200 and an `error` chunk in the stream (finish_reason `error`).
    #[error("error in stream (code {}): {message}", detail.code_text())]
    MidStream {
        message: String,
        /// Content and reasoning events received before the error.
        partial_events: u64,
        detail: Box<ErrorBody>,
    },
    #[error("timed out waiting for {0}")]
    Timeout(TimeoutKind),
    /// No connection could be made (refused, DNS, TLS handshake).
    #[error("could not connect: {0}")]
    Connect(String),
    /// The connection broke while sending the request or reading the response.
    #[error("connection lost: {0}")]
    Connection(String),
    /// The stream closed cleanly but without a finish reason or usage: never a success.
    #[error("stream ended early: {0}")]
    Truncated(String),
    /// A 200 with nothing in it (no content, no reasoning).
    #[error("empty response from {provider}")]
    Empty { provider: String },
    /// A body or event that is not what the API documents. `detail` may quote the server's
    /// text (a listing's name with a newline in it): shown on one line, so that it cannot
    /// forge a line of output (reliability-probe-4 D8).
    #[error("could not decode {what}: {}", crate::printable::one_line(.detail))]
    Decode { what: &'static str, detail: String },
    /// The request could not be built (bad base URL, bad header value).
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// The kind of a failure, for counting in stats and choosing what to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    RateLimited,
    Server,
    Overloaded,
    MidStream,
    Timeout,
    Connection,
    Truncated,
    Empty,
    Decode,
    BadRequest,
    Auth,
    Payment,
    Forbidden,
    NotFound,
    TooLarge,
    /// `content_policy_violation`: the input or output was flagged by a content filter.
    ContentPolicy,
    /// `refusal`: the model explicitly refused.
    Refusal,
    /// `context_length_exceeded`, `string_too_long`, `token_limit_exceeded`: this prompt is
    /// too long for the model or a field limit.
    TooLong,
    /// A 402 from the account's in-flight spending budget (`limit_source:
    /// openrouter_in_flight_budget`): an account-wide wait, never the prompt's failure.
    InFlightBudget,
    Other,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 20] = [
        ErrorKind::RateLimited,
        ErrorKind::Server,
        ErrorKind::Overloaded,
        ErrorKind::MidStream,
        ErrorKind::Timeout,
        ErrorKind::Connection,
        ErrorKind::Truncated,
        ErrorKind::Empty,
        ErrorKind::Decode,
        ErrorKind::BadRequest,
        ErrorKind::Auth,
        ErrorKind::Payment,
        ErrorKind::Forbidden,
        ErrorKind::NotFound,
        ErrorKind::TooLarge,
        ErrorKind::ContentPolicy,
        ErrorKind::Refusal,
        ErrorKind::TooLong,
        ErrorKind::InFlightBudget,
        ErrorKind::Other,
    ];

    /// Short label for tables: `429`, `5xx`, `mid`, `timeout` ...
    pub fn label(self) -> &'static str {
        match self {
            ErrorKind::RateLimited => "429",
            ErrorKind::Server => "5xx",
            ErrorKind::Overloaded => "overload",
            ErrorKind::MidStream => "mid",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connection => "conn",
            ErrorKind::Truncated => "trunc",
            ErrorKind::Empty => "empty",
            ErrorKind::Decode => "decode",
            ErrorKind::BadRequest => "400",
            ErrorKind::Auth => "401",
            ErrorKind::Payment => "402",
            ErrorKind::Forbidden => "403",
            ErrorKind::NotFound => "404",
            ErrorKind::TooLarge => "413",
            ErrorKind::ContentPolicy => "policy",
            ErrorKind::Refusal => "refusal",
            ErrorKind::TooLong => "too-long",
            ErrorKind::InFlightBudget => "inflight",
            ErrorKind::Other => "other",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Where the docs put an `error_type`, what it means for us: its kind, and whether sending the
/// same request again may succeed. `None` for a type the docs do not list (the status decides).
fn typed(error_type: &str) -> Option<(ErrorKind, bool)> {
    Some(match error_type {
        "content_policy_violation" => (ErrorKind::ContentPolicy, false),
        "refusal" => (ErrorKind::Refusal, false),
        "context_length_exceeded" | "string_too_long" | "token_limit_exceeded" => {
            (ErrorKind::TooLong, false)
        }
        // Generation stopped at max_tokens: the same request stops there again.
        "max_tokens_exceeded" => (ErrorKind::BadRequest, false),
        "invalid_request"
        | "invalid_prompt"
        | "precondition_failed"
        | "unprocessable"
        | "invalid_image"
        | "image_too_large"
        | "image_too_small"
        | "unsupported_image_format"
        | "image_download_failed" => (ErrorKind::BadRequest, false),
        "authentication" => (ErrorKind::Auth, false),
        "payment_required" => (ErrorKind::Payment, false),
        "permission_denied" => (ErrorKind::Forbidden, false),
        "not_found" | "image_not_found" => (ErrorKind::NotFound, false),
        "payload_too_large" => (ErrorKind::TooLarge, false),
        "rate_limit_exceeded" => (ErrorKind::RateLimited, true),
        "provider_overloaded" => (ErrorKind::Overloaded, true),
        "provider_unavailable" | "server" | "unmapped" => (ErrorKind::Server, true),
        "timeout" => (ErrorKind::Timeout, true),
        _ => return None,
    })
}

impl ApiError {
    /// The typed `error_type` OpenRouter put on the error, when it did.
    pub fn error_type(&self) -> Option<&str> {
        self.detail()?.error_type()
    }

    /// A 402 of the account's in-flight spending budget (docs: api_reference/limits, "In-flight
    /// spending budget"; see ../research/openrouter-api.md §7.4): retryable after the
    /// `Retry-After`, account-wide.
    pub fn is_inflight_budget(&self) -> bool {
        matches!(self, ApiError::Http { status: 402, .. })
            && self.detail().and_then(ErrorBody::limit_source)
                == Some("openrouter_in_flight_budget")
    }

    /// A 402 that says one request alone is over what the account can afford ("This request
    /// requires more credits, or fewer max_tokens"): lowering `max_tokens` is the fix, and
    /// no wait helps.
    pub fn is_request_over_budget(&self) -> bool {
        match self {
            ApiError::Http {
                status: 402,
                message,
                retry_after: None,
                ..
            } => message.contains("max_tokens"),
            _ => false,
        }
    }

    pub fn kind(&self) -> ErrorKind {
        if self.is_inflight_budget() {
            return ErrorKind::InFlightBudget;
        }
        if let Some((kind, _)) = self.error_type().and_then(typed) {
            // A stream broken by a generic server fault stays a mid-stream failure in the
            // counts; a typed cause (policy, rate limit, overload) is told as such.
            let generic = matches!(kind, ErrorKind::Server | ErrorKind::Timeout);
            if !(generic && matches!(self, ApiError::MidStream { .. })) {
                return kind;
            }
        }
        match self {
            ApiError::Http { status, .. } => match status {
                429 => ErrorKind::RateLimited,
                529 => ErrorKind::Overloaded,
                408 | 504 | 524 => ErrorKind::Timeout,
                400 | 422 => ErrorKind::BadRequest,
                401 => ErrorKind::Auth,
                402 => ErrorKind::Payment,
                403 => ErrorKind::Forbidden,
                404 => ErrorKind::NotFound,
                413 => ErrorKind::TooLarge,
                500..=599 => ErrorKind::Server,
                200..=299 => ErrorKind::MidStream,
                _ => ErrorKind::Other,
            },
            ApiError::MidStream { .. } => ErrorKind::MidStream,
            ApiError::Timeout(_) => ErrorKind::Timeout,
            ApiError::Connect(_) | ApiError::Connection(_) => ErrorKind::Connection,
            ApiError::Truncated(_) => ErrorKind::Truncated,
            ApiError::Empty { .. } => ErrorKind::Empty,
            ApiError::Decode { .. } => ErrorKind::Decode,
            ApiError::Invalid(_) => ErrorKind::BadRequest,
        }
    }

    /// Whether sending the same request again may succeed: by `error_type` first, then by
    /// status (research §7.2).
    pub fn is_retryable(&self) -> bool {
        if self.is_inflight_budget() {
            return self.retry_after().is_some();
        }
        if let Some((_, retry)) = self.error_type().and_then(typed) {
            // A model-availability error says itself whether it may be retried.
            let avail = self
                .detail()
                .and_then(|d| d.availability.as_ref())
                .and_then(|a| a.get("retryable"))
                .and_then(Value::as_bool);
            return avail.unwrap_or(retry);
        }
        match self {
            ApiError::Http {
                status,
                retry_after,
                detail,
                ..
            } => match status {
                408 | 429 | 500 | 502 | 503 | 504 | 524 | 529 => true,
                // 402 is a wait case only when the in-flight budget says when to come back.
                402 => retry_after.is_some(),
                // A 200 whose body is an error object: the provider failed after accepting.
                200..=299 => true,
                404 | 403 => detail
                    .availability
                    .as_ref()
                    .and_then(|a| a.get("retryable"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                _ => false,
            },
            ApiError::MidStream { .. }
            | ApiError::Timeout(_)
            | ApiError::Connect(_)
            | ApiError::Connection(_)
            | ApiError::Truncated(_)
            | ApiError::Empty { .. }
            | ApiError::Decode { .. } => true,
            ApiError::Invalid(_) => false,
        }
    }

    /// How long the server asked us to wait, when it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The provider OpenRouter blames, when the error metadata names one.
    pub fn provider_name(&self) -> Option<&str> {
        let meta = self.detail()?.metadata.as_ref()?;
        meta.get("provider_name").and_then(Value::as_str)
    }

    /// The `error` object of HTTP and mid-stream errors.
    pub fn detail(&self) -> Option<&ErrorBody> {
        match self {
            ApiError::Http { detail, .. } | ApiError::MidStream { detail, .. } => Some(detail),
            _ => None,
        }
    }

    /// A 402 or 401 that means "stop dispatching": no credit or a bad key.
    pub fn stops_dispatch(&self) -> bool {
        matches!(self.kind(), ErrorKind::Auth)
            || (self.kind() == ErrorKind::Payment && !self.is_retryable())
            || (self.kind() == ErrorKind::InFlightBudget && !self.is_retryable())
    }

    /// The model-availability code (`no_endpoints`, `privacy_restricted`, ...), when any.
    pub fn availability_code(&self) -> Option<&str> {
        self.detail()?
            .availability
            .as_ref()?
            .get("code")
            .and_then(Value::as_str)
    }

    /// A 404 that says the account's own settings (privacy, data policy, constraints) leave
    /// no endpoint: not that the endpoint is gone.
    pub fn is_account_restriction(&self) -> bool {
        matches!(
            self.availability_code(),
            Some("privacy_restricted" | "constraint_filtered" | "region_restricted")
        )
    }

    /// What identifies a failure that repeats for every prompt: the availability code, else
    /// the `error_type`, else the kind (`404 privacy_restricted`, `400 invalid_request`).
    pub fn signature(&self) -> String {
        let d = self.detail();
        let what = d
            .and_then(|d| d.availability.as_ref())
            .and_then(|a| a.get("code"))
            .and_then(Value::as_str)
            .or_else(|| d.and_then(ErrorBody::error_type));
        let status = self
            .status()
            .map_or_else(|| self.kind().label().to_string(), |s| s.to_string());
        match what {
            Some(w) => format!("{status} {w}"),
            None => status,
        }
    }

    /// Builds the error for a response with a failing status (or a 200 error body) from its
    /// raw body and headers. Never fails: a body that is not the documented JSON (an HTML 502
    /// page, plain text) becomes a readable snippet.
    pub fn from_response_body(status: u16, retry_after_header: Option<&str>, body: &[u8]) -> Self {
        let header_wait = retry_after_header.and_then(parse_retry_after);
        match serde_json::from_slice::<ErrorEnvelope>(trim_ascii_start(body)) {
            Ok(ErrorEnvelope { error: Some(e) }) => {
                let retry_after = header_wait.or_else(|| e.retry_after_hint());
                let mut message = e
                    .message
                    .clone()
                    .unwrap_or_else(|| "(no message)".to_string());
                if let Some(why) = e
                    .availability
                    .as_ref()
                    .and_then(|a| a.get("excluded_by"))
                    .and_then(Value::as_array)
                    .filter(|w| !w.is_empty())
                {
                    let why: Vec<&str> = why.iter().filter_map(Value::as_str).collect();
                    message.push_str(&format!(" (excluded by: {})", why.join(", ")));
                }
                if let Some(cause) = e.cause() {
                    message.push_str(&format!(" ({cause})"));
                }
                ApiError::Http {
                    status,
                    message: crate::printable::one_line(&message).into_owned(),
                    retry_after,
                    detail: Box::new(e),
                }
            }
            _ => ApiError::Http {
                status,
                message: describe_non_json_body(body),
                retry_after: header_wait,
                detail: Box::default(),
            },
        }
    }
}

/// `{"error": {...}}` as OpenRouter sends it on failures.
#[derive(Deserialize)]
struct ErrorEnvelope {
    error: Option<ErrorBody>,
}

/// The `error` object of a failure body or a mid-stream error chunk.
#[derive(Deserialize, Debug, Clone, Default)]
pub struct ErrorBody {
    #[serde(default)]
    pub code: Option<Value>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub metadata: Option<Value>,
    #[serde(default)]
    pub availability: Option<Value>,
    /// Availability errors carry their `error_type` on `error` itself.
    #[serde(default)]
    pub error_type: Option<Value>,
}

impl ErrorBody {
    /// `error.metadata.error_type`, or `error.error_type` (availability errors).
    pub fn error_type(&self) -> Option<&str> {
        self.metadata
            .as_ref()
            .and_then(|m| m.get("error_type"))
            .or(self.error_type.as_ref())
            .and_then(Value::as_str)
    }

    /// `error.metadata.limit_source`: which limit a 402 or 429 came from.
    pub fn limit_source(&self) -> Option<&str> {
        self.metadata
            .as_ref()
            .and_then(|m| m.get("limit_source"))
            .and_then(Value::as_str)
    }

    fn retry_after_hint(&self) -> Option<Duration> {
        let from_meta = self
            .metadata
            .as_ref()
            .and_then(|m| m.get("retry_after_seconds"))
            .and_then(Value::as_f64);
        let from_avail = self
            .availability
            .as_ref()
            .and_then(|a| a.get("retry_after"))
            .and_then(Value::as_f64);
        from_meta
            .or(from_avail)
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(3600.0)))
    }

    pub fn into_mid_stream(self, partial_events: u64) -> ApiError {
        let mut message = self
            .message
            .clone()
            .unwrap_or_else(|| "(no message)".to_string());
        if let Some(cause) = self.cause() {
            message.push_str(&format!(" ({cause})"));
        }
        ApiError::MidStream {
            // A server's text inside a line of ours: a newline would forge the next line.
            message: crate::printable::one_line(&message).into_owned(),
            partial_events,
            detail: Box::new(self),
        }
    }

    /// `code` as text: `429`, `server_error`, or `none`.
    pub fn code_text(&self) -> String {
        match &self.code {
            None | Some(Value::Null) => "none".to_string(),
            Some(Value::String(s)) => crate::printable::one_line(s).into_owned(),
            Some(v) => v.to_string(),
        }
    }
}

/// `Retry-After` as delta-seconds (what OpenRouter sends) or an HTTP date.
pub(crate) fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(secs.min(3600.0)));
        }
        return None;
    }
    let when = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let delta = when.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(
        delta
            .to_std()
            .unwrap_or(Duration::ZERO)
            .min(Duration::from_secs(3600)),
    )
}

fn trim_ascii_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    &b[n..]
}

/// A short, single-line description of a body that is not JSON: an HTML title or the first words.
fn describe_non_json_body(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return "empty body".to_string();
    }
    let lower = trimmed.to_ascii_lowercase();
    if let (Some(a), Some(b)) = (lower.find("<title>"), lower.find("</title>"))
        && b > a + 7
    {
        return format!(
            "non-JSON body (HTML page: {})",
            crate::printable::one_line(trimmed[a + 7..b].trim())
        );
    }
    let one_line: String = trimmed.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut snippet: String = one_line.chars().take(200).collect();
    if one_line.chars().count() > 200 {
        snippet.push('…');
    }
    format!("non-JSON body: {snippet}")
}

#[cfg(test)]
mod tests;
