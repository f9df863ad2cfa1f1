//! How chat requests travel, and the one shape their responses and failures take whichever
//! client carried them.
//!
//! Over HTTPS, and whenever a proxy variable is set, reqwest carries them (rustls, the system's
//! and configured roots, HTTP/2 spread over lanes, proxies). Over plain HTTP/1.1 (an own vLLM,
//! SGLang or llama.cpp server) hyper's client carries them directly, because that is where the
//! read buffer can be capped: reqwest leaves hyper's adaptive buffer free to grow to 408 KB per
//! connection, and a server that sends faster than harvest parses grows it on every
//! connection (1,201 MB at 2,000 streams, BENCHMARKS.md). Capped, such a server is held back by
//! TCP instead of by harvest's memory. Over HTTPS, HTTP/2's flow-control window is the bound.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue, USER_AGENT};

/// The most hyper buffers from one plain-HTTP/1.1 connection: a read asks for at most this
/// much. 16 KiB holds ~100 streamed events, so a fast stream still moves in large reads, and
/// 2,000 connections hold at most 32 MB. (Response headers must fit in it too: hyper closes a
/// connection whose headers outgrow it; servers send well under 1 KB.)
pub(super) const HTTP1_READ_BUFFER: usize = 16 * 1024;

pub(super) const USER_AGENT_VALUE: &str = concat!("harvest/", env!("CARGO_PKG_VERSION"));

/// A response's body, whichever client read it.
pub(super) type Body = BoxBody<Bytes, Failure>;

/// A chat response whose status may be anything; the caller reads an error body.
pub(super) struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

/// A transport failure, classified once where it is met.
#[derive(Debug)]
pub(super) struct Failure {
    pub kind: FailureKind,
    /// The error and its causes, with no URL (it may carry a query). Not yet scrubbed of the
    /// key: the client does that.
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FailureKind {
    Connect,
    ConnectTimeout,
    /// A timeout other than connecting (reqwest's; harvest sets none of its own there).
    Timeout,
    /// The request could not be built.
    Invalid,
    /// The connection failed after it was made.
    Other,
}

impl From<reqwest::Error> for Failure {
    fn from(e: reqwest::Error) -> Self {
        let kind = match (e.is_connect(), e.is_timeout()) {
            (true, true) => FailureKind::ConnectTimeout,
            (false, true) => FailureKind::Timeout,
            (true, false) => FailureKind::Connect,
            _ if e.is_builder() => FailureKind::Invalid,
            _ => FailureKind::Other,
        };
        Failure {
            kind,
            message: error_chain(&e.without_url()),
        }
    }
}

impl From<hyper_util::client::legacy::Error> for Failure {
    fn from(e: hyper_util::client::legacy::Error) -> Self {
        let kind = if !e.is_connect() {
            FailureKind::Other
        } else if has_io_kind(&e, &[std::io::ErrorKind::TimedOut]) {
            // HttpConnector's connect timeout is an io::Error of kind TimedOut.
            FailureKind::ConnectTimeout
        } else {
            FailureKind::Connect
        };
        Failure {
            kind,
            message: error_chain(&e),
        }
    }
}

impl From<hyper::Error> for Failure {
    fn from(e: hyper::Error) -> Self {
        // A socket timeout mid-body (the kernel's user timeout) is a timeout, as reqwest
        // classes it, not a dropped connection.
        let kind = if has_io_kind(&e, &[std::io::ErrorKind::TimedOut]) {
            FailureKind::Timeout
        } else {
            FailureKind::Other
        };
        Failure {
            kind,
            message: error_chain(&e),
        }
    }
}

/// Reads a whole body (an error response, a non-streamed completion).
pub(super) async fn read_all(body: Body) -> Result<Bytes, Failure> {
    Ok(body.collect().await?.to_bytes())
}

/// The clients chat requests go through.
pub(super) enum ChatTransport {
    Reqwest {
        /// The client of each connection, taken in turn: one over HTTP/1.1 (its pool opens
        /// a connection per stream), one per lane over HTTP/2.
        lanes: Vec<Lane>,
        next_lane: AtomicUsize,
        /// Same settings, no idle pool: to resend on a new connection.
        fresh: reqwest::Client,
    },
    Http1(Box<Http1Clients>),
}

/// hyper's clients for plain HTTP/1.1 (boxed: they are much larger than reqwest's handles).
pub(super) struct Http1Clients {
    pooled: HyperClient<TimedConnector, Full<Bytes>>,
    /// No idle pool: to resend on a new connection.
    fresh: HyperClient<TimedConnector, Full<Bytes>>,
    /// reqwest's default headers plus what reqwest adds and hyper does not (user agent,
    /// content type, `Accept`).
    headers: HeaderMap,
}

/// One reqwest client and, over HTTP/2, the gate that lets its first request go alone.
pub(super) struct Lane {
    client: reqwest::Client,
    /// Over HTTP/2, held by the request that opens the lane's connection. Until TLS has
    /// chosen the protocol (ALPN), reqwest's pool does not know the connection will be shared,
    /// and a burst of requests each opens its own: 205 TLS handshakes for 300 streams that
    /// then share 5 connections (tests/it/tls.rs). The others wait for the first one's response
    /// headers, or [`OPEN_ALONE`] at most, and then share its connection. `None` over HTTP/1.1.
    opening: Option<tokio::sync::RwLock<()>>,
    opened: std::sync::atomic::AtomicBool,
}

/// The longest a lane's first request holds the others back. The connection is pooled once
/// its handshake is done, well before this on any working network; a server slow to send
/// headers (or not answering at all) must not hold a lane's streams behind one request, so
/// past this the rest go as they would without the gate.
const OPEN_ALONE: Duration = Duration::from_secs(2);

impl Lane {
    /// A lane for `client`; `gated` when it may speak HTTP/2.
    pub(super) fn new(client: reqwest::Client, gated: bool) -> Lane {
        Lane {
            client,
            opening: gated.then(|| tokio::sync::RwLock::new(())),
            opened: std::sync::atomic::AtomicBool::new(!gated),
        }
    }

