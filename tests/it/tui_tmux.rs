//! End to end, as an operator works: the real `harvest run` binary in a tmux pane against the
//! simulator on 127.0.0.1. Waits for the providers table, excludes the endpoint under the
//! cursor with the space bar, reads the screen with `capture-pane`, checks the mark changed
//! and that the simulator got no later request for that endpoint, then quits with drain and
//! checks the outputs are complete. Needs tmux (`.ci/run` installs it).

use crate::common::tmux::Tmux;
use crate::common::{paced_sim, write_job};
use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use harvest::store::output::OutputRecord;

const KEY: &str = "sk-or-v1-tmux-test-key-000000";

fn row<'a>(screen: &'a str, tag: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(tag))
        .unwrap_or_else(|| panic!("no row for {tag} in:\n{screen}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_excludes_an_endpoint_in_the_tui_then_drains() {
    if !Tmux::available() {
        crate::common::tmux::missing("the TUI end-to-end test");
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
    let tmux = Tmux::new("harvest-e2e-test");
    let cmd = format!(
        "{} run -c {}; echo HARVEST-EXIT=$?; sleep 600",
        env!("CARGO_BIN_EXE_harvest"),
        config.display()
    );
    tmux.session("e2e", &[format!("HARVEST_TMUX_KEY={KEY}")], &cmd);

    let deadline = Instant::now() + Duration::from_secs(90);
    let s = tmux
        .wait_for("e2e", "the providers table with answers", deadline, |s| {
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

    tmux.run(&["send-keys", "-t", "e2e", "Space"]);
    let s = tmux
        .wait_for("e2e", "chutes excluded by the operator", deadline, |s| {
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
    tmux.run(&["send-keys", "-t", "e2e", "q"]);
    tmux.wait_for("e2e", "the quit dialog", deadline, |s| s.contains("drain"))
        .await;
    tmux.run(&["send-keys", "-t", "e2e", "d"]);
    let s = tmux
        .wait_for("e2e", "the exit", deadline, |s| s.contains("HARVEST-EXIT="))
        .await;
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

/// Started in a locale without UTF-8 (`LC_ALL=C`), the screen holds ASCII alone: the borders
/// and the budget gauge are drawn with `+ - |` and `#`, not sent as UTF-8 a client without it
/// shows as rows of `_` (issue #53). The demo, on its embedded simulator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_locale_gets_an_ascii_screen() {
    if !Tmux::available() {
        crate::common::tmux::missing("the ASCII screen test");
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let tmux = Tmux::new("harvest-ascii-test");
    let cmd = format!(
        "{} demo --out {}; echo HARVEST-EXIT=$?; sleep 600",
        env!("CARGO_BIN_EXE_harvest"),
        dir.path().join("demo").display()
    );
    let env = ["LC_ALL=C".to_string(), "LANG=C".to_string()];
    tmux.session("c", &env, &cmd);
    let deadline = Instant::now() + Duration::from_secs(60);
    let s = tmux
        .wait_for("c", "the running demo with money spent", deadline, |s| {
            s.contains("Providers") && s.contains("RUNNING") && s.contains("##")
        })
        .await;
    for (n, line) in s.lines().enumerate() {
        assert!(line.is_ascii(), "line {n} is not ASCII: {line}\n{s}");
    }
    assert!(
        s.contains('+') && s.contains('|') && s.contains("--"),
        "ASCII borders: {s}"
    );
    // Leave the demo as an operator would: stop now, and it exits by itself.
    assert!(tmux.run(&["send-keys", "-t", "c", "q"]).status.success());
    tmux.wait_for("c", "the quit dialog", deadline, |s| s.contains("stop now"))
        .await;
    assert!(tmux.run(&["send-keys", "-t", "c", "n"]).status.success());
    let end = Instant::now() + Duration::from_secs(60);
    tmux.wait_for("c", "the demo to exit", end, |s| {
        s.contains("HARVEST-EXIT=")
    })
    .await;
}
