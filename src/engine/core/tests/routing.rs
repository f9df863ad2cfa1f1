//! Routing and the include/exclude reasons: policy, config exclude, probe, operator, listing,
//! breakers and 429 waits, in both routing modes.

use super::super::Event;
use super::*;
use crate::domain::EndpointTag;
use crate::engine::reason::OffReason;
use crate::engine::{Command, ShutdownMode};
use crate::policy::Exclusion;
use crate::policy::PolicyMode;

fn tags(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn pinned_routing_takes_the_cheapest_allowed_endpoint() {
    let mut h = H::new(config("routing = \"pinned\""), kimi(), &[&["p1"]]);
    // baseten/fp4 and novita are cheaper but not faithful.
    assert_eq!(h.route_tags(), tags(&["chutes/int4"]));
}

#[test]
fn openrouter_routing_hands_over_the_allowed_set_with_its_quantizations() {
    let mut h = H::new(config(""), kimi(), &[&["p1"]]);
    let now = h.now;
    let r = h.core.route(&now, None).expect("a route");
    assert_eq!(r.pinned, None);
    let p = r.prefs.expect("provider object");
    assert_eq!(
        p.only,
        Some(tags(&["chutes/int4", "together/int4", "moonshotai"]))
    );
    assert_eq!(p.allow_fallbacks, Some(false));
    assert_eq!(p.quantizations, Some(vec![Quantization::Int4]));
    // Reservations use the dearest of the set.
    assert_eq!(r.price_out, Price::per_million_f64(3.0).expect("price"));
}

/// The provider object names exactly the allowed set under OpenRouter's slug semantics (a
/// full tag reaches its endpoint alone, a base slug every endpoint of its provider), one table
/// shape per row; where no object can, the requests are pinned and the event log says why.
#[test]
fn openrouter_routing_names_exactly_the_allowed_set_for_every_shape_of_table() {
    // (endpoints as (tag, quantization), `only`, `ignore`, pinned to)
    type Case<'a> = (
        &'a [(&'a str, &'a str)],
        &'a [&'a str],
        &'a [&'a str],
        Option<&'a str>,
    );
    let cases: Vec<Case> = vec![
        // A base-slug endpoint left out next to its allowed variant: no ignore, which would
        // also remove the variant.
        (
            &[("together", "unknown"), ("together/int4", "int4")],
            &["together/int4"],
            &[],
            None,
        ),
        // A full-tag variant left out: a full tag in `only` does not reach it.
        (
            &[("chutes/int4", "int4"), ("chutes/fp8", "fp8")],
            &["chutes/int4"],
            &[],
            None,
        ),
        // An allowed base-slug endpoint reaches its variants: ignore the one left out.
        (
            &[("parasail", "int4"), ("parasail/fp8", "fp8")],
            &["parasail"],
            &["parasail/fp8"],
            None,
        ),
        // Pairs of every kind side by side.
        (
            &[
                ("chutes/int4", "int4"),
                ("deepinfra", "unknown"),
                ("deepinfra/fp4", "fp4"),
                ("parasail", "int4"),
                ("parasail/fp8", "fp8"),
            ],
            &["chutes/int4", "parasail"],
            &["parasail/fp8"],
            None,
        ),
        // Two endpoints under one tag, one allowed: no object reaches it alone.
        (
            &[("novita/int4", "int4"), ("novita/int4", "fp8")],
            &[],
            &[],
            Some("novita/int4"),
        ),
    ];
    for (table, only, ignore, pinned) in cases {
        let eps: Vec<RunEndpoint> = table
            .iter()
            .map(|(t, q)| ep(t, EndpointTag::base_of(t), q, 0.5, 2.5))
            .collect();
        let mut h = H::new(config(""), eps, &[&["p1"]]);
        let now = h.now;
        let r = h.core.route(&now, None).expect("a route");
        let named = |v: Option<Vec<String>>| v.unwrap_or_default();
        match pinned {
            None => {
                let p = r.prefs.expect("provider object");
                assert_eq!(p.only, Some(tags(only)), "{table:?}");
                assert_eq!(named(p.ignore), tags(ignore), "{table:?}");
                assert_eq!(r.pinned, None);
            }
            Some(tag) => {
                let i = r.pinned.expect("pinned");
                assert_eq!(h.core.endpoints()[i].tag, tag);
                assert_eq!(h.core.endpoints()[i].quantization, Quantization::Int4);
                let p = r.prefs.expect("provider object");
                assert_eq!(p.quantizations, Some(vec![Quantization::Int4]));
                let said = h.event_texts();
                assert!(
                    said.iter().any(|t| t.contains("cannot be named exactly")),
                    "{said:?}"
                );
            }
        }
    }
}

