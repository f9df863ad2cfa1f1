//! `harvest export` on hand-made output directories: each row in one file with its reason,
//! explosion, the system turn, the formats and provenance.

use super::validate::{Rules, validate_row};
use super::*;
use crate::domain::Usd;
use crate::store::output::{RecordUsage, Turn};

fn rec(id: &str, content: &str, reasoning: Option<&str>, truncated: bool) -> OutputRecord {
    OutputRecord {
        id: id.into(),
        conversations: vec![
            Turn {
                role: "user".into(),
                content: "question".into(),
                reasoning_content: None,
                tool_calls: Vec::new(),
            },
            Turn {
                role: "assistant".into(),
                content: content.into(),
                reasoning_content: reasoning.map(str::to_string),
                tool_calls: Vec::new(),
            },
        ],
        provider: "Chutes".into(),
        endpoint_tag: Some("chutes/int4".into()),
        quantization: Some("int4".into()),
        model: "moonshotai/kimi-k2.5".into(),
        finish_reason: if truncated { "length" } else { "stop" }.into(),
        native_finish_reason: None,
        truncated,
        cut_thinking: false,
        cost_estimated: false,
        usage: RecordUsage {
            prompt_tokens: 10,
            completion_tokens: 20,
            reasoning_tokens: 5,
            source: "reported".into(),
            ..RecordUsage::default()
        },
        cost_usd: Usd::from_f64(0.001),
        ttft_ms: Some(300),
        latency_ms: 900,
        attempts: 1,
        created_at: "2026-12-01T00:00:00Z".into(),
        generation_id: Some("gen-1".into()),
        params: json!({}),
        inline_think: false,
        turns: Vec::new(),
    }
}

fn write_lines<T: Serialize>(p: &Path, rows: &[T]) {
    let text: String = rows
        .iter()
        .map(|r| format!("{}\n", serde_json::to_string(r).expect("json")))
        .collect();
    std::fs::write(p, text).expect("write");
}

fn read(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .expect("read")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

const SF: Options = Options {
    format: Format::Specforge,
    with_provenance: false,
    keep_truncated: false,
    require_reasoning: true,
    keep_think_markers: false,
    system_prompt: None,
    samples: 0,
    explode_turns: false,
    foreign_turns: ForeignTurns::Skip,
    max_length: None,
    skip_longer: false,
};

/// The turns a `turns = "all"` run records: one per assistant turn the model wrote.
fn regenerated(n: usize) -> Vec<crate::store::output::TurnRecord> {
    let one = crate::store::output::TurnRecord {
        provider: "Chutes".into(),
        endpoint_tag: Some("chutes/int4".into()),
        finish_reason: "stop".into(),
        usage: RecordUsage::default(),
        cost_usd: Usd::from_f64(0.001),
        attempts: 1,
        generation_id: None,
        ttft_ms: None,
        latency_ms: 1,
        inline_think: false,
        cost_estimated: false,
    };
    vec![one; n]
}

/// A temporary directory with an empty output directory `out` in it.
fn scratch() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).expect("mkdir");
    (dir, out)
}

/// A row of two answers, both the model's (`turns = "all"`): q1, a1 (r1), q2, a2 (r2).
fn two_answers(id: &str) -> OutputRecord {
    let mut two = rec(id, "a2", Some("r2"), false);
    two.conversations = vec![
        turn("user", "q1", None),
        turn("assistant", "a1", Some("r1")),
        turn("user", "q2", None),
        turn("assistant", "a2", Some("r2")),
    ];
    two.turns = regenerated(2);
    two
}

fn turn(role: &str, content: &str, reasoning: Option<&str>) -> Turn {
    Turn {
        role: role.into(),
        content: content.into(),
        reasoning_content: reasoning.map(str::to_string),
        tool_calls: Vec::new(),
    }
}

