//! The engine's decisions, pure: every money and routing choice of a run lives here, as plain
//! state changed by events (an operator command, an attempt's result, a tick, a listing) with
//! the time passed in, returning [`Effect`]s as data for the driver (`supervisor.rs`) to
//! perform. Nothing here awaits, reads a clock, or touches a file or a socket; a test drives
//! it with a hand-made clock and checks the effects.
//!
//! The rooms: `admission` (which prompt goes next, dataset budgets), `budget` (the dollar
//! reservation and the request-rate cap), `routing` (which endpoints may serve, and how a
//! request is routed), `outcome` (what an attempt's result means: book, keep, retry, reject,
//! stop), `control` (operator commands, listing refreshes, quality findings, crash leftovers).

pub(crate) mod account;
mod admission;
pub(super) mod answer_lengths;
pub(crate) mod attempt;
pub(crate) mod attempt_money;
pub(crate) mod attribution;
mod books;
mod budget;
pub(crate) mod cancel_billing;
pub(crate) mod cancel_check;
pub(crate) mod close_read;
pub(crate) mod close_transit;
mod context;
mod control;
pub(crate) mod cut_watch;
mod dispatch;
mod events;
mod failure;
mod fleet;
mod held_bills;
mod journal;
mod late_stop;
mod outcome;
pub(crate) mod params;
mod port;
mod reserve;
mod routing;
mod row;
pub(crate) mod settle;
mod systematic;
#[cfg(test)]
mod tests;
pub(crate) mod think;
pub(crate) mod turns;
pub(crate) mod verdict;
pub(crate) mod wire_rate;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::config::{Config, RequestParams};
use crate::domain::{Price, Quantization, Usd};
use crate::store::output::SpendEntry;
use crate::store::prompts::Prompt;

use super::endpoint::RunEndpoint;
use super::health::Health;
use super::reason::StopReason;
use super::snapshot::EventLine;
use crate::policy::PolicyConfig;

pub(crate) use super::clock::Clock;
pub(crate) use attempt::Dispatch;
pub(crate) use budget::overshoot;
pub(crate) use events::{Effect, Event};
pub(crate) use port::{Live, Port};
pub(crate) use routing::Route;
pub(crate) use verdict::reject_kinds;

/// A prompt waiting for (another) attempt.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    pub dataset: usize,
    pub prompt: Prompt,
    /// Attempts already made (those an endpoint's 429 turned away not counted).
    pub attempts: u32,
    /// Attempts an endpoint's 429 turned away: they say nothing of the prompt, and count
    /// against [`MAX_RATE_LIMITED`] only.
    pub rate_limited: u32,
    /// The endpoint the last attempt failed at.
    pub failed_at: Option<usize>,
    /// The turns the model has written so far (`turns = "all"`); `attempts` counts the
    /// current turn's.
    pub done_turns: Vec<turns::DoneTurn>,
    /// A multi-turn row started in this run: what each of its later turns is expected to cost,
    /// held for them in [`budget::Budget::owed_pico`] until each goes out.
    pub row_owed: Option<Usd>,
}

/// Attempts of one prompt 429s may turn away before it is rejected (at the pace of their
/// `Retry-After`s, minutes).
pub(super) const MAX_RATE_LIMITED: u32 = 60;

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

/// What the core knows of one dataset.
#[derive(Clone, Debug, Default)]
pub(crate) struct DatasetBook {
    pub name: String,
    pub params: RequestParams,
    /// The parameters its requests send, as listings name them (filled by [`Core::new`]).
    pub sends: Vec<&'static str>,
    pub system_prompt: Option<String>,
    pub turns: crate::config::Turns,
    /// Ids finished or rejected by earlier runs (this run reads the file once, and the
    /// reader drops in-file duplicates, so ids finished now need not be kept).
    pub done_ids: HashSet<String>,
    /// Multi-turn rows earlier runs left in progress: their finished turns, by id (taken when
    /// the row's prompt comes up).
    pub in_progress: crate::store::turns_file::InProgress,
    pub total: u64,
    pub done: u64,
    pub rejected: u64,
    pub output_tokens: u64,
    pub spent: Usd,
    pub budget: Option<u64>,
    pub max_samples: Option<u64>,
    /// Lines of its file skipped because an earlier line had their id.
    pub duplicates: u64,
    /// Answers (requests, each turn of a row) finished this run, for the observed mean
    /// output length of a request.
    pub finished_here: u64,
    pub output_tokens_here: u64,
    /// Rows written this run (for the time left).
    pub rows_here: u64,
    pub in_flight: u64,
    pub retries_pending: u64,
    /// Its prompt file is read to the end.
    pub exhausted: bool,
    /// Its token budget or sample cap is reached (not sticky: see `update_datasets`).
    pub budget_reached: bool,
    pub budget_event_sent: bool,
}

