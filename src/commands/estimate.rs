//! `harvest estimate [-c harvest.toml]`: what the remaining work of a config will cost and
//! take, before (or while) running it. Gathers the facts (prompt files, the output directory's
//! outputs, rejects and ledger, the live endpoint listing, the policy), hands them to
//! [`crate::estimate`], and prints a table or the JSON document.
//!
//! Read-only: unlike a resume, it never repairs a torn last line, since a run may be writing.

use super::stdout::{out, outln};
use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Deserialize;

use crate::cli::EstimateArgs;
use crate::config::{Config, OnBadLine, Routing};
use crate::domain::{Quantization, Usd, group_thousands};
use crate::engine::core::turns::{request_ends, with_system_prompt};
use crate::engine::{self, RunState};
use crate::estimate::render::render_text;
use crate::estimate::{
    DatasetFacts, EndpointOffer, Estimate, Inputs, ListedSpeed, Observed, SpeedSample, TextStats,
    TokenRule, estimate,
};
use crate::openrouter::{ApiKey, Endpoint};
use crate::policy::PolicyMode;
use crate::store::output::ledger_path;
use crate::store::prompts::PromptReader;
use crate::store::scan::{self, ScanError};

use super::BadInput;

/// What `harvest estimate` takes besides the config.
#[derive(Clone, Debug, Default)]
pub struct EstimateOptions {
    /// Output tokens per prompt for datasets with no outputs yet.
    pub mean_output: Option<u64>,
    /// Tokens per second of one stream, at every endpoint.
    pub stream_tps: Option<f64>,
    /// The API key, when not from the environment variable the config names (library use).
    pub api_key: Option<ApiKey>,
}

impl EstimateOptions {
    fn from_args(a: &EstimateArgs) -> Result<Self, BadInput> {
        if a.mean_output == Some(0) {
            return Err(BadInput("--mean-output must be at least 1 token".into()));
        }
        if let Some(t) = a.stream_tps
            && !(t.is_finite() && t > 0.0)
        {
            return Err(BadInput(format!(
                "--stream-tps must be a number > 0, got {t}"
            )));
        }
        Ok(EstimateOptions {
            mean_output: a.mean_output,
            stream_tps: a.stream_tps,
            api_key: None,
        })
    }
}

pub async fn run(args: EstimateArgs) -> anyhow::Result<()> {
    let opts = EstimateOptions::from_args(&args)?;
    let cfg = Config::load(&args.config).map_err(|e| BadInput(e.to_string()))?;
    let est = estimate_config(&cfg, &opts).await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&est)?);
    } else {
        out!("{}", crate::printable::printable(&render_text(&est)));
    }
    Ok(())
}

/// The estimate of a loaded config: facts gathered, then computed.
pub async fn estimate_config(cfg: &Config, opts: &EstimateOptions) -> anyhow::Result<Estimate> {
    let inputs = gather(cfg, opts).await?;
    let mut est = estimate(&inputs).map_err(|e| BadInput(e.to_string()))?;
    est.account = account(cfg, opts, &est).await?;
    Ok(est)
}

/// The key's limits against the run (`GET /key`), when the run goes through OpenRouter with a
/// key; the estimate stands without it.
async fn account(
    cfg: &Config,
    opts: &EstimateOptions,
    est: &Estimate,
) -> anyhow::Result<Option<crate::account::Preflight>> {
    if !cfg.openrouter {
        return Ok(None);
    }
    let client = engine::client_for(cfg, opts.api_key.clone()).map_err(super::run::engine_error)?;
    if !client.has_key() {
        return Ok(None);
    }
    let key = tokio::time::timeout(std::time::Duration::from_secs(10), client.key_info())
        .await
        .ok()
        .and_then(Result::ok);
    let price = |p: f64| crate::domain::Price::per_million_f64(p).unwrap_or_default();
    let routed: Vec<_> = est.endpoints.iter().filter(|e| !e.own_server).collect();
    let by_out = |e: &&&crate::estimate::EndpointEstimate| {
        (price(e.price_out_per_m), price(e.price_in_per_m))
    };
    let cheapest = routed.iter().min_by_key(by_out);
    let dearest = routed.iter().max_by_key(by_out);
    let (tokens, prompts) = est.datasets.iter().fold((0, 0), |(t, n), d| {
        (t + d.input_tokens, n + d.prompts_to_send)
    });
    let plan = crate::account::Plan {
        budget: cfg.budget(),
        concurrency: cfg.concurrency,
        max_tokens: est.datasets.iter().map(|d| d.max_tokens).max().unwrap_or(0),
        prompt_tokens: tokens.checked_div(prompts).unwrap_or(1),
        prices: cheapest.zip(dearest).map(|(c, d)| {
            (
                (price(c.price_in_per_m), price(c.price_out_per_m)),
                (price(d.price_in_per_m), price(d.price_out_per_m)),
            )
        }),
    };
    Ok(Some(crate::account::preflight(&plan, key.as_ref())))
}

