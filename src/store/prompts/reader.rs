//! The streaming reader of a prompt file, and the quick counting pass over one.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use serde_json::Value;

use super::*;

/// At most this many duplicates are kept in [`PromptReader::duplicates`]; all are counted.
const MAX_DUPLICATES_KEPT: usize = 1_000;

/// Streams prompts from a JSONL source. Bad lines yield an error and the iteration goes on with the
/// next line; a read failure yields one error (`line == 0`) and ends the iteration.
pub struct PromptReader {
    reader: Box<dyn BufRead + Send>,
    /// The dataset's names for the row's fields.
    pub(super) fields: PromptFields,
    /// The file's own bytes read so far (compressed ones, for a compressed file).
    file_bytes: std::sync::Arc<std::sync::atomic::AtomicU64>,
    path: String,
    line: u64,
    buf: Vec<u8>,
    /// Ids seen so far, as 128-bit keyed hashes (16 bytes an id instead of a String: a file of
    /// millions of prompts is read in one pass with flat memory per line); value: first line.
    pub(super) seen: HashMap<u128, (u64, u64)>,
    /// Every duplicate line found (for [`count_prompts`]).
    duplicate_lines: LineRuns,
    /// The last valid line's bytes (swapped with `buf`, not copied) and what it was: a line
    /// equal to it is the same prompt again, counted without parsing it (a file of millions
    /// of copies of one line, reliability-probe-4 N4).
    last: Vec<u8>,
    last_was: Option<Duplicate>,
    seen_keys: (std::hash::RandomState, std::hash::RandomState),
    /// Set by [`PromptReader::open_prescanned`]: the duplicate lines and the place in them,
    /// instead of `seen`.
    prescanned: Option<(LineRuns, usize)>,
    duplicates: Vec<Duplicate>,
    duplicate_count: u64,
    differing: u64,
    /// Rows whose id came from the id field (not from their content).
    ids_given: std::cell::Cell<u64>,
    /// The lines' bytes the count read (set by [`PromptReader::open_prescanned`]): a file
    /// that ends before them changed since the start.
    counted_bytes: Option<u64>,
    /// Bytes consumed so far.
    bytes: u64,
    done: bool,
    /// The lines read so far, hashed in blocks: the count's fingerprint, or the check of it
    /// (`counted`, set by [`PromptReader::open_prescanned`]).
    blocks: super::fingerprint::Blocks,
    counted: Option<super::Fingerprint>,
    /// The lines read so far as one stable hash, for the manifest (and checked at an earlier
    /// run's length).
    prefix: super::prefix::Prefix,
}

impl PromptReader {
    /// Reads `path` (JSONL, plain or compressed) with harvest's own field names.
    pub fn open(path: &Path) -> Result<Self, PromptError> {
        Self::open_as(path, &PromptFields::default())
    }

    /// Reads `path` (JSONL, plain or compressed: see [`source`](super::source)), its rows'
    /// fields named as `fields` says.
    pub fn open_as(path: &Path, fields: &PromptFields) -> Result<Self, PromptError> {
        let shown = path.display().to_string();
        match super::source::open_lines(path) {
            Ok((lines, file_bytes, _)) => {
                let mut r = Self::new(lines, shown);
                r.fields = fields.clone();
                r.file_bytes = file_bytes;
                Ok(r)
            }
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
            fields: PromptFields::default(),
            file_bytes: Default::default(),
            path: path_for_messages,
            line: 0,
            buf: Vec::new(),
            seen: HashMap::new(),
            duplicate_lines: LineRuns::default(),
            last: Vec::new(),
            last_was: None,
            seen_keys: Default::default(),
            prescanned: None,
            duplicates: Vec::new(),
            duplicate_count: 0,
            differing: 0,
            ids_given: std::cell::Cell::new(0),
            counted_bytes: None,
            bytes: 0,
            done: false,
            blocks: Default::default(),
            counted: None,
            prefix: Default::default(),
        }
    }

