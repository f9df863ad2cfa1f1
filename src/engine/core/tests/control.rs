//! Control: operator commands, the end of a run, listing refreshes, the booking of what a crash
//! or a closed stream left to settle, and quality findings.

use super::super::Event;
use super::*;
use crate::engine::core::settle::Asked;
use crate::engine::quality::{Deviation, Finding};
use crate::engine::reason::{OffReason, StopReason};
use crate::engine::{Command, ShutdownMode};
use crate::openrouter::ModelEndpoints;
use crate::store::output::{SpendEntry, SpendKind};

/// A listing of `(tag, provider, quantization)`, at $1/$2 per million tokens.
fn listing(eps: &[(&str, &str, &str)]) -> ModelEndpoints {
    let endpoints: Vec<serde_json::Value> = eps
        .iter()
        .map(|(tag, provider, quant)| {
            serde_json::json!({
                "provider_name": provider,
                "tag": tag,
                "quantization": quant,
                "pricing": {"prompt": "0.000001", "completion": "0.000002"},
                "status": 0,
                "uptime_last_30m": 99.5,
            })
        })
        .collect();
    let body = serde_json::json!({"data": {"id": "moonshotai/kimi-k2.5", "endpoints": endpoints}});
    ModelEndpoints::parse(body.to_string().as_bytes()).expect("listing parses")
}

/// The five endpoints of `kimi()`, as listed.
const KIMI: [(&str, &str, &str); 5] = [
    ("chutes/int4", "Chutes", "int4"),
    ("together/int4", "Together", "int4"),
    ("moonshotai", "Moonshot AI", "int4"),
    ("baseten/fp4", "BaseTen", "fp4"),
    ("novita", "Novita", "unknown"),
];

/// Hands the core listing `l`; returns the endpoints it asks to join the pool.
fn refresh(h: &mut H, l: &ModelEndpoints) -> Vec<RunEndpoint> {
    let cfg = h.core.config().clone();
    let endpoints = (l.endpoints.iter())
        .map(|e| crate::engine::pool::from_listing(&cfg, e))
        .collect();
    (h.handle(Event::Listing(endpoints)).into_iter())
        .filter_map(|e| match e {
            Effect::Join(e) => Some(*e),
            _ => None,
        })
        .collect()
}

fn open_line(id: &str, dataset: &str) -> SpendEntry {
    SpendEntry {
        endpoint: Some("chutes/int4".into()),
        prompt_tokens: 7,
        estimated: true,
        attempt: Some("old-3".into()),
        expected_usd: Some(Usd::from_f64(0.004)),
        ..SpendEntry::new(
            SpendKind::Dispatched,
            "2026-01-01T00:00:00Z".into(),
            id,
            dataset,
        )
    }
}

#[test]
fn pause_holds_new_requests_and_resume_lets_them_go() {
    let mut h = H::new(config(""), kimi(), &[&["a", "b", "c", "d", "e", "f"]]);
    let effects = h.command(Command::Pause);
    assert!(effects.is_empty());
    assert!(h.core.paused());
    assert!(h.dispatch().is_empty(), "paused");
    assert!(!h.core.is_over(), "a paused run is not over");
    h.command(Command::Resume);
    assert!(!h.core.paused());
    assert_eq!(h.dispatch().len(), 4);
    let texts = h.event_texts();
    assert_eq!(texts, vec!["paused: no new requests", "resumed"]);
}