/// One attempt in flight.
struct InFlight {
    job: Job,
    attempt: String,
    price_in: Price,
    price_out: Price,
    prompt_tokens: u64,
    endpoint: Option<usize>,
    /// The endpoints OpenRouter may pick for it (routed), or none (pinned).
    over: Vec<usize>,
    /// Sent through OpenRouter (not to an own server): counted against the account's gate.
    openrouter: bool,
    expected_pico: i64,
    /// It checks endpoint `.0`'s close (closed after a few tokens, `cancel_check`).
    check: Option<usize>,
    /// Its prompt at its price plus the request fee: the part of its expectation that the
    /// answers seen since do not move.
    fixed_pico: i64,
    /// What this attempt adds to `Core::reserved_pico` (its expected cost at dispatch, what
    /// is left of it at the last tick): released whole when its result comes in.
    reserved_pico: i64,
    /// Its worst case (prompt, fee, `max_tokens`), picodollars.
    worst_pico: i64,
    /// The most it can be billed (its `dispatched` line's `worst_usd`): written on its closing
    /// line too, the bound a `/generation` figure for it is checked against (`booked_cost`).
    bill_bound: Usd,
    /// What it had streamed at the last tick, at its price (the tail's estimate reads it).
    accrued_pico: i64,
    /// The whole output tokens it had received at the last tick (how long its answer already
    /// is: [`AnswerLengths`](answer_lengths::AnswerLengths) counts it at least that long).
    streamed_tokens: u64,
    /// It may be served where closing the stream does not stop the bill (pinned there, or
    /// routed by OpenRouter over a set that includes such an endpoint).
    billed_if_closed: bool,
    /// The request's body as sent, but its messages: what the row records as `params`.
    params: serde_json::Value,
    /// When it was sent (how long a drain has left is reckoned from it).
    sent: std::time::Instant,
}

/// What the latest listing says of an endpoint (refreshed every `catalog_refresh_s`).
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    pub status: Option<i64>,
    pub uptime_30m: Option<f64>,
    /// Still in the listing (own servers always are).
    pub present: bool,
}

/// The decision state of a run.
pub(crate) struct Core {
    cfg: Config,
    /// Which prompt goes next, and each dataset's book.
    admission: admission::Admission,
    /// The run's endpoints and how each stands.
    fleet: fleet::Fleet,
    /// The dollar budget, the request rate and the account's in-flight gate.
    budget: budget::Budget,
    /// Paused, begun, stopping.
    life: Lifecycle,
    /// The event log and what it has said once.
    journal: journal::Journal,
    /// Most requests in flight at once.
    concurrency: u32,
    in_flight: HashMap<u64, InFlight>,
    /// Attempt keys and the retry queue's order.
    seq: u64,
    /// Prefix of this run's attempt keys.
    run_id: String,
    /// The back-off's jitter.
    rng: SmallRng,
    /// Rejects held while the same failure repeats (see `systematic`).
    streak: systematic::Streak,
    /// The recent share of answers cut while thinking.
    cut_watch: cut_watch::CutWatch,
    /// Money that outlives a stream or a process: this run's closes' look-ups, what earlier
    /// runs left, the key's checkpoints.
    settle: settle::Settlement,
    /// Where the ledger's money went, by endpoint.
    books: books::Books,
    effects: Vec<Effect>,
}

