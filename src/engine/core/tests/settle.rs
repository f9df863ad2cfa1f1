//! The settling of what an earlier run left open (`core::settle`): what a start books, holds
//! and asks first, and how each look-up's answer is booked, decided with time passed in.

use super::*;
use crate::booked_cost::CostRefused;
use crate::engine::core::settle::Asked;
use crate::engine::core::settle::{KeyMoment, Landing, Leftovers};
use crate::store::output::{SpendEntry, SpendKind};
use crate::store::scan::{DirScan, LedgerScan};

fn t0_wall() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(1_796_000_000, 0).expect("fixed time")
}

/// A line of `kind` for prompt `id`, written `mins_ago` minutes before the test's time, at
/// `endpoint` (`None`: OpenRouter chose), expected to cost `expected` of a worst case of 0.05,
/// in the first dataset of [`core_in`].
fn line(
    kind: SpendKind,
    id: &str,
    endpoint: Option<&str>,
    mins_ago: i64,
    expected: f64,
) -> SpendEntry {
    let at = t0_wall() - chrono::TimeDelta::minutes(mins_ago);
    SpendEntry {
        endpoint: endpoint.map(Into::into),
        generation_id: Some(format!("gen-{id}")),
        attempt: Some(format!("r-{id}")),
        expected_usd: Some(Usd::from_f64(expected)),
        worst_usd: Some(Usd::from_f64(0.05)),
        ..SpendEntry::new(kind, crate::domain::rfc3339(at), id, "d0")
    }
}

fn core_in(mode: &str) -> H {
    let cfg = config(&format!(
        "budget_mode = \"{mode}\"\n[request]\nmax_tokens = 4096"
    ));
    H::new(cfg, kimi(), &[&["p1"]])
}

