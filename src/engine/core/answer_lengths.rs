//! How long a dataset's answers run: a life table (the actuarial form of Kaplan–Meier) of the
//! answers that ended and of the streams closed or still running, each of those counted as
//! "at least this long" at what it had streamed. It says how much longer a stream closed at
//! `d` tokens is expected to have run, which is what an endpoint that bills a close in full
//! goes on to bill (issue #51 item 3).
//!
//! Why a life table and not the mean of the finished answers: early in a run the answers that
//! have ended are the short ones (the long ones are still streaming), and a stream closed at
//! `d` has already outlived most of them. After `harvest stop` 30 s into a real-pace run at the
//! simulator's endpoints, the finished answers averaged 1,100 tokens and the closed streams, at
//! 1,700 decoded on average, went on for 680 more: "one mean answer more" put `status`'s open
//! amount at 1.6 times what the API then billed, and the finished answers alone (no censoring)
//! at 0.5 times.
//!
//! Past the longest answer that ended nothing is observed, only that some streams ran longer:
//! there the curve goes on at the hazard of its own upper part (from its median, or half way,
//! to its last end: a constant-hazard tail), and stops at `max_tokens`, where every answer
//! ends.

/// Bins of the life table: a stream's length is known to a 128th of `max_tokens`.
const BINS: usize = 128;

/// The lengths one dataset's answers have shown this run.
#[derive(Clone, Debug)]
pub(super) struct AnswerLengths {
    max_tokens: u64,
    /// Tokens a bin spans.
    width: u64,
    /// Answers that ended (their billed completion tokens), by bin.
    ended: [u64; BINS],
    /// Streams closed or cut (at the tokens they had streamed), by bin.
    closed: [u64; BINS],
    ended_total: u64,
}

impl AnswerLengths {
    pub(super) fn new(max_tokens: u32) -> Self {
        let max_tokens = u64::from(max_tokens).max(1);
        AnswerLengths {
            max_tokens,
            width: max_tokens.div_ceil(BINS as u64),
            ended: [0; BINS],
            closed: [0; BINS],
            ended_total: 0,
        }
    }

    /// The request's `max_tokens`: no answer runs longer.
    pub(super) fn max_tokens(&self) -> u64 {
        self.max_tokens
    }

    fn bin(&self, tokens: u64) -> usize {
        let i = tokens.min(self.max_tokens - 1) / self.width;
        (i as usize).min(BINS - 1)
    }

    /// An answer ended after `tokens` completion tokens.
    pub(super) fn ended(&mut self, tokens: u64) {
        let b = self.bin(tokens);
        self.ended[b] += 1;
        self.ended_total += 1;
    }

    /// A stream was closed (or cut) after `tokens`: it would have run at least that long.
    pub(super) fn closed(&mut self, tokens: u64) {
        let b = self.bin(tokens);
        self.closed[b] += 1;
    }

    /// Tokens a stream that has run `d` is expected to run on for, to its natural end or to
    /// `max_tokens`; `running` are the streams in flight, at what each has streamed (at least
    /// that long too). `None` while no answer has ended: nothing is known of the lengths yet.
    pub(super) fn rest_after(&self, d: u64, running: impl IntoIterator<Item = u64>) -> Option<u64> {
        if self.ended_total == 0 {
            return None;
        }
        if d >= self.max_tokens {
            return Some(0);
        }
        let mut censored = self.closed;
        for t in running {
            censored[self.bin(t)] += 1;
        }
        let curve = Curve::new(self, &censored);
        let at_d = curve.survival(d as f64);
        if at_d <= f64::EPSILON {
            // Every stream this long has ended, yet this one ran on: nothing says how far, so
            // its end is taken as anywhere up to `max_tokens`.
            return Some((self.max_tokens - d) / 2);
        }
        Some((curve.integral_from(d as f64) / at_d).round() as u64)
    }
}

/// The survival curve a life table gives: the share of answers longer than `x` tokens.
struct Curve {
    width: f64,
    max: f64,
    /// Survival at each bin's lower edge, and at the upper edge of the last (`BINS + 1`).
    edges: [f64; BINS + 1],
    /// Where the observed curve ends (the upper edge of the last bin an answer ended in), its
    /// survival there, and the hazard per token past it.
    last: f64,
    at_last: f64,
    hazard: f64,
}

impl Curve {
    fn new(t: &AnswerLengths, censored: &[u64; BINS]) -> Self {
        let mut edges = [1.0; BINS + 1];
        let mut at_risk: u64 = t.ended.iter().chain(censored.iter()).sum();
        for i in 0..BINS {
            // A stream counted "at least this long" in a bin was at risk for half of it, on
            // average (the actuarial correction).
            let exposed = at_risk as f64 - censored[i] as f64 / 2.0;
            let q = if exposed > 0.0 {
                (t.ended[i] as f64 / exposed).min(1.0)
            } else {
                0.0
            };
            edges[i + 1] = edges[i] * (1.0 - q);
            at_risk -= t.ended[i] + censored[i];
        }
        let width = t.width as f64;
        let max = t.max_tokens as f64;
        let last_bin = t.ended.iter().rposition(|&n| n > 0).unwrap_or(0);
        let last = ((last_bin + 1) as f64 * width).min(max);
        let at_last = edges[last_bin + 1];
        // The tail's hazard: that of the observed curve's upper part, from its median or from
        // half its length, whichever comes first (a median near the end would read the slope
        // of a bin or two: after `harvest stop` 30 s into a run, half the streams were still
        // running and the median fell 32 tokens before the last end).
        let half = ((last / 2.0) / width) as usize;
        let from = (0..=last_bin)
            .find(|&i| edges[i] <= 0.5)
            .unwrap_or(half)
            .min(half);
        let hazard = if at_last > 0.0 && edges[from] > at_last {
            (edges[from] / at_last).ln() / (last - from as f64 * width)
        } else {
            0.0
        };
        Curve {
            width,
            max,
            edges,
            last,
            at_last,
            hazard,
        }
    }

    /// The share of answers longer than `x` tokens: linear within a bin (ends spread evenly
    /// over it), the constant-hazard tail past the observed end, none at `max_tokens`.
    fn survival(&self, x: f64) -> f64 {
        if x >= self.max {
            0.0
        } else if x >= self.last {
            self.at_last * (-self.hazard * (x - self.last)).exp()
        } else {
            let i = ((x / self.width) as usize).min(BINS - 1);
            let frac = (x - i as f64 * self.width) / self.width;
            self.edges[i] + (self.edges[i + 1] - self.edges[i]) * frac
        }
    }

    /// The area under the curve from `d` tokens to `max_tokens`: tokens an answer longer than
    /// `d` runs past `d`, times the share of such answers.
    fn integral_from(&self, d: f64) -> f64 {
        let mut area = 0.0;
        // The observed part, a bin at a time (the curve is straight within each).
        for i in ((d / self.width) as usize).min(BINS - 1)..BINS {
            let lo = d.max(i as f64 * self.width);
            let hi = ((i + 1) as f64 * self.width).min(self.last);
            if lo >= self.last {
                break;
            }
            if hi > lo {
                area += (self.survival(lo) + self.survival(hi)) / 2.0 * (hi - lo);
            }
        }
        // The tail, to `max_tokens`.
        let x = d.max(self.last);
        if x < self.max && self.at_last > 0.0 {
            let (a, b) = (x - self.last, self.max - self.last);
            area += if self.hazard > 0.0 {
                self.at_last / self.hazard * ((-self.hazard * a).exp() - (-self.hazard * b).exp())
            } else {
                self.at_last * (b - a)
            };
        }
        area
    }
}
