//! `harvest export` on a real run's output directory (the simulator on 127.0.0.1): the success
//! files pass SpecForge's own validator (vendored unchanged in tests/fixtures/specforge, run
//! with python3 and `--expect-reasoning --strict-think-markers`), the accounting adds up to
//! the prompt files' counts, and the output directory is not changed.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{fast_sim, write_job_with_ids};

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
    let counts = common::harvest_json(&[
        "export".as_ref(),
        out.as_os_str(),
        "--to".as_ref(),
        to.as_os_str(),
        "--require-reasoning".as_ref(),
        "--json".as_ref(),
        "-c".as_ref(),
        cfg.as_os_str(),
    ]);
    let c = &counts[0];
    let n = |k: &str| c[k].as_u64().expect(k);
    assert_eq!(
        n("success") + n("error") + n("skipped") + n("not_run"),
        n("prompts"),
        "{c}"
    );
    assert_eq!(n("prompts"), 60);
    assert!(n("success") > 0 && n("skipped") > 0, "{c}");
    assert_eq!(files(&out), before, "the output directory is not changed");

    // SpecForge's own validator on the success file.
    let said = common::specforge_validates(&to.join("A.jsonl"));
    assert!(said.contains(&format!("rows: {}", n("success"))), "{said}");
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
        common::read_jsonl(&d.join("out/A.jsonl"));
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
        common::read_jsonl(&d.join("out/A.rejects.jsonl"));
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

/// The peers' Python with Jinja2 (scripts/peers.sh), or `None` (see `common::peers_missing`).
fn peer_python() -> Option<std::path::PathBuf> {
    let python = common::peer_env()
        .remove("HARVEST_PEER_PYTHON")
        .filter(|p| p.is_file())
        .filter(|p| {
            Command::new(p)
                .args(["-c", "import jinja2"])
                .status()
                .is_ok_and(|s| s.success())
        });
    if python.is_none() {
        common::peers_missing(
            "chat template test: the peers' Python with jinja2 is not installed; run \
             scripts/peers.sh install",
        );
    }
    python
}

/// `export --chat-template FILE --show N` prints N exported rows as the trainer's template
/// renders them: the same text as Python's Jinja2 under transformers' options, byte for byte;
/// the last answer's reasoning inside its think block, earlier answers' not, and the
/// template's default system turn where the row has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_renders_rows_through_the_chat_template_as_transformers_does() {
    let sim = fast_sim(30.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
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
    std::fs::write(
        d.join("harvest.toml"),
        format!(
            "base_url = \"{}\"\napi_key_env = \"{VAR}\"\nbudget_usd = 5.0\nconcurrency = 4\n\
             [request]\nmax_tokens = 2000\n[[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n\
             turns = \"all\"\n",
            sim.base_url()
        ),
    )
    .expect("config");
    let (code, text) =
        common::run_headless(d, VAR, "sk-or-v1-export-test-key-0000000000", &[]).await;
    assert_eq!(code, 0, "{text}");
    let template = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/chat_templates/kimi_k2_test.jinja");
    let to = d.join("export");
    let shown = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .arg("export")
        .arg(d.join("out"))
        .arg("--to")
        .arg(&to)
        .arg("--chat-template")
        .arg(&template)
        .args(["--show", "4"])
        .output()
        .expect("export");
    let stdout = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    // "── A · t0 · 5 messages ──" then the text, a blank line after each.
    // The table comes last; each rendering ends with a blank line.
    let table_at = stdout.rfind("\ndataset ").expect("the table") + 1;
    let blocks: Vec<(&str, &str)> = stdout[..table_at]
        .split("── A · ")
        .skip(1)
        .map(|b| {
            let (head, text) = b.split_once(" ──\n").expect("heading");
            let id = head.split(" · ").next().expect("id");
            (id, text.strip_suffix("\n\n").expect("blank line after"))
        })
        .collect();
    assert_eq!(blocks.len(), 4, "{stdout}");
    assert!(stdout.contains("success"), "the table follows: {stdout}");
    let rows: Vec<serde_json::Value> = common::read_jsonl(&to.join("A.jsonl"));
    for (id, text) in &blocks {
        let row = rows.iter().find(|r| r["id"] == *id).expect("exported row");
        let conv = row["conversations"].as_array().expect("conversations");
        let last = conv.last().expect("last");
        let reasoning = last["reasoning_content"].as_str().expect("reasoning");
        // What a person checks: the answer's thinking where the template puts it, the earlier
        // answer (the model's, not the dataset's) without its thinking, a system turn.
        assert!(
            text.ends_with(&format!(
                "<think>{}</think>{}<|im_end|>",
                reasoning.trim(),
                last["content"].as_str().expect("content")
            )),
            "{text}"
        );
        assert_eq!(text.matches("<think></think>").count(), 1, "{text}");
        assert!(!text.contains("dataset text"), "{text}");
        assert!(
            text.starts_with("<|im_system|>system<|im_middle|>"),
            "{text}"
        );
    }
    if let Some(python) = peer_python() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/chat_templates/render_like_transformers.py");
        let source = std::fs::read_to_string(&template).expect("template");
        for (id, text) in &blocks {
            let row = rows.iter().find(|r| r["id"] == *id).expect("exported row");
            let job = serde_json::json!({"template": source, "messages": row["conversations"]});
            let mut child = Command::new(&python)
                .arg(&script)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
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
            assert!(out.status.success());
            assert_eq!(*text, String::from_utf8_lossy(&out.stdout), "{id}");
        }
    }
    sim.stop().await;
}
