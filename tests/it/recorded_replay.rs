//! Replays every real OpenRouter response body listed in `tests/fixtures/recorded/manifest.json`
//! through harvest's own parsing code, and checks what the manifest's `expect` says of it:
//! SSE streams through [`SseDecoder`] and [`StreamAccumulator`] (whole, byte by byte and in
//! random splits, all alike), non-streaming 200 bodies through [`parse_completion_body`], and
//! error bodies through [`ApiError::from_response_body`].
//!
//! The bodies are not harvest's: they are other projects' recordings, taken from the HTTP
//! cassettes of charmbracelet/fantasy, pydantic/pydantic-ai and simonw/llm-openrouter. See
//! `tests/fixtures/recorded/README.md` for where each one came from and under which license.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::Value;

use harvest::domain::Usd;
use harvest::openrouter::response::parse_completion_body;
use harvest::openrouter::sse::SseDecoder;
use harvest::openrouter::{ApiError, Completion, ErrorKind, StreamAccumulator, UsageSource};

/// Fewer entries than this means the manifest lost fixtures: fail rather than pass on little.
const MIN_ENTRIES: usize = 15;
/// Random splits per stream, besides the whole body and byte by byte.
const RANDOM_SPLITS: usize = 50;
const SEED: u64 = 42;
/// `usage.cost` is compared with the manifest's number within this many dollars.
const COST_TOLERANCE: f64 = 1e-12;

/// One fixture of `manifest.json` (only the fields this test reads).
#[derive(Deserialize)]
struct Entry {
    file: String,
    status: u16,
    content_type: String,
    /// The top-level `provider` of the body (none for error bodies).
    provider: Option<String>,
    expect: Expect,
    observed: Observed,
}

#[derive(Deserialize)]
struct Expect {
    finish_reason: Option<String>,
    content_nonempty: bool,
    reasoning_nonempty: bool,
    tool_calls: bool,
    usage_cost: Option<f64>,
    completion_tokens: Option<u64>,
    error_code: Option<Value>,
    error_message: Option<String>,
    metadata_raw_contains: Option<String>,
    provider_name: Option<String>,
}

#[derive(Deserialize)]
struct Observed {
    /// The `id`s of the body's chunks (one per stream).
    #[serde(default)]
    distinct_ids: Vec<String>,
    /// The last `usage` object of the body, if any chunk had one.
    #[serde(default)]
    usage: Option<Value>,
    /// The tool calls put back together by the manifest's Python (by `index`, arguments
    /// concatenated).
    #[serde(default)]
    tool_calls: Vec<ObservedCall>,
}

#[derive(Deserialize)]
struct ObservedCall {
    id: String,
    name: String,
    arguments: String,
}

/// What kind of response a fixture is, from its recorded status and content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// A 200 `text/event-stream` body.
    Stream,
    /// A 200 `application/json` completion.
    Completion,
    /// A 4xx or 5xx `application/json` error body.
    ErrorBody,
}

impl Entry {
    fn shape(&self) -> Shape {
        let media_type = self
            .content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim();
        match (self.status, media_type) {
            (200, "text/event-stream") => Shape::Stream,
            (200, "application/json") => Shape::Completion,
            (400..=599, "application/json") => Shape::ErrorBody,
            (status, other) => panic!(
                "{}: status {status} with content type {other:?} is not a shape this test knows",
                self.file
            ),
        }
    }
}

fn recorded_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recorded")
}

fn manifest() -> Vec<Entry> {
    let path = recorded_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let entries: Vec<Entry> = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("cannot parse {}: {e}", path.display()));
    assert!(
        entries.len() >= MIN_ENTRIES,
        "{} lists {} fixtures, fewer than {MIN_ENTRIES}",
        path.display(),
        entries.len()
    );
    entries
}

fn find<'a>(entries: &'a [Entry], file: &str) -> &'a Entry {
    entries
        .iter()
        .find(|e| e.file == file)
        .unwrap_or_else(|| panic!("{file} is not in manifest.json"))
}

/// The recorded body of `entry`; a manifest entry whose file is missing fails the test.
fn body(entry: &Entry) -> Vec<u8> {
    let path = recorded_dir().join(&entry.file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "manifest entry {}: cannot read {}: {e}",
            entry.file,
            path.display()
        )
    });
    assert!(bytes.len() > 1, "{}: the body is empty", entry.file);
    bytes
}

