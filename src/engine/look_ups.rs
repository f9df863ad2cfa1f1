//! How `GET /generation` look-ups are paced: in passes (every open id is asked once before any
//! is asked twice, so the billed ones are found on the first pass, whatever the unknown ones
//! do), many at once (they are small GETs), all paused while the API says 429 for as long as
//! its `Retry-After` asks, and asked again in later passes, further apart each time, until each
//! is found, ages out, or the caller's deadline comes. [`Plan`] is the pure rule (time passed
//! in); [`look_up`] drives it against the API.

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};

use crate::openrouter::{ApiError, OpenRouterClient};
use crate::store::output::SpendEntry;

/// Look-ups in flight at once.
const PARALLEL: usize = 64;
/// The most one GET may take.
const ONE_ASK: Duration = Duration::from_secs(10);
/// The wait between the start of pass `n` and pass `n + 1`: 1 s, 2 s, 4 s, ... at most 30 s
/// (the API answers 404 for a moment after a generation ends, and a generation a provider
/// still runs is recorded when it ends).
const FIRST_GAP: Duration = Duration::from_secs(1);
const LONGEST_GAP: Duration = Duration::from_secs(30);
/// The pause after a 429 that names no `Retry-After`.
const RATE_PAUSE: Duration = Duration::from_secs(1);

/// How long look-ups go on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Until {
    /// Until each is found or older than [`super::reconcile::UNKNOWN_AFTER`] (a crash's
    /// leftovers, asked in the background of a run).
    AgedOut,
    /// At most this long from the start: those still unknown then come back unknown.
    Deadline(Duration),
}

/// What one look-up says.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Answer {
    /// The API's cost, and the completion tokens it billed (the provider's count).
    Cost(f64, Option<u64>),
    /// 404: not recorded yet (or never).
    NotYet,
    /// A 5xx, or a body that does not parse: asked again next pass.
    Retry,
    /// No answer from the API at all (refused, DNS, TLS, a connection lost, no answer in
    /// [`ONE_ASK`]), and why: asked again next pass, as [`Answer::Retry`]; told apart so that
    /// an API that cannot be reached is not taken for one that does not know the id yet.
    Unreached(String),
    /// 429: every look-up waits this long (or [`RATE_PAUSE`]) and this one is asked again.
    RateLimited(Option<Duration>),
    /// Anything else (a refused key, a body that is not a generation): asked no more.
    Refused,
}

/// What the driver hands on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LookedUp {
    /// Settled as far as these look-ups go: the API's cost, or `None` (unknown and aged out,
    /// refused, or unknown at the deadline). `said_before`: a `NotOnFirstPass` came first.
    Done {
        entry: SpendEntry,
        cost: Option<f64>,
        /// The completion tokens billed, when found.
        completion_tokens: Option<u64>,
        said_before: bool,
        /// Asked, and every ask failed before the API answered: the last failure (its cost is
        /// unknown because the API could not be asked, not because it does not know it yet).
        unreached: Option<String>,
    },
    /// Not known on its first ask: still asked in later passes (the caller stops waiting for
    /// it, and keeps its hold).
    NotOnFirstPass(SpendEntry),
}

/// One id to ask about.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Item {
    pub id: String,
    pub entry: SpendEntry,
    /// Its age when the look-ups began.
    age: Duration,
    asked: u32,
    /// A `NotOnFirstPass` was handed on for it.
    said: bool,
    /// Some ask of it got an answer from the API (whatever the answer).
    answered: bool,
    /// Why its last ask got none, while none has.
    unreached: Option<String>,
}

impl Item {
    fn done(self, cost: Option<f64>) -> LookedUp {
        self.found(cost, None)
    }

    fn found(self, cost: Option<f64>, completion_tokens: Option<u64>) -> LookedUp {
        LookedUp::Done {
            completion_tokens,
            said_before: self.said,
            unreached: if self.answered { None } else { self.unreached },
            entry: self.entry,
            cost,
        }
    }
}

