//! The prompt line formats: `prompt`, OpenAI `messages`, ShareGPT `conversations`, parsed into
//! the messages sent; and a dataset's own names for those fields ([`PromptFields`]), for
//! datasets whose columns are called otherwise (`instruction`, `question`, `dialog`).

use serde_json::{Map, Value};

use crate::export::validate::ROLES;
use crate::openrouter::Message;

/// A dataset's names for the fields of its rows, where they are not harvest's own. Recorded in
/// the output directory's manifest: another mapping reads other ids or other prompts.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PromptFields {
    /// The prompt's text, instead of `prompt`. Several are joined with a blank line, empty
    /// ones left out (Alpaca: `["instruction", "input"]`); the first must be there.
    pub prompt: Vec<String>,
    /// A list of turns (`{role, content}` or `{from, value}`), instead of `messages` and
    /// `conversations`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<String>,
    /// A system prompt of the row's own, put first when its turns have none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The row's id, instead of `id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl PromptFields {
    /// The field that holds the row's id.
    pub(super) fn id_key(&self) -> &str {
        self.id.as_deref().unwrap_or("id")
    }
}

/// How a field holds the conversation.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Prompt,
    OpenAi,
    ShareGpt,
}

/// The conversation of row `obj`: from the one of its prompt or turns fields present (by
/// `fields`, else `prompt`, `messages`, `conversations`), with the row's system field first.
pub(super) fn parse_messages(
    obj: &Map<String, Value>,
    fields: &PromptFields,
) -> Result<Vec<Message>, String> {
    let mut keys: Vec<(&str, Shape)> = match &fields.messages {
        Some(k) => vec![(k.as_str(), Shape::ShareGpt)],
        None => vec![
            ("conversations", Shape::ShareGpt),
            ("messages", Shape::OpenAi),
        ],
    };
    keys.push((
        fields.prompt.first().map_or("prompt", String::as_str),
        Shape::Prompt,
    ));
    let present: Vec<(&str, Shape, &Value)> = keys
        .iter()
        .filter_map(|&(k, shape)| obj.get(k).filter(|v| !v.is_null()).map(|v| (k, shape, v)))
        .collect();
    let named = || {
        // Named prompt first, as the docs list them.
        let names: Vec<String> = keys.iter().rev().map(|(k, _)| format!("\"{k}\"")).collect();
        match names.as_slice() {
            [a, b] => format!("{a} or {b}"),
            [a, b, c] => format!("{a}, {b} or {c}"),
            _ => names.join(", "),
        }
    };
    let mut messages = match present.as_slice() {
        [] => return Err(format!("needs one of {}", named())),
        [(key, Shape::Prompt, v)] => match v {
            Value::String(s) => vec![Message::user(prompt_text(obj, key, s, fields)?)],
            _ => return Err(format!("\"{key}\" must be a string")),
        },
        [(key, shape, v)] => {
            let Value::Array(turns) = v else {
                return Err(format!("\"{key}\" must be a list"));
            };
            let turns = turns.iter().enumerate();
            if *shape == Shape::OpenAi {
                turns
                    .map(|(i, t)| parse_role_content(t, &format!("{key}[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?
            } else {
                turns
                    .map(|(i, t)| parse_sharegpt(t, &format!("{key}[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?
            }
        }
        [(a, ..), (b, ..)] => return Err(format!("\"{a}\" and \"{b}\" both present")),
        _ => return Err(format!("{} all present", named().replace(" or ", " and "))),
    };
    if messages.is_empty() {
        return Err(format!("\"{}\" is empty", present[0].0));
    }
    // A user turn with no text would be paid for, and export refuses the row it makes.
    if let Some(i) = (messages.iter()).position(|m| m.role == "user" && m.content.trim().is_empty())
    {
        let (key, shape, _) = &present[0];
        return Err(match shape {
            Shape::Prompt => format!("\"{key}\" has no text"),
            _ => format!("{key}[{i}] is a user turn with no text"),
        });
    }
    if let Some(key) = &fields.system {
        match obj.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.trim().is_empty() => {}
            Some(Value::String(s)) => {
                if messages[0].role != "system" {
                    messages.insert(0, Message::new("system", s.as_str()));
                }
            }
            Some(_) => return Err(format!("\"{key}\" must be a string")),
        }
    }
    Ok(messages)
}

/// The prompt's text: `first` (the value of `key`), then each further prompt field that has
/// text, a blank line between.
fn prompt_text(
    obj: &Map<String, Value>,
    key: &str,
    first: &str,
    fields: &PromptFields,
) -> Result<String, String> {
    let mut text = first.to_string();
    for more in fields.prompt.iter().skip(1) {
        match obj.get(more) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.trim().is_empty() => {}
            Some(Value::String(s)) => {
                text.push_str("\n\n");
                text.push_str(s);
            }
            Some(_) => return Err(format!("\"{more}\" must be a string (joined to \"{key}\")")),
        }
    }
    Ok(text)
}

/// An OpenAI-style turn `{role, content}`; `at` names it in errors (`messages[2]`).
pub(super) fn parse_role_content(turn: &Value, at: &str) -> Result<Message, String> {
    let Value::Object(obj) = turn else {
        return Err(format!(
            "{at} must be an object with \"role\" and \"content\""
        ));
    };
    let role = match obj.get("role") {
        Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.clone(),
        // `tool` and `developer` too: sent and paid for, their rows would be refused by export.
        Some(Value::String(r)) => {
            return Err(format!(
                "{at}.role \"{r}\" is not one of {}: a training row holds no other role, and \
                 export refuses the row",
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
        // No `tool`: see `ROLES`.
        Some(other) => {
            return Err(format!(
                "{at}.from \"{other}\" is not one of human, user, gpt, assistant, model, system: \
                 a training row holds no other role, and export refuses the row"
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
