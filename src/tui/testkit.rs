//! Test fixtures: a snapshot of a Kimi K2.5 run twelve minutes in (the 11 endpoints of
//! `assets/providers/kimi-k2.5.json`, three datasets, history and events), fixed in time.

use std::sync::Arc;

use crate::domain::Usd;
use crate::engine::health::BreakerState;
use crate::engine::reason::OffReason;
use crate::engine::snapshot::{
    DatasetSnap, DatasetState, EndpointSnap, EventLine, HistoryPoint, RunState, Snapshot,
};
use crate::policy::{Exclusion, Fidelity};

use super::state::UiState;
use super::theme::Theme;

/// An endpoint as listed, with nothing observed yet.
#[allow(clippy::too_many_arguments)]
pub fn endpoint(
    provider: &str,
    tag: &str,
    quant: &str,
    fidelity: Fidelity,
    price_in: f64,
    price_out: f64,
    status: i64,
    uptime: f64,
) -> EndpointSnap {
    EndpointSnap {
        tag: tag.into(),
        provider: provider.into(),
        quantization: quant.into(),
        fidelity,
        price_in_per_m: price_in,
        price_out_per_m: price_out,
        status: Some(status),
        uptime_30m: Some(uptime),
        allowed: true,
        included: true,
        off: None,
        idle: None,
        operator: None,
        policy_off: None,
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
        cut_thinking_rate: None,
        empty_rate: None,
        spent: Usd::ZERO,
    }
}

#[allow(clippy::too_many_arguments)]
fn observed(
    mut e: EndpointSnap,
    in_flight: u64,
    done: u64,
    errors: u64,
    top: Option<(&str, u64)>,
    tok_per_s: f64,
    ttft_ms: u64,
    mean_len: f64,
    trunc: f64,
    spent: f64,
) -> EndpointSnap {
    e.in_flight = in_flight;
    e.done = done;
    e.errors = errors;
    e.top_error = top.map(|(k, n)| (k.to_string(), n));
    e.tok_per_s = tok_per_s;
    e.ttft_p50_ms = Some(ttft_ms);
    e.ttft_p95_ms = Some(ttft_ms * 3);
    e.mean_output_tokens = Some(mean_len);
    e.truncation_rate = Some(trunc);
    e.spent = Usd::from_f64(spent);
    e
}

fn off(mut e: EndpointSnap, why: OffReason, operator: Option<bool>) -> EndpointSnap {
    e.allowed = false;
    e.included = operator.unwrap_or(!why.is_choice());
    if let OffReason::Policy { exclusion } = &why {
        e.policy_off = Some(exclusion.clone());
    }
    e.off = Some(why);
    e.operator = operator;
    e
}

