//! A second chance, through the binary against the simulator on 127.0.0.1: `--retry-rejects`
//! and `--retry-truncated` runs, each killed with SIGKILL twice and then run to the end, leave
//! exactly one entry per id (one answer, or one reject) in the current files; what they
//! superseded is in the `.superseded` files, which `status --report` does not read as current.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{fast_sim, force_error, read_jsonl, set_speed, write_job_with_ids};
use harvest::sim::ForcedError;
use harvest::store::output::{OutputRecord, RejectRecord};

const VAR: &str = "HARVEST_SECOND_CHANCE_KEY";
const KEY: &str = "sk-or-v1-second-chance-key-000000";
const N: usize = 150;

fn job(dir: &Path, base: &str, max_tokens: u32) {
    let settings = format!(
        "concurrency = 8\n[request]\nmax_tokens = {max_tokens}\n\
         [retry]\nbase_delay_ms = 10\nstop_after_same_error = 0"
    );
    write_job_with_ids(dir, base, VAR, N, &settings);
}

fn harvest(dir: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harvest"));
    c.env(VAR, KEY)
        .args(["run", "--headless", "-c"])
        .arg(dir.join("harvest.toml"))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

async fn finish(dir: &Path, extra: &[&str]) -> String {
    let (code, text) = crate::common::run_headless(dir, VAR, KEY, extra).await;
    assert_eq!(code, 0, "{text}");
    text
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map_or(0, |t| t.lines().count())
}

/// Starts `harvest run <extra>`, kills it with SIGKILL once `grow` more answers are written
/// (or when it ends by itself), twice; then runs the same command to the end.
async fn kill_twice_then_finish(dir: &Path, extra: &[&str], grow: usize) -> String {
    let out = dir.join("out/A.jsonl");
    for _ in 0..2 {
        let start = lines(&out);
        let mut child = harvest(dir, extra).spawn().expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(60);
        while lines(&out) < start + grow && child.try_wait().expect("wait").is_none() {
            assert!(Instant::now() < deadline, "run too slow");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    finish(dir, extra).await
}

/// Each id of the prompt file in exactly one current place.
fn one_place_per_id(dir: &Path) -> (Vec<OutputRecord>, Vec<RejectRecord>) {
    let outputs: Vec<OutputRecord> = read_jsonl(&dir.join("out/A.jsonl"));
    let rejects: Vec<RejectRecord> = read_jsonl(&dir.join("out/A.rejects.jsonl"));
    let mut seen: HashMap<String, usize> = HashMap::new();
    for id in outputs
        .iter()
        .map(|o| o.id.clone())
        .chain(rejects.iter().map(|r| r.id.clone()))
    {
        *seen.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ids in two places: {twice:?}");
    assert_eq!(seen.len(), N, "every id somewhere");
    (outputs, rejects)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_rejects_killed_twice_ends_with_one_entry_per_id() {
    let sim = fast_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    job(d, &sim.base_url(), 2_000);
    // The first 60 requests are refused for good (a 400 the prompts are not to blame for).
    force_error(
        &sim,
        Some(ForcedError {
            status: 400,
            error_type: "invalid_request".into(),
            availability: None,
            mid_stream: false,
            message: Some("a transient validation bug".into()),
            remaining: Some(60),
            provider_name: None,
            raw: None,
        }),
    );
    finish(d, &[]).await;
    let (_, rejects) = one_place_per_id(d);
    assert_eq!(rejects.len(), 60);
    assert!(rejects.iter().all(|r| r.error_kind == "400"));

    // Slow enough that a kill catches the retries in the middle.
    set_speed(&sim, 0.05);
    let text = kill_twice_then_finish(d, &["--retry-rejects=400"], 15).await;
    let (outputs, rejects) = one_place_per_id(d);
    assert_eq!((outputs.len(), rejects.len()), (N, 0), "{text}");
    let superseded: Vec<RejectRecord> = read_jsonl(&d.join("out/A.rejects.superseded.jsonl"));
    assert!(superseded.len() >= 60, "the old rejects are kept aside");
    // The report reads the current files only.
    let out = d.join("out");
    let v = crate::common::harvest_json(&[
        "status".as_ref(),
        "--report".as_ref(),
        "--json".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(v["total"]["prompts"], N as u64);
    assert_eq!(v["total"]["rejected"], 0);
    assert_eq!(
        v["datasets"].as_array().map(Vec::len),
        Some(1),
        "no superseded dataset"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_truncated_killed_twice_ends_with_one_whole_answer_per_id() {
    let sim = fast_sim(120.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    job(d, &sim.base_url(), 60);
    finish(d, &[]).await;
    let (outputs, _) = one_place_per_id(d);
    let cut = outputs
        .iter()
        .filter(|o| o.finish_reason == "length")
        .count();
    assert!(cut > N / 2, "most answers cut at 60 tokens: {cut}");

    // The same job with room to finish; the manifest allows the new max_tokens for this.
    job(d, &sim.base_url(), 4_096);
    set_speed(&sim, 0.05);
    let text = kill_twice_then_finish(d, &["--retry-truncated"], 10).await;
    let (outputs, rejects) = one_place_per_id(d);
    assert_eq!((outputs.len(), rejects.len()), (N, 0), "{text}");
    let still_cut = outputs
        .iter()
        .filter(|o| o.finish_reason == "length")
        .count();
    assert_eq!(still_cut, 0, "every answer whole now");
    let superseded: Vec<OutputRecord> = read_jsonl(&d.join("out/A.superseded.jsonl"));
    assert!(superseded.len() >= cut, "the cut answers are kept aside");
    assert!(superseded.iter().all(|o| o.finish_reason == "length"));
    sim.stop().await;
}

/// A `--retry-truncated` run that the dollar budget stops, and one limited to a shard, leave
/// every paid answer current: what the first did not buy again comes back at its end, and the
/// second never touches the other shard's answers (reliability probe 3, D4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_stopped_by_the_budget_or_limited_to_a_shard_leaves_every_answer_current() {
    let sim = fast_sim(120.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    job(d, &sim.base_url(), 60);
    finish(d, &[]).await;
    let (outputs, _) = one_place_per_id(d);
    let cut: Vec<String> = (outputs.iter())
        .filter(|o| o.finish_reason == "length")
        .map(|o| o.id.clone())
        .collect();
    assert!(
        cut.len() > N / 2,
        "most answers cut at 60 tokens: {}",
        cut.len()
    );

    // Room to finish, but the budget buys only a few of them again.
    job(d, &sim.base_url(), 4_096);
    let spent = crate::common::ledger_total(&d.join("out"));
    let cfg = std::fs::read_to_string(d.join("harvest.toml")).expect("config");
    let budget = spent.as_f64() + 0.002;
    std::fs::write(
        d.join("harvest.toml"),
        cfg.replace("budget_usd = 5.0", &format!("budget_usd = {budget:.6}")),
    )
    .expect("config");
    let text = finish(d, &["--retry-truncated"]).await;
    assert!(text.contains("budget"), "stopped by the budget: {text}");
    let (outputs, _) = one_place_per_id(d);
    let whole = outputs
        .iter()
        .filter(|o| o.finish_reason != "length")
        .count();
    assert!(
        whole < N,
        "the budget stopped it before all were bought again: {text}"
    );
    assert!(
        text.contains("with no new outcome made current again"),
        "the end says so: {text}"
    );

    // Shard 0 of 2 only: the other shard's cut answers stay where they are, untouched.
    std::fs::write(d.join("harvest.toml"), cfg).expect("config");
    let shard1_before: Vec<String> = read_jsonl::<OutputRecord>(&d.join("out/A.jsonl"))
        .into_iter()
        .filter(|o| harvest::store::prompts::shard_of(&o.id, 2) == 1)
        .map(|o| serde_json::to_string(&o).expect("json"))
        .collect();
    let archived_of_shard1 = || {
        read_jsonl::<OutputRecord>(&d.join("out/A.superseded.jsonl"))
            .iter()
            .filter(|o| harvest::store::prompts::shard_of(&o.id, 2) == 1)
            .count()
    };
    let archived_before = archived_of_shard1();
    // The whole job's directory, worked on for one shard's part (--shard-dir).
    let out = d.join("out");
    let out = out.to_str().expect("utf-8 path");
    finish(
        d,
        &["--retry-truncated", "--shard", "0/2", "--shard-dir", out],
    )
    .await;
    assert_eq!(
        archived_of_shard1(),
        archived_before,
        "nothing of shard 1 superseded"
    );
    let (outputs, _) = one_place_per_id(d);
    let shard1_after: Vec<String> = (outputs.iter())
        .filter(|o| harvest::store::prompts::shard_of(&o.id, 2) == 1)
        .map(|o| serde_json::to_string(o).expect("json"))
        .collect();
    let mut a = shard1_before.clone();
    let mut b = shard1_after;
    a.sort();
    b.sort();
    assert_eq!(a, b, "shard 1's answers untouched");
    assert!(
        (outputs.iter())
            .filter(|o| harvest::store::prompts::shard_of(&o.id, 2) == 0)
            .all(|o| o.finish_reason != "length"),
        "shard 0 bought whole"
    );
    sim.stop().await;
}

/// A kind no reject has (a typo, or nothing after `=`) is refused before anything runs: it
/// would retry nothing, silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_reject_kind_is_refused() {
    let sim = fast_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    job(d, &sim.base_url(), 100);
    for arg in [
        "--retry-rejects=polcy",
        "--retry-rejects=",
        "--retry-rejects=429,foo",
    ] {
        let (code, text) = crate::common::run_headless(d, VAR, KEY, &[arg]).await;
        assert_eq!(code, 2, "{arg}: {text}");
        assert!(
            text.contains("is not a kind of reject; the kinds are 429, 5xx"),
            "{text}"
        );
    }
    assert!(!d.join("out/A.jsonl").exists(), "nothing ran");
    let (code, text) =
        crate::common::run_headless(d, VAR, KEY, &["--retry-rejects=policy,429"]).await;
    assert_eq!(code, 0, "{text}");
    sim.stop().await;
}
