//! The account's in-flight spending budget, learned: OpenRouter caps the estimated cost of the
//! paid requests running (and recently finished) on the account, estimating each from its
//! prompt and `max_tokens` (docs: api_reference/limits, "In-flight spending budget"; our
//! notes in research/openrouter-api.md §7.4). Past it a request gets a 402 with
//! `limit_source: openrouter_in_flight_budget` and a `Retry-After`. That is a condition of
//! the account, never of a prompt: the gate here stops OpenRouter traffic until the wait is
//! over (own servers go on) and learns a ceiling on OpenRouter streams, as TCP learns a
//! window: a multiplicative decrease on each wave of 402s, a slow additive increase after a
//! quiet spell, so that a run settles just under the budget instead of bouncing off it.
//! Every 402 of a wave teaches: the ceiling follows 0.75 x the streams running as each comes
//! back, so that when the wave is over it is 0.75 x what the account admitted.

use std::time::{Duration, Instant};

/// A 402 cuts the ceiling to this share of the streams running when it came back.
const DECREASE: f64 = 0.75;
/// No raise before this long without a 402.
pub(crate) const QUIET: Duration = Duration::from_secs(60);
/// Between two raises.
pub(crate) const RAISE_EVERY: Duration = Duration::from_secs(15);
/// Each raise adds this share of the configured concurrency (at least one stream).
const RAISE_SHARE: f64 = 0.05;
/// The ceiling never goes below this: a handful of streams always fit a funded account.
pub(crate) const MIN_CEILING: u32 = 4;

/// What changed, for the event log.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum GateChange {
    /// A new wave of 402s: OpenRouter paused for `wait`, and the ceiling lowered.
    Lowered {
        ceiling: Option<u32>,
        running: u32,
        wait: Duration,
    },
    /// The wave is over: how many it refused, and the ceiling it taught.
    WaveOver { refused: u64, ceiling: Option<u32> },
    /// A quiet spell: the ceiling raised (`None`: back to the configured concurrency).
    Raised { ceiling: Option<u32> },
}

impl std::fmt::Display for GateChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateChange::Lowered {
                ceiling,
                running,
                wait,
            } => {
                write!(
                    f,
                    "in-flight budget: the account refused a request with {running} OpenRouter \
                     streams running (402); OpenRouter paused {:.0} s",
                    wait.as_secs_f64().ceil()
                )?;
                match ceiling {
                    Some(c) => write!(f, ", streams capped at {c}"),
                    None => Ok(()),
                }
            }
            GateChange::WaveOver {
                refused,
                ceiling: Some(c),
            } => write!(
                f,
                "in-flight budget: {refused} requests refused in that wave; OpenRouter streams \
                 capped at {c}"
            ),
            GateChange::WaveOver {
                refused,
                ceiling: None,
            } => write!(
                f,
                "in-flight budget: {refused} requests refused in that wave; OpenRouter resumes"
            ),
            GateChange::Raised { ceiling: Some(c) } => write!(
                f,
                "in-flight budget: quiet for a while, OpenRouter streams capped at {c}"
            ),
            GateChange::Raised { ceiling: None } => f.write_str(
                "in-flight budget: quiet for a while, OpenRouter streams back to the configured concurrency",
            ),
        }
    }
}

/// The learned state. All times are passed in.
#[derive(Clone, Debug, Default)]
pub(crate) struct AccountGate {
    /// No OpenRouter request before this.
    paused_until: Option<Instant>,
    /// The learned ceiling on OpenRouter streams; `None` until a 402 teaches one.
    ceiling: Option<u32>,
    last_402: Option<Instant>,
    last_raise: Option<Instant>,
    /// 402s of the in-flight budget seen in this run.
    hits: u64,
    /// 402s of the current wave, until its end is reported.
    wave: u64,
    /// Whether to learn at all (off: every 402 is only waited out).
    learn: bool,
}

impl AccountGate {
    pub(crate) fn new(learn: bool) -> Self {
        AccountGate {
            learn,
            ..AccountGate::default()
        }
    }

    /// May one more OpenRouter stream start, with `running` of them in flight?
    pub(crate) fn admits(&self, running: u32, now: Instant) -> bool {
        self.paused_until.is_none_or(|t| now >= t) && self.ceiling.is_none_or(|c| running < c)
    }

    /// A 402 of the in-flight budget came back while `running` OpenRouter streams were in
    /// flight (the refused one included). The first of a wave pauses OpenRouter for `wait`
    /// (and is reported); every one lowers the ceiling to 0.75 x `running` if that is lower,
    /// so the wave's last sets it from what the account admitted.
    pub(crate) fn on_budget_402(
        &mut self,
        running: u32,
        wait: Duration,
        now: Instant,
    ) -> Option<GateChange> {
        self.hits += 1;
        self.wave += 1;
        self.last_402 = Some(now);
        let new_wave = self.paused_until.is_none_or(|t| now >= t);
        if new_wave {
            self.paused_until = Some(now + wait);
        }
        if self.learn {
            let target = ((f64::from(running) * DECREASE) as u32).max(MIN_CEILING);
            if self.ceiling.is_none_or(|c| target < c) {
                self.ceiling = Some(target);
                self.last_raise = None;
            }
        }
        new_wave.then_some(GateChange::Lowered {
            ceiling: self.ceiling,
            running,
            wait,
        })
    }

    /// A tick: after a quiet spell, raises the ceiling by a step every [`RAISE_EVERY`]; at the
    /// configured `concurrency` the ceiling goes away.
    pub(crate) fn tick(&mut self, concurrency: u32, now: Instant) -> Option<GateChange> {
        if self.wave > 0 && self.paused_until.is_some_and(|t| now >= t) {
            // The pause is over: say what the wave taught.
            let refused = std::mem::take(&mut self.wave);
            return Some(GateChange::WaveOver {
                refused,
                ceiling: self.ceiling,
            });
        }
        let c = self.ceiling?;
        let quiet = self
            .last_402
            .is_none_or(|t| now.saturating_duration_since(t) >= QUIET);
        let due = self
            .last_raise
            .is_none_or(|t| now.saturating_duration_since(t) >= RAISE_EVERY);
        if !(quiet && due) {
            return None;
        }
        self.last_raise = Some(now);
        let step = ((f64::from(concurrency) * RAISE_SHARE) as u32).max(1);
        let next = c.saturating_add(step);
        self.ceiling = (next < concurrency).then_some(next);
        Some(GateChange::Raised {
            ceiling: self.ceiling,
        })
    }

    /// When one more OpenRouter stream may start, with `running` in flight: now, the end of
    /// the pause, or `None` while the ceiling is reached (a stream's end decides).
    pub(crate) fn open_at(&self, running: u32, now: Instant) -> Option<Instant> {
        if self.ceiling.is_some_and(|c| running >= c) {
            return None;
        }
        Some(self.paused_until.map_or(now, |t| t.max(now)))
    }

    pub(crate) fn ceiling(&self) -> Option<u32> {
        self.ceiling
    }

    /// How long OpenRouter traffic stays paused from `now`, if it is.
    pub(crate) fn paused_for(&self, now: Instant) -> Option<Duration> {
        self.paused_until
            .and_then(|t| t.checked_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    pub(crate) fn hits(&self) -> u64 {
        self.hits
    }
}
