//! The shape of `harvest.toml`: every table and key with its default (serde, unknown keys
//! refused), but `[request]`'s, which `request.rs` holds.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domain::{Price, Quantization};
use crate::openrouter::StreamTimeouts;
use crate::policy::PolicyConfig;

use super::*;

/// How requests reach providers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Routing {
    /// OpenRouter routes each request within the allowed set (`provider.only`, no fallbacks).
    #[default]
    Openrouter,
    /// harvest picks one endpoint per request itself, so each can be measured and capped.
    Pinned,
}

/// How datasets share the concurrency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    #[default]
    Interleaved,
    /// One dataset after another, in file order.
    Sequential,
}

/// What to do with a prompt line that cannot be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnBadLine {
    /// Stop before the run starts (exit code 2).
    #[default]
    Error,
    /// Write it to the dataset's rejects file and go on.
    Skip,
}

/// What to do with an answer whose `content` is empty (a thinking model cut while thinking, or
/// one that answered only in its reasoning): the drafter must not learn an empty answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnEmpty {
    /// A failed attempt of kind `empty`: retried, then rejected.
    #[default]
    Retry,
    /// Rejected at once (kind `empty`).
    Reject,
    /// Kept as it came.
    Keep,
}

/// Whether thinking returned inline in the content (`<think>...</think>`, or a lone
/// `</think>` after it) is moved into `reasoning_content`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SplitThink {
    #[default]
    Auto,
    Off,
}

/// Which assistant turns of a multi-turn prompt the model writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Turns {
    /// Only the answer to the last user turn; earlier assistant turns stay the dataset's text.
    #[default]
    Last,
    /// Every assistant turn, in order, each on the history regenerated so far (user turns as
    /// given): one request per turn, one row when the last is done.
    All,
}

/// What to do with a prompt whose id an earlier line of the same file already has, with other
/// content (a copied line, same id and same conversation, is always skipped and counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDuplicate {
    /// Stop before the run starts (exit code 2), naming both lines.
    #[default]
    Error,
    /// Keep the first, skip the later ones, and count them.
    Skip,
}

/// How the dollar budget holds against requests in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetMode {
    /// Spend never passes `budget_usd` (but for tokens in transit when a cancellable stream is
    /// closed at the cap): at endpoints that bill a cancelled stream, a request reserves its
    /// worst case (prompt plus `max_tokens`).
    #[default]
    Hard,
    /// Requests reserve their expected cost: faster near the end, and streams billed anyway
    /// may run past the budget.
    Expected,
}

/// What to do with a response cut off at `max_tokens` (finish_reason `length`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnLength {
    #[default]
    Keep,
    Reject,
    Retry,
}

