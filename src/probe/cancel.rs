//! `harvest probe --cancel`: whether closing a stream stops each endpoint's bill, measured on
//! purpose before a run relies on it. OpenRouter documents a short list of providers that stop
//! billing when the stream closes (api-reference/streaming, "Stream Cancellation"); the others
//! bill the whole answer the provider goes on generating. The hard dollar budget reserves a
//! stream's worst case where a close does not stop the bill, so the list decides how wide a
//! run's last stretch may be: here each endpoint gets one stream asking for a long answer,
//! closed after a few tokens, then looked up at `/generation` (tokens billed against tokens
//! received, read by the run's own rule, `core::close_read::read_close`). It costs at most
//! one `max_tokens` answer per endpoint: cents.

use std::time::Duration;

use futures::StreamExt;

use crate::domain::{EndpointTag, Usd};
use crate::engine::core::close_read::{Close, read_close};
use crate::engine::core::wire_rate::{PRIOR, Range};
use crate::openrouter::{ChatRequest, Message, ProviderPreferences, StreamTimeouts};
use crate::store::output::{SpendEntry, SpendKind};
use crate::store::probe_file::EndpointScore;

use super::{CancelFinding, CancelVerdict, Target};

/// How the closes are made.
#[derive(Clone, Debug)]
pub struct CancelSettings {
    /// The answer asked for: long enough that a provider going on generates far past the close.
    pub max_tokens: u32,
    /// Token events received before the stream is closed.
    pub close_after: u64,
    /// How long the generation is looked for at `/generation` (an answer billed in full shows
    /// once the provider has finished it).
    pub look_up_for: Duration,
    /// Between look-ups.
    pub look_up_every: Duration,
}

impl Default for CancelSettings {
    fn default() -> Self {
        CancelSettings {
            max_tokens: 1024,
            close_after: 32,
            look_up_for: Duration::from_secs(180),
            look_up_every: Duration::from_secs(2),
        }
    }
}

/// A prompt whose answer runs to any `max_tokens`, the same everywhere.
const LONG_PROMPT: &str =
    "Count upward from 1, writing each number in words on its own line, and do not stop.";

/// The most the closes can cost: each endpoint's prompt and `max_tokens` at its price.
pub fn estimate_cost(targets: &[Target], s: &CancelSettings) -> Usd {
    targets
        .iter()
        .filter(|t| t.via_openrouter)
        .map(|t| t.price_in.cost(64) + t.price_out.cost(u64::from(s.max_tokens)))
        .sum()
}

/// Closes one stream at each target reached through OpenRouter (own servers have no
/// `/generation`: their bill is the config's prices), all at once. `scores`: the fidelity
/// probe's, whose tokens an event each close's events are read by.
pub async fn measure(
    targets: &[Target],
    scores: &[EndpointScore],
    s: &CancelSettings,
) -> Vec<CancelFinding> {
    let rate = |t: &Target| {
        (scores.iter())
            .find(|e| e.tag == t.tag.as_str())
            .and_then(|e| e.tokens_per_event)
    };
    futures::stream::iter(targets.iter().filter(|t| t.via_openrouter))
        .map(|t| close_one(t, rate(t), s))
        .buffer_unordered(16)
        .collect()
        .await
}

fn not_measured(t: &Target, received: u64, note: String) -> CancelFinding {
    CancelFinding {
        tag: t.tag.clone(),
        received,
        billed: None,
        verdict: CancelVerdict::NotMeasured,
        cost: Usd::ZERO,
        generation_id: None,
        note: Some(note),
    }
}

