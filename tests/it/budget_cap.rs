//! The dollar budget as a hard cap at 2,000 concurrent streams, against the simulator on
//! 127.0.0.1. The 2,000-stream run is in the slow tier (ignored by default; `.ci/run` runs it
//! alone, as it needs the two cores to itself); the other tests here run in the default tier.

use crate::common::*;
use harvest::engine::RunState;
use harvest::sim::{ControlRequest, EndpointPatch};
use harvest::store::output::{SpendEntry, SpendKind};

/// Slow tier, a capacity check run alone: 2,000 streams really open at once and a reader that
/// keeps up with them at the cap; the decision (full width before the cap, the cap held) is
/// checked in virtual time by src/engine/core/tests/simulation/scenarios.rs
/// (`a_run_goes_to_its_full_width_before_the_dollar_cap`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow tier: capacity against the real binary; .ci/run runs it alone (cargo test --locked --test it -- --ignored --test-threads=1 --skip peers::)"]
async fn dollar_budget_is_a_hard_cap_at_2000_streams() {
    assert!(harvest::raise_open_files_limit() >= 4500);
    let s = setup();
    // Half of real pace (TTFT ~2 s, ~24 tok/s a stream): the client keeps up with 2,000
    // streams even in a debug build on a busy machine, as it does against real providers.
    let sim = fast_sim(100.0).await;
    sim.state
        .control(&ControlRequest {
            all: Some(EndpointPatch {
                // Stop billing on cancel everywhere: the simulator then bills what it sent.
                cancel_stops_billing: Some(true),
                ..Default::default()
            }),
            speed_scale: Some(2.0),
            ..Default::default()
        })
        .expect("control");
    let p = write_prompts(&s.dir, "big", 14000);
    let budget = 2.5;
    // Pinned: everything goes to the cheapest endpoint, Chutes, which stops billing on cancel.
    let body = format!(
        "budget_usd = {budget}\nconcurrency = 2000\nrouting = \"pinned\"\n[request]\nmax_tokens = 400\n[[dataset]]\nname = \"big\"\nprompts = \"{}\"\n",
        p.display()
    );
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let sampler = tokio::spawn({
        let (state, peak) = (sim.state.clone(), peak.clone());
        async move {
            loop {
                let open: u32 = state.in_flight().iter().map(|(_, n)| n).sum();
                peak.fetch_max(open, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    });
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    for e in &summary.snapshot.events {
        eprintln!("event {:.2} {}", e.at_s, e.text);
    }
    assert_eq!(summary.state, RunState::Stopped);
    assert_eq!(
        summary.reason,
        Some(harvest::engine::StopReason::DollarBudget)
    );
    // The run went to full width: most of the 2,000 streams were open at once.
    sampler.abort();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("peak streams open at the simulator: {peak}");
    assert!(peak >= 1500, "only {peak} streams at once");
    let billed = sim.state.billed_total().as_f64();
    let ledger = ledger_total(&s.out).as_f64();
    eprintln!("budget {budget} billed {billed} ledger {ledger}");
    assert!(billed > budget * 0.9, "the budget was used: {billed}");
    assert!(
        (ledger - billed).abs() <= billed * 0.001,
        "ledger {ledger} vs simulator {billed}"
    );
    // The bound (README): harvest's own count stops within one streamed token (or one prompt)
    // per stream of the budget; past that, the overshoot is the tokens that were in transit
    // (generated, not yet read) when the cap hit, which the ledger learns from /generation.
    let entries: Vec<SpendEntry> = read_jsonl(&s.out.join("spend.jsonl"));
    let own: f64 = entries
        .iter()
        .filter(|e| e.kind != SpendKind::Adjustment)
        .map(|e| e.usd.as_f64())
        .sum();
    let step = 2000.0 * (3.75e-6 + 20.0 * 0.75e-6);
    assert!(
        own <= budget + step,
        "own accounting {own} passed the budget by more than a step"
    );
    let in_transit: f64 = entries
        .iter()
        .filter(|e| e.kind == SpendKind::Adjustment)
        .map(|e| e.usd.as_f64())
        .sum();
    let closed = entries
        .iter()
        .filter(|e| e.kind == SpendKind::Cancelled)
        .count();
    eprintln!("own {own} in transit {in_transit} over {closed} closed streams");
    // What the API billed = our own count + what /generation told us (+ streams closed before
    // their headers came, which nobody can look up: a few prompts' worth at most).
    assert!((billed - own - in_transit).abs() <= billed * 0.001);
    // A reader that keeps up has little in transit: under 64 tokens a closed stream.
    assert!(
        in_transit <= closed as f64 * 64.0 * 2.2e-6,
        "{in_transit} in transit"
    );
    sim.stop().await;
}

/// Where every endpoint bills a cancelled stream in full, the hard budget (the default) ends at
/// or under `budget_usd` plus 0.5%; the expected mode, as every run did before it, passes it by
/// the tail of the streams in flight at the cap. Both against the same simulator, side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hard_budget_holds_where_cancelled_streams_are_billed() {
    let budget = 0.40;
    let mut billed_by_mode = Vec::new();
    for mode in ["expected", "hard"] {
        let s = setup();
        let sim = fast_sim(300.0).await;
        sim.state
            .control(&ControlRequest {
                all: Some(EndpointPatch {
                    cancel_stops_billing: Some(false),
                    ..Default::default()
                }),
                // Streams long enough to be in flight at the cap (~2 s each).
                speed_scale: Some(0.05),
                ..Default::default()
            })
            .expect("control");
        let p = write_prompts(&s.dir, "a", 3000);
        let body = format!(
            "budget_usd = {budget}\nbudget_mode = \"{mode}\"\nconcurrency = 200\ncancel_stops_billing = []\n\
             routing = \"pinned\"\n[request]\nmax_tokens = 1000\n\
             [[dataset]]\nname = \"a\"\nprompts = \"{}\"\n",
            p.display()
        );
        let summary = run(config(&s, &sim.base_url(), &body)).await;
        assert_eq!(
            summary.reason,
            Some(harvest::engine::StopReason::DollarBudget),
            "{mode}"
        );
        let billed = sim.state.billed_total().as_f64();
        let ledger = ledger_total(&s.out).as_f64();
        assert!(
            (ledger - billed).abs() <= billed * 0.001,
            "{mode}: ledger {ledger} vs simulator {billed}"
        );
        eprintln!(
            "{mode}: budget {budget} billed {billed:.6} ({:+.1}%), last stretch {:?}",
            (billed / budget - 1.0) * 100.0,
            summary.snapshot.last_stretch_s
        );
        billed_by_mode.push(billed);
        sim.stop().await;
    }
    let (expected, hard) = (billed_by_mode[0], billed_by_mode[1]);
    assert!(
        hard <= budget * 1.005,
        "hard: billed {hard} against {budget}"
    );
    assert!(hard > budget * 0.9, "hard: the budget was used ({hard})");
    assert!(
        expected > budget * 1.005,
        "the expected mode passes the budget where cancels are billed ({expected}): the case \
         the hard mode is for"
    );
}

/// The documented list says Chutes, DeepInfra, Together, Novita and Fireworks stop the bill at
/// a close; here every one of them bills a closed stream in full, as the simulator is set
/// (and one stream in twenty stalls, closed after a 0.5 s idle timeout). Under the hard budget
/// the run does not take the documents' word: the endpoints' streams reserve their worst case,
/// and once those no longer all fit, requests sent to each alone are closed after 64 tokens
/// and looked up; each is found billed far past what it received, so none is ever trusted and
/// the budget holds. (Before the checks, the run learned it only from closes near the cap:
/// +3.9% on this $0.40 budget.) The ledger still equals the bill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_stoppers_that_bill_a_close_are_found_out_before_the_budget_relies_on_them() {
    let budget = 0.40;
    let s = setup();
    let sim = fast_sim(300.0).await;
    sim.state
        .control(&ControlRequest {
            all: Some(EndpointPatch {
                cancel_stops_billing: Some(false),
                faults_spec: Some("stall=0.05".into()),
                ..Default::default()
            }),
            speed_scale: Some(0.2),
            output_tokens_mean: Some(1_500.0),
            output_tokens_sigma: Some(1.0),
            ..Default::default()
        })
        .expect("control");
    let p = write_prompts(&s.dir, "a", 3000);
    // The documented list (no `cancel_stops_billing` key): Chutes, DeepInfra, Together,
    // Novita and Fireworks stop the bill; only they are allowed.
    let body = format!(
        "budget_usd = {budget}\nconcurrency = 50\nrouting = \"pinned\"\n\
         [policy]\nexclude = [\"siliconflow\", \"atlas-cloud\", \"parasail\", \"moonshotai\", \"baseten\", \"venice\"]\n\
         [timeouts]\nidle_s = 0.5\n[request]\nmax_tokens = 4000\n\
         [[dataset]]\nname = \"a\"\nprompts = \"{}\"\n",
        p.display()
    );
    let h = start_engine(config(&s, &sim.base_url(), &body), 50).await;
    let mut snaps = h.snapshots.clone();
    let watch = tokio::spawn(async move {
        let mut learned = Vec::new();
        while snaps.changed().await.is_ok() {
            let snap = snaps.borrow_and_update().clone();
            for e in &snap.events {
                let said = e.text.contains("billed past the close")
                    || e.text.starts_with("checking that closing a stream stops")
                    || e.text.contains("stopped the bill at the close");
                if said && !learned.contains(&e.text) {
                    learned.push(e.text.clone());
                }
            }
        }
        learned
    });
    let summary = tokio::time::timeout(std::time::Duration::from_secs(300), h.finish())
        .await
        .expect("bounded")
        .expect("finishes");
    let learned = watch.await.expect("watch");
    assert_eq!(
        summary.reason,
        Some(harvest::engine::StopReason::DollarBudget)
    );
    let billed = sim.state.billed_total().as_f64();
    let ledger = ledger_total(&s.out).as_f64();
    eprintln!(
        "billed {billed:.6} ({:+.2}%), ledger {ledger:.6}; learned: {learned:#?}",
        (billed / budget - 1.0) * 100.0
    );
    assert!(
        learned
            .iter()
            .any(|t| t.starts_with("checking that closing a stream stops chutes/int4's bill")),
        "{learned:#?}"
    );
    assert!(
        !learned
            .iter()
            .any(|t| t.contains("stopped the bill at the close")),
        "no endpoint trusted: {learned:#?}"
    );
    assert!(
        billed <= budget * 1.005,
        "billed {billed:.6} on a hard budget of {budget}"
    );
    assert!(
        (ledger - billed).abs() <= billed * 0.001,
        "ledger {ledger} vs simulator {billed}"
    );
    sim.stop().await;
}

/// What one start read of an endpoint's closes, the next start of the directory carries (issue
/// #51 item 6): under the hard budget, Chutes (which stops the bill at a close, as documented)
/// is checked and trusted by the first run; the second, started in the same directory with a
/// larger budget, trusts it from the ledger's readings without checking it again from nothing,
/// and holds the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_start_carries_what_the_first_read_of_the_closes() {
    let s = setup();
    let sim = fast_sim(300.0).await;
    sim.state
        .control(&ControlRequest {
            all: Some(EndpointPatch {
                cancel_stops_billing: Some(true),
                ..Default::default()
            }),
            speed_scale: Some(0.2),
            output_tokens_mean: Some(1_500.0),
            ..Default::default()
        })
        .expect("control");
    let p = write_prompts(&s.dir, "a", 3000);
    let body = |budget: f64| {
        format!(
            "budget_usd = {budget}\nconcurrency = 40\nrouting = \"pinned\"\nbudget_mode = \"hard\"\n\
             [policy]\nexclude = [\"together\", \"moonshotai\", \"baseten\", \"novita\", \"siliconflow\", \"atlas-cloud\", \"parasail\", \"venice\", \"deepinfra\", \"fireworks\"]\n\
             [request]\nmax_tokens = 4000\n\
             [[dataset]]\nname = \"a\"\nprompts = \"{}\"\n",
            p.display()
        )
    };
    let said = |summary: &harvest::engine::RunSummary, what: &str| -> Vec<String> {
        (summary.snapshot.events.iter())
            .filter(|e| e.text.contains(what))
            .map(|e| e.text.clone())
            .collect()
    };
    let bounded = std::time::Duration::from_secs(300);
    let first = tokio::time::timeout(bounded, run(config(&s, &sim.base_url(), &body(0.20))))
        .await
        .expect("bounded");
    assert!(
        !said(&first, "checking that closing a stream stops chutes/int4").is_empty(),
        "{:#?}",
        first.snapshot.events
    );
    assert!(
        !said(&first, "chutes/int4 stopped the bill at the close of").is_empty(),
        "the first run's checks trust Chutes: {:#?}",
        first.snapshot.events
    );
    let second = tokio::time::timeout(bounded, run(config(&s, &sim.base_url(), &body(0.40))))
        .await
        .expect("bounded");
    let carried = said(&second, "chutes/int4: this directory's earlier runs read");
    assert_eq!(carried.len(), 1, "{:#?}", second.snapshot.events);
    assert!(
        carried[0]
            .contains("0 billed past it within the day: its closes are taken to stop the bill"),
        "{}",
        carried[0]
    );
    assert!(
        said(&second, "checking that closing a stream stops chutes/int4").is_empty(),
        "not checked again from nothing: {:#?}",
        second.snapshot.events
    );
    assert_eq!(
        second.reason,
        Some(harvest::engine::StopReason::DollarBudget)
    );
    let billed = sim.state.billed_total().as_f64();
    let ledger = ledger_total(&s.out).as_f64();
    eprintln!("second start: billed {billed:.6} in all on 0.40, ledger {ledger:.6}");
    assert!(
        billed <= 0.40 * 1.005,
        "billed {billed:.6} on a hard budget of 0.40"
    );
    // The second start counts its streams by the wire the first one measured (its ledger's
    // `streamed`), not by the prior's byte a token: counted five times too high on the
    // simulator's prose, its dollar cap tripped at $0.25 of $0.40.
    assert!(
        billed >= 0.40 * 0.85,
        "billed {billed:.6}: the cap tripped early"
    );
    assert!(
        (ledger - billed).abs() <= billed * 0.001,
        "ledger {ledger} vs simulator {billed}"
    );
    sim.stop().await;
}