/// A viewer's command (wrapped by the control socket's server) acts as the same command from
/// the run's own terminal, and the event log names the viewer, so every viewer sees who did it.
#[test]
fn a_viewers_command_acts_and_the_event_log_names_the_viewer() {
    use crate::engine::control::Viewer;
    let by = |c: Command| Command::By(Viewer { pid: 4242 }, Box::new(c));
    let cases: Vec<(&str, Command, &str)> = vec![
        (
            "pause",
            by(Command::Pause),
            "paused by operator (pid 4242): no new requests",
        ),
        (
            "exclude",
            by(Command::SetEndpoint {
                tag: "chutes/int4".into(),
                allowed: Some(false),
            }),
            "operator (pid 4242) excluded chutes/int4 (applies to the next request)",
        ),
        (
            "toggle",
            by(Command::ToggleEndpoint("chutes/int4".into())),
            "operator (pid 4242) excluded chutes/int4 (applies to the next request)",
        ),
        (
            "concurrency",
            by(Command::AdjustConcurrency(-1)),
            "concurrency set to 3 by operator (pid 4242)",
        ),
        (
            "policy",
            by(Command::Preset(crate::policy::PolicyMode::Any)),
            "policy: any quantization by operator (pid 4242)",
        ),
        (
            "drain",
            by(Command::Shutdown(ShutdownMode::Drain)),
            "operator (pid 4242) asked for a drain",
        ),
    ];
    for (name, cmd, text) in cases {
        let mut h = H::new(config(""), kimi(), &[&["a", "b", "c", "d", "e", "f"]]);
        let local = cmd.clone();
        h.command(cmd);
        let texts = h.event_texts();
        assert_eq!(texts.first().map(String::as_str), Some(text), "{name}");
        // The same effect as the command given locally.
        let mut l = H::new(config(""), kimi(), &[&["a", "b", "c", "d", "e", "f"]]);
        let Command::By(_, inner) = local else {
            unreachable!()
        };
        l.command(*inner);
        assert_eq!(h.core.paused(), l.core.paused(), "{name}");
        assert_eq!(h.dispatch().len(), l.dispatch().len(), "{name}");
    }
    // What a viewer may send: not an attribution of its own, not the terminal's loss.
    assert!(Command::Pause.from_viewer_allowed());
    assert!(!Command::OutputLost.from_viewer_allowed());
    assert!(!by(Command::Pause).from_viewer_allowed());
}

#[test]
fn concurrency_commands_are_clamped_and_act_on_the_next_dispatch() {
    let cases: [(&str, Vec<Command>, u32); 9] = [
        ("set", vec![Command::SetConcurrency(50)], 50),
        ("set zero is one", vec![Command::SetConcurrency(0)], 1),
        (
            "set too many",
            vec![Command::SetConcurrency(1_000_000)],
            100_000,
        ),
        ("up", vec![Command::AdjustConcurrency(6)], 10),
        ("down below one", vec![Command::AdjustConcurrency(-200)], 1),
        (
            "up past the top",
            vec![
                Command::SetConcurrency(99_990),
                Command::AdjustConcurrency(200),
            ],
            100_000,
        ),
        (
            "the most a delta can say",
            vec![Command::AdjustConcurrency(i64::MAX)],
            100_000,
        ),
        ("the least", vec![Command::AdjustConcurrency(i64::MIN)], 1),
        (
            "down then up",
            vec![
                Command::AdjustConcurrency(-3),
                Command::AdjustConcurrency(1),
            ],
            2,
        ),
    ];
    for (name, cmds, want) in cases {
        let prompts: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
        let refs: Vec<&str> = prompts.iter().map(String::as_str).collect();
        let mut h = H::new(config("concurrency = 4"), kimi(), &[&refs]);
        for c in cmds {
            h.command(c);
        }
        assert_eq!(h.core.concurrency(), want, "{name}");
        assert_eq!(
            h.event_texts().last().map(String::as_str),
            Some(format!("concurrency set to {want}").as_str()),
            "{name}"
        );
        assert_eq!(
            h.dispatch().len(),
            (want as usize).min(20),
            "{name}: requests sent"
        );
    }
}