#[test]
fn each_look_up_is_booked_by_its_own_rule() {
    let closed = |usd: f64| SpendEntry {
        usd: Usd::from_f64(usd),
        estimated: true,
        ..line(SpendKind::Cancelled, "c", Some("moonshotai"), 1, 0.01)
    };
    let rebuilt = SpendEntry {
        attempt: Some(crate::store::scan::REBUILT.into()),
        usd: Usd::from_f64(0.004),
        ..line(SpendKind::Complete, "r", Some("chutes/int4"), 1, 0.004)
    };
    let open_at = |e: &str, mins| line(SpendKind::Started, "o", Some(e), mins, 0.01);
    let h = core_in("hard");
    let lost_moonshot = h.core.lost_cost(&open_at("moonshotai", 20));
    let lost_closed = h.core.lost_cost(&SpendEntry {
        usd: Usd::from_f64(0.002),
        estimated: true,
        ..line(SpendKind::Cancelled, "c", Some("moonshotai"), 20, 0.01)
    });
    type Case = (&'static str, SpendEntry, Option<f64>, Landing);
    let cases: Vec<Case> = vec![
        (
            "an open attempt the API knows: its cost",
            open_at("chutes/int4", 1),
            Some(0.0123),
            Landing::Found(Usd::from_f64(0.0123)),
        ),
        (
            "an open attempt unknown but recent: held, asked again",
            open_at("chutes/int4", 1),
            None,
            Landing::Open {
                refused: None,
                held: true,
                asked_again: false,
                reckoned: None,
            },
        ),
        (
            "an open attempt unknown for 20 min where a close is billed: what the core says",
            open_at("moonshotai", 20),
            None,
            Landing::Lost(lost_moonshot),
        ),
        (
            "a figure below zero: refused, held",
            open_at("chutes/int4", 1),
            Some(-0.01),
            Landing::Open {
                refused: Some(CostRefused::Negative(-0.01)),
                held: true,
                asked_again: false,
                reckoned: None,
            },
        ),
        (
            "a figure past the worst case, even when old: lost, not booked at it",
            open_at("moonshotai", 20),
            Some(3.0),
            Landing::Lost(lost_moonshot),
        ),
        (
            "a closed stream the API knows: an adjustment to its bill",
            closed(0.002),
            Some(0.009),
            Landing::Closed(Usd::from_f64(0.009)),
        ),
        (
            "a closed stream unknown for good where a close is billed: what a lost close costs",
            SpendEntry {
                usd: Usd::from_f64(0.002),
                estimated: true,
                ..line(SpendKind::Cancelled, "c", Some("moonshotai"), 20, 0.01)
            },
            None,
            Landing::Closed(lost_closed),
        ),
        (
            "a rebuilt line the API knows: its cost",
            rebuilt.clone(),
            Some(0.0041),
            Landing::Rebuilt(Usd::from_f64(0.0041)),
        ),
        (
            "a rebuilt line unknown: kept as it is, holding nothing",
            rebuilt,
            None,
            Landing::Open {
                refused: None,
                held: false,
                asked_again: false,
                reckoned: None,
            },
        ),
    ];
    for (what, entry, cost, want) in cases {
        assert_eq!(h.core.landing(&entry, cost, t0_wall()), want, "{what}");
    }
    assert_eq!(
        (lost_moonshot, lost_closed),
        (
            Usd::from_f64(4096.0 * 3.0e-6),
            Usd::from_f64(4096.0 * 3.0e-6)
        ),
        "under the hard budget an attempt lost where a close is billed costs its worst case \
         (max_tokens at the endpoint's price), and so does a closed stream booked below it"
    );
}

#[test]
fn a_start_books_the_unstarted_holds_the_open_and_asks_the_likely_billed_first() {
    let h = core_in("hard");
    let mut ledger = LedgerScan {
        unknown: vec![
            line(SpendKind::Dispatched, "u", Some("moonshotai"), 5, 0.003),
            line(SpendKind::Dispatched, "s", Some("chutes/int4"), 5, 0.003),
        ],
        open: vec![
            line(SpendKind::Started, "cheap", Some("chutes/int4"), 5, 0.002),
            line(SpendKind::Started, "dear", Some("chutes/int4"), 5, 0.02),
            line(SpendKind::Started, "billed", Some("moonshotai"), 5, 0.001),
            line(SpendKind::Started, "kept", Some("chutes/int4"), 5, 0.01),
        ],
        closed_unconfirmed: vec![line(SpendKind::Cancelled, "c", Some("moonshotai"), 5, 0.01)],
        ..LedgerScan::default()
    };
    ledger.rebuilt = vec![SpendEntry {
        attempt: Some(crate::store::scan::REBUILT.into()),
        ..line(SpendKind::Complete, "r", Some("chutes/int4"), 5, 0.004)
    }];
    let mut scan = DirScan {
        ledger,
        ..DirScan::default()
    };
    // The answer of "kept" is among the outputs: booked from its record, not looked up.
    let mut kept = crate::store::scan::DatasetScan::default();
    kept.existing.generation_ids.insert("gen-kept".into());
    scan.datasets.push(kept);
    let left = Leftovers::from_scan(&scan);
    assert_eq!(
        left.open_look_ups(),
        (4, Usd::from_f64(0.002 + 0.02 + 0.001 + 0.01)),
        "three open attempts and one closed stream may still add what each expected"
    );
    let opening = h.core.opening(left, true);
    let ids = |v: &[(String, SpendEntry)]| v.iter().map(|(_, e)| e.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(&opening.look_ups),
        ["billed", "dear", "cheap", "c", "r"],
        "billed past the crash first, then dearest; closed streams; rebuilt lines"
    );
    assert_eq!(opening.kinds, (3, 1, 1));
    let held: Vec<&str> = opening.held.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        held,
        ["billed", "cheap", "dear", "c"],
        "in the order written (here by attempt); rebuilt lines hold nothing"
    );
    let booked = |estimates: &[(SpendEntry, Usd)]| {
        (estimates.iter())
            .map(|(e, usd)| (e.id.clone(), *usd))
            .collect::<Vec<_>>()
    };
    let u = &scan.ledger.unknown[0];
    assert_eq!(u.id, "u");
    let worst = h.core.lost_cost(u);
    assert_eq!(
        worst,
        Usd::from_f64(4096.0 * 3.0e-6),
        "max_tokens at its price"
    );
    assert_eq!(
        booked(&opening.estimates),
        [("s".into(), Usd::from_f64(0.003)), ("u".into(), worst)],
        "a request that never started is booked as a lost attempt: at its worst case under \
         the hard budget where the endpoint may have generated it in full (HARVEST_SIM_SEED=733 passed the budget by 0.61% booking such \
         at their expectation), at its expectation where a close stops the bill"
    );
    let expected = core_in("expected")
        .core
        .opening(Leftovers::from_scan(&scan), true);
    assert_eq!(
        booked(&expected.estimates),
        [
            ("s".into(), Usd::from_f64(0.003)),
            ("u".into(), Usd::from_f64(0.003))
        ],
        "the expected budget books the expectation (the key's true-up corrects both)"
    );

    let no_key = h.core.opening(Leftovers::from_scan(&scan), false);
    assert_eq!(no_key.estimates.len(), 2, "booked without a key too");
    assert!(
        no_key.held.is_empty() && no_key.look_ups.is_empty(),
        "nothing is held or asked that no look-up can settle"
    );
}

