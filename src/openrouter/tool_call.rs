//! The tool calls of an answer: their shape in a row (OpenAI's `tool_calls` on the assistant
//! message, which the chat-completions API returns and SpecForge, speculators and the chat
//! templates read), and how a stream's `delta.tool_calls` fragments are put back together.
//!
//! The streaming contract (OpenAI's chat-completions streaming reference, followed by
//! OpenRouter and vLLM): each fragment names the call it belongs to by `index`; the first
//! fragment of a call carries its `id`, `type` and `function.name`, the later ones pieces of
//! `function.arguments`, which are concatenated as sent. Recorded OpenRouter streams
//! (tests/fixtures/recorded: Kimi K2.5 at Chutes, Gemini, GPT, Claude, Grok) send the calls so;
//! Gemini sends each call whole in one fragment.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One tool call the model made: what a row keeps on its assistant turn.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call (`functions.add:0` at Kimi, `call_...` at OpenAI): the
    /// `tool_call_id` a tool's answer would name.
    #[serde(default)]
    pub id: String,
    /// Always `function` today.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

/// The function a call names and the arguments the model wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    #[serde(default)]
    pub name: String,
    /// The JSON text the model wrote, kept as sent (a call cut at `max_tokens` holds a part of
    /// one): the text the model was trained to write is what the drafter learns.
    #[serde(default)]
    pub arguments: String,
}

fn function_kind() -> String {
    "function".into()
}