/// Feeds `pieces` to the SSE decoder and the accumulator, as the client does with reads.
fn parse_stream(pieces: &[&[u8]], require_usage: bool) -> Result<Completion, ApiError> {
    let mut sse = SseDecoder::new();
    let mut acc = StreamAccumulator::new(require_usage);
    for &piece in pieces {
        sse.push(piece);
        while let Some(event) = sse.next_event() {
            let data = event.map_err(|e| ApiError::Decode {
                what: "stream",
                detail: e.to_string(),
            })?;
            acc.feed(data)?;
        }
    }
    acc.finish(None, Duration::ZERO)
}

/// Cuts `bytes` at 1 to 63 random offsets (inside UTF-8 characters and lines too).
fn random_pieces<'a>(bytes: &'a [u8], rng: &mut SmallRng) -> Vec<&'a [u8]> {
    let pieces = rng.random_range(2..=64usize).min(bytes.len());
    let mut cuts: Vec<usize> = (1..pieces)
        .map(|_| rng.random_range(1..bytes.len()))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut last = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        out.push(&bytes[last..cut]);
        last = cut;
    }
    out
}

/// Parses a recorded stream whole, byte by byte and in [`RANDOM_SPLITS`] random splits, and
/// checks that every way gives the same result. Usage is required when the recording has a
/// usage chunk, as harvest requires it of OpenRouter.
fn replay_stream(entry: &Entry) -> Result<Completion, ApiError> {
    let bytes = body(entry);
    let require_usage = entry.observed.usage.is_some();
    let whole = parse_stream(&[bytes.as_slice()], require_usage);
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut ways: Vec<(String, Vec<&[u8]>)> =
        vec![("byte by byte".to_string(), bytes.chunks(1).collect())];
    for i in 0..RANDOM_SPLITS {
        ways.push((format!("random split {i}"), random_pieces(&bytes, &mut rng)));
    }
    for (way, pieces) in ways {
        let got = parse_stream(&pieces, require_usage);
        match (&whole, &got) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{}: {way} differs from the whole", entry.file),
            (Err(a), Err(b)) => assert_eq!(
                format!("{a:?}"),
                format!("{b:?}"),
                "{}: {way} differs from the whole",
                entry.file
            ),
            _ => panic!(
                "{}: {way} gave {got:?}, the whole body {whole:?}",
                entry.file
            ),
        }
    }
    whole
}

fn parse_json_completion(entry: &Entry) -> Result<Completion, ApiError> {
    parse_completion_body(&body(entry), true, Duration::ZERO)
}

/// A successful completion against the manifest's `expect` and `observed`.
fn check_completion(entry: &Entry, c: &Completion) {
    let file = &entry.file;
    let want = &entry.expect;
    assert_eq!(
        Some(c.finish_reason.as_str()),
        want.finish_reason.as_deref(),
        "{file}: finish_reason"
    );
    assert_eq!(
        !c.content.is_empty(),
        want.content_nonempty,
        "{file}: content {:?}",
        c.content
    );
    // Reasoning text comes from `reasoning`, `reasoning_content` or the text and summary
    // entries of `reasoning_details`; encrypted or signature-only details give none.
    assert_ne!(
        c.reasoning.as_deref(),
        Some(""),
        "{file}: no reasoning is None, not empty text"
    );
    assert_eq!(
        c.reasoning.is_some(),
        want.reasoning_nonempty,
        "{file}: reasoning {:?}",
        c.reasoning
    );
    assert_eq!(
        c.usage_source,
        UsageSource::Reported,
        "{file}: usage as sent"
    );
    match want.usage_cost {
        Some(cost) => {
            let got = c
                .usage
                .cost
                .unwrap_or_else(|| panic!("{file}: no usage.cost, the recording says {cost}"));
            assert!(
                (got - cost).abs() <= COST_TOLERANCE,
                "{file}: usage.cost {got}, the recording says {cost}"
            );
            assert_eq!(c.cost(), Some(Usd::from_f64(cost)), "{file}: cost()");
        }
        None => {
            assert_eq!(c.usage.cost, None, "{file}: usage has no cost");
            assert_eq!(c.cost(), None, "{file}: cost()");
        }
    }
    if let Some(tokens) = want.completion_tokens {
        assert_eq!(
            c.usage.completion_tokens, tokens,
            "{file}: usage.completion_tokens"
        );
    }
    let [id] = entry.observed.distinct_ids.as_slice() else {
        panic!(
            "{file}: the recording should have one generation id, has {:?}",
            entry.observed.distinct_ids
        );
    };
    assert!(id.starts_with("gen-"), "{file}: id {id}");
    assert_eq!(c.id.as_deref(), Some(id.as_str()), "{file}: id");
    if let Some(provider) = &entry.provider {
        assert_eq!(
            c.provider.as_deref(),
            Some(provider.as_str()),
            "{file}: provider"
        );
    }
    // The calls as the recording's own Python put them together, byte for byte.
    let calls: Vec<(&str, &str, &str, &str)> = (c.tool_calls.iter())
        .map(|t| {
            let f = &t.function;
            (
                t.id.as_str(),
                t.kind.as_str(),
                f.name.as_str(),
                f.arguments.as_str(),
            )
        })
        .collect();
    let want: Vec<(&str, &str, &str, &str)> = (entry.observed.tool_calls.iter())
        .map(|t| {
            (
                t.id.as_str(),
                "function",
                t.name.as_str(),
                t.arguments.as_str(),
            )
        })
        .collect();
    assert_eq!(calls, want, "{file}: tool_calls");
    assert_eq!(
        !calls.is_empty(),
        entry.expect.tool_calls,
        "{file}: expect.tool_calls"
    );
}