/// Reads what the estimate needs: prompt files, the output directory and the endpoint listing.
pub async fn gather(cfg: &Config, opts: &EstimateOptions) -> anyhow::Result<Inputs> {
    let mut notes = Vec::new();
    // A job run as shards is read as one: each shard directory's records count.
    let dirs = super::job::job_dirs(&cfg.output_dir);
    if dirs.len() > 1 {
        notes.push(format!(
            "{} holds a job of {} shard directories: their outputs and ledgers count together",
            cfg.output_dir.display(),
            dirs.len()
        ));
    }
    let mut spent = Usd::ZERO;
    let mut speeds: HashMap<String, SpeedSample> = HashMap::new();
    let mut found: HashMap<&str, DatasetOutputs> = HashMap::new();
    for dir in &dirs {
        let ledger = read_ledger(dir)?;
        let mut unbooked = Usd::ZERO;
        for d in &cfg.datasets {
            let outs = read_outputs(dir, &d.name, &ledger.completes, &mut speeds)?;
            unbooked += outs.unbooked;
            if outs.unreadable > 0 {
                notes.push(format!(
                    "{}{}: {} output or reject lines could not be read: not counted{}",
                    d.name,
                    if dirs.len() > 1 {
                        format!(" in {}", dir.display())
                    } else {
                        String::new()
                    },
                    outs.unreadable,
                    damage_hint(outs.first_damage.as_deref())
                ));
            }
            found.entry(&d.name).or_default().absorb(outs);
        }
        notes.extend(ledger_notes(&ledger, unbooked, dir));
        spent += ledger.spent + unbooked;
        if let Some(state) = live_state(dir) {
            notes.push(format!(
                "state.json says the run in {} is {} (or was, if it crashed): requests in flight \
                 count as remaining, and what they cost is not in the spend yet",
                dir.display(),
                state.label().to_lowercase()
            ));
        }
    }
    let mut datasets = Vec::with_capacity(cfg.datasets.len());
    for d in &cfg.datasets {
        let outs = found.remove(d.name.as_str()).unwrap_or_default();
        let cap = d
            .max_samples
            .map(|m| m.saturating_sub(outs.observed.outputs));
        let scan = scan_prompts(&d.prompts, &outs.done, cap, d)?;
        if let Some(note) = bad_lines_note(&d.name, &scan, cfg.on_bad_line) {
            notes.push(note);
        }
        datasets.push(DatasetFacts {
            name: d.name.clone(),
            prompts_in_file: scan.valid,
            bad_lines: scan.bad,
            rejects: outs.rejects,
            fresh: scan.fresh,
            remaining: scan.remaining,
            max_samples: d.max_samples,
            max_tokens: cfg.request_for(d).max_tokens,
            output_token_budget: d.output_token_budget,
            observed: outs.observed,
        });
    }
    let (endpoints, price_source) = offers(cfg, opts, &speeds).await?;
    let (native, _) = cfg.policy.native_for(&cfg.model);
    Ok(Inputs {
        model: cfg.model.clone(),
        routing: cfg.routing,
        policy: match cfg.policy.mode {
            PolicyMode::Faithful => format!("faithful (native {native})"),
            PolicyMode::Any => "any".to_string(),
        },
        concurrency: cfg.concurrency,
        requests_per_second: cfg.requests_per_second,
        budget: cfg.budget(),
        spent,
        mean_output: opts.mean_output,
        stream_tps: opts.stream_tps,
        rule: TokenRule::DEFAULT,
        price_source,
        datasets,
        endpoints,
        notes,
    })
}

