//! What earlier runs of an output directory read of its endpoints' closes, carried into a new
//! start (issue #51 item 6): each start checked every documented stopper again from nothing,
//! its streams holding their worst case meanwhile. The ledger keeps each reading on the look-up's
//! line; a start within the day adds them to the evidence before anything is sent.

use super::*;
use crate::close_reading::{Close, ClosesSeen};
use crate::engine::core::settle::Asked;
use crate::store::output::SpendKind;

/// Under the hard budget with only the documents' word, at Chutes alone, with room for
/// several worst cases there but not ten: the last stretch, where checks go.
fn chutes_hard(seen: Option<ClosesSeen>) -> (H, usize) {
    let cfg = config_documented(
        "budget_usd = 0.25\nconcurrency = 10\nrouting = \"pinned\"\n[policy]\nexclude = [\"together\", \"moonshotai\", \"baseten\", \"novita\"]",
    );
    let ids: Vec<String> = (0..60).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = H::new(cfg, kimi(), &[&refs]);
    let wall = h.t0.wall;
    if let Some(seen) = seen {
        let closes = HashMap::from([("chutes/int4".to_string(), seen)]);
        h.core = h.core.with_closes_before(&closes, wall);
    }
    let chutes = h.index("chutes/int4");
    (h, chutes)
}

/// `stopped` and `billed_past` readings, the latest `hours_ago` before the test's start.
fn seen(
    h_wall: chrono::DateTime<chrono::Utc>,
    stopped: u32,
    past: u32,
    hours_ago: i64,
) -> ClosesSeen {
    ClosesSeen {
        stopped,
        billed_past: past,
        last: Some(h_wall - chrono::TimeDelta::hours(hours_ago)),
        found_within: None,
    }
}

fn t0_wall() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(1_796_000_000, 0).expect("fixed time")
}

fn says(h: &H, needle: &str) -> bool {
    h.event_texts().iter().any(|t| t.contains(needle))
}

#[test]
fn a_trust_earned_within_the_day_is_not_checked_again_from_nothing() {
    let (mut h, chutes) = chutes_hard(Some(seen(t0_wall(), 5, 0, 1)));
    let sent = h.dispatch();
    assert!(
        h.core.endpoints()[chutes].cancel_stops_billing,
        "five stops read within the day: trusted from the start"
    );
    assert!(says(
        &h,
        "chutes/int4: this directory's earlier runs read 5 closes that stopped the bill and 0 billed past it within the day: its closes are taken to stop the bill"
    ));
    assert!(!says(
        &h,
        "checking that closing a stream stops chutes/int4"
    ));
    let (checks, others): (Vec<Dispatch>, Vec<Dispatch>) = sent.into_iter().partition(|d| d.check);
    assert!(
        checks.len() <= 1,
        "one recheck of a trusted endpoint at most (it may have changed), not five: {}",
        checks.len()
    );
    assert!(
        others.len() >= 5,
        "ten go, not only what fits at worst case"
    );
    assert!(
        others.iter().all(|d| d.held_worst == Usd::ZERO),
        "at their expectation: a close there stops the bill"
    );
}

#[test]
fn without_what_earlier_runs_read_the_checks_go_as_before() {
    // Nothing carried, or readings older than a day: five checks, everything at worst case.
    for carried in [None, Some(seen(t0_wall(), 5, 0, 30))] {
        let (mut h, chutes) = chutes_hard(carried.clone());
        let sent = h.dispatch();
        assert!(
            !h.core.endpoints()[chutes].cancel_stops_billing,
            "{carried:?}"
        );
        assert!(says(
            &h,
            "checking that closing a stream stops chutes/int4's bill"
        ));
        assert!(!says(&h, "earlier runs read"), "{carried:?}");
        assert_eq!(sent.iter().filter(|d| d.check).count(), 5, "{carried:?}");
    }
}

#[test]
fn a_close_billed_past_within_the_day_doubts_the_endpoint_from_the_start() {
    let (mut h, chutes) = chutes_hard(Some(seen(t0_wall(), 7, 1, 2)));
    let sent = h.dispatch();
    assert!(!h.core.endpoints()[chutes].cancel_stops_billing);
    assert!(says(
        &h,
        "7 closes that stopped the bill and 1 billed past it within the day: a stream there is taken to cost its worst case"
    ));
    assert!(
        sent.iter().all(|d| !d.check && d.held_worst > Usd::ZERO),
        "no checks (one billed past is enough), every stream at its worst case"
    );
}

