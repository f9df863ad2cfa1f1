//! The shapes of an exported success row: SpecForge's conversation row (what the gate checks),
//! its explosion into one row per answer, and the formats a trainer reads it in. Every
//! assistant turn carries `reasoning_content`, `""` when it has none: Hugging Face `datasets`
//! infers a JSON file's columns from its first block, and a file whose first rows lack the key
//! fails to load once a later row has it (two exports concatenated, as the trainers take them).
//! Not null: Moonshot's templates read it with `message.get('reasoning_content', '')`, and a
//! null prints `<think>None</think>`; `""` renders as an absent key does in Kimi's, Qwen3's
//! and speculators' reading alike.

use serde_json::{Value, json};

use crate::store::output::OutputRecord;

use super::Format;

/// The row as SpecForge reads it (what the gate checks).
pub(super) fn specforge_row(r: &OutputRecord) -> Value {
    let turns: Vec<Value> = r
        .conversations
        .iter()
        .map(|t| {
            if t.role == "assistant" {
                let mut turn = json!({"role": t.role, "content": t.content,
                        "reasoning_content": t.reasoning_content.as_deref().unwrap_or("")});
                if !t.tool_calls.is_empty() {
                    turn["tool_calls"] = json!(t.tool_calls);
                }
                turn
            } else {
                json!({"role": t.role, "content": t.content})
            }
        })
        .collect();
    json!({"id": r.id, "conversations": turns, "status": "success"})
}

/// The tools the record's request offered (`params.tools`), or null.
pub(super) fn tools_of(r: &OutputRecord) -> Value {
    match r.params.get("tools") {
        Some(t) if t.as_array().is_some_and(|a| !a.is_empty()) => t.clone(),
        _ => Value::Null,
    }
}

/// The assistant turns of a record's conversation that the model did not write, by index:
/// with `turns = "last"` every one but the last came from the prompt file; with `turns =
/// "all"` (the record lists its regenerated turns) the model wrote each.
pub(super) fn foreign_turns(r: &OutputRecord) -> Vec<usize> {
    if !r.turns.is_empty() {
        return Vec::new();
    }
    let mut at: Vec<usize> = (r.conversations.iter().enumerate())
        .filter(|(_, t)| t.role == "assistant")
        .map(|(i, _)| i)
        .collect();
    at.pop();
    at
}

/// A SpecForge row of several answers of the model as one row per answer (`<id>#<k>`): each
/// ends at its answer, which keeps its reasoning; the answers before it keep their visible
/// content only (`reasoning_content` empty), as the model saw them when it wrote the turn.
/// Assistant turns at `foreign` (the prompt file's) are context, never a row's end. A row of
/// one answer stays as it is but for its id; every id is written by [`exploded_id`].
pub(super) fn exploded(sf: &Value, foreign: &[usize]) -> Vec<Value> {
    let empty = Vec::new();
    let conv = sf["conversations"].as_array().unwrap_or(&empty);
    let at: Vec<usize> = (0..conv.len())
        .filter(|&i| conv[i]["role"] == "assistant" && !foreign.contains(&i))
        .collect();
    let id = sf["id"].as_str().unwrap_or_default();
    if at.len() < 2 {
        let mut one = sf.clone();
        one["id"] = json!(exploded_id(id, None));
        return vec![one];
    }
    at.iter()
        .enumerate()
        .map(|(k, &end)| {
            let turns: Vec<Value> = conv[..=end]
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut t = t.clone();
                    if i < end && t["role"] == "assistant" {
                        t["reasoning_content"] = json!("");
                    }
                    t
                })
                .collect();
            json!({"id": exploded_id(id, Some(k + 1)), "conversations": turns, "status": "success"})
        })
        .collect()
}

