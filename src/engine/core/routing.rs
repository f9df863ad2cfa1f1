//! Routing: where a request goes, among the endpoints that may serve (the fleet's, `fleet.rs`:
//! operator, policy, listing, health, and why the others may not, [`OffReason`]): the cheapest
//! healthy endpoint under its cap (pinned routing, own servers), or the allowed set handed to
//! OpenRouter (`only`, `ignore`, `quantizations`).

use crate::config::Routing;
use std::time::Instant;

use crate::domain::{Price, Quantization};
use crate::openrouter::ProviderPreferences;

use super::super::reason::OffReason;
use super::journal::Once;
use super::{Clock, Core};
use crate::policy::{Exclusion, PolicyMode};

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
        self.fleet.verdict(i)
    }

    /// The endpoints the `any` policy would let serve that are not allowed now (the operator's
    /// exclusions stay theirs; one gone from the listing opens nothing): what `a` opens. None
    /// under `any` already.
    pub(crate) fn opened_by_any(&self) -> Vec<usize> {
        self.fleet.opened_by_any()
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
        let listed = self.fleet.endpoint(i).supported_parameters.as_deref();
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
        let e = &self.fleet.endpoint(i);
        let set = match &e.custom {
            Some(c) => Some(c.concurrency),
            None => self.cfg.endpoint_concurrency.get(&e.tag).copied(),
        };
        // What its 429s taught, when lower.
        match (set, self.fleet.health(i).ceiling()) {
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
        (0..self.fleet.endpoints().len())
            .filter(|&i| self.fleet.listed(i).present && self.fleet.permitted(i))
            .filter(|&i| {
                self.cap(i)
                    .is_none_or(|cap| self.fleet.load_at(i) < u64::from(cap))
            })
            .filter_map(|i| {
                let t = self.fleet.health(i).available_at(now.mono)?;
                if self.fleet.endpoint(i).custom.is_some() {
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
        let why: Vec<String> = (0..self.fleet.endpoints().len())
            .filter_map(|i| {
                let r = self.fleet.off_reason(i, now)?;
                Some(format!("{} ({r})", self.fleet.endpoint(i).tag))
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
        let e = &self.fleet.endpoint(i);
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
        let n = self.fleet.endpoints().len();
        let mut candidates: Vec<usize> = Vec::new();
        for i in 0..n {
            if self.fleet.listed(i).present
                && self.fleet.permitted(i)
                && self.fleet.health_mut(i).available(now.mono)
                && (!among.stoppable_only || self.fleet.endpoint(i).cancel_stops_billing)
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
            candidates.retain(|&i| self.fleet.endpoint(i).custom.is_some());
        }
        candidates.retain(|&i| {
            self.cap(i)
                .is_none_or(|cap| self.fleet.load_at(i) < u64::from(cap))
        });
        if candidates.is_empty() {
            return None;
        }
        let eps = self.fleet.endpoints().clone();
        let load = |i: usize| self.fleet.in_flight_at(i);
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
        let allowed = (0..self.fleet.endpoints().len())
            .filter(|&i| self.fleet.endpoint(i).custom.is_none())
            .filter(|&i| self.fleet.listed(i).present && self.fleet.permitted(i));
        allowed.fold((Price::ZERO, Price::ZERO), |(a, b), i| {
            // Under any condition an override sets (a long prompt, another hour).
            let (p, c) = self.fleet.endpoint(i).tariff.top();
            (a.max(p), b.max(c))
        })
    }

    /// The `provider` object that lets OpenRouter route among `candidates` and nowhere else,
    /// under its slug semantics ([`EndpointTag::reached_by`]): their tags in `only`, and in
    /// `ignore` the full tags of the other endpoints a base slug in `only` would reach. `None`
    /// when no such object reaches exactly the candidates (an ignore entry would also reach an
    /// allowed endpoint).
    fn openrouter_route(&self, candidates: &[usize]) -> Option<Route> {
        let eps = self.fleet.endpoints();
        let reached = |slugs: &[usize], i: usize| slugs.iter().any(|&c| self.fleet.reaches(c, i));
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
        prefs.allow_fallbacks = Some(self.fleet.policy().allow_fallbacks);
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
        let pure_filter = self.fleet.policy().mode == PolicyMode::Faithful
            && self.fleet.policy().include.is_empty()
            && !self.fleet.operator_chose()
            && !self.fleet.policy().allow_unknown;
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
            let r = self.fleet.endpoint(i).tariff.rates(prompt_tokens, at);
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
