//! `harvest estimate` against the simulator's Kimi K2.5 table: the figures match a hand
//! computation, existing outputs give the observed mean and leave the rest as remaining work,
//! the policy's exclusions hold, and the binary's JSON document keeps its shape.

use std::path::Path;
use std::process::Command;
use std::str::FromStr;

use crate::common::*;
use harvest::commands::estimate::{EstimateOptions, estimate_config};
use harvest::domain::Usd;
use harvest::estimate::{Estimate, OutputBasis, SCHEMA, SpeedSource, VerdictStatus};
use harvest::sim::{self, SimConfig};
use rust_decimal::Decimal;
use serde_json::{Value, json};

/// The five endpoints of the Kimi K2.5 table the faithful policy allows (native INT4).
const FAITHFUL: [&str; 5] = [
    "chutes/int4",
    "siliconflow/int4",
    "atlas-cloud/int4",
    "parasail/int4",
    "moonshotai/int4",
];

async fn estimate(cfg: &harvest::config::Config, opts: &EstimateOptions) -> Estimate {
    estimate_config(cfg, opts).await.expect("estimate")
}

fn tags(e: &Estimate) -> Vec<&str> {
    e.endpoints.iter().map(|r| r.tag.as_str()).collect()
}

fn usd(s: &str) -> Usd {
    Usd::from_decimal(Decimal::from_str(s).expect("decimal"))
}

/// `n` prompts of exactly `chars` ASCII characters each, ids `q-0`...
fn write_sized_prompts(path: &Path, n: usize, chars: usize) {
    let mut text = String::with_capacity(n * (chars + 40));
    for i in 0..n {
        let head = format!("q{i} ");
        let body = "x".repeat(chars - head.len());
        text.push_str(&format!(
            "{{\"id\":\"q-{i}\",\"prompt\":\"{head}{body}\"}}\n"
        ));
    }
    std::fs::write(path, text).expect("write prompts");
}

/// An output line as the engine writes it.
fn output_line(id: &str, tag: &str, completion_tokens: u64, latency_ms: u64, cost: f64) -> Value {
    json!({
        "id": id,
        "conversations": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a", "reasoning_content": "r"}
        ],
        "provider": "Chutes", "endpoint_tag": tag, "quantization": "int4",
        "model": "moonshotai/kimi-k2.5", "finish_reason": "stop", "truncated": false,
        "usage": {"prompt_tokens": 12, "completion_tokens": completion_tokens,
                  "reasoning_tokens": 0, "source": "reported"},
        "cost_usd": cost, "ttft_ms": 300, "latency_ms": latency_ms, "attempts": 1,
        "created_at": "2026-01-01T00:00:00Z", "generation_id": format!("gen-{id}"),
        "params": {"max_tokens": 4000}
    })
}

fn ledger_line(id: &str, dataset: &str, kind: &str, usd: f64, attempt: &str) -> Value {
    json!({
        "at": "2026-01-01T00:00:00Z", "id": id, "dataset": dataset, "endpoint": "chutes/int4",
        "kind": kind, "usd": usd, "prompt_tokens": 12, "completion_tokens": 0,
        "estimated": false, "attempt": attempt
    })
}

fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
    std::fs::write(path, text).expect("write lines");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_computation_on_the_kimi_table() {
    let s = setup();
    let sim = sim::start(SimConfig::fast_no_faults(), 0)
        .await
        .expect("sim");
    // 10,000 prompts of 3,984 characters: 996 + 4 = 1,000 estimated tokens each, 10M in all;
    // no outputs yet, so the 60M-token budget is assumed spent.
    write_sized_prompts(&s.dir.join("big.jsonl"), 10_000, 3_984);
    let body = "budget_usd = 150.0\n[[dataset]]\nname = \"big\"\nprompts = \"big.jsonl\"\n\
                output_token_budget = 60_000_000\n";
    let cfg = config(&s, &sim.base_url(), body);
    let e = estimate(&cfg, &EstimateOptions::default()).await;

    assert_eq!(e.schema, SCHEMA);
    let d = &e.datasets[0];
    assert_eq!((d.prompts_remaining, d.prompts_to_send), (10_000, 10_000));
    assert_eq!(d.input_tokens, 10_000_000);
    assert_eq!(d.output_tokens, 60_000_000);
    assert_eq!(d.output_basis, OutputBasis::BudgetSpent);

    // By hand: $0.45/M × 10M + $2.20/M × 60M = $4.50 + $132 = $136.50 at chutes/int4, and
    // $0.60 × 10 + $3 × 60 = $186 at moonshotai/int4.
    let t = &e.totals;
    assert_eq!(t.cheapest.endpoint.as_deref(), Some("chutes/int4"));
    assert_eq!(t.cheapest.cost_usd, usd("136.50"));
    assert_eq!(t.dearest.endpoint.as_deref(), Some("moonshotai/int4"));
    assert_eq!(t.dearest.cost_usd, usd("186"));
    assert_eq!(d.cost_usd.cheapest, usd("136.50"));
    // Every allowed endpoint, cheapest first.
    let costs: Vec<(&str, Usd)> = (e.endpoints.iter())
        .map(|r| (r.tag.as_str(), r.cost_usd))
        .collect();
    let want = [
        ("chutes/int4", usd("136.5")),
        ("siliconflow/int4", usd("139.5")),
        ("atlas-cloud/int4", usd("155")),
        ("parasail/int4", usd("161.5")),
        ("moonshotai/int4", usd("186")),
    ];
    assert_eq!(costs, want);
    // The mix: Σ cost / price_out² over Σ 1 / price_out², within a picodollar of rounding.
    let (mut num, mut den) = (Decimal::ZERO, Decimal::ZERO);
    for (cost, out) in [
        ("136.5", "2.2"),
        ("139.5", "2.25"),
        ("155", "2.5"),
        ("161.5", "2.6"),
        ("186", "3"),
    ] {
        let p = Decimal::from_str(out).expect("d");
        let w = Decimal::ONE / (p * p);
        num += w * Decimal::from_str(cost).expect("d");
        den += w;
    }
    let mix = Usd::from_decimal(num / den);
    assert!(
        (t.mix.cost_usd.pico() - mix.pico()).abs() <= 1,
        "{:?} vs {mix:?}",
        t.mix.cost_usd
    );
    assert_eq!(t.mix.cost_usd.to_string(), "$151.99");
    let share = e.endpoints[0].mix_share;
    assert!((share - 0.250_991_196).abs() < 1e-6, "{share}");

    // Time: 60M tokens over 256 streams at the stated default of 20 tok/s.
    assert!(
        e.endpoints
            .iter()
            .all(|r| r.speed_source == SpeedSource::Default)
    );
    assert!(
        (t.cheapest.time_s - 11_718.75).abs() < 1e-6,
        "{}",
        t.cheapest.time_s
    );

    // $150: fits at the cheapest only; at the mix, 150 / 151.99 of the work.
    let v = &e.verdict;
    assert_eq!(v.status, VerdictStatus::FitsAtCheapest);
    assert_eq!(v.cheapest.headroom_usd, usd("13.5"));
    assert_eq!(v.mix.prompts_that_fit, 9_869);
    assert!(!v.dearest.fits);
    // It says which assumptions it made.
    let said = e.assumptions.join("\n");
    for want in [
        "characters / 4 plus 4 tokens per message",
        "big: no observed outputs: assumes the token budget is spent",
        "1 / price_out²",
        "a default of 20 tok/s",
        "budget_usd $150.00 minus $0.00",
    ] {
        assert!(said.contains(want), "{want}\n{said}");
    }
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_outputs_give_the_observed_mean_and_the_remaining_prompts() {
    let s = setup();
    let sim = sim::start(SimConfig::fast_no_faults(), 0)
        .await
        .expect("sim");
    // Dataset A: 100 prompts of 400 characters (100 + 4 tokens each); 20 done with 500,
    // 510, ... 690 completion tokens (mean 595), 5 rejected.
    write_sized_prompts(&s.dir.join("a.jsonl"), 100, 400);
    let mut outputs = Vec::new();
    let mut ledger = Vec::new();
    for i in 0..20u64 {
        let tokens = 500 + 10 * i;
        // 40 ms a token: 25 tok/s a stream at chutes/int4.
        let id = format!("q-{i}");
        outputs.push(output_line(&id, "chutes/int4", tokens, tokens * 40, 0.005));
        // The last output's ledger line was lost in a crash: it counts as spent anyway.
        if i < 19 {
            ledger.push(ledger_line(&id, "A", "complete", 0.005, &format!("r-{i}")));
        }
    }
    // One request still open (dispatched, never closed), $0.25 of another kind of spend.
    ledger.push(ledger_line("q-90", "A", "dispatched", 0.0, "r-90"));
    ledger.push(ledger_line("probe", "", "other", 0.25, "p-1"));
    write_lines(&s.out.join("A.jsonl"), &outputs);
    let rejects: Vec<Value> = (20..25)
        .map(|i| {
            json!({"id": format!("q-{i}"), "line": i + 1, "error": "x", "error_kind": "http",
                        "attempts": 6, "created_at": "2026-01-01T00:00:00Z"})
        })
        .collect();
    write_lines(&s.out.join("A.rejects.jsonl"), &rejects);
    write_lines(&s.out.join("spend.jsonl"), &ledger);
    // Dataset B: 90 prompts, a system prompt added to each, max_samples 30 with 10 done.
    write_sized_prompts(&s.dir.join("b.jsonl"), 90, 200);
    let b_out: Vec<Value> = (0..10)
        .map(|i| output_line(&format!("q-{i}"), "siliconflow/int4", 1_000, 0, 0.0))
        .collect();
    write_lines(&s.out.join("B.jsonl"), &b_out);

    let body = "[request]\nmax_tokens = 4000\n\
                [[dataset]]\nname = \"A\"\nprompts = \"a.jsonl\"\n\
                [[dataset]]\nname = \"B\"\nprompts = \"b.jsonl\"\nmax_samples = 30\n\
                system_prompt = \"Think step by step.\"\n";
    let cfg = config(&s, &sim.base_url(), body);
    let opts = EstimateOptions {
        mean_output: Some(7),
        ..Default::default()
    };
    let e = estimate(&cfg, &opts).await;

    let a = &e.datasets[0];
    assert_eq!((a.done, a.rejected, a.prompts_remaining), (20, 5, 75));
    assert_eq!(a.output_basis, OutputBasis::Observed { outputs: 20 });
    assert_eq!(a.mean_output_tokens, 595.0);
    assert_eq!(a.output_tokens, 75 * 595);
    assert_eq!(a.input_tokens, 75 * 104);
    assert_eq!(a.output_tokens_done, 11_900);

    // B: 80 not done, but max_samples leaves 20; 19 characters of system prompt + 200 of
    // prompt = 219 characters, 2 messages: ceil(20 × 219 / 4) + 20 × 8 = 1,095 + 160.
    let b = &e.datasets[1];
    assert_eq!((b.done, b.prompts_remaining), (10, 20));
    assert_eq!(b.output_basis, OutputBasis::Observed { outputs: 10 });
    assert_eq!(b.output_tokens, 20 * 1_000);
    assert_eq!(b.input_tokens, 1_095 + 160);

    // Spent: 19 ledger lines of $0.005, the unbooked output, the other $0.25.
    assert_eq!(e.verdict.spent_usd, usd("0.35"));
    // chutes/int4 served 20 requests at 25 tok/s a stream; siliconflow's records have no
    // request time, so its speed is the default.
    let chutes = &e.endpoints[0];
    assert_eq!(chutes.tag, "chutes/int4");
    assert_eq!(chutes.speed_source, SpeedSource::Observed { outputs: 20 });
    assert!((chutes.stream_tok_per_s - 25.0).abs() < 1e-9);
    let sf = e.endpoints.iter().find(|r| r.tag == "siliconflow/int4");
    assert_eq!(sf.map(|r| r.speed_source), Some(SpeedSource::Default));

    let said = e.assumptions.join("\n");
    for want in [
        "A: output tokens from the observed mean of 20 existing outputs: 595 per prompt",
        "--mean-output not used",
        "B: max_samples 30 leaves 20 of the 80 prompts not yet done",
        "1 request is open in the ledger",
        "$0.005000 of outputs with no ledger line",
    ] {
        assert!(said.contains(want), "{want}\n{said}");
    }
    // Read-only: the files are as written.
    assert_eq!(read_jsonl::<Value>(&s.out.join("spend.jsonl")).len(), 21);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_exclusions_are_respected() {
    let s = setup();
    let sim = sim::start(SimConfig::fast_no_faults(), 0)
        .await
        .expect("sim");
    write_sized_prompts(&s.dir.join("p.jsonl"), 50, 100);
    let job = "[[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n";
    let opts = EstimateOptions {
        mean_output: Some(1_000),
        ..Default::default()
    };

    // Faithful: native INT4 only; fp4 re-quantized and undisclosed quantizations are out.
    let e = estimate(&config(&s, &sim.base_url(), job), &opts).await;
    let mut allowed = tags(&e);
    allowed.sort_unstable();
    let mut want = FAITHFUL.to_vec();
    want.sort_unstable();
    assert_eq!(allowed, want);
    let reason = |e: &Estimate, tag: &str| {
        (e.excluded.iter())
            .find(|x| x.tag == tag)
            .map(|x| x.reason.clone())
    };
    assert_eq!(
        reason(&e, "baseten/fp4").as_deref(),
        Some("policy: fp4 re-quantized")
    );
    for tag in ["deepinfra", "together", "novita", "fireworks", "venice"] {
        assert_eq!(
            reason(&e, tag).as_deref(),
            Some("policy: unknown quant"),
            "{tag}"
        );
    }
    // deepinfra would be the second cheapest: its price is in no total.
    assert!(
        e.endpoints
            .iter()
            .all(|r| r.quantization.as_str() == "int4")
    );

    // The operator's exclusion moves the cheapest.
    let body = format!("[policy]\nexclude = [\"chutes\"]\n{job}");
    let e = estimate(&config(&s, &sim.base_url(), &body), &opts).await;
    assert_eq!(
        e.totals.cheapest.endpoint.as_deref(),
        Some("siliconflow/int4")
    );
    assert_eq!(reason(&e, "chutes/int4").as_deref(), Some("operator"));

    // Any quantization: ten endpoints; baseten is still out, down by its uptime.
    let body = format!("[policy]\nmode = \"any\"\n{job}");
    let e = estimate(&config(&s, &sim.base_url(), &body), &opts).await;
    assert_eq!(e.endpoints.len(), 10);
    assert!(tags(&e).contains(&"deepinfra"));
    assert_eq!(
        reason(&e, "baseten/fp4").as_deref(),
        Some("down: uptime 29.8%")
    );
    sim.stop().await;
}

#[tokio::test]
async fn own_servers_only_need_no_listing() {
    // openrouter = false: no key, no listing; the own server's configured prices and its
    // concurrency cap. The base URL goes nowhere, so a listing request would fail the test.
    let s = setup();
    write_sized_prompts(&s.dir.join("p.jsonl"), 40, 100);
    let body = "openrouter = false\nconcurrency = 64\n\
                [[endpoint]]\nname = \"local\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                model = \"kimi\"\nquantization = \"int4\"\nprice_in_per_m = 0.1\n\
                price_out_per_m = 0.5\nconcurrency = 8\n\
                [[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n";
    let cfg = config(&s, "http://127.0.0.1:9/api/v1", body);
    let opts = EstimateOptions {
        mean_output: Some(1_000),
        stream_tps: Some(25.0),
        ..Default::default()
    };
    let e = estimate(&cfg, &opts).await;
    assert_eq!(tags(&e), ["local"]);
    let local = &e.endpoints[0];
    assert!(local.own_server);
    assert_eq!(local.streams, 8);
    // 40,000 output tokens at $0.50/M plus 40 × 29 input tokens at $0.10/M.
    assert_eq!(local.cost_usd, usd("0.020116"));
    // 40,000 tokens / (8 streams × 25 tok/s).
    assert!((local.time_s - 200.0).abs() < 1e-9);
    assert!(
        e.assumptions
            .iter()
            .any(|a| a == "prices: the config's [[endpoint]] prices for its own servers"),
        "{:?}",
        e.assumptions
    );
}

const CLI_KEY: &str = "sk-or-v1-estimate-cli-SECRET-4242";

fn harvest() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harvest"));
    c.env("HARVEST_ESTIMATE_KEY", CLI_KEY)
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("HARVEST_BASE_URL");
    c
}

async fn run_cli(args: Vec<String>) -> (i32, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = harvest().args(&args).output().expect("runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    })
    .await
    .expect("join")
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    k.sort_unstable();
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_prints_a_stable_json_document_and_a_readable_table() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let mut sc = SimConfig::fast_no_faults();
    sc.api_key = Some(CLI_KEY.to_string());
    let sim = sim::start(sc, 0).await.expect("sim");
    let cfg = write_job(
        d,
        200,
        &sim.base_url(),
        "HARVEST_ESTIMATE_KEY",
        "budget_usd = 2.0\n[request]\nmax_tokens = 3000",
        "A",
    );
    let cfg_arg = cfg.display().to_string();
    let args = |extra: &[&str]| {
        let mut a = vec!["estimate".to_string(), "-c".into(), cfg_arg.clone()];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };

    let (code, out, err) = run_cli(args(&["--json"])).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["schema"], 1);
    // The key's limits against the run (the simulator's key has none).
    let account = &v["account"];
    assert!(
        account["in_flight_usd"].is_string() || account["in_flight_usd"].is_number(),
        "{account}"
    );
    assert!(
        account["notes"][0]
            .as_str()
            .is_some_and(|n| n.contains("no credit limit")),
        "{account}"
    );
    assert_eq!(
        keys(&v),
        [
            "account",
            "assumptions",
            "concurrency",
            "datasets",
            "endpoints",
            "excluded",
            "model",
            "policy",
            "requests_per_second",
            "routing",
            "schema",
            "tokens",
            "totals",
            "verdict"
        ]
    );
    assert_eq!(
        keys(&v["datasets"][0]),
        [
            "bad_lines",
            "budget_left",
            "cost_usd",
            "done",
            "input_tokens",
            "max_samples",
            "max_tokens",
            "mean_output_tokens",
            "name",
            "output_basis",
            "output_token_budget",
            "output_tokens",
            "output_tokens_done",
            "prompts_in_file",
            "prompts_remaining",
            "prompts_to_send",
            "rejected",
            "requests_to_send"
        ]
    );
    assert_eq!(
        keys(&v["endpoints"][0]),
        [
            "cost_usd",
            "fidelity",
            "input_cost_usd",
            "mix_share",
            "output_cost_usd",
            "own_server",
            "price_in_per_m",
            "price_out_per_m",
            "pricing",
            "provider",
            "quantization",
            "request_cost_usd",
            "speed_source",
            "stream_tok_per_s",
            "streams",
            "tag",
            "time_s"
        ]
    );
    assert_eq!(
        keys(&v["totals"]),
        [
            "cheapest",
            "dearest",
            "input_tokens",
            "mix",
            "output_tokens",
            "prompts"
        ]
    );
    assert_eq!(
        keys(&v["totals"]["mix"]),
        ["cost_usd", "endpoint", "time_s"]
    );
    assert_eq!(
        keys(&v["verdict"]),
        [
            "available_usd",
            "budget_usd",
            "cheapest",
            "dearest",
            "mix",
            "spent_usd",
            "status"
        ]
    );
    assert_eq!(
        keys(&v["verdict"]["cheapest"]),
        [
            "cost_usd",
            "fits",
            "headroom_usd",
            "output_tokens_that_fit",
            "prompts_that_fit"
        ]
    );
    assert_eq!(
        keys(&v["tokens"]),
        ["chars_per_token", "tokens_per_message"]
    );
    assert_eq!(
        keys(&v["excluded"][0]),
        [
            "exclusion",
            "fidelity",
            "price_in_per_m",
            "price_out_per_m",
            "provider",
            "quantization",
            "reason",
            "tag"
        ]
    );
    // 200 prompts × max_tokens 3,000 (no budget, no outputs): an upper bound, said so.
    assert_eq!(v["datasets"][0]["output_tokens"], 600_000);
    assert_eq!(v["datasets"][0]["output_basis"]["kind"], "max_tokens");
    assert_eq!(v["endpoints"][0]["tag"], "chutes/int4");
    assert_eq!(v["endpoints"][0]["pricing"]["completion"], "0.0000022");
    // With the key, the listing's medians give each endpoint's speed.
    assert_eq!(v["endpoints"][0]["speed_source"]["kind"], "listing");
    assert_eq!(v["totals"]["cheapest"]["endpoint"], "chutes/int4");
    let said = v["assumptions"].to_string();
    assert!(
        said.contains("max_tokens (3,000) per prompt, an upper bound"),
        "{said}"
    );

    // --mean-output replaces the upper bound; --stream-tps every speed.
    let (code, out, err) = run_cli(args(&[
        "--json",
        "--mean-output",
        "500",
        "--stream-tps",
        "10",
    ]))
    .await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["datasets"][0]["output_tokens"], 100_000);
    assert_eq!(v["endpoints"][0]["speed_source"]["kind"], "given");
    assert_eq!(v["endpoints"][0]["stream_tok_per_s"], 10.0);

    // The table: within 100 columns, every part there, the key nowhere.
    let (code, out, err) = run_cli(args(&["--mean-output", "500"])).await;
    assert_eq!(code, 0, "{err}");
    for part in [
        "moonshotai/kimi-k2.5: the remaining work of 1 dataset",
        "chutes/int4",
        "excluded: deepinfra, together, novita, fireworks, venice (policy: unknown quant); baseten/fp4",
        "cheapest",
        "budget $2.00 - $0.00 spent = $2.00 available: fits",
        "assumptions:",
    ] {
        assert!(out.contains(part), "{part}\n{out}");
    }
    let widest = out.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest <= 100, "{widest} columns\n{out}");
    assert!(!out.contains(CLI_KEY) && !err.contains(CLI_KEY));

    // Bad input: exit code 2; an unreachable API: exit code 1.
    let (code, _, err) = run_cli(args(&["--stream-tps", "0"])).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--stream-tps"), "{err}");
    let (code, _, err) = run_cli(vec![
        "estimate".into(),
        "-c".into(),
        d.join("missing.toml").display().to_string(),
    ])
    .await;
    assert_eq!(code, 2, "{err}");
    std::fs::write(
        &cfg,
        std::fs::read_to_string(&cfg)
            .expect("read")
            .replace(&sim.base_url(), "http://127.0.0.1:9/api/v1"),
    )
    .expect("write");
    let (code, _, err) = run_cli(args(&[])).await;
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains(CLI_KEY));
    sim.stop().await;
}

