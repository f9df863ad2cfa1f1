//! Live counters shared by workers and the supervisor: per endpoint, per dataset and totals.
//! Workers add to atomics on the hot path (one add per streamed token, no locks, no messages);
//! histograms take a short uncontended lock once per finished request. Memory is fixed: no
//! per-request vectors.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;

use crate::openrouter::ErrorKind;

const KINDS: usize = ErrorKind::ALL.len();

/// Counters of one endpoint or one dataset.
pub(crate) struct Counters {
    pub in_flight: AtomicU64,
    pub done: AtomicU64,
    pub failed_attempts: AtomicU64,
    /// Failed attempts by kind (empty answers included: the empty-answer rate comes from here).
    pub errors: [AtomicU64; KINDS],
    /// Tokens streamed so far (content and reasoning events), finished or not.
    pub streamed_tokens: AtomicU64,
    /// Completion tokens of finished requests, per their usage.
    pub output_tokens: AtomicU64,
    pub prompt_tokens: AtomicU64,
    /// Answers that came back (any shape but empty): the base of the truncation rate.
    pub answers: AtomicU64,
    /// Answers cut at `max_tokens`, with content or while thinking.
    pub truncated: AtomicU64,
    /// Answers cut at `max_tokens` before any content (the model still thinking).
    pub cut_thinking: AtomicU64,
    ttft_ms: Mutex<Histogram<u64>>,
    latency_ms: Mutex<Histogram<u64>>,
}

fn histogram() -> Histogram<u64> {
    // 1 ms .. 1 hour, 2 significant digits: a few KB, fixed.
    Histogram::new_with_bounds(1, 3_600_000, 2).expect("constant, valid histogram bounds")
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            in_flight: AtomicU64::new(0),
            done: AtomicU64::new(0),
            failed_attempts: AtomicU64::new(0),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
            streamed_tokens: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            answers: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
            cut_thinking: AtomicU64::new(0),
            ttft_ms: Mutex::new(histogram()),
            latency_ms: Mutex::new(histogram()),
        }
    }
}

/// Percentiles of a histogram, in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Percentiles {
    pub p50: Option<u64>,
    pub p95: Option<u64>,
    /// How many values they are of.
    pub samples: u64,
}

impl Counters {
    pub(crate) fn error(&self, kind: ErrorKind) {
        self.failed_attempts.fetch_add(1, Ordering::Relaxed);
        self.errors[kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_timing(&self, ttft_ms: Option<u64>, latency_ms: u64) {
        if let Some(t) = ttft_ms {
            let mut h = self.ttft_ms.lock().unwrap_or_else(|p| p.into_inner());
            let _ = h.record(t.clamp(1, 3_600_000));
        }
        let mut h = self.latency_ms.lock().unwrap_or_else(|p| p.into_inner());
        let _ = h.record(latency_ms.clamp(1, 3_600_000));
    }

    fn percentiles(h: &Mutex<Histogram<u64>>) -> Percentiles {
        let h = h.lock().unwrap_or_else(|p| p.into_inner());
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: Some(h.value_at_quantile(0.5)),
            p95: Some(h.value_at_quantile(0.95)),
            samples: h.len(),
        }
    }

    pub(crate) fn ttft(&self) -> Percentiles {
        Self::percentiles(&self.ttft_ms)
    }

    pub(crate) fn latency(&self) -> Percentiles {
        Self::percentiles(&self.latency_ms)
    }

    /// Error counts by kind, most frequent first, zeros left out.
    pub(crate) fn errors_by_kind(&self) -> Vec<(ErrorKind, u64)> {
        let mut v: Vec<(ErrorKind, u64)> = ErrorKind::ALL
            .iter()
            .map(|k| (*k, self.errors[k.index()].load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect();
        v.sort_by_key(|x| std::cmp::Reverse(x.1));
        v
    }

    pub(crate) fn get(a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }
}

/// A rate over a sliding window, fed with a monotonically growing total at each tick.
#[derive(Clone, Debug)]
pub(crate) struct Rate {
    samples: std::collections::VecDeque<(f64, f64)>,
    window_s: f64,
}

impl Rate {
    pub(crate) fn new(window_s: f64) -> Self {
        Rate {
            samples: std::collections::VecDeque::new(),
            window_s,
        }
    }

    /// Adds the total at time `t` (seconds) and returns the rate per second over the window.
    pub(crate) fn update(&mut self, t: f64, total: f64) -> f64 {
        self.samples.push_back((t, total));
        while self
            .samples
            .front()
            .is_some_and(|(t0, _)| t - t0 > self.window_s)
            && self.samples.len() > 2
        {
            self.samples.pop_front();
        }
        self.rate()
    }

    pub(crate) fn rate(&self) -> f64 {
        match (self.samples.front(), self.samples.back()) {
            (Some((t0, v0)), Some((t1, v1))) if t1 > t0 => ((v1 - v0) / (t1 - t0)).max(0.0),
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_over_window() {
        let mut r = Rate::new(10.0);
        assert_eq!(r.update(0.0, 0.0), 0.0);
        assert_eq!(r.update(1.0, 100.0), 100.0);
        for i in 2..=30 {
            r.update(i as f64, 100.0 * i as f64);
        }
        assert!((r.rate() - 100.0).abs() < 1e-9);
        // Traffic stops: the rate decays to zero within the window.
        for i in 31..=45 {
            r.update(i as f64, 3000.0);
        }
        assert_eq!(r.rate(), 0.0);
    }

    #[test]
    fn percentiles_and_errors() {
        let c = Counters::default();
        for ms in 1..=100 {
            c.record_timing(Some(ms), ms * 10);
        }
        let p = c.ttft();
        assert_eq!(p.p50, Some(50));
        assert!(p.p95.is_some_and(|v| (94..=96).contains(&v)));
        c.error(ErrorKind::RateLimited);
        c.error(ErrorKind::RateLimited);
        c.error(ErrorKind::Server);
        assert_eq!(
            c.errors_by_kind(),
            vec![(ErrorKind::RateLimited, 2), (ErrorKind::Server, 1)]
        );
    }
}
