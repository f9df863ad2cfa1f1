//! The prompt line formats: `prompt`, OpenAI `messages`, ShareGPT `conversations`, parsed into
//! the messages sent.

use serde_json::{Map, Value};

use crate::openrouter::Message;

/// The one of `prompt`, `messages` or `conversations` present in `obj`, as messages.
pub(super) fn parse_messages(obj: &Map<String, Value>) -> Result<Vec<Message>, String> {
    let present: Vec<(&str, &Value)> = ["conversations", "messages", "prompt"]
        .into_iter()
        .filter_map(|k| obj.get(k).filter(|v| !v.is_null()).map(|v| (k, v)))
        .collect();
    let messages = match present.as_slice() {
        [] => return Err(r#"needs one of "prompt", "messages" or "conversations""#.to_string()),
        [("prompt", v)] => match v {
            Value::String(s) => vec![Message::user(s.as_str())],
            _ => return Err("\"prompt\" must be a string".to_string()),
        },
        [(key, v)] => {
            let Value::Array(turns) = v else {
                return Err(format!("\"{key}\" must be a list"));
            };
            let turns = turns.iter().enumerate();
            if *key == "messages" {
                turns
                    .map(|(i, t)| parse_role_content(t, &format!("messages[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?
            } else {
                turns
                    .map(|(i, t)| parse_sharegpt(t, &format!("conversations[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?
            }
        }
        [(a, _), (b, _)] => return Err(format!("\"{a}\" and \"{b}\" both present")),
        _ => return Err(r#""prompt", "messages" and "conversations" all present"#.to_string()),
    };
    if messages.is_empty() {
        return Err(format!("\"{}\" is empty", present[0].0));
    }
    Ok(messages)
}

pub(super) const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// An OpenAI-style turn `{role, content}`; `at` names it in errors (`messages[2]`).
pub(super) fn parse_role_content(turn: &Value, at: &str) -> Result<Message, String> {
    let Value::Object(obj) = turn else {
        return Err(format!(
            "{at} must be an object with \"role\" and \"content\""
        ));
    };
    let role = match obj.get("role") {
        Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.clone(),
        Some(Value::String(r)) => {
            return Err(format!(
                "{at}.role \"{r}\" is not one of {}",
                ROLES.join(", ")
            ));
        }
        Some(_) => return Err(format!("{at}.role must be a string")),
        None => return Err(format!("{at} has no \"role\"")),
    };
    let content = match obj.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str);
                match (kind, part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => texts.push(t.as_str()),
                    (Some("text"), _) => {
                        return Err(format!("{at}.content[{j}].text must be a string"));
                    }
                    (Some(other), _) => {
                        return Err(format!(
                            "{at}.content[{j}] has type \"{other}\"; only \"text\" parts are supported"
                        ));
                    }
                    (None, _) => return Err(format!("{at}.content[{j}] has no \"type\"")),
                }
            }
            texts.join("\n")
        }
        Some(_) => return Err(format!("{at}.content must be a string or a list of parts")),
        None => return Err(format!("{at} has no \"content\"")),
    };
    Ok(Message { role, content })
}

/// A ShareGPT turn: `{from, value}` or `{role, content}`.
pub(super) fn parse_sharegpt(turn: &Value, at: &str) -> Result<Message, String> {
    let Some(from) = turn.get("from") else {
        if turn.get("role").is_some() {
            return parse_role_content(turn, at);
        }
        return Err(format!(
            "{at} needs \"from\" and \"value\" (or \"role\" and \"content\")"
        ));
    };
    let role = match from.as_str() {
        Some("human" | "user") => "user",
        Some("gpt" | "assistant" | "model") => "assistant",
        Some("system") => "system",
        Some("tool") => "tool",
        Some(other) => {
            return Err(format!(
                "{at}.from \"{other}\" is not one of human, user, gpt, assistant, model, system, tool"
            ));
        }
        None => return Err(format!("{at}.from must be a string")),
    };
    match turn.get("value") {
        Some(Value::String(v)) => Ok(Message::new(role, v.as_str())),
        Some(_) => Err(format!("{at}.value must be a string")),
        None => Err(format!("{at} has no \"value\"")),
    }
}
