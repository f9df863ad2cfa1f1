//! Routing as OpenRouter's slugs mean it, through the binary against the simulator on
//! 127.0.0.1 with a table of variant pairs (`assets/providers/kimi-k2.5-variants.json`): a
//! base-slug endpoint left out next to its allowed variant, and an allowed base-slug endpoint
//! next to a variant left out. The simulator's request log shows where requests went.

use std::collections::HashMap;
use std::path::Path;

use harvest::sim::{self, ControlRequest, ProviderTable, SimConfig, SimHandle};
use harvest::store::output::OutputRecord;

const VAR: &str = "HARVEST_ROUTING_TEST_KEY";
const KEY: &str = "sk-or-v1-routing-test-key-000000000";

async fn variants_sim(log_bodies: bool) -> SimHandle {
    variants_sim_with(|_| {}, log_bodies).await
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
    crate::common::write_job_with_ids(
        d,
        &sim.base_url(),
        VAR,
        300,
        "routing = \"openrouter\"\nconcurrency = 16\n[request]\nmax_tokens = 400",
    );
    let (code, text) = crate::common::run_headless(d, VAR, KEY, &[]).await;
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
    // Each row names the endpoint that served it, though `together` and `together/int4` share
    // one provider name in responses.
    let rows: Vec<OutputRecord> = crate::common::read_jsonl(&d.join("out/A.jsonl"));
    let mut by_row: HashMap<String, usize> = HashMap::new();
    for r in &rows {
        *by_row
            .entry(r.endpoint_tag.clone().unwrap_or_default())
            .or_default() += 1;
    }
    assert_eq!(by_row, n, "rows against the simulator's log");
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

/// Each row's `params` is the body of the request that produced it, but its messages: the
/// request is found by its messages (the row's conversation without the answer).
fn rows_record_what_was_sent(rows: &[OutputRecord], sims: &[&SimHandle]) {
    let mut by_messages: HashMap<String, serde_json::Value> = HashMap::new();
    for sim in sims {
        for r in sim
            .state
            .requests_since(0)
            .iter()
            .filter(|r| r.status == 200)
        {
            let mut body = r.body.clone().expect("bodies are logged");
            let messages = body
                .as_object_mut()
                .and_then(|b| b.remove("messages"))
                .expect("messages");
            by_messages.insert(messages.to_string(), body);
        }
    }
    assert!(!rows.is_empty());
    for row in rows {
        let sent: Vec<serde_json::Value> = row.conversations[..row.conversations.len() - 1]
            .iter()
            .map(|t| serde_json::json!({"role": t.role, "content": t.content}))
            .collect();
        let body = by_messages
            .get(&serde_json::Value::Array(sent).to_string())
            .unwrap_or_else(|| panic!("{}: no request with its messages", row.id));
        assert_eq!(&row.params, body, "{}", row.id);
    }
}

fn job(d: &Path, base: &str, settings: &str) {
    crate::common::write_job_with_ids(d, base, VAR, 120, settings);
}

/// 120 prompts with `settings` run to the end against `sim`: the directory, and what the run
/// printed.
async fn run(sim: &SimHandle, settings: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tmp");
    job(dir.path(), &sim.base_url(), settings);
    let (code, text) = crate::common::run_headless(dir.path(), VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{text}");
    (dir, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rows_params_are_the_body_the_simulator_received_in_every_routing() {
    // OpenRouter routing: the routing object as sent, require_parameters in it.
    let sim = variants_sim(true).await;
    let request = "[request]\nmax_tokens = 300\ntemperature = 0.6\ntop_p = 0.95";
    let (dir, _) = run(&sim, &format!("routing = \"openrouter\"\n{request}")).await;
    let rows: Vec<OutputRecord> = crate::common::read_jsonl(&dir.path().join("out/A.jsonl"));
    rows_record_what_was_sent(&rows, &[&sim]);
    assert_eq!(rows[0].params["provider"]["require_parameters"], true);
    assert!(rows.iter().all(|r| r.native_finish_reason.is_some()));
    sim.stop().await;

    // Pinned routing with a seed: parasail does not list it, so its requests go without it.
    let sim = variants_sim(true).await;
    // Parasail cheapest, so that it serves.
    let down = serde_json::json!({"endpoints": {"chutes/int4": {"down": true},
                                                "together/int4": {"down": true}}});
    (sim.state)
        .control(&serde_json::from_value(down).expect("patch"))
        .expect("control");
    let (dir, text) = run(&sim, &format!("routing = \"pinned\"\n{request}\nseed = 7")).await;
    assert!(text.contains("parasail does not list seed"), "{text}");
    let rows: Vec<OutputRecord> = crate::common::read_jsonl(&dir.path().join("out/A.jsonl"));
    rows_record_what_was_sent(&rows, &[&sim]);
    assert!(
        rows.iter()
            .all(|r| r.endpoint_tag.as_deref() == Some("parasail"))
    );
    assert!(
        rows.iter().all(|r| r.params.get("seed").is_none()),
        "dropped for parasail"
    );
    assert!(rows.iter().all(|r| r.params["temperature"] == 0.6));
    sim.stop().await;

    // An own server with `extra`: its fields are in the row.
    let sim = variants_sim(true).await;
    let mut own_cfg = SimConfig::fast_no_faults();
    own_cfg.open_access = true;
    own_cfg.log_bodies = true;
    let own = sim::start(own_cfg, 0).await.expect("own server");
    let settings = format!(
        "openrouter = false\n{request}\n[[endpoint]]\nname = \"local\"\nbase_url = \"{}\"\n\
         model = \"moonshotai/kimi-k2.5\"\nquantization = \"int4\"\nconcurrency = 8\n\
         extra = {{ chat_template_kwargs = {{ thinking = true }} }}",
        own.base_url()
    );
    let (dir, _) = run(&sim, &settings).await;
    let rows: Vec<OutputRecord> = crate::common::read_jsonl(&dir.path().join("out/A.jsonl"));
    rows_record_what_was_sent(&rows, &[&own]);
    assert_eq!(
        rows[0].params["chat_template_kwargs"],
        serde_json::json!({"thinking": true})
    );
    own.stop().await;
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_parameters_keeps_requests_from_an_endpoint_that_lacks_one() {
    let sim = variants_sim(false).await;
    let (dir, text) = run(
        &sim,
        "routing = \"openrouter\"\nconcurrency = 16\n[request]\nmax_tokens = 300\nseed = 7",
    )
    .await;
    drop(dir);
    assert!(text.contains("parasail does not list seed"), "{text}");
    let n = served(&sim);
    assert_eq!(n.get("parasail"), None, "{n:?}");
    assert!(n.get("together/int4").is_some_and(|&k| k > 10), "{n:?}");
    sim.stop().await;
}

/// The variants simulator with `edit` applied to its table first.
async fn variants_sim_with(edit: impl FnOnce(&mut ProviderTable), log_bodies: bool) -> SimHandle {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/providers/kimi-k2.5-variants.json");
    let mut table = ProviderTable::load(&path).expect("variants table");
    edit(&mut table);
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

fn set(table: &mut ProviderTable, tag: &str, f: impl Fn(&mut harvest::sim::SimBehaviour)) {
    let e = (table.endpoints.iter_mut())
        .find(|e| e.tag.as_str() == tag)
        .expect("tag in the table");
    f(&mut e.behaviour);
}

fn status_json(d: &Path) -> serde_json::Value {
    let out = d.join("out");
    crate::common::harvest_json(&["status".as_ref(), "--json".as_ref(), out.as_os_str()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_collection_deny_and_max_price_auto_ride_on_every_request() {
    // Chutes stores data (the simulator knows; the listing does not say).
    let sim = variants_sim_with(|t| set(t, "chutes/int4", |b| b.collects_data = true), true).await;
    let (dir, _) = run(
        &sim,
        "routing = \"openrouter\"\n[request]\nmax_tokens = 300\n\
         [provider]\ndata_collection = \"deny\"\nmax_price = \"auto\"",
    )
    .await;
    let d = dir.path();
    let requests = sim.state.requests_since(0);
    assert!(!requests.is_empty());
    for r in &requests {
        let p = &r.body.as_ref().expect("body")["provider"];
        assert_eq!(p["data_collection"], "deny");
        // The dearest allowed endpoint's prices: parasail's input, together/int4's output.
        assert_eq!(
            p["max_price"],
            serde_json::json!({"prompt": 0.55, "completion": 2.8})
        );
    }
    let n = served(&sim);
    assert_eq!(n.get("chutes/int4"), None, "{n:?}");
    assert!(n.get("together/int4").is_some_and(|&k| k > 10), "{n:?}");
    // What the run asks of OpenRouter is in the policy line the TUI's providers title shows.
    let s = status_json(d);
    let policy = s["policy"].as_str().expect("policy");
    assert!(
        policy.contains("data_collection=deny") && policy.contains("max_price=auto"),
        "{policy}"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zdr_is_judged_from_the_zdr_list_and_sent() {
    let sim = variants_sim_with(|t| set(t, "together/int4", |b| b.zdr = true), true).await;
    let (dir, _) = run(
        &sim,
        "routing = \"openrouter\"\n[request]\nmax_tokens = 300\n[provider]\nzdr = true",
    )
    .await;
    let d = dir.path();
    let n = served(&sim);
    assert_eq!(n.keys().collect::<Vec<_>>(), ["together/int4"], "{n:?}");
    let first = &sim.state.requests_since(0)[0];
    let p = &first.body.as_ref().expect("body")["provider"];
    assert_eq!(p["zdr"], true);
    assert_eq!(p["only"], serde_json::json!(["together/int4"]), "{p}");
    // The others are off, and say why.
    let s = status_json(d);
    let chutes = (s["endpoints"].as_array().expect("endpoints").iter())
        .find(|e| e["tag"] == "chutes/int4")
        .expect("chutes");
    assert!(!chutes["allowed"].as_bool().expect("allowed"), "{chutes}");
    assert!(
        chutes["off"].to_string().to_lowercase().contains("zdr"),
        "{chutes}"
    );
    sim.stop().await;
}

#[test]
fn a_provider_object_in_extra_is_refused_at_load() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::write(d.join("p.jsonl"), "{\"id\": \"a\", \"prompt\": \"q\"}\n").expect("prompts");
    std::fs::write(
        d.join("harvest.toml"),
        "budget_usd = 1.0\n[request]\nmax_tokens = 100\n\
         extra = { provider = { data_collection = \"deny\" } }\n\
         [[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n",
    )
    .expect("config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
        .env(VAR, KEY)
        .args(["run", "--headless", "-c"])
        .arg(d.join("harvest.toml"))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("request.extra.provider") && err.contains("[provider]"),
        "{err}"
    );
    assert!(
        err.contains("harvest.toml:4"),
        "names the file and line: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_variant_lists_the_base_model_and_routes_by_price() {
    let sim = variants_sim(true).await;
    let (dir, _) = run(&sim, "model = \"moonshotai/kimi-k2.5:floor\"\nrouting = \"openrouter\"\n[request]\nmax_tokens = 300").await;
    let d = dir.path();
    // Sent as the variant, so OpenRouter sorts the allowed set by price: the cheapest serves.
    let requests = sim.state.requests_since(0);
    assert!(
        requests
            .iter()
            .all(|r| { r.body.as_ref().expect("body")["model"] == "moonshotai/kimi-k2.5:floor" })
    );
    let n = served(&sim);
    assert_eq!(n.keys().collect::<Vec<_>>(), ["chutes/int4"], "{n:?}");
    // The title shows it.
    assert_eq!(status_json(d)["model"], "moonshotai/kimi-k2.5:floor");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_shows_what_zdr_and_max_price_leave_out() {
    let sim = variants_sim_with(|t| set(t, "together/int4", |b| b.zdr = true), true).await;
    let base = sim.base_url();
    let table = move |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
            .args(["providers", "moonshotai/kimi-k2.5", "--base-url"])
            .arg(&base)
            .args(extra)
            .output()
            .expect("providers");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let row = |text: &str, tag: &str| {
        text.lines()
            .find(|l| l.split_whitespace().any(|w| w == tag))
            .unwrap_or_else(|| panic!("{tag} in {text}"))
            .to_string()
    };
    let (zdr, priced) = tokio::task::spawn_blocking(move || {
        (table(&["--zdr"]), table(&["--max-price", "0.5,2.5"]))
    })
    .await
    .expect("join");
    assert!(row(&zdr, "together/int4").ends_with("yes"), "{zdr}");
    assert!(
        row(&zdr, "chutes/int4").contains("no: zdr: not a ZDR endpoint"),
        "{zdr}"
    );
    // Parasail asks $0.55 in, Together $2.80 out: over the cap; Chutes is under it.
    assert!(row(&priced, "chutes/int4").ends_with("yes"), "{priced}");
    assert!(
        row(&priced, "parasail").contains("no: max_price"),
        "{priced}"
    );
    assert!(
        row(&priced, "together/int4").contains("no: max_price"),
        "{priced}"
    );
    sim.stop().await;
}

/// OpenRouter names only the provider of an answer; with two endpoints of one provider in the
/// request (parasail int4, and parasail/fp8 at twice the price), the bill says which served:
/// every row's endpoint_tag is the one the simulator billed it at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_with_two_endpoints_is_told_apart_by_its_bill() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/providers/kimi-k2.5-variants.json");
    let mut raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("table")).expect("json");
    for e in raw["endpoints"].as_array_mut().expect("endpoints") {
        if e["tag"] == "parasail/fp8" {
            e["pricing"]["prompt"] = serde_json::json!("0.0000011");
            e["pricing"]["completion"] = serde_json::json!("0.0000052");
        }
    }
    let dir = tempfile::tempdir().expect("tmp");
    let table_path = dir.path().join("table.json");
    std::fs::write(&table_path, raw.to_string()).expect("table");
    let table = ProviderTable::load(&table_path).expect("table");
    let s = sim::start(SimConfig::fast_no_faults_with(table), 0)
        .await
        .expect("sim");
    s.state
        .control(&ControlRequest {
            output_tokens_mean: Some(40.0),
            ..Default::default()
        })
        .expect("control");
    // Only Parasail's two endpoints allowed.
    let (run_dir, _) = run(
        &s,
        "routing = \"openrouter\"\nconcurrency = 8\n[request]\nmax_tokens = 400\n\
         [policy]\nmode = \"any\"\ninclude = [\"parasail\", \"parasail/fp8\"]\n\
         exclude = [\"chutes\", \"together\", \"deepinfra\", \"baseten\"]",
    )
    .await;
    let rows: Vec<OutputRecord> = crate::common::read_jsonl(&run_dir.path().join("out/A.jsonl"));
    let billed: HashMap<String, String> = (s.state.billing_entries().into_iter())
        .map(|b| (b.id, b.tag))
        .collect();
    let mut by_tag: HashMap<String, usize> = HashMap::new();
    for r in &rows {
        let gid = r.generation_id.as_deref().expect("generation id");
        let tag = r.endpoint_tag.as_deref().expect("tag");
        assert_eq!(Some(tag), billed.get(gid).map(String::as_str), "{}", r.id);
        *by_tag.entry(tag.to_string()).or_default() += 1;
    }
    assert!(by_tag.len() == 2, "both served: {by_tag:?}");
    s.stop().await;
}

/// Parameters against the listing, one rule everywhere (issue #35): under OpenRouter's routing
/// with require_parameters, a dataset whose `repetition_penalty` no endpoint lists is refused
/// before anything is sent (exit 2, naming the dataset and the parameter); pinned, the same job
/// runs with the parameter dropped where it is not listed, and every request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_no_endpoint_lists_is_refused_under_require_parameters_and_dropped_pinned() {
    let sim = variants_sim(true).await;
    let dir = tempfile::tempdir().expect("tmp");
    job(
        dir.path(),
        &sim.base_url(),
        "routing = \"openrouter\"\nconcurrency = 16\n[request]\nmax_tokens = 300\n\
         repetition_penalty = 1.05",
    );
    let (code, text) = crate::common::run_headless(dir.path(), VAR, KEY, &[]).await;
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("no allowed endpoint lists every parameter")
            && text.contains("repetition_penalty"),
        "{text}"
    );
    assert_eq!(served(&sim).values().sum::<usize>(), 0, "nothing sent");
    let (dir, _) = run(
        &sim,
        "routing = \"pinned\"\nconcurrency = 16\n[request]\nmax_tokens = 300\n\
         repetition_penalty = 1.05",
    )
    .await;
    let rows: Vec<OutputRecord> = crate::common::read_jsonl(&dir.path().join("out/A.jsonl"));
    assert_eq!(rows.len(), 120, "every prompt answered");
    assert!(
        rows.iter()
            .all(|r| r.params.get("repetition_penalty").is_none()),
        "dropped where no endpoint lists it"
    );
    sim.stop().await;
}
