//! The `harvest.toml` configuration (SPEC §2): what to run, against which servers, under which
//! budgets. Every key has a default except `[[dataset]]`; unknown keys are errors. Errors name the
//! file, the 1-based line and the key path (`dataset[1].output_token_budget`, indices from 0).

mod provider;

use std::collections::HashMap;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use toml::de::{DeTable, DeValue};

use crate::domain::{Price, Quantization, Usd};
use crate::openrouter::StreamTimeouts;
use crate::openrouter::request::{ChatRequest, Effort, Message, Reasoning};

use crate::policy::PolicyConfig;
pub use provider::{AutoWord, DataCollection, MaxPriceSetting, ProviderConfig};

/// A bad or unreadable config file. Every variant maps to exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {}", path.display(), io_reason(source))]
    Read { path: PathBuf, source: io::Error },
    #[error("{}: TOML syntax error: {message}", loc(path, line))]
    Syntax {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error("{}: unknown key `{name}` in {table} ({expected})", loc(path, line))]
    UnknownKey {
        path: PathBuf,
        line: Option<usize>,
        name: String,
        /// Where it was found: `the top level`, `[request]`, `dataset[1].request`.
        table: String,
        expected: String,
    },
    /// A wrong type or value, a missing required key, or a failed check after parsing.
    #[error("{}: {key}: {message}", loc(path, line))]
    Invalid {
        path: PathBuf,
        line: Option<usize>,
        key: String,
        message: String,
    },
}

impl ConfigError {
    /// The 1-based line the error points at, when the file has one for it.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Syntax { line, .. }
            | ConfigError::UnknownKey { line, .. }
            | ConfigError::Invalid { line, .. } => *line,
        }
    }
}

fn loc(path: &Path, line: &Option<usize>) -> String {
    match line {
        Some(l) => format!("{}:{l}", path.display()),
        None => path.display().to_string(),
    }
}

/// `No such file or directory`, without the `(os error 2)` suffix meant for programmers.
fn io_reason(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

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
    /// Hard cap on spend, in dollars.
    pub budget_usd: f64,
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
            budget_usd: 10.0,
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

/// Request parameters: `[request]`, and the result of merging a dataset's overrides into it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestParams {
    pub max_tokens: u32,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub min_p: Option<f64>,
    pub seed: Option<u64>,
    pub stop: Option<Vec<String>>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    #[serde(deserialize_with = "reasoning")]
    pub reasoning: Option<Reasoning>,
    /// Passed through as top-level JSON body fields (`chat_template_kwargs`, ...).
    pub extra: Map<String, Value>,
}

impl Default for RequestParams {
    fn default() -> Self {
        RequestParams {
            max_tokens: 16384,
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
            seed: None,
            stop: None,
            presence_penalty: None,
            frequency_penalty: None,
            repetition_penalty: None,
            reasoning: None,
            extra: Map::new(),
        }
    }
}

impl RequestParams {
    /// A non-streaming request for `model` with these parameters; the caller sets `stream`,
    /// `provider` and `stream_options`.
    pub fn chat_request(&self, model: &str, messages: Vec<Message>) -> ChatRequest {
        let mut r = ChatRequest::new(model, messages, self.max_tokens);
        r.temperature = self.temperature;
        r.top_p = self.top_p;
        r.top_k = self.top_k;
        r.min_p = self.min_p;
        r.seed = self.seed;
        r.stop = self.stop.clone();
        r.presence_penalty = self.presence_penalty;
        r.frequency_penalty = self.frequency_penalty;
        r.repetition_penalty = self.repetition_penalty;
        r.reasoning = self.reasoning.clone();
        r.extra = self.extra.clone();
        r
    }
}

/// A dataset's `request` table: any key set here replaces `[request]`'s; `extra` is merged
/// key by key (the dataset's keys win).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestOverride {
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub min_p: Option<f64>,
    pub seed: Option<u64>,
    pub stop: Option<Vec<String>>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    #[serde(deserialize_with = "reasoning")]
    pub reasoning: Option<Reasoning>,
    pub extra: Map<String, Value>,
}

/// [`Reasoning`] as written in TOML, strict about its keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasoningToml {
    #[serde(default)]
    effort: Option<Effort>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    exclude: Option<bool>,
    #[serde(default)]
    enabled: Option<bool>,
}

