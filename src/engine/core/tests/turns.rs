//! Every turn regenerated (`turns = "all"`): one request per assistant turn, each on the
//! history the model has written so far; the row is written once, after the last turn, with
//! every turn's endpoint, usage and cost; budgets count every turn; a turn that fails for good
//! rejects the row, naming the turn.

use super::*;
use crate::config::Turns;

/// The reject messages among `effects`.
fn reject_errors(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Reject { record, .. } => Some(record.error.clone()),
            _ => None,
        })
        .collect()
}

/// A three-turn conversation: two assistant turns of the dataset's own, then a last user turn.
fn three_turns(id: &str) -> Prompt {
    Prompt {
        id: id.into(),
        messages: vec![
            Message::system("sys"),
            Message::user("u1"),
            Message::new("assistant", "dataset a1"),
            Message::user("u2"),
            Message::new("assistant", "dataset a2"),
            Message::user("u3"),
        ],
        line: 1,
    }
}

fn harness(turns: Turns, budget: Option<u64>) -> H {
    let cfg = config("routing = \"pinned\"\nconcurrency = 4");
    let mut b = book("d0", &cfg);
    b.turns = turns;
    b.budget = budget;
    let src = Source(vec![VecDeque::from([Ok(three_turns("p1"))])]);
    H::with_books(cfg, kimi(), vec![b], src)
}

fn sent(d: &Dispatch) -> Vec<String> {
    d.request
        .messages
        .iter()
        .map(|m| format!("{}:{}", m.role, m.content))
        .collect()
}

#[test]
fn each_turn_is_one_request_on_the_regenerated_history_and_one_row_at_the_end() {
    let mut h = harness(Turns::All, None);
    let mut fx = Vec::new();
    // The answer of each turn, as the history of the next shows it.
    let mut answers: Vec<String> = Vec::new();
    for i in 0..3usize {
        let d = h.dispatch();
        assert_eq!(
            d.len(),
            1,
            "turn {}: one request at a time for a row",
            i + 1
        );
        let mut want = vec!["system:sys".to_string(), "user:u1".into()];
        for (k, a) in answers.iter().enumerate() {
            want.push(format!("assistant:{a}"));
            want.push(format!("user:u{}", k + 2));
        }
        assert_eq!(sent(&d[0]), want, "turn {}", i + 1);
        assert_eq!(h.core.datasets()[0].done, 0);
        fx = h.result(done(d[0].key, d[0].pinned, 100 + i as u64, 0.01, "stop"));
        answers.push(format!("answer {}", d[0].key));
        assert_eq!(outputs(&fx), usize::from(i == 2), "turn {}", i + 1);
        // Every turn's tokens count against the budget as soon as it is answered.
        let so_far: u64 = (0..=i as u64).map(|k| 100 + k).sum();
        assert_eq!(h.core.datasets()[0].output_tokens, so_far);
    }
    let record = fx
        .iter()
        .find_map(|e| match e {
            Effect::Output { record, .. } => Some(record),
            _ => None,
        })
        .expect("the row");
    let conv: Vec<(&str, &str)> = record
        .conversations
        .iter()
        .map(|t| (t.role.as_str(), t.content.as_str()))
        .collect();
    assert_eq!(
        conv,
        [
            ("system", "sys"),
            ("user", "u1"),
            ("assistant", answers[0].as_str()),
            ("user", "u2"),
            ("assistant", answers[1].as_str()),
            ("user", "u3"),
            ("assistant", answers[2].as_str()),
        ]
    );
    assert!(
        record.conversations[2].reasoning_content.is_some(),
        "an earlier turn keeps its reasoning"
    );
    assert_eq!(record.turns.len(), 3);
    assert_eq!(record.usage.completion_tokens, 100 + 101 + 102);
    assert_eq!(record.usage.prompt_tokens, 30);
    assert_eq!(record.cost_usd, Usd::from_f64(0.03));
    assert_eq!(record.attempts, 3);
    let gens: Vec<String> = record
        .turns
        .iter()
        .map(|t| t.generation_id.clone().unwrap_or_default())
        .collect();
    let want: Vec<String> = answers
        .iter()
        .map(|a| a.replace("answer ", "gen-"))
        .collect();
    assert_eq!(gens, want);
    assert_eq!(h.core.datasets()[0].done, 1);
    assert!(h.core.admission.all_finished());
}

