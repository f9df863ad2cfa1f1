//! Routing: which endpoints may serve (operator, policy, listing, health), why the others may
//! not ([`OffReason`]), and where a request goes: the cheapest healthy endpoint under its cap
//! (pinned routing, own servers), or the allowed set handed to OpenRouter (`only`, `ignore`,
//! `quantizations`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::config::Routing;
use crate::domain::{EndpointTag, Price, Quantization};
use crate::openrouter::ProviderPreferences;

use super::super::endpoint::RunEndpoint;
use super::super::health::{BreakerState, Health};
use super::super::reason::OffReason;
use super::journal::Once;
use super::{Clock, Core, Listed};
use crate::policy::{Exclusion, Judged, PolicyConfig, PolicyMode};

/// The run's endpoints and how each stands: the facts, the operator's choices, the policy's
/// verdicts, the listing's word, the breakers.
pub(super) struct Fleet {
    endpoints: Arc<Vec<RunEndpoint>>,
    policy: PolicyConfig,
    native: Quantization,
    /// The operator's choice per endpoint (overrides the policy).
    operator: Vec<Option<bool>>,
    health: Vec<Health>,
    listed: Vec<Listed>,
    /// The policy's verdict per endpoint (see `refresh_verdicts`).
    verdicts: Vec<Option<Exclusion>>,
    /// Probe agreement per endpoint tag (`harvest probe`), for `policy.min_probe_agreement`.
    probe: HashMap<String, f64>,
    /// What closed streams showed of each endpoint's billing of a cancel, by tag.
    cancel: HashMap<String, super::cancel_billing::Evidence>,
    /// What earlier runs of the output directory read of each endpoint's closes, by tag, not
    /// yet added to `cancel` (at the first event: `cancel_billing::carry_closes`).
    closes_before: Vec<(String, crate::close_reading::ClosesSeen)>,
    /// The checks asked of each endpoint's close, by tag (see `cancel_check`).
    checks: HashMap<String, super::cancel_check::Checks>,
    /// Tokens an event carries at each endpoint, by tag, learned from its completed streams
    /// (see `wire_rate`): how a closed stream's events read as tokens.
    wire: HashMap<String, super::wire_rate::TokensPerEvent>,
    /// Bytes of text a token carries over the run's completed streams (see `wire_rate`): how a
    /// stream's text reads as tokens until its endpoint's rate is learned.
    text: super::wire_rate::BytesPerToken,
    /// Each endpoint's decode pace and what its closes were billed past what was received, by
    /// tag (see `close_transit`): the tokens in transit the dollar cap holds for its streams.
    transit: HashMap<String, super::close_transit::Transit>,
    /// In-flight counts per endpoint as of the last [`super::Live`] reading, plus this
    /// dispatch round's pinned requests.
    ep_in_flight: Vec<u64>,
    /// Requests in flight routed by OpenRouter to this endpoint alone (`provider.only` of one,
    /// as the last stretch sends them): counted at dispatch, where `ep_in_flight` counts them
    /// only from their first token.
    sole: Vec<u64>,
    /// `reach[c][j]`: endpoint `c`'s tag, named in `provider.only`, reaches endpoint `j`
    /// ([`EndpointTag::reached_by`]); computed when the endpoints change, since a route is
    /// chosen for every request and the slug rule is string work.
    reach: Vec<Vec<bool>>,
}

impl Fleet {
    /// `endpoints` as listed, under `policy` for a model natively `native`; each starts with
    /// no choice of the operator's, a fresh `health`, and nothing learned.
    pub(super) fn new(
        endpoints: Arc<Vec<RunEndpoint>>,
        policy: crate::policy::PolicyConfig,
        native: Quantization,
        health: Health,
    ) -> Fleet {
        let n = endpoints.len();
        let listed = (endpoints.iter())
            .map(|e| Listed {
                status: e.status,
                uptime_30m: e.uptime_30m,
                present: true,
            })
            .collect();
        Fleet {
            health: vec![health; n],
            reach: Fleet::reach_of(&endpoints),
            endpoints,
            policy,
            native,
            operator: vec![None; n],
            listed,
            verdicts: Vec::new(),
            probe: HashMap::new(),
            cancel: HashMap::new(),
            closes_before: Vec::new(),
            checks: HashMap::new(),
            wire: HashMap::new(),
            text: Default::default(),
            transit: HashMap::new(),
            ep_in_flight: vec![0; n],
            sole: vec![0; n],
        }
    }

