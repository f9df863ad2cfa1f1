//! SpecForge's gate for training rows, as its own scripts state it
//! (sgl-project/SpecForge `scripts/conversation_validation.py` and
//! `scripts/validate_regenerated_data.py`): a non-empty string `id`, `status == "success"`,
//! a non-empty list of messages, each with non-empty string `content` (an assistant turn that
//! is tool calls may have none); `system` only before the
//! first `user`; then `user` and `assistant` strictly alternating from `user`; at least one
//! assistant message and the last one an assistant; `reasoning_content` a string or null,
//! non-empty with `--expect-reasoning`, empty with `--expect-non-reasoning`; with
//! `--strict-think-markers` no `<think>`/`</think>` (any case) in an assistant's content or
//! reasoning. The messages below are the scripts' own, so an operator who later runs the real
//! validator reads the same words.

use serde_json::Value;

/// The roles a training row's messages may have, by the gate below: `system` (before the first
/// `user`), `user` and `assistant`. The prompt loader (`store/prompts/format.rs`) refuses a turn
/// of any other role (`tool`, `developer`) as a bad line, from this same list, so that no prompt
/// is paid for whose row export would then refuse (reliability-probe-5 P15).
pub(crate) const ROLES: [&str; 3] = ["system", "user", "assistant"];

/// The validator's flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rules {
    /// `--expect-reasoning`: every assistant message has non-empty `reasoning_content`.
    pub expect_reasoning: bool,
    /// `--expect-non-reasoning`: no assistant message has non-empty `reasoning_content`.
    pub expect_non_reasoning: bool,
    /// `--strict-think-markers`.
    pub strict_think_markers: bool,
}

pub(crate) fn has_think_marker(text: &str) -> bool {
    let lowered = text.to_lowercase();
    lowered.contains("<think>") || lowered.contains("</think>")
}

/// `validate_conversation`: the shape of the message list.
pub(crate) fn validate_conversation(messages: &Value) -> Result<(), String> {
    let Some(list) = messages.as_array().filter(|l| !l.is_empty()) else {
        return Err("conversations must be a non-empty list".into());
    };
    let mut expected = "user";
    let mut saw_user = false;
    for (i, m) in list.iter().enumerate() {
        let Some(obj) = m.as_object() else {
            return Err(format!("message {i} must be an object"));
        };
        let role = obj.get("role").and_then(Value::as_str);
        // An assistant turn that is tool calls may have no text: SpecForge's parser reads such
        // turns (specforge/data/parse.py, its tool_calls handling); the scripts' rule above
        // predates them.
        let calls = role == Some("assistant")
            && obj
                .get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty());
        let content_ok = obj
            .get("content")
            .and_then(Value::as_str)
            .is_some_and(|c| calls || !c.trim().is_empty());
        if !content_ok {
            return Err(format!("message {i} content must be a non-empty string"));
        }
        if role == Some("system") && !saw_user {
            continue;
        }
        match role {
            // A system turn only before the first user turn (above); the others alternate.
            Some(r) if r != "system" && ROLES.contains(&r) => {
                if r != expected {
                    return Err(format!("message {i} expected role '{expected}', got '{r}'"));
                }
                saw_user = true;
                expected = if r == "user" { "assistant" } else { "user" };
            }
            other => {
                return Err(format!(
                    "message {i} has unsupported role {}",
                    other.map_or("None".to_string(), |r| format!("'{r}'"))
                ));
            }
        }
    }
    if !saw_user {
        return Err("conversation has no user message".into());
    }
    Ok(())
}

