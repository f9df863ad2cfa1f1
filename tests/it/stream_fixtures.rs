//! The stream parser on recorded OpenRouter byte streams (shapes from research §5-7), fed in
//! random splits (even inside UTF-8 characters and CRLF pairs), and the client against a raw
//! HTTP server on 127.0.0.1 that sends odd bodies: HTML error pages, malformed listings,
//! truncated streams.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use harvest::openrouter::{
    ApiError, ApiKey, ChatRequest, ClientOptions, Completion, ErrorKind, Message, OpenRouterClient,
    StreamAccumulator, StreamTimeouts, UsageSource,
};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Splits `bytes` at random offsets into 1..=8 pieces (or one byte per piece).
fn random_split(bytes: &[u8], rng: &mut SmallRng, one_byte: bool) -> Vec<Vec<u8>> {
    if one_byte {
        return bytes.iter().map(|b| vec![*b]).collect();
    }
    let n = rng.random_range(1..=8usize).min(bytes.len());
    let mut cuts: Vec<usize> = (0..n - 1)
        .map(|_| rng.random_range(1..bytes.len()))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut last = 0;
    for c in cuts.into_iter().chain([bytes.len()]) {
        out.push(bytes[last..c].to_vec());
        last = c;
    }
    out
}

async fn parse(pieces: Vec<Vec<u8>>, require_usage: bool) -> Result<Completion, ApiError> {
    let mut sse = harvest::openrouter::sse::SseDecoder::new();
    let mut acc = StreamAccumulator::new(require_usage);
    for piece in pieces {
        sse.push(&piece);
        while let Some(ev) = sse.next_event() {
            let data = ev.map_err(|e| ApiError::Decode {
                what: "stream",
                detail: e.to_string(),
            })?;
            acc.feed(data)?;
        }
    }
    acc.finish(None, Duration::ZERO)
}

/// Parses `name` whole, byte by byte, and in 300 random splits: every way gives the same result.
async fn parse_all_ways(name: &str, require_usage: bool) -> Result<Completion, ApiError> {
    let bytes = fixture(name);
    let whole = parse(vec![bytes.clone()], require_usage).await;
    let mut rng = SmallRng::seed_from_u64(42);
    for i in 0..301 {
        let pieces = random_split(&bytes, &mut rng, i == 300);
        let got = parse(pieces, require_usage).await;
        match (&whole, &got) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}: split {i} differs"),
            (Err(a), Err(b)) => assert_eq!(a.kind(), b.kind(), "{name}: split {i} differs"),
            _ => panic!("{name}: split {i}: {whole:?} vs {got:?}"),
        }
    }
    whole
}

#[tokio::test]
async fn deepinfra_kimi_k2_stream() {
    let c = parse_all_ways("deepinfra_kimi_k2.sse", true)
        .await
        .expect("complete");
    assert_eq!(c.provider.as_deref(), Some("DeepInfra"));
    assert_eq!(c.id.as_deref(), Some("gen-1773323475-d421DNZ0beKhrCvqbugy"));
    assert_eq!(c.content, "Oi! Tudo bem? Olá — café, 東京 🙂");
    assert_eq!(c.reasoning, None);
    assert_eq!(c.finish_reason, "stop");
    assert_eq!(c.usage.prompt_tokens, 20);
    assert_eq!(c.usage.completion_tokens, 2);
    assert_eq!(c.usage.cost, Some(0.00001));
    assert_eq!(c.usage_source, UsageSource::Reported);
}

#[tokio::test]
async fn glm_reasoning_stream_reads_reasoning_once_and_unescapes() {
    let c = parse_all_ways("glm46_reasoning.sse", true)
        .await
        .expect("complete");
    assert_eq!(
        c.reasoning.as_deref(),
        Some("The user is asking about \"quotes\" and a\nnewline")
    );
    assert_eq!(c.content, "Hello there é東");
    assert_eq!(c.finish_reason, "length");
    assert_eq!(c.native_finish_reason.as_deref(), Some("length"));
    assert_eq!(c.usage.reasoning_tokens(), 48);
    assert_eq!(c.usage.cost, Some(0.00023947));
}

