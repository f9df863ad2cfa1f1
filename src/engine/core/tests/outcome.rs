//! Outcomes: what each kind of result does to the ledger, the outputs, the rejects, the retry
//! queue, the endpoint's health and the run.

use super::*;
use crate::engine::endpoint::CustomTarget;
use crate::engine::reason::{OffReason, StopReason};
use crate::openrouter::TimeoutKind;
use crate::store::output::SpendKind;

const PINNED: &str =
    "routing = \"pinned\"\n[retry]\nmax_attempts = 3\nbase_delay_ms = 1000\nmax_delay_s = 60";

fn secs_until(h: &H) -> Option<f64> {
    h.core
        .next_wake(&h.now)
        .map(|t| t.saturating_duration_since(h.now.mono).as_secs_f64())
}

fn spent(h: &H, d: usize) -> Usd {
    h.core.datasets()[d].spent
}

/// An operator's own server, cheaper than OpenRouter (so it goes first).
fn own_server(tag: &str) -> RunEndpoint {
    let mut e = ep(tag, tag, "int4", 0.0, 0.0);
    e.cancel_stops_billing = true;
    e.custom = Some(CustomTarget {
        model: "kimi".into(),
        extra: serde_json::Map::new(),
        concurrency: 8,
    });
    e
}

#[test]
fn every_error_kind_has_its_outcome() {
    #[derive(Debug)]
    enum Want {
        /// Retried after this many seconds (a range: the back-off has jitter).
        Retry {
            min: f64,
            max: f64,
        },
        Reject(&'static str),
        Stop(fn(&ApiError) -> StopReason),
    }
    let key_refused = |e: &ApiError| StopReason::KeyRefused {
        variable: "OPENROUTER_API_KEY".into(),
        detail: e.to_string(),
    };
    let out_of_credit = |e: &ApiError| StopReason::OutOfCredit {
        detail: e.to_string(),
    };
    let cases: Vec<(&str, ApiError, Want)> = vec![
        (
            "429 waits its Retry-After",
            http(429, Some("7"), "slow down"),
            Want::Retry { min: 7.0, max: 7.0 },
        ),
        (
            "500 backs off",
            http(500, None, "oops"),
            Want::Retry { min: 0.5, max: 1.0 },
        ),
        (
            "502 backs off",
            http(502, None, "bad gateway"),
            Want::Retry { min: 0.5, max: 1.0 },
        ),
        (
            "503 backs off",
            http(503, None, "unavailable"),
            Want::Retry { min: 0.5, max: 1.0 },
        ),
        (
            "402 with Retry-After waits",
            http(402, Some("30"), "in-flight budget"),
            Want::Retry {
                min: 30.0,
                max: 30.0,
            },
        ),
        (
            "connection lost backs off",
            ApiError::Connection("reset".into()),
            Want::Retry { min: 0.5, max: 1.0 },
        ),
        (
            "400 is rejected at once",
            http(400, None, "bad"),
            Want::Reject("400"),
        ),
        (
            "422 is rejected at once",
            http(422, None, "unprocessable"),
            Want::Reject("400"),
        ),
        (
            "413 is rejected at once",
            http(413, None, "too large"),
            Want::Reject("413"),
        ),
        (
            "401 stops the run",
            http(401, None, "no auth"),
            Want::Stop(key_refused),
        ),
        (
            "402 without Retry-After stops the run",
            http(402, None, "insufficient credits"),
            Want::Stop(out_of_credit),
        ),
    ];
    for (name, err, want) in cases {
        let mut h = H::new(config(PINNED), kimi(), &[&["a"]]);
        let chutes = h.index("chutes/int4");
        let sent = h.dispatch();
        assert_eq!(sent.len(), 1, "{name}");
        let effects = h.result(failed(sent[0].key, Some(chutes), err.clone()));
        assert_eq!(
            ledger(&effects),
            vec![(SpendKind::Failed, Usd::ZERO)],
            "{name}: one failed line at $0"
        );
        let line_error = effects.iter().find_map(|e| match e {
            Effect::Ledger(l) => l.error.clone(),
            _ => None,
        });
        assert_eq!(
            line_error.as_deref(),
            Some(err.kind().label()),
            "{name}: the line names the kind"
        );
        assert_eq!(outputs(&effects), 0, "{name}");
        assert_eq!(h.core.datasets()[0].in_flight, 0, "{name}");
        match want {
            Want::Retry { min, max } => {
                assert!(rejects(&effects).is_empty(), "{name}: not rejected");
                assert_eq!(h.core.stopping(), None, "{name}: the run goes on");
                assert_eq!(h.core.retries(), 1, "{name}: one retry");
                assert_eq!(h.core.datasets()[0].retries_pending, 1, "{name}");
                let wait = secs_until(&h).expect("a retry wakes the driver");
                assert!(
                    wait >= min - 1e-9 && wait <= max + 1e-9,
                    "{name}: retry after {wait}s, want {min}..={max}"
                );
                // When it falls due it goes out again, elsewhere than chutes.
                h.at(wait);
                let again = h.dispatch();
                assert_eq!(again.len(), 1, "{name}: the retry goes");
                assert_eq!(again[0].prompt_id, "a", "{name}");
                assert_ne!(again[0].pinned, Some(chutes), "{name}: elsewhere");
            }
            Want::Reject(label) => {
                // A non-retryable failure's reject is held until nothing else runs or waits
                // (it might be the first of a systematic run): the next dispatch writes it.
                assert!(h.dispatch().is_empty(), "{name}");
                let effects: Vec<Effect> = effects.into_iter().chain(h.other.drain(..)).collect();
                assert_eq!(rejects(&effects), vec![label], "{name}");
                let record = reject_record(&effects).expect("a reject");
                assert_eq!(record.error, err.to_string(), "{name}: no attempt count");
                assert_eq!(record.attempts, 1, "{name}");
                assert_eq!(h.core.datasets()[0].rejected, 1, "{name}");
                assert_eq!(h.core.retries(), 0, "{name}");
                assert!(h.core.retry_queue_empty(), "{name}");
                assert_eq!(h.core.stopping(), None, "{name}: the run goes on");
                assert!(h.core.is_over(), "{name}: nothing left");
            }
            Want::Stop(reason) => {
                let ds = &h.core.datasets()[0];
                assert!(rejects(&effects).is_empty(), "{name}: not rejected");
                assert_eq!(ds.rejected, 0, "{name}");
                assert_eq!(h.core.stopping(), Some(&reason(&err)), "{name}");
                assert!(h.core.failed(), "{name}: exit code 1");
                assert_eq!(ds.retries_pending, 1, "{name}: kept for the next run");
                assert!(h.dispatch().is_empty(), "{name}: nothing more is sent");
                assert!(h.core.is_over(), "{name}");
            }
        }
    }
}

/// A 429 rests its endpoint for its `Retry-After` and says nothing of the prompt: it does not
/// count as an attempt (the seed's shape at 2,000 streams met 429s by the thousand from an
/// endpoint's capacity, and rejected 11,000 prompts in 23 s when they counted). Only after
/// `MAX_RATE_LIMITED` of them do further 429s count, and the reject says how many there were.
#[test]
fn a_429_rests_its_endpoint_and_does_not_count_as_an_attempt() {
    let mut h = H::new(
        config("routing = \"pinned\"\n[retry]\nmax_attempts = 2"),
        kimi(),
        &[&["a"]],
    );
    let chutes = h.index("chutes/int4");
    let sent = h.dispatch();
    h.result(failed(
        sent[0].key,
        Some(chutes),
        http(429, Some("5"), "slow"),
    ));
    let now = h.now;
    assert_eq!(
        h.core.off_reason(chutes, &now),
        Some(OffReason::RateLimited { secs: 5 })
    );
    let together = h.index("together/int4");
    assert_eq!(h.core.off_reason(together, &now), None, "only chutes rests");
    let mut t = 5.0;
    let mut last = Vec::new();
    for n in 2..=super::super::MAX_RATE_LIMITED + 2 {
        t += 100.0;
        h.at(t);
        let again = h.dispatch();
        assert_eq!(again.len(), 1, "429 number {n}: sent again");
        let at = again[0].pinned.expect("pinned");
        last = h.result(failed(again[0].key, Some(at), http(429, None, "slow")));
        if n <= super::super::MAX_RATE_LIMITED + 1 {
            assert!(
                rejects(&last).is_empty(),
                "429 number {n} is not an attempt"
            );
        }
    }
    assert_eq!(rejects(&last), vec!["429"]);
    let record = reject_record(&last).expect("a reject");
    assert!(
        record
            .error
            .ends_with("(after 2 attempts, and 60 turned away by 429s)"),
        "{}",
        record.error
    );
}

#[test]
fn a_retryable_error_after_max_attempts_is_rejected_with_the_count() {
    let cases: Vec<(&str, u32, ApiError, &str)> = vec![
        ("500 three times", 3, http(500, None, "oops"), "5xx"),
        (
            "a timeout twice",
            2,
            ApiError::Timeout(TimeoutKind::Idle),
            "timeout",
        ),
        (
            "one attempt only",
            1,
            ApiError::Connection("reset".into()),
            "conn",
        ),
    ];
    for (name, max, err, label) in cases {
        let mut h = H::new(
            config(&format!(
                "routing = \"pinned\"\n[retry]\nmax_attempts = {max}"
            )),
            kimi(),
            &[&["a"]],
        );
        let mut last = Vec::new();
        for n in 1..=max {
            h.at(f64::from(n) * 100.0);
            let sent = h.dispatch();
            assert_eq!(sent.len(), 1, "{name}: attempt {n} sent");
            last = h.result(failed(sent[0].key, sent[0].pinned, err.clone()));
            if n < max {
                assert!(rejects(&last).is_empty(), "{name}: attempt {n} retried");
            }
        }
        assert_eq!(rejects(&last), vec![label], "{name}");
        let record = reject_record(&last).expect("a reject");
        assert_eq!(
            record.error,
            format!("{err} (after {max} attempts)"),
            "{name}"
        );
        assert_eq!(record.attempts, max, "{name}");
        assert_eq!(h.core.retries(), u64::from(max - 1), "{name}");
        assert!(h.core.is_over(), "{name}");
    }
}

#[test]
fn a_timeout_is_booked_cancelled_at_the_estimate_and_kept_for_reconciliation() {
    let mut h = H::new(config(PINNED), kimi(), &[&["a"]]);
    let sent = h.dispatch();
    let booked = Usd::from_f64(0.0012);
    let r = AttemptResult {
        key: sent[0].key,
        outcome: AttemptOutcome::Failed(ApiError::Timeout(TimeoutKind::Idle)),
        endpoint: sent[0].pinned,
        streamed_tokens: 300,
        received_tokens: 300,
        booked_pico: booked.pico(),
        generation_id: Some("gen-t".into()),
        elapsed: Duration::from_secs(90),
    };
    let effects = h.result(r);
    assert_eq!(ledger(&effects), vec![(SpendKind::Cancelled, booked)]);
    let Some(Effect::Ledger(line)) = effects.first() else {
        panic!("a ledger line first: {effects:?}");
    };
    assert_eq!(line.error.as_deref(), Some("timeout"));
    assert!(line.estimated, "our estimate until looked up");
    assert_eq!(line.completion_tokens, 300);
    assert_eq!(spent(&h, 0), booked);
    let rec = h.take_reconcile();
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].0, "gen-t");
    assert_eq!(rec[0].1.usd, booked);
    assert!(h.take_reconcile().is_empty(), "taken once");
    assert_eq!(h.core.retries(), 1, "and retried");
    assert!(rejects(&effects).is_empty());
}