    /// Sends a request on this lane; the lane's first goes alone (see [`Lane::opening`]).
    /// The others wait on the gate's read side, so they all go at once when it opens. If the
    /// first fails or is dropped, one of them opens the lane instead; a failed request closes
    /// the gate again, since its connection may be gone and the next burst would otherwise
    /// open one per stream again.
    async fn send(
        &self,
        request: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let Some(gate) = &self.opening else {
            return request(&self.client).send().await;
        };
        while !self.opened.load(Ordering::Acquire) {
            let Ok(held) = gate.try_write() else {
                // Another request is opening the lane: wait for it, then look again.
                drop(gate.read().await);
                continue;
            };
            if self.opened.load(Ordering::Acquire) {
                break;
            }
            let send = request(&self.client).send();
            tokio::pin!(send);
            let r = match tokio::time::timeout(OPEN_ALONE, &mut send).await {
                Ok(r) => r,
                Err(_) => {
                    self.opened.store(true, Ordering::Release);
                    drop(held);
                    send.await
                }
            };
            self.opened.store(r.is_ok(), Ordering::Release);
            return r;
        }
        let r = request(&self.client).send().await;
        if r.is_err() {
            self.opened.store(false, Ordering::Release);
        }
        r
    }
}

/// `HttpConnector` with the connect timeout over name resolution too, as reqwest has it
/// (`HttpConnector`'s own bounds each TCP attempt only).
#[derive(Clone)]
pub(super) struct TimedConnector {
    inner: HttpConnector,
    timeout: Duration,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<hyper::Uri> for TimedConnector {
    type Response = <HttpConnector as tower_service::Service<hyper::Uri>>::Response;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: hyper::Uri) -> Self::Future {
        let connect = self.inner.call(uri);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connect).await {
                Ok(r) => r.map_err(Into::into),
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out (name resolution included)",
                )
                .into()),
            }
        })
    }
}

/// What [`ChatTransport::http1`] needs from the client's options.
pub(super) struct Http1Settings {
    pub headers: HeaderMap,
    pub connect_timeout: Duration,
    pub pool_idle_timeout: Duration,
}