#[test]
fn operator_choices_drop_the_quantization_filter_in_openrouter_routing() {
    let mut h = H::new(config(""), kimi(), &[&["p1"]]);
    h.command(Command::SetEndpoint {
        tag: "novita".into(),
        allowed: Some(true),
    });
    let now = h.now;
    let p = h
        .core
        .route(&now, None)
        .expect("a route")
        .prefs
        .expect("provider object");
    assert!(p.only.expect("only").contains(&"novita".to_string()));
    assert_eq!(p.quantizations, None, "novita's quantization is unknown");
}

/// Every combination that decides the include mark: what the engine does (routes there or
/// not), the mark (`included`), the reason, and what space does, always agree.
#[test]
fn include_mark_reason_and_space_agree_for_every_source_of_exclusion() {
    struct Case {
        name: &'static str,
        top: &'static str,
        probe: &'static [(&'static str, f64)],
        operator: Option<bool>,
        tag: &'static str,
        included: bool,
        off: Option<OffReason>,
    }
    let cases = [
        Case {
            name: "native endpoint, nothing said",
            top: "",
            probe: &[],
            operator: None,
            tag: "chutes/int4",
            included: true,
            off: None,
        },
        Case {
            name: "config exclude (the reported TUI bug: shown included)",
            top: "[policy]\nexclude = [\"chutes\"]",
            probe: &[],
            operator: None,
            tag: "chutes/int4",
            included: false,
            off: Some(OffReason::Policy {
                exclusion: Exclusion::Operator,
            }),
        },
        Case {
            name: "probe below the threshold",
            top: "[policy]\nmin_probe_agreement = 0.9",
            probe: &[("chutes/int4", 0.5)],
            operator: None,
            tag: "chutes/int4",
            included: false,
            off: Some(OffReason::Policy {
                exclusion: Exclusion::Probe("agreement 0.50 < 0.90".into()),
            }),
        },
        Case {
            name: "probe above the threshold",
            top: "[policy]\nmin_probe_agreement = 0.9",
            probe: &[("chutes/int4", 0.95)],
            operator: None,
            tag: "chutes/int4",
            included: true,
            off: None,
        },
        Case {
            name: "re-quantized",
            top: "",
            probe: &[],
            operator: None,
            tag: "baseten/fp4",
            included: false,
            off: Some(OffReason::Policy {
                exclusion: Exclusion::Requantized("fp4".into()),
            }),
        },
        Case {
            name: "undisclosed",
            top: "",
            probe: &[],
            operator: None,
            tag: "novita",
            included: false,
            off: Some(OffReason::Policy {
                exclusion: Exclusion::UnknownQuantization,
            }),
        },
        Case {
            name: "operator includes what the policy excludes",
            top: "",
            probe: &[],
            operator: Some(true),
            tag: "baseten/fp4",
            included: true,
            off: None,
        },
        Case {
            name: "operator includes what the config excludes",
            top: "[policy]\nexclude = [\"chutes\"]",
            probe: &[],
            operator: Some(true),
            tag: "chutes/int4",
            included: true,
            off: None,
        },
        Case {
            name: "operator excludes a native endpoint",
            top: "",
            probe: &[],
            operator: Some(false),
            tag: "chutes/int4",
            included: false,
            off: Some(OffReason::Operator),
        },
        Case {
            name: "policy any allows fp4",
            top: "[policy]\nmode = \"any\"",
            probe: &[],
            operator: None,
            tag: "baseten/fp4",
            included: true,
            off: None,
        },
    ];
    for c in cases {
        let mut h = H::new(config(c.top), kimi(), &[&["p1"]]);
        h.handle(Event::Probe(agreement(c.probe)));
        if let Some(v) = c.operator {
            h.command(Command::SetEndpoint {
                tag: c.tag.into(),
                allowed: Some(v),
            });
        }
        let i = h.index(c.tag);
        let now = h.now;
        assert_eq!(h.core.permitted(i), c.included, "{}: mark", c.name);
        assert_eq!(h.core.off_reason(i, &now), c.off, "{}: reason", c.name);
        let routes = h.core.route(&now, None).is_some_and(|r| match r.pinned {
            Some(p) => p == i,
            None => r
                .prefs
                .expect("prefs")
                .only
                .expect("only")
                .contains(&c.tag.to_string()),
        });
        assert_eq!(routes, c.included, "{}: routed there", c.name);
        // Space flips exactly the mark.
        h.command(Command::ToggleEndpoint(c.tag.into()));
        assert_eq!(h.core.permitted(i), !c.included, "{}: after space", c.name);
    }
}

