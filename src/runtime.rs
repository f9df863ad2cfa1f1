//! The async runtime a command runs on, and the batched wake-ups of a busy run.
//!
//! The client side is cheapest on one thread (research/rust-client-cpu.md). At real provider
//! pace each stream's tokens arrive one by one, so a thread that wakes for every arrival pays
//! a wake-up, a read and a TLS record per token. When the thread has been waking up busily,
//! [`ParkGate`] lets it pause before it sleeps in the kernel, so that the tokens of many streams
//! pile up and are read in one wake-up. When arrivals are sparse it never pauses: a quiet run
//! (a few streams, a test) sees no added latency at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A park shorter than this means work was already waiting: the thread is busy.
pub const BUSY_PARK: Duration = Duration::from_millis(1);

/// The longest pause accepted (a typo of 5000 must not freeze the run for seconds).
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// One thread for a client command; `read_batch` pauses a busy thread before each park (see
/// the module doc). `None` never pauses.
pub fn current_thread(read_batch: Option<Duration>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_current_thread();
    b.enable_all();
    if let Some(pause) = read_batch.filter(|p| !p.is_zero()) {
        let gate = Arc::new(ParkGate::new(pause.min(MAX_PAUSE)));
        let on_park = gate.clone();
        b.on_thread_park(move || {
            if let Some(p) = on_park.before_park() {
                std::thread::sleep(p);
            }
        });
        b.on_thread_unpark(move || gate.after_unpark());
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

/// The park and unpark hooks' shared clock (the hooks must be `Send + Sync`; atomics, since
/// only the runtime's one thread touches them).
struct ParkGate {
    pause: Duration,
    base: Instant,
    /// When the thread last went to sleep in the kernel, in ns since `base`.
    parked_at: AtomicU64,
    /// How long that sleep lasted, in ns; `u64::MAX` before the first.
    parked_for: AtomicU64,
}

impl ParkGate {
    fn new(pause: Duration) -> Self {
        ParkGate {
            pause,
            base: Instant::now(),
            parked_at: AtomicU64::new(0),
            parked_for: AtomicU64::new(u64::MAX),
        }
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// The pause to take now (if any); marks the park's start after it.
    fn before_park(&self) -> Option<Duration> {
        let previous = match self.parked_for.load(Ordering::Relaxed) {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        };
        let pause = pause_before_park(previous, self.pause);
        // The start is read after the pause: the pause itself is not a quiet park.
        let at = if let Some(p) = pause {
            self.now_ns() + p.as_nanos() as u64
        } else {
            self.now_ns()
        };
        self.parked_at.store(at, Ordering::Relaxed);
        pause
    }

    fn after_unpark(&self) {
        let at = self.parked_at.load(Ordering::Relaxed);
        self.parked_for
            .store(self.now_ns().saturating_sub(at), Ordering::Relaxed);
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
    fn the_gate_pauses_when_work_waits_and_not_when_the_thread_slept() {
        let gate = ParkGate::new(Duration::from_millis(20));
        // First park: no pause.
        assert_eq!(gate.before_park(), None);
        // Woken at once: busy.
        gate.after_unpark();
        assert_eq!(gate.before_park(), Some(Duration::from_millis(20)));
        // The pause counts as part of the park's start, not as a quiet park: the thread woke
        // "before" the recorded start, so it is still busy.
        gate.after_unpark();
        assert_eq!(gate.before_park(), Some(Duration::from_millis(20)));
        // A real quiet park (slept past the pause by 5 ms): no pause next time.
        std::thread::sleep(Duration::from_millis(25));
        gate.after_unpark();
        assert_eq!(gate.before_park(), None);
    }
}
