//! How many tokens one streamed event carries at an endpoint, learned from its completed
//! streams (their usage against the events harvest counted). harvest counts a stream's
//! progress in events; the bill counts tokens. OpenRouter's docs leave an event's size to the
//! provider, and in 518 recorded real OpenRouter streams (issue #51) the median stream carries
//! 2.7 tokens a content event, 99 streams average more than 4, Kimi K2.5's providers 4.1 to
//! 4.4: a rule that reads events as tokens (or as at most four tokens) misreads those
//! providers' closes. So each endpoint's rate is learned, and until it is, a closed stream's
//! tokens are known only to lie in a wide range.

use std::collections::VecDeque;

/// Completed streams of at least [`MIN_EVENTS`] events that it takes to learn a rate.
pub(crate) const STREAMS_NEEDED: usize = 8;

/// Shorter streams say little of a rate (their last, part-filled event weighs too much).
const MIN_EVENTS: u64 = 16;

/// The streams a rate is learned from: the most recent (a provider's batching can change).
const KEPT: usize = crate::store::scan::STREAMS_KEPT;

/// Before an endpoint's rate is learned: tokens an event lie between one and eight. One is the
/// least an event with text carries; eight is above the whole-stream average of all but a few
/// of the 518 recorded streams (Google's median was 6.5, Kimi's providers' at most 4.4).
pub(crate) const PRIOR: Range = Range { lo: 1.0, hi: 8.0 };

/// UTF-8 bytes of streamed text a completion token holds, until the run's own completed streams
/// say ([`BytesPerToken`]): a byte a token, a bound no recorded stream went under. Measured on
/// 556 recorded streams (charmbracelet/fantasy providertests, Apache-2.0; pydantic/pydantic-ai
/// cassettes, MIT): fully visible text ran 1.03 bytes a token at the least (a list of numbers),
/// 1.32 at the 5th percentile and 2.98 at the median (4.13 for streams of 100 tokens or more).
/// It reads ordinary prose three to five times too high, which trips the dollar cap early,
/// never late, and lasts only until [`TEXT_STREAMS_NEEDED`] streams of the run complete.
pub(crate) const PRIOR_BYTES_PER_TOKEN: f64 = 1.0;

/// Completed streams of the run it takes to read its text's bytes a token. Few: the figure
/// is the model's (one tokenizer, whatever endpoint serves it), and the prior it replaces
/// overcounts prose severalfold (a $0.30 demo ended at $0.10 on it).
pub(crate) const TEXT_STREAMS_NEEDED: usize = 3;

/// Streams with fewer tokens say little of their text's bytes a token.
const MIN_TEXT_TOKENS: u64 = 16;

/// How far below the recent streams' median a close's events may average: a close is read
/// from a few dozen events (a check closes after 64), a sample of what the endpoint sends. With
/// each event's count drawn around the mean, as providers that decode speculatively send them
/// (geometric at the recorded means 2.7 to 6.5), the average of 64 events lies within 8-12% of
/// the mean one time in three and within 25% all but a few times in ten thousand; where every
/// event carries the same count it lies on it. Whole streams' averages (the figures kept) spread
/// less than a close's, so their least is no floor for it: a run whose providers drew four
/// tokens an event never trusted a close that way.
const BELOW: f64 = 0.25;

/// How far above the median the most a close's events can carry is taken to lie, unless a
/// recent stream averaged more: a bill reads billed past only beyond it.
const ABOVE: f64 = 0.5;

/// Tokens one event carries, at least `lo` and at most `hi`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Range {
    pub(crate) lo: f64,
    pub(crate) hi: f64,
}

/// The recent completed streams of one endpoint: tokens an event, one figure a stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TokensPerEvent {
    recent: VecDeque<f64>,
}

impl TokensPerEvent {
    /// A completed stream: `tokens` streamed (the usage's completion tokens, less reasoning
    /// that was not streamed) in `events` events.
    pub(crate) fn add(&mut self, tokens: u64, events: u64) {
        if events < MIN_EVENTS || tokens < events {
            // Too short to say, or fewer tokens than events (a usage that counts otherwise):
            // nothing learnt.
            return;
        }
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(tokens as f64 / events as f64);
    }

