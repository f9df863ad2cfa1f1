//! Every turn regenerated (`turns = "all"`), through the binary against the simulator on
//! 127.0.0.1 with its request log keeping bodies: one request per assistant turn, each carrying
//! the history the model wrote (the simulator's log shows it), budgets counting every turn,
//! rows that pass the export's SpecForge rules, and a kill -9 mid-row then a resume that leaves
//! one row per id with the ledger equal to the bill.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{read_jsonl, set_speed};
use harvest::sim::{self, ControlRequest, SimConfig, SimHandle};
use harvest::store::output::OutputRecord;

const VAR: &str = "HARVEST_TURNS_TEST_KEY";
const KEY: &str = "sk-or-v1-turns-test-key-00000000000";
const N: usize = 60;

/// Conversation `i`: a system turn, then 1 to 3 user turns with the dataset's own answers
/// between them (the last one is followed by a dataset answer too, which is dropped).
fn prompt_line(i: usize) -> String {
    let users = 1 + i % 3;
    let mut msgs = vec![serde_json::json!({"role": "system", "content": "Answer briefly."})];
    for u in 0..users {
        msgs.push(serde_json::json!({"role": "user", "content": format!("conv {i} question {u}")}));
        msgs.push(
            serde_json::json!({"role": "assistant", "content": format!("DATASET ANSWER {i}.{u}")}),
        );
    }
    serde_json::json!({"id": format!("c{i:02}"), "messages": msgs}).to_string() + "\n"
}

/// The user turns of conversation `i`: the turns the model writes.
fn users_of(i: usize) -> usize {
    1 + i % 3
}

fn write_job(dir: &Path, base: &str, budget: Option<u64>) {
    write_job_turns(dir, base, budget, "all");
}

fn write_job_turns(dir: &Path, base: &str, budget: Option<u64>, turns: &str) {
    let prompts: String = (0..N).map(prompt_line).collect();
    std::fs::write(dir.join("p.jsonl"), prompts).expect("prompts");
    let budget = budget.map_or(String::new(), |b| format!("output_token_budget = {b}\n"));
    std::fs::write(
        dir.join("harvest.toml"),
        format!(
            "base_url = \"{base}\"\napi_key_env = \"{VAR}\"\nbudget_usd = 5.0\nconcurrency = 8\n\
             [request]\nmax_tokens = 2000\n[retry]\nbase_delay_ms = 10\n\
             [[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\nturns = \"{turns}\"\n{budget}"
        ),
    )
    .expect("config");
}

async fn logging_sim(mean_tokens: f64) -> SimHandle {
    let mut cfg = SimConfig::fast_no_faults();
    cfg.log_bodies = true;
    let s = sim::start(cfg, 0).await.expect("sim");
    s.state
        .control(&ControlRequest {
            output_tokens_mean: Some(mean_tokens),
            ..Default::default()
        })
        .expect("control");
    s
}

/// The `(role, content)` list of every answered request body the simulator logged.
fn sent_histories(sim: &SimHandle) -> Vec<Vec<(String, String)>> {
    sim.state
        .requests_since(0)
        .iter()
        .filter(|r| r.status == 200)
        .filter_map(|r| r.body.as_ref())
        .map(|b| {
            b["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .map(|m| {
                    let s = |k: &str| m[k].as_str().unwrap_or_default().to_string();
                    (s("role"), s("content"))
                })
                .collect()
        })
        .collect()
}

fn ledger_matches_bill(sim: &SimHandle, out: &Path) {
    let ledger = crate::common::ledger_total(out).as_f64();
    let billed = sim.state.billed_total().as_f64();
    assert!(
        (ledger - billed).abs() < 1e-6,
        "ledger {ledger} against the bill {billed}; where they differ:\n{}",
        crate::common::ledger_against_bill(out, &sim.state.billing_entries())
    );
}

