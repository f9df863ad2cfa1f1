//! The harness that plays the driver and the workers against a world: spawns, accrual, the
//! dollar cap, closes and look-ups through the core's one door, in virtual time; and the checks
//! of every run.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::super::super::attempt::{AttemptOutcome, AttemptResult};
use super::super::super::attempt_money::{
    Ending, booked, cap_reached, close_at_cap, closed_by_cap, cut_after_tokens, transit_hold,
};
use super::super::super::cancel_check::CHECK_AFTER_TOKENS;
use super::super::*;
use super::crash::{Disk, Line, Settling};
use super::flight::{Bill, Flight, Flights, Sums, Time};
use super::world::{Fate, Op, World};
use crate::config::BudgetMode;
use crate::engine::core::settle::{Asked, LookUpsEnd};
use crate::engine::look_ups::LookedUp;
use crate::engine::reconcile::CLOSED_DEADLINE;
use crate::store::output::SpendKind;

/// The driver's tick, seconds (`RunOptions::tick`'s default).
const TICK_S: f64 = 0.2;

/// What one run did, for the invariants and the figures.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) answered: u64,
    pub(super) rejected: u64,
    pub(super) requests: u64,
    /// What the world billed, and what harvest's ledger says.
    pub(super) bill_pico: i64,
    pub(super) ledger_pico: i64,
    /// Virtual seconds until spend came within 0.5% of the budget (or the run ended): what is
    /// billed and what the streams in flight have streamed, as harvest's progress line shows
    /// it and `scripts/seed-shape.sh` reads it.
    pub(super) to_budget_s: f64,
    pub(super) end_s: f64,
    pub(super) peak_in_flight: usize,
    /// The events and effects in order, hashed: the same seed gives the same run.
    pub(super) trace: u64,
    /// Requests sent that no endpoint OpenRouter had could take (its 404 `no_endpoints`).
    pub(super) unroutable: u64,
    /// Prompts rejected for a failure of the account, not of the prompt.
    pub(super) account_rejects: u64,
    /// Invariants broken, as text.
    pub(super) broken: Vec<String>,
    /// How many attempts ended each way, and operator actions and cap trips seen: what the
    /// fixed set covers.
    pub(super) seen: std::collections::BTreeMap<&'static str, u64>,
    /// Requests each endpoint served (or refused), and when each request left.
    pub(super) sent_to: Vec<u64>,
    pub(super) sent_at: Vec<f64>,
    /// When each request met the account's in-flight 402.
    pub(super) busy_at: Vec<f64>,
    /// Every ten virtual seconds: the time, the streams open at each endpoint, the bill and
    /// what the core reserved.
    pub(super) samples: Vec<(f64, Vec<u64>, i64, i64)>,
    /// Streams closed before their first chunk, which named no generation to look up, by
    /// prompt: what the world billed them and what harvest booked (estimates, which only a
    /// later true-up against the key can correct): the ledger may differ from the bill by
    /// that much.
    pub(super) unnamed: std::collections::BTreeMap<String, Unnamed>,
}

/// What the world billed a prompt's streams closed before their first chunk, and what harvest
/// booked for them; `in_full`: the world billed one of them in full.
#[derive(Debug, Default)]
pub(super) struct Unnamed {
    billed: i64,
    booked: i64,
    in_full: bool,
}

/// The driver's port in the world: the prompts, the counters, each attempt's running cost.
pub(super) struct WorldPort<'a> {
    pub(super) prompts: &'a mut VecDeque<Prompt>,
    pub(super) flights: &'a Flights,
    pub(super) live: Live,
    pub(super) t: f64,
}

impl Port for WorldPort<'_> {
    fn next_prompt(&mut self, dataset: usize) -> Option<Result<Prompt, PromptError>> {
        (dataset == 0).then(|| self.prompts.pop_front().map(Ok))?
    }
    fn live(&self) -> Live {
        self.live.clone()
    }
    fn accrued_pico(&self, key: u64) -> i64 {
        self.flights.get(&key).map_or(0, |f| f.accrued(self.t))
    }
    fn streamed_tokens(&self, key: u64) -> u64 {
        self.flights.get(&key).map_or(0, |f| f.tokens(self.t))
    }
}

/// The world run: the core, the clock, the flights and the books.
pub(super) struct Run {
    pub(super) world: World,
    pub(super) core: Core,
    pub(super) t0: Clock,
    pub(super) t: f64,
    pub(super) rng: SmallRng,
    pub(super) prompts: VecDeque<Prompt>,
    pub(super) flights: Flights,
    /// When each flight's first token and end fall due: (time, key), earliest first.
    /// Times fall on a 10 ms grid, so events meet; those that do come in a seeded order (the
    /// middle number), not by key.
    pub(super) due: std::collections::BinaryHeap<std::cmp::Reverse<(Time, u32, u64)>>,
    /// The running costs summed, as of `acc_t`: of every flight, and of those the cap would
    /// close (not held); with the rates they grow at now.
    pub(super) acc: Sums,
    /// Flights in flight per endpoint.
    pub(super) per_endpoint: Vec<u64>,
    /// The held worst cases of the flights in flight.
    pub(super) held: i64,
    /// What the workers booked (the live spend).
    pub(super) spent: i64,
    pub(super) tripped: bool,
    /// What the world billed each closed generation, for the look-ups.
    pub(super) billed: HashMap<String, Bill>,
    pub(super) lookups: Vec<(String, crate::store::output::SpendEntry)>,
    /// The look-ups asked, due when `GET /generation` knows them: (time, order, index into
    /// `lookups`).
    pub(super) lookup_due: std::collections::BinaryHeap<std::cmp::Reverse<(Time, u32, usize)>>,
    pub(super) ends: HashMap<String, u32>,
    pub(super) out: Outcome,
    pub(super) hasher: std::collections::hash_map::DefaultHasher,
    /// The table's behaviours, as the simulator's routing reads them.
    pub(super) behaviours: Vec<crate::sim::SimBehaviour>,
    /// What the operator has done so far.
    pub(super) op: OpState,
    /// The endpoints as the workers read them (their cancel billing, as the core learns it).
    pub(super) pool: Vec<RunEndpoint>,
    /// Which of the world's processes this is: 1, then 2 after a crash, and so on; when it
    /// began (virtual seconds), and the steps it has taken.
    pub(super) process: u32,
    pub(super) began: f64,
    pub(super) steps: u32,
    /// The output directory, in a crash world.
    pub(super) disk: Option<Disk>,
    /// The process died (a crash world's crash came).
    pub(super) crashed: bool,
    /// The look-ups of what the crash left, as the next start runs them
    /// ([`Run::open_leftovers`]).
    pub(super) settling: Option<Settling>,
}

