//! The estimate's assumptions, in words: every figure that rests on one says which.

use std::fmt::Write as _;

use crate::config::Routing;
use crate::domain::{Tokens, group_thousands};

use super::*;

/// Every assumption the figures rest on, in the order an operator reads them: input, output,
/// prices, mix, time, budget, then what gathering the facts noticed.
pub(super) fn assumptions(
    inputs: &Inputs,
    datasets: &[DatasetEstimate],
    endpoints: &[EndpointEstimate],
    verdict: &Verdict,
) -> Vec<String> {
    let r = inputs.rule;
    let mut out = vec![format!(
        "input tokens: estimated without a tokenizer, as characters / {} plus {} tokens per \
         message (role and template), system prompts included where the config adds them; \
         real counts vary with the model's tokenizer and the language",
        r.chars_per_token, r.tokens_per_message
    )];
    for (d, f) in datasets.iter().zip(&inputs.datasets) {
        let share = f.remaining.non_ascii_share();
        if share > NON_ASCII_WARNING {
            out.push(format!(
                "{}: {:.0}% of the prompt characters are not ASCII; CJK text has nearer 1 token \
                 per 1-2 characters, so its input tokens are underestimated",
                d.name,
                share * 100.0
            ));
        }
        out.extend(output_assumptions(d, f, inputs.mean_output));
    }
    out.push(format!("prices: {}", inputs.price_source));
    out.push(mix_assumption(inputs.routing, endpoints));
    out.push(time_assumption(inputs, endpoints));
    let mut budget = format!(
        "budget: budget_usd {} minus {} already spent in the output directory",
        verdict.budget_usd, verdict.spent_usd
    );
    if !verdict.cheapest.fits || !verdict.mix.fits || !verdict.dearest.fits {
        budget.push_str(
            "; what fits is scaled in proportion (same datasets, same input/output ratio)",
        );
    }
    out.push(budget);
    out.extend(inputs.notes.iter().cloned());
    out
}

pub(super) fn output_assumptions(
    d: &DatasetEstimate,
    f: &DatasetFacts,
    given: Option<u64>,
) -> Vec<String> {
    let n = &d.name;
    let mean = group_thousands(d.mean_output_tokens.round() as u64);
    let max = group_thousands(u64::from(d.max_tokens));
    let mut out = Vec::new();
    if d.prompts_remaining == 0 {
        out.push(format!("{n}: no prompts left to send"));
        return out;
    }
    let capped = |raw: f64| raw > f64::from(d.max_tokens);
    match d.output_basis {
        OutputBasis::Observed { outputs } => {
            let answers = f.observed.answers.max(outputs);
            let raw = f.observed.completion_tokens as f64 / answers.max(1) as f64;
            let mut s = format!(
                "{n}: output tokens from the observed mean of {} existing outputs: {mean} per \
                 prompt",
                group_thousands(outputs)
            );
            if capped(raw) {
                s.push_str(&format!(" (capped at max_tokens {max})"));
            }
            if outputs < FEW_OUTPUTS {
                s.push_str("; few outputs yet, and short answers finish first, so it may lean low");
            }
            if given.is_some() {
                s.push_str("; --mean-output not used for it");
            }
            out.push(s);
        }
        OutputBasis::Given => {
            let mut s =
                format!("{n}: no observed outputs: --mean-output, {mean} tokens per prompt");
            if given.is_some_and(|g| g > u64::from(d.max_tokens)) {
                s.push_str(&format!(" (capped at max_tokens {max})"));
            }
            out.push(s);
        }
        OutputBasis::BudgetSpent => {
            let left = Tokens(d.budget_left.unwrap_or(0));
            let mut s = format!(
                "{n}: no observed outputs: assumes the token budget is spent ({left} tokens over \
                 the {} remaining prompts, {mean} each)",
                group_thousands(d.prompts_remaining)
            );
            if d.output_tokens < d.budget_left.unwrap_or(0) {
                s.push_str(&format!(
                    "; max_tokens {max} per prompt leaves part of it unspent"
                ));
            }
            out.push(s);
        }
        OutputBasis::MaxTokens => out.push(format!(
            "{n}: no observed outputs and no token budget: max_tokens ({max}) per prompt, an \
             upper bound; pass --mean-output for a likelier figure"
        )),
    }
    if u64::from(d.max_tokens) <= f.observed.cut_thinking_at
        && let Some(line) = crate::engine::core::cut_watch::earlier_cuts(
            n,
            f.observed.cut_thinking,
            f.observed.outputs,
            d.max_tokens,
        )
    {
        out.push(line.trim_start_matches("dataset ").to_string());
    }
    if f.remaining.requests > d.prompts_remaining {
        out.push(format!(
            "{n}: every assistant turn is regenerated (turns = \"all\"): {} requests for {} \
             prompts; the mean above is per request (turn), and input counts each turn's history",
            group_thousands(f.remaining.requests),
            group_thousands(d.prompts_remaining)
        ));
    }
    if d.prompts_to_send < d.prompts_remaining {
        out.push(format!(
            "{n}: the output-token budget ({} tokens left) is reached after about {} of the {} \
             remaining prompts; input is counted for those only",
            Tokens(d.budget_left.unwrap_or(0)),
            group_thousands(d.prompts_to_send),
            group_thousands(d.prompts_remaining)
        ));
    }
    if let Some(cap) = d.max_samples
        && f.fresh > d.prompts_remaining
    {
        out.push(format!(
            "{n}: max_samples {} leaves {} of the {} prompts not yet done",
            group_thousands(cap),
            group_thousands(d.prompts_remaining),
            group_thousands(f.fresh)
        ));
    }
    out
}