#[test]
fn an_own_server_that_refuses_the_key_is_excluded_and_the_run_goes_on() {
    let mut eps = kimi();
    eps.push(own_server("my-vllm"));
    let mut h = H::new(config(""), eps, &[&["a"]]);
    let own = h.index("my-vllm");
    let sent = h.dispatch();
    assert_eq!(sent[0].pinned, Some(own), "the free own server goes first");
    let err = http(401, None, "bad key");
    let effects = h.result(failed(sent[0].key, Some(own), err.clone()));
    assert!(rejects(&effects).is_empty());
    assert_eq!(h.core.stopping(), None, "the run goes on");
    assert!(!h.core.failed());
    assert_eq!(h.core.operator(own), Some(false));
    let now = h.now;
    assert_eq!(h.core.off_reason(own, &now), Some(OffReason::Operator));
    let text = format!("my-vllm refused the request ({err}): excluded; check its api_key_env");
    assert!(h.event_texts().contains(&text), "{:?}", h.event_texts());
    h.at(120.0);
    let again = h.dispatch();
    assert_eq!(again.len(), 1, "the prompt goes elsewhere");
    assert_eq!(again[0].prompt_id, "a");
    assert_eq!(again[0].pinned, None, "through OpenRouter");
}

/// The row before its ledger line: a kill between the two writes leaves a kept answer whose
/// attempt looks open, which the next start books from the row.
#[test]
fn an_answer_writes_its_output_then_its_complete_line() {
    let mut h = H::new(config(PINNED), kimi(), &[&["a"]]);
    let sent = h.dispatch();
    let effects = h.result(done(sent[0].key, sent[0].pinned, 500, 0.0042, "stop"));
    assert_eq!(effects.len(), 2, "{effects:?}");
    let Effect::BookKept(line) = &effects[1] else {
        panic!("then the ledger line: {effects:?}");
    };
    assert_eq!(line.kind, SpendKind::Complete);
    assert_eq!(line.usd, Usd::from_f64(0.0042), "at the reported cost");
    assert!(!line.estimated);
    assert_eq!(line.attempt.as_deref(), Some(sent[0].attempt.as_str()));
    assert_eq!(line.endpoint.as_deref(), Some("chutes/int4"));
    assert_eq!(line.completion_tokens, 500);
    let Effect::Output {
        dataset,
        endpoint,
        record,
    } = &effects[0]
    else {
        panic!("the output first: {effects:?}");
    };
    assert_eq!((*dataset, *endpoint), (0, sent[0].pinned));
    assert_eq!(record.id, "a");
    assert_eq!(record.cost_usd, Usd::from_f64(0.0042));
    assert_eq!(record.attempts, 1);
    assert!(!record.truncated);
    assert_eq!(record.endpoint_tag.as_deref(), Some("chutes/int4"));
    let last = record.conversations.last().expect("a turn");
    assert_eq!(
        (last.role.as_str(), last.content.as_str()),
        ("assistant", format!("answer {}", sent[0].key).as_str())
    );
    let ds = &h.core.datasets()[0];
    assert_eq!((ds.done, ds.output_tokens, ds.in_flight), (1, 500, 0));
    assert_eq!(ds.spent, Usd::from_f64(0.0042));
    assert!(h.core.is_over());
}

