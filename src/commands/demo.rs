//! `harvest demo`: no key, no network. Starts the simulator in-process on 127.0.0.1, shows its
//! provider table as `harvest providers` would, then streams completions from the endpoints the
//! default (faithful) policy allows and checks what we were charged against the simulator's
//! billing log. (The full-screen operator view arrives with the TUI.)

use std::time::Instant;

use anyhow::Context;
use futures::StreamExt;

use crate::cli::DemoArgs;
use crate::domain::Usd;
use crate::engine::policy::PolicyConfig;
use crate::openrouter::{
    ApiKey, ChatRequest, ClientOptions, Message, OpenRouterClient, ProviderPreferences,
    StreamTimeouts,
};
use crate::sim::{self, ProviderTable, SimConfig};

use super::providers::{fetch, render_text, report};

const PROMPTS: &[&str] = &[
    "Explain speculative decoding to a new ML engineer in three paragraphs.",
    "Write a Python function that merges overlapping intervals, with tests.",
    "Prove that the square root of 2 is irrational.",
    "Summarise the trade-offs of INT4 versus FP8 weight quantization.",
    "Plan a 3-day trip to Kyoto on a budget.",
    "What is the time complexity of Dijkstra's algorithm with a binary heap, and why?",
];

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let mut cfg = SimConfig::new(ProviderTable::kimi_k25());
    cfg.seed = args.seed;
    cfg.speed_scale = args.speed_scale.max(0.0);
    let model = cfg.table.model_id.clone();
    let sim = sim::start(cfg, 0).await.context("starting the simulator")?;
    println!(
        "simulator: {} (OpenRouter API, Kimi K2.5 provider table)\n",
        sim.base_url()
    );

    let key = ApiKey::new("sk-or-v1-demo-key-not-secret");
    let client = OpenRouterClient::new(ClientOptions::new(sim.base_url(), key))?;
    let listing = fetch(&client, &model).await?;
    let policy = PolicyConfig::default();
    let r = report(&model, &listing, &policy);
    print!("{}", render_text(&r));
    // Pinned requests require every parameter they send; send temperature only where the
    // endpoint lists it (Moonshot's own endpoint does not).
    let allowed: Vec<(String, bool)> = r
        .endpoints
        .iter()
        .filter(|e| e.allowed)
        .map(|e| {
            let temp = listing
                .endpoints
                .iter()
                .find(|l| l.tag.as_str() == e.tag)
                .is_some_and(|l| l.supports("temperature"));
            (e.tag.clone(), temp)
        })
        .collect();
    anyhow::ensure!(!allowed.is_empty(), "the policy allows no endpoint");

    println!(
        "\nstreaming {} completions, pinned round-robin over the {} allowed endpoints:",
        args.requests,
        allowed.len()
    );
    let started = Instant::now();
    let jobs = (0..args.requests).map(|i| {
        let client = client.clone();
        let (tag, temperature) = allowed[i % allowed.len()].clone();
        let model = model.clone();
        async move {
            let prompt = PROMPTS[i % PROMPTS.len()];
            let mut req = ChatRequest::new(model, vec![Message::user(prompt)], 2048)
                .with_provider(ProviderPreferences::pinned(&tag));
            if temperature {
                req.temperature = Some(0.6);
            }
            // The demo runs at a fraction of real pace; keep its timeouts proportionate.
            let res = match client.chat_stream(&req, StreamTimeouts::default()).await {
                Ok(s) => s.collect().await,
                Err(e) => Err(e),
            };
            (tag, prompt, res)
        }
    });
    let mut results = futures::stream::iter(jobs).buffer_unordered(32);
    let mut charged = Usd::ZERO;
    let mut tokens = 0u64;
    while let Some((tag, prompt, res)) = results.next().await {
        match res {
            Ok(c) => {
                let cost = c.cost().unwrap_or_default();
                charged += cost;
                tokens += c.usage.completion_tokens;
                let preview: String = c.content.chars().take(48).collect();
                println!(
                    "  {:<17} {:>5} tok ({:>4} reasoning)  ttft {:>6.0} ms  {:<6}  {:>10}  {:?}…",
                    tag,
                    c.usage.completion_tokens,
                    c.usage.reasoning_tokens(),
                    c.ttft.map_or(0.0, |t| t.as_secs_f64() * 1000.0),
                    c.finish_reason,
                    cost.to_string(),
                    preview.trim()
                );
            }
            Err(e) => println!(
                "  {tag:<17} failed ({}; {}): {e}   [{}]",
                e.kind(),
                if e.is_retryable() {
                    "retryable"
                } else {
                    "final"
                },
                &prompt[..prompt.len().min(30)]
            ),
        }
    }
    let billed = sim.state.billed_total();
    println!(
        "\n{} output tokens in {:.1}s; charged per usage.cost ${:.6}, simulator billed ${:.6}",
        tokens,
        started.elapsed().as_secs_f64(),
        charged.as_f64(),
        billed.as_f64()
    );
    sim.stop().await;
    Ok(())
}