/// The operator's state as the world knows it, to check each request against.
#[derive(Debug)]
pub(super) struct OpState {
    /// The next of the world's operator actions.
    pub(super) next: usize,
    pub(super) paused: bool,
    pub(super) concurrency: u32,
    pub(super) excluded: Vec<bool>,
    /// A drain or a stop now, and when.
    pub(super) stopped: Option<(f64, Op)>,
    /// When a drain must be over: the last end of what was in flight when it began.
    pub(super) drain_by: Option<f64>,
    /// The prompts in flight at a stop now: closed, they stay pending.
    pub(super) closed_by_stop: std::collections::HashSet<String>,
}

/// Runs `world` to its end and checks the invariants.
pub(super) fn run(world: &World) -> Outcome {
    let cfg = world.config();
    let book = DatasetBook {
        name: "a".into(),
        params: cfg.request.clone(),
        total: world.prompts as u64,
        ..DatasetBook::default()
    };
    let t0 = Clock {
        mono: std::time::Instant::now(),
        wall: chrono::DateTime::from_timestamp(1_796_000_000, 0).expect("fixed time"),
    };
    let core = Core::new(
        cfg,
        vec![book],
        Arc::new(world.endpoints.clone()),
        Usd::ZERO,
        None,
        "sim".into(),
        &t0,
    )
    .with_drain_grace(std::time::Duration::from_secs_f64(world.drain_grace_s))
    // A crash world's first start reads the key (nothing billed yet): the true-up's base.
    .with_key_at_start((!world.crashes.is_empty()).then_some(0.0));
    let mut run = Run::new(world, core, t0, 1);
    if !world.crashes.is_empty() {
        run.disk = Some(Disk::new());
    }
    run.go();
    loop {
        if !run.crashed && run.process > 1 {
            // The look-ups of what a crash left land after the work; the process may die
            // while they do, as during any other step.
            run.settle_at_end();
        }
        if !run.crashed {
            break;
        }
        run.die();
        run = run.restart();
        run.go();
    }
    run.check_disk();
    run.check();
    if std::env::var("HARVEST_SIM_EVENTS").is_ok() {
        eprintln!("events of seed {} {:?}:", world.seed, world.mode);
        for e in run.core.events() {
            eprintln!("  {:.1} {}", e.at_s, e.text);
        }
    }
    run.out
}

impl Run {
    /// Process `process` of `world`, run by `core` from time zero.
    pub(super) fn new(world: &World, core: Core, t0: Clock, process: u32) -> Run {
        let prompts = (0..world.prompts)
            .map(|i| Prompt {
                id: format!("p{i}"),
                messages: vec![Message::user(format!(
                    "question {i} of world {}",
                    world.seed
                ))],
                line: i as u64 + 1,
            })
            .collect();
        Run {
            world: world.clone(),
            core,
            t0,
            t: 0.0,
            rng: SmallRng::seed_from_u64(world.seed ^ 0x5EED ^ u64::from(process - 1)),
            prompts,
            flights: Flights::default(),
            due: Default::default(),
            acc: Sums::default(),
            per_endpoint: vec![0; world.endpoints.len()],
            held: 0,
            spent: 0,
            tripped: false,
            billed: HashMap::new(),
            lookups: Vec::new(),
            lookup_due: Default::default(),
            ends: HashMap::new(),
            out: Outcome::default(),
            hasher: Default::default(),
            behaviours: (world.table.endpoints.iter())
                .map(|e| e.behaviour.clone())
                .collect(),
            pool: world.endpoints.clone(),
            op: OpState {
                next: 0,
                paused: false,
                concurrency: world.concurrency,
                excluded: vec![false; world.endpoints.len()],
                stopped: None,
                drain_by: None,
                closed_by_stop: Default::default(),
            },
            process,
            began: 0.0,
            steps: 0,
            disk: None,
            crashed: false,
            settling: None,
        }
    }

    /// How this process dies, if it does.
    pub(super) fn crash(&self) -> Option<&super::world::Crash> {
        self.world.crashes.get(self.process as usize - 1)
    }

    /// The generation id the world gives attempt `key` of this process.
    pub(super) fn generation(&self, key: u64) -> String {
        match self.process {
            1 => format!("gen-{key}"),
            n => format!("gen-{n}-{key}"),
        }
    }

    pub(super) fn clock(&self) -> Clock {
        self.t0.after(Duration::from_secs_f64(self.t))
    }