/// `per_event`: the tokens an event the endpoint's uncut answers carried, when the probe saw
/// enough of them.
async fn close_one(t: &Target, per_event: Option<f64>, s: &CancelSettings) -> CancelFinding {
    let mut req = ChatRequest::new(
        t.model.clone(),
        vec![Message::user(LONG_PROMPT)],
        s.max_tokens,
    );
    req.provider = Some(ProviderPreferences::pinned(&t.tag));
    let mut stream = match t.client.chat_stream(&req, StreamTimeouts::default()).await {
        Ok(stream) => stream,
        Err(e) => return not_measured(t, 0, format!("the request failed: {e}")),
    };
    let mut received = 0u64;
    let ended = loop {
        match stream.next().await {
            Ok(Some(p)) => {
                received += u64::from(p.token_events);
                if received >= s.close_after {
                    break false;
                }
            }
            Ok(None) => break true,
            Err(e) => return not_measured(t, received, format!("the stream failed: {e}")),
        }
    };
    let Some(id) = stream.generation_id().map(str::to_string) else {
        return not_measured(t, received, "no generation id to look up".into());
    };
    // The close: the connection's stream is dropped, as the run closes one at its cap.
    drop(stream);
    let deadline = tokio::time::Instant::now() + s.look_up_for;
    let found = loop {
        match t.client.generation(&id).await {
            Ok(g) if g.tokens_completion.or(g.native_tokens_completion).is_some() => break Some(g),
            _ if tokio::time::Instant::now() >= deadline => break None,
            _ => tokio::time::sleep(s.look_up_every).await,
        }
    };
    let Some(g) = found else {
        let mut f = not_measured(
            t,
            received,
            format!(
                "not found at /generation within {} s",
                s.look_up_for.as_secs()
            ),
        );
        f.generation_id = Some(id);
        return f;
    };
    // The API's figure is checked as every booked cost is: one that cannot be a bill leaves
    // the close unread, and its look-up to the next start.
    let cost = match crate::booked_cost::check(g.total_cost.unwrap_or(0.0), Some(worst_of(t, s))) {
        Ok(c) => c,
        Err(why) => {
            let mut f = not_measured(t, received, format!("/generation answered {why}"));
            f.generation_id = Some(id);
            return f;
        }
    };
    let billed = g
        .native_tokens_completion
        .or(g.tokens_completion)
        .unwrap_or(0);
    let verdict = if ended {
        // The answer ended before the close: nothing was closed.
        CancelVerdict::Unclear
    } else {
        // The close's events are read at the tokens an event the endpoint's uncut answers
        // carried, as a run reads them once learned; without them, only what the widest range
        // allows is read (at several tokens an event a stop then reads unclear).
        let wire = per_event.map_or(PRIOR, |m| Range::around(m, m));
        match read_close(received, billed, wire) {
            Close::Stopped => CancelVerdict::Stops,
            Close::BilledPast => CancelVerdict::BillsPast,
            Close::Unclear => CancelVerdict::Unclear,
        }
    };
    let note = if ended {
        Some("the answer ended before the close".to_string())
    } else if verdict == CancelVerdict::Unclear && per_event.is_none() {
        Some(format!(
            "read by the widest range of tokens an event (1 to 8): the probe's answers here \
             streamed fewer than {} events to learn its own from (--prompts, --max-tokens)",
            super::RATE_EVENTS_NEEDED
        ))
    } else {
        None
    };
    CancelFinding {
        tag: t.tag.clone(),
        received,
        billed: Some(billed),
        verdict,
        cost,
        generation_id: Some(id),
        note,
    }
}

/// The most one close at `t` can be billed: the prompt and `max_tokens` at its prices.
fn worst_of(t: &Target, s: &CancelSettings) -> Usd {
    t.price_in.cost(PROMPT_TOKENS_BOUND) + t.price_out.cost(u64::from(s.max_tokens))
}

/// [`LONG_PROMPT`]'s tokens at most, with the chat template's markers.
const PROMPT_TOKENS_BOUND: u64 = 64;

/// The ledger's lines for the closes: what each cost, as `/generation` says; a close it did
/// not find (yet) is booked as a closed stream is, at its received tokens' price and marked
/// estimated, so that the next start looks it up and books what it really cost
/// (reliability-probe-5 P13: booked at $0 as a line nothing looked up again).
pub fn spend_lines(
    findings: &[CancelFinding],
    targets: &[Target],
    s: &CancelSettings,
    now: &str,
) -> Vec<SpendEntry> {
    findings
        .iter()
        .filter(|f| f.generation_id.is_some())
        .map(|f| {
            let line = SpendEntry {
                endpoint: Some(f.tag.clone()),
                usd: f.cost,
                completion_tokens: f.billed.unwrap_or(0),
                generation_id: f.generation_id.clone(),
                ..SpendEntry::new(SpendKind::Other, now.to_string(), "probe-cancel", "probe")
            };
            let target = targets.iter().find(|t| t.tag == f.tag);
            match (f.billed, target) {
                (Some(_), _) | (None, None) => line,
                (None, Some(t)) => SpendEntry {
                    kind: SpendKind::Cancelled,
                    usd: t.price_in.cost(PROMPT_TOKENS_BOUND) + t.price_out.cost(f.received),
                    completion_tokens: f.received,
                    estimated: true,
                    attempt: Some(format!("probe-{now}-{}", f.tag)),
                    worst_usd: Some(worst_of(t, s)),
                    ..line
                },
            }
        })
        .collect()
}

