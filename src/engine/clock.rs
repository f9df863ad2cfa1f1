//! The time of an engine event, as the driver reads it and the core receives it: the core
//! never reads a clock itself, so a test steps time by hand.

#[cfg(test)]
use std::time::Duration;
use std::time::Instant;

/// The time of an event: monotonic for decisions, wall-clock for the records it writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    pub mono: Instant,
    pub wall: chrono::DateTime<chrono::Utc>,
}

impl Clock {
    /// The machine's time now (for the driver; the core never calls it).
    pub(crate) fn now() -> Clock {
        Clock {
            mono: Instant::now(),
            wall: chrono::Utc::now(),
        }
    }

    /// `self` moved on by `d` on both clocks (tests step time this way).
    #[cfg(test)]
    pub(crate) fn after(&self, d: Duration) -> Clock {
        Clock {
            mono: self.mono + d,
            wall: self.wall + chrono::Duration::from_std(d).unwrap_or_default(),
        }
    }

    pub(crate) fn rfc3339(&self) -> String {
        crate::domain::rfc3339(self.wall)
    }
}
