//! The HTTP client: catalog calls, `/key`, and chat completions (non-streaming, and streaming
//! through [`ChatStream`] with first-token and idle timeouts). Works against OpenRouter and any
//! OpenAI-compatible server (`base_url` ending in `/v1` or `/api/v1`).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, RETRY_AFTER};

use super::catalog::{
    DataEnvelope, Endpoint, GenerationInfo, KeyInfo, Model, ModelEndpoints, ModelsEnvelope,
};
use super::chat_stream::{ChatStream, StreamTimeouts};
use super::error::{ApiError, TimeoutKind};
use super::key::ApiKey;
use super::request::ChatRequest;
use super::response::{Completion, StreamAccumulator, parse_completion_body};
use super::scrub;
use super::sse::SseDecoder;
use super::transport::{self, ChatTransport, Failure};

pub const DEFAULT_BASE_URL: &str = "https://openrouter.ai/api/v1";
const APP_URL: &str = "https://github.com/harvest-llm/harvest";
const APP_TITLE: &str = "harvest";

/// How to reach a server.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    pub connect_timeout: Duration,
    /// HTTP/1.1 by default: one connection per stream. Over HTTP/2 a server's
    /// `MAX_CONCURRENT_STREAMS` (often 100-256) caps each connection, so streams are spread
    /// over [`ClientOptions::h2_connections_for`] connections.
    pub http2: bool,
    /// Over HTTP/2: how many connections chat streams are spread over (round robin).
    pub h2_connections: usize,
    /// Whether a stream must end with a usage chunk to count as complete (OpenRouter: yes).
    pub require_usage: bool,
    /// Attribution headers (`HTTP-Referer`, `X-OpenRouter-Title`).
    pub app_url: String,
    pub app_title: String,
    /// PEM bundles of certificate authorities to trust besides the system's (`SSL_CERT_FILE`
    /// by default, a config's `ca_cert`).
    pub ca_certs: Vec<std::path::PathBuf>,
}

impl ClientOptions {
    pub fn new(base_url: impl Into<String>, api_key: Option<ApiKey>) -> Self {
        ClientOptions {
            base_url: base_url.into(),
            api_key,
            connect_timeout: Duration::from_secs(10),
            http2: false,
            h2_connections: 1,
            require_usage: true,
            app_url: APP_URL.to_string(),
            app_title: APP_TITLE.to_string(),
            ca_certs: super::roots::from_env().into_iter().collect(),
        }
    }
}

/// Streams one HTTP/2 connection is given at most, on average: well under the 100 that
/// servers commonly allow at the least, so that round robin's unevenness never reaches a cap.
pub(crate) const H2_STREAMS_PER_CONNECTION: u32 = 64;

impl ClientOptions {
    /// HTTP/2 connections for `concurrency` streams.
    pub fn h2_connections_for(concurrency: u32) -> usize {
        concurrency.div_ceil(H2_STREAMS_PER_CONNECTION).max(1) as usize
    }
}

/// A client for one base URL.
#[derive(Clone)]
pub struct OpenRouterClient {
    /// Chat requests (thousands at once), and the catalog, key and generation calls on its first
    /// lane: see [`ChatTransport`] for which client carries them.
    chat: Arc<ChatTransport>,
    /// Requests resent on a new connection after a pooled one died before any response byte.
    stale_retries: Arc<AtomicU64>,
    base: String,
    key: Option<ApiKey>,
    require_usage: bool,
}

impl std::fmt::Debug for OpenRouterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenRouterClient")
            .field("base", &self.base)
            .field("key", &self.key)
            .finish()
    }
}

