//! `harvest export` on a real run's output directory (the simulator on 127.0.0.1): the success
//! files pass SpecForge's own validator (vendored unchanged in tests/fixtures/specforge, run
//! with python3 and `--expect-reasoning --strict-think-markers`), the accounting adds up to
//! the prompt files' counts, and the output directory is not changed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::common::{fast_sim, write_job_with_ids};

const VAR: &str = "HARVEST_EXPORT_TEST_KEY";

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            (n, std::fs::read(e.path()).expect("read"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_rows_pass_specforge_and_the_accounting_adds_up() {
    let sim = fast_sim(60.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    // max_tokens 80 against answers of ~60 tokens: some are cut (skipped by default).
    write_job_with_ids(
        d,
        &sim.base_url(),
        VAR,
        60,
        "concurrency = 8\n[request]\nmax_tokens = 80",
    );
    let run = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .env(VAR, "sk-or-v1-export-test-key-0000000000")
        .args(["run", "--headless", "-c"])
        .arg(d.join("harvest.toml"))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    // The prompts carry no system message and none is configured: the start says so.
    assert!(
        stderr.contains("60 prompts without a system message"),
        "{stderr}"
    );
    let out = d.join("out");
    let before = files(&out);

    let to = d.join("export");
    let cfg = d.join("harvest.toml");
    let report = crate::common::harvest_json(&[
        "export".as_ref(),
        out.as_os_str(),
        "--to".as_ref(),
        to.as_os_str(),
        "--require-reasoning".as_ref(),
        "--json".as_ref(),
        "-c".as_ref(),
        cfg.as_os_str(),
    ]);
    let c = &report["datasets"][0];
    let n = |k: &str| c[k].as_u64().expect(k);
    assert_eq!(
        n("success") + n("error") + n("skipped") + n("not_run"),
        n("prompts"),
        "{c}"
    );
    assert_eq!(n("prompts"), 60);
    assert!(n("success") > 0 && n("skipped") > 0, "{c}");
    assert_eq!(files(&out), before, "the output directory is not changed");
    // Exporting into the run's own directory (or inside it) would rename training rows over
    // its records: refused, with the way out, and nothing there changes.
    for into in [out.clone(), out.join("train"), d.join("./out/../out")] {
        let refused = Command::new(env!("CARGO_BIN_EXE_harvest"))
            .arg("export")
            .arg(&out)
            .arg("--to")
            .arg(&into)
            .output()
            .expect("export");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{}: {said}", into.display());
        assert!(said.contains("is a run's output directory"), "{said}");
        assert!(said.contains("out-train"), "{said}");
    }
    assert!(!out.join("train").exists());
    assert_eq!(files(&out), before, "the records are untouched");

    // The success file alone is .jsonl: a trainer's directory loader takes nothing else.
    let written: Vec<String> = files(&to).into_keys().collect();
    assert_eq!(written, ["A.error.ndjson", "A.jsonl", "A.skipped.ndjson"]);
    // SpecForge's own validator on the success file.
    let said = crate::common::specforge_validates(&to.join("A.jsonl"));
    assert!(said.contains(&format!("rows: {}", n("success"))), "{said}");

    // A template that loops on every row stops the export with exit 2 after its first rows
    // (issue #37 item 5), in seconds where it took 0.74 s a row.
    let looping = d.join("loop.jinja");
    std::fs::write(
        &looping,
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    )
    .expect("template");
    let export = |extra: &[&std::ffi::OsStr], into: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_harvest"))
            .arg("export")
            .arg(&out)
            .arg("--to")
            .arg(d.join(into))
            .args(extra)
            .output()
            .expect("export");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, said) = export(
        &[
            "--format".as_ref(),
            "text".as_ref(),
            "--chat-template".as_ref(),
            looping.as_os_str(),
        ],
        "looped",
    );
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("the chat template ran away on 5 rows") && said.contains("loop.jinja"),
        "{said}"
    );
    sim.stop().await;
}

fn reasoning_format(sim: &harvest::sim::SimHandle, f: &str) {
    let patch: harvest::sim::EndpointPatch =
        serde_json::from_value(serde_json::json!({"reasoning_format": f})).expect("patch");
    sim.state
        .control(&harvest::sim::ControlRequest {
            all: Some(patch),
            ..Default::default()
        })
        .expect("control");
}

/// Endpoints that return their thinking inline give clean rows; endpoints that answer only in
/// reasoning are retried, then rejected as `empty`; either way the export passes the gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_thinking_is_split_and_reasoning_only_answers_are_rejected() {
    let sim = fast_sim(60.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let settings = "concurrency = 4\n[request]\nmax_tokens = 4096\n[retry]\nmax_attempts = 2\nbase_delay_ms = 10";
    write_job_with_ids(d, &sim.base_url(), VAR, 12, settings);
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_harvest"))
            .env(VAR, "sk-or-v1-export-test-key-0000000000")
            .args(["run", "--headless", "-c"])
            .arg(d.join("harvest.toml"))
            .output()
            .expect("run")
    };
    reasoning_format(&sim, "inline");
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<harvest::store::output::OutputRecord> =
        crate::common::read_jsonl(&d.join("out/A.jsonl"));
    assert_eq!(rows.len(), 12);
    for r in &rows {
        let t = r.conversations.last().expect("turn");
        assert!(!t.content.contains("think>"), "{}", t.content);
        assert!(!t.content.trim().is_empty());
        assert!(
            t.reasoning_content
                .as_deref()
                .is_some_and(|s| !s.is_empty()),
            "{r:?}"
        );
    }
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("returns its thinking inline"),
        "the event log says so"
    );

    // Reasoning only: retried once, then rejected as empty.
    std::fs::remove_dir_all(d.join("out")).expect("clean");
    let before = sim.state.requests_since(0).len();
    reasoning_format(&sim, "only");
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rejects: Vec<harvest::store::output::RejectRecord> =
        crate::common::read_jsonl(&d.join("out/A.rejects.jsonl"));
    assert_eq!(rejects.len(), 12);
    assert!(
        rejects
            .iter()
            .all(|r| r.error_kind == "empty" && r.attempts == 2),
        "{rejects:?}"
    );
    assert_eq!(
        sim.state.requests_since(0).len() - before,
        24,
        "two attempts each"
    );
    sim.stop().await;
}