#[test]
fn health_rests_an_endpoint_without_clearing_its_mark() {
    let mut h = H::new(
        config("routing = \"pinned\"\n[breaker]\nfailures = 2\ncooldown_s = 30"),
        kimi(),
        &[&["a", "b", "c"]],
    );
    let chutes = h.index("chutes/int4");
    let sent = h.dispatch();
    assert_eq!(sent.len(), 3);
    h.result(failed(
        sent[0].key,
        Some(chutes),
        http(502, None, "bad gateway"),
    ));
    h.result(failed(
        sent[1].key,
        Some(chutes),
        http(502, None, "bad gateway"),
    ));
    let now = h.now;
    assert_eq!(
        h.core.off_reason(chutes, &now),
        Some(OffReason::Breaker { secs: 30 })
    );
    assert!(
        h.core.permitted(chutes),
        "a resting endpoint keeps its mark"
    );
    assert_eq!(h.route_tags(), tags(&["together/int4"]));
    // After the cool-down one probe goes through.
    h.at(30.0);
    assert_eq!(h.route_tags(), tags(&["chutes/int4"]));
    let now = h.now;
    assert!(
        h.event_texts()
            .iter()
            .any(|t| t.starts_with("breaker opened: chutes/int4"))
    );
    let _ = now;
}

#[test]
fn a_429_pauses_only_its_endpoint_for_its_retry_after() {
    let mut h = H::new(config("routing = \"pinned\""), kimi(), &[&["a", "b"]]);
    let chutes = h.index("chutes/int4");
    let sent = h.dispatch();
    h.result(failed(
        sent[0].key,
        Some(chutes),
        http(429, Some("7"), "slow down"),
    ));
    let now = h.now;
    assert_eq!(
        h.core.off_reason(chutes, &now),
        Some(OffReason::RateLimited { secs: 7 })
    );
    assert_eq!(h.route_tags(), tags(&["together/int4"]));
    h.at(7.0);
    assert_eq!(h.route_tags(), tags(&["chutes/int4"]));
}

#[test]
fn endpoint_caps_send_the_overflow_to_the_next_cheapest() {
    let mut h = H::new(
        config("routing = \"pinned\"\nendpoint_concurrency = { \"chutes/int4\" = 2 }"),
        kimi(),
        &[&["a", "b", "c", "d"]],
    );
    let sent = h.dispatch();
    let at: Vec<String> = sent
        .iter()
        .map(|d| h.core.endpoints()[d.pinned.expect("pinned")].tag.clone())
        .collect();
    assert_eq!(
        at,
        tags(&[
            "chutes/int4",
            "chutes/int4",
            "together/int4",
            "together/int4"
        ])
    );
}

#[test]
fn a_retry_goes_elsewhere_when_there_is_elsewhere() {
    let mut h = H::new(
        config("routing = \"pinned\"\nconcurrency = 1"),
        kimi(),
        &[&["a"]],
    );
    let chutes = h.index("chutes/int4");
    let first = h.dispatch();
    h.result(failed(first[0].key, Some(chutes), http(500, None, "oops")));
    h.at(120.0);
    let again = h.dispatch();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].prompt_id, "a");
    assert_eq!(
        h.core.endpoints()[again[0].pinned.expect("pinned")].tag,
        "together/int4"
    );
}

