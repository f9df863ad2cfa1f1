//! The driver: the one task that performs what the core decides. Its loop makes an [`Event`]
//! of what happened (an operator command, an attempt's result, a tick, a listing refresh, the
//! dollar cap), hands it to [`Core::handle`] with the time, and performs the effects it
//! returns: spawning attempts, writing outputs, rejects and ledger lines, closing streams,
//! growing the pool. It also settles what a crash left open before the first dispatch and what
//! closed streams cost after the last, and publishes a [`Snapshot`] a few times a second.
//! Every decision is in `core/`; the driver is the core's [`Port`] onto prompt files and the
//! workers' counters.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::domain::Usd;
use crate::store::prompts::{Prompt, PromptError, PromptReader};
use crate::store::scan::KeyBase;
use crate::store::writer::Writer;

use super::alarm::Alarm;
use super::control::Command;
use super::core::DatasetBook;
use super::core::attempt::AttemptResult;
use super::core::settle::{Asked, Leftovers};
use super::core::{Clock, Core, Effect, Event, Live, Port};
use super::publish::Publisher;
use super::reason::StopReason;
use super::shared::Shared;
use super::snapshot::{RunState, Snapshot};
use super::stats::Counters;
use super::worker::{AttemptSpec, Running, run_attempt};

mod asking;

/// `engine::EngineHandle` writes the final state through here.
pub(super) use super::publish::write_state;

/// One dataset of the run, as the start prepared it: the core's book and its prompt reader.
pub(super) struct DatasetRun {
    pub book: DatasetBook,
    pub reader: Option<PromptReader>,
    /// The bad lines of its prompt file that become input rejects (`on_bad_line = "skip"`,
    /// shard 0 only), counted in `book.total`: never sent.
    pub bad_lines: u64,
}

/// The prompt readers of the run, one per dataset.
struct Readers(Vec<Option<PromptReader>>);

/// What the core reads while it decides: the prompt readers, the workers' counters, and each
/// attempt's running cost.
struct DriverPort<'a> {
    readers: &'a mut Readers,
    shared: &'a Shared,
    running: &'a HashMap<u64, Arc<Running>>,
}

impl Port for DriverPort<'_> {
    fn next_prompt(&mut self, dataset: usize) -> Option<Result<Prompt, PromptError>> {
        let slot = self.readers.0.get_mut(dataset)?;
        let item = slot.as_mut()?.next();
        if item.is_none() {
            // Read to the end: its buffer goes now, not at the end of the run.
            *slot = None;
        }
        item
    }

    fn live(&self) -> Live {
        let sh = self.shared;
        Live {
            spent_pico: sh.money.spent_pico(),
            accrued_pico: sh.money.accrued_pico(),
            endpoint_in_flight: (0..sh.endpoints().len())
                .map(|i| Counters::get(&sh.endpoint_stats[i].in_flight))
                .collect(),
        }
    }

    fn accrued_pico(&self, key: u64) -> i64 {
        self.running
            .get(&key)
            .map_or(0, |a| a.pico.load(Ordering::Relaxed))
    }

    fn streamed_tokens(&self, key: u64) -> u64 {
        self.running
            .get(&key)
            .map_or(0, |a| a.tokens.load(Ordering::Relaxed))
    }
}

/// What the run did, for the summary and the exit code.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub state: RunState,
    pub reason: Option<StopReason>,
    /// A stop caused by the API (bad key, no credit) or by harvest itself: exit code 1.
    pub failed: bool,
    /// The run ended with a stop-now (closing what was in flight).
    pub stopped_now: bool,
    pub snapshot: Snapshot,
    /// How far spend went past the budget (zero when it did not).
    pub overshoot: Usd,
    /// Where the outputs are, and the datasets in config order (for the report).
    pub output_dir: std::path::PathBuf,
    pub datasets: Vec<String>,
    /// Superseded lines made current again at the end (a `--retry-*` run that stopped before
    /// buying them again), one sentence per file.
    pub restored: Vec<String>,
}

