//! Table tests of the decision core: a hand-made clock, endpoints and prompts, results built
//! by hand; every test runs in microseconds and asserts on effects and state.

mod account;
mod admission;
mod answer_lengths;
mod answers;
mod attempt_money;
mod books;
mod budget;
mod carried_closes;
mod checks;
mod control;
mod outcome;
mod purity;
mod reserve;
mod routing;
mod scheduler;
mod settle;
mod simulation;
mod systematic;
mod text_rate;
mod turns;
mod verdict;

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::domain::{Price, Quantization, Usd};
use crate::openrouter::{ApiError, Completion, Message, Usage, UsageSource};
use crate::store::prompts::{Prompt, PromptError};

use super::super::endpoint::RunEndpoint;
use super::attempt::{AttemptOutcome, AttemptResult};
use super::{Clock, Core, DatasetBook, Dispatch, Effect, Event, Live, Port};

/// A config: `top` goes at the top level (before the one dataset table the parser wants).
/// A test config: `top` and one dataset, with the documented list of endpoints that stop the
/// bill at a close given as the operator's own (`cancel_stops_billing`), so that the hard
/// budget takes it at its word as these tests assume; [`config_documented`] leaves it to the
/// documents (the hard budget then checks it, `core::cancel_check`).
pub(super) fn config(top: &str) -> Config {
    if top.contains("cancel_stops_billing") {
        return config_documented(top);
    }
    let list = crate::engine::endpoint::CANCEL_STOPS_BILLING.map(|p| format!("\"{p}\""));
    config_documented(&format!(
        "cancel_stops_billing = [{}]\n{top}",
        list.join(", ")
    ))
}

/// A test config without a `cancel_stops_billing` list of its own.
pub(super) fn config_documented(top: &str) -> Config {
    let concurrency = if top.contains("concurrency =") {
        ""
    } else {
        "concurrency = 4\n"
    };
    let budget = if top.contains("budget_usd =") {
        ""
    } else {
        "budget_usd = 10.0\n"
    };
    let text = format!(
        "model = \"moonshotai/kimi-k2.5\"\n{budget}{concurrency}{top}\n\
         [[dataset]]\nname = \"a\"\nprompts = \"a.jsonl\"\n"
    );
    Config::parse_unchecked(&text, Path::new("test.toml")).expect("test config parses")
}

/// An OpenRouter endpoint at $`price_in`/$`price_out` per million tokens.
pub(super) fn ep(
    tag: &str,
    provider: &str,
    quant: &str,
    price_in: f64,
    price_out: f64,
) -> RunEndpoint {
    let (price_in, price_out) = (
        Price::per_million_f64(price_in).expect("price"),
        Price::per_million_f64(price_out).expect("price"),
    );
    RunEndpoint {
        tag: tag.into(),
        provider: provider.into(),
        quantization: Quantization::parse(quant),
        price_in,
        price_out,
        tariff: crate::pricing::Tariff::flat(price_in, price_out),
        supported_parameters: None,
        status: Some(0),
        uptime_30m: Some(99.0),
        context_length: Some(262_144),
        tokens_per_event: None,
        bytes_per_token: crate::engine::core::wire_rate::PRIOR_BYTES_PER_TOKEN,
        transit_tokens: crate::engine::core::close_transit::prior(1.0, None),
        cancel_stops_billing: super::super::endpoint::stops_billing_on_cancel(None, tag, provider),
        custom: None,
    }
}

/// Five endpoints of Kimi K2.5: three native int4 (Chutes cheapest, cancellable; Together
/// cancellable; Moonshot bills cancels), one re-quantized fp4 (cheaper still), one undisclosed.
pub(super) fn kimi() -> Vec<RunEndpoint> {
    vec![
        ep("chutes/int4", "Chutes", "int4", 0.40, 2.00),
        ep("together/int4", "Together", "int4", 0.50, 2.50),
        ep("moonshotai", "Moonshot AI", "int4", 0.60, 3.00),
        ep("baseten/fp4", "BaseTen", "fp4", 0.30, 1.50),
        ep("novita", "Novita", "unknown", 0.35, 1.80),
    ]
}