#[test]
fn an_answer_cut_at_max_tokens_follows_on_length() {
    struct Case {
        name: &'static str,
        on_length: &'static str,
        max_attempts: u32,
        output: bool,
        reject: bool,
        retry: bool,
    }
    let cases = [
        Case {
            name: "keep",
            on_length: "keep",
            max_attempts: 3,
            output: true,
            reject: false,
            retry: false,
        },
        Case {
            name: "retry",
            on_length: "retry",
            max_attempts: 3,
            output: false,
            reject: false,
            retry: true,
        },
        Case {
            name: "retry, but the last attempt",
            on_length: "retry",
            max_attempts: 1,
            output: false,
            reject: true,
            retry: false,
        },
        Case {
            name: "reject",
            on_length: "reject",
            max_attempts: 3,
            output: false,
            reject: true,
            retry: false,
        },
    ];
    for c in cases {
        let mut h = H::new(
            config(&format!(
                "[retry]\nmax_attempts = {}\non_length = \"{}\"",
                c.max_attempts, c.on_length
            )),
            kimi(),
            &[&["a"]],
        );
        let sent = h.dispatch();
        let effects = h.result(done(sent[0].key, Some(0), 16384, 0.03, "length"));
        assert_eq!(
            ledger(&effects),
            vec![(SpendKind::Complete, Usd::from_f64(0.03))],
            "{}: paid for whatever happens",
            c.name
        );
        assert_eq!(outputs(&effects) == 1, c.output, "{}: output", c.name);
        let want_rejects: Vec<String> = if c.reject {
            vec!["length".into()]
        } else {
            vec![]
        };
        assert_eq!(rejects(&effects), want_rejects, "{}: reject", c.name);
        assert_eq!(h.core.retries() == 1, c.retry, "{}: retry", c.name);
        assert_eq!(!h.core.retry_queue_empty(), c.retry, "{}: queued", c.name);
        if let Some(Effect::Output { record, .. }) =
            effects.iter().find(|e| matches!(e, Effect::Output { .. }))
        {
            assert!(record.truncated, "{}: marked truncated", c.name);
            assert_eq!(record.finish_reason, "length", "{}", c.name);
        }
        let ds = &h.core.datasets()[0];
        assert_eq!(ds.done, u64::from(c.output), "{}: done", c.name);
        assert_eq!(ds.spent, Usd::from_f64(0.03), "{}: spent", c.name);
    }
}