/// The 11 Kimi K2.5 endpoints: five serving, Parasail resting behind an open breaker,
/// BaseTen (fp4) and three unknown-quantization endpoints excluded by the faithful policy,
/// Fireworks (unknown) excluded by the operator, DeepInfra (unknown) included by the operator
/// against the policy. Under `any`, Together, Novita and Venice would open (BaseTen is down).
#[rustfmt::skip] // One endpoint a line: the table reads as one.
pub fn kimi_endpoints() -> Vec<EndpointSnap> {
    use Fidelity::{Native, Requantized, Unknown};
    let unknown = || OffReason::Policy { exclusion: Exclusion::UnknownQuantization };
    let fp4 = OffReason::Policy { exclusion: Exclusion::Requantized("fp4".into()) };
    // provider, tag, quantization, fidelity, $ in and out per M, status, uptime %
    let chutes = endpoint("Chutes", "chutes/int4", "int4", Native, 0.45, 2.20, 0, 99.1);
    let deepinfra = endpoint("DeepInfra", "deepinfra", "unknown", Unknown, 0.45, 2.25, 0, 98.7);
    let silicon = endpoint("SiliconFlow", "siliconflow/int4", "int4", Native, 0.45, 2.25, 0, 99.8);
    let atlas = endpoint("AtlasCloud", "atlas-cloud/int4", "int4", Native, 0.50, 2.50, 0, 99.4);
    let parasail = endpoint("Parasail", "parasail/int4", "int4", Native, 0.55, 2.60, 0, 97.0);
    let moonshot = endpoint("Moonshot AI", "moonshotai/int4", "int4", Native, 0.60, 3.00, 0, 99.9);
    let baseten = endpoint("BaseTen", "baseten/fp4", "fp4", Requantized, 0.50, 2.50, -5, 29.8);
    let together = endpoint("Together", "together", "unknown", Unknown, 0.50, 2.80, 0, 99.6);
    let novita = endpoint("Novita", "novita", "unknown", Unknown, 0.57, 2.85, -2, 80.2);
    let fireworks = endpoint("Fireworks", "fireworks", "unknown", Unknown, 0.60, 3.00, 0, 99.3);
    let venice = endpoint("Venice", "venice", "unknown", Unknown, 0.75, 3.75, 0, 98.2);
    // in flight, done, errors, top error, tok/s, ttft ms, mean length, truncation, $ spent
    let mut deepinfra = observed(deepinfra, 301, 2_204, 5, Some(("mid", 5)), 7_010.0, 1_400, 1_701.0, 0.010, 8.61);
    deepinfra.operator = Some(true);
    deepinfra.policy_off = Some(Exclusion::UnknownQuantization);
    let mut parasail = off(
        observed(parasail, 0, 41, 21, Some(("5xx", 21)), 0.0, 1_300, 1_650.0, 0.0, 0.31),
        OffReason::Breaker { secs: 38 },
        None,
    );
    parasail.breaker = BreakerState::Open;
    vec![
        observed(chutes, 412, 3_120, 12, Some(("429", 9)), 9_840.0, 900, 1_702.0, 0.012, 11.92),
        deepinfra,
        observed(silicon, 398, 2_987, 3, Some(("5xx", 3)), 9_120.0, 1_100, 1_688.0, 0.009, 11.40),
        observed(atlas, 350, 1_510, 0, None, 5_600.0, 1_000, 1_690.0, 0.011, 6.47),
        parasail,
        observed(moonshot, 523, 560, 2, Some(("timeout", 2)), 4_300.0, 800, 1_710.0, 0.015, 2.19),
        off(baseten, fp4, None),
        off(together, unknown(), None),
        off(novita, unknown(), None),
        EndpointSnap {
            policy_off: Some(Exclusion::UnknownQuantization),
            ..off(fireworks, OffReason::Operator, Some(false))
        },
        off(venice, unknown(), None),
    ]
}

pub fn dataset(name: &str, done: u64, total: u64, out: u64, state: DatasetState) -> DatasetSnap {
    DatasetSnap {
        name: name.into(),
        total,
        done,
        rejected: 0,
        in_flight: 0,
        output_tokens: out,
        output_token_budget: Some(10_000_000),
        max_samples: None,
        duplicates: 0,
        tok_per_s: 0.0,
        spent: Usd::ZERO,
        eta_s: None,
        state,
    }
}