/// The spend ledger, read-only (through [`scan`], the one reader of an output directory).
#[derive(Debug, Default)]
struct LedgerFacts {
    spent: Usd,
    /// Prompt ids with a `complete` line.
    completes: HashSet<String>,
    /// Attempts dispatched or started and not closed: in flight, or left by a crash.
    open_attempts: u64,
    /// Damaged lines (see [`scan`]), and the first one's place.
    unreadable: u64,
    first_damage: Option<String>,
}

fn cannot(e: ScanError) -> BadInput {
    BadInput(e.to_string())
}

fn read_ledger(dir: &Path) -> Result<LedgerFacts, BadInput> {
    let scan = scan::scan_ledger(dir, |_| {}).map_err(cannot)?;
    Ok(LedgerFacts {
        spent: scan.total,
        open_attempts: scan.open_attempts(),
        unreadable: scan.file.damaged,
        first_damage: scan.file.damage_text(),
        completes: scan.completes,
    })
}

fn ledger_notes(ledger: &LedgerFacts, unbooked: Usd, dir: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    if ledger.open_attempts > 0 {
        let n = ledger.open_attempts;
        let (what, are) = if n == 1 {
            ("request", "is")
        } else {
            ("requests", "are")
        };
        notes.push(format!(
            "{} {what} {are} open in the ledger (in flight, or left by a crash): what they cost \
             is not in the spend yet",
            group_thousands(n)
        ));
    }
    if unbooked > Usd::ZERO {
        notes.push(format!(
            "{unbooked} of outputs with no ledger line (a crash between the two writes) counts \
             as spent"
        ));
    }
    if ledger.unreadable > 0 {
        notes.push(format!(
            "{}: {} lines could not be read: not counted{}",
            ledger_path(dir).display(),
            ledger.unreadable,
            damage_hint(ledger.first_damage.as_deref())
        ));
    }
    notes
}

/// What the output directory holds for one dataset.
#[derive(Debug, Default)]
struct DatasetOutputs {
    /// Ids with an output or a reject.
    done: HashSet<String>,
    observed: Observed,
    rejects: u64,
    /// Damaged lines (see [`scan`]), and the first one's place.
    unreadable: u64,
    first_damage: Option<String>,
    /// Cost of outputs whose ledger line is missing.
    unbooked: Usd,
}

impl DatasetOutputs {
    /// Adds another directory's records of the same dataset (a job's shards hold disjoint ids).
    fn absorb(&mut self, o: DatasetOutputs) {
        self.done.extend(o.done);
        let (a, b) = (&mut self.observed, o.observed);
        a.outputs += b.outputs;
        a.answers += b.answers;
        a.completion_tokens += b.completion_tokens;
        a.cut_thinking += b.cut_thinking;
        a.cut_thinking_at = a.cut_thinking_at.max(b.cut_thinking_at);
        self.rejects += o.rejects;
        self.unreadable += o.unreadable;
        self.first_damage = self.first_damage.take().or(o.first_damage);
        self.unbooked += o.unbooked;
    }
}

/// " (first: FILE:LINE ...; `harvest run --repair` quarantines them)" for a note.
fn damage_hint(first: Option<&str>) -> String {
    first.map_or(String::new(), |f| {
        format!(" (first: {f}; `harvest run --repair` quarantines them)")
    })
}

