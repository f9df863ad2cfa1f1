//! Every turn regenerated (`turns = "all"`): the assistant turns of a multi-turn prompt are
//! written by the model one at a time, each on the history regenerated so far (user turns as
//! given), so that the drafter never learns from text the target model did not write. A job
//! carries the turns done; this file says what the next request sends and what the row holds.
//!
//! A row is written when its last turn is done. Each turn before it goes to the turns file
//! (`store/turns_file.rs`) as it is done: a run that stops mid-row (a drain, the dollar budget,
//! kill -9) keeps the turns it paid for, and the next run continues the row from its last
//! finished turn, unless the row's conversation has changed since.

use crate::config::Turns;
use crate::openrouter::Message;
use crate::store::output::{RecordUsage, Turn, TurnRecord};
use crate::store::prompts::{Prompt, content_id};
use crate::store::turns_file::TurnLine;

/// A turn the model has written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DoneTurn {
    pub content: String,
    pub reasoning: Option<String>,
    pub record: TurnRecord,
}

/// Why `prompt` cannot have every turn regenerated, or `None`: after an optional first system
/// turn, user and assistant turns must alternate from a user turn (the parser already ends
/// every prompt on one). Two assistants in a row would send a request ending on an assistant
/// turn (a prefill), two users in a row a row the trainer's validator refuses: both paid for,
/// then thrown away (reliability-probe-3 D14). Said before anything is sent.
pub(crate) fn shape_error(prompt: &Prompt) -> Option<String> {
    let mut want = "user";
    for (i, m) in prompt.messages.iter().enumerate() {
        if i == 0 && m.role == "system" {
            continue;
        }
        if m.role != want {
            return Some(format!(
                "messages[{i}] has role {}, but the turn due is {want}: turns = \"all\" \
                 regenerates each assistant turn, so user and assistant turns must alternate \
                 from a user turn (after an optional first system turn)",
                m.role
            ));
        }
        want = if want == "user" { "assistant" } else { "user" };
    }
    None
}

/// How many assistant turns the model writes for `prompt`: one per assistant message in it
/// (each replaced), then the answer to its last user turn.
pub(crate) fn turns_to_generate(prompt: &Prompt) -> usize {
    request_ends(prompt, Turns::All).len()
}

/// The dataset's system prompt, first in `prompt` when it has no system turn of its own: what
/// the engine sends (and what `estimate` counts).
pub(crate) fn with_system_prompt(prompt: &mut Prompt, system: Option<&str>) {
    if let Some(sys) = system
        && prompt.messages.first().is_none_or(|m| m.role != "system")
    {
        prompt.messages.insert(0, Message::system(sys.to_string()));
    }
}

/// Where each request of `prompt` ends: request `k` sends `messages[..ends[k]]`, the dataset's
/// own assistant turns standing in for the answers the model writes before it. One request
/// (the whole prompt) under `turns = "last"`; one per assistant turn, then the last, under
/// `"all"`.
pub(crate) fn request_ends(prompt: &Prompt, turns: Turns) -> Vec<usize> {
    let n = prompt.messages.len();
    match turns {
        Turns::Last => vec![n],
        Turns::All => (prompt.messages.iter().enumerate())
            .filter(|(_, m)| m.role == "assistant")
            .map(|(i, _)| i)
            .chain([n])
            .collect(),
    }
}

/// The messages of the request for the next turn: the prompt up to its next assistant turn (all
/// of it for the last turn), with the turns done in place of the dataset's own.
pub(crate) fn next_request(prompt: &Prompt, done: &[DoneTurn]) -> Vec<Message> {
    let mut out = Vec::with_capacity(prompt.messages.len());
    let mut k = 0;
    for m in &prompt.messages {
        if m.role == "assistant" {
            let Some(t) = done.get(k) else {
                return out;
            };
            out.push(Message::new("assistant", t.content.clone()));
            k += 1;
        } else {
            out.push(m.clone());
        }
    }
    out
}

/// The row's conversation: the messages that were sent for the last turn (every earlier
/// assistant turn the model's, with its reasoning), then the last answer.
pub(crate) fn conversation(prompt: &Prompt, done: &[DoneTurn], last: Turn) -> Vec<Turn> {
    let mut out = Vec::with_capacity(prompt.messages.len() + 1);
    let mut k = 0;
    for m in &prompt.messages {
        if m.role == "assistant"
            && let Some(t) = done.get(k)
        {
            k += 1;
            out.push(Turn {
                role: "assistant".into(),
                content: t.content.clone(),
                reasoning_content: t.reasoning.clone(),
                tool_calls: Vec::new(),
            });
            continue;
        }
        out.push(Turn {
            role: m.role.clone(),
            content: m.content.clone(),
            reasoning_content: None,
            tool_calls: Vec::new(),
        });
    }
    out.push(last);
    out
}

/// The row's usage: the sums of its turns' (reported only when every turn's was).
pub(crate) fn total_usage(turns: &[TurnRecord]) -> RecordUsage {
    RecordUsage {
        prompt_tokens: turns.iter().map(|t| t.usage.prompt_tokens).sum(),
        completion_tokens: turns.iter().map(|t| t.usage.completion_tokens).sum(),
        reasoning_tokens: turns.iter().map(|t| t.usage.reasoning_tokens).sum(),
        source: if turns.iter().all(|t| t.usage.source == "reported") {
            "reported"
        } else {
            "counted"
        }
        .into(),
        cached_tokens: turns.iter().map(|t| t.usage.cached_tokens).sum(),
        cost_details: None,
        is_byok: turns.iter().find_map(|t| t.usage.is_byok),
    }
}