pub(crate) fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// Moonshot's templates, Qwen3's, harvest's two built-in final-turn variants and harvest's own
/// test template, as `--chat-template` takes them, with the file Python reads.
pub(crate) const TEMPLATES: [(&str, &str); 6] = [
    (
        "tests/fixtures/chat_templates/moonshotai-Kimi-K2-Thinking.jinja",
        "tests/fixtures/chat_templates/moonshotai-Kimi-K2-Thinking.jinja",
    ),
    (
        "tests/fixtures/chat_templates/moonshotai-Kimi-K2.5.jinja",
        "tests/fixtures/chat_templates/moonshotai-Kimi-K2.5.jinja",
    ),
    (
        "tests/fixtures/chat_templates/Qwen-Qwen3-0.6B.jinja",
        "tests/fixtures/chat_templates/Qwen-Qwen3-0.6B.jinja",
    ),
    (
        "kimi-k2-thinking-final-turn",
        "templates/kimi-k2-thinking-final-turn.jinja",
    ),
    (
        "kimi-k2.5-final-turn",
        "templates/kimi-k2.5-final-turn.jinja",
    ),
    (
        "tests/fixtures/chat_templates/kimi_k2_test.jinja",
        "tests/fixtures/chat_templates/kimi_k2_test.jinja",
    ),
];

/// A multi-turn job against the simulator: six conversations of two user turns (the first
/// answer the model's own, `turns = "all"`), half with a system turn. Returns the output
/// directory.
pub(crate) async fn multi_turn_run(d: &Path) -> std::path::PathBuf {
    let sim = fast_sim(30.0).await;
    let prompts: String = (0..6)
        .map(|i| {
            let mut msgs = Vec::new();
            if i % 2 == 0 {
                msgs.push(serde_json::json!({"role": "system", "content": "Be terse."}));
            }
            msgs.push(serde_json::json!({"role": "user", "content": format!("first {i}")}));
            msgs.push(serde_json::json!({"role": "assistant", "content": "dataset text"}));
            msgs.push(serde_json::json!({"role": "user", "content": format!("second {i}")}));
            format!(
                "{}\n",
                serde_json::json!({"id": format!("t{i}"), "messages": msgs})
            )
        })
        .collect();
    std::fs::write(d.join("p.jsonl"), prompts).expect("prompts");
    run_job(d, sim, "", "turns = \"all\"\n").await
}