fn reasoning<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Reasoning>, D::Error> {
    // `null` (the manifest's JSON of "no reasoning object") is none; TOML has no null.
    let Some(r) = Option::<ReasoningToml>::deserialize(d)? else {
        return Ok(None);
    };
    Ok(Some(Reasoning {
        effort: r.effort,
        max_tokens: r.max_tokens,
        exclude: r.exclude,
        enabled: r.enabled,
    }))
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

fn secs(s: f64) -> Duration {
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

fn default_endpoint_concurrency() -> u32 {
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

impl Config {
    /// Reads, parses and checks `path`, prompt files included.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses `text` as if read from `path`: relative paths resolve against its directory, and
    /// every prompt file must exist.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Self::parse_inner(text, path, true)
    }

    /// [`Config::parse`] without the prompt-file existence check (sample configs, `providers`).
    pub fn parse_unchecked(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Self::parse_inner(text, path, false)
    }

    fn parse_inner(text: &str, path: &Path, check_files: bool) -> Result<Config, ConfigError> {
        let doc = DeTable::parse(text).map_err(|e| {
            let (line, snippet) = match e.span() {
                Some(s) => (Some(line_of(text, s.start)), text.get(s).unwrap_or("")),
                None => (None, ""),
            };
            let mut message = e.message().to_string();
            if !snippet.is_empty() && snippet.len() <= 40 && !snippet.contains('\n') {
                message.push_str(&format!(" at `{snippet}`"));
            }
            ConfigError::Syntax {
                path: path.to_path_buf(),
                line,
                message,
            }
        })?;
        let spans = Spans::new(doc.get_ref());
        let check = Check {
            file: path,
            text,
            spans: &spans,
        };
        let mut config: Config = toml::from_str(text).map_err(|e| check.toml_error(&e))?;
        let base = path.parent().unwrap_or(Path::new(""));
        config.source = path.to_path_buf();
        config.output_dir = base.join(&config.output_dir);
        if let Some(ca) = &mut config.ca_cert {
            *ca = base.join(&*ca);
        }
        for d in &mut config.datasets {
            d.prompts = base.join(&d.prompts);
        }
        config.validate(&check, check_files)?;
        // A fixed max_price rules endpoints out where the listing shows it ("auto" never does).
        if let Some(MaxPriceSetting::Fixed(m)) = &config.provider.max_price {
            config.policy.guards.max_price = Some(m.clone());
        }
        Ok(config)
    }

    /// The dollar cap.
    /// How often to refresh the endpoint listing, if at all.
    pub fn catalog_refresh(&self) -> Option<Duration> {
        (self.openrouter && self.catalog_refresh_s > 0.0 && self.catalog_refresh_s.is_finite())
            .then(|| Duration::from_secs_f64(self.catalog_refresh_s))
    }

    pub fn budget(&self) -> Usd {
        Usd::from_f64(self.budget_usd)
    }

    /// `[request]` with `dataset`'s overrides applied.
    pub fn request_for(&self, dataset: &DatasetConfig) -> RequestParams {
        let (b, o) = (&self.request, &dataset.request);
        let mut extra = b.extra.clone();
        extra.extend(o.extra.clone());
        RequestParams {
            max_tokens: o.max_tokens.unwrap_or(b.max_tokens),
            temperature: o.temperature.or(b.temperature),
            top_p: o.top_p.or(b.top_p),
            top_k: o.top_k.or(b.top_k),
            min_p: o.min_p.or(b.min_p),
            seed: o.seed.or(b.seed),
            stop: o.stop.clone().or_else(|| b.stop.clone()),
            presence_penalty: o.presence_penalty.or(b.presence_penalty),
            frequency_penalty: o.frequency_penalty.or(b.frequency_penalty),
            repetition_penalty: o.repetition_penalty.or(b.repetition_penalty),
            reasoning: o.reasoning.clone().or_else(|| b.reasoning.clone()),
            extra,
        }
    }

    fn validate(&self, c: &Check<'_>, check_files: bool) -> Result<(), ConfigError> {
        c.ensure(!self.model.trim().is_empty(), "model", "must not be empty")?;
        c.ensure(
            !self.api_key_env.trim().is_empty(),
            "api_key_env",
            "must not be empty",
        )?;
        http_url(c, "base_url", &self.base_url)?;
        if check_files && let Some(ca) = &self.ca_cert {
            let read = crate::openrouter::roots::read(ca);
            c.ensure(read.is_ok(), "ca_cert", read.err().unwrap_or_default())?;
        }
        positive(c, "budget_usd", self.budget_usd)?;
        // Money is integer picodollars in an i64 (at most ~9.22M USD): a larger budget would be
        // clamped silently, and sums near the limit would overflow.
        let msg = format!(
            "must be at most {MAX_BUDGET_USD} USD (the most harvest's dollar counters hold with \
             room to spare), got {}",
            self.budget_usd
        );
        c.ensure(self.budget_usd <= MAX_BUDGET_USD, "budget_usd", msg)?;
        let conc_ok = (1..=100_000).contains(&self.concurrency);
        c.ensure(conc_ok, "concurrency", "must be between 1 and 100000")?;
        for (tag, cap) in &self.endpoint_concurrency {
            c.ensure(
                *cap > 0,
                format!("endpoint_concurrency.{tag}"),
                "must be at least 1",
            )?;
        }
        if let Some(rps) = self.requests_per_second {
            positive(c, "requests_per_second", rps)?;
        }
        let r = &self.request;
        check_request(c, "request", Some(r.max_tokens), &r.reasoning)?;
        no_provider_in_extra(c, "request", &r.extra)?;
        let t = &self.timeouts;
        positive(c, "timeouts.connect_s", t.connect_s)?;
        positive(c, "timeouts.first_token_s", t.first_token_s)?;
        positive(c, "timeouts.idle_s", t.idle_s)?;
        positive(c, "timeouts.total_s", t.total_s)?;
        let attempts_ok = self.retry.max_attempts > 0;
        c.ensure(attempts_ok, "retry.max_attempts", "must be at least 1")?;
        positive(c, "retry.max_delay_s", self.retry.max_delay_s)?;
        let failures_ok = self.breaker.failures > 0;
        c.ensure(failures_ok, "breaker.failures", "must be at least 1")?;
        positive(c, "breaker.cooldown_s", self.breaker.cooldown_s)?;

        let msg = "at least one [[dataset]] table is required";
        c.ensure(!self.datasets.is_empty(), "dataset", msg)?;
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, d) in self.datasets.iter().enumerate() {
            let key = |field: &str| format!("dataset[{i}].{field}");
            let name_ok = !d.name.is_empty()
                && (d.name.chars()).all(|ch| ch.is_ascii_alphanumeric() || ".-_".contains(ch));
            let msg = format!("bad name {:?}: use only A-Z a-z 0-9 . _ -", d.name);
            c.ensure(name_ok, key("name"), msg)?;
            if let Some(why) = reserved_name(&d.name) {
                let msg = format!(
                    "dataset name `{}` {why}: its files would mix with harvest's own in the \
                     output directory. Choose another name",
                    d.name
                );
                return Err(c.err(key("name"), msg));
            }
            if let Some(first) = seen.insert(&d.name, i) {
                let msg = format!(
                    "duplicate dataset name `{}` (also dataset[{first}])",
                    d.name
                );
                return Err(c.err(key("name"), msg));
            }
            // On a case-insensitive filesystem (macOS, Windows) `A.jsonl` and `a.jsonl` are one.
            if let Some((j, other)) = self.datasets[..i]
                .iter()
                .enumerate()
                .find(|(_, o)| o.name != d.name && o.name.eq_ignore_ascii_case(&d.name))
            {
                let msg = format!(
                    "dataset names `{}` and `{}` (dataset[{j}]) differ only by case: on a \
                     case-insensitive filesystem they would share files",
                    d.name, other.name
                );
                return Err(c.err(key("name"), msg));
            }
            let budget_ok = d.output_token_budget != Some(0);
            c.ensure(budget_ok, key("output_token_budget"), "must be > 0")?;
            c.ensure(d.max_samples != Some(0), key("max_samples"), "must be > 0")?;
            let o = &d.request;
            check_request(c, &key("request"), o.max_tokens, &o.reasoning)?;
            no_provider_in_extra(c, &key("request"), &o.extra)?;
            let exists = !check_files || d.prompts.is_file();
            let msg = format!(
                "prompt file of dataset {} not found: {}",
                d.name,
                d.prompts.display()
            );
            c.ensure(exists, key("prompts"), msg)?;
        }
        if let Some(a) = self.policy.min_probe_agreement {
            let ok = (0.0..=1.0).contains(&a);
            c.ensure(
                ok,
                "policy.min_probe_agreement",
                format!("must be between 0 and 1, got {a}"),
            )?;
        }
        c.ensure(
            self.openrouter || !self.endpoints.is_empty(),
            "openrouter",
            "is false, so at least one [[endpoint]] must serve the run",
        )?;
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, e) in self.endpoints.iter().enumerate() {
            let key = |field: &str| format!("endpoint[{i}].{field}");
            c.ensure(!e.name.trim().is_empty(), key("name"), "must not be empty")?;
            if let Some(first) = seen.insert(&e.name, i) {
                let msg = format!(
                    "duplicate endpoint name `{}` (also endpoint[{first}])",
                    e.name
                );
                return Err(c.err(key("name"), msg));
            }
            http_url(c, &key("base_url"), &e.base_url)?;
            c.ensure(
                !e.model.trim().is_empty(),
                key("model"),
                "must not be empty",
            )?;
            for (field, v) in [
                ("price_in_per_m", e.price_in_per_m),
                ("price_out_per_m", e.price_out_per_m),
            ] {
                let ok = v.is_finite() && v >= 0.0 && Price::per_million_f64(v).is_some();
                c.ensure(ok, key(field), format!("must be >= 0, got {v}"))?;
            }
            c.ensure(e.concurrency > 0, key("concurrency"), "must be at least 1")?;
        }
        Ok(())
    }
}