#[test]
fn a_cancelled_stream_is_booked_at_our_estimate_and_neither_kept_nor_rejected() {
    let mut h = H::new(config(PINNED), kimi(), &[&["a"]]);
    let sent = h.dispatch();
    let effects = h.result(cancelled(sent[0].key, sent[0].pinned, 120, 0.0007));
    assert_eq!(
        ledger(&effects),
        vec![(SpendKind::Cancelled, Usd::from_f64(0.0007))]
    );
    assert_eq!(outputs(&effects), 0);
    assert!(rejects(&effects).is_empty());
    assert!(
        h.core.retry_queue_empty(),
        "a resume takes it again, not this run"
    );
    let ds = &h.core.datasets()[0];
    assert_eq!((ds.done, ds.rejected, ds.in_flight), (0, 0, 0));
    assert_eq!(ds.spent, Usd::from_f64(0.0007));
    let rec = h.take_reconcile();
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].0, format!("gen-{}", sent[0].key));
    assert!(rec[0].1.estimated);
    // The breaker does not count our own close against the endpoint.
    let now = h.now;
    assert_eq!(h.core.off_reason(0, &now), None);
}

#[test]
fn a_result_for_an_unknown_key_does_nothing() {
    let mut h = H::new(config(""), kimi(), &[&["a"]]);
    let sent = h.dispatch();
    let reserved = h.core.reserved_pico();
    let results = [
        done(999, Some(0), 100, 0.5, "stop"),
        failed(999, Some(0), http(401, None, "no")),
        cancelled(999, None, 10, 0.1),
    ];
    for r in results {
        let what = format!("{:?}", r.outcome)
            .chars()
            .take(20)
            .collect::<String>();
        assert!(h.result(r).is_empty(), "{what}: no effects");
        assert_eq!(h.core.in_flight(), 1, "{what}");
        assert_eq!(h.core.reserved_pico(), reserved, "{what}");
        assert_eq!(h.core.stopping(), None, "{what}");
        assert_eq!(spent(&h, 0), Usd::ZERO, "{what}");
    }
    // And a key answered twice counts once.
    h.result(done(sent[0].key, None, 100, 0.001, "stop"));
    assert!(
        h.result(done(sent[0].key, None, 100, 0.001, "stop"))
            .is_empty()
    );
    assert_eq!(h.core.datasets()[0].done, 1);
}