/// Runs dataset A over `d/p.jsonl` against `sim` to its end (`request`: more `[request]` keys,
/// `dataset`: more keys of the dataset), then stops the simulator. Returns the output directory.
async fn run_job(
    d: &Path,
    sim: harvest::sim::SimHandle,
    request: &str,
    dataset: &str,
) -> std::path::PathBuf {
    std::fs::write(
        d.join("harvest.toml"),
        format!(
            "base_url = \"{}\"\napi_key_env = \"{VAR}\"\nbudget_usd = 5.0\nconcurrency = 4\n\
             [request]\nmax_tokens = 2000\n{request}[[dataset]]\nname = \"A\"\nprompts = \
             \"p.jsonl\"\n{dataset}",
            sim.base_url()
        ),
    )
    .expect("config");
    let (code, text) =
        crate::common::run_headless(d, VAR, "sk-or-v1-export-test-key-0000000000", &[]).await;
    assert_eq!(code, 0, "{text}");
    sim.stop().await;
    d.join("out")
}

/// `harvest export OUT --to TO ARGS --json`: the accounting of dataset A and the samples.
fn export_json(
    out: &Path,
    to: &Path,
    args: &[&str],
) -> (serde_json::Value, Vec<serde_json::Value>) {
    let mut all: Vec<&std::ffi::OsStr> = vec![
        "export".as_ref(),
        out.as_os_str(),
        "--to".as_ref(),
        to.as_os_str(),
        "--json".as_ref(),
    ];
    all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    let v = crate::common::harvest_json(&all);
    let samples = v["samples"].as_array().cloned().unwrap_or_default();
    (v["datasets"][0].clone(), samples)
}

/// What the drafter learns from each row of a `--format text` file under SpecForge's
/// pre-formatted path with `train_only_last_turn` (its loss-mask rule, one token per
/// character: tests/fixtures/specforge/supervised_text.py), by row id.
fn supervised(file: &Path) -> BTreeMap<String, String> {
    let out = Command::new("python3")
        .arg(fixture("tests/fixtures/specforge/supervised_text.py"))
        .arg(file)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            let spans = v["supervised"].as_array().expect("spans");
            assert_eq!(spans.len(), 1, "{l}");
            (
                v["id"].as_str().expect("id").to_string(),
                spans[0].as_str().expect("text").to_string(),
            )
        })
        .collect()
}

/// The answers of a run, by exploded id (`<id>#<k>`): `<think>{reasoning}</think>{answer}<|im_end|>`,
/// what a drafter for a thinking model must be trained on.
fn wanted(out: &Path) -> BTreeMap<String, String> {
    let rows: Vec<harvest::store::output::OutputRecord> =
        crate::common::read_jsonl(&out.join("A.jsonl"));
    let mut want = BTreeMap::new();
    for r in rows {
        let answers: Vec<_> = r
            .conversations
            .iter()
            .filter(|t| t.role == "assistant")
            .collect();
        for (k, t) in answers.iter().enumerate() {
            let reasoning = t.reasoning_content.as_deref().expect("reasoning");
            want.insert(
                format!("{}#{}", r.id, k + 1),
                format!("<think>{reasoning}</think>{}<|im_end|>", t.content),
            );
        }
    }
    want
}