/// The whole file, with relative paths already resolved against the file's directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub model: String,
    pub base_url: String,
    /// Whether OpenRouter serves this run. `false`: only the `[[endpoint]]` servers do, and no
    /// OpenRouter key or listing is needed.
    pub openrouter: bool,
    /// Name of the environment variable holding the API key (never the key itself).
    pub api_key_env: String,
    /// A PEM bundle of certificate authorities to trust besides the system's, for OpenRouter
    /// and the `[[endpoint]]` servers: a corporate proxy's, or the simulator's `--tls` one
    /// (`SSL_CERT_FILE` adds one too). Resolved against the config's directory.
    pub ca_cert: Option<PathBuf>,
    /// Speak HTTP/2 to OpenRouter where it offers it (HTTPS), the streams spread over one
    /// connection per 64 of the concurrency so that no server's `MAX_CONCURRENT_STREAMS` caps
    /// the run. On by default: over TLS it cost 0.71-0.74x the CPU per token of HTTP/1.1 and
    /// 0.15-0.63x the memory (BENCHMARKS.md). `false`: HTTP/1.1, one connection per stream (a
    /// reset connection then loses one stream, not up to 64).
    pub http2: bool,
    pub output_dir: PathBuf,
    /// Files harvest creates in the output directory are the operator's alone (0600, and 0700
    /// for a directory it makes); `true` lets the operator's group read them (0640, 0750): a
    /// team whose trainers read the rows under another user of the same group.
    pub group_readable: bool,
    /// Hard cap on spend, in dollars: the whole job's when it runs as shards, each shard taking
    /// its share unless `shard_budget_usd` is set.
    pub budget_usd: f64,
    /// A shard's own budget (`--shard`), instead of its share of `budget_usd`.
    pub shard_budget_usd: Option<f64>,
    pub concurrency: u32,
    pub requests_per_second: Option<f64>,
    pub routing: Routing,
    pub schedule: Schedule,
    pub on_bad_line: OnBadLine,
    pub on_duplicate: OnDuplicate,
    pub on_empty: OnEmpty,
    /// How the dollar budget holds: `hard` (the default) or `expected`.
    pub budget_mode: BudgetMode,
    pub split_think: SplitThink,
    pub request: RequestParams,
    pub timeouts: Timeouts,
    pub retry: RetryConfig,
    pub breaker: BreakerConfig,
    pub policy: PolicyConfig,
    pub provider: ProviderConfig,
    /// Provider slugs or tags whose billing stops when a stream is closed (replaces the list
    /// OpenRouter documents: chutes, deepinfra, together, novita, fireworks). At the dollar cap
    /// those streams are closed; the others run to the end, since they are billed anyway.
    pub cancel_stops_billing: Option<Vec<String>>,
    /// Seconds between refreshes of the model's endpoint listing (status, uptime, endpoints that
    /// come and go); 0 turns it off.
    pub catalog_refresh_s: f64,
    /// Most requests in flight at one endpoint (by tag), honoured in pinned routing:
    /// `endpoint_concurrency = { "chutes/int4" = 500 }`.
    pub endpoint_concurrency: std::collections::BTreeMap<String, u32>,
    #[serde(rename = "dataset")]
    pub datasets: Vec<DatasetConfig>,
    #[serde(rename = "endpoint")]
    pub endpoints: Vec<EndpointConfig>,
    /// The file this was read from (not a key).
    #[serde(skip)]
    pub source: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            model: "moonshotai/kimi-k2.5".into(),
            openrouter: true,
            base_url: crate::openrouter::DEFAULT_BASE_URL.into(),
            api_key_env: "OPENROUTER_API_KEY".into(),
            ca_cert: None,
            http2: true,
            output_dir: PathBuf::from("out"),
            group_readable: false,
            budget_usd: 10.0,
            shard_budget_usd: None,
            concurrency: 256,
            requests_per_second: None,
            routing: Routing::default(),
            schedule: Schedule::default(),
            on_bad_line: OnBadLine::default(),
            on_duplicate: OnDuplicate::default(),
            on_empty: OnEmpty::default(),
            budget_mode: BudgetMode::default(),
            split_think: SplitThink::default(),
            request: RequestParams::default(),
            timeouts: Timeouts::default(),
            retry: RetryConfig::default(),
            breaker: BreakerConfig::default(),
            policy: PolicyConfig::default(),
            provider: ProviderConfig::default(),
            endpoint_concurrency: Default::default(),
            catalog_refresh_s: 300.0,
            cancel_stops_billing: None,
            datasets: Vec::new(),
            endpoints: Vec::new(),
            source: PathBuf::new(),
        }
    }
}

/// `[timeouts]`, in seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    pub connect_s: f64,
    /// From sending the request to the first token.
    pub first_token_s: f64,
    /// Longest silence between two chunks.
    pub idle_s: f64,
    /// Whole request, first byte to last.
    pub total_s: f64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_s: 10.0,
            first_token_s: 120.0,
            idle_s: 60.0,
            total_s: 1800.0,
        }
    }
}

pub(super) fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

impl Timeouts {
    pub fn connect(&self) -> Duration {
        secs(self.connect_s)
    }
    pub fn first_token(&self) -> Duration {
        secs(self.first_token_s)
    }
    pub fn idle(&self) -> Duration {
        secs(self.idle_s)
    }
    pub fn total(&self) -> Duration {
        secs(self.total_s)
    }
    pub fn stream(&self) -> StreamTimeouts {
        StreamTimeouts {
            first_token: self.first_token(),
            idle: self.idle(),
        }
    }
}

