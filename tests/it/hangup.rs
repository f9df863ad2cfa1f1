//! harvest never hangs when its terminal or its output goes away: headless into a pipe that
//! closes after three lines, SIGHUP, and the TUI on a pseudo-terminal that vanishes (an ssh
//! drop without tmux). Each drains (then, past the grace period, stops now), writes
//! everything, leaves nothing open in the ledger, and exits 129. And a second Ctrl-C stops now,
//! closing what is in flight. What the run decided is asserted; the wall-clock ceilings are the
//! grace each measures plus 20 s, so that a loaded machine cannot fail them.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{paced_sim, write_job};

const KEY: &str = "sk-or-v1-hangup-test-key-000000";

/// Attempts with a `dispatched` or `started` line and no closing line.
fn open_attempts(out: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(out.join("spend.jsonl")).unwrap_or_default();
    let mut opened: HashSet<String> = HashSet::new();
    let mut closed: HashSet<String> = HashSet::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("whole ledger line");
        let Some(a) = v["attempt"].as_str() else {
            continue;
        };
        match v["kind"].as_str() {
            Some("dispatched" | "started") => {
                opened.insert(a.to_string());
            }
            Some("adjustment") | None => {}
            Some(_) => {
                closed.insert(a.to_string());
            }
        }
    }
    opened.difference(&closed).cloned().collect()
}

/// The drain grace the hang-up tests pass (`--drain-grace-s`), in seconds.
const GRACE_S: u64 = 8;

/// Slack over a grace for a loaded machine (process start, catalog, the last writes).
const SLACK_S: u64 = 20;

/// What the run's log (`harvest.log`: every event of the engine) says of a drain for a lost
/// terminal or output: that the engine began it, and, when the grace ran out and the driver
/// stopped now, that this came after it. Either end is right: what was in flight finished
/// within the grace, or was closed at its end.
fn drained_for_lost_output(out: &Path) {
    let log = std::fs::read_to_string(out.join("harvest.log")).expect("harvest.log");
    let tail: Vec<&str> = log.lines().rev().take(20).collect();
    let drain = log
        .find("stopping: terminal or output lost: drained")
        .unwrap_or_else(|| {
            panic!("the engine drained for the lost output; the log ends {tail:#?}")
        });
    let now = log.find("stopping now: closing what is in flight");
    if let Some(at) = now {
        assert!(at > drain, "stopped now before the drain: {tail:#?}");
    }
    eprintln!(
        "drained for the lost output; {}",
        if now.is_some() {
            "the grace ran out: stopped now"
        } else {
            "all in flight finished within the grace"
        }
    );
}

/// Ledger lines of `kind` (`cancelled`: a stream we closed).
fn ledger_lines(out: &Path, kind: &str) -> usize {
    let text = std::fs::read_to_string(out.join("spend.jsonl")).unwrap_or_default();
    text.lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("whole ledger line");
            v["kind"] == kind
        })
        .count()
}

