//! One answer as the rows a trainer takes: why it is left out by choice (a filter's reason),
//! SpecForge's gate, the explosion into one row per answer, and the rendering through the chat
//! template with what it found (reasoning dropped, samples, a refusal).

use serde_json::{Value, json};

use crate::store::output::OutputRecord;

use super::validate::{Rules, has_think_marker, validate_row};
use super::{
    ERROR, ForeignTurns, Format, Job, Options, SKIPPED, SUCCESS, Sample, lengths, rows, template,
};

/// Why a row is left out by choice, or `None`.
fn filtered(r: &OutputRecord, foreign: &[usize], o: &Options) -> Option<String> {
    let answers = || r.conversations.iter().filter(|t| t.role == "assistant");
    if let Some(&i) = foreign.first()
        && o.foreign_turns == ForeignTurns::Skip
    {
        return Some(format!(
            "conversations[{i}] is an assistant turn from the prompt file, not the model's \
             (turns = \"last\"), and a trainer supervises every assistant turn of a row; \
             turns = \"all\" has the model write it, --foreign-turns context keeps it as \
             context for a trainer that supervises only a row's last turn (SpecForge's \
             data.train_only_last_turn)"
        ));
    }
    if r.finish_reason == "tool_calls"
        && answers()
            .next_back()
            .is_none_or(|t| t.tool_calls.is_empty())
    {
        return Some(
            "the answer is a tool call (finish_reason tool_calls) written by a harvest that did \
             not record the calls: the row would train an empty answer"
                .into(),
        );
    }
    if r.truncated && !o.keep_truncated {
        return Some("cut at max_tokens (finish_reason length); --keep-truncated keeps it".into());
    }
    if !o.keep_think_markers
        && answers().any(|t| {
            has_think_marker(&t.content)
                || t.reasoning_content.as_deref().is_some_and(has_think_marker)
        })
    {
        return Some(
            "a <think> or </think> marker in the answer; --keep-think-markers keeps it".into(),
        );
    }
    // The model's own answers: a turn from the prompt file has no reasoning to require.
    let own = (r.conversations.iter().enumerate())
        .filter(|(i, t)| t.role == "assistant" && !foreign.contains(i));
    if o.require_reasoning
        && own.clone().any(|(_, t)| {
            t.reasoning_content
                .as_deref()
                .is_none_or(|s| s.trim().is_empty())
        })
    {
        return Some("no reasoning_content in an answer of the model (--require-reasoning)".into());
    }
    None
}

/// What one answer becomes: its rows (one skipped or error row, or the success rows) and what
/// rendering them through the template found.
pub(super) struct AnswerRows {
    pub(super) which: usize,
    pub(super) rows: Vec<Value>,
    /// Rows rendered through the template.
    pub(super) rendered: u64,
    /// Ids of rows whose last reasoning the template dropped.
    pub(super) dropped: Vec<String>,
    pub(super) shown: Vec<Sample>,
    /// A SpecForge or ShareGPT row without a system turn.
    pub(super) without_system: bool,
    /// The template refused the row.
    pub(super) template_failure: Option<template::TemplateError>,
    /// Its conversation holds assistant turns the model did not write.
    pub(super) foreign: bool,
    /// The lengths of its success rows, those left out for their length included.
    pub(super) lengths: Vec<u64>,
}

impl AnswerRows {
    pub(super) fn one(which: usize, row: Value) -> AnswerRows {
        AnswerRows {
            which,
            rows: vec![row],
            rendered: 0,
            dropped: Vec::new(),
            shown: Vec::new(),
            without_system: false,
            template_failure: None,
            foreign: false,
            lengths: Vec::new(),
        }
    }
}