impl OpenRouterClient {
    pub fn new(opts: ClientOptions) -> Result<Self, ApiError> {
        let mut headers = HeaderMap::new();
        let header = |v: &str, what: &str| {
            HeaderValue::from_str(v)
                .map_err(|_| ApiError::Invalid(format!("bad {what} header value")))
        };
        headers.insert("HTTP-Referer", header(&opts.app_url, "HTTP-Referer")?);
        headers.insert("X-OpenRouter-Title", header(&opts.app_title, "title")?);
        headers.insert("X-Title", header(&opts.app_title, "title")?);
        if let Some(k) = &opts.api_key {
            let mut v = HeaderValue::from_str(&format!("Bearer {}", k.expose())).map_err(|_| {
                ApiError::Invalid("the API key contains characters not allowed in a header".into())
            })?;
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        let mut roots = Vec::new();
        for path in &opts.ca_certs {
            roots.extend(super::roots::read(path).map_err(ApiError::Invalid)?);
        }
        let pool_idle_timeout = Duration::from_secs(60);
        let builder = || {
            let b = reqwest::Client::builder()
                .tls_certs_merge(
                    roots
                        .iter()
                        .filter_map(|c| reqwest::Certificate::from_der(c).ok()),
                )
                .default_headers(headers.clone())
                .connect_timeout(opts.connect_timeout)
                .pool_idle_timeout(pool_idle_timeout)
                .tcp_nodelay(true)
                .user_agent(transport::USER_AGENT_VALUE);
            if opts.http2 { b } else { b.http1_only() }
        };
        let build = |b: reqwest::ClientBuilder| {
            b.build()
                .map_err(|e| ApiError::Invalid(format!("could not build HTTP client: {e}")))
        };
        let base = opts.base_url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ApiError::Invalid(format!(
                "base URL must start with http:// or https://, got {base:?}"
            )));
        }
        let chat = if ChatTransport::goes_direct(&base, transport::proxy_set_for(&base)) {
            let direct = transport::DirectClients::new(
                transport::DirectSettings {
                    headers: headers.clone(),
                    connect_timeout: opts.connect_timeout,
                    pool_idle_timeout,
                    extra_roots: roots,
                    http2: opts.http2,
                    lanes: opts.h2_connections,
                },
                base.starts_with("https://"),
            )
            .map_err(ApiError::Invalid)?;
            ChatTransport::Direct(Box::new(direct))
        } else {
            let fresh = build(builder().pool_max_idle_per_host(0))?;
            // HTTP/2 is negotiated by ALPN: over plain HTTP every stream has its own connection.
            let h2 = opts.http2 && base.starts_with("https://");
            let mut lanes = vec![transport::Lane::new(build(builder())?, h2)];
            if h2 {
                for _ in 1..opts.h2_connections {
                    lanes.push(transport::Lane::new(build(builder())?, true));
                }
            }
            ChatTransport::reqwest(lanes, fresh)
        };
        Ok(OpenRouterClient {
            chat: Arc::new(chat),
            stale_retries: Arc::new(AtomicU64::new(0)),
            base,
            key: opts.api_key,
            require_usage: opts.require_usage,
        })
    }

    /// The base URL as shown to people: a password (or user) in it is `***`.
    pub fn base_url(&self) -> std::borrow::Cow<'_, str> {
        shown_url(&self.base)
    }

    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// How many requests were resent on a new connection because the pooled connection they
    /// were given was dead (closed by the server before any response byte).
    pub fn stale_retries(&self) -> u64 {
        self.stale_retries.load(Ordering::Relaxed)
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base, path.trim_start_matches('/'))
    }

    /// What a failed connection said, safe to show (see [`scrub::transport_error`]).
    pub(super) fn transport_error(&self, f: Failure) -> ApiError {
        scrub::transport_error(self.key.as_ref().map(ApiKey::expose), f)
    }

    /// The error a non-success response stands for, from its status, `Retry-After` and body.
    fn error_from_parts(
        &self,
        status: u16,
        headers: &HeaderMap,
        body: Result<bytes::Bytes, Failure>,
    ) -> ApiError {
        let retry_after = headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok());
        let body = match body {
            Ok(b) => b,
            Err(e) => return self.transport_error(e),
        };
        let err = ApiError::from_response_body(status, retry_after, &body);
        self.scrub(err)
    }

    /// What a server said, safe to show (see [`scrub::api_error`]).
    pub(super) fn scrub(&self, err: ApiError) -> ApiError {
        scrub::api_error(self.key.as_ref().map(ApiKey::expose), err)
    }

    async fn get_bytes(&self, path: &str) -> Result<bytes::Bytes, ApiError> {
        self.get_url(&self.url(path)).await
    }

    /// `GET url`'s body, or the error its status stands for.
    async fn get_url(&self, url: &str) -> Result<bytes::Bytes, ApiError> {
        let resp = self
            .chat
            .get(url)
            .await
            .map_err(|e| self.transport_error(e))?;
        let body = transport::read_all(resp.body).await;
        if !resp.status.is_success() {
            return Err(self.error_from_parts(resp.status.as_u16(), &resp.headers, body));
        }
        body.map_err(|e| self.transport_error(e))
    }

    /// `GET /models`.
    pub async fn models(&self) -> Result<Vec<Model>, ApiError> {
        let body = self.get_bytes("models").await?;
        let env: ModelsEnvelope = serde_json::from_slice(&body).map_err(|e| ApiError::Decode {
            what: "models response",
            detail: e.to_string(),
        })?;
        Ok(env.data)
    }

    /// `GET /models/{author}/{slug}/endpoints` for a model id like `moonshotai/kimi-k2.5`.
    pub async fn endpoints(&self, model: &str) -> Result<ModelEndpoints, ApiError> {
        // A variant (`:floor`) routes among the base model's endpoints.
        let (model, _) = super::catalog::split_variant(model);
        let (author, slug) = model.split_once('/').ok_or_else(|| {
            ApiError::Invalid(format!("model id must be author/slug, got {model:?}"))
        })?;
        let body = self
            .get_bytes(&format!("models/{author}/{slug}/endpoints"))
            .await?;
        ModelEndpoints::parse(&body)
    }

    /// `GET /key`: usage and limit of the key in use.
    pub async fn key_info(&self) -> Result<KeyInfo, ApiError> {
        let body = self.get_bytes("key").await?;
        let env: DataEnvelope<KeyInfo> =
            serde_json::from_slice(&body).map_err(|e| ApiError::Decode {
                what: "key response",
                detail: e.to_string(),
            })?;
        Ok(env.data)
    }

    /// `GET /endpoints/zdr`: the tags (lowercased) of `model`'s endpoints that have a Zero Data
    /// Retention policy. The entries name the model by its canonical slug (the id with a date
    /// suffix), so an entry whose `model_id` starts with `model` is one of its endpoints.
    pub async fn zdr_tags(&self, model: &str) -> Result<HashSet<String>, ApiError> {
        let (model, _) = super::catalog::split_variant(model);
        let body = self.get_bytes("endpoints/zdr").await?;
        let env: DataEnvelope<Vec<Endpoint>> =
            serde_json::from_slice(&body).map_err(|e| ApiError::Decode {
                what: "ZDR endpoint list",
                detail: e.to_string(),
            })?;
        Ok(env
            .data
            .into_iter()
            .filter(|e| e.model_id.as_deref().is_some_and(|m| m.starts_with(model)))
            .map(|e| e.tag.as_str().to_ascii_lowercase())
            .collect())
    }

    /// `GET /generation?id=`: what a generation cost, cancelled ones included. Answers 404 for
    /// a moment after a generation ends; the caller retries.
    pub async fn generation(&self, id: &str) -> Result<GenerationInfo, ApiError> {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("id", id)
            .finish();
        let body = self
            .get_url(&format!("{}?{query}", self.url("generation")))
            .await?;
        let env: DataEnvelope<GenerationInfo> =
            serde_json::from_slice(&body).map_err(|e| ApiError::Decode {
                what: "generation response",
                detail: e.to_string(),
            })?;
        Ok(env.data)
    }

    /// Sends a chat request; a non-success status comes back as its error. A pooled
    /// connection found dead before any response byte is replaced at once (see
    /// [`ChatTransport::post`]).
    async fn post_chat(&self, req: &ChatRequest) -> Result<transport::Response, ApiError> {
        let body = serde_json::to_vec(req).map_err(|e| ApiError::Invalid(e.to_string()))?;
        let resp = self
            .chat
            .post(
                &self.url("chat/completions"),
                body.into(),
                &self.stale_retries,
            )
            .await
            .map_err(|e| self.transport_error(e))?;
        if !resp.status.is_success() {
            let body = transport::read_all(resp.body).await;
            return Err(self.error_from_parts(resp.status.as_u16(), &resp.headers, body));
        }
        Ok(resp)
    }

    /// A non-streaming completion (`stream: false` is forced).
    pub async fn chat(&self, req: &ChatRequest) -> Result<Completion, ApiError> {
        let started = Instant::now();
        let mut req = req.clone();
        req.stream = false;
        let resp = self.post_chat(&req).await?;
        let body = transport::read_all(resp.body)
            .await
            .map_err(|e| self.transport_error(e))?;
        parse_completion_body(&body, self.require_usage, started.elapsed())
            .map_err(|e| self.scrub(e))
    }

    /// Starts a streamed completion (`stream: true` is forced). Errors before the first byte of
    /// the body (HTTP status errors, refused connections) are returned here.
    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        timeouts: StreamTimeouts,
    ) -> Result<ChatStream, ApiError> {
        let started = Instant::now();
        let started_at = tokio::time::Instant::now();
        let mut req = req.clone();
        req.stream = true;
        let resp = tokio::time::timeout(timeouts.first_token, self.post_chat(&req))
            .await
            .map_err(|_| ApiError::Timeout(TimeoutKind::FirstToken))??;
        // OpenRouter names the generation in a header before the first token, so even a
        // stream we cancel early can be looked up (`GET /generation`) for what it cost.
        let generation_id = resp
            .headers
            .get("x-generation-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(ChatStream {
            generation_id,
            body: resp.body,
            sse: SseDecoder::new(),
            acc: StreamAccumulator::new(self.require_usage),
            timeouts,
            started,
            started_at,
            last_token: started_at,
            timer: Box::pin(tokio::time::sleep_until(started_at + timeouts.first_token)),
            ttft: None,
            total: None,
            ended: false,
            eof: false,
            failed: None,
            key: self.key.clone(),
            pace: Default::default(),
        })
    }
}

/// `url` with the user information of its authority (`user:password@`) shown as `***@`: a
/// `base_url` may carry a proxy's credentials, which no message, log or screen repeats.
pub(crate) fn shown_url(url: &str) -> std::borrow::Cow<'_, str> {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => std::borrow::Cow::Owned(format!("{}***{}", &url[..start], &url[start + at..])),
        None => std::borrow::Cow::Borrowed(url),
    }
}

#[cfg(test)]
mod shown_url_tests {
    use super::shown_url;

    #[test]
    fn credentials_in_a_url_are_never_shown() {
        let cases = [
            (
                "https://openrouter.ai/api/v1",
                "https://openrouter.ai/api/v1",
            ),
            (
                "http://user:s3cret@proxy:8080/v1",
                "http://***@proxy:8080/v1",
            ),
            ("http://tok@host/v1?x=a@b", "http://***@host/v1?x=a@b"),
            ("http://a:b@c@host", "http://***@host"),
            ("host-only", "host-only"),
        ];
        for (url, shown) in cases {
            assert_eq!(shown_url(url), shown, "{url}");
        }
    }
}
