//! The shipped `deploy/slurm/harvest-array.sbatch` on a real Slurm (one node, this host:
//! `scripts/slurm-up.sh` starts it, `.ci/run` calls that), against the simulator on 127.0.0.1.
//! An array of 3: every id once across the shards' export, the summed ledgers equal to the
//! simulator's bill, `status` seeing the job as one. Then an array whose `--time` is shorter
//! than its work: Slurm's warning drains each task, which requeues itself and resumes, until
//! every shard is done: still every id once and the ledgers equal to the bill.
//!
//! In the slow tier (`.ci/run` runs it; about 90 s). Where no Slurm answers it cannot do
//! its check and says so (`common::cannot_check`): a failure under CI.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use harvest::domain::Usd;
use harvest::sim::SimHandle;

/// Why this host cannot run the test's array, if it cannot: no Slurm answering, or this host
/// is not one of its nodes (the tasks must reach the simulator on 127.0.0.1).
fn slurm_here() -> Result<String, String> {
    let run = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .map_err(|e| format!("no {cmd} ({e}): scripts/slurm-up.sh installs and starts Slurm"))
    };
    let ping = run("scontrol", &["ping"])?;
    let said = String::from_utf8_lossy(&ping.stdout);
    if !said.contains("is UP") {
        return Err(format!(
            "Slurm's controller does not answer (scontrol ping: {}): scripts/slurm-up.sh starts one",
            said.trim()
        ));
    }
    let host = String::from_utf8_lossy(&run("hostname", &["-s"])?.stdout)
        .trim()
        .to_string();
    let node = run("sinfo", &["-h", "-N", "-n", &host, "-o", "%T"])?;
    let state = String::from_utf8_lossy(&node.stdout).trim().to_string();
    if !["idle", "mixed", "allocated"].contains(&state.as_str()) {
        return Err(format!(
            "this host ({host}) is not a Slurm node ready for jobs (sinfo: {state:?})"
        ));
    }
    Ok(host)
}

/// Said on the process's stderr, which `cargo test` shows for a test that passes too: the CI
/// log says what the test did.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "slurm: {text}");
}

/// The array tasks of `job` by task id: each one's `key=value` fields (`scontrol -o show job`).
fn tasks(job: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let out = Command::new("scontrol")
        .args(["-o", "show", "job", job])
        .output()
        .expect("scontrol");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            (l.split_whitespace())
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        })
        .filter_map(|f| Some((f.get("ArrayTaskId")?.clone(), f)))
        .collect()
}

const ENDED: [&str; 9] = [
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
];

/// Cancels the test's jobs if it fails midway: no task is left to run against a gone simulator.
struct Jobs(Vec<String>);

impl Drop for Jobs {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.0.is_empty() {
            let _ = Command::new("scancel").args(&self.0).status();
        }
    }
}