#[cfg(test)]
impl ToolCall {
    /// A function call, for tests.
    pub(crate) fn function(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

/// One `delta.tool_calls` entry (or a whole `message.tool_calls` entry, which has the same
/// fields), read leniently: the answer is paid for, so a fragment off the contract (arguments
/// sent as a JSON object, as some OpenAI-compatible servers do; a field of another type) is
/// read for what it holds rather than failing the stream.
struct Fragment {
    index: Option<u64>,
    id: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
}

impl Fragment {
    fn of(v: &Value) -> Fragment {
        let text = |v: &Value| v.as_str().map(str::to_string);
        let f = &v["function"];
        Fragment {
            index: v["index"].as_u64(),
            id: text(&v["id"]).filter(|id| !id.is_empty()),
            kind: text(&v["type"]).filter(|k| !k.is_empty()),
            name: text(&f["name"]).filter(|n| !n.is_empty()),
            arguments: match &f["arguments"] {
                Value::Null => None,
                Value::String(a) => Some(a.clone()),
                other => Some(other.to_string()),
            },
        }
    }
}

/// The calls of one answer as their fragments arrive.
#[derive(Debug, Default)]
pub(super) struct ToolCalls {
    calls: Vec<ToolCall>,
    /// Each call's `index` as the stream named it (parallel to `calls`).
    indices: Vec<Option<u64>>,
}

impl ToolCalls {
    /// Adds the fragments of one delta's `tool_calls` (a JSON array; a lone object is read as
    /// one fragment, anything else holds none); returns the bytes of name and arguments they
    /// carried (what the live count of a stream's tokens reads). An error only where the text
    /// is not JSON at all.
    pub(super) fn add(&mut self, raw: &str) -> Result<u32, serde_json::Error> {
        let value: Value = serde_json::from_str(raw)?;
        let fragments: Vec<Fragment> = match &value {
            Value::Array(all) => all.iter().map(Fragment::of).collect(),
            Value::Object(_) => vec![Fragment::of(&value)],
            _ => Vec::new(),
        };
        let mut bytes = 0usize;
        for f in fragments {
            let at = self.call_of(&f);
            let call = &mut self.calls[at];
            if let Some(id) = f.id
                && call.id.is_empty()
            {
                call.id = id;
            }
            if let Some(kind) = f.kind {
                call.kind = kind;
            }
            if let Some(name) = f.name
                && call.function.name.is_empty()
            {
                bytes += name.len();
                call.function.name = name;
            }
            if let Some(args) = f.arguments {
                bytes += args.len();
                call.function.arguments.push_str(&args);
            }
        }
        Ok(u32::try_from(bytes).unwrap_or(u32::MAX))
    }

    /// Where a fragment goes: the last call of its `index` (without one, the last call), unless
    /// the fragment brings an id other than that call's, which starts a new call (a server that
    /// numbers parallel calls all 0 would otherwise glue their arguments together).
    fn call_of(&mut self, f: &Fragment) -> usize {
        let last = match f.index {
            Some(i) => self.indices.iter().rposition(|&k| k == Some(i)),
            None => self.calls.len().checked_sub(1),
        };
        let other_id = |at: usize| {
            let id = &self.calls[at].id;
            f.id.as_ref().is_some_and(|new| !id.is_empty() && new != id)
        };
        match last {
            Some(at) if !other_id(at) => at,
            _ => {
                self.calls.push(ToolCall {
                    kind: function_kind(),
                    ..ToolCall::default()
                });
                self.indices.push(f.index);
                self.calls.len() - 1
            }
        }
    }

    pub(super) fn into_calls(self) -> Vec<ToolCall> {
        self.calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put_together(deltas: &[&str]) -> Vec<ToolCall> {
        let mut calls = ToolCalls::default();
        for d in deltas {
            calls.add(d).expect("fragments");
        }
        calls.into_calls()
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall::function(id, name, arguments)
    }

    #[test]
    fn fragments_are_put_together_by_index_and_id() {
        let cases: Vec<(&str, Vec<&str>, Vec<ToolCall>)> = vec![
            (
                "one call, its arguments in pieces (Kimi at Chutes)",
                vec![
                    r#"[{"index":0,"id":"functions.add:0","type":"function","function":{"name":"add","arguments":""}}]"#,
                    r#"[{"index":0,"function":{"arguments":"{\"a\""}}]"#,
                    r#"[{"index":0,"function":{"arguments":": 2}"}}]"#,
                ],
                vec![call("functions.add:0", "add", r#"{"a": 2}"#)],
            ),
            (
                "two calls interleaved by index",
                vec![
                    r#"[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{"}}]"#,
                    r#"[{"index":1,"id":"b","type":"function","function":{"name":"g","arguments":"["}}]"#,
                    r#"[{"index":0,"function":{"arguments":"}"}}]"#,
                    r#"[{"index":1,"function":{"arguments":"]"}}]"#,
                ],
                vec![call("a", "f", "{}"), call("b", "g", "[]")],
            ),
            (
                "each call whole in one fragment (Gemini)",
                vec![
                    r#"[{"index":0,"id":"t1","type":"function","function":{"name":"add","arguments":"{\"a\":2}"}}]"#,
                    r#"[{"index":1,"id":"t2","type":"function","function":{"name":"mul","arguments":"{}"}}]"#,
                ],
                vec![call("t1", "add", r#"{"a":2}"#), call("t2", "mul", "{}")],
            ),
            (
                "no index: a new id starts a call, none continues the last",
                vec![
                    r#"[{"id":"x","function":{"name":"f","arguments":"{"}}]"#,
                    r#"[{"function":{"arguments":"}"}}]"#,
                    r#"[{"id":"y","function":{"name":"g","arguments":""}}]"#,
                ],
                vec![call("x", "f", "{}"), call("y", "g", "")],
            ),
            (
                "a name said again is not doubled",
                vec![
                    r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{"}}]"#,
                    r#"[{"index":0,"function":{"name":"f","arguments":"}"}}]"#,
                ],
                vec![call("a", "f", "{}")],
            ),
            (
                "parallel calls all at index 0, told apart by their ids",
                vec![
                    r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{"}}]"#,
                    r#"[{"index":0,"function":{"arguments":"}"}}]"#,
                    r#"[{"index":0,"id":"b","function":{"name":"g","arguments":"{}"}}]"#,
                ],
                vec![call("a", "f", "{}"), call("b", "g", "{}")],
            ),
            (
                "arguments sent as an object, a lone fragment not in a list",
                vec![r#"{"index":0,"id":"a","function":{"name":"f","arguments":{"x":1}}}"#],
                vec![call("a", "f", r#"{"x":1}"#)],
            ),
            (
                "fields of other types are read for what they hold",
                vec![r#"[{"index":"0","id":7,"function":{"name":"f","arguments":null}}]"#],
                vec![call("", "f", "")],
            ),
            ("no fragments", vec!["[]", "null", "\"text\""], vec![]),
        ];
        for (what, deltas, want) in cases {
            assert_eq!(put_together(&deltas), want, "{what}");
        }
    }

    #[test]
    fn the_bytes_a_fragment_carries_are_its_name_and_arguments() {
        let mut calls = ToolCalls::default();
        let first =
            r#"[{"index":0,"id":"c1","type":"function","function":{"name":"add","arguments":""}}]"#;
        assert_eq!(calls.add(first).expect("ok"), 3);
        assert_eq!(
            calls
                .add(r#"[{"index":0,"function":{"arguments":"{}"}}]"#)
                .expect("ok"),
            2
        );
        assert!(calls.add("{not json").is_err(), "not JSON");
    }

    #[test]
    fn a_call_is_written_as_the_api_returns_it() {
        let c = call("functions.add:0", "add", r#"{"a": 2}"#);
        let json = serde_json::to_string(&c).expect("json");
        assert_eq!(
            json,
            r#"{"id":"functions.add:0","type":"function","function":{"name":"add","arguments":"{\"a\": 2}"}}"#
        );
        assert_eq!(serde_json::from_str::<ToolCall>(&json).expect("back"), c);
    }
}