/// The `cancel_stops_billing` list the findings make, and why each endpoint is in it or not.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StopsList {
    /// The list: the endpoints seen to stop the bill, and the entries of the config's own list
    /// that the probe did not measure (the operator's word stands where nothing was learnt).
    pub list: Vec<String>,
    /// Endpoints seen to stop the bill at a close.
    pub measured: Vec<String>,
    /// Endpoints probed without a clear reading, and why, left out of the list unless the
    /// config already named them: a list turns the hard budget's own checks off, so an
    /// endpoint that was not measured must not be in it on the probe's word
    /// (reliability-probe-5 P1: one 429 at Chutes, written as measured, led to +36.6% on a
    /// hard budget). Left out, such an endpoint is taken to bill a close in full: the hard
    /// budget reserves its streams' worst case.
    pub not_measured: Vec<(String, String)>,
    /// Entries of the config's list kept without a reading (not probed, or no clear reading).
    pub kept: Vec<String>,
}

impl StopsList {
    /// The comment lines written above the list in the config.
    pub fn note(&self, date: &str) -> Vec<String> {
        let mut lines = vec![format!(
            "written {date}: closing a stream stopped the bill at {}",
            if self.measured.is_empty() {
                "no endpoint".to_string()
            } else {
                self.measured.join(", ")
            }
        )];
        if !self.kept.is_empty() {
            lines.push(format!(
                "kept from this list, not measured: {}",
                self.kept.join(", ")
            ));
        }
        for (tag, why) in &self.not_measured {
            lines.push(format!(
                "not measured, left out (its streams reserve their worst case): {tag} ({why})"
            ));
        }
        lines
    }
}

/// The list the findings make, merged with the config's own (`existing`): the endpoints seen
/// to stop the bill; those seen billed past the close never; an entry the config already has
/// stays where the probe learnt nothing of it. Only names made of the characters tags are
/// made of: the list is written into a config.
pub fn stops_list(
    findings: &[CancelFinding],
    targets: &[Target],
    existing: Option<&[String]>,
) -> StopsList {
    let existing = existing.unwrap_or_default();
    let had = |tag: &str| existing.iter().any(|e| e == tag);
    let mut out = StopsList::default();
    for t in targets {
        let Some(f) = findings.iter().find(|f| f.tag == t.tag) else {
            continue;
        };
        match f.verdict {
            CancelVerdict::Stops => out.measured.push(t.tag.clone()),
            CancelVerdict::BillsPast => {}
            CancelVerdict::Unclear | CancelVerdict::NotMeasured if had(&t.tag) => {
                out.kept.push(t.tag.clone());
            }
            CancelVerdict::Unclear | CancelVerdict::NotMeasured => {
                let why = f.note.clone().unwrap_or_else(|| match f.verdict {
                    CancelVerdict::Unclear => "the bill said nothing clear".into(),
                    _ => "no reading".into(),
                });
                out.not_measured.push((t.tag.clone(), why));
            }
        }
    }
    // The config's entries the probe did not reach (`--only`, an own server) stay.
    let probed = |tag: &str| findings.iter().any(|f| f.tag == tag);
    out.kept
        .extend(existing.iter().filter(|e| !probed(e)).cloned());
    out.list = (out.measured.iter().chain(&out.kept))
        .filter(|tag| EndpointTag::is_plain(tag))
        .cloned()
        .collect();
    out.list.sort();
    out.list.dedup();
    out
}

/// The findings as lines for the report.
pub fn render(findings: &[CancelFinding]) -> String {
    let mut out =
        String::from("closing a stream (one per endpoint, closed after its first tokens):\n");
    for f in findings {
        let billed = f.billed.map_or("-".to_string(), |b| b.to_string());
        let what = match f.verdict {
            CancelVerdict::Stops => "stops the bill",
            CancelVerdict::BillsPast => "billed past the close: bills a cancel in full",
            CancelVerdict::Unclear => "unclear",
            CancelVerdict::NotMeasured => "not measured",
        };
        out.push_str(&format!(
            "  {:<28} received {:>5}  billed {:>6}  {what}{}\n",
            f.tag,
            f.received,
            billed,
            f.note
                .as_deref()
                .map_or(String::new(), |n| format!(" ({n})"))
        ));
    }
    out
}