/// The pure pacing of a set of look-ups. Times are offsets from the start of the look-ups.
#[derive(Debug)]
pub(crate) struct Plan {
    until: Until,
    /// This pass's ids not asked yet, in order.
    queue: VecDeque<Item>,
    /// Asked this pass and still unknown: the next pass.
    again: Vec<Item>,
    running: usize,
    pass: u32,
    pass_began: Duration,
    paused_until: Duration,
}

impl Plan {
    /// `items` with their ages now, asked in the order given (the caller puts first what is
    /// most likely billed).
    pub(crate) fn new(items: Vec<(String, SpendEntry, Duration)>, until: Until) -> Plan {
        Plan {
            until,
            queue: (items.into_iter())
                .map(|(id, entry, age)| Item {
                    id,
                    entry,
                    age,
                    asked: 0,
                    said: false,
                    answered: false,
                    unreached: None,
                })
                .collect(),
            again: Vec::new(),
            running: 0,
            pass: 0,
            pass_began: Duration::ZERO,
            paused_until: Duration::ZERO,
        }
    }

    /// The next id to ask at `now`, if one may be asked now.
    pub(crate) fn next(&mut self, now: Duration) -> Option<Item> {
        if self.running >= PARALLEL || now < self.paused_until || self.past_deadline(now) {
            return None;
        }
        if self.queue.is_empty() && self.running == 0 && !self.again.is_empty() {
            // A pass ends when its last answer is in; the next begins after its gap.
            if now < self.next_pass_at() {
                return None;
            }
            self.pass += 1;
            self.pass_began = now;
            self.queue = std::mem::take(&mut self.again).into();
        }
        let mut item = self.queue.pop_front()?;
        item.asked += 1;
        self.running += 1;
        Some(item)
    }

    /// `item`'s answer came at `now`: what to hand on, if anything.
    pub(crate) fn answered(
        &mut self,
        mut item: Item,
        answer: Answer,
        now: Duration,
    ) -> Vec<LookedUp> {
        self.running -= 1;
        let mut out = Vec::new();
        match &answer {
            Answer::Unreached(why) => item.unreached = Some(why.clone()),
            _ => item.answered = true,
        }
        match answer {
            Answer::Cost(c, tokens) => out.push(item.found(Some(c), tokens)),
            Answer::Refused => out.push(item.done(None)),
            Answer::RateLimited(wait) => {
                // Not an answer about this id: asked again in this pass, after the pause,
                // unless it is past the age a generation is looked up to.
                self.paused_until = self.paused_until.max(now + wait.unwrap_or(RATE_PAUSE));
                if self.until == Until::AgedOut && item.age + now >= super::reconcile::UNKNOWN_AFTER
                {
                    out.push(item.done(None));
                } else {
                    item.asked -= 1;
                    self.queue.push_front(item);
                }
            }
            Answer::NotYet | Answer::Retry | Answer::Unreached(_) => {
                let aged = item.age + now >= super::reconcile::UNKNOWN_AFTER;
                if aged && self.until == Until::AgedOut {
                    out.push(item.done(None));
                } else {
                    if !item.said {
                        item.said = true;
                        out.push(LookedUp::NotOnFirstPass(item.entry.clone()));
                    }
                    self.again.push(item);
                }
            }
        }
        out.extend(self.expire(now));
        out
    }

    /// Past the deadline, every id not running comes back unknown.
    pub(crate) fn expire(&mut self, now: Duration) -> Vec<LookedUp> {
        if !self.past_deadline(now) {
            return Vec::new();
        }
        (self.queue.drain(..).chain(self.again.drain(..)))
            .map(|i| i.done(None))
            .collect()
    }

    /// When [`Plan::next`] may give an id again, if it cannot now and nothing running is
    /// awaited for it (`None`: only a running answer can move things, or all is done).
    pub(crate) fn wake(&self, now: Duration) -> Option<Duration> {
        if self.is_done() || self.running >= PARALLEL {
            return None;
        }
        let deadline = match self.until {
            Until::Deadline(d) => Some(d),
            Until::AgedOut => None,
        };
        let at = if !self.queue.is_empty() {
            Some(self.paused_until)
        } else if self.running == 0 && !self.again.is_empty() {
            Some(self.next_pass_at().max(self.paused_until))
        } else {
            None
        };
        let at = match (at, deadline) {
            (Some(a), Some(d)) => Some(a.min(d)),
            (a, None) => a,
            (None, Some(d)) if !self.again.is_empty() => Some(d),
            (None, Some(_)) => None,
        };
        at.map(|a| a.max(now))
    }

