//! Named scenarios in the seeded world: the decisions the integration tests used to read off
//! the machine (streams open at once, seconds to an end, requests in a wall-clock window),
//! asserted in virtual time, where a loaded machine changes nothing.

use super::world::{Op, World};
use super::{Outcome, run};
use crate::config::BudgetMode;
use crate::domain::Usd;

/// A calm world of `streams` streams and `prompts` prompts, `max_tokens` 1,024, its budget
/// `budget_usd`, pinned or routed; no endpoint full (as the integration tests' simulator,
/// `SimConfig::fast_no_faults`).
fn world(
    mode: BudgetMode,
    streams: u32,
    prompts: usize,
    budget_usd: f64,
    routing: &'static str,
) -> World {
    let mut w = World::calm(7, mode);
    (w.concurrency, w.prompts, w.max_tokens, w.mean_len) = (streams, prompts, 1024, 300.0);
    (w.budget_usd, w.routing) = (budget_usd, routing);
    for b in &mut w.truth {
        b.capacity = None;
    }
    w
}

fn ok(o: &Outcome) {
    assert!(o.broken.is_empty(), "{:?}", o.broken);
}

/// The dollar cap's run at 2,000 streams (tests/it/budget_cap.rs measured it on the machine,
/// where a busy CI opened 1,346): the run goes to its full width, then the cap holds. Under the
/// hard budget with room for every worst case, 2,000 streams are in flight at once; with room
/// for a few hundred worst cases only, the last stretch sends the rest where a close stops the
/// bill (once checked), and the width holds there too.
#[test]
fn a_run_goes_to_its_full_width_before_the_dollar_cap() {
    for (mode, budget) in [
        (BudgetMode::Hard, 20.0),
        (BudgetMode::Hard, 2.0),
        (BudgetMode::Expected, 20.0),
    ] {
        let w = world(mode, 2000, 8000, budget, "openrouter");
        let o = run(&w);
        ok(&o);
        eprintln!(
            "{mode:?} ${budget}: peak {} answered {} billed {} {:?}",
            o.peak_in_flight,
            o.answered,
            Usd::from_pico(o.bill_pico),
            o.seen
        );
        // On $2 the hard budget's first seconds, before its checks have shown that closing a
        // stream stops Chutes' bill, hold worst cases: the width comes a little later, and
        // then the money holds it (each stream keeps a mean answer past its expectation; with
        // the simulator's log-normal lengths 1,627 at once when requests waited for the
        // checks; 1,487 since they go beside them at their worst case, which then holds its
        // room while it streams: the price of never emptying the run while look-ups lag).
        let width = if mode == BudgetMode::Hard && budget < 10.0 {
            1400
        } else {
            2000
        };
        assert!(
            o.peak_in_flight >= width,
            "{mode:?} on ${budget}: {}",
            o.peak_in_flight
        );
    }
}

/// One endpoint answers every request with 429 and `Retry-After: 1` (tests/it/engine_run.rs
/// timed it at under 30 s): pinned routing parks it for its wait and sends the prompts to the
/// others, so the run takes about as long as it does with that endpoint excluded, and the
/// parked endpoint is asked again about once a second, not hammered.
#[test]
fn a_429_storm_at_one_endpoint_does_not_slow_the_others() {
    let mut without = world(BudgetMode::Expected, 50, 400, 100.0, "pinned");
    let chutes = without.index("chutes/int4");
    let mut storm = without.clone();
    storm.truth[chutes].p429 = 1.0;
    without.ops = vec![(0.0, Op::Exclude(chutes))];
    let (w, s) = (run(&without), run(&storm));
    ok(&w);
    ok(&s);
    eprintln!(
        "without {:.1} s, storm {:.1} s, sent to chutes {} of {}",
        w.end_s, s.end_s, s.sent_to[chutes], s.requests
    );
    assert_eq!((s.answered, s.rejected), (400, 0));
    assert!(
        s.end_s <= w.end_s * 1.1,
        "{:.1} s against {:.1} s",
        s.end_s,
        w.end_s
    );
    assert!(
        s.sent_to[chutes] as f64 <= 4.0 * (s.end_s + 1.0),
        "{} requests to the storm",
        s.sent_to[chutes]
    );
}

/// The account's in-flight budget (tests/it/account.rs needed 700 streams open on the machine
/// to meet it): with learning off the run meets 402s to its end; learning a ceiling from them
/// settles under the budget, so the second half of the run meets at most a quarter as many.
#[test]
fn a_learned_ceiling_settles_under_the_inflight_budget_instead_of_a_storm() {
    let mut storm = world(BudgetMode::Expected, 500, 2000, 100.0, "openrouter");
    storm.account_usd = Some(0.4);
    storm.learn_inflight_budget = false;
    let mut learned = storm.clone();
    learned.learn_inflight_budget = true;
    let late = |o: &Outcome| o.busy_at.iter().filter(|t| **t > o.end_s / 2.0).count();
    let (s, l) = (run(&storm), run(&learned));
    ok(&s);
    ok(&l);
    eprintln!(
        "storm: {} 402s, {} late, {:.1} s; learned {} 402s, {} late, {:.1} s",
        s.busy_at.len(),
        late(&s),
        s.end_s,
        l.busy_at.len(),
        late(&l),
        l.end_s
    );
    assert!(late(&s) > 0, "the storm goes on in the second half");
    assert!(
        late(&l) * 4 <= late(&s),
        "{} late against {}",
        late(&l),
        late(&s)
    );
}

