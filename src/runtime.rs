//! The async runtime a command runs on, and the batched wake-ups of a busy run.
//!
//! The client side is cheapest on one thread (research/rust-client-cpu.md). At real provider
//! pace each stream's tokens arrive one by one, so a thread that wakes for every arrival pays
//! a wake-up, a read and a TLS record per token. When the thread has been waking up busily,
//! [`ParkGate`] lets it pause before it sleeps in the kernel, so that the tokens of many streams
//! pile up and are read in one wake-up. When arrivals are sparse it never pauses: a quiet run
//! (a few streams, a test) sees no added latency at all.
//!
//! How long it pauses follows the streams' pace ([`STREAM_PACE`], [`next_pause`]): the fastest
//! stream may pile up about [`PILE_UP_TOKENS`] between two reads, well inside what the dollar
//! cap allows a closed stream in transit, so a longer pause never costs the budget. At real
//! pace (30 to 90 tokens a second a stream) that is 133 ms to the longest pause (200 ms by
//! default); a fast provider, or the simulator sped up, shortens it. A run's TUI answers keys
//! on a thread of its own (`tui::thread`); what reaches this thread (a command, a signal, the
//! control socket) waits at most one pause.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A park shorter than this means work was already waiting: the thread is busy.
pub const BUSY_PARK: Duration = Duration::from_millis(1);

/// The longest pause a busy thread takes by default (`harvest run --read-batch-ms`, and the
/// floor client's): the streams' pace shortens it (at real pace the fastest stream, 90 tokens
/// a second, sets it at 133 ms). A token, a timer, a command and a snapshot are seen up to the
/// pause late; the TUI's keys are not (it has its own thread, `tui::thread`).
pub const DEFAULT_READ_BATCH_MS: u64 = 200;

/// The longest pause accepted (a typo of 5000 must not freeze the run for seconds).
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The shortest pause the gate adapts down to, and where it starts: below this the pause is no
/// longer what keeps tokens unread (the wake-up's own work and the network are).
pub(crate) const SHORTEST_PAUSE: Duration = Duration::from_millis(10);

/// What a pause lets the fastest stream pile up unread: at most half the dollar cap's transit
/// allowance (`engine::core::attempt_money::TRANSIT_TOKENS`, which asserts it), the rest being
/// the network's and the wake-up's own work.
pub(crate) const PILE_UP_TOKENS: u32 = 12;

/// Task polls between two looks at the I/O driver while the thread has work, when it pauses
/// (tokio's default is 61): a batch's streams are all read before the connections are read
/// again, where a look mid-batch finds a token or two more for streams already read, and
/// wakes them again for it. Above the streams of the largest runs (2,000 and their
/// connections); the driver is looked at anyway whenever the queue runs dry.
pub(crate) const BATCH_EVENT_INTERVAL: u32 = 8192;

/// How often the pause is adjusted to the streams' pace.
pub(crate) const ADJUST_EVERY: Duration = Duration::from_millis(200);

/// The fastest decode pace a stream reported since the gate last looked, in tokens a second:
/// streams report as they are read (`openrouter::ChatStream`), the gate takes it. One per
/// process, as the runtime's thread is.
pub(crate) static STREAM_PACE: StreamPace = StreamPace::new();

/// See [`STREAM_PACE`].
pub(crate) struct StreamPace {
    fastest: AtomicU32,
}

impl StreamPace {
    pub(crate) const fn new() -> Self {
        StreamPace {
            fastest: AtomicU32::new(0),
        }
    }

    /// A stream is decoding at `tokens_per_s`.
    pub(crate) fn report(&self, tokens_per_s: u32) {
        // A load first: most reports are no new maximum and write nothing.
        if tokens_per_s > self.fastest.load(Ordering::Relaxed) {
            self.fastest.fetch_max(tokens_per_s, Ordering::Relaxed);
        }
    }

    /// The fastest reported since the last take, and a fresh start.
    fn take(&self) -> u32 {
        self.fastest.swap(0, Ordering::Relaxed)
    }
}

/// One thread for a client command; `read_batch` is the longest pause a busy thread takes
/// before each park (see the module doc). `None` never pauses.
pub fn current_thread(read_batch: Option<Duration>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_current_thread();
    b.enable_all();
    if let Some(longest) = read_batch.filter(|p| !p.is_zero()) {
        b.event_interval(BATCH_EVENT_INTERVAL);
        let gate = Arc::new(ParkGate::new(longest.min(MAX_PAUSE), &STREAM_PACE));
        let on_park = gate.clone();
        b.on_thread_park(move || {
            if let Some(p) = on_park.before_park(on_park.now_ns()) {
                std::thread::sleep(p);
            }
        });
        b.on_thread_unpark(move || gate.after_unpark(gate.now_ns()));
    }
    b.build()
}