    /// The run's endpoints, in their fixed order (an index is an endpoint for the whole run).
    pub(super) fn endpoints(&self) -> &Arc<Vec<RunEndpoint>> {
        &self.endpoints
    }

    /// Endpoint `i`.
    pub(super) fn endpoint(&self, i: usize) -> &RunEndpoint {
        &self.endpoints[i]
    }

    /// The quantization policy in force.
    pub(super) fn policy(&self) -> &crate::policy::PolicyConfig {
        &self.policy
    }

    /// The model's native quantization.
    pub(super) fn native(&self) -> &Quantization {
        &self.native
    }

    /// The operator's choice for endpoint `i`, if they made one.
    pub(super) fn operator(&self, i: usize) -> Option<bool> {
        self.operator[i]
    }

    pub(super) fn set_operator(&mut self, i: usize, choice: Option<bool>) {
        self.operator[i] = choice;
    }

    /// Endpoint `i`'s breaker and rate limits.
    pub(super) fn health(&self, i: usize) -> &Health {
        &self.health[i]
    }

    pub(super) fn health_mut(&mut self, i: usize) -> &mut Health {
        &mut self.health[i]
    }

    /// What the listing says of endpoint `i`.
    pub(super) fn listed(&self, i: usize) -> &Listed {
        &self.listed[i]
    }

    pub(super) fn listed_mut(&mut self, i: usize) -> &mut Listed {
        &mut self.listed[i]
    }

    /// The policy's verdict on endpoint `i`, once computed.
    pub(super) fn verdict(&self, i: usize) -> Option<&crate::policy::Exclusion> {
        self.verdicts.get(i).and_then(Option::as_ref)
    }

    /// `harvest probe`'s agreement per endpoint tag.
    pub(super) fn set_probe(&mut self, agreement: HashMap<String, f64>) {
        self.probe = agreement;
    }

    /// What closed streams showed of `tag`'s billing of a close.
    pub(super) fn cancel(&self, tag: &str) -> Option<&super::cancel_billing::Evidence> {
        self.cancel.get(tag)
    }

    pub(super) fn cancel_mut(&mut self, tag: &str) -> Option<&mut super::cancel_billing::Evidence> {
        self.cancel.get_mut(tag)
    }

    /// `tag`'s evidence is `ev` from now.
    pub(super) fn set_cancel(&mut self, tag: String, ev: super::cancel_billing::Evidence) {
        self.cancel.insert(tag, ev);
    }

    /// `tag`'s evidence, begun as `fresh` when there is none yet.
    pub(super) fn cancel_or(
        &mut self,
        tag: String,
        fresh: super::cancel_billing::Evidence,
    ) -> &mut super::cancel_billing::Evidence {
        self.cancel.entry(tag).or_insert(fresh)
    }

    /// What earlier runs read of each endpoint's closes, not yet taken in.
    pub(super) fn has_closes_before(&self) -> bool {
        !self.closes_before.is_empty()
    }

    pub(super) fn take_closes_before(&mut self) -> Vec<(String, crate::close_reading::ClosesSeen)> {
        std::mem::take(&mut self.closes_before)
    }

    pub(super) fn set_closes_before(&mut self, v: Vec<(String, crate::close_reading::ClosesSeen)>) {
        self.closes_before = v;
    }

    /// The checks asked of `tag`'s close.
    pub(super) fn checks(&self, tag: &str) -> Option<&super::cancel_check::Checks> {
        self.checks.get(tag)
    }

    pub(super) fn checks_mut(&mut self, tag: &str) -> Option<&mut super::cancel_check::Checks> {
        self.checks.get_mut(tag)
    }

    /// `tag`'s checks, none asked yet when new.
    pub(super) fn checks_of(&mut self, tag: String) -> &mut super::cancel_check::Checks {
        self.checks.entry(tag).or_default()
    }

    pub(super) fn all_checks_mut(
        &mut self,
    ) -> impl Iterator<Item = &mut super::cancel_check::Checks> {
        self.checks.values_mut()
    }

    /// Tokens an event carries at `tag`, as learned.
    pub(super) fn wire(&self, tag: &str) -> Option<&super::wire_rate::TokensPerEvent> {
        self.wire.get(tag)
    }

    pub(super) fn wire_of(&mut self, tag: String) -> &mut super::wire_rate::TokensPerEvent {
        self.wire.entry(tag).or_default()
    }