fn read_outputs(
    dir: &Path,
    dataset: &str,
    completes: &HashSet<String>,
    speeds: &mut HashMap<String, SpeedSample>,
) -> Result<DatasetOutputs, BadInput> {
    let mut answers = 0;
    let found = scan::scan_dataset(dir, dataset, completes, |r| {
        // A regenerated conversation is one answer per turn, each with its own speed.
        let turns: Vec<(Option<&String>, u64, u64)> = if r.turns.is_empty() {
            vec![(
                r.endpoint_tag.as_ref(),
                r.usage.completion_tokens,
                r.latency_ms,
            )]
        } else {
            (r.turns.iter())
                .map(|t| {
                    (
                        t.endpoint_tag.as_ref(),
                        t.usage.completion_tokens,
                        t.latency_ms,
                    )
                })
                .collect()
        };
        answers += turns.len() as u64;
        for (tag, tokens, ms) in turns {
            if let Some(tag) = tag
                && ms > 0
            {
                speeds
                    .entry(tag.clone())
                    .or_default()
                    .add(tokens, ms as f64 / 1000.0);
            }
        }
    })
    .map_err(cannot)?;
    let ex = found.existing;
    Ok(DatasetOutputs {
        done: ex.done.into_keys().collect(),
        observed: Observed {
            outputs: ex.outputs,
            answers,
            completion_tokens: ex.output_tokens,
            cut_thinking: ex.cut_thinking,
            cut_thinking_at: ex.cut_thinking_at,
        },
        rejects: ex.rejects,
        unreadable: found.outputs_file.damaged + found.rejects_file.damaged,
        first_damage: found
            .outputs_file
            .damage_text()
            .or(found.rejects_file.damage_text()),
        unbooked: found.unbooked,
    })
}

/// A prompt file against what is done.
#[derive(Debug, Default)]
struct PromptScan {
    valid: u64,
    bad: u64,
    first_bad: Option<String>,
    /// Valid prompts not done.
    fresh: u64,
    /// The fresh prompts that will be sent (the first `cap` of them).
    remaining: TextStats,
}

fn scan_prompts(
    path: &Path,
    done: &HashSet<String>,
    cap: Option<u64>,
    d: &crate::config::DatasetConfig,
) -> Result<PromptScan, BadInput> {
    let reader = PromptReader::open_as(path, &d.fields()).map_err(|e| BadInput(e.to_string()))?;
    let mut s = PromptScan::default();
    for item in reader {
        let mut p = match item {
            Ok(p) => p,
            Err(e) if e.is_io() => return Err(BadInput(e.to_string())),
            Err(e) => {
                s.bad += 1;
                s.first_bad.get_or_insert_with(|| e.to_string());
                continue;
            }
        };
        s.valid += 1;
        if done.contains(&p.id) {
            continue;
        }
        s.fresh += 1;
        if cap.is_some_and(|c| s.remaining.prompts >= c) {
            continue;
        }
        // What the engine sends: the system prompt where the prompt has none, then one
        // request per turn it generates, each with the history before it.
        with_system_prompt(&mut p, d.system_prompt.as_deref());
        let ends = request_ends(&p, d.turns);
        s.remaining.add_prompt(ends.len() as u64);
        for end in ends {
            for m in &p.messages[..end] {
                s.remaining.add_message(&m.content);
            }
        }
    }
    Ok(s)
}

fn bad_lines_note(name: &str, scan: &PromptScan, mode: OnBadLine) -> Option<String> {
    if scan.bad == 0 {
        return None;
    }
    let first = scan.first_bad.as_deref().unwrap_or("");
    Some(match mode {
        OnBadLine::Error => format!(
            "{name}: {} bad prompt lines are not counted, and `harvest run` refuses the file \
             until they are fixed or on_bad_line = \"skip\" (first: {first})",
            scan.bad
        ),
        OnBadLine::Skip => format!(
            "{name}: {} bad prompt lines are skipped (the run records them as rejects)",
            scan.bad
        ),
    })
}

/// The state of the run in `dir` when state.json says it has not ended.
fn live_state(dir: &Path) -> Option<RunState> {
    #[derive(Deserialize)]
    struct StateHead {
        state: RunState,
    }
    let text = std::fs::read_to_string(engine::state_path(dir)).ok()?;
    let head: StateHead = serde_json::from_str(&text).ok()?;
    matches!(
        head.state,
        RunState::Starting | RunState::Running | RunState::Paused | RunState::Draining
    )
    .then_some(head.state)
}

