//! Connection-level behaviour found in real OpenAI-compatible servers, reproduced with a raw
//! TCP server so each case is deterministic: a pooled keep-alive connection that the server
//! already dropped (llama.cpp's server closes after every stream while advertising
//! keep-alive), a 503 "Loading model" before readiness, a plain-text 500 body.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::common::http::{canned_server, read_request};
use harvest::openrouter::{
    ApiError, ChatRequest, ClientOptions, ErrorKind, Message, OpenRouterClient, StreamTimeouts,
};

const SSE_BODY: &str = concat!(
    "data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"hello\"}}]}\n\n",
    "data: {\"id\":\"x\",\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n",
    "data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n",
    "data: [DONE]\n\n",
);

fn sse_response() -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nkeep-alive: timeout=5, max=100\r\ncontent-length: {}\r\n\r\n{SSE_BODY}",
        SSE_BODY.len()
    )
}

/// A server that answers the first request of each connection and then, on the same
/// connection, reads the next request and closes without a byte of response. Counts
/// connections and requests answered.
async fn one_shot_keepalive_server() -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let conns = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let (c, a) = (conns.clone(), answered.clone());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let a = a.clone();
            tokio::spawn(async move {
                if !read_request(&mut sock).await {
                    return;
                }
                let _ = sock.write_all(sse_response().as_bytes()).await;
                a.fetch_add(1, Ordering::SeqCst);
                // The connection stays open and looks reusable; the next request on it is
                // read and then the socket is dropped without an answer.
                let _ = read_request(&mut sock).await;
            });
        }
    });
    (format!("http://{addr}/v1"), conns, answered)
}

fn client(base: String) -> OpenRouterClient {
    let mut opts = ClientOptions::new(base, None);
    opts.require_usage = false;
    OpenRouterClient::new(opts).expect("client")
}

fn request() -> ChatRequest {
    ChatRequest::new("gemma-3-270m", vec![Message::user("hi")], 16)
}

#[tokio::test]
async fn a_dead_pooled_connection_is_replaced_at_once_without_an_error() {
    let (base, conns, answered) = one_shot_keepalive_server().await;
    let c = client(base);
    for i in 0..4 {
        let done = c
            .chat_stream(&request(), StreamTimeouts::default())
            .await
            .unwrap_or_else(|e| panic!("request {i} failed to start: {e}"))
            .collect()
            .await
            .unwrap_or_else(|e| panic!("request {i} failed: {e}"));
        assert_eq!(done.content, "hello");
        assert_eq!(done.finish_reason, "length");
    }
    assert_eq!(answered.load(Ordering::SeqCst), 4);
    // 1 opens connection A (pooled); 2 is given A, which the server no longer answers on,
    // and is resent on a new, unpooled connection B; 3 finds the pool empty and opens C
    // (pooled); 4 is given C, dead too, and is resent on D.
    assert_eq!(
        c.stale_retries(),
        2,
        "each dead pooled connection costs one resend"
    );
    assert_eq!(conns.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn loading_model_503_is_retryable_and_readable() {
    let body = r#"{"error":{"message":"Loading model","type":"unavailable_error","code":503}}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let c = client(canned_server(response).await);
    let e = c
        .chat_stream(&request(), StreamTimeouts::default())
        .await
        .err()
        .expect("a 503 is an error");
    assert!(e.is_retryable(), "{e}");
    assert_eq!(e.kind(), ErrorKind::Server);
    assert!(e.to_string().contains("Loading model"), "{e}");
    assert_eq!(c.stale_retries(), 0, "an answered request is not resent");
}

#[tokio::test]
async fn plain_text_500_is_a_clean_error() {
    let c = client(
        canned_server(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 21\r\nconnection: close\r\n\r\nInternal Server Error",
        )
        .await,
    );
    let e = c
        .chat_stream(&request(), StreamTimeouts::default())
        .await
        .err()
        .expect("a 500 is an error");
    assert!(matches!(e, ApiError::Http { status: 500, .. }), "{e:?}");
    assert!(e.is_retryable());
    assert!(e.to_string().contains("Internal Server Error"), "{e}");
}

#[tokio::test]
async fn a_refused_connection_is_not_resent_as_stale() {
    // Bind then drop to get a port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let c = client(format!("http://127.0.0.1:{port}/v1"));
    let e = tokio::time::timeout(
        Duration::from_secs(10),
        c.chat_stream(&request(), StreamTimeouts::default()),
    )
    .await
    .expect("refused quickly")
    .err()
    .expect("refused");
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    assert_eq!(c.stale_retries(), 0);
}

/// A server that reads each request and closes the connection without a byte of response
/// (what a proxy that drops a request looks like); the first `drops` requests only.
async fn dropping_server(drops: usize) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let s = s.clone();
            tokio::spawn(async move {
                while read_request(&mut sock).await {
                    if s.fetch_add(1, Ordering::SeqCst) < drops {
                        return; // dropped: closes without answering
                    }
                    let _ = sock.write_all(sse_response().as_bytes()).await;
                }
            });
        }
    });
    (format!("http://{addr}/v1"), seen)
}

#[tokio::test]
async fn a_request_dropped_before_any_byte_on_a_new_connection_is_resent_once() {
    let (base, seen) = dropping_server(1).await;
    let c = client(base);
    let done = c
        .chat_stream(&request(), StreamTimeouts::default())
        .await
        .unwrap_or_else(|e| panic!("{e:?}"))
        .collect()
        .await
        .expect("complete");
    assert_eq!(done.content, "hello");
    assert_eq!(c.stale_retries(), 1);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_server_that_keeps_dropping_gets_one_resend_then_an_error() {
    let (base, seen) = dropping_server(usize::MAX).await;
    let c = client(base);
    let e = c
        .chat_stream(&request(), StreamTimeouts::default())
        .await
        .err()
        .expect("fails");
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    assert!(e.is_retryable());
    assert_eq!(c.stale_retries(), 1, "one resend, not a loop");
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}
