//! hyper's own client for chat requests when no proxy is in the way: plain HTTP/1.1 (an own
//! vLLM, SGLang or llama.cpp server) and HTTPS, where ALPN picks HTTP/2 (OpenRouter).
//!
//! Why not reqwest here. Over HTTP/1.1 reqwest leaves hyper's adaptive read buffer free to grow
//! to 408 KB a connection, and a server that sends faster than harvest parses grows it on every
//! connection (1,201 MB at 2,000 streams, BENCHMARKS.md); here it is capped at
//! [`HTTP1_READ_BUFFER`], and such a server is held back by TCP instead of by harvest's memory.
//! Over HTTPS a stream's body is hyper's `Incoming` itself: reqwest hands it over inside five
//! boxed layers, each polled on every wake-up of every stream, which at real provider pace
//! (a token or two a wake-up) was ~5% of harvest's CPU (#36). TLS is rustls with the platform's
//! verifier and the configured extra roots, as reqwest verifies. HTTP/2's windows are
//! [`h2_windows`]: smaller than hyper's (2 MiB a stream, 5 MiB a connection), which let a fast
//! server park up to 5 MiB unread on each connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue, USER_AGENT};
use rustls::pki_types::CertificateDer;

use super::lane::Lane;
use super::read_ahead::ReadAhead;
use super::{Body, Failure, FailureKind, Response, USER_AGENT_VALUE, died_before_response};

/// The most hyper buffers from one plain-HTTP/1.1 connection: a read asks for at most this
/// much. 16 KiB holds ~100 streamed events, so a fast stream still moves in large reads, and
/// 2,000 connections hold at most 32 MB. (Response headers must fit in it too: hyper closes a
/// connection whose headers outgrow it; servers send well under 1 KB.)
pub(in crate::openrouter) const HTTP1_READ_BUFFER: usize = 16 * 1024;

/// How much a server may send on one HTTP/2 connection that harvest has not read yet. This
/// bounds what a server faster than harvest parks in memory (2,000 streams on 32 connections
/// hold at most 64 MiB; with hyper's 5 MiB a full-speed run's peak RSS reached 252 MB on a slow
/// host, BENCHMARKS.md), and is still several times what a connection carries in a read pause
/// and a round trip at real pace (64 streams of ~400-byte events at 90 tokens a second is
/// 2.3 MB/s; 200 ms of pause and 100 ms of round trip are 0.7 MB). h2 sends a WINDOW_UPDATE
/// when what was read reaches half of what is left open: about every 0.7 MiB on a connection.
const H2_CONNECTION_WINDOW: u32 = 2 * 1024 * 1024;

/// How much a server may send on one HTTP/2 stream that harvest has not read yet: an eighth of
/// the connection's, so that streams not being read (a worker waiting for its first write)
/// cannot hold the connection's window between them; still 7 s of a stream at 90 tokens a
/// second, its WINDOW_UPDATE every ~85 KiB (about 200 tokens) a tiny share of the frames.
const H2_STREAM_WINDOW: u32 = 256 * 1024;

/// HTTP/2's flow-control windows on a client builder ([`H2_CONNECTION_WINDOW`],
/// [`H2_STREAM_WINDOW`]); public for the benchmark's floor client, which reads on harvest's
/// own stack.
pub fn h2_windows(
    b: &mut hyper_util::client::legacy::Builder,
) -> &mut hyper_util::client::legacy::Builder {
    b.http2_initial_connection_window_size(H2_CONNECTION_WINDOW)
        .http2_initial_stream_window_size(H2_STREAM_WINDOW)
}

/// The connections harvest's chat requests travel on: TCP with reqwest's socket settings and
/// the connect timeout, TLS by [`tls_config`], ALPN offering HTTP/2 when asked (public for the
/// benchmark's floor client, which reads on harvest's own stack).
pub type Connector = hyper_rustls::HttpsConnector<TimedConnector>;
type Client = HyperClient<Connector, Full<Bytes>>;