#[test]
fn a_pinned_404_takes_the_endpoint_out_until_listed_again() {
    let mut h = H::new(config("routing = \"pinned\""), kimi(), &[&["a"]]);
    let chutes = h.index("chutes/int4");
    let sent = h.dispatch();
    h.result(failed(
        sent[0].key,
        Some(chutes),
        http(404, None, "no endpoints"),
    ));
    let now = h.now;
    assert_eq!(h.core.off_reason(chutes, &now), Some(OffReason::Gone));
    assert!(h.core.permitted(chutes));
    assert_eq!(h.route_tags(), tags(&["together/int4"]));
}

/// Issue 53: `any` opens what the faithful policy excluded but keeps the operator's own
/// exclusions (it cleared them: 13 streams went where the operator had said no); `faithful`
/// restores the faithful set, undoing the inclusions against it, and keeps the rest.
#[test]
fn presets_switch_the_policy_and_keep_the_operators_choices() {
    let mut h = H::new(config(""), kimi(), &[&["a"]]);
    let fp4 = h.index("baseten/fp4");
    let novita = h.index("novita");
    let chutes = h.index("chutes/int4");
    // The operator excluded Chutes (native) and included Novita (unknown) against the policy.
    for (tag, allowed) in [("chutes/int4", false), ("novita", true)] {
        h.command(Command::SetEndpoint {
            tag: tag.into(),
            allowed: Some(allowed),
        });
    }
    assert!(h.core.permitted(novita));
    assert_eq!(
        h.core.policy_verdict(novita),
        Some(&crate::policy::Exclusion::UnknownQuantization),
        "the policy's word stays visible beside the operator's"
    );
    assert_eq!(h.core.opened_by_any(), vec![fp4], "what `a` would open");
    h.command(Command::Preset(PolicyMode::Any));
    assert!(h.core.permitted(fp4));
    assert!(!h.core.permitted(chutes), "the operator's exclusion stays");
    assert_eq!(h.core.policy_verdict(novita), None);
    assert!(h.core.opened_by_any().is_empty(), "nothing more under any");
    h.command(Command::Preset(PolicyMode::Faithful));
    assert!(!h.core.permitted(fp4));
    assert!(
        !h.core.permitted(novita),
        "the inclusion against the policy is undone"
    );
    assert!(!h.core.permitted(chutes), "the exclusion stays");
    assert_eq!(h.core.operator(chutes), Some(false));
    assert_eq!(h.core.operator(novita), None);
    let last = h.event_texts().pop().unwrap_or_default();
    assert_eq!(
        last,
        "policy: faithful (native int4); the operator's inclusion of an endpoint it excludes undone"
    );
    let _ = ShutdownMode::Drain;
}

#[test]
fn nothing_to_route_to_takes_no_prompt() {
    let mut h = H::new(
        config("[policy]\nexclude = [\"chutes\", \"together\", \"moonshotai\"]"),
        kimi(),
        &[&["a"]],
    );
    assert!(h.dispatch().is_empty());
    // The prompt was not consumed: including an endpoint sends it.
    h.command(Command::SetEndpoint {
        tag: "chutes/int4".into(),
        allowed: Some(true),
    });
    let sent = h.dispatch();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].prompt_id, "a");
}

