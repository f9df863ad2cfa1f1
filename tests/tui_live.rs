//! A hand check of the live TUI against a fake engine (no network, no terminal in CI):
//!
//! ```text
//! cargo test --test tui_live -- --ignored --nocapture
//! ```
//!
//! Keys act on the fake engine (include/exclude, pause, concurrency, drain/stop); on exit the
//! commands it received are printed.

use std::sync::Arc;
use std::time::Duration;

use harvest::domain::Usd;
use harvest::engine::control::{Command, ShutdownMode};
use harvest::engine::health::BreakerState;
use harvest::engine::policy::Fidelity;
use harvest::engine::snapshot::{
    DatasetSnap, DatasetState, EndpointSnap, EventLine, HistoryPoint, RunState, Snapshot,
};
use harvest::tui::run_tui;
use tokio::sync::{mpsc, watch};

fn endpoint(provider: &str, tag: &str, quant: &str, fidelity: Fidelity, out: f64) -> EndpointSnap {
    let allowed = fidelity == Fidelity::Native;
    EndpointSnap {
        tag: tag.into(),
        provider: provider.into(),
        quantization: quant.into(),
        fidelity,
        price_in_per_m: out / 5.0,
        price_out_per_m: out,
        status: Some(0),
        uptime_30m: Some(99.0),
        allowed,
        why_off: (!allowed).then(|| format!("policy: {quant} re-quantized")),
        operator: None,
        breaker: BreakerState::Closed,
        in_flight: 0,
        done: 0,
        errors: 0,
        top_error: None,
        tok_per_s: 0.0,
        ttft_p50_ms: None,
        ttft_p95_ms: None,
        mean_output_tokens: None,
        truncation_rate: None,
        spent: Usd::ZERO,
    }
}

fn start() -> Snapshot {
    let ds = |name: &str, state| DatasetSnap {
        name: name.into(),
        total: 5_000,
        done: 0,
        rejected: 0,
        in_flight: 0,
        output_tokens: 0,
        output_token_budget: Some(5_000_000),
        max_samples: None,
        tok_per_s: 0.0,
        spent: Usd::ZERO,
        eta_s: None,
        state,
    };
    Snapshot {
        model: "moonshotai/kimi-k2.5".into(),
        routing: "pinned".into(),
        state: RunState::Running,
        reason: None,
        started_at: "2026-01-30T12:00:00Z".into(),
        elapsed_s: 0.0,
        concurrency_limit: 500,
        in_flight: 0,
        budget: Usd::from_f64(50.0),
        spent: Usd::ZERO,
        carried_over: Usd::ZERO,
        accrued: Usd::ZERO,
        projected: None,
        done: 0,
        rejected: 0,
        total: 10_000,
        retries: 0,
        output_tokens: 0,
        prompt_tokens: 0,
        tok_per_s: 0.0,
        usd_per_min: 0.0,
        eta_s: None,
        datasets: vec![
            ds("B3", DatasetState::Running),
            ds("B4", DatasetState::Queued),
        ],
        endpoints: vec![
            endpoint("Chutes", "chutes/int4", "int4", Fidelity::Native, 2.20),
            endpoint(
                "SiliconFlow",
                "siliconflow/int4",
                "int4",
                Fidelity::Native,
                2.25,
            ),
            endpoint("BaseTen", "baseten/fp4", "fp4", Fidelity::Requantized, 2.50),
            endpoint(
                "Moonshot AI",
                "moonshotai/int4",
                "int4",
                Fidelity::Native,
                3.00,
            ),
        ],
        events: vec![],
        history: vec![],
        key_usage_start: None,
        key_usage_now: None,
    }
}

