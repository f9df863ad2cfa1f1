//! The run's endpoints and how each stands (the fleet): the facts, the operator's choices, the
//! policy's verdicts, the listing's word, the breakers, and what each endpoint's streams and
//! closes have taught (tokens an event, transit, close billing, checks). A walled room: the
//! rest of the core asks and tells it through its methods (issue #52 item 2); which endpoint a
//! request goes to is `routing`'s.

use std::collections::HashMap;
use std::sync::Arc;

use crate::domain::{EndpointTag, Quantization};

use super::super::endpoint::RunEndpoint;
use super::super::health::{BreakerState, Health};
use super::super::reason::OffReason;
use super::{Clock, Listed};
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

    /// The endpoints the `any` policy would let serve that are not allowed now (the
    /// operator's exclusions stay theirs; one gone from the listing opens nothing). None under
    /// `any` already.
    pub(super) fn opened_by_any(&self) -> Vec<usize> {
        if self.policy.mode == PolicyMode::Any {
            return Vec::new();
        }
        let any = PolicyConfig {
            mode: PolicyMode::Any,
            ..self.policy.clone()
        };
        (self.verdicts_of(&any).iter().enumerate())
            .filter(|(i, v)| {
                v.is_none()
                    && !self.permitted(*i)
                    && self.operator[*i] != Some(false)
                    && self.listed[*i].present
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Our requests streaming at or pinned to endpoint `i`, as last read.
    pub(super) fn in_flight_at(&self, i: usize) -> u64 {
        self.ep_in_flight.get(i).copied().unwrap_or(0)
    }

    /// Whether endpoint `c`'s tag, named in `provider.only`, reaches endpoint `i`.
    pub(super) fn reaches(&self, c: usize, i: usize) -> bool {
        self.reach[c][i]
    }

    /// Whether the operator included or excluded any endpoint themselves.
    pub(super) fn operator_chose(&self) -> bool {
        self.operator.iter().any(Option::is_some)
    }

    /// Our requests at endpoint `i` now, as far as the run can tell: those streaming there or
    /// pinned there, or those sent to it alone, whichever is more.
    pub(super) fn load_at(&self, i: usize) -> u64 {
        let at = self.ep_in_flight.get(i).copied().unwrap_or(0);
        at.max(self.sole.get(i).copied().unwrap_or(0))
    }
}
