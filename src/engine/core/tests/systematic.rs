//! Failures that repeat for every prompt stop the run with the prompts pending; failures that
//! are the prompts' own are rejected as before.

use super::*;
use crate::engine::reason::{OffReason, StopReason};

fn privacy_404() -> ApiError {
    let body = serde_json::json!({"error": {"code": 404,
        "message": "No endpoints available matching your data policy",
        "error_type": "not_found",
        "availability": {"code": "privacy_restricted", "retryable": false}}});
    ApiError::from_response_body(404, None, body.to_string().as_bytes())
}

fn policy_400() -> ApiError {
    let body = serde_json::json!({"error": {"code": 400, "message": "flagged",
        "metadata": {"error_type": "content_policy_violation"}}});
    ApiError::from_response_body(400, None, body.to_string().as_bytes())
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("p{i:02}")).collect()
}

fn run_with(top: &str, n: usize) -> H {
    let ids = ids(n);
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    H::new(config(top), kimi(), &[&refs])
}

/// Answers each attempt of `sent` with `f(i)`; returns every effect.
fn answer(h: &mut H, sent: &[Dispatch], f: impl Fn(usize) -> Option<ApiError>) -> Vec<Effect> {
    let mut all = Vec::new();
    for (i, d) in sent.iter().enumerate() {
        let r = match f(i) {
            Some(e) => failed(d.key, d.pinned, e),
            None => done(d.key, d.pinned, 10, 0.001, "stop"),
        };
        all.extend(h.result(r));
    }
    all
}

#[test]
fn the_same_failure_for_every_prompt_stops_the_run_and_rejects_nothing() {
    let mut h = run_with(
        "concurrency = 8\nrouting = \"pinned\"\n[retry]\nstop_after_same_error = 5",
        30,
    );
    let sent = h.dispatch();
    assert_eq!(sent.len(), 8);
    let effects = answer(&mut h, &sent[..5], |_| Some(privacy_404()));
    assert!(rejects(&effects).is_empty(), "nothing rejected");
    // Each of the first four failures freed a slot, taken at once by a fresh prompt.
    let refill = h.dispatch();
    assert_eq!(refill.len(), 4, "refilled before the stop");
    let Some(StopReason::Systematic {
        signature, count, ..
    }) = h.core.stopping().cloned()
    else {
        panic!("{:?}", h.core.stopping());
    };
    assert_eq!((signature.as_str(), count), ("404 privacy_restricted", 5));
    assert!(h.core.failed(), "exit code 1");
    let text = h.core.stopping().expect("stop").to_string();
    assert!(text.contains("openrouter.ai/settings/privacy"), "{text}");
    assert!(text.contains("kept pending"), "{text}");
    // The five stay pending for the next run; the seven in flight finish as in any stop.
    let rest: Vec<Dispatch> = sent.into_iter().skip(5).chain(refill).collect();
    let effects = answer(&mut h, &rest, |_| Some(privacy_404()));
    assert!(rejects(&effects).is_empty(), "still nothing rejected");
    assert!(h.dispatch().is_empty(), "nothing more is sent");
    assert!(h.core.is_over());
    assert_eq!(h.core.datasets()[0].rejected, 0);
    assert_eq!(
        h.core.datasets()[0].retries_pending,
        12,
        "all twelve kept pending"
    );
}

#[test]
fn prompts_in_flight_when_the_stop_trips_stay_pending_however_many() {
    // 50 in flight, the stop at 20: the 30 that fail after it are kept pending too.
    let mut h = run_with(
        "concurrency = 50\nrouting = \"pinned\"\n[retry]\nstop_after_same_error = 20",
        60,
    );
    let sent = h.dispatch();
    assert_eq!(sent.len(), 50);
    let mut effects = answer(&mut h, &sent, |_| Some(privacy_404()));
    // The first failures' freed slots took the last ten prompts before the stop.
    let refill = h.dispatch();
    assert_eq!(refill.len(), 10);
    effects.extend(answer(&mut h, &refill, |_| Some(privacy_404())));
    assert!(rejects(&effects).is_empty(), "{:?}", rejects(&effects));
    assert!(matches!(
        h.core.stopping(),
        Some(StopReason::Systematic { .. })
    ));
    assert_eq!(h.core.datasets()[0].rejected, 0);
    assert!(h.dispatch().is_empty(), "nothing more is sent");
    assert!(h.core.is_over());
}