/// Near the cap, a crash's leftovers that `/generation` did not know on the first ask: the run
/// waits for the later passes where their settling at their expectation would make room, and
/// stops where it would not (or nothing asks again). Stopping at once left a restarted run
/// with its budget unspent (`scripts/crash-restart.sh` 20 s after the kill with `/generation`
/// 40 s behind: $0.0036 of $0.50 spent and stopped; waiting, $0.4755 billed, ledger = bill).
#[test]
fn a_start_waits_for_bills_asked_again_only_where_they_may_make_room() {
    let cases: &[(&str, bool, f64, bool)] = &[
        (
            "asked again, likely far below their worst cases: waits",
            true,
            0.004,
            false,
        ),
        ("not asked again by this run: stops", false, 0.004, true),
        (
            "asked again, likely their worst cases: nothing to wait for",
            true,
            0.03,
            true,
        ),
    ];
    for &(what, asked_again, expected, stops) in cases {
        let cfg = config(
            "budget_usd = 0.06\nconcurrency = 50\nrouting = \"pinned\"\n[request]\n\
             max_tokens = 8192\n[policy]\nexclude = [\"chutes\", \"together\"]",
        );
        let mut h = H::new(cfg, kimi(), &[&["p1", "p2", "p3"]]);
        let open = |g: &str| SpendEntry {
            endpoint: Some("moonshotai".into()),
            prompt_tokens: 10,
            generation_id: Some(g.into()),
            attempt: Some(format!("old-{g}")),
            expected_usd: Some(Usd::from_f64(expected)),
            ..SpendEntry::new(SpendKind::Started, "t".into(), format!("x{g}"), "d0")
        };
        h.core = (h.core).with_leftovers(Leftovers::of(vec![open("g1"), open("g2")], vec![]));
        h.handle(Event::Open { can_look_up: true });
        for g in ["g1", "g2"] {
            // Unknown on the first ask: asked again by later passes; or, unknown when the
            // look-ups stopped, not asked again by this run.
            let answer = if asked_again {
                Box::new(crate::engine::look_ups::LookedUp::NotOnFirstPass(open(g)))
            } else {
                found(open(g), None, None)
            };
            h.handle(Event::LookedUp {
                of: Asked::Leftovers,
                answer,
            });
        }
        assert_eq!(
            h.dispatch().len(),
            0,
            "{what}: nothing fits beside the holds"
        );
        assert_eq!(h.core.stopping().is_some(), stops, "{what}");
        let said = (h.event_texts().iter()).any(|t| t.contains("waiting for their look-ups"));
        assert_eq!(said, !stops, "{what}: the log says why it waits");
    }
}

