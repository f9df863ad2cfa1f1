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
        assert_eq!(h.core.admission.datasets[0].done, 0);
        fx = h.result(done(d[0].key, d[0].pinned, 100 + i as u64, 0.01, "stop"));
        answers.push(format!("answer {}", d[0].key));
        assert_eq!(outputs(&fx), usize::from(i == 2), "turn {}", i + 1);
        // Every turn's tokens count against the budget as soon as it is answered.
        let so_far: u64 = (0..=i as u64).map(|k| 100 + k).sum();
        assert_eq!(h.core.admission.datasets[0].output_tokens, so_far);
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
    assert_eq!(h.core.admission.datasets[0].done, 1);
    assert!(h.core.all_finished());
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
    assert_eq!(h.core.admission.datasets[0].rejected, 1);
    assert_eq!(h.core.admission.datasets[0].done, 0);
    assert_eq!(
        h.core.admission.datasets[0].output_tokens, 100,
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
