//! Command-line definitions (clap derive). Parsing only: the commands live in `commands/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::domain::Quantization;
use crate::policy::PolicyMode;

#[derive(Parser, Debug)]
#[command(
    name = "harvest",
    version,
    about = "Generate LLM training data at scale through OpenRouter or any OpenAI-compatible server",
    long_about = None
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the job of a config file: the TUI in a terminal, progress lines otherwise; outputs
    /// written as they finish, resumable.
    Run(RunArgs),
    /// Progress of a running or finished run, read from its state file, and whether its
    /// engine is live (and how many viewers are attached).
    Status(StatusArgs),
    /// Open the TUI of a run started elsewhere (`run --detach`, or a run in another terminal),
    /// over the control socket of its output directory; several can attach at once.
    Attach(AttachArgs),
    /// Drain (or, with --now, stop) a live run from any shell, through its control socket.
    Stop(StopArgs),
    /// The endpoint table of a model: price, quantization, context, status, uptime, and which
    /// endpoints the policy allows.
    Providers(ProvidersArgs),
    /// What the remaining work of a config will cost and take: per dataset and per allowed
    /// endpoint, at the cheapest, the price-weighted mix and the dearest, against the budget.
    Estimate(EstimateArgs),
    /// An output directory's answers as a trainer takes them: per dataset a success file that
    /// passes SpecForge's validator, an error file and a skipped file, each row with its reason.
    Export(ExportArgs),
    /// Canaries: the same greedy prompts to every endpoint of a model, each compared with a
    /// reference endpoint's answers, to tell who serves the real model.
    Probe(ProbeArgs),
    /// Run the built-in OpenRouter simulator on 127.0.0.1 (for tests, demos and other clients).
    Sim(SimArgs),
    /// The whole experience with no key and no network: the simulator in-process with the Kimi
    /// K2.5 providers, three demo datasets, and a budgeted run through the real engine.
    Demo(DemoArgs),
    /// A starting harvest.toml for a real run: the model's endpoints the policy allows (with
    /// their prices), one dataset per prompt file (counted, its shape and field names found),
    /// max_tokens, concurrency and the budget each with its reason, and the estimate's verdict.
    /// Never overwrites a file.
    Init(InitArgs),
    /// The chat templates built into harvest (Kimi's with the final answer's reasoning kept):
    /// list them, or print one, e.g. for vLLM's --chat-template:
    /// `harvest template print kimi-k2.5-final-turn > kimi-k2.5-final-turn.jinja`.
    Template(TemplateArgs),
    /// A completion script for a shell, on standard output: e.g.
    /// `harvest completions bash > ~/.local/share/bash-completion/completions/harvest`.
    Completions(CompletionsArgs),
    /// Man pages: harvest(1), or with --dir one file per command (harvest-run.1, ...) to put
    /// under a man directory, e.g. `harvest man --dir ~/.local/share/man/man1`.
    Man(ManArgs),
}

#[derive(Args, Debug)]
pub struct TemplateArgs {
    #[command(subcommand)]
    pub action: TemplateAction,
}

#[derive(Subcommand, Debug)]
pub enum TemplateAction {
    /// The built-in templates: each name and the model whose own template it replaces.
    List,
    /// A built-in template's text on standard output.
    Print {
        /// The template's name (`harvest template list`).
        #[arg(value_parser = builtin_template_names())]
        name: String,
    },
}