#[test]
fn failures_that_are_the_prompts_own_are_rejected_when_the_streak_breaks() {
    let cases: Vec<(&str, Vec<Option<ApiError>>, usize)> = vec![
        (
            "an answer after four same failures",
            vec![
                Some(policy_400()),
                Some(policy_400()),
                Some(policy_400()),
                Some(policy_400()),
                None,
            ],
            4,
        ),
        (
            "another failure kind",
            vec![
                Some(policy_400()),
                Some(policy_400()),
                Some(privacy_404()),
                Some(policy_400()),
            ],
            3,
        ),
    ];
    for (name, outcomes, rejected_at_once) in cases {
        let mut h = run_with(
            "concurrency = 8\nrouting = \"pinned\"\n[retry]\nstop_after_same_error = 5",
            8,
        );
        let sent = h.dispatch();
        let effects = answer(&mut h, &sent[..outcomes.len()], |i| outcomes[i].clone());
        assert_eq!(rejects(&effects).len(), rejected_at_once, "{name}");
        assert_eq!(h.core.stopping(), None, "{name}: the run goes on");
    }
}

#[test]
fn held_rejects_are_written_when_the_run_runs_out_of_work() {
    let mut h = run_with(
        "concurrency = 8\nrouting = \"pinned\"\n[retry]\nstop_after_same_error = 20",
        3,
    );
    let sent = h.dispatch();
    let effects = answer(&mut h, &sent[..2], |_| Some(policy_400()));
    assert!(
        rejects(&effects).is_empty(),
        "held while others might follow"
    );
    assert_eq!(h.core.held_rejects(), 2);
    assert!(!h.core.is_over(), "not over while rejects are held");
    let effects = answer(&mut h, &sent[2..], |_| Some(policy_400()));
    assert_eq!(
        rejects(&effects),
        vec!["policy"; 3],
        "written when nothing is left to run"
    );
    assert!(h.core.is_over());
    assert_eq!(h.core.datasets()[0].rejected, 3);
    assert_eq!(h.core.stopping(), None, "three is not a systematic run");
}

#[test]
fn zero_turns_the_check_off() {
    let mut h = run_with(
        "concurrency = 8\nrouting = \"pinned\"\n[retry]\nstop_after_same_error = 0",
        8,
    );
    let sent = h.dispatch();
    let effects = answer(&mut h, &sent, |_| Some(privacy_404()));
    assert_eq!(rejects(&effects).len(), 8);
    assert_eq!(h.core.stopping(), None);
}

