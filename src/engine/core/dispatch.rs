//! Dispatch: as many attempts as the limits allow right now, each routed, priced, reserved
//! against the dollar budget and written to the ledger before it leaves.

use crate::config::Turns;
use crate::domain::Usd;
use crate::openrouter::Message;
use crate::openrouter::request::StreamOptions;
use crate::store::output::{SpendEntry, SpendKind};

use super::budget::{Claim, Fits};
use super::journal::Once;
use super::reserve::{StretchRoute, in_last_stretch, reserves_worst_case, stretch_route};
use super::{Clock, Core, Dispatch, Effect, InFlight, Job, Port, Route, turns};

/// A request's money at dispatch: what it is expected to cost, its worst case, what it
/// reserves against the budget, and whether closing it would stop its bill.
struct Money {
    expected: Usd,
    worst: Usd,
    reserve: Usd,
    billed_if_closed: bool,
}

/// A request routed and priced, not yet sent.
struct Priced {
    route: Route,
    /// The request fee.
    fee: Usd,
    money: Money,
}

impl Priced {
    /// What it asks of the dollar budget; `later`: the turns of a row it starts.
    fn claim(&self, job: &Job, later: u64) -> Claim {
        Claim {
            reserve: self.money.reserve,
            expected: self.money.expected,
            ahead: Usd::from_pico(self.money.expected.pico().saturating_mul(later as i64)),
            continues_row: job.row_owed.is_some(),
        }
    }
}

impl Core {
    /// Reads the workers' counters and starts what fits: [`Effect::Spawn`]s, and rejects of
    /// bad prompt lines met on the way.
    pub(super) fn dispatch(&mut self, port: &mut dyn Port, now: &Clock) {
        let live = self.budget.with_unpublished(port.live());
        self.fleet.read_in_flight(&live.endpoint_in_flight);
        self.budget.round_begins();
        while self.can_dispatch(now) {
            // Nothing to route to: do not even take a job.
            if self.route(now, None).is_none() {
                self.say_if_stuck(now);
                break;
            }
            self.journal.forget(&Once::Stuck);
            let Some(job) = self.next_job(port, now) else {
                break;
            };
            let Some(route) = self.route_job(now, &job, false) else {
                // Something may serve, but nothing that takes this request's parameters:
                // it waits (never sent where OpenRouter would refuse it), said once. The round
                // ends here, as when nothing routes: going on would read the dataset's fresh
                // prompts into the queue one by one.
                self.wait_for_eligible(job, now);
                break;
            };
            let messages = self.request_messages(&job);
            let prompt_tokens = estimate_prompt_tokens(&messages);
            let later = self.later_turns(&job);
            let mut priced = self.price(&job, route, prompt_tokens, now);
            // The last stretch (`reserve::in_last_stretch`), begun or coming with this request.
            let stretch = in_last_stretch(
                self.budget.in_last_stretch(),
                self.budget.has_room(&priced.claim(&job, later), &live),
                priced.money.worst.pico(),
                self.concurrency,
                self.budget.budget_pico() - self.budget.committed_pico(&live),
            );
            // There, a check of a documented close the hard budget wants goes first, to that
            // endpoint alone (`cancel_check`). While checks are out, other requests go as
            // they would, at their worst case where nothing is known yet, if it fits: waiting
            // for the checks' look-ups emptied the run for as long as `/generation` lagged
            // (reliability-probe-5 P9: `in flight 0/300` for 69 s at a 20 s lag).
            let check = if stretch {
                self.check_route(now, &job)
            } else {
                None
            };
            if let Some((_, r)) = &check {
                priced = self.price(&job, r.clone(), prompt_tokens, now);
            }
            // A request that would reserve its worst case goes where a close stops the bill,
            // reserving its expectation there (`reserve::stretch_route`).
            if check.is_none()
                && stretch
                && priced.money.billed_if_closed
                && self.cfg.budget_mode == crate::config::BudgetMode::Hard
            {
                let stoppable = self
                    .route_job(now, &job, true)
                    .map(|r| self.price(&job, r, prompt_tokens, now));
                let fits_stoppable = stoppable
                    .as_ref()
                    .map(|p| self.budget.has_room(&p.claim(&job, later), &live));
                let choice = stretch_route(self.cfg.budget_mode, true, true, fits_stoppable);
                if let (StretchRoute::Stoppable, Some(p)) = (choice, stoppable) {
                    self.enter_last_stretch(&live, now);
                    self.budget.sent_in_stretch(true);
                    priced = p;
                }
            }
            let claim = priced.claim(&job, later);
            if self.fits(claim, (&live, &*port), now) != Fits::Yes {
                self.budget.waits_for_room();
                self.requeue_front(job, now);
                // New work waits for the rows in progress: a next turn already due goes out
                // now (it is queued ahead of the job just put back).
                if !claim.continues_row && self.admission.row_waits(Some(now)).is_some() {
                    continue;
                }
                break;
            }
            let mut job = job;
            if self.admission.dataset(job.dataset).turns == Turns::All && job.row_owed.is_none() {
                // The row starts: its later turns' money is held for them from now.
                job.row_owed = Some(priced.money.expected);
                self.budget.row_owes(claim.ahead.pico());
            }
            if self.budget.in_last_stretch()
                && reserves_worst_case(self.cfg.budget_mode, priced.money.billed_if_closed)
            {
                self.budget.sent_in_stretch(false);
            }
            let check = check.map(|(e, _)| e);
            if let Some(e) = check {
                self.check_sent(e, now);
            }
            self.spawn(job, messages, priced, (prompt_tokens, check), now);
        }
        // No more failures can join the held ones: nothing runs, and nothing more will be sent
        // (every dataset read and nothing queued, or the run is stopping). A pause, a rate cap
        // or a moment without a route is not that.
        let read_out = (0..self.admission.datasets().len())
            .all(|d| self.admission.dataset(d).exhausted || !self.admission.admitting(d));
        if self.in_flight.is_empty()
            && ((self.admission.no_retry_waiting() && read_out) || self.life.stopping.is_some())
        {
            self.settle_streak(now);
        }
    }