pub(super) struct Supervisor {
    core: Core,
    publisher: Publisher,
    shared: Arc<Shared>,
    writer: Writer,
    readers: Readers,
    state_path: std::path::PathBuf,
    /// Raised by a stop-now: every attempt watches it.
    stop_now: Arc<Alarm>,
    /// Cancelled by a stop-now that came after the work was over, while look-ups ran: what
    /// is still being looked up is left as it is (see [`Supervisor::stopping_now`]).
    end_now: CancellationToken,
    /// The attempts in flight.
    tasks: JoinSet<AttemptResult>,
    /// Each attempt's running cost and tokens received, shared with its worker, by attempt key.
    running: HashMap<u64, Arc<Running>>,
    /// The look-ups at `/generation` the core asked for, running.
    look_ups: super::reconcile::LookUps,
    /// `harvest probe`'s agreement per endpoint, handed to the core as the run begins.
    probe: Option<HashMap<String, f64>>,
}

/// Everything the supervisor starts from, as `start` read and readied it.
pub(super) struct Launch {
    pub cfg: Config,
    pub shared: Arc<Shared>,
    pub writer: Writer,
    pub datasets: Vec<DatasetRun>,
    /// What earlier runs of the output directory spent, and of it what their lines named at
    /// each endpoint tag.
    pub carried_over: Usd,
    pub carried_by_endpoint: HashMap<String, Usd>,
    /// `GET /key` usage at the start, and the base a key true-up counts from.
    pub key_usage_start: Option<f64>,
    pub key_base: Option<KeyBase>,
    pub shard: Option<(u32, u32)>,
    pub state_path: std::path::PathBuf,
    /// What earlier runs left open with the API (a crash's attempts, closed streams no
    /// look-up confirmed, rebuilt lines).
    pub leftovers: Leftovers,
    /// `harvest probe`'s agreement per endpoint (empty: no probe ran).
    pub probe: HashMap<String, f64>,
    /// What the ledger's closed streams said of each endpoint's closes, by tag.
    pub closes_before: HashMap<String, crate::close_reading::ClosesSeen>,
    /// What the ledger's latest completed streams carried, by endpoint tag.
    pub streams_before: HashMap<String, std::collections::VecDeque<crate::store::output::Streamed>>,
    /// How long a drain may take before it becomes a stop now (`--drain-grace-s`).
    pub drain_grace: Duration,
}

impl Supervisor {
    pub(super) fn new(l: Launch) -> Self {
        let now = Clock::now();
        let (books, readers): (Vec<_>, Vec<_>) =
            l.datasets.into_iter().map(|d| (d.book, d.reader)).unzip();
        let n = books.len();
        let run_id = format!("{:x}", now.wall.timestamp_millis());
        let core = Core::new(
            l.cfg,
            books,
            l.shared.endpoints(),
            l.carried_over,
            l.shard,
            run_id,
            &now,
        )
        .with_drain_grace(l.drain_grace)
        .with_carried_by_endpoint(&l.carried_by_endpoint)
        .with_closes_before(&l.closes_before, now.wall)
        .with_streams_before(&l.streams_before)
        .with_key_base(l.key_base)
        .with_key_at_start(l.key_usage_start)
        .with_leftovers(l.leftovers);
        Supervisor {
            core,
            publisher: Publisher::new(&now, n, l.key_usage_start),
            shared: l.shared,
            writer: l.writer,
            readers: Readers(readers),
            state_path: l.state_path,
            stop_now: Arc::new(Alarm::new()),
            end_now: CancellationToken::new(),
            tasks: JoinSet::new(),
            running: HashMap::new(),
            look_ups: super::reconcile::LookUps::new(),
            probe: (!l.probe.is_empty()).then_some(l.probe),
        }
    }

