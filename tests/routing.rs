//! Routing as OpenRouter's slugs mean it, through the binary against the simulator on
//! 127.0.0.1 with a table of variant pairs (`assets/providers/kimi-k2.5-variants.json`): a
//! base-slug endpoint left out next to its allowed variant, and an allowed base-slug endpoint
//! next to a variant left out. The simulator's request log shows where requests went.

mod common;

use std::collections::HashMap;
use std::path::Path;

use harvest::sim::{self, ControlRequest, ProviderTable, SimConfig, SimHandle};

const VAR: &str = "HARVEST_ROUTING_TEST_KEY";
const KEY: &str = "sk-or-v1-routing-test-key-000000000";

async fn variants_sim(log_bodies: bool) -> SimHandle {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/providers/kimi-k2.5-variants.json");
    let table = ProviderTable::load(&path).expect("variants table");
    let mut cfg = SimConfig::fast_no_faults_with(table);
    cfg.log_bodies = log_bodies;
    let s = sim::start(cfg, 0).await.expect("sim");
    s.state
        .control(&ControlRequest {
            output_tokens_mean: Some(20.0),
            ..Default::default()
        })
        .expect("control");
    s
}

/// Requests answered per endpoint tag.
fn served(sim: &SimHandle) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for r in sim
        .state
        .requests_since(0)
        .iter()
        .filter(|r| r.status == 200)
    {
        *n.entry(r.tag.clone()).or_default() += 1;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_allowed_variants_serve_in_openrouter_routing() {
    let sim = variants_sim(true).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write_job_with_ids(
        d,
        &sim.base_url(),
        VAR,
        300,
        "routing = \"openrouter\"\nconcurrency = 16\n[request]\nmax_tokens = 400",
    );
    let (code, text) = common::run_headless(d, VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{text}");
    let n = served(&sim);
    let got = |t: &str| n.get(t).copied().unwrap_or(0);
    // The faithful policy allows the int4 endpoints: each serves its share.
    for tag in ["chutes/int4", "together/int4", "parasail"] {
        assert!(got(tag) > 10, "{tag} served {}: {n:?}", got(tag));
    }
    // The rest serve nothing, base slugs and variants alike.
    for tag in [
        "together",
        "deepinfra",
        "deepinfra/fp4",
        "parasail/fp8",
        "baseten/fp4",
    ] {
        assert_eq!(got(tag), 0, "{tag}: {n:?}");
    }
    assert_eq!(n.values().sum::<usize>(), 300, "{n:?}");
    // What was asked: the allowed tags in `only`; in `ignore` only the variant a base slug in
    // `only` reaches.
    let body = sim.state.requests_since(0)[0].body.clone().expect("body");
    let provider = &body["provider"];
    let mut only: Vec<&str> = (provider["only"].as_array().expect("only").iter())
        .filter_map(|v| v.as_str())
        .collect();
    only.sort_unstable();
    assert_eq!(only, ["chutes/int4", "parasail", "together/int4"]);
    assert_eq!(provider["ignore"], serde_json::json!(["parasail/fp8"]));
    sim.stop().await;
}
