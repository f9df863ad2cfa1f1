//! `harvest sim --replay DIR`: chat completions answered with real responses recorded from
//! OpenRouter by other projects' test suites (`tests/fixtures/recorded`: reasoning, encrypted
//! reasoning, tool calls, keep-alive comments, a mid-stream error, real 400 and 429 bodies), so
//! anyone can run the engine against real traffic without a key. Each request gets the next
//! body in turn (by file name), byte for byte, with two changes: its generation id is made
//! unique per request (`gen-replay-<n>-<recorded id>`), so ledgers and `/generation` look-ups
//! tell requests apart; and the bill is the body's own `usage.cost`. Streamed requests skip
//! whole-JSON successes and the reverse, when the other kind is there to serve. The listing,
//! the key and everything else stay the simulator's.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::domain::Usd;

use super::billing::{BillingEntry, Outcome};
use super::state::SimState;

/// One recorded response.
#[derive(Debug)]
struct Recorded {
    file: String,
    status: u16,
    sse: bool,
    body: String,
    /// The generation id the body carries (every chunk's `id`), rewritten per request.
    id: Option<String>,
    provider: String,
    prompt_tokens: u64,
    completion_tokens: u64,
    cost: Usd,
    finish_reason: Option<String>,
}

/// The recorded bodies of a directory, served in turn.
#[derive(Debug)]
pub struct Replay {
    bodies: Vec<Recorded>,
    next: AtomicUsize,
}

impl Replay {
    /// Reads `DIR/*.sse` (200, `text/event-stream`) and `DIR/*.json` (a whole body: its
    /// `error.code` is its status when it has one, else 200); `manifest.json` and files of
    /// other kinds are not served.
    pub fn load(dir: &Path) -> Result<Replay, String> {
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("--replay {}: {e}", dir.display()))?;
        let mut files: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let ext = p.extension().and_then(|x| x.to_str());
                matches!(ext, Some("sse" | "json"))
                    && p.file_name().is_some_and(|n| n != "manifest.json")
            })
            .collect();
        files.sort();
        let mut bodies = Vec::new();
        for p in files {
            let body = std::fs::read_to_string(&p)
                .map_err(|e| format!("--replay {}: {e}", p.display()))?;
            let sse = p.extension().is_some_and(|x| x == "sse");
            bodies.push(read(
                p.file_name().and_then(|n| n.to_str()).unwrap_or("?"),
                body,
                sse,
            ));
        }
        if bodies.is_empty() {
            return Err(format!(
                "--replay {}: no recorded bodies (*.sse, *.json) in it",
                dir.display()
            ));
        }
        Ok(Replay {
            bodies,
            next: AtomicUsize::new(0),
        })
    }

    /// How many bodies are served in turn.
    pub fn len(&self) -> usize {
        self.bodies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bodies.is_empty()
    }

    /// The next body for a request (`stream` as asked), billed at its own `usage.cost`.
    pub(super) fn serve(&self, state: &SimState, stream: bool) -> Response {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let len = self.bodies.len();
        // The next in turn, unless it is a success of the other kind and one of this kind is
        // there.
        let fits = |r: &Recorded| r.status != 200 || r.sse == stream;
        let pick = (0..len)
            .map(|k| &self.bodies[(n + k) % len])
            .find(|r| fits(r))
            .unwrap_or(&self.bodies[n % len]);
        let mut body = pick.body.clone();
        let id = pick.id.as_ref().map(|old| {
            let new = format!("gen-replay-{n}-{old}");
            body = body.replace(old.as_str(), &new);
            new
        });
        let now_ms = state.elapsed_ms();
        state.billing.record_request(
            now_ms,
            &format!("replay:{}", pick.file),
            pick.status,
            if pick.status == 200 { "ok" } else { "replayed" },
            0,
        );
        if let Some(id) = &id
            && pick.status == 200
        {
            state.billing.bill(BillingEntry {
                id: id.clone(),
                at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                tag: format!("replay:{}", pick.file),
                provider: pick.provider.clone(),
                prompt_tokens: pick.prompt_tokens,
                completion_tokens: pick.completion_tokens,
                reasoning_tokens: 0,
                cost_usd: pick.cost,
                outcome: Outcome::Complete,
                streamed: pick.sse,
                finish_reason: pick.finish_reason.clone(),
                latency_ms: 0,
            });
        }
        let code = StatusCode::from_u16(pick.status).unwrap_or(StatusCode::OK);
        let kind = if pick.sse {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut resp = (code, body).into_response();
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
        resp
    }
}

/// A body's status, id, provider, usage and finish reason, as the API put them in it.
fn read(file: &str, body: String, sse: bool) -> Recorded {
    let objects: Vec<Value> = if sse {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    } else {
        serde_json::from_str(body.trim()).into_iter().collect()
    };
    let status = if sse {
        200
    } else {
        objects
            .first()
            .and_then(|o| o["error"]["code"].as_u64())
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| (400..600).contains(c))
            .unwrap_or(200)
    };
    let first_str = |key: &str| {
        objects
            .iter()
            .find_map(|o| o[key].as_str().map(str::to_string))
    };
    let usage = objects
        .iter()
        .rev()
        .find(|o| o["usage"].is_object())
        .map(|o| o["usage"].clone())
        .unwrap_or(Value::Null);
    let finish_reason = objects.iter().rev().find_map(|o| {
        o["choices"][0]["finish_reason"]
            .as_str()
            .map(str::to_string)
    });
    Recorded {
        file: file.to_string(),
        status,
        sse,
        id: first_str("id"),
        provider: first_str("provider").unwrap_or_else(|| "replay".into()),
        prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
        completion_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
        cost: Usd::from_f64(usage["cost"].as_f64().unwrap_or(0.0)),
        finish_reason,
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recorded fixtures read as the manifest describes them.
    #[test]
    fn the_recorded_bodies_read_with_their_status_usage_and_id() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recorded");
        let r = Replay::load(&dir).expect("loads");
        let manifest: Vec<Value> = serde_json::from_str(
            &std::fs::read_to_string(dir.join("manifest.json")).expect("manifest"),
        )
        .expect("json");
        assert_eq!(r.len(), manifest.len());
        for m in &manifest {
            let file = m["file"].as_str().expect("file");
            let b = (r.bodies.iter()).find(|b| b.file == file).expect("served");
            assert_eq!(
                u64::from(b.status),
                m["status"].as_u64().expect("status"),
                "{file}"
            );
            if let Some(cost) = m["expect"]["usage_cost"].as_f64() {
                assert_eq!(b.cost, Usd::from_f64(cost), "{file}");
            }
            let ids = m["observed"]["distinct_ids"].as_array().expect("ids");
            assert_eq!(
                b.id.as_deref(),
                ids.first().and_then(Value::as_str),
                "{file}"
            );
        }
    }
}