/// One answer as rows: filtered, validated with the trainer's rules, exploded if asked, and
/// rendered through the template; at most `sample_room` of them kept as samples.
pub(super) fn answer_rows(
    job: &Job,
    name: &str,
    mut r: OutputRecord,
    sample_room: usize,
) -> AnswerRows {
    let o = job.o;
    if let Some(text) = &o.system_prompt
        && !r.conversations.iter().any(|t| t.role == "system")
    {
        r.conversations.insert(
            0,
            crate::store::output::Turn {
                role: "system".into(),
                content: text.clone(),
                reasoning_content: None,
                tool_calls: Vec::new(),
            },
        );
    }
    let sf = rows::specforge_row(&r);
    let refused = |status: &str, reason: String| {
        json!({"id": r.id, "status": status, "reason": reason,
               "conversations": sf["conversations"]})
    };
    let foreign = rows::foreign_turns(&r);
    if let Some(why) = filtered(&r, &foreign, o) {
        let mut a = AnswerRows::one(SKIPPED, refused("skipped", why));
        // Skipped for those turns (the first check), not for a reason of its own.
        a.foreign = !foreign.is_empty() && o.foreign_turns == ForeignTurns::Skip;
        return a;
    }
    let rules = Rules {
        // SpecForge's rule is every assistant message's: the prompt file's have none.
        expect_reasoning: o.require_reasoning && foreign.is_empty(),
        expect_non_reasoning: false,
        strict_think_markers: !o.keep_think_markers,
    };
    if let Err(why) = validate_row(&sf, rules) {
        return AnswerRows::one(ERROR, refused("error", why));
    }
    if let Some(why) = rows::unwritable(&sf, o.format) {
        return AnswerRows::one(SKIPPED, refused("skipped", why));
    }
    // Validated whole, then exploded: SpecForge's order (regenerate, validate, expand).
    let parts = if o.explode_turns {
        rows::exploded(&sf, &foreign)
    } else {
        vec![sf.clone()]
    };
    let mut a = AnswerRows::one(SUCCESS, Value::Null);
    a.rows.clear();
    a.foreign = !foreign.is_empty();
    let lens = lengths::of_rows(&r, parts.len());
    // The tools the request offered (`[request] extra`): the model was conditioned on their
    // declaration, so the template renders it and the trainer's row carries them.
    let tools = rows::tools_of(&r);
    let too_long = |len: u64| o.skip_longer && o.max_length.is_some_and(|m| len > m);
    for (part, len) in parts.into_iter().zip(lens) {
        a.lengths.push(len);
        if too_long(len) {
            continue;
        }
        let id = part["id"].as_str().unwrap_or_default().to_string();
        let messages = rows::messages_as_written(&part, o.format);
        let text = match job
            .template
            .map(|t| t.render_with_tools(&id, &messages, &tools))
        {
            None => None,
            Some(Ok(text)) => Some(text),
            Some(Err(e)) => {
                // The trainer renders the row through the same template: it would fail there too.
                let why = format!("the chat template refuses the row: {e}");
                let mut a = AnswerRows::one(ERROR, refused("error", why));
                a.template_failure = Some(e);
                return a;
            }
        };
        if let Some(text) = &text {
            a.rendered += 1;
            let lost = rows::reasoning_kept(&messages, text) == Some(false);
            if lost {
                a.dropped.push(id.clone());
            }
            if a.shown.len() < sample_room {
                a.shown.push(Sample {
                    dataset: name.to_string(),
                    id,
                    messages: messages.as_array().map_or(0, Vec::len),
                    text: text.clone(),
                    reasoning_dropped: lost,
                });
            }
        }
        let mut row = rows::success_row(part, o.format, text, &tools);
        if o.with_provenance {
            rows::add_provenance(&mut row, &r);
        }
        a.rows.push(row);
    }
    if a.rows.is_empty() {
        let why = format!(
            "{} tokens, longer than --max-length {} (--skip-longer): a trainer would cut it \
             on the right",
            a.lengths.iter().max().copied().unwrap_or(0),
            o.max_length.unwrap_or(0)
        );
        let mut skipped = AnswerRows::one(SKIPPED, refused("skipped", why));
        skipped.lengths = std::mem::take(&mut a.lengths);
        return skipped;
    }
    a.without_system = matches!(o.format, Format::Specforge | Format::Sharegpt)
        && sf["conversations"][0]["role"] != "system";
    a
}
