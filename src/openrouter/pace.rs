//! A stream's decode pace, measured as it is read, for the runtime's read pause
//! (`crate::runtime`): the fastest stream sets how long the thread may let tokens pile up
//! unread.

use tokio::time::Instant;

/// Tokens between two reports of a stream's pace: at 100 tokens a second and more (where the
/// pace shortens the pause) a stream reports at least every third of a second.
const REPORT_EVERY: u64 = 32;

/// What a stream has read since its first read with tokens.
#[derive(Debug, Default)]
pub(super) struct Pace {
    /// The first read's time and the tokens read by then.
    first: Option<(Instant, u64)>,
    read: u64,
    next_report: u64,
}

impl Pace {
    /// A read brought `tokens` at `now`. Every [`REPORT_EVERY`] tokens, the stream's pace in
    /// tokens a second since its first read (rounded up; `u32::MAX` when they all came at
    /// once, as at full speed).
    pub(super) fn read(&mut self, tokens: u32, now: Instant) -> Option<u32> {
        self.read += u64::from(tokens);
        let Some((t0, n0)) = self.first else {
            self.first = Some((now, self.read));
            self.next_report = self.read + REPORT_EVERY;
            return None;
        };
        if self.read < self.next_report {
            return None;
        }
        self.next_report = self.read + REPORT_EVERY;
        let secs = now.saturating_duration_since(t0).as_secs_f64();
        let pace = (self.read - n0) as f64 / secs;
        Some(if pace.is_finite() {
            pace.ceil().min(f64::from(u32::MAX)) as u32
        } else {
            u32::MAX
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_stream_reports_its_pace_every_32_tokens_since_its_first_read() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut p = Pace::default();
        // The first read: the reference, no report.
        assert_eq!(p.read(2, at(0)), None);
        // 240 tokens a second read every 50 ms (12 a read): the third read crosses 32.
        assert_eq!(p.read(12, at(50)), None);
        assert_eq!(p.read(12, at(100)), None);
        assert_eq!(p.read(12, at(150)), Some(240));
        // Then every 32 tokens more (38 read now: the next at 70 or past).
        assert_eq!(p.read(12, at(200)), None);
        assert_eq!(p.read(12, at(250)), None);
        assert_eq!(p.read(12, at(300)), Some(240));
        // A slower stretch lowers the average since the first read.
        assert_eq!(p.read(32, at(800)), Some(130));
        // Real pace, 48 a second read every 100 ms: reported about every 700 ms.
        let mut p = Pace::default();
        let reports: Vec<_> = (0..20)
            .filter_map(|i| p.read(5, at(i * 100)).map(|r| (i, r)))
            .collect();
        assert_eq!(reports, [(7, 50), (14, 50)]);
        // Everything at once (full speed): as fast as can be.
        let mut p = Pace::default();
        assert_eq!(p.read(1, at(5)), None);
        assert_eq!(p.read(600, at(5)), Some(u32::MAX));
    }
}