    pub(super) fn step(&mut self, event: Event) {
        if self.crashed {
            return;
        }
        self.steps += 1;
        // The trace: when, what kind, and for a result whose attempt and what it booked (the
        // effects add what they wrote). Cheap, so it can run on every step.
        (self.t.to_bits(), std::mem::discriminant(&event)).hash(&mut self.hasher);
        match &event {
            Event::Result(r) => (r.key, r.booked_pico).hash(&mut self.hasher),
            Event::LookedUp { answer, .. } => format!("{answer:?}").hash(&mut self.hasher),
            _ => {}
        }
        let now = self.clock();
        let mut port = WorldPort {
            prompts: &mut self.prompts,
            flights: &self.flights,
            live: Live {
                spent_pico: self.spent,
                accrued_pico: self.acc.all_at(self.t),
                endpoint_in_flight: self.per_endpoint.clone(),
            },
            t: self.t,
        };
        let effects = self.core.handle(event, &mut port, &now);
        let cut = self.crash_cut(&effects);
        for (i, e) in effects.into_iter().enumerate() {
            if cut == Some(i) {
                self.tear(&e);
                break;
            }
            self.perform(e);
            if self.crashed {
                break;
            }
        }
        if cut.is_some() {
            self.crashed = true;
        }
        self.out.peak_in_flight = self.out.peak_in_flight.max(self.flights.len());
    }

    /// Where the crash falls in a step of `n` effects, when it falls in this one: after that
    /// many are performed.
    fn crash_cut(&self, effects: &[Effect]) -> Option<usize> {
        let c = self.crash()?;
        let budget = Usd::from_f64(self.world.budget_usd).pico() as f64;
        let taken = (self.out.bill_pico + self.acc.all_at(self.t)) as f64 / budget;
        let due = self.t >= self.began + c.at
            || c.near_budget.is_some_and(|share| taken >= share)
            || c.in_step.is_some_and(|n| self.steps > n);
        if !due {
            return None;
        }
        if !c.after_a_row {
            return Some(c.cut as usize % (effects.len() + 1));
        }
        let row = effects
            .iter()
            .position(|e| matches!(e, Effect::Output { .. }))?;
        Some(row + 1)
    }

    /// The effect the crash cut: the line it was writing reaches the disk torn, if the world
    /// tears it (a request whose `dispatched` line was cut never left).
    fn tear(&mut self, e: &Effect) {
        let Some(share) = self.crash().and_then(|c| c.torn) else {
            return;
        };
        let Some(disk) = self.disk.as_mut() else {
            return;
        };
        match e {
            Effect::Spawn(d) => disk.write(&Line::Spend(&d.ledger), Some(share)),
            Effect::Ledger(l) | Effect::BookKept(l) => disk.write(&Line::Spend(l), Some(share)),
            Effect::Output { record, .. } => disk.write(&Line::Output(record), Some(share)),
            Effect::Reject { record, .. } => disk.write(&Line::Reject(record), Some(share)),
            _ => return,
        }
        *self.out.seen.entry("torn line").or_default() += 1;
    }

    /// Puts on disk what the driver's writer would for `e` (crash worlds).
    fn write(&mut self, e: &Effect) {
        let Some(disk) = self.disk.as_mut() else {
            return;
        };
        match e {
            Effect::Spawn(d) => disk.write(&Line::Spend(&d.ledger), None),
            Effect::Ledger(l) | Effect::BookKept(l) => disk.write(&Line::Spend(l), None),
            Effect::Output { record, .. } => disk.write(&Line::Output(record), None),
            Effect::Reject { record, .. } => disk.write(&Line::Reject(record), None),
            _ => {}
        }
    }

    pub(super) fn perform(&mut self, e: Effect) {
        self.write(&e);
        match e {
            Effect::Spawn(d) => self.spawn(*d),
            Effect::Ledger(l) | Effect::BookKept(l) => {
                (l.kind as u8, l.usd.pico(), &l.id).hash(&mut self.hasher);
                self.out.ledger_pico += l.usd.pico();
                let unnamed = l.generation_id.is_none()
                    && matches!(l.kind, SpendKind::Cancelled | SpendKind::Unknown);
                if let Some(u) = (self.out.unnamed.get_mut(&l.id)).filter(|_| unnamed) {
                    u.booked += l.usd.pico();
                }
                if l.id == "key-true-up" {
                    *self.out.seen.entry("key true-up").or_default() += 1;
                }
                if l.kind == SpendKind::Reckoned {
                    *self
                        .out
                        .seen
                        .entry("close reckoned at the end")
                        .or_default() += 1;
                }
            }
            Effect::Output { record, .. } => {
                record.id.hash(&mut self.hasher);
                self.out.answered += 1;
                *self.ends.entry(record.id.clone()).or_default() += 1;
            }
            Effect::Reject { record, .. } => {
                record.id.hash(&mut self.hasher);
                let account = [
                    "No allowed providers",
                    "User not found",
                    "In-flight spending",
                ];
                if account.iter().any(|a| record.error.contains(a)) {
                    self.out.account_rejects += 1;
                }
                if self.op.closed_by_stop.contains(&record.id) {
                    self.out.broken.push(format!(
                        "{} rejected after a stop now closed it: {}",
                        record.id, record.error
                    ));
                }
                self.out.rejected += 1;
                *self.ends.entry(record.id.clone()).or_default() += 1;
            }
            Effect::CancelInFlight => {
                for k in self.keys_in_order() {
                    self.close(k, AttemptOutcome::Cancelled);
                }
            }
            Effect::LookUp {
                items,
                of: Asked::Leftovers,
                ..
            } => self.ask_about_leftovers(items),
            Effect::LookUp { items, .. } => {
                for (generation_id, entry) in items {
                    // Known to `GET /generation` a moment after the provider ends it.
                    let visible =
                        (self.billed.get(&generation_id)).map_or(self.t, |b| b.visible_at);
                    let at = (visible + self.lag()).max(self.t);
                    let i = self.lookups.len();
                    self.lookups.push((generation_id, entry));
                    self.lookup_due
                        .push(std::cmp::Reverse((Time(at), self.rng.random(), i)));
                }
            }
            Effect::Hold(pico) => self.held += pico,
            Effect::Spent(usd) => self.spent += usd.pico(),
            // What the workers believe of an endpoint (its cancel billing, learned).
            Effect::Repriced { index, endpoint } => self.pool[index] = *endpoint,
            Effect::Turn(_) | Effect::Join(_) => {}
        }
    }