/// Advances the fake run by `dt` seconds.
fn tick(s: &mut Snapshot, dt: f64) {
    s.elapsed_s += dt;
    let running = s.state == RunState::Running;
    let serving: Vec<usize> = (0..s.endpoints.len())
        .filter(|&i| s.endpoints[i].allowed)
        .collect();
    s.in_flight = if running || s.state == RunState::Paused {
        u64::from(s.concurrency_limit).min(serving.len() as u64 * 200)
    } else {
        s.in_flight / 2
    };
    let rate = if running {
        s.in_flight as f64 * 20.0
    } else {
        0.0
    };
    s.tok_per_s = rate;
    let tokens = (rate * dt) as u64;
    s.output_tokens += tokens;
    let cost = Usd::from_f64(tokens as f64 * 2.3e-6);
    s.spent += cost;
    s.usd_per_min = cost.as_f64() / dt * 60.0;
    let done = tokens / 1_700;
    s.done += done;
    for &i in &serving {
        let e = &mut s.endpoints[i];
        e.in_flight = s.in_flight / serving.len() as u64;
        e.tok_per_s = rate / serving.len() as f64;
        e.done += done / serving.len() as u64;
        e.spent += Usd::from_pico(cost.pico() / serving.len() as i64);
        e.ttft_p50_ms = Some(900);
        e.mean_output_tokens = Some(1_700.0);
        e.truncation_rate = Some(0.01);
    }
    let d = &mut s.datasets[0];
    d.done = (d.done + done).min(d.total);
    d.output_tokens += tokens;
    d.tok_per_s = rate;
    d.spent += cost;
    d.eta_s = (rate > 0.0).then(|| 5_000_000u64.saturating_sub(d.output_tokens) as f64 / rate);
    s.eta_s = d.eta_s;
    s.projected = s
        .eta_s
        .map(|e| Usd::from_f64(s.spent.as_f64() + s.usd_per_min / 60.0 * e));
    s.history.push(HistoryPoint {
        at_s: s.elapsed_s,
        tok_per_s: rate,
        usd_per_min: s.usd_per_min,
    });
}

fn apply(s: &mut Snapshot, c: &Command) {
    let at_s = s.elapsed_s;
    let event = |s: &mut Snapshot, text: String| s.events.push(EventLine { at_s, text });
    match c {
        Command::Pause => s.state = RunState::Paused,
        Command::Resume => s.state = RunState::Running,
        Command::AdjustConcurrency(d) => {
            s.concurrency_limit = (i64::from(s.concurrency_limit) + d).max(1) as u32;
            let text = format!("concurrency set to {}", s.concurrency_limit);
            event(s, text);
        }
        Command::ToggleEndpoint(tag) => {
            if let Some(e) = s.endpoints.iter_mut().find(|e| &e.tag == tag) {
                e.allowed = !e.allowed;
                e.operator = Some(e.allowed);
                e.why_off = (!e.allowed).then(|| "operator".to_string());
            }
            event(s, format!("operator toggled {tag}"));
        }
        Command::Shutdown(ShutdownMode::Drain) => {
            s.state = RunState::Draining;
            s.reason = Some("operator: drain".into());
        }
        Command::Shutdown(ShutdownMode::Now) => {
            s.state = RunState::Stopped;
            s.reason = Some("operator: stop now".into());
        }
        other => event(s, format!("{other:?}")),
    }
}

#[tokio::test]
#[ignore = "interactive: needs a terminal"]
async fn live_tui_with_a_fake_engine() {
    let (cmd_tx, mut cmd_rx) = mpsc::channel::<Command>(16);
    let (snap_tx, snap_rx) = watch::channel(Arc::new(start()));
    let engine = tokio::spawn(async move {
        let mut s = start();
        let mut seen = Vec::new();
        let mut every = tokio::time::interval(Duration::from_millis(200));
        let mut draining_for = 0.0;
        loop {
            tokio::select! {
                c = cmd_rx.recv() => match c {
                    Some(c) => { apply(&mut s, &c); seen.push(c); }
                    None => break,
                },
                _ = every.tick() => {
                    tick(&mut s, 0.2);
                    if s.state == RunState::Draining {
                        draining_for += 0.2;
                        if draining_for >= 2.0 {
                            s.state = RunState::Stopped;
                        }
                    }
                }
            }
            if snap_tx.send(Arc::new(s.clone())).is_err() {
                break;
            }
        }
        seen
    });
    let exit = run_tui(cmd_tx, snap_rx).await.expect("the TUI runs");
    let seen = engine.await.expect("fake engine");
    println!(
        "TUI exit: state {:?}, asked {:?}; commands: {seen:?}",
        exit.last.state, exit.requested
    );
}
