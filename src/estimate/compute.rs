//! The estimate's arithmetic: output tokens per dataset, exact costs per endpoint and for the
//! price-weighted mix, stream speeds and times, and the verdict against the budget.

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;

use crate::domain::{Price, Usd};
use crate::policy::Exclusion;

use super::*;

/// Output tokens per prompt as an exact fraction `num / den` (`den > 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mean {
    num: u128,
    den: u128,
}

impl Mean {
    pub(super) fn whole(n: u64) -> Mean {
        Mean {
            num: u128::from(n),
            den: 1,
        }
    }

    pub(super) fn of(total: u64, count: u64) -> Mean {
        Mean {
            num: u128::from(total),
            den: u128::from(count.max(1)),
        }
    }

    pub(super) fn at_most(self, cap: Mean) -> Mean {
        if self.num * cap.den > cap.num * self.den {
            cap
        } else {
            self
        }
    }

    /// Tokens of `prompts` answers, rounded to the nearest token.
    pub(super) fn times(self, prompts: u64) -> u64 {
        let t = (u128::from(prompts) * self.num).saturating_add(self.den / 2) / self.den;
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// Answers it takes to produce `tokens`, rounded up (the last one may pass it).
    pub(super) fn answers_for(self, tokens: u64) -> u64 {
        if self.num == 0 {
            return u64::MAX;
        }
        u64::try_from((u128::from(tokens) * self.den).div_ceil(self.num)).unwrap_or(u64::MAX)
    }

    pub(super) fn as_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

/// `x * num / den`, rounded to the nearest; 0 when `den` is 0.
pub(super) fn scale(x: u64, num: u64, den: u64) -> u64 {
    if den == 0 {
        return 0;
    }
    let v = (u128::from(x) * u128::from(num) + u128::from(den) / 2) / u128::from(den);
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// A dataset's remaining work before pricing.
pub(super) fn plan_dataset(
    d: &DatasetFacts,
    given: Option<u64>,
    rule: TokenRule,
) -> DatasetEstimate {
    let remaining = d.remaining.prompts;
    // The mean is per answer: per request, so per turn when every turn is regenerated.
    let requests = d.remaining.requests.max(remaining);
    let max = u64::from(d.max_tokens);
    let budget_left = d
        .output_token_budget
        .map(|b| b.saturating_sub(d.observed.completion_tokens));
    let (basis, mean) = if d.observed.outputs > 0 {
        let o = d.observed;
        let basis = OutputBasis::Observed { outputs: o.outputs };
        (
            basis,
            Mean::of(o.completion_tokens, o.answers.max(o.outputs)),
        )
    } else if let Some(m) = given {
        (OutputBasis::Given, Mean::whole(m))
    } else if let Some(b) = budget_left {
        let spendable = b.min(requests.saturating_mul(max));
        (OutputBasis::BudgetSpent, Mean::of(spendable, requests))
    } else {
        (OutputBasis::MaxTokens, Mean::whole(max))
    };
    let mean = mean.at_most(Mean::whole(max));
    let requests_to_send = match budget_left {
        Some(b) => requests.min(mean.answers_for(b)),
        None => requests,
    };
    let to_send = if requests_to_send == requests {
        remaining
    } else {
        scale(remaining, requests_to_send, requests)
    };
    let output = match budget_left {
        Some(b) => mean.times(requests_to_send).min(b),
        None => mean.times(requests_to_send),
    };
    DatasetEstimate {
        name: d.name.clone(),
        prompts_in_file: d.prompts_in_file,
        bad_lines: d.bad_lines,
        done: d.observed.outputs,
        rejected: d.rejects,
        max_samples: d.max_samples,
        prompts_remaining: remaining,
        prompts_to_send: to_send,
        requests_to_send,
        input_tokens: scale(rule.tokens(&d.remaining), requests_to_send, requests),
        output_tokens: output,
        mean_output_tokens: mean.as_f64(),
        output_basis: basis,
        max_tokens: d.max_tokens,
        output_tokens_done: d.observed.completion_tokens,
        output_token_budget: d.output_token_budget,
        budget_left,
        cost_usd: CostRange::default(),
    }
}

/// What one endpoint charges for one dataset's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Bill {
    input: Usd,
    output: Usd,
    requests: Usd,
}

impl Bill {
    pub(super) fn of(e: &EndpointOffer, d: &DatasetEstimate) -> Bill {
        if let Some((t, at)) = &e.tariff {
            // The dataset's mean prompt decides which long-prompt prices apply.
            let mean_prompt = d.input_tokens.checked_div(d.requests_to_send).unwrap_or(0);
            let r = t.rates(mean_prompt, *at);
            return Bill {
                input: r.prompt.cost(d.input_tokens),
                output: r.completion.cost(d.output_tokens),
                requests: Usd::from_pico(
                    r.request.pico().saturating_mul(d.requests_to_send as i64),
                ),
            };
        }
        Bill {
            input: e.price_in.cost(d.input_tokens),
            output: e.price_out.cost(d.output_tokens),
            requests: e
                .price_request
                .map_or(Usd::ZERO, |p| p.cost(d.requests_to_send)),
        }
    }

    pub(super) fn total(self) -> Usd {
        self.input + self.output + self.requests
    }
}

impl std::ops::Add for Bill {
    type Output = Bill;
    fn add(self, o: Bill) -> Bill {
        Bill {
            input: self.input + o.input,
            output: self.output + o.output,
            requests: self.requests + o.requests,
        }
    }
}

/// Each endpoint's share of requests under OpenRouter's price-based load balancing: weights
/// 1/price_out², normalised to sum to 1. Free endpoints (price 0) would have infinite weight:
/// they share everything equally. Empty in, empty out.
pub fn mix_weights(prices_out: &[Price]) -> Vec<Decimal> {
    let inverse_square = |p: &Price| {
        let per_m = p.usd_per_million();
        per_m
            .checked_mul(per_m)
            .filter(|sq| !sq.is_zero())
            .and_then(|sq| Decimal::ONE.checked_div(sq))
    };
    let inv: Vec<Option<Decimal>> = prices_out.iter().map(inverse_square).collect();
    let free = inv.iter().filter(|w| w.is_none()).count();
    if free > 0 {
        let share = Decimal::ONE / Decimal::from(free);
        return inv
            .iter()
            .map(|w| if w.is_none() { share } else { Decimal::ZERO })
            .collect();
    }
    let weights: Vec<Decimal> = inv.into_iter().flatten().collect();
    let total = weights
        .iter()
        .try_fold(Decimal::ZERO, |a, w| a.checked_add(*w));
    match total {
        Some(t) if !t.is_zero() => weights.iter().map(|w| *w / t).collect(),
        _ => vec![Decimal::ONE / Decimal::from(weights.len().max(1)); weights.len()],
    }
}

/// `Σ weight × cost`, rounded once to the picodollar.
pub(super) fn weighted(weights: &[Decimal], costs: impl Iterator<Item = Usd>) -> Usd {
    let sum = weights
        .iter()
        .zip(costs)
        .fold(Decimal::ZERO, |a, (w, c)| a + *w * c.to_decimal());
    Usd::from_decimal(sum)
}

/// Tokens per second of one stream at `e`, and where the figure comes from. `mean_out` is the
/// mean output per request, to turn the listing's TTFT and throughput into one rate.
pub(super) fn stream_speed(
    e: &EndpointOffer,
    given: Option<f64>,
    mean_out: f64,
) -> (f64, SpeedSource) {
    if let Some(tps) = given {
        return (tps, SpeedSource::Given);
    }
    if let Some(s) = e.observed_speed
        && let Some(tps) = s.tok_per_s()
    {
        return (
            tps,
            SpeedSource::Observed {
                outputs: s.requests,
            },
        );
    }
    if let Some(l) = e.listed_speed
        && l.tok_per_s.is_finite()
        && l.tok_per_s > 0.0
    {
        let ttft_s = l
            .ttft_ms
            .filter(|t| t.is_finite() && *t > 0.0)
            .unwrap_or(0.0)
            / 1000.0;
        let tps = if mean_out > 0.0 {
            mean_out / (ttft_s + mean_out / l.tok_per_s)
        } else {
            l.tok_per_s
        };
        return (tps, SpeedSource::Listing);
    }
    (DEFAULT_STREAM_TPS, SpeedSource::Default)
}

/// Wall time of the work at `streams` concurrent streams of `tps` tokens/s each, and no faster
/// than `requests_per_second` allows.
pub(super) fn duration_s(
    output: u64,
    prompts: u64,
    streams: f64,
    tps: f64,
    rps: Option<f64>,
) -> f64 {
    let decode = if output == 0 {
        0.0
    } else if streams > 0.0 && tps > 0.0 {
        output as f64 / (streams * tps)
    } else {
        f64::INFINITY
    };
    let paced = rps
        .filter(|r| r.is_finite() && *r > 0.0)
        .map_or(0.0, |r| prompts as f64 / r);
    decode.max(paced)
}

pub(super) fn price_string(p: Price) -> String {
    p.usd_per_token().normalize().to_string()
}

/// The remaining work of every dataset at every allowed endpoint.
pub fn estimate(inputs: &Inputs) -> Result<Estimate, EstimateError> {
    let (allowed, excluded) = split_allowed(inputs)?;
    let mut datasets: Vec<DatasetEstimate> = (inputs.datasets.iter())
        .map(|d| plan_dataset(d, inputs.mean_output, inputs.rule))
        .collect();
    let prompts: u64 = datasets.iter().map(|d| d.prompts_to_send).sum();
    let requests: u64 = datasets.iter().map(|d| d.requests_to_send).sum();
    let input_tokens: u64 = datasets.iter().map(|d| d.input_tokens).sum();
    let output_tokens: u64 = datasets.iter().map(|d| d.output_tokens).sum();
    // Per request (a stream's length), which is per turn when every turn is regenerated.
    let mean_out = if requests == 0 {
        0.0
    } else {
        output_tokens as f64 / requests as f64
    };

    // bills[e][d]: what allowed endpoint e charges for dataset d.
    let bills: Vec<Vec<Bill>> = (allowed.iter())
        .map(|e| datasets.iter().map(|d| Bill::of(e, d)).collect())
        .collect();
    let prices: Vec<Price> = allowed.iter().map(|e| e.price_out).collect();
    let weights = mix_weights(&prices);
    let rows: Vec<EndpointEstimate> = (allowed.iter().enumerate())
        .map(|(i, e)| {
            let bill = bills[i].iter().fold(Bill::default(), |a, b| a + *b);
            let share = weights[i].to_f64().unwrap_or(0.0);
            endpoint_row(e, bill, share, inputs, (output_tokens, requests, mean_out))
        })
        .collect();
    // Σ share / tok_per_s: seconds per token of an average stream.
    let mix_pace: f64 = (rows.iter())
        .filter(|r| r.mix_share > 0.0)
        .map(|r| r.mix_share / r.stream_tok_per_s)
        .sum();

    // The cheapest and dearest endpoints for all the work (per-dataset figures use the same
    // two, so that they add up to the totals).
    let order = |a: &usize, b: &usize| {
        let (x, y) = (&rows[*a], &rows[*b]);
        (x.cost_usd, prices[*a], &x.tag).cmp(&(y.cost_usd, prices[*b], &y.tag))
    };
    let mut idx: Vec<usize> = (0..rows.len()).collect();
    idx.sort_by(order);
    let (lo, hi) = (idx[0], idx[idx.len() - 1]);
    for (j, d) in datasets.iter_mut().enumerate() {
        d.cost_usd = CostRange {
            cheapest: bills[lo][j].total(),
            mix: weighted(&weights, bills.iter().map(|b| b[j].total())),
            dearest: bills[hi][j].total(),
        };
    }
    let mix_cost = weighted(&weights, rows.iter().map(|r| r.cost_usd));
    let mix_tps = if mix_pace > 0.0 {
        1.0 / mix_pace
    } else {
        DEFAULT_STREAM_TPS
    };
    let pick = |i: usize| Pick {
        endpoint: Some(rows[i].tag.clone()),
        cost_usd: rows[i].cost_usd,
        time_s: rows[i].time_s,
    };
    let totals = Totals {
        prompts,
        input_tokens,
        output_tokens,
        cheapest: pick(lo),
        mix: Pick {
            endpoint: None,
            cost_usd: mix_cost,
            time_s: duration_s(
                output_tokens,
                requests,
                f64::from(inputs.concurrency),
                mix_tps,
                inputs.requests_per_second,
            ),
        },
        dearest: pick(hi),
    };
    let verdict = verdict(inputs, &totals);
    let ordered: Vec<EndpointEstimate> = idx.iter().map(|&i| rows[i].clone()).collect();
    let assumptions = assumptions(inputs, &datasets, &ordered, &verdict);
    Ok(Estimate {
        schema: SCHEMA,
        model: inputs.model.clone(),
        routing: inputs.routing,
        policy: inputs.policy.clone(),
        concurrency: inputs.concurrency,
        requests_per_second: inputs.requests_per_second,
        tokens: inputs.rule,
        datasets,
        endpoints: ordered,
        excluded: excluded.into_iter().map(excluded_row).collect(),
        totals,
        verdict,
        assumptions,
        account: None,
    })
}

/// The endpoints the policy allows, and those it excludes; an error when none is allowed.
fn split_allowed(
    inputs: &Inputs,
) -> Result<(Vec<&EndpointOffer>, Vec<&EndpointOffer>), EstimateError> {
    if inputs.endpoints.is_empty() {
        return Err(EstimateError::NoEndpoints {
            model: inputs.model.clone(),
        });
    }
    let (allowed, excluded): (Vec<&EndpointOffer>, Vec<&EndpointOffer>) =
        inputs.endpoints.iter().partition(|e| e.excluded.is_none());
    if allowed.is_empty() {
        let seen: Vec<String> = (inputs.endpoints.iter())
            .map(|e| format!("{} ({})", e.tag, e.quantization))
            .collect();
        return Err(EstimateError::NoneAllowed {
            policy: inputs.policy.clone(),
            count: inputs.endpoints.len(),
            model: inputs.model.clone(),
            seen: seen.join(", "),
        });
    }
    Ok((allowed, excluded))
}

/// What all the work costs and takes at one endpoint, which gets `share` of it in the mix.
/// `work` is (output tokens, requests, mean output tokens per request).
fn endpoint_row(
    e: &EndpointOffer,
    bill: Bill,
    share: f64,
    inputs: &Inputs,
    (output_tokens, requests, mean_out): (u64, u64, f64),
) -> EndpointEstimate {
    let (tps, source) = stream_speed(e, inputs.stream_tps, mean_out);
    let streams = e
        .stream_cap
        .map_or(inputs.concurrency, |c| c.min(inputs.concurrency));
    let rps = inputs.requests_per_second;
    EndpointEstimate {
        tag: e.tag.clone(),
        provider: e.provider.clone(),
        quantization: e.quantization.clone(),
        fidelity: e.fidelity,
        own_server: e.own_server,
        price_in_per_m: e.price_in.usd_per_million_f64(),
        price_out_per_m: e.price_out.usd_per_million_f64(),
        pricing: PriceStrings {
            prompt: price_string(e.price_in),
            completion: price_string(e.price_out),
            request: e.price_request.map(price_string),
        },
        mix_share: share,
        streams,
        stream_tok_per_s: tps,
        speed_source: source,
        input_cost_usd: bill.input,
        output_cost_usd: bill.output,
        request_cost_usd: bill.requests,
        cost_usd: bill.total(),
        time_s: duration_s(output_tokens, requests, f64::from(streams), tps, rps),
    }
}

pub(super) fn excluded_row(e: &EndpointOffer) -> ExcludedEndpoint {
    let exclusion = e.excluded.clone().unwrap_or(Exclusion::Operator);
    ExcludedEndpoint {
        tag: e.tag.clone(),
        provider: e.provider.clone(),
        quantization: e.quantization.clone(),
        fidelity: e.fidelity,
        price_in_per_m: e.price_in.usd_per_million_f64(),
        price_out_per_m: e.price_out.usd_per_million_f64(),
        reason: exclusion.to_string(),
        exclusion,
    }
}

pub(super) fn verdict(inputs: &Inputs, t: &Totals) -> Verdict {
    let available = (inputs.budget - inputs.spent).max(Usd::ZERO);
    let fit = |cost: Usd| Fit::new(cost, available, t.prompts, t.output_tokens);
    let (cheapest, mix, dearest) = (
        fit(t.cheapest.cost_usd),
        fit(t.mix.cost_usd),
        fit(t.dearest.cost_usd),
    );
    let status = if t.prompts == 0 {
        VerdictStatus::NothingLeft
    } else if dearest.fits {
        VerdictStatus::Fits
    } else if mix.fits {
        VerdictStatus::FitsAtMix
    } else if cheapest.fits {
        VerdictStatus::FitsAtCheapest
    } else {
        VerdictStatus::OverBudget
    };
    Verdict {
        status,
        budget_usd: inputs.budget,
        spent_usd: inputs.spent,
        available_usd: available,
        cheapest,
        mix,
        dearest,
    }
}