#[test]
fn the_last_turn_only_by_default_keeps_the_datasets_earlier_turns() {
    let mut h = harness(Turns::Last, None);
    let d = h.dispatch();
    assert_eq!(sent(&d[0]).len(), 6, "the whole prompt in one request");
    let fx = h.result(done(d[0].key, d[0].pinned, 100, 0.01, "stop"));
    assert_eq!(outputs(&fx), 1);
    let Some(Effect::Output { record, .. }) =
        fx.iter().find(|e| matches!(e, Effect::Output { .. }))
    else {
        panic!("a row")
    };
    assert_eq!(record.conversations[2].content, "dataset a1");
    assert!(record.turns.is_empty(), "no per-turn record for one turn");
}

#[test]
fn a_turn_that_fails_for_good_rejects_the_row_naming_the_turn() {
    let mut h = harness(Turns::All, None);
    let d = h.dispatch();
    h.result(done(d[0].key, d[0].pinned, 100, 0.01, "stop"));
    let max = h.core.cfg.retry.max_attempts;
    let mut fx = Vec::new();
    for k in 0..max {
        // Past any back-off.
        h.at(600.0 * f64::from(k + 1));
        let d = h.dispatch();
        assert_eq!(d.len(), 1);
        assert_eq!(sent(&d[0]).len(), 4, "still the second turn");
        fx = h.result(failed(
            d[0].key,
            d[0].pinned,
            http(500, None, "upstream died"),
        ));
    }
    let r = reject_errors(&fx);
    assert_eq!(r.len(), 1, "{fx:?}");
    assert!(r[0].starts_with("turn 2 of 3:"), "{}", r[0]);
    assert_eq!(h.core.datasets()[0].rejected, 1);
    assert_eq!(h.core.datasets()[0].done, 0);
    assert_eq!(
        h.core.datasets()[0].output_tokens,
        100,
        "the paid turn counts"
    );
}

#[test]
fn a_cut_middle_turn_follows_on_length_like_any_answer() {
    // Kept (the default): the cut turn is the history of the next.
    let mut h = harness(Turns::All, None);
    let d = h.dispatch();
    let fx = h.result(done(d[0].key, d[0].pinned, 100, 0.01, "length"));
    assert!(reject_errors(&fx).is_empty());
    let d = h.dispatch();
    assert_eq!(sent(&d[0]).len(), 4, "the second turn goes out");
    // Rejected: the row ends at the cut turn.
    let mut h = harness(Turns::All, None);
    h.core.cfg.retry.on_length = crate::config::OnLength::Reject;
    let d = h.dispatch();
    let fx = h.result(done(d[0].key, d[0].pinned, 100, 0.01, "length"));
    let r = reject_errors(&fx);
    assert_eq!(r.len(), 1);
    assert!(
        r[0].starts_with("turn 1 of 3: finish_reason length"),
        "{}",
        r[0]
    );
}

