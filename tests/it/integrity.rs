//! The output directory's integrity, driven through the binary against the simulator on
//! 127.0.0.1: damaged outputs, rejects and ledger files (a bad middle line, a bad terminated
//! last line, a missing ledger) stop `harvest run` with exit 2 and file:line named, changing
//! no byte and sending nothing; `--repair` keeps every good row and quarantines the bad ones;
//! a torn tail is cut on resume and its prompt redone once; two runs on one directory are
//! refused; `status --report` and `estimate` beside a live run succeed and change nothing; a
//! run without its key variable, or with an `output_dir` that is a file, is refused up front;
//! a rebuilt ledger is confirmed line by line at `GET /generation`, once.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{fast_sim, paced_sim};
use harvest::sim::SimHandle;
use harvest::store::output::{OutputRecord, RejectRecord, SpendEntry, SpendKind};

const KEY: &str = "sk-or-v1-integrity-test-key-000000";
const VAR: &str = "HARVEST_INTEGRITY_TEST_KEY";
const N: usize = 30;

fn harvest() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harvest"));
    c.env(VAR, KEY).env_remove("HARVEST_BASE_URL");
    c
}

async fn output(mut c: Command) -> (i32, String, String) {
    let out: Output = tokio::task::spawn_blocking(move || c.output().expect("runs"))
        .await
        .expect("join");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

async fn run(dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut c = harvest();
    c.args(["run", "--headless", "-c"])
        .arg(dir.join("harvest.toml"))
        .args(extra);
    output(c).await
}

/// `N` prompts with ids `p00`.. and a config for the simulator at `base`.
fn write_job(dir: &Path, base: &str, n: usize, settings: &str) {
    crate::common::write_job_with_ids(dir, base, VAR, n, settings);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).expect("copy");
        }
    }
}