/// hyper's clients: one per lane (over HTTP/2 each lane is one connection), and one without an
/// idle pool to resend on a new connection.
pub(in crate::openrouter) struct DirectClients {
    lanes: Vec<Lane<Client>>,
    next_lane: AtomicUsize,
    fresh: Client,
    /// reqwest's default headers plus what reqwest adds and hyper does not (user agent,
    /// content type, `Accept`).
    headers: HeaderMap,
}

/// What [`DirectClients::new`] needs from the client's options.
pub(in crate::openrouter) struct DirectSettings {
    pub headers: HeaderMap,
    pub connect_timeout: Duration,
    pub pool_idle_timeout: Duration,
    /// Certificate authorities to trust besides the platform's.
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Offer HTTP/2 over TLS (ALPN); plain HTTP is HTTP/1.1 whatever this says.
    pub http2: bool,
    /// Over HTTP/2, how many connections (lanes) streams are spread over.
    pub lanes: usize,
}

impl DirectClients {
    /// hyper's clients with reqwest 0.13's socket defaults (no Nagle; keep-alive probes after
    /// 15 s idle, every 15 s, 3 of them; on Linux unacknowledged data gives up after 30 s) and,
    /// over HTTP/1.1, the read buffer capped at [`HTTP1_READ_BUFFER`].
    pub(in crate::openrouter) fn new(
        s: DirectSettings,
        https: bool,
    ) -> Result<DirectClients, String> {
        let tls = tls_config(s.extra_roots)?;
        let h2 = s.http2 && https;
        let build = |max_idle: usize| {
            let connector = connector(tls.clone(), s.connect_timeout, h2);
            h2_windows(&mut HyperClient::builder(TokioExecutor::new()))
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .pool_idle_timeout(s.pool_idle_timeout)
                .pool_max_idle_per_host(max_idle)
                .http1_max_buf_size(HTTP1_READ_BUFFER)
                .build(connector)
        };
        let lanes = if h2 { s.lanes.max(1) } else { 1 };
        let mut headers = s.headers;
        headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
        Ok(DirectClients {
            lanes: (0..lanes)
                .map(|_| Lane::new(build(usize::MAX), h2))
                .collect(),
            next_lane: AtomicUsize::new(0),
            fresh: build(0),
            headers,
        })
    }

    /// Posts `body` on the next lane; a pooled connection found dead before any response byte
    /// is replaced at once (see [`super::ChatTransport::post`]).
    pub(super) async fn post(
        &self,
        url: &str,
        body: Bytes,
        stale: &AtomicU64,
    ) -> Result<Response, Failure> {
        let uri = parse_uri(url)?;
        let request = || {
            let mut req = hyper::Request::new(Full::new(body.clone()));
            *req.method_mut() = hyper::Method::POST;
            *req.uri_mut() = uri.clone();
            *req.headers_mut() = self.headers.clone();
            req
        };
        let lane = &self.lanes[self.next_lane.fetch_add(1, Ordering::Relaxed) % self.lanes.len()];
        let resp = match lane.send(|c: &Client| c.request(request())).await {
            Ok(r) => r,
            Err(e) if !e.is_connect() && died_before_response(&e) => {
                stale.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("pooled connection was dead; resending on a new one");
                self.fresh.request(request()).await?
            }
            Err(e) => return Err(e.into()),
        };
        Ok(response(resp))
    }

    /// `GET url` on the first lane (see [`super::ChatTransport::get`]).
    pub(super) async fn get(&self, url: &str) -> Result<Response, Failure> {
        let uri = parse_uri(url)?;
        let mut headers = self.headers.clone();
        headers.remove(CONTENT_TYPE);
        let request = || {
            let mut req = hyper::Request::new(Full::new(Bytes::new()));
            *req.uri_mut() = uri.clone();
            *req.headers_mut() = headers.clone();
            req
        };
        let resp = self.lanes[0]
            .send(|c: &Client| c.request(request()))
            .await?;
        Ok(response(resp))
    }
}

