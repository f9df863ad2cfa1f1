//! The error taxonomy's tests: every status and body shape as the API sends it, retryability, causes.

use super::*;

#[test]
fn real_429_body_keeps_metadata_and_wait() {
    let body = br#"{"error":{"code":429,"message":"Provider returned error",
          "metadata":{"raw":"temporarily rate-limited upstream","provider_name":"Venice",
           "retry_after_seconds":25,"limit_source":"upstream_provider_shared_pool"}},"user_id":"user_x"}"#;
    let e = ApiError::from_response_body(429, None, body);
    assert!(e.is_retryable());
    assert_eq!(e.kind(), ErrorKind::RateLimited);
    assert_eq!(e.retry_after(), Some(Duration::from_secs(25)));
    assert_eq!(e.provider_name(), Some("Venice"));
    // The header wins over the body hint.
    let e = ApiError::from_response_body(429, Some("3"), body);
    assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
}

#[test]
fn html_502_page_is_a_clean_error() {
    let body = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>";
    let e = ApiError::from_response_body(502, None, body);
    assert!(e.is_retryable());
    assert_eq!(
        e.to_string(),
        "HTTP 502: non-JSON body (HTML page: 502 Bad Gateway)"
    );
    let e = ApiError::from_response_body(500, None, b"Internal Server Error\n");
    assert_eq!(
        e.to_string(),
        "HTTP 500: non-JSON body: Internal Server Error"
    );
    assert!(e.is_retryable());
}

#[test]
fn status_taxonomy() {
    for s in [408u16, 429, 502, 503, 504, 524, 529] {
        assert!(
            ApiError::from_response_body(s, None, b"{}").is_retryable(),
            "{s}"
        );
    }
    for s in [400u16, 401, 402, 403, 404, 413, 422] {
        assert!(
            !ApiError::from_response_body(s, None, b"{}").is_retryable(),
            "{s}"
        );
    }
    let e = ApiError::from_response_body(402, Some("5"), b"{}");
    assert!(e.is_retryable());
    assert!(!e.stops_dispatch());
    assert!(ApiError::from_response_body(402, None, b"{}").stops_dispatch());
    assert!(ApiError::from_response_body(401, None, b"{}").stops_dispatch());
}

#[test]
fn availability_errors_say_if_retryable() {
    let body = br#"{"error":{"code":404,"message":"No endpoints","availability":{"code":"no_endpoints","retryable":false,"excluded_by":["quantization"]}}}"#;
    let e = ApiError::from_response_body(404, None, body);
    assert!(!e.is_retryable());
    let body = br#"{"error":{"code":503,"message":"busy","availability":{"code":"temporarily_unavailable","retryable":true,"retry_after":7}}}"#;
    let e = ApiError::from_response_body(503, None, body);
    assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
}

