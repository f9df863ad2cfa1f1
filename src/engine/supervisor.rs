//! The supervisor: the one task that decides. It reads prompts, admits them against the token
//! and dollar budgets, routes each to the allowed endpoints, spawns attempts, books their
//! results (outputs, rejects, retries, spend), applies operator commands, and publishes a
//! [`Snapshot`] a few times a second. Workers only stream and count.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, OnBadLine, OnLength, RequestParams, Routing, Schedule};
use crate::domain::{Price, Quantization, Usd};
use crate::openrouter::{ApiError, Completion, ErrorKind, Message, ProviderPreferences};
use crate::store::output::{
    OutputRecord, RecordUsage, RejectRecord, SpendEntry, SpendKind, Turn, Writer,
};
use crate::store::prompts::{Prompt, PromptReader, shard_of};

use super::control::{Command, ShutdownMode};
use super::health::{BreakerState, Health, HealthEvent, backoff};
use super::policy::{EndpointFacts, Exclusion, PolicyConfig, PolicyMode};
use super::snapshot::{
    DatasetSnap, DatasetState, EndpointSnap, EventLine, HistoryPoint, RunState, Snapshot,
};
use super::stats::{Counters, Rate};
use super::worker::{
    AttemptOutcome, AttemptResult, AttemptSpec, Shared, estimate_prompt_tokens, run_attempt,
};

const EVENT_CAPACITY: usize = 200;
const HISTORY_CAPACITY: usize = 360;
const HISTORY_EVERY_S: f64 = 5.0;

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A prompt waiting for (another) attempt.
struct Job {
    dataset: usize,
    prompt: Prompt,
    /// Attempts already made.
    attempts: u32,
    last_error: Option<String>,
    /// The endpoint the last attempt failed at.
    failed_at: Option<usize>,
}

struct Pending {
    not_before: Instant,
    seq: u64,
    job: Job,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.not_before, self.seq) == (o.not_before, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.not_before, self.seq).cmp(&(o.not_before, o.seq))
    }
}

/// One dataset of the run.
pub(super) struct DatasetRun {
    pub name: String,
    pub params: RequestParams,
    pub system_prompt: Option<String>,
    pub reader: Option<PromptReader>,
    /// Ids finished or rejected by earlier runs (this run reads the file once, and the
    /// reader drops in-file duplicates, so ids finished now need not be kept).
    pub done_ids: HashSet<String>,
    pub total: u64,
    pub done: u64,
    pub rejected: u64,
    pub output_tokens: u64,
    pub spent: Usd,
    pub budget: Option<u64>,
    pub max_samples: Option<u64>,
    /// Finished this run (for the observed mean output length).
    pub finished_here: u64,
    pub output_tokens_here: u64,
    pub in_flight: u64,
    pub retries_pending: u64,
    pub exhausted: bool,
    pub budget_reached: bool,
    pub budget_event_sent: bool,
    pub rate: Rate,
}

/// One attempt in flight.
struct InFlight {
    job: Job,
    attempt: String,
    price_in: Price,
    price_out: Price,
    prompt_tokens: u64,
    endpoint: Option<usize>,
    expected_pico: i64,
    accrued: Arc<AtomicI64>,
}

pub(super) struct Supervisor {
    pub cfg: Config,
    pub shared: Arc<Shared>,
    pub writer: Writer,
    pub datasets: Vec<DatasetRun>,
    pub policy: PolicyConfig,
    pub native: Quantization,
    pub operator: Vec<Option<bool>>,
    pub health: Vec<Health>,
    pub carried_over: Usd,
    pub key_usage_start: Option<f64>,
    pub shard: Option<(u32, u32)>,
    pub state_path: PathBuf,
    concurrency: u32,
    paused: bool,
    stopping: Option<String>,
    stop_now: CancellationToken,
    retry: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    in_flight: HashMap<u64, InFlight>,
    reserved_pico: i64,
    next_dataset: usize,
    events: VecDeque<EventLine>,
    history: VecDeque<HistoryPoint>,
    last_history: f64,
    started: Instant,
    started_at: String,
    rng: SmallRng,
    rate: Rate,
    spend_rate: Rate,
    endpoint_rates: Vec<Rate>,
    retries: u64,
    budget_event_sent: bool,
    fatal: Option<String>,
    /// Streams we closed, to look up what they really cost.
    to_reconcile: Vec<(String, SpendEntry)>,
    /// Generations a crash of an earlier run left open.
    orphans: Vec<SpendEntry>,
    /// Requests a crash of an earlier run left before any answer.
    unknown: Vec<SpendEntry>,
    /// Prefix of this run's attempt keys.
    run_id: String,
    /// Under a requests-per-second cap, the earliest time of the next request.
    next_send_at: Option<Instant>,
    loop_lag_ms: f64,
    listed: Vec<Listed>,
    /// The policy's verdict per endpoint (see `refresh_verdicts`).
    verdicts: Vec<Option<Exclusion>>,
    /// Probe agreement per endpoint tag (`harvest probe`), for `policy.min_probe_agreement`.
    probe: HashMap<String, f64>,
    /// Quality deviations already reported (endpoint tag, kind).
    quality_reported: HashSet<(String, super::quality::Deviation)>,
    /// Tags of new endpoints already reported, so each is said once.
    reported_new: HashSet<String>,
}

/// What the latest listing says of an endpoint (refreshed every `catalog_refresh_s`).
#[derive(Clone, Debug)]
struct Listed {
    status: Option<i64>,
    uptime_30m: Option<f64>,
    /// Still in the listing (own servers always are).
    present: bool,
}

/// What is booked for a stream we closed.
struct ClosedAttempt {
    attempt: String,
    booked_pico: i64,
    generation_id: Option<String>,
    streamed_tokens: u64,
}

/// Most closed streams remembered for reconciliation (a cap hit closes at most `concurrency`).
const RECONCILE_CAPACITY: usize = 100_000;

/// What the run did, for the summary and the exit code.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub state: RunState,
    pub reason: Option<String>,
    /// A stop caused by the API (bad key, no credit): exit code 1.
    pub failed: bool,
    pub snapshot: Snapshot,
    /// How far spend went past the budget (zero when it did not).
    pub overshoot: Usd,
    /// Where the outputs are, and the datasets in config order (for the report).
    pub output_dir: std::path::PathBuf,
    pub datasets: Vec<String>,
}

