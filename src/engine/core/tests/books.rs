//! The money a snapshot shows. Where the ledger's money goes: an endpoint's spend is every
//! line booked there (its answers, the streams closed there, the failures after tokens, the
//! look-ups' adjustments), and the endpoints with what names none sum to the ledger's total,
//! as the datasets do with what names none of them. And what is not booked yet: what the
//! streams in flight are expected to add (the projection), and at most (the worst case).

use std::collections::HashMap;

use super::*;
use crate::engine::core::settle::Asked;
use crate::openrouter::ApiError;
use crate::store::output::SpendKind;

fn usd(x: f64) -> Usd {
    Usd::from_f64(x)
}

/// The endpoints' spend and what names none; the datasets' and what names none.
fn sums(h: &H) -> (Usd, Usd) {
    let b = h.core.books();
    let endpoints: Usd = (0..h.core.endpoints().len()).map(|i| b.at(i)).sum();
    let datasets: Usd = h.core.datasets().iter().map(|d| d.spent).sum();
    (endpoints + b.no_endpoint(), datasets + b.no_dataset())
}

#[test]
fn an_endpoints_spend_is_every_line_booked_there_and_they_sum_to_the_ledger() {
    let mut h = H::new(config(""), kimi(), &[&["a", "b"], &["c", "d"]]);
    let (chutes, together, moonshot) = (
        h.index("chutes/int4"),
        h.index("together/int4"),
        h.index("moonshotai"),
    );
    let sent = h.dispatch();
    assert_eq!(sent.len(), 4);
    let key = |id: &str| sent.iter().find(|d| d.prompt_id == id).expect("sent").key;
    let mut lines: Vec<(SpendKind, Usd)> = Vec::new();
    // An answer at Chutes.
    lines.extend(ledger(&h.result(done(
        key("a"),
        Some(chutes),
        10,
        0.003,
        "stop",
    ))));
    // A stream closed at Together (stop-now, the dollar cap): booked at our estimate.
    lines.extend(ledger(&h.result(cancelled(
        key("b"),
        Some(together),
        40,
        0.0004,
    ))));
    // A stream cut after 120 tokens at Moonshot: billed like a close.
    let mut reset = failed(
        key("c"),
        Some(moonshot),
        ApiError::Connection("reset".into()),
    );
    reset.streamed_tokens = 120;
    reset.booked_pico = usd(0.0003).pico();
    reset.generation_id = Some("gen-c".into());
    lines.extend(ledger(&h.result(reset)));
    // A routed stream closed before it named its endpoint.
    lines.extend(ledger(&h.result(cancelled(key("d"), None, 3, 0.0001))));
    assert_eq!(
        lines.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        [
            SpendKind::Complete,
            SpendKind::Cancelled,
            SpendKind::Cancelled,
            SpendKind::Cancelled
        ]
    );
    // Together's look-up says the close cost more than its estimate: the adjustment is
    // Together's too.
    let asked = h.take_reconcile();
    let (_, closed) = (asked.iter())
        .find(|(_, e)| e.endpoint.as_deref() == Some("together/int4"))
        .expect("the close at Together is looked up")
        .clone();
    lines.extend(ledger(&h.handle(Event::LookedUp {
        of: Asked::Closes,
        answer: found(closed, Some(0.0009), Some(90)),
    })));
    // The key's true-up names neither an endpoint nor a dataset: a crash estimate of 0.0004
    // since the base, and the key grew 0.0002 less than the ledger.
    let base = crate::store::scan::KeyBase {
        checkpoint: crate::store::output::KeyCheckpoint {
            key_usage_usd: 0.0,
            ledger_usd: Usd::ZERO,
            quiet: true,
        },
        estimated: usd(0.0004),
        estimated_lines: 1,
    };
    h.core = h.core.with_key_base(Some(base));
    lines.extend(ledger(&h.handle(Event::KeyUsage {
        usage: 0.0,
        spent: usd(0.0002),
        moment: crate::engine::core::settle::KeyMoment::End {
            look_ups_out: 0,
            stopping_now: false,
        },
    })));

    let b = h.core.books();
    let at = |i: usize| b.at(i);
    assert_eq!(at(chutes), usd(0.003), "its answer");
    assert_eq!(at(together), usd(0.0009), "its close, as looked up");
    assert_eq!(at(moonshot), usd(0.0003), "its stream cut after tokens");
    assert_eq!(b.no_endpoint(), usd(0.0001 - 0.0002));
    assert_eq!(b.no_dataset(), usd(-0.0002));
    let ledger_total: Usd = lines.iter().map(|(_, u)| *u).sum();
    assert_eq!(b.total(), ledger_total);
    assert_eq!(sums(&h), (ledger_total, ledger_total));
}