#[tokio::test]
async fn mid_stream_error_chunk_is_a_failure() {
    let e = parse_all_ways("midstream_error.sse", true)
        .await
        .expect_err("error");
    match e {
        ApiError::MidStream {
            partial_events,
            ref detail,
            ..
        } => {
            assert_eq!(partial_events, 1);
            assert_eq!(detail.code_text(), "429");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.is_retryable());
}

#[tokio::test]
async fn stream_without_finish_or_usage_is_truncated() {
    let e = parse_all_ways("truncated.sse", true)
        .await
        .expect_err("truncated");
    assert_eq!(e.kind(), ErrorKind::Truncated);
    assert!(e.is_retryable());
}

#[tokio::test]
async fn crlf_line_endings() {
    let c = parse_all_ways("crlf.sse", true).await.expect("complete");
    assert_eq!(c.content, "crlf é");
    assert_eq!(c.native_finish_reason.as_deref(), Some("eos"));
}

#[tokio::test]
async fn vllm_reasoning_content_dialect_without_usage() {
    // OpenRouter streams must carry usage; a local server's may not, and then [DONE] after a
    // finish reason completes it with tokens counted from events.
    let e = parse_all_ways("vllm_reasoning_content.sse", true)
        .await
        .expect_err("no usage");
    assert_eq!(e.kind(), ErrorKind::Truncated);
    let c = parse_all_ways("vllm_reasoning_content.sse", false)
        .await
        .expect("complete");
    assert_eq!(c.reasoning.as_deref(), Some("Let me think"));
    assert_eq!(c.content, "Yes.");
    assert_eq!(c.usage_source, UsageSource::CountedEvents);
    assert_eq!(c.usage.completion_tokens, 2);
}

/// Serves one canned HTTP response per connection, written in the given pieces with a pause
/// between them so that the client sees separate reads. Returns the base URL.
async fn raw_server(head: &'static str, body_pieces: Vec<Vec<u8>>, chunked: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let pieces = body_pieces.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(head.as_bytes()).await;
                for p in pieces {
                    if chunked {
                        let _ = sock
                            .write_all(format!("{:x}\r\n", p.len()).as_bytes())
                            .await;
                        let _ = sock.write_all(&p).await;
                        let _ = sock.write_all(b"\r\n").await;
                    } else {
                        let _ = sock.write_all(&p).await;
                    }
                    let _ = sock.flush().await;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                if chunked {
                    let _ = sock.write_all(b"0\r\n\r\n").await;
                }
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}/api/v1")
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";

fn client(base: String) -> OpenRouterClient {
    OpenRouterClient::new(ClientOptions::new(
        base,
        ApiKey::new("sk-or-v1-fixture-key-000"),
    ))
    .expect("client")
}

fn request() -> ChatRequest {
    ChatRequest::new("moonshotai/kimi-k2.5", vec![Message::user("hi")], 64)
}

#[tokio::test]
async fn real_http_stream_split_inside_utf8() {
    let bytes = fixture("glm46_reasoning.sse");
    // Cut right inside the two-byte "é" (0xC3 0xA9) and elsewhere.
    let at = bytes.windows(2).position(|w| w == [0xC3, 0xA9]);
    let pieces = match at {
        Some(i) => vec![bytes[..i + 1].to_vec(), bytes[i + 1..].to_vec()],
        None => {
            let mut rng = SmallRng::seed_from_u64(1);
            random_split(&bytes, &mut rng, false)
        }
    };
    let mut rng = SmallRng::seed_from_u64(9);
    let mut fine = Vec::new();
    for p in pieces {
        fine.extend(random_split(&p, &mut rng, false));
    }
    let base = raw_server(SSE_HEAD, fine, true).await;
    let c = client(base)
        .chat_stream(&request(), StreamTimeouts::default())
        .await
        .expect("start")
        .collect()
        .await
        .expect("complete");
    assert_eq!(c.content, "Hello there é東");
    assert!(c.ttft.is_some());
}

#[tokio::test]
async fn real_http_truncated_stream_is_not_a_success() {
    let base = raw_server(SSE_HEAD, vec![fixture("truncated.sse")], true).await;
    let e = client(base)
        .chat_stream(&request(), StreamTimeouts::default())
        .await
        .expect("start")
        .collect()
        .await
        .expect_err("truncated");
    assert_eq!(e.kind(), ErrorKind::Truncated);
}

#[tokio::test]
async fn real_http_connection_cut_mid_body() {
    // Declared chunked, then the socket closes without the terminating chunk.
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        if let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = vec![0u8; 65536];
            let _ = sock.read(&mut buf).await;
            let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
            let _ = sock
                .write_all(format!("{head}{:x}\r\n", body.len()).as_bytes())
                .await;
            let _ = sock.write_all(body).await;
            let _ = sock.write_all(b"\r\n").await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(sock);
        }
    });
    let e = client(format!("http://{addr}/api/v1"))
        .chat_stream(&request(), StreamTimeouts::default())
        .await
        .expect("start")
        .collect()
        .await
        .expect_err("cut");
    assert!(
        matches!(e.kind(), ErrorKind::Connection | ErrorKind::Truncated),
        "{e:?}"
    );
    assert!(e.is_retryable());
}

#[tokio::test]
async fn html_502_page_and_plain_text_500() {
    let html = "<html><head><title>502 Bad Gateway</title></head><body><center>cloudflare</center></body></html>";
    let head: &'static str = Box::leak(
        format!(
            "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            html.len()
        )
        .into_boxed_str(),
    );
    let base = raw_server(head, vec![html.as_bytes().to_vec()], false).await;
    let e = client(base).chat(&request()).await.expect_err("502");
    assert_eq!(e.status(), Some(502));
    assert!(e.is_retryable());
    assert_eq!(
        e.to_string(),
        "HTTP 502: non-JSON body (HTML page: 502 Bad Gateway)"
    );

    let text = "upstream exploded\n";
    let head: &'static str = Box::leak(
        format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            text.len()
        )
        .into_boxed_str(),
    );
    let base = raw_server(head, vec![text.as_bytes().to_vec()], false).await;
    let e = client(base).chat(&request()).await.expect_err("500");
    assert_eq!(e.to_string(), "HTTP 500: non-JSON body: upstream exploded");
}

#[tokio::test]
async fn malformed_endpoints_response() {
    let body = r#"{"data":{"id":"m/x","endpoints":[{"provider_name":"A","tag":"a","pricing":{"prompt":"0.1","completion":"lots"}}]}}"#;
    let head: &'static str = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_boxed_str(),
    );
    let base = raw_server(head, vec![body.as_bytes().to_vec()], false).await;
    let e = client(base).endpoints("m/x").await.expect_err("bad price");
    let msg = e.to_string();
    assert!(
        msg.contains("endpoints response")
            && msg.contains("endpoint #0 (a)")
            && msg.contains("lots"),
        "{msg}"
    );
}

#[tokio::test]
async fn refused_connection_is_a_retryable_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let e = client(format!("http://{addr}/api/v1"))
        .chat(&request())
        .await
        .expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::Connection);
    assert!(e.is_retryable());
}