    /// Whether enough streams completed to use what they showed.
    pub(crate) fn learned(&self) -> bool {
        self.recent.len() >= STREAMS_NEEDED
    }

    /// The best single figure for what one event carries (the recent streams' median), once
    /// learned: what a stream's cost accrues by.
    pub(crate) fn estimate(&self) -> Option<f64> {
        if !self.learned() {
            return None;
        }
        self.median()
    }

    /// The recent streams' median (`None` before any).
    fn median(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.recent.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }

    /// What one event of a close carries: around the recent streams' median ([`BELOW`],
    /// [`ABOVE`], and never above less than the most a stream averaged); [`PRIOR`] until
    /// [`STREAMS_NEEDED`] streams completed.
    pub(crate) fn range(&self) -> Range {
        let Some(median) = self.estimate() else {
            return PRIOR;
        };
        let most = self.recent.iter().copied().fold(0.0, f64::max);
        Range::around(median, most)
    }
}

impl Range {
    /// What one event of a close carries at an endpoint whose completed streams carried
    /// `median` tokens an event, `most` at the most over a stream ([`BELOW`], [`ABOVE`]).
    pub(crate) fn around(median: f64, most: f64) -> Range {
        Range {
            lo: (median * (1.0 - BELOW)).max(1.0),
            hi: (median * (1.0 + ABOVE)).max(most),
        }
    }
}

/// What a completed stream carried, by the API's own usage (`None` without it: an estimate
/// says nothing of the wire). Reasoning the endpoint did not stream is in neither its events
/// nor its text, so it is left out of its tokens too.
pub(crate) fn streamed(
    c: &crate::openrouter::Completion,
) -> Option<crate::store::output::Streamed> {
    if c.usage_source != crate::openrouter::UsageSource::Reported {
        return None;
    }
    let unstreamed = if c.reasoning.as_deref().is_none_or(str::is_empty) {
        c.usage.reasoning_tokens()
    } else {
        0
    };
    // A call's name and arguments are streamed tokens too, counted as the stream counted them.
    let calls: usize = (c.tool_calls.iter())
        .map(|t| t.function.name.len() + t.function.arguments.len())
        .sum();
    Some(crate::store::output::Streamed {
        events: c.events,
        text_bytes: (c.content.len() + c.reasoning.as_deref().map_or(0, str::len) + calls) as u64,
        tokens: c.usage.completion_tokens.saturating_sub(unstreamed),
    })
}

/// Tokens an event over `streams` (tokens, events) pooled, once they hold `events_needed`
/// events in all: a figure from a handful of short answers (`harvest probe`'s, 64 tokens
/// each by default: 15 events at 4.2 an event, under what a run counts a stream by), where a
/// run waits for [`STREAMS_NEEDED`] streams of [`MIN_EVENTS`]. A stream with fewer tokens than
/// events counts otherwise, and is left out.
pub(crate) fn pooled(streams: &[(u64, u64)], events_needed: u64) -> Option<f64> {
    let (tokens, events) = (streams.iter())
        .filter(|&&(t, e)| e > 0 && t >= e)
        .fold((0, 0), |(t, e), &(tt, ee)| (t + tt, e + ee));
    (events >= events_needed.max(1)).then(|| tokens as f64 / events as f64)
}

/// The run's recent completed streams: bytes of text a token, one figure a stream. Learned
/// over the whole run rather than per endpoint: every endpoint serves the same model, so the
/// same tokenizer, and what an endpoint's streams are counted by until their own tokens an event
/// are learned should not wait for that endpoint's own streams.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct BytesPerToken {
    recent: VecDeque<f64>,
}

impl BytesPerToken {
    /// A completed stream: `bytes` of text (content, and reasoning where it was streamed) for
    /// `tokens` (the usage's completion tokens, less reasoning that was not streamed).
    pub(crate) fn add(&mut self, bytes: u64, tokens: u64) {
        if tokens < MIN_TEXT_TOKENS || bytes == 0 {
            return;
        }
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(bytes as f64 / tokens as f64);
    }

