//! The estimate's tests: costs to the picodollar, the mix, times, verdicts, assumptions.

use std::str::FromStr;

use rust_decimal::Decimal;

use super::compute::*;
use super::*;
use crate::config::Routing;
use crate::domain::{Price, Quantization, Usd};
use crate::policy::{Exclusion, Fidelity};

fn price(per_m: &str) -> Price {
    Price::per_million(Decimal::from_str(per_m).expect("decimal"))
}

fn dec(s: &str) -> Decimal {
    Decimal::from_str(s).expect("decimal")
}

#[test]
fn mix_weights_are_inverse_square_of_output_price() {
    // The five faithful endpoints of the Kimi K2.5 table.
    let prices: Vec<Price> = ["2.2", "2.25", "2.5", "2.6", "3"]
        .iter()
        .map(|p| price(p))
        .collect();
    let w = mix_weights(&prices);
    assert_eq!(w.len(), 5);
    let sum: Decimal = w.iter().sum();
    assert!((sum - Decimal::ONE).abs() < dec("1e-20"), "{sum}");
    // w_a / w_b = (p_b / p_a)²: chutes against moonshotai is (3 / 2.2)².
    let ratio = w[0] / w[4];
    assert!(
        (ratio - dec("9") / dec("4.84")).abs() < dec("1e-20"),
        "{ratio}"
    );
    // Hand computation of chutes' share: (1/4.84) / Σ 1/p².
    let inv = |p: &str| Decimal::ONE / (dec(p) * dec(p));
    let total = inv("2.2") + inv("2.25") + inv("2.5") + inv("2.6") + inv("3");
    assert!((w[0] - inv("2.2") / total).abs() < dec("1e-20"));
    assert!(w.windows(2).all(|p| p[0] > p[1]), "dearer weighs less");
}

#[test]
fn mix_weights_equal_prices_free_endpoints_and_empty() {
    let w = mix_weights(&[price("2"), price("2")]);
    assert_eq!(w, vec![dec("0.5"), dec("0.5")]);
    let w = mix_weights(&[price("2.2"), Price::ZERO, price("3"), Price::ZERO]);
    assert_eq!(
        w,
        vec![Decimal::ZERO, dec("0.5"), Decimal::ZERO, dec("0.5")]
    );
    assert!(mix_weights(&[]).is_empty());
    assert_eq!(mix_weights(&[price("7")]), vec![Decimal::ONE]);
}

#[test]
fn token_rule_rounds_up_and_counts_messages() {
    let mut t = TextStats::default();
    t.add_prompt(1);
    t.add_message("héllo"); // 5 characters, 1 non-ASCII
    t.add_message("abcd");
    assert_eq!((t.chars, t.non_ascii_chars, t.messages), (9, 1, 2));
    // ceil(9 / 4) + 2 × 4.
    assert_eq!(TokenRule::DEFAULT.tokens(&t), 3 + 8);
}

fn offer(tag: &str, p_in: &str, p_out: &str) -> EndpointOffer {
    EndpointOffer {
        tag: tag.into(),
        provider: tag.into(),
        quantization: Quantization::Int4,
        fidelity: Fidelity::Native,
        price_in: price(p_in),
        price_out: price(p_out),
        price_request: None,
        tariff: None,
        excluded: None,
        own_server: false,
        stream_cap: None,
        observed_speed: None,
        listed_speed: None,
    }
}

fn facts(prompts: u64, chars_each: u64) -> DatasetFacts {
    DatasetFacts {
        name: "d".into(),
        prompts_in_file: prompts,
        bad_lines: 0,
        rejects: 0,
        fresh: prompts,
        remaining: TextStats {
            prompts,
            requests: prompts,
            messages: prompts,
            chars: prompts * chars_each,
            non_ascii_chars: 0,
        },
        max_samples: None,
        max_tokens: 16_384,
        output_token_budget: None,
        observed: Observed::default(),
    }
}

fn inputs(datasets: Vec<DatasetFacts>, endpoints: Vec<EndpointOffer>) -> Inputs {
    Inputs {
        model: "moonshotai/kimi-k2.5".into(),
        routing: Routing::Openrouter,
        policy: "faithful (native int4)".into(),
        concurrency: 100,
        requests_per_second: None,
        budget: Usd::from_f64(100.0),
        spent: Usd::ZERO,
        mean_output: None,
        stream_tps: None,
        rule: TokenRule::DEFAULT,
        price_source: "test".into(),
        datasets,
        endpoints,
        notes: Vec::new(),
    }
}