/// A stream with an error chunk: a mid-stream failure with the chunk's code and message.
fn check_stream_error(entry: &Entry, err: &ApiError) {
    let file = &entry.file;
    let want = &entry.expect;
    let ApiError::MidStream {
        message,
        partial_events,
        detail,
    } = err
    else {
        panic!("{file}: want a mid-stream error, got {err:?}");
    };
    assert_eq!(err.kind(), ErrorKind::MidStream, "{file}: kind of {err:?}");
    assert_eq!(err.status(), None, "{file}: a stream has no error status");
    assert_eq!(
        detail.code.as_ref(),
        want.error_code.as_ref(),
        "{file}: error code"
    );
    if let Some(text) = &want.error_message {
        assert_eq!(message, text, "{file}: error message");
        assert!(
            err.to_string().contains(text.as_str()),
            "{file}: {err} does not show the message"
        );
    }
    if want.content_nonempty || want.reasoning_nonempty {
        assert!(
            *partial_events > 0,
            "{file}: text came before the error, yet partial_events is 0"
        );
    }
}

/// An error body against the manifest's `expect`.
fn check_error_body(entry: &Entry, err: &ApiError) {
    let file = &entry.file;
    let want = &entry.expect;
    assert_eq!(
        err.status(),
        Some(entry.status),
        "{file}: status of {err:?}"
    );
    let detail = err
        .detail()
        .unwrap_or_else(|| panic!("{file}: the error object was not kept: {err:?}"));
    assert_eq!(
        detail.code.as_ref(),
        want.error_code.as_ref(),
        "{file}: error code"
    );
    if let Some(text) = &want.error_message {
        assert_eq!(
            detail.message.as_deref(),
            Some(text.as_str()),
            "{file}: error message"
        );
    }
    if let Some(provider) = &want.provider_name {
        assert_eq!(
            err.provider_name(),
            Some(provider.as_str()),
            "{file}: provider_name"
        );
    }
    match entry.status {
        429 => {
            assert_eq!(err.kind(), ErrorKind::RateLimited, "{file}: kind");
            assert!(err.is_retryable(), "{file}: a 429 is retried");
        }
        400 => {
            assert_eq!(err.kind(), ErrorKind::BadRequest, "{file}: kind");
            assert!(!err.is_retryable(), "{file}: a 400 is not retried");
        }
        _ => {}
    }
}

#[test]
fn the_manifest_lists_every_fixture_and_every_shape() {
    let entries = manifest();
    let mut names = BTreeSet::new();
    for entry in &entries {
        assert!(
            names.insert(entry.file.as_str()),
            "{}: listed twice",
            entry.file
        );
        // Reads the body: a missing file fails here.
        body(entry);
        let extension = match entry.shape() {
            Shape::Stream => ".sse",
            Shape::Completion | Shape::ErrorBody => ".json",
        };
        assert!(
            entry.file.ends_with(extension),
            "{}: a {:?} should be a {extension} file",
            entry.file,
            entry.shape()
        );
    }
    for shape in [Shape::Stream, Shape::Completion, Shape::ErrorBody] {
        assert!(
            entries.iter().any(|e| e.shape() == shape),
            "no {shape:?} fixture in the manifest"
        );
    }
    // No recorded body sits in the directory without being replayed.
    let dir = recorded_dir();
    let listing =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for dirent in listing {
        let name = dirent.expect("a readable directory entry").file_name();
        let name = name.to_string_lossy();
        if (name.ends_with(".sse") || name.ends_with(".json")) && name != "manifest.json" {
            assert!(
                names.contains(&*name),
                "{name} is in {} but not in manifest.json",
                dir.display()
            );
        }
    }
}