/// Submits the shipped script from `dir` as an array of 3 on `host`, with `extra` options;
/// returns the job id.
fn submit(dir: &Path, host: &str, harvest: &Path, extra: &[&str]) -> String {
    let out = Command::new("sbatch")
        .current_dir(dir)
        .args(["--parsable", "--array=0-2", "--nodelist", host])
        .args(extra)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/slurm/harvest-array.sbatch"))
        .env("HARVEST", harvest)
        .env("HARVEST_KEY_DIR", dir.join("keys"))
        .output()
        .expect("sbatch runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sbatch: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said.trim().split(';').next().expect("a job id").to_string()
}

/// Waits until every task of `job` has ended; returns the tasks. A requeued task waits as long
/// as a job credential lives before it starts again (`cred_expire`: 20 s in the slurm.conf of
/// scripts/slurm-up.sh, 120 s by default); making it start sooner (`scontrol update
/// StartTime=now`) had Slurm kill it at launch ("Job credential revoked").
async fn wait_ended(job: &str, within: Duration) -> BTreeMap<String, BTreeMap<String, String>> {
    let deadline = Instant::now() + within;
    loop {
        let now = tasks(job);
        let ended = (now.values())
            .filter(|t| ENDED.contains(&t["JobState"].as_str()))
            .count();
        if now.len() == 3 && ended == 3 {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "the array {job} did not end in {within:?}: {now:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The job's directory: the prompts (`p00`..), a config for the simulator ($5) with a key and a
/// directory per shard (`OPENROUTER_API_KEY_{shard}`, read by the script from 0600 files),
/// and a copy of the binary: the tasks start over minutes, and a copy keeps them on the binary
/// under test if cargo rebuilds it meanwhile.
fn job_dir(dir: &Path, sim: &SimHandle, n: usize, settings: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let settings = format!("output_dir = \"out\"\n{settings}");
    crate::common::write_job_with_ids(
        dir,
        &sim.base_url(),
        "OPENROUTER_API_KEY_{shard}",
        n,
        &settings,
    );
    let keys = dir.join("keys");
    std::fs::create_dir_all(&keys).expect("keys");
    for k in 0..3 {
        let f = keys.join(format!("OPENROUTER_API_KEY_{k}"));
        std::fs::write(&f, format!("sk-or-v1-slurm-shard-{k}-0000000000\n")).expect("key");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let harvest = dir.join("harvest");
    std::fs::copy(env!("CARGO_BIN_EXE_harvest"), &harvest).expect("copy the binary");
    harvest
}

/// The job as one (`status` over the parent directory: 3 shards, none missing or twice, every
/// prompt answered or rejected, the summed spend equal to the simulator's bill) and its export
/// (each id once). Returns the summed spend.
fn one_job_each_id_once(dir: &Path, n: u64, sim: &SimHandle) -> Usd {
    let out = dir.join("out");
    let status = crate::common::harvest_json(&["status", out.to_str().expect("path"), "--json"]);
    let job = &status["job"];
    assert_eq!(job["of"], 3, "{job:#}");
    for none in ["missing", "duplicated", "other_config"] {
        assert_eq!(job[none], serde_json::json!([]), "{none}: {job:#}");
    }
    assert_eq!(job["shards"].as_array().expect("rows").len(), 3);
    assert_eq!(
        job["done"].as_u64().expect("done") + job["rejected"].as_u64().expect("rejected"),
        n,
        "{job:#}"
    );
    let spent: Usd = serde_json::from_value(job["spent"].clone()).expect("usd");
    assert_eq!(
        spent,
        sim.state.billed_total(),
        "the summed ledgers are the bill"
    );
    let text = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .arg("status")
        .arg(&out)
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("job: 3 shard directories of 3 shards"),
        "status shows the job as one: {text}"
    );

    let to = dir.join("train");
    let export = crate::common::harvest_json(&[
        "export",
        out.to_str().expect("path"),
        "--to",
        to.to_str().expect("path"),
        "--keep-truncated",
        "--json",
    ]);
    let c = &export["datasets"][0];
    let ids = crate::common::exported_ids(&to, "A");
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(
        (ids.len(), unique.len()),
        (n as usize, n as usize),
        "each id once across the shards' export: {c}"
    );
    spent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow tier: the sbatch script on a real Slurm (scripts/slurm-up.sh), about 6 min"]
async fn the_sbatch_array_on_a_real_slurm_answers_each_id_once_and_resumes_past_its_time_limit() {
    let host = match slurm_here() {
        Ok(h) => h,
        Err(why) => {
            crate::common::cannot_check(&format!("{why}; the sbatch array was not run"));
            return;
        }
    };
    let mut jobs = Jobs(Vec::new());

    // An array of 3 to its end.
    let began = Instant::now();
    let sim = crate::common::fast_sim(40.0).await;
    let tmp = tempfile::tempdir().expect("tmp");
    let n = 240;
    let harvest = job_dir(
        tmp.path(),
        &sim,
        n,
        "concurrency = 16\n[request]\nmax_tokens = 200",
    );
    let job = submit(tmp.path(), &host, &harvest, &[]);
    jobs.0.push(job.clone());
    let ended = wait_ended(&job, Duration::from_secs(180)).await;
    for (id, t) in &ended {
        let log = std::fs::read_to_string(tmp.path().join(format!("harvest-{job}_{id}.log")));
        assert_eq!(
            (t["JobState"].as_str(), t["ExitCode"].as_str()),
            ("COMPLETED", "0:0"),
            "task {id}: {log:?}"
        );
    }
    let spent = one_job_each_id_once(tmp.path(), n as u64, &sim);
    say(&format!(
        "array {job}: {n} ids in 3 shards, each once, ledgers {spent} = the bill, in {:.0?}",
        began.elapsed()
    ));
    sim.stop().await;

    // Each task's --time (2 minutes) shorter than its shard's work at this pace (about two
    // minutes at real pace): Slurm's warning is due at once (it is 120 s before the end), each
    // task drains, exits 75 and requeues itself, until its shard is done. Slurm sends the
    // warning at its next pass over the jobs' limits, up to a minute late: with --time=1 it
    // came after the task had ended (at 0.3 of real pace, 38 s of work) or not before the
    // limit itself (at real pace: TIMEOUT, not requeued).
    let began = Instant::now();
    let sim = crate::common::paced_sim(1.0, 300.0).await;
    let tmp = tempfile::tempdir().expect("tmp");
    let n = 180;
    let harvest = job_dir(
        tmp.path(),
        &sim,
        n,
        "concurrency = 4\n[request]\nmax_tokens = 2000",
    );
    let job = submit(tmp.path(), &host, &harvest, &["--time=2"]);
    jobs.0.push(job.clone());
    let ended = wait_ended(&job, Duration::from_secs(900)).await;
    let mut requeues = Vec::new();
    for (id, t) in &ended {
        let log = std::fs::read_to_string(tmp.path().join(format!("harvest-{job}_{id}.log")))
            .unwrap_or_default();
        assert_eq!(
            (t["JobState"].as_str(), t["ExitCode"].as_str()),
            ("COMPLETED", "0:0"),
            "task {id}: {log}"
        );
        let restarts: usize = t["Restarts"].parse().expect("Restarts");
        // Each stop was Slurm's, said by harvest and followed by the task's own requeue.
        let stops = log.matches("STOPPED after").count();
        let slurms = log
            .matches("(scheduler stop: SIGTERM from Slurm, resumes when resubmitted)")
            .count();
        let requeued = log.matches("drained; requeueing task").count();
        assert!(
            restarts >= 1 && stops == restarts && slurms == restarts && requeued == restarts,
            "task {id}: {restarts} restarts, {stops} stops, {slurms} of them Slurm's, \
             {requeued} requeues:\n{log}"
        );
        requeues.push(restarts);
    }
    let spent = one_job_each_id_once(tmp.path(), n as u64, &sim);
    say(&format!(
        "array {job} with --time=2: {n} ids in 3 shards, each once, ledgers {spent} = the bill, \
         after {} requeues on Slurm's signal (by task: {requeues:?}), in {:.0?}",
        requeues.iter().sum::<usize>(),
        began.elapsed()
    ));
    sim.stop().await;
}
