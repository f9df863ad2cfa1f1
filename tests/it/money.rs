//! The money on screen adds up, against the simulator on 127.0.0.1: at the end of a run that
//! closed streams at its dollar cap and had streams cut after tokens, the providers' `spent`
//! sums to the ledger (`spend.jsonl`), as the datasets' does, and the snapshot's booked figure
//! is the ledger's. Asserted on what the engine booked, not on when.

use crate::common::*;
use harvest::domain::Usd;
use harvest::engine::StopReason;
use harvest::sim::{ControlRequest, EndpointPatch};
use harvest::store::output::{SpendEntry, SpendKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_and_datasets_spent_sum_to_the_ledger_closed_and_failed_streams_included() {
    let s = setup();
    let sim = fast_sim(300.0).await;
    sim.state
        .control(&ControlRequest {
            all: Some(EndpointPatch {
                // Streams cut after tokens (billed like a close), and clean truncations.
                faults_spec: Some("reset=0.2,truncate=0.05".into()),
                ..Default::default()
            }),
            speed_scale: Some(0.2),
            ..Default::default()
        })
        .expect("control");
    let a = write_prompts(&s.dir, "a", 400);
    let b = write_prompts(&s.dir, "b", 400);
    // Pinned to the cheap native endpoints (no stream is routed before it names one), a budget
    // reached mid-run: the streams in flight at the cap are closed.
    let body = format!(
        "budget_usd = 0.15\nconcurrency = 48\nrouting = \"pinned\"\n[request]\nmax_tokens = 1000\n\
         [[dataset]]\nname = \"A\"\nprompts = \"{}\"\n[[dataset]]\nname = \"B\"\nprompts = \"{}\"\n",
        a.display(),
        b.display()
    );
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    assert_eq!(summary.reason, Some(StopReason::DollarBudget));
    let snap = &summary.snapshot;
    let lines: Vec<SpendEntry> = read_jsonl(&s.out.join("spend.jsonl"));
    let ledger: Usd = lines.iter().map(|e| e.usd).sum();
    // What the test is about: money booked other than answers, at an endpoint, more than the
    // cent the column is checked to (a column of answers alone, as before, is off by it).
    let not_answers: Usd = (lines.iter())
        .filter(|e| e.kind != SpendKind::Complete && e.endpoint.is_some())
        .map(|e| e.usd)
        .sum();
    let closed = (lines.iter())
        .filter(|e| e.kind == SpendKind::Cancelled && e.usd > Usd::ZERO)
        .count();
    assert!(
        closed > 0 && not_answers > Usd::from_f64(0.01),
        "the run closed streams and was billed for them: {closed} closed, {not_answers}"
    );
    let providers: Usd = snap.endpoints.iter().map(|e| e.spent).sum();
    let datasets: Usd = snap.datasets.iter().map(|d| d.spent).sum();
    eprintln!(
        "ledger {ledger}, booked {}, providers {providers} (+{} at none), datasets {datasets}, \
         {closed} closed streams, {:.6} not answers",
        snap.booked,
        snap.booked_no_endpoint,
        not_answers.as_f64()
    );
    // Exact: every line goes where it says.
    assert_eq!(snap.booked, ledger);
    assert_eq!(providers + snap.booked_no_endpoint, ledger);
    assert_eq!(datasets + snap.booked_no_dataset, ledger);
    // As the operator reads the screen: the providers' column alone is the ledger, within a
    // cent (pinned, every line names its endpoint).
    assert!(
        (providers.as_f64() - ledger.as_f64()).abs() < 0.01,
        "providers {providers} vs ledger {ledger}"
    );
    assert!((datasets.as_f64() - ledger.as_f64()).abs() < 0.01);
    // Nothing streams once the run is over: the header's total is what is booked.
    assert_eq!(snap.streaming(), Usd::ZERO);
    sim.stop().await;
}