/// The built-in templates' names, for the parser and the shell completions.
fn builtin_template_names() -> clap::builder::PossibleValuesParser {
    let names = crate::export::template::builtin::BUILTINS.map(|b| b.name);
    clap::builder::PossibleValuesParser::new(names)
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write harvest.1 and one page per command into this directory instead of printing
    /// harvest(1) on standard output. Existing pages of the same names are replaced.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug, Clone)]
pub struct PolicyArgs {
    /// Quantization policy: faithful (released precision or a lossless upcast) or any.
    #[arg(long, value_enum, default_value = "faithful")]
    pub mode: PolicyModeArg,
    /// The model's released precision (default: known for Kimi K2.x, DeepSeek V3/R1, gpt-oss).
    #[arg(long, value_name = "QUANT", value_parser = parse_quant)]
    pub native: Option<Quantization>,
    /// Endpoint tag or provider slug to always allow (repeatable).
    #[arg(long, value_name = "TAG")]
    pub include: Vec<String>,
    /// Endpoint tag or provider slug never to use (repeatable).
    #[arg(long, value_name = "TAG")]
    pub exclude: Vec<String>,
    /// Allow endpoints whose quantization is undisclosed.
    #[arg(long)]
    pub allow_unknown: bool,
    /// Leave out endpoints whose probe agreement (0-1) is below this (needs --probe).
    #[arg(long, value_name = "SIMILARITY")]
    pub min_probe_agreement: Option<f64>,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum PolicyModeArg {
    Faithful,
    Any,
}

impl From<PolicyModeArg> for PolicyMode {
    fn from(m: PolicyModeArg) -> Self {
        match m {
            PolicyModeArg::Faithful => PolicyMode::Faithful,
            PolicyModeArg::Any => PolicyMode::Any,
        }
    }
}

fn parse_quant(s: &str) -> Result<Quantization, String> {
    Ok(Quantization::parse(s))
}

#[derive(Args, Debug)]
pub struct ProvidersArgs {
    /// Model id, e.g. moonshotai/kimi-k2.5
    pub model: String,
    /// API base URL (OpenRouter or the simulator).
    #[arg(long, env = "HARVEST_BASE_URL", default_value = crate::openrouter::DEFAULT_BASE_URL)]
    pub base_url: String,
    /// Environment variable holding the API key (the listing works without one, with fewer
    /// statistics).
    #[arg(long, default_value = "OPENROUTER_API_KEY")]
    pub api_key_env: String,
    /// Print a stable machine-readable JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A `harvest probe` result (probe.json): its agreement becomes a column, and
    /// `--min-probe-agreement` a policy rule.
    #[arg(long, value_name = "FILE")]
    pub probe: Option<PathBuf>,
    /// Leave out endpoints without a Zero Data Retention policy (read from GET
    /// /endpoints/zdr), as `[provider] zdr = true` does in a run.
    #[arg(long)]
    pub zdr: bool,
    /// Leave out endpoints dearer than IN,OUT USD per million tokens, as `[provider]
    /// max_price` does in a run (e.g. 0.6,3).
    #[arg(long, value_name = "IN,OUT", value_parser = parse_max_price)]
    pub max_price: Option<crate::openrouter::MaxPrice>,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

fn parse_max_price(s: &str) -> Result<crate::openrouter::MaxPrice, String> {
    let (i, o) = s
        .split_once(',')
        .ok_or_else(|| format!("{s:?}: give IN,OUT in USD per million tokens, e.g. 0.6,3"))?;
    let num = |x: &str| {
        x.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("{x:?} is not a price in USD per million tokens"))
    };
    Ok(crate::openrouter::MaxPrice {
        prompt: Some(num(i)?),
        completion: Some(num(o)?),
        request: None,
    })
}

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Model id, e.g. moonshotai/kimi-k2.5 (default: the config's).
    pub model: Option<String>,
    /// A config: its base URL, key variable, own [[endpoint]] servers, policy (for the
    /// reference) and output_dir (where the result and the spend go).
    #[arg(short = 'c', long)]
    pub config: Option<PathBuf>,
    /// API base URL when there is no config (OpenRouter or the simulator).
    #[arg(long, env = "HARVEST_BASE_URL", default_value = crate::openrouter::DEFAULT_BASE_URL)]
    pub base_url: String,
    /// Environment variable holding the API key when there is no config.
    #[arg(long, default_value = "OPENROUTER_API_KEY")]
    pub api_key_env: String,
    /// The endpoint the others are compared with (default: the model author's own endpoint,
    /// else the policy's native-precision endpoint, else the majority answer).
    #[arg(long, value_name = "TAG")]
    pub reference: Option<String>,
    /// Probe only these endpoints (tags, comma-separated); the reference is always probed.
    #[arg(long, value_delimiter = ',', value_name = "TAGS")]
    pub only: Vec<String>,
    /// How many of the fixed prompts to send to each endpoint (1-12).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=12))]
    pub prompts: u16,
    /// Output tokens per answer.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: u32,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Requests in flight at once, all endpoints together.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Refuse to start when the probe could cost more than this (every answer at max_tokens).
    #[arg(long, default_value_t = 1.0, value_name = "USD")]
    pub max_usd: f64,
    /// Where to write the result (default: probe.json in the config's output_dir, else ./out).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the result as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also measure whether closing a stream stops each endpoint's bill: one long answer per
    /// endpoint closed after a few tokens, then looked up at /generation (at most one
    /// max_tokens answer each; the look-ups can take a few minutes). Prints the
    /// cancel_stops_billing list it makes.
    #[arg(long)]
    pub cancel: bool,
    /// With --cancel and -c: write that list into the config as cancel_stops_billing (the rest
    /// of the file kept as it is), where the hard dollar budget takes it as given.
    #[arg(long, requires_all = ["cancel", "config"])]
    pub write_config: bool,
}

#[derive(Args, Debug)]
pub struct EstimateArgs {
    /// The config file.
    #[arg(short = 'c', long, default_value = "harvest.toml")]
    pub config: PathBuf,
    /// Print a stable machine-readable JSON document instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Output tokens per prompt for datasets with no outputs yet (default: the token budget
    /// spent, or max_tokens per prompt without a budget).
    #[arg(long, value_name = "TOKENS")]
    pub mean_output: Option<u64>,
    /// Tokens per second of one stream, TTFT included, at every endpoint (default: observed in
    /// the output directory, else the listing's medians, else 20).
    #[arg(long, value_name = "N")]
    pub stream_tps: Option<f64>,
}

#[derive(Args, Debug)]
pub struct SimArgs {
    /// Port on 127.0.0.1 (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8089)]
    pub port: u16,
    /// Seed: the same seed and prompts give the same responses.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Provider table (JSON); default: the embedded Kimi K2.5 table.
    #[arg(long, value_name = "FILE")]
    pub providers: Option<PathBuf>,
    /// Multiplies every latency: 1 is real pace, 0.1 ten times faster, 0 no delay at all.
    #[arg(long, default_value_t = 1.0)]
    pub speed_scale: f64,
    /// Fault probabilities for every endpoint, e.g. rate_limit=0.1,mid_stream=0.05,reset=0.01
    /// (also: server_error, stall, slow_start, empty, truncate, retry_after_s).
    #[arg(long, value_name = "SPEC")]
    pub faults: Option<String>,
    /// Remove every fault of the table first (then --faults applies).
    #[arg(long)]
    pub no_faults: bool,
    /// Tokens one streamed event carries at every endpoint: N (every event), or mean:M (drawn
    /// per event, bursts included); by default each endpoint's from the provider table.
    #[arg(long, value_name = "N|mean:M")]
    pub tokens_per_event: Option<crate::sim::TokensPerEvent>,
    /// How long every endpoint where a close stops the bill goes on decoding after a client
    /// closes a stream before it notices, in milliseconds at its own pace (the tokens decoded
    /// meanwhile are billed); by default each endpoint's from the provider table.
    #[arg(long, value_name = "MS")]
    pub close_notice_ms: Option<f64>,
    /// Append every billed generation to this JSONL file.
    #[arg(long, value_name = "FILE")]
    pub billing_log: Option<PathBuf>,
    /// Answer chat completions with recorded real responses, in turn (`*.sse`, `*.json`; e.g.
    /// tests/fixtures/recorded): each billed at its own usage.cost, its generation id made
    /// unique per request. The listing and the key stay the simulator's.
    #[arg(long, value_name = "DIR")]
    pub replay: Option<PathBuf>,
    /// Credit limit of the key in USD; past it, requests get 402.
    #[arg(long, value_name = "USD")]
    pub key_limit: Option<f64>,
    /// Accept only this bearer token (default: any non-empty one).
    #[arg(long, env = "HARVEST_SIM_KEY", hide_env_values = true)]
    pub require_key: Option<String>,
    /// The account's in-flight spending budget in USD, as OpenRouter enforces it: the
    /// estimated cost (prompt + max_tokens at the serving price) of running and recently
    /// finished requests is capped; past it a request gets 402 with limit_source
    /// openrouter_in_flight_budget and a Retry-After; one request over the whole budget gets
    /// a 402 naming max_tokens. Errors can also be forced on every request with POST
    /// /sim/control {"force_error": {"status": 404, "error_type": "not_found",
    /// "availability": "privacy_restricted"}} (and {"clear_forced_error": true}).
    #[arg(long, value_name = "USD")]
    pub inflight_budget: Option<f64>,
    /// How long a finished request still counts against the in-flight budget.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub inflight_recent_s: f64,
    /// The Retry-After of the in-flight budget's 402, at real pace (scaled by --speed-scale).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub inflight_retry_after_s: f64,
    /// Leave out the X-Generation-Id response header, as the real API's recorded chat
    /// responses do (the id is in every chunk's `id` either way)
    #[arg(long)]
    pub no_generation_header: bool,
    /// Keep each request's JSON body in the request log (GET /sim/requests), to compare what
    /// was sent with what a row records. Memory grows with the log (200,000 entries at most).
    #[arg(long)]
    pub log_bodies: bool,
    /// Serve HTTPS, as the real API does: HTTP/2 and HTTP/1.1 by ALPN, with a certificate
    /// made at start for 127.0.0.1 and localhost; its authority is written to --ca-out for
    /// clients to trust (SSL_CERT_FILE, a config's ca_cert).
    #[arg(long)]
    pub tls: bool,
    /// With --tls: where to write the certificate authority, PEM (default:
    /// harvest-sim-<port>-ca.pem in the system's temporary directory).
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub ca_out: Option<PathBuf>,
    /// With --tls: HTTP/2 streams one connection may carry at once (servers commonly
    /// advertise 100-256).
    #[arg(long, value_name = "N", default_value_t = crate::sim::tls::DEFAULT_H2_MAX_STREAMS)]
    pub h2_max_streams: u32,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Prompt files, one dataset each (JSONL, plain, .gz or .zst, or Parquet).
    pub prompts: Vec<PathBuf>,
    /// Model id.
    #[arg(long, default_value = "moonshotai/kimi-k2.5")]
    pub model: String,
    /// The run's dollar budget.
    #[arg(long, default_value_t = 10.0)]
    pub budget: f64,
    /// API base URL (OpenRouter, or the simulator's to try it without a key).
    #[arg(long, env = "HARVEST_BASE_URL", default_value = crate::openrouter::DEFAULT_BASE_URL)]
    pub base_url: String,
    /// Environment variable that will hold the API key (the listing needs none).
    #[arg(long, default_value = "OPENROUTER_API_KEY")]
    pub api_key_env: String,
    /// Where to write the config; an existing file is never overwritten.
    #[arg(long, short, default_value = "harvest.toml")]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Directory for the demo's prompts, outputs and log (default: a new one under the
    /// system's temporary directory).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Simulator speed: 1 is real provider pace (the demo's budget goes in about a minute and
    /// a half).
    #[arg(long, default_value_t = 1.0)]
    pub speed_scale: f64,
    /// Dollar budget of the demo job (default: the $2 of assets/demo/harvest.toml).
    #[arg(long, value_name = "USD")]
    pub budget: Option<f64>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Progress lines instead of the TUI.
    #[arg(long)]
    pub headless: bool,
    /// Seconds between progress lines (headless).
    #[arg(long, default_value_t = 5.0)]
    pub progress_every: f64,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The config file.
    #[arg(short = 'c', long, default_value = "harvest.toml")]
    pub config: PathBuf,
    /// Progress lines instead of the TUI (also when stdout is not a terminal).
    #[arg(long)]
    pub headless: bool,
    /// Run as shard K of N (0-based, e.g. 0/4): only the prompts whose id hashes to K, into
    /// its own directory (`output_dir/shard-K-of-N`), with its share of the budget. `auto`
    /// takes K and N from a Kubernetes Indexed Job (JOB_COMPLETION_INDEX, with --shards N) or a
    /// Slurm job array (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT, and SLURM_ARRAY_TASK_MIN
    /// when the array does not start at 0).
    #[arg(long, value_name = "K/N|auto")]
    pub shard: Option<String>,
    /// How many shards the job has, for `--shard auto` under a Kubernetes Indexed Job (its
    /// completions; also HARVEST_SHARDS).
    #[arg(long, value_name = "N", requires = "shard")]
    pub shards: Option<u32>,
    /// The shard's output directory, instead of `output_dir/shard-K-of-N`.
    #[arg(long, value_name = "DIR", requires = "shard")]
    pub shard_dir: Option<PathBuf>,
    /// Resume into an output directory even if it was started with other parameters, or
    /// with a prompt file whose lines an earlier run counted have changed since (appended
    /// lines need no --force): the rows of both then mix in one dataset.
    #[arg(long)]
    pub force: bool,
    /// Instead of refusing to start on a damaged output directory: move each damaged line to
    /// `<file>.damaged`, keep every good line, and rebuild a missing ledger from the outputs.
    #[arg(long)]
    pub repair: bool,
    /// Send the rejected prompts again: all, or only those whose rejects are of the given
    /// kinds (`--retry-rejects=policy,429`; the kinds as the rejects files and the report name
    /// them). Their rejects move to `<dataset>.rejects.superseded.jsonl`.
    #[arg(long, value_name = "KINDS", num_args = 0..=1, require_equals = true, value_delimiter = ',')]
    pub retry_rejects: Option<Vec<String>>,
    /// Send again the prompts whose kept answer was cut at max_tokens (with the config's
    /// max_tokens, which may differ from the earlier run's). Their answers move to
    /// `<dataset>.superseded.jsonl`.
    #[arg(long)]
    pub retry_truncated: bool,
    /// Seconds between progress lines.
    #[arg(long, default_value_t = 5.0)]
    pub progress_every: f64,
    /// Seconds a drain lets in-flight requests finish before it closes them: a drain by
    /// SIGINT/SIGTERM, the TUI's `q` `d`, `harvest stop`, or a lost terminal or output.
    #[arg(long, default_value_t = 30.0)]
    pub drain_grace_s: f64,
    /// When the engine's thread is busy (work was already waiting at its last sleep), it
    /// pauses up to this many milliseconds before sleeping again, so that the tokens of many
    /// streams pile up and are read in one wake-up instead of one each: at real pace over
    /// HTTPS this halves the CPU per token (BENCHMARKS.md). The pause starts at 10 ms and
    /// follows the streams' pace: short enough that the fastest stream piles up about 12
    /// tokens between two reads (the dollar cap holds 32 a stream for tokens in transit), so
    /// fast streams shorten it (at real pace, 30 to 90 tokens a second, it is 133 to 200 ms).
    /// A token is seen up to the pause later (TTFT too), and so is a command from the TUI or
    /// `harvest stop`; the TUI itself answers a key at once (it has a thread of its own). A
    /// quiet run never pauses. 0 turns it off.
    #[arg(long, env = "HARVEST_READ_BATCH_MS", default_value_t = crate::runtime::DEFAULT_READ_BATCH_MS)]
    pub read_batch_ms: u64,
    /// Check the config, the key and the output directory as a foreground run does (same
    /// messages, same exit codes), then leave the run going in the background (its own
    /// session, no terminal, logs in <output_dir>/harvest.log), print its pid and exit 0.
    /// Watch it with `harvest attach`, stop it with `harvest stop`.
    #[arg(long, conflicts_with = "headless")]
    pub detach: bool,
    /// Check everything a run checks before it sends (the config, the prompt files, the output
    /// directory and its lock, the listing and the policy, the key and the account), say what
    /// the run would do, and exit 0, 1 or 2 as the run would start or fail. Nothing is sent to
    /// the chat API and nothing is written.
    #[arg(long, conflicts_with_all = ["detach", "repair"])]
    pub check: bool,
    /// The background process of `--detach` (reports its start on stdout, then keeps quiet).
    #[arg(long, hide = true, requires = "detach")]
    pub detached_child: bool,
}

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// The run's output directory (default: out).
    pub dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct StopArgs {
    /// The run's output directory (default: out).
    pub dir: Option<PathBuf>,
    /// Cancel in-flight requests instead of letting them finish (their tokens so far are
    /// paid for and lost).
    #[arg(long)]
    pub now: bool,
    /// Return once the engine took the order, instead of following the drain to its end.
    #[arg(long)]
    pub no_wait: bool,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The run's output directory (read only; safe while a run writes it). Several, or the
    /// parent of shard directories (`out` holding `shard-K-of-N`), export one job: each
    /// dataset's rows of every shard in one set of files, each id once.
    #[arg(required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// Where to write `<dataset>.jsonl` (training rows), `<dataset>.error.ndjson` and
    /// `<dataset>.skipped.ndjson`.
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
    /// The rows' shape: specforge (`conversations` with `reasoning_content`, `status`; what
    /// SpecForge and speculators read), text (the row rendered through --chat-template, for
    /// SpecForge's is_preformatted), sharegpt (`from`/`value`, no reasoning) or openai
    /// (`messages`).
    #[arg(long, value_enum, default_value = "specforge")]
    pub format: crate::export::Format,
    /// The run's config: its datasets in order, and their prompt files' counts (for the
    /// "not yet run" column).
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Add flat provenance columns (provider, endpoint_tag, tokens, cost_usd, ...).
    #[arg(long)]
    pub with_provenance: bool,
    /// Keep answers cut at max_tokens (default: skipped).
    #[arg(long)]
    pub keep_truncated: bool,
    /// Skip answers without reasoning_content (SpecForge's --expect-reasoning).
    #[arg(long)]
    pub require_reasoning: bool,
    /// Keep answers with <think> or </think> in them (default: skipped, as SpecForge's
    /// --strict-think-markers would fail them).
    #[arg(long)]
    pub keep_think_markers: bool,
    /// A system turn for rows that have none (e.g. the training template's default, so that
    /// generation and training contexts match).
    #[arg(long, value_name = "TEXT")]
    pub system_prompt: Option<String>,
    /// One success row per assistant turn of a multi-turn row (`<id>#<k>`), each ending at
    /// its turn with its reasoning, earlier answers without theirs; train them with
    /// SpecForge's train_only_last_turn, so every turn is a target. Each `#` of a prompt's own
    /// id is doubled (`a#b` is written `a##b`, `a##b#1`, ...), so that no two rows share an id.
    #[arg(long)]
    pub explode_turns: bool,
    /// Rows whose prompt carried assistant turns the model did not write (turns = "last"):
    /// `skip` leaves them out, as a trainer supervises every assistant turn of a row;
    /// `context` writes them, each row (or exploded part) ending at an answer of the model,
    /// for SpecForge with data.train_only_last_turn: true (speculators supervises every turn).
    #[arg(long, value_enum, default_value = "skip")]
    pub foreign_turns: crate::export::ForeignTurns,
    /// The trainer's max_length in tokens (SpecForge's data.max_length): export counts the
    /// rows longer than it, which the trainer would cut on the right (the answer first).
    #[arg(long, value_name = "TOKENS")]
    pub max_length: Option<u64>,
    /// Leave out the rows longer than --max-length (each exploded row on its own).
    #[arg(long, requires = "max_length")]
    pub skip_longer: bool,
    /// A Hugging Face chat template: the model's tokenizer_config.json or chat_template.jinja,
    /// or a built-in one (kimi-k2.5-final-turn, kimi-k2-thinking-final-turn). Every success
    /// row is rendered through it as written: --format text writes that text, --show prints
    /// it, and rows whose reasoning it drops are counted and named.
    #[arg(long, value_name = "FILE|NAME", required_if_eq("format", "text"))]
    pub chat_template: Option<PathBuf>,
    /// A template option, as apply_chat_template(**kwargs) passes it: KEY=JSON, e.g.
    /// thinking=true (repeatable).
    #[arg(long, value_name = "KEY=JSON", requires = "chat_template")]
    pub template_kwarg: Vec<String>,
    /// How many success rows to print through --chat-template, as written (exploded, in the
    /// format), first rows first.
    #[arg(long, value_name = "N", requires = "chat_template")]
    pub show: Option<usize>,
    /// The accounting as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The run's output directory (default: out). Several, or the parent of shard directories
    /// (`out` holding `shard-K-of-N`), show one job: its totals, a row per shard, and the
    /// shards missing, present twice or from another config.
    pub dirs: Vec<PathBuf>,
    /// The whole state as JSON.
    #[arg(long)]
    pub json: bool,
    /// The end-of-run report instead: per dataset and endpoint prompts, tokens, dollars,
    /// tok/s, TTFT p50/p95, errors by kind, truncation, and the spend reconciliation.
    #[arg(long)]
    pub report: bool,
    /// Settle what a crashed run left open, without starting a run: looks up its open
    /// generations at `GET /generation` of the run's own API (with its key variable, both
    /// recorded in the directory's manifest) and books those the API knows at their cost; an
    /// API that cannot be reached is an error (exit 1). Requests caught before any answer, and
    /// generations unknown for 15 minutes, stay open with their expected cost said: the next
    /// run books them and trues up against the key's usage. Refused while a run holds the
    /// directory.
    #[arg(long, conflicts_with = "report")]
    pub reconcile: bool,
    /// With --reconcile: the API's base URL (default: the run's, recorded in its manifest,
    /// else the config's, else OpenRouter's).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// With --reconcile: the environment variable holding the API key (default: the run's,
    /// else the config's, else OPENROUTER_API_KEY).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// With --reconcile: the run's config: its base URL and key variable where the output
    /// directory's manifest names none (written before they were recorded), and its ca_cert.
    #[arg(short = 'c', long, value_name = "FILE", requires = "reconcile")]
    pub config: Option<PathBuf>,
}
