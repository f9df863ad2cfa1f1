//! Streaming reader of prompt files (JSONL), one prompt per non-blank line.
//!
//! Each line is a JSON object with an optional `id` (string, or integer turned into a string) and
//! exactly one of:
//! - `prompt`: a string, sent as one user message;
//! - `messages`: an OpenAI chat list of `{role, content}`, where `content` is a string or a list of
//!   parts `{"type": "text", "text": …}` whose texts are joined with `"\n"`;
//! - `conversations`: ShareGPT turns, either `{from, value}` (`human`/`user` → user,
//!   `gpt`/`assistant`/`model` → assistant, `system`, `tool`) or `{role, content}` as in `messages`.
//!
//! A key whose value is `null` counts as absent (datasets converted from tables carry null columns).
//! Other fields are ignored. Trailing assistant turns are dropped (we generate the assistant's answer
//! to the last user turn); the last remaining turn must be a user turn.
//!
//! Lines are numbered from 1, blank lines included; a UTF-8 byte order mark at the start of the file
//! and CRLF line endings are accepted. The file is streamed line by line, never held in memory.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::{Map, Value};

use crate::openrouter::Message;

/// FNV-1a 64-bit offset basis. Ids and shards derived from it are persisted in output files, so
/// it must never change (the simulator uses the same hash for its per-prompt seeds).
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0100_0000_01b3;
/// At most this many duplicates are kept in [`PromptReader::duplicates`]; all are counted.
const MAX_DUPLICATES_KEPT: usize = 1_000;

/// FNV-1a 64 over `bytes`, continuing from `h` (start with [`FNV_OFFSET`]).
pub fn fnv1a(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The id of a prompt without an explicit `id`: `h` followed by 16 lowercase hex digits of the
/// FNV-1a 64-bit hash (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`) of, for each
/// message in order, its role bytes, a `0x00` byte, its content bytes (UTF-8) and a `0x01` byte.
/// The messages are those sent (after trailing assistant turns are dropped), so formats denoting
/// the same conversation get the same id. This rule is persisted in outputs: never change it.
pub fn content_id(messages: &[Message]) -> String {
    format!("h{:016x}", content_hash(messages))
}

/// The hash behind [`content_id`].
pub fn content_hash(messages: &[Message]) -> u64 {
    let mut h = FNV_OFFSET;
    for m in messages {
        h = fnv1a(m.role.as_bytes(), h);
        h = fnv1a(&[0], h);
        h = fnv1a(m.content.as_bytes(), h);
        h = fnv1a(&[1], h);
    }
    h
}

/// The shard (in `0..n`) of a prompt id for `--shard k/n`: the FNV-1a 64-bit hash of the id's UTF-8
/// bytes, folded to 32 bits by xoring its high and low halves (FNV's low bits alone mix poorly),
/// modulo `n`. Stable across versions and machines. `n == 0` is treated as `n == 1`.
pub fn shard_of(id: &str, n: u32) -> u32 {
    let h = fnv1a(id.as_bytes(), FNV_OFFSET);
    let folded = ((h >> 32) ^ (h & 0xffff_ffff)) as u32;
    folded % n.max(1)
}

/// Parses `--shard k/n` with a 0-based `k`: `0 <= k < n`.
pub fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let parsed = s
        .split_once('/')
        .and_then(|(k, n)| Some((k.trim().parse::<u32>().ok()?, n.trim().parse::<u32>().ok()?)));
    let Some((k, n)) = parsed else {
        return Err(format!(
            "--shard {s}: expected k/n with 0-based k, e.g. 0/4"
        ));
    };
    if n == 0 {
        return Err(format!("--shard {s}: n must be at least 1"));
    }
    if k >= n {
        return Err(format!("--shard {s}: k must be in 0..n (0-based)"));
    }
    Ok((k, n))
}

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
    pub duplicate_lines: Vec<u64>,
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
}