impl ChatTransport {
    /// hyper's client over plain TCP, with the read buffer capped at [`HTTP1_READ_BUFFER`] and
    /// reqwest 0.13's socket defaults (no Nagle; keep-alive probes after 15 s idle, every 15 s,
    /// 3 of them; on Linux unacknowledged data gives up after 30 s).
    pub(super) fn http1(s: Http1Settings) -> ChatTransport {
        let build = |max_idle: usize| {
            let mut connector = HttpConnector::new();
            connector.set_nodelay(true);
            connector.set_connect_timeout(Some(s.connect_timeout));
            connector.set_keepalive(Some(Duration::from_secs(15)));
            connector.set_keepalive_interval(Some(Duration::from_secs(15)));
            connector.set_keepalive_retries(Some(3));
            #[cfg(target_os = "linux")]
            connector.set_tcp_user_timeout(Some(Duration::from_secs(30)));
            let connector = TimedConnector {
                inner: connector,
                timeout: s.connect_timeout,
            };
            HyperClient::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(s.pool_idle_timeout)
                .pool_max_idle_per_host(max_idle)
                .http1_max_buf_size(HTTP1_READ_BUFFER)
                .build(connector)
        };
        let mut headers = s.headers;
        headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
        ChatTransport::Http1(Box::new(Http1Clients {
            pooled: build(usize::MAX),
            fresh: build(0),
            headers,
        }))
    }

    /// Whether chat requests to `base_url` go over the capped HTTP/1.1 client: plain HTTP
    /// (HTTP/2 is only negotiated over TLS) with no proxy variable that reqwest would honour,
    /// and no `user:password@` in the URL (reqwest turns that into Basic auth).
    pub(super) fn wants_http1(base_url: &str, proxy_set: bool) -> bool {
        let Some(rest) = base_url.strip_prefix("http://") else {
            return false;
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        !proxy_set && !authority.contains('@')
    }

    /// Posts `body` (JSON) to `url`. A pooled connection can be dead without the pool knowing
    /// yet: llama.cpp's server, for one, closes the connection after every streamed response
    /// while advertising keep-alive. When the connection closes before any response byte,
    /// nothing was generated, so the request is resent at once on a new connection and
    /// `stale` counts it; it is not a failure of the endpoint.
    pub(super) async fn post(
        &self,
        url: &str,
        body: Bytes,
        stale: &AtomicU64,
    ) -> Result<Response, Failure> {
        match self {
            ChatTransport::Reqwest {
                lanes,
                next_lane,
                fresh,
            } => {
                let lane = &lanes[next_lane.fetch_add(1, Ordering::Relaxed) % lanes.len()];
                let request = |c: &reqwest::Client| {
                    c.post(url)
                        .header(CONTENT_TYPE, "application/json")
                        .body(body.clone())
                };
                let resp = match lane.send(request).await {
                    Ok(r) => r,
                    Err(e) if !e.is_connect() && !e.is_timeout() && died_before_response(&e) => {
                        stale.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("pooled connection was dead; resending on a new one");
                        request(fresh).send().await?
                    }
                    Err(e) => return Err(e.into()),
                };
                let resp = hyper::Response::from(resp);
                let (parts, body) = resp.into_parts();
                Ok(Response {
                    status: parts.status,
                    headers: parts.headers,
                    body: body.map_err(Failure::from).boxed(),
                })
            }
            ChatTransport::Http1(clients) => {
                let Http1Clients {
                    pooled,
                    fresh,
                    headers,
                } = &**clients;
                let request = || -> Result<hyper::Request<Full<Bytes>>, Failure> {
                    let mut req = hyper::Request::post(url)
                        .body(Full::new(body.clone()))
                        .map_err(|e| Failure {
                            kind: FailureKind::Invalid,
                            message: e.to_string(),
                        })?;
                    *req.headers_mut() = headers.clone();
                    Ok(req)
                };
                let resp = match pooled.request(request()?).await {
                    Ok(r) => r,
                    Err(e) if !e.is_connect() && died_before_response(&e) => {
                        stale.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("pooled connection was dead; resending on a new one");
                        fresh.request(request()?).await?
                    }
                    Err(e) => return Err(e.into()),
                };
                let (parts, body) = resp.into_parts();
                Ok(Response {
                    status: parts.status,
                    headers: parts.headers,
                    body: body.map_err(Failure::from).boxed(),
                })
            }
        }
    }

    /// The reqwest transport over `lanes` (at least one), taken in turn.
    pub(super) fn reqwest(lanes: Vec<Lane>, fresh: reqwest::Client) -> ChatTransport {
        assert!(!lanes.is_empty(), "a transport needs a lane");
        ChatTransport::Reqwest {
            lanes,
            next_lane: AtomicUsize::new(0),
            fresh,
        }
    }
}

/// Whether a proxy variable is set that reqwest would honour for plain HTTP (it then decides
/// with `NO_PROXY`; harvest leaves that to it).
pub(super) fn http_proxy_set() -> bool {
    ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// Whether a request failed because its connection closed (or was reset) before any response
/// byte arrived, as a dead keep-alive connection does. The caller has ruled out a refused
/// connect and a timeout.
fn died_before_response(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_canceled())
        {
            return true;
        }
        cur = err.source();
    }
    has_io_kind(
        e,
        &[
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::ConnectionAborted,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::UnexpectedEof,
        ],
    )
}

