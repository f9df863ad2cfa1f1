//! harvest against servers nobody here wrote: llama.cpp's `llama-server` with a real (tiny)
//! model, alone, next to the simulator, and behind mitmproxy injecting network faults.
//!
//! The peers come from `scripts/peers.sh install` (PyPI builds, cached outside the repo). Each
//! test is ignored with that reason (see `super`); run, it fails when a peer is missing.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use harvest::store::output::OutputRecord;

use crate::common::{config, read_jsonl, setup};

struct Peers {
    llama: PathBuf,
    model: PathBuf,
    mitmdump: PathBuf,
    addon: PathBuf,
}

/// The installed peers; fails the test, naming what is missing, without them.
fn peers() -> Peers {
    let mut vars = crate::common::installed_peers(&[
        "HARVEST_LLAMA_SERVER",
        "HARVEST_LLAMA_MODEL",
        "HARVEST_MITMDUMP",
        "HARVEST_FAULTS_ADDON",
    ]);
    let mut take = |k: &str| vars.remove(k).expect("checked by installed_peers");
    Peers {
        llama: take("HARVEST_LLAMA_SERVER"),
        model: take("HARVEST_LLAMA_MODEL"),
        mitmdump: take("HARVEST_MITMDUMP"),
        addon: take("HARVEST_FAULTS_ADDON"),
    }
}

