//! A late stop, read from a run of closes: a provider that notices a close a second or two
//! late bills about the same decoding past every close, where one that bills a close in full
//! bills the rest of each natural answer, which varies as the answers do. One such close reads
//! unclear ([`super::close_read::read_close`]); six that agree read together as stopped,
//! teach the endpoint's transit, and get a ledger line each so that a later start carries them
//! (issue #51 item 2).

use super::close_read::Close;
use super::{Clock, Core};
use crate::store::output::{SpendEntry, SpendKind};

/// The id of a ledger line that records a close read again ([`Core::keep_readings`]).
pub(crate) const CLOSE_READING: &str = "close-reading";

/// Unclear closes it takes to read them together.
pub(crate) const CLUSTER_NEEDED: usize = 6;

/// The longest notice a run of unclear closes may show and still read as stopped: a provider
/// that took longer to stop would be billing most of a short answer anyway.
pub(crate) const NOTICE_MOST_S: f64 = 3.0;

/// Whether closes that each read unclear (`past`: tokens billed past what was received) say
/// together that the endpoint stops the bill, late: a provider that notices a close a second
/// or two after it bills about the same decoding past every close (its pace times its
/// notice), where one that bills a close in full bills the rest of each natural answer, which
/// varies as the answers do (`natural`: the coefficient of variation of the rest of the
/// endpoint's recent natural answers past what these closes received). So: at least
/// [`CLUSTER_NEEDED`], their spread a third of the natural one at most (and at most a
/// quarter), and at most [`NOTICE_MOST_S`] of decoding at the endpoint's `pace`. Nothing is
/// read this way without a pace and a natural spread to compare with (issue #51 item 2: at a
/// provider noticing closes two seconds late, every check read unclear and the hard budget
/// never sent a request where a close stops the bill).
pub(crate) fn unclear_closes_stopped(
    past: &[f64],
    natural: Option<f64>,
    pace: Option<f64>,
) -> bool {
    let (Some(natural), Some(pace)) = (natural, pace) else {
        return false;
    };
    if past.len() < CLUSTER_NEEDED {
        return false;
    }
    let mut sorted = past.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    median <= pace * NOTICE_MOST_S
        && super::close_transit::spread(past) <= (natural / 3.0).min(0.25)
}

impl Core {
    /// Endpoint `i`'s closes read unclear one by one, its events carrying `per_event` tokens:
    /// when they say together that it stops the bill ([`unclear_closes_stopped`]), and none
    /// there was billed past, they count as stopped, and how far past each was billed is its
    /// transit. Returns whether they did.
    pub(super) fn unclear_closes_read_together(
        &mut self,
        i: usize,
        per_event: f64,
        now: &Clock,
    ) -> bool {
        let tag = self.fleet.endpoint(i).tag.clone();
        let Some(ev) = self.fleet.cancel(&tag) else {
            return false;
        };
        if ev.billed_past > 0 || ev.unclear.len() < CLUSTER_NEEDED {
            return false;
        }
        let received: Vec<f64> = (ev.unclear.iter())
            .map(|&(r, _)| r as f64 * per_event)
            .collect();
        let past: Vec<f64> = (ev.unclear.iter())
            .zip(&received)
            .map(|(&(_, b), r)| b as f64 - r)
            .collect();
        let mut middle = received.clone();
        middle.sort_by(f64::total_cmp);
        let transit = self.fleet.transit(&tag);
        let natural = transit.and_then(|t| t.natural_rest_spread(middle[middle.len() / 2]));
        let pace = transit.and_then(|t| t.pace());
        if !unclear_closes_stopped(&past, natural, pace) {
            return false;
        }
        let Some(ev) = self.fleet.cancel_mut(&tag) else {
            return false;
        };
        let closes = std::mem::take(&mut ev.unclear);
        ev.stopped += closes.len() as u32;
        self.learn_transit(i, &closes, per_event);
        // The latest is the close being booked now: its own line says stopped.
        let earlier = closes.len().saturating_sub(1);
        self.keep_readings(
            i,
            earlier,
            "read with the closes after it as a late stop",
            now,
        );
        let (lo, hi) = past
            .iter()
            .fold((f64::MAX, 0.0_f64), |(a, b), &p| (a.min(p), b.max(p)));
        let text = format!(
            "{tag}: {} closes each billed {lo:.0} to {hi:.0} tokens past what was received \
             ({:.1} s of decoding at its pace, where the rest of its natural answers varies far \
             more): read as stopping the bill after a late notice",
            closes.len(),
            hi / pace.unwrap_or(1.0).max(1e-9),
        );
        self.event(now, text);
        true
    }

    /// `n` closes at endpoint `i` whose lines read unclear were read since as stopping the
    /// bill (`why`): a line each says so, so that a later start carries them
    /// (`close_reading::ClosesSeen` counts the ledger's readings; without these, a start after
    /// a run that trusted an endpoint this way checked it again from nothing).
    pub(super) fn keep_readings(&mut self, i: usize, n: usize, why: &str, now: &Clock) {
        let tag = self.fleet.endpoint(i).tag.clone();
        for _ in 0..n {
            self.ledger(SpendEntry {
                endpoint: Some(tag.clone()),
                close: Some(Close::Stopped),
                note: Some(format!("a close at {tag} {why}: it stopped the bill")),
                ..SpendEntry::new(SpendKind::Adjustment, now.rfc3339(), CLOSE_READING, "")
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One close two seconds late looks like a short answer billed in full; a run of them
    /// does not: a late notice bills about the same decoding past every close, a full bill the
    /// rest of each natural answer, which varies as the answers do.
    #[test]
    fn a_run_of_unclear_closes_that_agree_reads_as_a_late_stop() {
        let tight = [110.0, 108.0, 112.0, 110.0, 109.0, 111.0];
        let wide = [110.0, 40.0, 260.0, 180.0, 75.0, 300.0];
        /// (what, tokens billed past what was received, natural spread, pace, stopped)
        type Case<'a> = (&'a str, &'a [f64], Option<f64>, Option<f64>, bool);
        #[rustfmt::skip]
        let cases: [Case<'_>; 8] = [
            // (what, tokens billed past what was received, natural spread, pace, stopped)
            ("six that agree, answers that vary: a late stop", &tight, Some(0.8), Some(55.0), true),
            ("five are not enough", &tight[..5], Some(0.8), Some(55.0), false),
            ("six that vary as answers do", &wide, Some(0.8), Some(55.0), false),
            ("answers that barely vary say nothing", &tight, Some(0.03), Some(55.0), false),
            ("no natural answers to compare with", &tight, None, Some(55.0), false),
            ("no pace known", &tight, Some(0.8), None, false),
            ("past three seconds' decoding: not a notice", &tight, Some(0.8), Some(30.0), false),
            ("within three seconds' decoding", &tight, Some(0.8), Some(37.0), true),
        ];
        for (what, past, natural, pace, want) in cases {
            assert_eq!(unclear_closes_stopped(past, natural, pace), want, "{what}");
        }
    }
}
