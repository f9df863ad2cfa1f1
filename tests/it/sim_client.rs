//! The OpenRouter client against the simulator on 127.0.0.1: listing, streaming and
//! non-streaming completions, routing filters, every fault kind, cancellation billing, `/key`
//! and `/generation`.

use std::collections::HashMap;
use std::time::Duration;

use harvest::domain::{Quantization, Usd};
use harvest::openrouter::{
    ApiError, ApiKey, ChatRequest, ClientOptions, ErrorKind, Message, OpenRouterClient,
    ProviderPreferences, StreamTimeouts, TimeoutKind,
};
use harvest::sim::{self, ControlRequest, EndpointPatch, Outcome, SimConfig, SimHandle};

const MODEL: &str = "moonshotai/kimi-k2.5";

/// `cfg` with one token an event and closes noticed at once at every endpoint (the built-in
/// table streams several an event and notices late): for tests that count tokens by the
/// events they read.
fn one_token_an_event(mut cfg: SimConfig) -> SimConfig {
    for e in &mut cfg.table.endpoints {
        e.behaviour.tokens_per_event = sim::TokensPerEvent::Fixed(1);
        e.behaviour.close_notice_ms = 0.0;
    }
    cfg
}

async fn start(cfg: SimConfig) -> (SimHandle, OpenRouterClient) {
    let sim = sim::start(cfg, 0).await.expect("simulator starts");
    let client = OpenRouterClient::new(ClientOptions::new(
        sim.base_url(),
        ApiKey::new("sk-or-v1-test-key-0123456789"),
    ))
    .expect("client");
    (sim, client)
}

fn req(prompt: &str, max_tokens: u32, pin: &str) -> ChatRequest {
    ChatRequest::new(MODEL, vec![Message::user(prompt)], max_tokens)
        .with_provider(ProviderPreferences::pinned(pin))
}

/// `r` streamed to its end.
async fn streamed(client: &OpenRouterClient, r: &ChatRequest) -> harvest::openrouter::Completion {
    (client
        .chat_stream(r, fast_timeouts())
        .await
        .expect("stream starts"))
    .collect()
    .await
    .expect("complete")
}

fn fast_timeouts() -> StreamTimeouts {
    StreamTimeouts {
        first_token: Duration::from_secs(10),
        idle: Duration::from_secs(5),
    }
}

fn patch(sim: &SimHandle, tag: &str, p: EndpointPatch) {
    let mut c = ControlRequest::default();
    c.endpoints.insert(tag.to_string(), p);
    sim.state.control(&c).expect("control");
}

fn faults(sim: &SimHandle, tag: &str, spec: &str) {
    patch(
        sim,
        tag,
        EndpointPatch {
            faults_spec: Some(spec.to_string()),
            ..Default::default()
        },
    );
}

#[tokio::test]
async fn lists_models_and_endpoints() {
    let (sim, client) = start(SimConfig::fast_no_faults()).await;
    let models = client.models().await.expect("models");
    assert_eq!(models.len(), 1);
    assert_eq!(models[0].id, MODEL);
    assert_eq!(models[0].context_length, Some(262_144));

    let listing = client.endpoints(MODEL).await.expect("endpoints");
    assert_eq!(listing.endpoints.len(), 11);
    let chutes = listing
        .endpoints
        .iter()
        .find(|e| e.tag.as_str() == "chutes/int4")
        .expect("chutes");
    assert_eq!(chutes.provider_name, "Chutes");
    assert_eq!(chutes.quantization, Quantization::Int4);
    assert_eq!(chutes.pricing.completion.to_string(), "$2.20/M");
    assert!(
        chutes.latency_last_30m.is_some(),
        "stats are there with a key"
    );

    // Without a key the listing works but the 30-minute stats are null, as on the real API.
    let anon = OpenRouterClient::new(ClientOptions::new(sim.base_url(), None)).expect("client");
    let listing = anon.endpoints(MODEL).await.expect("endpoints");
    assert!(
        listing
            .endpoints
            .iter()
            .all(|e| e.latency_last_30m.is_none())
    );

    let err = client
        .endpoints("moonshotai/kimi-k9")
        .await
        .expect_err("unknown");
    assert_eq!(err.status(), Some(404));
    let err = client.endpoints("no-slash").await.expect_err("bad id");
    assert!(matches!(err, ApiError::Invalid(_)));
    sim.stop().await;
}