/// Where the run is in its life: begun, paused, stopping (and how).
#[derive(Default)]
struct Lifecycle {
    /// What a crash left is settled ([`Event::Begin`]): requests may start.
    begun: bool,
    paused: bool,
    stopping: Option<StopReason>,
    /// Set with a stop caused by the API or harvest itself (exit code 1).
    failed: bool,
    /// A stop-now was asked (by the operator, or at the end of a drain's grace period): what
    /// is in flight is closed and nothing waits on look-ups.
    stopped_now: bool,
    /// How long a drain lets what is in flight finish before it closes it.
    drain_grace: std::time::Duration,
    /// When the drain under way closes what is in flight: every drain (a signal, the TUI,
    /// `harvest stop`, a lost output) is bounded by the same grace, here rather than in each
    /// driver.
    drain_deadline: Option<Instant>,
    /// The drain's grace ran out and what was in flight was closed.
    grace_over: bool,
}

impl Core {
    /// A core for `cfg` over `endpoints`; `carried_over` is what earlier runs of the output
    /// directory spent; `run_id` prefixes attempt names.
    pub(crate) fn new(
        cfg: Config,
        datasets: Vec<DatasetBook>,
        endpoints: Arc<Vec<RunEndpoint>>,
        carried_over: Usd,
        shard: Option<(u32, u32)>,
        run_id: String,
        now: &Clock,
    ) -> Core {
        let policy = cfg.policy.clone();
        let (native, _) = policy.native_for(&cfg.model);
        let mut datasets = datasets;
        for d in &mut datasets {
            d.sends = d
                .params
                .chat_request(&cfg.model, Vec::new())
                .parameters_sent();
        }
        let in_datasets = datasets.iter().map(|d| d.spent).sum();
        let mut core = Core {
            books: books::Books::new(carried_over, in_datasets),
            concurrency: cfg.concurrency,
            budget: budget::Budget::new(
                cfg.budget(),
                carried_over,
                cfg.retry.learn_inflight_budget,
            ),
            fleet: fleet::Fleet::new(
                endpoints,
                policy,
                native,
                Health::new(cfg.breaker.failures, cfg.breaker.cooldown()),
            ),
            admission: admission::Admission::new(datasets, shard),
            cfg,
            life: Lifecycle {
                drain_grace: crate::engine::DRAIN_GRACE,
                ..Lifecycle::default()
            },
            seq: 0,
            in_flight: HashMap::new(),
            journal: journal::Journal::new(now.mono),
            rng: SmallRng::seed_from_u64(0x4841_5256),
            settle: settle::Settlement::default(),
            run_id,
            effects: Vec::new(),
            streak: systematic::Streak::default(),
            cut_watch: cut_watch::CutWatch::default(),
        };
        core.fleet.refresh_verdicts();
        core
    }

    /// Adds a line to the event log (and to the log file, through `tracing`).
    fn event(&mut self, now: &Clock, text: impl Into<String>) {
        self.journal.push(now, text.into());
    }

    pub(crate) fn elapsed_s(&self, now: &Clock) -> f64 {
        self.journal.elapsed_s(now)
    }

    /// A ledger line to write; the spend of its dataset and of its endpoint follows it.
    fn ledger(&mut self, entry: SpendEntry) {
        let in_dataset = self.admission.book(&entry.dataset, entry.usd);
        let endpoint = (entry.endpoint.as_deref())
            .and_then(|t| self.fleet.endpoints().iter().position(|e| e.tag == t));
        self.books.book(endpoint, in_dataset, entry.usd);
        self.effects.push(Effect::Ledger(entry));
    }

    /// Earlier runs' spend by endpoint tag (their ledger's lines), for the providers' `spent`.
    pub(crate) fn with_carried_by_endpoint(mut self, by_tag: &HashMap<String, Usd>) -> Self {
        let eps = self.fleet.endpoints().clone();
        self.books
            .carry_by_tag(eps.iter().map(|e| e.tag.as_str()), by_tag);
        self
    }