    /// The core's port onto the readers, counters and running costs.
    fn port(&mut self) -> (&mut Core, DriverPort<'_>) {
        (
            &mut self.core,
            DriverPort {
                readers: &mut self.readers,
                shared: &self.shared,
                running: &self.running,
            },
        )
    }

    pub(super) fn snapshot(&mut self) -> Snapshot {
        let (_, port) = self.port();
        let live = port.live();
        self.publisher
            .snapshot(&self.core, &self.shared, &live, &Clock::now())
    }

    /// Hands `event` to the core and performs what it decides, then the events those effects
    /// answer (a new endpoint joining the pool, a write that failed), in order.
    async fn step(&mut self, event: Event) {
        let mut next = VecDeque::from([event]);
        while let Some(event) = next.pop_front() {
            let (core, mut port) = self.port();
            let effects = core.handle(event, &mut port, &Clock::now());
            self.perform(effects, &mut next).await;
        }
    }

    /// A stop-now was asked, during the work or after it: nothing more waits on the API.
    fn stopping_now(&self) -> bool {
        self.core.stopped_now() || self.end_now.is_cancelled()
    }

    /// Once the work is over, commands go nowhere but a stop-now still counts: it ends the
    /// look-ups at once (reliability probe 3, D5). Reads the commands until the run ends.
    fn listen_for_stop_now(
        &self,
        mut commands: mpsc::Receiver<Command>,
    ) -> tokio::task::JoinHandle<()> {
        let end_now = self.end_now.clone();
        if self.core.stopped_now() {
            end_now.cancel();
        }
        tokio::spawn(async move {
            while let Some(c) = commands.recv().await {
                if c.is_stop_now() {
                    tracing::info!("stop now asked while the last look-ups ran: they are left");
                    end_now.cancel();
                }
            }
        })
    }

    /// A line of the driver's own for the event log.
    async fn say(&mut self, text: String) {
        self.step(Event::Said(text)).await;
    }

    /// Runs what the core decided; events that answer an effect go to `next`.
    async fn perform(&mut self, effects: Vec<Effect>, next: &mut VecDeque<Event>) {
        for effect in effects {
            let written = match effect {
                Effect::Spawn(d) => {
                    let (written, handed) = match self.writer.spend_handed(&d.ledger).await {
                        Ok(rx) => (Ok(()), Some(rx)),
                        Err(e) => (Err(e), None),
                    };
                    let running = Arc::new(Running::default());
                    self.running.insert(d.key, running.clone());
                    let sh = &self.shared;
                    sh.money.hold(d.held_worst.pico());
                    sh.count_dispatch(d.dataset, d.pinned);
                    let spec = AttemptSpec { d: *d, running };
                    let task = run_attempt(sh.clone(), spec, self.stop_now.clone(), handed);
                    self.tasks.spawn(task);
                    written
                }
                Effect::Ledger(e) => self.writer.spend(&e).await,
                Effect::BookKept(e) => self.writer.book_kept(&e).await,
                Effect::Output {
                    dataset,
                    endpoint,
                    record,
                } => {
                    let written = self.writer.output(dataset, &record).await;
                    if written.is_ok() {
                        self.shared.count_kept(dataset, endpoint);
                    }
                    written
                }
                Effect::Reject { dataset, record } => self.writer.reject(dataset, &record).await,
                Effect::Turn(line) => self.writer.turn(&line).await,
                Effect::CancelInFlight => {
                    self.stop_now.raise();
                    Ok(())
                }
                Effect::LookUp { items, until, of } => {
                    // Without a key nothing can be asked: they stay unconfirmed.
                    if self.shared.client.has_key() {
                        let client = self.shared.client.clone();
                        match of {
                            Asked::Closes => self.look_ups.closes.ask(client, items, until),
                            Asked::Leftovers => {
                                let asking =
                                    super::reconcile::Background::start(client, items, until);
                                self.look_ups.leftovers = Some(asking);
                            }
                        }
                    }
                    Ok(())
                }
                Effect::Repriced { index, endpoint } => {
                    self.shared.replace_endpoint(index, *endpoint);
                    Ok(())
                }
                Effect::Hold(pico) => {
                    // No check of the cap here: a crash's holds alone close no stream (none is
                    // a live one), and the run waits for their look-ups rather than stop; the
                    // next token any stream accrues is checked against them.
                    self.shared.money.hold(pico);
                    Ok(())
                }
                Effect::Spent(usd) => {
                    self.shared.money.book(usd.pico());
                    Ok(())
                }
                Effect::Join(endpoint) => {
                    let pool = (self.shared.add_endpoint((*endpoint).clone()))
                        .map(|_| self.shared.endpoints());
                    next.push_back(Event::Joined { endpoint, pool });
                    Ok(())
                }
            };
            if let Err(e) = written {
                next.push_back(Event::Failed(e.to_string()));
            }
        }
    }