/// The key's usage through the door (`Event::KeyUsage`): a start's checkpoint is a true-up's
/// base only with nothing left open and no crash estimate waiting; a crash's lost attempts
/// count as estimates; at the end, with no look-up out, the estimates the key's count
/// explains are trued up in one line and the live spend told ([`Effect::Spent`]).
#[test]
fn the_keys_count_trues_up_the_crash_estimates_it_explains() {
    use crate::store::output::KeyCheckpoint;
    use crate::store::scan::KeyBase;
    let usd = Usd::from_f64;
    let key = |h: &mut H, usage: f64, spent: f64, moment: KeyMoment| {
        let fx = h.handle(Event::KeyUsage {
            usage,
            spent: usd(spent),
            moment,
        });
        let lines: Vec<SpendEntry> = (fx.iter())
            .filter_map(|e| match e {
                Effect::Ledger(l) => Some(l.clone()),
                _ => None,
            })
            .collect();
        let told: Vec<Usd> = (fx.iter())
            .filter_map(|e| match e {
                Effect::Spent(u) => Some(*u),
                _ => None,
            })
            .collect();
        (lines, told)
    };
    let end = |look_ups_out| KeyMoment::End {
        look_ups_out,
        stopping_now: false,
    };
    let checkpoint = |l: &SpendEntry| {
        l.checkpoint
            .map(|c| (c.key_usage_usd, c.ledger_usd, c.quiet))
    };

    // A first start with nothing left: a quiet checkpoint, the base.
    let mut h = core_in("hard");
    let (lines, _) = key(&mut h, 1.0, 0.5, KeyMoment::Start { left_open: false });
    assert_eq!(lines.len(), 1);
    assert_eq!(checkpoint(&lines[0]), Some((1.0, usd(0.5), true)));
    // A crash's request booked as lost at 0.02, billed 0.015 (the key grew 0.015).
    // Unknown at /generation 20 minutes on: booked as lost, at its expectation.
    h.handle(Event::LookedUp {
        of: Asked::Leftovers,
        answer: found(
            line(SpendKind::Started, "o", Some("moonshotai"), 20, 0.02),
            None,
            None,
        ),
    });
    // With a look-up still out: no true-up, and the end is no base.
    let (lines, told) = key(&mut h, 1.015, 0.52, end(1));
    assert!(told.is_empty());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(checkpoint(&lines[0]), Some((1.015, usd(0.52), false)));
    // With none: the estimate is trued up to what the key counted.
    let (lines, told) = key(&mut h, 1.015, 0.52, end(0));
    assert_eq!(told, [usd(-0.005)]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        (lines[0].kind, lines[0].id.as_str()),
        (SpendKind::Adjustment, "key-true-up")
    );
    assert_eq!(lines[0].usd, usd(-0.005));
    assert_eq!(
        checkpoint(&lines[1]),
        Some((1.015, usd(0.515), true)),
        "after the true-up"
    );
    assert!(
        h.event_texts().iter().any(|t| t.contains(
            "the 1 requests crashes left unanswered, booked at 0.020000 USD expected, cost 0.015000"
        )),
        "{:?}",
        h.event_texts()
    );

    // A start from a directory whose estimates wait for a true-up is no new base: a base after
    // them would leave them out of every true-up.
    let base = KeyBase {
        checkpoint: KeyCheckpoint {
            key_usage_usd: 1.0,
            ledger_usd: usd(0.5),
            quiet: true,
        },
        estimated: usd(0.02),
        estimated_lines: 1,
    };
    let mut h = core_in("hard");
    h.core = h.core.with_key_base(Some(base));
    let (lines, _) = key(&mut h, 1.01, 0.52, KeyMoment::Start { left_open: false });
    assert_eq!(checkpoint(&lines[0]), Some((1.01, usd(0.52), false)));
    // A key that grew far more than the estimates explain (shared with other work): said, and
    // the estimates stay.
    let (lines, told) = key(&mut h, 2.0, 0.52, end(0));
    assert!(told.is_empty());
    assert_eq!(lines.len(), 1, "only the checkpoint: {lines:?}");
    assert!(
        (h.event_texts().iter()).any(|t| t.contains("more than crash estimates explain")),
        "{:?}",
        h.event_texts()
    );
}