/// The thinking reaches the trainer. Through Moonshot's own Kimi templates no row keeps its
/// reasoning, and the export says so and names the rows; `--format text --explode-turns`
/// through the built-in final-turn variants gives SpecForge's pre-formatted path
/// `<think>{reasoning}</think>{answer}<|im_end|>` for every answer. The rows a
/// speculators-style reader fans out are the answers, each once, and every row renders through
/// every template (byte for byte as Python's Jinja2 does: `peers::templates`, which needs the
/// peers' Python).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drafter_trains_on_the_thinking_through_the_final_turn_templates() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let out = multi_turn_run(d).await;
    let want = wanted(&out);
    assert_eq!(want.len(), 12, "six conversations of two answers");

    // Before: Moonshot's template drops every row's reasoning; the export counts and names them.
    let official = TEMPLATES[0].0;
    let (c, samples) = export_json(
        &out,
        &d.join("sf"),
        &["--chat-template", official, "--show", "3"],
    );
    assert_eq!(
        (c["rendered"].as_u64(), c["reasoning_dropped"].as_u64()),
        (Some(6), Some(6)),
        "{c}"
    );
    assert_eq!(c["dropped_ids"].as_array().map(Vec::len), Some(5), "{c}");
    assert!(
        samples.iter().all(|s| s["reasoning_dropped"] == true),
        "{samples:?}"
    );
    // Half the conversations have no system turn: SpecForge would add its own to those.
    assert_eq!(c["without_system"].as_u64(), Some(3), "{c}");
    let (_, text_official) = (
        export_json(
            &out,
            &d.join("before"),
            &[
                "--format",
                "text",
                "--explode-turns",
                "--chat-template",
                official,
            ],
        ),
        supervised(&d.join("before/A.jsonl")),
    );
    let kept = |got: &BTreeMap<String, String>| {
        got.iter()
            .filter(|(id, text)| want.get(*id) == Some(*text))
            .count()
    };
    assert_eq!(kept(&text_official), 0, "before: {text_official:?}");

    // After: each answer a final turn, its thinking supervised.
    for builtin in ["kimi-k2-thinking-final-turn", "kimi-k2.5-final-turn"] {
        let to = d.join(builtin);
        let (c, _) = export_json(
            &out,
            &to,
            &[
                "--format",
                "text",
                "--explode-turns",
                "--chat-template",
                builtin,
            ],
        );
        assert_eq!(
            (c["success_rows"].as_u64(), c["reasoning_dropped"].as_u64()),
            (Some(12), Some(0)),
            "{c}"
        );
        let got = supervised(&to.join("A.jsonl"));
        assert_eq!(kept(&got), 12, "{builtin}: {got:?}");
        let rows: Vec<serde_json::Value> = crate::common::read_jsonl(&to.join("A.jsonl"));
        assert!(
            rows.iter()
                .all(|r| r.as_object().map(|o| o.len()) == Some(2)),
            "{{id, text}} only"
        );
    }

    // speculators fans each assistant turn of a `conversations` row out into a training row:
    // unexploded rows give each answer once; exploded ones repeat the earlier answers.
    let fan_out = |file: &Path| -> Vec<String> {
        let rows: Vec<serde_json::Value> = crate::common::read_jsonl(file);
        rows.iter()
            .flat_map(|r| {
                (r["conversations"].as_array().expect("conversations").iter())
                    .filter(|t| t["role"] == "assistant")
                    .map(|t| t["content"].as_str().expect("content").to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let once = fan_out(&d.join("sf/A.jsonl"));
    let mut unique = once.clone();
    unique.sort();
    unique.dedup();
    assert_eq!((once.len(), unique.len()), (12, 12));
    export_json(&out, &d.join("exploded"), &["--explode-turns"]);
    assert_eq!(
        fan_out(&d.join("exploded/A.jsonl")).len(),
        18,
        "README warns: do not explode for speculators"
    );

    // Every row as written, through every template: one sample per row, in the rows' order
    // (peers::templates compares each with Python's rendering, byte for byte).
    for r in renderings(&out, &d.join("py")) {
        let n = if r.explode { 12 } else { 6 };
        assert_eq!((r.samples.len(), r.rows.len()), (n, n), "{}", r.template);
        for (s, row) in r.samples.iter().zip(&r.rows) {
            assert_eq!(s["id"], row["id"]);
            assert!(s["text"].as_str().is_some_and(|t| !t.is_empty()), "{s}");
        }
    }
}

/// One export of a run's rows through one of [`TEMPLATES`]: the rows `--show` printed
/// (`{id, text, ...}`) and the rows written, in the same order.
pub(crate) struct Rendering {
    pub template: &'static str,
    pub file: &'static str,
    pub explode: bool,
    pub samples: Vec<serde_json::Value>,
    pub rows: Vec<serde_json::Value>,
}

/// Every row of dataset A in `out` through every template of [`TEMPLATES`], as written and
/// exploded (each export into `to`, `--show 100`).
pub(crate) fn renderings(out: &Path, to: &Path) -> Vec<Rendering> {
    let mut all = Vec::new();
    for (template, file) in TEMPLATES {
        for explode in [false, true] {
            let mut args = vec!["--chat-template", template, "--show", "100"];
            if explode {
                args.push("--explode-turns");
            }
            let (_, samples) = export_json(out, to, &args);
            let rows = crate::common::read_jsonl(&to.join("A.jsonl"));
            all.push(Rendering {
                template,
                file,
                explode,
                samples,
                rows,
            });
        }
    }
    all
}

/// `export --show N | head -1`: the reader goes away; the files are written and the export
/// ends quietly with 0 (it panicked with 101 on the broken pipe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_the_show_quietly() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let out = multi_turn_run(d).await;
    let to = d.join("piped");
    let mut child = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .arg("export")
        .arg(&out)
        .arg("--to")
        .arg(&to)
        .args(["--chat-template", "kimi-k2.5-final-turn", "--show", "100"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("export");
    // The reader is gone before the first line: the process is still starting, so every
    // write it makes meets the closed pipe (a `head` that has read its line).
    drop(child.stdout.take());
    let done = child.wait_with_output().expect("ends");
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(!String::from_utf8_lossy(&done.stderr).contains("panicked"));
    let rows: Vec<serde_json::Value> = crate::common::read_jsonl(&to.join("A.jsonl"));
    assert_eq!(rows.len(), 6);
}

/// `export --show` into a pipe writes each rendering exactly as the text file holds it, control
/// characters included, so that it can be diffed against Python's (the trainer issue: `--show`
/// dropped them and the file kept them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_show_into_a_pipe_is_the_text_file_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let out = multi_turn_run(d).await;
    // An answer with a bell and an escape in it, as a model may write.
    let file = out.join("A.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&file)
        .expect("answers")
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("json");
            let turns = v["conversations"].as_array_mut().expect("turns");
            let last = turns.last_mut().expect("an answer");
            let content = last["content"].as_str().unwrap_or_default().to_string();
            last["content"] = serde_json::json!(format!("{content} \u{7}\u{1b}[2J"));
            v.to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n") + "\n").expect("rewrite");
    let to = d.join("shown");
    let done = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .arg("export")
        .arg(&out)
        .arg("--to")
        .arg(&to)
        .args([
            "--format",
            "text",
            "--chat-template",
            "kimi-k2.5-final-turn",
            "--show",
            "100",
        ])
        .output()
        .expect("export");
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let shown = String::from_utf8(done.stdout).expect("utf-8");
    let rows: Vec<serde_json::Value> = crate::common::read_jsonl(&to.join("A.jsonl"));
    assert!(!rows.is_empty());
    for r in &rows {
        let text = r["text"].as_str().expect("text");
        assert!(
            text.contains("\u{1b}[2J"),
            "the file keeps the answer as written"
        );
        assert!(
            shown.contains(text),
            "{} shown as the file holds it",
            r["id"]
        );
    }
}

/// A tools run's output directory, its rows exported as text, and its records.
pub(crate) type ToolsRun = (
    std::path::PathBuf,
    Vec<serde_json::Value>,
    Vec<harvest::store::output::OutputRecord>,
);

/// A run of four prompts whose requests offered a `get_weather` tool (`[request] extra = {
/// tools = [...] }`), exported with `--format text --chat-template kimi-k2.5-final-turn` into
/// `d/text`: the output directory, the text rows, and the run's answers.
pub(crate) async fn tools_run(d: &Path) -> ToolsRun {
    tools_run_at(d, fast_sim(30.0).await).await
}

/// [`tools_run`] where every answer is a tool call: `harvest sim --replay` serving Kimi K2.5's
/// recorded tool-call streams at Chutes (one call with reasoning, two parallel calls) in turn.
pub(crate) async fn tool_calls_run(d: &Path) -> ToolsRun {
    let recorded = d.join("recorded");
    std::fs::create_dir_all(&recorded).expect("dir");
    for f in [
        "kimi_k25_chutes_reasoning_tool_call.sse",
        "kimi_k25_chutes_parallel_tool_calls.sse",
    ] {
        std::fs::copy(
            fixture(&format!("tests/fixtures/recorded/{f}")),
            recorded.join(f),
        )
        .expect("copy");
    }
    let mut cfg = harvest::sim::SimConfig::fast_no_faults();
    cfg.replay = Some(std::sync::Arc::new(
        harvest::sim::replay::Replay::load(&recorded).expect("replay"),
    ));
    let sim = harvest::sim::start(cfg, 0).await.expect("sim");
    tools_run_at(d, sim).await
}

async fn tools_run_at(d: &Path, sim: harvest::sim::SimHandle) -> ToolsRun {
    let prompts: String = (0..4)
        .map(|i| format!("{{\"id\": \"w{i}\", \"prompt\": \"weather in city {i}?\"}}\n"))
        .collect();
    std::fs::write(d.join("p.jsonl"), prompts).expect("prompts");
    let tools = "extra = { tools = [{ type = \"function\", function = { name = \"get_weather\", \
                 description = \"The weather of a city\", parameters = { type = \"object\", \
                 properties = { city = { type = \"string\" } }, required = [\"city\"] } } }] }\n";
    let out = run_job(d, sim, tools, "").await;
    let to = d.join("text");
    let (counts, _) = export_json(
        &out,
        &to,
        &[
            "--format",
            "text",
            "--chat-template",
            "kimi-k2.5-final-turn",
        ],
    );
    assert_eq!(counts["success"].as_u64(), Some(4), "{counts}");
    let rows = crate::common::read_jsonl(&to.join("A.jsonl"));
    let answers = crate::common::read_jsonl(&out.join("A.jsonl"));
    (out, rows, answers)
}

/// A run whose requests offered tools: the export renders each row with the tool declaration
/// the model was conditioned on, through the built-in K2.5 template (byte for byte as Python's
/// Jinja2 renders it: `peers::templates`), and `--format specforge` writes the `tools` column
/// SpecForge and speculators read (the trainer issue: 234 characters of the prefix were
/// missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_a_run_offered_are_in_the_training_text() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let (out, rows, _) = tools_run(d).await;
    for r in &rows {
        let text = r["text"].as_str().expect("text");
        assert!(
            text.contains("get_weather") && text.contains("The weather of a city"),
            "{text}"
        );
    }
    let to = d.join("conversations");
    export_json(&out, &to, &[]);
    let rows: Vec<serde_json::Value> = crate::common::read_jsonl(&to.join("A.jsonl"));
    for r in &rows {
        let tools: serde_json::Value =
            serde_json::from_str(r["tools"].as_str().expect("a tools column")).expect("JSON");
        assert_eq!(tools[0]["function"]["name"], "get_weather", "{r}");
    }
}

/// Answers that are tool calls (Kimi K2.5's, recorded at Chutes) are rows with their calls: on
/// the last assistant turn as the API returned them (ids, names, arguments as written), in
/// the training text between the K2.5 template's tool-call tokens, in SpecForge's and OpenAI's
/// rows beside the tools offered, and as ShareGPT `function_call` turns (issue #54 item 5).
/// Before, each was a paid empty answer, retried, and skipped by the export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_answers_are_rows_with_their_calls() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let (out, rows, answers) = tool_calls_run(d).await;
    assert_eq!(answers.len(), 4);
    for a in &answers {
        let last = a.conversations.last().expect("a turn");
        assert_eq!(
            (a.finish_reason.as_str(), a.attempts),
            ("tool_calls", 1),
            "{}",
            a.id
        );
        assert!(!last.tool_calls.is_empty(), "{}", a.id);
        let text = rows
            .iter()
            .find(|r| r["id"] == a.id.as_str())
            .and_then(|r| r["text"].as_str())
            .expect("exported");
        for c in &last.tool_calls {
            let rendered = format!(
                "<|tool_call_begin|>{}<|tool_call_argument_begin|>{}<|tool_call_end|>",
                c.id, c.function.arguments
            );
            assert!(text.contains(&rendered), "{}: {rendered} in {text}", a.id);
        }
    }
    let calls: Vec<Vec<String>> = (answers.iter())
        .map(|a| {
            let last = a.conversations.last().expect("turn");
            last.tool_calls.iter().map(|c| c.id.clone()).collect()
        })
        .collect();
    assert!(
        calls.contains(&vec!["functions.weather:0".to_string()]),
        "{calls:?}"
    );
    assert!(
        calls.contains(&vec![
            "functions.add:0".to_string(),
            "functions.multiply:1".to_string()
        ]),
        "{calls:?}"
    );
    // SpecForge's row: the calls on the assistant turn, arguments as a string.
    let to = d.join("specforge");
    let (counts, _) = export_json(&out, &to, &[]);
    assert_eq!(counts["success"].as_u64(), Some(4), "{counts}");
    let sf: Vec<serde_json::Value> = crate::common::read_jsonl(&to.join("A.jsonl"));
    for r in &sf {
        let turn = &r["conversations"][1];
        assert_eq!(turn["role"], "assistant", "{r}");
        let call = &turn["tool_calls"][0];
        assert_eq!(call["type"], "function", "{r}");
        assert!(call["function"]["arguments"].is_string(), "{r}");
        assert!(r["tools"].is_string(), "{r}");
    }
    // OpenAI's: the tools as a list beside the messages.
    let to = d.join("openai");
    export_json(&out, &to, &["--format", "openai"]);
    let oa: Vec<serde_json::Value> = crate::common::read_jsonl(&to.join("A.jsonl"));
    for r in &oa {
        assert_eq!(r["tools"][0]["function"]["name"], "get_weather", "{r}");
        assert!(r["messages"][1]["tool_calls"].is_array(), "{r}");
    }
    // ShareGPT's: a function_call turn, its value the calls' JSON, and the tools column.
    let to = d.join("sharegpt");
    export_json(&out, &to, &["--format", "sharegpt"]);
    let sg: Vec<serde_json::Value> = crate::common::read_jsonl(&to.join("A.jsonl"));
    assert_eq!(sg.len(), 4);
    for r in &sg {
        let turn = &r["conversations"][1];
        assert_eq!(turn["from"], "function_call", "{r}");
        let value: serde_json::Value =
            serde_json::from_str(turn["value"].as_str().expect("text")).expect("JSON");
        let first = if value.is_array() { &value[0] } else { &value };
        assert!(first["arguments"].is_object(), "{r}");
        assert!(r["tools"].is_string(), "{r}");
    }
}

/// Hostile `--chat-template` files (reliability-probe-5 P7): a link to `/proc/self/environ`
/// (as a cloned model repository may plant one: git keeps symlinks) and a saved copy of the
/// environment, run with the key set. Each is refused with exit 2, naming the file and why,
/// and no exported file, message or output holds the key. Before, both exited 0 with the
/// environment, key included, in every row's `text`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_would_carry_the_key_into_rows_is_refused() {
    const KEY: &str = "sk-or-v1-hostile-template-key-0123456789abcdef";
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let out = multi_turn_run(d).await;
    let link = d.join("chat_template.jinja");
    std::os::unix::fs::symlink("/proc/self/environ", &link).expect("symlink");
    let copy = d.join("environ.jinja");
    std::fs::write(&copy, format!("HOME=/root\nOPENROUTER_API_KEY={KEY}\n")).expect("copy");
    for (template, why) in [
        (&link, "it resolves to /proc/"),
        (
            &copy,
            "it holds the value of OPENROUTER_API_KEY, the API key",
        ),
    ] {
        let to = d.join(format!(
            "to-{}",
            template.file_name().expect("name").display()
        ));
        let done = Command::new(env!("CARGO_BIN_EXE_harvest"))
            .arg("export")
            .arg(&out)
            .arg("--to")
            .arg(&to)
            .args(["--format", "text", "--chat-template"])
            .arg(template)
            .env("OPENROUTER_API_KEY", KEY)
            .output()
            .expect("export");
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(2), "{}: {err}", template.display());
        assert!(err.contains(&template.display().to_string()), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(!err.contains(KEY) && !done.stdout.windows(KEY.len()).any(|w| w == KEY.as_bytes()));
        // Refused before anything is written; whatever is there holds no key.
        if !to.exists() {
            continue;
        }
        for (name, bytes) in files(&to) {
            assert!(
                !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
                "{name}"
            );
        }
    }
}