/// A child process killed (and reaped) when the test ends, panics included.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The CPU's model name, for a start-up failure's message (the build is CPU-sensitive).
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "an unknown CPU".into())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Starts llama-server on 127.0.0.1 and waits for `/health` to answer 200 (it answers 503
/// "Loading model" until then).
async fn start_llama(p: &Peers, dir: &Path) -> (Proc, u16) {
    let port = free_port();
    let log = std::fs::File::create(dir.join("llama-server.log")).expect("log");
    let child = Command::new(&p.llama)
        .args(["-m"])
        .arg(&p.model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        // -t 1: llama.cpp's spinning threads collapse when the test uses the other core.
        .args(["-t", "1", "-tb", "1", "-np", "8", "-c", "4096"])
        .args(["-a", "gemma-3-270m", "--offline", "--metrics"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start llama-server");
    let proc = Proc(child);
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ok = http
            .get(format!("http://127.0.0.1:{port}/health"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if ok {
            return (proc, port);
        }
        assert!(
            Instant::now() < deadline,
            "llama-server ({}) not healthy in 90 s on {}: {}",
            p.llama.display(),
            cpu_model(),
            std::fs::read_to_string(dir.join("llama-server.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts mitmdump as a reverse proxy to `upstream` with the fault add-on and `options`.
async fn start_mitm(p: &Peers, dir: &Path, upstream: u16, options: &[(&str, &str)]) -> (Proc, u16) {
    let port = free_port();
    let log = std::fs::File::create(dir.join("mitm.log")).expect("log");
    let mut cmd = Command::new(&p.mitmdump);
    cmd.arg("--mode")
        .arg(format!("reverse:http://127.0.0.1:{upstream}"))
        .args([
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            &port.to_string(),
        ])
        .arg("-s")
        .arg(&p.addon)
        .args(["--set", "termlog_verbosity=error"]);
    for (k, v) in options {
        cmd.args(["--set", &format!("{k}={v}")]);
    }
    let proc = Proc(
        cmd.stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start mitmdump"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "mitmdump did not listen in 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (proc, port)
}

fn llama_endpoint(port: u16, concurrency: u32) -> String {
    format!(
        "[[endpoint]]\nname = \"llama\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\n\
         model = \"gemma-3-270m\"\nquantization = \"q4_k_m\"\nconcurrency = {concurrency}\n\
         price_in_per_m = 0.0\nprice_out_per_m = 0.0\n"
    )
}

const DATASET: &str = "[[dataset]]\nname = \"local\"\nprompts = \"local.prompts.jsonl\"\n";

fn check_records(out: &Path, n: usize, provider: Option<&str>) -> Vec<OutputRecord> {
    let recs: Vec<OutputRecord> = read_jsonl(&out.join("local.jsonl"));
    let ids: HashSet<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), recs.len(), "an id was written twice");
    assert_eq!(recs.len(), n, "every prompt answered once");
    for r in &recs {
        let answer = r.conversations.last().expect("assistant turn");
        // The simulator thinks first: at a small max_tokens some of its answers are cut while
        // thinking, kept as truncated rows of reasoning with no answer.
        if r.cut_thinking {
            assert!(r.truncated && answer.content.is_empty(), "{}", r.id);
            assert!(
                answer
                    .reasoning_content
                    .as_deref()
                    .is_some_and(|t| !t.is_empty()),
                "{}: cut while thinking, with its reasoning",
                r.id
            );
        } else {
            assert!(!answer.content.is_empty(), "{}: empty answer", r.id);
        }
        if let Some(p) = provider {
            assert_eq!(r.provider, p);
        }
        if r.provider == "llama" {
            // The base model hardly ever stops on its own: every answer runs to max_tokens.
            assert_eq!(r.finish_reason, "length", "{}", r.id);
            assert_eq!(r.usage.completion_tokens, 16, "{}", r.id);
            assert_eq!(r.usage.source, "reported", "{}: usage was asked for", r.id);
            assert!(r.usage.prompt_tokens > 0);
            assert_eq!(r.cost_usd.pico(), 0, "own server at $0");
            assert!(r.truncated, "finish_reason length is flagged truncated");
        }
    }
    recs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs scripts/peers.sh install (llama-server, its model, mitmproxy): cargo test --locked --test it -- --ignored peers::"]
async fn llama_server_alone_serves_a_dataset() {
    let p = peers();
    let s = setup();
    let (_llama, port) = start_llama(&p, &s.dir).await;
    crate::common::write_prompts(&s.dir, "local", 24);
    let cfg = config(
        &s,
        "http://127.0.0.1:9/api/v1",
        &format!(
            "openrouter = false\nmodel = \"gemma-3-270m\"\nbudget_usd = 1.0\nconcurrency = 8\n\
             [request]\nmax_tokens = 16\ntemperature = 0.0\n[policy]\nmode = \"any\"\n\
             [retry]\non_length = \"keep\"\n{}{DATASET}",
            llama_endpoint(port, 8)
        ),
    );
    let sum = crate::common::run(cfg).await;
    assert!(!sum.failed, "{:?}", sum.reason);
    check_records(&s.out, 24, Some("llama"));
    assert_eq!(crate::common::ledger_total(&s.out).pico(), 0);
    let ep = &sum.snapshot.endpoints[0];
    assert_eq!((ep.tag.as_str(), ep.done, ep.errors), ("llama", 24, 0));
    assert_eq!(sum.snapshot.output_tokens, 24 * 16);
}

/// Polls llama-server's Prometheus gauges and keeps the most requests it ever held at once
/// (being decoded plus queued for a slot).
fn watch_llama_load(
    port: u16,
    stop: Arc<AtomicBool>,
) -> (Arc<AtomicU64>, tokio::task::JoinHandle<u64>) {
    let peak = Arc::new(AtomicU64::new(0));
    let pk = peak.clone();
    let task = tokio::spawn(async move {
        let http = reqwest::Client::new();
        let mut samples = 0;
        while !stop.load(Ordering::Relaxed) {
            if let Ok(r) = http
                .get(format!("http://127.0.0.1:{port}/metrics"))
                .send()
                .await
                && let Ok(text) = r.text().await
            {
                let gauge = |name: &str| -> u64 {
                    text.lines()
                        .find(|l| l.starts_with(name))
                        .and_then(|l| l.split_whitespace().last())
                        .and_then(|v| v.parse::<f64>().ok())
                        .unwrap_or(0.0) as u64
                };
                let load =
                    gauge("llamacpp:requests_processing") + gauge("llamacpp:requests_deferred");
                pk.fetch_max(load, Ordering::Relaxed);
                samples += 1;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        samples
    });
    (peak, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs scripts/peers.sh install (llama-server, its model, mitmproxy): cargo test --locked --test it -- --ignored peers::"]
async fn llama_server_and_simulator_share_a_pinned_run_within_caps() {
    let p = peers();
    let s = setup();
    let (_llama, port) = start_llama(&p, &s.dir).await;
    // The simulator at a pace comparable to the small model on one core.
    let sim = crate::common::paced_sim(1.0, 200.0).await;
    crate::common::write_prompts(&s.dir, "local", 48);
    let cfg = config(
        &s,
        &sim.base_url(),
        &format!(
            "routing = \"pinned\"\nbudget_usd = 5.0\nconcurrency = 12\n\
             [request]\nmax_tokens = 16\n[policy]\nmode = \"any\"\n\
             [retry]\non_length = \"keep\"\n{}{DATASET}",
            llama_endpoint(port, 3)
        ),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (peak, watcher) = watch_llama_load(port, stop.clone());
    let sum = crate::common::run(cfg).await;
    stop.store(true, Ordering::Relaxed);
    let samples = watcher.await.expect("watcher");
    assert!(!sum.failed, "{:?}", sum.reason);
    let recs = check_records(&s.out, 48, None);
    let local = recs.iter().filter(|r| r.provider == "llama").count();
    assert!(local > 0, "the $0 own server served nothing");
    assert!(
        local < 48,
        "the simulator served nothing (12 in flight, llama capped at 3)"
    );
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        samples > 10,
        "too few /metrics samples ({samples}) to tell the peak"
    );
    assert!(peak >= 1, "llama-server was never seen busy");
    assert!(
        peak <= 3,
        "llama-server held {peak} requests at once; its cap is 3"
    );
    // What the simulator served was paid for, and the ledger says the same as its bill.
    let paid: i64 = recs.iter().map(|r| r.cost_usd.pico()).sum();
    assert!(paid > 0);
    assert_eq!(
        crate::common::ledger_total(&s.out),
        sim.state.billed_total()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs scripts/peers.sh install (llama-server, its model, mitmproxy): cargo test --locked --test it -- --ignored peers::"]
async fn llama_server_behind_fault_proxy_loses_and_doubles_nothing() {
    let p = peers();
    let s = setup();
    let (_llama, llama_port) = start_llama(&p, &s.dir).await;
    let fault_log = s.dir.join("faults.log");
    // One fault of each kind in every 12 requests, in turn.
    let cycle = "ok,trunc:600,ok,abort:600,delay:300,status:503,ok,reset,status:429,hang,ok,ok";
    let (_mitm, port) = start_mitm(
        &p,
        &s.dir,
        llama_port,
        &[
            ("fault_cycle", cycle),
            ("fault_log", fault_log.to_str().expect("utf-8 path")),
            ("fault_hang_s", "15"),
        ],
    )
    .await;
    crate::common::write_prompts(&s.dir, "local", 30);
    let cfg = config(
        &s,
        "http://127.0.0.1:9/api/v1",
        &format!(
            "openrouter = false\nmodel = \"gemma-3-270m\"\nbudget_usd = 1.0\nconcurrency = 6\n\
             [request]\nmax_tokens = 16\n[policy]\nmode = \"any\"\n\
             [timeouts]\nfirst_token_s = 8.0\nidle_s = 8.0\n\
             [retry]\nmax_attempts = 12\nbase_delay_ms = 50\nmax_delay_s = 1.0\non_length = \"keep\"\n\
             [breaker]\nfailures = 1000\ncooldown_s = 1.0\n{}{DATASET}",
            llama_endpoint(port, 6)
        ),
    );
    let sum = crate::common::run(cfg).await;
    assert!(!sum.failed, "{:?}", sum.reason);
    check_records(&s.out, 30, Some("llama"));
    let applied = std::fs::read_to_string(&fault_log).expect("fault log");
    let count = |f: &str| applied.lines().filter(|l| l.starts_with(f)).count() as u64;
    for f in [
        "trunc",
        "abort",
        "status:503",
        "status:429",
        "reset",
        "hang",
        "delay",
    ] {
        assert!(count(f) > 0, "fault {f} never applied:\n{applied}");
    }
    // Every injected failure cost a failed attempt that was retried, seen as what it was. A
    // reset (connection dropped before any byte) is resent once by the client on a new
    // connection without counting as a failure (it counts when the resend meets a fault too).
    // After a clean cut, mitmproxy writes an empty chunk for every piece it swallows, so the
    // next request on that kept-alive connection reads garbage ("invalid HTTP version"): a
    // connection error, retried, and never resent blindly (the proxy did get that request).
    // Timeouts may also come from a slow, busy machine.
    let seen = harvest::report::Report::from_dir(&s.out, None)
        .expect("report")
        .total
        .errors;
    let tally: Vec<String> = [
        "trunc",
        "abort",
        "status:503",
        "status:429",
        "reset",
        "hang",
        "delay",
    ]
    .iter()
    .map(|f| format!("{f}={}", count(f)))
    .collect();
    let why = format!("injected: {tally:?}; harvest saw: {seen:?}");
    let saw = |k: &str| seen.get(k).copied().unwrap_or(0);
    assert_eq!(saw("429"), count("status:429"), "{why}");
    // Every injected 503 is seen as a 5xx; mitmproxy also answers 502 itself when its own
    // connection to llama-server fails (CI on a loaded machine met one): more, never fewer.
    assert!(saw("5xx") >= count("status:503"), "{why}");
    assert!(
        saw("trunc") >= 1,
        "a clean end without [DONE] is a truncation: {why}"
    );
    assert!(saw("trunc") <= count("trunc"), "{why}");
    assert!(saw("timeout") >= count("hang"), "{why}");
    assert!(saw("conn") >= count("abort"), "{why}");
    assert!(
        saw("conn") <= count("abort") + count("trunc") + count("reset"),
        "resets are resent, not counted: {why}"
    );
    let failures = count("trunc") + count("abort") + count("status") + count("hang");
    assert!(sum.snapshot.retries >= failures, "{why}");
    assert_eq!(sum.snapshot.retries, seen.values().sum::<u64>(), "{why}");
    let rejects: Vec<serde_json::Value> = read_jsonl(&s.out.join("local.rejects.jsonl"));
    assert!(rejects.is_empty(), "nothing rejected: {rejects:?}");
}