pub(super) fn mix_assumption(routing: Routing, endpoints: &[EndpointEstimate]) -> String {
    let mut s = format!(
        "mix: OpenRouter's price-based load balancing, each of the {} allowed endpoints \
         weighted by 1 / price_out²",
        endpoints.len()
    );
    if endpoints.iter().any(|e| e.price_out_per_m == 0.0) {
        s.push_str(" (free endpoints take the whole mix)");
    }
    s.push_str("; OpenRouter also weighs speed and reliability, so the real split can differ");
    if endpoints.iter().any(|e| e.own_server) {
        s.push_str(". Own [[endpoint]] servers are weighted the same way");
    }
    if routing == Routing::Pinned {
        s.push_str(
            ". routing = \"pinned\" sends each request to the cheapest healthy endpoint: \
             expect the cheapest figure while it keeps up",
        );
    }
    s
}

pub(super) fn time_assumption(inputs: &Inputs, endpoints: &[EndpointEstimate]) -> String {
    let mut s = format!(
        "time: output tokens / (streams x tokens per second per stream), TTFT included; \
         {} streams (concurrency{}); retries, 429 waits and breaker pauses are not modelled",
        inputs.concurrency,
        if endpoints.iter().any(|e| e.streams < inputs.concurrency) {
            ", fewer where an endpoint is capped"
        } else {
            ""
        }
    );
    if let Some(rps) = inputs.requests_per_second {
        let _ = write!(
            s,
            "; requests_per_second {rps} bounds it at prompts / {rps}"
        );
    }
    s.push_str("; per-stream speed: ");
    if let Some(tps) = inputs.stream_tps {
        let _ = write!(s, "--stream-tps {tps} at every endpoint");
        return s;
    }
    let mut parts = Vec::new();
    let tags = |kind: fn(&SpeedSource) -> bool| -> Vec<&str> {
        (endpoints.iter())
            .filter(|e| kind(&e.speed_source))
            .map(|e| e.tag.as_str())
            .collect()
    };
    let observed = tags(|k| matches!(k, SpeedSource::Observed { .. }));
    if !observed.is_empty() {
        parts.push(format!(
            "observed in this output directory (completion tokens over request time) for {}",
            observed.join(", ")
        ));
    }
    let listing = tags(|k| matches!(k, SpeedSource::Listing));
    if !listing.is_empty() {
        parts.push(format!(
            "the listing's 30-minute medians (TTFT, then the mean output at the median \
             throughput) for {}",
            listing.join(", ")
        ));
    }
    let default = tags(|k| matches!(k, SpeedSource::Default));
    if !default.is_empty() {
        parts.push(format!(
            "a default of {DEFAULT_STREAM_TPS} tok/s for {} (pass --stream-tps to set it)",
            default.join(", ")
        ));
    }
    s.push_str(&parts.join("; "));
    s
}
