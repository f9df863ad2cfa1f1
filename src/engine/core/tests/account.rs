//! The account's in-flight budget: the gate's learning (pause, multiplicative decrease per
//! wave, additive increase after quiet) and what its 402s do to a run (never a prompt's
//! attempt, never an endpoint's failure; OpenRouter waits, own servers go on).

use super::*;
use crate::engine::core::account::{AccountGate, GateChange, MIN_CEILING, QUIET, RAISE_EVERY};
use crate::engine::endpoint::CustomTarget;
use crate::engine::reason::StopReason;

fn budget_402(retry_after: &str) -> ApiError {
    let body = serde_json::json!({"error": {"code": 402,
        "message": "In-flight spending budget reached",
        "metadata": {"error_type": "payment_required",
                     "limit_source": "openrouter_in_flight_budget"}}});
    ApiError::from_response_body(402, Some(retry_after), body.to_string().as_bytes())
}

fn over_budget_402() -> ApiError {
    let body = serde_json::json!({"error": {"code": 402,
        "message": "This request requires more credits, or fewer max_tokens. You requested up to 2048 tokens, but can only afford 900.",
        "metadata": {"error_type": "payment_required", "limit_source": "openrouter_credits"}}});
    ApiError::from_response_body(402, None, body.to_string().as_bytes())
}

#[test]
fn the_gate_learns_a_ceiling_per_wave_and_gives_it_back_slowly() {
    let t0 = Instant::now();
    let at = |s: f64| t0 + Duration::from_secs_f64(s);
    let wait = Duration::from_secs(5);
    let mut g = AccountGate::new(true);
    assert!(g.admits(10_000, t0), "no ceiling until a 402");
    // First 402 of a wave, 2,000 running: paused 5 s, ceiling 1,500, reported.
    assert_eq!(
        g.on_budget_402(2_000, wait, at(0.0)),
        Some(GateChange::Lowered {
            ceiling: Some(1_500),
            running: 2_000,
            wait
        })
    );
    assert!(!g.admits(0, at(4.9)), "paused");
    // The rest of the wave comes back as the refused requests leave: each lowers the ceiling
    // to 0.75 x what is running, silently; the last leaves 0.75 x what the account admitted.
    for running in (8..=19).rev().map(|k| k * 100) {
        assert_eq!(g.on_budget_402(running, wait, at(1.0)), None);
    }
    assert_eq!(g.ceiling(), Some(600), "0.75 x 800 admitted");
    // A higher count later in the wave never raises it.
    g.on_budget_402(1_000, wait, at(1.5));
    assert_eq!(g.ceiling(), Some(600));
    // The pause ends: the wave is reported once.
    assert_eq!(g.tick(2_000, at(4.0)), None, "still paused");
    assert_eq!(
        g.tick(2_000, at(5.0)),
        Some(GateChange::WaveOver {
            refused: 14,
            ceiling: Some(600)
        })
    );
    assert!(g.admits(599, at(5.0)) && !g.admits(600, at(5.0)));
    // Past the pause, another 402 is a new wave.
    assert!(matches!(
        g.on_budget_402(600, wait, at(6.0)),
        Some(GateChange::Lowered {
            ceiling: Some(450),
            ..
        })
    ));
    assert_eq!(g.hits(), 15);
    assert!(matches!(
        g.tick(2_000, at(11.0)),
        Some(GateChange::WaveOver { refused: 1, .. })
    ));
    // No raise before a quiet minute; then 5% of the concurrency every 15 s.
    assert_eq!(g.tick(2_000, at(6.0 + 59.0)), None);
    assert_eq!(
        g.tick(2_000, at(6.0) + QUIET),
        Some(GateChange::Raised { ceiling: Some(550) })
    );
    assert_eq!(
        g.tick(2_000, at(6.0) + QUIET + Duration::from_secs(14)),
        None
    );
    let mut t = at(6.0) + QUIET;
    let mut raises = 1;
    while g.ceiling().is_some() {
        t += RAISE_EVERY;
        g.tick(2_000, t).expect("a raise every step");
        raises += 1;
    }
    assert_eq!(raises, 16, "450 back past 2,000 in steps of 100");
    assert!(g.admits(1_000_000, t), "the ceiling is gone");
    // Never below the floor, whatever was running.
    let mut g = AccountGate::new(true);
    assert!(matches!(
        g.on_budget_402(1, wait, t0),
        Some(GateChange::Lowered {
            ceiling: Some(MIN_CEILING),
            ..
        })
    ));
    // Not learning: each wave is waited out, no ceiling.
    let mut g = AccountGate::new(false);
    assert!(matches!(
        g.on_budget_402(2_000, wait, t0),
        Some(GateChange::Lowered { ceiling: None, .. })
    ));
    assert!(!g.admits(0, at(1.0)) && g.admits(5_000, at(5.0)));
    assert_eq!(g.ceiling(), None);
}

