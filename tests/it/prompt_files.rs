//! Prompt files as a user writes them: an id reused with other content stops the run before
//! anything is sent (exit 2, naming both lines) unless `on_duplicate = "skip"`, and duplicates
//! are counted where the operator looks (start notes, `status --json`).

use std::process::Command;

use crate::common::paced_sim;

const KEY: &str = "sk-or-v1-prompt-files-test-key-0000";

fn job(dir: &std::path::Path, base: &str, extra: &str) -> std::path::PathBuf {
    std::fs::write(
        dir.join("p.jsonl"),
        "{\"id\":\"1\",\"prompt\":\"one\"}\n{\"id\":\"2\",\"prompt\":\"two\"}\n\
         {\"id\":2,\"prompt\":\"two\"}\n{\"id\":\"1\",\"prompt\":\"not one\"}\n{\"id\":\"3\",\"prompt\":\"three\"}\n",
    )
    .expect("prompts");
    let cfg = dir.join("harvest.toml");
    std::fs::write(
        &cfg,
        format!(
            "base_url = \"{base}\"\napi_key_env = \"HARVEST_PF_KEY\"\nbudget_usd = 1.0\n{extra}\n\
             [[dataset]]\nname = \"P\"\nprompts = \"p.jsonl\"\n"
        ),
    )
    .expect("config");
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_reused_with_other_content_is_an_error_unless_skipped() {
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = job(dir.path(), &sim.base_url(), "");
    let run = |cfg: std::path::PathBuf| {
        Command::new(env!("CARGO_BIN_EXE_harvest"))
            .args(["run", "--headless", "-c"])
            .arg(cfg)
            .env("HARVEST_PF_KEY", KEY)
            .output()
            .expect("runs")
    };
    let c = cfg.clone();
    let out = tokio::task::spawn_blocking(move || run(c))
        .await
        .expect("join");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("p.jsonl:4: id \"1\" is already the id of line 1"),
        "{err}"
    );
    assert!(sim.state.requests_since(0).is_empty(), "nothing was sent");

    let cfg = job(dir.path(), &sim.base_url(), "on_duplicate = \"skip\"");
    let out = tokio::task::spawn_blocking(move || run(cfg))
        .await
        .expect("join");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "dataset P: 2 duplicate ids skipped (1 with other content; first: lines 3, 4)"
        ),
        "{err}"
    );
    let status = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["status", "--json"])
        .arg(dir.path().join("out"))
        .output()
        .expect("status");
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
    assert_eq!(v["datasets"][0]["duplicates"], 2);
    assert_eq!(v["datasets"][0]["done"], 3, "each id once");
    let report = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["status", "--report"])
        .arg(dir.path().join("out"))
        .output()
        .expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("duplicate-ids×2"), "{text}");
    sim.stop().await;
}

/// A prompt far past every endpoint's context (here 12 MB, ~3 M tokens against the simulator's
/// 262,144) is rejected as `too-long` without being sent; the others are answered
/// (reliability-probe-3 D16: a 100 MB line was uploaded, then refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_far_past_every_context_is_rejected_without_being_sent() {
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = job(dir.path(), &sim.base_url(), "");
    let huge = format!(
        "{{\"id\":\"big\",\"prompt\":\"{}\"}}\n",
        "word ".repeat(12_000_000 / 5)
    );
    std::fs::write(
        dir.path().join("p.jsonl"),
        format!(
            "{{\"id\":\"1\",\"prompt\":\"one\"}}\n{huge}{{\"id\":\"3\",\"prompt\":\"three\"}}\n"
        ),
    )
    .expect("prompts");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_harvest"))
            .args(["run", "--headless", "-c"])
            .arg(cfg)
            .env("HARVEST_PF_KEY", KEY)
            .output()
            .expect("runs")
    })
    .await
    .expect("join");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    let sent = sim.state.requests_since(0);
    assert_eq!(sent.len(), 2, "only the two that may fit are sent");
    let rejects: Vec<harvest::store::output::RejectRecord> =
        crate::common::read_jsonl(&dir.path().join("out/P.rejects.jsonl"));
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    let r = &rejects[0];
    assert_eq!(
        (r.id.as_str(), r.error_kind.as_str(), r.attempts),
        ("big", "too-long", 0)
    );
    assert!(
        r.error.starts_with("line 2: about 3000004 tokens") && r.error.contains("(262144)"),
        "{}",
        r.error
    );
    let rows: Vec<serde_json::Value> = crate::common::read_jsonl(&dir.path().join("out/P.jsonl"));
    assert_eq!(rows.len(), 2);
    sim.stop().await;
}
