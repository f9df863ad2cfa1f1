//! Answers cut while thinking, watched over the recent ones: when a large share of them reach
//! `max_tokens` before any content, `max_tokens` is below what the model thinks, and the
//! operator should hear it (an event, the header, the headless lines) with the fix. Pure: the
//! outcome room feeds it each answer's shape; it says when the share crosses the line.

use std::collections::VecDeque;

/// How many recent answers are weighed.
const WINDOW: usize = 200;
/// Fewest answers before a share means anything.
const MIN_ANSWERS: usize = 20;
/// The share of recent answers cut while thinking that is worth a warning.
pub(crate) const WARN_SHARE: f64 = 0.10;

/// What the watch has to say after an answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum CutNews {
    /// The share crossed [`WARN_SHARE`] upwards (said again only after it fell below).
    Rising(f64),
    Nothing,
}

/// A window of the latest answers' "cut while thinking" flags.
#[derive(Debug, Default)]
pub(crate) struct CutWatch {
    recent: VecDeque<bool>,
    cut: usize,
    warned: bool,
}

impl CutWatch {
    /// Counts one answer; says whether the warning is due now.
    pub(crate) fn note(&mut self, cut_thinking: bool) -> CutNews {
        self.recent.push_back(cut_thinking);
        self.cut += usize::from(cut_thinking);
        if self.recent.len() > WINDOW && self.recent.pop_front() == Some(true) {
            self.cut -= 1;
        }
        let share = self.share();
        match share {
            Some(s) if s >= WARN_SHARE && !self.warned => {
                self.warned = true;
                CutNews::Rising(s)
            }
            // Half the line, so that a share hovering at the line is not said over and over.
            Some(s) if s < WARN_SHARE / 2.0 => {
                self.warned = false;
                CutNews::Nothing
            }
            _ => CutNews::Nothing,
        }
    }

    /// The share of recent answers cut while thinking, once there are enough of them.
    pub(crate) fn share(&self) -> Option<f64> {
        (self.recent.len() >= MIN_ANSWERS).then(|| self.cut as f64 / self.recent.len() as f64)
    }

    /// The share while it is above the line (for the header and the headless lines).
    pub(crate) fn alarming(&self) -> Option<f64> {
        self.share().filter(|_| self.warned)
    }
}

/// What earlier runs' answers say before a run starts: `cut` of `answers` were cut while
/// thinking at `max_tokens`. Past [`WARN_SHARE`] of at least [`MIN_ANSWERS`], the line that
/// says so and names the fix (`harvest run` prints it at the start, `harvest estimate` among
/// its assumptions), so the next prompts are not bought at the same cut.
pub(crate) fn earlier_cuts(
    dataset: &str,
    cut: u64,
    answers: u64,
    max_tokens: u32,
) -> Option<String> {
    if answers < MIN_ANSWERS as u64 || (cut as f64) < WARN_SHARE * answers as f64 {
        return None;
    }
    Some(format!(
        "dataset {dataset}: {cut} of {answers} answers so far ({:.0}%) were cut while thinking at \
         max_tokens {max_tokens}: kept as truncated rows with reasoning and no answer; raise \
         [request] max_tokens (or the dataset's) to buy whole answers",
        cut as f64 * 100.0 / answers as f64
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earlier_cuts_are_said_past_the_line_with_enough_answers() {
        // (cut, answers) -> said?
        let cases = [
            ((0, 0), false),
            ((19, 19), false), // too few answers to judge
            ((2, 20), true),   // 10%: at the line
            ((1, 20), false),
            ((223, 300), true),
            ((29, 300), false),
        ];
        for ((cut, answers), said) in cases {
            let line = earlier_cuts("B3", cut, answers, 256);
            assert_eq!(line.is_some(), said, "{cut}/{answers}");
        }
        assert_eq!(
            earlier_cuts("B3", 223, 300, 256).as_deref(),
            Some(
                "dataset B3: 223 of 300 answers so far (74%) were cut while thinking at \
                 max_tokens 256: kept as truncated rows with reasoning and no answer; raise \
                 [request] max_tokens (or the dataset's) to buy whole answers"
            )
        );
    }

    #[test]
    fn warns_once_when_the_share_rises_and_again_only_after_it_fell() {
        let mut w = CutWatch::default();
        // Too few answers: no share yet, whatever they are.
        for _ in 0..MIN_ANSWERS - 1 {
            assert_eq!(w.note(true), CutNews::Nothing);
        }
        assert_eq!(w.share(), None);
        // The twentieth makes a share: 100%, said once.
        assert_eq!(w.note(true), CutNews::Rising(1.0));
        assert_eq!(w.note(true), CutNews::Nothing);
        assert_eq!(w.alarming(), Some(1.0));
        // Whole answers push the cut ones out of the window.
        let mut said = 0;
        for _ in 0..WINDOW {
            if w.note(false) != CutNews::Nothing {
                said += 1;
            }
        }
        assert_eq!(said, 0);
        assert_eq!(w.share(), Some(0.0));
        assert_eq!(w.alarming(), None);
        // Rising again after it fell: said again.
        let mut rising = Vec::new();
        for i in 0..WINDOW {
            if let CutNews::Rising(s) = w.note(i % 5 == 0) {
                rising.push(s);
            }
        }
        assert_eq!(rising.len(), 1, "{rising:?}");
        assert!(rising[0] >= WARN_SHARE && rising[0] < WARN_SHARE + 0.01);
    }

    #[test]
    fn a_share_hovering_at_the_line_is_said_once() {
        let mut w = CutWatch::default();
        let mut said = 0;
        // One in nine cut: 11%, then one in eleven: 9%, back and forth.
        for round in 0..20 {
            let every = if round % 2 == 0 { 9 } else { 11 };
            for i in 0..WINDOW {
                if matches!(w.note(i % every == 0), CutNews::Rising(_)) {
                    said += 1;
                }
            }
        }
        assert_eq!(said, 1);
    }
}