#[test]
fn a_run_with_nowhere_to_send_says_why_once() {
    let mut h = H::new(
        config("[policy]\nexclude = [\"chutes\", \"together\", \"moonshotai\"]"),
        kimi(),
        &[&["a", "b"]],
    );
    let stuck = |h: &H| {
        (h.event_texts().iter())
            .filter(|t| t.starts_with("no endpoint can take a request"))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert!(h.dispatch().is_empty());
    assert!(h.dispatch().is_empty());
    let said = stuck(&h);
    assert_eq!(said.len(), 1, "once: {said:?}");
    assert!(
        said[0].contains("chutes/int4 (config exclude)") && said[0].contains("baseten/fp4"),
        "{}",
        said[0]
    );
    // An include sends the prompts, and nothing more is said.
    h.command(Command::SetEndpoint {
        tag: "chutes/int4".into(),
        allowed: Some(true),
    });
    assert_eq!(h.dispatch().len(), 2);
    assert_eq!(stuck(&h).len(), 1);
}

/// A retry that is due while nothing can take it wakes the driver when something can (the
/// first breaker to cool down), or not at all when only an event can help: never "now" again
/// and again, which would spin the driver's loop.
#[test]
fn a_due_retry_with_nothing_to_route_to_waits_for_what_can_change() {
    let cfg = config(
        "routing = \"pinned\"\n[retry]\nmax_attempts = 5\nbase_delay_ms = 500\n[breaker]\nfailures = 1\ncooldown_s = 30",
    );
    let eps = vec![
        ep("chutes/int4", "Chutes", "int4", 0.4, 2.0),
        ep("together/int4", "Together", "int4", 0.5, 2.5),
    ];
    let mut h = H::new(cfg, eps, &[&["a"]]);
    let sent = h.dispatch();
    h.result(failed(sent[0].key, sent[0].pinned, http(500, None, "oops")));
    h.at(2.0);
    let sent = h.dispatch();
    assert_eq!(sent.len(), 1, "the retry goes to the other endpoint");
    h.result(failed(sent[0].key, sent[0].pinned, http(500, None, "oops")));
    // Both breakers open (chutes until 30 s, together until 32 s); the retry falls due at ~3 s.
    h.at(10.0);
    assert!(h.dispatch().is_empty());
    let wake = h.core.next_wake(&h.now).expect("a wake");
    let at = wake.saturating_duration_since(h.t0.mono).as_secs_f64();
    assert!(
        (29.9..=30.1).contains(&at),
        "wakes when chutes cools down, not now: {at}"
    );
    // Every endpoint excluded by the operator: only a command can help.
    for tag in ["chutes/int4", "together/int4"] {
        h.command(crate::engine::Command::SetEndpoint {
            tag: tag.into(),
            allowed: Some(false),
        });
    }
    assert_eq!(h.core.next_wake(&h.now), None);
}

/// An endpoint that may serve but does not list a parameter every dataset sends gets nothing
/// under OpenRouter's routing with `require_parameters`: the snapshot says why, where before
/// the row's reason was blank and the why went to stderr once (issue #53 item 3).
#[test]
fn an_endpoint_that_lacks_what_every_dataset_sends_says_why_it_idles() {
    let all = ["max_tokens", "temperature", "reasoning"];
    let no_temperature = ["max_tokens", "reasoning"];
    // (what, routing, require_parameters, Moonshot's listing, the reason)
    type Case<'a> = (
        &'a str,
        &'a str,
        bool,
        Option<&'a [&'a str]>,
        Option<&'a str>,
    );
    let cases: [Case; 5] = [
        (
            "lists everything sent: serves",
            "openrouter",
            true,
            Some(&all),
            None,
        ),
        (
            "lacks temperature, which every request sends",
            "openrouter",
            true,
            Some(&no_temperature),
            Some("no temperature (require_parameters)"),
        ),
        (
            "without require_parameters OpenRouter may send it all the same",
            "openrouter",
            false,
            Some(&no_temperature),
            None,
        ),
        (
            "pinned requests go without what it does not list",
            "pinned",
            true,
            Some(&no_temperature),
            None,
        ),
        (
            "a listing that says nothing: nothing known to be missing",
            "openrouter",
            true,
            None,
            None,
        ),
    ];
    for (what, routing, require, listing, want) in cases {
        let cfg = config(&format!(
            "routing = \"{routing}\"\n[provider]\nrequire_parameters = {require}\n\
             [request]\nmax_tokens = 4096\ntemperature = 0.6\nreasoning = {{ effort = \"low\" }}"
        ));
        let mut eps = kimi();
        let i = eps
            .iter()
            .position(|e| e.tag == "moonshotai")
            .expect("Moonshot");
        eps[i].supported_parameters = listing.map(|l| l.iter().map(|p| p.to_string()).collect());
        let h = H::new(cfg, eps, &[&["p1"]]);
        assert_eq!(
            h.core.idle_reason(i).map(|r| r.to_string()).as_deref(),
            want,
            "{what}"
        );
    }
}
