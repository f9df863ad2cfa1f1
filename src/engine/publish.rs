//! Builds the [`Snapshot`] every view reads, from the core's decisions and the workers'
//! counters, and keeps what only the views need: rates over time windows and the bounded
//! throughput/spend history.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::Routing;
use crate::domain::Usd;
use crate::openrouter::ErrorKind;

use super::core::{Clock, Core, Live};
use super::outlook::{self, time_to_budget};
use super::shared::Shared;
use super::snapshot::{
    DatasetSnap, DatasetState, EndpointSnap, HistoryPoint, InFlightBudgetSnap, RunState, Snapshot,
};
use super::stats::{Counters, Rate};
use crate::policy::PolicyMode;

const HISTORY_CAPACITY: usize = 360;
const HISTORY_EVERY_S: f64 = 5.0;
/// Events a snapshot carries (the core keeps more).
pub(crate) const SNAPSHOT_EVENTS: usize = 50;

/// How the run ends, as each dataset's time left is bounded by it.
struct Ends<'a> {
    stopping: bool,
    /// Seconds until the dollar budget stops the run, when it will.
    to_budget: Option<f64>,
    /// Every prompt sent: the streams in flight, all that is left.
    tail: Option<&'a [outlook::Stream]>,
    /// What the budget leaves of the spend.
    room: Usd,
}

/// The view-side state of a run: rates and history.
pub(super) struct Publisher {
    started_at: String,
    rate: Rate,
    spend_rate: Rate,
    dataset_rates: Vec<Rate>,
    endpoint_rates: Vec<Rate>,
    history: VecDeque<HistoryPoint>,
    last_history: f64,
    pub loop_lag_ms: f64,
    pub key_usage_start: Option<f64>,
}

impl Publisher {
    pub(super) fn new(now: &Clock, datasets: usize, key_usage_start: Option<f64>) -> Publisher {
        Publisher {
            started_at: now.rfc3339(),
            rate: Rate::new(10.0),
            spend_rate: Rate::new(60.0),
            dataset_rates: (0..datasets).map(|_| Rate::new(10.0)).collect(),
            endpoint_rates: Vec::new(),
            history: VecDeque::new(),
            last_history: -HISTORY_EVERY_S,
            loop_lag_ms: 0.0,
            key_usage_start,
        }
    }