/// Rows that break each rule land in `_error` or `_skipped` with the reason; the rest pass
/// the gate; the accounting adds up to the prompt count.
#[test]
fn each_row_lands_in_one_file_with_its_reason() {
    let (dir, out) = scratch();
    let mut sys_late = rec("sys-late", "answer", Some("r"), false);
    sys_late.conversations.push(Turn {
        role: "system".into(),
        content: "late".into(),
        reasoning_content: None,
        tool_calls: Vec::new(),
    });
    let rows = vec![
        rec("good", "answer", Some("thinking"), false),
        rec("cut", "answ", Some("thinking"), true),
        rec("think", "</think>answer", Some("thinking"), false),
        rec("noreason", "answer", None, false),
        rec("empty", "  ", Some("thinking"), false),
        sys_late,
    ];
    write_lines(&out.join("A.jsonl"), &rows);
    // A torn last line (a live run) is not read.
    std::fs::OpenOptions::new()
        .append(true)
        .open(out.join("A.jsonl"))
        .and_then(|mut f| f.write_all(b"{\"id\":\"half"))
        .expect("torn");
    write_lines(
        &out.join("A.rejects.jsonl"),
        &[RejectRecord {
            id: "rej".into(),
            line: Some(9),
            error: "HTTP 400: flagged".into(),
            error_kind: "policy".into(),
            attempts: 1,
            created_at: "2026-12-01T00:00:00Z".into(),
            cause: crate::store::output::FailureCause {
                provider_name: Some("OpenAI".into()),
                error_type: None,
                upstream: Some("flagged for violence".into()),
            },
        }],
    );
    let to = dir.path().join("export");
    let prompts = HashMap::from([("A".to_string(), 10u64)]);
    let counts = export(&out, &["A".into()], &prompts, &to, &SF, None)
        .expect("export")
        .counts;
    assert_eq!(
        counts,
        vec![Counts {
            dataset: "A".into(),
            success: 1,
            success_rows: 1,
            error: 3,
            skipped: 3,
            not_run: Some(3),
            prompts: Some(10),
            unreadable: 0,
            without_system: 1,
            keeps_reasoning: Some("kimi-k2.5-final-turn"),
            lossy_for_trainer: 1,
            lengths: lengths::Lengths::of(vec![30], None, false),
            ..Counts::default()
        }]
    );
    let ok = read(&to.join("A.jsonl"));
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0]["id"], "good");
    for r in &ok {
        validate_row(
            r,
            Rules {
                expect_reasoning: true,
                expect_non_reasoning: false,
                strict_think_markers: true,
            },
        )
        .expect("every success row passes the gate");
    }
    let why = |file: &str| -> HashMap<String, String> {
        read(&to.join(file))
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().expect("id").to_string(),
                    r["reason"].as_str().expect("reason").to_string(),
                )
            })
            .collect()
    };
    let skipped = why("A.skipped.ndjson");
    assert!(skipped["cut"].contains("max_tokens"));
    assert!(skipped["think"].contains("<think>"));
    assert!(skipped["noreason"].contains("reasoning_content"));
    let errors = why("A.error.ndjson");
    assert_eq!(
        errors["empty"],
        "message 1 content must be a non-empty string"
    );
    assert_eq!(
        errors["sys-late"],
        "message 2 has unsupported role 'system'"
    );
    assert!(errors["rej"].contains("rejected after 1 attempt: HTTP 400"));
    // The provider's cause as typed fields, for jq and the trainers' tooling.
    let rej = read(&to.join("A.error.ndjson"))
        .into_iter()
        .find(|r| r["id"] == "rej")
        .expect("reject row");
    assert_eq!(
        (&rej["provider_name"], &rej["upstream"]),
        (&json!("OpenAI"), &json!("flagged for violence"))
    );
    assert!(rej.get("error_type").is_none());
    // Nothing in the output directory changed, no temporary file is left.
    assert_eq!(std::fs::read_dir(&out).expect("dir").count(), 2);
    assert_eq!(std::fs::read_dir(&to).expect("dir").count(), 3);
    assert!(
        render(&counts, &to)
            .contains("A                        1         3         3           3        10")
    );
}