    /// Nothing left to ask and nothing running.
    pub(crate) fn is_done(&self) -> bool {
        self.queue.is_empty() && self.again.is_empty() && self.running == 0
    }

    fn next_pass_at(&self) -> Duration {
        let gap = FIRST_GAP.saturating_mul(1 << self.pass.min(5));
        self.pass_began + gap.min(LONGEST_GAP)
    }

    fn past_deadline(&self, now: Duration) -> bool {
        matches!(self.until, Until::Deadline(d) if now >= d)
    }
}

/// What the API's answer to one look-up means for its pacing.
fn answer_of(r: Result<crate::openrouter::GenerationInfo, ApiError>) -> Answer {
    match r {
        Ok(g) => match g.cost_to_user() {
            Some(c) => Answer::Cost(c, g.native_tokens_completion.or(g.tokens_completion)),
            None => Answer::Refused,
        },
        Err(e) if e.status() == Some(429) => Answer::RateLimited(e.retry_after()),
        Err(e) if e.status() == Some(404) => Answer::NotYet,
        Err(
            e @ (ApiError::Connect(_)
            | ApiError::Connection(_)
            | ApiError::Timeout(_)
            | ApiError::Invalid(_)),
        ) => Answer::Unreached(e.to_string()),
        Err(e) if e.status().is_none() || e.is_retryable() => Answer::Retry,
        Err(_) => Answer::Refused,
    }
}

