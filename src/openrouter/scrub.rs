//! What a server or a failed connection said, made safe to show: the key redacted (whole, in
//! fragments, in base64, or anything shaped like one) from messages and metadata, and a hint
//! where a certificate was refused.

use super::error::{ApiError, TimeoutKind};
use super::transport::{Failure, FailureKind};

/// Turns a transport failure into our taxonomy, with the key scrubbed from anything a
/// server echoed.
pub(super) fn transport_error(key: Option<&str>, f: Failure) -> ApiError {
    let mut msg = super::key::redact(&f.message, key);
    match f.kind {
        FailureKind::ConnectTimeout => ApiError::Timeout(TimeoutKind::Connect),
        FailureKind::Timeout => ApiError::Timeout(TimeoutKind::Total),
        FailureKind::Connect => {
            if msg.contains("certificate") {
                // A corporate proxy re-signing HTTPS, or a self-signed server.
                msg.push_str(
                    " (to trust another certificate authority: SSL_CERT_FILE=bundle.pem, or \
                     ca_cert = \"bundle.pem\" in the config)",
                );
            }
            ApiError::Connect(msg)
        }
        FailureKind::Invalid => ApiError::Invalid(msg),
        FailureKind::Other => ApiError::Connection(msg),
    }
}

/// Redacts the key (whole, in fragments, or anything shaped like one, also with no key of
/// our own) from what a server said.
pub(super) fn api_error(key: Option<&str>, err: ApiError) -> ApiError {
    let scrub = |m: &str| super::key::redact(m, key);
    let clean = |d: Box<super::error::ErrorBody>| {
        let mut d = *d;
        d.message = d.message.map(|m| scrub(&m));
        d.metadata = d.metadata.map(|m| scrub_value(key, m));
        Box::new(d)
    };
    match err {
        ApiError::Http {
            status,
            message,
            retry_after,
            detail,
        } => ApiError::Http {
            status,
            message: scrub(&message),
            retry_after,
            detail: clean(detail),
        },
        ApiError::MidStream {
            message,
            partial_events,
            detail,
        } => ApiError::MidStream {
            message: scrub(&message),
            partial_events,
            detail: clean(detail),
        },
        other => other,
    }
}

fn scrub_value(key: Option<&str>, v: serde_json::Value) -> serde_json::Value {
    let text = v.to_string();
    let clean = super::key::redact(&text, key);
    if clean == text {
        v
    } else {
        // "[redacted]" holds no quote or backslash, so the text stays JSON; if a cut ever
        // broke it, nothing of it is kept.
        serde_json::from_str(&clean).unwrap_or(serde_json::Value::Null)
    }
}