    /// No endpoint that may serve now takes `job`'s parameters (each that might is cooling
    /// down, or does not list them): the job waits a second, and the log says why once.
    fn wait_for_eligible(&mut self, job: Job, now: &Clock) {
        let d = job.dataset;
        let name = self.admission.dataset(d).name.clone();
        if self.journal.first(Once::NoEligible(name.clone())) {
            let sends = self.admission.dataset(d).sends.join(", ");
            let text = format!(
                "dataset {name}: no endpoint that may serve now lists every parameter its \
                 requests send ({sends}), and with [provider] require_parameters OpenRouter \
                 would refuse them: they wait for one (set require_parameters = false to let \
                 an endpoint serve without them)"
            );
            self.event(now, text);
        }
        self.push_retry(job, now.mono + std::time::Duration::from_secs(1));
    }

    /// `route`'s prices and money for `job`'s request of `prompt_tokens`: its expectation,
    /// its worst case and what it would reserve.
    fn price(&self, job: &Job, mut route: Route, prompt_tokens: u64, now: &Clock) -> Priced {
        // This request's prices: a long prompt or the hour may change them.
        let rates = self.rates_for(&route, prompt_tokens, now);
        route.price_in = rates.prompt;
        route.price_out = rates.completion;
        let expected_out = self.admission.expected_output_tokens(job.dataset);
        let expected =
            route.price_in.cost(prompt_tokens) + route.price_out.cost(expected_out) + rates.request;
        let max_tokens = u64::from(self.admission.dataset(job.dataset).params.max_tokens);
        let worst =
            route.price_in.cost(prompt_tokens) + route.price_out.cost(max_tokens) + rates.request;
        let billed_if_closed = self.billed_if_closed(&route);
        let reserve = if reserves_worst_case(self.cfg.budget_mode, billed_if_closed) {
            worst
        } else {
            expected
        };
        Priced {
            route,
            fee: rates.request,
            money: Money {
                expected,
                worst,
                reserve,
                billed_if_closed,
            },
        }
    }

    /// The turns a multi-turn row still needs after this request, when this request starts
    /// it (its first in this run): the budget must hold room for them too.
    fn later_turns(&self, job: &Job) -> u64 {
        if self.admission.dataset(job.dataset).turns != Turns::All || job.row_owed.is_some() {
            return 0;
        }
        let n = turns::turns_to_generate(&job.prompt);
        n.saturating_sub(job.done_turns.len() + 1) as u64
    }

    /// What the job's next request sends: its prompt, or (every turn regenerated) the prompt
    /// up to its next assistant turn on the history written so far.
    pub(super) fn request_messages(&self, job: &Job) -> Vec<Message> {
        match self.admission.dataset(job.dataset).turns {
            Turns::All => turns::next_request(&job.prompt, &job.done_turns),
            Turns::Last => job.prompt.messages.clone(),
        }
    }

    /// Whether a request so routed may be served where closing its stream does not stop the
    /// bill: its pinned endpoint's terms, or any of those OpenRouter may pick.
    fn billed_if_closed(&self, route: &Route) -> bool {
        match route.pinned {
            Some(e) => !self.fleet.endpoint(e).cancel_stops_billing,
            None if route.over.is_empty() => true,
            None => route
                .over
                .iter()
                .any(|&e| !self.fleet.endpoint(e).cancel_stops_billing),
        }
    }