/// The largest `budget_usd`.
pub const MAX_BUDGET_USD: f64 = 9_000_000.0;

/// Names harvest gives its own files in an output directory (`spend.jsonl`, `state.json`,
/// `manifest.json`, `harvest.log`, `probe.json`, `<dataset>.rejects.jsonl`,
/// `<file>.damaged`, `<dataset>.superseded.jsonl`, `.harvest.lock`): a dataset may not take
/// them, in any case.
pub const RESERVED_NAMES: [&str; 5] = ["spend", "state", "manifest", "harvest", "probe"];

/// Why a dataset name would collide with harvest's own files, if it would.
fn reserved_name(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if RESERVED_NAMES.contains(&lower.as_str()) {
        Some("is the name of one of harvest's own files")
    } else if lower.ends_with(".rejects") {
        Some("ends in .rejects, the suffix of a dataset's rejects file")
    } else if lower.ends_with(".damaged") {
        Some("ends in .damaged, the suffix of the files --repair moves damaged lines to")
    } else if lower.ends_with(".superseded") {
        Some("ends in .superseded, the suffix of the files --retry-* moves superseded lines to")
    } else if name.starts_with('.') {
        Some("starts with a dot, kept for harvest's hidden files")
    } else {
        None
    }
}

fn positive(c: &Check<'_>, key: &str, v: f64) -> Result<(), ConfigError> {
    let ok = v.is_finite() && v > 0.0;
    c.ensure(ok, key, format!("must be a number > 0, got {v}"))
}