/// Whether `e` or one of its causes is an io::Error of one of `kinds`.
fn has_io_kind(e: &(dyn std::error::Error + 'static), kinds: &[std::io::ErrorKind]) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && kinds.contains(&io.kind())
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// An error and its causes on one line, each cause once.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        let t = src.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = src.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_without_a_proxy_takes_the_capped_client() {
        let cases = [
            ("http://127.0.0.1:8000/v1", false, true),
            ("http://gpu-box:30000/v1", false, true),
            ("http://127.0.0.1:8000/v1", true, false),
            ("http://user:secret@gpu-box:8000/v1", false, false),
            ("http://gpu-box:8000/v1?user=a@b", false, true),
            ("https://openrouter.ai/api/v1", false, false),
            ("https://openrouter.ai/api/v1", true, false),
        ];
        for (url, proxy, want) in cases {
            assert_eq!(
                ChatTransport::wants_http1(url, proxy),
                want,
                "{url} proxy={proxy}"
            );
        }
    }

    /// A server that sends a 4 MB answer at once, to a reader that waits before reading: hyper
    /// never holds more than the cap, so no read hands over more (reqwest's uncapped buffer
    /// hands over reads of hundreds of KB here).
    #[tokio::test]
    async fn a_fast_server_is_read_in_capped_pieces() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let body_len = 4 << 20;
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.expect("accept");
            let mut req = vec![0u8; 4096];
            let mut seen = Vec::new();
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = sock.read(&mut req).await.expect("read");
                assert!(n > 0, "request cut short");
                seen.extend_from_slice(&req[..n]);
            }
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {body_len}\r\n\r\n");
            sock.write_all(head.as_bytes()).await.expect("write");
            sock.write_all(&vec![b'x'; body_len]).await.expect("write");
        });
        let t = ChatTransport::http1(Http1Settings {
            headers: HeaderMap::new(),
            connect_timeout: Duration::from_secs(5),
            pool_idle_timeout: Duration::from_secs(5),
        });
        let stale = AtomicU64::new(0);
        let resp = t
            .post(
                &format!("http://{addr}/v1/chat/completions"),
                Bytes::from_static(b"{}"),
                &stale,
            )
            .await
            .expect("post");
        assert_eq!(resp.status, StatusCode::OK);
        // Let the server fill the socket buffers while nothing is read.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut body = resp.body;
        let (mut total, mut largest) = (0usize, 0usize);
        while let Some(frame) = body.frame().await {
            let data = frame.expect("frame").into_data().expect("data");
            total += data.len();
            largest = largest.max(data.len());
        }
        server.await.expect("server");
        assert_eq!(total, body_len);
        assert!(
            largest <= HTTP1_READ_BUFFER,
            "a read of {largest} bytes, over the {HTTP1_READ_BUFFER}-byte cap"
        );
        assert!(
            largest > HTTP1_READ_BUFFER / 2,
            "reads of {largest} bytes: not exercised"
        );
    }

    #[test]
    fn a_reset_before_the_response_is_a_dead_connection_and_a_refusal_is_not() {
        use std::io::{Error, ErrorKind};
        let reset = Error::new(ErrorKind::ConnectionReset, "reset by peer");
        assert!(died_before_response(&reset));
        let eof = Error::new(ErrorKind::UnexpectedEof, "eof");
        assert!(died_before_response(&eof));
        let refused = Error::new(ErrorKind::ConnectionRefused, "refused");
        assert!(!died_before_response(&refused));
        // A cause deeper in the chain counts.
        #[derive(Debug)]
        struct Outer(Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("outer")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let outer = Outer(Error::new(ErrorKind::BrokenPipe, "pipe"));
        assert!(died_before_response(&outer));
        assert_eq!(error_chain(&outer), "outer: pipe");
    }
}
