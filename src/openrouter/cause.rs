//! What a provider itself said of a refusal, as OpenRouter passes it on (`provider_name`,
//! `error_type`, `metadata.raw`): "Provider returned error" alone names no cause. Made one safe
//! line for rejects, the log, the stop message and the terminal.

use serde_json::Value;

use super::error::ErrorBody;

impl ErrorBody {
    /// What the provider itself said, when OpenRouter passes it on: `provider_name`,
    /// `error_type` and `metadata.raw` (the upstream's own error; its `message` when it is an
    /// OpenAI-shaped JSON error, else its text), on one line without control characters, the
    /// raw part cut at [`RAW_SHOWN`] characters. "Provider returned error" alone names no cause.
    pub fn cause(&self) -> Option<String> {
        let provider = self.provider_name();
        let error_type = self.error_type();
        let raw = self.upstream_message();
        if raw.is_none() && error_type.is_none() {
            return None;
        }
        let mut out = String::new();
        if let Some(p) = provider {
            out.push_str(&p);
            out.push_str(": ");
        }
        if let Some(t) = error_type {
            out.push_str(&one_line(t));
            if raw.is_some() {
                out.push_str(": ");
            }
        }
        if let Some(r) = raw {
            out.push_str(&r);
        }
        Some(out)
    }

    /// `metadata.provider_name`, made one safe line.
    pub fn provider_name(&self) -> Option<String> {
        let meta = self.metadata.as_ref()?;
        let p = one_line(meta.get("provider_name")?.as_str()?);
        (!p.is_empty()).then_some(p)
    }

    /// `metadata.raw`: the upstream's own error, its `message` when it is an OpenAI-shaped JSON
    /// error, else its text; one safe line cut at [`RAW_SHOWN`] characters.
    pub fn upstream_message(&self) -> Option<String> {
        let raw = self.metadata.as_ref()?.get("raw")?;
        let text = match raw {
            Value::String(s) => s.clone(),
            Value::Null => return None,
            other => other.to_string(),
        };
        // Upstream bodies are often `{"error": {"message": ...}}`: the message says it.
        let inner = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        let text = one_line(&inner.unwrap_or(text));
        (!text.is_empty()).then_some(text)
    }
}

/// Most characters of a provider's raw error shown in a message.
pub(super) const RAW_SHOWN: usize = 300;

/// Server text made safe for one line of a terminal or a log: control characters (escape
/// sequences included) dropped, whitespace runs made one space, cut at [`RAW_SHOWN`].
fn one_line(s: &str) -> String {
    let mut out = String::new();
    let mut blank = false;
    for c in s.chars() {
        if c.is_whitespace() {
            blank = !out.is_empty();
            continue;
        }
        if c.is_control() {
            continue;
        }
        if blank {
            out.push(' ');
            blank = false;
        }
        if out.chars().count() >= RAW_SHOWN {
            out.push('…');
            break;
        }
        out.push(c);
    }
    out
}