    /// The snapshot of the run now.
    pub(super) fn snapshot(
        &mut self,
        core: &Core,
        sh: &Shared,
        live: &Live,
        now: &Clock,
    ) -> Snapshot {
        let t = core.elapsed_s(now);
        let streamed = Counters::get(&sh.totals.streamed_tokens) as f64;
        let tok_per_s = self.rate.update(t, streamed);
        let spent = Usd::from_pico(live.spent_pico);
        let accrued = Usd::from_pico(live.accrued_pico.max(0));
        let usd_per_min = self.spend_rate.update(t, (spent + accrued).as_f64()) * 60.0;
        let stopping = core.stopping().is_some();
        let budget = Usd::from_pico(core.budget_pico());
        let room = budget - (spent + accrued);
        // Every prompt sent, only streams in flight: the run ends as they do.
        let tail_streams = core.tail_streams().filter(|_| !stopping);
        let in_tail = (tail_streams.as_deref()).map(|s| outlook::tail(s, tok_per_s, room));
        let to_budget = match in_tail {
            Some(t) => t.eta_s.filter(|_| t.at_budget),
            None => time_to_budget(budget, spent + accrued, usd_per_min),
        };
        let ends = Ends {
            stopping,
            to_budget,
            tail: tail_streams.as_deref(),
            room,
        };
        let (datasets, work_etas): (Vec<DatasetSnap>, Vec<Option<f64>>) =
            (0..core.datasets().len())
                .map(|d| self.dataset(core, sh, d, t, &ends))
                .unzip();
        let eps = core.endpoints();
        while self.endpoint_rates.len() < eps.len() {
            self.endpoint_rates.push(Rate::new(10.0));
        }
        let endpoints = (0..eps.len())
            .map(|i| self.endpoint(core, sh, i, t, now))
            .collect();
        self.record_history(t, tok_per_s, usd_per_min);
        let books = core.datasets();
        let total: u64 = books.iter().map(|d| d.total).sum();
        let done: u64 = books.iter().map(|d| d.done).sum();
        let rejected: u64 = books.iter().map(|d| d.rejected).sum();
        let work_eta = (work_etas.into_iter())
            .flatten()
            .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))));
        let o = outlook::outlook(spent + accrued, budget, usd_per_min, work_eta, in_tail);
        let (eta_s, eta_at_budget) = (o.eta_s, o.at_budget);
        let projected = if stopping {
            // No more dispatch: the streams in flight are all that is left, as in the tail.
            let adds: i64 = core.streams().iter().map(|s| s.pico_left).sum();
            Some(spent + accrued + Usd::from_pico(adds))
        } else {
            o.projected
        };
        // The worst case is its own figure, shown while it can bite: stopping, or in the
        // budget's last stretch.
        let worst_case = (stopping || core.last_stretch(now).is_some())
            .then(|| Usd::from_pico(core.worst_case_pico(live)));
        let books = core.books();
        let state = run_state(core, done, t);
        let cfg = core.config();
        let events = core.events();
        Snapshot {
            model: cfg.model.clone(),
            routing: match cfg.routing {
                Routing::Openrouter => "openrouter".into(),
                Routing::Pinned => "pinned".into(),
            },
            policy: policy_label(core),
            policy_mode: core.policy().mode,
            any_opens: (core.opened_by_any().into_iter())
                .map(|i| core.endpoints()[i].tag.clone())
                .collect(),
            state,
            reason: core.stopping().cloned(),
            started_at: self.started_at.clone(),
            elapsed_s: t,
            concurrency_limit: core.concurrency(),
            inflight_budget: (core.account().hits() > 0).then(|| InFlightBudgetSnap {
                ceiling: core.account().ceiling(),
                refused: core.account().hits(),
                paused_s: core.account().paused_for(now.mono).map(|d| d.as_secs_f64()),
            }),
            in_flight: core.in_flight() as u64,
            budget,
            spent,
            carried_over: core.carried_over(),
            accrued,
            booked: books.total(),
            booked_no_endpoint: books.no_endpoint(),
            booked_no_dataset: books.no_dataset(),
            budget_mode: cfg.budget_mode,
            projected,
            worst_case,
            done,
            rejected,
            total,
            retries: core.retries(),
            output_tokens: Counters::get(&sh.totals.output_tokens),
            prompt_tokens: Counters::get(&sh.totals.prompt_tokens),
            tok_per_s,
            usd_per_min,
            eta_s: if stopping { None } else { eta_s },
            eta_at_budget: eta_at_budget && !stopping,
            tail_streams: tail_streams.as_ref().map_or(0, |s| s.len() as u64),
            drain_left_s: if stopping {
                drain_left_s(core, sh, now)
            } else {
                None
            },
            drain_grace_left_s: drain_grace_left(core, now).map(|d| d.as_secs_f64()),
            cut_thinking_share: core.cut_thinking_alarm(),
            last_stretch_s: core.last_stretch(now).map(|d| d.as_secs_f64()),
            stretch_stoppable: core.stretch_shares().0,
            stretch_worst: core.stretch_shares().1,
            open_look_ups: core.open_look_ups(),
            datasets,
            endpoints,
            events: events
                .iter()
                .skip(events.len().saturating_sub(SNAPSHOT_EVENTS))
                .cloned()
                .collect(),
            events_total: core.events_total(),
            history: self.history.iter().copied().collect(),
            loop_lag_ms: self.loop_lag_ms,
            key_usage_start: self.key_usage_start,
            key_usage_now: None,
        }
    }

    /// A point of the rate history every `HISTORY_EVERY_S`, the oldest dropped when full.
    fn record_history(&mut self, t: f64, tok_per_s: f64, usd_per_min: f64) {
        if t - self.last_history < HISTORY_EVERY_S {
            return;
        }
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

    fn dataset(
        &mut self,
        core: &Core,
        sh: &Shared,
        d: usize,
        t: f64,
        ends: &Ends,
    ) -> (DatasetSnap, Option<f64>) {
        let stopping = ends.stopping;
        let finished = core.dataset_finished(d);
        let ds = &core.datasets()[d];
        let rate = self.dataset_rates[d].update(
            t,
            Counters::get(&sh.dataset_stats[d].streamed_tokens) as f64,
        );
        let remaining_prompts = ds.total.saturating_sub(ds.done + ds.rejected);
        let state = if finished && (ds.exhausted || ds.budget_reached || remaining_prompts == 0) {
            DatasetState::Done
        } else if stopping && ds.in_flight == 0 {
            DatasetState::Stopped
        } else if stopping {
            DatasetState::Draining
        } else if ds.budget_reached {
            DatasetState::BudgetReached
        } else if ds.in_flight > 0 || ds.done > 0 {
            DatasetState::Running
        } else {
            DatasetState::Queued
        };
        let eta_s = match ds.budget {
            // Its prompts all sent: when its own streams of the tail end, at its own rate.
            _ if ends.tail.is_some() => {
                let tail = ends.tail.unwrap_or_default();
                let mine: Vec<outlook::Stream> =
                    (tail.iter()).filter(|s| s.dataset == d).copied().collect();
                (!mine.is_empty())
                    .then(|| outlook::tail(&mine, rate, ends.room).eta_s)
                    .flatten()
            }
            Some(b) if rate > 0.0 => Some(b.saturating_sub(ds.output_tokens) as f64 / rate),
            _ if ds.rows_here > 0 && rate > 0.0 => {
                let mean = ds.output_tokens_here as f64 / ds.rows_here as f64;
                Some(remaining_prompts as f64 * mean / rate)
            }
            _ => None,
        }
        // Draining, the time left is the drain's, not the dataset's.
        .filter(|_| !matches!(state, DatasetState::Done | DatasetState::Draining));
        let work_eta = eta_s;
        // No dataset runs past the run's dollar budget.
        let eta_s = eta_s.map(|e| ends.to_budget.map_or(e, |b| e.min(b)));
        (
            DatasetSnap {
                name: ds.name.clone(),
                total: ds.total,
                done: ds.done,
                rejected: ds.rejected,
                in_flight: ds.in_flight,
                output_tokens: ds.output_tokens,
                output_token_budget: ds.budget,
                max_samples: ds.max_samples,
                duplicates: ds.duplicates,
                tok_per_s: rate,
                spent: ds.spent,
                eta_s,
                state,
            },
            work_eta,
        )
    }

    fn endpoint(
        &mut self,
        core: &Core,
        sh: &Shared,
        i: usize,
        t: f64,
        now: &Clock,
    ) -> EndpointSnap {
        let e = &core.endpoints()[i];
        let c = &sh.endpoint_stats[i];
        let rate = self.endpoint_rates[i].update(t, Counters::get(&c.streamed_tokens) as f64);
        let done = Counters::get(&c.done);
        let answers = Counters::get(&c.answers);
        let ttft = c.ttft();
        let errs = c.errors_by_kind();
        let off = core.off_reason(i, now);
        let listed = core.listed(i);
        EndpointSnap {
            tag: e.tag.clone(),
            provider: e.provider.clone(),
            quantization: e.quantization.to_string(),
            fidelity: core.policy().fidelity(core.native(), &e.quantization),
            price_in_per_m: e.price_in.usd_per_million_f64(),
            price_out_per_m: e.price_out.usd_per_million_f64(),
            status: listed.status,
            uptime_30m: listed.uptime_30m,
            allowed: off.is_none(),
            included: core.permitted(i),
            idle: off.is_none().then(|| core.idle_reason(i)).flatten(),
            off,
            operator: core.operator(i),
            policy_off: core.policy_verdict(i).cloned(),
            breaker: core.health(i).state(),
            in_flight: Counters::get(&c.in_flight),
            done,
            errors: Counters::get(&c.failed_attempts),
            top_error: errs.first().map(|(k, n)| (k.label().to_string(), *n)),
            tok_per_s: rate,
            ttft_p50_ms: ttft.p50,
            ttft_p95_ms: ttft.p95,
            mean_output_tokens: (done > 0)
                .then(|| Counters::get(&c.output_tokens) as f64 / done as f64),
            // Over the answers that came back (kept, rejected or retried alike): never
            // over 100%.
            truncation_rate: (answers > 0)
                .then(|| Counters::get(&c.truncated) as f64 / answers as f64),
            cut_thinking_rate: (answers > 0)
                .then(|| Counters::get(&c.cut_thinking) as f64 / answers as f64),
            empty_rate: {
                let empty = c.errors[ErrorKind::Empty.index()].load(Ordering::Relaxed);
                (answers + empty > 0).then(|| empty as f64 / (answers + empty) as f64)
            },
            spent: core.books().at(i),
        }
    }
}