    /// The worker starts: the world picks where it is served and how it ends.
    pub(super) fn spawn(&mut self, d: Dispatch) {
        self.out.requests += 1;
        self.check_sent(&d);
        let (serving, refused) = match crate::sim::routing::candidates(
            &self.world.table.endpoints,
            &self.behaviours,
            &d.request,
            &mut self.rng,
        ) {
            // The first candidate with room serves; when none has, the first answers 429.
            Ok(order) => (order.iter().copied())
                .find(|&i| !self.full(i))
                .map_or((order[0], None), |i| (i, None)),
            Err(no) => (d.over.first().copied().unwrap_or(0), Some(no.excluded_by)),
        };
        let b = self.world.truth[serving].clone();
        let ep = &self.world.endpoints[serving];
        let max_tokens = u64::from(self.world.max_tokens);
        let prompt_pico = ep.price_in.cost(d.prompt_tokens).pico();
        let out_pico = ep.price_out.pico_per_token();
        let estimate_pico = prompt_pico + out_pico * max_tokens as i64;
        let roll: f64 = self.rng.random();
        // Lengths as `harvest sim` draws them: log-normal about the mean, the table's spread.
        let sigma = self.world.table.output_tokens.sigma;
        let len = crate::sim::generate::draw_length(&mut self.rng, self.world.mean_len, sigma)
            .clamp(1, max_tokens);
        let cut_at = self.rng.random_range(1..len.max(2));
        let after = |at: Option<f64>, t: f64| at.is_some_and(|at| t >= at);
        let busy = self.world.account_usd.is_some_and(|usd| {
            let running: i64 = self.flights.values().map(|f| f.estimate_pico).sum();
            running + estimate_pico > Usd::from_f64(usd).pico()
        });
        let mut p = b.p429;
        let mut next = |q: f64| {
            p += q;
            roll < p
        };
        let fate = if after(self.world.key_revoked_at, self.t) {
            Fate::KeyRevoked
        } else if after(self.world.account_closes_at, self.t) {
            Fate::AccountClosed
        } else if let Some(why) = refused {
            Fate::NoEndpoints(why)
        } else if busy {
            Fate::AccountBusy
        } else if roll < b.p429 || self.full(serving) {
            Fate::RateLimited
        } else if next(b.p5xx) {
            Fate::ServerError
        } else if next(b.p_empty) {
            Fate::Empty
        } else if next(b.p_reset) && len > 1 {
            Fate::Reset { at: cut_at }
        } else if next(b.p_mid) && len > 1 {
            Fate::MidStream { at: cut_at }
        } else {
            Fate::Answer
        };
        let grid = |x: f64| (x * 100.0).round() / 100.0;
        let ttft = grid(b.ttft_s * self.rng.random_range(0.5..1.5)).max(0.01);
        *self.out.seen.entry(fate.kind()).or_default() += 1;
        if self.out.sent_to.len() < self.world.endpoints.len() {
            self.out.sent_to.resize(self.world.endpoints.len(), 0);
        }
        self.out.sent_to[serving] += 1;
        self.out.sent_at.push(self.t);
        if fate == Fate::AccountBusy {
            self.out.busy_at.push(self.t);
        }
        // A check of the endpoint's close: the worker closes it after the check's tokens.
        // (after its events: as many tokens as they carry on this wire)
        let check_tokens = (CHECK_AFTER_TOKENS as f64 * b.tokens_per_event.max(1.0)).ceil() as u64;
        let check_at = (fate == Fate::Answer && d.check && len > check_tokens).then(|| {
            *self.out.seen.entry("cancel check").or_default() += 1;
            check_tokens
        });
        let streams = (fate.streams(len)).min(check_at.unwrap_or(u64::MAX));
        let end = if streams > 0 {
            grid(self.t + ttft + streams as f64 / b.tokens_per_s).max(self.t + ttft)
        } else {
            grid(self.t + 0.1)
        };
        let f = Flight {
            serving,
            pinned: d.pinned.is_some(),
            t0: self.t,
            ttft,
            tokens_per_s: b.tokens_per_s,
            len,
            fate,
            end,
            prompt_pico,
            out_pico,
            held_worst: d.held_worst.pico(),
            streaming: false,
            check_at,
            prompt_id: d.prompt_id.clone(),
            estimate_pico,
            started: self.disk.as_ref().map(|_| {
                let tag = self.world.endpoints[serving].tag.clone();
                d.started_line(&self.generation(d.key), Some(tag), String::new())
            }),
            per_event: b.tokens_per_event,
            notice_s: b.notice_s,
            transit_pico: 0,
        };
        self.acc.advance(self.t);
        if streams > 0 {
            self.acc.all += f.prompt_pico as f64;
            if f.held_worst == 0 {
                self.acc.open += f.prompt_pico as f64;
            }
            self.due.push(std::cmp::Reverse((
                Time(f.first_token()),
                self.rng.random(),
                d.key,
            )));
        }
        self.due
            .push(std::cmp::Reverse((Time(f.end), self.rng.random(), d.key)));
        self.per_endpoint[serving] += 1;
        self.held += f.held_worst;
        self.flights.insert(d.key, f);
    }