/// Every file of `out` but the log, the lock (which a refused start may touch) and the live
/// run's control socket. A file gone between the listing and its read is a live run's
/// temporary file (its state is written to a temporary name, then renamed): left out.
fn files(out: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(out)
        .expect("read dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n != "harvest.log" && n != ".harvest.lock" && n != "harvest.sock")
        .filter_map(|n| match std::fs::read(out.join(&n)) {
            Ok(bytes) => Some((n, bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => panic!("read {n}: {e}"),
        })
        .collect()
}

fn lines(p: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(p).unwrap_or_default();
    bytes
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn parsed<T: serde::de::DeserializeOwned>(p: &Path) -> Vec<T> {
    lines(p)
        .iter()
        .map(|l| serde_json::from_slice(l).expect("every line parses"))
        .collect()
}

/// Overwrites part of line `idx` (0-based) with a NUL and garbage, keeping its `\n`; returns
/// its byte offset and its new text.
fn damage(p: &Path, idx: usize) -> (u64, Vec<u8>) {
    let mut ls = lines(p);
    let offset: usize = ls[..idx].iter().map(Vec::len).sum();
    let l = &mut ls[idx];
    let end = l.len() - 1;
    l.splice(5..15.min(end), b"\x00GARBAGE".iter().copied());
    let bad = l[..l.len() - 1].to_vec();
    std::fs::write(p, ls.concat()).expect("write");
    (offset as u64, bad)
}

fn chat_requests(sim: &SimHandle) -> usize {
    sim.state.requests_since(0).len()
}

/// A finished run of `N` prompts, plus three rejects (ids not among the prompts).
async fn baseline(sim: &SimHandle, root: &Path) -> PathBuf {
    let base = root.join("base");
    write_job(&base, &sim.base_url(), N, "concurrency = 4");
    let (code, out, err) = run(&base, &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    let rejects: String = (0..3)
        .map(|i| {
            let r = RejectRecord {
                id: format!("x{i}"),
                line: None,
                error: "HTTP 400".into(),
                error_kind: "400".into(),
                attempts: 1,
                created_at: "2026-12-01T00:00:00Z".into(),
                cause: Default::default(),
            };
            format!("{}\n", serde_json::to_string(&r).expect("json"))
        })
        .collect();
    std::fs::write(base.join("out/A.rejects.jsonl"), rejects).expect("rejects");
    assert_eq!(lines(&base.join("out/A.jsonl")).len(), N);
    base
}

#[derive(Clone, Copy, Debug)]
enum Case {
    /// Damage line `idx` of the file.
    Damage(&'static str, usize),
    LedgerMissing,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_is_refused_untouched_then_repaired_keeping_every_good_row() {
    let sim = fast_sim(40.0).await;
    let root = tempfile::tempdir().expect("tmp");
    let base = baseline(&sim, root.path()).await;
    let ledger_lines = lines(&base.join("out/spend.jsonl")).len();
    let cases = [
        Case::Damage("A.jsonl", 9),
        Case::Damage("A.jsonl", N - 1),
        Case::Damage("A.rejects.jsonl", 1),
        Case::Damage("A.rejects.jsonl", 2),
        Case::Damage("spend.jsonl", 9),
        Case::Damage("spend.jsonl", ledger_lines - 1),
        Case::LedgerMissing,
    ];
    for (k, case) in cases.into_iter().enumerate() {
        let dir = root.path().join(format!("case{k}"));
        copy_dir(&base, &dir);
        let out = dir.join("out");
        let (file, want, bad) = match case {
            Case::Damage(file, idx) => {
                let (offset, bad) = damage(&out.join(file), idx);
                let want = format!("{file}:{} (byte {offset}): not a valid record", idx + 1);
                (file, want, Some((idx, bad)))
            }
            Case::LedgerMissing => {
                std::fs::remove_file(out.join("spend.jsonl")).expect("rm");
                (
                    "spend.jsonl",
                    "spend.jsonl is missing or empty".into(),
                    None,
                )
            }
        };
        // Every line as it is now, the damaged one included.
        let originals: HashSet<Vec<u8>> = ["A.jsonl", "A.rejects.jsonl", "spend.jsonl"]
            .iter()
            .flat_map(|f| lines(&out.join(f)))
            .collect();
        let before = files(&out);
        let sent = chat_requests(&sim);

        // Refused: exit 2, the place named, nothing sent, not a byte changed.
        let (code, _, err) = run(&dir, &[]).await;
        assert_eq!(code, 2, "{case:?}: {err}");
        assert!(err.contains(&want), "{case:?}: wanted {want:?} in {err}");
        assert!(
            err.contains("--repair"),
            "{case:?}: says how to go on: {err}"
        );
        assert_eq!(chat_requests(&sim), sent, "{case:?}: nothing sent");
        assert!(
            files(&out) == before,
            "{case:?}: a refused start changed a file"
        );
        // The readers refuse to count a damaged file (the report) or leave it out (estimate),
        // and neither writes.
        let mut status = harvest();
        status.args(["status", "--report"]).arg(&out);
        let (code, _, err) = output(status).await;
        if bad.is_some() {
            assert_eq!(code, 2, "{case:?}: {err}");
            assert!(err.contains(&format!("{file}: line ")), "{case:?}: {err}");
        }
        assert!(
            files(&out) == before,
            "{case:?}: status --report changed a file"
        );
        let mut estimate = harvest();
        estimate
            .args(["estimate", "--json", "--mean-output", "100", "-c"])
            .arg(dir.join("harvest.toml"));
        let (code, stdout, err) = output(estimate).await;
        assert_eq!(code, 0, "{case:?}: {err}");
        assert!(files(&out) == before, "{case:?}: estimate changed a file");
        if bad.is_some() {
            let est: serde_json::Value = serde_json::from_str(&stdout).expect("json");
            let notes = est["assumptions"].to_string();
            assert!(notes.contains("could not be read"), "{case:?}: {notes}");
            assert!(
                notes.contains(&want),
                "{case:?}: the first one named: {notes}"
            );
        }

        // Repaired: every good row kept, the bad one quarantined, only its prompt redone.
        let (code, stdout, err) = run(&dir, &["--repair"]).await;
        assert_eq!(code, 0, "{case:?}: {stdout}{err}");
        let outputs: Vec<OutputRecord> = parsed(&out.join("A.jsonl"));
        let ids: HashSet<&str> = outputs.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(
            (outputs.len(), ids.len()),
            (N, N),
            "{case:?}: one row per id"
        );
        let after: HashSet<Vec<u8>> = ["A.jsonl", "A.rejects.jsonl", "spend.jsonl"]
            .iter()
            .flat_map(|f| lines(&out.join(f)))
            .collect();
        let kept = originals.intersection(&after).count();
        let redone = chat_requests(&sim) - sent;
        match (case, &bad) {
            (Case::Damage(_, idx), Some((_, raw))) => {
                assert_eq!(kept, originals.len() - 1, "{case:?}: every good line kept");
                assert!(err.contains("moved 1 damaged line to "), "{case:?}: {err}");
                let q: Vec<serde_json::Value> = parsed(&out.join(format!("{file}.damaged")));
                assert_eq!(q.len(), 1, "{case:?}");
                assert_eq!(q[0]["line"].as_u64(), Some(idx as u64 + 1), "{case:?}");
                assert_eq!(q[0]["raw"].as_str().map(str::as_bytes), Some(&raw[..]));
                let want = usize::from(file == "A.jsonl");
                assert_eq!(redone, want, "{case:?}: prompts redone");
            }
            _ => {
                assert_eq!(kept, originals.len(), "{case:?}: every line kept");
                assert_eq!(redone, 0, "{case:?}: nothing redone");
                let ledger: Vec<SpendEntry> = parsed(&out.join("spend.jsonl"));
                let rebuilt: Vec<&SpendEntry> = ledger
                    .iter()
                    .filter(|e| e.attempt.as_deref() == Some("rebuilt"))
                    .filter(|e| e.kind == SpendKind::Complete)
                    .collect();
                assert_eq!(rebuilt.len(), N, "{case:?}: a line per output");
                let cost: harvest::domain::Usd = outputs.iter().map(|o| o.cost_usd).sum();
                let booked: harvest::domain::Usd = rebuilt.iter().map(|e| e.usd).sum();
                assert_eq!(booked, cost, "{case:?}");
                assert!(
                    err.contains(&format!("rebuilt {N} `complete` lines")),
                    "{err}"
                );
            }
        }
        // And it is whole again: the report reads it.
        let mut status = harvest();
        status.args(["status", "--report"]).arg(&out);
        let (code, _, err) = output(status).await;
        assert_eq!(code, 0, "{case:?}: {err}");
    }
    sim.stop().await;
}

/// A lost ledger rebuilt by `--repair` from the outputs is confirmed at `GET /generation`: each
/// rebuilt line gets one `adjustment` line (attempt "rebuilt") of the API's cost minus the
/// output's, so the ledger ends equal to the bill even where an output's cost was wrong, and a
/// later start asks nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuilt_ledger_is_confirmed_at_the_api_once() {
    let sim = fast_sim(40.0).await;
    let root = tempfile::tempdir().expect("tmp");
    let base = baseline(&sim, root.path()).await;
    let out = base.join("out");
    std::fs::remove_file(out.join("spend.jsonl")).expect("lose the ledger");
    // One output says it cost a dollar more than the API billed for it.
    let mut rows: Vec<serde_json::Value> = parsed(&out.join("A.jsonl"));
    let wrong = rows[7]["cost_usd"].as_f64().expect("cost") + 1.0;
    rows[7]["cost_usd"] = serde_json::json!(wrong);
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(out.join("A.jsonl"), text).expect("rewrite");

    let (code, stdout, err) = run(&base, &["--repair"]).await;
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(
        stdout.contains(&format!("{N} of {N} confirmed at /generation")),
        "{stdout}"
    );
    let ledger: Vec<SpendEntry> = parsed(&out.join("spend.jsonl"));
    let of = |kind: SpendKind| {
        ledger
            .iter()
            .filter(|e| e.attempt.as_deref() == Some("rebuilt") && e.kind == kind)
            .collect::<Vec<_>>()
    };
    assert_eq!(of(SpendKind::Complete).len(), N);
    let confirms = of(SpendKind::Adjustment);
    assert_eq!(confirms.len(), N, "one confirmation per rebuilt line");
    let fixed: Vec<_> = confirms
        .iter()
        .filter(|e| e.usd != harvest::domain::Usd::ZERO)
        .collect();
    assert_eq!(fixed.len(), 1, "{fixed:?}");
    assert_eq!(fixed[0].id, rows[7]["id"].as_str().expect("id"));
    assert!((fixed[0].usd.as_f64() + 1.0).abs() < 1e-6, "{:?}", fixed[0]);
    let booked: harvest::domain::Usd = ledger.iter().map(|e| e.usd).sum();
    let billed = sim.state.billed_total();
    assert!(
        (booked.as_f64() - billed.as_f64()).abs() < 1e-6,
        "ledger {booked} against the bill {billed}"
    );

    // Confirmed lines are not asked about again.
    let (code, stdout, err) = run(&base, &[]).await;
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(!stdout.contains("confirmed at /generation"), "{stdout}");
    let again: Vec<SpendEntry> = parsed(&out.join("spend.jsonl"));
    let confirms_again = again
        .iter()
        .filter(|e| e.attempt.as_deref() == Some("rebuilt") && e.kind == SpendKind::Adjustment)
        .count();
    assert_eq!(confirms_again, N);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_cut_on_resume_and_its_prompt_redone_once() {
    let sim = fast_sim(40.0).await;
    let root = tempfile::tempdir().expect("tmp");
    let base = baseline(&sim, root.path()).await;
    for file in ["A.jsonl", "spend.jsonl", "A.rejects.jsonl"] {
        let dir = root.path().join(format!("torn-{file}"));
        copy_dir(&base, &dir);
        let p = dir.join("out").join(file);
        let mut bytes = std::fs::read(&p).expect("read");
        let cut = bytes.len() - 20;
        bytes.truncate(cut);
        std::fs::write(&p, &bytes).expect("tear");
        let good_prefix_end = bytes.iter().rposition(|b| *b == b'\n').expect("a line") + 1;
        // The readers leave it alone (and do not count it).
        let mut status = harvest();
        status.args(["status", "--report"]).arg(dir.join("out"));
        let (code, _, err) = output(status).await;
        assert_eq!(code, 0, "{file}: {err}");
        assert_eq!(
            std::fs::read(&p).expect("read"),
            bytes,
            "{file}: the report wrote"
        );
        let mut estimate = harvest();
        estimate
            .args(["estimate", "--json", "--mean-output", "100", "-c"])
            .arg(dir.join("harvest.toml"));
        let (code, stdout, err) = output(estimate).await;
        assert_eq!(code, 0, "{file}: {err}");
        assert_eq!(
            std::fs::read(&p).expect("read"),
            bytes,
            "{file}: estimate wrote"
        );
        // A torn line is not read, so it is not "unreadable" either.
        let est: serde_json::Value = serde_json::from_str(&stdout).expect("json");
        assert!(est["assumptions"].is_array(), "{stdout}");
        let notes = est["assumptions"].to_string();
        assert!(!notes.contains("could not be read"), "{file}: {notes}");

        let sent = chat_requests(&sim);
        let (code, out, err) = run(&dir, &[]).await;
        assert_eq!(code, 0, "{file}: {out}{err}");
        assert!(err.contains("cut a torn last line"), "{file}: {err}");
        let now = std::fs::read(&p).expect("read");
        assert_eq!(&now[..good_prefix_end], &bytes[..good_prefix_end], "{file}");
        let outputs: Vec<OutputRecord> = parsed(&dir.join("out/A.jsonl"));
        let ids: HashSet<&str> = outputs.iter().map(|o| o.id.as_str()).collect();
        assert_eq!((outputs.len(), ids.len()), (N, N), "{file}");
        let want = usize::from(file == "A.jsonl");
        assert_eq!(chat_requests(&sim) - sent, want, "{file}: redone once");
        // Every line parses now (the torn one is gone, not kept).
        let _: Vec<serde_json::Value> = parsed(&p);
    }
    sim.stop().await;
}

fn spawn_run(dir: &Path) -> std::process::Child {
    harvest()
        .args(["run", "--headless", "-c"])
        .arg(dir.join("harvest.toml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn")
}

/// Waits until the run `pid` holds the directory's lock.
async fn wait_for_lock(out: &Path, pid: u32) {
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(out.join(".harvest.lock")).unwrap_or_default();
        if text.contains(&format!("\"pid\":{pid},")) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the run never locked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_or_probe_on_one_directory_is_refused_naming_the_holder() {
    // Real pace: the first run is still running when the second one starts.
    let sim = paced_sim(1.0, 400.0).await;
    let root = tempfile::tempdir().expect("tmp");
    let dir = root.path().join("job");
    write_job(&dir, &sim.base_url(), 20, "concurrency = 2");
    let out = dir.join("out");
    let mut first = spawn_run(&dir);
    wait_for_lock(&out, first.id()).await;
    let holder: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(".harvest.lock")).expect("lock"))
            .expect("json");
    let started = holder["started_at"]
        .as_str()
        .expect("started_at")
        .to_string();

    let (code, _, err) = run(&dir, &[]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("pid {}", first.id())), "{err}");
    assert!(err.contains(&started), "{err}");
    let mut probe = harvest();
    probe.args(["probe", "-c"]).arg(dir.join("harvest.toml"));
    let (code, _, err) = output(probe).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("pid {}", first.id())), "{err}");

    // The kernel releases the lock when the holder dies, however it dies.
    first.kill().expect("kill");
    first.wait().expect("wait");
    harvest::store::lock::lock_dir(&out).expect("free after the holder died");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_report_and_estimate_beside_a_live_run_succeed_and_change_nothing() {
    let sim = paced_sim(0.3, 150.0).await;
    let root = tempfile::tempdir().expect("tmp");
    let dir = root.path().join("job");
    write_job(&dir, &sim.base_url(), 80, "concurrency = 8");
    let out = dir.join("out");
    let mut live = spawn_run(&dir);
    wait_for_lock(&out, live.id()).await;
    let jsonl = |out: &Path| -> BTreeMap<String, Vec<u8>> {
        files(out)
            .into_iter()
            .filter(|(n, _)| n.ends_with(".jsonl"))
            .collect()
    };
    let (mut rounds, mut grew) = (0, 0);
    let t0 = Instant::now();
    while live.try_wait().expect("wait").is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the run never ended"
        );
        let mut status = harvest();
        status.args(["status", "--report", "--json"]).arg(&out);
        let mut estimate = harvest();
        estimate
            .args(["estimate", "--json", "--mean-output", "100", "-c"])
            .arg(dir.join("harvest.toml"));
        for (what, cmd) in [("status --report", status), ("estimate", estimate)] {
            let before = jsonl(&out);
            let (code, stdout, err) = output(cmd).await;
            let after = jsonl(&out);
            assert_eq!(code, 0, "{what} beside a live run: {stdout}{err}");
            serde_json::from_str::<serde_json::Value>(&stdout).expect("a JSON document");
            // Only the run may have changed the files, and it only appends.
            for (name, old) in &before {
                let new = after.get(name).unwrap_or_else(|| panic!("{name} vanished"));
                assert!(new.starts_with(old), "{name} changed under {what}");
                if new.len() > old.len() {
                    grew += 1;
                }
            }
            let names: Vec<String> = files(&out).into_keys().collect();
            assert!(
                !names
                    .iter()
                    .any(|n| n.ends_with(".damaged") || n.contains("repair")),
                "{names:?}"
            );
        }
        rounds += 1;
    }
    assert!(live.wait().expect("wait").success());
    assert!(
        rounds >= 3,
        "{rounds} rounds: the run ended too soon to test anything"
    );
    assert!(grew >= 1, "the run never wrote during the loop");
    let outputs: Vec<OutputRecord> = parsed(&out.join("A.jsonl"));
    assert_eq!(outputs.len(), 80);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_or_an_output_dir_that_is_a_file_is_refused_before_anything_is_sent() {
    let sim = fast_sim(40.0).await;
    let root = tempfile::tempdir().expect("tmp");
    let dir = root.path().join("job");
    write_job(&dir, &sim.base_url(), 5, "");
    for value in [None, Some(""), Some("   ")] {
        let mut c = harvest();
        match value {
            None => c.env_remove(VAR),
            Some(v) => c.env(VAR, v),
        };
        c.args(["run", "--headless", "-c"])
            .arg(dir.join("harvest.toml"));
        let (code, _, err) = output(c).await;
        assert_eq!(code, 2, "{value:?}: {err}");
        assert!(err.contains(&format!("{VAR} is unset or empty")), "{err}");
        let mut p = harvest();
        match value {
            None => p.env_remove(VAR),
            Some(v) => p.env(VAR, v),
        };
        p.args(["probe", "-c"]).arg(dir.join("harvest.toml"));
        let (code, _, err) = output(p).await;
        assert_eq!(code, 2, "probe {value:?}: {err}");
        assert!(err.contains(VAR), "{err}");
    }
    assert_eq!(chat_requests(&sim), 0, "nothing was sent");

    std::fs::write(dir.join("afile"), "x").expect("file");
    let cfg = std::fs::read_to_string(dir.join("harvest.toml")).expect("cfg");
    std::fs::write(
        dir.join("harvest.toml"),
        format!("output_dir = \"afile\"\n{cfg}"),
    )
    .expect("cfg");
    let (code, _, err) = run(&dir, &[]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("afile is a file, not a directory"), "{err}");
    assert_eq!(chat_requests(&sim), 0);
    sim.stop().await;
}
