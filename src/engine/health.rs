//! Per-endpoint health: the circuit breaker (open after N consecutive failures, half-open
//! probe after a cool-down that doubles while the endpoint keeps failing) and rate-limit
//! cool-downs from 429s. Pure: the caller passes the time.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Breaker position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    /// No requests until the cool-down ends.
    Open,
    /// One probe request is allowed; its outcome closes or re-opens the breaker.
    HalfOpen,
}

/// What a change of breaker state means for the event log.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum HealthEvent {
    Opened { failures: u32, cooldown: Duration },
    Closed,
}

#[derive(Clone, Debug)]
pub(crate) struct Health {
    threshold: u32,
    base_cooldown: Duration,
    consecutive: u32,
    state: BreakerState,
    open_until: Option<Instant>,
    cooldown: Duration,
    probe_in_flight: bool,
    /// A 429 asked us to wait until then (this endpoint only).
    rate_limited_until: Option<Instant>,
    /// Streams it took at once before it answered 429, learned: it takes no more until one
    /// ends, and one more after each answer (found again by its next 429).
    ceiling: Option<u32>,
}

/// The least a learned ceiling holds.
const MIN_CEILING: u32 = 4;

const MAX_COOLDOWN: Duration = Duration::from_secs(600);

impl Health {
    pub(crate) fn new(threshold: u32, cooldown: Duration) -> Self {
        Health {
            threshold: threshold.max(1),
            base_cooldown: cooldown,
            consecutive: 0,
            state: BreakerState::Closed,
            open_until: None,
            cooldown,
            probe_in_flight: false,
            rate_limited_until: None,
            ceiling: None,
        }
    }

    /// Its learned ceiling of streams at once, if a 429 taught one.
    pub(crate) fn ceiling(&self) -> Option<u32> {
        self.ceiling
    }

    /// It answered 429 with `in_flight` of our streams running there: that many is its
    /// ceiling for now (never below [`MIN_CEILING`]).
    pub(crate) fn learn_ceiling(&mut self, in_flight: u64) {
        let c = u32::try_from(in_flight)
            .unwrap_or(u32::MAX)
            .max(MIN_CEILING);
        self.ceiling = Some(self.ceiling.map_or(c, |old| old.min(c).max(MIN_CEILING)));
    }

    /// An answer came from it: its ceiling, if any, rises by one.
    pub(crate) fn raise_ceiling(&mut self) {
        if let Some(c) = self.ceiling.as_mut() {
            *c = c.saturating_add(1);
        }
    }

    pub(crate) fn state(&self) -> BreakerState {
        self.state
    }

    /// Seconds until the breaker lets a probe through (when open).
    pub(crate) fn open_for(&self, now: Instant) -> Option<Duration> {
        match (self.state, self.open_until) {
            (BreakerState::Open, Some(t)) => Some(t.saturating_duration_since(now)),
            _ => None,
        }
    }

    pub(crate) fn rate_limited_for(&self, now: Instant) -> Option<Duration> {
        self.rate_limited_until
            .filter(|t| *t > now)
            .map(|t| t - now)
    }

    /// When this endpoint may take a request, as of `now`, without changing its state: `now`
    /// when it may now, the end of its 429 pause or breaker cool-down, or `None` while a
    /// half-open probe is out (its result decides).
    pub(crate) fn available_at(&self, now: Instant) -> Option<Instant> {
        let breaker = match self.state {
            BreakerState::Closed => now,
            BreakerState::Open => self.open_until.map_or(now, |t| t.max(now)),
            BreakerState::HalfOpen if self.probe_in_flight => return None,
            BreakerState::HalfOpen => now,
        };
        let limited = self.rate_limited_until.filter(|t| *t > now);
        Some(limited.map_or(breaker, |l| l.max(breaker)))
    }

    /// Moves an expired open breaker to half-open.
    pub(crate) fn tick(&mut self, now: Instant) {
        if self.state == BreakerState::Open && self.open_until.is_some_and(|t| now >= t) {
            self.state = BreakerState::HalfOpen;
            self.probe_in_flight = false;
        }
    }

    /// Whether a request may be sent now.
    pub(crate) fn available(&mut self, now: Instant) -> bool {
        self.tick(now);
        if self.rate_limited_for(now).is_some() {
            return false;
        }
        match self.state {
            BreakerState::Closed => true,
            BreakerState::Open => false,
            BreakerState::HalfOpen => !self.probe_in_flight,
        }
    }

    /// Records a dispatch (takes the half-open probe slot).
    pub(crate) fn on_dispatch(&mut self) {
        if self.state == BreakerState::HalfOpen {
            self.probe_in_flight = true;
        }
    }

    pub(crate) fn on_success(&mut self) -> Option<HealthEvent> {
        self.consecutive = 0;
        self.probe_in_flight = false;
        if self.state != BreakerState::Closed {
            self.state = BreakerState::Closed;
            self.open_until = None;
            self.cooldown = self.base_cooldown;
            return Some(HealthEvent::Closed);
        }
        None
    }