#[test]
fn a_budget_402_is_not_an_attempt_nor_a_failure_and_holds_openrouter_only() {
    // One attempt per prompt and a breaker that opens at the first failure: a budget 402
    // must touch neither.
    let cfg = config(
        "concurrency = 10\nrouting = \"pinned\"\n[retry]\nmax_attempts = 1\n[breaker]\nfailures = 1\ncooldown_s = 600",
    );
    let ids: Vec<String> = (0..30).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = H::new(cfg, kimi(), &[&refs]);
    let chutes = h.index("chutes/int4");
    let sent = h.dispatch();
    assert_eq!(sent.len(), 10);
    let effects = h.result(failed(sent[0].key, Some(chutes), budget_402("5")));
    assert!(rejects(&effects).is_empty(), "not rejected");
    assert_eq!(h.core.stopping(), None);
    assert_eq!(h.route_tags(), Vec::<String>::new(), "OpenRouter paused");
    assert!(
        h.event_texts().iter().any(|t| t.contains("capped at 7")),
        "{:?}",
        h.event_texts()
    );
    let snap_ceiling = h.core.account().ceiling();
    assert_eq!(snap_ceiling, Some(7), "0.75 x 10 running");
    // The driver wakes when the pause ends.
    let wake = h.core.next_wake(&h.now).expect("a wake");
    assert_eq!(
        wake.saturating_duration_since(h.now.mono),
        Duration::from_secs(5)
    );
    h.at(2.0);
    assert!(h.dispatch().is_empty(), "nothing during the pause");
    // After the pause: chutes is still the route (no breaker), and 9 running cap at 7.
    h.at(5.0);
    assert_eq!(
        h.core.off_reason(chutes, &h.now),
        None,
        "no breaker, no rest"
    );
    assert!(h.dispatch().is_empty(), "9 running, ceiling 7");
    for d in &sent[1..4] {
        h.result(done(d.key, d.pinned, 100, 0.001, "stop"));
    }
    let again = h.dispatch();
    assert_eq!(again.len(), 1, "6 running: one more up to 7");
    assert_eq!(
        again[0].prompt_id, "p0",
        "the refused prompt first, attempts intact"
    );
}

#[test]
fn own_servers_go_on_while_openrouter_waits() {
    let mut own = ep("mybox", "mybox", "int4", 0.0, 0.0);
    own.custom = Some(CustomTarget {
        model: "kimi".into(),
        extra: serde_json::Map::new(),
        concurrency: 2,
    });
    let mut eps = kimi();
    eps.push(own);
    let cfg = config("concurrency = 6\nrouting = \"pinned\"");
    let mut h = H::new(cfg, eps, &[&["a", "b", "c", "d", "e", "f", "g", "h"]]);
    let chutes = h.index("chutes/int4");
    let mine = h.index("mybox");
    let sent = h.dispatch();
    assert_eq!(sent.len(), 6, "2 on the own server, 4 through OpenRouter");
    let or: Vec<&Dispatch> = sent.iter().filter(|d| d.pinned != Some(mine)).collect();
    h.result(failed(or[0].key, Some(chutes), budget_402("30")));
    // The own server's two finish: it takes two more though OpenRouter is paused.
    for d in sent.iter().filter(|d| d.pinned == Some(mine)) {
        h.result(done(d.key, d.pinned, 10, 0.0, "stop"));
    }
    let next = h.dispatch();
    assert_eq!(next.len(), 2);
    assert!(next.iter().all(|d| d.pinned == Some(mine)), "{next:?}");
}

#[test]
fn one_request_over_the_whole_budget_stops_the_run_naming_max_tokens() {
    let mut h = H::new(config("routing = \"pinned\""), kimi(), &[&["a"]]);
    let chutes = h.index("chutes/int4");
    let sent = h.dispatch();
    let err = over_budget_402();
    let effects = h.result(failed(sent[0].key, Some(chutes), err.clone()));
    assert!(rejects(&effects).is_empty());
    let Some(StopReason::RequestOverBudget {
        max_tokens,
        estimate,
        ..
    }) = h.core.stopping().cloned()
    else {
        panic!("{:?}", h.core.stopping());
    };
    assert_eq!(max_tokens, h.core.datasets()[0].params.max_tokens);
    assert!(estimate > Usd::ZERO);
    assert!(h.core.failed(), "exit code 1");
    let text = h.core.stopping().expect("stopping").to_string();
    assert!(text.contains("lower max_tokens"), "{text}");
}

#[test]
fn with_learning_off_the_run_only_waits() {
    let cfg =
        config("concurrency = 10\nrouting = \"pinned\"\n[retry]\nlearn_inflight_budget = false");
    let ids: Vec<String> = (0..30).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = H::new(cfg, kimi(), &[&refs]);
    let chutes = h.index("chutes/int4");
    let sent = h.dispatch();
    h.result(failed(sent[0].key, Some(chutes), budget_402("5")));
    assert_eq!(h.core.account().ceiling(), None);
    h.at(5.0);
    assert_eq!(h.dispatch().len(), 1, "back to the full concurrency");
}
