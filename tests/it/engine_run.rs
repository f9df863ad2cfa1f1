//! The engine against the simulator on 127.0.0.1: several datasets to completion, token
//! budgets, excluding an endpoint mid-run, faults, caps, sequence, shards, own servers. Every
//! run is bounded in prompts and time.

use std::collections::HashSet;
use std::time::Duration;

use crate::common::*;
use harvest::domain::Usd;
use harvest::engine::{self, Command, RunOptions, RunState, ShutdownMode};
use harvest::openrouter::ApiKey;
use harvest::sim::{self, ControlRequest, EndpointPatch, SimConfig};
use harvest::store::output::{OutputRecord, RejectRecord, SpendEntry, SpendKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_datasets_finish_with_every_prompt_accounted_for() {
    let s = setup();
    let sim = fast_sim(120.0).await;
    let b3 = write_prompts(&s.dir, "b3", 150);
    let b4 = write_prompts(&s.dir, "b4", 120);
    let body = format!(
        "budget_usd = 50.0\nconcurrency = 64\n[request]\nmax_tokens = 2000\ntemperature = 0.6\n\
         [[dataset]]\nname = \"B3\"\nprompts = \"{}\"\n[[dataset]]\nname = \"B4\"\nprompts = \"{}\"\n",
        b3.display(),
        b4.display()
    );
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    assert_eq!(summary.state, RunState::Done, "{:?}", summary.reason);
    for (name, n) in [("B3", 150usize), ("B4", 120)] {
        let outs: Vec<OutputRecord> = read_jsonl(&s.out.join(format!("{name}.jsonl")));
        let rejects: Vec<RejectRecord> = read_jsonl(&s.out.join(format!("{name}.rejects.jsonl")));
        assert_eq!(
            outs.len() + rejects.len(),
            n,
            "{name}: done + rejected = input"
        );
        let ids: HashSet<&str> = outs.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids.len(), outs.len(), "{name}: no id twice");
        for o in &outs {
            // Provenance: who served it, at what precision and price.
            assert!(o.endpoint_tag.is_some(), "{o:?}");
            assert_eq!(o.quantization.as_deref(), Some("int4"), "faithful policy");
            assert_eq!(o.conversations.len(), 2);
            assert_eq!(o.conversations[1].role, "assistant");
            assert!(!o.conversations[1].content.is_empty());
            assert!(o.conversations[1].reasoning_content.is_some());
            assert!(o.cost_usd > Usd::ZERO);
            assert_eq!(o.params["temperature"], 0.6);
            assert!(chrono::DateTime::parse_from_rfc3339(&o.created_at).is_ok());
        }
    }
    // The ledger and the simulator's billing agree to the picodollar.
    assert_eq!(ledger_total(&s.out), sim.state.billed_total());
    assert_eq!(summary.snapshot.spent, sim.state.billed_total());
    // The state file is what `harvest status` reads.
    let state: harvest::engine::Snapshot =
        serde_json::from_str(&std::fs::read_to_string(s.out.join("state.json")).expect("state"))
            .expect("parse state");
    assert_eq!(state.state, RunState::Done);
    assert_eq!(state.done, 270);
    // The run's files are the operator's alone: the directory it made 0700, each file 0600.
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode();
        assert_eq!(mode(&s.out) & 0o777, 0o700, "the output directory");
        let files: Vec<_> = std::fs::read_dir(&s.out)
            .expect("out")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.is_file())
            .collect();
        assert!(files.len() >= 6, "{files:?}");
        for f in files {
            assert_eq!(
                mode(&f) & 0o077,
                0,
                "{} is the operator's alone",
                f.display()
            );
        }
    }
    // Faithful policy in OpenRouter mode: only int4 endpoints served.
    let served: HashSet<String> = sim
        .state
        .requests_since(0)
        .into_iter()
        .map(|r| r.tag)
        .collect();
    for t in &served {
        assert!(t.ends_with("/int4"), "{t} served under the faithful policy");
    }
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_budgets_stop_each_dataset_within_one_in_flight_window() {
    let s = setup();
    let sim = fast_sim(300.0).await;
    let a = write_prompts(&s.dir, "a", 2000);
    let b = write_prompts(&s.dir, "b", 2000);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 50\n[request]\nmax_tokens = 3000\n\
         [[dataset]]\nname = \"A\"\nprompts = \"{}\"\noutput_token_budget = 30_000\n\
         [[dataset]]\nname = \"B\"\nprompts = \"{}\"\noutput_token_budget = 60_000\n",
        a.display(),
        b.display()
    );
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    assert_eq!(summary.state, RunState::Done);
    for (name, budget) in [("A", 30_000u64), ("B", 60_000)] {
        let outs: Vec<OutputRecord> = read_jsonl(&s.out.join(format!("{name}.jsonl")));
        let tokens: u64 = outs.iter().map(|o| o.usage.completion_tokens).sum();
        let max_out = outs
            .iter()
            .map(|o| o.usage.completion_tokens)
            .max()
            .unwrap_or(0);
        assert!(tokens >= budget, "{name}: {tokens} < {budget}");
        // One window: at most `concurrency` answers were in flight when the budget was hit.
        assert!(
            tokens <= budget + 50 * max_out,
            "{name}: {tokens} far past {budget}"
        );
        assert!(outs.len() < 2000, "{name} stopped early");
    }
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excluding_an_endpoint_mid_run_applies_to_the_next_request() {
    let s = setup();
    let sim = fast_sim(200.0).await;
    set_speed(&sim, 0.05);
    let p = write_prompts(&s.dir, "x", 600);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 40\nrouting = \"pinned\"\n[request]\nmax_tokens = 1000\n\
         [[dataset]]\nname = \"X\"\nprompts = \"{}\"\n",
        p.display()
    );
    let h = start_engine(config(&s, &sim.base_url(), &body), 20).await;
    let mut snaps = h.snapshots.clone();
    // Pinned mode sends everything to the cheapest allowed endpoint: Chutes.
    loop {
        snaps.changed().await.expect("snapshot");
        if snaps.borrow().done >= 40 {
            break;
        }
    }
    h.commands
        .send(Command::SetEndpoint {
            tag: "chutes/int4".into(),
            allowed: Some(false),
        })
        .await
        .expect("send");
    loop {
        snaps.changed().await.expect("snapshot");
        let s = snaps.borrow();
        let c = s
            .endpoints
            .iter()
            .find(|e| e.tag == "chutes/int4")
            .expect("chutes");
        if c.off == Some(harvest::engine::OffReason::Operator) {
            break;
        }
    }
    // The snapshot above was made after the engine applied the exclusion, so every request it
    // dispatched before it carries a time (the ledger's `dispatched` line, the engine's clock
    // as it decided, to the millisecond) at or before `cut`. No allowance for requests in
    // transit is needed: what the engine decided is read, not when requests reached the
    // simulator (the seeded simulation checks every request as it leaves, never to an excluded
    // endpoint: src/engine/core/tests/simulation/run.rs `check_sent`).
    let cut = chrono::Utc::now().timestamp_millis();
    loop {
        snaps.changed().await.expect("snapshot");
        if snaps.borrow().done >= 200 {
            break;
        }
    }
    h.commands
        .send(Command::Shutdown(ShutdownMode::Drain))
        .await
        .expect("send");
    let summary = h.finish().await.expect("finish");
    assert_eq!(summary.state, RunState::Stopped);
    // Each request as the engine sent it: when (ms) and where (pinned: one endpoint each).
    let sent: Vec<(i64, String)> = read_jsonl::<SpendEntry>(&s.out.join("spend.jsonl"))
        .into_iter()
        .filter(|e| e.kind == SpendKind::Dispatched)
        .map(|e| {
            let at = chrono::DateTime::parse_from_rfc3339(&e.at)
                .unwrap_or_else(|err| panic!("{}: {err}", e.at))
                .timestamp_millis();
            (at, e.endpoint.unwrap_or_default())
        })
        .collect();
    let before: Vec<&(i64, String)> = sent.iter().filter(|e| e.0 <= cut).collect();
    let after: Vec<&(i64, String)> = sent.iter().filter(|e| e.0 > cut).collect();
    assert!(before.iter().any(|e| e.1 == "chutes/int4"));
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|e| e.1 != "chutes/int4"),
        "a request went to chutes after it was excluded"
    );
    // The next cheapest faithful endpoint took over.
    assert!(
        after.iter().all(|e| e.1 == "siliconflow/int4"),
        "{:?}",
        after.iter().map(|e| e.1.as_str()).collect::<HashSet<_>>()
    );
    // And the simulator saw them there: siliconflow served, chutes had served before.
    let log = sim.state.requests_since(0);
    assert!(log.iter().any(|r| r.tag == "chutes/int4"));
    assert!(log.iter().any(|r| r.tag == "siliconflow/int4"));
    // Drained: everything that was in flight was saved, nothing twice.
    let outs: Vec<OutputRecord> = read_jsonl(&s.out.join("X.jsonl"));
    let ids: HashSet<&str> = outs.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids.len(), outs.len());
    assert_eq!(outs.len() as u64, summary.snapshot.done);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_are_retried_and_nothing_is_lost() {
    let s = setup();
    let sim = fast_sim(100.0).await;
    sim.state
        .control(&ControlRequest {
            all: Some(EndpointPatch {
                faults_spec: Some(
                    "rate_limit=0.1,server_error=0.1,mid_stream=0.05,reset=0.05,empty=0.03,truncate=0.05,retry_after_s=0"
                        .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("control");
    let p = write_prompts(&s.dir, "f", 400);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 64\nrouting = \"pinned\"\n[retry]\nmax_attempts = 10\nbase_delay_ms = 5\nmax_delay_s = 0.05\n\
         [breaker]\nfailures = 50\ncooldown_s = 0.1\n[request]\nmax_tokens = 1000\n\
         [[dataset]]\nname = \"F\"\nprompts = \"{}\"\n",
        p.display()
    );
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    assert_eq!(summary.state, RunState::Done, "{:?}", summary.reason);
    let outs: Vec<OutputRecord> = read_jsonl(&s.out.join("F.jsonl"));
    let rejects: Vec<RejectRecord> = read_jsonl(&s.out.join("F.rejects.jsonl"));
    assert_eq!(outs.len() + rejects.len(), 400);
    assert!(
        outs.len() >= 395,
        "retries recover almost everything: {}",
        outs.len()
    );
    assert!(
        summary.snapshot.retries > 50,
        "retries visible: {}",
        summary.snapshot.retries
    );
    let ids: HashSet<&str> = outs.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids.len(), outs.len());
    assert!(outs.iter().any(|o| o.attempts > 1));
    // Errors are counted by kind per endpoint.
    let errs: u64 = summary.snapshot.endpoints.iter().map(|e| e.errors).sum();
    assert!(errs >= summary.snapshot.retries);
    assert_eq!(ledger_total(&s.out), sim.state.billed_total());

    // The end-of-run report, from the output directory alone, agrees with all of it.
    let report = harvest::report::Report::from_dir(&s.out, None).expect("report");
    assert_eq!(
        report.total.usd,
        sim.state.billed_total(),
        "report = billing log"
    );
    assert_eq!(report.spend.ledger, ledger_total(&s.out));
    assert_eq!(
        report.spend.records, report.spend.answers,
        "every paid answer written"
    );
    assert_eq!(report.total.prompts, outs.len() as u64);
    assert_eq!(report.total.rejected, rejects.len() as u64);
    let row_usd: Usd = report.rows.iter().map(|r| r.usd).sum();
    assert_eq!(row_usd, report.total.usd);
    let by_kind = &report.total.errors;
    assert_eq!(
        by_kind.values().sum::<u64>(),
        errs,
        "every failed attempt, by kind: {by_kind:?}"
    );
    for kind in ["429", "5xx"] {
        assert!(
            by_kind.get(kind).is_some_and(|&n| n > 0),
            "{kind} in {by_kind:?}"
        );
    }
    let tags: HashSet<&str> = summary
        .snapshot
        .endpoints
        .iter()
        .map(|e| e.tag.as_str())
        .collect();
    for r in &report.rows {
        assert!(
            tags.contains(r.endpoint.as_str()),
            "pinned rows are endpoints: {r:?}"
        );
        if r.prompts > 0 {
            assert!(
                r.ttft_p50_ms.is_some() && r.ttft_p95_ms >= r.ttft_p50_ms,
                "{r:?}"
            );
            // A row of one short answer whose tokens all came in one read has no decode time
            // to divide by (the machine's pace decides): unknown then, never zero.
            assert!(r.tok_per_s.is_none_or(|v| v > 0.0), "{r:?}");
        }
    }
    assert!(
        report.rows.iter().any(|r| r.tok_per_s.is_some()),
        "a throughput where there was a decode time: {:?}",
        report.rows
    );
    let text = report.render();
    assert!(text.contains("429×"), "{text}");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_storm_at_one_endpoint_does_not_slow_the_others() {
    let s = setup();
    let sim = fast_sim(100.0).await;
    sim.state
        .control(&ControlRequest {
            speed_scale: Some(0.02),
            endpoints: [(
                "chutes/int4".to_string(),
                EndpointPatch {
                    faults_spec: Some("rate_limit=1,retry_after_s=30".into()),
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        })
        .expect("control");
    let p = write_prompts(&s.dir, "r", 300);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 30\nrouting = \"pinned\"\n[request]\nmax_tokens = 1000\n\
         [[dataset]]\nname = \"R\"\nprompts = \"{}\"\n",
        p.display()
    );
    // Bounded in time by `run` (a hang fails there); how long it took is the machine's, not
    // the engine's, so it is not asserted: what the engine decided is.
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    // Chutes asked for 30 s x 0.02 = 0.6 s, sent as `Retry-After: 1`; the others carried on:
    // every prompt answered, none rejected for chutes' 429s (no prompt waits on it).
    assert_eq!(summary.state, RunState::Done);
    assert_eq!(summary.snapshot.done, 300);
    assert_eq!(summary.snapshot.rejected, 0, "no prompt rejected");
    let outs: Vec<OutputRecord> = read_jsonl(&s.out.join("R.jsonl"));
    assert_eq!(outs.len(), 300, "every prompt answered");
    assert!(
        outs.iter()
            .all(|o| o.endpoint_tag.as_deref() != Some("chutes/int4")),
        "no answer came from the endpoint that only says 429"
    );
    let log = sim.state.requests_since(0);
    let chutes = log.iter().filter(|r| r.tag == "chutes/int4").count();
    let others = log
        .iter()
        .filter(|r| r.tag != "chutes/int4" && r.status == 200)
        .count();
    assert!(others >= 300, "{others}");
    // Chutes, the cheapest, was tried (and met its 429s). How often it is tried again per
    // second of its wait depends on how fast the machine ran the others, so the count is not
    // bounded here (it was, scaled by wall time), nor the run's length: both are checked in
    // virtual time by src/engine/core/tests/simulation/scenarios.rs (the test of the same name).
    assert!(chutes >= 1, "{chutes}");
    let c = summary
        .snapshot
        .endpoints
        .iter()
        .find(|e| e.tag == "chutes/int4")
        .expect("chutes");
    assert_eq!(c.top_error.as_ref().map(|(k, _)| k.as_str()), Some("429"));
    assert_eq!(c.done, 0);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_routing_respects_per_endpoint_caps() {
    let s = setup();
    let sim = fast_sim(200.0).await;
    set_speed(&sim, 0.05);
    let p = write_prompts(&s.dir, "c", 300);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 60\nrouting = \"pinned\"\n\
         endpoint_concurrency = {{ \"chutes/int4\" = 7, \"siliconflow/int4\" = 5 }}\n\
         [request]\nmax_tokens = 1000\n[[dataset]]\nname = \"C\"\nprompts = \"{}\"\n",
        p.display()
    );
    let h = start_engine(config(&s, &sim.base_url(), &body), 20).await;
    let (mut max_c, mut max_s) = (0, 0);
    let watcher = {
        let sim_state = sim.state.clone();
        tokio::spawn(async move {
            let (mut mc, mut ms) = (0u32, 0u32);
            for _ in 0..2000 {
                for (tag, n) in sim_state.in_flight() {
                    if tag == "chutes/int4" {
                        mc = mc.max(n);
                    } else if tag == "siliconflow/int4" {
                        ms = ms.max(n);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (mc, ms)
        })
    };
    let summary = h.finish().await.expect("finish");
    watcher.abort();
    if let Ok((c, sf)) = watcher.await {
        max_c = c;
        max_s = sf;
    }
    assert_eq!(summary.state, RunState::Done);
    // Sampled while the run went on: never above the caps, and the caps were used.
    let log = sim.state.requests_since(0);
    assert!(
        log.iter().any(|r| r.tag == "atlas-cloud/int4"),
        "overflow went to the next endpoint"
    );
    assert!(
        max_c <= 7 && max_s <= 5,
        "chutes {max_c}, siliconflow {max_s}"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_sample_caps_and_shards() {
    let s = setup();
    let sim = fast_sim(50.0).await;
    let a = write_prompts(&s.dir, "a", 100);
    let b = write_prompts(&s.dir, "b", 100);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 8\nschedule = \"sequential\"\n[request]\nmax_tokens = 500\n\
         [[dataset]]\nname = \"A\"\nprompts = \"{}\"\nmax_samples = 30\n\
         [[dataset]]\nname = \"B\"\nprompts = \"{}\"\n",
        a.display(),
        b.display()
    );
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    assert_eq!(summary.state, RunState::Done);
    let outs_a: Vec<OutputRecord> = read_jsonl(&s.out.join("A.jsonl"));
    let outs_b: Vec<OutputRecord> = read_jsonl(&s.out.join("B.jsonl"));
    assert_eq!(outs_a.len(), 30, "sample cap");
    assert_eq!(outs_b.len(), 100);
    // In sequence: every A record was written before the first B record.
    let last_a = outs_a
        .iter()
        .map(|o| o.created_at.clone())
        .max()
        .expect("a");
    let first_b = outs_b
        .iter()
        .map(|o| o.created_at.clone())
        .min()
        .expect("b");
    assert!(last_a <= first_b, "{last_a} > {first_b}");

    // Shards: two runs of 0/2 and 1/2 together do every prompt exactly once.
    let mut all = HashSet::new();
    for k in 0..2u32 {
        let s2 = setup();
        let p = write_prompts(&s2.dir, "sh", 200);
        let body = format!(
            "budget_usd = 100.0\nconcurrency = 16\n[request]\nmax_tokens = 300\n[[dataset]]\nname = \"S\"\nprompts = \"{}\"\n",
            p.display()
        );
        let opts = RunOptions {
            api_key: ApiKey::new(KEY),
            shard: Some((k, 2)),
            ..Default::default()
        };
        let h = engine::start(config(&s2, &sim.base_url(), &body), opts)
            .await
            .expect("start");
        let summary = h.finish().await.expect("finish");
        assert_eq!(summary.state, RunState::Done);
        let outs: Vec<OutputRecord> = read_jsonl(&s2.out.join("S.jsonl"));
        assert!(
            outs.len() > 60 && outs.len() < 140,
            "shard {k}: {}",
            outs.len()
        );
        assert_eq!(summary.snapshot.total, outs.len() as u64);
        for o in outs {
            assert!(all.insert(o.id), "an id in both shards");
        }
    }
    assert_eq!(all.len(), 200);
    sim.stop().await;
}

/// Two shards, each in its own directory, and shard 1 run again: each one's progress counts
/// its own rows (reliability probe 3, D16), the two split the prompts, and a shard's directory
/// refuses another shard (their rows would mix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_split_the_prompts_and_a_shard_directory_refuses_another_shard() {
    let sim = fast_sim(50.0).await;
    let s = setup();
    let p = write_prompts(&s.dir, "sh", 200);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 16\n[request]\nmax_tokens = 300\n[[dataset]]\nname = \"S\"\nprompts = \"{}\"\n",
        p.display()
    );
    let dir_of = |k: u32| s.dir.join(format!("shard-{k}"));
    let start = |k: u32, dir: std::path::PathBuf| {
        let mut cfg = config(&s, &sim.base_url(), &body);
        cfg.output_dir = dir;
        let opts = RunOptions {
            api_key: ApiKey::new(KEY),
            shard: Some((k, 2)),
            ..Default::default()
        };
        engine::start(cfg, opts)
    };
    let mut totals = Vec::new();
    for k in [0u32, 1, 1] {
        let h = start(k, dir_of(k)).await.expect("start");
        let summary = h.finish().await.expect("finish");
        let snap = &summary.snapshot;
        assert_eq!(summary.state, RunState::Done);
        // Shard 1's second run finds every row of its own done.
        assert_eq!(
            snap.done, snap.total,
            "shard {k}: {} done of {}",
            snap.done, snap.total
        );
        assert_eq!(snap.datasets[0].done, snap.total, "shard {k}'s dataset");
        totals.push(snap.total);
    }
    let ids = |k: u32| -> HashSet<String> {
        read_jsonl::<OutputRecord>(&dir_of(k).join("S.jsonl"))
            .into_iter()
            .map(|o| o.id)
            .collect()
    };
    let (a, b) = (ids(0), ids(1));
    assert_eq!(a.len() + b.len(), 200, "every prompt once");
    assert!(a.is_disjoint(&b));
    assert_eq!(
        totals[0] + totals[1],
        200,
        "the two shards split the prompts"
    );
    assert_eq!(totals[2], totals[1], "shard 1 again: the same share");
    let refused = match start(1, dir_of(0)).await {
        Ok(_) => panic!("shard 1 started in shard 0's directory"),
        Err(e) => e.to_string(),
    };
    assert!(
        refused.contains("holds the rows of shard 0/2, not of shard 1/2"),
        "{refused}"
    );
    assert_eq!(ids(0), a, "shard 0's rows untouched");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_streams_that_bill_anyway_run_to_the_end_and_are_kept() {
    let s = setup();
    let sim = fast_sim(300.0).await;
    set_speed(&sim, 0.2);
    let p = write_prompts(&s.dir, "nc", 2000);
    let budget = 0.2;
    // SiliconFlow (next cheapest once Chutes is excluded) bills a cancelled generation in full.
    // The expected mode: the hard one never lets such streams reach the cap
    // (tests/it/budget_cap.rs).
    let body = format!(
        "budget_usd = {budget}\nbudget_mode = \"expected\"\nconcurrency = 200\nrouting = \"pinned\"\n[policy]\nexclude = [\"chutes\"]\n\
         [request]\nmax_tokens = 3000\n[[dataset]]\nname = \"N\"\nprompts = \"{}\"\n",
        p.display()
    );
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    assert_eq!(
        summary.reason,
        Some(harvest::engine::StopReason::DollarBudget)
    );
    assert!(
        summary
            .snapshot
            .events
            .iter()
            .any(|e| e.text.contains("run to the end")),
        "{:?}",
        summary.snapshot.events
    );
    let billed = sim.state.billed_total().as_f64();
    let ledger = ledger_total(&s.out).as_f64();
    assert!(
        (ledger - billed).abs() <= billed * 0.001,
        "ledger {ledger} vs {billed}"
    );
    // Nothing paid for was thrown away: every generation the simulator billed at SiliconFlow
    // that ran to its end is in the outputs.
    let outs: Vec<OutputRecord> = read_jsonl(&s.out.join("N.jsonl"));
    let complete_billed = sim
        .state
        .billing_entries()
        .iter()
        .filter(|b| b.outcome == harvest::sim::Outcome::Complete)
        .count();
    assert_eq!(outs.len(), complete_billed);
    // The overshoot is reported, and bounded by what was in flight: 200 x max_tokens.
    assert!(billed >= budget);
    assert!(billed - budget <= 200.0 * 3000.0 * 2.25e-6, "{billed}");
    assert_eq!(summary.overshoot.as_f64() > 0.0, billed > budget);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_second_cap_spaces_requests() {
    let s = setup();
    let sim = fast_sim(20.0).await;
    let p = write_prompts(&s.dir, "rps", 60);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 64\nrequests_per_second = 20.0\n[request]\nmax_tokens = 100\n\
         [[dataset]]\nname = \"P\"\nprompts = \"{}\"\n",
        p.display()
    );
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    assert_eq!(summary.snapshot.done, 60);
    // When the engine sent each request: its `dispatched` ledger lines carry the engine's own
    // clock as it decided (ms), which scheduling jitter on the way to the simulator cannot
    // bunch. The pacing (core/budget.rs `note_sent`) puts request k+40 at least
    // 41 x 50 ms - 1 s = 1.05 s after request k, and the 60th 2.05 s after the first; the
    // floors below leave room for the clock's reading on a loaded machine (exact, in virtual
    // time: src/engine/core/tests/simulation/scenarios.rs `requests_per_second_spaces_requests`).
    let mut sent: Vec<i64> = read_jsonl::<SpendEntry>(&s.out.join("spend.jsonl"))
        .into_iter()
        .filter(|e| e.kind == SpendKind::Dispatched)
        .map(|e| {
            chrono::DateTime::parse_from_rfc3339(&e.at)
                .unwrap_or_else(|err| panic!("{}: {err}", e.at))
                .timestamp_millis()
        })
        .collect();
    sent.sort_unstable();
    assert!(sent.len() >= 60, "{} dispatched", sent.len());
    let spread = sent[sent.len() - 1] - sent[0];
    // 60 requests at 20/s: about 3 s (less the one-second burst allowance), never all at once.
    assert!(spread >= 1800, "sent over {spread} ms");
    for w in sent.windows(41) {
        let gap = w[40] - w[0];
        assert!(gap >= 800, "41 requests sent within {gap} ms");
    }
    // At the simulator the overall floor holds too (a slow machine only spreads arrivals
    // more), less the first request's own way there, which a loaded machine can stretch: no
    // per-window check here, as arrivals can bunch on the way.
    let log = sim.state.requests_since(0);
    let first = log.first().map_or(0, |r| r.at_ms);
    let last = log.last().map_or(0, |r| r.at_ms);
    assert!(last - first >= 1500, "arrived over {} ms", last - first);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_server_endpoints_join_the_pool_with_their_cap_and_price() {
    let s = setup();
    // Like a local server, the simulator takes requests without a key here.
    let mut cfg = SimConfig::fast_no_faults();
    cfg.open_access = true;
    let sim = sim::start(cfg, 0).await.expect("sim");
    sim.state
        .control(&ControlRequest {
            speed_scale: Some(0.05),
            output_tokens_mean: Some(150.0),
            ..Default::default()
        })
        .expect("control");
    let p = write_prompts(&s.dir, "own", 200);
    // The simulator stands in for a local SGLang server too: free, at most 4 at a time.
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 24\n[request]\nmax_tokens = 1000\n\
         [[dataset]]\nname = \"O\"\nprompts = \"{}\"\n\
         [[endpoint]]\nname = \"local-sglang\"\nbase_url = \"{}\"\napi_key_env = \"HARVEST_TEST_UNSET\"\n\
         model = \"moonshotai/kimi-k2.5\"\nquantization = \"int4\"\nconcurrency = 4\nrequire_usage = true\n\
         extra = {{ chat_template_kwargs = {{ thinking = true }} }}\n",
        p.display(),
        sim.base_url()
    );
    let h = start_engine(config(&s, &sim.base_url(), &body), 10).await;
    let mut snaps = h.snapshots.clone();
    let mut max_local = 0;
    let sampler = tokio::spawn(async move {
        while snaps.changed().await.is_ok() {
            let s = snaps.borrow().clone();
            if let Some(e) = s.endpoints.iter().find(|e| e.tag == "local-sglang") {
                max_local = max_local.max(e.in_flight);
            }
            if matches!(s.state, RunState::Done | RunState::Stopped) {
                break;
            }
        }
        max_local
    });
    let summary = h.finish().await.expect("finish");
    let max_local = sampler.await.expect("sampler");
    assert_eq!(
        summary.state,
        RunState::Done,
        "{:?}",
        summary.snapshot.events
    );
    let outs: Vec<OutputRecord> = read_jsonl(&s.out.join("O.jsonl"));
    assert_eq!(outs.len(), 200);
    let local: Vec<&OutputRecord> = outs
        .iter()
        .filter(|o| o.endpoint_tag.as_deref() == Some("local-sglang"))
        .collect();
    assert!(!local.is_empty(), "the free local server served");
    assert!(local.len() < 200, "and OpenRouter took the rest");
    for o in &local {
        assert_eq!(o.provider, "local-sglang");
        assert_eq!(
            o.cost_usd,
            Usd::ZERO,
            "priced by the config, not by what the server says"
        );
        assert_eq!(o.quantization.as_deref(), Some("int4"));
    }
    assert!(max_local <= 4, "cap of 4 exceeded: {max_local}");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_leaves_and_comes_back_mid_run() {
    let s = setup();
    let sim = fast_sim(200.0).await;
    set_speed(&sim, 0.05);
    let p = write_prompts(&s.dir, "gone", 900);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 30\nrouting = \"pinned\"\ncatalog_refresh_s = 0.3\n\
         [request]\nmax_tokens = 1000\n[[dataset]]\nname = \"G\"\nprompts = \"{}\"\n",
        p.display()
    );
    let h = start_engine(config(&s, &sim.base_url(), &body), 20).await;
    let mut snaps = h.snapshots.clone();
    let watch = h.snapshots.clone();
    let wait_done = |n: u64| {
        let mut snaps = watch.clone();
        async move {
            loop {
                snaps.changed().await.expect("snapshot");
                if snaps.borrow().done >= n {
                    break;
                }
            }
        }
    };
    let set_down = |down: bool| set_down(&sim, "chutes/int4", down);
    wait_done(100).await;
    set_down(true);
    loop {
        snaps.changed().await.expect("snapshot");
        let s = snaps.borrow();
        let c = s
            .endpoints
            .iter()
            .find(|e| e.tag == "chutes/int4")
            .expect("chutes");
        if c.off == Some(harvest::engine::OffReason::Gone) {
            break;
        }
    }
    let done_when_gone = snaps.borrow().done;
    wait_done(done_when_gone + 150).await;
    set_down(false);
    let summary = h.finish().await.expect("finish");
    assert_eq!(summary.state, RunState::Done);
    assert_eq!(
        summary.snapshot.done, 900,
        "nothing rejected: {:?}",
        summary.snapshot.events
    );
    let texts: Vec<&str> = summary
        .snapshot
        .events
        .iter()
        .map(|e| e.text.as_str())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("chutes/int4")
            && (t.contains("left the model's listing") || t.contains("not served any more"))),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("chutes/int4 is listed again")),
        "{texts:?}"
    );
    // Chutes served before it left and after it came back.
    let log = sim.state.requests_since(0);
    let last_chutes = log
        .iter()
        .rposition(|r| r.tag == "chutes/int4" && r.status == 200);
    let first_other = log.iter().position(|r| r.tag != "chutes/int4");
    assert!(
        matches!((first_other, last_chutes), (Some(a), Some(b)) if b > a),
        "traffic came back"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_endpoint_in_the_listing_joins_under_the_policy() {
    let s = setup();
    let sim = fast_sim(200.0).await;
    let patch = |tag: &str, down: bool| set_down(&sim, tag, down);
    // SiliconFlow (int4, faithful) is not listed when the run starts; Fireworks (unknown) neither.
    patch("siliconflow/int4", true);
    patch("fireworks", true);
    set_speed(&sim, 0.05);
    let p = write_prompts(&s.dir, "new", 600);
    // Chutes takes 3 at a time; the rest overflow to the next cheapest allowed endpoint.
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 12\nrouting = \"pinned\"\ncatalog_refresh_s = 0.2\n\
         endpoint_concurrency = {{ \"chutes/int4\" = 3 }}\n\
         [request]\nmax_tokens = 1000\n[[dataset]]\nname = \"N\"\nprompts = \"{}\"\n",
        p.display()
    );
    let h = start_engine(config(&s, &sim.base_url(), &body), 20).await;
    let mut snaps = h.snapshots.clone();
    loop {
        snaps.changed().await.expect("snapshot");
        if snaps.borrow().done >= 60 {
            break;
        }
    }
    assert!(
        !snaps
            .borrow()
            .endpoints
            .iter()
            .any(|e| e.tag == "siliconflow/int4")
    );
    patch("siliconflow/int4", false);
    patch("fireworks", false);
    loop {
        snaps.changed().await.expect("snapshot");
        let s = snaps.borrow();
        if s.endpoints
            .iter()
            .any(|e| e.tag == "siliconflow/int4" && e.done > 20)
        {
            break;
        }
    }
    let snap = snaps.borrow().clone();
    h.commands
        .send(Command::Shutdown(ShutdownMode::Drain))
        .await
        .expect("send");
    let summary = h.finish().await.expect("finish");
    let texts: Vec<&str> = summary
        .snapshot
        .events
        .iter()
        .map(|e| e.text.as_str())
        .collect();
    assert!(
        texts.iter().any(
            |t| t.contains("new endpoint listed: SiliconFlow siliconflow/int4")
                && t.contains("allowed by the policy")
        ),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("new endpoint listed: Fireworks fireworks")
                && t.contains("not used")),
        "{texts:?}"
    );
    let fw = snap
        .endpoints
        .iter()
        .find(|e| e.tag == "fireworks")
        .expect("listed");
    assert!(
        !fw.allowed && fw.done == 0,
        "an unknown-quantization newcomer is not used"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_whose_answers_stand_out_is_reported_in_the_event_log() {
    let s = setup();
    let sim = fast_sim(100.0).await;
    // One faithful endpoint answers empty a third of the time (each is retried elsewhere).
    let mut c = ControlRequest::default();
    c.endpoints.insert(
        "siliconflow/int4".into(),
        EndpointPatch {
            faults_spec: Some("empty=0.35".into()),
            ..Default::default()
        },
    );
    sim.state.control(&c).expect("control");
    let p = write_prompts(&s.dir, "q", 600);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 40\nrouting = \"pinned\"\n\
         endpoint_concurrency = {{ \"chutes/int4\" = 10, \"siliconflow/int4\" = 10, \"atlas-cloud/int4\" = 10, \"parasail/int4\" = 10 }}\n\
         [retry]\nmax_attempts = 10\nbase_delay_ms = 5\nmax_delay_s = 0.05\n\
         [breaker]\nfailures = 100\ncooldown_s = 0.1\n[request]\nmax_tokens = 1000\n\
         [[dataset]]\nname = \"Q\"\nprompts = \"{}\"\n",
        p.display()
    );
    let summary = run(config(&s, &sim.base_url(), &body)).await;
    assert_eq!(summary.state, RunState::Done, "{:?}", summary.reason);
    let sf = summary
        .snapshot
        .endpoints
        .iter()
        .find(|e| e.tag == "siliconflow/int4")
        .expect("row");
    assert!(
        sf.empty_rate.is_some_and(|r| r > 0.15),
        "{:?}",
        sf.empty_rate
    );
    let events: Vec<&str> = summary
        .snapshot
        .events
        .iter()
        .map(|e| e.text.as_str())
        .collect();
    let hits: Vec<&&str> = events
        .iter()
        .filter(|t| t.starts_with("quality: siliconflow/int4 answers empty"))
        .collect();
    assert_eq!(hits.len(), 1, "reported once: {events:?}");
    assert!(
        !events.iter().any(|t| t.starts_with("quality: chutes/int4")),
        "{events:?}"
    );
    sim.stop().await;
}