    /// Endpoint `i` is at its capacity: streams open there (a 429's short exchange included)
    /// fill it.
    fn full(&self, i: usize) -> bool {
        (self.world.truth[i].capacity).is_some_and(|c| self.per_endpoint[i] >= u64::from(c))
    }

    /// What the operator's state says of a request as it leaves: not while paused, drained or
    /// stopped, not past the concurrency, never to an endpoint the operator excluded.
    pub(super) fn check_sent(&mut self, d: &Dispatch) {
        let mut why = Vec::new();
        if self.op.paused {
            why.push("while paused".to_string());
        }
        if let Some((at, op)) = &self.op.stopped {
            why.push(format!("after {op:?} at {at:.1} s"));
        }
        if self.flights.len() as u32 >= self.op.concurrency {
            why.push(format!(
                "with {} in flight at concurrency {}",
                self.flights.len(),
                self.op.concurrency
            ));
        }
        let reaches = |i: usize| d.pinned == Some(i) || (d.pinned.is_none() && d.over.contains(&i));
        for (i, _) in self.op.excluded.iter().enumerate().filter(|(_, x)| **x) {
            if reaches(i) {
                why.push(format!(
                    "to {} which the operator excluded",
                    self.world.endpoints[i].tag
                ));
            }
        }
        for w in why {
            let text = format!("{:.2} s: {} sent {w}", self.t, d.prompt_id);
            if self.out.broken.len() < 10 {
                self.out.broken.push(text);
            }
        }
    }

    /// A flight leaves: its running cost and rate leave the sums, its hold the cap.
    pub(super) fn take(&mut self, key: u64) -> Option<Flight> {
        let f = self.flights.remove(&key)?;
        self.acc.advance(self.t);
        let accrued = f.accrued(self.t) as f64;
        let streaming = f.streaming;
        self.acc.all -= accrued;
        if streaming {
            self.acc.all_rate -= f.rate();
        }
        if f.held_worst == 0 {
            self.acc.open -= accrued;
            if streaming {
                self.acc.open_rate -= f.rate();
            }
        }
        self.per_endpoint[f.serving] -= 1;
        self.held -= f.held_worst + f.transit_pico;
        Some(f)
    }

    /// When the cap's sum (spent, streamed, and what is left of the held worst cases, which
    /// with what their flights streamed stays their worst case) reaches `budget`, at the rates
    /// of now: `None` when it does not grow.
    pub(super) fn trips_at(&self, budget: i64) -> Option<f64> {
        let open = self.acc.open_at(self.t);
        if cap_reached(self.spent, open as i64, self.held, budget) {
            return Some(self.t);
        }
        let room = budget as f64 - (self.spent + self.held) as f64 - open;
        (self.acc.open_rate > 0.0).then(|| self.t + room / self.acc.open_rate)
    }

    /// A stream closed now (the cap, stop-now): booked at its running cost; the world bills
    /// what streamed where a close stops the bill, the whole answer elsewhere.
    pub(super) fn close(&mut self, key: u64, outcome: AttemptOutcome) {
        let Some(f) = self.take(key) else {
            return;
        };
        let accrued = f.accrued(self.t);
        let stops = self.world.truth[f.serving].stops_billing_at(self.t);
        let billed = f.billed_if_closed(self.t, stops);
        self.out.bill_pico += billed;
        self.spent += accrued;
        // OpenRouter names the generation in the stream's first chunk (no header carries it):
        // a stream closed before it gives harvest nothing to look up.
        let generation_id = f.streaming.then(|| self.generation(key));
        match &generation_id {
            Some(g) => {
                let bill = f.bill_if_closed(self.t, stops);
                self.billed.insert(g.clone(), bill);
            }
            None => {
                *self
                    .out
                    .seen
                    .entry("closed before its first chunk")
                    .or_default() += 1;
                let u = self.out.unnamed.entry(f.prompt_id.clone()).or_default();
                u.billed += billed;
                u.in_full |= !stops;
            }
        }
        let known = f.pinned || self.t >= f.t0 + f.ttft;
        let r = AttemptResult {
            key,
            outcome,
            endpoint: known.then_some(f.serving),
            streamed_tokens: f.events_of(f.tokens(self.t)),
            received_tokens: f.tokens(self.t),
            booked_pico: accrued,
            generation_id,
            elapsed: Duration::from_secs_f64(self.t - f.t0),
        };
        self.step(Event::Result(Box::new(r)));
    }