#[test]
fn drain_lets_answers_finish_and_stop_now_closes_them() {
    struct Case {
        name: &'static str,
        cmds: &'static [ShutdownMode],
        reason: StopReason,
        cancels: usize,
    }
    let cases = [
        Case {
            name: "drain",
            cmds: &[ShutdownMode::Drain],
            reason: StopReason::OperatorDrain,
            cancels: 0,
        },
        Case {
            name: "drain twice",
            cmds: &[ShutdownMode::Drain, ShutdownMode::Drain],
            reason: StopReason::OperatorDrain,
            cancels: 0,
        },
        Case {
            name: "stop now",
            cmds: &[ShutdownMode::Now],
            reason: StopReason::OperatorStopNow,
            cancels: 1,
        },
        Case {
            name: "stop now after a drain",
            cmds: &[ShutdownMode::Drain, ShutdownMode::Now],
            reason: StopReason::OperatorStopNow,
            cancels: 1,
        },
        Case {
            name: "drain after stop now keeps stop now",
            cmds: &[ShutdownMode::Now, ShutdownMode::Drain],
            reason: StopReason::OperatorStopNow,
            cancels: 1,
        },
    ];
    for c in cases {
        let mut h = H::new(config(""), kimi(), &[&["a", "b", "c", "d", "e"]]);
        let sent = h.dispatch();
        let mut cancels = 0;
        for m in c.cmds {
            let effects = h.command(Command::Shutdown(*m));
            cancels += effects
                .iter()
                .filter(|e| matches!(e, Effect::CancelInFlight))
                .count();
        }
        assert_eq!(h.core.stopping(), Some(&c.reason), "{}", c.name);
        assert_eq!(cancels, c.cancels, "{}: CancelInFlight", c.name);
        assert!(
            !h.core.failed(),
            "{}: an operator stop is no failure",
            c.name
        );
        assert!(h.dispatch().is_empty(), "{}: no new request", c.name);
        assert!(!h.core.is_over(), "{}: answers in flight", c.name);
        for d in &sent {
            h.result(done(d.key, None, 100, 0.001, "stop"));
        }
        assert!(h.core.is_over(), "{}: over once they are in", c.name);
        assert_eq!(h.core.datasets()[0].done, 4, "{}: answers kept", c.name);
    }
}