/// The turns-file lines among `effects`, as (id, turn, content).
fn turn_lines(effects: &[Effect]) -> Vec<(String, usize, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Turn(t) => Some((t.id.clone(), t.turn, t.content.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn each_turn_before_the_last_goes_to_the_turns_file_as_it_is_done() {
    let mut h = harness(Turns::All, None);
    let mut lines = Vec::new();
    for i in 0..3u64 {
        let d = h.dispatch();
        let fx = h.result(done(d[0].key, d[0].pinned, 100 + i, 0.01, "stop"));
        lines.extend(turn_lines(&fx));
        if i < 2 {
            let Some(Effect::Turn(t)) = fx.iter().find(|e| matches!(e, Effect::Turn(_))) else {
                panic!("turn {i}: no line");
            };
            assert_eq!(t.dataset, "d0");
            assert_eq!(
                t.conversation,
                crate::store::prompts::content_id(&three_turns("p1").messages)
            );
            assert_eq!(t.record.cost_usd, Usd::from_f64(0.01));
            assert_eq!(t.reasoning_content.as_deref(), Some("thinking"));
        }
    }
    let keys: Vec<(String, usize)> = lines.iter().map(|(id, t, _)| (id.clone(), *t)).collect();
    assert_eq!(
        keys,
        [("p1".to_string(), 0), ("p1".to_string(), 1)],
        "the last turn is the row's, not the file's"
    );
    let mut last = harness(Turns::Last, None);
    let d = last.dispatch();
    let fx = last.result(done(d[0].key, d[0].pinned, 100, 0.01, "stop"));
    assert!(turn_lines(&fx).is_empty(), "one request, no turns file");
}

/// Two turns an earlier run finished of `prompt`, as its turns file holds them.
fn earlier_turns(
    prompt: &Prompt,
    conversation: Option<&str>,
) -> Vec<crate::store::turns_file::TurnLine> {
    (0..2)
        .map(|k| {
            let done = crate::engine::core::turns::DoneTurn {
                content: format!("earlier answer {k}"),
                reasoning: Some(format!("earlier thought {k}")),
                record: crate::store::output::TurnRecord {
                    provider: "Chutes".into(),
                    endpoint_tag: Some("chutes/int4".into()),
                    finish_reason: "stop".into(),
                    usage: Default::default(),
                    cost_usd: Usd::from_f64(0.02),
                    attempts: 1,
                    generation_id: Some(format!("gen-earlier-{k}")),
                    ttft_ms: None,
                    latency_ms: 5,
                    inline_think: false,
                    cost_estimated: false,
                },
            };
            let mut line = crate::engine::core::turns::line_of("d0", prompt, k, &done);
            if let Some(c) = conversation {
                line.conversation = c.into();
            }
            line
        })
        .collect()
}

#[test]
fn a_row_an_earlier_run_left_in_progress_continues_from_its_last_finished_turn() {
    // (case, the conversation the turns were written for, requests the row takes)
    let cases = [
        ("the same conversation: only the last turn is left", None, 1),
        (
            "the prompt changed since: started again",
            Some("h0000000000000000"),
            3,
        ),
    ];
    for (name, conversation, requests) in cases {
        // The earlier run's turns, as a start reads them into the dataset's book.
        let p = three_turns("p1");
        let cfg = config("routing = \"pinned\"\nconcurrency = 4");
        let mut b = book("d0", &cfg);
        b.turns = Turns::All;
        b.in_progress
            .insert("p1".into(), earlier_turns(&p, conversation));
        let src = Source(vec![VecDeque::from([Ok(three_turns("p1"))])]);
        let mut h = H::with_books(cfg, kimi(), vec![b], src);
        let mut fx = Vec::new();
        let mut sent_first = Vec::new();
        for i in 0..requests {
            let d = h.dispatch();
            assert_eq!(d.len(), 1, "{name}: request {i}");
            if i == 0 {
                sent_first = sent(&d[0]);
            }
            fx = h.result(done(d[0].key, d[0].pinned, 100, 0.01, "stop"));
        }
        assert!(h.dispatch().is_empty(), "{name}: nothing more");
        assert_eq!(outputs(&fx), 1, "{name}: the row");
        let Some(Effect::Output { record, .. }) =
            fx.iter().find(|e| matches!(e, Effect::Output { .. }))
        else {
            panic!("{name}");
        };
        let continued = conversation.is_none();
        assert_eq!(
            sent_first.contains(&"assistant:earlier answer 1".to_string()),
            continued,
            "{name}: the first request's history {sent_first:?}"
        );
        assert_eq!(record.turns.len(), 3, "{name}");
        let gens: Vec<&str> = (record.turns.iter())
            .map(|t| t.generation_id.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(
            gens[..2] == ["gen-earlier-0", "gen-earlier-1"],
            continued,
            "{name}: {gens:?}"
        );
        if continued {
            assert_eq!(record.conversations[2].content, "earlier answer 0");
            assert_eq!(
                record.conversations[4].reasoning_content.as_deref(),
                Some("earlier thought 1")
            );
            // The row costs what every turn cost, the earlier run's included.
            assert_eq!(record.cost_usd, Usd::from_f64(0.05), "{name}");
        }
        assert!(h.core.datasets()[0].in_progress.is_empty(), "{name}: taken");
    }
}

#[test]
fn each_request_ends_where_the_engine_sends_it_and_the_estimate_counts_it() {
    let p = three_turns("p1");
    assert_eq!(
        crate::engine::core::turns::request_ends(&p, Turns::Last),
        [6]
    );
    assert_eq!(
        crate::engine::core::turns::request_ends(&p, Turns::All),
        [2, 4, 6],
        "before each assistant turn, then the whole"
    );
    assert_eq!(crate::engine::core::turns::turns_to_generate(&p), 3);
    // The system prompt goes first only where the prompt has none.
    let mut bare = prompt("b");
    crate::engine::core::turns::with_system_prompt(&mut bare, Some("be brief"));
    assert_eq!(bare.messages[0].role, "system");
    assert_eq!(bare.messages.len(), 2);
    let mut own = three_turns("o");
    crate::engine::core::turns::with_system_prompt(&mut own, Some("be brief"));
    assert_eq!(own.messages[0].content, "sys", "its own system turn stays");
    assert_eq!(own.messages.len(), 6);
}

/// Two three-turn rows under a budget that pays for one row and a turn of another: the row
/// started finishes, and the second never starts, where before both started and the budget
/// stop left both unfinished (reliability probe 3, D14: $0.40 for no row).
#[test]
fn a_budget_stop_finishes_the_rows_started_and_starts_none_it_cannot_finish() {
    let rows = |budget_usd: f64| {
        let mut cfg = config("routing = \"pinned\"\nconcurrency = 4");
        cfg.budget_usd = budget_usd;
        let mut b = book("d0", &cfg);
        b.turns = Turns::All;
        let src = Source(vec![VecDeque::from([
            Ok(three_turns("p1")),
            Ok(three_turns("p2")),
        ])]);
        H::with_books(cfg, kimi(), vec![b], src)
    };
    // What one turn is expected to cost here.
    let each = rows(10.0).dispatch()[0]
        .ledger
        .expected_usd
        .expect("a dispatched line says what it expects");
    let mut h = rows(each.as_f64() * 4.5);
    let mut written = 0;
    let mut sent_ids = Vec::new();
    for step in 0..10 {
        let d = h.dispatch();
        if d.is_empty() {
            break;
        }
        assert_eq!(
            d.len(),
            1,
            "step {step}: the second row waits for room for all its turns"
        );
        sent_ids.push(d[0].prompt_id.clone());
        // Each turn costs what it was expected to: the worker books it before the result.
        h.live.spent_pico += each.pico();
        let fx = h.result(done(d[0].key, d[0].pinned, 100, each.as_f64(), "stop"));
        written += outputs(&fx);
    }
    assert_eq!(
        sent_ids,
        ["p1", "p1", "p1"],
        "p1's three turns, and no turn of p2"
    );
    assert_eq!(written, 1, "the row started is finished");
    assert_eq!(
        h.core.stopping(),
        Some(&crate::engine::reason::StopReason::DollarBudget)
    );
    assert_eq!(
        h.core.budget.owed_pico(),
        0,
        "nothing held once the row is written"
    );
}

/// The money a row holds for its later turns goes back when the row is rejected mid-way.
#[test]
fn a_row_rejected_midway_gives_back_what_it_held_for_its_later_turns() {
    let mut h = harness(Turns::All, None);
    let d = h.dispatch();
    let each = d[0].ledger.expected_usd.expect("expected").pico();
    assert_eq!(h.core.budget.owed_pico(), 2 * each, "two later turns held");
    h.result(done(d[0].key, d[0].pinned, 100, 0.01, "stop"));
    assert_eq!(
        h.core.budget.owed_pico(),
        each,
        "the second turn went out: one left"
    );
    let max = h.core.cfg.retry.max_attempts;
    for k in 0..max {
        h.at(600.0 * f64::from(k + 1));
        let d = h.dispatch();
        h.result(failed(
            d[0].key,
            d[0].pinned,
            http(500, None, "upstream died"),
        ));
    }
    assert_eq!(h.core.datasets()[0].rejected, 1);
    assert_eq!(h.core.budget.owed_pico(), 0);
}

/// Where a paid answer went (a turn, a row, a reject) and its `complete` ledger line, in the
/// order the effects give them to the writer.
fn answer_order(effects: &[Effect]) -> Vec<&'static str> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Turn(_) => Some("turn"),
            Effect::Output { .. } => Some("row"),
            Effect::Reject { .. } => Some("reject"),
            // Put on disk after the records sent before it.
            Effect::BookKept(_) => Some("booked after"),
            Effect::Ledger(l) if l.kind == crate::store::output::SpendKind::Complete => {
                Some("complete")
            }
            _ => None,
        })
        .collect()
}

/// A kill -9 between the two writes must leave a kept answer whose attempt looks open (the
/// next start books it from its record), never an answer booked complete and kept nowhere:
/// the turn or row goes to the writer first (#35's runs in a row caught the other
/// order, `kill_9_mid_row_then_resume_leaves_one_row_per_id`).
#[test]
fn a_kept_answer_goes_to_its_turn_or_row_before_its_ledger_line() {
    let mut h = harness(Turns::All, None);
    let mut order = Vec::new();
    for i in 0..3u64 {
        let d = h.dispatch();
        let fx = h.result(done(d[0].key, d[0].pinned, 100 + i, 0.01, "stop"));
        order.push(answer_order(&fx));
    }
    assert_eq!(
        order,
        [
            vec!["turn", "booked after"],
            vec!["turn", "booked after"],
            vec!["row", "booked after"]
        ]
    );
    // A cut turn rejected by `on_length = "reject"`: the line first (a reject carries no
    // generation or cost for the next start to book from).
    let mut h = harness(Turns::All, None);
    h.core.cfg.retry.on_length = crate::config::OnLength::Reject;
    let d = h.dispatch();
    let fx = h.result(done(d[0].key, d[0].pinned, 100, 0.01, "length"));
    assert_eq!(answer_order(&fx), ["complete", "reject"]);
}

/// A tool call before the last turn: the next request would send it with no tool's answer
/// after it, so the row is rejected, naming the turn, and nothing more is sent for it; a call
/// cut at max_tokens (kept as a cut answer on a last turn) and one with text too.
#[test]
fn a_tool_call_before_the_last_turn_rejects_the_row() {
    for (finish, content) in [
        ("tool_calls", ""),
        ("length", ""),
        ("tool_calls", "Let me look."),
    ] {
        let mut h = harness(Turns::All, None);
        let d = h.dispatch();
        assert_eq!(d.len(), 1);
        let mut r = done(d[0].key, d[0].pinned, 20, 0.001, finish);
        if let AttemptOutcome::Done(c) = &mut r.outcome {
            c.content = content.to_string();
            c.tool_calls = vec![crate::openrouter::ToolCall::function(
                "functions.f:0",
                "f",
                "{}",
            )];
        }
        let fx = h.result(r);
        assert_eq!(
            rejects(&fx),
            vec!["tool-call-mid-conversation"],
            "{finish} {fx:?}"
        );
        let why = reject_errors(&fx).join(" ");
        assert!(why.contains("turn 1 of 3") && !why.contains("  "), "{why}");
        assert_eq!(ledger(&fx).len(), 1, "booked");
        h.at(100.0);
        assert!(h.dispatch().is_empty(), "nothing more for the row");
    }
}
