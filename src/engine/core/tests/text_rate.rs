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

/// A start learns from what the directory's earlier runs' streams carried (their `complete`
/// lines' `streamed`), before any stream of its own completes: the text's bytes a token for
/// every endpoint, and the tokens an event where an endpoint's streams say it.
#[test]
fn a_start_learns_the_wire_from_the_streams_its_ledger_kept() {
    use crate::store::output::Streamed;
    let cfg = config("budget_usd = 100\nconcurrency = 4\nrouting = \"pinned\"");
    let mut h = H::new(cfg, kimi(), &[&["a", "b"]]);
    let chutes = h.index("chutes/int4");
    // Chutes' streams: 4 tokens an event, 5 bytes a token; one stream too short to count.
    let mut kept = std::collections::VecDeque::new();
    for _ in 0..10 {
        kept.push_back(Streamed {
            events: 100,
            text_bytes: 2_000,
            tokens: 400,
        });
    }
    kept.push_back(Streamed {
        events: 2,
        text_bytes: 90,
        tokens: 8,
    });
    let streams = HashMap::from([
        ("chutes/int4".to_string(), kept),
        // An endpoint no longer in the run: its text still tells the model's bytes a token.
        (
            "gone/fp8".to_string(),
            std::collections::VecDeque::from([Streamed {
                events: 50,
                text_bytes: 1_000,
                tokens: 200,
            }]),
        ),
    ]);
    h.core = h.core.with_streams_before(&streams);
    h.dispatch();
    let pool = h.core.endpoints();
    assert!(
        pool.iter().all(|e| e.bytes_per_token == 5.0),
        "every endpoint"
    );
    assert_eq!(pool[chutes].tokens_per_event, Some(4.0));
    let other = h.index("novita");
    assert_eq!(
        pool[other].tokens_per_event, None,
        "not learned from Chutes'"
    );
    let heard = h.take_repriced();
    assert!(
        heard
            .iter()
            .any(|(i, e)| *i == chutes && e.tokens_per_event == Some(4.0)),
        "the workers' pool hears it: {heard:?}"
    );
}

/// A kept answer's `complete` line says what its stream carried, read before its text went to
/// its row (a first cut read it after, and wrote zero bytes for every answer).
#[test]
fn an_answers_ledger_line_keeps_what_its_stream_carried() {
    let cfg = config("budget_usd = 100\nconcurrency = 1\nrouting = \"pinned\"");
    let mut h = H::new(cfg, kimi(), &[&["a"]]);
    let sent = h.dispatch();
    let at = sent[0].pinned.expect("pinned");
    let mut r = done_with_text(sent[0].key, at, 100, 450);
    if let AttemptOutcome::Done(c) = &mut r.outcome {
        c.events = 25;
    }
    let fx = h.result(r);
    let lines: Vec<_> = (fx.iter())
        .filter_map(|e| match e {
            Effect::BookKept(l) => l.streamed,
            _ => None,
        })
        .collect();
    assert_eq!(
        lines,
        [crate::store::output::Streamed {
            events: 25,
            text_bytes: 450,
            tokens: 100,
        }]
    );
}