/// Every drain is bounded by one grace, whoever asked for it (a signal, the TUI's `q` `d`,
/// `harvest stop`, a lost output): at its end the core closes what is still in flight, as a
/// stop now does; a second drain does not extend it, and a drain that finishes in time never
/// closes anything (the trainer issue's drains: `harvest stop` took 2m41s on a 30 s grace).
#[test]
fn a_drain_of_any_origin_ends_at_its_grace() {
    use std::time::Duration;
    // (name, commands at seconds, tick times, when the stop-now comes: None for never)
    type Case = (&'static str, Vec<(f64, Command)>, Vec<f64>, Option<f64>);
    let drain = || Command::Shutdown(ShutdownMode::Drain);
    let viewer = || {
        Command::By(
            crate::engine::control::Viewer { pid: 4242 },
            Box::new(drain()),
        )
    };
    let cases: Vec<Case> = vec![
        (
            "a signal's drain",
            vec![(1.0, drain())],
            vec![5.0, 12.9, 13.0, 13.2],
            Some(13.0),
        ),
        (
            "harvest stop",
            vec![(1.0, viewer())],
            vec![12.0, 13.0],
            Some(13.0),
        ),
        (
            "a lost output",
            vec![(2.0, Command::OutputLost)],
            vec![13.0, 14.0],
            Some(14.0),
        ),
        (
            "a second drain does not extend it",
            vec![(1.0, drain()), (10.0, drain())],
            vec![13.0],
            Some(13.0),
        ),
        (
            "no tick past the grace",
            vec![(1.0, drain())],
            vec![5.0, 12.0],
            None,
        ),
        (
            "a stop now first",
            vec![(1.0, Command::Shutdown(ShutdownMode::Now))],
            vec![13.0],
            None,
        ),
    ];
    for (name, cmds, ticks, want) in cases {
        let mut h = H::new(config(""), kimi(), &[&["a", "b", "c"]]);
        h.core = h.core.with_drain_grace(Duration::from_secs(12));
        let sent = h.dispatch();
        assert!(!sent.is_empty());
        for (at, c) in cmds {
            h.at(at).command(c);
        }
        let mut stopped_at = None;
        for t in ticks {
            let closed = (h.at(t).tick().iter()).any(|e| matches!(e, Effect::CancelInFlight));
            if closed {
                assert_eq!(stopped_at, None, "{name}: closed once");
                stopped_at = Some(t);
            }
        }
        assert_eq!(stopped_at, want, "{name}");
        if want.is_some() {
            let said = h.event_texts();
            assert!(
                said.iter()
                    .any(|t| t == "the drain's grace (12 s) is over: closing what is in flight"),
                "{name}: {said:?}"
            );
            assert!(h.dispatch().is_empty(), "{name}: nothing more sent");
        }
    }
    // A drain whose answers all came in within the grace closes nothing at its end.
    let mut h = H::new(config(""), kimi(), &[&["a"]]);
    let sent = h.dispatch();
    h.at(1.0).command(drain());
    h.at(5.0).result(done(sent[0].key, None, 10, 0.001, "stop"));
    assert!(h.core.is_over());
    assert!(!(h.at(40.0).tick().iter()).any(|e| matches!(e, Effect::CancelInFlight)));
}

#[test]
fn stop_now_keeps_a_failure_reason_but_still_closes_what_is_in_flight() {
    let mut h = H::new(config("routing = \"pinned\""), kimi(), &[&["a", "b"]]);
    let sent = h.dispatch();
    let err = http(401, None, "no auth");
    h.result(failed(sent[0].key, sent[0].pinned, err.clone()));
    let effects = h.command(Command::Shutdown(ShutdownMode::Now));
    assert!(matches!(effects.as_slice(), [Effect::CancelInFlight]));
    assert!(matches!(
        h.core.stopping(),
        Some(StopReason::KeyRefused { .. })
    ));
    assert!(h.core.failed(), "still exit code 1");
    assert_eq!(
        h.event_texts().last().map(String::as_str),
        Some("stopping now: closing what is in flight")
    );
}

#[test]
fn a_run_is_over_when_nothing_is_in_flight_and_nothing_is_left() {
    let mut h = H::new(config(""), kimi(), &[&["a", "b"], &[]]);
    assert!(!h.core.is_over(), "prompts not read yet");
    let sent = h.dispatch();
    assert_eq!(sent.len(), 2);
    assert!(!h.core.is_over(), "two in flight");
    h.result(done(sent[0].key, None, 10, 0.001, "stop"));
    assert!(!h.core.is_over(), "one in flight");
    h.result(failed(sent[1].key, Some(0), http(500, None, "oops")));
    assert!(!h.core.is_over(), "a retry waits");
    h.at(120.0);
    let again = h.dispatch();
    assert_eq!(again.len(), 1);
    h.result(done(again[0].key, None, 10, 0.001, "stop"));
    assert!(h.core.is_over(), "everything done");
    assert!(h.core.admission.all_finished());
}

#[test]
fn an_endpoint_that_leaves_the_listing_is_gone_until_listed_again() {
    let mut h = H::new(config("routing = \"pinned\""), kimi(), &[&["a"]]);
    let chutes = h.index("chutes/int4");
    let without: Vec<_> = KIMI[1..].to_vec();
    let new = refresh(&mut h, &listing(&without));
    assert!(new.is_empty());
    let now = h.now;
    assert_eq!(h.core.off_reason(chutes, &now), Some(OffReason::Gone));
    assert!(
        h.core.permitted(chutes),
        "gone is not a choice: the mark stays"
    );
    assert_eq!(h.route_tags(), vec!["together/int4".to_string()]);
    assert!(
        h.event_texts()
            .contains(&"chutes/int4 left the model's listing: no more requests go there".into())
    );
    // Still absent: said once.
    refresh(&mut h, &listing(&without));
    // Back again, with the listing's figures.
    refresh(&mut h, &listing(&KIMI));
    let now = h.now;
    assert_eq!(h.core.off_reason(chutes, &now), None);
    assert_eq!(h.core.listed(chutes).uptime_30m, Some(99.5));
    assert_eq!(h.route_tags(), vec!["chutes/int4".to_string()]);
    let texts = h.event_texts();
    let said = |needle: &str| texts.iter().filter(|t| t.contains(needle)).count();
    assert_eq!(said("chutes/int4 left"), 1);
    assert_eq!(said("chutes/int4 is listed again"), 1);
}

#[test]
fn a_new_endpoint_is_handed_over_once_then_judged_by_the_policy() {
    struct Case {
        name: &'static str,
        new: (&'static str, &'static str, &'static str),
        room: bool,
        event_end: &'static str,
        routed: bool,
    }
    let cases = [
        Case {
            name: "a native endpoint joins",
            new: ("deepinfra/int4", "DeepInfra", "int4"),
            room: true,
            event_end: ": allowed by the policy",
            routed: true,
        },
        Case {
            name: "a re-quantized endpoint is listed but not used",
            new: ("parasail/fp8", "Parasail", "fp8"),
            room: true,
            event_end: ": not used (policy: fp8 re-quantized); space includes it",
            routed: false,
        },
        Case {
            name: "no room in the pool",
            new: ("deepinfra/int4", "DeepInfra", "int4"),
            room: false,
            event_end: "; restart the run to consider it",
            routed: false,
        },
    ];
    for c in cases {
        let mut h = H::new(config(""), kimi(), &[&["a"]]);
        let mut eps = KIMI.to_vec();
        eps.push(c.new);
        let l = listing(&eps);
        let new = refresh(&mut h, &l);
        assert_eq!(new.len(), 1, "{}: handed over", c.name);
        assert_eq!(new[0].tag, c.new.0, "{}", c.name);
        assert!(refresh(&mut h, &l).is_empty(), "{}: once", c.name);
        let pool = c.room.then(|| {
            let mut all = h.core.endpoints().to_vec();
            all.push(new[0].clone());
            Arc::new(all)
        });
        h.handle(Event::Joined {
            endpoint: Box::new(new[0].clone()),
            pool,
        });
        let last = h.event_texts().last().cloned().unwrap_or_default();
        assert!(
            last.starts_with(&format!("new endpoint listed: {} {}", c.new.1, c.new.0)),
            "{}: {last}",
            c.name
        );
        assert!(last.ends_with(c.event_end), "{}: {last}", c.name);
        assert_eq!(
            h.core.endpoints().len(),
            if c.room { 6 } else { 5 },
            "{}",
            c.name
        );
        assert_eq!(
            h.route_tags().contains(&c.new.0.to_string()),
            c.routed,
            "{}: routed",
            c.name
        );
        if c.room {
            // The new endpoint is a full member: it can be dispatched around.
            assert_eq!(h.dispatch().len(), 1, "{}", c.name);
        }
    }
}

#[test]
fn crash_leftovers_are_booked_into_carried_over_and_the_ledger() {
    let cfg = config("");
    let b = book("a", &cfg);
    let mut h = H::with_books(cfg, kimi(), vec![b], Source::default());
    // The API's cost; unknown for months: its expectation (the expected budget).
    let cases = [
        (
            "recovered from the API",
            SpendKind::Recovered,
            Some(0.003),
            0.003,
            false,
        ),
        (
            "unknown: our estimate",
            SpendKind::Unknown,
            None,
            0.004,
            true,
        ),
    ];
    let mut total = Usd::ZERO;
    for (name, kind, cost, usd, estimated) in cases {
        let amount = Usd::from_f64(usd);
        let effects = h.handle(Event::LookedUp {
            of: Asked::Leftovers,
            answer: found(open_line("p1", "a"), cost, None),
        });
        total += amount;
        assert_eq!(ledger(&effects), vec![(kind, amount)], "{name}: one line");
        let Some(Effect::Ledger(line)) = effects.first() else {
            panic!("{name}");
        };
        assert_eq!(line.id, "p1", "{name}");
        assert_eq!(
            line.attempt.as_deref(),
            Some("old-3"),
            "{name}: closes the attempt"
        );
        assert_eq!(line.estimated, estimated, "{name}");
        assert_eq!(line.expected_usd, None, "{name}");
        assert_eq!(h.core.carried_over(), total, "{name}: carried over");
        assert_eq!(h.core.datasets()[0].spent, total, "{name}: dataset spend");
    }
}

/// A look-up's answer books the difference from the estimate; for a stream the run closed,
/// a line even when the estimate was right (it marks the close confirmed, so that a later
/// start does not ask again); for a failed attempt looked up for the last word, only a real
/// difference.
#[test]
fn an_adjustment_books_the_difference_and_confirms_a_close() {
    use SpendKind::{Cancelled, Failed};
    let cases: [(&str, SpendKind, f64, f64, Option<f64>); 6] = [
        (
            "dearer than estimated",
            Cancelled,
            0.001,
            0.0015,
            Some(0.0005),
        ),
        (
            "cheaper than estimated",
            Cancelled,
            0.001,
            0.0004,
            Some(-0.0006),
        ),
        (
            "as estimated: confirmed",
            Cancelled,
            0.001,
            0.001,
            Some(0.0),
        ),
        ("free after all", Cancelled, 0.001, 0.0, Some(-0.001)),
        ("a failure as booked", Failed, 0.0, 0.0, None),
        (
            "a failure billed after all",
            Failed,
            0.0,
            0.0002,
            Some(0.0002),
        ),
    ];
    for (name, kind, booked, actual, want) in cases {
        let mut h = H::new(config(""), kimi(), &[&["a"]]);
        let mut entry = open_line("a", "d0");
        entry.kind = kind;
        entry.usd = Usd::from_f64(booked);
        entry.generation_id = Some("gen-1".into());
        let effects = h.handle(Event::LookedUp {
            of: Asked::Closes,
            answer: found(entry, Some(actual), None),
        });
        let want_lines: Vec<(SpendKind, Usd)> = want
            .map(|d| (SpendKind::Adjustment, Usd::from_f64(d)))
            .into_iter()
            .collect();
        assert_eq!(ledger(&effects), want_lines, "{name}");
        if let Some(Effect::Ledger(line)) = effects.first() {
            assert!(!line.estimated, "{name}: the API's own figure");
            assert_eq!(line.generation_id.as_deref(), Some("gen-1"), "{name}");
        }
        assert_eq!(
            h.core.datasets()[0].spent,
            Usd::from_f64(want.unwrap_or(0.0)),
            "{name}: dataset spend follows"
        );
    }
}

#[test]
fn each_quality_finding_is_said_once() {
    let mut h = H::new(config(""), kimi(), &[&["a"]]);
    let f = |tag: &str, kind: Deviation| Finding {
        tag: tag.into(),
        kind,
        text: format!("{tag}: {kind:?}"),
    };
    let first = vec![
        f("chutes/int4", Deviation::Short),
        f("chutes/int4", Deviation::Short),
        f("chutes/int4", Deviation::Long),
        f("together/int4", Deviation::Short),
    ];
    h.handle(Event::Quality(first.clone()));
    h.handle(Event::Quality(first));
    h.handle(Event::Quality(vec![
        f("together/int4", Deviation::Short),
        f("together/int4", Deviation::Truncated),
    ]));
    assert_eq!(
        h.event_texts(),
        vec![
            "chutes/int4: Short",
            "chutes/int4: Long",
            "together/int4: Short",
            "together/int4: Truncated",
        ]
    );
}

#[test]
fn a_price_change_in_the_listing_applies_from_the_next_request_and_is_said() {
    let mut h = H::new(config("routing = \"pinned\""), kimi(), &[&["a", "b"]]);
    let chutes = h.index("chutes/int4");
    // The same listing twice: nothing to say.
    refresh(&mut h, &listing(&KIMI));
    h.take_repriced();
    let before = h.event_texts().len();
    refresh(&mut h, &listing(&KIMI));
    assert_eq!(h.event_texts().len(), before);
    assert!(h.take_repriced().is_empty());
    // Chutes doubles its prices.
    let mut l = listing(&KIMI);
    let e = (l.endpoints.iter_mut())
        .find(|e| e.tag.as_str() == "chutes/int4")
        .expect("chutes");
    e.pricing.prompt = Price::per_million_f64(2.0).expect("price");
    e.pricing.completion = Price::per_million_f64(4.0).expect("price");
    refresh(&mut h, &l);
    let texts = h.event_texts();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("chutes/int4's prices changed: $2.00/M in / $4.00/M out")),
        "{texts:?}"
    );
    let repriced = h.take_repriced();
    assert_eq!(repriced.len(), 1);
    assert_eq!(repriced[0].0, chutes);
    // The next request is priced (and routed) at the new prices: chutes is now the dearest.
    let sent = h.dispatch();
    assert_ne!(sent[0].pinned, Some(chutes));
    assert_eq!(
        h.core.endpoints()[chutes].price_out,
        Price::per_million_f64(4.0).expect("p")
    );
}