/// Asks the API about each of `items` (id, its open line, its age now), paced by [`Plan`];
/// yields what it learns as it lands. Each id comes back `Done` exactly once.
pub(crate) fn look_up(
    client: OpenRouterClient,
    items: Vec<(String, SpendEntry, Duration)>,
    until: Until,
) -> impl Stream<Item = LookedUp> {
    struct Driver<F> {
        client: OpenRouterClient,
        plan: Plan,
        running: FuturesUnordered<F>,
        ready: VecDeque<LookedUp>,
        began: tokio::time::Instant,
    }
    let ask = |client: OpenRouterClient, item: Item| async move {
        let r = tokio::time::timeout(ONE_ASK, client.generation(&item.id)).await;
        let answer = match r {
            Ok(r) => answer_of(r),
            Err(_) => Answer::Unreached(format!("no answer in {} s", ONE_ASK.as_secs())),
        };
        (item, answer)
    };
    type Asking = std::pin::Pin<Box<dyn std::future::Future<Output = (Item, Answer)> + Send>>;
    let driver: Driver<Asking> = Driver {
        client,
        plan: Plan::new(items, until),
        running: FuturesUnordered::new(),
        ready: VecDeque::new(),
        began: tokio::time::Instant::now(),
    };
    futures::stream::unfold(driver, move |mut d| async move {
        loop {
            if let Some(x) = d.ready.pop_front() {
                return Some((x, d));
            }
            let now = d.began.elapsed();
            d.ready.extend(d.plan.expire(now));
            while let Some(item) = d.plan.next(now) {
                d.running.push(Box::pin(ask(d.client.clone(), item)));
            }
            if !d.ready.is_empty() {
                continue;
            }
            if d.plan.is_done() && d.running.is_empty() {
                return None;
            }
            let wake = d.plan.wake(now).map(|w| d.began + w);
            tokio::select! {
                Some((item, answer)) = d.running.next(), if !d.running.is_empty() => {
                    let now = d.began.elapsed();
                    d.ready.extend(d.plan.answered(item, answer, now));
                }
                () = async {
                    match wake {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::output::SpendKind;

    fn items(n: usize) -> Vec<(String, SpendEntry, Duration)> {
        (0..n)
            .map(|i| {
                let e = SpendEntry::new(SpendKind::Started, String::new(), format!("p{i}"), "D");
                (format!("gen-{i}"), e, Duration::from_secs(60))
            })
            .collect()
    }

    const S: Duration = Duration::from_secs(1);

    /// Asks everything askable at `now`; answers each with `f`; returns what came out.
    fn round(
        plan: &mut Plan,
        now: Duration,
        f: impl Fn(&Item) -> Answer,
    ) -> (Vec<String>, Vec<LookedUp>) {
        let mut asked = Vec::new();
        let mut running = Vec::new();
        while let Some(i) = plan.next(now) {
            asked.push(i.id.clone());
            running.push(i);
        }
        let mut out = Vec::new();
        for i in running {
            let a = f(&i);
            out.extend(plan.answered(i, a, now));
        }
        (asked, out)
    }

    #[test]
    fn every_id_is_asked_once_before_any_is_asked_twice() {
        let mut plan = Plan::new(items(150), Until::AgedOut);
        let unknown = |i: &Item| {
            if i.id.ends_with('7') {
                Answer::NotYet
            } else {
                Answer::Cost(0.01, None)
            }
        };
        // 64 at once: three rounds make the first pass, and nobody is asked twice in it.
        let mut first = Vec::new();
        let mut found = 0;
        for _ in 0..3 {
            let (asked, out) = round(&mut plan, Duration::ZERO, unknown);
            assert!(asked.len() <= PARALLEL);
            first.extend(asked);
            found += (out.iter())
                .filter(|x| matches!(x, LookedUp::Done { cost: Some(_), .. }))
                .count();
        }
        first.sort();
        first.dedup();
        assert_eq!(first.len(), 150, "each id once in the first pass");
        assert_eq!(found, 135, "every billed one found on the first pass");
        // The second pass waits its gap, then asks only the 15 unknown ones.
        assert_eq!(plan.next(Duration::from_millis(500)), None);
        assert_eq!(plan.wake(Duration::from_millis(500)), Some(S));
        let (asked, _) = round(&mut plan, S, unknown);
        assert_eq!(asked.len(), 15);
        assert!(asked.iter().all(|id| id.ends_with('7')));
    }

    #[test]
    fn an_unknown_id_is_said_once_then_settled_when_it_ages_out() {
        let mut its = items(1);
        its[0].2 = super::super::reconcile::UNKNOWN_AFTER - Duration::from_secs(5);
        let mut plan = Plan::new(its, Until::AgedOut);
        let (_, out) = round(&mut plan, Duration::ZERO, |_| Answer::NotYet);
        assert!(matches!(out.as_slice(), [LookedUp::NotOnFirstPass(_)]));
        // Later passes: 1 s, then 2 s, 4 s after: silent until it is 15 minutes old.
        let (asked, out) = round(&mut plan, S, |_| Answer::NotYet);
        assert_eq!((asked.len(), out.len()), (1, 0));
        assert_eq!(plan.wake(S), Some(3 * S));
        let (_, out) = round(&mut plan, 3 * S, |_| Answer::NotYet);
        assert!(out.is_empty());
        let (_, out) = round(&mut plan, 7 * S, |_| Answer::NotYet);
        assert!(
            matches!(out.as_slice(), [LookedUp::Done { cost: None, .. }]),
            "{out:?}"
        );
        assert!(plan.is_done());
    }

    #[test]
    fn the_gap_between_passes_grows_to_thirty_seconds() {
        let mut its = items(1);
        its[0].2 = Duration::ZERO;
        let mut plan = Plan::new(its, Until::AgedOut);
        let mut now = Duration::ZERO;
        let mut gaps = Vec::new();
        for _ in 0..8 {
            let (asked, _) = round(&mut plan, now, |_| Answer::Retry);
            assert_eq!(asked.len(), 1);
            let next = plan.wake(now).expect("asked again");
            gaps.push((next - now).as_secs());
            now = next;
        }
        assert_eq!(gaps, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn a_429_pauses_every_look_up_for_its_retry_after() {
        let mut plan = Plan::new(items(3), Until::AgedOut);
        let first = plan.next(Duration::ZERO).expect("one");
        let out = plan.answered(first, Answer::RateLimited(Some(5 * S)), Duration::ZERO);
        assert!(out.is_empty());
        assert_eq!(plan.next(S), None, "paused");
        assert_eq!(plan.wake(S), Some(5 * S));
        // The rate-limited id is asked again first, and counts as asked once.
        let again = plan.next(5 * S).expect("after the pause");
        assert_eq!(again.id, "gen-0");
        let out = plan.answered(again, Answer::NotYet, 5 * S);
        assert!(matches!(out.as_slice(), [LookedUp::NotOnFirstPass(_)]));
        // Without a Retry-After, one second.
        let i = plan.next(5 * S).expect("next");
        plan.answered(i, Answer::RateLimited(None), 5 * S);
        assert_eq!(plan.wake(5 * S), Some(6 * S));
    }

    #[test]
    fn an_id_the_api_keeps_refusing_with_429_still_ages_out() {
        let mut its = items(1);
        its[0].2 = super::super::reconcile::UNKNOWN_AFTER - 2 * S;
        let mut plan = Plan::new(its, Until::AgedOut);
        let i = plan.next(Duration::ZERO).expect("asked");
        assert!(
            plan.answered(i, Answer::RateLimited(Some(S)), Duration::ZERO)
                .is_empty()
        );
        let i = plan.next(S).expect("asked again after the pause");
        let out = plan.answered(i, Answer::RateLimited(Some(S)), 2 * S);
        assert!(
            matches!(out.as_slice(), [LookedUp::Done { cost: None, .. }]),
            "{out:?}"
        );
        assert!(plan.is_done());
    }

    #[test]
    fn an_api_never_reached_is_told_from_one_that_does_not_know_the_id_yet() {
        let mut plan = Plan::new(items(2), Until::Deadline(3 * S));
        let refused = || Answer::Unreached("could not connect: connection refused".into());
        let (_, out) = round(&mut plan, Duration::ZERO, |_| refused());
        // Each is said once as not known on its first ask, as after a 404, and asked again.
        assert!(
            out.iter().all(|x| matches!(x, LookedUp::NotOnFirstPass(_))),
            "{out:?}"
        );
        // gen-1 reaches the API on the second pass (404: not known yet); gen-0 never does.
        let (asked, _) = round(&mut plan, S, |i| {
            if i.id == "gen-1" {
                Answer::NotYet
            } else {
                Answer::Unreached("no answer in 10 s".into())
            }
        });
        assert_eq!(asked.len(), 2);
        let mut out = plan.expire(3 * S);
        out.sort_by_key(|x| format!("{x:?}"));
        let unreached: Vec<_> = (out.iter())
            .map(|x| match x {
                LookedUp::Done {
                    cost: None,
                    unreached,
                    entry,
                    ..
                } => (entry.id.clone(), unreached.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            unreached,
            [
                ("p0".to_string(), Some("no answer in 10 s".to_string())),
                ("p1".to_string(), None),
            ]
        );
        assert!(plan.is_done());
    }

    #[test]
    fn at_the_deadline_the_unknown_come_back_unknown_once() {
        let mut plan = Plan::new(items(70), Until::Deadline(3 * S));
        let (asked, out) = round(&mut plan, Duration::ZERO, |i| {
            if i.id == "gen-1" {
                Answer::Cost(0.5, None)
            } else {
                Answer::NotYet
            }
        });
        assert_eq!(asked.len(), PARALLEL);
        assert_eq!(out.len(), PARALLEL, "one found, the rest said once");
        // A refused key settles at once; the deadline ends the rest, each once.
        let i = plan
            .next(Duration::ZERO)
            .expect("the rest of the first pass");
        let out = plan.answered(i, Answer::Refused, Duration::ZERO);
        assert!(matches!(
            out.as_slice(),
            [LookedUp::Done { cost: None, .. }]
        ));
        let _ = round(&mut plan, Duration::ZERO, |_| Answer::NotYet);
        let out = plan.expire(3 * S);
        assert_eq!(out.len(), 68);
        assert!(
            out.iter()
                .all(|x| matches!(x, LookedUp::Done { cost: None, .. }))
        );
        assert!(plan.is_done());
        assert_eq!(plan.next(3 * S), None);
    }
}
