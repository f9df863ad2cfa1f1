//! Crash safety: `harvest run` is killed with SIGKILL at several points of a run, restarted,
//! and finishes. No id appears twice, none is missing, and the spend carried over (outputs,
//! ledger, and generations the crashes left open, looked up at the API) matches the
//! simulator's billing log.

use crate::common::{paced_sim, write_job};
use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harvest::sim::SimHandle;
use harvest::store::output::{OutputRecord, SpendEntry, SpendKind};

/// What the simulator billed for generations harvest never heard of (killed before headers).
fn sim_billed_without_trace(sim: &SimHandle, entries: &[SpendEntry]) -> f64 {
    let known: HashSet<&str> = entries
        .iter()
        .filter_map(|e| e.generation_id.as_deref())
        .collect();
    sim.state
        .billing_entries()
        .iter()
        .filter(|b| !known.contains(b.id.as_str()))
        .map(|b| b.cost_usd.as_f64())
        .sum()
}

const KEY: &str = "sk-or-v1-resume-test-key-0000000";

/// Slow first tokens at every endpoint: a kill catches many requests before any answer.
fn slow_first_tokens(sim: &SimHandle) {
    let c = harvest::sim::ControlRequest {
        all: Some(harvest::sim::EndpointPatch {
            faults_spec: Some("slow_start=0.5".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    sim.state.control(&c).expect("control");
}

/// Starts `run` and kills it with SIGKILL once `answered()` reaches `at`: the kill point is
/// what the run has written, not a time. The deadline only bounds a run that stalls.
async fn kill_when(mut run: Command, at: usize, answered: impl Fn() -> usize, deadline: Instant) {
    let mut child = run.spawn().expect("spawn");
    while answered() < at {
        assert!(Instant::now() < deadline, "run too slow");
        assert!(
            child.try_wait().expect("wait").is_none(),
            "ended before {at} answers"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
}

/// Lets the simulator finish billing what the last kill cut, then runs `run` to its end, which
/// must succeed.
async fn finish_after_kills(mut run: Command) {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let output = tokio::task::spawn_blocking(move || run.output())
        .await
        .expect("join")
        .expect("run");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map_or(0, |t| t.lines().count())
}

fn harvest_run(config: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harvest"));
    c.args(["run", "--headless", "--progress-every", "1", "-c"])
        .arg(config)
        .env("HARVEST_RESUME_TEST_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_several_points_then_finish() {
    kill_9_then_finish(true).await;
}

/// The same against a simulator that sends no `X-Generation-Id` header, as the real API's
/// recorded chat responses do: the generations a kill left open are known by the id in the
/// chunks, and looked up at `/generation` on the next start, not booked at estimates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_without_the_generation_header_then_finish() {
    kill_9_then_finish(false).await;
}

async fn kill_9_then_finish(generation_header: bool) {
    let sim = paced_sim(0.05, 300.0).await;
    sim.state
        .control(&harvest::sim::ControlRequest {
            generation_header: Some(generation_header),
            ..Default::default()
        })
        .expect("control");
    let dir = tempfile::tempdir().expect("tmp");
    let n = 800;
    let config = write_job(
        dir.path(),
        n,
        &sim.base_url(),
        "HARVEST_RESUME_TEST_KEY",
        "budget_usd = 50.0\nconcurrency = 100\n[request]\nmax_tokens = 2000",
        "R",
    );
    let out = dir.path().join("out").join("R.jsonl");

    let deadline = Instant::now() + Duration::from_secs(120);
    for kill_at in [100usize, 300, 500] {
        let mut child = harvest_run(&config).spawn().expect("spawn");
        let mut exited = None;
        while lines(&out) < kill_at {
            assert!(Instant::now() < deadline, "run too slow");
            if let Some(status) = child.try_wait().expect("wait") {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                exited = Some((status, err));
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            exited.is_none(),
            "the run ended before the kill at {kill_at}: {exited:?}"
        );
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }
    // The last run finishes.
    let output = tokio::task::spawn_blocking(move || harvest_run(&config).output())
        .await
        .expect("join")
        .expect("run");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let text = std::fs::read_to_string(&out).expect("outputs");
    let recs: Vec<OutputRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is a whole record"))
        .collect();
    let ids: HashSet<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), recs.len(), "an id appears twice");
    assert_eq!(ids.len(), n, "an id is missing");

    let entries: Vec<SpendEntry> =
        std::fs::read_to_string(dir.path().join("out").join("spend.jsonl"))
            .expect("ledger")
            .lines()
            .map(|l| serde_json::from_str::<SpendEntry>(l).expect("ledger line"))
            .collect();
    let ledger: f64 = entries.iter().map(|e| e.usd.as_f64()).sum();
    // Requests a kill caught after sending and before any answer cannot be looked up: they are
    // booked at their expected cost. Only they may differ from the bill.
    let unknown: Vec<&SpendEntry> = entries
        .iter()
        .filter(|e| e.kind == SpendKind::Unknown)
        .collect();
    let unknown_usd: f64 = unknown.iter().map(|e| e.usd.as_f64()).sum();
    let recovered = entries
        .iter()
        .filter(|e| e.kind == SpendKind::Recovered)
        .count();
    eprintln!(
        "{} unknown requests booked at {unknown_usd}, {recovered} recovered from /generation \
         (header {generation_header})",
        unknown.len()
    );
    // Streams a kill caught after their first chunk are looked up, header or not; only those
    // caught before it are estimates.
    assert!(
        recovered > 0 && unknown.len() < recovered,
        "{recovered} recovered, {} unknown",
        unknown.len()
    );
    assert!(
        unknown.len() <= 3 * 100,
        "at most the in-flight requests of three kills"
    );
    let billed = sim.state.billed_total().as_f64();
    if (ledger - billed).abs() > billed * 0.001 {
        eprintln!("{}", String::from_utf8_lossy(&output.stdout));
        let state =
            std::fs::read_to_string(dir.path().join("out").join("state.json")).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&state).unwrap_or_default();
        eprintln!("events: {:#}", v["events"]);
        let entries = sim.state.billing_entries();
        let cancelled: Vec<_> = entries
            .iter()
            .filter(|e| e.outcome == harvest::sim::Outcome::Cancelled)
            .collect();
        eprintln!("sim cancelled: {}", cancelled.len());
        let led =
            std::fs::read_to_string(dir.path().join("out").join("spend.jsonl")).unwrap_or_default();
        let gens: HashSet<String> = led
            .lines()
            .filter_map(|l| serde_json::from_str::<SpendEntry>(l).ok())
            .filter_map(|e| e.generation_id)
            .collect();
        for e in entries.iter().filter(|e| !gens.contains(&e.id)) {
            eprintln!("not in ledger: {e:?}");
        }
    }
    // The key true-up (an adjustment that corrects the unknown estimates) is not a known cost.
    let true_up: f64 = entries
        .iter()
        .filter(|e| e.kind == SpendKind::Adjustment && e.id == "key-true-up")
        .map(|e| e.usd.as_f64())
        .sum();
    let known = ledger - unknown_usd - true_up;
    let billed_for_known = billed - sim_billed_without_trace(&sim, &entries);
    assert!(
        (known - billed_for_known).abs() <= billed * 0.001,
        "ledger {known} vs simulator {billed_for_known} (unknown {unknown_usd})"
    );
    // The estimates are in the right range: each within what one request can cost.
    let untraced = billed - billed_for_known;
    assert!(
        (unknown_usd - untraced).abs() <= unknown.len() as f64 * 2000.0 * 3.75e-6 + 1e-9,
        "unknown booked {unknown_usd}, billed {untraced}"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_drains_in_flight_requests_saves_and_exits_130() {
    let sim = paced_sim(0.05, 300.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let config = write_job(
        dir.path(),
        2000,
        &sim.base_url(),
        "HARVEST_RESUME_TEST_KEY",
        "concurrency = 50\n[request]\nmax_tokens = 2000",
        "I",
    );
    let out = dir.path().join("out").join("I.jsonl");
    let mut child = harvest_run(&config).spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(&out) < 100 {
        assert!(Instant::now() < deadline, "too slow");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert_eq!(status.code(), Some(130), "interrupted: exit code 130");
    // Drained: every request that was in flight finished and was saved; nothing was cancelled.
    let billed = sim.state.billing_entries();
    assert!(
        billed
            .iter()
            .all(|b| b.outcome == harvest::sim::Outcome::Complete)
    );
    let recs = std::fs::read_to_string(&out).expect("outputs");
    assert_eq!(
        recs.lines().count(),
        billed.len(),
        "every billed answer is saved"
    );
    assert!(recs.lines().count() < 2000, "stopped early");
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("out").join("state.json")).expect("state"),
    )
    .expect("json");
    assert_eq!(state["state"], "stopped");
    assert_eq!(state["reason"]["kind"], "operator_drain");
    sim.stop().await;
}

/// `harvest status DIR --reconcile` settles what a `kill -9` left open without starting a run:
/// every open generation the API knows is booked at its cost; requests caught before any answer
/// stay open, said with their expected cost, for the next run to book and true up (booked at a
/// guess here, nothing would correct them); a second call books nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reconcile_settles_a_crash_without_a_run() {
    let sim = paced_sim(0.05, 300.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let config = write_job(
        dir.path(),
        400,
        &sim.base_url(),
        "HARVEST_RESUME_TEST_KEY",
        "budget_usd = 50.0\nconcurrency = 100\n[request]\nmax_tokens = 2000",
        "R",
    );
    let out_dir = dir.path().join("out");
    let out = out_dir.join("R.jsonl");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut child = harvest_run(&config).spawn().expect("spawn");
    while lines(&out) < 100 {
        assert!(Instant::now() < deadline, "run too slow");
        assert!(child.try_wait().expect("wait").is_none(), "ended early");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let open = |dir: &Path| {
        let names = vec!["R".to_string()];
        let scan = harvest::store::scan::scan_dir(dir, &names).expect("scan");
        (scan.orphans().len(), scan.ledger.unknown.len())
    };
    let (orphans, unanswered) = open(&out_dir);
    assert!(
        orphans > 0,
        "a kill with 100 in flight leaves generations open"
    );
    // Let the simulator finish billing the streams the kill cut.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let reconcile = |dir: std::path::PathBuf, base: String| {
        Command::new(env!("CARGO_BIN_EXE_harvest"))
            .args([
                "status",
                "--reconcile",
                "--api-key-env",
                "HARVEST_RESUME_TEST_KEY",
                "--base-url",
            ])
            .arg(base)
            .arg(dir)
            .env("HARVEST_RESUME_TEST_KEY", KEY)
            .output()
            .expect("status runs")
    };
    let (d, b) = (out_dir.clone(), sim.base_url());
    let first = tokio::task::spawn_blocking(move || reconcile(d, b))
        .await
        .expect("join");
    let said = String::from_utf8_lossy(&first.stdout).to_string();
    assert!(
        first.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        said.contains(&format!("{orphans} generations found at the API")),
        "{orphans} open, {unanswered} unanswered: {said}"
    );
    assert_eq!(
        open(&out_dir),
        (0, unanswered),
        "generations settled, the never answered left open"
    );
    if unanswered > 0 {
        assert!(
            said.contains(&format!("{unanswered} attempts the API cannot tell about")),
            "{said}"
        );
    }
    // What the API reported is what the ledger now holds for those generations.
    let entries: Vec<SpendEntry> = std::fs::read_to_string(out_dir.join("spend.jsonl"))
        .expect("ledger")
        .lines()
        .map(|l| serde_json::from_str::<SpendEntry>(l).expect("ledger line"))
        .collect();
    let billed: std::collections::HashMap<String, f64> = sim
        .state
        .billing_entries()
        .iter()
        .map(|b| (b.id.clone(), b.cost_usd.as_f64()))
        .collect();
    for e in entries.iter().filter(|e| e.kind == SpendKind::Recovered) {
        let g = e.generation_id.as_deref().expect("generation id");
        assert_eq!(Some(&e.usd.as_f64()), billed.get(g), "{g}");
    }

    let (d, b) = (out_dir.clone(), sim.base_url());
    let second = tokio::task::spawn_blocking(move || reconcile(d, b))
        .await
        .expect("join");
    let said = String::from_utf8_lossy(&second.stdout).to_string();
    assert!(second.status.success());
    assert!(
        said.contains("0.000000 USD booked in all"),
        "idempotent: {said}"
    );
    sim.stop().await;
}

/// Copies the regular files of `from` (not the control socket) into a new `to`.
fn copy_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("dir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        if e.file_type().expect("type").is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
}

/// `harvest status OUT --reconcile` with no `--base-url`, no `--api-key-env` and no
/// OPENROUTER_API_KEY asks the run's own API with the run's own key variable, both read from
/// its manifest (issue #51: it refused for want of OPENROUTER_API_KEY, and without a key
/// flag asked openrouter.ai): a kill leaves every stream open, and the reconcile brings the
/// ledger to the simulator's bill. A copy of the killed directory asked once the simulator
/// is gone fails with exit 1 naming the URL, instead of calling the generations too recent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reconcile_asks_the_runs_own_api_and_says_when_it_cannot() {
    const VAR: &str = "HARVEST_OWN_RECONCILE_KEY";
    let sim = paced_sim(1.0, 3000.0).await;
    sim.state
        .control(&harvest::sim::ControlRequest {
            // Every answer long: none ends before the kill.
            output_tokens_sigma: Some(0.0),
            // A close is billed at once (not when the provider would have finished).
            all: Some(harvest::sim::EndpointPatch {
                cancel_stops_billing: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("control");
    let base = sim.base_url();
    let dir = tempfile::tempdir().expect("tmp");
    let n = 20;
    let config = write_job(
        dir.path(),
        n,
        &base,
        VAR,
        "concurrency = 20\n[request]\nmax_tokens = 4000",
        "O",
    );
    let out_dir = dir.path().join("out");
    let scan = |d: &Path| harvest::store::scan::scan_dir(d, &["O".to_string()]).expect("scan");
    let mut run = Command::new(env!("CARGO_BIN_EXE_harvest"));
    run.args(["run", "--headless", "-c"])
        .arg(&config)
        .env(VAR, KEY)
        .env_remove("OPENROUTER_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Killed once every request has its headers (a generation id to look up), none ended.
    let open = || scan(&out_dir).ledger.open.len();
    kill_when(run, n, open, Instant::now() + Duration::from_secs(60)).await;
    let killed = scan(&out_dir);
    assert_eq!(
        (killed.orphans().len(), killed.ledger.unknown.len()),
        (n, 0),
        "every generation left open, each with its id"
    );
    let copy = dir.path().join("copy");
    copy_files(&out_dir, &copy);

    let reconcile = |d: std::path::PathBuf| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_harvest"));
        c.args(["status", "--reconcile"])
            .arg(d)
            .env(VAR, KEY)
            .env_remove("OPENROUTER_API_KEY");
        c
    };
    let mut c = reconcile(out_dir.clone());
    let first = tokio::task::spawn_blocking(move || c.output().expect("status runs"))
        .await
        .expect("join");
    let (said, told) = (
        String::from_utf8_lossy(&first.stdout).to_string(),
        String::from_utf8_lossy(&first.stderr).to_string(),
    );
    assert!(first.status.success(), "{said}{told}");
    assert!(
        told.contains(&format!(
            "asking {base} (the run's, from its manifest) with the key in {VAR} (the run's, \
             from its manifest)"
        )),
        "{told}"
    );
    // The look-ups wait for the simulator to record each close: all are found.
    assert!(
        said.contains(&format!("{n} generations found at the API")),
        "{said}"
    );
    let after = scan(&out_dir);
    assert!(after.orphans().is_empty(), "{said}");
    assert_eq!(
        after.ledger.total,
        sim.state.billed_total(),
        "the ledger is the bill: {said}"
    );

    sim.stop().await;
    let mut c = reconcile(copy.clone());
    let gone = tokio::task::spawn_blocking(move || c.output().expect("status runs"))
        .await
        .expect("join");
    let (said, told) = (
        String::from_utf8_lossy(&gone.stdout).to_string(),
        String::from_utf8_lossy(&gone.stderr).to_string(),
    );
    assert_eq!(gone.status.code(), Some(1), "{said}{told}");
    assert!(
        told.contains(&format!(
            "the API at {base} (the run's, from its manifest) could not be reached"
        )),
        "{told}"
    );
    assert!(
        told.contains(&format!("{n} open generations were not looked up")),
        "{told}"
    );
    assert!(
        !(said.clone() + &told).contains("too recent"),
        "{said}{told}"
    );
    assert_eq!(
        scan(&copy).orphans().len(),
        n,
        "nothing booked, everything still open"
    );
}

/// The crash campaign: several `kill -9` at random points with hundreds of requests in flight,
/// many of them before their first token, then a resume. One row per id, and with a key that
/// serves only this job the ledger ends within 0.5% of what the simulator billed: estimates of
/// requests killed before any answer are trued up against the key's own usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_campaign_ends_with_one_row_per_id_and_the_ledger_at_the_bill() {
    let sim = paced_sim(0.1, 400.0).await;
    slow_first_tokens(&sim);
    let dir = tempfile::tempdir().expect("tmp");
    let n = 1200;
    let config = write_job(
        dir.path(),
        n,
        &sim.base_url(),
        "HARVEST_RESUME_TEST_KEY",
        "budget_usd = 50.0\nconcurrency = 300\n[request]\nmax_tokens = 2000",
        "C",
    );
    let out = dir.path().join("out").join("C.jsonl");
    let deadline = Instant::now() + Duration::from_secs(180);
    // Kill points from a fixed seed, spread over the run.
    let mut seed = 0x5eed_u64;
    let mut points: Vec<usize> = (0..4)
        .map(|i| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            150 + i * 220 + (seed >> 33) as usize % 120
        })
        .collect();
    points.sort();
    for at in points {
        kill_when(harvest_run(&config), at, || lines(&out), deadline).await;
    }
    finish_after_kills(harvest_run(&config)).await;
    let recs: Vec<OutputRecord> = std::fs::read_to_string(&out)
        .expect("outputs")
        .lines()
        .map(|l| serde_json::from_str(l).expect("whole record"))
        .collect();
    let ids: HashSet<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), recs.len(), "an id appears twice");
    assert_eq!(ids.len(), n, "an id is missing");
    let entries: Vec<SpendEntry> =
        std::fs::read_to_string(dir.path().join("out").join("spend.jsonl"))
            .expect("ledger")
            .lines()
            .map(|l| serde_json::from_str::<SpendEntry>(l).expect("ledger line"))
            .collect();
    let unknown = entries
        .iter()
        .filter(|e| e.kind == SpendKind::Unknown)
        .count();
    let ledger: f64 = entries.iter().map(|e| e.usd.as_f64()).sum();
    let billed = sim.state.billed_total().as_f64();
    let before_true_up: f64 = entries
        .iter()
        .filter(|e| !(e.kind == SpendKind::Adjustment && e.id == "key-true-up"))
        .map(|e| e.usd.as_f64())
        .sum();
    eprintln!(
        "{unknown} requests killed before any answer; ledger {ledger:.6} (before the true-up \
         {before_true_up:.6}) vs billed {billed:.6}"
    );
    // A precondition, not a decision: how many requests a kill catches before their first
    // token depends on the machine's pace and on how many the budget lets run (the hard
    // budget's worst cases held until its checks of a close land); enough to exercise it (a
    // loaded CI machine caught 10, the bound once was more than 10).
    assert!(
        unknown >= 5,
        "the kills caught requests before their first token: {unknown}"
    );
    assert!(
        (ledger - billed).abs() <= billed * 0.005,
        "ledger {ledger} vs simulator {billed} ({:+.3}%)",
        (ledger - billed) / billed * 100.0
    );
    sim.stop().await;
}

/// What `harvest status DIR` prints.
fn status_text(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .arg("status")
        .arg(dir)
        .output()
        .expect("status");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A simulator at `speed` whose `/generation` knows no generation for an hour (404s, as for
/// a stream the API has not settled yet): every look-up runs to its last try.
async fn sim_without_generations(speed: f64) -> SimHandle {
    let mut cfg = harvest::sim::SimConfig::fast_no_faults();
    cfg.speed_scale = speed;
    cfg.generation_visible_after = Duration::from_secs(3600);
    harvest::sim::start(cfg, 0).await.expect("sim")
}

/// Look-ups never hold a run: a `kill -9` catches 150 streams between their headers and
/// their first token, at an API that does not know them (`/generation` 404s, as for streams
/// closed before their first token where closing stops the bill). The resume finishes the
/// work, and a run with nothing left to do ends at once, saying how many look-ups it leaves
/// open, instead of waiting on `/generation` for each (8 tries, ~9 s a look-up, 32 at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_nothing_to_do_after_a_crash_ends_at_once() {
    let sim = sim_without_generations(1.0).await;
    let slow_start = harvest::sim::EndpointPatch {
        ttft_ms: Some(20_000.0),
        ..Default::default()
    };
    sim.state
        .control(&harvest::sim::ControlRequest {
            all: Some(slow_start),
            ..Default::default()
        })
        .expect("control");
    let dir = tempfile::tempdir().expect("tmp");
    let config = write_job(
        dir.path(),
        150,
        &sim.base_url(),
        "HARVEST_RESUME_TEST_KEY",
        "budget_usd = 50.0\nconcurrency = 150\n[request]\nmax_tokens = 500",
        "N",
    );
    let ledger = dir.path().join("out").join("spend.jsonl");
    let started = || {
        std::fs::read_to_string(&ledger)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"kind\":\"started\""))
            .count()
    };
    let mut child = harvest_run(&config).spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(30);
    while started() < 150 {
        assert!(Instant::now() < deadline, "headers too slow: {}", started());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // `status` names what the crash left open, with its expected cost.
    let said = status_text(&dir.path().join("out"));
    assert!(
        said.contains("open look-ups: 150 streams closed or left in flight that /generation has not confirmed, expected"),
        "{said}"
    );
    sim.state
        .control(&harvest::sim::ControlRequest {
            speed_scale: Some(0.0),
            all: Some(harvest::sim::EndpointPatch {
                ttft_ms: Some(100.0),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("control");
    // The resume does the work; then a run with nothing to do.
    for run in ["resume", "no-op"] {
        let config = config.clone();
        let t0 = Instant::now();
        let output = tokio::task::spawn_blocking(move || harvest_run(&config).output())
            .await
            .expect("join")
            .expect("run");
        let took = t0.elapsed();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{run}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!("{run} took {took:?}");
        if run == "no-op" {
            // The path taken: the first pass's grace ran out and the end left the look-ups
            // still running open (this line is said only then; waiting for them all says
            // nothing of the kind).
            assert!(
                stdout.contains(
                    "look-ups of requests an earlier run left open were still running when the \
                     work was done: left open for the next start"
                ),
                "the pending look-ups are named: {stdout}"
            );
            // The grace it measures: FIRST_PASS_GRACE (8 s, src/engine/reconcile.rs), plus
            // 20 s for process start, catalog and listing on a loaded machine. Waiting on every
            // look-up instead (8 tries, ~9 s each, 32 at once for 150 ids) takes ~45 s.
            assert!(
                took < Duration::from_secs(8 + 20),
                "{run} took {took:?}: {stdout}"
            );
        }
    }
    let done = std::fs::read_to_string(dir.path().join("out").join("N.jsonl")).expect("outputs");
    assert_eq!(done.lines().count(), 150);
    // The finished run's state keeps saying they are open.
    let said = status_text(&dir.path().join("out"));
    assert!(said.contains("open look-ups: 150 streams"), "{said}");
    sim.stop().await;
}

/// A stop-now after the work is over ends the look-ups of what closed streams cost at once
/// (reliability probe 3, D5): the dollar cap closes streams in flight, the API does not know
/// them yet (`/generation` 404s: ~9 s a look-up), the run says it is looking them up, and the
/// operator's stop-now leaves them at their estimates within a moment instead of 9 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_now_during_the_last_look_ups_ends_the_run_at_once() {
    let sim = sim_without_generations(0.2).await;
    sim.state
        .control(&harvest::sim::ControlRequest {
            output_tokens_mean: Some(300.0),
            all: Some(harvest::sim::EndpointPatch {
                // Closing a stream stops its bill: the cap closes what is in flight.
                cancel_stops_billing: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("control");
    let s = crate::common::setup();
    let p = crate::common::write_prompts(&s.dir, "a", 400);
    // The expected mode reserves bare expectations, so the cap trips with streams in flight
    // and closes them; the hard mode keeps half a mean answer for each stream and ends this
    // job at $0.0299 with nothing to close.
    let body = format!(
        "budget_usd = 0.03\nbudget_mode = \"expected\"\nconcurrency = 40\nrouting = \"pinned\"\n[request]\nmax_tokens = 400\n\
         [[dataset]]\nname = \"a\"\nprompts = \"{}\"\n",
        p.display()
    );
    let h =
        crate::common::start_engine(crate::common::config(&s, &sim.base_url(), &body), 50).await;
    let mut snaps = h.snapshots.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let looking = snaps
            .borrow_and_update()
            .events
            .iter()
            .any(|e| e.text.starts_with("looking up what"));
        if looking {
            break;
        }
        assert!(Instant::now() < deadline, "no look-ups at the end");
        let _ = tokio::time::timeout(Duration::from_millis(200), snaps.changed()).await;
    }
    let asked = Instant::now();
    h.commands
        .send(harvest::engine::Command::Shutdown(
            harvest::engine::ShutdownMode::Now,
        ))
        .await
        .expect("send");
    let summary = tokio::time::timeout(Duration::from_secs(30), h.finish())
        .await
        .expect("bounded")
        .expect("finishes");
    let took = asked.elapsed();
    eprintln!("ended {took:?} after the stop-now");
    // A stop-now takes no grace; the look-ups it ends would run up to CLOSED_DEADLINE (8 s,
    // src/engine/reconcile.rs). The ceiling is that no-grace plus 20 s for a loaded machine:
    // it catches a hang; the event below ("(stopped now)", not "not known within 8s")
    // shows that the stop-now, not the deadline, ended them.
    assert!(
        took < Duration::from_secs(20),
        "the look-ups held the run {took:?}"
    );
    assert!(summary.stopped_now);
    assert_eq!(
        summary.reason,
        Some(harvest::engine::StopReason::DollarBudget),
        "the stop's reason stays the budget"
    );
    let texts: Vec<&str> = summary
        .snapshot
        .events
        .iter()
        .map(|e| e.text.as_str())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains(
            "closed streams not confirmed at /generation (stopped now): booked at their \
             estimates, expected"
        )),
        "{texts:#?}"
    );
    sim.stop().await;
}

/// A crash in the last stretch and an immediate restart while `/generation` lags 20 s (a
/// provider that bills a cancel keeps generating after the disconnect; a Kubernetes Job or a
/// Slurm requeue restarts at once): the restart holds each open attempt's money until its
/// look-up lands, so the simulator's bill stays within 0.5% of the $0.50 budget
/// (reliability-probe-4 N1: +32% before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_and_an_immediate_restart_stay_within_the_budget_while_generation_lags() {
    let mut cfg = harvest::sim::SimConfig::fast_no_faults();
    cfg.speed_scale = 0.2;
    cfg.generation_visible_after = Duration::from_secs(20);
    let sim = harvest::sim::start(cfg, 0).await.expect("sim");
    let dir = tempfile::tempdir().expect("tmp");
    let config = write_job(
        dir.path(),
        2000,
        &sim.base_url(),
        "HARVEST_RESUME_TEST_KEY",
        "budget_usd = 0.5\nconcurrency = 300\n[request]\nmax_tokens = 2048",
        "L",
    );
    let ledger = dir.path().join("out").join("spend.jsonl");
    let spent = || -> f64 {
        std::fs::read_to_string(&ledger)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<SpendEntry>(l).ok())
            .map(|e| e.usd.as_f64())
            .sum()
    };
    let mut child = harvest_run(&config).spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(120);
    // Deep in the last stretch: most of the budget spent, streams still in flight.
    while spent() < 0.30 {
        assert!(Instant::now() < deadline, "run too slow: {}", spent());
        assert!(child.try_wait().expect("wait").is_none(), "ended early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let output = tokio::task::spawn_blocking(move || harvest_run(&config).output())
        .await
        .expect("join")
        .expect("run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Let the lagging generations the kill left be billed to the end.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let billed = sim.state.billed_total().as_f64();
    eprintln!("billed {billed:.6} on a budget of 0.50\n{stdout}");
    assert!(
        billed <= 0.5025,
        "billed {billed:.6} past the budget\n{stdout}"
    );
    sim.stop().await;
}

/// A `kill -9` with ~600 streams in flight at real pace, most at endpoints where closing a
/// stream stops its bill and some where the provider generates to the end and bills it all
/// (recorded at `/generation` only then): the restart asks every open id once before any
/// twice, finds the stopped ones on the first pass, keeps asking for the others in the
/// background while it does the work, and ends with its ledger within 2% of the bill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_with_600_in_flight_at_real_pace_settles_within_two_percent_of_the_bill() {
    let mut cfg = harvest::sim::SimConfig::fast_no_faults();
    cfg.speed_scale = 1.0;
    let sim = harvest::sim::start(cfg, 0).await.expect("sim");
    let billing = ["siliconflow/int4", "moonshotai/int4"];
    let mut endpoints = std::collections::HashMap::new();
    for t in (harvest::sim::ProviderTable::kimi_k25().endpoints.iter()).map(|e| e.tag.to_string()) {
        let patch = harvest::sim::EndpointPatch {
            cancel_stops_billing: Some(!billing.contains(&t.as_str())),
            ..Default::default()
        };
        endpoints.insert(t, patch);
    }
    sim.state
        .control(&harvest::sim::ControlRequest {
            output_tokens_mean: Some(300.0),
            endpoints,
            ..Default::default()
        })
        .expect("control");
    let dir = tempfile::tempdir().expect("tmp");
    let config = write_job(
        dir.path(),
        1_200,
        &sim.base_url(),
        "HARVEST_RESUME_TEST_KEY",
        "budget_usd = 50.0\nconcurrency = 600\n[request]\nmax_tokens = 2000",
        "P",
    );
    let out_dir = dir.path().join("out");
    let open = || {
        let scan = harvest::store::scan::scan_dir(&out_dir, &["P".to_string()]).expect("scan");
        scan.orphans().len()
    };
    let mut child = harvest_run(&config).spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(120);
    // Streams open and under way (the first tokens come after about a second).
    while open() < 550 {
        assert!(Instant::now() < deadline, "too slow: {} open", open());
        assert!(child.try_wait().expect("wait").is_none(), "ended early");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let left = open();
    let said = status_text(&out_dir);
    assert!(
        said.contains(&format!("open look-ups: {left} streams")) && said.contains("expected"),
        "{said}"
    );
    let output = tokio::task::spawn_blocking(move || harvest_run(&config).output())
        .await
        .expect("join")
        .expect("run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let entries: Vec<SpendEntry> = std::fs::read_to_string(out_dir.join("spend.jsonl"))
        .expect("ledger")
        .lines()
        .map(|l| serde_json::from_str::<SpendEntry>(l).expect("ledger line"))
        .collect();
    let ledger: f64 = entries.iter().map(|e| e.usd.as_f64()).sum();
    let billed = sim.state.billed_total().as_f64();
    let recovered = (entries.iter())
        .filter(|e| e.kind == SpendKind::Recovered)
        .count();
    eprintln!(
        "{left} open after the kill, {recovered} recovered; ledger {ledger:.6}, billed \
         {billed:.6}\n{stdout}"
    );
    assert!(recovered * 10 >= left * 9, "{recovered} of {left} found");
    assert!(
        (ledger - billed).abs() <= billed * 0.02,
        "ledger {ledger:.6} against the bill {billed:.6}"
    );
    let answered = lines(&out_dir.join("P.jsonl"));
    assert_eq!(answered, 1_200);
    sim.stop().await;
}

/// The fourth probe's what-held list, kept in CI (issue #38): a `kill -9` campaign over a job
/// of two shards whose datasets are JSONL, zstd-compressed JSONL and Parquet. Each shard is
/// killed twice mid-run with requests in flight, then finished; the job then holds every id
/// of every dataset exactly once, and the shards' summed ledgers are the simulator's bill
/// (within the 0.5% of estimates trued up against the key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_campaign_over_shards_of_jsonl_zst_and_parquet_ends_with_each_id_once() {
    let sim = paced_sim(0.1, 300.0).await;
    slow_first_tokens(&sim);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let n = 200;
    let prompt = |set: &str, i: usize| format!("{set} question {i}: explain something.");
    let jsonl = |set: &str| -> String {
        (0..n)
            .map(|i| {
                format!(
                    "{}\n",
                    serde_json::json!({"id": format!("{set}{i}"), "prompt": prompt(set, i)})
                )
            })
            .collect()
    };
    std::fs::write(d.join("a.jsonl"), jsonl("a")).expect("a");
    std::fs::write(
        d.join("b.jsonl.zst"),
        zstd::encode_all(jsonl("b").as_bytes(), 3).expect("zstd"),
    )
    .expect("b");
    let rows: Vec<Vec<Option<String>>> = (0..n)
        .map(|i| vec![Some(format!("c{i}")), Some(prompt("c", i))])
        .collect();
    crate::common::parquet::write_text(&d.join("c.parquet"), &["id", "prompt"], &rows);
    let config = d.join("harvest.toml");
    std::fs::write(
        &config,
        format!(
            "base_url = \"{}\"\napi_key_env = \"HARVEST_RESUME_TEST_KEY\"\nbudget_usd = 50.0\n\
             concurrency = 150\noutput_dir = \"out\"\n[request]\nmax_tokens = 2000\n\
             [[dataset]]\nname = \"A\"\nprompts = \"a.jsonl\"\n\
             [[dataset]]\nname = \"B\"\nprompts = \"b.jsonl.zst\"\n\
             [[dataset]]\nname = \"C\"\nprompts = \"c.parquet\"\n",
            sim.base_url()
        ),
    )
    .expect("config");
    let shard_run = |k: u32| {
        let mut c = harvest_run(&config);
        c.args(["--shard", &format!("{k}/2")]);
        c
    };
    let answered = |k: u32| -> usize {
        ["A", "B", "C"]
            .iter()
            .map(|s| lines(&d.join(format!("out/shard-{k}-of-2/{s}.jsonl"))))
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut unknown = 0;
    for k in 0..2u32 {
        // Each shard holds about 300 of the 600 prompts: killed at about 60 and 160 answers.
        for at in [60 + 7 * k as usize, 160 + 11 * k as usize] {
            kill_when(shard_run(k), at, || answered(k), deadline).await;
        }
        finish_after_kills(shard_run(k)).await;
        let ledger = std::fs::read_to_string(d.join(format!("out/shard-{k}-of-2/spend.jsonl")))
            .expect("ledger");
        unknown += ledger
            .lines()
            .map(|l| serde_json::from_str::<SpendEntry>(l).expect("ledger line"))
            .filter(|e| e.kind == SpendKind::Unknown)
            .count();
    }
    // Every id of every dataset once, across the shards.
    for (set, name) in [("a", "A"), ("b", "B"), ("c", "C")] {
        let mut ids: Vec<String> = Vec::new();
        for k in 0..2 {
            let path = d.join(format!("out/shard-{k}-of-2/{name}.jsonl"));
            let recs: Vec<OutputRecord> = std::fs::read_to_string(&path)
                .expect("outputs")
                .lines()
                .map(|l| serde_json::from_str(l).expect("whole record"))
                .collect();
            ids.extend(recs.into_iter().map(|r| r.id));
        }
        let unique: HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "{name}: an id twice");
        assert_eq!(ids.len(), n, "{name}: an id missing");
        assert!(unique.iter().all(|id| id.starts_with(set)), "{name}");
    }
    let status =
        crate::common::harvest_json(&["status", d.join("out").to_str().expect("path"), "--json"]);
    let spent: harvest::domain::Usd =
        serde_json::from_value(status["job"]["spent"].clone()).expect("usd");
    let (ledger, billed) = (spent.as_f64(), sim.state.billed_total().as_f64());
    eprintln!(
        "{unknown} requests killed before any answer; ledger {ledger:.6} vs billed {billed:.6}"
    );
    assert!(
        (ledger - billed).abs() <= billed * 0.005,
        "ledger {ledger} vs simulator {billed} ({:+.3}%)",
        (ledger - billed) / billed * 100.0
    );
    sim.stop().await;
}

/// Streams a drain's grace closes that `/generation` does not know by the end of the run (it
/// records a generation some seconds after it ends, here 12 s) stay unconfirmed, booked at
/// their estimates: the run does not wait for them past its 8 s, and the next look
/// (`harvest status --reconcile`, as the next start would) asks again and books each one's
/// adjustment, so the ledger ends equal to the bill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_a_drain_closed_are_confirmed_by_the_next_look() {
    let mut cfg = harvest::sim::SimConfig::fast_no_faults();
    cfg.speed_scale = 1.0;
    cfg.generation_visible_after = Duration::from_secs(12);
    let sim = harvest::sim::start(cfg, 0).await.expect("sim");
    sim.state
        .control(&harvest::sim::ControlRequest {
            output_tokens_mean: Some(1500.0),
            all: Some(harvest::sim::EndpointPatch {
                cancel_stops_billing: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("control");
    let dir = tempfile::tempdir().expect("tmp");
    let config = write_job(
        dir.path(),
        20,
        &sim.base_url(),
        "HARVEST_RESUME_TEST_KEY",
        "concurrency = 20\n[request]\nmax_tokens = 2000",
        "D",
    );
    let out = dir.path().join("out");
    let scan = || harvest::store::scan::scan_dir(&out, &["D".to_string()]).expect("scan");
    let mut run = Command::new(env!("CARGO_BIN_EXE_harvest"));
    run.args(["run", "--headless", "--drain-grace-s", "1", "-c"])
        .arg(&config)
        .env("HARVEST_RESUME_TEST_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = run.spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(60);
    // Streams under way (their first tokens come within about a second of their start).
    while scan().ledger.open.len() < 10 {
        assert!(Instant::now() < deadline, "too slow");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("run");
    let said = String::from_utf8_lossy(&output.stderr).to_string()
        + &String::from_utf8_lossy(&output.stdout);
    let closed = scan().ledger.closed_unconfirmed.len();
    assert!(
        closed >= 10,
        "the grace closed the streams: {closed}\n{said}"
    );
    let spent = |scan: &harvest::store::scan::DirScan| scan.ledger.total.as_f64();
    let billed = sim.state.billed_total().as_f64();
    // Until looked up they stand at harvest's estimates (its own count of each prompt's
    // tokens, priced as dispatched, and the tokens it read before the close), which may be
    // under the bill (tokens in transit) or over it: the #35 in-a-row runs on a loaded machine
    // saw 0.0022485 booked against 0.0022407 billed. So what is checked is that each was booked
    // unconfirmed, and that the next look confirms each one and makes the ledger the bill.
    eprintln!(
        "booked at estimates until looked up: {} against {billed}",
        spent(&scan())
    );
    // The API knows them 12 s after their close.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let reconcile = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args([
            "status",
            "--reconcile",
            "--api-key-env",
            "HARVEST_RESUME_TEST_KEY",
            "--base-url",
        ])
        .arg(sim.base_url())
        .arg(&out)
        .env("HARVEST_RESUME_TEST_KEY", KEY)
        .output()
        .expect("status runs");
    let told = String::from_utf8_lossy(&reconcile.stdout).to_string();
    assert!(reconcile.status.success(), "{told}");
    assert!(
        told.contains(&format!("{closed} streams a run closed confirmed")),
        "{told}"
    );
    let after = scan();
    assert!(after.ledger.closed_unconfirmed.is_empty(), "{told}");
    assert!(
        (spent(&after) - billed).abs() < 1e-6,
        "ledger {} = bill {billed}",
        spent(&after)
    );
    sim.stop().await;
}