#[test]
fn exploded_turns_end_at_each_answer_with_only_its_own_reasoning() {
    let (dir, out) = scratch();
    let two = two_answers("two");
    write_lines(
        &out.join("A.jsonl"),
        &[rec("one", "answer", Some("r"), false), two],
    );
    let to = dir.path().join("export");
    for format in [Format::Specforge, Format::Openai, Format::Sharegpt] {
        let mut o = SF;
        o.explode_turns = true;
        o.format = format;
        let done = export(&out, &["A".into()], &HashMap::new(), &to, &o, None).expect("export");
        assert_eq!(
            (done.counts[0].success, done.counts[0].success_rows),
            (2, 3)
        );
        let rows = read(&to.join("A.jsonl"));
        let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().expect("id")).collect();
        assert_eq!(ids, ["one", "two#1", "two#2"], "{format:?}");
        if format != Format::Specforge {
            continue;
        }
        // (content, reasoning) of each row's turns.
        let shown = |r: &Value| -> Vec<(String, Option<String>)> {
            (r["conversations"].as_array().expect("turns").iter())
                .map(|t| {
                    let s = |k: &str| t[k].as_str().filter(|s| !s.is_empty()).map(str::to_string);
                    (s("content").unwrap_or_default(), s("reasoning_content"))
                })
                .collect()
        };
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            shown(&rows[1]),
            [("q1".into(), None), ("a1".into(), some("r1"))]
        );
        assert_eq!(
            shown(&rows[2]),
            [
                ("q1".into(), None),
                ("a1".into(), None),
                ("q2".into(), None),
                ("a2".into(), some("r2"))
            ]
        );
    }
}

/// Prompt ids that hold `#` beside an exploded row's (reliability-probe-5 P11): prompt `c` of
/// two answers and prompts `c#1` and `c#2` were written as `c#1, c#2, c#1, c#2`. Each `#` of a
/// prompt's id is doubled in an exploded export, so every row's id is its own and reads back
/// (the reverse mapping docs/export-and-trainers.md gives) to its prompt and answer; ids
/// without `#` are written as before, and an export that does not explode keeps every id.
#[test]
fn exploded_ids_never_collide_with_prompt_ids_that_hold_a_hash() {
    /// The documented reverse: an unpaired `#` (the last, odd run) is the one before `k`.
    fn prompt_of(written: &str) -> (String, Option<usize>) {
        let run_end = written.rfind('#').map_or(0, |i| i + 1);
        let run = written[..run_end].len() - written[..run_end].trim_end_matches('#').len();
        let (id, k) = match written[run_end..].parse::<usize>() {
            Ok(k) if run % 2 == 1 => (&written[..run_end - 1], Some(k)),
            _ => (written, None),
        };
        (id.replace("##", "#"), k)
    }
    let (dir, out) = scratch();
    let answer = |id: &str| rec(id, "answer", Some("r"), false);
    write_lines(
        &out.join("A.jsonl"),
        &[
            two_answers("c"),
            answer("c#1"),
            answer("c#2"),
            two_answers("c#"),
            answer("#"),
            answer("plain"),
        ],
    );
    let to = dir.path().join("export");
    let mut o = SF;
    o.explode_turns = true;
    export(&out, &["A".into()], &HashMap::new(), &to, &o, None).expect("export");
    let rows = read(&to.join("A.jsonl"));
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().expect("id")).collect();
    assert_eq!(
        ids,
        [
            "c#1", "c#2", "c##1", "c##2", "c###1", "c###2", "##", "plain"
        ]
    );
    let back: Vec<(String, Option<usize>)> = ids.iter().map(|id| prompt_of(id)).collect();
    let want = [
        ("c", Some(1)),
        ("c", Some(2)),
        ("c#1", None),
        ("c#2", None),
        ("c#", Some(1)),
        ("c#", Some(2)),
        ("#", None),
        ("plain", None),
    ];
    let want: Vec<(String, Option<usize>)> =
        want.iter().map(|(id, k)| (id.to_string(), *k)).collect();
    assert_eq!(back, want);
    // Not exploded: every id as the prompt file has it.
    export(&out, &["A".into()], &HashMap::new(), &to, &SF, None).expect("export");
    let rows = read(&to.join("A.jsonl"));
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().expect("id")).collect();
    assert_eq!(ids, ["c", "c#1", "c#2", "c#", "#", "plain"]);
}