    /// Counts a finished attempt into the workers' statistics (what the views show), then
    /// hands it to the core.
    async fn on_result(&mut self, r: AttemptResult) {
        if let Some((d, pinned)) = self.core.attempt_info(r.key) {
            self.shared.count_result(&r, d, pinned);
        }
        self.running.remove(&r.key);
        self.step(Event::Result(Box::new(r))).await;
    }

    /// Folds a refreshed listing in, its endpoints as the run knows them.
    async fn apply_listing(&mut self, listing: crate::openrouter::ModelEndpoints) {
        let cfg = self.core.config();
        let endpoints = (listing.endpoints.iter())
            .map(|l| super::pool::from_listing(cfg, l))
            .collect();
        self.step(Event::Listing(endpoints)).await;
    }

    /// Runs until the work is done or the run is stopped; returns the summary.
    pub(super) async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        publish: watch::Sender<Arc<Snapshot>>,
        tick_every: Duration,
    ) -> RunSummary {
        self.begin().await;
        let mut state_writer = super::publish::StateWriter::new(self.state_path.clone());
        self.work(&mut commands, (&publish, &mut state_writer), tick_every)
            .await;
        let listener = self.listen_for_stop_now(commands);
        self.finish_leftovers().await;
        let summary = self.end(&publish, state_writer).await;
        listener.abort();
        summary
    }

    /// Before the first request: the probe's agreement, then the key's checkpoint and what
    /// earlier runs left (booked, held, and looked up beside the new work), as the core
    /// decides ([`Event::Open`]).
    async fn begin(&mut self) {
        if let Some(agreement) = self.probe.take() {
            self.step(Event::Probe(agreement)).await;
        }
        let can_look_up = self.shared.client.has_key();
        self.step(Event::Open { can_look_up }).await;
    }

    /// The work: events from the operator, the attempts, the crash's look-ups, the dollar cap,
    /// the clock and the listing, each through the core, until the core says it is over.
    async fn work(
        &mut self,
        commands: &mut mpsc::Receiver<Command>,
        (publish, state_writer): (
            &watch::Sender<Arc<Snapshot>>,
            &mut super::publish::StateWriter,
        ),
        tick_every: Duration,
    ) {
        let mut tick = tokio::time::interval(tick_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let shared = self.shared.clone();
        let mut budget_handled = false;
        let refresh_every = self.core.config().catalog_refresh();
        let mut next_refresh = refresh_every.map(|d| Instant::now() + d);
        type Listing = Result<crate::openrouter::ModelEndpoints, crate::openrouter::ApiError>;
        let mut refreshing: Option<tokio::task::JoinHandle<Listing>> = None;
        let mut commands_open = true;
        self.step(Event::Begin).await;
        while !self.core.is_over() {
            let wake = self.core.next_wake(&Clock::now());
            tokio::select! {
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(c) => self.step(Event::Command(c)).await,
                    None => commands_open = false,
                },
                found = async {
                    match self.look_ups.leftovers.as_mut() {
                        Some(asking) => asking.rx.recv().await,
                        None => std::future::pending().await,
                    }
                }, if self.look_ups.leftovers.is_some() => self.leftover_looked_up(found).await,
                Some(l) = self.look_ups.closes.rx.recv() => self.close_looked_up(l).await,
                Some(res) = self.tasks.join_next(), if !self.tasks.is_empty() => match res {
                    Ok(r) => self.on_result(r).await,
                    Err(e) => {
                        tracing::error!("an attempt task failed: {e}");
                        self.step(Event::Failed(format!("an attempt task failed: {e}"))).await;
                    }
                },
                () = shared.money.cap().watch(), if !budget_handled => {
                    budget_handled = true;
                    self.step(Event::BudgetHit).await;
                }
                _ = async {
                    match wake {
                        Some(t) => tokio::time::sleep_until(t.into()).await,
                        None => std::future::pending().await,
                    }
                }, if wake.is_some() => self.step(Event::Wake).await,
                listing = async {
                    match refreshing.as_mut() {
                        Some(h) => h.await,
                        None => std::future::pending().await,
                    }
                }, if refreshing.is_some() => {
                    refreshing = None;
                    match listing {
                        Ok(Ok(l)) => self.apply_listing(l).await,
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
                        let model = self.core.config().model.clone();
                        refreshing = Some(tokio::spawn(async move { client.endpoints(&model).await }));
                    }
                    let lag = at.elapsed().as_secs_f64() * 1000.0;
                    self.publisher.loop_lag_ms = lag.max(self.publisher.loop_lag_ms * 0.8);
                    self.step(Event::Tick).await;
                    let snap = Arc::new(self.snapshot());
                    self.step(Event::Quality(super::quality::deviations(&snap.endpoints))).await;
                    state_writer.offer(&snap);
                    publish.send_replace(snap);
                }
            }
        }
    }

    /// The end of the run: what closed streams cost, the key's count, the last writes, the
    /// final state and the summary.
    async fn end(
        mut self,
        publish: &watch::Sender<Arc<Snapshot>>,
        state_writer: super::publish::StateWriter,
    ) -> RunSummary {
        self.finish_closes(publish).await;
        let key_now = self.settle_with_key().await;
        if let Err(e) = self.writer.flush().await {
            self.step(Event::Failed(e.to_string())).await;
        }
        self.step(Event::Tick).await;
        let mut snap = self.snapshot();
        snap.key_usage_now = key_now;
        let stopping = self.core.stopping().is_some();
        snap.state = if !stopping {
            RunState::Done
        } else {
            RunState::Stopped
        };
        let overshoot = super::core::overshoot(snap.spent, snap.budget, snap.carried_over);
        let spent_before = snap.carried_over >= snap.budget;
        if overshoot > Usd::ZERO || spent_before {
            self.say(if spent_before {
                format!(
                    "earlier runs of this output directory spent {}, the budget {} or more: \
                     this run started nothing new (raise budget_usd to go on)",
                    snap.carried_over, snap.budget
                )
            } else {
                format!(
                    "spend {} exceeded the budget by {} (tokens in transit when the cap hit)",
                    snap.spent, overshoot
                )
            })
            .await;
            // The snapshot's window, with the line just said: as many as it keeps (a window
            // of the snapshot's own length lost the run's first line, the hard budget's
            // "checking ..." in `budget_cap`'s test, whenever transit passed the budget).
            let events = self.core.events();
            snap.events = events
                .iter()
                .skip(events.len().saturating_sub(super::publish::SNAPSHOT_EVENTS))
                .cloned()
                .collect();
        }
        state_writer.finish(&snap).await;
        publish.send_replace(Arc::new(snap.clone()));
        RunSummary {
            state: snap.state,
            stopped_now: self.stopping_now(),
            reason: self.core.stopping().cloned(),
            failed: self.core.failed(),
            snapshot: snap,
            overshoot,
            output_dir: Default::default(),
            datasets: Vec::new(),
            restored: Vec::new(),
        }
    }
}