/// Checks each row against the requests the simulator received: for every turn the model
/// wrote, a request whose messages are the row's conversation up to that turn.
fn rows_match_requests(rows: &[OutputRecord], sent: &[Vec<(String, String)>]) {
    let sent: HashSet<&Vec<(String, String)>> = sent.iter().collect();
    for r in rows {
        let i: usize = r.id[1..].parse().expect("id");
        let conv: Vec<(String, String)> = r
            .conversations
            .iter()
            .map(|t| (t.role.clone(), t.content.clone()))
            .collect();
        let assistant_at: Vec<usize> = (0..conv.len())
            .filter(|&k| conv[k].0 == "assistant")
            .collect();
        assert_eq!(
            assistant_at.len(),
            users_of(i),
            "{}: one answer per user turn",
            r.id
        );
        assert_eq!(r.turns.len(), users_of(i), "{}: one turn record each", r.id);
        for &k in &assistant_at {
            assert!(
                !conv[k].1.contains("DATASET ANSWER"),
                "{}: turn {k} is the dataset's text",
                r.id
            );
            assert!(
                sent.contains(&conv[..k].to_vec()),
                "{}: no request carried the history before turn {k}",
                r.id
            );
        }
        let sum: u64 = r.turns.iter().map(|t| t.usage.completion_tokens).sum();
        assert_eq!(r.usage.completion_tokens, sum, "{}", r.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_turn_is_generated_on_the_regenerated_history() {
    let sim = logging_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    write_job(d, &sim.base_url(), None);
    let (code, text) = crate::common::run_headless(d, VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{text}");
    let rows: Vec<OutputRecord> = read_jsonl(&d.join("out/A.jsonl"));
    assert_eq!(rows.len(), N, "{text}");
    let sent = sent_histories(&sim);
    let turns: usize = (0..N).map(users_of).sum();
    assert_eq!(sent.len(), turns, "one request per turn, no more");
    rows_match_requests(&rows, &sent);
    ledger_matches_bill(&sim, &d.join("out"));
    // The budget counts every turn: the report's output tokens are the simulator's.
    let billed: u64 = sim
        .state
        .billing_per_tag()
        .values()
        .map(|t| t.completion_tokens)
        .sum();
    let out = d.join("out");
    let v = crate::common::harvest_json(&[
        "status".as_ref(),
        "--report".as_ref(),
        "--json".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(v["total"]["output_tokens"].as_u64(), Some(billed), "{v}");

    // Exported for SpecForge, every multi-turn row passes its rules.
    let to = d.join("export");
    let counts = crate::common::harvest_json(&[
        "export".as_ref(),
        out.as_os_str(),
        "--to".as_ref(),
        to.as_os_str(),
        "--require-reasoning".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(
        counts["datasets"][0]["success"].as_u64(),
        Some(N as u64),
        "{counts}"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_budget_counts_every_turn() {
    let sim = logging_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    // Half of what all turns take (~120 turns of ~40 tokens): counting only each row's last
    // turn, the run would take every prompt.
    write_job(d, &sim.base_url(), Some(2_400));
    let (code, text) = crate::common::run_headless(d, VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{text}");
    let rows: Vec<OutputRecord> = read_jsonl(&d.join("out/A.jsonl"));
    let written: u64 = rows.iter().map(|r| r.usage.completion_tokens).sum();
    let turns_written: usize = rows.iter().map(|r| r.turns.len()).sum();
    assert!(
        rows.len() < N,
        "the budget stops it early: {} rows",
        rows.len()
    );
    assert!(written >= 2_400, "the budget is reached: {written}");
    // Rows in flight at the stop finish their turns: short of the ~4,800 all rows take.
    assert!(
        written < 3_600,
        "{written} tokens over {turns_written} turns"
    );
    // Nothing paid is left out of a row: the rows begun are finished.
    assert_eq!(sent_histories(&sim).len(), turns_written);
    sim.stop().await;
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map_or(0, |t| t.lines().count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_row_then_resume_leaves_one_row_per_id() {
    let sim = logging_sim(40.0).await;
    // Slow enough that a kill lands with rows half done.
    set_speed(&sim, 0.05);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    write_job(d, &sim.base_url(), None);
    let out = d.join("out/A.jsonl");
    let mut caught_mid_row = 0;
    for _ in 0..2 {
        let start = lines(&out);
        let mut child = Command::new(env!("CARGO_BIN_EXE_harvest"))
            .env(VAR, KEY)
            .args(["run", "--headless", "-c"])
            .arg(d.join("harvest.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(60);
        // Killed once rows were written and a row is half done (a turn of it in the turns
        // file, its row not written yet).
        while (lines(&out) < start + 8 || !half_done(d))
            && child.try_wait().expect("wait").is_none()
        {
            assert!(Instant::now() < deadline, "run too slow");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        // Requests answered beyond the turns of the rows written: rows cut in the middle.
        let rows: Vec<OutputRecord> = read_jsonl(&out);
        let in_rows: usize = rows.iter().map(|r| r.turns.len()).sum();
        let answered = sent_histories(&sim).len();
        caught_mid_row += answered.saturating_sub(in_rows);
    }
    assert!(caught_mid_row > 0, "the kills caught no row in the middle");
    set_speed(&sim, 0.0);
    let (code, text) = crate::common::run_headless(d, VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{text}");
    let rows: Vec<OutputRecord> = read_jsonl(&out);
    let mut per_id: HashMap<&str, usize> = HashMap::new();
    for r in &rows {
        *per_id.entry(r.id.as_str()).or_default() += 1;
    }
    assert_eq!(per_id.len(), N, "every id answered");
    assert!(per_id.values().all(|&n| n == 1), "one row per id");
    rows_match_requests(&rows, &sent_histories(&sim));
    // The turns of the rows cut by the kills were paid for, and the ledger says so.
    ledger_matches_bill(&sim, &d.join("out"));
    // Rows cut by a kill went on from their last finished turn: their turns come from more
    // than one run (the run of a turn is its ledger line's attempt, `<run>-<n>`).
    let run_of: HashMap<String, String> =
        read_jsonl::<harvest::store::output::SpendEntry>(&d.join("out/spend.jsonl"))
            .into_iter()
            .filter_map(|e| {
                let run = e.attempt?.split('-').next()?.to_string();
                Some((e.generation_id?, run))
            })
            .collect();
    let spanning = rows
        .iter()
        .filter(|r| {
            let runs: HashSet<&String> = (r.turns.iter())
                .filter_map(|t| run_of.get(t.generation_id.as_ref()?))
                .collect();
            runs.len() > 1
        })
        .count();
    assert!(spanning > 0, "no row continued across runs");
    // Every answer booked complete is a turn of a row: none paid for was thrown away. (The
    // requests cut in flight by the kills, and those a loaded machine timed out and sent
    // again, were never complete: how many there were is the machine's pace, not a decision.)
    let kept: HashSet<&str> = (rows.iter())
        .flat_map(|r| r.turns.iter().filter_map(|t| t.generation_id.as_deref()))
        .collect();
    let ledger: Vec<harvest::store::output::SpendEntry> = read_jsonl(&d.join("out/spend.jsonl"));
    let thrown: Vec<&str> = (ledger.iter())
        .filter(|e| e.kind == harvest::store::output::SpendKind::Complete)
        .filter_map(|e| e.generation_id.as_deref())
        .filter(|g| !kept.contains(g))
        .collect();
    assert!(
        thrown.is_empty(),
        "answers booked complete but in no row: {thrown:?}"
    );
    sim.stop().await;
}

/// A row is half done in `d`'s run: the turns file holds a turn of an id with no row yet.
fn half_done(d: &Path) -> bool {
    let rows: HashSet<String> = std::fs::read_to_string(d.join("out/A.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some(v["id"].as_str()?.to_string()))
        .collect();
    std::fs::read_to_string(d.join("out/turns.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|v| v["id"].as_str().is_some_and(|id| !rows.contains(id)))
}

/// Conversations whose turns do not alternate are not sent when every turn is regenerated: two
/// assistants in a row would make a request end on an assistant turn (a prefill), two users in
/// a row a row SpecForge refuses. Each is rejected as `input`, naming its line and message,
/// before anything is paid; the good rows are answered as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_conversations_are_rejected_before_anything_is_paid() {
    let sim = logging_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    write_job(d, &sim.base_url(), None);
    let m = |role: &str, text: &str| serde_json::json!({"role": role, "content": text});
    let bad = [
        serde_json::json!({"id": "two-assistants", "messages": [m("user", "q1"), m("assistant", "a1"), m("assistant", "a2"), m("user", "q2")]}),
        serde_json::json!({"id": "two-users", "messages": [m("user", "q1"), m("user", "q2")]}),
    ];
    let mut prompts = std::fs::read_to_string(d.join("p.jsonl")).expect("prompts");
    for b in &bad {
        prompts.push_str(&format!("{b}\n"));
    }
    std::fs::write(d.join("p.jsonl"), prompts).expect("prompts");
    let (code, text) = crate::common::run_headless(d, VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{text}");
    let rejects: Vec<harvest::store::output::RejectRecord> =
        read_jsonl(&d.join("out/A.rejects.jsonl"));
    let by_id: std::collections::HashMap<&str, &harvest::store::output::RejectRecord> =
        rejects.iter().map(|r| (r.id.as_str(), r)).collect();
    assert_eq!(rejects.len(), 2, "{rejects:?}");
    assert!(
        by_id["two-assistants"]
            .error
            .contains("messages[2] has role assistant, but the turn due is user"),
        "{rejects:?}"
    );
    assert!(
        by_id["two-users"]
            .error
            .contains("messages[1] has role user, but the turn due is assistant"),
        "{rejects:?}"
    );
    assert!(
        rejects
            .iter()
            .all(|r| r.error_kind == "input" && r.attempts == 0)
    );
    // Nothing of them was sent: one request per user turn of the good rows, no more.
    let turns: usize = (0..N).map(users_of).sum();
    assert_eq!(sent_histories(&sim).len(), turns);
    let rows: Vec<OutputRecord> = read_jsonl(&d.join("out/A.jsonl"));
    assert_eq!(rows.len(), N);
    sim.stop().await;
}

/// The prompt file's own answers under `turns = "last"` (the default) are text the model never
/// wrote: `run --check` says so before anything is sent, and export never makes one a row's
/// answer. By default those rows are left out with the reason; with `--foreign-turns context`
/// each rendered row ends at the model's own answer with its reasoning, and
/// `--require-reasoning` keeps them (the newcomer review's D4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_files_own_answers_are_never_a_training_target() {
    let sim = logging_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    write_job_turns(d, &sim.base_url(), None, "last");
    let (code, text) = crate::common::run_headless(d, VAR, KEY, &["--check"]).await;
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("40 of 60 prompts carry assistant turns the model does not write"),
        "{text}"
    );
    assert!(
        sim.state.requests_since(0).is_empty(),
        "--check sends nothing"
    );
    let (code, text) = crate::common::run_headless(d, VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{text}");
    let out = d.join("out");
    let template = "kimi-k2.5-final-turn";
    let export = |to: &Path, more: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "export".as_ref(),
            out.as_os_str(),
            "--to".as_ref(),
            to.as_os_str(),
            "--format".as_ref(),
            "text".as_ref(),
            "--explode-turns".as_ref(),
            "--chat-template".as_ref(),
            template.as_ref(),
            "--require-reasoning".as_ref(),
            "--json".as_ref(),
        ];
        args.extend(more.iter().map(std::ffi::OsStr::new));
        crate::common::harvest_json(&args)
    };
    // The text after the last assistant header: what SpecForge's train_only_last_turn trains.
    let last_answer = |row: &serde_json::Value| -> String {
        let text = row["text"].as_str().expect("text");
        let at = text
            .rfind("<|im_assistant|>assistant<|im_middle|>")
            .expect("an answer");
        text[at..].to_string()
    };

    let skip = d.join("skip");
    let counts = export(&skip, &[]);
    let c = &counts["datasets"][0];
    assert_eq!(
        (c["success"].as_u64(), c["foreign_skipped"].as_u64()),
        (Some(20), Some(40)),
        "{counts}"
    );
    let rows: Vec<serde_json::Value> = read_jsonl(&skip.join("A.jsonl"));
    assert_eq!(rows.len(), 20);
    for r in &rows {
        assert!(
            !r["text"].as_str().expect("text").contains("DATASET ANSWER"),
            "{r}"
        );
    }
    let skipped: Vec<serde_json::Value> = read_jsonl(&skip.join("A.skipped.ndjson"));
    assert!(
        skipped.iter().all(|s| s["reason"]
            .as_str()
            .is_some_and(|r| r.contains("from the prompt file"))),
        "{skipped:?}"
    );

    let context = d.join("context");
    let counts = export(&context, &["--foreign-turns", "context"]);
    let c = &counts["datasets"][0];
    assert_eq!(
        (c["success"].as_u64(), c["foreign_context"].as_u64()),
        (Some(60), Some(40)),
        "{counts}"
    );
    let rows: Vec<serde_json::Value> = read_jsonl(&context.join("A.jsonl"));
    assert_eq!(
        rows.len(),
        60,
        "one row per prompt: the model wrote one answer in each"
    );
    for r in &rows {
        let last = last_answer(r);
        assert!(!last.contains("DATASET ANSWER"), "{last}");
        assert!(
            last.contains("<think>") && !last.contains("<think></think>"),
            "its reasoning: {last}"
        );
    }
    let with_context = rows
        .iter()
        .filter(|r| {
            r["text"]
                .as_str()
                .is_some_and(|t| t.contains("DATASET ANSWER"))
        })
        .count();
    assert_eq!(with_context, 40, "the dataset's answers stay as context");
    sim.stop().await;
}