/// A stream closed where the close is billed in full and still unknown to `/generation` when
/// the run stops asking was still running there (the API records a generation when it ends):
/// its expectation is reckoned again past what it has run on since, and a `reckoned` line
/// says so. Where that says nothing more, nothing is written.
#[test]
fn a_close_still_unknown_is_expected_to_have_run_on() {
    let top = "budget_mode = \"expected\"\nconcurrency = 20\nrouting = \"pinned\"\n\
               [request]\nmax_tokens = 4096\n[policy]\nexclude = [\"chutes\", \"together\"]";
    let ids: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = H::new(config(top), kimi(), &[&ids]);
    let sent = h.dispatch();
    let moonshot = h.index("moonshotai");
    let cost =
        |d: &Dispatch, n: u64| d.price_in.cost(d.prompt_tokens) + d.fee + d.price_out.cost(n);
    // Ten answers end at Moonshot (1,000 to 1,900 tokens), each decoded at 50 tokens a second.
    for (i, d) in sent[..10].iter().enumerate() {
        let n = 1000 + 100 * i as u64;
        let mut r = done(d.key, Some(moonshot), n, cost(d, n).as_f64(), "stop");
        if let AttemptOutcome::Done(c) = &mut r.outcome {
            c.latency = Duration::from_millis(300) + Duration::from_secs_f64(n as f64 / 50.0);
        }
        h.result(r);
    }
    let pace = h
        .core
        .fleet
        .transit("moonshotai")
        .expect("its transit")
        .pace()
        .expect("learned");
    assert!((pace - 50.0).abs() < 0.5, "{pace}");
    // A stream closed there at 1,200 tokens.
    let d = &sent[10];
    let effects = h.result(cancelled(
        d.key,
        Some(moonshot),
        1200,
        cost(d, 1200).as_f64(),
    ));
    let closed = (line_of(&effects, SpendKind::Cancelled).cloned()).expect("a closed line");
    assert_eq!(
        closed.received_tokens,
        Some(1200),
        "its received tokens are on its line"
    );
    let wrote = closed.expected_usd.expect("its expectation");
    let closed_at = h.now.wall;
    let after = |secs: i64| closed_at + chrono::TimeDelta::seconds(secs);
    let reckon = |h: &H, e: &SpendEntry, secs| match h.core.landing(e, None, after(secs)) {
        Landing::Open { reckoned, .. } => reckoned,
        other => panic!("an unknown close is left open, not {other:?}"),
    };
    // Unknown 8 s after the close: it has run on for 400 tokens at least, and of the answers
    // that ended those past 1,600 run on longer than those past 1,200.
    let later = reckon(&h, &closed, 8).expect("reckoned again");
    let price = crate::domain::Price::per_million_f64(3.0).expect("Moonshot's price");
    assert!(later > wrote, "{later:?} against {wrote:?}");
    assert!(
        later - closed.usd >= price.cost(400),
        "at least what it ran on: {later:?}"
    );
    assert!(
        later <= closed.worst_usd.expect("a bound"),
        "never past its worst case"
    );
    // (what, the line, seconds unknown)
    let cases = [
        (
            "asked at once: its absence says nothing yet",
            closed.clone(),
            0,
        ),
        (
            "unknown 60 s: 3,000 tokens more would be past max_tokens: its absence is the API's",
            closed.clone(),
            60,
        ),
        (
            "a line that predates the received count",
            SpendEntry {
                received_tokens: None,
                ..closed.clone()
            },
            8,
        ),
        (
            "at an endpoint where a close stops the bill: an unknown close says nothing",
            SpendEntry {
                endpoint: Some("chutes/int4".into()),
                ..closed.clone()
            },
            8,
        ),
    ];
    for (what, e, secs) in cases {
        assert_eq!(reckon(&h, &e, secs), None, "{what}");
    }
    // Booked through the door: a zero-dollar `reckoned` line of the same attempt.
    h.now = h.t0.after(Duration::from_secs(8));
    let effects = h.handle(Event::LookedUp {
        of: Asked::Closes,
        answer: found(closed.clone(), None, None),
    });
    let line = effects
        .iter()
        .find_map(|x| match x {
            Effect::Ledger(l) if l.kind == SpendKind::Reckoned => Some(l),
            _ => None,
        })
        .expect("a reckoned line");
    assert_eq!(
        (line.usd, line.expected_usd, &line.attempt),
        (Usd::ZERO, Some(later), &closed.attempt)
    );
}

/// A stream closed before its first chunk has no generation id, so no look-up can say what it
/// cost. Where a close may be billed in full the provider answers on and bills it all: booked
/// at once as a lost attempt is (its expectation; its worst case under the hard budget), an
/// estimate the key's true-up corrects, and the live spend told. Where every endpoint it could
/// be at stops the bill, or it named its generation (a look-up settles it), nothing more.
#[test]
fn a_stream_closed_before_it_named_its_generation_is_booked_as_a_lost_attempt() {
    let mut stops = ep("stops/int4", "Stops", "int4", 0.50, 2.00);
    let mut bills = ep("bills/int4", "Bills", "int4", 0.50, 3.00);
    stops.cancel_stops_billing = true;
    bills.cancel_stops_billing = false;
    // (what, budget mode, endpoints, a generation id, the lost attempt booked: expectation
    // or worst case)
    type Case = (
        &'static str,
        &'static str,
        Vec<RunEndpoint>,
        bool,
        Option<bool>,
    );
    let cases: Vec<Case> = vec![
        (
            "routed where one bills a close: its expectation",
            "expected",
            vec![stops.clone(), bills.clone()],
            false,
            Some(false),
        ),
        (
            "the same under the hard budget: its worst case",
            "hard",
            vec![stops.clone(), bills.clone()],
            false,
            Some(true),
        ),
        (
            "where every endpoint stops the bill at a close: what was decoded before the \
             provider noticed, at the endpoint's transit (its expectation past the booking)",
            "hard",
            vec![stops.clone()],
            false,
            Some(false),
        ),
        (
            "it named its generation: a look-up settles it",
            "expected",
            vec![stops.clone(), bills.clone()],
            true,
            None,
        ),
    ];
    for (what, mode, eps, named, want) in cases {
        let top = format!("budget_mode = \"{mode}\"\n[request]\nmax_tokens = 4096");
        let mut h = H::new(config(&top), eps, &[&["a"]]);
        let sent = h.dispatch();
        assert_eq!(sent.len(), 1, "{what}");
        let d = &sent[0];
        let mut r = cancelled(d.key, None, 0, 0.0);
        if !named {
            r.generation_id = None;
        }
        let effects = h.result(r);
        // One line closes the attempt, whole: a crash between two could lose the estimate.
        let lines = ledger(&effects);
        assert_eq!(lines.len(), 1, "{what}: {lines:?}");
        let lost = line_of(&effects, SpendKind::Unknown).map(|l| l.usd);
        let told = effects.iter().find_map(|x| match x {
            Effect::Spent(u) => Some(*u),
            _ => None,
        });
        assert_eq!(told, lost, "{what}: the live spend is told as much");
        match want {
            None => assert_eq!(lines[0].0, SpendKind::Cancelled, "{what}"),
            Some(true) => {
                assert!(
                    d.held_worst > Usd::ZERO,
                    "{what}: the hard budget held its worst case"
                );
                assert_eq!(lost, Some(d.held_worst), "{what}");
            }
            Some(false) => {
                let lost = lost.expect("booked as a lost attempt");
                assert!(
                    lost > Usd::ZERO && (d.held_worst == Usd::ZERO || lost < d.held_worst),
                    "{what}: its expectation, not its worst case: {lost:?}"
                );
            }
        }
    }
}

