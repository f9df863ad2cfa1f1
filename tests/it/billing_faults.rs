//! Failed streams are billed as OpenRouter's zero completion insurance says (docs:
//! guides/features/zero-completion-insurance): an error finish or an empty answer is free, a
//! stream cut after tokens (a reset, a clean truncation) is billed like a cancel. Under heavy
//! faults of every kind, at endpoints that stop billing on cancel and at ones that bill in full,
//! harvest's ledger equals the simulator's bill to the picodollar.

use crate::common::*;
use harvest::engine::RunState;
use harvest::sim::{ControlRequest, EndpointPatch, Outcome};
use harvest::store::output::{SpendEntry, SpendKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_is_booked_as_billed() {
    let s = setup();
    let sim = fast_sim(200.0).await;
    sim.state
        .control(&ControlRequest {
            all: Some(EndpointPatch {
                faults_spec: Some(
                    "mid_stream=0.08,reset=0.08,truncate=0.08,empty=0.05,retry_after_s=0".into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("control");
    let p = write_prompts(&s.dir, "b", 300);
    // OpenRouter routing over the faithful endpoints: some stop billing on cancel (Chutes,
    // Together), others bill a cancelled generation in full.
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 48\n[retry]\nmax_attempts = 12\nbase_delay_ms = 5\n\
         max_delay_s = 0.05\n[breaker]\nfailures = 100\ncooldown_s = 0.1\n[request]\nmax_tokens = 1000\n\
         [[dataset]]\nname = \"B\"\nprompts = \"{}\"\n",
        p.display()
    );
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    assert_eq!(summary.state, RunState::Done, "{:?}", summary.reason);
    let billed_cuts = sim
        .state
        .billing_entries()
        .iter()
        .filter(|b| b.outcome == Outcome::Cancelled)
        .count();
    assert!(
        billed_cuts > 10,
        "streams cut after tokens were billed: {billed_cuts}"
    );
    let ledger: Vec<SpendEntry> = read_jsonl(&s.out.join("spend.jsonl"));
    let cut = ledger
        .iter()
        .filter(|e| {
            e.kind == SpendKind::Cancelled
                && e.error
                    .as_deref()
                    .is_some_and(|k| k == "conn" || k == "trunc")
        })
        .count();
    assert!(cut > 10, "cut streams booked at the estimate: {cut}");
    assert_eq!(
        ledger_total(&s.out),
        sim.state.billed_total(),
        "the ledger is the bill"
    );
    assert_eq!(summary.snapshot.spent, sim.state.billed_total());
    sim.stop().await;
}

/// A gateway whose `/generation` answers a figure that cannot be a bill for the streams a run
/// closes (the fifth probe's P3: `total_cost: -1` booked −$64, a planted $100 booked $50): the
/// run books none of them, names them, and keeps each closed stream at its estimate, held
/// until a later look-up (or its age) settles it. Before, a closed stream's look-up during the
/// run booked whatever it was told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_streams_cost_that_cannot_be_a_bill_is_not_booked() {
    for (factor, named) in [
        (-1.0, "a negative cost"),
        (1_000.0, "above the attempt's worst case"),
    ] {
        let s = setup();
        let sim = fast_sim(200.0).await;
        sim.state
            .control(&ControlRequest {
                generation_cost_factor: Some(factor),
                all: Some(EndpointPatch {
                    faults_spec: Some("truncate=0.3,retry_after_s=0".into()),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .expect("control");
        let p = write_prompts(&s.dir, "b", 60);
        let body = format!(
            "budget_usd = 100.0\nconcurrency = 16\n[retry]\nmax_attempts = 12\nbase_delay_ms = 5\n\
             max_delay_s = 0.05\n[breaker]\nfailures = 100\ncooldown_s = 0.1\n[request]\n\
             max_tokens = 1000\n[[dataset]]\nname = \"B\"\nprompts = \"{}\"\n",
            p.display()
        );
        let summary = run(config(&s, &sim.base_url(), &body)).await;
        assert_eq!(summary.state, RunState::Done, "{:?}", summary.reason);
        let ledger: Vec<SpendEntry> = read_jsonl(&s.out.join("spend.jsonl"));
        let closed = (ledger.iter())
            .filter(|e| e.kind == SpendKind::Cancelled && e.generation_id.is_some())
            .count();
        assert!(closed > 3, "streams cut after tokens were closed: {closed}");
        let adjusted: Vec<&SpendEntry> = (ledger.iter())
            .filter(|e| e.kind == SpendKind::Adjustment)
            .collect();
        assert!(
            adjusted.is_empty(),
            "factor {factor}: no figure the gateway gave was booked: {adjusted:?}"
        );
        assert!(
            ledger.iter().all(|e| e.usd >= harvest::domain::Usd::ZERO),
            "factor {factor}: no line below zero"
        );
        assert!(
            (summary.snapshot.events.iter()).any(|e| e.text.contains(named)),
            "factor {factor}: the refused figure is named: {:?}",
            summary.snapshot.events
        );
        sim.stop().await;
    }
}
