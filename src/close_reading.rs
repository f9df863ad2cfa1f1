//! What a closed stream's bill said of the close ([`Close`]), kept on the stream's
//! `adjustment` ledger line, and what an output directory's ledger says of each endpoint's
//! closes ([`ClosesSeen`]): the evidence a later start carries, so that it does not check
//! again from nothing what the run already learned (issue #51 item 6: each start checked every
//! documented stopper again, holding worst cases meanwhile). The core reads closes
//! (`engine::core::cancel_billing`); the ledger keeps the reading; the scan tallies it.

use serde::{Deserialize, Serialize};

/// What one close's bill says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Close {
    /// Billed no more than the fewest tokens harvest can have received and those in transit:
    /// the bill stopped.
    Stopped,
    /// Billed past the most tokens harvest can have received, those in transit and a slack:
    /// the provider went on generating.
    BilledPast,
    /// In between: what was received is known only within the endpoint's range of tokens an
    /// event, so it says nothing (and is never counted against the endpoint).
    Unclear,
}

/// How long a ledger's readings of an endpoint's closes are carried to a new start: a
/// provider may change how it bills a close between one day's run and the next week's, and a
/// trust older than this is earned again. Within it, the hard budget's rechecks of a trusted
/// endpoint (`cancel_check::RECHECK_EVERY`) catch a change as they do within one run.
pub(crate) const CARRIED_FOR: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// An endpoint's closes as a ledger recorded them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClosesSeen {
    pub stopped: u32,
    pub billed_past: u32,
    /// When the latest of them was read (the line's `at`).
    pub last: Option<chrono::DateTime<chrono::Utc>>,
    /// The longest a check of a close there took to be found at `/generation` (the lines'
    /// `found_after_ms`): a new start's checks are overdue at twice it, not at a floor that a
    /// lagging `/generation` passes (`cancel_check::overdue_after`).
    pub found_within: Option<std::time::Duration>,
}

impl ClosesSeen {
    /// One more reading, read at `at` (a line's RFC 3339 time; unreadable: not dated), of a
    /// check found at `/generation` `found_after_ms` after its close (a check's line).
    pub(crate) fn add(&mut self, close: Close, at: &str, found_after_ms: Option<u64>) {
        if let Some(ms) = found_after_ms {
            let d = std::time::Duration::from_millis(ms);
            self.found_within = Some(self.found_within.map_or(d, |w| w.max(d)));
        }
        match close {
            Close::Stopped => self.stopped += 1,
            Close::BilledPast => self.billed_past += 1,
            Close::Unclear => return,
        }
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(at) {
            let t = t.with_timezone(&chrono::Utc);
            self.last = Some(self.last.map_or(t, |l| l.max(t)));
        }
    }

    /// Whether a start at `now` carries these: read within [`CARRIED_FOR`], and saying
    /// something.
    pub(crate) fn carried_at(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        self.stopped + self.billed_past > 0 && self.last.is_some_and(|t| now - t <= CARRIED_FOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledgers_readings_are_carried_for_a_day_and_only_when_they_say_something() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-06T12:00:00Z")
            .expect("a time")
            .with_timezone(&chrono::Utc);
        let seen = |readings: &[(Close, &str)]| {
            let mut s = ClosesSeen::default();
            for &(c, at) in readings {
                s.add(c, at, None);
            }
            s
        };
        use Close::{BilledPast, Stopped, Unclear};
        #[rustfmt::skip]
        let cases = [
            ("five stopped this morning", vec![(Stopped, "2026-12-06T09:00:00Z"); 5], true),
            ("billed past an hour ago", vec![(BilledPast, "2026-12-06T11:00:00Z")], true),
            ("just within a day", vec![(Stopped, "2026-12-05T12:00:00Z")], true),
            ("two days old", vec![(Stopped, "2026-12-04T12:00:00Z")], false),
            ("only unclear", vec![(Unclear, "2026-12-06T11:00:00Z")], false),
            ("not dated", vec![(Stopped, "yesterday")], false),
            (
                "an old reading with a recent one: carried",
                vec![(Stopped, "2026-12-01T00:00:00Z"), (Stopped, "2026-12-06T11:59:00+01:00")],
                true,
            ),
        ];
        for (what, readings, want) in cases {
            assert_eq!(seen(&readings).carried_at(now), want, "{what}");
        }
        let mut s = seen(&[
            (Stopped, "2026-12-06T09:00:00Z"),
            (Unclear, "2026-12-06T10:00:00Z"),
            (BilledPast, "2026-12-06T08:00:00Z"),
        ]);
        assert_eq!((s.stopped, s.billed_past), (1, 1));
        assert_eq!(
            s.last.map(|t| t.to_rfc3339()),
            Some("2026-12-06T09:00:00+00:00".to_string()),
            "an unclear reading neither counts nor dates"
        );
        assert_eq!(s.found_within, None, "no check among them");
        s.add(Unclear, "2026-12-06T10:30:00Z", Some(21_500));
        s.add(Stopped, "2026-12-06T10:40:00Z", Some(900));
        assert_eq!(
            s.found_within,
            Some(std::time::Duration::from_millis(21_500)),
            "the longest check's wait, an unclear one's too: the lag is the API's, not the reading's"
        );
    }

    #[test]
    fn a_reading_is_written_as_a_word() {
        let words: Vec<String> = [Close::Stopped, Close::BilledPast, Close::Unclear]
            .iter()
            .map(|c| serde_json::to_string(c).expect("json"))
            .collect();
        assert_eq!(words, ["\"stopped\"", "\"billed_past\"", "\"unclear\""]);
    }
}
