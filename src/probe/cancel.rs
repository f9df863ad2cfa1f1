//! `harvest probe --cancel`: whether closing a stream stops each endpoint's bill, measured on
//! purpose before a run relies on it. OpenRouter documents a short list of providers that stop
//! billing when the stream closes (api-reference/streaming, "Stream Cancellation"); the others
//! bill the whole answer the provider goes on generating. The hard dollar budget reserves a
//! stream's worst case where a close does not stop the bill, so the list decides how wide a
//! run's last stretch may be: here each endpoint gets one stream asking for a long answer,
//! closed after a few tokens, then looked up at `/generation` (tokens billed against tokens
//! received, read by the run's own rule, `core::cancel_billing::read_close`). It costs at most
//! one `max_tokens` answer per endpoint: cents.

use std::time::Duration;

use futures::StreamExt;

use crate::domain::{EndpointTag, Usd};
use crate::engine::core::cancel_billing::{Close, read_close};
use crate::openrouter::{ChatRequest, Message, ProviderPreferences, StreamTimeouts};
use crate::store::output::{SpendEntry, SpendKind};

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
/// `/generation`: their bill is the config's prices), all at once.
pub async fn measure(targets: &[Target], s: &CancelSettings) -> Vec<CancelFinding> {
    futures::stream::iter(targets.iter().filter(|t| t.via_openrouter))
        .map(|t| close_one(t, s))
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

async fn close_one(t: &Target, s: &CancelSettings) -> CancelFinding {
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
    let billed = g
        .native_tokens_completion
        .or(g.tokens_completion)
        .unwrap_or(0);
    let verdict = if ended {
        // The answer ended before the close: nothing was closed.
        CancelVerdict::Unclear
    } else {
        match read_close(received, billed) {
            Close::Stopped => CancelVerdict::Stops,
            Close::BilledPast => CancelVerdict::BillsPast,
            Close::Unclear => CancelVerdict::Unclear,
        }
    };
    CancelFinding {
        tag: t.tag.clone(),
        received,
        billed: Some(billed),
        verdict,
        cost: Usd::from_f64(g.total_cost.unwrap_or(0.0)),
        generation_id: Some(id),
        note: ended.then(|| "the answer ended before the close".to_string()),
    }
}

/// The ledger's lines for the closes (what they cost, as `/generation` says).
pub fn spend_lines(findings: &[CancelFinding], now: &str) -> Vec<SpendEntry> {
    findings
        .iter()
        .filter(|f| f.generation_id.is_some())
        .map(|f| SpendEntry {
            endpoint: Some(f.tag.clone()),
            usd: f.cost,
            completion_tokens: f.billed.unwrap_or(0),
            estimated: f.billed.is_none(),
            generation_id: f.generation_id.clone(),
            ..SpendEntry::new(SpendKind::Other, now.to_string(), "probe-cancel", "probe")
        })
        .collect()
}

/// The `cancel_stops_billing` list the findings make: the endpoints seen to stop the bill, and
/// those not measured that OpenRouter documents as stopping it (their documented word stands).
/// Only names made of the characters tags are made of: the list is written into a config.
pub fn stops_list(findings: &[CancelFinding], targets: &[Target]) -> Vec<String> {
    let mut list: Vec<String> = targets
        .iter()
        .filter(|t| {
            match findings.iter().find(|f| f.tag == t.tag).map(|f| f.verdict) {
                Some(CancelVerdict::Stops) => true,
                Some(CancelVerdict::BillsPast) => false,
                // No clear reading: the documented word.
                _ => crate::engine::endpoint::stops_billing_on_cancel(None, &t.tag, &t.provider),
            }
        })
        .map(|t| t.tag.clone())
        .filter(|tag| EndpointTag::is_plain(tag))
        .collect();
    list.sort();
    list.dedup();
    list
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