#[test]
fn an_endpoint_short_of_trust_is_checked_only_for_the_closes_it_lacks() {
    let (mut h, chutes) = chutes_hard(Some(seen(t0_wall(), 3, 0, 1)));
    let sent = h.dispatch();
    assert!(!h.core.endpoints()[chutes].cancel_stops_billing);
    assert!(says(&h, "2 more closes there are checked"));
    let checks: Vec<Dispatch> = sent.into_iter().filter(|d| d.check).collect();
    assert_eq!(checks.len(), 2);
    // The two read stopped: trusted, and each look-up's line keeps its reading.
    for d in &checks {
        h.result(AttemptResult {
            key: d.key,
            outcome: AttemptOutcome::Checked,
            endpoint: Some(chutes),
            streamed_tokens: 64,
            received_tokens: 64,
            booked_pico: 200_000_000,
            generation_id: Some(format!("gen-{}", d.key)),
            elapsed: Duration::from_secs(1),
        });
    }
    let mut readings = Vec::new();
    for (_, entry) in h.take_reconcile() {
        let fx = h.handle(Event::LookedUp {
            of: Asked::Closes,
            answer: found(entry, Some(0.0002), Some(66)),
        });
        readings.extend(fx.iter().filter_map(|e| match e {
            Effect::Ledger(l) if l.kind == SpendKind::Adjustment => Some(l.close),
            _ => None,
        }));
    }
    assert_eq!(readings, [Some(Close::Stopped); 2]);
    assert!(
        h.core.endpoints()[chutes].cancel_stops_billing,
        "3 + 2 stops"
    );
}

#[test]
fn the_expected_mode_weighs_carried_closes_as_its_own() {
    // Chutes is documented to stop the bill; two closes billed past within the day outweigh it.
    let cfg = config_documented(
        "routing = \"pinned\"\n[policy]\nexclude = [\"together\", \"moonshotai\", \"baseten\", \"novita\"]",
    );
    let mut h = H::new(cfg, kimi(), &[&["a"]]);
    let closes = HashMap::from([("chutes/int4".to_string(), seen(t0_wall(), 0, 2, 3))]);
    h.core = h.core.with_closes_before(&closes, t0_wall());
    let chutes = h.index("chutes/int4");
    assert!(
        h.core.endpoints()[chutes].cancel_stops_billing,
        "not before the first event"
    );
    h.dispatch();
    assert!(!h.core.endpoints()[chutes].cancel_stops_billing);
    assert!(
        h.take_repriced()
            .iter()
            .any(|(i, e)| *i == chutes && !e.cancel_stops_billing),
        "the workers' pool hears it"
    );
}

/// How long earlier runs' checks took to be found at `/generation` times a new start's checks:
/// with the API's records 20 s late, a recheck not found 25 s after its close is not overdue
/// (twice 20 s), where a start that carried nothing would suspend the endpoint's trust at the
/// 10 s floor and reserve worst cases for as long as the API lags (#51 item 6).
#[test]
fn a_carried_look_up_lag_times_the_new_starts_checks() {
    for (found_within, suspended_at_25s) in [(Some(Duration::from_secs(20)), false), (None, true)] {
        let mut carried = seen(t0_wall(), 5, 0, 1);
        carried.found_within = found_within;
        let (mut h, chutes) = chutes_hard(Some(carried));
        let sent = h.dispatch();
        if found_within.is_some() {
            assert!(says(
                &h,
                "its closes are taken to stop the bill; its checks were found at /generation within 20.0s of their close"
            ));
        }
        let check = sent
            .iter()
            .find(|d| d.check)
            .expect("a recheck of the trusted endpoint");
        h.result(AttemptResult {
            key: check.key,
            outcome: AttemptOutcome::Checked,
            endpoint: Some(chutes),
            streamed_tokens: 64,
            received_tokens: 64,
            booked_pico: 200_000_000,
            generation_id: Some("gen-recheck".into()),
            elapsed: Duration::from_secs(1),
        });
        assert_eq!(h.take_reconcile().len(), 1, "its look-up is out");
        h.at(25.0).tick();
        assert_eq!(
            !h.core.endpoints()[chutes].cancel_stops_billing,
            suspended_at_25s,
            "{found_within:?}"
        );
        assert_eq!(
            says(&h, "is not found at /generation 25s after the close"),
            suspended_at_25s,
            "{found_within:?}"
        );
        if found_within.is_some() {
            h.at(41.0).tick();
            assert!(!h.core.endpoints()[chutes].cancel_stops_billing);
            assert!(says(
                &h,
                "is not found at /generation 41s after the close, where its earlier checks were found within 20.0s"
            ));
        }
    }
}