/// Streams prompts from a JSONL source. Bad lines yield an error and the iteration goes on with the
/// next line; a read failure yields one error (`line == 0`) and ends the iteration.
pub struct PromptReader {
    reader: Box<dyn BufRead + Send>,
    path: String,
    line: u64,
    buf: Vec<u8>,
    /// Ids seen so far, as 128-bit keyed hashes (16 bytes an id instead of a String: a file of
    /// millions of prompts is read in one pass with flat memory per line); value: first line.
    seen: HashMap<u128, (u64, u64)>,
    /// Every duplicate line found (for [`count_prompts`]).
    duplicate_lines: Vec<u64>,
    seen_keys: (std::hash::RandomState, std::hash::RandomState),
    /// Set by [`PromptReader::open_prescanned`]: the duplicate lines (ascending, next first),
    /// instead of `seen`.
    prescanned: Option<std::collections::VecDeque<u64>>,
    duplicates: Vec<Duplicate>,
    duplicate_count: u64,
    differing: u64,
    /// Bytes consumed so far.
    bytes: u64,
    done: bool,
}

impl PromptReader {
    pub fn open(path: &Path) -> Result<Self, PromptError> {
        let shown = path.display().to_string();
        match File::open(path) {
            Ok(file) => Ok(Self::new(BufReader::with_capacity(1 << 16, file), shown)),
            Err(e) => Err(PromptError {
                path: shown,
                line: 0,
                message: e.to_string(),
            }),
        }
    }

    /// `path_for_messages` is only used in error messages.
    pub fn new(reader: impl BufRead + Send + 'static, path_for_messages: String) -> Self {
        PromptReader {
            reader: Box::new(reader),
            path: path_for_messages,
            line: 0,
            buf: Vec::new(),
            seen: HashMap::new(),
            duplicate_lines: Vec::new(),
            seen_keys: Default::default(),
            prescanned: None,
            duplicates: Vec::new(),
            duplicate_count: 0,
            differing: 0,
            bytes: 0,
            done: false,
        }
    }

    /// Opens a file already read by [`count_prompts`]: its duplicate lines are skipped by
    /// number, so a long run keeps no id per prompt (the file must not change meanwhile).
    pub fn open_prescanned(path: &Path, count: &PromptCount) -> Result<Self, PromptError> {
        use std::io::Read;
        let shown = path.display().to_string();
        // The file as the count saw it: its length then is the end, whatever is appended since.
        let file = File::open(path).map_err(|e| PromptError {
            path: shown.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        let mut r = Self::new(
            BufReader::with_capacity(1 << 16, file.take(count.bytes)),
            shown,
        );
        r.prescanned = Some(count.duplicate_lines.iter().copied().collect());
        Ok(r)
    }

    /// Two independent keyed SipHash values of an id: a collision between two different ids
    /// of one file is about n²/2¹²⁹ (never, in practice).
    fn id_key(&self, id: &str) -> u128 {
        use std::hash::BuildHasher;
        let a = self.seen_keys.0.hash_one(id);
        let b = self.seen_keys.1.hash_one(id);
        (u128::from(a) << 64) | u128::from(b)
    }

    /// A keyed hash of a conversation, to tell a copied line from another prompt under the
    /// same id.
    fn content_key(&self, messages: &[crate::openrouter::Message]) -> u64 {
        use std::hash::BuildHasher;
        self.seen_keys.0.hash_one(
            messages
                .iter()
                .map(|m| (m.role.as_str(), m.content.as_str()))
                .collect::<Vec<_>>(),
        )
    }

    /// The first 1,000 duplicates, in file order.
    pub fn duplicates(&self) -> &[Duplicate] {
        &self.duplicates
    }

    /// All duplicates seen so far.
    pub fn duplicate_count(&self) -> u64 {
        self.duplicate_count
    }

    fn error(&self, message: String) -> PromptError {
        PromptError {
            path: self.path.clone(),
            line: self.line,
            message,
        }
    }

    /// Parses the line in `self.buf` (without its line ending); `Ok(None)` for a blank line.
    fn parse_line(&self) -> Result<Option<Prompt>, String> {
        let mut bytes = self.buf.as_slice();
        if self.line == 1 {
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|e| format!("not valid UTF-8 at byte {}", e.valid_up_to() + 1))?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        let value: Value = serde_json::from_str(text).map_err(|e| {
            let full = e.to_string();
            let what = full
                .rsplit_once(" at line ")
                .map_or(full.as_str(), |(w, _)| w);
            format!("not valid JSON: {what} at column {}", e.column())
        })?;
        let Value::Object(obj) = value else {
            return Err("not a JSON object".to_string());
        };
        let mut messages = parse_messages(&obj)?;
        while messages.last().is_some_and(|m| m.role == "assistant") {
            messages.pop();
        }
        match messages.last() {
            None => return Err("no user turn (only assistant turns)".to_string()),
            Some(m) if m.role != "user" => {
                return Err(format!("last turn is \"{}\", expected \"user\"", m.role));
            }
            Some(_) => {}
        }
        let id = match obj.get("id") {
            None | Some(Value::Null) => content_id(&messages),
            Some(Value::String(s)) if s.is_empty() => return Err("\"id\" is empty".to_string()),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            Some(_) => return Err("\"id\" must be a string or an integer".to_string()),
        };
        Ok(Some(Prompt {
            id,
            messages,
            line: self.line,
        }))
    }
}

impl Iterator for PromptReader {
    type Item = Result<Prompt, PromptError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buf.clear();
            match self.reader.read_until(b'\n', &mut self.buf) {
                Ok(0) => self.done = true,
                Ok(n) => {
                    self.bytes += n as u64;
                    self.line += 1;
                    if self.buf.last() == Some(&b'\n') {
                        self.buf.pop();
                        if self.buf.last() == Some(&b'\r') {
                            self.buf.pop();
                        }
                    }
                    if let Some(skip) = self.prescanned.as_mut() {
                        while skip.front().is_some_and(|&l| l < self.line) {
                            skip.pop_front();
                        }
                        if skip.front() == Some(&self.line) {
                            skip.pop_front();
                            self.duplicate_count += 1;
                            continue;
                        }
                    }
                    match self.parse_line() {
                        Ok(None) => {}
                        Ok(Some(prompt)) if self.prescanned.is_some() => return Some(Ok(prompt)),
                        Ok(Some(prompt)) => {
                            let key = self.id_key(&prompt.id);
                            let content = self.content_key(&prompt.messages);
                            if let Some(&(first_line, first_content)) = self.seen.get(&key) {
                                let differs = content != first_content;
                                self.duplicate_count += 1;
                                self.differing += u64::from(differs);
                                self.duplicate_lines.push(prompt.line);
                                if self.duplicates.len() < MAX_DUPLICATES_KEPT {
                                    self.duplicates.push(Duplicate {
                                        id: prompt.id,
                                        line: prompt.line,
                                        first_line,
                                        differs,
                                    });
                                }
                                continue;
                            }
                            self.seen.insert(key, (prompt.line, content));
                            return Some(Ok(prompt));
                        }
                        Err(message) => return Some(Err(self.error(message))),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(PromptError {
                        path: self.path.clone(),
                        line: 0,
                        message: format!("{e} (after line {})", self.line),
                    }));
                }
            }
        }
        None
    }
}