    /// The attempt `key` ends on its own at its time.
    pub(super) fn finish(&mut self, key: u64) {
        let Some(f) = self.take(key) else {
            return;
        };
        let (outcome, booked) = match f.fate.clone() {
            Fate::Answer => {
                let cost = f.whole();
                let c = Completion {
                    id: Some(self.generation(key)),
                    provider: Some(self.world.endpoints[f.serving].provider.clone()),
                    model: Some("moonshotai/kimi-k2.5".into()),
                    content: format!("answer {key}"),
                    reasoning: Some("thinking".into()),
                    tool_calls: Vec::new(),
                    finish_reason: if f.len >= u64::from(self.world.max_tokens) {
                        "length".into()
                    } else {
                        "stop".into()
                    },
                    native_finish_reason: None,
                    usage: Usage {
                        prompt_tokens: 10,
                        completion_tokens: f.len,
                        total_tokens: 10 + f.len,
                        cost: Some(Usd::from_pico(cost).as_f64()),
                        ..Usage::default()
                    },
                    usage_source: UsageSource::Reported,
                    events: f.events_of(f.len),
                    ttft: Some(Duration::from_secs_f64(f.ttft)),
                    latency: Duration::from_secs_f64(f.end - f.t0),
                };
                (AttemptOutcome::Done(Box::new(c)), cost)
            }
            Fate::RateLimited => (
                AttemptOutcome::Failed(http(429, Some("1"), "rate limited")),
                0,
            ),
            Fate::ServerError => (AttemptOutcome::Failed(http(502, None, "provider error")), 0),
            Fate::NoEndpoints(why) => {
                self.out.unroutable += 1;
                let body = serde_json::json!({"error": {"code": 404,
                    "message": "No endpoints found that can handle the requested parameters.",
                    "availability": {"code": "no_endpoints", "retryable": false,
                        "excluded_by": why}}});
                let err = ApiError::from_response_body(404, None, body.to_string().as_bytes());
                (AttemptOutcome::Failed(err), 0)
            }
            Fate::AccountClosed => {
                let body = serde_json::json!({"error": {"code": 404,
                    "message": "No allowed providers are available for the selected model",
                    "error_type": "not_found",
                    "availability": {"code": "privacy_restricted", "retryable": false}}});
                let err = ApiError::from_response_body(404, None, body.to_string().as_bytes());
                (AttemptOutcome::Failed(err), 0)
            }
            Fate::Reset { .. } => {
                // Booked as the worker books a cut after tokens; billed like a close.
                let ending = Ending::Failed {
                    cut_after_tokens: cut_after_tokens(crate::openrouter::ErrorKind::Connection),
                };
                let err = ApiError::Connection("connection reset by peer".into());
                (
                    AttemptOutcome::Failed(err),
                    booked(ending, f.accrued(f.end)),
                )
            }
            Fate::MidStream { at } => {
                let body = serde_json::json!({"code": "server_error",
                    "message": "Provider returned error"});
                let detail: crate::openrouter::error::ErrorBody =
                    serde_json::from_value(body).expect("an error body");
                (AttemptOutcome::Failed(detail.into_mid_stream(at)), 0)
            }
            Fate::Empty => {
                let provider = self.world.endpoints[f.serving].provider.clone();
                (AttemptOutcome::Failed(ApiError::Empty { provider }), 0)
            }
            Fate::AccountBusy => {
                // As the simulator answers it (sim/errors.rs), from the limits docs.
                let body = serde_json::json!({"error": {"code": 402,
                    "message": "In-flight spending budget reached: retry shortly, lower \
                                max_tokens, or add credits.",
                    "metadata": {"error_type": "payment_required",
                        "limit_source": "openrouter_in_flight_budget",
                        "retry_after_seconds": 1}}});
                let err = ApiError::from_response_body(402, Some("1"), body.to_string().as_bytes());
                (AttemptOutcome::Failed(err), 0)
            }
            Fate::KeyRevoked => (
                AttemptOutcome::Failed(http(401, None, "User not found.")),
                0,
            ),
        };
        let billed = match f.fate {
            Fate::Reset { .. } => {
                f.billed_if_closed(f.end, self.world.truth[f.serving].stops_billing_at(f.end))
            }
            _ => booked,
        };
        if matches!(f.fate, Fate::Reset { .. }) {
            let stops = self.world.truth[f.serving].stops_billing_at(f.end);
            self.billed
                .insert(self.generation(key), f.bill_if_closed(f.end, stops));
        }
        if matches!(f.fate, Fate::MidStream { .. } | Fate::Answer) {
            // An answer is known to `/generation` too: a crash that cuts its result leaves its
            // attempt open, and the next start looks it up.
            let answer = f.fate == Fate::Answer;
            let b = Bill {
                pico: if answer { booked } else { 0 },
                tokens: if answer { f.len } else { 0 },
                visible_at: f.end,
            };
            self.billed.insert(self.generation(key), b);
        }
        self.out.bill_pico += billed;
        self.spent += booked;
        let r = AttemptResult {
            key,
            outcome,
            endpoint: Some(f.serving),
            streamed_tokens: f.events_of(f.fate.streams(f.len)),
            received_tokens: f.fate.streams(f.len),
            booked_pico: booked,
            generation_id: Some(self.generation(key)),
            elapsed: Duration::from_secs_f64(f.end - f.t0),
        };
        self.step(Event::Result(Box::new(r)));
    }

    /// The flights' keys in the order they were sent (a run must not depend on a map's order).
    pub(super) fn keys_in_order(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self.flights.keys().copied().collect();
        keys.sort_unstable();
        keys
    }

    /// The dollar cap trips: the core hears it, and every stream the cap closes is closed.
    pub(super) fn trip(&mut self) {
        self.tripped = true;
        *self.out.seen.entry("dollar cap").or_default() += 1;
        self.step(Event::BudgetHit);
        for k in self.keys_in_order() {
            let Some(f) = self.flights.get(&k) else {
                continue;
            };
            let known = (f.pinned || self.t >= f.t0 + f.ttft)
                .then(|| self.pool[f.serving].cancel_stops_billing);
            // (a stream reserved as one the cap closes holds its transit: `closed_by_cap`)
            if closed_by_cap(known, f.transit_pico > 0) {
                self.close(k, AttemptOutcome::Cancelled);
            }
        }
    }