#[test]
fn recorded_streams_replay_whole_byte_by_byte_and_in_random_splits() {
    let entries = manifest();
    let mut replayed = 0;
    for entry in entries.iter().filter(|e| e.shape() == Shape::Stream) {
        let recorded_error = entry.expect.error_code.is_some();
        match (replay_stream(entry), recorded_error) {
            (Ok(c), false) => check_completion(entry, &c),
            (Err(e), true) => check_stream_error(entry, &e),
            (Ok(c), true) => panic!(
                "{}: the recording has an error chunk, harvest gave an answer: {c:?}",
                entry.file
            ),
            (Err(e), false) => panic!("{}: {e} ({e:?})", entry.file),
        }
        replayed += 1;
    }
    assert!(replayed > 0, "no stream was replayed");
}

#[test]
fn recorded_json_completions_parse() {
    let entries = manifest();
    let mut parsed = 0;
    for entry in entries.iter().filter(|e| e.shape() == Shape::Completion) {
        match parse_json_completion(entry) {
            Ok(c) => check_completion(entry, &c),
            Err(e) => panic!("{}: {e} ({e:?})", entry.file),
        }
        parsed += 1;
    }
    assert!(parsed > 0, "no non-streaming completion was parsed");
}

#[test]
fn recorded_error_bodies_keep_status_code_and_provider() {
    let entries = manifest();
    let mut checked = 0;
    for entry in entries.iter().filter(|e| e.shape() == Shape::ErrorBody) {
        let err = ApiError::from_response_body(entry.status, None, &body(entry));
        check_error_body(entry, &err);
        checked += 1;
    }
    assert!(checked > 0, "no error body was checked");
}

/// A billed answer without text (a tool call only) is an answer, booked at its `usage.cost`.
#[test]
fn tool_call_only_answers_are_billed_answers() {
    let entries = manifest();
    let mut answers = 0;
    let mut without_any_text = 0;
    for entry in entries.iter().filter(|e| {
        e.expect.tool_calls
            && !e.expect.content_nonempty
            && e.expect.error_code.is_none()
            && e.expect.finish_reason.as_deref() == Some("tool_calls")
    }) {
        let file = &entry.file;
        let parsed = match entry.shape() {
            Shape::Stream => replay_stream(entry),
            Shape::Completion => parse_json_completion(entry),
            Shape::ErrorBody => panic!("{file}: an error body with tool calls"),
        };
        let c = parsed.unwrap_or_else(|e| {
            panic!("{file}: a billed tool-call answer without text must be an answer: {e}")
        });
        assert_eq!(c.finish_reason, "tool_calls", "{file}: finish_reason");
        assert!(c.content.is_empty(), "{file}: content {:?}", c.content);
        assert!(!c.tool_calls.is_empty(), "{file}: the answer is its calls");
        let cost = entry
            .expect
            .usage_cost
            .unwrap_or_else(|| panic!("{file}: the recording should have a usage.cost"));
        assert_eq!(c.cost(), Some(Usd::from_f64(cost)), "{file}: cost()");
        answers += 1;
        if c.reasoning.is_none() {
            without_any_text += 1;
        }
    }
    assert!(answers > 0, "no tool-call-only fixture in the manifest");
    assert!(
        without_any_text > 0,
        "no tool-call-only fixture without reasoning either in the manifest"
    );
}

/// MiniMax M2 stops at `length` twice, then sends an error chunk that also carries the usage
/// (cost 0). harvest fails the stream at the error chunk: a mid-stream error with the
/// reasoning events read before it.
#[test]
fn an_error_chunk_after_finish_reason_length_is_a_mid_stream_failure() {
    let entries = manifest();
    let entry = find(&entries, "minimax_m2_midstream_error.sse");
    assert_eq!(entry.expect.finish_reason.as_deref(), Some("length"));
    let err = replay_stream(entry).expect_err("the error chunk fails the stream");
    check_stream_error(entry, &err);
    let ApiError::MidStream { partial_events, .. } = err else {
        panic!("{}: want a mid-stream error, got {err:?}", entry.file);
    };
    assert!(partial_events > 0, "the reasoning before the error counts");
}

