//! The answer rules as a table: each shape of a paid answer, under each `on_length` and
//! `on_empty`, before and after the last attempt; and through the core, an answer cut while
//! thinking kept with its reasoning, booked once, never sent again.

use super::*;
use crate::answer_shape::Shape;
use crate::config::{OnEmpty, OnLength};
use crate::engine::core::attempt::AttemptOutcome;
use crate::engine::core::verdict::{AnswerRules, CUT_THINKING, Verdict, verdict};

#[test]
fn the_shape_of_an_answer() {
    let call = [crate::openrouter::ToolCall::function(
        "functions.add:0",
        "add",
        "{\"a\": 2}",
    )];
    // (finish, content, reasoning, calls, shape)
    let with_calls = [
        ("tool_calls", "", Some("plan"), Shape::Calls),
        ("tool_calls", "", None, Shape::Calls),
        ("tool_calls", "Let me look.", None, Shape::Calls),
        // Some providers finish a call with `stop`.
        ("stop", "", None, Shape::Calls),
        // Cut inside its arguments: a part of what the model wrote, as a cut text is.
        ("length", "", Some("plan"), Shape::Cut),
        ("content_filter", "", None, Shape::Filtered),
    ];
    for (finish, content, reasoning, want) in with_calls {
        assert_eq!(
            Shape::of(finish, content, reasoning, &call),
            want,
            "{finish} {content:?} {reasoning:?} with a call"
        );
    }
    let cases = [
        ("stop", "The answer.", Some("plan"), Shape::Whole),
        ("stop", "The answer.", None, Shape::Whole),
        ("length", "The ans", Some("plan"), Shape::Cut),
        (
            "length",
            "",
            Some("still planning"),
            Shape::CutThinking { reasoning: true },
        ),
        (
            "length",
            " \n",
            Some("still planning"),
            Shape::CutThinking { reasoning: true },
        ),
        // Hidden (`reasoning.exclude`) or encrypted reasoning: nothing to keep.
        ("length", "", None, Shape::CutThinking { reasoning: false }),
        ("stop", "", Some("all thought, no answer"), Shape::Empty),
        ("stop", "  \t", None, Shape::Empty),
        // A finish of tool_calls with no call streamed: nothing to keep.
        ("tool_calls", "", None, Shape::Empty),
        ("content_filter", "partial", None, Shape::Filtered),
    ];
    for (finish, content, reasoning, want) in cases {
        assert_eq!(
            Shape::of(finish, content, reasoning, &[]),
            want,
            "{finish} {content:?} {reasoning:?}"
        );
    }
}