#[test]
fn a_system_turn_for_rows_without_one() {
    let (dir, out) = scratch();
    let mut with = rec("with", "answer", Some("r"), false);
    with.conversations.insert(
        0,
        Turn {
            role: "system".into(),
            content: "own".into(),
            reasoning_content: None,
            tool_calls: Vec::new(),
        },
    );
    write_lines(
        &out.join("A.jsonl"),
        &[rec("without", "answer", Some("r"), false), with],
    );
    let to = dir.path().join("export");
    let mut o = SF;
    o.system_prompt = Some("You are a helpful assistant.".into());
    export(&out, &["A".into()], &HashMap::new(), &to, &o, None).expect("export");
    let rows = read(&to.join("A.jsonl"));
    let first: Vec<&str> = rows
        .iter()
        .map(|r| r["conversations"][0]["content"].as_str().expect("content"))
        .collect();
    assert_eq!(first, vec!["You are a helpful assistant.", "own"]);
}

/// A ShareGPT row with calls is rendered as the trainer reads what was written: the
/// `function_call` turn's value as its content, `from` mapped back to a role.
#[test]
fn a_sharegpt_row_is_rendered_as_it_is_written() {
    let mut r = rec("x", "", Some("thinking"), false);
    r.conversations[1].tool_calls = vec![crate::openrouter::ToolCall::function(
        "functions.add:0",
        "add",
        "{\"a\": 2}",
    )];
    let sf = rows::specforge_row(&r);
    let written = rows::success_row(sf.clone(), Format::Sharegpt, None, &Value::Null);
    let call = json!({"name": "add", "arguments": {"a": 2}}).to_string();
    assert_eq!(
        written["conversations"],
        json!([{"from": "human", "value": "question"}, {"from": "function_call", "value": call}])
    );
    assert_eq!(
        rows::messages_as_written(&sf, Format::Sharegpt),
        json!([{"role": "user", "content": "question"}, {"role": "function_call", "content": call}])
    );
}

#[test]
fn formats_and_provenance() {
    let r = rec("x", "answer", Some("thinking"), false);
    let sf = rows::specforge_row(&r);
    let s = rows::success_row(sf.clone(), Format::Sharegpt, None, &Value::Null);
    assert_eq!(
        s,
        json!({"id": "x", "conversations": [{"from": "human", "value": "question"}, {"from": "gpt", "value": "answer"}]})
    );
    let mut m = rows::success_row(sf.clone(), Format::Openai, None, &Value::Null);
    rows::add_provenance(&mut m, &r);
    assert_eq!(m["messages"][1]["reasoning_content"], "thinking");
    assert_eq!(m["endpoint_tag"], "chutes/int4");
    assert_eq!(m["cost_usd"], 0.001);
    assert!(
        m.as_object().expect("obj").values().all(|v| !v.is_object()),
        "flat columns"
    );
    // Keys in the order written, as Python's json.dumps writes a dict.
    let keys: Vec<&String> = m.as_object().expect("obj").keys().take(3).collect();
    assert_eq!(keys, ["id", "messages", "provider"]);
    let t = rows::success_row(sf, Format::Text, Some("<text>".into()), &Value::Null);
    assert_eq!(t, json!({"id": "x", "text": "<text>"}));
    // Every answer carries reasoning_content, empty when it has none.
    let none = rows::specforge_row(&rec("y", "answer", None, false));
    assert_eq!(none["conversations"][1]["reasoning_content"], "");
    assert!(none["conversations"][0].get("reasoning_content").is_none());
}