    /// Books one attempt in flight and hands it to the driver.
    fn spawn(
        &mut self,
        job: Job,
        messages: Vec<Message>,
        Priced { route, fee, money }: Priced,
        (prompt_tokens, check): (u64, Option<usize>),
        now: &Clock,
    ) {
        let expected = money.expected;
        let d = job.dataset;
        let mut req = self
            .admission
            .dataset(d)
            .params
            .chat_request(&self.cfg.model, messages);
        let pinned = route.pinned;
        if let Some(e) = pinned {
            let ep = self.fleet.endpoint(e);
            if let Some(c) = &ep.custom {
                req.model = c.model.clone();
                for (k, v) in &c.extra {
                    req.extra.insert(k.clone(), v.clone());
                }
                // vLLM and SGLang report usage in a stream only when asked.
                req.stream_options = Some(StreamOptions {
                    include_usage: true,
                });
            }
            // Pinned requests require every parameter they send: drop what the endpoint does
            // not list rather than have OpenRouter refuse the request (as preflight says).
            let sent = req.parameters_sent();
            for p in super::params::unlisted(&sent, ep.supported_parameters.as_deref()) {
                req.drop_parameter(p);
            }
            self.fleet.health_mut(e).on_dispatch();
            self.fleet.count_in_flight(e);
        }
        if pinned.is_none()
            && let [only] = route.over[..]
        {
            self.fleet.count_sole(only, true);
        }
        req.provider = route.prefs;
        // The parameters as they leave (after any dropping, an own server's fields included),
        // for the row; the messages are the row's conversation.
        req.stream = true;
        let messages = std::mem::take(&mut req.messages);
        let mut params = serde_json::to_value(&req).unwrap_or_default();
        req.messages = messages;
        if let Some(p) = params.as_object_mut() {
            p.remove("messages");
        }
        // The most this attempt can be billed, the bound a cost from outside is checked against
        // (`booked_cost`): `money.worst` with the prompt counted at its UTF-8 bytes and the
        // parameters' (tools declared) too, an upper bound on a byte-level tokenizer's count
        // where the reservation's estimate (four characters a token) undercounts text such as
        // CJK.
        let prompt_bound = prompt_token_bound(&req.messages) + params.to_string().len() as u64;
        let max_tokens = u64::from(self.admission.dataset(d).params.max_tokens);
        let bill_bound = route.price_in.cost(prompt_bound) + route.price_out.cost(max_tokens) + fee;
        let bound = bill_bound.max(money.worst);
        let openrouter = pinned.is_none_or(|e| self.fleet.endpoint(e).custom.is_none());
        self.seq += 1;
        let key = self.seq;
        let attempt = format!("{}-{key}", self.run_id);
        let ledger = SpendEntry {
            endpoint: pinned.map(|e| self.fleet.endpoint(e).tag.clone()),
            prompt_tokens,
            estimated: true,
            attempt: Some(attempt.clone()),
            expected_usd: Some(expected),
            worst_usd: Some(bound),
            ..SpendEntry::new(
                SpendKind::Dispatched,
                now.rfc3339(),
                job.prompt.id.clone(),
                self.admission.dataset(d).name.clone(),
            )
        };
        self.admission.sent(d);
        self.budget.dispatched(money.reserve.pico(), openrouter);
        self.effects.push(Effect::Spawn(Box::new(Dispatch {
            key,
            dataset: d,
            prompt_id: job.prompt.id.clone(),
            attempt: attempt.clone(),
            request: req,
            pinned,
            price_in: route.price_in,
            price_out: route.price_out,
            fee,
            over: route.over.clone(),
            prompt_tokens,
            check: check.is_some(),
            held_worst: if reserves_worst_case(self.cfg.budget_mode, money.billed_if_closed) {
                money.worst
            } else {
                Usd::ZERO
            },
            ledger,
        })));
        self.in_flight.insert(
            key,
            InFlight {
                job,
                attempt,
                endpoint: pinned,
                over: if pinned.is_some() {
                    Vec::new()
                } else {
                    route.over.clone()
                },
                openrouter,
                expected_pico: expected.pico(),
                fixed_pico: (route.price_in.cost(prompt_tokens) + fee).pico(),
                reserved_pico: money.reserve.pico(),
                worst_pico: money.worst.pico(),
                bill_bound: bound,
                accrued_pico: 0,
                streamed_tokens: 0,
                billed_if_closed: money.billed_if_closed,
                price_in: route.price_in,
                price_out: route.price_out,
                prompt_tokens,
                check,
                params,
                sent: now.mono,
            },
        );
        self.budget.note_sent(self.cfg.requests_per_second, now);
    }
}

/// Prompt tokens as estimated without a tokenizer: ~4 characters a token, plus 4 per message.
pub(super) fn estimate_prompt_tokens(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(|m| (m.content.chars().count() as u64).div_ceil(4) + 4)
        .sum::<u64>()
        .max(1)
}

/// The most tokens `messages` can be as a byte-level tokenizer counts them: one a byte, and a
/// chat template's markers for each message.
fn prompt_token_bound(messages: &[Message]) -> u64 {
    (messages.iter())
        .map(|m| m.content.len() as u64 + 16)
        .sum::<u64>()
        .max(1)
}
