//! A scheduler's stop: SIGTERM (Slurm before `--time` runs out, Kubernetes before it kills a
//! pod) drains the run, which says whose stop it was in its event log, its state file, `status`
//! and its last line, and exits 75: the code the shipped sbatch script requeues on and the
//! Job's podFailurePolicy retries (deploy/). Run again, it resumes: every id once, the ledger
//! equal to the simulator's bill.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{paced_sim, write_job_with_ids};

const KEY_VAR: &str = "HARVEST_SIGTERM_KEY";
const KEY: &str = "sk-or-v1-sigterm-test-key-00000";
const LABEL: &str = "scheduler stop: SIGTERM from Slurm, resumes when resubmitted";

/// Rows by id across the answers and the rejects.
fn rows_by_id(out: &Path) -> HashMap<String, usize> {
    let mut ids: HashMap<String, usize> = HashMap::new();
    for file in ["A.jsonl", "A.rejects.jsonl"] {
        let text = std::fs::read_to_string(out.join(file)).unwrap_or_default();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("whole line");
            *ids.entry(v["id"].as_str().expect("id").to_string())
                .or_default() += 1;
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_from_slurm_drains_exits_75_and_the_rerun_resumes_each_id_once() {
    let sim = paced_sim(0.3, 300.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let n = 80;
    write_job_with_ids(
        dir.path(),
        &sim.base_url(),
        KEY_VAR,
        n,
        "concurrency = 16\n[request]\nmax_tokens = 2000",
    );
    let out = dir.path().join("out");
    let run = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_harvest"));
        c.args(["run", "--headless", "--drain-grace-s", "20", "-c"])
            .arg(dir.path().join("harvest.toml"))
            .env(KEY_VAR, KEY)
            // As in a task of a Slurm job (the variable Slurm sets in every job).
            .env("SLURM_JOB_ID", "4242")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("HARVEST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let child = run().spawn().expect("harvest starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while rows_by_id(&out).len() < 16 {
        assert!(Instant::now() < deadline, "no answers in 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(term.success());
    let first = tokio::task::spawn_blocking(move || child.wait_with_output().expect("wait"))
        .await
        .expect("join");
    let (said, err) = (
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&first.stderr),
    );
    assert_eq!(first.status.code(), Some(75), "{said}{err}");
    // The last lines and stderr say whose stop it was, and what comes next.
    let header = (said.lines())
        .find(|l| l.contains("STOPPED after"))
        .unwrap_or_else(|| panic!("no summary: {said}"));
    assert!(header.ends_with(&format!("({LABEL})")), "{header}");
    assert!(
        err.contains(&format!("harvest: {LABEL}: finishing in-flight requests"))
            && err.contains("then exit 75"),
        "{err}"
    );
    assert!(
        !said.contains("operator") && !err.contains("operator"),
        "{said}{err}"
    );
    // The event log (harvest.log), the state file and `status`.
    let log = std::fs::read_to_string(out.join("harvest.log")).expect("harvest.log");
    assert!(log.contains(&format!("stopping: {LABEL}")), "{log}");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("state.json")).expect("state"))
            .expect("json");
    assert_eq!(state["state"], "stopped");
    assert_eq!(
        state["reason"],
        serde_json::json!({"kind": "scheduler_stop", "by": "slurm"})
    );
    let status = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .arg("status")
        .arg(&out)
        .output()
        .expect("status");
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains(LABEL), "{status}");
    let stopped_at = rows_by_id(&out);
    assert!(
        stopped_at.len() < n,
        "stopped before the end: {}",
        stopped_at.len()
    );

    // Resubmitted: it resumes and finishes; each id once, the ledger equal to the bill.
    let second = run().output().expect("rerun");
    let said = String::from_utf8_lossy(&second.stdout);
    assert_eq!(
        second.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let rows = rows_by_id(&out);
    assert_eq!(rows.len(), n, "every id");
    assert!(rows.values().all(|&k| k == 1), "an id twice: {rows:?}");
    assert_eq!(
        crate::common::ledger_total(&out),
        sim.state.billed_total(),
        "the ledger is the bill:\n{}",
        crate::common::ledger_against_bill(&out, &sim.state.billing_entries())
    );
    eprintln!(
        "SIGTERM after {} of {n} ids: exit 75; the rerun answered the other {}",
        stopped_at.len(),
        n - stopped_at.len()
    );
    sim.stop().await;
}