/// A dataset book named `name` with `max_tokens` as the config has it.
pub(super) fn book(name: &str, cfg: &Config) -> DatasetBook {
    DatasetBook {
        name: name.into(),
        params: cfg.request.clone(),
        total: 100,
        ..DatasetBook::default()
    }
}

pub(super) fn prompt(id: &str) -> Prompt {
    Prompt {
        id: id.into(),
        messages: vec![Message::user(format!("question {id}"))],
        line: 1,
    }
}

/// Prompts by dataset, handed out in order.
#[derive(Default)]
pub(super) struct Source(pub Vec<VecDeque<Result<Prompt, PromptError>>>);

impl Source {
    pub(super) fn ids(datasets: &[&[&str]]) -> Source {
        Source(
            datasets
                .iter()
                .map(|ids| ids.iter().map(|id| Ok(prompt(id))).collect())
                .collect(),
        )
    }
}

/// The test's port: its prompt lists, the counters it sets, each attempt's running cost.
struct TestPort<'a> {
    src: &'a mut Source,
    live: &'a Live,
    accrued: &'a HashMap<u64, i64>,
    tokens: &'a HashMap<u64, u64>,
}

impl Port for TestPort<'_> {
    fn next_prompt(&mut self, dataset: usize) -> Option<Result<Prompt, PromptError>> {
        self.src.0.get_mut(dataset)?.pop_front()
    }
    fn live(&self) -> Live {
        self.live.clone()
    }
    fn accrued_pico(&self, key: u64) -> i64 {
        self.accrued.get(&key).copied().unwrap_or(0)
    }
    fn streamed_tokens(&self, key: u64) -> u64 {
        self.tokens.get(&key).copied().unwrap_or(0)
    }
}

/// A core under test, with its clock, prompt source and the workers' counters.
pub(super) struct H {
    pub core: Core,
    pub t0: Clock,
    pub now: Clock,
    pub src: Source,
    pub live: Live,
    /// What each attempt has streamed so far (its running cost), picodollars, by key.
    pub accrued: HashMap<u64, i64>,
    /// What each attempt has received so far, whole tokens, by key.
    pub tokens: HashMap<u64, u64>,
    /// Effects of the last call other than spawns, look-ups and repricings.
    pub other: Vec<Effect>,
    /// Attempts the core started since the last [`H::dispatch`] (any event starts what fits
    /// once the run has begun).
    spawned: Vec<Dispatch>,
    /// Closed streams the core asked to look up, not yet taken.
    reconcile: Vec<(String, crate::store::output::SpendEntry)>,
    /// Endpoints a listing repriced, not yet taken.
    repriced: Vec<(usize, RunEndpoint)>,
    begun: bool,
}

impl H {
    /// A core over `endpoints` with one dataset per entry of `prompts`.
    pub(super) fn new(cfg: Config, endpoints: Vec<RunEndpoint>, prompts: &[&[&str]]) -> H {
        let books = (0..prompts.len())
            .map(|d| book(&format!("d{d}"), &cfg))
            .collect();
        H::with_books(cfg, endpoints, books, Source::ids(prompts))
    }

    pub(super) fn with_books(
        cfg: Config,
        endpoints: Vec<RunEndpoint>,
        books: Vec<DatasetBook>,
        src: Source,
    ) -> H {
        let t0 = Clock {
            mono: Instant::now(),
            wall: chrono::DateTime::from_timestamp(1_796_000_000, 0).expect("fixed time"),
        };
        let n = endpoints.len();
        let core = Core::new(
            cfg,
            books,
            Arc::new(endpoints),
            Usd::ZERO,
            None,
            "run".into(),
            &t0,
        );
        H {
            core,
            t0,
            now: t0,
            src,
            live: Live {
                spent_pico: 0,
                accrued_pico: 0,
                endpoint_in_flight: vec![0; n],
            },
            accrued: HashMap::new(),
            tokens: HashMap::new(),
            other: Vec::new(),
            spawned: Vec::new(),
            reconcile: Vec::new(),
            repriced: Vec::new(),
            begun: false,
        }
    }

