//! harvest's chat-template rendering against Python's Jinja2 as transformers sets it up
//! (tests/fixtures/chat_templates/render_like_transformers.py, run by the peers' Python from
//! `scripts/peers.sh install`): every row of a run through every template, rows no run writes
//! yet (tools, tool calls, characters Python strips, template options), and a run's tools, byte
//! for byte. The runs and exports are those of `crate::export`, whose tests check the rest
//! without Python.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::export::{TEMPLATES, fixture, multi_turn_run, renderings, tool_calls_run, tools_run};

/// The peers' Python, with Jinja2; fails the test without it.
fn peer_python() -> PathBuf {
    let python = crate::common::installed_peers(&["HARVEST_PEER_PYTHON"])
        .remove("HARVEST_PEER_PYTHON")
        .expect("checked by installed_peers");
    let jinja = Command::new(&python).args(["-c", "import jinja2"]).output();
    assert!(
        jinja.as_ref().is_ok_and(|o| o.status.success()),
        "{} cannot import jinja2: run scripts/peers.sh install ({jinja:?})",
        python.display()
    );
    python
}

/// The texts Python's Jinja2 renders for `rows` (`{messages, tools?}`) through `template_file`
/// with `kwargs`: one per row, or `{"error": ...}` for a row the template refuses.
fn python_renders(
    template_file: &Path,
    rows: &[serde_json::Value],
    kwargs: serde_json::Value,
) -> Vec<serde_json::Value> {
    let job = serde_json::json!({
        "template": std::fs::read_to_string(template_file).expect("template"),
        "rows": rows,
        "kwargs": kwargs,
    });
    let mut child = Command::new(peer_python())
        .arg(fixture(
            "tests/fixtures/chat_templates/render_like_transformers.py",
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(job.to_string().as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python runs");
    assert!(out.status.success(), "{}", template_file.display());
    serde_json::from_slice(&out.stdout).expect("a JSON list")
}

/// Every row of a multi-turn run as written, through every template (Moonshot's K2-Thinking and
/// K2.5, Qwen3's, the built-in final-turn variants, harvest's test template), unexploded and
/// exploded: what `export --chat-template` prints is what Python renders from the row written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs scripts/peers.sh install (the peers' Python with Jinja2): cargo test --locked --test it -- --ignored peers::"]
async fn every_row_of_a_run_renders_through_every_template_as_python_does() {
    peer_python();
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let out = multi_turn_run(d).await;
    for r in renderings(&out, &d.join("py")) {
        let jobs: Vec<serde_json::Value> = (r.rows.iter())
            .map(|row| serde_json::json!({"messages": row["conversations"]}))
            .collect();
        let python = python_renders(&fixture(r.file), &jobs, serde_json::json!({}));
        assert_eq!(python.len(), r.rows.len(), "{}", r.template);
        for ((s, row), py) in r.samples.iter().zip(&r.rows).zip(&python) {
            assert_eq!(s["id"], row["id"]);
            assert_eq!(&s["text"], py, "{} {}", r.template, row["id"]);
        }
    }
}

/// Rows no run writes yet, through the real templates, byte for byte as Python renders them:
/// tools and tool calls (`tojson` with `separators`, key order, no HTML escaping), a tool
/// result, characters Python strips (U+001C..U+001F), template options.
#[test]
#[ignore = "needs scripts/peers.sh install (the peers' Python with Jinja2): cargo test --locked --test it -- --ignored peers::"]
fn the_renderer_matches_python_on_tools_and_edge_characters() {
    let tools = serde_json::json!([{"type": "function", "function": {
        "name": "get_weather", "description": "Weather <now> & 'here', é",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                       "required": ["city"]}}}]);
    let tool_row = serde_json::json!([
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "I need the weather.",
         "tool_calls": [{"id": "functions.get_weather:0", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "21 degrees.", "reasoning_content": "It said 21."}
    ]);
    let ctrl_row = serde_json::json!([
        {"role": "user", "content": "\u{1c}question with file/group separators\u{1f}"},
        {"role": "assistant", "content": "answer\u{1e}", "reasoning_content": "thinking\u{1d}"}
    ]);
    let plain_row = serde_json::json!([
        {"role": "user", "content": "<q> & 'x' {{ not a tag }} \u{1f600}"},
        {"role": "assistant", "content": "a", "reasoning_content": ""}
    ]);
    let cases = [
        (&tool_row, &tools),
        (&tool_row, &serde_json::Value::Null),
        (&ctrl_row, &serde_json::Value::Null),
        (&plain_row, &serde_json::Value::Null),
    ];
    for (arg, file) in TEMPLATES {
        for kwargs in [
            serde_json::json!({}),
            serde_json::json!({"thinking": false}),
        ] {
            let pairs: Vec<String> = kwargs
                .as_object()
                .expect("map")
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let t = harvest::export::template::ChatTemplate::load(Path::new(arg))
                .or_else(|_| harvest::export::template::ChatTemplate::load(&fixture(arg)))
                .expect("loads")
                .with_kwargs(&pairs)
                .expect("kwargs");
            let ours: Vec<serde_json::Value> = cases
                .iter()
                .map(|(m, tools)| match t.render_with_tools("x", m, tools) {
                    Ok(text) => serde_json::json!(text),
                    Err(e) => serde_json::json!({"error": e.to_string()}),
                })
                .collect();
            let jobs: Vec<serde_json::Value> = cases
                .iter()
                .map(|(m, tools)| serde_json::json!({"messages": m, "tools": tools}))
                .collect();
            let python = python_renders(&fixture(file), &jobs, kwargs.clone());
            for (i, (a, b)) in ours.iter().zip(&python).enumerate() {
                if b.get("error").is_some() {
                    // The template refuses the row in Python: so must harvest.
                    assert!(a.get("error").is_some(), "{arg} case {i}: {a}");
                } else {
                    assert_eq!(a, b, "{arg} {kwargs} case {i}");
                }
            }
        }
    }
}

/// A run whose requests offered tools, through the built-in K2.5 template: each row's text is
/// what Python renders from the same turns with the tools the run offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs scripts/peers.sh install (the peers' Python with Jinja2): cargo test --locked --test it -- --ignored peers::"]
async fn the_tools_a_run_offered_render_as_python_does() {
    peer_python();
    let dir = tempfile::tempdir().expect("tmp");
    let (_, rows, answers) = tools_run(dir.path()).await;
    renders_as_python(&rows, &answers);
}

/// A run whose every answer is a tool call (Kimi K2.5's recorded streams, replayed): each row's
/// text, its calls between the template's tool-call tokens, is what Python renders from the
/// same turns (issue #54 item 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs scripts/peers.sh install (the peers' Python with Jinja2): cargo test --locked --test it -- --ignored peers::"]
async fn the_tool_calls_a_run_kept_render_as_python_does() {
    peer_python();
    let dir = tempfile::tempdir().expect("tmp");
    let (_, rows, answers) = tool_calls_run(dir.path()).await;
    assert!(
        answers.iter().all(|a| a
            .conversations
            .last()
            .is_some_and(|t| !t.tool_calls.is_empty())),
        "every answer a tool call"
    );
    renders_as_python(&rows, &answers);
}

/// Each exported row's text equals Python's rendering of its record's turns (calls included)
/// with the tools the run offered, through the built-in K2.5 template.
fn renders_as_python(rows: &[serde_json::Value], answers: &[harvest::store::output::OutputRecord]) {
    let jobs: Vec<serde_json::Value> = answers
        .iter()
        .map(|a| {
            let messages: Vec<serde_json::Value> = (a.conversations.iter())
                .map(|t| match t.role.as_str() {
                    "assistant" => {
                        let mut m = serde_json::json!({"role": "assistant", "content": t.content,
                        "reasoning_content": t.reasoning_content.clone().unwrap_or_default()});
                        if !t.tool_calls.is_empty() {
                            m["tool_calls"] = serde_json::json!(t.tool_calls);
                        }
                        m
                    }
                    _ => serde_json::json!({"role": t.role, "content": t.content}),
                })
                .collect();
            serde_json::json!({"messages": messages, "tools": a.params["tools"]})
        })
        .collect();
    let python = python_renders(
        &fixture("templates/kimi-k2.5-final-turn.jinja"),
        &jobs,
        serde_json::json!({}),
    );
    assert_eq!((python.len(), rows.len()), (4, 4));
    for (a, p) in answers.iter().zip(&python) {
        let ours = rows
            .iter()
            .find(|r| r["id"] == a.id.as_str())
            .expect("exported");
        assert_eq!(&ours["text"], p, "{}", a.id);
    }
}