    /// The operator acts: the core hears the command, and the world notes what it must hold
    /// from now.
    pub(super) fn operate(&mut self, op: Op) {
        let kind = match op {
            Op::Pause | Op::Resume => "pause",
            Op::Concurrency(_) => "concurrency",
            Op::Exclude(_) | Op::Include(_) => "exclude",
            Op::Drain => "drain",
            Op::StopNow => "stop now",
        };
        *self.out.seen.entry(kind).or_default() += 1;
        match &op {
            Op::Pause => self.op.paused = true,
            Op::Resume => self.op.paused = false,
            Op::Concurrency(n) => self.op.concurrency = (*n).max(1),
            Op::Exclude(i) => self.op.excluded[*i] = true,
            Op::Include(i) => self.op.excluded[*i] = false,
            Op::Drain | Op::StopNow => {
                if self.op.stopped.is_none() {
                    self.op.stopped = Some((self.t, op.clone()));
                }
            }
        }
        if op == Op::Drain && self.op.drain_by.is_none() && self.core.stopping().is_none() {
            // The last stream in flight ends, or the grace closes it (at the first tick after).
            let last = self.flights.values().map(|f| f.end).fold(self.t, f64::max);
            self.op.drain_by = Some(last.min(self.t + self.world.drain_grace_s + TICK_S));
        }
        if op == Op::StopNow {
            self.op.drain_by = None;
            self.op.closed_by_stop = self.flights.values().map(|f| f.prompt_id.clone()).collect();
        }
        let command = op.command(&self.world);
        self.step(Event::Command(command));
    }

    /// The look-up `i` lands: what the world billed, and the tokens it billed, handed to the
    /// core as the driver hands it (`supervisor/asking.rs`, `close_looked_up`).
    pub(super) fn look_up(&mut self, i: usize) {
        let (generation_id, entry) = self.lookups[i].clone();
        let b = self.billed.get(&generation_id).copied();
        let actual = Usd::from_pico(b.map_or(0, |b| b.pico));
        self.step(Event::LookedUp {
            of: Asked::Closes,
            answer: Box::new(LookedUp::Done {
                entry,
                cost: Some(actual.as_f64()),
                completion_tokens: b.map(|b| b.tokens),
                said_before: false,
                unreached: None,
            }),
        });
    }

    pub(super) fn go(&mut self) {
        let budget = Usd::from_f64(self.world.budget_usd).pico();
        let near = budget - budget / 200;
        self.open_leftovers();
        self.step(Event::Begin);
        let mut next_tick = self.t + TICK_S;
        let mut guard = 0u32;
        let mut woke_at: Option<f64> = None;
        while !self.core.is_over() && !self.crashed {
            guard += 1;
            if guard > 200_000 || self.t > 7_200.0 {
                self.out
                    .broken
                    .push(format!("no end after {guard} steps, {:.0} s", self.t));
                break;
            }
            let now = self.clock();
            // A wake due now is taken once at this time: the core may ask again for the same
            // moment when nothing can take the work yet.
            let wake = self
                .core
                .next_wake(&now)
                .map(|w| self.t + w.saturating_duration_since(now.mono).as_secs_f64())
                .filter(|w| *w > self.t || woke_at != Some(self.t));
            let next = self.due.peek().map_or(f64::MAX, |r| (r.0).0.0);
            let op_at = (self.world.ops.get(self.op.next)).map_or(f64::MAX, |(at, _)| *at);
            let look_at = (self.lookup_due.peek()).map_or(f64::MAX, |r| (r.0).0.0);
            let settle_at = (self.settling.as_ref())
                .and_then(|s| s.next_at(self.t))
                .unwrap_or(f64::MAX);
            let t = next
                .min(look_at.max(self.t))
                .min(settle_at.max(self.t))
                .min(next_tick)
                .min(wake.unwrap_or(f64::MAX))
                .min(op_at.max(self.t));
            // The cap is checked as the worker checks it, on every token: when the sum
            // reaches the budget before `t`, the cap trips then.
            if !self.tripped
                && let Some(at) = self.trips_at(budget)
                && at <= t
            {
                self.t = at.max(self.t);
                self.trip();
                continue;
            }
            self.t = t;
            if self.out.to_budget_s == 0.0 && self.out.bill_pico + self.acc.all_at(self.t) >= near {
                self.out.to_budget_s = self.t;
            }
            while let Some(std::cmp::Reverse((Time(at), _, key))) = self.due.peek().copied() {
                if at > self.t {
                    break;
                }
                self.due.pop();
                let Some(f) = self.flights.get_mut(&key) else {
                    continue;
                };
                if at >= f.end {
                    if f.check_at.is_some() {
                        self.close(key, AttemptOutcome::Checked);
                    } else {
                        self.finish(key);
                    }
                } else {
                    // Its first token: it streams from now, and its `started` line is written.
                    f.streaming = true;
                    let started = f.started.take();
                    let (rate, open) = (f.rate(), f.held_worst == 0);
                    // As the worker: a stream the cap would close holds its tokens in transit
                    // (as many as its endpoint's closes are billed past what was read).
                    let known = Some(self.pool[f.serving].cancel_stops_billing);
                    if open && close_at_cap(known) {
                        let tokens = self.pool[f.serving].transit_tokens;
                        f.transit_pico = transit_hold(f.out_pico, tokens);
                        self.held += f.transit_pico;
                    }
                    self.acc.advance(self.t);
                    self.acc.all_rate += rate;
                    if open {
                        self.acc.open_rate += rate;
                    }
                    let alive = !self.crashed;
                    if let (Some(mut line), Some(disk), true) = (started, self.disk.as_mut(), alive)
                    {
                        line.at = self.t0.after(Duration::from_secs_f64(self.t)).rfc3339();
                        disk.write(&Line::Spend(&line), None);
                    }
                }
            }
            if let Some(std::cmp::Reverse((Time(at), _, i))) = self.lookup_due.peek().copied()
                && at <= self.t
            {
                self.lookup_due.pop();
                self.look_up(i);
            } else if settle_at <= self.t {
                self.ask_leftovers();
            } else if let Some((at, op)) = self.world.ops.get(self.op.next).cloned()
                && at <= self.t
            {
                self.op.next += 1;
                self.operate(op);
            } else if self.t >= next_tick {
                next_tick = self.t + TICK_S;
                if self.out.samples.last().is_none_or(|s| self.t >= s.0 + 10.0) {
                    let s = (
                        self.t,
                        self.per_endpoint.clone(),
                        self.out.bill_pico,
                        self.core.reserved_pico(),
                    );
                    self.out.samples.push(s);
                }
                self.step(Event::Tick);
            } else if wake.is_some_and(|w| w <= self.t) {
                woke_at = Some(self.t);
                self.step(Event::Wake);
            }
        }
        self.out.end_s = self.t;
        if self.out.to_budget_s == 0.0 {
            self.out.to_budget_s = self.t;
        }
        if !self.crashed {
            self.end_look_ups();
        }
        self.out.trace = self.hasher.finish();
    }