impl Supervisor {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        cfg: Config,
        shared: Arc<Shared>,
        writer: Writer,
        datasets: Vec<DatasetRun>,
        carried_over: Usd,
        key_usage_start: Option<f64>,
        shard: Option<(u32, u32)>,
        state_path: PathBuf,
        orphans: Vec<SpendEntry>,
        unknown: Vec<SpendEntry>,
    ) -> Self {
        let policy = cfg.policy.clone();
        let (native, _) = policy.native_for(&cfg.model);
        let shared_ref_endpoints = shared.endpoints();
        let n = shared.endpoints().len();
        let health = (0..n)
            .map(|_| Health::new(cfg.breaker.failures, cfg.breaker.cooldown()))
            .collect();
        let mut sup = Supervisor {
            concurrency: cfg.concurrency,
            cfg,
            writer,
            datasets,
            policy,
            native,
            operator: vec![None; n],
            health,
            carried_over,
            key_usage_start,
            shard,
            state_path,
            paused: false,
            stopping: None,
            stop_now: CancellationToken::new(),
            shared,
            retry: BinaryHeap::new(),
            seq: 0,
            in_flight: HashMap::new(),
            reserved_pico: 0,
            next_dataset: 0,
            events: VecDeque::new(),
            history: VecDeque::new(),
            last_history: -HISTORY_EVERY_S,
            started: Instant::now(),
            started_at: now_rfc3339(),
            rng: SmallRng::seed_from_u64(0x4841_5256),
            rate: Rate::new(10.0),
            spend_rate: Rate::new(60.0),
            endpoint_rates: (0..n).map(|_| Rate::new(10.0)).collect(),
            retries: 0,
            budget_event_sent: false,
            fatal: None,
            to_reconcile: Vec::new(),
            orphans,
            unknown,
            run_id: format!("{:x}", chrono::Utc::now().timestamp_millis()),
            next_send_at: None,
            loop_lag_ms: 0.0,
            listed: shared_listed(&shared_ref_endpoints),
            reported_new: HashSet::new(),
            verdicts: Vec::new(),
            probe: HashMap::new(),
            quality_reported: HashSet::new(),
        };
        sup.refresh_verdicts();
        sup
    }

    fn event(&mut self, text: impl Into<String>) {
        let text = text.into();
        tracing::info!("{text}");
        if self.events.len() >= EVENT_CAPACITY {
            self.events.pop_front();
        }
        self.events.push_back(EventLine {
            at_s: self.started.elapsed().as_secs_f64(),
            text,
        });
    }

    /// The policy verdict of endpoint `i`, before health and operator choices (cached: it only
    /// changes with the policy or the listing, not per request).
    fn policy_exclusion(&self, i: usize) -> Option<&Exclusion> {
        self.verdicts.get(i).and_then(Option::as_ref)
    }

    /// Recomputes every endpoint's policy verdict; after a preset or a listing refresh.
    fn refresh_verdicts(&mut self) {
        let eps = self.shared.endpoints();
        self.verdicts = eps
            .iter()
            .zip(&self.listed)
            .map(|(e, l)| {
                self.policy.verdict_with_probe(
                    &self.native,
                    &EndpointFacts {
                        tag: &crate::domain::EndpointTag::new(e.tag.clone()),
                        provider_name: &e.provider,
                        quantization: &e.quantization,
                        uptime_30m: l.uptime_30m,
                    },
                    self.probe.get(&e.tag).copied(),
                )
            })
            .collect();
    }

    /// Events for endpoints whose answers stand out from the others' (once per endpoint and
    /// kind of deviation).
    fn report_quality(&mut self, endpoints: &[super::snapshot::EndpointSnap]) {
        for f in super::quality::deviations(endpoints) {
            if self.quality_reported.insert((f.tag.clone(), f.kind)) {
                self.event(f.text);
            }
        }
    }

    /// Takes the probe's agreement per endpoint into the policy.
    pub(super) fn set_probe(&mut self, agreement: HashMap<String, f64>) {
        self.probe = agreement;
        self.refresh_verdicts();
    }

    /// Allowed by operator and policy (health aside).
    fn permitted(&self, i: usize) -> bool {
        match self.operator[i] {
            Some(v) => v,
            None => self.policy_exclusion(i).is_none(),
        }
    }

    fn why_off(&self, i: usize, now: Instant) -> Option<String> {
        if !self.listed[i].present {
            return Some("gone from the listing".into());
        }
        if self.operator[i] == Some(false) {
            return Some("operator".into());
        }
        if self.operator[i].is_none()
            && let Some(x) = self.policy_exclusion(i)
        {
            return Some(x.to_string());
        }
        let h = &self.health[i];
        if let Some(d) = h.open_for(now) {
            return Some(format!("breaker {}s", d.as_secs()));
        }
        if h.state() == BreakerState::HalfOpen {
            return Some("breaker: probing".into());
        }
        if let Some(d) = h.rate_limited_for(now) {
            return Some(format!("429 wait {:.0}s", d.as_secs_f64().ceil()));
        }
        None
    }

    /// Output tokens a request of dataset `d` is expected to produce. Short answers finish
    /// first, so the mean of the first finishers is biased low: until as many have finished as
    /// are in flight (a whole wave), the estimate is never below a prior of
    /// min(max_tokens, 2048).
    fn expected_output_tokens(&self, d: usize) -> u64 {
        let ds = &self.datasets[d];
        let prior = u64::from(ds.params.max_tokens).min(2048);
        let mean = (ds.finished_here > 0).then(|| ds.output_tokens_here / ds.finished_here);
        match mean {
            Some(m) if ds.finished_here >= ds.in_flight.max(30) => m.max(1),
            Some(m) => m.max(prior),
            None => prior,
        }
    }

    fn admitting(&self, d: usize) -> bool {
        let ds = &self.datasets[d];
        if ds.exhausted {
            return false;
        }
        if let Some(cap) = ds.max_samples
            && ds.done + ds.in_flight + ds.retries_pending >= cap
        {
            return false;
        }
        if let Some(b) = ds.budget {
            let expected = ds.output_tokens + ds.in_flight * self.expected_output_tokens(d);
            if expected >= b {
                return false;
            }
        }
        true
    }

    /// Reads the next fresh prompt of dataset `d` (skipping finished, other shards and, in
    /// skip mode, bad lines, which go to the rejects file).
    async fn next_prompt(&mut self, d: usize) -> Option<Prompt> {
        loop {
            let item = self.datasets[d].reader.as_mut()?.next();
            let Some(item) = item else {
                self.datasets[d].exhausted = true;
                self.datasets[d].reader = None;
                return None;
            };
            match item {
                Ok(mut p) => {
                    if self.shard.is_some_and(|(k, n)| shard_of(&p.id, n) != k) {
                        continue;
                    }
                    if self.datasets[d].done_ids.contains(&p.id) {
                        continue;
                    }
                    if let Some(sys) = &self.datasets[d].system_prompt
                        && p.messages.first().is_none_or(|m| m.role != "system")
                    {
                        p.messages.insert(0, Message::system(sys.clone()));
                    }
                    return Some(p);
                }
                Err(_) if self.shard.is_some_and(|(k, _)| k != 0) => continue,
                Err(e) => {
                    // The pre-scan refused bad lines in error mode, so this is skip mode.
                    let id = format!("@line:{}", e.line);
                    if !self.datasets[d].done_ids.contains(&id) {
                        self.datasets[d].rejected += 1;
                        let rec = RejectRecord {
                            id,
                            line: Some(e.line),
                            error: e.to_string(),
                            error_kind: "input".into(),
                            attempts: 0,
                            created_at: now_rfc3339(),
                        };
                        if let Err(err) = self.writer.reject(d, &rec).await {
                            self.fatal = Some(err.to_string());
                        }
                    }
                }
            }
        }
    }

    /// The next job to dispatch: a due retry first, then a fresh prompt by the schedule.
    async fn next_job(&mut self, now: Instant) -> Option<Job> {
        if let Some(Reverse(p)) = self.retry.peek()
            && p.not_before <= now
        {
            let Reverse(p) = self.retry.pop()?;
            self.datasets[p.job.dataset].retries_pending -= 1;
            return Some(p.job);
        }
        let n = self.datasets.len();
        for k in 0..n {
            let d = match self.cfg.schedule {
                Schedule::Interleaved => (self.next_dataset + k) % n,
                Schedule::Sequential => k,
            };
            if self.cfg.schedule == Schedule::Sequential
                && !self.dataset_finished(d)
                && !self.admitting(d)
            {
                // In sequence, a dataset that is still running holds the line.
                if self.datasets[d].in_flight > 0 || self.datasets[d].retries_pending > 0 {
                    return None;
                }
                continue;
            }
            if !self.admitting(d) {
                continue;
            }
            if let Some(p) = self.next_prompt(d).await {
                self.next_dataset = (d + 1) % n;
                return Some(Job {
                    dataset: d,
                    prompt: p,
                    attempts: 0,
                    last_error: None,
                    failed_at: None,
                });
            }
        }
        None
    }

    fn dataset_finished(&self, d: usize) -> bool {
        let ds = &self.datasets[d];
        ds.in_flight == 0 && ds.retries_pending == 0 && (ds.exhausted || !self.admitting(d))
    }

    /// Chooses where the job goes: `(pinned endpoint, provider preferences, price in, price out)`.
    fn route(
        &mut self,
        now: Instant,
        avoid: Option<usize>,
    ) -> Option<(Option<usize>, Option<ProviderPreferences>, Price, Price)> {
        let n = self.shared.endpoints().len();
        let mut candidates: Vec<usize> = Vec::new();
        for i in 0..n {
            if self.listed[i].present && self.permitted(i) && self.health[i].available(now) {
                candidates.push(i);
            }
        }
        if let Some(a) = avoid
            && candidates.len() > 1
        {
            candidates.retain(|&i| i != a);
        }
        if candidates.is_empty() {
            return None;
        }
        let eps = self.shared.endpoints();
        let stats = &self.shared.endpoint_stats;
        // Caps: an endpoint at its cap takes no more until one finishes (the operator's own
        // servers always; OpenRouter endpoints in pinned routing, where we choose them).
        candidates.retain(|&i| {
            let in_flight = Counters::get(&stats[i].in_flight);
            let cap = match &eps[i].custom {
                Some(c) => Some(c.concurrency),
                None => self.cfg.endpoint_concurrency.get(&eps[i].tag).copied(),
            };
            cap.is_none_or(|cap| in_flight < u64::from(cap))
        });
        let cheapest = |list: &mut dyn Iterator<Item = usize>| {
            list.min_by(|&a, &b| {
                (
                    eps[a].price_out,
                    eps[a].price_in,
                    Counters::get(&stats[a].in_flight),
                )
                    .cmp(&(
                        eps[b].price_out,
                        eps[b].price_in,
                        Counters::get(&stats[b].in_flight),
                    ))
            })
        };
        let own = cheapest(
            &mut candidates
                .iter()
                .copied()
                .filter(|&i| eps[i].custom.is_some()),
        );
        let pin = |i: usize| {
            let e = &eps[i];
            let prefs = e
                .custom
                .is_none()
                .then(|| ProviderPreferences::pinned(&e.tag));
            Some((Some(i), prefs, e.price_in, e.price_out))
        };
        match self.cfg.routing {
            Routing::Pinned => {
                let best = cheapest(&mut candidates.into_iter())?;
                pin(best)
            }
            Routing::Openrouter => {
                // An own server with room goes first when it is no dearer than OpenRouter.
                candidates.retain(|&i| eps[i].custom.is_none());
                let cheapest_or = cheapest(&mut candidates.iter().copied());
                if let Some(o) = own
                    && cheapest_or.is_none_or(|c| eps[o].price_out <= eps[c].price_out)
                {
                    return pin(o);
                }
                if candidates.is_empty() {
                    return None;
                }
                let tags: Vec<String> = candidates.iter().map(|&i| eps[i].tag.clone()).collect();
                // A base slug in `only` also matches its other variants: ignore those we did
                // not allow.
                let bases: HashSet<&str> = tags
                    .iter()
                    .map(|t| t.split('/').next().unwrap_or(t))
                    .collect();
                let ignore: Vec<String> = (0..n)
                    .filter(|i| !candidates.contains(i))
                    .filter(|&i| {
                        bases.contains(eps[i].tag.split('/').next().unwrap_or(&eps[i].tag))
                    })
                    .map(|i| eps[i].tag.clone())
                    .collect();
                let price_in = candidates.iter().map(|&i| eps[i].price_in).max()?;
                let price_out = candidates.iter().map(|&i| eps[i].price_out).max()?;
                let mut prefs = ProviderPreferences::only(tags);
                prefs.allow_fallbacks = Some(self.policy.allow_fallbacks);
                if !ignore.is_empty() {
                    prefs.ignore = Some(ignore);
                }
                // When the allowed set is the quantization policy alone (no operator choices,
                // no include list), say so to OpenRouter too: a variant it routes to under an
                // allowed slug must still be of an allowed precision.
                let pure_filter = self.policy.mode == PolicyMode::Faithful
                    && self.policy.include.is_empty()
                    && self.operator.iter().all(Option::is_none)
                    && !self.policy.allow_unknown;
                if pure_filter {
                    let mut qs: Vec<Quantization> = Vec::new();
                    for &i in &candidates {
                        if !qs.contains(&eps[i].quantization) {
                            qs.push(eps[i].quantization.clone());
                        }
                    }
                    prefs.quantizations = Some(qs);
                }
                Some((None, Some(prefs), price_in, price_out))
            }
        }
    }

    fn committed_pico(&self) -> i64 {
        self.shared.spent_pico.load(Ordering::Relaxed)
            + self.shared.accrued_pico.load(Ordering::Relaxed)
            + self.reserved_pico
    }

    /// What in-flight requests are still expected to cost, with today's expectations: the
    /// observed mean output length replaces the guess each was dispatched with.
    fn recompute_reserved(&mut self) {
        let expected: Vec<u64> = (0..self.datasets.len())
            .map(|d| self.expected_output_tokens(d))
            .collect();
        let eps = self.shared.endpoints();
        let mut total = 0;
        for f in self.in_flight.values_mut() {
            let out = f.price_out.cost(expected[f.job.dataset]).pico();
            f.expected_pico = f.price_in.cost(f.prompt_tokens).pico() + out;
            let mut remaining = (f.expected_pico - f.accrued.load(Ordering::Relaxed)).max(0);
            // Output lengths have a long tail: an answer already past the mean is likely to go
            // on. Where closing a stream does not stop the bill, keep half a mean answer in
            // reserve for every stream, however far along it is.
            let cancellable = f.endpoint.is_some_and(|e| eps[e].cancel_stops_billing);
            if !cancellable {
                remaining = remaining.max(out / 2);
            }
            total += remaining;
        }
        self.reserved_pico = total;
    }

    fn can_dispatch(&self) -> bool {
        self.stopping.is_none()
            && !self.paused
            && self.fatal.is_none()
            && (self.in_flight.len() as u64) < u64::from(self.concurrency)
            && self.next_send_at.is_none_or(|t| t <= Instant::now())
    }

    /// Spaces requests out under `requests_per_second` (a burst of at most one second's worth).
    fn note_sent(&mut self) {
        let Some(rps) = self.cfg.requests_per_second.filter(|r| *r > 0.0) else {
            return;
        };
        let gap = Duration::from_secs_f64(1.0 / rps);
        let now = Instant::now();
        let base = self
            .next_send_at
            .map_or(now, |t| t.max(now - Duration::from_secs(1)));
        self.next_send_at = Some(base + gap);
    }

    /// Dispatches as many jobs as the limits allow right now.
    async fn dispatch(&mut self, tasks: &mut JoinSet<AttemptResult>) {
        let now = Instant::now();
        while self.can_dispatch() {
            // Nothing to route to: do not even take a job.
            if self.route(now, None).is_none() {
                return;
            }
            let Some(job) = self.next_job(now).await else {
                return;
            };
            // A retry goes elsewhere than where it just failed, when there is elsewhere.
            let Some((pinned, prefs, price_in, price_out)) = self.route(now, job.failed_at) else {
                self.requeue_front(job);
                return;
            };
            // Dollar budget: what is spent, accrued and still expected must leave room for one
            // more average request.
            let d = job.dataset;
            let prompt_tokens = estimate_prompt_tokens(&job.prompt);
            let expected_out = self.expected_output_tokens(d);
            let expected = price_in.cost(prompt_tokens) + price_out.cost(expected_out);
            if self.committed_pico() + expected.pico() > self.shared.budget_pico {
                self.requeue_front(job);
                if self.in_flight.is_empty() {
                    // Not even one more average request fits: the run is over.
                    self.begin_stop("dollar budget reached");
                } else if !self.budget_event_sent {
                    // Wait for in-flight requests to settle what they really cost.
                    self.budget_event_sent = true;
                    self.event(format!(
                        "dollar budget nearly committed ({} of {}): dispatching only as requests finish",
                        Usd::from_pico(self.committed_pico()),
                        Usd::from_pico(self.shared.budget_pico)
                    ));
                }
                return;
            }
            self.spawn(
                tasks,
                job,
                pinned,
                prefs,
                price_in,
                price_out,
                prompt_tokens,
                expected,
            )
            .await;
        }
    }

    /// Puts a job back for the next run or the next dispatch, without counting an attempt.
    fn requeue_front(&mut self, job: Job) {
        self.datasets[job.dataset].retries_pending += 1;
        self.seq += 1;
        self.retry.push(Reverse(Pending {
            not_before: Instant::now(),
            seq: self.seq,
            job,
        }));
    }

    #[allow(clippy::too_many_arguments)]
    async fn spawn(
        &mut self,
        tasks: &mut JoinSet<AttemptResult>,
        job: Job,
        pinned: Option<usize>,
        prefs: Option<ProviderPreferences>,
        price_in: Price,
        price_out: Price,
        prompt_tokens: u64,
        expected: Usd,
    ) {
        let d = job.dataset;
        let mut req = self.datasets[d]
            .params
            .chat_request(&self.cfg.model, job.prompt.messages.clone());
        let eps = self.shared.endpoints();
        if let Some(c) = pinned.and_then(|e| eps[e].custom.as_ref()) {
            req.model = c.model.clone();
            for (k, v) in &c.extra {
                req.extra.insert(k.clone(), v.clone());
            }
            // vLLM and SGLang report usage in a stream only when asked.
            req.stream_options = Some(crate::openrouter::request::StreamOptions {
                include_usage: true,
            });
        }
        // Pinned requests require every parameter they send: drop what the endpoint does not
        // list rather than have OpenRouter refuse the request.
        if let Some(e) = pinned {
            if let Some(sp) = &self.shared.endpoints()[e].supported_parameters {
                let has = |p: &str| sp.iter().any(|s| s == p);
                if !has("temperature") {
                    req.temperature = None;
                }
                if !has("top_p") {
                    req.top_p = None;
                }
                if !has("top_k") {
                    req.top_k = None;
                }
                if !has("seed") {
                    req.seed = None;
                }
            }
            self.health[e].on_dispatch();
            self.shared.endpoint_stats[e]
                .in_flight
                .fetch_add(1, Ordering::Relaxed);
        }
        req.provider = prefs;
        self.seq += 1;
        let key = self.seq;
        let attempt = format!("{}-{key}", self.run_id);
        // Written before the request leaves: a crash from here on is accounted for.
        self.book_spend(SpendEntry {
            at: now_rfc3339(),
            id: job.prompt.id.clone(),
            dataset: self.datasets[d].name.clone(),
            endpoint: pinned.map(|e| self.shared.endpoints()[e].tag.clone()),
            kind: SpendKind::Dispatched,
            usd: Usd::ZERO,
            prompt_tokens,
            completion_tokens: 0,
            estimated: true,
            generation_id: None,
            attempt: Some(attempt.clone()),
            expected_usd: Some(expected),
            error: None,
        })
        .await;
        let accrued = Arc::new(AtomicI64::new(0));
        let cancel = self.stop_now.child_token();
        let spec = AttemptSpec {
            key,
            dataset: d,
            dataset_name: self.datasets[d].name.clone(),
            prompt_id: job.prompt.id.clone(),
            attempt: attempt.clone(),
            request: req,
            pinned,
            price_out_guess: price_out,
            price_in_guess: price_in,
            prompt_tokens_estimate: prompt_tokens,
            accrued: accrued.clone(),
        };
        self.datasets[d].in_flight += 1;
        self.shared.dataset_stats[d]
            .in_flight
            .fetch_add(1, Ordering::Relaxed);
        self.shared.totals.in_flight.fetch_add(1, Ordering::Relaxed);
        self.reserved_pico += expected.pico();
        self.in_flight.insert(
            key,
            InFlight {
                job,
                attempt,
                endpoint: pinned,
                expected_pico: expected.pico(),
                accrued,
                price_in,
                price_out,
                prompt_tokens,
            },
        );
        tasks.spawn(run_attempt(self.shared.clone(), spec, cancel));
        self.note_sent();
    }

    fn begin_stop(&mut self, reason: &str) {
        if self.stopping.is_none() {
            self.stopping = Some(reason.to_string());
            self.event(format!("stopping: {reason}"));
        }
    }

    fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::Pause => {
                self.paused = true;
                self.event("paused: no new requests");
            }
            Command::Resume => {
                self.paused = false;
                self.event("resumed");
            }
            Command::SetConcurrency(n) => {
                self.concurrency = n.clamp(1, 100_000);
                self.event(format!("concurrency set to {}", self.concurrency));
            }
            Command::AdjustConcurrency(delta) => {
                let n = (i64::from(self.concurrency) + delta).clamp(1, 100_000);
                self.concurrency = n as u32;
                self.event(format!("concurrency set to {}", self.concurrency));
            }
            Command::SetEndpoint { tag, allowed } => {
                for i in self.endpoint_indices(&tag) {
                    self.operator[i] = allowed;
                }
                self.event(match allowed {
                    Some(true) => format!("operator included {tag} (applies to the next request)"),
                    Some(false) => format!("operator excluded {tag} (applies to the next request)"),
                    None => format!("{tag} follows the policy again"),
                });
            }
            Command::ToggleEndpoint(tag) => {
                let idx = self.endpoint_indices(&tag);
                if let Some(&first) = idx.first() {
                    let now_allowed = self.permitted(first);
                    self.apply(Command::SetEndpoint {
                        tag,
                        allowed: Some(!now_allowed),
                    });
                }
            }
            Command::Preset(mode) => {
                self.policy.mode = mode;
                self.refresh_verdicts();
                self.operator.iter_mut().for_each(|o| *o = None);
                self.event(match mode {
                    PolicyMode::Faithful => format!("policy: faithful (native {})", self.native),
                    PolicyMode::Any => "policy: any quantization".to_string(),
                });
            }
            Command::Shutdown(ShutdownMode::Drain) => {
                self.begin_stop("operator: drain");
            }
            Command::Shutdown(ShutdownMode::Now) => {
                self.begin_stop("operator: stop now");
                self.stop_now.cancel();
            }
        }
    }

    fn endpoint_indices(&self, tag: &str) -> Vec<usize> {
        self.shared
            .endpoints()
            .iter()
            .enumerate()
            .filter(|(_, e)| e.tag == tag)
            .map(|(i, _)| i)
            .collect()
    }

    fn schedule_retry(&mut self, mut job: Job, err: &ApiError) {
        let unit: f64 = self.rng.random();
        let wait = backoff(
            job.attempts,
            self.cfg.retry.base_delay(),
            self.cfg.retry.max_delay(),
            err.retry_after(),
            unit,
        );
        job.last_error = Some(err.to_string());
        self.retries += 1;
        self.datasets[job.dataset].retries_pending += 1;
        self.seq += 1;
        self.retry.push(Reverse(Pending {
            not_before: Instant::now() + wait,
            seq: self.seq,
            job,
        }));
    }

    async fn reject(&mut self, job: Job, error: String, kind: &str) {
        let d = job.dataset;
        self.datasets[d].rejected += 1;
        let rec = RejectRecord {
            id: job.prompt.id,
            line: Some(job.prompt.line),
            error,
            error_kind: kind.to_string(),
            attempts: job.attempts,
            created_at: now_rfc3339(),
        };
        if let Err(e) = self.writer.reject(d, &rec).await {
            self.fatal = Some(e.to_string());
        }
    }

    /// Books a stream we closed at our estimate and remembers it for reconciliation.
    async fn book_closed(
        &mut self,
        job: &Job,
        endpoint: Option<usize>,
        r: &ClosedAttempt,
        error: Option<ErrorKind>,
    ) {
        let d = job.dataset;
        let entry = SpendEntry {
            at: now_rfc3339(),
            id: job.prompt.id.clone(),
            dataset: self.datasets[d].name.clone(),
            endpoint: endpoint.map(|e| self.shared.endpoints()[e].tag.clone()),
            kind: SpendKind::Cancelled,
            usd: Usd::from_pico(r.booked_pico),
            prompt_tokens: estimate_prompt_tokens(&job.prompt),
            completion_tokens: r.streamed_tokens,
            estimated: true,
            generation_id: r.generation_id.clone(),
            attempt: Some(r.attempt.clone()),
            expected_usd: None,
            error: error.map(|k| k.to_string()),
        };
        if let Some(g) = &r.generation_id
            && self.to_reconcile.len() < RECONCILE_CAPACITY
        {
            self.to_reconcile.push((g.clone(), entry.clone()));
        }
        self.book_spend(entry).await;
    }

    /// Books what an earlier run left open: into the live spend, the carried-over figure and the
    /// ledger (closing the open line).
    async fn book_carried(&mut self, open: SpendEntry, kind: SpendKind, usd: Usd, estimated: bool) {
        self.shared
            .spent_pico
            .fetch_add(usd.pico(), Ordering::Relaxed);
        self.carried_over += usd;
        self.book_spend(SpendEntry {
            at: now_rfc3339(),
            kind,
            usd,
            estimated,
            expected_usd: None,
            error: None,
            ..open
        })
        .await;
    }

    /// Books requests a crash left before any answer at their expected cost: the API cannot
    /// be asked about them, and the budget must not assume they were free.
    async fn book_unknown(&mut self) {
        let unknown = std::mem::take(&mut self.unknown);
        if unknown.is_empty() {
            return;
        }
        let n = unknown.len();
        let mut total = Usd::ZERO;
        for e in unknown {
            let usd = e.expected_usd.unwrap_or_default();
            total += usd;
            self.book_carried(e, SpendKind::Unknown, usd, true).await;
        }
        self.event(format!(
            "an earlier run stopped with {n} requests sent but unanswered: booked at their expected cost, {:.6} USD",
            total.as_f64()
        ));
    }

    /// Folds a fresh listing in: status and uptime of known endpoints, endpoints that left
    /// (no longer routed to), endpoints that came back, and new ones (reported; a restart
    /// brings them into the run, where the policy or the operator decides).
    fn apply_listing(&mut self, listing: crate::openrouter::ModelEndpoints) {
        let eps = self.shared.endpoints();
        for (i, e) in eps.iter().enumerate().filter(|(_, e)| e.custom.is_none()) {
            let found = listing
                .endpoints
                .iter()
                .find(|l| l.tag.as_str() == e.tag && l.provider_name == e.provider);
            match found {
                Some(l) => {
                    if !self.listed[i].present {
                        self.event(format!("{} is listed again", e.tag));
                    }
                    self.listed[i] = Listed {
                        status: l.status,
                        uptime_30m: l.uptime_last_30m,
                        present: true,
                    };
                }
                None if self.listed[i].present => {
                    self.listed[i].present = false;
                    self.event(format!(
                        "{} left the model's listing: no more requests go there",
                        e.tag
                    ));
                }
                None => {}
            }
        }
        for l in &listing.endpoints {
            let known = eps.iter().any(|e| e.tag == l.tag.as_str());
            if known || !self.reported_new.insert(l.tag.to_string()) {
                continue;
            }
            let e = super::worker::RunEndpoint {
                tag: l.tag.to_string(),
                provider: l.provider_name.clone(),
                quantization: l.quantization.clone(),
                price_in: l.pricing.prompt,
                price_out: l.pricing.completion,
                max_completion_tokens: l.max_completion_tokens,
                supported_parameters: l.supported_parameters.clone(),
                status: l.status,
                uptime_30m: l.uptime_last_30m,
                cancel_stops_billing: super::worker::stops_billing_on_cancel(
                    self.cfg.cancel_stops_billing.as_deref(),
                    l.tag.as_str(),
                    &l.provider_name,
                ),
                custom: None,
            };
            let what = format!(
                "{} {} ({}, {} out)",
                l.provider_name, l.tag, l.quantization, l.pricing.completion
            );
            match self.shared.add_endpoint(e) {
                Some(i) => {
                    self.operator.push(None);
                    self.health.push(Health::new(
                        self.cfg.breaker.failures,
                        self.cfg.breaker.cooldown(),
                    ));
                    self.listed.push(Listed {
                        status: l.status,
                        uptime_30m: l.uptime_last_30m,
                        present: true,
                    });
                    self.endpoint_rates.push(Rate::new(10.0));
                    self.refresh_verdicts();
                    let verdict = match self.policy_exclusion(i) {
                        None => "allowed by the policy".to_string(),
                        Some(x) => format!("not used ({x}); space includes it"),
                    };
                    self.event(format!("new endpoint listed: {what}: {verdict}"));
                }
                None => self.event(format!(
                    "new endpoint listed: {what}; restart the run to consider it"
                )),
            }
        }
        self.refresh_verdicts();
    }

    /// Looks up what each generation left open by a crash cost, and books it.
    async fn recover_orphans(&mut self) {
        let orphans = std::mem::take(&mut self.orphans);
        if orphans.is_empty() {
            return;
        }
        let n = orphans.len();
        let found = self
            .look_up(
                orphans
                    .into_iter()
                    .filter_map(|e| Some((e.generation_id.clone()?, e)))
                    .collect(),
            )
            .await;
        let mut total = Usd::ZERO;
        let mut booked = 0;
        for (entry, cost) in found {
            let Some(cost) = cost else { continue };
            let usd = Usd::from_f64(cost);
            booked += 1;
            total += usd;
            self.book_carried(entry, SpendKind::Recovered, usd, false)
                .await;
        }
        self.event(format!(
            "an earlier run stopped with {n} requests in flight: {booked} found at the API, {:.6} USD booked{}",
            total.as_f64(),
            if booked < n { "; the others are unknown to the API" } else { "" }
        ));
    }

    /// `GET /generation` for each entry: 32 at a time, a few tries each (the API answers 404
    /// for a moment after a generation ends), 60 s in all.
    async fn look_up(
        &mut self,
        items: Vec<(String, SpendEntry)>,
    ) -> Vec<(SpendEntry, Option<f64>)> {
        use futures::StreamExt;
        if items.is_empty() || !self.shared.client.has_key() {
            return Vec::new();
        }
        let client = self.shared.client.clone();
        let lookups = futures::stream::iter(items.into_iter().map(|(id, entry)| {
            let client = client.clone();
            async move {
                for attempt in 0..8u32 {
                    match client.generation(&id).await {
                        Ok(g) => return (entry, g.total_cost),
                        Err(e) if e.status() == Some(404) || e.is_retryable() => {
                            tokio::time::sleep(Duration::from_millis(250 * u64::from(attempt + 1)))
                                .await;
                        }
                        Err(_) => break,
                    }
                }
                (entry, None)
            }
        }))
        .buffer_unordered(32)
        .collect::<Vec<_>>();
        match tokio::time::timeout(Duration::from_secs(60), lookups).await {
            Ok(r) => r,
            Err(_) => {
                self.event(
                    "looking up generations with /generation timed out: their cost stays estimated",
                );
                Vec::new()
            }
        }
    }

    /// Asks the API what each closed stream really cost and books the difference, so the
    /// ledger matches the bill and not our estimate. Bounded: a few tries per generation
    /// (the API answers 404 for a moment after the end), 32 at a time, 60 s in all.
    async fn reconcile(&mut self) {
        let items = std::mem::take(&mut self.to_reconcile);
        let results = self.look_up(items).await;
        let (mut fixed, mut delta_total) = (0u64, Usd::ZERO);
        for (entry, actual) in results {
            let Some(actual) = actual else { continue };
            let delta = Usd::from_f64(actual) - entry.usd;
            fixed += 1;
            if delta != Usd::ZERO {
                delta_total += delta;
                self.shared
                    .spent_pico
                    .fetch_add(delta.pico(), Ordering::Relaxed);
                self.book_spend(SpendEntry {
                    at: now_rfc3339(),
                    kind: SpendKind::Adjustment,
                    usd: delta,
                    estimated: false,
                    ..entry
                })
                .await;
            }
        }
        if fixed > 0 {
            self.event(format!(
                "reconciled {fixed} closed streams with /generation: {:+.6} USD",
                delta_total.as_f64()
            ));
        }
    }

    /// Writes a ledger line (the worker already booked the amount into the live spend).
    async fn book_spend(&mut self, entry: SpendEntry) {
        if let Some(d) = self.datasets.iter_mut().find(|d| d.name == entry.dataset) {
            d.spent += entry.usd;
        }
        if let Err(e) = self.writer.spend(&entry).await {
            self.fatal = Some(e.to_string());
        }
    }

    async fn on_result(&mut self, r: AttemptResult) {
        let Some(f) = self.in_flight.remove(&r.key) else {
            return;
        };
        self.reserved_pico -= (f.expected_pico - r.accrued_pico).max(0);
        let mut job = f.job;
        job.attempts += 1;
        let d = job.dataset;
        self.datasets[d].in_flight -= 1;
        self.shared.dataset_stats[d]
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
        self.shared.totals.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Some(e) = f.endpoint {
            self.shared.endpoint_stats[e]
                .in_flight
                .fetch_sub(1, Ordering::Relaxed);
        }
        let endpoint = r.endpoint;
        let r_streamed = r.streamed_tokens;
        let now = Instant::now();
        let closed = ClosedAttempt {
            attempt: f.attempt.clone(),
            booked_pico: r.booked_pico,
            generation_id: r.generation_id.clone(),
            streamed_tokens: r.streamed_tokens,
        };
        match r.outcome {
            AttemptOutcome::Done(mut c) => {
                let cost = Usd::from_pico(r.booked_pico);
                if r.generation_id.is_some() {
                    c.id = r.generation_id.clone();
                }
                self.on_done(job, *c, endpoint, r.elapsed, cost, &f.attempt)
                    .await
            }
            AttemptOutcome::Cancelled => {
                // We closed it; the provider may bill what it generated: book our estimate,
                // corrected from `GET /generation` at the end of the run.
                self.book_closed(&job, endpoint, &closed, None).await;
                // Not done and not rejected: a resume will take it again.
            }
            AttemptOutcome::Failed(err) => {
                let kind = err.kind();
                tracing::debug!(prompt = %job.prompt.id, attempt = %f.attempt, "attempt failed: {err}");
                self.shared.totals.error(kind);
                self.shared.dataset_stats[d].error(kind);
                if let Some(e) = endpoint {
                    self.shared.endpoint_stats[e].error(kind);
                    if kind == ErrorKind::RateLimited {
                        let wait = err.retry_after().unwrap_or(Duration::from_secs(2));
                        self.health[e].on_rate_limited(now, wait);
                    } else if err.is_retryable()
                        && let Some(HealthEvent::Opened { failures, cooldown }) =
                            self.health[e].on_failure(now)
                    {
                        let tag = self.shared.endpoints()[e].tag.clone();
                        self.event(format!(
                                "breaker opened: {tag} after {failures} failures in a row ({}); probe in {}s",
                                kind.label(),
                                cooldown.as_secs()
                            ));
                    }
                }
                // A timeout is our own close: the provider may bill what it generated.
                if kind == ErrorKind::Timeout {
                    self.book_closed(&job, endpoint, &closed, Some(kind)).await;
                } else {
                    self.book_spend(SpendEntry {
                        at: now_rfc3339(),
                        id: job.prompt.id.clone(),
                        dataset: self.datasets[d].name.clone(),
                        endpoint: endpoint.map(|e| self.shared.endpoints()[e].tag.clone()),
                        kind: SpendKind::Failed,
                        usd: Usd::ZERO,
                        prompt_tokens: 0,
                        completion_tokens: r_streamed,
                        estimated: false,
                        generation_id: closed.generation_id.clone(),
                        attempt: Some(closed.attempt.clone()),
                        expected_usd: None,
                        error: Some(kind.to_string()),
                    })
                    .await;
                }
                let own_server = endpoint.filter(|&e| self.shared.endpoints()[e].custom.is_some());
                if let (Some(e), true) = (own_server, err.stops_dispatch()) {
                    // One of the operator's own servers refused us: take it out, go on.
                    let tag = self.shared.endpoints()[e].tag.clone();
                    self.operator[e] = Some(false);
                    self.event(format!(
                        "{tag} refused the request ({err}): excluded; check its api_key_env"
                    ));
                    job.failed_at = endpoint;
                    self.schedule_retry(job, &err);
                } else if let (Some(e), ErrorKind::NotFound) = (f.endpoint, kind)
                    && self.shared.endpoints()[e].custom.is_none()
                    && job.attempts < self.cfg.retry.max_attempts
                {
                    // A pinned endpoint OpenRouter no longer has: out of routing until the
                    // listing shows it again; the prompt goes elsewhere.
                    if self.listed[e].present {
                        let tag = self.shared.endpoints()[e].tag.clone();
                        self.listed[e].present = false;
                        self.event(format!(
                            "{tag} is not served any more ({err}): taken out of routing"
                        ));
                    }
                    job.failed_at = endpoint;
                    self.schedule_retry(job, &err);
                } else if err.stops_dispatch() {
                    let msg = match kind {
                        ErrorKind::Auth => format!(
                            "the API key was refused ({err}): check {}",
                            self.cfg.api_key_env
                        ),
                        _ => format!("out of credit ({err}): add credit or raise the key's limit"),
                    };
                    self.event(msg.clone());
                    self.fatal = Some(msg.clone());
                    self.begin_stop(&msg);
                    self.requeue_front(job);
                } else if err.is_retryable() && job.attempts < self.cfg.retry.max_attempts {
                    job.failed_at = endpoint;
                    self.schedule_retry(job, &err);
                } else {
                    let why = if err.is_retryable() {
                        format!("{err} (after {} attempts)", job.attempts)
                    } else {
                        err.to_string()
                    };
                    self.reject(job, why, kind.label()).await;
                }
            }
        }
    }

    async fn on_done(
        &mut self,
        job: Job,
        c: Completion,
        endpoint: Option<usize>,
        elapsed: Duration,
        cost: Usd,
        attempt: &str,
    ) {
        let d = job.dataset;
        if let Some(e) = endpoint
            && let Some(HealthEvent::Closed) = self.health[e].on_success()
        {
            let tag = self.shared.endpoints()[e].tag.clone();
            self.event(format!("breaker closed: {tag} answered again"));
        }
        let truncated = c.finish_reason == "length";
        let shared = self.shared.clone();
        let eps_now = shared.endpoints();
        let ep = endpoint.map(|e| &eps_now[e]);
        // Whatever happens to the text, the response was paid for.
        self.book_spend(SpendEntry {
            at: now_rfc3339(),
            id: job.prompt.id.clone(),
            dataset: self.datasets[d].name.clone(),
            endpoint: ep.map(|e| e.tag.clone()),
            kind: SpendKind::Complete,
            usd: cost,
            prompt_tokens: c.usage.prompt_tokens,
            completion_tokens: c.usage.completion_tokens,
            estimated: c.cost().is_none(),
            generation_id: c.id.clone(),
            attempt: Some(attempt.to_string()),
            expected_usd: None,
            error: None,
        })
        .await;
        let counters: Vec<&Counters> = [Some(&shared.totals), Some(&shared.dataset_stats[d])]
            .into_iter()
            .chain([endpoint.map(|e| &shared.endpoint_stats[e])])
            .flatten()
            .collect();
        for k in &counters {
            k.spent_pico.fetch_add(cost.pico(), Ordering::Relaxed);
            k.prompt_tokens
                .fetch_add(c.usage.prompt_tokens, Ordering::Relaxed);
            k.output_tokens
                .fetch_add(c.usage.completion_tokens, Ordering::Relaxed);
            if truncated {
                k.truncated.fetch_add(1, Ordering::Relaxed);
            }
            k.record_timing(
                c.ttft.map(|t| t.as_millis() as u64),
                elapsed.as_millis() as u64,
            );
        }
        if truncated
            && job.attempts < self.cfg.retry.max_attempts
            && self.cfg.retry.on_length == OnLength::Retry
        {
            let err =
                ApiError::Truncated("finish_reason length (retrying per retry.on_length)".into());
            self.schedule_retry(job, &err);
            return;
        }
        if truncated && self.cfg.retry.on_length != OnLength::Keep {
            self.reject(
                job,
                "finish_reason length: cut at max_tokens".into(),
                "length",
            )
            .await;
            return;
        }
        for k in &counters {
            k.done.fetch_add(1, Ordering::Relaxed);
        }
        let mut conversations: Vec<Turn> = job
            .prompt
            .messages
            .iter()
            .map(|m| Turn {
                role: m.role.clone(),
                content: m.content.clone(),
                reasoning_content: None,
            })
            .collect();
        conversations.push(Turn {
            role: "assistant".into(),
            content: c.content,
            reasoning_content: c.reasoning,
        });
        let params = serde_json::to_value(&self.datasets[d].params).unwrap_or_default();
        let rec = OutputRecord {
            id: job.prompt.id.clone(),
            conversations,
            provider: match ep {
                Some(e) if e.custom.is_some() => e.provider.clone(),
                _ => c.provider.clone().unwrap_or_else(|| "?".into()),
            },
            endpoint_tag: ep.map(|e| e.tag.clone()),
            quantization: ep.map(|e| e.quantization.to_string()),
            model: c.model.unwrap_or_else(|| self.cfg.model.clone()),
            finish_reason: c.finish_reason,
            truncated,
            usage: RecordUsage {
                prompt_tokens: c.usage.prompt_tokens,
                completion_tokens: c.usage.completion_tokens,
                reasoning_tokens: c.usage.reasoning_tokens(),
                source: match c.usage_source {
                    crate::openrouter::UsageSource::Reported => "reported".into(),
                    crate::openrouter::UsageSource::CountedEvents => "counted".into(),
                },
            },
            cost_usd: cost,
            ttft_ms: c.ttft.map(|t| t.as_millis() as u64),
            latency_ms: elapsed.as_millis() as u64,
            attempts: job.attempts,
            created_at: now_rfc3339(),
            generation_id: c.id,
            params,
        };
        if let Err(e) = self.writer.output(d, &rec).await {
            self.fatal = Some(e.to_string());
            return;
        }
        let ds = &mut self.datasets[d];
        ds.done += 1;
        ds.output_tokens += rec.usage.completion_tokens;
        ds.finished_here += 1;
        ds.output_tokens_here += rec.usage.completion_tokens;
    }

    /// Updates dataset states and emits an event the first time a budget is reached. Not
    /// sticky: if in-flight answers come in shorter than expected, the dataset takes prompts
    /// again until its budget is met.
    fn update_datasets(&mut self) {
        for d in 0..self.datasets.len() {
            let ds = &self.datasets[d];
            let over_tokens = ds.budget.is_some_and(|b| {
                ds.output_tokens + ds.in_flight * self.expected_output_tokens(d) >= b
            });
            let over_samples = ds
                .max_samples
                .is_some_and(|m| ds.done + ds.in_flight + ds.retries_pending >= m);
            let reached = (over_tokens || over_samples) && !ds.exhausted;
            if reached && !ds.budget_event_sent {
                let name = ds.name.clone();
                let what = if over_tokens {
                    "output-token budget"
                } else {
                    "sample cap"
                };
                self.datasets[d].budget_event_sent = true;
                self.event(format!("{name}: {what} reached; in-flight requests finish"));
            }
            self.datasets[d].budget_reached = reached;
        }
    }

    pub(super) fn snapshot(&mut self) -> Snapshot {
        let now = Instant::now();
        let t = self.started.elapsed().as_secs_f64();
        let sh = &self.shared;
        let streamed = Counters::get(&sh.totals.streamed_tokens) as f64;
        let tok_per_s = self.rate.update(t, streamed);
        let spent = Usd::from_pico(sh.spent_pico.load(Ordering::Relaxed));
        let accrued = Usd::from_pico(sh.accrued_pico.load(Ordering::Relaxed).max(0));
        let usd_per_min = self.spend_rate.update(t, (spent + accrued).as_f64()) * 60.0;
        let mut datasets = Vec::with_capacity(self.datasets.len());
        for d in 0..self.datasets.len() {
            let finished = self.dataset_finished(d);
            let ds = &mut self.datasets[d];
            let ds_streamed = Counters::get(&sh.dataset_stats[d].streamed_tokens) as f64;
            let rate = ds.rate.update(t, ds_streamed);
            let remaining_prompts = ds.total.saturating_sub(ds.done + ds.rejected);
            let state = if finished && (ds.exhausted || ds.budget_reached || remaining_prompts == 0)
            {
                DatasetState::Done
            } else if self.stopping.is_some() && ds.in_flight == 0 {
                DatasetState::Stopped
            } else if ds.budget_reached {
                DatasetState::BudgetReached
            } else if ds.in_flight > 0 || ds.done > 0 {
                DatasetState::Running
            } else {
                DatasetState::Queued
            };
            let eta_s = match ds.budget {
                Some(b) if rate > 0.0 => Some(b.saturating_sub(ds.output_tokens) as f64 / rate),
                _ if ds.finished_here > 0 && rate > 0.0 => {
                    let mean = ds.output_tokens_here as f64 / ds.finished_here as f64;
                    Some(remaining_prompts as f64 * mean / rate)
                }
                _ => None,
            }
            .filter(|_| state != DatasetState::Done);
            datasets.push(DatasetSnap {
                name: ds.name.clone(),
                total: ds.total,
                done: ds.done,
                rejected: ds.rejected,
                in_flight: ds.in_flight,
                output_tokens: ds.output_tokens,
                output_token_budget: ds.budget,
                max_samples: ds.max_samples,
                tok_per_s: rate,
                spent: ds.spent,
                eta_s,
                state,
            });
        }
        let eps = sh.endpoints();
        let mut endpoints = Vec::with_capacity(eps.len());
        for (i, e) in eps.iter().enumerate() {
            let c = &sh.endpoint_stats[i];
            let rate = self.endpoint_rates[i].update(t, Counters::get(&c.streamed_tokens) as f64);
            let done = Counters::get(&c.done);
            let finished = done + Counters::get(&c.truncated).min(done);
            let ttft = c.ttft();
            let errs = c.errors_by_kind();
            let why_off = self.why_off(i, now);
            endpoints.push(EndpointSnap {
                tag: e.tag.clone(),
                provider: e.provider.clone(),
                quantization: e.quantization.to_string(),
                fidelity: self.policy.fidelity(&self.native, &e.quantization),
                price_in_per_m: price_per_m(e.price_in),
                price_out_per_m: price_per_m(e.price_out),
                status: self.listed[i].status,
                uptime_30m: self.listed[i].uptime_30m,
                allowed: why_off.is_none(),
                why_off,
                operator: self.operator[i],
                breaker: self.health[i].state(),
                in_flight: Counters::get(&c.in_flight),
                done,
                errors: Counters::get(&c.failed_attempts),
                top_error: errs.first().map(|(k, n)| (k.label().to_string(), *n)),
                tok_per_s: rate,
                ttft_p50_ms: ttft.p50,
                ttft_p95_ms: ttft.p95,
                mean_output_tokens: (done > 0)
                    .then(|| Counters::get(&c.output_tokens) as f64 / done as f64),
                truncation_rate: (finished > 0)
                    .then(|| Counters::get(&c.truncated) as f64 / done.max(1) as f64),
                empty_rate: {
                    let empty = c.errors[ErrorKind::Empty.index()].load(Ordering::Relaxed);
                    (done + empty > 0).then(|| empty as f64 / (done + empty) as f64)
                },
                spent: Usd::from_pico(c.spent_pico.load(Ordering::Relaxed)),
            });
        }
        if t - self.last_history >= HISTORY_EVERY_S {
            self.last_history = t;
            if self.history.len() >= HISTORY_CAPACITY {
                self.history.pop_front();
            }
            self.history.push_back(HistoryPoint {
                at_s: t,
                tok_per_s,
                usd_per_min,
            });
        }
        let total: u64 = self.datasets.iter().map(|d| d.total).sum();
        let done: u64 = self.datasets.iter().map(|d| d.done).sum();
        let rejected: u64 = self.datasets.iter().map(|d| d.rejected).sum();
        let eta_s = datasets
            .iter()
            .filter_map(|d| d.eta_s)
            .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))));
        let budget = Usd::from_pico(sh.budget_pico);
        let projected = if self.stopping.is_some() {
            // No more dispatch: what is spent, accrued and still expected of in-flight requests.
            Some(Usd::from_pico(self.committed_pico().max(0)))
        } else {
            eta_s.map(|eta| {
                let p = (spent + accrued).as_f64() + usd_per_min / 60.0 * eta;
                Usd::from_f64(p.min(budget.as_f64()))
            })
        };
        let eta_s = if self.stopping.is_some() { None } else { eta_s };
        let state = if self.paused && self.stopping.is_none() {
            RunState::Paused
        } else if self.stopping.is_some() {
            RunState::Draining
        } else if self.in_flight.is_empty() && done == 0 && t < 1.0 {
            RunState::Starting
        } else {
            RunState::Running
        };
        Snapshot {
            model: self.cfg.model.clone(),
            routing: match self.cfg.routing {
                Routing::Openrouter => "openrouter".into(),
                Routing::Pinned => "pinned".into(),
            },
            policy: match self.policy.mode {
                PolicyMode::Faithful => format!("faithful (native {})", self.native),
                PolicyMode::Any => "any".into(),
            },
            state,
            reason: self.stopping.clone(),
            started_at: self.started_at.clone(),
            elapsed_s: t,
            concurrency_limit: self.concurrency,
            in_flight: self.in_flight.len() as u64,
            budget,
            spent,
            carried_over: self.carried_over,
            accrued,
            projected,
            done,
            rejected,
            total,
            retries: self.retries,
            output_tokens: Counters::get(&sh.totals.output_tokens),
            prompt_tokens: Counters::get(&sh.totals.prompt_tokens),
            tok_per_s,
            usd_per_min,
            eta_s,
            datasets,
            endpoints,
            events: self.events.iter().rev().take(50).rev().cloned().collect(),
            history: self.history.iter().copied().collect(),
            loop_lag_ms: self.loop_lag_ms,
            key_usage_start: self.key_usage_start,
            key_usage_now: None,
        }
    }

    fn all_finished(&self) -> bool {
        (0..self.datasets.len()).all(|d| self.dataset_finished(d))
    }

    /// Runs until the work is done or the run is stopped; returns the summary.
    pub(super) async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        publish: watch::Sender<Arc<Snapshot>>,
        tick_every: Duration,
    ) -> RunSummary {
        self.recover_orphans().await;
        self.book_unknown().await;
        let mut tasks: JoinSet<AttemptResult> = JoinSet::new();
        let mut tick = tokio::time::interval(tick_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut last_state_write = Instant::now() - Duration::from_secs(10);
        let budget_hit = self.shared.budget_hit.clone();
        let mut budget_handled = false;
        let refresh_every = self.cfg.catalog_refresh();
        let mut next_refresh = refresh_every.map(|d| Instant::now() + d);
        let mut refreshing: Option<
            tokio::task::JoinHandle<
                Result<crate::openrouter::ModelEndpoints, crate::openrouter::ApiError>,
            >,
        > = None;
        let mut commands_open = true;
        loop {
            self.dispatch(&mut tasks).await;
            let stop_done = self.stopping.is_some() && self.in_flight.is_empty();
            if (self.all_finished() && self.in_flight.is_empty()) || stop_done {
                break;
            }
            let next_retry = self.retry.peek().map(|Reverse(p)| p.not_before);
            // Wake for a due retry, or when the rate cap lets the next request go.
            let next_retry = match (
                next_retry,
                self.next_send_at.filter(|t| *t > Instant::now()),
            ) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            tokio::select! {
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(c) => self.apply(c),
                    None => commands_open = false,
                },
                Some(res) = tasks.join_next(), if !tasks.is_empty() => {
                    match res {
                        Ok(r) => self.on_result(r).await,
                        Err(e) => {
                            tracing::error!("an attempt task failed: {e}");
                            self.fatal = Some(format!("internal error: {e}"));
                        }
                    }
                }
                _ = budget_hit.cancelled(), if !budget_handled => {
                    budget_handled = true;
                    self.event(format!(
                        "dollar budget reached ({}): closing {} in-flight requests where that stops the bill; the others run to the end (they are paid for)",
                        Usd::from_pico(self.shared.budget_pico),
                        self.in_flight.len()
                    ));
                    self.begin_stop("dollar budget reached");
                }
                _ = async {
                    match next_retry {
                        Some(t) => tokio::time::sleep_until(t.into()).await,
                        None => std::future::pending().await,
                    }
                }, if next_retry.is_some() && !self.paused => {}
                listing = async {
                    match refreshing.as_mut() {
                        Some(h) => h.await,
                        None => std::future::pending().await,
                    }
                }, if refreshing.is_some() => {
                    refreshing = None;
                    match listing {
                        Ok(Ok(l)) => self.apply_listing(l),
                        Ok(Err(e)) => tracing::warn!("refreshing the endpoint listing failed: {e}"),
                        Err(e) => tracing::warn!("the listing refresh task failed: {e}"),
                    }
                }
                at = tick.tick() => {
                    if let (Some(every), Some(due)) = (refresh_every, next_refresh)
                        && Instant::now() >= due
                        && refreshing.is_none()
                    {
                        next_refresh = Some(Instant::now() + every);
                        let client = self.shared.client.clone();
                        let model = self.cfg.model.clone();
                        refreshing = Some(tokio::spawn(async move { client.endpoints(&model).await }));
                    }
                    let lag = at.elapsed().as_secs_f64() * 1000.0;
                    self.loop_lag_ms = lag.max(self.loop_lag_ms * 0.8);
                    self.recompute_reserved();
                    self.update_datasets();
                    let snap = Arc::new(self.snapshot());
                    self.report_quality(&snap.endpoints);
                    if last_state_write.elapsed() >= Duration::from_secs(1) {
                        last_state_write = Instant::now();
                        write_state(&self.state_path, &snap);
                    }
                    publish.send_replace(snap);
                }
            }
            if self.fatal.is_some() && self.stopping.is_none() {
                let msg = self.fatal.clone().unwrap_or_default();
                self.begin_stop(&msg);
            }
        }
        self.reconcile().await;
        if let Err(e) = self.writer.flush().await {
            self.fatal = Some(e.to_string());
        }
        self.update_datasets();
        let mut snap = self.snapshot();
        let done_all = self.stopping.is_none() || self.all_finished() && self.retry.is_empty();
        snap.state = if self.stopping.is_none() && done_all {
            RunState::Done
        } else {
            RunState::Stopped
        };
        let total_spent = snap.spent;
        let overshoot = total_spent.saturating_sub(snap.budget).max(Usd::ZERO);
        if overshoot > Usd::ZERO {
            self.event(format!(
                "spend {} exceeded the budget by {} (tokens in transit when the cap hit)",
                total_spent, overshoot
            ));
            snap.events = self.events.iter().rev().take(50).rev().cloned().collect();
        }
        write_state(&self.state_path, &snap);
        publish.send_replace(Arc::new(snap.clone()));
        RunSummary {
            state: snap.state,
            reason: self.stopping.clone(),
            failed: self.fatal.is_some(),
            snapshot: snap,
            overshoot,
            output_dir: Default::default(),
            datasets: Vec::new(),
        }
    }
}

