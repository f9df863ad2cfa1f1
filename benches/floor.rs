//! The floor of the benchmark (issue #36): the least a client can do with the streams harvest
//! opens. Same job as harvest and the Python peer (a prompt JSONL, `--concurrency` streaming chat
//! completions at once), the same stack (hyper-util's client over rustls with the platform's
//! verifier, harvest's own connector, read-ahead and HTTP/2 windows, HTTP/2 by ALPN on one
//! connection per 64 streams, as `OpenRouterClient` lays them out, on harvest's one-thread
//! runtime with its batched wake-ups), and nothing else: each response's bytes are read and
//! dropped. No SSE framing, no JSON, no accounting; only the usage chunk's
//! `"completion_tokens":` is looked for in the last bytes of each response, so that the
//! harness counts the same tokens.
//!
//! Its CPU per output token is what this machine and stack cost before any of harvest's own
//! work; `scripts/bench.sh --tls --floor` runs it beside harvest and states harvest's figure as
//! a multiple of it. Over HTTPS and HTTP/2 only, as harvest carries chat requests there with
//! no proxy set.
//!
//! ```text
//! cargo bench --bench floor -- --base-url https://127.0.0.1:PORT/api/v1 --prompts P.jsonl \
//!   --out OUT.jsonl --model M --max-tokens 16384 --concurrency 1000 --api-key-env KEY \
//!   --ca-cert CA.pem [--read-batch-ms 100]
//! ```

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

type Lane = Client<harvest::openrouter::Connector, Full<Bytes>>;

#[derive(Parser)]
#[command(about = "The benchmark's floor client: read the streams, drop the bytes")]
struct Args {
    #[arg(long)]
    base_url: String,
    #[arg(long)]
    prompts: std::path::PathBuf,
    #[arg(long)]
    out: std::path::PathBuf,
    #[arg(long)]
    model: String,
    #[arg(long)]
    max_tokens: u32,
    #[arg(long)]
    concurrency: usize,
    #[arg(long)]
    api_key_env: String,
    #[arg(long)]
    ca_cert: Option<std::path::PathBuf>,
    /// harvest's longest pause before a busy park (its `--read-batch-ms`, read from the same
    /// environment variable, on the same gate: the floor reports no reads, so its pause grows
    /// to the longest as harvest's does at real pace); 0 turns it off.
    #[arg(long, env = "HARVEST_READ_BATCH_MS", default_value_t = harvest::runtime::DEFAULT_READ_BATCH_MS)]
    read_batch_ms: u64,
    /// Accepted for the harness's sake (it passes the same flags to every client).
    #[arg(long, default_value_t = 10)]
    progress_every: u64,
    /// cargo bench passes `--bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

/// As harvest's default `timeouts.connect_s`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Streams one HTTP/2 connection carries, as `harvest::openrouter::client` lays them out.
const STREAMS_PER_CONNECTION: usize = 64;

/// The tail of a response kept to find its usage (the usage chunk ends the stream, before
/// `[DONE]`).
const TAIL: usize = 1024;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let _ = a.progress_every;
    let _ = a.bench;
    harvest::raise_open_files_limit();
    let key = std::env::var(&a.api_key_env)
        .map_err(|_| format!("the environment variable {} is not set", a.api_key_env))?;
    let mut bodies = Vec::new();
    for (i, line) in std::io::BufReader::new(std::fs::File::open(&a.prompts)?)
        .lines()
        .enumerate()
    {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| format!("{} line {}: {e}", a.prompts.display(), i + 1))?;
        let id = rec["id"]
            .as_str()
            .map_or_else(|| i.to_string(), str::to_string);
        let messages = match rec.get("messages") {
            Some(m) => m.clone(),
            None => serde_json::json!([{"role": "user", "content": rec["prompt"]}]),
        };
        let body = serde_json::json!({
            "model": a.model, "messages": messages, "max_tokens": a.max_tokens,
            "stream": true, "stream_options": {"include_usage": true},
        });
        bodies.push((id, serde_json::to_vec(&body)?));
    }
    let pause = (a.read_batch_ms > 0).then(|| Duration::from_millis(a.read_batch_ms));
    let rt = harvest::runtime::current_thread(pause)?;
    let asked = bodies.len();
    let (lines, failures) = rt.block_on(run(&a, &key, bodies))?;
    if let Some((n, first)) = failures {
        // The harness shows this on a failed run (fewer completed than asked).
        eprintln!("floor: {n} of {asked} responses failed; the first: {first}");
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(&a.out)?);
    for (id, tokens) in lines {
        writeln!(
            out,
            "{}",
            serde_json::json!({"id": id, "usage": {"completion_tokens": tokens}})
        )?;
    }
    out.flush()?;
    Ok(())
}