    /// The end of the run, as the driver's `finish_closes`: the core asks about the
    /// streams closed last (after a stop-now, nothing), the look-ups the API answers within
    /// [`CLOSED_DEADLINE`] land, the core hears how the end stopped asking (and reckons what
    /// is still unknown), and the rest land later, as the next start (or `harvest status
    /// --reconcile`) books them.
    fn end_look_ups(&mut self) {
        let how = if self.core.stopped_now() {
            // Nothing more is waited for; what is out lands later, as the next start asks.
            LookUpsEnd::NotAsked
        } else {
            self.step(Event::EndLookUps);
            let until = self.t + CLOSED_DEADLINE.as_secs_f64();
            while let Some(std::cmp::Reverse((Time(at), _, i))) = self.lookup_due.peek().copied() {
                if at > until {
                    self.t = until;
                    break;
                }
                self.lookup_due.pop();
                self.t = self.t.max(at);
                self.look_up(i);
            }
            LookUpsEnd::Deadline
        };
        self.step(Event::LookUpsEnded(how));
        while let Some(std::cmp::Reverse((Time(at), _, i))) = self.lookup_due.pop() {
            self.t = self.t.max(at);
            self.look_up(i);
        }
    }

    pub(super) fn check(&mut self) {
        let w = &self.world;
        let broken = &mut self.out.broken;
        for (id, n) in &self.ends {
            if *n > 1 {
                broken.push(format!("{id} ended {n} times"));
            }
        }
        let ended = self.ends.len() as u64;
        let stopped = self.core.stopping().is_some();
        if ended < w.prompts as u64 && !stopped {
            broken.push(format!(
                "{ended} of {} prompts ended and the run was not stopped",
                w.prompts
            ));
        }
        if let Some(by) = self.op.drain_by
            && self.out.end_s > by + 0.5
        {
            broken.push(format!(
                "a drain ended at {:.1} s, after the last stream in flight at its start or its \
                 grace ({by:.1} s)",
                self.out.end_s
            ));
        }
        if self.out.unroutable > 0 {
            broken.push(format!(
                "{} requests sent that no allowed endpoint could take",
                self.out.unroutable
            ));
        }
        if self.out.account_rejects > 0 {
            broken.push(format!(
                "{} prompts rejected for the account's failure (they must stay pending)",
                self.out.account_rejects
            ));
        }
        if self.out.rejected > self.out.requests / 10 + 5 {
            broken.push(format!(
                "{} rejected of {} requests",
                self.out.rejected, self.out.requests
            ));
        }
        let budget = Usd::from_f64(w.budget_usd).pico();
        if w.mode == BudgetMode::Hard && self.out.bill_pico > budget + budget / 200 {
            broken.push(format!(
                "billed ${:.6} on a hard budget of ${:.6} ({:+.2}%)",
                Usd::from_pico(self.out.bill_pico).as_f64(),
                Usd::from_pico(budget).as_f64(),
                (self.out.bill_pico as f64 / budget as f64 - 1.0) * 100.0
            ));
        }
        // Each ledger line rounds once; a look-up books the difference. A stream closed before
        // its first chunk is booked at an estimate nothing can look up (its expectation, its
        // worst case under the hard budget, where the close may be billed in full).
        let slack = 1_000 * (self.out.requests as i64 + 1);
        let estimated: i64 = (self.out.unnamed.values())
            .map(|u| (u.booked - u.billed).abs())
            .sum();
        // Under the hard budget such a close, where it may be billed in full, is booked at its
        // worst case: never below what the world billed the ones it billed in full (booked at
        // nothing, as before, the ledger ran under the bill: stop-expected --now --seed 23).
        let (in_full, booked) = (self.out.unnamed.values())
            .filter(|u| u.in_full)
            .fold((0, 0), |(b, k), u| (b + u.billed, k + u.booked));
        if w.mode == BudgetMode::Hard && booked < in_full - slack {
            broken.push(format!(
                "streams closed before their first chunk and billed in full: billed ${:.6}, \
                 booked ${:.6}",
                Usd::from_pico(in_full).as_f64(),
                Usd::from_pico(booked).as_f64()
            ));
        }
        if (self.out.ledger_pico - self.out.bill_pico).abs() > slack + estimated {
            broken.push(format!(
                "ledger ${:.6} against the world's bill ${:.6}",
                Usd::from_pico(self.out.ledger_pico).as_f64(),
                Usd::from_pico(self.out.bill_pico).as_f64()
            ));
        }
    }
}
