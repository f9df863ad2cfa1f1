//! End to end, as an operator works: the real `harvest run` binary in a tmux pane against the
//! simulator on 127.0.0.1. Waits for the providers table, excludes the endpoint under the
//! cursor with the space bar, reads the screen with `capture-pane`, checks the mark changed
//! and that the simulator got no later request for that endpoint, then quits with drain and
//! checks the outputs are complete. Needs tmux (`.ci/run` installs it).

mod common;

use common::{paced_sim, write_job};
use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use harvest::store::output::OutputRecord;

const SOCKET: &str = "harvest-e2e-test";
const KEY: &str = "sk-or-v1-tmux-test-key-000000";

fn tmux(args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(["-L", SOCKET])
        .args(args)
        .output()
        .expect("tmux is installed (.ci/run installs it)")
}

fn screen() -> String {
    String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "e2e"]).stdout).to_string()
}

async fn wait_for(what: &str, deadline: Instant, check: impl Fn(&str) -> bool) -> String {
    loop {
        let s = screen();
        if check(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; screen:\n{s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn row<'a>(screen: &'a str, tag: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(tag))
        .unwrap_or_else(|| panic!("no row for {tag} in:\n{screen}"))
}

struct KillServer;
impl Drop for KillServer {
    fn drop(&mut self) {
        let _ = tmux(&["kill-server"]);
    }
}

fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_excludes_an_endpoint_in_the_tui_then_drains() {
    if !tmux_available() {
        // CI installs tmux and must run this; elsewhere say loudly what was not checked.
        assert!(std::env::var_os("CI").is_none(), "tmux is missing in CI");
        eprintln!(
            "SKIPPED: tmux is not installed (apt-get install tmux); the TUI end-to-end test did not run"
        );
        return;
    }
    let sim = paced_sim(0.05, 300.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    // Pinned routing: everything goes to the cheapest allowed endpoint, Chutes, the first row.
    let config = write_job(
        dir.path(),
        3000,
        &sim.base_url(),
        "HARVEST_TMUX_KEY",
        "concurrency = 20\nrouting = \"pinned\"\n[request]\nmax_tokens = 2000",
        "T",
    );
    let _cleanup = KillServer;
    let _ = tmux(&["kill-server"]);
    let cmd = format!(
        "{} run -c {}; echo HARVEST-EXIT=$?; sleep 600",
        env!("CARGO_BIN_EXE_harvest"),
        config.display()
    );
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        "e2e",
        "-x",
        "160",
        "-y",
        "48",
        "-e",
        &format!("HARVEST_TMUX_KEY={KEY}"),
        &cmd,
    ]);
    assert!(started.status.success(), "{started:?}");

    let deadline = Instant::now() + Duration::from_secs(90);
    let s = wait_for("the providers table with answers", deadline, |s| {
        s.contains("Providers") && s.contains("chutes/int4") && s.contains("RUNNING")
    })
    .await;
    let chutes = row(&s, "chutes/int4");
    assert!(chutes.contains("[x]"), "chutes starts included: {chutes}");
    assert!(
        chutes.contains('>'),
        "the cursor starts on the cheapest row: {chutes}"
    );
    // Let Chutes serve for a while.
    while sim.state.requests_since(0).len() < 60 {
        assert!(Instant::now() < deadline, "no traffic");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    tmux(&["send-keys", "-t", "e2e", "Space"]);
    let s = wait_for("chutes excluded by the operator", deadline, |s| {
        s.lines()
            .find(|l| l.contains("chutes/int4"))
            .is_some_and(|l| l.contains("[ ]") && l.contains("operator"))
    })
    .await;
    assert!(
        s.contains("operator excluded chutes/int4"),
        "the event log says so:\n{s}"
    );
    // Requests already on their way may still land; after that, none may go to Chutes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cut = sim.state.requests_since(0).last().map_or(0, |r| r.seq);
    while sim.state.requests_since(cut + 1).len() < 60 {
        assert!(
            Instant::now() < deadline,
            "traffic stopped after the exclusion"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let later = sim.state.requests_since(cut + 1);
    assert!(
        later.iter().all(|r| r.tag != "chutes/int4"),
        "the simulator served a request for chutes after it was excluded"
    );

    // Quit with drain: the dialog, then `d`; the run saves and exits 130.
    tmux(&["send-keys", "-t", "e2e", "q"]);
    wait_for("the quit dialog", deadline, |s| s.contains("drain")).await;
    tmux(&["send-keys", "-t", "e2e", "d"]);
    let s = wait_for("the exit", deadline, |s| s.contains("HARVEST-EXIT=")).await;
    assert!(s.contains("HARVEST-EXIT=130"), "{s}");
    assert!(
        s.contains("STOPPED") && s.contains("operator: drain"),
        "summary on the normal screen:\n{s}"
    );

    check_outputs(&dir.path().join("out"));
    sim.stop().await;
}

/// Every line a whole record, no id twice, as many as the state file says are done.
fn check_outputs(out: &Path) {
    let text = std::fs::read_to_string(out.join("T.jsonl")).expect("outputs");
    let recs: Vec<OutputRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("whole record"))
        .collect();
    let ids: HashSet<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), recs.len());
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("state.json")).expect("state"))
            .expect("json");
    assert_eq!(state["done"].as_u64(), Some(recs.len() as u64));
    assert_eq!(state["in_flight"].as_u64(), Some(0), "drained");
}
