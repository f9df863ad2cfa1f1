//! What a server or a failed connection said, made safe to show: the key redacted (whole, in
//! fragments, in any case, reversed, hex-, `%`- or `\u`-escaped, in base64, or anything
//! shaped like one; `key::redact`) from messages and every field of the error body, and a
//! hint where a certificate was refused.

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
        // Every field a server fills: `error_type` (an availability error's) reaches the
        // rejects file as it is, and the others the error's text.
        for v in [
            &mut d.metadata,
            &mut d.code,
            &mut d.availability,
            &mut d.error_type,
        ] {
            *v = v.take().map(|m| scrub_value(key, m));
        }
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

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    use super::*;

    const KEY: &str = "sk-or-v1-PROBEkey0123456789abcdefABCDEF0123456789abcdef01234567";

    fn hex(s: &str) -> String {
        s.bytes().map(|b| format!("{b:02x}")).collect()
    }

    fn escaped(s: &str, each: &str) -> String {
        s.bytes()
            .map(|b| each.replace("XX", &format!("{b:02x}")))
            .collect()
    }

    fn swapped_case(s: &str) -> String {
        (s.chars())
            .map(|c| {
                if c.is_ascii_lowercase() {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    }

    /// Every encoding of the key a server may echo (reliability-probe-5 P14's own server sent
    /// the hex, `\u`-escaped, reversed and upper-cased ones, which the rejects file kept) is
    /// redacted from an error body's message and from each of its fields, the text around it
    /// kept: no 8 key bytes of the form are left, in any case.
    #[test]
    fn every_encoding_of_the_key_in_an_error_body_is_redacted() {
        let reversed: String = KEY.chars().rev().collect();
        let (head, tail) = KEY.split_at(30);
        let b64 = STANDARD.encode(KEY);
        let header64 = STANDARD.encode(format!("Bearer {KEY}"));
        // (name, what the server echoed, the key's own stretch of it, characters a key byte;
        // base64's 12 characters stand for 9 bytes)
        let forms: Vec<(&str, String, String, usize)> = vec![
            ("plain", KEY.into(), KEY.into(), 1),
            ("upper", KEY.to_uppercase(), KEY.into(), 1),
            ("lower", KEY.to_lowercase(), KEY.into(), 1),
            ("swapped case", swapped_case(KEY), KEY.into(), 1),
            ("reversed", reversed.clone(), reversed.clone(), 1),
            (
                "reversed upper",
                reversed.to_uppercase(),
                reversed.clone(),
                1,
            ),
            ("hex", hex(KEY), hex(KEY), 2),
            ("HEX", hex(KEY).to_uppercase(), hex(KEY), 2),
            (
                "hex of the header",
                hex(&format!("Bearer {KEY}")),
                hex(KEY),
                2,
            ),
            (
                "\\u escaped",
                escaped(KEY, "\\u00XX"),
                escaped(KEY, "\\u00XX"),
                6,
            ),
            (
                "\\u escaped, upper hex",
                escaped(KEY, "\\u00XX").to_uppercase().replace("\\U", "\\u"),
                escaped(KEY, "\\u00XX"),
                6,
            ),
            (
                "percent-encoded",
                escaped(KEY, "%XX"),
                escaped(KEY, "%XX"),
                3,
            ),
            ("split", format!("{head}...{tail}"), KEY.into(), 1),
            ("base64", b64.clone(), b64[..b64.len() - 2].to_string(), 1),
            (
                "base64 of the header",
                header64.clone(),
                // The characters that carry only key bytes (base64_tests in key.rs).
                header64[(7 * 4usize).div_ceil(3) + 1..(7 + KEY.len()) * 4 / 3 - 1].to_string(),
                1,
            ),
        ];
        for (name, echo, key_form, per_byte) in &forms {
            let said = format!("bad header: {echo} (rejected)");
            let fields = serde_json::json!({"echo": said});
            let body = serde_json::json!({"error": {
                "code": said, "message": said, "metadata": fields,
                "availability": fields, "error_type": said,
            }});
            let err = ApiError::from_response_body(400, None, body.to_string().as_bytes());
            let clean = api_error(Some(KEY), err);
            let ApiError::Http {
                message, detail, ..
            } = &clean
            else {
                panic!("{name}: {clean:?}");
            };
            let d = serde_json::to_string(&(
                &detail.code,
                &detail.message,
                &detail.metadata,
                &detail.availability,
                &detail.error_type,
            ))
            .expect("json");
            for text in [message.as_str(), &d] {
                assert!(text.contains("bad header: "), "{name}: {text}");
                assert!(text.contains("[redacted]"), "{name}: {text}");
                assert!(text.contains(" (rejected)"), "{name}: {text}");
                let left = text.to_lowercase();
                let key_form = key_form.to_lowercase();
                let window = if name.starts_with("base64") {
                    12
                } else {
                    8 * per_byte
                };
                let kept = (key_form.as_bytes().windows(window))
                    .find(|w| left.as_bytes().windows(w.len()).any(|l| l == *w));
                assert!(
                    kept.is_none(),
                    "{name}: {:?} kept in {text}",
                    kept.map(String::from_utf8_lossy)
                );
            }
        }
    }
}
