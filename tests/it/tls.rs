//! HTTPS as the real API speaks it: the simulator with `tls` (a certificate authority made at
//! start, HTTP/2 and HTTP/1.1 by ALPN), the real binary trusting it through `ca_cert` or
//! `SSL_CERT_FILE`, refusing it (with a hint) when it does not, and the HTTP/1.1-or-HTTP/2
//! choice measured: over HTTP/2 one connection carries at most the server's
//! `MAX_CONCURRENT_STREAMS`, which caps a run's streams.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::common::{read_jsonl, run_headless, write_job_with_ids};
use harvest::sim::{self, SimConfig, SimHandle};
use harvest::store::output::OutputRecord;

const KEY: &str = "sk-or-v1-tls-test-key-000000000";
const KEY_VAR: &str = "HARVEST_TLS_KEY";

async fn tls_sim(speed: f64, mean_tokens: f64, h2_max_streams: u32) -> SimHandle {
    let mut cfg = SimConfig::fast_no_faults();
    cfg.tls = true;
    cfg.h2_max_streams = h2_max_streams;
    let s = sim::start(cfg, 0).await.expect("sim");
    s.state
        .control(&harvest::sim::ControlRequest {
            output_tokens_mean: Some(mean_tokens),
            speed_scale: Some(speed),
            ..Default::default()
        })
        .expect("control");
    s
}

/// The simulator's certificate authority, written where the jobs can name it.
fn ca_file(sim: &SimHandle, dir: &Path) -> std::path::PathBuf {
    let ca = dir.join("sim-ca.pem");
    std::fs::write(&ca, sim.ca_pem.as_deref().expect("a CA")).expect("write CA");
    ca
}

fn answered(dir: &Path) -> usize {
    read_jsonl::<OutputRecord>(&dir.join("out/A.jsonl")).len()
}

