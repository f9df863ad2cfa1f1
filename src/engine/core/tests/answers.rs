//! What an answer must be to be kept: thinking returned inline is moved into the reasoning, an
//! empty answer is retried then rejected (or kept, or rejected at once, by `on_empty`), a
//! `content_filter` finish is rejected.

use super::*;
use crate::engine::core::attempt::AttemptOutcome;

/// A finished answer with this content and reasoning.
fn answer(
    key: u64,
    endpoint: Option<usize>,
    content: &str,
    reasoning: Option<&str>,
    finish: &str,
) -> AttemptResult {
    let mut r = done(key, endpoint, 50, 0.001, finish);
    if let AttemptOutcome::Done(c) = &mut r.outcome {
        c.content = content.to_string();
        c.reasoning = reasoning.map(str::to_string);
    }
    r
}

fn kept(effects: &[Effect]) -> Vec<(String, Option<String>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Output { record, .. } => {
                let t = record.conversations.last().expect("a turn");
                Some((t.content.clone(), t.reasoning_content.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn inline_thinking_is_split_and_said_once_per_endpoint() {
    let mut h = H::new(config("routing = \"pinned\""), kimi(), &[&["a", "b"]]);
    let sent = h.dispatch();
    let e = sent[0].pinned;
    let fx = h.result(answer(
        sent[0].key,
        e,
        "<think>plan</think>The answer.",
        None,
        "stop",
    ));
    assert_eq!(kept(&fx), vec![("The answer.".into(), Some("plan".into()))]);
    let fx = h.result(answer(
        sent[1].key,
        e,
        "more</think>Second.",
        Some("parsed"),
        "stop",
    ));
    assert_eq!(
        kept(&fx),
        vec![("Second.".into(), Some("parsed\n\nmore".into()))]
    );
    let said = h
        .event_texts()
        .iter()
        .filter(|t| t.contains("returns its thinking inline"))
        .count();
    assert_eq!(said, 1);
    // Off: kept as it came.
    let mut h = H::new(
        config("routing = \"pinned\"\nsplit_think = \"off\""),
        kimi(),
        &[&["a"]],
    );
    let sent = h.dispatch();
    let fx = h.result(answer(
        sent[0].key,
        sent[0].pinned,
        "<think>p</think>A",
        None,
        "stop",
    ));
    assert_eq!(kept(&fx), vec![("<think>p</think>A".into(), None)]);
}

#[test]
fn an_empty_answer_is_retried_then_rejected_or_as_configured() {
    let cases = [
        ("", 3usize, Some("empty")),
        ("on_empty = \"reject\"\n", 1, Some("empty")),
        ("on_empty = \"keep\"\n", 1, None),
    ];
    for (top, attempts, reject) in cases {
        let cfg = config(&format!(
            "{top}routing = \"pinned\"\n[retry]\nmax_attempts = 3\nbase_delay_ms = 10"
        ));
        let mut h = H::new(cfg, kimi(), &[&["a"]]);
        let mut all = Vec::new();
        let mut tries = 0;
        for _ in 0..5 {
            h.at(f64::from(tries) * 100.0);
            let sent = h.dispatch();
            let Some(d) = sent.first() else { break };
            tries += 1;
            // Reasoning only: the content is empty (or only whitespace).
            all.extend(h.result(answer(d.key, d.pinned, "  ", Some("thinking"), "stop")));
        }
        assert_eq!(tries as usize, attempts, "{top}");
        assert_eq!(
            rejects(&all),
            reject.into_iter().collect::<Vec<_>>(),
            "{top}"
        );
        assert_eq!(kept(&all).len(), usize::from(reject.is_none()), "{top}");
        // Every attempt was paid for and booked.
        assert_eq!(
            ledger(&all)
                .iter()
                .filter(|(k, _)| *k == crate::store::output::SpendKind::Complete)
                .count(),
            attempts,
            "{top}"
        );
    }
}

#[test]
fn a_content_filter_finish_is_rejected_not_kept() {
    let mut h = H::new(config("routing = \"pinned\""), kimi(), &[&["a"]]);
    let sent = h.dispatch();
    let fx = h.result(answer(
        sent[0].key,
        sent[0].pinned,
        "partial",
        None,
        "content_filter",
    ));
    assert_eq!(rejects(&fx), vec!["policy"]);
    assert!(kept(&fx).is_empty());
}