/// `[retry]`: exponential backoff with jitter between `base_delay_ms` and `max_delay_s`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Attempts per prompt, the first included.
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    pub max_delay_s: f64,
    pub on_length: OnLength,
    /// Learn a ceiling on OpenRouter streams from the account's in-flight budget 402s (off:
    /// each wave is only waited out, and the run keeps bouncing off the budget).
    pub learn_inflight_budget: bool,
    /// Stop the run (prompts kept pending, exit 1) when this many prompts in a row fail for
    /// good the same way (a privacy setting, a bad request field); 0: never.
    pub stop_after_same_error: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 6,
            base_delay_ms: 500,
            max_delay_s: 60.0,
            on_length: OnLength::Keep,
            learn_inflight_budget: true,
            stop_after_same_error: 20,
        }
    }
}

impl RetryConfig {
    pub fn base_delay(&self) -> Duration {
        Duration::from_millis(self.base_delay_ms)
    }
    pub fn max_delay(&self) -> Duration {
        secs(self.max_delay_s)
    }
}

/// `[breaker]`: an endpoint is paused after `failures` consecutive failures, for `cooldown_s`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    pub failures: u32,
    pub cooldown_s: f64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: 5,
            cooldown_s: 60.0,
        }
    }
}

impl BreakerConfig {
    pub fn cooldown(&self) -> Duration {
        secs(self.cooldown_s)
    }
}

/// One `[[dataset]]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetConfig {
    /// Unique; names the output files, so only `[A-Za-z0-9._-]`.
    pub name: String,
    /// JSONL prompt file (resolved against the config file's directory).
    pub prompts: PathBuf,
    /// Stop taking prompts when finished plus in-flight expected output tokens reach this.
    #[serde(default)]
    pub output_token_budget: Option<u64>,
    #[serde(default)]
    pub max_samples: Option<u64>,
    /// Prepended as a system message to prompts that have none.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// `last` (default) or `all`: see [`Turns`].
    #[serde(default)]
    pub turns: Turns,
    #[serde(default)]
    pub request: RequestOverride,
    /// The field of each row that holds the prompt's text, instead of `prompt`: a name
    /// (`"instruction"`, `"question"`) or a list joined by a blank line, empty ones left out
    /// (Alpaca's `["instruction", "input"]`).
    #[serde(default)]
    pub prompt_field: Option<FieldNames>,
    /// The field holding a list of turns (`{role, content}` or `{from, value}`), instead of
    /// `messages` and `conversations`.
    #[serde(default)]
    pub messages_field: Option<String>,
    /// A field holding the row's own system prompt, sent first when its turns have none.
    #[serde(default)]
    pub system_field: Option<String>,
    /// The field holding the row's id, instead of `id`.
    #[serde(default)]
    pub id_field: Option<String>,
}

/// One field name or several.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FieldNames {
    One(String),
    Many(Vec<String>),
}

impl DatasetConfig {
    /// How this dataset's rows name their fields.
    pub fn fields(&self) -> crate::store::prompts::PromptFields {
        crate::store::prompts::PromptFields {
            prompt: match &self.prompt_field {
                None => Vec::new(),
                Some(FieldNames::One(f)) => vec![f.clone()],
                Some(FieldNames::Many(fs)) => fs.clone(),
            },
            messages: self.messages_field.clone(),
            system: self.system_field.clone(),
            id: self.id_field.clone(),
        }
    }
}

/// One `[[endpoint]]`: an OpenAI-compatible server outside OpenRouter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    pub name: String,
    pub base_url: String,
    /// Env var holding this server's key; none means no `Authorization` header.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The model's name on that server.
    pub model: String,
    #[serde(default)]
    pub quantization: Quantization,
    #[serde(default)]
    pub price_in_per_m: f64,
    #[serde(default)]
    pub price_out_per_m: f64,
    #[serde(default = "default_endpoint_concurrency")]
    pub concurrency: u32,
    /// Whether a stream must end with a usage chunk to count as complete.
    #[serde(default)]
    pub require_usage: bool,
    /// Top-level JSON body fields for this server (`chat_template_kwargs`, ...).
    #[serde(default)]
    pub extra: Map<String, Value>,
}

pub(super) fn default_endpoint_concurrency() -> u32 {
    64
}

impl EndpointConfig {
    /// Input price; validated at load, so never falls back in practice.
    pub fn price_in(&self) -> Price {
        Price::per_million_f64(self.price_in_per_m).unwrap_or(Price::ZERO)
    }
    pub fn price_out(&self) -> Price {
        Price::per_million_f64(self.price_out_per_m).unwrap_or(Price::ZERO)
    }
}