/// The highest number of streams the simulator served at once while `run` ran.
async fn peak_streams<F: std::future::Future<Output = (i32, String)>>(
    sim: &SimHandle,
    run: F,
) -> ((i32, String), u32) {
    let peak = Arc::new(AtomicU32::new(0));
    let (p, state) = (peak.clone(), sim.state.clone());
    let watch = tokio::spawn(async move {
        loop {
            p.fetch_max(state.in_flight_total(), Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let out = run.await;
    watch.abort();
    (out, peak.load(Ordering::Relaxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_over_https_trusts_the_authority_it_is_given_and_refuses_one_it_is_not() {
    let sim = tls_sim(0.0, 40.0, 256).await;
    assert!(sim.base_url().starts_with("https://127.0.0.1:"));
    let dir = tempfile::tempdir().expect("tmp");
    let ca = ca_file(&sim, dir.path());

    // Not trusted: nothing is sent, and the error says how to trust it.
    let plain = dir.path().join("plain");
    write_job_with_ids(&plain, &sim.base_url(), KEY_VAR, 30, "");
    let (code, said) = run_headless(&plain, KEY_VAR, KEY, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("certificate"), "{said}");
    assert!(
        said.contains("SSL_CERT_FILE") && said.contains("ca_cert"),
        "{said}"
    );
    assert_eq!(sim.state.requests_by_http_version(), (0, 0));

    // `ca_cert` in the config: every prompt answered, over HTTP/2 (the default over HTTPS).
    let with_ca = dir.path().join("with-ca");
    write_job_with_ids(
        &with_ca,
        &sim.base_url(),
        KEY_VAR,
        30,
        &format!("ca_cert = \"{}\"", ca.display()),
    );
    let (code, said) = run_headless(&with_ca, KEY_VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{said}");
    assert_eq!(answered(&with_ca), 30);
    // Over HTTP/2 only; the hard budget's checks of a documented close may add a few requests.
    let (h1, h2) = sim.state.requests_by_http_version();
    assert_eq!(h1, 0, "HTTP/2 by default over HTTPS");
    assert!((30..=40).contains(&h2), "{h2} requests over HTTP/2");

    // `SSL_CERT_FILE`, as curl and Python take it.
    let env_ca = dir.path().join("env-ca");
    write_job_with_ids(&env_ca, &sim.base_url(), KEY_VAR, 30, "");
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"));
    c.env(KEY_VAR, KEY)
        .env("SSL_CERT_FILE", &ca)
        .args(["run", "--headless", "-c"])
        .arg(env_ca.join("harvest.toml"));
    let out = tokio::task::spawn_blocking(move || c.output().expect("runs"))
        .await
        .expect("join");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(answered(&env_ca), 30);

    // A ca_cert that is not a certificate is a config error naming the file, line and key.
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(&bad).expect("dir");
    std::fs::write(bad.join("junk.pem"), "not a certificate\n").expect("write");
    write_job_with_ids(&bad, &sim.base_url(), KEY_VAR, 3, "ca_cert = \"junk.pem\"");
    let (code, said) = run_headless(&bad, KEY_VAR, KEY, &[]).await;
    assert_eq!(code, 2, "{said}");
    assert!(
        said.contains("harvest.toml:4") && said.contains("ca_cert") && said.contains("junk.pem"),
        "{said}"
    );
    sim.stop().await;
}

/// Over one HTTP/2 connection (40 streams are one connection's share) the server's
/// `MAX_CONCURRENT_STREAMS` caps how many run at once; over HTTP/1.1 (`http2 = false`) each
/// stream has its own connection and the run's concurrency is what runs. Slow tier, run alone:
/// the HTTP/1.1 peak is transport capacity, which the simulation in
/// src/engine/core/tests/simulation/ (virtual time, no sockets) does not model; the
/// deterministic halves (one HTTP/2 connection, never past the server's limit) are asserted
/// here too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow tier: capacity against the real binary; .ci/run runs it alone (cargo test --locked --test it -- --ignored --test-threads=1 --skip peers::)"]
async fn http2_runs_no_more_streams_than_the_server_allows_and_http1_runs_them_all() {
    let limit = 8;
    let sim = tls_sim(0.05, 200.0, limit).await;
    let dir = tempfile::tempdir().expect("tmp");
    let ca = ca_file(&sim, dir.path());
    let settings = |http2: bool| {
        format!(
            "ca_cert = \"{}\"\nconcurrency = 40\nhttp2 = {http2}\n[request]\nmax_tokens = 400",
            ca.display()
        )
    };

    let h2 = dir.path().join("h2");
    write_job_with_ids(&h2, &sim.base_url(), KEY_VAR, 120, &settings(true));
    let ((code, said), peak2) = peak_streams(&sim, run_headless(&h2, KEY_VAR, KEY, &[])).await;
    assert_eq!(code, 0, "{said}");
    assert_eq!(answered(&h2), 120);
    let (h1_n, h2_n) = sim.state.requests_by_http_version();
    assert_eq!((h1_n, h2_n), (0, 120), "spoke HTTP/2");
    assert!(
        peak2 <= limit,
        "HTTP/2: {peak2} streams at once, the server allows {limit}"
    );
    let h2_connections = sim.state.connections();
    assert_eq!(
        h2_connections, 1,
        "concurrency 40 is one HTTP/2 connection's share, catalog calls included"
    );

    let h1 = dir.path().join("h1");
    write_job_with_ids(&h1, &sim.base_url(), KEY_VAR, 120, &settings(false));
    let ((code, said), peak1) = peak_streams(&sim, run_headless(&h1, KEY_VAR, KEY, &[])).await;
    assert_eq!(code, 0, "{said}");
    assert_eq!(answered(&h1), 120);
    assert_eq!(
        sim.state.requests_by_http_version(),
        (120, 120),
        "spoke HTTP/1.1"
    );
    assert!(
        peak1 > 3 * limit,
        "HTTP/1.1: {peak1} streams at once at concurrency 40"
    );
    let h1_connections = sim.state.connections() - h2_connections;
    assert!(
        h1_connections >= u64::from(peak1),
        "HTTP/1.1: {h1_connections} connections for {peak1} streams at once"
    );
    eprintln!(
        "peak streams at concurrency 40: HTTP/2 {peak2} (server limit {limit}) over \
         {h2_connections} connection, HTTP/1.1 {peak1} over {h1_connections}"
    );
    sim.stop().await;
}

/// With `http2 = true` harvest spreads its streams over enough connections (one per 64 streams
/// of the configured concurrency) that no connection's `MAX_CONCURRENT_STREAMS` caps the run:
/// 300 streams against a server that allows 100 per connection all run at once, over 5
/// connections. Slow tier, run alone: the peak is transport capacity, which the simulation in
/// src/engine/core/tests/simulation/ (virtual time, no sockets) does not model; the lanes
/// opened (`h2_connections_for`) are the deterministic half, asserted here too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow tier: capacity against the real binary; .ci/run runs it alone (cargo test --locked --test it -- --ignored --test-threads=1 --skip peers::)"]
async fn http2_spreads_streams_over_connections_so_no_server_limit_caps_the_run() {
    let limit = 100;
    // Streams of a few seconds (0.5 of real pace): long enough that all 300 are open at once
    // (at 0.2, beside the other tests on the 2-core CI machine, CI saw 234 and 243 at once; a
    // stream ended before the last ones were sent). In the slow tier it runs alone.
    let sim = tls_sim(0.5, 300.0, limit).await;
    let dir = tempfile::tempdir().expect("tmp");
    let ca = ca_file(&sim, dir.path());
    let job = dir.path().join("spread");
    write_job_with_ids(
        &job,
        &sim.base_url(),
        KEY_VAR,
        900,
        &format!(
            "ca_cert = \"{}\"\nconcurrency = 300\nhttp2 = true\n[request]\nmax_tokens = 600",
            ca.display()
        ),
    );
    let ((code, said), peak) = peak_streams(&sim, run_headless(&job, KEY_VAR, KEY, &[])).await;
    let connections = sim.state.connections();
    eprintln!(
        "HTTP/2 at concurrency 300, server limit {limit} per connection: peak {peak} over \
         {connections} connections"
    );
    assert_eq!(code, 0, "{said}");
    assert_eq!(answered(&job), 900);
    assert_eq!(
        sim.state.requests_by_http_version(),
        (0, 900),
        "spoke HTTP/2"
    );
    assert!(
        peak > 270,
        "{peak} streams at once over HTTP/2 at concurrency 300, {limit} per connection"
    );
    // One TLS handshake per lane: the first request on each goes alone, so a burst does not
    // open a connection per stream before ALPN has said HTTP/2 (205 for these 300 before).
    assert_eq!(
        connections,
        harvest::openrouter::ClientOptions::h2_connections_for(300) as u64,
        "connections opened"
    );
    sim.stop().await;
}