/// The simulator serves thousands of streams and may use both cores.
pub fn multi_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// Whether to pause before a park, given how long the previous park lasted: only a thread
/// that found work waiting (a park shorter than [`BUSY_PARK`]) pauses. Pure, for the table
/// test.
pub fn pause_before_park(previous_park: Option<Duration>, pause: Duration) -> Option<Duration> {
    match previous_park {
        Some(p) if p < BUSY_PARK => Some(pause),
        _ => None,
    }
}

/// The pace the pause is set for and the pause, at an adjustment: the fastest pace a stream
/// reported since the last one (`reported`, tokens a second), or the pace learnt before
/// (`learnt`) less a fifth, whichever is faster; and the pause that lets a stream at that pace
/// pile up [`PILE_UP_TOKENS`], never past `longest` nor under [`SHORTEST_PAUSE`] (or
/// `longest`, if shorter). Pure, for the table test.
///
/// A fast stream shortens the pause at once; once it is gone the pause grows back by a
/// quarter an adjustment (the learnt pace fades), so a quiet moment between a fast
/// endpoint's reports does not open it wide.
pub(crate) fn next_pause(learnt: u32, reported: u32, longest: Duration) -> (u32, Duration) {
    let pace = reported.max(learnt - learnt / 5);
    (pace, pause_at(pace, longest))
}

/// The pause that lets a stream at `pace` pile up [`PILE_UP_TOKENS`], within [`SHORTEST_PAUSE`]
/// (or `longest`, if shorter) and `longest`.
fn pause_at(pace: u32, longest: Duration) -> Duration {
    let pause = match pace {
        0 => longest,
        p => Duration::from_secs(u64::from(PILE_UP_TOKENS)) / p,
    };
    pause.min(longest).max(SHORTEST_PAUSE.min(longest))
}

/// The pace the gate starts from: as if a stream were fast enough for the shortest pause, so
/// that a run pauses long only once its streams' pace is known.
fn starting_pace() -> u32 {
    (f64::from(PILE_UP_TOKENS) / SHORTEST_PAUSE.as_secs_f64()).ceil() as u32
}

/// The park and unpark hooks' shared state (the hooks must be `Send + Sync`; atomics, since
/// only the runtime's one thread touches them).
struct ParkGate {
    longest: Duration,
    reports: &'static StreamPace,
    base: Instant,
    /// The pace the pause is set for ([`next_pause`]), in tokens a second.
    pace: AtomicU32,
    /// When the pause was last adjusted, in ns since `base`.
    adjusted_at: AtomicU64,
    /// When the thread last went to sleep in the kernel, in ns since `base`.
    parked_at: AtomicU64,
    /// How long that sleep lasted, in ns; `u64::MAX` before the first.
    parked_for: AtomicU64,
}