#[test]
fn dataset_spend_follows_its_ledger_lines() {
    let mut h = H::new(config(PINNED), kimi(), &[&["a", "b"], &["x", "y"]]);
    let sent = h.dispatch();
    assert_eq!(sent.len(), 4);
    let by_id = |id: &str| sent.iter().find(|d| d.prompt_id == id).expect("sent");
    let mut lines = Vec::new();
    lines.extend(ledger(&h.result(done(
        by_id("a").key,
        Some(0),
        10,
        0.003,
        "stop",
    ))));
    lines.extend(ledger(&h.result(failed(
        by_id("b").key,
        Some(0),
        http(500, None, "x"),
    ))));
    lines.extend(ledger(&h.result(done(
        by_id("x").key,
        Some(0),
        10,
        0.005,
        "stop",
    ))));
    lines.extend(ledger(&h.result(cancelled(
        by_id("y").key,
        Some(0),
        10,
        0.0001,
    ))));
    let cases = [("d0", 0, 0.003), ("d1", 1, 0.0051)];
    for (name, d, want) in cases {
        assert_eq!(h.core.datasets()[d].name, name);
        assert_eq!(spent(&h, d), Usd::from_f64(want), "{name}");
    }
    let total: Usd = lines.iter().map(|(_, u)| *u).sum();
    assert_eq!(
        total,
        spent(&h, 0) + spent(&h, 1),
        "the ledger and the books agree"
    );
}