/// The whole run, at 00:12:41: $40.90 booked (the endpoints' spent and the datasets' sum to
/// it) and $0.37 streaming.
pub fn kimi_snapshot() -> Snapshot {
    let mut b3 = dataset("B3", 6_210, 6_666, 9_100_000, DatasetState::Running);
    b3.rejected = 12;
    b3.in_flight = 1_100;
    b3.tok_per_s = 8_120.0;
    b3.spent = Usd::from_f64(20.10);
    b3.eta_s = Some(110.0);
    let mut b4 = dataset("B4", 4_002, 7_100, 5_600_000, DatasetState::Running);
    b4.in_flight = 884;
    b4.tok_per_s = 7_990.0;
    b4.spent = Usd::from_f64(20.80);
    b4.eta_s = Some(550.0);
    let b5 = dataset("B5", 0, 6_800, 0, DatasetState::Queued);
    // A ramp to ~28k tok/s over the first minutes, then a plateau with a dip.
    let history = (0..150)
        .map(|i| {
            let t = f64::from(i) * 5.0;
            let ramp = (t / 240.0).min(1.0);
            let dip = if (100..110).contains(&i) { 0.6 } else { 1.0 };
            let tok = 28_000.0 * ramp * dip + f64::from(i % 7) * 150.0;
            HistoryPoint {
                at_s: t,
                tok_per_s: tok,
                usd_per_min: tok * 60.0 * 2.3 / 1e6,
            }
        })
        .collect();
    let events: Vec<EventLine> = [
        (0.4, "policy: faithful (native int4)"),
        (
            0.4,
            "operator excluded fireworks (applies to the next request)",
        ),
        (
            3.1,
            "operator included deepinfra (applies to the next request)",
        ),
        (
            723.8,
            "breaker opened: parasail/int4 after 5 failures in a row (5xx); probe in 60s",
        ),
        (740.2, "concurrency set to 2000"),
    ]
    .into_iter()
    .map(|(at_s, text)| EventLine {
        at_s,
        text: text.into(),
    })
    .collect();
    Snapshot {
        model: "moonshotai/kimi-k2.5".into(),
        routing: "pinned".into(),
        policy: "faithful (native int4)".into(),
        policy_mode: crate::policy::PolicyMode::Faithful,
        any_opens: vec!["together".into(), "novita".into(), "venice".into()],
        state: RunState::Running,
        reason: None,
        started_at: "2026-01-30T12:28:00Z".into(),
        elapsed_s: 761.0,
        concurrency_limit: 2_000,
        inflight_budget: None,
        in_flight: 1_984,
        budget: Usd::from_f64(100.0),
        spent: Usd::from_f64(40.90),
        carried_over: Usd::ZERO,
        accrued: Usd::from_f64(0.37),
        // The ledger: the endpoints' spent sum to it, as the datasets' do.
        booked: Usd::from_f64(40.90),
        booked_no_endpoint: Usd::ZERO,
        booked_no_dataset: Usd::ZERO,
        budget_mode: crate::config::BudgetMode::Hard,
        projected: Some(Usd::from_f64(86.10)),
        worst_case: None,
        done: 10_212,
        rejected: 12,
        total: 20_566,
        retries: 43,
        output_tokens: 14_700_000,
        prompt_tokens: 6_100_000,
        tok_per_s: 28_310.0,
        usd_per_min: 3.91,
        eta_s: Some(1_200.0),
        eta_at_budget: false,
        tail_streams: 0,
        drain_left_s: None,
        drain_grace_left_s: None,
        cut_thinking_share: None,
        last_stretch_s: None,
        stretch_stoppable: 0,
        stretch_worst: 0,
        open_look_ups: Default::default(),
        datasets: vec![b3, b4, b5],
        endpoints: kimi_endpoints(),
        events_total: events.len() as u64,
        events,
        history,
        loop_lag_ms: 2.0,
        key_usage_start: None,
        key_usage_now: None,
    }
}

pub fn state_with(s: Snapshot) -> UiState {
    UiState::new(Arc::new(s), Theme::ansi16())
}

/// A busy run for the frame benchmark: 30 endpoints, 8 datasets, a full history and event log.
pub fn busy_snapshot() -> Snapshot {
    let mut s = kimi_snapshot();
    let base = s.endpoints.clone();
    let mut i = 0;
    while s.endpoints.len() < 30 {
        let mut e = base[i % base.len()].clone();
        e.tag = format!("{}/r{}", e.tag, i);
        e.provider = format!("{} {}", e.provider, i);
        e.done = 1_000 + i as u64 * 37;
        e.in_flight = 40 + i as u64;
        e.tok_per_s = 900.0 + i as f64 * 13.0;
        s.endpoints.push(e);
        i += 1;
    }
    let proto = s.datasets[0].clone();
    while s.datasets.len() < 8 {
        let mut d = proto.clone();
        d.name = format!("B{}", s.datasets.len() + 3);
        s.datasets.push(d);
    }
    s.history = (0..360)
        .map(|i| HistoryPoint {
            at_s: f64::from(i) * 5.0,
            tok_per_s: 20_000.0 + f64::from(i % 50) * 200.0,
            usd_per_min: 3.0 + f64::from(i % 30) * 0.05,
        })
        .collect();
    s.events = (0..50)
        .map(|i| EventLine {
            at_s: f64::from(i) * 10.0,
            text: format!(
                "breaker opened: parasail/int4 after 5 failures in a row (5xx); probe in {i}s"
            ),
        })
        .collect();
    s
}