    /// Bytes of text a token carries over the run's completed streams.
    pub(super) fn text(&self) -> &super::wire_rate::BytesPerToken {
        &self.text
    }

    pub(super) fn text_mut(&mut self) -> &mut super::wire_rate::BytesPerToken {
        &mut self.text
    }

    /// `tag`'s decode pace and what its closes were billed past what was received.
    pub(super) fn transit(&self, tag: &str) -> Option<&super::close_transit::Transit> {
        self.transit.get(tag)
    }

    pub(super) fn transit_of(&mut self, tag: String) -> &mut super::close_transit::Transit {
        self.transit.entry(tag).or_default()
    }

    /// The workers' in-flight counts per endpoint, as last read, one per endpoint.
    pub(super) fn read_in_flight(&mut self, counts: &[u64]) {
        self.ep_in_flight.clone_from(&counts.to_vec());
        self.ep_in_flight.resize(self.endpoints.len(), 0);
    }

    /// A request went to endpoint `e`: counted there until the next reading.
    pub(super) fn count_in_flight(&mut self, e: usize) {
        if let Some(n) = self.ep_in_flight.get_mut(e) {
            *n += 1;
        }
    }

    /// A request routed to endpoint `only` alone (`provider.only` of one) left (`true`) or
    /// came back.
    pub(super) fn count_sole(&mut self, only: usize, left: bool) {
        if let Some(n) = self.sole.get_mut(only) {
            *n = if left { *n + 1 } else { n.saturating_sub(1) };
        }
    }

    /// Endpoints joined the table: each new one starts with no choice, `health()`, `listed()`
    /// and nothing in flight.
    pub(super) fn grow(&mut self, health: impl Fn() -> Health, listed: impl Fn() -> Listed) {
        while self.operator.len() < self.endpoints.len() {
            self.operator.push(None);
            self.health.push(health());
            self.listed.push(listed());
            self.ep_in_flight.push(0);
            self.sole.push(0);
        }
    }

    /// Which endpoints each endpoint's tag reaches as a slug (see [`Fleet::reach`]).
    pub(super) fn reach_of(endpoints: &[RunEndpoint]) -> Vec<Vec<bool>> {
        (endpoints.iter())
            .map(|c| {
                (endpoints.iter())
                    .map(|j| EndpointTag::reached_by(&j.tag, &c.tag))
                    .collect()
            })
            .collect()
    }

    /// The run's endpoints are now `endpoints` (a price changed, one joined).
    pub(super) fn set_endpoints(&mut self, endpoints: Arc<Vec<RunEndpoint>>) {
        if endpoints.len() != self.reach.len() {
            self.reach = Fleet::reach_of(&endpoints);
        }
        self.endpoints = endpoints;
    }

    /// Recomputes every endpoint's policy verdict; after a preset, a probe or a listing
    /// refresh (it only changes with those, not per request).
    pub(super) fn refresh_verdicts(&mut self) {
        self.verdicts = self.verdicts_of(&self.policy);
    }

    /// Every endpoint's verdict under `policy`.
    fn verdicts_of(&self, policy: &PolicyConfig) -> Vec<Option<Exclusion>> {
        (self.endpoints.iter())
            .zip(&self.listed)
            .map(|(e, l)| {
                // The listing's latest uptime, not the one the run started with.
                let mut facts = e.facts();
                facts.uptime_30m = l.uptime_30m;
                policy.verdict_with_probe(&self.native, &facts, self.probe.get(&e.tag).copied())
            })
            .collect()
    }

    /// Switches the quantization policy. The operator's choices stay, but for the inclusions
    /// of endpoints the new policy excludes when it is the faithful one: going back to it
    /// restores the faithful set. Returns how many inclusions it undid.
    pub(super) fn set_mode(&mut self, mode: PolicyMode) -> usize {
        self.policy.mode = mode;
        self.refresh_verdicts();
        if mode != PolicyMode::Faithful {
            return 0;
        }
        let mut undone = 0;
        for (o, v) in self.operator.iter_mut().zip(&self.verdicts) {
            if *o == Some(true) && v.is_some() {
                *o = None;
                undone += 1;
            }
        }
        undone
    }

    /// Allowed by the operator and the policy (health and listing aside): the include mark.
    pub(super) fn permitted(&self, i: usize) -> bool {
        match self.operator[i] {
            Some(v) => v,
            None => self.verdicts.get(i).is_none_or(Option::is_none),
        }
    }

