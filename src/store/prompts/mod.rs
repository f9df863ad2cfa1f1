//! Streaming reader of prompt files (JSONL, plain or gzip/Zstandard-compressed, or Parquet), one
//! prompt per non-blank line (a Parquet file's rows as lines).
//!
//! Each line is a JSON object with an optional `id` (string, or integer turned into a string) and
//! exactly one of:
//! - `prompt`: a string, sent as one user message;
//! - `messages`: an OpenAI chat list of `{role, content}`, where `content` is a string or a list of
//!   parts `{"type": "text", "text": …}` whose texts are joined with `"\n"`;
//! - `conversations`: ShareGPT turns, either `{from, value}` (`human`/`user` → user,
//!   `gpt`/`assistant`/`model` → assistant, `system`) or `{role, content}` as in `messages`.
//!
//! A turn's role is `system`, `user` or `assistant`, the roles export's gate takes
//! (`export::validate::ROLES`); a `tool` or `developer` turn makes the line bad.
//!
//! A dataset may name these fields otherwise ([`PromptFields`]: `prompt_field`,
//! `messages_field`, `system_field`, `id_field` in its config).
//!
//! A key whose value is `null` counts as absent (datasets converted from tables carry null columns).
//! Other fields are ignored. Trailing assistant turns are dropped (we generate the assistant's answer
//! to the last user turn); the last remaining turn must be a user turn.
//!
//! Lines are numbered from 1, blank lines included; a UTF-8 byte order mark at the start of the file
//! and CRLF line endings are accepted. The file is streamed line by line, never held in memory.

mod fingerprint;
mod format;
mod ids;
mod line;
mod line_runs;
mod parquet_lines;
mod parquet_pages;
mod prefix;
mod reader;
mod source;
#[cfg(test)]
mod tests;

use crate::openrouter::Message;

pub use fingerprint::Fingerprint;
pub use format::PromptFields;
use format::*;
pub use ids::*;
pub use line_runs::LineRuns;
pub use prefix::{AtEarlier, MarkCheck, PrefixRead, PromptMark};
pub use reader::*;
pub use source::{FileKind, first_row};

/// One prompt read from a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    pub id: String,
    /// The conversation to send; never empty, and the last message is a user turn.
    pub messages: Vec<Message>,
    /// 1-based line number in the file.
    pub line: u64,
}

/// A bad line (`line >= 1`, shown as `path:line: message`) or a read failure (`line == 0`, shown as
/// `cannot read path: message`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct PromptError {
    pub path: String,
    pub line: u64,
    pub message: String,
}

impl PromptError {
    /// True for a read failure (the file cannot be opened or read), false for a bad line.
    pub fn is_io(&self) -> bool {
        self.line == 0
    }

    fn render(&self) -> String {
        if self.is_io() {
            format!("cannot read {}: {}", self.path, self.message)
        } else {
            format!("{}:{}: {}", self.path, self.line, self.message)
        }
    }
}

/// A prompt whose id was already seen earlier in the same file; it is not yielded again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub id: String,
    pub line: u64,
    pub first_line: u64,
    /// The conversation differs from the first line's: two prompts under one id, not a copy.
    pub differs: bool,
}

/// Result of [`count_prompts`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromptCount {
    pub valid: u64,
    pub invalid: u64,
    pub duplicates: u64,
    /// Lines whose id appeared on an earlier line, ascending: a reader opened with
    /// [`PromptReader::open_prescanned`] skips them without keeping every id in memory.
    pub duplicate_lines: LineRuns,
    /// The first duplicates (up to 1,000), in file order, with whether their content differs.
    pub first_duplicates: Vec<Duplicate>,
    /// Duplicates whose conversation differs from the first line's with that id.
    pub differing: u64,
    /// The first bad line's error, when there is one.
    pub first_error: Option<PromptError>,
    /// Valid prompts of the shard asked for ([`count_prompts_in_shard`]; all when none).
    pub in_shard: u64,
    /// Bytes the count read: the run reads the file up to here and no further (lines appended
    /// while it runs are not this run's).
    pub bytes: u64,
    /// Valid prompts with no `system` message of their own.
    pub without_system: u64,
    /// The lines the count read, hashed in blocks: the run checks the file is still them.
    pub fingerprint: Fingerprint,
    /// The lines the count read as one stable hash, for the manifest (and at an earlier run's
    /// length, when asked): the next run checks the file still starts with them.
    pub prefix: PrefixRead,
    /// Valid prompts that carry an assistant turn of their own (text the model did not write,
    /// unless `turns = "all"` has it regenerate them).
    pub with_assistant_turns: u64,
    /// Rows whose id came from the id field (`id`, or the dataset's `id_field`), not from
    /// their content.
    pub ids_given: u64,
}
