//! Typed errors and systematic failures, through the binary against the simulator on
//! 127.0.0.1: every request forced to fail with a 404 `privacy_restricted` stops the run within
//! `stop_after_same_error` attempts (plus what was in flight), exit 1, nothing rejected; cleared
//! and resumed, the run completes. A mid-stream `content_policy_violation` is attempted once
//! and rejected with its kind; a `provider_overloaded` is retried.

use std::path::Path;

use crate::common::{fast_sim, force_error, read_jsonl, write_job_with_ids};
use harvest::sim::ForcedError;
use harvest::store::output::{OutputRecord, RejectRecord};

const VAR: &str = "HARVEST_SYSTEMATIC_TEST_KEY";

fn job(dir: &Path, base: &str, n: usize) {
    write_job_with_ids(
        dir,
        base,
        VAR,
        n,
        "concurrency = 4\n[retry]\nbase_delay_ms = 10",
    );
}

async fn run(dir: &Path) -> (i32, String) {
    crate::common::run_headless(dir, VAR, "sk-or-v1-systematic-test-key-00000", &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_privacy_setting_that_refuses_everything_stops_the_run_and_rejects_nothing() {
    let sim = fast_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    job(dir.path(), &sim.base_url(), 100);
    force_error(
        &sim,
        Some(ForcedError {
            status: 404,
            error_type: "not_found".into(),
            availability: Some("privacy_restricted".into()),
            mid_stream: false,
            message: None,
            remaining: None,
            provider_name: None,
            raw: None,
        }),
    );
    let (code, text) = run(dir.path()).await;
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("the last 20 prompts all failed the same way (404 privacy_restricted"),
        "{text}"
    );
    assert!(text.contains("openrouter.ai/settings/privacy"), "{text}");
    let sent = sim.state.requests_since(0).len();
    assert!(
        sent <= 20 + 4,
        "stopped within 20 attempts plus those in flight: {sent}"
    );
    let out = dir.path().join("out");
    assert!(
        read_jsonl::<RejectRecord>(&out.join("A.rejects.jsonl")).is_empty(),
        "nothing rejected"
    );

    // The setting fixed: the same command completes every prompt.
    force_error(&sim, None);
    let (code, text) = run(dir.path()).await;
    assert_eq!(code, 0, "{text}");
    let outputs: Vec<OutputRecord> = read_jsonl(&out.join("A.jsonl"));
    assert_eq!(outputs.len(), 100);
    assert!(read_jsonl::<RejectRecord>(&out.join("A.rejects.jsonl")).is_empty());
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_flag_mid_stream_is_rejected_at_once_and_an_overload_is_retried() {
    let sim = fast_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    job(dir.path(), &sim.base_url(), 1);
    force_error(
        &sim,
        Some(ForcedError {
            status: 400,
            error_type: "content_policy_violation".into(),
            availability: None,
            mid_stream: true,
            message: Some("Output flagged by the content filter".into()),
            remaining: Some(1),
            provider_name: Some("Chutes".into()),
            raw: Some(r#"{"error": {"message": "Output flagged:\nviolence"}}"#.into()),
        }),
    );
    let (code, text) = run(dir.path()).await;
    assert_eq!(code, 0, "{text}");
    let out = dir.path().join("out");
    let rejects: Vec<RejectRecord> = read_jsonl(&out.join("A.rejects.jsonl"));
    assert_eq!(rejects.len(), 1, "{text}");
    assert_eq!(
        (rejects[0].error_kind.as_str(), rejects[0].attempts),
        ("policy", 1)
    );
    assert_eq!(sim.state.requests_since(0).len(), 1, "attempted once");
    // What the provider said, as typed fields of the reject and of status --json.
    let said = harvest::store::output::FailureCause {
        provider_name: Some("Chutes".into()),
        error_type: Some("content_policy_violation".into()),
        upstream: Some("Output flagged: violence".into()),
    };
    assert_eq!(rejects[0].cause, said);
    let report = |json: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"));
        c.arg("status").arg(&out).arg("--report");
        if json {
            c.arg("--json");
        }
        String::from_utf8(c.output().expect("status").stdout).expect("utf-8")
    };
    let status: serde_json::Value = serde_json::from_str(&report(true)).expect("json");
    assert_eq!(
        status["reject_causes"],
        serde_json::json!([{"kind": "policy", "provider_name": "Chutes",
                            "error_type": "content_policy_violation",
                            "upstream": "Output flagged: violence", "rejects": 1}]),
        "{status}"
    );
    assert!(
        report(false).contains(
            "rejected: 1 policy (Chutes: content_policy_violation: Output flagged: violence)"
        ),
        "{}",
        report(false)
    );

    // A fresh directory: an overload first, then the answer.
    let dir = tempfile::tempdir().expect("tmp");
    job(dir.path(), &sim.base_url(), 1);
    force_error(
        &sim,
        Some(ForcedError {
            status: 503,
            error_type: "provider_overloaded".into(),
            availability: None,
            mid_stream: false,
            message: None,
            remaining: Some(1),
            provider_name: None,
            raw: None,
        }),
    );
    let (code, text) = run(dir.path()).await;
    assert_eq!(code, 0, "{text}");
    let outputs: Vec<OutputRecord> = read_jsonl(&dir.path().join("out/A.jsonl"));
    assert_eq!(outputs.len(), 1, "{text}");
    assert_eq!(outputs[0].attempts, 2, "retried once");
    sim.stop().await;
}

/// Server text with escape sequences (a title set, a screen cleared, a line forged) reaches the
/// terminal without them: in the headless lines, the stop message, the summary and `status`
/// (reliability probe 3, D8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_sequences_in_server_text_never_reach_the_terminal() {
    let sim = fast_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    write_job_with_ids(
        dir.path(),
        &sim.base_url(),
        VAR,
        30,
        "concurrency = 4\n[retry]\nbase_delay_ms = 10\nstop_after_same_error = 5",
    );
    force_error(
        &sim,
        Some(ForcedError {
            status: 400,
            error_type: "invalid_request".into(),
            availability: None,
            mid_stream: false,
            message: Some("bad \u{1b}]0;PWNED-TITLE\u{7} \u{1b}[2J end\r\nFAKE LINE".into()),
            remaining: None,
            provider_name: Some("Evil\u{1b}[31mRed".into()),
            raw: None,
        }),
    );
    let (code, text) = run(dir.path()).await;
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("PWNED-TITLE"), "the words are shown: {text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\r'),
        "{text:?}"
    );
    let out = dir.path().join("out");
    for args in [vec![], vec!["--report"]] {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
            .arg("status")
            .arg(&out)
            .args(&args)
            .output()
            .expect("status");
        let shown = String::from_utf8_lossy(&status.stdout);
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
            "{shown:?}"
        );
    }
    sim.stop().await;
}