/// A quick streaming pass over a prompt file. A read failure is an error; bad lines are counted.
pub fn count_prompts(path: &Path) -> Result<PromptCount, PromptError> {
    count_prompts_in_shard(path, None)
}

/// [`count_prompts`], also counting the prompts of shard `k` of `n`: everything the start of a
/// run needs from a file, in one read.
pub fn count_prompts_in_shard(
    path: &Path,
    shard: Option<(u32, u32)>,
) -> Result<PromptCount, PromptError> {
    count_prompts_reporting(path, shard, &std::sync::atomic::AtomicU64::new(0))
}

/// [`count_prompts_in_shard`], adding the bytes it reads to `read` as it goes (every 4,096
/// lines), for a progress line over files of millions of prompts.
pub fn count_prompts_reporting(
    path: &Path,
    shard: Option<(u32, u32)>,
    read: &std::sync::atomic::AtomicU64,
) -> Result<PromptCount, PromptError> {
    use std::sync::atomic::Ordering;
    let mut reader = PromptReader::open(path)?;
    let mut count = PromptCount::default();
    let mut reported = 0u64;
    while let Some(item) = reader.next() {
        if reader.line % 4096 == 0 {
            read.fetch_add(reader.bytes - reported, Ordering::Relaxed);
            reported = reader.bytes;
        }
        match item {
            Ok(p) => {
                count.valid += 1;
                if !p.messages.iter().any(|m| m.role == "system") {
                    count.without_system += 1;
                }
                if shard.is_none_or(|(k, n)| shard_of(&p.id, n) == k) {
                    count.in_shard += 1;
                }
            }
            Err(e) if e.is_io() => return Err(e),
            Err(e) => {
                count.invalid += 1;
                if count.first_error.is_none() {
                    count.first_error = Some(e);
                }
            }
        }
    }
    count.duplicates = reader.duplicate_count();
    count.duplicate_lines = reader.duplicate_lines;
    count.first_duplicates = reader.duplicates;
    count.differing = reader.differing;
    count.bytes = reader.bytes;
    read.fetch_add(reader.bytes - reported, Ordering::Relaxed);
    Ok(count)
}

