//! Thinking that came back inside the answer's text: a server without a reasoning parser
//! (SGLang or vLLM without `--reasoning-parser`, llama.cpp) returns Kimi's thinking inline,
//! `<think>...</think>answer` or, when the template opened the block, `...</think>answer`.
//! The drafter must learn the answer as the answer and the thinking as reasoning, so the split
//! happens before the row is written.

/// Splits `content` at its think block: `(answer, thinking)` when there is one.
pub(crate) fn split(content: &str) -> Option<(String, String)> {
    let close = content.find("</think>")?;
    let before = &content[..close];
    let thinking = before
        .trim_start()
        .strip_prefix("<think>")
        .unwrap_or(before.trim_start());
    // An opening tag after text is not a block the model opened at the start: leave it alone.
    if thinking.contains("<think>") {
        return None;
    }
    let answer = content[close + "</think>".len()..].trim_start();
    Some((answer.to_string(), thinking.trim().to_string()))
}

/// The answer and reasoning to keep: an inline block moves into the reasoning (after what the
/// provider already parsed, if anything). Returns whether it split.
pub(crate) fn clean(content: String, reasoning: Option<String>) -> (String, Option<String>, bool) {
    match split(&content) {
        None => (content, reasoning, false),
        Some((answer, inline)) => {
            let reasoning = match reasoning.filter(|r| !r.trim().is_empty()) {
                Some(r) if !inline.is_empty() => Some(format!("{r}\n\n{inline}")),
                Some(r) => Some(r),
                None => (!inline.is_empty()).then_some(inline),
            };
            (answer, reasoning, true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Content and parsed reasoning in; the answer, the reasoning and whether it split out.
    type Case<'a> = (&'a str, Option<&'a str>, (&'a str, Option<&'a str>, bool));

    #[test]
    fn think_blocks_in_every_shape() {
        let cases: Vec<Case> = vec![
            (
                "<think>a plan</think>The answer.",
                None,
                ("The answer.", Some("a plan"), true),
            ),
            (
                "  <think>\nplan\n</think>\n\nAnswer",
                None,
                ("Answer", Some("plan"), true),
            ),
            (
                "plan only closed</think> Answer",
                None,
                ("Answer", Some("plan only closed"), true),
            ),
            (
                "No block at all.",
                Some("parsed"),
                ("No block at all.", Some("parsed"), false),
            ),
            (
                "<think>more</think>Answer",
                Some("parsed"),
                ("Answer", Some("parsed\n\nmore"), true),
            ),
            ("<think></think>Answer", None, ("Answer", None, true)),
            // Cut while thinking: no closing tag, nothing to split (the empty-answer rule
            // judges it).
            (
                "<think>still thinking",
                None,
                ("<think>still thinking", None, false),
            ),
            // A quoted tag in the middle of an answer is not a block.
            (
                "Use <think> then </think> tags",
                None,
                ("Use <think> then </think> tags", None, false),
            ),
        ];
        for (content, reasoning, (want_c, want_r, want_split)) in cases {
            let got = clean(content.to_string(), reasoning.map(str::to_string));
            assert_eq!(
                got,
                (want_c.to_string(), want_r.map(str::to_string), want_split),
                "{content:?}"
            );
        }
    }
}
