//! The common chunk's fast path (issue #36, item 3). Every token of a stream comes as a chunk
//! that repeats the same bytes up to its delta (`{"id":...,"model":...,"provider":...,
//! "choices":[{"index":0,"delta":`) and ends in fields that are all `null`. Once a chunk of the
//! stream was parsed in full, a chunk that starts with exactly its bytes up to the delta says
//! the same id, model and provider; only its delta is parsed, and its end is checked byte by
//! byte to hold nothing but `null` fields. Anything else (another prefix, a finish reason,
//! usage, an error, a second choice, whitespace, an unknown field after the delta) goes to the
//! full parse, which decides exactly as it did before. Measured: `cargo bench --bench
//! stream_parse` (BENCHMARKS.md).

use memchr::memmem;

use super::chunk::Delta;

/// Where a stream's chunks reach their delta, learnt from a chunk parsed in full.
#[derive(Debug)]
pub(super) struct ChunkPrefix {
    /// The chunk's bytes up to and including `"delta":`.
    bytes: Box<str>,
    /// The prefix has a top-level `usage` key: a `"usage":null` after the choices would then
    /// be a duplicate, which the full parse refuses.
    has_usage: bool,
}

/// Where the choice's delta begins in the chunks OpenRouter (and vLLM, SGLang) send.
const TO_DELTA: &str = "\"choices\":[{\"index\":0,\"delta\":";

/// Fields after the delta, inside the choice, that may be `null` in a chunk of the fast path:
/// `null` in each is what the full parse reads as absent.
const CHOICE_NULLS: [&str; 4] = [
    "finish_reason",
    "native_finish_reason",
    "logprobs",
    "matched_stop",
];

/// Top-level fields after the choices that may be `null` (SGLang sends `"usage":null`).
const TOP_NULLS: [&str; 2] = ["usage", "system_fingerprint"];

impl ChunkPrefix {
    /// The prefix of `data`, a chunk the full parse read as one choice with a delta and no
    /// usage or error (so its bytes up to the delta say nothing but the id, model and
    /// provider). `None` when the chunk has no such prefix.
    pub(super) fn learn(data: &str) -> Option<ChunkPrefix> {
        let at = memmem::find(data.as_bytes(), TO_DELTA.as_bytes())?;
        let bytes: Box<str> = data[..at + TO_DELTA.len()].into();
        let has_usage = memmem::find(bytes.as_bytes(), b"\"usage\":").is_some();
        Some(ChunkPrefix { bytes, has_usage })
    }

    /// `data` starts with this prefix.
    pub(super) fn starts(&self, data: &str) -> bool {
        data.starts_with(&*self.bytes)
    }