/// A resumed run's tables start from its ledger: what earlier runs booked at each endpoint
/// still listed, and the rest (an endpoint gone from the listing, lines naming none) beside.
#[test]
fn earlier_runs_spend_starts_each_endpoint_and_the_rest_names_none() {
    let cfg = config("");
    // The datasets' books start with 1.20 of the 2.00 carried (the rest named no dataset).
    let mut d0 = book("d0", &cfg);
    d0.spent = usd(1.2);
    let by_tag: HashMap<String, Usd> = [
        ("together/int4".to_string(), usd(0.9)),
        ("gone/fp8".to_string(), usd(0.5)),
    ]
    .into();
    let mut h = H::with_books(cfg.clone(), kimi(), vec![], Source::ids(&[&["a"]]));
    h.core = Core::new(
        cfg,
        vec![d0],
        Arc::new(kimi()),
        usd(2.0),
        None,
        "run".into(),
        &h.t0,
    )
    .with_carried_by_endpoint(&by_tag);
    let together = h.index("together/int4");
    let b = h.core.books();
    assert_eq!(b.at(together), usd(0.9));
    assert_eq!(
        b.no_endpoint(),
        usd(1.1),
        "the gone endpoint's and the unnamed"
    );
    assert_eq!(b.no_dataset(), usd(0.8));
    assert_eq!(sums(&h), (usd(2.0), usd(2.0)));
    // New work adds to them.
    let sent = h.dispatch();
    h.result(done(sent[0].key, Some(together), 10, 0.05, "stop"));
    assert_eq!(h.core.books().at(together), usd(0.95));
    assert_eq!(sums(&h), (usd(2.05), usd(2.05)));
}

/// While a run stops, its projection adds only what the streams in flight are expected to add
/// (with none left, it is what is spent), and its worst case is its own figure: each stream
/// billed in full when closed at its `max_tokens`, and each closed stream at such an endpoint
/// held until its look-up lands (issue 53: `proj $26.03` with nothing in flight, against a
/// final $15.15, was that hold counted as the projection).
#[test]
fn a_stopping_runs_projection_is_its_streams_and_the_worst_case_holds_the_open_bills() {
    use crate::engine::{Command, ShutdownMode};
    // Pinned to Moonshot, which bills a closed stream in full.
    let cfg = config(
        "concurrency = 2\nrouting = \"pinned\"\n[request]\nmax_tokens = 8192\n\
         [policy]\nexclude = [\"chutes\", \"together\", \"baseten\", \"novita\"]",
    );
    let mut h = H::new(cfg, kimi(), &[&["a", "b", "c"]]);
    let sent = h.dispatch();
    assert_eq!(sent.len(), 2);
    // Held whole under the hard budget, as Moonshot bills a close.
    let worst: Vec<i64> = sent.iter().map(|d| d.held_worst.pico()).collect();
    assert!(worst.iter().all(|&w| w > usd(0.024).pico()), "{worst:?}");
    // What each has streamed, as the last tick read it.
    for (d, streamed) in sent.iter().zip([usd(0.001), usd(0.002)]) {
        h.accrued.insert(d.key, streamed.pico());
        h.live.accrued_pico += streamed.pico();
    }
    h.tick();
    h.command(Command::Shutdown(ShutdownMode::Drain));
    assert!(h.core.stopping().is_some());
    let streams = h.core.streams();
    assert_eq!(streams.len(), 2);
    assert!(streams.iter().all(|s| s.pico_left > 0));
    assert_eq!(
        h.core.worst_case_pico(&h.live),
        usd(0.003).pico() + worst[0] - usd(0.001).pico() + worst[1] - usd(0.002).pico(),
        "what is accrued, and each stream to its worst case"
    );
    // One is closed (the drain's grace), booked at what it streamed: its look-up is asked,
    // and until it lands, what Moonshot may bill of it is held.
    h.result(cancelled(sent[0].key, sent[0].pinned, 20, 0.001));
    h.result(done(sent[1].key, sent[1].pinned, 500, 0.0025, "stop"));
    h.live.accrued_pico = 0;
    h.live.spent_pico = usd(0.0035).pico();
    assert!(
        h.core.streams().is_empty(),
        "nothing in flight: nothing to add"
    );
    assert_eq!(
        h.core.worst_case_pico(&h.live),
        usd(0.0035).pico() + worst[0] - usd(0.001).pico(),
        "what is spent, and the close's worst case"
    );
    // The look-up lands: nothing is held any more.
    let (_, entry) = h.take_reconcile().pop().expect("the close is looked up");
    h.handle(Event::LookedUp {
        of: Asked::Closes,
        answer: found(entry, Some(0.004), Some(1_200)),
    });
    h.live.spent_pico += usd(0.003).pico();
    assert_eq!(h.core.worst_case_pico(&h.live), usd(0.0065).pico());
}

/// Streams whose close stops the bill add at most what the dollar cap leaves them: it closes
/// them when it is reached. Here two at Chutes, each with a worst case of ~$0.016 on a $0.03
/// budget: the worst case is the budget, not $0.035.
#[test]
fn streams_a_close_stops_add_to_the_worst_case_what_the_cap_leaves() {
    let cfg = config(
        "budget_usd = 0.03\nconcurrency = 2\nrouting = \"pinned\"\n[request]\nmax_tokens = 8192\n\
         [policy]\nexclude = [\"moonshotai\", \"together\", \"baseten\", \"novita\"]",
    );
    let mut h = H::new(cfg, kimi(), &[&["a", "b", "c"]]);
    let sent = h.dispatch();
    assert_eq!(sent.len(), 2, "their expectations fit");
    for d in &sent {
        h.accrued.insert(d.key, usd(0.0015).pico());
        h.live.accrued_pico += usd(0.0015).pico();
    }
    h.tick();
    assert_eq!(h.core.worst_case_pico(&h.live), usd(0.03).pico());
}