/// A stop now with 2,000 streams in flight (tests/it/hangup.rs timed a second Ctrl-C at under
/// 2 s): every stream closes at once, the run ends then, and what was closed stays pending.
/// A drain sends nothing more and ends when the last stream in flight at its start ends.
#[test]
fn a_stop_now_ends_at_once_and_a_drain_with_its_last_stream() {
    let mut w = world(BudgetMode::Expected, 2000, 8000, 100.0, "openrouter");
    w.ops = vec![(10.0, Op::StopNow)];
    let o = run(&w);
    ok(&o);
    eprintln!(
        "stop now: end {:.2} s, answered {} rejected {}",
        o.end_s, o.answered, o.rejected
    );
    assert!(o.end_s < 10.0 + 1e-6, "ended at {:.2} s", o.end_s);
    assert_eq!(o.rejected, 0);
    assert!(o.answered < 8000);
    w.ops = vec![(10.0, Op::Drain)];
    let o = run(&w);
    ok(&o);
    eprintln!(
        "drain: end {:.2} s, answered {} rejected {}",
        o.end_s, o.answered, o.rejected
    );
    assert!(o.answered < 8000);
    assert!(o.sent_at.iter().all(|t| *t <= 10.0));
}

/// Where every endpoint bills a close in full (Moonshot pinned), the expected budget mode
/// stops dispatching at the budget and lets what runs finish, paid for: it passes the budget
/// by the tail in flight (tests/it/budget_cap.rs needed the machine to hold enough streams
/// open); the hard mode holds their worst cases and stays under it.
#[test]
fn the_expected_mode_passes_the_budget_by_its_tail_where_closes_are_billed() {
    let only_moonshot = |mode| {
        let mut w = world(mode, 200, 2000, 0.5, "pinned");
        for (i, e) in w.endpoints.clone().iter().enumerate() {
            if e.tag != "moonshotai/int4" {
                w.ops.push((0.0, Op::Exclude(i)));
            }
        }
        w
    };
    let e = run(&only_moonshot(BudgetMode::Expected));
    let h = run(&only_moonshot(BudgetMode::Hard));
    ok(&e);
    ok(&h);
    let budget = Usd::from_f64(0.5).pico() as f64;
    eprintln!(
        "expected {:.4}, hard {:.4}",
        e.bill_pico as f64 / budget,
        h.bill_pico as f64 / budget
    );
    assert!(e.bill_pico as f64 > budget * 1.005);
    assert!(h.bill_pico as f64 <= budget * 1.005);
}

/// `requests_per_second = 20` (tests/it/engine_run.rs read the spacing off the simulator's
/// clock): after the first second's burst, no 21 requests leave within a second.
#[test]
fn requests_per_second_spaces_requests() {
    let mut w = world(BudgetMode::Expected, 200, 300, 100.0, "openrouter");
    w.requests_per_second = Some(20.0);
    let o = run(&w);
    ok(&o);
    let t = &o.sent_at;
    eprintln!("{} sent from {:.2} to {:.2}", t.len(), t[0], t[t.len() - 1]);
    assert_eq!(o.answered, 300);
    for i in 0..t.len().saturating_sub(41) {
        assert!(
            t[i + 41] - t[i] >= 1.0 - 1e-9,
            "41 requests within {:.3} s at {:.2} s",
            t[i + 41] - t[i],
            t[i]
        );
    }
    assert!(t[t.len() - 1] - t[0] >= (300.0 - 20.0) / 20.0 - 0.05);
}

/// reliability-probe-5 P16: an endpoint that stopped the bill at every check, then bills its
/// closes in full (toggled after the checks). The hard budget must doubt it before the cap's
/// closes there pass the budget: the bill stays within half a percent of it.
#[test]
fn an_endpoint_that_starts_billing_closes_after_its_checks_is_doubted_in_time() {
    let mut w = world(BudgetMode::Hard, 300, 3000, 0.5, "openrouter");
    // The probe's job: long answers, max_tokens 8,192.
    (w.max_tokens, w.mean_len) = (8192, 1700.0);
    let chutes = w.index("chutes/int4");
    w.truth[chutes].stops_billing = true;
    w.truth[chutes].bills_closes_from = Some(3.0);
    let o = run(&w);
    ok(&o);
    let budget = Usd::from_f64(0.5).pico() as f64;
    eprintln!(
        "bill {:.4} of the budget; {:?} sent {:?} to_budget {} end {}",
        o.bill_pico as f64 / budget,
        o.seen,
        o.sent_to,
        o.to_budget_s,
        o.end_s
    );
    assert!(
        o.bill_pico as f64 <= budget * 1.005,
        "bill {:.4} of the budget",
        o.bill_pico as f64 / budget
    );
}