/// Zero completion insurance (OpenRouter docs, guides/features/zero-completion-insurance): an
/// error finish or an empty answer is free; a stream cut after tokens is billed like a cancel.
/// Every failed attempt that received tokens and has a generation id is looked up.
#[test]
fn failed_streams_with_tokens_are_booked_as_billed_and_looked_up() {
    use crate::openrouter::ApiError;
    let mid_stream = || {
        let body =
            serde_json::json!({"error": {"code": 502, "message": "Provider returned error"}});
        ApiError::from_response_body(200, None, body.to_string().as_bytes())
    };
    // (name, error, tokens streamed, booked estimate, ledger kind, looked up)
    let cases: Vec<(&str, ApiError, u64, f64, SpendKind, bool)> = vec![
        (
            "a reset after tokens: billed like a cancel",
            ApiError::Connection("reset".into()),
            120,
            0.0003,
            SpendKind::Cancelled,
            true,
        ),
        (
            "a clean truncation after tokens",
            ApiError::Truncated("no finish".into()),
            80,
            0.0002,
            SpendKind::Cancelled,
            true,
        ),
        (
            "a reset before any token: free",
            ApiError::Connection("reset".into()),
            0,
            0.0,
            SpendKind::Failed,
            false,
        ),
        (
            "an error finish after tokens: free, but asked",
            mid_stream(),
            50,
            0.0,
            SpendKind::Failed,
            true,
        ),
        (
            "an empty answer: free",
            ApiError::Empty {
                provider: "Chutes".into(),
            },
            0,
            0.0,
            SpendKind::Failed,
            false,
        ),
    ];
    for (name, err, streamed, booked, kind, looked_up) in cases {
        let mut h = H::new(config(PINNED), kimi(), &[&["a"]]);
        let sent = h.dispatch();
        let mut r = failed(sent[0].key, sent[0].pinned, err);
        r.streamed_tokens = streamed;
        r.booked_pico = Usd::from_f64(booked).pico();
        r.generation_id = Some("gen-x".into());
        let fx = h.result(r);
        assert_eq!(ledger(&fx), vec![(kind, Usd::from_f64(booked))], "{name}");
        let asked = h.take_reconcile();
        assert_eq!(!asked.is_empty(), looked_up, "{name}");
        assert_eq!(spent(&h, 0), Usd::from_f64(booked), "{name}");
    }
}

/// A routed request turned away before any token is blamed on the provider OpenRouter's error
/// names: that endpoint rests for the `Retry-After`. Routed over several endpoints, it teaches
/// no ceiling (how many of ours were there is not known).
#[test]
fn a_routed_429_rests_the_provider_it_names() {
    let mut h = H::new(config(""), kimi(), &[&["a", "b", "c"]]);
    let chutes = h.index("chutes/int4");
    let sent = h.dispatch();
    assert!(sent.iter().all(|d| d.pinned.is_none()), "routed");
    let body = br#"{"error":{"code":429,"message":"Provider returned error","metadata":{"provider_name":"Chutes","raw":"rate limited upstream"}}}"#;
    let err = ApiError::from_response_body(429, Some("3"), body);
    h.result(failed(sent[0].key, None, err));
    let now = h.now;
    assert_eq!(
        h.core.off_reason(chutes, &now),
        Some(OffReason::RateLimited { secs: 3 })
    );
    let together = h.index("together/int4");
    assert_eq!(h.core.off_reason(together, &now), None, "only chutes rests");
    assert_eq!(h.core.fleet.health(chutes).ceiling(), None);
}

/// A request pinned to an endpoint (or sent to it alone) that meets a 429 tells how many of
/// ours it takes at once: that many is its ceiling, and it takes no more until one ends.
#[test]
fn a_429_of_a_request_sent_to_one_endpoint_teaches_its_ceiling() {
    let ids: Vec<String> = (0..60).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = H::new(
        config(
            "routing = \"pinned\"\nconcurrency = 20\n[policy]\nexclude = [\"together\", \"moonshotai\", \"baseten\", \"novita\"]",
        ),
        kimi(),
        &[&refs],
    );
    let chutes = h.index("chutes/int4");
    let sent = h.dispatch();
    assert_eq!(sent.len(), 20);
    assert!(sent.iter().all(|d| d.pinned == Some(chutes)));
    h.result(failed(
        sent[0].key,
        Some(chutes),
        http(429, Some("1"), "slow"),
    ));
    assert_eq!(h.core.fleet.health(chutes).ceiling(), Some(20));
    // Past its rest, with room for 40 and 19 of ours still there: one more goes, not 21.
    h.command(crate::engine::Command::SetConcurrency(40));
    h.at(2.0);
    assert_eq!(h.dispatch().len(), 1);
    // An answer from it: one more.
    let k = sent[1].key;
    h.result(done(k, Some(chutes), 10, 0.001, "stop"));
    assert_eq!(h.core.fleet.health(chutes).ceiling(), Some(21));
}