    /// What earlier runs of the output directory's ledger read of each endpoint's closes
    /// (`LedgerScan::closes`), carried into the evidence at the first event where read within
    /// [`CARRIED_FOR`](crate::close_reading::CARRIED_FOR) of `now`.
    pub(crate) fn with_closes_before(
        mut self,
        closes: &HashMap<String, crate::close_reading::ClosesSeen>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        let mut carried: Vec<_> = (closes.iter())
            .filter(|(_, seen)| seen.carried_at(now))
            .map(|(tag, seen)| (tag.clone(), seen.clone()))
            .collect();
        carried.sort_by(|a, b| a.0.cmp(&b.0));
        self.fleet.set_closes_before(carried);
        self
    }

    /// Asks the driver to look up at the end of the run what a stream really cost.
    fn look_up(&mut self, generation_id: String, entry: SpendEntry) {
        self.settle.ask_about(generation_id, entry);
    }

    /// Stops dispatching, for `reason` (the first reason wins).
    fn begin_stop(&mut self, now: &Clock, reason: StopReason) {
        if !matches!(reason, StopReason::Systematic { .. }) {
            // Stopped for another reason: the held failures were the prompts' own, unless
            // they were the account's (those stay pending).
            self.release_held(now);
        }
        if self.life.stopping.is_none() {
            self.event(now, format!("stopping: {reason}"));
            self.life.failed |= reason.is_failure();
            self.life.stopping = Some(reason);
        }
    }

    /// How long a drain may let what is in flight finish (`--drain-grace-s`).
    pub(crate) fn with_drain_grace(mut self, grace: std::time::Duration) -> Self {
        self.life.drain_grace = grace;
        self
    }

    /// When the drain under way closes what is in flight, if one is under way and has not.
    pub(crate) fn drain_deadline(&self) -> Option<Instant> {
        (self.life.drain_deadline).filter(|_| !self.life.stopped_now && !self.life.grace_over)
    }

    /// harvest itself cannot go on (a write failed, a task died): stop, exit code 1.
    fn fail(&mut self, now: &Clock, detail: String) {
        self.life.failed = true;
        tracing::error!("harvest cannot go on: {detail}");
        self.event(now, format!("internal error: {detail}"));
        self.begin_stop(now, StopReason::Internal { detail });
    }

    /// The dollar cap tripped in a worker: in-flight streams close where that stops the bill.
    fn budget_hit(&mut self, now: &Clock) {
        let n = self.in_flight.len();
        self.event(
            now,
            format!(
                "dollar budget reached ({}): closing {n} in-flight requests where that stops the bill; the others run to the end (they are paid for)",
                Usd::from_pico(self.budget.budget_pico())
            ),
        );
        self.begin_stop(now, StopReason::DollarBudget);
    }

    /// Nothing is in flight and either every dataset is finished or the run is stopping.
    pub(crate) fn is_over(&self) -> bool {
        self.in_flight.is_empty() && (self.life.stopping.is_some() || self.admission.all_finished())
    }

    /// When the driver must wake for the core even if nothing happens: a retry falls due, or
    /// the rate cap lets the next request go. `None` while paused.
    pub(crate) fn next_wake(&self, now: &Clock) -> Option<Instant> {
        if self.life.paused {
            return None;
        }
        // A request put back for want of room waits for money to settle (a result, a look-up,
        // the tick), not for the clock: a wake now would spin.
        let retry = (self.admission.next_retry_due())
            .filter(|t| !(self.budget.waiting_for_room() && *t <= now.mono));
        let send = self.budget.next_send_at().filter(|t| *t > now.mono);
        let due = match (retry, send) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match due {
            // Due, but nothing can take it now: wake when something can (a breaker's
            // cool-down, a pause), not at once again and again.
            Some(t) if t <= now.mono => self.routable_at(now).map(|r| r.max(t)),
            other => other,
        }
    }

    /// How long the requests in flight are expected to take still: for each, the time its
    /// dataset's requests usually take (`usual(dataset)`, the 95th percentile of those done)
    /// less its age; the longest of them. `None` with nothing in flight, with no usual time
    /// for a request's dataset yet (too few done to go by), or with a request already past its
    /// usual time: it is among the long ones, and may run to its `max_tokens` (a drain's grace
    /// bounds it, [`Core::drain_deadline`]). A drain shows it as its own progress.
    pub(crate) fn longest_remaining(
        &self,
        now: &Clock,
        usual: impl Fn(usize) -> Option<std::time::Duration>,
    ) -> Option<std::time::Duration> {
        let mut longest = None;
        for f in self.in_flight.values() {
            let age = now.mono.saturating_duration_since(f.sent);
            let left = usual(f.job.dataset)?.checked_sub(age)?;
            longest = Some(longest.map_or(left, |l: std::time::Duration| l.max(left)));
        }
        longest
    }