/// The id of a row of an exploded export: the prompt's id with each `#` doubled, then `#k` for
/// the k-th (from 1) of several answers. A bare `<id>#<k>` made prompt `c`'s second answer and
/// prompt `c#2` one id (reliability-probe-5 P11), and ids are how a trainer joins a row back
/// to its prompt, so the mapping is one to one: in a written id every `#` of the prompt's id
/// comes in a pair, and an unpaired `#` can only be the one before `k`. Escaped rather than
/// refused: refusing would leave prompts whose ids hold `#` (URLs with a fragment) no exploded
/// export short of renaming them and paying again; and ids without `#`, nearly all, are
/// written as they were. docs/export-and-trainers.md gives the reverse mapping.
pub(super) fn exploded_id(id: &str, k: Option<usize>) -> String {
    let mut out = id.replace('#', "##");
    if let Some(k) = k {
        out.push('#');
        out.push_str(&k.to_string());
    }
    out
}

/// The messages of a row as the trainer's parser reads them from the file, for rendering
/// through a chat template: `role`/`content` (and `reasoning_content` where the format keeps
/// it). ShareGPT's `from`/`value` map back as SpecForge's `_normalize_message` maps them.
pub(super) fn messages_as_written(sf: &Value, format: Format) -> Value {
    let empty = Vec::new();
    let conv = sf["conversations"].as_array().unwrap_or(&empty);
    match format {
        // The turns as written, read back: a `function_call` turn keeps its `from` as its
        // role, as SpecForge's parser reads it (a turn it does not supervise).
        Format::Sharegpt => Value::Array(
            conv.iter()
                .map(|t| {
                    let w = sharegpt_turn(t);
                    let role = match w["from"].as_str().unwrap_or_default() {
                        "human" => "user",
                        "gpt" => "assistant",
                        other => other,
                    };
                    json!({"role": role, "content": w["value"]})
                })
                .collect(),
        ),
        Format::Specforge | Format::Openai | Format::Text => Value::Array(conv.clone()),
    }
}

/// The success row in `format`; `text` is the row rendered through the chat template (the
/// `text` format's only field).
pub(super) fn success_row(sf: Value, format: Format, text: Option<String>, tools: &Value) -> Value {
    match format {
        // SpecForge's and speculators' preprocessing read a `tools` column and pass it to the
        // chat template; as a JSON string (both parse one), so that rows whose schemas differ
        // still load as one Arrow column.
        Format::Specforge if !tools.is_null() => {
            let mut sf = sf;
            sf["tools"] = json!(tools.to_string());
            sf
        }
        Format::Specforge => sf,
        // OpenAI's fine-tuning rows: `tools` beside `messages`, as a list.
        Format::Openai if !tools.is_null() => {
            json!({"id": sf["id"], "messages": sf["conversations"], "tools": tools})
        }
        Format::Openai => json!({"id": sf["id"], "messages": sf["conversations"]}),
        Format::Text => json!({"id": sf["id"], "text": text}),
        Format::Sharegpt => {
            let empty = Vec::new();
            let turns: Vec<Value> = (sf["conversations"].as_array().unwrap_or(&empty).iter())
                .map(sharegpt_turn)
                .collect();
            let mut row = json!({"id": sf["id"], "conversations": turns});
            if !tools.is_null() {
                row["tools"] = json!(tools.to_string());
            }
            row
        }
    }
}

/// One turn of a SpecForge row as ShareGPT writes it: `from`/`value`, the calls of a tool-call
/// turn as a `function_call` turn.
fn sharegpt_turn(t: &Value) -> Value {
    match t["tool_calls"].as_array() {
        Some(calls) if !calls.is_empty() => {
            json!({"from": "function_call", "value": sharegpt_calls(calls)})
        }
        _ => {
            let from = match t["role"].as_str().unwrap_or_default() {
                "user" => "human",
                "assistant" => "gpt",
                other => other,
            };
            json!({"from": from, "value": t["content"]})
        }
    }
}

/// A turn's tool calls as LLaMA-Factory's ShareGPT reads a `function_call` turn's value: the
/// JSON text of `{"name", "arguments"}` (a list of them for several calls), the arguments as
/// an object where the model wrote valid JSON, else as the text it wrote.
fn sharegpt_calls(calls: &[Value]) -> String {
    let one = |c: &Value| {
        let args = c["function"]["arguments"].as_str().unwrap_or_default();
        let arguments = serde_json::from_str::<Value>(args).unwrap_or_else(|_| json!(args));
        json!({"name": c["function"]["name"], "arguments": arguments})
    };
    match calls {
        [c] => one(c).to_string(),
        many => Value::Array(many.iter().map(one).collect()).to_string(),
    }
}