/// Every output line whole, no id twice.
fn outputs(out: &Path, name: &str) -> usize {
    let text = std::fs::read_to_string(out.join(format!("{name}.jsonl"))).unwrap_or_default();
    let mut ids: HashMap<String, usize> = HashMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("whole output line");
        *ids.entry(v["id"].as_str().expect("id").to_string())
            .or_default() += 1;
    }
    assert!(ids.values().all(|&n| n == 1), "an id twice");
    ids.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_into_a_pipe_closed_after_three_lines_drains_and_exits_129() {
    let sim = paced_sim(0.3, 300.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = write_job(
        dir.path(),
        400,
        &sim.base_url(),
        "HARVEST_HANGUP_KEY",
        "budget_usd = 5.0\nconcurrency = 24\n[request]\nmax_tokens = 2000",
        "P",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args([
            "run",
            "--headless",
            "--progress-every",
            "0.2",
            "--drain-grace-s",
            &GRACE_S.to_string(),
            "-c",
        ])
        .arg(&cfg)
        .env("HARVEST_HANGUP_KEY", KEY)
        // The log (`harvest.log`) at its default level: it says how the run stopped.
        .env_remove("HARVEST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("harvest starts");
    let stdout = child.stdout.take().expect("piped");
    let lines = tokio::task::spawn_blocking(move || {
        let mut r = BufReader::new(stdout);
        let mut got = Vec::new();
        for _ in 0..3 {
            let mut l = String::new();
            r.read_line(&mut l).expect("a line");
            got.push(l);
        }
        got
        // The reader drops here: the pipe closes, as `| head -3` does.
    })
    .await
    .expect("join");
    assert!(lines[0].contains("run started"), "{lines:?}");
    let closed = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if closed.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("harvest hung after its stdout closed");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let took = closed.elapsed();
    // Within the drain grace (then a stop-now), plus slack for a loaded machine.
    assert!(
        took < Duration::from_secs(GRACE_S + SLACK_S),
        "took {took:?}"
    );
    assert_eq!(status.code(), Some(129), "{status:?}");
    let out = dir.path().join("out");
    drained_for_lost_output(&out);
    assert_eq!(
        open_attempts(&out),
        Vec::<String>::new(),
        "nothing left open in the ledger"
    );
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("state.json")).expect("state"))
            .expect("json");
    assert_eq!(state["reason"]["kind"], "output_lost");
    assert_eq!(
        state["state"], "stopped",
        "stopped before the work was done"
    );
    assert_eq!(state["in_flight"], 0);
    assert_eq!(state["done"].as_u64(), Some(outputs(&out, "P") as u64));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tui_on_a_vanishing_terminal_drains_and_exits_129() {
    let sim = paced_sim(0.3, 300.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = write_job(
        dir.path(),
        400,
        &sim.base_url(),
        "HARVEST_HANGUP_KEY",
        "budget_usd = 5.0\nconcurrency = 24\n[request]\nmax_tokens = 2000",
        "P",
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/pty_run.py");
    let bin = env!("CARGO_BIN_EXE_harvest").to_string();
    let cfg_s = cfg.display().to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(script)
            .args([
                "Providers",
                "3",
                "60",
                &bin,
                "run",
                "--drain-grace-s",
                &GRACE_S.to_string(),
                "-c",
                &cfg_s,
            ])
            .env("HARVEST_HANGUP_KEY", KEY)
            .env_remove("HARVEST_LOG")
            .output()
            .expect("python3 runs")
    })
    .await
    .expect("join");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        !said.contains("marker-not-seen"),
        "the TUI never drew its providers table: {said}"
    );
    assert!(
        !said.contains("hung"),
        "harvest hung after its terminal vanished"
    );
    assert!(said.contains("exit=129"), "{said}");
    // Within the drain grace (then a stop-now), plus slack for a loaded machine.
    let secs: f64 = said
        .split("seconds=")
        .nth(1)
        .and_then(|t| t.trim().parse().ok())
        .expect("seconds");
    assert!(
        secs < (GRACE_S + SLACK_S) as f64,
        "took {secs} s after the terminal vanished"
    );
    let out_dir = dir.path().join("out");
    drained_for_lost_output(&out_dir);
    assert_eq!(
        open_attempts(&out_dir),
        Vec::<String>::new(),
        "nothing left open"
    );
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("state.json")).expect("state"))
            .expect("json");
    assert_eq!(state["reason"]["kind"], "output_lost");
    assert_eq!(
        state["state"], "stopped",
        "stopped before the work was done"
    );
    assert_eq!(state["in_flight"], 0);
    assert_eq!(state["done"].as_u64(), Some(outputs(&out_dir, "P") as u64));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_on_sighup_drains_and_exits_129() {
    let sim = paced_sim(0.3, 300.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = write_job(
        dir.path(),
        400,
        &sim.base_url(),
        "HARVEST_HANGUP_KEY",
        "budget_usd = 5.0\nconcurrency = 24\n[request]\nmax_tokens = 2000",
        "P",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args([
            "run",
            "--headless",
            "--progress-every",
            "0.2",
            "--drain-grace-s",
            &GRACE_S.to_string(),
            "-c",
        ])
        .arg(&cfg)
        .env("HARVEST_HANGUP_KEY", KEY)
        .env_remove("HARVEST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("harvest starts");
    let stdout = child.stdout.take().expect("piped");
    // Keep reading, as a terminal would; hang up after two progress lines.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut all = String::new();
        let mut l = String::new();
        while r.read_line(&mut l).unwrap_or(0) > 0 {
            all.push_str(&l);
            if all.lines().count() == 3 {
                let _ = tx.send(());
            }
            l.clear();
        }
        all
    });
    tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(30)))
        .await
        .expect("join")
        .expect("three lines");
    let hup = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(hup.success());
    let sent = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(60),
            "harvest hung after SIGHUP"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let took = sent.elapsed();
    // Within the drain grace (then a stop-now), plus slack for a loaded machine.
    assert!(
        took < Duration::from_secs(GRACE_S + SLACK_S),
        "took {took:?}"
    );
    assert_eq!(status.code(), Some(129), "{status:?}");
    let said = reader.join().expect("reader");
    assert!(
        said.contains("terminal or output lost: drained"),
        "the summary says why:\n{said}"
    );
    let out = dir.path().join("out");
    drained_for_lost_output(&out);
    assert_eq!(
        open_attempts(&out),
        Vec::<String>::new(),
        "nothing left open in the ledger"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_ctrl_c_stops_now_and_closes_what_is_in_flight() {
    // Slow answers, so that the drain would take long: only a stop-now ends it quickly.
    let sim = paced_sim(1.0, 3000.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = write_job(
        dir.path(),
        400,
        &sim.base_url(),
        "HARVEST_HANGUP_KEY",
        "budget_usd = 5.0\nconcurrency = 64\n[request]\nmax_tokens = 8000",
        "P",
    );
    let child = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["run", "--headless", "--progress-every", "0.2", "-c"])
        .arg(&cfg)
        .env("HARVEST_HANGUP_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("harvest starts");
    let pid = child.id().to_string();
    let signal = |pid: &str| {
        assert!(
            Command::new("kill")
                .args(["-INT", pid])
                .status()
                .expect("kill runs")
                .success()
        );
    };
    // Wait until streams are open.
    let deadline = Instant::now() + Duration::from_secs(30);
    while sim.state.requests_since(0).len() < 64 {
        assert!(Instant::now() < deadline, "no traffic");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(&pid);
    tokio::time::sleep(Duration::from_millis(500)).await;
    signal(&pid);
    let second = Instant::now();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    let took = second.elapsed();
    // A stop-now takes no grace (the drain it replaces would wait up to its default 30 s
    // grace); the ceiling is that no-grace plus slack for a loaded machine. What shows the
    // path is below: the summary and the streams it closed (the core's half, in virtual time:
    // `a_stop_now_ends_at_once_and_a_drain_with_its_last_stream` in
    // src/engine/core/tests/simulation/scenarios.rs).
    assert!(
        took < Duration::from_secs(SLACK_S),
        "stop now took {took:?}"
    );
    assert_eq!(out.status.code(), Some(130), "{:?}", out.status);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        said.contains("(operator: stop now)"),
        "the summary says how it stopped:\n{said}"
    );
    let out_dir = dir.path().join("out");
    // The stop-now closed the streams in flight (~3,000 tokens at real pace: tens of seconds
    // each), booked `cancelled`; the drain before it lets streams run to their end.
    assert!(
        ledger_lines(&out_dir, "cancelled") > 0,
        "the stop-now closed what was in flight"
    );
    assert_eq!(
        open_attempts(&out_dir),
        Vec::<String>::new(),
        "nothing left open"
    );
    sim.stop().await;
}