#[test]
fn hand_computation_budget_spent_cheapest_and_dearest() {
    // 10,000 prompts of 3,984 characters: 996 + 4 = 1,000 tokens each, 10M in all.
    let mut d = facts(10_000, 3_984);
    d.output_token_budget = Some(60_000_000);
    let i = inputs(
        vec![d],
        vec![offer("dear", "0.6", "3"), offer("cheap", "0.45", "2.2")],
    );
    let e = estimate(&i).expect("estimate");
    let ds = &e.datasets[0];
    assert_eq!(ds.input_tokens, 10_000_000);
    assert_eq!(ds.output_tokens, 60_000_000);
    assert_eq!(ds.prompts_to_send, 10_000);
    assert_eq!(ds.output_basis, OutputBasis::BudgetSpent);
    assert_eq!(e.totals.cheapest.endpoint.as_deref(), Some("cheap"));
    // $0.45 × 10 + $2.20 × 60 = $136.50; $0.60 × 10 + $3 × 60 = $186.
    assert_eq!(
        e.totals.cheapest.cost_usd,
        Usd::from_pico(136_500_000_000_000)
    );
    assert_eq!(
        e.totals.dearest.cost_usd,
        Usd::from_pico(186_000_000_000_000)
    );
    assert_eq!(ds.cost_usd.cheapest, e.totals.cheapest.cost_usd);
    // Mix: weights 1/4.84 and 1/9.
    let (a, b) = (Decimal::ONE / dec("4.84"), Decimal::ONE / dec("9"));
    let want = (a * dec("136.5") + b * dec("186")) / (a + b);
    assert_eq!(e.totals.mix.cost_usd, Usd::from_decimal(want));
    assert_eq!(e.verdict.status, VerdictStatus::OverBudget);
    // $100 of $136.50 at the cheapest: 7,326 prompts, 43,956,043 output tokens.
    assert_eq!(e.verdict.cheapest.prompts_that_fit, 7_326);
    assert_eq!(e.verdict.cheapest.output_tokens_that_fit, 43_956_043);
    // 60M tokens / (100 streams × 20 tok/s) = 30,000 s.
    assert_eq!(e.totals.cheapest.time_s, 30_000.0);
    assert!(
        e.assumptions
            .iter()
            .any(|a| a.contains("assumes the token budget is spent")),
        "{:?}",
        e.assumptions
    );
}

#[test]
fn observed_mean_wins_and_budget_limits_prompts() {
    let mut d = facts(1_000, 400);
    d.observed = Observed {
        outputs: 4,
        answers: 4,
        completion_tokens: 4_000,
        ..Observed::default()
    };
    d.output_token_budget = Some(504_000);
    let mut i = inputs(vec![d], vec![offer("a", "1", "2")]);
    i.mean_output = Some(50);
    let e = estimate(&i).expect("estimate");
    let ds = &e.datasets[0];
    assert_eq!(ds.output_basis, OutputBasis::Observed { outputs: 4 });
    assert_eq!(ds.mean_output_tokens, 1_000.0);
    // 500,000 tokens left at 1,000 a prompt: 500 of the 1,000 prompts.
    assert_eq!(ds.budget_left, Some(500_000));
    assert_eq!(ds.prompts_to_send, 500);
    assert_eq!(ds.output_tokens, 500_000);
    // Input for those 500 only: 500 × (100 + 4).
    assert_eq!(ds.input_tokens, 52_000);
    assert!(
        e.assumptions
            .iter()
            .any(|a| a.contains("--mean-output not used"))
    );
}

#[test]
fn regenerated_turns_count_every_request_against_the_budget() {
    // 1,000 prompts of three turns each: 3,000 requests.
    let mut d = facts(1_000, 400);
    d.remaining.requests = 3_000;
    // 4 rows of three turns seen, 12,000 tokens: 1,000 per answer, not per row.
    d.observed = Observed {
        outputs: 4,
        answers: 12,
        completion_tokens: 12_000,
        ..Observed::default()
    };
    d.output_token_budget = Some(1_512_000);
    let e = estimate(&inputs(vec![d], vec![offer("a", "1", "2")])).expect("estimate");
    let ds = &e.datasets[0];
    assert_eq!(ds.mean_output_tokens, 1_000.0);
    // 1,500,000 tokens left: 1,500 requests, half of the 3,000, so 500 prompts.
    assert_eq!(ds.requests_to_send, 1_500);
    assert_eq!(ds.prompts_to_send, 500);
    assert_eq!(ds.output_tokens, 1_500_000);
    assert!(
        e.assumptions.iter().any(|a| a.contains("3,000 requests")),
        "{:?}",
        e.assumptions
    );
}

#[test]
fn given_mean_then_max_tokens_without_budget() {
    let mut i = inputs(vec![facts(10, 40)], vec![offer("a", "1", "2")]);
    let e = estimate(&i).expect("estimate");
    assert_eq!(e.datasets[0].output_basis, OutputBasis::MaxTokens);
    assert_eq!(e.datasets[0].output_tokens, 163_840);
    i.mean_output = Some(1_500);
    let e = estimate(&i).expect("estimate");
    assert_eq!(e.datasets[0].output_basis, OutputBasis::Given);
    assert_eq!(e.datasets[0].output_tokens, 15_000);
    i.mean_output = Some(100_000);
    let e = estimate(&i).expect("estimate");
    assert_eq!(e.datasets[0].output_tokens, 163_840, "capped at max_tokens");
}