/// The endpoints that could serve the run, priced and judged by the policy, and where the
/// prices come from.
async fn offers(
    cfg: &Config,
    opts: &EstimateOptions,
    speeds: &HashMap<String, SpeedSample>,
) -> anyhow::Result<(Vec<EndpointOffer>, String)> {
    let mut out = Vec::new();
    let mut sources = Vec::new();
    // The probe's agreement counts as it would in a run from this output directory.
    let agreement = crate::probe::ProbeReport::agreement_in(&cfg.output_dir, &cfg.model)
        .map_err(|e| super::BadInput(e.to_string()))?;
    // The verdicts as the run gives them: with `[provider] zdr`, the ZDR list counts too.
    let mut judged = cfg.clone();
    let listing = if cfg.openrouter {
        let client =
            engine::client_for(cfg, opts.api_key.clone()).map_err(super::run::engine_error)?;
        let listing = super::providers::fetch(&client, &cfg.model).await?;
        if cfg.provider.zdr {
            let zdr = (client.zdr_tags(&cfg.model).await)
                .map_err(|e| anyhow::anyhow!("reading the ZDR endpoint list: {e}"))?;
            judged.policy.guards.zdr_tags = Some(zdr);
        }
        sources.push(format!(
            "the live endpoint listing of {} at {} (exact per-token prices after its discount, \
             per-request fees, and overrides by the dataset's mean prompt and the hour; no \
             cache reads assumed, and price changes during the run are not foreseen)",
            cfg.model,
            client.base_url()
        ));
        listing
    } else {
        crate::openrouter::ModelEndpoints::default()
    };
    if !cfg.endpoints.is_empty() {
        sources.push("the config's [[endpoint]] prices for its own servers".to_string());
    }
    // The endpoints a run would have, judged as the run would judge them.
    let pool = engine::pool::build(cfg, &listing);
    let (native, _) = cfg.policy.native_for(&cfg.model);
    for e in &pool {
        let as_listed = e
            .custom
            .is_none()
            .then(|| listing.endpoints.iter().find(|l| l.tag.as_str() == e.tag))
            .flatten();
        out.push(offer(&judged, &native, &agreement, e, as_listed, speeds));
    }
    Ok((out, sources.join("; ")))
}

/// What an endpoint of the pool offers: its prices, the policy's verdict on it as the run
/// would give it, its cap, and its speed (observed, else as listed).
fn offer(
    cfg: &Config,
    native: &Quantization,
    agreement: &HashMap<String, f64>,
    e: &crate::engine::endpoint::RunEndpoint,
    as_listed: Option<&Endpoint>,
    speeds: &HashMap<String, SpeedSample>,
) -> EndpointOffer {
    let listed_speed = as_listed.and_then(|l| {
        l.throughput_last_30m
            .and_then(|p| p.p50)
            .map(|tps| ListedSpeed {
                ttft_ms: l.latency_last_30m.and_then(|p| p.p50),
                tok_per_s: tps,
            })
    });
    EndpointOffer {
        tag: e.tag.clone(),
        provider: e.provider.clone(),
        quantization: e.quantization.clone(),
        fidelity: cfg.policy.fidelity(native, &e.quantization),
        price_in: e.price_in,
        price_out: e.price_out,
        price_request: as_listed
            .and_then(|l| l.pricing.request)
            .filter(|p| !p.is_zero()),
        tariff: as_listed.map(|_| {
            let at = crate::pricing::hhmm(&chrono::Utc::now());
            (e.tariff.clone(), at)
        }),
        excluded: cfg.policy.judge(native, e, agreement.get(&e.tag).copied()),
        own_server: e.custom.is_some(),
        stream_cap: match &e.custom {
            Some(c) => Some(c.concurrency),
            // Caps on OpenRouter endpoints hold in pinned routing only (where harvest chooses).
            None => (cfg.routing == Routing::Pinned)
                .then(|| cfg.endpoint_concurrency.get(&e.tag).copied())
                .flatten(),
        },
        observed_speed: speeds.get(&e.tag).copied(),
        listed_speed,
    }
}