fn shared_listed(endpoints: &[super::worker::RunEndpoint]) -> Vec<Listed> {
    endpoints
        .iter()
        .map(|e| Listed {
            status: e.status,
            uptime_30m: e.uptime_30m,
            present: true,
        })
        .collect()
}

fn price_per_m(p: Price) -> f64 {
    use rust_decimal::prelude::ToPrimitive;
    p.usd_per_million().to_f64().unwrap_or(f64::NAN)
}

pub(super) fn write_state(path: &std::path::Path, snap: &Snapshot) {
    match serde_json::to_vec_pretty(snap) {
        Ok(bytes) => {
            if let Err(e) = crate::store::output::write_atomic(path, &bytes) {
                tracing::warn!("cannot write {}: {e}", path.display());
            }
        }
        Err(e) => tracing::warn!("cannot serialise the state: {e}"),
    }
}

pub(super) fn ready_dataset(
    d: &crate::config::DatasetConfig,
    params: RequestParams,
    reader: PromptReader,
    existing: crate::store::output::ExistingDataset,
    total: u64,
) -> DatasetRun {
    DatasetRun {
        name: d.name.clone(),
        params,
        system_prompt: d.system_prompt.clone(),
        reader: Some(reader),
        done_ids: existing.done.into_keys().collect(),
        total,
        done: existing.outputs,
        rejected: existing.rejects,
        output_tokens: existing.output_tokens,
        spent: existing.cost,
        budget: d.output_token_budget,
        max_samples: d.max_samples,
        finished_here: 0,
        output_tokens_here: 0,
        in_flight: 0,
        retries_pending: 0,
        exhausted: false,
        budget_reached: false,
        budget_event_sent: false,
        rate: Rate::new(10.0),
    }
}

/// For `OnBadLine` checks in `engine::start`.
pub(super) fn skip_bad_lines(cfg: &Config) -> bool {
    cfg.on_bad_line == OnBadLine::Skip
}