    /// Hands `event` to the core; returns its effects but the spawns (kept for the next
    /// [`H::dispatch`]), look-ups and repricings (see [`H::take_reconcile`],
    /// [`H::take_repriced`]).
    pub(super) fn handle(&mut self, event: Event) -> Vec<Effect> {
        let mut port = TestPort {
            src: &mut self.src,
            live: &self.live,
            accrued: &self.accrued,
            tokens: &self.tokens,
        };
        let effects = self.core.handle(event, &mut port, &self.now);
        let mut rest = Vec::new();
        for e in effects {
            match e {
                Effect::Spawn(d) => {
                    if let Some(p) = d.pinned {
                        self.live.endpoint_in_flight[p] += 1;
                    }
                    self.spawned.push(*d);
                }
                Effect::LookUp { items, .. } => self.reconcile.extend(items),
                Effect::Repriced { index, endpoint } => self.repriced.push((index, *endpoint)),
                other => rest.push(other),
            }
        }
        rest
    }

    /// The periodic tick.
    pub(super) fn tick(&mut self) -> Vec<Effect> {
        self.handle(Event::Tick)
    }

    /// Closed streams the core asked to look up since the last call.
    pub(super) fn take_reconcile(&mut self) -> Vec<(String, crate::store::output::SpendEntry)> {
        std::mem::take(&mut self.reconcile)
    }

    /// Endpoints a listing repriced since the last call.
    pub(super) fn take_repriced(&mut self) -> Vec<(usize, RunEndpoint)> {
        std::mem::take(&mut self.repriced)
    }

    /// Moves the clock to `secs` after the start.
    pub(super) fn at(&mut self, secs: f64) -> &mut H {
        self.now = self.t0.after(Duration::from_secs_f64(secs));
        self
    }

    /// Starts what fits now (the first call begins the run); returns the attempts started
    /// since the last call (other effects in `other`).
    pub(super) fn dispatch(&mut self) -> Vec<Dispatch> {
        let event = if self.begun {
            Event::Wake
        } else {
            Event::Begin
        };
        self.begun = true;
        self.other = self.handle(event);
        std::mem::take(&mut self.spawned)
    }

    /// Hands a result to the core; returns its effects but the spawns.
    pub(super) fn result(&mut self, r: AttemptResult) -> Vec<Effect> {
        if let Some((_, Some(p))) = self.core.attempt_info(r.key) {
            self.live.endpoint_in_flight[p] -= 1;
        }
        self.accrued.remove(&r.key);
        self.handle(Event::Result(Box::new(r)))
    }

    pub(super) fn command(&mut self, c: crate::engine::Command) -> Vec<Effect> {
        self.handle(Event::Command(c))
    }

    /// The tags the core would route a fresh request to (pinned: one; openrouter: `only`).
    pub(super) fn route_tags(&mut self) -> Vec<String> {
        let now = self.now;
        match self.core.route(&now, None) {
            None => Vec::new(),
            Some(r) => match (r.pinned, r.prefs) {
                (Some(i), _) => vec![self.core.endpoints()[i].tag.clone()],
                (None, Some(p)) => p.only.unwrap_or_default(),
                (None, None) => Vec::new(),
            },
        }
    }

    pub(super) fn index(&self, tag: &str) -> usize {
        self.core
            .endpoints()
            .iter()
            .position(|e| e.tag == tag)
            .expect("known tag")
    }

    pub(super) fn event_texts(&self) -> Vec<String> {
        self.core.events().iter().map(|e| e.text.clone()).collect()
    }
}