/// `validate_row`: one training row; returns its assistant messages.
pub(crate) fn validate_row(row: &Value, rules: Rules) -> Result<usize, String> {
    let id_ok = row
        .get("id")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.trim().is_empty());
    if !id_ok {
        return Err("id must be a non-empty string".into());
    }
    if row.get("status").and_then(Value::as_str) != Some("success") {
        return Err("status must be 'success'".into());
    }
    let messages = row.get("conversations").unwrap_or(&Value::Null);
    validate_conversation(messages)?;
    let list = messages.as_array().map(Vec::as_slice).unwrap_or_default();
    let mut assistants = 0;
    for (i, m) in list.iter().enumerate() {
        if m.get("role").and_then(Value::as_str) != Some("assistant") {
            continue;
        }
        assistants += 1;
        let content = m.get("content").and_then(Value::as_str).unwrap_or_default();
        let reasoning = match m.get("reasoning_content") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => {
                return Err(format!(
                    "assistant message {i} reasoning_content must be a string or null"
                ));
            }
        };
        let has_reasoning = reasoning.is_some_and(|r| !r.trim().is_empty());
        if rules.expect_non_reasoning && has_reasoning {
            return Err(format!(
                "assistant message {i} has non-empty reasoning_content"
            ));
        }
        if rules.expect_reasoning && !has_reasoning {
            return Err(format!("assistant message {i} has empty reasoning_content"));
        }
        if rules.strict_think_markers && has_think_marker(content) {
            return Err(format!("assistant message {i} contains a thinking marker"));
        }
        if rules.strict_think_markers && reasoning.is_some_and(has_think_marker) {
            return Err(format!(
                "assistant message {i} reasoning_content contains a thinking marker"
            ));
        }
    }
    if assistants == 0 {
        return Err("conversation has no assistant message".into());
    }
    if list
        .last()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        != Some("assistant")
    {
        return Err("conversation must end with an assistant message".into());
    }
    Ok(assistants)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(content: &str) -> Value {
        json!({"id": "row-1", "status": "success", "conversations": [
            {"role": "user", "content": "question"},
            {"role": "assistant", "content": content},
        ]})
    }

    const NON_REASONING_STRICT: Rules = Rules {
        expect_reasoning: false,
        expect_non_reasoning: true,
        strict_think_markers: true,
    };
    const REASONING_STRICT: Rules = Rules {
        expect_reasoning: true,
        expect_non_reasoning: false,
        strict_think_markers: true,
    };

    /// The cases of SpecForge's own tests (tests/test_scripts/test_validate_regenerated_data.py),
    /// then each rule of the two scripts once.
    #[test]
    fn specforge_cases_and_every_rule() {
        assert_eq!(validate_row(&row("answer"), NON_REASONING_STRICT), Ok(1));
        let mut r = row("answer");
        r["conversations"]
            .as_array_mut()
            .expect("list")
            .push(json!({"role": "user", "content": "follow-up"}));
        assert_eq!(
            validate_row(&r, NON_REASONING_STRICT),
            Err("conversation must end with an assistant message".into())
        );
        let mut r = row("answer");
        r["conversations"][1]["reasoning_content"] = json!("hidden reasoning");
        assert!(
            validate_row(&r, NON_REASONING_STRICT)
                .expect_err("non-reasoning")
                .contains("reasoning_content")
        );
        assert_eq!(
            validate_row(&row("answer"), REASONING_STRICT),
            Err("assistant message 1 has empty reasoning_content".into())
        );
        let mut r = row("answer");
        r["conversations"][1]["reasoning_content"] = json!("structured reasoning");
        assert_eq!(validate_row(&r, REASONING_STRICT), Ok(1));
        r["conversations"][1]["reasoning_content"] = json!("<think>hidden</think>");
        assert_eq!(
            validate_row(&r, REASONING_STRICT),
            Err("assistant message 1 reasoning_content contains a thinking marker".into())
        );
        assert_eq!(
            validate_row(&row("<THINK>hidden</THINK> visible"), NON_REASONING_STRICT),
            Err("assistant message 1 contains a thinking marker".into())
        );
        let mut r = row("answer");
        r["status"] = json!("error");
        assert_eq!(
            validate_row(&r, Rules::default()),
            Err("status must be 'success'".into())
        );

        let cases: Vec<(Value, &str)> = vec![
            (
                json!({"status": "success", "conversations": []}),
                "id must be a non-empty string",
            ),
            (
                json!({"id": " ", "status": "success"}),
                "id must be a non-empty string",
            ),
            (
                json!({"id": "x", "status": "success", "conversations": []}),
                "conversations must be a non-empty list",
            ),
            (
                json!({"id": "x", "status": "success", "conversations": ["hi"]}),
                "message 0 must be an object",
            ),
            (
                json!({"id": "x", "status": "success", "conversations": [{"role": "user", "content": "  "}]}),
                "message 0 content must be a non-empty string",
            ),
            (
                json!({"id": "x", "status": "success", "conversations": [{"role": "assistant", "content": "a"}]}),
                "message 0 expected role 'user', got 'assistant'",
            ),
            (
                json!({"id": "x", "status": "success", "conversations": [{"role": "user", "content": "q"}, {"role": "tool", "content": "t"}]}),
                "message 1 has unsupported role 'tool'",
            ),
            (
                json!({"id": "x", "status": "success", "conversations": [{"role": "user", "content": "q"}, {"role": "system", "content": "s"}]}),
                "message 1 has unsupported role 'system'",
            ),
            (
                json!({"id": "x", "status": "success", "conversations": [{"role": "system", "content": "s"}]}),
                "conversation has no user message",
            ),
            (
                json!({"id": "x", "status": "success", "conversations": [{"role": "user", "content": "q"}]}),
                "conversation has no assistant message",
            ),
            (
                json!({"id": "x", "status": "success", "conversations": [{"role": "user", "content": "q"}, {"role": "user", "content": "q2"}]}),
                "message 1 expected role 'assistant', got 'user'",
            ),
            (
                json!({"id": "x", "status": "success", "conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": 3}]}),
                "assistant message 1 reasoning_content must be a string or null",
            ),
        ];
        for (r, want) in cases {
            assert_eq!(
                validate_row(&r, Rules::default()),
                Err(want.to_string()),
                "{r}"
            );
        }
        // A system turn first, then alternation: fine.
        let ok = json!({"id": "x", "status": "success", "conversations": [
            {"role": "system", "content": "s"}, {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a", "reasoning_content": null},
            {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]});
        assert_eq!(validate_row(&ok, Rules::default()), Ok(2));
    }
}