    /// The dataset of attempt `key` and the endpoint it is pinned to, while it is in flight.
    pub(crate) fn attempt_info(&self, key: u64) -> Option<(usize, Option<usize>)> {
        self.in_flight
            .get(&key)
            .map(|f| (f.job.dataset, f.endpoint))
    }

    // Read access for the snapshot.

    /// Dataset `d` has nothing in flight or waiting and takes nothing more.
    pub(crate) fn dataset_finished(&self, d: usize) -> bool {
        self.admission.dataset_finished(d)
    }
    pub(crate) fn datasets(&self) -> &[DatasetBook] {
        self.admission.datasets()
    }
    pub(crate) fn endpoints(&self) -> &Arc<Vec<RunEndpoint>> {
        self.fleet.endpoints()
    }
    pub(crate) fn listed(&self, i: usize) -> &Listed {
        self.fleet.listed(i)
    }
    pub(crate) fn operator(&self, i: usize) -> Option<bool> {
        self.fleet.operator(i)
    }
    pub(crate) fn health(&self, i: usize) -> &Health {
        self.fleet.health(i)
    }
    pub(crate) fn policy(&self) -> &PolicyConfig {
        self.fleet.policy()
    }
    pub(crate) fn native(&self) -> &Quantization {
        self.fleet.native()
    }
    pub(crate) fn config(&self) -> &Config {
        &self.cfg
    }
    pub(crate) fn stopping(&self) -> Option<&StopReason> {
        self.life.stopping.as_ref()
    }
    pub(crate) fn failed(&self) -> bool {
        self.life.failed
    }
    pub(crate) fn stopped_now(&self) -> bool {
        self.life.stopped_now
    }
    pub(crate) fn paused(&self) -> bool {
        self.life.paused
    }
    pub(crate) fn concurrency(&self) -> u32 {
        self.concurrency
    }
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
    /// How long the run has been in the dollar budget's last stretch (worst-case
    /// reservations holding requests back), once it entered it.
    pub(crate) fn last_stretch(&self, now: &Clock) -> Option<std::time::Duration> {
        self.budget.last_stretch_for(now)
    }

    /// Requests of the last stretch: how many went where a close stops the bill (narrowed
    /// there), how many reserved their worst case.
    pub(crate) fn stretch_shares(&self) -> (u64, u64) {
        self.budget.stretch_shares()
    }

    /// The recent share of answers cut while thinking, while it is high enough to warn of.
    pub(crate) fn cut_thinking_alarm(&self) -> Option<f64> {
        self.cut_watch.alarming()
    }

    pub(crate) fn retries(&self) -> u64 {
        self.admission.retries()
    }
    #[cfg(test)]
    pub(crate) fn retry_queue_empty(&self) -> bool {
        self.admission.no_retry_waiting()
    }
    /// Where the ledger's money went.
    pub(crate) fn books(&self) -> &books::Books {
        &self.books
    }
    pub(crate) fn carried_over(&self) -> Usd {
        self.budget.carried_over()
    }
    pub(crate) fn budget_pico(&self) -> i64 {
        self.budget.budget_pico()
    }
    #[cfg(test)]
    pub(crate) fn reserved_pico(&self) -> i64 {
        self.budget.reserved_pico()
    }
    pub(crate) fn events(&self) -> &VecDeque<EventLine> {
        self.journal.events()
    }

    /// The account's gate: the learned ceiling on OpenRouter streams, its 402s, its pause.
    pub(crate) fn account(&self) -> &account::AccountGate {
        self.budget.account()
    }

    /// Events logged since the start (the log keeps the last ones).
    pub(crate) fn events_total(&self) -> u64 {
        self.journal.total()
    }
}