/// What one run read: (id, completion tokens) of each stream that ended with its usage, and
/// how many did not with the first one's story.
type Read = (Vec<(String, u64)>, Option<(usize, String)>);

/// Every prompt's stream, `concurrency` at once over the lanes.
async fn run(
    a: &Args,
    key: &str,
    bodies: Vec<(String, Vec<u8>)>,
) -> Result<Read, Box<dyn std::error::Error>> {
    let mut roots = Vec::new();
    if let Some(p) = &a.ca_cert {
        for c in CertificateDer::pem_slice_iter(&std::fs::read(p)?) {
            roots.push(c?);
        }
    }
    let tls = harvest::openrouter::tls_config(roots)?;
    let auth = format!("Bearer {key}");
    let lanes = a.concurrency.div_ceil(STREAMS_PER_CONNECTION).max(1);
    let clients: Vec<Lane> = (0..lanes)
        .map(|_| {
            let connector = harvest::openrouter::connector(tls.clone(), CONNECT_TIMEOUT, true);
            harvest::openrouter::h2_windows(&mut Client::builder(TokioExecutor::new()))
                .pool_timer(TokioTimer::new())
                .build(connector)
        })
        .collect();
    let url = format!("{}/chat/completions", a.base_url.trim_end_matches('/'));
    // As harvest's lanes do (`transport::Lane`): each connection's first request goes alone,
    // and the others of its lane wait for its response to begin (2 s at most), so that the
    // lane is one HTTP/2 connection.
    let opened: Vec<_> = (0..lanes)
        .map(|_| tokio::sync::watch::channel(false))
        .collect();
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..a.concurrency.min(bodies.len()) {
        let (client, url, auth) = (clients[w % lanes].clone(), url.clone(), auth.clone());
        let (bodies, next) = (bodies.clone(), next.clone());
        let (tx, mut rx) = (opened[w % lanes].0.clone(), opened[w % lanes].1.clone());
        let opener = w < lanes;
        workers.push(tokio::spawn(async move {
            if !opener {
                let open = rx.wait_for(|open| *open);
                let _ = tokio::time::timeout(Duration::from_secs(2), open).await;
            }
            let (mut done, mut failed) = (Vec::new(), None::<(usize, String)>);
            let mut first = opener.then_some(tx);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((id, body)) = bodies.get(i) else {
                    return (done, failed);
                };
                match one(&client, &url, &auth, body.clone(), first.take()).await {
                    Ok(tokens) => done.push((id.clone(), tokens)),
                    Err(e) => {
                        let f = failed.get_or_insert((0, e));
                        f.0 += 1;
                    }
                }
            }
        }));
    }
    let (mut all, mut failures) = (Vec::new(), None::<(usize, String)>);
    for w in workers {
        let (done, failed) = w.await?;
        all.extend(done);
        if let Some((n, e)) = failed {
            failures.get_or_insert((0, e)).0 += n;
        }
    }
    Ok((all, failures))
}

/// One stream read to its end and dropped; its completion tokens, from the usage chunk, or
/// what went wrong.
async fn one(
    client: &Lane,
    url: &str,
    auth: &str,
    body: Vec<u8>,
    opened: Option<tokio::sync::watch::Sender<bool>>,
) -> Result<u64, String> {
    let req = hyper::Request::post(url)
        .header(hyper::header::AUTHORIZATION, auth)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("request: {e}"))?;
    let resp = client.request(req).await;
    if let Some(tx) = opened {
        // Its lane's connection is up (or failed: the others try their own).
        let _ = tx.send(true);
    }
    let resp = resp.map_err(|e| format!("request: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("HTTP {}", resp.status()));
    }
    let mut stream = resp.into_body();
    let mut tail: Vec<u8> = Vec::with_capacity(2 * TAIL);
    while let Some(frame) = stream.frame().await {
        let frame = frame.map_err(|e| format!("body: {e}"))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        // Only the last bytes are kept: the usage chunk is among them at the end.
        if chunk.len() >= TAIL {
            tail.clear();
            tail.extend_from_slice(&chunk[chunk.len() - TAIL..]);
        } else {
            if tail.len() + chunk.len() > 2 * TAIL {
                tail.drain(..tail.len() + chunk.len() - TAIL);
            }
            tail.extend_from_slice(&chunk);
        }
    }
    completion_tokens(&tail).ok_or_else(|| "no usage with completion_tokens at the end".into())
}

/// The last `"completion_tokens": N` in `tail`.
fn completion_tokens(tail: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"completion_tokens\":";
    let at = memchr::memmem::rfind(tail, KEY)?;
    let rest = &tail[at + KEY.len()..];
    let rest = &rest[rest.iter().take_while(|b| b.is_ascii_whitespace()).count()..];
    let n = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..n]).ok()?.parse().ok()
}