/// A template that fails every row the same way stops the export after its first few rows
/// (issue #37 item 5: a looping template took 78 s for 106 rows, 0.74 s each), and so does one
/// that runs away (out of fuel) on five rows, others rendered or not; one that refuses only
/// some rows, once it has rendered one, fails those rows and goes on.
#[test]
fn a_template_that_fails_every_row_stops_the_export_after_its_first_rows() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = |name: &str, rows: &[OutputRecord]| {
        let out = dir.path().join(name);
        std::fs::create_dir_all(&out).expect("mkdir");
        write_lines(&out.join("A.jsonl"), rows);
        out
    };
    let mut o = SF;
    o.format = Format::Text;
    o.require_reasoning = false;
    // Exports `src` through the template `text` into a directory of its own.
    let export_with = |src: &Path, text: &str| {
        let n = std::fs::read_dir(dir.path()).expect("dir").count();
        let p = dir.path().join(format!("t{n}.jinja"));
        std::fs::write(&p, text).expect("template");
        let t = template::ChatTemplate::load(&p).expect("compiles");
        let to = dir.path().join(format!("e{n}"));
        export(src, &["A".into()], &HashMap::new(), &to, &o, Some(&t))
    };
    let looping =
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
    let refuses_bad = "{% for m in messages %}{% if m.content == 'bad' %}{{ raise_exception('no') }}{% endif %}{{ m.content }}{% endfor %}";
    // Every third row's answer is "bad", from the second on.
    let rows: Vec<OutputRecord> = (0..40)
        .map(|i| {
            let answer = if i % 3 == 1 { "bad" } else { "answer" };
            rec(&format!("r{i}"), answer, Some("r"), false)
        })
        .collect();
    let mixed = out("out", &rows);
    let err = export_with(&mixed, looping).expect_err("stopped");
    assert!(
        matches!(err, ExportError::TemplateRunsAway { rows: 5, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("out of fuel"), "{err}");
    // One that runs away only on some rows, having rendered others, stops at its fifth
    // runaway (reliability-probe-4 D11's rest: 82 such rows took 43 s; thousands, hours).
    let loops_on_bad = "{% for m in messages %}{% if m.content == 'bad' %}{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}{% endif %}{{ m.content }}{% endfor %}";
    let err = export_with(&mixed, loops_on_bad).expect_err("stopped");
    assert!(
        matches!(err, ExportError::TemplateRunsAway { rows: 5, .. }),
        "{err}"
    );
    // A template that renders the first row and refuses some later ones: those rows fail, the
    // export goes on.
    let e = export_with(&mixed, refuses_bad).expect("goes on");
    assert_eq!((e.counts[0].success, e.counts[0].error), (27, 13));
    // Five failures before any row renders stop it, whatever later rows would do.
    let mut bad_first: Vec<OutputRecord> = (0..6)
        .map(|i| rec(&format!("b{i}"), "bad", Some("r"), false))
        .collect();
    bad_first.push(rec("ok", "answer", Some("r"), false));
    let err = export_with(&out("out2", &bad_first), refuses_bad).expect_err("stopped");
    assert!(
        matches!(err, ExportError::TemplateFailsEveryRow { rows: 5, .. }),
        "{err}"
    );
}

/// A row whose rendering writes the key stops the export at once, whatever the rows before
/// did, and no file of the export is written (reliability-probe-5 P7).
#[test]
fn a_rendering_that_writes_the_key_stops_the_export() {
    const KEY: &str = "sk-or-v1-fedcba9876543210fedcba9876543210";
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).expect("mkdir");
    let rows = [
        rec("r0", "answer", Some("r"), false),
        rec("r1", &format!("the key is {KEY}"), Some("r"), false),
        rec("r2", "answer", Some("r"), false),
    ];
    write_lines(&out.join("A.jsonl"), &rows);
    let p = dir.path().join("t.jinja");
    std::fs::write(&p, "{% for m in messages %}{{ m.content }}{% endfor %}").expect("template");
    let keys = template::Keys::from_vars(&["K".into()], [("K".into(), KEY.into())]);
    let t = template::ChatTemplate::load(&p)
        .expect("compiles")
        .refusing_keys(keys)
        .expect("holds no key");
    let mut o = SF;
    o.format = Format::Text;
    o.require_reasoning = false;
    let to = dir.path().join("e");
    let err = export(&out, &["A".into()], &HashMap::new(), &to, &o, Some(&t)).expect_err("stopped");
    assert!(
        matches!(err, ExportError::Template(ref e) if e.renders_key()),
        "{err}"
    );
    assert!(err.to_string().contains("rendering row r1"), "{err}");
    let written: Vec<_> = (std::fs::read_dir(&to).expect("to"))
        .map(|e| e.expect("entry").file_name())
        .filter(|n| !n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(written.is_empty(), "{written:?}");
}

/// The fail-fast rule alone: a row's renderings (how many succeeded, the failure's cause) in,
/// whether to stop out.
#[test]
fn the_first_renderings_decide_whether_a_template_fails_every_row() {
    let fail = |cause: &str| {
        Some(template::TemplateError::Render {
            path: "t.jinja".into(),
            id: "r".into(),
            msg: cause.into(),
            cause: cause.into(),
            runaway: false,
        })
    };
    // (what, each row's renderings and failure cause ("" for none), the row it stops at)
    type Case = (&'static str, &'static [(u64, &'static str)], Option<usize>);
    #[rustfmt::skip]
    let cases: &[Case] = &[
        ("five the same way", &[(0, "fuel"); 6], Some(4)),
        ("one rendered first", &[(1, ""), (0, "fuel"), (0, "fuel"), (0, "fuel"), (0, "fuel"), (0, "fuel")], None),
        ("another cause is not counted", &[(0, "fuel"), (0, "undefined"), (0, "fuel"), (0, "fuel"), (0, "fuel"), (0, "fuel")], Some(5)),
        ("a row rendered after four", &[(0, "fuel"), (0, "fuel"), (0, "fuel"), (0, "fuel"), (1, ""), (0, "fuel")], None),
        ("filtered rows render nothing and fail nothing", &[(0, ""), (0, ""), (0, ""), (0, ""), (0, "")], None),
    ];
    for (what, rows, want) in cases {
        let mut f = FirstRenderings::default();
        let stopped = rows.iter().position(|&(rendered, cause)| {
            f.note(rendered, (!cause.is_empty()).then(|| fail(cause)).flatten())
        });
        assert_eq!(stopped, *want, "{what}");
    }
}

mod trainer;

/// A prompt file's bad lines, rejected by a run with `on_bad_line = "skip"`, are error rows
/// but no prompts: the table's four columns still add up to the prompt count, and a note
/// says where the bad lines went (reliability-probe-5 P17: 14 prompts, 24 counted).
#[test]
fn bad_lines_are_error_rows_counted_apart_from_the_prompts() {
    let (dir, out) = scratch();
    let rows = vec![
        rec("a", "answer", Some("r"), false),
        rec("b", "answer", Some("r"), false),
    ];
    write_lines(&out.join("A.jsonl"), &rows);
    let reject = |id: &str, kind: &str| RejectRecord {
        id: id.into(),
        line: Some(3),
        error: "rejected".into(),
        error_kind: kind.into(),
        attempts: 1,
        created_at: "2026-12-01T00:00:00Z".into(),
        cause: Default::default(),
    };
    write_lines(
        &out.join("A.rejects.jsonl"),
        &[
            reject("@line:3", "input"),
            reject("c", "policy"),
            reject("@line:7", "input"),
        ],
    );
    let to = dir.path().join("export");
    // Four prompts (the count leaves bad lines out): a and b answered, c rejected, one not run.
    let prompts = HashMap::from([("A".to_string(), 4u64)]);
    let counts = export(&out, &["A".into()], &prompts, &to, &SF, None)
        .expect("export")
        .counts;
    let c = &counts[0];
    assert_eq!(
        (c.success, c.error, c.skipped, c.not_run, c.bad_lines),
        (2, 1, 0, Some(1), 2)
    );
    assert_eq!(
        c.success + c.error + c.skipped + c.not_run.unwrap_or(0),
        4,
        "the four add up to the prompt count"
    );
    let errors: Vec<Value> = read(&to.join("A.error.ndjson"));
    let ids: Vec<&str> = errors.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(
        ids,
        ["@line:3", "c", "@line:7"],
        "every reject is an error row"
    );
    let table = render(&counts, &to);
    assert!(
        table.contains("A                        2         1         0           1         4"),
        "{table}"
    );
    assert!(
        table.contains("A: 2 bad line(s) of the prompt file") && table.contains("A.error.ndjson"),
        "{table}"
    );
}
