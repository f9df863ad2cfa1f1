//! The prompt reader's tests: every format, ids, shards, bad lines, field names and
//! compressed files (the counting pass and duplicates: `counting.rs`).

use super::*;
use std::io::{BufReader, Cursor};
use std::path::Path;

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
    let p = one(r#"{"conversations":[{"from":"system","value":"s"},{"from":"user","value":"u"},{"from":"model","value":"m"},{"from":"human","value":"h"}]}"#).expect("ok");
    let want = [
        ("system", "s"),
        ("user", "u"),
        ("assistant", "m"),
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
{"conversations":[{"from":"human","value":"a"},{"from":"gpt","value":"b"},{"from":"robot","value":"c"}]} => conversations[2].from "robot" is not one of human, user, gpt, assistant, model, system: a training row holds no other role, and export refuses the row
{"conversations":[{"from":"human","value":"a"},{"from":"tool","value":"t"},{"from":"human","value":"b"}]} => conversations[1].from "tool" is not one of human, user, gpt, assistant, model, system: a training row holds no other role, and export refuses the row
{"conversations":[{"text":"a"}]} => conversations[0] needs "from" and "value" (or "role" and "content")
{"conversations":[{"from":"human"}]} => conversations[0] has no "value"
{"conversations":[{"from":1,"value":"a"}]} => conversations[0].from must be a string
{"messages":[{"role":"robot","content":"a"}]} => messages[0].role "robot" is not one of system, user, assistant: a training row holds no other role, and export refuses the row
{"messages":[{"role":"user","content":"q"},{"role":"tool","content":"t"},{"role":"user","content":"r"}]} => messages[1].role "tool" is not one of system, user, assistant: a training row holds no other role, and export refuses the row
{"messages":[{"role":"developer","content":"d"},{"role":"user","content":"q"}]} => messages[0].role "developer" is not one of system, user, assistant: a training row holds no other role, and export refuses the row
{"conversations":[{"role":"developer","content":"d"},{"from":"human","value":"q"}]} => conversations[0].role "developer" is not one of system, user, assistant: a training row holds no other role, and export refuses the row
{"messages":["hi"]} => messages[0] must be an object with "role" and "content"
{"messages":[{"role":"user"}]} => messages[0] has no "content"
{"messages":[{"role":"user","content":null}]} => messages[0].content must be a string or a list of parts
{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}}]}]} => messages[0].content[1] has type "image_url"; only "text" parts are supported
{"messages":[{"role":"user","content":[{"text":"a"}]}]} => messages[0].content[0] has no "type"
{"messages":[{"role":"assistant","content":"a"}]} => no user turn (only assistant turns)
{"messages":[{"role":"user","content":"a"},{"role":"system","content":"b"}]} => last turn is "system", expected "user"
{"prompt":" \n\t "} => "prompt" has no text
{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"  "}]} => messages[2] is a user turn with no text
{"conversations":[{"from":"human","value":""},{"from":"gpt","value":"b"},{"from":"human","value":"c"}]} => conversations[0] is a user turn with no text
{"messages":[{"role":"user","content":[{"type":"text","text":" "}]}]} => messages[0] is a user turn with no text
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
    // A failure before the first line names no line 0 (reliability-probe-4 N12).
    let got: Vec<_> = PromptReader::new(BufReader::new(Failing(1)), "f".into()).collect();
    assert_eq!(
        got[0].as_ref().expect_err("error").to_string(),
        "cannot read f: disk on fire (before its first line)"
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

/// A row read with `fields`, as `one` reads with harvest's own names.
fn mapped(line: &str, fields: &PromptFields) -> Result<Prompt, String> {
    let mut r = reader(line);
    r.fields = fields.clone();
    match r.next() {
        Some(Ok(p)) => Ok(p),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("nothing".into()),
    }
}

#[test]
fn a_datasets_own_field_names_are_read_as_harvests() {
    let f = |prompt: &[&str], messages: Option<&str>, system: Option<&str>, id: Option<&str>| {
        PromptFields {
            prompt: prompt.iter().map(|s| s.to_string()).collect(),
            messages: messages.map(Into::into),
            system: system.map(Into::into),
            id: id.map(Into::into),
        }
    };
    let alpaca = f(&["instruction", "input"], None, Some("system"), Some("uid"));
    let dialog = f(&[], Some("dialog"), None, None);
    let question = f(&["question"], None, None, None);
    let own_system = f(&[], None, Some("system"), None);
    let both = f(&["question"], Some("dialog"), None, None);
    type Want = Result<(&'static str, Vec<(&'static str, &'static str)>), &'static str>;
    let cases: Vec<(&str, &PromptFields, &str, Want)> = vec![
        (
            "Alpaca: instruction and input joined, its system first, its uid the id",
            &alpaca,
            r#"{"uid": 7, "instruction": "Sum these.", "input": "2 3", "system": "Be terse.", "output": "5"}"#,
            Ok((
                "7",
                vec![("system", "Be terse."), ("user", "Sum these.\n\n2 3")],
            )),
        ),
        (
            "an empty input is left out, an empty system too",
            &alpaca,
            r#"{"uid": "a", "instruction": "Say hi.", "input": "", "system": ""}"#,
            Ok(("a", vec![("user", "Say hi.")])),
        ),
        (
            "the row's own system turn wins over its system field",
            &own_system,
            r#"{"id": "s", "system": "field", "messages": [{"role": "system", "content": "own"}, {"role": "user", "content": "q"}]}"#,
            Ok(("s", vec![("system", "own"), ("user", "q")])),
        ),
        (
            "a turns field of either shape",
            &dialog,
            r#"{"id": "d", "dialog": [{"from": "human", "value": "hi"}, {"role": "assistant", "content": "yo"}, {"from": "human", "value": "again"}]}"#,
            Ok((
                "d",
                vec![("user", "hi"), ("assistant", "yo"), ("user", "again")],
            )),
        ),
        (
            "the mapped field is required, and named",
            &question,
            r#"{"id": "q", "prompt": "not this"}"#,
            Err(r#"data/b3.jsonl:1: needs one of "question", "messages" or "conversations""#),
        ),
        (
            "the first prompt field must be there",
            &alpaca,
            r#"{"uid": 1, "input": "2 3"}"#,
            Err(r#"data/b3.jsonl:1: needs one of "instruction", "messages" or "conversations""#),
        ),
        (
            "a joined field of another type is named",
            &alpaca,
            r#"{"uid": 1, "instruction": "x", "input": 3}"#,
            Err(r#"data/b3.jsonl:1: "input" must be a string (joined to "instruction")"#),
        ),
        (
            "the id field is named in its errors",
            &alpaca,
            r#"{"uid": "", "instruction": "x"}"#,
            Err(r#"data/b3.jsonl:1: "uid" is empty"#),
        ),
        (
            "a system field of another type is named",
            &alpaca,
            r#"{"uid": 2, "instruction": "x", "system": ["a"]}"#,
            Err(r#"data/b3.jsonl:1: "system" must be a string"#),
        ),
        (
            "both a turns field and the prompt field",
            &both,
            r#"{"question": "q", "dialog": [{"role": "user", "content": "q"}]}"#,
            Err(r#"data/b3.jsonl:1: "dialog" and "question" both present"#),
        ),
    ];
    for (what, fields, line, want) in cases {
        let got = mapped(line, fields).map(|p| (p.id, p.messages));
        let want = want
            .map(|(id, m)| (id.to_string(), msgs(&m)))
            .map_err(String::from);
        assert_eq!(got, want, "{what}");
    }
    // Without an id field the content id is the same as for harvest's own shape.
    let plain = one(r#"{"prompt": "Sum these."}"#).expect("plain");
    let q = mapped(r#"{"question": "Sum these."}"#, &question).expect("mapped");
    assert_eq!(plain.id, q.id);
}

#[test]
fn compressed_files_read_as_their_plain_lines() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tmp");
    let text: String = (0..5_000)
        .map(|i| format!("{{\"id\": \"p{i}\", \"prompt\": \"question {i}\"}}\n"))
        .collect::<String>()
        + "not json\n{\"id\": \"p3\", \"prompt\": \"question 3\"}\n";
    let plain = dir.path().join("p.jsonl");
    std::fs::write(&plain, &text).expect("plain");
    // gzip in two members (as `cat a.gz b.gz` or pigz make them).
    let (a, b) = text.split_at(text.len() / 2);
    let mut gz = Vec::new();
    for part in [a, b] {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(part.as_bytes()).expect("gz");
        gz.extend(e.finish().expect("gz"));
    }
    // Zstandard in two frames (as pzstd makes them), under a name that does not say so.
    let mut zst = zstd::stream::encode_all(a.as_bytes(), 3).expect("zst");
    zst.extend(zstd::stream::encode_all(b.as_bytes(), 3).expect("zst"));
    let gz_path = dir.path().join("p.jsonl.gz");
    let zst_path = dir.path().join("p.data");
    std::fs::write(&gz_path, &gz).expect("gz");
    std::fs::write(&zst_path, &zst).expect("zst");
    let want_count = count_prompts(&plain).expect("count");
    let want: Vec<_> = PromptReader::open(&plain)
        .expect("open")
        .map(|r| r.map_err(|e| e.message))
        .collect();
    assert_eq!(
        (want_count.valid, want_count.invalid, want_count.duplicates),
        (5_000, 1, 1)
    );
    for (path, kind) in [(&gz_path, FileKind::Gzip), (&zst_path, FileKind::Zstd)] {
        let head = std::fs::read(path).expect("read");
        assert_eq!(FileKind::sniff(&head), kind);
        let count = count_prompts(path).expect("count");
        let mut same = count.clone();
        if let Some(e) = same.first_error.as_mut() {
            assert_eq!(
                e.path,
                path.display().to_string(),
                "errors name the file read"
            );
            e.path = plain.display().to_string();
        }
        assert_eq!(
            same, want_count,
            "{kind:?}: the same count, bytes and duplicates"
        );
        let got: Vec<_> = PromptReader::open(path)
            .expect("open")
            .map(|r| r.map_err(|e| e.message))
            .collect();
        assert_eq!(
            got, want,
            "{kind:?}: the same prompts and errors, line for line"
        );
        let pre: Vec<_> = PromptReader::open_prescanned(path, &PromptFields::default(), &count)
            .expect("open")
            .map(|r| r.map_err(|e| e.message))
            .collect();
        assert_eq!(pre, want, "{kind:?}: prescanned");
    }
    // A file cut short is a read error naming the file, not a quiet end.
    let cut = dir.path().join("cut.jsonl.zst");
    std::fs::write(&cut, &zst[..zst.len() / 3]).expect("cut");
    let e = count_prompts(&cut).expect_err("a truncated frame");
    assert!(
        e.is_io() && e.to_string().starts_with("cannot read "),
        "{e}"
    );
    assert!(e.to_string().contains("cut.jsonl.zst"), "{e}");
}

mod counting;