/// `url` as hyper takes it; a URL it refuses is an invalid request.
fn parse_uri(url: &str) -> Result<hyper::Uri, Failure> {
    url.parse()
        .map_err(|e: hyper::http::uri::InvalidUri| Failure {
            kind: FailureKind::Invalid,
            message: e.to_string(),
        })
}

/// hyper's response in the transport's one shape, its body read as it comes.
fn response(resp: hyper::Response<hyper::body::Incoming>) -> Response {
    let (parts, body) = resp.into_parts();
    Response {
        status: parts.status,
        headers: parts.headers,
        body: Body::Direct(body),
    }
}

/// A [`Connector`]: reqwest 0.13's socket defaults (no Nagle; keep-alive probes after 15 s
/// idle, every 15 s, 3 of them; on Linux unacknowledged data gives up after 30 s), the connect
/// timeout over name resolution too, `tls`, and ALPN h2 and http/1.1 when `h2` (http/1.1 alone
/// otherwise); TLS connections read ahead where they may carry HTTP/2.
pub fn connector(tls: rustls::ClientConfig, connect_timeout: Duration, h2: bool) -> Connector {
    let mut tcp = HttpConnector::new();
    // The TLS connector below hands it https URLs too.
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect_timeout));
    tcp.set_keepalive(Some(Duration::from_secs(15)));
    tcp.set_keepalive_interval(Some(Duration::from_secs(15)));
    tcp.set_keepalive_retries(Some(3));
    #[cfg(target_os = "linux")]
    tcp.set_tcp_user_timeout(Some(Duration::from_secs(30)));
    let timed = TimedConnector {
        inner: tcp,
        timeout: connect_timeout,
        read_ahead: h2,
    };
    let tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1();
    if h2 {
        tls.enable_http2().wrap_connector(timed)
    } else {
        tls.wrap_connector(timed)
    }
}

/// rustls as reqwest sets it up: TLS 1.2 and 1.3 on aws-lc-rs, the platform's verifier with
/// `extra_roots` beside the system's (ALPN is the connector's).
pub fn tls_config(
    extra_roots: Vec<CertificateDer<'static>>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = if extra_roots.is_empty() {
        rustls_platform_verifier::Verifier::new(provider.clone())
    } else {
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots, provider.clone())
    }
    .map_err(|e| format!("could not set up TLS certificate verification: {e}"))?;
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("could not set up TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}

/// `HttpConnector` with the connect timeout over name resolution too, as reqwest has it
/// (`HttpConnector`'s own bounds each TCP attempt only), its TLS connections read ahead
/// ([`ReadAhead`]) where they may carry HTTP/2.
#[derive(Clone)]
pub struct TimedConnector {
    inner: HttpConnector,
    timeout: Duration,
    /// TLS connections are read ahead: HTTP/2 is offered, so a connection carries up to 64
    /// streams and a wake-up finds tens of kilobytes on it. A connection that can only speak
    /// HTTP/1.1 carries one stream, and 32 KiB for each of 2,000 of them would be 64 MB.
    read_ahead: bool,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<hyper::Uri> for TimedConnector {
    type Response = ReadAhead<<HttpConnector as tower_service::Service<hyper::Uri>>::Response>;
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
        // Read ahead only under TLS: plain HTTP/1.1 keeps hyper's own capped buffer alone.
        let wrap = if self.read_ahead && uri.scheme_str() == Some("https") {
            ReadAhead::new
        } else {
            ReadAhead::direct
        };
        let connect = self.inner.call(uri);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connect).await {
                Ok(r) => r.map(wrap).map_err(Into::into),
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out (name resolution included)",
                )
                .into()),
            }
        })
    }
}