    /// The recent streams' median once [`TEXT_STREAMS_NEEDED`] completed, else
    /// [`PRIOR_BYTES_PER_TOKEN`]: the median, not a low quantile, since the dollar cap sums
    /// hundreds of streams' counts and one stream's spread about it cancels in the sum, while
    /// a low quantile would overcount every stream of prose.
    pub(crate) fn estimate(&self) -> f64 {
        if self.recent.len() < TEXT_STREAMS_NEEDED {
            return PRIOR_BYTES_PER_TOKEN;
        }
        let mut v: Vec<f64> = self.recent.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2].max(PRIOR_BYTES_PER_TOKEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handful_of_short_answers_give_a_rate_pooled() {
        #[rustfmt::skip]
        // (what, each stream's tokens and events, the rate)
        type Case<'a> = (&'a str, &'a [(u64, u64)], Option<f64>);
        let cases: [Case; 5] = [
            (
                "three default probe answers at ~4.2 an event",
                &[(64, 15), (64, 16), (64, 15)],
                Some(192.0 / 46.0),
            ),
            ("one is too few", &[(64, 15)], None),
            ("one an event", &[(64, 64)], Some(1.0)),
            (
                "a stream counting otherwise is left out",
                &[(64, 15), (10, 40), (64, 16)],
                Some(128.0 / 31.0),
            ),
            ("nothing", &[], None),
        ];
        for (what, streams, want) in cases {
            assert_eq!(pooled(streams, 24), want, "{what}");
        }
    }

    #[test]
    fn an_endpoints_rate_is_learned_from_its_completed_streams() {
        let mut t = TokensPerEvent::default();
        assert_eq!(t.range(), PRIOR, "nothing completed yet");
        assert_eq!(t.estimate(), None);
        for _ in 0..STREAMS_NEEDED - 1 {
            t.add(800, 100);
        }
        t.add(800, 10);
        t.add(5, 20);
        assert_eq!(
            t.range(),
            PRIOR,
            "short streams and odd usages teach nothing"
        );
        t.add(800, 100);
        assert_eq!(t.range(), Range { lo: 6.0, hi: 12.0 });
        assert_eq!(t.estimate(), Some(8.0));
        // One event a token: never below one.
        let mut one = TokensPerEvent::default();
        (0..STREAMS_NEEDED).for_each(|_| one.add(500, 500));
        assert_eq!(one.range(), Range { lo: 1.0, hi: 1.5 });
        // Counts drawn per event: the streams' averages scatter, the median holds, and a
        // stream that averaged more than half again the median widens the top.
        let mut drawn = TokensPerEvent::default();
        for r in [410, 320, 460, 500, 390, 420, 440, 1_000] {
            drawn.add(r, 100);
        }
        assert_eq!(drawn.estimate(), Some(4.4));
        let r = drawn.range();
        assert!(
            (r.lo - 3.3).abs() < 1e-9 && (r.hi - 10.0).abs() < 1e-9,
            "{r:?}"
        );
        // A provider that changes its batching is followed: the oldest streams go.
        (0..KEPT).for_each(|_| t.add(200, 100));
        assert_eq!(t.range(), Range { lo: 1.5, hi: 3.0 });
    }

    #[test]
    fn the_runs_bytes_a_token_are_learned_from_its_completed_streams() {
        let mut b = BytesPerToken::default();
        assert_eq!(b.estimate(), PRIOR_BYTES_PER_TOKEN, "nothing completed yet");
        b.add(400, 100);
        b.add(500, 100);
        b.add(80, 10);
        b.add(0, 100);
        assert_eq!(
            b.estimate(),
            PRIOR_BYTES_PER_TOKEN,
            "short or textless streams teach nothing"
        );
        b.add(600, 100);
        assert_eq!(b.estimate(), 5.0, "the median of 4, 5 and 6");
        // Never below a byte a token (a usage that counts more tokens than bytes).
        let mut odd = BytesPerToken::default();
        (0..TEXT_STREAMS_NEEDED).for_each(|_| odd.add(50, 100));
        assert_eq!(odd.estimate(), PRIOR_BYTES_PER_TOKEN);
    }
}
