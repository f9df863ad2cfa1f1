//! Server-Sent Events framing over a byte stream: the `data` of each event, nothing else
//! (OpenRouter and OpenAI-compatible servers send no `event`/`id`/`retry` that matters here).
//!
//! Written for the hot path of thousands of streams: lines are found with `memchr`, an event
//! with one `data:` line (every OpenRouter chunk) is handed out as a slice of the read buffer
//! with no copy, and consumed bytes are dropped in bulk, not per line. Measured against
//! eventsource-stream, which re-splits its buffer on every line: see BENCHMARKS.md.
//!
//! Framing follows the WHATWG rules: lines end in LF, CRLF or CR; a line starting with `:` is a
//! comment (OpenRouter's `: OPENROUTER PROCESSING` keep-alives); `data:` lines of one event are
//! joined with LF; a blank line ends the event; an unfinished event at the end of the stream is
//! dropped. Bytes are checked as UTF-8 per event, so a character split across reads is fine.

/// What a data event failed on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid UTF-8 in an event: {0}")]
pub struct SseError(pub std::str::Utf8Error);

/// Incremental SSE decoder: [`SseDecoder::push`] bytes as they arrive, then take events with
/// [`SseDecoder::next_event`] until it returns `None`.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buf: Vec<u8>,
    /// Start of the first unconsumed line.
    pos: usize,
    /// The current event's only data line so far, as a range of `buf` (no copy yet).
    single: Option<(usize, usize)>,
    /// The current event's data once it has more than one line.
    joined: Vec<u8>,
    multi: bool,
    /// The event handed out last lives in `joined` (cleared on the next call).
    handed_joined: bool,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        // Drop consumed bytes, unless the current event still points into them.
        let keep_from = self.single.map_or(self.pos, |(s, _)| s.min(self.pos));
        if keep_from > 0 && (keep_from == self.buf.len() || keep_from >= self.buf.len() / 2) {
            self.buf.drain(..keep_from);
            self.pos -= keep_from;
            if let Some((s, e)) = self.single.as_mut() {
                *s -= keep_from;
                *e -= keep_from;
            }
        }
        self.buf.extend_from_slice(chunk);
    }

    /// Gives back a large buffer once everything in it is consumed. Call it before waiting
    /// for the next read: a fast server can hand over hundreds of kilobytes at once, and
    /// thousands of idle streams must not each keep such a buffer.
    pub fn release_idle(&mut self) {
        const KEEP: usize = 16 * 1024;
        if self.pos == self.buf.len() && self.single.is_none() && self.buf.capacity() > KEEP {
            self.buf = Vec::new();
            self.pos = 0;
        }
        if self.joined.capacity() > KEEP && !self.multi {
            self.joined = Vec::new();
        }
    }

    /// Bytes buffered and not yet consumed (for memory accounting and tests).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The data of the next complete event, if one is buffered.
    pub fn next_event(&mut self) -> Option<Result<&str, SseError>> {
        if self.handed_joined {
            self.joined.clear();
            self.handed_joined = false;
        }
        loop {
            let rest = &self.buf[self.pos..];
            let i = memchr::memchr2(b'\n', b'\r', rest)?;
            let (line_end, next) = if rest[i] == b'\r' {
                match rest.get(i + 1) {
                    Some(b'\n') => (i, i + 2),
                    Some(_) => (i, i + 1),
                    // A CR at the end of what we have: wait to see whether LF follows.
                    None => return None,
                }
            } else {
                (i, i + 1)
            };
            let start = self.pos;
            let end = start + line_end;
            self.pos = start + next;
            if start == end {
                // Blank line: dispatch the event, if it has data.
                if self.multi {
                    self.multi = false;
                    self.single = None;
                    self.handed_joined = true;
                    return Some(std::str::from_utf8(&self.joined).map_err(SseError));
                }
                if let Some((s, e)) = self.single.take() {
                    return Some(std::str::from_utf8(&self.buf[s..e]).map_err(SseError));
                }
                continue;
            }
            let line = &self.buf[start..end];
            if line[0] == b':' {
                continue;
            }
            let (field, value_at) = match memchr::memchr(b':', line) {
                Some(c) => (
                    &line[..c],
                    c + 1 + usize::from(line.get(c + 1) == Some(&b' ')),
                ),
                None => (line, line.len()),
            };
            if field != b"data" {
                continue;
            }
            let (vs, ve) = (start + value_at.min(line.len()), end);
            if self.multi {
                self.joined.push(b'\n');
                self.joined.extend_from_slice(&self.buf[vs..ve]);
            } else if let Some((s, e)) = self.single.take() {
                self.multi = true;
                self.joined.clear();
                self.joined.extend_from_slice(&self.buf[s..e]);
                self.joined.push(b'\n');
                self.joined.extend_from_slice(&self.buf[vs..ve]);
            } else {
                self.single = Some((vs, ve));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<String> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c);
            while let Some(ev) = d.next_event() {
                out.push(ev.expect("utf-8").to_string());
            }
        }
        out
    }

    #[test]
    fn single_and_multi_line_events_comments_and_line_endings() {
        let text = b": OPENROUTER PROCESSING\n\ndata: {\"a\":1}\n\ndata:x\r\ndata: y\r\n\r\nevent: e\nid: 3\nretry: 10\ndata:  two spaces\n\ndata\n\n\rdata: cr\r\rdata: [DONE]\n\n";
        let want = vec!["{\"a\":1}", "x\ny", " two spaces", "", "cr", "[DONE]"];
        assert_eq!(all(&[text]), want);
        // Every split, down to single bytes, gives the same events.
        for cut in 1..text.len() {
            assert_eq!(all(&[&text[..cut], &text[cut..]]), want, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(all(&bytes), want);
    }

    #[test]
    fn utf8_split_across_reads_and_invalid_utf8() {
        let text = "data: héllo ✓\n\n".as_bytes();
        for cut in 1..text.len() {
            assert_eq!(all(&[&text[..cut], &text[cut..]]), vec!["héllo ✓"]);
        }
        let mut d = SseDecoder::new();
        d.push(b"data: \xff\n\n");
        assert!(d.next_event().expect("event").is_err());
    }

    #[test]
    fn unfinished_event_is_not_dispatched_and_buffer_is_reclaimed() {
        let mut d = SseDecoder::new();
        d.push(b"data: partial");
        assert!(d.next_event().is_none());
        d.push(b"\n");
        assert!(d.next_event().is_none(), "no blank line yet");
        d.push(b"\n");
        assert_eq!(
            d.next_event().map(|r| r.map(str::to_string)),
            Some(Ok("partial".into()))
        );
        for _ in 0..10_000 {
            d.push(b"data: {\"choices\":[]}\n\n");
            while d.next_event().is_some() {}
        }
        assert_eq!(d.buffered(), 0);
        assert!(
            d.buf.capacity() < 4096,
            "consumed bytes are dropped: {}",
            d.buf.capacity()
        );
    }
}