/// A shape, the rules, the attempt, and the verdict: `Ok` keep or retry, `Err` a reject's kind.
type Case = (Shape, OnLength, OnEmpty, u32, Result<Verdict, &'static str>);

#[test]
fn what_each_shape_gets_under_each_rule() {
    use Verdict::{Keep, Retry};
    let thinking = Shape::CutThinking { reasoning: true };
    let hidden = Shape::CutThinking { reasoning: false };
    // (shape, on_length, on_empty, attempts of 3, verdict kind: keep/retry/reject label)
    let cases: [Case; 17] = [
        (Shape::Whole, OnLength::Reject, OnEmpty::Reject, 1, Ok(Keep)),
        (Shape::Cut, OnLength::Keep, OnEmpty::Retry, 1, Ok(Keep)),
        (Shape::Cut, OnLength::Retry, OnEmpty::Retry, 1, Ok(Retry)),
        (
            Shape::Cut,
            OnLength::Retry,
            OnEmpty::Retry,
            3,
            Err("length"),
        ),
        (
            Shape::Cut,
            OnLength::Reject,
            OnEmpty::Retry,
            1,
            Err("length"),
        ),
        // Cut while thinking: kept as truncated, never sent again at the same max_tokens,
        // whatever `on_empty` says and even when `on_length` asks for retries.
        (thinking, OnLength::Keep, OnEmpty::Retry, 1, Ok(Keep)),
        (thinking, OnLength::Retry, OnEmpty::Retry, 1, Ok(Keep)),
        (thinking, OnLength::Keep, OnEmpty::Reject, 1, Ok(Keep)),
        (
            thinking,
            OnLength::Reject,
            OnEmpty::Keep,
            1,
            Err(CUT_THINKING),
        ),
        // No reasoning text to keep: a reject at once, not a retry.
        (hidden, OnLength::Keep, OnEmpty::Retry, 1, Err(CUT_THINKING)),
        (hidden, OnLength::Retry, OnEmpty::Keep, 1, Err(CUT_THINKING)),
        // Finished with no content: `on_empty`.
        (Shape::Empty, OnLength::Keep, OnEmpty::Retry, 1, Ok(Retry)),
        (Shape::Empty, OnLength::Keep, OnEmpty::Retry, 2, Ok(Retry)),
        (
            Shape::Empty,
            OnLength::Keep,
            OnEmpty::Retry,
            3,
            Err("empty"),
        ),
        (
            Shape::Empty,
            OnLength::Keep,
            OnEmpty::Reject,
            1,
            Err("empty"),
        ),
        (Shape::Empty, OnLength::Reject, OnEmpty::Keep, 1, Ok(Keep)),
        (
            Shape::Filtered,
            OnLength::Keep,
            OnEmpty::Keep,
            1,
            Err("policy"),
        ),
    ];
    for (shape, on_length, on_empty, attempts, want) in cases {
        let rules = AnswerRules {
            on_length,
            on_empty,
            max_attempts: 3,
            max_tokens: 256,
        };
        let got = verdict(shape, rules, attempts);
        let case = format!("{shape:?} {on_length:?} {on_empty:?} attempt {attempts}");
        match (&got, want) {
            (Verdict::Reject { kind, why }, Err(label)) => {
                assert_eq!(*kind, label, "{case}");
                assert!(!why.is_empty(), "{case}");
                if *kind == CUT_THINKING {
                    // The reject names the fix.
                    assert!(why.contains("max_tokens 256"), "{case}: {why}");
                    assert!(why.contains("--retry-truncated"), "{case}: {why}");
                }
            }
            (got, Ok(v)) => assert_eq!(*got, v, "{case}"),
            (got, Err(label)) => panic!("{case}: {got:?}, want a reject {label}"),
        }
    }
}

/// An answer of this content and reasoning, cut or not, costing `usd`.
fn answer(
    key: u64,
    e: Option<usize>,
    content: &str,
    reasoning: Option<&str>,
    finish: &str,
    usd: f64,
) -> AttemptResult {
    let mut r = done(key, e, 256, usd, finish);
    if let AttemptOutcome::Done(c) = &mut r.outcome {
        c.content = content.to_string();
        c.reasoning = reasoning.map(str::to_string);
    }
    r
}

#[test]
fn an_answer_cut_while_thinking_is_kept_with_its_reasoning_and_never_sent_again() {
    for top in ["", "[retry]\non_length = \"retry\"\nbase_delay_ms = 10"] {
        let cfg = config(&format!("routing = \"pinned\"\n{top}"));
        let mut h = H::new(cfg, kimi(), &[&["a"]]);
        let sent = h.dispatch();
        let fx = h.result(answer(
            sent[0].key,
            sent[0].pinned,
            "",
            Some("step 1, step 2"),
            "length",
            0.0007,
        ));
        // Booked once at its bill, and written as a truncated row holding the reasoning.
        assert_eq!(
            ledger(&fx),
            vec![(
                crate::store::output::SpendKind::Complete,
                Usd::from_f64(0.0007)
            )],
            "{top}"
        );
        let rows: Vec<&OutputRecordRef> = fx
            .iter()
            .filter_map(|e| match e {
                Effect::Output { record, .. } => Some(record.as_ref()),
                _ => None,
            })
            .collect();
        assert_eq!(rows.len(), 1, "{top}");
        let row = rows[0];
        assert!(row.truncated && row.cut_thinking, "{top}");
        assert_eq!(row.finish_reason, "length");
        let last = row.conversations.last().expect("the answer");
        assert_eq!(last.content, "");
        assert_eq!(last.reasoning_content.as_deref(), Some("step 1, step 2"));
        assert!(rejects(&fx).is_empty(), "{top}");
        // Nothing goes out again, however long we wait.
        h.at(600.0);
        assert!(h.dispatch().is_empty(), "{top}");
    }
}

type OutputRecordRef = crate::store::output::OutputRecord;

#[test]
fn a_billed_answer_without_text_is_booked_at_its_bill_and_counted_against_its_endpoint() {
    // A finish of tool_calls with no call in the stream, with `usage.cost`: booked every
    // time, retried per `on_empty`, then rejected; the endpoint's breaker counts each (3
    // failures open it).
    let cfg = config(
        "routing = \"pinned\"\n[retry]\nmax_attempts = 3\nbase_delay_ms = 10\n[breaker]\nfailures = 3",
    );
    let mut h = H::new(
        cfg,
        vec![ep("chutes/int4", "Chutes", "int4", 0.4, 2.0)],
        &[&["a"]],
    );
    let mut booked = Usd::ZERO;
    let mut all = Vec::new();
    for i in 0..3 {
        h.at(f64::from(i) * 100.0);
        let sent = h.dispatch();
        assert_eq!(sent.len(), 1, "attempt {i}");
        let fx = h.result(answer(
            sent[0].key,
            sent[0].pinned,
            "",
            None,
            "tool_calls",
            0.000137,
        ));
        booked += ledger(&fx).iter().map(|(_, u)| *u).sum::<Usd>();
        all.extend(fx);
    }
    assert_eq!(booked, Usd::from_f64(0.000137 * 3.0));
    assert_eq!(rejects(&all), vec!["empty"]);
    assert!(
        h.event_texts()
            .iter()
            .any(|t| t.contains("breaker opened: chutes/int4") && t.contains("empty")),
        "{:?}",
        h.event_texts()
    );
}

#[test]
fn many_answers_cut_while_thinking_are_said_once_with_the_fix() {
    let cfg = config("routing = \"pinned\"\nconcurrency = 40");
    let ids: Vec<String> = (0..40).map(|i| format!("p{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = H::new(cfg, kimi(), &[&ids]);
    let sent = h.dispatch();
    assert_eq!(sent.len(), 40);
    for (i, d) in sent.iter().enumerate() {
        // One in four cut while thinking.
        let r = if i % 4 == 0 {
            answer(d.key, d.pinned, "", Some("thinking"), "length", 0.001)
        } else {
            answer(d.key, d.pinned, "done", Some("thought"), "stop", 0.001)
        };
        h.result(r);
    }
    let said: Vec<String> = h
        .event_texts()
        .into_iter()
        .filter(|t| t.contains("cut while thinking"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("raise max_tokens") && said[0].contains("--retry-truncated"));
    assert!(h.core.cut_thinking_alarm().is_some_and(|s| s >= 0.2));
}

/// An answer that is tool calls, as Kimi K2.5 at Chutes sends one: kept in one request, its
/// calls on the row's last turn, booked once, the endpoint's answer (not its failure). Before
/// (issue #54 item 5) it was an empty answer: booked, retried, then rejected.
#[test]
fn a_tool_call_answer_is_kept_with_its_calls_in_one_request() {
    let cfg = config("routing = \"pinned\"\n[retry]\nmax_attempts = 3\nbase_delay_ms = 10");
    let mut h = H::new(cfg, kimi(), &[&["a"]]);
    let sent = h.dispatch();
    let mut r = answer(
        sent[0].key,
        sent[0].pinned,
        "",
        Some("plan"),
        "tool_calls",
        0.0002,
    );
    let calls = vec![
        crate::openrouter::ToolCall::function("functions.add:0", "add", "{\"a\": 2, \"b\": 3}"),
        crate::openrouter::ToolCall::function(
            "functions.multiply:1",
            "multiply",
            "{\"a\": 2, \"b\": 3}",
        ),
    ];
    if let AttemptOutcome::Done(c) = &mut r.outcome {
        c.tool_calls = calls.clone();
    }
    let fx = h.result(r);
    let kept: Vec<_> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Output { record, .. } => record.conversations.last().cloned(),
            _ => None,
        })
        .collect();
    assert_eq!(kept.len(), 1, "{fx:?}");
    assert_eq!(kept[0].tool_calls, calls);
    assert_eq!(kept[0].reasoning_content.as_deref(), Some("plan"));
    assert!(rejects(&fx).is_empty());
    assert_eq!(ledger(&fx).len(), 1, "booked once");
    h.at(100.0);
    assert!(h.dispatch().is_empty(), "not sent again");
}