/// A close before the first chunk where the close stops the bill is booked at the tokens in
/// transit (the seeded world 1142: booked at nothing, the provider's bill for what it decoded
/// before it noticed was key usage no estimate explained, and the end's true-up of every crash
/// estimate was refused). Its bill is known as soon as the provider stops, so the end trues
/// it up at once.
#[test]
fn a_close_before_the_first_chunk_at_a_stopper_is_trued_up_at_the_end() {
    let mut stops = ep("stops/int4", "Stops", "int4", 0.50, 2.00);
    stops.cancel_stops_billing = true;
    let top = "budget_mode = \"expected\"\n[request]\nmax_tokens = 4096";
    let mut h = H::new(config(top), vec![stops], &[&["a"]]);
    h.handle(Event::KeyUsage {
        usage: 1.0,
        spent: Usd::ZERO,
        moment: KeyMoment::Start { left_open: false },
    });
    let sent = h.dispatch();
    let mut r = cancelled(sent[0].key, None, 0, 0.0);
    r.generation_id = None;
    let fx = h.result(r);
    let transit = (line_of(&fx, SpendKind::Unknown).map(|l| l.usd)).expect("booked at its transit");
    assert!(transit > Usd::ZERO);
    // A minute on, the key counts what the provider billed: a fifth more than the estimate.
    h.at(60.0);
    let billed = Usd::from_pico(transit.pico() * 6 / 5);
    let fx = h.handle(Event::KeyUsage {
        usage: 1.0 + billed.as_f64(),
        spent: transit,
        moment: KeyMoment::End {
            look_ups_out: 0,
            stopping_now: false,
        },
    });
    let true_up = (fx.iter()).find_map(|e| match e {
        Effect::Ledger(l) if l.id == "key-true-up" => Some(l.usd),
        _ => None,
    });
    let off = (true_up.expect("trued up at the end") - (billed - transit))
        .pico()
        .abs();
    assert!(off <= 1_000_000, "{true_up:?} against {billed:?} billed");
}