fn http_url(c: &Check<'_>, key: &str, url: &str) -> Result<(), ConfigError> {
    let host = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let ok = host.is_some_and(|h| !h.is_empty());
    c.ensure(
        ok,
        key,
        format!("must be an http:// or https:// URL, got {url:?}"),
    )
}

fn check_request(
    c: &Check<'_>,
    table: &str,
    max_tokens: Option<u32>,
    reasoning: &Option<Reasoning>,
) -> Result<(), ConfigError> {
    c.ensure(
        max_tokens != Some(0),
        format!("{table}.max_tokens"),
        "must be > 0",
    )?;
    let both = reasoning
        .as_ref()
        .is_some_and(|r| r.effort.is_some() && r.max_tokens.is_some());
    let msg = "set `effort` or `max_tokens`, not both";
    c.ensure(!both, format!("{table}.reasoning"), msg)
}

/// `extra.provider` would send a second `provider` object beside the one harvest builds.
fn no_provider_in_extra(
    c: &Check<'_>,
    table: &str,
    extra: &Map<String, Value>,
) -> Result<(), ConfigError> {
    let msg = "harvest builds the provider object (only, ignore, order from the policy): set \
               data_collection, zdr, enforce_distillable_text, sort, max_price and \
               preferred_* in the [provider] table instead";
    c.ensure(
        !extra.contains_key("provider"),
        format!("{table}.extra.provider"),
        msg,
    )
}

/// Where keys and values sit in the text, by key path (`dataset[1].name`): the deserializer's
/// errors carry only a byte span, and checks after parsing only a path.
struct Spans(Vec<SpanEntry>);

struct SpanEntry {
    path: String,
    /// `None` for array elements.
    key: Option<Range<usize>>,
    value: Range<usize>,
}

impl Spans {
    fn new(doc: &DeTable<'_>) -> Self {
        let mut out = Vec::new();
        walk_table(doc, "", &mut out);
        Spans(out)
    }

    /// The path of the key at `offset`, else of the innermost value around it.
    fn path_at(&self, offset: usize) -> Option<&str> {
        let within = |r: &Range<usize>| r.start <= offset && offset < r.end.max(r.start + 1);
        if let Some(e) = self.0.iter().find(|e| e.key.as_ref().is_some_and(within)) {
            return Some(&e.path);
        }
        let mut best: Option<&SpanEntry> = None;
        for e in self.0.iter().filter(|e| within(&e.value)) {
            // `<=`: on equal spans (a `[[table]]` header and its element) the deeper one wins.
            if best.is_none_or(|b| e.value.len() <= b.value.len()) {
                best = Some(e);
            }
        }
        best.map(|e| e.path.as_str())
    }

    /// Where `path`'s key is, or its nearest ancestor's when the key is not in the file.
    fn offset_of(&self, path: &str) -> Option<usize> {
        let mut p = path;
        loop {
            if let Some(e) = self.0.iter().find(|e| e.path == p) {
                return Some(e.key.as_ref().unwrap_or(&e.value).start);
            }
            p = &p[..parent_len(p)?];
        }
    }
}