    /// A failure the endpoint is to blame for (not our own cancellation).
    pub(crate) fn on_failure(&mut self, now: Instant) -> Option<HealthEvent> {
        self.consecutive += 1;
        self.probe_in_flight = false;
        let trip = match self.state {
            BreakerState::HalfOpen => {
                self.cooldown = (self.cooldown * 2).min(MAX_COOLDOWN);
                true
            }
            BreakerState::Closed => self.consecutive >= self.threshold,
            BreakerState::Open => false,
        };
        if trip {
            self.state = BreakerState::Open;
            self.open_until = Some(now + self.cooldown);
            return Some(HealthEvent::Opened {
                failures: self.consecutive,
                cooldown: self.cooldown,
            });
        }
        None
    }

    /// A 429: this endpoint only waits (the others are not slowed).
    pub(crate) fn on_rate_limited(&mut self, now: Instant, wait: Duration) {
        let until = now + wait;
        if self.rate_limited_until.is_none_or(|t| t < until) {
            self.rate_limited_until = Some(until);
        }
    }
}

/// Delay before retry number `attempt` (1 = first retry): exponential with full jitter in
/// [d/2, d], at least what the server asked for. `unit` is a uniform draw in [0, 1).
pub(crate) fn backoff(
    attempt: u32,
    base: Duration,
    max: Duration,
    retry_after: Option<Duration>,
    unit: f64,
) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
    let d = exp.min(max);
    let jittered = d.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0));
    match retry_after {
        Some(r) => jittered.max(r.min(max.max(r))),
        None => jittered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_429_sets_a_ceiling_that_each_answer_raises_by_one() {
        let mut h = Health::new(3, Duration::from_secs(1));
        assert_eq!(h.ceiling(), None);
        h.raise_ceiling();
        assert_eq!(h.ceiling(), None, "nothing to raise before a 429");
        h.learn_ceiling(800);
        assert_eq!(h.ceiling(), Some(800));
        h.raise_ceiling();
        h.raise_ceiling();
        assert_eq!(h.ceiling(), Some(802));
        // A 429 with fewer streams there lowers it; with more, it keeps the lower.
        h.learn_ceiling(700);
        assert_eq!(h.ceiling(), Some(700));
        h.learn_ceiling(900);
        assert_eq!(h.ceiling(), Some(700));
        h.learn_ceiling(0);
        assert_eq!(h.ceiling(), Some(MIN_CEILING));
    }

    #[test]
    fn breaker_opens_half_opens_and_closes() {
        let t0 = Instant::now();
        let mut h = Health::new(3, Duration::from_secs(10));
        assert!(h.available(t0));
        assert_eq!(h.on_failure(t0), None);
        assert_eq!(h.on_failure(t0), None);
        assert_eq!(
            h.on_failure(t0),
            Some(HealthEvent::Opened {
                failures: 3,
                cooldown: Duration::from_secs(10)
            })
        );
        assert!(!h.available(t0 + Duration::from_secs(9)));
        let t1 = t0 + Duration::from_secs(10);
        assert!(h.available(t1));
        assert_eq!(h.state(), BreakerState::HalfOpen);
        h.on_dispatch();
        assert!(!h.available(t1), "one probe at a time");
        // The probe fails: open again, twice as long.
        assert_eq!(
            h.on_failure(t1),
            Some(HealthEvent::Opened {
                failures: 4,
                cooldown: Duration::from_secs(20)
            })
        );
        let t2 = t1 + Duration::from_secs(20);
        assert!(h.available(t2));
        h.on_dispatch();
        assert_eq!(h.on_success(), Some(HealthEvent::Closed));
        assert!(h.available(t2));
        // A success resets the count.
        h.on_failure(t2);
        h.on_failure(t2);
        h.on_success();
        assert_eq!(h.on_failure(t2), None);
    }

    #[test]
    fn rate_limit_waits_only_as_asked() {
        let t0 = Instant::now();
        let mut h = Health::new(3, Duration::from_secs(10));
        h.on_rate_limited(t0, Duration::from_secs(5));
        assert!(!h.available(t0 + Duration::from_secs(4)));
        assert!(h.available(t0 + Duration::from_secs(5)));
        assert_eq!(h.state(), BreakerState::Closed);
    }

    #[test]
    fn backoff_grows_caps_and_honours_retry_after() {
        let b = Duration::from_millis(500);
        let m = Duration::from_secs(60);
        assert_eq!(backoff(1, b, m, None, 1.0), Duration::from_millis(500));
        assert_eq!(backoff(3, b, m, None, 1.0), Duration::from_secs(2));
        assert_eq!(backoff(3, b, m, None, 0.0), Duration::from_secs(1));
        assert_eq!(backoff(30, b, m, None, 1.0), m);
        assert_eq!(
            backoff(1, b, m, Some(Duration::from_secs(25)), 0.3),
            Duration::from_secs(25)
        );
    }
}