/// A timeout is not a close of harvest's: an error answer or a connection never made, which no
/// provider bills. And a close booked as a lost attempt holds the key's true-up while its bill
/// may still come: a true-up at the run's end would take the estimate back, and the bill,
/// landing later, would be booked nowhere.
#[test]
fn a_lost_close_is_not_trued_up_before_its_bill_can_have_come() {
    use crate::openrouter::{ApiError, TimeoutKind};
    let mut stops = ep("stops/int4", "Stops", "int4", 0.50, 2.00);
    let mut bills = ep("bills/int4", "Bills", "int4", 0.50, 3.00);
    stops.cancel_stops_billing = true;
    bills.cancel_stops_billing = false;
    let top = "budget_mode = \"expected\"\n[request]\nmax_tokens = 4096";
    let mut h = H::new(config(top), vec![stops, bills], &[&["a", "b"]]);
    let key = |h: &mut H, usage: f64, spent: Usd, moment: KeyMoment| -> Vec<SpendEntry> {
        let fx = h.handle(Event::KeyUsage {
            usage,
            spent,
            moment,
        });
        (fx.into_iter())
            .filter_map(|e| match e {
                Effect::Ledger(l) => Some(l),
                _ => None,
            })
            .collect()
    };
    key(
        &mut h,
        1.0,
        Usd::ZERO,
        KeyMoment::Start { left_open: false },
    );
    let sent = h.dispatch();
    assert_eq!(sent.len(), 2);
    // A timeout before the first chunk: no lost attempt.
    let lost = |fx: &[Effect]| {
        fx.iter().find_map(|x| match x {
            Effect::Ledger(l) if l.kind == SpendKind::Unknown => Some(l.usd),
            _ => None,
        })
    };
    let timeout = failed(sent[0].key, None, ApiError::Timeout(TimeoutKind::Idle));
    assert_eq!(
        lost(&h.result(timeout)),
        None,
        "a timeout books no lost attempt"
    );
    // harvest closes the other before its first chunk: a lost attempt.
    let mut r = cancelled(sent[1].key, None, 0, 0.0);
    r.generation_id = None;
    let spent = lost(&h.result(r)).expect("our close is booked as a lost attempt");
    let end = KeyMoment::End {
        look_ups_out: 0,
        stopping_now: false,
    };
    let trued_up = |lines: &[SpendEntry]| lines.iter().any(|l| l.id == "key-true-up");
    let quiet = |lines: &[SpendEntry]| {
        lines
            .iter()
            .find_map(|l| l.checkpoint.map(|c| c.quiet))
            .expect("a checkpoint")
    };
    // The run ends a minute on, the key's count without that bill yet.
    h.at(60.0);
    let lines = key(&mut h, 1.0, spent, end);
    assert!(
        !trued_up(&lines),
        "no true-up while its bill may come: {lines:?}"
    );
    assert!(!quiet(&lines), "nor a base that would leave it out");
    // Past UNKNOWN_AFTER (another end, as a later run's), the key's count is trued up to.
    h.at(16.0 * 60.0);
    let lines = key(&mut h, 1.0, spent, end);
    assert!(
        trued_up(&lines),
        "trued up once its bill would have come: {lines:?}"
    );
}

/// The end of a run with a closed stream at an endpoint that bills a close in full, as the
/// driver may end its look-ups: nothing asked (a stop-now first), the deadline passing with the
/// look-up still out, or the look-up landing first. What is said, what stays unconfirmed for
/// the next start, and what the end asks, are the core's (`settle/closes.rs`).
#[test]
fn the_end_of_a_run_settles_its_closed_streams_as_its_look_ups_went() {
    use crate::engine::core::settle::LookUpsEnd;
    let mut bills = ep("bills/int4", "Bills", "int4", 0.50, 3.00);
    bills.cancel_stops_billing = false;
    // (what, how the end stopped asking, whether the look-up landed first, said, unconfirmed)
    let cases = [
        (
            "a stop-now: nothing asked",
            LookUpsEnd::NotAsked,
            false,
            "not confirmed at /generation (stopped now)",
            1,
        ),
        (
            "the deadline with the look-up out",
            LookUpsEnd::Deadline,
            false,
            "not confirmed at /generation (not known within 8s)",
            1,
        ),
        (
            "the look-up landed first",
            LookUpsEnd::Deadline,
            true,
            "reconciled 1 closed streams with /generation",
            0,
        ),
    ];
    for (what, how, landed, said, left) in cases {
        let top = "budget_mode = \"expected\"\n[request]\nmax_tokens = 4096";
        let mut h = H::new(config(top), vec![bills.clone()], &[&["a"]]);
        let sent = h.dispatch();
        assert_eq!(sent.len(), 1, "{what}");
        h.result(cancelled(sent[0].key, Some(0), 40, 0.0001));
        // Asked as soon as the close is decided, in the background until it ages out.
        let asked = h.take_reconcile();
        assert_eq!(asked.len(), 1, "{what}: asked at once");
        if landed {
            let entry = asked[0].1.clone();
            h.handle(Event::LookedUp {
                of: Asked::Closes,
                answer: found(entry, Some(0.0002), Some(60)),
            });
        }
        h.at(30.0);
        let fx = h.handle(Event::EndLookUps);
        let end_asks = fx.iter().any(|e| matches!(e, Effect::LookUp { .. }));
        assert!(
            !end_asks,
            "{what}: asked already, when its close was decided"
        );
        let announced = (h.event_texts().iter()).any(|t| t.starts_with("looking up what 1 closed"));
        assert_eq!(announced, !landed, "{what}: the end says what it waits for");
        h.handle(Event::LookUpsEnded(how));
        assert!(
            h.event_texts().iter().any(|t| t.contains(said)),
            "{what}: {:?}",
            h.event_texts()
        );
        let open = h.core.open_look_ups();
        assert_eq!(open.count, left, "{what}: left open for the next start");
        assert_eq!(
            open.expected > Usd::ZERO,
            left > 0,
            "{what}: what it may still add"
        );
    }
}