/// The error as shown names the upstream cause kept in `error.metadata.raw`, not only
/// OpenRouter's "Provider returned error".
#[test]
fn a_refusal_names_its_raw_cause() {
    let entries = manifest();
    let mut checked = 0;
    for entry in &entries {
        let Some(part) = entry.expect.metadata_raw_contains.as_deref() else {
            continue;
        };
        let file = &entry.file;
        let err = match entry.shape() {
            Shape::ErrorBody => ApiError::from_response_body(entry.status, None, &body(entry)),
            Shape::Stream => replay_stream(entry).expect_err("a recorded error"),
            Shape::Completion => parse_json_completion(entry).expect_err("a recorded error"),
        };
        let raw = err
            .detail()
            .and_then(|d| d.metadata.as_ref())
            .and_then(|m| m.get("raw"))
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{file}: metadata.raw was not kept: {err:?}"));
        assert!(raw.contains(part), "{file}: metadata.raw {raw:?}");
        let shown = err.to_string();
        assert!(
            shown.contains(part),
            "{file}: the error as shown, {shown:?}, does not name its raw cause {part:?}"
        );
        checked += 1;
    }
    assert!(checked > 0, "no fixture with metadata.raw in the manifest");
}

/// The engine against real traffic: `harvest sim --replay` serving the recorded bodies in turn
/// (reasoning, tool calls, encrypted reasoning, a mid-stream error, real 400 and 429 bodies)
/// to a headless run. Every prompt ends in one place, and the ledger equals the replayed bill
/// but for the amounts harvest had to estimate (a body without `usage.cost`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_against_replayed_real_traffic_books_what_it_is_billed() {
    let mut cfg = harvest::sim::SimConfig::fast_no_faults();
    cfg.replay = Some(std::sync::Arc::new(
        harvest::sim::replay::Replay::load(&recorded_dir()).expect("replay"),
    ));
    let sim = harvest::sim::start(cfg, 0).await.expect("sim");
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let var = "HARVEST_REPLAY_TEST_KEY";
    crate::common::write_job_with_ids(
        d,
        &sim.base_url(),
        var,
        60,
        "routing = \"openrouter\"\nconcurrency = 4\n[request]\nmax_tokens = 400\n\
         [retry]\nmax_attempts = 3\nbase_delay_ms = 10\nstop_after_same_error = 0",
    );
    let (code, text) =
        crate::common::run_headless(d, var, "sk-or-v1-replay-test-key-00000000", &[]).await;
    assert_eq!(code, 0, "{text}");
    let out = d.join("out");
    let outputs: Vec<harvest::store::output::OutputRecord> =
        crate::common::read_jsonl(&out.join("A.jsonl"));
    let rejects: Vec<harvest::store::output::RejectRecord> =
        crate::common::read_jsonl(&out.join("A.rejects.jsonl"));
    let ids: BTreeSet<&str> = (outputs.iter().map(|o| o.id.as_str()))
        .chain(rejects.iter().map(|r| r.id.as_str()))
        .collect();
    assert_eq!(outputs.len() + rejects.len(), 60, "{text}");
    assert_eq!(ids.len(), 60, "every id in one place");
    // A tool-call answer is a row with its calls, never an empty answer retried.
    let calls = |o: &harvest::store::output::OutputRecord| {
        o.conversations.last().map_or(0, |t| t.tool_calls.len())
    };
    let tool_rows: Vec<usize> = (outputs.iter())
        .filter(|o| o.finish_reason == "tool_calls")
        .map(calls)
        .collect();
    assert!(!tool_rows.is_empty(), "no tool-call row: {text}");
    assert!(tool_rows.iter().all(|&n| n > 0), "{tool_rows:?}");
    assert!(tool_rows.contains(&2), "the parallel calls: {tool_rows:?}");
    assert!(
        rejects.iter().all(|r| r.error_kind != "empty"),
        "{rejects:?}"
    );
    // The real 400 body's own cause reaches the reject.
    assert!(
        rejects
            .iter()
            .any(|r| r.error.contains("Unsupported value")),
        "{rejects:?}"
    );
    let report = crate::common::harvest_json(&[
        "status".as_ref(),
        "--report".as_ref(),
        "--json".as_ref(),
        out.as_os_str(),
    ]);
    let usd = |k: &str| Usd::from_f64(report["spend"][k].as_f64().expect(k));
    let booked = usd("ledger") - usd("estimated");
    let gap = (booked - sim.state.billed_total()).as_f64().abs();
    assert!(
        gap < 1e-9,
        "ledger {booked:?} vs bill {:?}: {report}",
        sim.state.billed_total()
    );
    sim.stop().await;
}
