//! The SSE chunk's wire shapes as OpenRouter (and vLLM, SGLang) send them, parsed with
//! borrowed strings and only the fields the accumulator (`response.rs`) reads.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::error::ErrorBody;
use super::response::Usage;

/// A string that borrows from the event text when it has no escapes. `Option<Cow<str>>` through
/// serde's default path always allocates (research/rust-client-cpu.md), hence this newtype.
#[derive(Debug, Default)]
pub(super) struct Text<'a>(pub(super) Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// One entry of `reasoning_details`: we read the text of text and summary entries.
#[derive(Debug, Deserialize)]
pub(super) struct ReasoningDetail<'a> {
    #[serde(default, borrow, rename = "type")]
    pub(super) kind: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) text: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) summary: Option<Text<'a>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Delta<'a> {
    #[serde(default, borrow)]
    pub(super) content: Option<Text<'a>>,
    /// OpenRouter's reasoning delta.
    #[serde(default, borrow)]
    pub(super) reasoning: Option<Text<'a>>,
    /// vLLM / SGLang / DeepSeek dialect.
    #[serde(default, borrow)]
    pub(super) reasoning_content: Option<Text<'a>>,
    /// Read only when neither field above has the text: OpenRouter sends it again here in
    /// every reasoning chunk, and parsing it twice was a third of the chunk's cost.
    #[serde(default, borrow)]
    pub(super) reasoning_details: Option<&'a RawValue>,
    /// Fragments of the answer's tool calls (`tool_call.rs` puts them together): kept raw,
    /// parsed only in the chunks that have them.
    #[serde(default, borrow)]
    pub(super) tool_calls: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ChunkChoice<'a> {
    #[serde(default, borrow)]
    pub(super) delta: Option<Delta<'a>>,
    /// Non-streaming responses carry `message` instead of `delta`; same shape for our purposes.
    #[serde(default, borrow)]
    pub(super) message: Option<Delta<'a>>,
    #[serde(default, borrow)]
    pub(super) finish_reason: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) native_finish_reason: Option<Text<'a>>,
    #[serde(default)]
    pub(super) error: Option<ErrorBody>,
}

/// An SSE data chunk or a whole non-streaming body.
#[derive(Debug, Deserialize)]
pub(super) struct Chunk<'a> {
    #[serde(default, borrow)]
    pub(super) id: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) provider: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) model: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) choices: Vec<ChunkChoice<'a>>,
    #[serde(default)]
    pub(super) usage: Option<Usage>,
    #[serde(default)]
    pub(super) error: Option<ErrorBody>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_borrows_when_unescaped() {
        let c: Chunk<'_> = serde_json::from_str(
            r#"{"provider":"DeepInfra","choices":[{"delta":{"content":"a\nb"}}]}"#,
        )
        .expect("chunk");
        assert!(matches!(c.provider.expect("p").0, Cow::Borrowed(_)));
        let d = c
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.delta)
            .expect("delta");
        assert_eq!(&*d.content.expect("c").0, "a\nb");
    }
}
