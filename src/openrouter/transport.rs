//! How chat requests travel, and the one shape their responses and failures take whichever
//! client carried them.
//!
//! With no proxy in the way, hyper's own client carries them ([`direct`]): plain HTTP/1.1 with
//! its read buffer capped, and HTTPS with HTTP/2 chosen by ALPN and spread over lanes, a
//! stream's body read as hyper hands it over. Behind a proxy variable, or with
//! `user:password@` in the URL, reqwest carries them (it honours the proxy and turns the
//! credentials into Basic auth). Either way the caller sees one [`Response`] and [`Body`].

pub(super) mod direct;
pub(super) mod lane;
pub(crate) mod read_ahead;

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Frame, Incoming, SizeHint};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap};

pub(super) use direct::{DirectClients, DirectSettings};
pub(super) use lane::Lane;

pub(super) const USER_AGENT_VALUE: &str = concat!("harvest/", env!("CARGO_PKG_VERSION"));

/// A response's body, whichever client read it: hyper's own, polled with nothing between
/// (every wake-up of every stream polls it), or reqwest's, boxed.
pub(super) enum Body {
    Direct(Incoming),
    Boxed(BoxBody<Bytes, Failure>),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Failure;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Failure>>> {
        match self.get_mut() {
            Body::Direct(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(Failure::from))),
            Body::Boxed(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Direct(b) => b.is_end_stream(),
            Body::Boxed(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Direct(b) => b.size_hint(),
            Body::Boxed(b) => b.size_hint(),
        }
    }
}

/// A chat response whose status may be anything; the caller reads an error body.
pub(super) struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

impl Response {
    /// reqwest's response in the transport's one shape, its body boxed.
    fn from_reqwest(resp: reqwest::Response) -> Response {
        let (parts, body) = hyper::Response::from(resp).into_parts();
        Response {
            status: parts.status,
            headers: parts.headers,
            body: Body::Boxed(body.map_err(Failure::from).boxed()),
        }
    }
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
    /// Behind a proxy, or with credentials in the URL.
    Reqwest {
        /// The client of each connection, taken in turn: one over HTTP/1.1 (its pool opens
        /// a connection per stream), one per lane over HTTP/2.
        lanes: Vec<Lane<reqwest::Client>>,
        next_lane: AtomicUsize,
        /// Same settings, no idle pool: to resend on a new connection.
        fresh: reqwest::Client,
    },
    /// hyper's own clients (boxed: they are much larger than reqwest's handles).
    Direct(Box<DirectClients>),
}

impl ChatTransport {
    /// Whether chat requests to `base_url` go over hyper's own client: no proxy variable that
    /// reqwest would honour for its scheme (`proxy_set`), and no `user:password@` in the URL
    /// (reqwest turns that into Basic auth).
    pub(super) fn goes_direct(base_url: &str, proxy_set: bool) -> bool {
        let Some(rest) = base_url
            .strip_prefix("http://")
            .or_else(|| base_url.strip_prefix("https://"))
        else {
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
                let resp = match lane.send(|c| request(c).send()).await {
                    Ok(r) => r,
                    Err(e) if !e.is_connect() && !e.is_timeout() && died_before_response(&e) => {
                        stale.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("pooled connection was dead; resending on a new one");
                        request(fresh).send().await?
                    }
                    Err(e) => return Err(e.into()),
                };
                Ok(Response::from_reqwest(resp))
            }
            ChatTransport::Direct(clients) => clients.post(url, body, stale).await,
        }
    }

    /// `GET url` on the first lane: the catalog, `/key` and `/generation` share the chat
    /// requests' first connection (over HTTP/2 they open it, alone) instead of one of their own.
    pub(super) async fn get(&self, url: &str) -> Result<Response, Failure> {
        match self {
            ChatTransport::Reqwest { lanes, .. } => {
                let resp = lanes[0].send(|c| c.get(url).send()).await?;
                Ok(Response::from_reqwest(resp))
            }
            ChatTransport::Direct(clients) => clients.get(url).await,
        }
    }

    /// The reqwest transport over `lanes` (at least one), taken in turn.
    pub(super) fn reqwest(
        lanes: Vec<Lane<reqwest::Client>>,
        fresh: reqwest::Client,
    ) -> ChatTransport {
        assert!(!lanes.is_empty(), "a transport needs a lane");
        ChatTransport::Reqwest {
            lanes,
            next_lane: AtomicUsize::new(0),
            fresh,
        }
    }
}

/// Whether a proxy variable is set that reqwest would honour for `base_url`'s scheme (it then
/// decides with `NO_PROXY`; harvest leaves that to it).
pub(super) fn proxy_set_for(base_url: &str) -> bool {
    let vars: &[&str] = if base_url.starts_with("https://") {
        &["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
    } else {
        &["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
    };
    vars.iter()
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
    use super::direct::HTTP1_READ_BUFFER;
    use super::*;
    use std::time::Duration;

    #[test]
    fn without_a_proxy_or_credentials_in_the_url_hyper_carries_the_requests() {
        let cases = [
            ("http://127.0.0.1:8000/v1", false, true),
            ("http://gpu-box:30000/v1", false, true),
            ("http://127.0.0.1:8000/v1", true, false),
            ("http://user:secret@gpu-box:8000/v1", false, false),
            ("http://gpu-box:8000/v1?user=a@b", false, true),
            ("https://openrouter.ai/api/v1", false, true),
            ("https://openrouter.ai/api/v1", true, false),
            ("https://user:secret@proxy.example/api/v1", false, false),
            ("ftp://openrouter.ai/api/v1", false, false),
        ];
        for (url, proxy, want) in cases {
            assert_eq!(
                ChatTransport::goes_direct(url, proxy),
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
        let t = ChatTransport::Direct(Box::new(
            DirectClients::new(
                DirectSettings {
                    headers: HeaderMap::new(),
                    connect_timeout: Duration::from_secs(5),
                    pool_idle_timeout: Duration::from_secs(5),
                    extra_roots: Vec::new(),
                    http2: true,
                    lanes: 1,
                },
                false,
            )
            .expect("clients"),
        ));
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