/// The one of `prompt`, `messages` or `conversations` present in `obj`, as messages.
fn parse_messages(obj: &Map<String, Value>) -> Result<Vec<Message>, String> {
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

const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// An OpenAI-style turn `{role, content}`; `at` names it in errors (`messages[2]`).
fn parse_role_content(turn: &Value, at: &str) -> Result<Message, String> {
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
fn parse_sharegpt(turn: &Value, at: &str) -> Result<Message, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn reader(text: &str) -> PromptReader {
        PromptReader::new(
            Cursor::new(text.as_bytes().to_vec()),
            "data/b3.jsonl".into(),
        )
    }

    fn one(line: &str) -> Result<Prompt, String> {
        match reader(line).next() {
            Some(Ok(p)) => Ok(p),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("nothing".into()),
        }
    }

    fn msgs(p: &[(&str, &str)]) -> Vec<Message> {
        p.iter().map(|(r, c)| Message::new(*r, *c)).collect()
    }

    #[test]
    fn fnv_and_ids_are_pinned() {
        // Published FNV-1a 64 test vectors; and the id rule must never change.
        assert_eq!(fnv1a(b"", FNV_OFFSET), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a", FNV_OFFSET), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar", FNV_OFFSET), 0x8594_4171_f739_67e8);
        let id = content_id(&[Message::user("hi")]);
        assert_eq!(id, "h660db281bfb80118");
        let two = [Message::system("s"), Message::user("u")];
        assert_eq!(content_id(&two), "h99c51407d6b766db");
        assert_eq!(shard_of("q-1", 1_000), 263);
    }

    #[test]
    fn all_formats_same_content_same_id() {
        let lines = [
            r#"{"prompt":"hi"}"#,
            r#"{"prompt":"hi","messages":null,"conversations":null}"#,
            r#"{"messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
            r#"{"conversations":[{"from":"human","value":"hi"},{"from":"gpt","value":"yo"}]}"#,
            r#"{"conversations":[{"role":"user","content":"hi"}],"source":"x","score":3}"#,
        ];
        for l in lines {
            let p = one(l).expect(l);
            assert_eq!(p.messages, msgs(&[("user", "hi")]), "{l}");
            assert_eq!(p.id, "h660db281bfb80118", "{l}");
        }
    }

    #[test]
    fn formats_multi_turn() {
        let p = one(r#"{"id":"a","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"q1"},{"role":"assistant","content":"a1"},{"role":"user","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]},{"role":"assistant","content":"a2"},{"role":"assistant","content":"a3"}]}"#).expect("ok");
        let want = [
            ("system", "be brief"),
            ("user", "q1"),
            ("assistant", "a1"),
            ("user", "x\ny"),
        ];
        assert_eq!(p.messages, msgs(&want));
        assert_eq!(p.id, "a");
        let p = one(r#"{"conversations":[{"from":"system","value":"s"},{"from":"user","value":"u"},{"from":"model","value":"m"},{"from":"tool","value":"t"},{"from":"human","value":"h"}]}"#).expect("ok");
        let want = [
            ("system", "s"),
            ("user", "u"),
            ("assistant", "m"),
            ("tool", "t"),
            ("user", "h"),
        ];
        assert_eq!(p.messages, msgs(&want));
        assert!(p.id.starts_with('h') && p.id.len() == 17);
    }

    #[test]
    fn ids_explicit_integer_and_bad() {
        assert_eq!(one(r#"{"id":42,"prompt":"x"}"#).expect("ok").id, "42");
        assert_eq!(one(r#"{"id":-7,"prompt":"x"}"#).expect("ok").id, "-7");
        assert_eq!(one(r#"{"id":"q-1","prompt":"x"}"#).expect("ok").id, "q-1");
        assert_eq!(
            one(r#"{"id":null,"prompt":"hi"}"#).expect("ok").id,
            "h660db281bfb80118"
        );
        let e = one(r#"{"id":1.5,"prompt":"x"}"#).expect_err("error");
        assert_eq!(e, r#"data/b3.jsonl:1: "id" must be a string or an integer"#);
        let e = one(r#"{"id":"","prompt":"x"}"#).expect_err("error");
        assert_eq!(e, r#"data/b3.jsonl:1: "id" is empty"#);
    }

    /// One case a line: the prompt line, ` => `, the error message after `path:1: `.
    const ERROR_CASES: &str = r#"
{ => not valid JSON: EOF while parsing an object at column 1
x => not valid JSON: expected value at column 1
[1] => not a JSON object
{"id":"a"} => needs one of "prompt", "messages" or "conversations"
{"prompt":"a","messages":[]} => "messages" and "prompt" both present
{"prompt":"a","messages":[],"conversations":[]} => "prompt", "messages" and "conversations" all present
{"prompt":1} => "prompt" must be a string
{"messages":{}} => "messages" must be a list
{"messages":[]} => "messages" is empty
{"conversations":[]} => "conversations" is empty
{"conversations":[{"from":"human","value":"a"},{"from":"gpt","value":"b"},{"from":"robot","value":"c"}]} => conversations[2].from "robot" is not one of human, user, gpt, assistant, model, system, tool
{"conversations":[{"text":"a"}]} => conversations[0] needs "from" and "value" (or "role" and "content")
{"conversations":[{"from":"human"}]} => conversations[0] has no "value"
{"conversations":[{"from":1,"value":"a"}]} => conversations[0].from must be a string
{"messages":[{"role":"robot","content":"a"}]} => messages[0].role "robot" is not one of system, developer, user, assistant, tool
{"messages":["hi"]} => messages[0] must be an object with "role" and "content"
{"messages":[{"role":"user"}]} => messages[0] has no "content"
{"messages":[{"role":"user","content":null}]} => messages[0].content must be a string or a list of parts
{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}}]}]} => messages[0].content[1] has type "image_url"; only "text" parts are supported
{"messages":[{"role":"user","content":[{"text":"a"}]}]} => messages[0].content[0] has no "type"
{"messages":[{"role":"assistant","content":"a"}]} => no user turn (only assistant turns)
{"messages":[{"role":"user","content":"a"},{"role":"system","content":"b"}]} => last turn is "system", expected "user"
"#;

    #[test]
    fn error_messages() {
        for case in ERROR_CASES.lines().filter(|l| !l.is_empty()) {
            let (line, want) = case.split_once(" => ").expect("case");
            let got = one(line).expect_err(line);
            assert_eq!(got, format!("data/b3.jsonl:1: {want}"), "{line}");
        }
    }

    #[test]
    fn line_numbers_blank_lines_crlf_bom_and_recovery() {
        let text = "\u{feff}{\"prompt\":\"a\"}\r\n\r\n   \nnot json\r\n{\"prompt\":\"b\"}\n\n{\"id\":1}\n{\"prompt\":\"c\"}";
        let got: Vec<_> = reader(text).collect();
        assert_eq!(got.len(), 5);
        let p = got[0].as_ref().expect("ok");
        assert_eq!((p.line, p.messages[0].content.as_str()), (1, "a"));
        let e = got[1].as_ref().expect_err("error");
        assert_eq!((e.line, e.is_io()), (4, false));
        assert_eq!(got[2].as_ref().expect("ok").line, 5);
        assert_eq!(got[3].as_ref().expect_err("error").line, 7);
        let p = got[4].as_ref().expect("ok");
        assert_eq!((p.line, p.messages[0].content.as_str()), (8, "c"));
        // A BOM after line 1 is not stripped: it is not JSON.
        let e = reader("{\"prompt\":\"a\"}\n\u{feff}{\"prompt\":\"b\"}")
            .nth(1)
            .expect("ok")
            .expect_err("error");
        assert_eq!(e.line, 2);
        // CR inside content survives; only the line ending is stripped.
        assert_eq!(
            one("{\"prompt\":\"a\\r\"}\r\n").expect("ok").messages[0].content,
            "a\r"
        );
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let mut bytes = b"{\"prompt\":\"a\"}\n{\"prompt\":\"".to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(b"\"}\n{\"prompt\":\"c\"}\n");
        let got: Vec<_> = PromptReader::new(Cursor::new(bytes), "f".into()).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[1].as_ref().expect_err("error").to_string(),
            "f:2: not valid UTF-8 at byte 12"
        );
        assert_eq!(got[2].as_ref().expect("ok").line, 3);
    }

    #[test]
    fn duplicates_are_counted_not_yielded() {
        let mut text = String::from("{\"id\":\"a\",\"prompt\":\"x\"}\n{\"prompt\":\"hi\"}\n");
        text.push_str("{\"id\":\"a\",\"prompt\":\"y\"}\n{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n");
        for i in 0..1_100 {
            text.push_str(&format!("{{\"id\":{},\"prompt\":\"p\"}}\n", i % 50));
        }
        let mut r = reader(&text);
        let yielded: Vec<_> = r.by_ref().map(|p| p.expect("ok").id).collect();
        assert_eq!(yielded.len(), 2 + 50);
        assert_eq!(r.duplicate_count(), 2 + 1_050);
        assert_eq!(r.duplicates().len(), 1_000);
        let first: Vec<_> = r.duplicates()[..3]
            .iter()
            .map(|d| (d.id.as_str(), d.line, d.first_line))
            .collect();
        let want = [("a", 3, 1), ("h660db281bfb80118", 4, 2), ("0", 55, 5)];
        assert_eq!(first, want);
    }

    #[test]
    fn a_prescanned_reader_skips_the_same_duplicates_without_keeping_ids() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("p.jsonl");
        let mut text = String::new();
        for i in 0..300 {
            text.push_str(&format!("{{\"id\":\"{}\",\"prompt\":\"p\"}}\n", i % 120));
            if i % 97 == 0 {
                text.push_str("not json\n");
            }
        }
        std::fs::write(&path, &text).expect("write");
        let count = count_prompts(&path).expect("count");
        assert_eq!(
            (count.valid, count.duplicates, count.invalid),
            (120, 180, 4)
        );
        assert_eq!(count.duplicate_lines.len(), 180);
        let ids = |r: PromptReader| -> Vec<String> { r.flatten().map(|p| p.id).collect() };
        let plain = ids(PromptReader::open(&path).expect("open"));
        let mut pre = PromptReader::open_prescanned(&path, &count).expect("open");
        let fast: Vec<String> = pre.by_ref().flatten().map(|p| p.id).collect();
        assert_eq!(fast, plain);
        assert_eq!(pre.duplicate_count(), 180);
        assert!(pre.seen.is_empty(), "no id kept");
    }

    #[test]
    fn duplicate_ids_are_told_apart_by_content() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("p.jsonl");
        // (name, second line, counted duplicates, of which with other content)
        let cases = [
            ("a copied line", r#"{"id":"7","prompt":"seven"}"#, 1, 0),
            (
                "an integer id and the same digits as a string",
                r#"{"id":7,"prompt":"seven"}"#,
                1,
                0,
            ),
            (
                "the same id, another prompt",
                r#"{"id":"7","prompt":"eight"}"#,
                1,
                1,
            ),
            (
                "7 and \"7\" with other prompts",
                r#"{"id":7,"prompt":"eight"}"#,
                1,
                1,
            ),
            ("another id", r#"{"id":"8","prompt":"seven"}"#, 0, 0),
        ];
        for (name, second, dups, differing) in cases {
            std::fs::write(
                &path,
                format!("{{\"id\":\"7\",\"prompt\":\"seven\"}}\n{second}\n"),
            )
            .expect("write");
            let c = count_prompts(&path).expect("count");
            assert_eq!((c.duplicates, c.differing), (dups, differing), "{name}");
            if dups > 0 {
                let d = &c.first_duplicates[0];
                assert_eq!(
                    (d.line, d.first_line, d.differs),
                    (2, 1, differing == 1),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn a_file_grown_after_the_count_is_read_as_it_was() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("p.jsonl");
        let cases: [(&str, &str, Vec<&str>); 3] = [
            (
                "new ids, a reused id and a bad line appended",
                "{\"id\":\"x\",\"prompt\":\"late\"}\n{\"id\":\"a\",\"prompt\":\"again\"}\nnot json\n",
                vec!["a", "b"],
            ),
            (
                "an appended line without its newline yet",
                "{\"id\":\"y\"",
                vec!["a", "b"],
            ),
            ("nothing appended", "", vec!["a", "b"]),
        ];
        for (name, appended, want) in cases {
            std::fs::write(
                &path,
                "{\"id\":\"a\",\"prompt\":\"p\"}\n{\"id\":\"b\",\"prompt\":\"q\"}\n",
            )
            .expect("write");
            let count = count_prompts(&path).expect("count");
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .expect("open");
            std::io::Write::write_all(&mut f, appended.as_bytes()).expect("append");
            let items: Vec<Result<Prompt, PromptError>> =
                PromptReader::open_prescanned(&path, &count)
                    .expect("open")
                    .collect();
            assert!(items.iter().all(Result::is_ok), "{name}: no bad line read");
            let ids: Vec<String> = items.into_iter().flatten().map(|p| p.id).collect();
            assert_eq!(ids, want, "{name}");
        }
    }

    #[test]
    fn huge_line() {
        let big = "x".repeat(1 << 20);
        let text = format!("{{\"prompt\":\"{big}\"}}\n{{\"prompt\":\"small\"}}\n");
        let got: Vec<_> = reader(&text).map(|p| p.expect("ok")).collect();
        assert_eq!(got[0].messages[0].content.len(), 1 << 20);
        assert_eq!(
            (got[1].line, got[1].messages[0].content.as_str()),
            (2, "small")
        );
    }

    #[test]
    fn io_errors() {
        let e = PromptReader::open(Path::new("/nonexistent/b3.jsonl"))
            .err()
            .expect("open fails");
        assert!(e.is_io());
        assert!(
            e.to_string()
                .starts_with("cannot read /nonexistent/b3.jsonl: "),
            "{e}"
        );

        struct Failing(u8);
        impl std::io::Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.0 += 1;
                if self.0 == 1 {
                    let line = b"{\"prompt\":\"a\"}\n";
                    buf[..line.len()].copy_from_slice(line);
                    return Ok(line.len());
                }
                Err(std::io::Error::other("disk on fire"))
            }
        }
        let got: Vec<_> = PromptReader::new(BufReader::new(Failing(0)), "f".into()).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[1].as_ref().expect_err("error").to_string(),
            "cannot read f: disk on fire (after line 1)"
        );
    }

    #[test]
    fn shards() {
        assert_eq!(parse_shard("0/4"), Ok((0, 4)));
        assert_eq!(parse_shard("3/4"), Ok((3, 4)));
        assert_eq!(
            parse_shard("3/2"),
            Err("--shard 3/2: k must be in 0..n (0-based)".into())
        );
        assert_eq!(
            parse_shard("0/0"),
            Err("--shard 0/0: n must be at least 1".into())
        );
        assert!(
            parse_shard("1")
                .expect_err("error")
                .contains("expected k/n")
        );
        assert!(parse_shard("-1/2").is_err());
        assert_eq!(shard_of("anything", 1), 0);
        assert_eq!(shard_of("anything", 0), 0);
        assert_eq!(shard_of("q-1", 7), shard_of("q-1", 7));
        for n in [2u32, 3, 4, 8, 16] {
            let mut counts = vec![0u32; n as usize];
            for i in 0..10_000 {
                counts[shard_of(&format!("q{i}"), n) as usize] += 1;
                let id = content_id(&[Message::user(format!("prompt {i}"))]);
                counts[shard_of(&id, n) as usize] += 1;
            }
            let expect = 20_000 / n;
            for c in &counts {
                assert!(c.abs_diff(expect) < expect / 10, "n={n} {counts:?}");
            }
        }
    }

    #[test]
    fn fixture_files() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/prompts");
        let mut all = Vec::new();
        for file in ["prompt.jsonl", "messages.jsonl", "sharegpt.jsonl"] {
            let path = dir.join(file);
            let c = count_prompts(&path).expect("count");
            assert_eq!((c.valid, c.invalid, c.duplicates), (3, 0, 1), "{file}");
            assert_eq!(c.duplicate_lines.len(), 1, "{file}");
            let reader = PromptReader::open(&path).expect("open");
            all.extend(reader.map(|p| p.expect("valid")));
        }
        let lines: Vec<_> = all.iter().map(|p| p.line).collect();
        assert_eq!(lines, [1, 2, 4, 1, 2, 3, 1, 2, 3]);
        assert!(
            all.iter()
                .all(|p| p.messages.last().is_some_and(|m| m.role == "user"))
        );
        let (ids, turns): (Vec<_>, Vec<_>) = all
            .iter()
            .map(|p| (p.id.as_str(), p.messages.len()))
            .unzip();
        assert_eq!(&ids[..2], ["p-1", "2"]);
        assert_eq!(turns, [1, 1, 1, 2, 3, 1, 2, 3, 1]);
        assert_eq!(
            all[4].messages[2].content,
            "Summarise this:\nThe quick brown fox jumps over the lazy dog."
        );
        assert_eq!(all[6].messages[0], Message::system("Answer in French."));
    }
}