/// Why a row cannot be written in `format`, or `None`: a ShareGPT `function_call` turn holds
/// the calls only, so an answer with text before its calls would lose the text.
pub(super) fn unwritable(sf: &Value, format: Format) -> Option<String> {
    if format != Format::Sharegpt {
        return None;
    }
    let empty = Vec::new();
    let conv = sf["conversations"].as_array().unwrap_or(&empty);
    let i = conv.iter().position(|t| {
        t["tool_calls"].as_array().is_some_and(|c| !c.is_empty())
            && t["content"].as_str().is_some_and(|c| !c.trim().is_empty())
    })?;
    Some(format!(
        "conversations[{i}] has text and tool calls, and a ShareGPT function_call turn holds \
         the calls only: --format openai or specforge keeps both"
    ))
}

/// Flat scalar columns of where the answer came from, added to a success row.
pub(super) fn add_provenance(row: &mut Value, r: &OutputRecord) {
    let cols = json!({
        "provider": r.provider,
        "endpoint_tag": r.endpoint_tag,
        "quantization": r.quantization,
        "model": r.model,
        "finish_reason": r.finish_reason,
        "prompt_tokens": r.usage.prompt_tokens,
        "completion_tokens": r.usage.completion_tokens,
        "reasoning_tokens": r.usage.reasoning_tokens,
        "cost_usd": r.cost_usd.as_f64(),
        "generation_id": r.generation_id,
        "created_at": r.created_at,
    });
    if let (Some(row), Value::Object(cols)) = (row.as_object_mut(), cols) {
        row.extend(cols);
    }
}

/// Whether `text`, a rendering of `messages`, holds the last answer's reasoning (trimmed as
/// templates trim it), or `None` when that answer has none. Looked for after the last user
/// turn's text, as many times as the answer's own text holds it plus once: a substring test
/// of the whole rendering called a short reasoning (`4`) kept because the answer or the
/// history said it (the trainer issue).
pub(super) fn reasoning_kept(messages: &Value, text: &str) -> Option<bool> {
    let turns = messages.as_array()?;
    let at = turns.iter().rposition(|t| t["role"] == "assistant")?;
    let last = &turns[at];
    let r = super::template::python_trim(last["reasoning_content"].as_str()?);
    if r.is_empty() {
        return None;
    }
    let asked = turns[..at]
        .iter()
        .rev()
        .find(|t| t["role"] == "user")
        .and_then(|t| t["content"].as_str())
        .filter(|c| !c.is_empty());
    let tail = match asked.and_then(|c| text.rfind(c).map(|i| i + c.len())) {
        Some(from) => &text[from..],
        None => text,
    };
    let answer = last["content"].as_str().unwrap_or_default();
    Some(tail.matches(r).count() > answer.matches(r).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_counts_as_kept_only_where_the_last_answer_is_rendered() {
        let conv = |reasoning: &str, answer: &str| {
            json!([
                {"role": "user", "content": "what is 2+2? say 4"},
                {"role": "assistant", "content": answer, "reasoning_content": reasoning},
            ])
        };
        // (reasoning, answer, rendered tail after the question, kept)
        let cases = [
            ("4", "4", "<think>4</think>4<|im_end|>", Some(true)),
            ("4", "4", "<think></think>4<|im_end|>", Some(false)),
            (
                "4",
                "It is 4.",
                "<think></think>It is 4.<|im_end|>",
                Some(false),
            ),
            (
                "  Add them.\n",
                "4",
                "<think>Add them.</think>4",
                Some(true),
            ),
            ("Add them.", "4", "<think></think>4", Some(false)),
            ("", "4", "<think></think>4", None),
        ];
        for (reasoning, answer, tail, want) in cases {
            let text = format!("<|im_user|>user<|im_middle|>what is 2+2? say 4<|im_end|>{tail}");
            assert_eq!(
                reasoning_kept(&conv(reasoning, answer), &text),
                want,
                "{reasoning:?} {tail:?}"
            );
        }
    }
}