    /// Why endpoint `i` takes no request now, if it does not.
    pub(super) fn off_reason(&self, i: usize, now: &Clock) -> Option<OffReason> {
        if !self.listed[i].present {
            return Some(OffReason::Gone);
        }
        match self.operator[i] {
            Some(false) => return Some(OffReason::Operator),
            Some(true) => {}
            None => {
                if let Some(x) = self.verdicts.get(i).and_then(Option::as_ref) {
                    return Some(OffReason::Policy {
                        exclusion: x.clone(),
                    });
                }
            }
        }
        let h = &self.health[i];
        if let Some(d) = h.open_for(now.mono) {
            return Some(OffReason::Breaker { secs: d.as_secs() });
        }
        if h.state() == BreakerState::HalfOpen {
            return Some(OffReason::BreakerProbing);
        }
        if let Some(d) = h.rate_limited_for(now.mono) {
            return Some(OffReason::RateLimited {
                secs: d.as_secs_f64().ceil() as u64,
            });
        }
        None
    }

    /// Our requests at endpoint `i` now, as far as the run can tell: those streaming there or
    /// pinned there, or those sent to it alone, whichever is more.
    pub(super) fn load_at(&self, i: usize) -> u64 {
        let at = self.ep_in_flight.get(i).copied().unwrap_or(0);
        at.max(self.sole.get(i).copied().unwrap_or(0))
    }
}

/// Which endpoints a route is chosen among, beyond those that may serve now.
#[derive(Clone, Copy, Default)]
struct Among<'a> {
    /// Only where closing a stream stops its bill.
    stoppable_only: bool,
    /// Only those that may take a request sending these parameters.
    sends: Option<&'a [&'static str]>,
    /// Only this one (a check of its close, `cancel_check`).
    only: Option<usize>,
}

/// Where a request goes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Route {
    /// The endpoint it is pinned to (pinned routing, or an own server).
    pub pinned: Option<usize>,
    /// The `provider` object for OpenRouter (none for an own server).
    pub prefs: Option<ProviderPreferences>,
    /// Prices to reserve with: the endpoint's, or the dearest of the allowed set.
    pub price_in: Price,
    pub price_out: Price,
    /// The endpoints it may reach: the pinned one, or the set handed to OpenRouter.
    pub over: Vec<usize>,
}

impl Core {
    /// Allowed by the operator and the policy (the snapshot's include mark).
    pub(crate) fn permitted(&self, i: usize) -> bool {
        self.fleet.permitted(i)
    }

    /// What the policy says of endpoint `i`, the operator's choice aside: why it excludes it.
    pub(crate) fn policy_verdict(&self, i: usize) -> Option<&Exclusion> {
        self.fleet.verdicts.get(i).and_then(Option::as_ref)
    }