/// Length of the parent path: `dataset[1].name` → `dataset[1]` → `dataset` → none.
fn parent_len(path: &str) -> Option<usize> {
    path.rfind(['.', '['])
}

fn walk_table(t: &DeTable<'_>, prefix: &str, out: &mut Vec<SpanEntry>) {
    for (k, v) in t.iter() {
        let path = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        out.push(SpanEntry {
            path: path.clone(),
            key: Some(k.span()),
            value: v.span(),
        });
        walk_value(v.get_ref(), &path, out);
    }
}

fn walk_value(v: &DeValue<'_>, path: &str, out: &mut Vec<SpanEntry>) {
    match v {
        DeValue::Table(t) => walk_table(t, path, out),
        DeValue::Array(a) => {
            for (i, e) in a.iter().enumerate() {
                let p = format!("{path}[{i}]");
                out.push(SpanEntry {
                    path: p.clone(),
                    key: None,
                    value: e.span(),
                });
                walk_value(e.get_ref(), &p, out);
            }
        }
        _ => {}
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// What errors need to point into the file.
struct Check<'a> {
    file: &'a Path,
    text: &'a str,
    spans: &'a Spans,
}

impl Check<'_> {
    fn ensure(
        &self,
        ok: bool,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Result<(), ConfigError> {
        if ok {
            Ok(())
        } else {
            Err(self.err(key, message))
        }
    }

    fn err(&self, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let key = key.into();
        ConfigError::Invalid {
            path: self.file.to_path_buf(),
            line: self.spans.offset_of(&key).map(|o| line_of(self.text, o)),
            key,
            message: message.into(),
        }
    }

    /// Names the key of a deserializer error (serde's messages say "field"; operators say "key").
    fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let offset = e.span().map(|s| s.start);
        let line = offset.map(|o| line_of(self.text, o));
        let at = offset
            .and_then(|o| self.spans.path_at(o))
            .unwrap_or("")
            .to_string();
        let msg = e.message();
        if let Some((name, expected)) = msg
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split_once("`, "))
        {
            let table = &at[..parent_len(&at).unwrap_or(0)];
            let table = if table.is_empty() {
                "the top level".to_string()
            } else if table.contains('[') {
                table.to_string()
            } else {
                format!("[{table}]")
            };
            return ConfigError::UnknownKey {
                path: self.file.to_path_buf(),
                line,
                name: name.to_string(),
                table,
                expected: expected.to_string(),
            };
        }
        let (key, message) = match msg.strip_prefix("missing field `") {
            Some(rest) => {
                let name = rest.trim_end_matches('`');
                let key = if at.is_empty() {
                    name.to_string()
                } else {
                    format!("{at}.{name}")
                };
                (key, "required key is missing".to_string())
            }
            None => (at, msg.to_string()),
        };
        ConfigError::Invalid {
            path: self.file.to_path_buf(),
            line,
            key,
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyMode;

    const EXAMPLE: &str = include_str!("../../assets/config/example.toml");
    const MINIMAL: &str = include_str!("../../assets/config/minimal.toml");
    const ONE: &str = "[[dataset]]\nname = \"B3\"\nprompts = \"data/b3.jsonl\"\n";

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_unchecked(text, Path::new("harvest.toml"))
    }

    #[test]
    fn defaults() {
        let c = parse(ONE).expect("config");
        assert_eq!(c.model, "moonshotai/kimi-k2.5");
        assert_eq!(c.base_url, "https://openrouter.ai/api/v1");
        assert_eq!(c.api_key_env, "OPENROUTER_API_KEY");
        assert_eq!(c.output_dir, PathBuf::from("out"));
        assert_eq!((c.budget_usd, c.concurrency), (10.0, 256));
        assert_eq!(c.requests_per_second, None);
        assert_eq!(
            (c.routing, c.schedule, c.on_bad_line),
            (Routing::Openrouter, Schedule::Interleaved, OnBadLine::Error)
        );
        assert_eq!(c.request, RequestParams::default());
        assert_eq!(c.request.max_tokens, 16384);
        assert_eq!(c.timeouts.first_token(), Duration::from_secs(120));
        assert_eq!(c.timeouts.total(), Duration::from_secs(1800));
        assert_eq!(c.retry, RetryConfig::default());
        assert_eq!(c.retry.base_delay(), Duration::from_millis(500));
        assert_eq!(c.retry.on_length, OnLength::Keep);
        assert_eq!(
            (c.breaker.failures, c.breaker.cooldown()),
            (5, Duration::from_secs(60))
        );
        assert_eq!(c.policy, PolicyConfig::default());
        assert_eq!(c.datasets[0].prompts, PathBuf::from("data/b3.jsonl"));
        assert_eq!(c.datasets[0].output_token_budget, None);
        assert!(c.endpoints.is_empty());
        assert_eq!(c.budget(), Usd::from_pico(10 * Usd::PICO_PER_USD));
    }

    /// Bad configs, each followed by a `=> ` line: a fragment its error must contain.
    const BAD: &str = r#"
budget = 1
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: unknown key `budget` in the top level (expected one of `model`, `base_url`
dataset = [{ name = "a", prompts = "a" }]
openrouter = false
=> harvest.toml:2: openrouter: is false, so at least one [[endpoint]] must serve the run
dataset = [{ name = "a", prompts = "a" }]
[policy]
min_probe_agreement = 90
=> harvest.toml:3: policy.min_probe_agreement: must be between 0 and 1, got 90
dataset = [{ name = "a", prompts = "a" }]
[request]
max_tokens = 5
budget = 3
=> harvest.toml:4: unknown key `budget` in [request] (expected one of `max_tokens`
[[dataset]]
name = "a"
prompts = "a"
[[dataset]]
name = "b"
prompts = "b"
output_token_budget = "lots"
=> harvest.toml:7: dataset[1].output_token_budget: invalid type: string "lots", expected u64
dataset = [{ name = "a", prompts = "a" }, { name = "b", prompts = "b", max_samples = -1 }]
=> harvest.toml:1: dataset[1].max_samples: invalid value: integer `-1`, expected u64
[[dataset]]
prompts = "a"
=> harvest.toml:1: dataset[0].name: required key is missing
[[dataset]]
name = "a"
prompts = "a"
[[dataset]]
prompts = "b"
name = "a"
=> harvest.toml:6: dataset[1].name: duplicate dataset name `a` (also dataset[0])
dataset = [{ name = "b 3", prompts = "a" }]
=> harvest.toml:1: dataset[0].name: bad name "b 3": use only
model = "x"
=> harvest.toml: dataset: at least one [[dataset]] table is required
dataset = []
=> harvest.toml:1: dataset: at least one [[dataset]] table is required
dataset = [{ name = "a", prompts = "a" }]
concurrency = 0
=> harvest.toml:2: concurrency: must be between 1 and 100000
concurrency = 100001
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: concurrency: must be between 1 and 100000
budget_usd = 0
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: budget_usd: must be a number > 0, got 0
budget_usd = -5.0
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: budget_usd: must be a number > 0, got -5
base_url = "openrouter.ai"
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: base_url: must be an http:// or https:// URL
routing = "fast"
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: routing: unknown variant `fast`, expected `openrouter` or `pinned`
dataset = [{ name = "a", prompts = "a" }]
[request]
max_tokens = 0
=> harvest.toml:3: request.max_tokens: must be > 0
dataset = [{ name = "a", prompts = "a" }]
[request]
reasoning = { effort = "high", budget = 3 }
=> harvest.toml:3: unknown key `budget` in [request.reasoning] (expected one of `effort`
dataset = [{ name = "a", prompts = "a" }]
[request]
reasoning = { effort = "high", max_tokens = 3 }
=> harvest.toml:3: request.reasoning: set `effort` or `max_tokens`, not both
dataset = [{ name = "a", prompts = "a" }]
[request]
reasoning = { effort = "hgih" }
=> harvest.toml:3: request.reasoning.effort: unknown variant `hgih`
dataset = [{ name = "a", prompts = "a" }]
[timeouts]
idle_s = 0.0
=> harvest.toml:3: timeouts.idle_s: must be a number > 0, got 0
[[dataset]]
name = "a"
prompts = "a"
[dataset.request]
temprature = 0.5
=> harvest.toml:5: unknown key `temprature` in dataset[0].request (expected one of
dataset = [{ name = "a", prompts = "a" }]
[policy]
mode = "strict"
=> harvest.toml:3: policy.mode: unknown variant `strict`, expected `faithful` or `any`
dataset = [{ name = "a", prompts = "a" }]
[[endpoint]]
name = "x"
base_url = "ftp://h"
model = "m"
=> harvest.toml:4: endpoint[0].base_url: must be an http:// or https:// URL, got "ftp://h"
dataset = [{ name = "a", prompts = "a" }]
[[endpoint]]
name = "x"
base_url = "http://h"
=> harvest.toml:2: endpoint[0].model: required key is missing
dataset = [{ name = "a", prompts = "a" }]
endpoint = [{ name = "x", base_url = "http://h", model = "m", price_out_per_m = -1.0 }]
=> harvest.toml:2: endpoint[0].price_out_per_m: must be >= 0, got -1
dataset = [{ name = "a", prompts = "a" }]
[[endpoint]]
name = "x"
base_url = "http://h"
model = "m"
[[endpoint]]
name = "x"
base_url = "http://h"
model = "m"
=> harvest.toml:7: endpoint[1].name: duplicate endpoint name `x` (also endpoint[0])
dataset = [{ name = "a", prompts = "a" }]
[request]
max_tokens = 5
[request]
=> harvest.toml:4: TOML syntax error: duplicate key at `request`
model =
=> harvest.toml:1: TOML syntax error:
"#;

    #[test]
    fn bad_configs_name_file_line_and_key() {
        let (mut text, mut cases) = (String::new(), 0);
        for line in BAD.trim_start().lines() {
            let Some(want) = line.strip_prefix("=> ") else {
                text.push_str(line);
                text.push('\n');
                continue;
            };
            let err = parse(&text).expect_err(&text).to_string();
            assert!(
                err.contains(want),
                "config:\n{text}error: {err}\nwanted: {want}"
            );
            text.clear();
            cases += 1;
        }
        assert_eq!(cases, 30);
    }

    #[test]
    fn a_budget_beyond_the_dollar_counters_is_refused_with_the_limit() {
        let err = parse("budget_usd = 1e300\ndataset = [{ name = \"a\", prompts = \"a\" }]\n")
            .expect_err("too big")
            .to_string();
        assert!(
            err.contains("harvest.toml:1: budget_usd: must be at most 9000000 USD"),
            "{err}"
        );
        let c = parse("budget_usd = 9e6\ndataset = [{ name = \"a\", prompts = \"a\" }]\n")
            .expect("the limit itself");
        assert_eq!(c.budget().as_f64(), 9e6);
    }

    #[test]
    fn dataset_names_cannot_collide_with_harvest_files_or_each_other() {
        let cases = [
            (
                "spend",
                "dataset[0].name: dataset name `spend` is the name of one of harvest's",
            ),
            (
                "Spend",
                "dataset[0].name: dataset name `Spend` is the name of one of harvest's",
            ),
            ("state", "own files"),
            ("manifest", "own files"),
            ("harvest", "own files"),
            ("probe", "own files"),
            ("a.rejects", "ends in .rejects"),
            ("a.REJECTS", "ends in .rejects"),
            ("a.jsonl.damaged", "ends in .damaged"),
            ("a.SUPERSEDED", "ends in .superseded"),
            (".hidden", "starts with a dot"),
        ];
        for (name, want) in cases {
            let text =
                format!("model = \"m\"\ndataset = [{{ name = \"{name}\", prompts = \"a\" }}]\n");
            let err = parse(&text).expect_err(name).to_string();
            assert!(err.starts_with("harvest.toml:2: "), "{name}: {err}");
            assert!(err.contains(want), "{name}: {err}");
        }
        let text = "[[dataset]]\nname = \"a\"\nprompts = \"a\"\n\
                    [[dataset]]\nname = \"A\"\nprompts = \"b\"\n";
        let err = parse(text).expect_err("case").to_string();
        assert!(
            err.contains("harvest.toml:5: dataset[1].name: dataset names `A` and `a` (dataset[0]) differ only by case"),
            "{err}"
        );
        for fine in ["spends", "a.rejects2", "rejects", "my-state", "a.b"] {
            let text = format!("dataset = [{{ name = \"{fine}\", prompts = \"a\" }}]\n");
            parse(&text).unwrap_or_else(|e| panic!("{fine}: {e}"));
        }
    }

    #[test]
    fn prompt_files_must_exist_and_paths_resolve_against_the_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("harvest.toml");
        let err = Config::parse(ONE, &path).expect_err("missing prompts");
        assert_eq!(err.line(), Some(3));
        let msg = err.to_string();
        assert!(
            msg.contains("dataset[0].prompts: prompt file of dataset B3 not found"),
            "{msg}"
        );
        assert!(
            msg.contains(&dir.path().join("data/b3.jsonl").display().to_string()),
            "{msg}"
        );

        std::fs::create_dir(dir.path().join("data")).expect("mkdir");
        std::fs::write(dir.path().join("data/b3.jsonl"), "{\"prompt\":\"hi\"}\n").expect("write");
        std::fs::write(&path, format!("output_dir = \"/abs/out\"\n{ONE}")).expect("write");
        let c = Config::load(&path).expect("loads");
        assert_eq!(c.output_dir, PathBuf::from("/abs/out"));
        assert_eq!(c.datasets[0].prompts, dir.path().join("data/b3.jsonl"));
        assert_eq!(c.source, path);

        let c = Config::parse_unchecked(ONE, Path::new("/srv/run/harvest.toml")).expect("cfg");
        assert_eq!(c.output_dir, PathBuf::from("/srv/run/out"));
    }

    #[test]
    fn unreadable_file() {
        let err = Config::load(Path::new("/nonexistent/harvest.toml")).expect_err("no file");
        assert_eq!(
            err.to_string(),
            "cannot read /nonexistent/harvest.toml: No such file or directory"
        );
    }

    #[test]
    fn dataset_overrides_merge_into_request() {
        let text = r#"
[request]
max_tokens = 1000
temperature = 0.6
stop = ["</s>"]
reasoning = { effort = "high" }
extra = { chat_template_kwargs = { thinking = true }, keep = 1 }

[[dataset]]
name = "B3"
prompts = "b3.jsonl"
output_token_budget = 10_000_000
system_prompt = "Be brief."
request = { temperature = 1.0, seed = 7, reasoning = { max_tokens = 512, exclude = true }, extra = { chat_template_kwargs = { thinking = false } } }

[[dataset]]
name = "B4"
prompts = "b4.jsonl"
"#;
        let c = parse(text).expect("config");
        let r = c.request_for(&c.datasets[0]);
        assert_eq!(c.datasets[0].output_token_budget, Some(10_000_000));
        assert_eq!(c.datasets[0].system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(
            (r.max_tokens, r.temperature, r.seed),
            (1000, Some(1.0), Some(7))
        );
        assert_eq!(r.stop, Some(vec!["</s>".to_string()]));
        let reasoning = r.reasoning.clone().expect("reasoning");
        assert_eq!((reasoning.effort, reasoning.max_tokens), (None, Some(512)));
        assert_eq!(reasoning.exclude, Some(true));
        assert_eq!(r.extra["chat_template_kwargs"]["thinking"], false);
        assert_eq!(r.extra["keep"], 1);
        assert_eq!(c.request_for(&c.datasets[1]), c.request);

        let body =
            serde_json::to_value(r.chat_request("m", vec![Message::user("hi")])).expect("json");
        assert_eq!(body["max_tokens"], 1000);
        assert_eq!(body["reasoning"]["max_tokens"], 512);
        assert_eq!(body["chat_template_kwargs"]["thinking"], false);
    }

    #[test]
    fn example_config_is_the_kimi_run() {
        let c = parse(EXAMPLE).expect("example.toml");
        assert_eq!(c.model, "moonshotai/kimi-k2.5");
        assert_eq!((c.budget_usd, c.concurrency), (100.0, 2000));
        let names: Vec<&str> = c.datasets.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["B3", "B4", "B5", "B6", "B7", "B8"]);
        assert!(
            c.datasets
                .iter()
                .all(|d| d.output_token_budget == Some(10_000_000))
        );
        assert_eq!(c.policy.mode, PolicyMode::Faithful);
        assert_eq!(c.policy.native_quantization, Some(Quantization::Int4));
        assert_eq!(c.policy.exclude, ["fireworks"]);
        assert!(c.endpoints.is_empty());

        // The commented-out endpoint (lines `#key = ...`, no space after `#`) parses when enabled.
        let enabled: String = EXAMPLE
            .lines()
            .map(|l| match l.strip_prefix('#') {
                Some(rest) if !rest.starts_with([' ', '#']) && !rest.is_empty() => rest,
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let c = parse(&enabled).expect("example.toml with the endpoint enabled");
        let e = &c.endpoints[0];
        assert_eq!((e.name.as_str(), e.concurrency), ("local-sglang", 64));
        assert_eq!(e.quantization, Quantization::Int4);
        assert_eq!((e.price_in(), e.price_out()), (Price::ZERO, Price::ZERO));
        assert_eq!(e.extra["chat_template_kwargs"]["thinking"], true);
    }

    #[test]
    fn minimal_config_has_one_dataset() {
        let c = parse(MINIMAL).expect("minimal.toml");
        assert_eq!(c.datasets.len(), 1);
        assert_eq!(c.budget_usd, 10.0);
    }

    #[test]
    fn endpoint_prices_convert_exactly() {
        let text = format!(
            "{ONE}[[endpoint]]\nname = \"vllm\"\nbase_url = \"https://h/v1\"\nmodel = \"m\"\nprice_in_per_m = 0.45\nprice_out_per_m = 2.2\nquantization = \"FP8\"\n"
        );
        let c = parse(&text).expect("config");
        let e = &c.endpoints[0];
        assert_eq!(e.price_out(), "0.0000022".parse::<Price>().expect("price"));
        assert_eq!(e.price_in().cost(1_000_000), Usd::from_f64(0.45));
        assert_eq!(e.quantization, Quantization::Fp8);
        assert_eq!(e.api_key_env, None);
    }
}