/// A finished answer of `tokens` completion tokens costing `usd`, served at `endpoint`.
pub(super) fn done(
    key: u64,
    endpoint: Option<usize>,
    tokens: u64,
    usd: f64,
    finish: &str,
) -> AttemptResult {
    let c = Completion {
        id: Some(format!("gen-{key}")),
        provider: Some("Chutes".into()),
        model: Some("moonshotai/kimi-k2.5".into()),
        content: format!("answer {key}"),
        reasoning: Some("thinking".into()),
        tool_calls: Vec::new(),
        finish_reason: finish.into(),
        native_finish_reason: None,
        usage: Usage {
            prompt_tokens: 10,
            completion_tokens: tokens,
            total_tokens: 10 + tokens,
            cost: Some(usd),
            ..Usage::default()
        },
        usage_source: UsageSource::Reported,
        events: tokens,
        ttft: Some(Duration::from_millis(300)),
        latency: Duration::from_secs(2),
    };
    AttemptResult {
        key,
        outcome: AttemptOutcome::Done(Box::new(c)),
        endpoint,
        streamed_tokens: tokens,
        received_tokens: tokens,
        booked_pico: Usd::from_f64(usd).pico(),
        generation_id: Some(format!("gen-{key}")),
        elapsed: Duration::from_secs(2),
    }
}

pub(super) fn failed(key: u64, endpoint: Option<usize>, err: ApiError) -> AttemptResult {
    AttemptResult {
        key,
        outcome: AttemptOutcome::Failed(err),
        endpoint,
        streamed_tokens: 0,
        received_tokens: 0,
        booked_pico: 0,
        generation_id: None,
        elapsed: Duration::from_millis(100),
    }
}

/// A stream we closed after `streamed` tokens, booked at `booked_usd`.
pub(super) fn cancelled(
    key: u64,
    endpoint: Option<usize>,
    streamed: u64,
    booked_usd: f64,
) -> AttemptResult {
    AttemptResult {
        key,
        outcome: AttemptOutcome::Cancelled,
        endpoint,
        streamed_tokens: streamed,
        received_tokens: streamed,
        booked_pico: Usd::from_f64(booked_usd).pico(),
        generation_id: Some(format!("gen-{key}")),
        elapsed: Duration::from_secs(1),
    }
}

/// An HTTP error as the API sends it.
pub(super) fn http(status: u16, retry_after: Option<&str>, message: &str) -> ApiError {
    let body = serde_json::json!({"error": {"code": status, "message": message}});
    ApiError::from_response_body(status, retry_after, body.to_string().as_bytes())
}

/// The first ledger line of `kind` among `effects`.
pub(super) fn line_of(
    effects: &[Effect],
    kind: crate::store::output::SpendKind,
) -> Option<&crate::store::output::SpendEntry> {
    effects.iter().find_map(|x| match x {
        Effect::Ledger(l) if l.kind == kind => Some(l),
        _ => None,
    })
}

/// The answer of a look-up at `/generation` of `entry`: the API's `cost` (`None`: unknown
/// when the look-ups stopped asking) and the completion tokens it billed.
pub(super) fn found(
    entry: crate::store::output::SpendEntry,
    cost: Option<f64>,
    completion_tokens: Option<u64>,
) -> Box<crate::engine::look_ups::LookedUp> {
    Box::new(crate::engine::look_ups::LookedUp::Done {
        entry,
        cost,
        completion_tokens,
        said_before: false,
        unreached: None,
    })
}

/// The ledger lines among `effects`, as (kind, usd).
pub(super) fn ledger(effects: &[Effect]) -> Vec<(crate::store::output::SpendKind, Usd)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Ledger(l) | Effect::BookKept(l) => Some((l.kind, l.usd)),
            _ => None,
        })
        .collect()
}

pub(super) fn outputs(effects: &[Effect]) -> usize {
    effects
        .iter()
        .filter(|e| matches!(e, Effect::Output { .. }))
        .count()
}

/// The reject record among `effects`, if one.
pub(super) fn reject_record(effects: &[Effect]) -> Option<&crate::store::output::RejectRecord> {
    effects.iter().find_map(|e| match e {
        Effect::Reject { record, .. } => Some(record),
        _ => None,
    })
}

pub(super) fn rejects(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Reject { record, .. } => Some(record.error_kind.clone()),
            _ => None,
        })
        .collect()
}

/// Probe agreement per tag, for `set_probe`.
pub(super) fn agreement(pairs: &[(&str, f64)]) -> HashMap<String, f64> {
    pairs.iter().map(|(t, a)| (t.to_string(), *a)).collect()
}