    /// The delta of `data` when it is a chunk of the fast path: this prefix, a delta, then
    /// only `null` fields to its end.
    pub(super) fn delta<'a>(&self, data: &'a str) -> Option<Delta<'a>> {
        let rest = data.strip_prefix(&*self.bytes)?;
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Delta<'a>>();
        let delta = values.next()?.ok()?;
        let tail = &rest.as_bytes()[values.byte_offset()..];
        self.only_nulls(tail).then_some(delta)
    }

    /// `tail` is `,"k":null`* `}]` `,"k":null`* `}` and nothing more: the choice's fields after
    /// the delta, its end, the chunk's fields after the choices, its end. Each field at most
    /// once (the full parse refuses a duplicate of a field it reads).
    fn only_nulls(&self, tail: &[u8]) -> bool {
        let mut rest = tail;
        let mut seen: u8 = 0;
        for (allowed, close) in [(&CHOICE_NULLS[..], &b"}]"[..]), (&TOP_NULLS[..], &b"}"[..])] {
            while let Some(after) = rest.strip_prefix(b",\"") {
                let Some(end) = memchr::memchr(b'"', after) else {
                    return false;
                };
                let key = &after[..end];
                let Some(i) = allowed.iter().position(|k| k.as_bytes() == key) else {
                    return false;
                };
                // One bit per field: the choice's first, then the chunk's.
                let bit = 1u8 << (i + if close == b"}" { CHOICE_NULLS.len() } else { 0 });
                if seen & bit != 0 || (key == b"usage" && self.has_usage) {
                    return false;
                }
                seen |= bit;
                let Some(r) = after[end + 1..].strip_prefix(b":null") else {
                    return false;
                };
                rest = r;
            }
            let Some(r) = rest.strip_prefix(close) else {
                return false;
            };
            rest = r;
        }
        rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openrouter::StreamAccumulator;
    use std::time::Duration;

    const FIRST: &str = r#"{"id":"gen-1","object":"chat.completion.chunk","created":1,"model":"moonshotai/kimi-k2.5","provider":"Chutes","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}"#;

    fn chunk(delta: &str, tail: &str) -> String {
        format!(
            r#"{{"id":"gen-1","object":"chat.completion.chunk","created":1,"model":"moonshotai/kimi-k2.5","provider":"Chutes","choices":[{{"index":0,"delta":{delta}{tail}"#
        )
    }

    #[test]
    fn the_common_chunk_is_read_from_its_delta_and_anything_else_is_not() {
        let p = ChunkPrefix::learn(FIRST).expect("a prefix");
        let ok = |delta: &str, tail: &str| p.delta(&chunk(delta, tail)).is_some();
        let content = r#"{"content":" there"}"#;
        let cases: [(&str, &str, &str, bool); 14] = [
            ("content", content, r#","finish_reason":null}]}"#, true),
            (
                "every null field",
                content,
                r#","finish_reason":null,"native_finish_reason":null,"logprobs":null,"matched_stop":null}],"usage":null,"system_fingerprint":null}"#,
                true,
            ),
            ("no field after the delta", content, "}]}", true),
            (
                "escaped text",
                r#"{"content":"a \"quote\"\n"}"#,
                "}]}",
                true,
            ),
            (
                "a finish reason",
                content,
                r#","finish_reason":"stop"}]}"#,
                false,
            ),
            ("usage", content, r#"}],"usage":{"cost":1}}"#, false),
            (
                "a duplicate field",
                content,
                r#","logprobs":null,"logprobs":null}]}"#,
                false,
            ),
            ("an error", content, r#","error":null}]}"#, false),
            (
                "a second choice",
                content,
                r#"},{"index":1,"delta":{}}]}"#,
                false,
            ),
            ("whitespace", content, r#", "finish_reason":null}]}"#, false),
            ("bytes after the end", content, "}]}x", false),
            ("cut short", content, "}]", false),
            ("a null delta", "null", "}]}", false),
            ("a broken delta", r#"{"content":}"#, "}]}", false),
        ];
        for (name, delta, tail, want) in cases {
            assert_eq!(ok(delta, tail), want, "{name}");
        }
        // Another provider's bytes before the delta: the full parse reads them.
        assert!(
            p.delta(&chunk(content, "}]}").replace("Chutes", "Kimi"))
                .is_none()
        );
    }

    #[test]
    fn a_prefix_with_usage_takes_no_usage_after_the_choices() {
        let with_usage = FIRST.replace(r#""provider""#, r#""usage":null,"provider""#);
        let p = ChunkPrefix::learn(&with_usage).expect("a prefix");
        let next = with_usage.replace(
            r#""finish_reason":null,"native_finish_reason":null,"logprobs":null}]}"#,
            r#""finish_reason":null}],"usage":null}"#,
        );
        assert!(p.delta(&next).is_none(), "usage twice");
        let plain = with_usage.replace(
            r#","finish_reason":null,"native_finish_reason":null,"logprobs":null}]}"#,
            "}]}",
        );
        assert!(p.delta(&plain).is_some());
    }

    #[test]
    fn a_chunk_without_the_usual_choice_has_no_prefix() {
        assert!(ChunkPrefix::learn(r#"{"choices":[{"delta":{},"index":0}]}"#).is_none());
    }

    /// What feeding `events` gives, each result as text: the fast path of the common chunk on,
    /// or every chunk parsed in full. Also how many chunks the fast path read.
    fn fed(events: &[&str], fast: bool) -> (Vec<String>, String, usize) {
        let mut acc = StreamAccumulator::new(true);
        let mut results = Vec::new();
        let mut fast_reads = 0;
        for e in events {
            let before = acc
                .prefix
                .as_ref()
                .and_then(|p| p.delta(e.trim()))
                .is_some();
            fast_reads += usize::from(before);
            results.push(format!("{:?}", acc.feed(e)));
            if !fast {
                acc.prefix = None;
            }
        }
        (
            results,
            format!("{:?}", acc.finish(None, Duration::ZERO)),
            fast_reads,
        )
    }

    /// The fast path changes nothing any field says: every recorded OpenRouter stream, and the
    /// simulator's own, fed both ways, give the same result chunk by chunk and the same
    /// completion or error.
    #[test]
    fn the_common_chunks_fast_path_reads_every_recorded_stream_as_the_full_parse_does() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/recorded");
        let mut streams: Vec<(String, String)> = std::fs::read_dir(dir)
            .expect("the recorded streams")
            .filter_map(|e| {
                let path = e.ok()?.path();
                (path.extension()? == "sse").then(|| {
                    let text = std::fs::read_to_string(&path).expect("a recorded stream");
                    (path.display().to_string(), text)
                })
            })
            .collect();
        let w =
            crate::sim::generate::ChunkWriter::new("gen-1", 1, "moonshotai/kimi-k2.5", "Chutes");
        let mut sim = String::new();
        w.reasoning("The user \\\"asks\\\"", &mut sim);
        w.reasoning(" twice", &mut sim);
        w.content("Hello", &mut sim);
        w.content(" \\n there", &mut sim);
        w.finish("stop", &mut sim);
        w.usage((10, 0), 4, 2, "0.0001", &mut sim);
        sim.push_str("data: [DONE]\n\n");
        streams.push(("the simulator".into(), sim));
        assert!(streams.len() > 10, "{} streams", streams.len());
        let mut fast_reads = 0;
        for (name, text) in &streams {
            let mut sse = crate::openrouter::sse::SseDecoder::new();
            sse.push(text.as_bytes());
            let mut events = Vec::new();
            while let Some(e) = sse.next_event() {
                events.push(e.expect("UTF-8").to_string());
            }
            let events: Vec<&str> = events.iter().map(String::as_str).collect();
            let (fast, fast_end, n) = fed(&events, true);
            let (full, full_end, _) = fed(&events, false);
            assert_eq!(fast, full, "{name}");
            assert_eq!(fast_end, full_end, "{name}");
            fast_reads += n;
        }
        assert!(fast_reads > 100, "the fast path read {fast_reads} chunks");
    }

    /// A server whose chunks never fit the fast path (here a field it does not know after the
    /// delta) stops being tried after a few chunks, and reads as the full parse does.
    #[test]
    fn a_stream_whose_chunks_never_fit_stops_trying_the_fast_path() {
        let events: Vec<String> = (0..12)
            .map(|i| {
                chunk(
                    &format!(r#"{{"content":"t{i}"}}"#),
                    r#","stop_reason":null}]}"#,
                )
            })
            .collect();
        let events: Vec<&str> = events.iter().map(String::as_str).collect();
        let mut acc = StreamAccumulator::new(false);
        for e in &events {
            acc.feed(e).expect("a chunk");
        }
        assert!(acc.prefix.is_none(), "given up");
        assert_eq!(
            acc.fast_misses,
            crate::openrouter::response::FAST_PATH_GIVES_UP
        );
        let (fast, _, hits) = fed(&events, true);
        let (full, _, _) = fed(&events, false);
        assert_eq!((fast, hits), (full, 0));
        // OpenRouter's own streams keep it: they miss only at their end.
        let fits: Vec<String> = (0..12)
            .map(|i| chunk(&format!(r#"{{"content":"t{i}"}}"#), "}]}"))
            .collect();
        let mut acc = StreamAccumulator::new(false);
        for e in &fits {
            acc.feed(e).expect("a chunk");
        }
        assert!(acc.prefix.is_some());
        assert_eq!(acc.fast_misses, 0);
    }
}