/// Writes `state.json` at most once a second, on a blocking thread: serialising and syncing a
/// large snapshot must not hold up the thread that reads every stream. A write still running
/// when the next is due makes that one wait for the following second.
pub(super) struct StateWriter {
    path: std::path::PathBuf,
    last: Option<Instant>,
    running: Option<tokio::task::JoinHandle<()>>,
}

impl StateWriter {
    pub(super) fn new(path: std::path::PathBuf) -> StateWriter {
        StateWriter {
            path,
            last: None,
            running: None,
        }
    }

    pub(super) fn offer(&mut self, snap: &Arc<Snapshot>) {
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
            || self.running.as_ref().is_some_and(|h| !h.is_finished())
        {
            return;
        }
        self.last = Some(Instant::now());
        let (path, snap) = (self.path.clone(), snap.clone());
        self.running = Some(tokio::task::spawn_blocking(move || {
            write_state(&path, &snap)
        }));
    }

    /// The last state of the run, after any write still running (so it cannot land after).
    pub(super) async fn finish(mut self, snap: &Snapshot) {
        if let Some(h) = self.running.take() {
            let _ = h.await;
        }
        write_state(&self.path, snap);
    }
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

/// The run's state as the operator reads it.
fn run_state(core: &Core, done: u64, t: f64) -> RunState {
    let stopping = core.stopping().is_some();
    if core.paused() && !stopping {
        RunState::Paused
    } else if stopping {
        RunState::Draining
    } else if core.in_flight() == 0 && done == 0 && t < 1.0 {
        RunState::Starting
    } else {
        RunState::Running
    }
}

/// The policy in force, and what `[provider]` asks of OpenRouter besides.
fn policy_label(core: &Core) -> String {
    let mode = match core.policy().mode {
        PolicyMode::Faithful => format!("faithful (native {})", core.native()),
        PolicyMode::Any => "any".into(),
    };
    match core.config().provider.summary() {
        x if x.is_empty() => mode,
        x => format!("{mode} + {x}"),
    }
}

/// Requests of a dataset that must be done before their usual time says anything of the
/// others': the first few to end are the short ones (a drain's estimate once said "due any
/// moment" for two minutes from them).
const USUAL_AFTER: u64 = 20;

/// How long a drain has left: the longest of the requests in flight, each expected to take its
/// dataset's usual (p95) time, and never past the drain's grace (when it has one: a stop at
/// the budget lets what is paid for run to its end).
fn drain_left_s(core: &Core, sh: &Shared, now: &Clock) -> Option<f64> {
    let usual: Vec<Option<std::time::Duration>> = sh
        .dataset_stats
        .iter()
        .map(|c| c.latency())
        .map(|l| l.p95.filter(|_| l.samples >= USUAL_AFTER))
        .map(|p95| p95.map(std::time::Duration::from_millis))
        .collect();
    let expected = core.longest_remaining(now, |d| usual.get(d).copied().flatten());
    let grace = drain_grace_left(core, now);
    match (expected, grace) {
        (Some(e), Some(g)) => Some(e.min(g)),
        (e, _) => e,
    }
    .map(|d| d.as_secs_f64())
}

/// How long until a drain's grace closes what is still in flight, while one runs.
fn drain_grace_left(core: &Core, now: &Clock) -> Option<std::time::Duration> {
    (core.drain_deadline()).map(|d| d.saturating_duration_since(now.mono))
}