/// Answers cut while thinking in an earlier run are said before the next prompts are bought:
/// at the start of `harvest run` and among `harvest estimate`'s assumptions, with the fix; not
/// once max_tokens is raised above what cut them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earlier_cuts_while_thinking_are_said_before_the_next_run() {
    // Answers of ~200 tokens, 30% of them reasoning first: at max_tokens 30 most answers are
    // cut inside their reasoning.
    let sim = fast_sim(200.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let key = "sk-or-v1-estimate-test-key-000000000000";
    let var = "HARVEST_CUT_TEST_KEY";
    let settings = |max: u32| format!("concurrency = 8\n[request]\nmax_tokens = {max}");
    write_job_with_ids(d, &sim.base_url(), var, 30, &settings(30));
    let (code, text) = run_headless(d, var, key, &[]).await;
    assert_eq!(code, 0, "{text}");
    // Most of them (lengths vary): "dataset A: N of 30 answers so far (P%) were cut ...".
    let said = |text: &str| {
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        flat.contains("of 30 answers so far (")
            && flat.contains("were cut while thinking at max_tokens 30: kept as truncated rows")
            && flat.contains("raise [request] max_tokens")
    };
    // More prompts, same max_tokens: the next run and the estimate say it.
    write_job_with_ids(d, &sim.base_url(), var, 40, &settings(30));
    let estimate = |d: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_harvest"))
            .env(var, key)
            .args(["estimate", "-c"])
            .arg(d.join("harvest.toml"))
            .output()
            .expect("estimate");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert!(said(&estimate(d)), "{}", estimate(d));
    let (code, text) = run_headless(d, var, key, &[]).await;
    assert_eq!(code, 0, "{text}");
    assert!(said(&text) && text.contains("dataset A: "), "{text}");
    // Raised: nothing to say about cuts at a lower limit.
    write_job_with_ids(d, &sim.base_url(), var, 50, &settings(4096));
    assert!(
        !estimate(d).contains("cut while thinking"),
        "{}",
        estimate(d)
    );
    // (Other request parameters than the output's: the run asks for --force.)
    let (code, text) = run_headless(d, var, key, &["--force"]).await;
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("cut while thinking at"), "{text}");
    sim.stop().await;
}