#[test]
fn excluded_endpoints_are_not_priced_and_none_allowed_is_an_error() {
    let mut fp4 = offer("baseten/fp4", "0.1", "0.1");
    fp4.excluded = Some(Exclusion::Requantized("fp4".into()));
    let mut i = inputs(vec![facts(10, 40)], vec![fp4, offer("a", "1", "2")]);
    let e = estimate(&i).expect("estimate");
    assert_eq!(e.endpoints.len(), 1);
    assert_eq!(e.excluded[0].reason, "policy: fp4 re-quantized");
    assert_eq!(e.totals.cheapest.endpoint.as_deref(), Some("a"));
    i.endpoints.remove(1);
    let err = estimate(&i).expect_err("none allowed");
    assert!(
        err.to_string().contains("allows none of the 1 endpoints"),
        "{err}"
    );
}

#[test]
fn speed_sources_in_order() {
    let mut e = offer("a", "1", "2");
    assert_eq!(stream_speed(&e, None, 1000.0), (20.0, SpeedSource::Default));
    e.listed_speed = Some(ListedSpeed {
        ttft_ms: Some(1000.0),
        tok_per_s: 50.0,
    });
    // 1,000 tokens in 1 s + 20 s.
    let (tps, src) = stream_speed(&e, None, 1000.0);
    assert_eq!(src, SpeedSource::Listing);
    assert!((tps - 1000.0 / 21.0).abs() < 1e-9);
    e.observed_speed = Some(SpeedSample {
        requests: 9,
        completion_tokens: 900,
        seconds: 30.0,
    });
    assert_eq!(
        stream_speed(&e, None, 1000.0).1,
        SpeedSource::Listing,
        "too few"
    );
    e.observed_speed = Some(SpeedSample {
        requests: 10,
        completion_tokens: 1000,
        seconds: 40.0,
    });
    assert_eq!(
        stream_speed(&e, None, 1000.0),
        (25.0, SpeedSource::Observed { outputs: 10 })
    );
    assert_eq!(
        stream_speed(&e, Some(7.0), 1000.0),
        (7.0, SpeedSource::Given)
    );
}

#[test]
fn time_respects_caps_and_request_rate() {
    let mut capped = offer("own", "0", "0");
    capped.stream_cap = Some(10);
    capped.own_server = true;
    let mut i = inputs(vec![facts(100, 40)], vec![capped, offer("a", "1", "2")]);
    i.mean_output = Some(1_000);
    i.stream_tps = Some(10.0);
    let e = estimate(&i).expect("estimate");
    let own = e.endpoints.iter().find(|r| r.tag == "own").expect("own");
    // 100,000 tokens / (10 streams × 10 tok/s).
    assert_eq!(own.streams, 10);
    assert_eq!(own.time_s, 1_000.0);
    assert_eq!(own.mix_share, 1.0, "free takes the mix");
    assert_eq!(e.totals.mix.cost_usd, Usd::ZERO);
    i.requests_per_second = Some(0.01);
    let e = estimate(&i).expect("estimate");
    assert_eq!(e.totals.cheapest.time_s, 10_000.0, "100 prompts at 0.01/s");
}

#[test]
fn verdict_levels() {
    let mut i = inputs(
        vec![facts(100, 40)],
        vec![offer("a", "1", "1"), offer("b", "1", "3")],
    );
    // 1M output tokens at $1 or $3 per M, plus 1,400 input tokens at $1/M.
    i.mean_output = Some(10_000);
    let e = estimate(&i).expect("e");
    assert_eq!(e.totals.cheapest.cost_usd, Usd::from_f64(1.0014));
    // Weights 1 and 1/9: (1.0014 + 3.0014 / 9) / (10 / 9) = 1.2014.
    assert_eq!(e.totals.mix.cost_usd, Usd::from_f64(1.2014));
    assert_eq!(e.totals.dearest.cost_usd, Usd::from_f64(3.0014));
    i.budget = Usd::from_f64(5.0);
    assert_eq!(estimate(&i).expect("e").verdict.status, VerdictStatus::Fits);
    i.budget = Usd::from_f64(2.0);
    assert_eq!(
        estimate(&i).expect("e").verdict.status,
        VerdictStatus::FitsAtMix
    );
    i.budget = Usd::from_f64(1.1);
    assert_eq!(
        estimate(&i).expect("e").verdict.status,
        VerdictStatus::FitsAtCheapest
    );
    i.spent = Usd::from_f64(1.0);
    let v = estimate(&i).expect("e").verdict;
    assert_eq!(v.status, VerdictStatus::OverBudget);
    assert_eq!(v.available_usd, Usd::from_f64(0.1));
    // $0.10 of $1.0014: 9 of 100 prompts, 99,860 of 1M tokens.
    assert_eq!(v.cheapest.prompts_that_fit, 9);
    assert_eq!(v.cheapest.output_tokens_that_fit, 99_860);
    i.spent = Usd::from_f64(7.0);
    assert_eq!(estimate(&i).expect("e").verdict.available_usd, Usd::ZERO);
    i.datasets[0].remaining = TextStats::default();
    let v = estimate(&i).expect("e").verdict;
    assert_eq!(v.status, VerdictStatus::NothingLeft);
}
