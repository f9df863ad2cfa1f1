//! An attempt in flight in the world, what the world bills it, and the sums the harness keeps
//! of the flights' running costs (the workers' accrual and the dollar cap, smoothed).

use std::collections::HashMap;
use std::hash::Hasher;

use super::world::Fate;
/// An attempt in flight in the world.
#[derive(Debug)]
pub(super) struct Flight {
    pub(super) serving: usize,
    /// Pinned, or OpenRouter's choice (known to harvest from its first token).
    pub(super) pinned: bool,
    pub(super) t0: f64,
    pub(super) ttft: f64,
    pub(super) tokens_per_s: f64,
    pub(super) len: u64,
    pub(super) fate: Fate,
    pub(super) end: f64,
    pub(super) prompt_pico: i64,
    pub(super) out_pico: i64,
    pub(super) held_worst: i64,
    /// Its first token has come: it accrues at its rate.
    pub(super) streaming: bool,
    /// A worker closes it after this many tokens to check its endpoint's close.
    pub(super) check_at: Option<u64>,
    pub(super) prompt_id: String,
    /// What OpenRouter's in-flight budget counts for it: prompt and `max_tokens` at the
    /// serving price.
    pub(super) estimate_pico: i64,
    /// Its `started` line, written at its first token (crash worlds, which keep a disk).
    pub(super) started: Option<crate::store::output::SpendEntry>,
    /// Tokens an event carries on its endpoint's wire, and the seconds its provider goes on
    /// decoding after a close before it notices (billed where a close stops the bill).
    pub(super) per_event: f64,
    pub(super) notice_s: f64,
    /// What it holds against the cap for its tokens in transit (the worker's `transit_hold`,
    /// from its first token, where the cap would close it).
    pub(super) transit_pico: i64,
}

impl Flight {
    /// Tokens streamed by `t`, continuous (the worker's per-token accrual, smoothed).
    pub(super) fn streamed(&self, t: f64) -> f64 {
        let n = (self.fate.streams(self.len)).min(self.check_at.unwrap_or(u64::MAX));
        if n == 0 {
            return 0.0;
        }
        ((t - self.first_token()) * self.tokens_per_s).clamp(0.0, n as f64)
    }

    pub(super) fn tokens(&self, t: f64) -> u64 {
        self.streamed(t) as u64
    }

    /// The stream events `tokens` arrive in, as the worker counts them.
    pub(super) fn events_of(&self, tokens: u64) -> u64 {
        (tokens as f64 / self.per_event.max(1.0)).ceil() as u64
    }

    /// Tokens the provider bills for a close at `t` where the close stops the bill: what it
    /// decoded until it noticed, `notice_s` later, never past the answer's own end.
    fn billed_tokens_at_close(&self, t: f64) -> f64 {
        let natural = self.fate.streams(self.len) as f64;
        let decoded = (t + self.notice_s - self.first_token()) * self.tokens_per_s;
        decoded.clamp(0.0, natural).max(self.streamed(t))
    }

    pub(super) fn first_token(&self) -> f64 {
        self.t0 + self.ttft
    }

    /// Its running cost at `t`, as the worker accrues it: the prompt once the stream opens,
    /// then each token.
    pub(super) fn accrued(&self, t: f64) -> i64 {
        if self.fate.streams(self.len) == 0 {
            return 0;
        }
        self.prompt_pico + (self.out_pico as f64 * self.streamed(t)) as i64
    }

    /// Picodollars a second while it streams.
    pub(super) fn rate(&self) -> f64 {
        self.out_pico as f64 * self.tokens_per_s
    }

    /// What the provider bills for the whole answer.
    pub(super) fn whole(&self) -> i64 {
        self.prompt_pico + self.out_pico * self.len as i64
    }

    /// When the provider would end it, left alone.
    pub(super) fn natural_end(&self) -> f64 {
        self.first_token() + self.fate.streams(self.len).max(1) as f64 / self.tokens_per_s
    }

    /// The bill of a close now, as a look-up finds it: what streamed, when the provider stops
    /// at a close; else the whole answer, known when the provider would have ended it.
    pub(super) fn bill_if_closed(&self, t: f64, stops_billing: bool) -> Bill {
        let pico = self.billed_if_closed(t, stops_billing);
        let (tokens, visible_at) = match self.fate {
            Fate::Answer | Fate::Reset { .. } if !stops_billing => {
                (self.len, self.natural_end().max(t))
            }
            Fate::Answer if stops_billing => (self.billed_tokens_at_close(t) as u64, t),
            _ => (self.tokens(t), t),
        };
        Bill {
            pico,
            tokens,
            visible_at,
        }
    }

    /// What the provider bills when harvest closes it now: what streamed where a close stops
    /// the bill, else what it goes on to generate; an error finish is free either way.
    pub(super) fn billed_if_closed(&self, t: f64, stops_billing: bool) -> i64 {
        match self.fate {
            // A reset is the provider's own end: nothing goes on past it.
            Fate::Reset { .. } if stops_billing => self.accrued(t),
            Fate::Answer if stops_billing && self.fate.streams(self.len) > 0 => {
                self.prompt_pico + (self.out_pico as f64 * self.billed_tokens_at_close(t)) as i64
            }
            Fate::Answer if stops_billing => self.accrued(t),
            Fate::Answer | Fate::Reset { .. } => self.whole(),
            _ => 0,
        }
    }
}

/// The flights by attempt key. Keys are the core's sequence numbers: hashed by a multiply, not
/// SipHash (looked up for every stream at every tick).
pub(super) type Flights = HashMap<u64, Flight, std::hash::BuildHasherDefault<KeyHasher>>;

/// A hasher for `u64` keys: Fibonacci hashing.
#[derive(Default)]
pub(super) struct KeyHasher(u64);
impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, k: u64) {
        self.0 = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A time that orders (virtual seconds; never NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Time(pub(super) f64);
impl Eq for Time {}
impl PartialOrd for Time {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Time {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// What the world billed a generation a look-up will ask about, in dollars and tokens, and
/// when `GET /generation` can say it (when the provider ends it).
#[derive(Clone, Copy, Debug)]
pub(super) struct Bill {
    pub(super) pico: i64,
    pub(super) tokens: u64,
    pub(super) visible_at: f64,
}

/// Running costs summed over flights, kept as of a time with the rate they grow at.
#[derive(Debug, Default)]
pub(super) struct Sums {
    pub(super) at: f64,
    pub(super) all: f64,
    pub(super) all_rate: f64,
    pub(super) open: f64,
    pub(super) open_rate: f64,
}

impl Sums {
    pub(super) fn advance(&mut self, t: f64) {
        let dt = t - self.at;
        self.all += self.all_rate * dt;
        self.open += self.open_rate * dt;
        self.at = t;
    }
    pub(super) fn all_at(&self, t: f64) -> i64 {
        (self.all + self.all_rate * (t - self.at)) as i64
    }
    pub(super) fn open_at(&self, t: f64) -> f64 {
        self.open + self.open_rate * (t - self.at)
    }
}