    /// The endpoints the `any` policy would let serve that are not allowed now (the operator's
    /// exclusions stay theirs; one gone from the listing opens nothing): what `a` opens. None
    /// under `any` already.
    pub(crate) fn opened_by_any(&self) -> Vec<usize> {
        let f = &self.fleet;
        if f.policy.mode == PolicyMode::Any {
            return Vec::new();
        }
        let any = PolicyConfig {
            mode: PolicyMode::Any,
            ..f.policy.clone()
        };
        (f.verdicts_of(&any).iter().enumerate())
            .filter(|(i, v)| {
                v.is_none()
                    && !f.permitted(*i)
                    && f.operator[*i] != Some(false)
                    && f.listed[*i].present
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Why endpoint `i` takes no request now, if it does not (the snapshot's reason).
    pub(crate) fn off_reason(&self, i: usize, now: &Clock) -> Option<OffReason> {
        self.fleet.off_reason(i, now)
    }

    /// Why endpoint `i` gets no request though it may serve: every dataset with work left
    /// sends what it cannot take ([`Core::takes`]). Datasets done are not asked (a listing that
    /// lacks what only they sent idles it no more).
    pub(crate) fn idle_reason(&self, i: usize) -> Option<crate::engine::reason::IdleReason> {
        let live: Vec<&super::DatasetBook> = (0..self.admission.datasets().len())
            .filter(|&d| !self.admission.dataset_finished(d))
            .map(|d| self.admission.dataset(d))
            .collect();
        if live.is_empty() || live.iter().any(|d| self.takes(i, &d.sends)) {
            return None;
        }
        let listed = self.fleet.endpoints[i].supported_parameters.as_deref();
        let mut params: Vec<String> = Vec::new();
        for d in &live {
            for p in super::params::unlisted(&d.sends, listed) {
                if !params.iter().any(|x| x == p) {
                    params.push(p.to_string());
                }
            }
        }
        Some(crate::engine::reason::IdleReason::Unlisted { params })
    }

    /// The most requests endpoint `i` may have in flight: an own server's `concurrency`, or
    /// the config's `endpoint_concurrency` for it.
    fn cap(&self, i: usize) -> Option<u32> {
        let e = &self.fleet.endpoints[i];
        let set = match &e.custom {
            Some(c) => Some(c.concurrency),
            None => self.cfg.endpoint_concurrency.get(&e.tag).copied(),
        };
        // What its 429s taught, when lower.
        match (set, self.fleet.health[i].ceiling()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Chooses where a request goes; `avoid` is where its last attempt failed (a retry goes
    /// elsewhere when there is elsewhere). `None`: nothing can take it now.
    /// When some endpoint may take a request: now, the soonest end of a breaker's cool-down,
    /// a 429 pause or the account's pause; `None` when only an event can change it (a result,
    /// an operator's command, a listing: every endpoint excluded, gone, at its cap or probing).
    pub(super) fn routable_at(&self, now: &Clock) -> Option<Instant> {
        (0..self.fleet.endpoints.len())
            .filter(|&i| self.fleet.listed[i].present && self.fleet.permitted(i))
            .filter(|&i| {
                self.cap(i)
                    .is_none_or(|cap| self.fleet.load_at(i) < u64::from(cap))
            })
            .filter_map(|i| {
                let t = self.fleet.health[i].available_at(now.mono)?;
                if self.fleet.endpoints[i].custom.is_some() {
                    return Some(t);
                }
                Some(
                    t.max(
                        self.budget
                            .account()
                            .open_at(self.budget.or_in_flight(), now.mono)?,
                    ),
                )
            })
            .min()
    }

    /// When nothing is in flight, work is left and no endpoint will take a request by time
    /// alone (every one gone, excluded or probing), the run would wait without a word: say
    /// why once, until something routes again.
    pub(super) fn say_if_stuck(&mut self, now: &Clock) {
        if !self.in_flight.is_empty()
            || self.routable_at(now).is_some()
            || self.admission.all_finished()
            || !self.journal.first(Once::Stuck)
        {
            return;
        }
        let why: Vec<String> = (0..self.fleet.endpoints.len())
            .filter_map(|i| {
                let r = self.fleet.off_reason(i, now)?;
                Some(format!("{} ({r})", self.fleet.endpoints[i].tag))
            })
            .collect();
        let shown = why.len().min(6);
        let more = if why.len() > shown {
            format!(" and {} more", why.len() - shown)
        } else {
            String::new()
        };
        let text = format!(
            "no endpoint can take a request: {}{more}. Waiting for the listing's next refresh, \
             an endpoint included (space in the TUI) or another policy",
            why[..shown].join(", ")
        );
        self.event(now, text);
    }

    pub(super) fn route(&mut self, now: &Clock, avoid: Option<usize>) -> Option<Route> {
        self.route_among(now, avoid, Among::default())
    }

    /// Where `job`'s request goes: [`Core::route`] among the endpoints that may take its
    /// parameters (`params::eligible`), and only where closing a stream stops its bill when
    /// `stoppable_only` (the hard budget's last stretch: there a request reserves its
    /// expectation). A retry goes elsewhere than where it just failed, when there is elsewhere.
    pub(super) fn route_job(
        &mut self,
        now: &Clock,
        job: &super::Job,
        stoppable_only: bool,
    ) -> Option<Route> {
        self.route_job_among(now, job, stoppable_only, None)
    }

    /// [`Core::route_job`] to endpoint `only` alone, when it may take the request now.
    pub(super) fn route_job_to(
        &mut self,
        now: &Clock,
        job: &super::Job,
        only: usize,
    ) -> Option<Route> {
        self.route_job_among(now, job, false, Some(only))
    }

    fn route_job_among(
        &mut self,
        now: &Clock,
        job: &super::Job,
        stoppable_only: bool,
        only: Option<usize>,
    ) -> Option<Route> {
        let sends = self.admission.take_sends(job.dataset);
        let among = Among {
            stoppable_only,
            sends: Some(&sends),
            only,
        };
        let route = self.route_among(now, job.failed_at, among);
        self.admission.give_back_sends(job.dataset, sends);
        route
    }

    /// Whether endpoint `i` may take a request that sends `sends` (see `params::eligible`).
    pub(super) fn takes(&self, i: usize, sends: &[&'static str]) -> bool {
        let e = &self.fleet.endpoints[i];
        let missing = super::params::unlisted(sends, e.supported_parameters.as_deref());
        super::params::eligible(
            self.cfg.routing,
            self.cfg.provider.require_parameters,
            &missing,
        )
    }

    fn route_among(
        &mut self,
        now: &Clock,
        avoid: Option<usize>,
        among: Among<'_>,
    ) -> Option<Route> {
        let n = self.fleet.endpoints.len();
        let mut candidates: Vec<usize> = Vec::new();
        for i in 0..n {
            if self.fleet.listed[i].present
                && self.fleet.permitted(i)
                && self.fleet.health[i].available(now.mono)
                && (!among.stoppable_only || self.fleet.endpoints[i].cancel_stops_billing)
                && among.sends.is_none_or(|s| self.takes(i, s))
                && among.only.is_none_or(|o| o == i)
            {
                candidates.push(i);
            }
        }
        if let Some(a) = avoid
            && candidates.len() > 1
        {
            candidates.retain(|&i| i != a);
        }
        // Caps: an endpoint at its cap takes no more until one finishes.
        // The account's in-flight budget holds OpenRouter traffic; own servers go on.
        if !self
            .budget
            .account()
            .admits(self.budget.or_in_flight(), now.mono)
        {
            candidates.retain(|&i| self.fleet.endpoints[i].custom.is_some());
        }
        candidates.retain(|&i| {
            self.cap(i)
                .is_none_or(|cap| self.fleet.load_at(i) < u64::from(cap))
        });
        if candidates.is_empty() {
            return None;
        }
        let eps = self.fleet.endpoints.clone();
        let load = |i: usize| self.fleet.ep_in_flight.get(i).copied().unwrap_or(0);
        let cheapest = |list: &mut dyn Iterator<Item = usize>| {
            list.min_by_key(|&i| (eps[i].price_out, eps[i].price_in, load(i)))
        };
        let top = self.allowed_top_prices();
        let provider = self.cfg.provider.clone();
        let pin = |i: usize| {
            let e = &eps[i];
            Some(Route {
                pinned: Some(i),
                prefs: e.custom.is_none().then(|| {
                    let mut p = ProviderPreferences::pinned(&e.tag);
                    provider.apply(&mut p, top);
                    p
                }),
                price_in: e.price_in,
                price_out: e.price_out,
                over: vec![i],
            })
        };
        match self.cfg.routing {
            Routing::Pinned => pin(cheapest(&mut candidates.into_iter())?),
            Routing::Openrouter => {
                let own = cheapest(
                    &mut candidates
                        .iter()
                        .copied()
                        .filter(|&i| eps[i].custom.is_some()),
                );
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
                if let Some(r) = self.openrouter_route(&candidates) {
                    return Some(r);
                }
                // OpenRouter's slugs cannot say "exactly these": pin each request instead.
                let choice = cheapest(&mut candidates.iter().copied())?;
                if self.journal.first(Once::Inexpressible) {
                    let tags: Vec<&str> = candidates.iter().map(|&i| eps[i].tag.as_str()).collect();
                    let text = format!(
                        "the allowed endpoints ({}) cannot be named exactly in only/ignore (an \
                         ignore would also remove an allowed one): pinned routing for them",
                        tags.join(", ")
                    );
                    self.event(now, text);
                }
                // The tag may name others too (that is why): the quantization tells them apart.
                let mut r = pin(choice)?;
                if let Some(p) = r.prefs.as_mut()
                    && eps[choice].quantization != Quantization::Unknown
                {
                    p.quantizations = Some(vec![eps[choice].quantization.clone()]);
                }
                Some(r)
            }
        }
    }

    /// The highest input and output prices among the OpenRouter endpoints allowed now (the
    /// health of each aside): what `max_price = "auto"` sends.
    fn allowed_top_prices(&self) -> (Price, Price) {
        // Only `max_price = "auto"` reads it: skip the walk otherwise (this runs per dispatch).
        if !matches!(
            self.cfg.provider.max_price,
            Some(crate::config::MaxPriceSetting::Auto(_))
        ) {
            return (Price::ZERO, Price::ZERO);
        }
        let allowed = (0..self.fleet.endpoints.len())
            .filter(|&i| self.fleet.endpoints[i].custom.is_none())
            .filter(|&i| self.fleet.listed[i].present && self.fleet.permitted(i));
        allowed.fold((Price::ZERO, Price::ZERO), |(a, b), i| {
            // Under any condition an override sets (a long prompt, another hour).
            let (p, c) = self.fleet.endpoints[i].tariff.top();
            (a.max(p), b.max(c))
        })
    }

    /// The `provider` object that lets OpenRouter route among `candidates` and nowhere else,
    /// under its slug semantics ([`EndpointTag::reached_by`]): their tags in `only`, and in
    /// `ignore` the full tags of the other endpoints a base slug in `only` would reach. `None`
    /// when no such object reaches exactly the candidates (an ignore entry would also reach an
    /// allowed endpoint).
    fn openrouter_route(&self, candidates: &[usize]) -> Option<Route> {
        let eps = &self.fleet.endpoints;
        let reach = &self.fleet.reach;
        let reached = |slugs: &[usize], i: usize| slugs.iter().any(|&c| reach[c][i]);
        let ignore: Vec<usize> = (0..eps.len())
            .filter(|i| !candidates.contains(i) && reached(candidates, *i))
            .collect();
        let exact = (0..eps.len())
            .all(|i| candidates.contains(&i) == (reached(candidates, i) && !reached(&ignore, i)));
        if !exact {
            return None;
        }
        let tags: Vec<String> = candidates.iter().map(|&i| eps[i].tag.clone()).collect();
        let ignore: Vec<String> = ignore.iter().map(|&i| eps[i].tag.clone()).collect();
        let price_in = candidates.iter().map(|&i| eps[i].price_in).max();
        let price_out = candidates.iter().map(|&i| eps[i].price_out).max();
        let mut prefs = ProviderPreferences::only(tags);
        prefs.allow_fallbacks = Some(self.fleet.policy.allow_fallbacks);
        prefs.require_parameters = Some(self.cfg.provider.require_parameters);
        self.cfg
            .provider
            .apply(&mut prefs, self.allowed_top_prices());
        if !ignore.is_empty() {
            prefs.ignore = Some(ignore);
        }
        // When the allowed set is the quantization policy alone (no operator choices, no
        // include list), say so to OpenRouter too: a variant it routes to under an allowed slug
        // must still be of an allowed precision.
        let pure_filter = self.fleet.policy.mode == PolicyMode::Faithful
            && self.fleet.policy.include.is_empty()
            && self.fleet.operator.iter().all(Option::is_none)
            && !self.fleet.policy.allow_unknown;
        if pure_filter {
            let mut qs: Vec<Quantization> = Vec::new();
            for &i in candidates {
                if !qs.contains(&eps[i].quantization) {
                    qs.push(eps[i].quantization.clone());
                }
            }
            prefs.quantizations = Some(qs);
        }
        Some(Route {
            pinned: None,
            prefs: Some(prefs),
            price_in: price_in.unwrap_or_default(),
            price_out: price_out.unwrap_or_default(),
            over: candidates.to_vec(),
        })
    }

    /// The prices of one request of `prompt_tokens` on `route` now: its endpoint's, or for
    /// OpenRouter's choice the dearest of each among the set (overrides, discount, fee).
    pub(super) fn rates_for(
        &self,
        route: &Route,
        prompt_tokens: u64,
        now: &Clock,
    ) -> crate::pricing::Rates {
        let at = crate::pricing::hhmm(&now.wall);
        let mut out: Option<crate::pricing::Rates> = None;
        for &i in &route.over {
            let r = self.fleet.endpoints[i].tariff.rates(prompt_tokens, at);
            out = Some(match out {
                None => r,
                Some(o) => crate::pricing::Rates {
                    prompt: o.prompt.max(r.prompt),
                    completion: o.completion.max(r.completion),
                    cache_read: o.cache_read.max(r.cache_read),
                    request: o.request.max(r.request),
                },
            });
        }
        out.unwrap_or(crate::pricing::Rates {
            prompt: route.price_in,
            completion: route.price_out,
            cache_read: route.price_in,
            request: crate::domain::Usd::ZERO,
        })
    }
}