/// A drain's own progress: the longest expected remaining time of what is in flight, from
/// each request's age and its dataset's usual request time; unknown once one is past it.
#[test]
fn a_drain_reckons_the_longest_remaining_time_from_ages_and_usual_times() {
    use std::time::Duration;
    // (name, usual time of d0 and d1 in s, send times of d0's then d1's requests in s, now in
    //  s, longest remaining expected in s)
    type Case = (
        &'static str,
        [Option<f64>; 2],
        [&'static [f64]; 2],
        f64,
        Option<f64>,
    );
    let cases: Vec<Case> = vec![
        (
            "nothing in flight",
            [Some(30.0), Some(30.0)],
            [&[], &[]],
            5.0,
            None,
        ),
        (
            "one young request",
            [Some(30.0), None],
            [&[0.0], &[]],
            10.0,
            Some(20.0),
        ),
        (
            "the youngest decides",
            [Some(30.0), None],
            [&[0.0, 4.0, 8.0], &[]],
            10.0,
            Some(28.0),
        ),
        (
            "past its usual time: unknown (it may run to max_tokens)",
            [Some(30.0), None],
            [&[0.0, 20.0], &[]],
            45.0,
            None,
        ),
        (
            "the slower dataset decides",
            [Some(10.0), Some(60.0)],
            [&[2.0], &[9.0]],
            10.0,
            Some(59.0),
        ),
        (
            "no time known yet",
            [Some(60.0), None],
            [&[1.0], &[2.0]],
            10.0,
            None,
        ),
    ];
    for (name, usual, sends, now, want) in cases {
        let ids = |n: usize, p: &str| (0..n).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
        let (a, b) = (ids(sends[0].len(), "a"), ids(sends[1].len(), "b"));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let b: Vec<&str> = b.iter().map(String::as_str).collect();
        let mut h = H::new(config(""), kimi(), &[&a, &b]);
        let times = sends[0]
            .iter()
            .map(|t| (*t, 0))
            .chain(sends[1].iter().map(|t| (*t, 1)));
        // One request at each send time (the concurrency lets one more go each time).
        for (sent, (t, dataset)) in times.enumerate() {
            h.at(t);
            h.command(Command::SetConcurrency(sent as u32 + 1));
            let d = h.dispatch();
            assert_eq!(d.len(), 1, "{name}: one request at {t}");
            let (ds, _) = h.core.attempt_info(d[0].key).expect("in flight");
            assert_eq!(ds, dataset, "{name}: dataset of the request sent at {t}");
        }
        h.at(now);
        let got = h
            .core
            .longest_remaining(&h.now, |d| usual[d].map(Duration::from_secs_f64));
        assert_eq!(got.map(|d| d.as_secs_f64()), want, "{name}");
    }
}

/// Nothing starts before `Event::Begin` (what a crash left is booked first), whatever comes in
/// before it; `Begin` starts what fits, and from then on every event does.
#[test]
fn nothing_is_sent_before_the_run_begins() {
    let mut h = H::new(config("concurrency = 2"), kimi(), &[&["a", "b", "c"]]);
    let before = [
        Event::Tick,
        Event::Wake,
        Event::Said("a crash left two requests open".into()),
        Event::KeyUsage {
            usage: 1.0,
            spent: Usd::ZERO,
            moment: crate::engine::core::settle::KeyMoment::Start { left_open: true },
        },
        Event::Command(Command::SetConcurrency(3)),
    ];
    for e in before {
        let name = format!("{e:?}");
        h.handle(e);
        assert_eq!(
            h.core.in_flight(),
            0,
            "{name}: a request started before Begin"
        );
    }
    let begun = h.dispatch();
    assert_eq!(
        begun.len(),
        3,
        "Begin starts what fits (concurrency 3 by then)"
    );
}

/// Two viewers press space on the Chutes row at once: each asks for what it saw made
/// otherwise (excluded), and the row ends excluded, not back where it was.
#[test]
fn two_viewers_excluding_one_endpoint_at_once_both_get_it_excluded() {
    use crate::engine::control::Viewer;
    let mut h = H::new(config(""), kimi(), &[&["a"]]);
    let chutes = h.index("chutes/int4");
    assert!(h.core.permitted(chutes));
    for pid in [11, 12] {
        h.command(Command::By(
            Viewer { pid },
            Box::new(Command::SetEndpoint {
                tag: "chutes/int4".into(),
                allowed: Some(false),
            }),
        ));
    }
    assert!(!h.core.permitted(chutes), "excluded, as both asked");
}
