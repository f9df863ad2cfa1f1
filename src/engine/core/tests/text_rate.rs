//! What the run learns of its text's bytes a token from its completed streams, and how every
//! endpoint's pool entry hears it (issue #51: a stream is counted from its text until its
//! endpoint's tokens an event are learned).

use super::*;
use crate::engine::core::wire_rate;

/// A completed stream of `tokens` whose text (content and reasoning) is `bytes` long.
fn done_with_text(key: u64, endpoint: usize, tokens: u64, bytes: usize) -> AttemptResult {
    let mut r = done(key, Some(endpoint), tokens, 0.001, "stop");
    if let AttemptOutcome::Done(c) = &mut r.outcome {
        c.reasoning = None;
        c.content = "x".repeat(bytes);
    }
    r
}

#[test]
fn the_runs_bytes_a_token_reach_every_endpoint_once_three_streams_complete() {
    let cfg = config("budget_usd = 100\nconcurrency = 20\nrouting = \"pinned\"");
    let ids: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = H::new(cfg, kimi(), &[&refs]);
    let sent: Vec<Dispatch> = h.dispatch();
    let prior = wire_rate::PRIOR_BYTES_PER_TOKEN;
    assert!(
        h.core
            .endpoints()
            .iter()
            .all(|e| e.bytes_per_token == prior)
    );
    // Streams at three endpoints, 4, 5 and 6 bytes a token; a short one teaches nothing.
    let served: Vec<(u64, usize)> = (sent.iter())
        .filter_map(|d| d.pinned.map(|e| (d.key, e)))
        .collect();
    let texts = [(100, 400), (10, 80), (100, 500), (100, 600)];
    for (n, (&(key, at), (tokens, bytes))) in served.iter().zip(texts).enumerate() {
        h.result(done_with_text(key, at, tokens, bytes));
        let heard = h.take_repriced();
        if n < 3 {
            assert!(
                heard.iter().all(|(_, e)| e.bytes_per_token == prior),
                "not before three streams of sixteen tokens or more: {heard:?}"
            );
        } else {
            let mut who: Vec<usize> = heard.iter().map(|(i, _)| *i).collect();
            who.dedup();
            assert_eq!(who, (0..kimi().len()).collect::<Vec<_>>(), "every endpoint");
            assert!(heard.iter().all(|(_, e)| e.bytes_per_token == 5.0));
        }
    }
    assert!(h.core.endpoints().iter().all(|e| e.bytes_per_token == 5.0));
    // A stream that moves the median by less than a tenth is not republished.
    let (key, at) = served[4];
    h.result(done_with_text(key, at, 100, 520));
    assert!(
        h.take_repriced()
            .iter()
            .all(|(_, e)| e.bytes_per_token == 5.0)
    );
}