    /// Opens a file already read by [`count_prompts`]: its duplicate lines are skipped by
    /// number, so a long run keeps no id per prompt (the file must not change meanwhile).
    pub fn open_prescanned(
        path: &Path,
        fields: &PromptFields,
        count: &PromptCount,
    ) -> Result<Self, PromptError> {
        use std::io::Read;
        let shown = path.display().to_string();
        // The file as the count saw it: its length then is the end, whatever is appended since
        // (the lines' bytes, decompressed).
        let (lines, file_bytes, _) = super::source::open_lines(path).map_err(|e| PromptError {
            path: shown.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        let mut r = Self::new(
            std::io::BufReader::with_capacity(1 << 16, lines.take(count.bytes)),
            shown,
        );
        r.fields = fields.clone();
        r.file_bytes = file_bytes;
        r.prescanned = Some((count.duplicate_lines.clone(), 0));
        r.counted_bytes = Some(count.bytes);
        r.counted = Some(count.fingerprint.clone());
        Ok(r)
    }

    /// The file ends before the bytes the count read: it was rewritten or cut since the start
    /// (a generator's `>` while a run reads it, reliability-probe-4 N5). A read failure, not a
    /// bad line: the run stops rather than reject a prompt and call the dataset done.
    fn ended_early(&self) -> Option<PromptError> {
        let counted = self.counted_bytes?;
        (self.bytes < counted).then(|| PromptError {
            path: self.path.clone(),
            line: 0,
            message: format!(
                "the file changed since the start: it ends at byte {} of the {counted} counted \
                 ({})",
                self.bytes,
                self.place()
            ),
        })
    }

    /// The lines just read differ from the count's at byte `at`: the file was rewritten in
    /// place since the start. Stops the read, as a file cut short does.
    fn rewritten(&mut self, at: u64) -> PromptError {
        self.done = true;
        PromptError {
            path: self.path.clone(),
            line: 0,
            message: format!(
                "the file changed since the start: its lines before byte {at} are not the ones \
                 the count read ({}); a file rewritten while a run reads it (a generator's `>`) \
                 would send its new prompts under the old ids. Write a new file, and run again",
                self.place()
            ),
        }
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

    /// Where reading stopped, for an error: after which line, or before the first.
    fn place(&self) -> String {
        match self.line {
            0 => "before its first line".to_string(),
            n => format!("after line {n}"),
        }
    }

    /// Counts a duplicate line.
    fn count_duplicate(&mut self, dup: &Duplicate) {
        self.duplicate_count += 1;
        self.differing += u64::from(dup.differs);
        self.duplicate_lines.push(dup.line);
        if self.duplicates.len() < MAX_DUPLICATES_KEPT {
            self.duplicates.push(dup.clone());
        }
    }

    /// Keeps the valid line just read (in `buf`) as the last one, and what it was.
    fn remember_last(&mut self, was: Duplicate) {
        std::mem::swap(&mut self.buf, &mut self.last);
        self.last_was = Some(was);
    }

    /// The line in `buf` is byte for byte the last valid line (blank and bad lines between
    /// change nothing): the same prompt again, the same id and conversation, counted as a
    /// duplicate of the same first line without parsing it.
    fn repeats_last(&mut self) -> bool {
        let Some(was) = &self.last_was else {
            return false;
        };
        if self.buf != self.last {
            return false;
        }
        self.duplicate_count += 1;
        self.differing += u64::from(was.differs);
        self.duplicate_lines.push(self.line);
        if self.duplicates.len() < MAX_DUPLICATES_KEPT {
            self.duplicates.push(Duplicate {
                id: was.id.clone(),
                line: self.line,
                first_line: was.first_line,
                differs: was.differs,
            });
        }
        true
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
        let mut messages = parse_messages(&obj, &self.fields)?;
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
        let key = self.fields.id_key();
        if obj.get(key).is_some_and(|v| !v.is_null()) {
            self.ids_given.set(self.ids_given.get() + 1);
        }
        let id = match obj.get(key) {
            None | Some(Value::Null) => content_id(&messages),
            Some(Value::String(s)) if s.is_empty() => return Err(format!("\"{key}\" is empty")),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            Some(_) => return Err(format!("\"{key}\" must be a string or an integer")),
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
            match super::line::read_capped_line(
                &mut *self.reader,
                &mut self.buf,
                super::line::MAX_LINE_BYTES,
            ) {
                Ok((0, _)) => {
                    self.done = true;
                    if let Some(e) = self.ended_early() {
                        return Some(Err(e));
                    }
                    if let Some(at) = self.blocks.finish(self.counted.as_ref()) {
                        return Some(Err(self.rewritten(at)));
                    }
                }
                Ok((n, true)) => {
                    self.bytes += n as u64;
                    self.prefix.line(&self.buf, n as u64);
                    if let Some(at) = self.blocks.line(&self.buf, self.counted.as_ref()) {
                        return Some(Err(self.rewritten(at)));
                    }
                    self.line += 1;
                    return Some(Err(self.error(format!(
                        "longer than {} MiB ({n} bytes): no prompt a model takes",
                        super::line::MAX_LINE_BYTES >> 20
                    ))));
                }
                Ok((n, false)) => {
                    self.bytes += n as u64;
                    self.prefix.line(&self.buf, n as u64);
                    if let Some(at) = self.blocks.line(&self.buf, self.counted.as_ref()) {
                        return Some(Err(self.rewritten(at)));
                    }
                    if self.buf.last() != Some(&b'\n')
                        && let Some(e) = self.ended_early()
                    {
                        // A line cut where the file now ends: the file changed, not a bad line.
                        self.done = true;
                        return Some(Err(e));
                    }
                    self.line += 1;
                    if self.buf.last() == Some(&b'\n') {
                        self.buf.pop();
                        if self.buf.last() == Some(&b'\r') {
                            self.buf.pop();
                        }
                    }
                    if let Some((skip, at)) = self.prescanned.as_mut() {
                        if skip.holds(self.line, at) {
                            self.duplicate_count += 1;
                            continue;
                        }
                    } else if self.repeats_last() {
                        continue;
                    }
                    match self.parse_line() {
                        Ok(None) => {}
                        Ok(Some(prompt)) if self.prescanned.is_some() => return Some(Ok(prompt)),
                        Ok(Some(prompt)) => {
                            let key = self.id_key(&prompt.id);
                            let content = self.content_key(&prompt.messages);
                            if let Some(&(first_line, first_content)) = self.seen.get(&key) {
                                let dup = Duplicate {
                                    id: prompt.id,
                                    line: prompt.line,
                                    first_line,
                                    differs: content != first_content,
                                };
                                self.count_duplicate(&dup);
                                self.remember_last(dup);
                                continue;
                            }
                            self.seen.insert(key, (prompt.line, content));
                            self.remember_last(Duplicate {
                                id: prompt.id.clone(),
                                line: prompt.line,
                                first_line: prompt.line,
                                differs: false,
                            });
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
                        message: format!("{e} ({})", self.place()),
                    }));
                }
            }
        }
        None
    }
}

/// A quick streaming pass over a prompt file. A read failure is an error; bad lines are counted.
pub fn count_prompts(path: &Path) -> Result<PromptCount, PromptError> {
    count_prompts_in_shard(path, &PromptFields::default(), None)
}

/// [`count_prompts`], also counting the prompts of shard `k` of `n`: everything the start of a
/// run needs from a file, in one read.
pub fn count_prompts_in_shard(
    path: &Path,
    fields: &PromptFields,
    shard: Option<(u32, u32)>,
) -> Result<PromptCount, PromptError> {
    count_prompts_reporting(path, fields, shard, &std::sync::atomic::AtomicU64::new(0))
}

/// [`count_prompts_in_shard`], adding the file's bytes it reads to `read` as it goes (every
/// 4,096 lines; a compressed file's own bytes), for a progress line over files of millions of
/// prompts.
pub fn count_prompts_reporting(
    path: &Path,
    fields: &PromptFields,
    shard: Option<(u32, u32)>,
    read: &std::sync::atomic::AtomicU64,
) -> Result<PromptCount, PromptError> {
    count_prompts_checking(path, fields, shard, read, None)
}

/// [`count_prompts_reporting`], also keeping the hash of the lines at `earlier` bytes (the
/// length an earlier run's count read, from the manifest: [`PromptMark::check`]).
pub fn count_prompts_checking(
    path: &Path,
    fields: &PromptFields,
    shard: Option<(u32, u32)>,
    read: &std::sync::atomic::AtomicU64,
    earlier: Option<u64>,
) -> Result<PromptCount, PromptError> {
    use std::sync::atomic::Ordering;
    let mut reader = PromptReader::open_as(path, fields)?;
    reader.prefix = super::prefix::Prefix::checking(earlier);
    let mut count = PromptCount::default();
    let mut reported = 0u64;
    let mut report = |reader: &PromptReader| {
        let now = reader.file_bytes.load(Ordering::Relaxed);
        read.fetch_add(now.saturating_sub(reported), Ordering::Relaxed);
        reported = reported.max(now);
    };
    while let Some(item) = reader.next() {
        if reader.line % 4096 == 0 {
            report(&reader);
        }
        match item {
            Ok(p) => {
                count.valid += 1;
                if !p.messages.iter().any(|m| m.role == "system") {
                    count.without_system += 1;
                }
                if p.messages.iter().any(|m| m.role == "assistant") {
                    count.with_assistant_turns += 1;
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
    report(&reader);
    count.ids_given = reader.ids_given.get();
    count.duplicates = reader.duplicate_count();
    count.duplicate_lines = reader.duplicate_lines;
    count.first_duplicates = reader.duplicates;
    count.differing = reader.differing;
    count.bytes = reader.bytes;
    count.fingerprint = std::mem::take(&mut reader.blocks).fingerprint();
    count.prefix = reader.prefix.finish();
    Ok(count)
}