/// Providers send several tokens an event (issue #51: recorded OpenRouter streams carry 2.7 a
/// content event at the median, Kimi's providers over 4): the simulator does too, at a count
/// forced for every event or drawn per event around a mean; usage and the bill count tokens
/// as before, and the text is the same text.
#[tokio::test]
async fn several_tokens_an_event_are_streamed_and_counted_as_tokens() {
    use harvest::sim::TokensPerEvent;
    let collect = |sim: &SimHandle, client: &OpenRouterClient, t: TokensPerEvent| {
        sim.state
            .control(&harvest::sim::ControlRequest {
                all: Some(harvest::sim::EndpointPatch {
                    tokens_per_event: Some(t),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .expect("control");
        let client = client.clone();
        async move { streamed(&client, &req("Explain EAGLE-3.", 4096, "chutes/int4")).await }
    };
    let (sim, client) = start(SimConfig::fast_no_faults()).await;
    let one = collect(&sim, &client, TokensPerEvent::Fixed(1)).await;
    assert_eq!(one.events, one.usage.completion_tokens);
    let eight = collect(&sim, &client, TokensPerEvent::Fixed(8)).await;
    let n = eight.usage.completion_tokens;
    assert!(n > 64, "a long answer: {n}");
    // Every event full but the last of the thinking, the last of the answer, and those a
    // write's end cut short: about an eighth as many events as tokens.
    assert!(
        eight.events >= n.div_ceil(8) && eight.events < n / 4,
        "{} events for {n} tokens",
        eight.events
    );
    let drawn = collect(&sim, &client, TokensPerEvent::Mean(4.0)).await;
    let per_event = drawn.usage.completion_tokens as f64 / drawn.events as f64;
    assert!(
        (2.0..=6.0).contains(&per_event),
        "{per_event} tokens an event around a mean of 4"
    );
    // The bill counts tokens, not events.
    let expected =
        Usd::from_pico(eight.usage.prompt_tokens as i64 * 450_000 + n as i64 * 2_200_000);
    assert_eq!(eight.cost(), Some(expected));
    sim.stop().await;
}

#[tokio::test]
async fn streamed_completion_is_served_and_billed_by_the_pinned_endpoint() {
    let (sim, client) = start(SimConfig::fast_no_faults()).await;
    let c = streamed(&client, &req("Explain EAGLE-3.", 4096, "chutes/int4")).await;
    assert_eq!(c.provider.as_deref(), Some("Chutes"));
    assert!(c.id.as_deref().is_some_and(|i| i.starts_with("gen-")));
    assert!(!c.content.is_empty());
    let reasoning = c.reasoning.as_deref().expect("Kimi reasons by default");
    assert!(!reasoning.is_empty());
    // The table's Chutes streams several tokens an event (4.2 on average, bursts up to 64).
    assert!(
        c.events < c.usage.completion_tokens && c.events * 64 >= c.usage.completion_tokens,
        "{} events for {} tokens",
        c.events,
        c.usage.completion_tokens
    );
    assert!(c.usage.reasoning_tokens() > 0);
    assert!(c.finish_reason == "stop" || c.finish_reason == "length");
    // Cost: prompt at $0.45/M and completion at $2.20/M, to the picodollar.
    let expected = Usd::from_pico(
        c.usage.prompt_tokens as i64 * 450_000 + c.usage.completion_tokens as i64 * 2_200_000,
    );
    assert_eq!(c.cost(), Some(expected));
    assert_eq!(sim.state.billed_total(), expected);
    let per = sim.state.billing_per_tag();
    assert_eq!(per["chutes/int4"].billed, 1);
    assert_eq!(
        per["chutes/int4"].completion_tokens,
        c.usage.completion_tokens
    );

    // The request log names the endpoint that served.
    let log = sim.state.requests_since(0);
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].tag, "chutes/int4");
    assert_eq!(log[0].status, 200);
    sim.stop().await;
}

/// At a finite pace an event goes out when its last token is decoded, whole: a provider that
/// decodes tokens in bursts flushes each burst as one event. Only the last event of each kind
/// (reasoning, then content) goes out part-filled, however the writes fall in time.
#[tokio::test]
async fn a_paced_stream_sends_each_event_whole_when_its_last_token_is_decoded() {
    let mut cfg = SimConfig::fast_no_faults();
    cfg.speed_scale = 0.02; // 48 tok/s → ~0.4 ms a token, writes at least 25 ms apart
    for e in &mut cfg.table.endpoints {
        e.behaviour.tokens_per_event = sim::TokensPerEvent::Fixed(4);
    }
    let (sim, client) = start(cfg).await;
    sim.state
        .control(&ControlRequest {
            output_tokens_mean: Some(1_500.0),
            output_tokens_sigma: Some(0.0),
            ..Default::default()
        })
        .expect("control");
    let c = streamed(&client, &req("Explain EAGLE-3.", 4096, "chutes/int4")).await;
    let n = c.usage.completion_tokens;
    let thinking = c.usage.reasoning_tokens().min(n);
    assert!(thinking > 0 && n > thinking, "{thinking} of {n} thinking");
    assert_eq!(
        c.events,
        thinking.div_ceil(4) + (n - thinking).div_ceil(4),
        "{n} tokens, {thinking} thinking, in {} events",
        c.events
    );
    sim.stop().await;
}

#[tokio::test]
async fn non_streamed_completion_matches_the_streamed_text_for_greedy_requests() {
    let (sim, client) = start(SimConfig::fast_no_faults()).await;
    let mut r = req("Prove sqrt(2) is irrational.", 300, "siliconflow/int4");
    r.temperature = Some(0.0);
    let a = client.chat(&r).await.expect("non-streamed");
    let b = streamed(&client, &r).await;
    assert_eq!(a.provider.as_deref(), Some("SiliconFlow"));
    assert_eq!(a.content, b.content);
    assert_eq!(a.reasoning, b.reasoning);
    assert_eq!(a.usage.completion_tokens, b.usage.completion_tokens);
    assert_eq!(a.cost(), b.cost());
    sim.stop().await;
}

#[tokio::test]
async fn max_tokens_truncates_with_finish_reason_length() {
    let (sim, client) = start(SimConfig::fast_no_faults()).await;
    let c = client
        .chat_stream(&req("long one", 16, "chutes/int4"), fast_timeouts())
        .await
        .expect("stream")
        .collect()
        .await
        .expect("complete");
    assert_eq!(c.finish_reason, "length");
    assert_eq!(c.usage.completion_tokens, 16);
    sim.stop().await;
}

#[tokio::test]
async fn routing_filters() {
    let (sim, client) = start(SimConfig::fast_no_faults()).await;
    // A filter that leaves nothing: the documented 404 with `excluded_by`, not retryable.
    let mut r = ChatRequest::new(MODEL, vec![Message::user("x")], 10);
    r.provider = Some(ProviderPreferences {
        quantizations: Some(vec![Quantization::Fp8]),
        ..Default::default()
    });
    let err = client.chat(&r).await.expect_err("nothing matches");
    assert_eq!(err.status(), Some(404));
    assert!(!err.is_retryable());
    assert!(
        err.to_string().contains("excluded by: quantization"),
        "{err}"
    );

    // `fp4` matches the fp4 family: only BaseTen.
    r.provider = Some(ProviderPreferences {
        quantizations: Some(vec![Quantization::Fp4]),
        allow_fallbacks: Some(false),
        ..Default::default()
    });
    let c = client.chat(&r).await.expect("baseten serves");
    assert_eq!(c.provider.as_deref(), Some("BaseTen"));

    // `only` with several tags never goes elsewhere.
    let only = ProviderPreferences::only(vec!["chutes/int4".into(), "atlas-cloud/int4".into()]);
    for i in 0..20 {
        let r = ChatRequest::new(MODEL, vec![Message::user(format!("q{i}"))], 8)
            .with_provider(only.clone());
        let c = client.chat(&r).await.expect("served");
        let p = c.provider.expect("provider");
        assert!(p == "Chutes" || p == "AtlasCloud", "{p}");
    }
    // A wrong model id is a 400.
    let r = ChatRequest::new("moonshotai/kimi-k9", vec![Message::user("x")], 8);
    assert_eq!(
        client.chat(&r).await.expect_err("bad model").status(),
        Some(400)
    );
    sim.stop().await;
}

#[tokio::test]
async fn fallbacks_route_around_a_failing_endpoint_only_when_allowed() {
    let (sim, client) = start(SimConfig::fast_no_faults()).await;
    faults(&sim, "chutes/int4", "server_error=1");
    let mut p = ProviderPreferences {
        order: Some(vec!["chutes/int4".into()]),
        ..Default::default()
    };
    let r = ChatRequest::new(MODEL, vec![Message::user("x")], 8).with_provider(p.clone());
    let c = client.chat(&r).await.expect("fell back");
    assert_ne!(c.provider.as_deref(), Some("Chutes"));
    p.allow_fallbacks = Some(false);
    let r = r.with_provider(p);
    let e = client.chat(&r).await.expect_err("no fallback");
    assert_eq!(e.status(), Some(502));
    assert!(e.is_retryable());
    assert_eq!(e.provider_name(), Some("Chutes"));
    sim.stop().await;
}

async fn stream_error(client: &OpenRouterClient, pin: &str, timeouts: StreamTimeouts) -> ApiError {
    match client.chat_stream(&req("fault", 2000, pin), timeouts).await {
        Err(e) => e,
        Ok(s) => s
            .collect()
            .await
            .expect_err("the fault must fail the stream"),
    }
}

#[tokio::test]
async fn every_fault_kind_is_a_typed_retryable_error() {
    let (sim, client) = start(SimConfig::fast_no_faults()).await;
    let cases: [(&str, &str, ErrorKind); 5] = [
        (
            "chutes/int4",
            "rate_limit=1,retry_after_s=7",
            ErrorKind::RateLimited,
        ),
        ("deepinfra", "server_error=1", ErrorKind::Server),
        ("siliconflow/int4", "mid_stream=1", ErrorKind::MidStream),
        ("atlas-cloud/int4", "reset=1", ErrorKind::Connection),
        ("together", "truncate=1", ErrorKind::Truncated),
    ];
    for (tag, spec, kind) in cases {
        faults(&sim, tag, spec);
        let e = stream_error(&client, tag, fast_timeouts()).await;
        assert_eq!(e.kind(), kind, "{tag} {spec}: {e}");
        assert!(e.is_retryable(), "{tag}: {e}");
    }
    // An empty answer is no transport error: a complete answer without text, which the core
    // books at its bill and judges empty (retried per `on_empty`, counted against the endpoint).
    faults(&sim, "parasail/int4", "empty=1");
    let c = client
        .chat_stream(&req("fault", 2000, "parasail/int4"), fast_timeouts())
        .await
        .expect("the stream opens")
        .collect()
        .await
        .expect("a complete answer without text");
    assert_eq!((c.content.as_str(), c.reasoning.as_deref()), ("", None));
    assert!(c.cost().is_some(), "its usage chunk came");
    // A 429 carries the Retry-After the provider asked for (scaled by the speed, at least 0 s)
    // and the provider's name.
    let e = stream_error(&client, "chutes/int4", fast_timeouts()).await;
    assert!(e.retry_after().is_some());
    assert_eq!(e.provider_name(), Some("Chutes"));

    // A stall hits the idle (or first-token) timeout.
    faults(&sim, "novita", "stall=1");
    let t = StreamTimeouts {
        first_token: Duration::from_millis(400),
        idle: Duration::from_millis(400),
    };
    let e = stream_error(&client, "novita", t).await;
    assert!(
        matches!(
            e,
            ApiError::Timeout(TimeoutKind::Idle | TimeoutKind::FirstToken)
        ),
        "{e}"
    );
    // Failures with an error finish or no token at all are free (zero completion insurance);
    // a stream cut after tokens (reset, truncate) is neither and is billed as a cancel, so the
    // only billing entries those two may leave are cancels without a finish reason.
    let per = sim.state.billing_per_tag();
    for tag in ["chutes/int4", "deepinfra", "siliconflow/int4"] {
        assert_eq!(per.get(tag).map_or(0, |t| t.billed), 0, "{tag} billed");
    }
    for tag in ["atlas-cloud/int4", "together"] {
        let cut: Vec<_> = sim
            .state
            .billing_entries()
            .into_iter()
            .filter(|e| e.tag == tag)
            .collect();
        assert!(cut.len() <= 1, "{tag}: {cut:?}");
        for e in cut {
            assert_eq!(e.outcome, Outcome::Cancelled, "{tag}: {e:?}");
            assert_eq!(e.finish_reason, None, "{tag}: {e:?}");
        }
    }
    sim.stop().await;
}

/// A stream keeps the attempt's total deadline on its own timer (the worker's
/// `timeouts.total_s`, no wrapping timeout): past it, a stream still streaming and a stream gone
/// quiet both end with the total timeout, well before their idle timeouts.
#[tokio::test]
async fn a_stream_past_its_deadline_ends_with_the_total_timeout_streaming_or_quiet() {
    let mut cfg = SimConfig::fast_no_faults();
    cfg.speed_scale = 0.05; // ~1 ms a token: a 60,000-token answer streams for a minute.
    let (sim, client) = start(cfg).await;
    let deadline = || tokio::time::Instant::now() + Duration::from_millis(300);
    // Streaming: tokens keep coming, so no idle timeout ends it; only the deadline can. Set
    // once the first tokens came, however slowly a loaded machine brings them.
    let mut s = client
        .chat_stream(
            &req("a long answer please", 60_000, "deepinfra"),
            fast_timeouts(),
        )
        .await
        .expect("stream");
    let first = s
        .next()
        .await
        .expect("the first tokens")
        .expect("not ended");
    s.set_deadline(deadline());
    let mut tokens = u64::from(first.token_events);
    let e = s
        .drive(|p| {
            tokens += u64::from(p.token_events);
            std::ops::ControlFlow::Continue(())
        })
        .await
        .expect_err("past the deadline");
    assert!(matches!(e, ApiError::Timeout(TimeoutKind::Total)), "{e}");
    assert!(tokens < 60_000, "it ended before the answer did");
    // Quiet: a stalled endpoint, with the idle timeout (5 s) far beyond the deadline.
    faults(&sim, "novita", "stall=1");
    let mut s = client
        .chat_stream(&req("fault", 2000, "novita"), fast_timeouts())
        .await
        .expect("the stall comes after the headers");
    s.set_deadline(deadline());
    let e = s.collect().await.expect_err("past the deadline");
    // Not `Idle`: the deadline came first.
    assert!(matches!(e, ApiError::Timeout(TimeoutKind::Total)), "{e}");
    sim.stop().await;
}

#[tokio::test]
async fn slow_start_delays_the_first_token() {
    let mut cfg = SimConfig::fast_no_faults();
    cfg.speed_scale = 0.01; // Chutes: 900 ms TTFT → ~9 ms, x10 on a slow start.
    let (sim, client) = start(cfg).await;
    faults(&sim, "chutes/int4", "slow_start=1");
    let t = StreamTimeouts {
        first_token: Duration::from_millis(30),
        idle: Duration::from_secs(5),
    };
    let e = stream_error(&client, "chutes/int4", t).await;
    assert!(
        matches!(e, ApiError::Timeout(TimeoutKind::FirstToken)),
        "{e}"
    );
    sim.stop().await;
}

#[tokio::test]
async fn auth_and_credit_errors_stop_dispatch() {
    let mut cfg = SimConfig::fast_no_faults();
    cfg.api_key = Some("sk-or-v1-the-right-key-000000".into());
    cfg.key_limit_usd = Some(0.000001);
    let (sim, wrong) = start(cfg).await;
    let e = wrong
        .chat(&req("x", 8, "chutes/int4"))
        .await
        .expect_err("wrong key");
    assert_eq!(e.kind(), ErrorKind::Auth);
    assert!(e.stops_dispatch() && !e.is_retryable());
    let anon = OpenRouterClient::new(ClientOptions::new(sim.base_url(), None)).expect("client");
    assert_eq!(
        anon.key_info().await.expect_err("no key").status(),
        Some(401)
    );

    let right = OpenRouterClient::new(ClientOptions::new(
        sim.base_url(),
        ApiKey::new("sk-or-v1-the-right-key-000000"),
    ))
    .expect("client");
    right
        .chat(&req("x", 8, "chutes/int4"))
        .await
        .expect("first fits");
    let e = right
        .chat(&req("y", 8, "chutes/int4"))
        .await
        .expect_err("over the limit");
    assert_eq!(e.status(), Some(402));
    assert!(e.stops_dispatch(), "402 without Retry-After stops dispatch");
    sim.stop().await;
}

#[tokio::test]
async fn key_and_generation_report_what_was_billed() {
    let mut cfg = SimConfig::fast_no_faults();
    cfg.key_limit_usd = Some(100.0);
    cfg.generation_visible_after = Duration::from_millis(200);
    let (sim, client) = start(cfg).await;
    let mut total = Usd::ZERO;
    let mut last_id = String::new();
    for i in 0..5 {
        let c = client
            .chat_stream(&req(&format!("p{i}"), 500, "deepinfra"), fast_timeouts())
            .await
            .expect("stream")
            .collect()
            .await
            .expect("complete");
        total += c.cost().expect("cost");
        last_id = c.id.expect("id");
    }
    let k = client.key_info().await.expect("key");
    assert_eq!(Usd::from_f64(k.usage), total);
    assert_eq!(k.limit, Some(100.0));
    assert!((k.limit_remaining.expect("remaining") - (100.0 - total.as_f64())).abs() < 1e-9);
    // The label shows only a prefix and suffix of the key.
    assert!(!k.label.expect("label").contains("test-key-0123456789"));

    // /generation 404s right after the end (a real quirk), then answers.
    let url = format!("{}/generation?id={last_id}", sim.base_url());
    let http = reqwest::Client::new();
    let get = || {
        http.get(&url)
            .bearer_auth("sk-or-v1-test-key-0123456789")
            .send()
    };
    assert_eq!(get().await.expect("get").status().as_u16(), 404);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let v: serde_json::Value = get().await.expect("get").json().await.expect("json");
    assert_eq!(v["data"]["provider_name"], "DeepInfra");
    assert_eq!(v["data"]["cancelled"], false);
    // The lag is a live setting: a long one hides the generation again, as a lagging
    // `/generation` does after a crash; none shows it at once.
    let lag = |ms| ControlRequest {
        generation_lag_ms: Some(ms),
        ..Default::default()
    };
    sim.state.control(&lag(3_600_000)).expect("control");
    assert_eq!(get().await.expect("get").status().as_u16(), 404);
    sim.state.control(&lag(0)).expect("control");
    assert_eq!(get().await.expect("get").status().as_u16(), 200);
    sim.stop().await;
}

/// Reads `n` token events, then drops the stream (closing the connection).
async fn read_then_cancel(client: &OpenRouterClient, tag: &str, n: u64) -> u64 {
    let mut s = client
        .chat_stream(&req("a long answer please", 60_000, tag), fast_timeouts())
        .await
        .expect("stream");
    while s.events() < n {
        s.next().await.expect("event").expect("not ended");
    }
    s.events()
}

#[tokio::test]
async fn cancelling_stops_billing_only_where_the_provider_does() {
    let mut cfg = one_token_an_event(SimConfig::fast_no_faults());
    cfg.speed_scale = 0.05; // 48 tok/s → ~1 ms a token: a 20,000-token answer takes ~20 s.
    let (sim, client) = start(cfg).await;
    sim.state
        .control(&ControlRequest {
            output_tokens_mean: Some(20_000.0),
            output_tokens_sigma: Some(0.0),
            ..Default::default()
        })
        .expect("control");
    // Chutes stops billing when the client goes; SiliconFlow bills the whole generation.
    let got_chutes = read_then_cancel(&client, "chutes/int4", 200).await;
    let got_sf = read_then_cancel(&client, "siliconflow/int4", 200).await;
    // Wait for the simulator to notice the closed connections.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let billed = loop {
        let b = sim.state.billing_entries();
        if b.len() == 2 || tokio::time::Instant::now() > deadline {
            break b;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let by_tag: HashMap<&str, _> = billed.iter().map(|e| (e.tag.as_str(), e)).collect();
    let c = by_tag["chutes/int4"];
    assert_eq!(c.outcome, Outcome::Cancelled);
    assert!(
        c.completion_tokens >= got_chutes && c.completion_tokens < got_chutes + 200,
        "chutes billed {} after we read {got_chutes}",
        c.completion_tokens
    );
    let s = by_tag["siliconflow/int4"];
    assert_eq!(s.outcome, Outcome::Cancelled);
    assert!(got_sf < 1000);
    assert_eq!(s.completion_tokens, 20_000, "billed in full");
    sim.stop().await;
}

/// A provider that notices a close late decodes on meanwhile, and where a close stops the bill
/// those tokens are billed: `close_notice_ms` at the endpoint's own speed, the same number of
/// tokens at every speed scale.
#[tokio::test]
async fn a_close_noticed_late_bills_what_was_decoded_meanwhile() {
    let mut cfg = one_token_an_event(SimConfig::fast_no_faults());
    cfg.speed_scale = 0.05;
    let (sim, client) = start(cfg).await;
    let tps = sim
        .state
        .table()
        .endpoints
        .iter()
        .find(|e| e.tag.as_str() == "chutes/int4")
        .expect("chutes")
        .behaviour
        .tokens_per_s;
    // 500 tokens' worth of the endpoint's decode time.
    let mut patch = HashMap::new();
    patch.insert(
        "chutes/int4".to_string(),
        EndpointPatch {
            close_notice_ms: Some(500.0 / tps * 1000.0),
            ..Default::default()
        },
    );
    sim.state
        .control(&ControlRequest {
            output_tokens_mean: Some(20_000.0),
            output_tokens_sigma: Some(0.0),
            endpoints: patch,
            ..Default::default()
        })
        .expect("control");
    let got = read_then_cancel(&client, "chutes/int4", 200).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let billed = loop {
        let b = sim.state.billing_entries();
        if !b.is_empty() || tokio::time::Instant::now() > deadline {
            break b;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(billed.len(), 1, "the close is billed once it is noticed");
    let c = &billed[0];
    assert_eq!(c.outcome, Outcome::Cancelled);
    assert!(
        c.completion_tokens >= got + 500 && c.completion_tokens < got + 700,
        "billed {} after we read {got}: the 500 decoded before the close was noticed, plus \
         what was on its way",
        c.completion_tokens
    );
    sim.stop().await;
}

/// Slow tier, a capacity check run alone: 2,000 streams at once through the client; there is
/// no engine decision in it (the engine's at that width is checked in virtual time by
/// `a_run_goes_to_its_full_width_before_the_dollar_cap` in
/// src/engine/core/tests/simulation/scenarios.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow tier: capacity against the real binary; .ci/run runs it alone (cargo test --locked --test it -- --ignored --test-threads=1 --skip peers::)"]
async fn thousands_of_concurrent_streams() {
    // Bounded: 2,000 short streams at once against one simulator, all complete.
    assert!(
        harvest::raise_open_files_limit() >= 4100,
        "need 4,100 open files"
    );
    let (sim, client) = start(SimConfig::fast_no_faults()).await;
    sim.state
        .control(&ControlRequest {
            output_tokens_mean: Some(40.0),
            ..Default::default()
        })
        .expect("control");
    let tags = [
        "chutes/int4",
        "siliconflow/int4",
        "atlas-cloud/int4",
        "parasail/int4",
    ];
    let jobs = (0..2000).map(|i| {
        let client = client.clone();
        async move {
            client
                .chat_stream(
                    &req(&format!("prompt {i}"), 200, tags[i % 4]),
                    fast_timeouts(),
                )
                .await?
                .collect()
                .await
        }
    });
    let results = tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(jobs))
        .await
        .expect("bounded in time");
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(
        ok,
        2000,
        "first error: {:?}",
        results.iter().find(|r| r.is_err())
    );
    let total: Usd = results
        .iter()
        .filter_map(|r| r.as_ref().ok().and_then(|c| c.cost()))
        .sum();
    assert_eq!(total, sim.state.billed_total());
    sim.stop().await;
}

/// The account's in-flight budget as the docs describe it: requests are estimated at their
/// prompt plus `max_tokens` at the serving price; running ones count until they end; past the
/// cap a 402 with `limit_source: openrouter_in_flight_budget` and a `Retry-After`; a request
/// over the whole budget alone gets a 402 naming `max_tokens` and no wait.
#[tokio::test]
async fn the_inflight_budget_refuses_past_its_cap() {
    let mut cfg = SimConfig::fast_no_faults();
    cfg.speed_scale = 0.05; // streams stay open a while
    // Chutes: $2.20/M out; 10,000 max_tokens ≈ $0.022 each: room for two.
    cfg.inflight_budget = Some(sim::InFlightBudget {
        usd: 0.05,
        recent: Duration::ZERO,
        retry_after_s: 20.0,
    });
    let (sim, client) = start(cfg).await;
    let mut open = Vec::new();
    let mut refused = None;
    for i in 0..10 {
        match client
            .chat_stream(
                &req(&format!("p{i}"), 10_000, "chutes/int4"),
                fast_timeouts(),
            )
            .await
        {
            Ok(s) => open.push(s),
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (i, e) = refused.expect("the budget is reached");
    assert_eq!(i, 2, "two fit");
    assert!(e.is_inflight_budget(), "{e}");
    assert_eq!(e.kind(), ErrorKind::InFlightBudget);
    assert_eq!(e.retry_after(), Some(Duration::from_secs(1)), "20 s x 0.05");
    assert!(e.is_retryable() && !e.stops_dispatch());
    // Once they end, there is room again.
    for s in open {
        s.collect().await.expect("completes");
    }
    let s = client
        .chat_stream(&req("again", 10_000, "chutes/int4"), fast_timeouts())
        .await
        .expect("room again");
    s.collect().await.expect("completes");
    // One request over the whole budget: no wait cures it.
    let Err(e) = client
        .chat_stream(&req("huge", 30_000, "chutes/int4"), fast_timeouts())
        .await
    else {
        panic!("over the budget alone");
    };
    assert!(e.is_request_over_budget(), "{e}");
    assert!(e.stops_dispatch() && e.retry_after().is_none());
    assert!(e.to_string().contains("max_tokens"), "{e}");
    assert_eq!(sim.state.account.refused(), 2);
    sim.stop().await;
}

/// Errors forced on every request, typed as the docs list them: before the stream, or as a
/// mid-stream chunk, for as many requests as asked.
#[tokio::test]
async fn forced_errors_are_typed_before_and_during_the_stream() {
    let (sim, client) = start(SimConfig::fast_no_faults()).await;
    let force = |f: sim::ForcedError| {
        sim.state
            .control(&ControlRequest {
                force_error: Some(f),
                ..Default::default()
            })
            .expect("control")
    };
    force(sim::ForcedError {
        status: 404,
        error_type: "not_found".into(),
        availability: Some("privacy_restricted".into()),
        mid_stream: false,
        message: None,
        remaining: Some(2),
        provider_name: None,
        raw: None,
    });
    for _ in 0..2 {
        let e = stream_error(&client, "chutes/int4", fast_timeouts()).await;
        assert_eq!(e.signature(), "404 privacy_restricted", "{e}");
        assert!(!e.is_retryable());
    }
    client
        .chat_stream(&req("ok", 50, "chutes/int4"), fast_timeouts())
        .await
        .expect("the forced error ran out")
        .collect()
        .await
        .expect("completes");
    force(sim::ForcedError {
        status: 400,
        error_type: "content_policy_violation".into(),
        availability: None,
        mid_stream: true,
        message: Some("flagged".into()),
        remaining: None,
        provider_name: None,
        raw: None,
    });
    let e = stream_error(&client, "chutes/int4", fast_timeouts()).await;
    assert!(matches!(e, ApiError::MidStream { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::ContentPolicy);
    assert!(!e.is_retryable());
    sim.state
        .control(&ControlRequest {
            clear_forced_error: true,
            ..Default::default()
        })
        .expect("control");
    client
        .chat_stream(&req("cleared", 50, "chutes/int4"), fast_timeouts())
        .await
        .expect("cleared")
        .collect()
        .await
        .expect("completes");
    sim.stop().await;
}