/// Each documented `error_type`, on a response body and on a mid-stream chunk: its kind
/// and whether it is retried, whatever the status says.
#[test]
fn typed_errors_decide_before_the_status() {
    let cases: [(&str, u16, ErrorKind, bool); 11] = [
        (
            "content_policy_violation",
            400,
            ErrorKind::ContentPolicy,
            false,
        ),
        ("refusal", 400, ErrorKind::Refusal, false),
        ("context_length_exceeded", 400, ErrorKind::TooLong, false),
        ("max_tokens_exceeded", 400, ErrorKind::BadRequest, false),
        ("invalid_request", 400, ErrorKind::BadRequest, false),
        ("provider_overloaded", 503, ErrorKind::Overloaded, true),
        ("rate_limit_exceeded", 429, ErrorKind::RateLimited, true),
        ("provider_unavailable", 502, ErrorKind::Server, true),
        ("timeout", 504, ErrorKind::Timeout, true),
        ("permission_denied", 403, ErrorKind::Forbidden, false),
        // A status that says "retry" does not win over a type that says not to.
        (
            "content_policy_violation",
            502,
            ErrorKind::ContentPolicy,
            false,
        ),
    ];
    for (t, status, kind, retry) in cases {
        let body = format!(
            r#"{{"error":{{"code":{status},"message":"m","metadata":{{"error_type":"{t}"}}}}}}"#
        );
        let e = ApiError::from_response_body(status, None, body.as_bytes());
        assert_eq!((e.kind(), e.is_retryable()), (kind, retry), "{t} {status}");
        assert_eq!(e.error_type(), Some(t));
        let chunk: ErrorBody = serde_json::from_str(&format!(
            r#"{{"code":{status},"message":"m","metadata":{{"error_type":"{t}"}}}}"#
        ))
        .expect("chunk");
        let m = chunk.into_mid_stream(3);
        assert_eq!(m.is_retryable(), retry, "mid-stream {t}");
    }
    // Mid-stream: a generic server fault stays `mid`; a policy flag is a policy flag.
    let chunk: ErrorBody =
        serde_json::from_str(r#"{"code":502,"message":"m","metadata":{"error_type":"server"}}"#)
            .expect("chunk");
    assert_eq!(chunk.into_mid_stream(1).kind(), ErrorKind::MidStream);
    let chunk: ErrorBody = serde_json::from_str(
        r#"{"code":400,"message":"m","metadata":{"error_type":"content_policy_violation"}}"#,
    )
    .expect("chunk");
    assert_eq!(chunk.into_mid_stream(1).kind(), ErrorKind::ContentPolicy);
    // An unknown type falls back to the status.
    let e = ApiError::from_response_body(
        503,
        None,
        br#"{"error":{"code":503,"message":"m","metadata":{"error_type":"brand_new"}}}"#,
    );
    assert_eq!((e.kind(), e.is_retryable()), (ErrorKind::Server, true));
    // Availability errors carry the type on `error` and say if they are retryable.
    let body = br#"{"error":{"code":404,"message":"No allowed providers","error_type":"not_found","availability":{"code":"privacy_restricted","retryable":false}}}"#;
    let e = ApiError::from_response_body(404, None, body);
    assert_eq!((e.kind(), e.is_retryable()), (ErrorKind::NotFound, false));
    assert_eq!(e.signature(), "404 privacy_restricted");
}

/// The account's 402s: the in-flight budget waits (account-wide), one request over the
/// whole budget stops the run, a spent key stops it too.
#[test]
fn payment_required_in_three_shapes() {
    let budget = br#"{"error":{"code":402,"message":"In-flight budget","metadata":{"error_type":"payment_required","limit_source":"openrouter_in_flight_budget"}}}"#;
    let e = ApiError::from_response_body(402, Some("4"), budget);
    assert!(e.is_inflight_budget());
    assert_eq!(e.kind(), ErrorKind::InFlightBudget);
    assert!(e.is_retryable() && !e.stops_dispatch());
    assert_eq!(e.retry_after(), Some(Duration::from_secs(4)));

    let over = br#"{"error":{"code":402,"message":"This request requires more credits, or fewer max_tokens. You requested up to 16384 tokens, but can only afford 5063.","metadata":{"error_type":"payment_required","limit_source":"openrouter_credits"}}}"#;
    let e = ApiError::from_response_body(402, None, over);
    assert!(e.is_request_over_budget() && !e.is_inflight_budget());
    assert_eq!(e.kind(), ErrorKind::Payment);
    assert!(!e.is_retryable() && e.stops_dispatch());

    let spent = br#"{"error":{"code":402,"message":"Key limit exceeded","metadata":{"error_type":"payment_required","limit_source":"openrouter_credits"}}}"#;
    let e = ApiError::from_response_body(402, None, spent);
    assert!(!e.is_request_over_budget());
    assert!(e.stops_dispatch());
}

#[test]
fn retry_after_forms() {
    assert_eq!(parse_retry_after("12"), Some(Duration::from_secs(12)));
    assert_eq!(parse_retry_after("1.5"), Some(Duration::from_millis(1500)));
    assert_eq!(parse_retry_after("-1"), None);
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("soon"), None);
}

/// A server's error text is shown inside lines of ours (progress, events, the summary): its
/// newlines must not forge the next line (reliability-probe-4, D8's rest).
#[test]
fn a_servers_error_text_stays_on_one_line() {
    let bodies: [(&[u8], u16); 3] = [
        (
            br#"{"error":{"code":"x\nFAKE","message":"bad \u001b[2J end\r\nFAKE LINE done","metadata":{"raw":"up\nstream"}}}"#,
            500,
        ),
        (b"<html><title>502\nFAKE LINE</title></html>", 502),
        (b"plain\n\nFAKE LINE", 503),
    ];
    for (body, status) in bodies {
        let e = ApiError::from_response_body(status, None, body);
        let shown = e.to_string();
        assert!(!shown.contains(['\n', '\r']), "{shown:?}");
        assert!(shown.contains("FAKE"), "the text is kept: {shown:?}");
    }
    let mid: ErrorBody =
        serde_json::from_str(r#"{"code":"boom\nFAKE","message":"cut\nFAKE LINE"}"#).expect("body");
    let shown = mid.into_mid_stream(3).to_string();
    assert!(!shown.contains('\n'), "{shown:?}");
}

/// A listing that does not decode quotes the server's text in the error: on one line, so that
/// a tag holding `\n` cannot forge a line of `providers`, `init` or `run --check`
/// (reliability-probe-4 D8's rest).
#[test]
fn a_decode_error_quotes_the_servers_text_on_one_line() {
    let body = r#"{"data": {"id": "m", "endpoints": [{"provider_name": "V", "tag": "venice\nharvest: FAKE LINE", "pricing": {"prompt": "x", "completion": "y"}}]}}"#;
    let text = crate::openrouter::ModelEndpoints::parse(body.as_bytes())
        .expect_err("a price of \"x\" does not decode")
        .to_string();
    assert!(
        !text.contains('\n') && text.contains("FAKE LINE"),
        "{text:?}"
    );
    let e = ApiError::Decode {
        what: "endpoints response",
        detail: "endpoint venice\nharvest: FAKE LINE: bad price".into(),
    };
    assert_eq!(
        e.to_string(),
        "could not decode endpoints response: endpoint venice harvest: FAKE LINE: bad price"
    );
}
