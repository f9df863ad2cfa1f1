//! Prices as billed, through the binary against the simulator on 127.0.0.1: a table whose
//! listing carries a discount, a long-prompt override and a cache-read price. Every answer's
//! cost is the listed tariff applied to its tokens, the ledger equals the simulator's bill to
//! the picodollar, and the engine's price check stays quiet; when the bill departs from the
//! listing, the check says so.

use std::path::Path;

use harvest::sim::{self, ControlRequest, ProviderTable, SimConfig, SimHandle};
use harvest::store::output::OutputRecord;

const VAR: &str = "HARVEST_PRICING_TEST_KEY";
const KEY: &str = "sk-or-v1-pricing-test-key-000000000";

/// The variants table with prices that need every rule: Chutes 20% off, Together dearer past
/// 60 prompt tokens, Parasail reading cached prompt tokens at a quarter of its prompt price.
fn priced_table(dir: &Path) -> ProviderTable {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/providers/kimi-k2.5-variants.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src).expect("table")).expect("json");
    for e in v["endpoints"].as_array_mut().expect("endpoints") {
        let tag = e["tag"].as_str().expect("tag").to_string();
        let p = &mut e["pricing"];
        match tag.as_str() {
            "chutes/int4" => p["discount"] = serde_json::json!(0.2),
            "together/int4" => {
                p["overrides"] = serde_json::json!([
                    {"min_prompt_tokens": 60, "prompt": "0.000001", "completion": "0.000005"}
                ]);
            }
            "parasail" => p["input_cache_read"] = serde_json::json!("0.0000001375"),
            _ => {}
        }
    }
    let path = dir.join("priced.json");
    std::fs::write(&path, v.to_string()).expect("write");
    ProviderTable::load(&path).expect("priced table")
}

async fn start(table: ProviderTable) -> SimHandle {
    let s = sim::start(SimConfig::fast_no_faults_with(table), 0)
        .await
        .expect("sim");
    s.state
        .control(&ControlRequest {
            output_tokens_mean: Some(30.0),
            ..Default::default()
        })
        .expect("control");
    s
}

/// 160 prompts, every other one long enough for Together's long-prompt price, all under one
/// system prompt (which an endpoint that caches reads from its cache the second time).
fn job(d: &Path, base: &str) {
    let prompts: String = (0..160)
        .map(|i| {
            let text = if i % 2 == 0 {
                format!("question {i} ") + &"with a long context to read first ".repeat(12)
            } else {
                format!("question {i}")
            };
            format!(
                "{}\n",
                serde_json::json!({"id": format!("p{i:03}"), "prompt": text})
            )
        })
        .collect();
    std::fs::write(d.join("p.jsonl"), prompts).expect("prompts");
    std::fs::write(
        d.join("harvest.toml"),
        format!(
            "base_url = \"{base}\"\napi_key_env = \"{VAR}\"\nbudget_usd = 5.0\nconcurrency = 8\n\
             routing = \"openrouter\"\n[request]\nmax_tokens = 400\n\
             [[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n\
             system_prompt = \"You are a careful assistant. Answer in plain words.\"\n"
        ),
    )
    .expect("config");
}

fn per_m(tokens: u64, usd_per_m: f64) -> f64 {
    tokens as f64 * usd_per_m / 1e6
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discount_override_and_cache_reads_are_billed_as_listed() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let sim = start(priced_table(d)).await;
    job(d, &sim.base_url());
    let (code, text) = crate::common::run_headless(d, VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("its listed prices put at"), "{text}");
    let rows: Vec<OutputRecord> = crate::common::read_jsonl(&d.join("out/A.jsonl"));
    assert_eq!(rows.len(), 160);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let (mut long_together, mut discounted, mut cached) = (0, 0, 0);
    for r in &rows {
        let (p, c, k) = (
            r.usage.prompt_tokens,
            r.usage.completion_tokens,
            r.usage.cached_tokens,
        );
        let cost = r.cost_usd.as_f64();
        match r.endpoint_tag.as_deref() {
            Some("chutes/int4") => {
                discounted += 1;
                assert!(close(cost, 0.8 * (per_m(p, 0.45) + per_m(c, 2.2))), "{r:?}");
            }
            Some("together/int4") if p > 60 => {
                long_together += 1;
                assert!(close(cost, per_m(p, 1.0) + per_m(c, 5.0)), "{r:?}");
            }
            Some("parasail") if k > 0 => {
                cached += 1;
                assert!(
                    close(cost, per_m(p - k, 0.55) + per_m(k, 0.1375) + per_m(c, 2.6)),
                    "{r:?}"
                );
            }
            _ => {}
        }
    }
    assert!(
        discounted > 0 && long_together > 0 && cached > 0,
        "every rule met: {discounted} discounted, {long_together} long at Together, {cached} cached"
    );
    // To the picodollar.
    assert_eq!(
        crate::common::ledger_total(&d.join("out")),
        sim.state.billed_total()
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bill_that_departs_from_the_listing_is_said() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let mut table = priced_table(d);
    // Chutes bills half its listed price: the listing says nothing of it.
    let chutes = (table.endpoints.iter_mut())
        .find(|e| e.tag.as_str() == "chutes/int4")
        .expect("chutes");
    chutes.tariff.discount = rust_decimal::Decimal::new(6, 1);
    let sim = start(table).await;
    job(d, &sim.base_url());
    let (code, text) = crate::common::run_headless(d, VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{text}");
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("its listed prices put at"))
        .collect();
    assert_eq!(said.len(), 1, "once, for chutes: {text}");
    assert!(said[0].contains("chutes/int4"), "{}", said[0]);
    // The ledger keeps the bill.
    assert_eq!(
        crate::common::ledger_total(&d.join("out")),
        sim.state.billed_total()
    );
    sim.stop().await;
}