#[test]
fn a_real_refusal_names_its_raw_cause_in_the_reject_and_the_stop() {
    // A 400 recorded from OpenRouter (pydantic-ai's cassettes): "Provider returned error",
    // whose `metadata.raw` holds the cause.
    let body = include_str!(
        "../../../../tests/fixtures/recorded/o3_400_provider_error_unsupported_value.json"
    );
    let refusal = || ApiError::from_response_body(400, None, body.as_bytes());
    let cause = "Unsupported value: 'none' is not supported";
    // The prompt's own: rejected with the cause.
    let mut h = run_with("concurrency = 2\nrouting = \"pinned\"", 2);
    let sent = h.dispatch();
    let mut all = answer(&mut h, &sent[..1], |_| Some(refusal()));
    all.extend(answer(&mut h, &sent[1..], |_| None));
    let why: Vec<String> = all
        .iter()
        .filter_map(|e| match e {
            Effect::Reject { record, .. } => Some(record.error.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].contains(cause) && why[0].contains("OpenAI"),
        "{why:?}"
    );
    // Every prompt's: the stop says it.
    let mut h = run_with(
        "concurrency = 4\nrouting = \"pinned\"\n[retry]\nstop_after_same_error = 3",
        4,
    );
    let sent = h.dispatch();
    answer(&mut h, &sent, |_| Some(refusal()));
    let stop = h.core.stopping().expect("stopped").to_string();
    assert!(stop.contains(cause), "{stop}");
}

/// The account's settings change while answers stream: the answers of requests sent before
/// the first failure finish between the failures and do not break the streak; an answer to a
/// request sent after it does (the failures were the prompts' own).
#[test]
fn only_answers_to_requests_sent_since_the_failures_began_break_the_streak() {
    let mut h = run_with(
        "concurrency = 8\nrouting = \"pinned\"\n[retry]\nstop_after_same_error = 5",
        40,
    );
    h.at(0.0);
    let early = h.dispatch();
    assert_eq!(early.len(), 8);
    // At 5 s the first two fail; each freed slot is taken by a fresh prompt sent then.
    h.at(5.0);
    let mut effects = answer(&mut h, &early[..2], |_| Some(privacy_404()));
    let late = h.dispatch();
    assert_eq!(late.len(), 2);
    // Answers to requests sent at 0 s come in between: they say nothing of the world now.
    h.at(6.0);
    effects.extend(answer(&mut h, &early[2..5], |_| None));
    assert_eq!(h.core.held_rejects(), 2, "still held");
    // Three more failures: five in a row, the run stops, nothing rejected.
    h.at(7.0);
    effects.extend(answer(&mut h, &early[5..8], |_| Some(privacy_404())));
    assert!(rejects(&effects).is_empty(), "{:?}", rejects(&effects));
    assert!(matches!(
        h.core.stopping(),
        Some(StopReason::Systematic { count: 5, .. })
    ));

    // The same with a content-policy 400, but an answer to a request sent after the first
    // failure: the held failures were the prompts' own, rejected.
    let mut h = run_with(
        "concurrency = 8\nrouting = \"pinned\"\n[retry]\nstop_after_same_error = 5",
        40,
    );
    h.at(0.0);
    let early = h.dispatch();
    h.at(5.0);
    let mut effects = answer(&mut h, &early[..2], |_| Some(policy_400()));
    let late = h.dispatch();
    h.at(6.0);
    effects.extend(answer(&mut h, &late[..1], |_| None));
    assert_eq!(
        rejects(&effects).len(),
        2,
        "written once a newer request answered"
    );
    assert_eq!(h.core.held_rejects(), 0);
}

/// A 404 to requests harvest narrowed (here to Chutes alone, the others cooling down after
/// 429s) says Chutes is not the account's to use, never that every endpoint is: thirty in a
/// row (the stop is at twenty) reject nothing and stop nothing, and Chutes leaves routing. When
/// the cool-downs end and the prompts go to every endpoint that can take them, the same 404 is
/// the account's: the run stops, every prompt pending (issue #35).
#[test]
fn a_404_from_harvests_own_narrowing_is_never_systematic() {
    let mut h = run_with("concurrency = 30\n[retry]\nstop_after_same_error = 20", 60);
    let chutes = h.index("chutes/int4");
    let now = h.now;
    for i in 0..h.core.endpoints().len() {
        if i != chutes {
            h.core
                .fleet
                .health_mut(i)
                .on_rate_limited(now.mono, Duration::from_secs(30));
        }
    }
    let sent = h.dispatch();
    assert_eq!(sent.len(), 30);
    assert!(
        sent.iter().all(|d| d.over == vec![chutes]),
        "to Chutes alone"
    );
    let effects = answer(&mut h, &sent, |_| Some(privacy_404()));
    assert!(rejects(&effects).is_empty(), "{:?}", rejects(&effects));
    assert!(h.core.stopping().is_none(), "{:?}", h.core.stopping());
    assert_eq!(h.core.off_reason(chutes, &now), Some(OffReason::Gone));
    assert!(
        h.dispatch().is_empty(),
        "nothing routes while the rest cool down"
    );
    h.at(31.0);
    let wide = h.dispatch();
    assert!(
        !wide.is_empty()
            && wide
                .iter()
                .all(|d| !d.over.contains(&chutes) && d.over.len() > 1)
    );
    let effects = answer(&mut h, &wide, |_| Some(privacy_404()));
    assert!(rejects(&effects).is_empty(), "{:?}", rejects(&effects));
    assert!(
        matches!(h.core.stopping(), Some(StopReason::Systematic { .. })),
        "{:?}",
        h.core.stopping()
    );
    assert_eq!(h.core.datasets()[0].rejected, 0);
}

/// What is not a narrowing: a retry sent everywhere but where it last failed (the retry rule
/// leaves that endpoint out), and a 404 the API calls retryable. Neither takes an endpoint
/// out of routing.
#[test]
fn a_retry_away_from_its_last_failure_and_a_retryable_404_take_nothing_out() {
    let mut h = run_with("concurrency = 1\n[retry]\nstop_after_same_error = 20", 1);
    let chutes = h.index("chutes/int4");
    let first = h.dispatch();
    assert!(first[0].over.len() > 2 && first[0].over.contains(&chutes));
    h.result(failed(
        first[0].key,
        Some(chutes),
        http(502, None, "bad gateway"),
    ));
    h.at(60.0);
    let retry = h.dispatch();
    assert_eq!(retry[0].prompt_id, first[0].prompt_id, "the retry");
    assert!(!retry[0].over.contains(&chutes), "the retry avoids Chutes");
    let now = h.now;
    h.result(failed(retry[0].key, None, privacy_404()));
    for &i in &retry[0].over {
        assert_eq!(h.core.off_reason(i, &now), None, "{i} stays in routing");
    }
    // A 404 the API says may pass, to a request narrowed to Chutes alone.
    let mut h = run_with("concurrency = 1\n[retry]\nstop_after_same_error = 20", 3);
    for i in 0..h.core.endpoints().len() {
        if i != chutes {
            h.core
                .fleet
                .health_mut(i)
                .on_rate_limited(h.now.mono, Duration::from_secs(30));
        }
    }
    let sent = h.dispatch();
    assert_eq!(sent[0].over, vec![chutes]);
    let body = serde_json::json!({"error": {"code": 404, "message": "No endpoints available",
        "error_type": "not_found", "availability": {"code": "no_capacity", "retryable": true}}});
    let transient = ApiError::from_response_body(404, None, body.to_string().as_bytes());
    assert!(transient.is_retryable(), "the case is a retryable 404");
    let now = h.now;
    h.result(failed(sent[0].key, None, transient));
    assert_eq!(
        h.core.off_reason(chutes, &now),
        None,
        "Chutes stays in routing"
    );
}

/// The proxy case of reliability-probe-5 (P17): the account's privacy settings answer narrowed
/// requests with `privacy_restricted` (each takes its endpoints out of routing, issue #35),
/// then the endpoints left answer with another 404 (`no_endpoints`) until the run stops. The
/// stop names the privacy settings beside the model id; without the earlier privacy 404s it
/// names the model id alone.
#[test]
fn a_404_stop_after_privacy_404s_to_narrowed_requests_names_the_privacy_settings() {
    let no_endpoints = || {
        let body = serde_json::json!({"error": {"code": 404, "message": "No endpoints found",
            "error_type": "not_found", "availability": {"code": "no_endpoints", "retryable": false}}});
        ApiError::from_response_body(404, None, body.to_string().as_bytes())
    };
    for (narrowed_first, names_privacy) in [(true, true), (false, false)] {
        let mut h = run_with("concurrency = 30\n[retry]\nstop_after_same_error = 20", 60);
        let chutes = h.index("chutes/int4");
        if narrowed_first {
            let now = h.now;
            for i in 0..h.core.endpoints().len() {
                if i != chutes {
                    h.core
                        .fleet
                        .health_mut(i)
                        .on_rate_limited(now.mono, Duration::from_secs(30));
                }
            }
            let sent = h.dispatch();
            assert!(
                sent.iter().all(|d| d.over == vec![chutes]),
                "to Chutes alone"
            );
            let effects = answer(&mut h, &sent, |_| Some(privacy_404()));
            assert!(h.core.stopping().is_none(), "{effects:?}");
            assert_eq!(h.core.off_reason(chutes, &now), Some(OffReason::Gone));
            h.at(31.0);
        }
        let wide = h.dispatch();
        assert!(wide.len() >= 20, "{}", wide.len());
        let effects = answer(&mut h, &wide, |_| Some(no_endpoints()));
        assert!(rejects(&effects).is_empty(), "{:?}", rejects(&effects));
        let Some(StopReason::Systematic {
            signature, advice, ..
        }) = h.core.stopping()
        else {
            panic!("a systematic stop: {:?}", h.core.stopping());
        };
        assert_eq!(signature, "404 no_endpoints");
        assert!(advice.starts_with("the model id"), "{advice}");
        assert_eq!(
            advice.contains("openrouter.ai/settings/privacy"),
            names_privacy,
            "narrowed first: {narrowed_first}: {advice}"
        );
        if names_privacy {
            assert!(
                advice.contains("404 privacy_restricted took 1 endpoint out of routing"),
                "{advice}"
            );
        }
    }
}