/// A start settles what an earlier run left through the door: `Event::Open` books the request
/// that never started, holds and asks about the open attempts and the unconfirmed close (most
/// likely billed first); each answer is booked and counted; and `Event::LeftoversEnded` says
/// what they found and, when the work was over first, what is left for the next start, which
/// the open look-ups then count.
#[test]
fn a_start_settles_what_an_earlier_run_left_as_the_answers_land() {
    use crate::engine::look_ups::LookedUp;
    use crate::store::scan::{DirScan, LedgerScan};
    let scan = || {
        let ledger = LedgerScan {
            unknown: vec![line(
                SpendKind::Dispatched,
                "u",
                Some("moonshotai"),
                5,
                0.003,
            )],
            open: vec![
                line(SpendKind::Started, "a", Some("chutes/int4"), 5, 0.002),
                line(SpendKind::Started, "b", Some("moonshotai"), 5, 0.004),
            ],
            closed_unconfirmed: vec![SpendEntry {
                usd: Usd::from_f64(0.001),
                estimated: true,
                ..line(SpendKind::Cancelled, "c", Some("moonshotai"), 5, 0.006)
            }],
            ..LedgerScan::default()
        };
        DirScan {
            ledger,
            ..DirScan::default()
        }
    };
    // (what, answers: (id, cost) in the order they land, all in, said, open look-ups after)
    type Case<'a> = (
        &'a str,
        &'a [(&'a str, Option<f64>)],
        bool,
        &'a [&'a str],
        u64,
    );
    let cases: [Case; 3] = [
        (
            "every answer in",
            &[("b", Some(0.0035)), ("a", Some(0.0015)), ("c", Some(0.005))],
            true,
            &[
                "streams an earlier run closed: 1 of 1 confirmed at /generation (+0.004000 USD",
                "looked up 2 requests an earlier run left in flight: 2 found at the API, 0 \
                 unknown",
            ],
            0,
        ),
        (
            "the work ended with two still out",
            &[("b", Some(0.0035))],
            false,
            &[
                "looked up 2 requests an earlier run left in flight: 1 found at the API",
                "streams an earlier run closed: 0 of 1 confirmed at /generation (+0.000000 USD \
                 against their estimates); the others hold their money",
                "2 look-ups of requests an earlier run left open were still running when the \
                 work was done",
            ],
            2,
        ),
        (
            "one unknown on its first ask, asked again",
            &[("b", Some(0.0035)), ("a", None), ("c", Some(0.005))],
            false,
            &[
                "1 found at the API, 0 unknown",
                "the others are too recent to give up on",
            ],
            1,
        ),
    ];
    for (what, answers, all_in, said, left) in cases {
        let mut h = core_in("hard");
        h.core = h.core.with_leftovers(Leftovers::from_scan(&scan()));
        let fx = h.handle(Event::Open { can_look_up: true });
        assert_eq!(
            ledger(&fx).first().map(|(k, _)| *k),
            Some(SpendKind::Unknown),
            "{what}: the request that never started is booked as lost"
        );
        let asked: Vec<String> = (h.take_reconcile().into_iter())
            .map(|(_, e)| e.id)
            .collect();
        assert_eq!(
            asked,
            ["b", "a", "c"],
            "{what}: likely billed, dearest, then the close"
        );
        assert!(
            h.event_texts()
                .iter()
                .any(|t| t.contains("2 requests in flight")),
            "{what}"
        );
        let entry = |id: &str| match id {
            "c" => scan().ledger.closed_unconfirmed[0].clone(),
            _ => (scan().ledger.open.into_iter())
                .find(|e| e.id == id)
                .expect("an open attempt"),
        };
        for (id, cost) in answers.iter().copied() {
            let answer = match cost {
                Some(_) => found(entry(id), cost, None),
                None => Box::new(LookedUp::NotOnFirstPass(entry(id))),
            };
            h.handle(Event::LookedUp {
                of: Asked::Leftovers,
                answer,
            });
        }
        h.handle(Event::LeftoversEnded { all_in });
        let texts = h.event_texts();
        for s in said {
            assert!(
                texts.iter().any(|t| t.contains(s)),
                "{what}: {s}\n{texts:#?}"
            );
        }
        if all_in {
            assert!(
                !texts.iter().any(|t| t.contains("still running")),
                "{what}: {texts:#?}"
            );
        }
        assert_eq!(h.core.open_look_ups().count, left, "{what}");
    }
}