impl ParkGate {
    fn new(longest: Duration, reports: &'static StreamPace) -> Self {
        ParkGate {
            longest,
            reports,
            base: Instant::now(),
            pace: AtomicU32::new(starting_pace()),
            adjusted_at: AtomicU64::new(0),
            parked_at: AtomicU64::new(0),
            parked_for: AtomicU64::new(u64::MAX),
        }
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// The pause at `now` (ns since `base`), adjusted to the streams' pace if [`ADJUST_EVERY`]
    /// has passed.
    fn pause(&self, now: u64) -> Duration {
        let since = now.saturating_sub(self.adjusted_at.load(Ordering::Relaxed));
        if since >= ADJUST_EVERY.as_nanos() as u64 {
            let learnt = self.pace.load(Ordering::Relaxed);
            let (pace, _) = next_pause(learnt, self.reports.take(), self.longest);
            self.pace.store(pace, Ordering::Relaxed);
            self.adjusted_at.store(now, Ordering::Relaxed);
        }
        pause_at(self.pace.load(Ordering::Relaxed), self.longest)
    }

    /// The pause to take at `now` (ns since `base`), if any; marks the park's start after it.
    fn before_park(&self, now: u64) -> Option<Duration> {
        let previous = match self.parked_for.load(Ordering::Relaxed) {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        };
        let pause = pause_before_park(previous, self.pause(now));
        // The start is read after the pause: the pause itself is not a quiet park.
        let at = now + pause.map_or(0, |p| p.as_nanos() as u64);
        self.parked_at.store(at, Ordering::Relaxed);
        pause
    }

    /// The thread woke at `now` (ns since `base`).
    fn after_unpark(&self, now: u64) {
        let at = self.parked_at.load(Ordering::Relaxed);
        self.parked_for
            .store(now.saturating_sub(at), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_only_after_a_busy_park() {
        let pause = Duration::from_millis(50);
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        let table: &[(Option<Duration>, Option<Duration>)] = &[
            // The first park: nothing known, no pause.
            (None, None),
            // Work was waiting as soon as the thread parked: busy, pause.
            (Some(Duration::ZERO), Some(pause)),
            (Some(us(999)), Some(pause)),
            // The thread slept a while before work came: arrivals are sparse, no pause.
            (Some(ms(1)), None),
            (Some(ms(40)), None),
            (Some(Duration::from_secs(3)), None),
        ];
        for (previous, want) in table {
            assert_eq!(
                pause_before_park(*previous, pause),
                *want,
                "previous park {previous:?}"
            );
        }
    }

    #[test]
    fn the_pause_lets_the_fastest_stream_pile_up_twelve_tokens() {
        let ms = Duration::from_millis;
        let longest = ms(100);
        // (pace learnt, fastest reported, longest, next pace, next pause)
        let table: &[(u32, u32, Duration, u32, Duration)] = &[
            // A fast stream sets the pause at once: 12 tokens at 240 a second is 50 ms.
            (100, 240, longest, 240, ms(50)),
            (1200, 240, longest, 960, ms(12) + Duration::from_micros(500)),
            // Real pace (90 a second at most): the longest pause.
            (0, 90, longest, 90, longest),
            (90, 60, longest, 72, longest),
            // Never under the shortest, however fast the streams (a full-speed run).
            (0, 50_000, longest, 50_000, SHORTEST_PAUSE),
            // No report: the pace learnt fades by a fifth an adjustment, the pause grows back.
            (240, 0, longest, 192, ms(62) + Duration::from_micros(500)),
            (192, 0, longest, 154, Duration::from_secs(12) / 154),
            (4, 0, longest, 4, longest),
            (0, 0, longest, 0, longest),
            // A longest under the shortest is the operator's word.
            (0, 4000, ms(5), 4000, ms(5)),
            (0, 0, ms(5), 0, ms(5)),
        ];
        for &(learnt, reported, longest, pace, pause) in table {
            assert_eq!(
                next_pause(learnt, reported, longest),
                (pace, pause),
                "learnt {learnt}, reported {reported}, longest {longest:?}"
            );
        }
    }

    #[test]
    fn the_gate_pauses_when_work_waits_and_not_when_the_thread_slept() {
        let reports: &'static StreamPace = Box::leak(Box::new(StreamPace::new()));
        let gate = ParkGate::new(Duration::from_millis(100), reports);
        let ms = |n: u64| n * 1_000_000;
        // First park: no pause.
        assert_eq!(gate.before_park(ms(1)), None);
        // Woken at once: busy, the shortest pause to begin with (no pace known yet).
        gate.after_unpark(ms(1));
        assert_eq!(gate.before_park(ms(2)), Some(SHORTEST_PAUSE));
        // The pause counts as part of the park's start, not as a quiet park: the thread woke
        // "before" the recorded start, so it is still busy.
        gate.after_unpark(ms(12));
        assert_eq!(gate.before_park(ms(13)), Some(SHORTEST_PAUSE));
        // A real quiet park (slept past the pause by 5 ms): no pause next time.
        gate.after_unpark(ms(28));
        assert_eq!(gate.before_park(ms(29)), None);
        // Busy again past the adjustment's period, streams at 60 and 120 tokens a second: the
        // pace the gate started from fades by a fifth an adjustment (12.5 ms, 15.6 ms, ...)...
        gate.after_unpark(ms(29));
        reports.report(60);
        reports.report(120);
        assert_eq!(
            gate.before_park(ms(210)),
            Some(Duration::from_micros(12_500))
        );
        let mut t = 210;
        let mut pauses = Vec::new();
        for _ in 0..10 {
            // Woken as soon as it parked (busy), then the next park an adjustment later.
            gate.after_unpark(ms(t));
            reports.report(120);
            t += 200;
            pauses.push(gate.before_park(ms(t)).expect("busy").as_millis());
        }
        // ...to the pause for the faster stream, 12 tokens in 100 ms, in about two seconds.
        assert_eq!(pauses, [15, 19, 24, 30, 37, 47, 59, 73, 91, 100]);
        // Within the period, a report waits for the next adjustment.
        gate.after_unpark(ms(t));
        reports.report(600);
        assert_eq!(
            gate.before_park(ms(t + 100)),
            Some(Duration::from_millis(100))
        );
        // Then: 12 tokens at 600 a second.
        gate.after_unpark(ms(t + 100));
        let t = t + 200;
        assert_eq!(gate.before_park(ms(t)), Some(Duration::from_millis(20)));
    }
}