/// The turns file's line of `done`, the `turn`th assistant turn of `prompt`'s row.
pub(crate) fn line_of(dataset: &str, prompt: &Prompt, turn: usize, done: &DoneTurn) -> TurnLine {
    TurnLine {
        dataset: dataset.to_string(),
        id: prompt.id.clone(),
        turn,
        conversation: content_id(&prompt.messages),
        content: done.content.clone(),
        reasoning_content: done.reasoning.clone(),
        record: done.record.clone(),
    }
}

/// The turns an earlier run finished of `prompt`'s row (`chain`, from its turns file), to
/// continue from: all of them while the row's conversation is the one they were written for
/// and they leave a turn to write; none otherwise (the row starts again).
pub(crate) fn resumed(prompt: &Prompt, chain: Vec<TurnLine>) -> Vec<DoneTurn> {
    let same = chain
        .iter()
        .all(|t| t.conversation == content_id(&prompt.messages));
    if !same || chain.len() >= turns_to_generate(prompt) {
        return Vec::new();
    }
    chain
        .into_iter()
        .map(|t| DoneTurn {
            content: t.content,
            reasoning: t.reasoning_content,
            record: t.record,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_alternating_conversations_have_every_turn_regenerated() {
        let p = |roles: &[&str]| Prompt {
            id: "x".into(),
            messages: roles
                .iter()
                .map(|r| Message::new(*r, "t".to_string()))
                .collect(),
            line: 1,
        };
        let cases: [(&[&str], Option<usize>); 7] = [
            (&["user"], None),
            (&["system", "user", "assistant", "user"], None),
            (&["user", "assistant", "user", "assistant", "user"], None),
            (&["user", "user"], Some(1)),
            (&["user", "assistant", "assistant", "user"], Some(2)),
            (&["assistant", "user"], Some(0)),
            (&["user", "system", "user"], Some(1)),
        ];
        for (roles, bad_at) in cases {
            let said = shape_error(&p(roles));
            assert_eq!(
                said.as_ref()
                    .map(|s| s.starts_with(&format!("messages[{}]", bad_at.unwrap_or(99)))),
                bad_at.map(|_| true),
                "{roles:?}: {said:?}"
            );
        }
    }
    use crate::domain::Usd;

    fn prompt(turns: &[(&str, &str)]) -> Prompt {
        Prompt {
            id: "p".into(),
            messages: turns.iter().map(|(r, c)| Message::new(*r, *c)).collect(),
            line: 1,
        }
    }

    fn done(content: &str) -> DoneTurn {
        DoneTurn {
            content: content.into(),
            reasoning: Some(format!("why {content}")),
            record: TurnRecord {
                provider: "P".into(),
                endpoint_tag: Some("p/int4".into()),
                finish_reason: "stop".into(),
                usage: RecordUsage {
                    prompt_tokens: 10,
                    completion_tokens: 5,
                    reasoning_tokens: 2,
                    source: "reported".into(),
                    ..RecordUsage::default()
                },
                cost_usd: Usd::from_pico(7),
                attempts: 1,
                generation_id: None,
                ttft_ms: None,
                latency_ms: 1,
                inline_think: false,
                cost_estimated: false,
            },
        }
    }

    fn roles(m: &[Message]) -> Vec<String> {
        m.iter()
            .map(|m| format!("{}:{}", m.role, m.content))
            .collect()
    }

    #[test]
    fn each_request_carries_the_history_regenerated_so_far() {
        let p = prompt(&[
            ("system", "s"),
            ("user", "u1"),
            ("assistant", "dataset a1"),
            ("user", "u2"),
            ("assistant", "dataset a2"),
            ("user", "u3"),
        ]);
        assert_eq!(turns_to_generate(&p), 3);
        assert_eq!(roles(&next_request(&p, &[])), ["system:s", "user:u1"]);
        assert_eq!(
            roles(&next_request(&p, &[done("g1")])),
            ["system:s", "user:u1", "assistant:g1", "user:u2"]
        );
        assert_eq!(
            roles(&next_request(&p, &[done("g1"), done("g2")])),
            [
                "system:s",
                "user:u1",
                "assistant:g1",
                "user:u2",
                "assistant:g2",
                "user:u3"
            ]
        );
        // A single-turn prompt is one request of the whole prompt.
        let single = prompt(&[("user", "q")]);
        assert_eq!(turns_to_generate(&single), 1);
        assert_eq!(roles(&next_request(&single, &[])), ["user:q"]);
    }

    #[test]
    fn the_row_holds_every_generated_turn_with_its_reasoning_and_summed_usage() {
        let p = prompt(&[("user", "u1"), ("assistant", "dataset a1"), ("user", "u2")]);
        let turns = [done("g1")];
        let last = Turn {
            role: "assistant".into(),
            content: "g2".into(),
            reasoning_content: None,
            tool_calls: Vec::new(),
        };
        let conv = conversation(&p, &turns, last);
        let shown: Vec<_> = conv
            .iter()
            .map(|t| {
                (
                    t.role.as_str(),
                    t.content.as_str(),
                    t.reasoning_content.clone(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("user", "u1", None),
                ("assistant", "g1", Some("why g1".to_string())),
                ("user", "u2", None),
                ("assistant", "g2", None),
            ]
        );
        let mut second = done("g2").record;
        second.usage.source = "counted".into();
        let u = total_usage(&[done("g1").record, second]);
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.reasoning_tokens),
            (20, 10, 4)
        );
        assert_eq!(u.source, "counted");
    }
}
