//! Prompt files as a user writes them: an id reused with other content stops the run before
//! anything is sent (exit 2, naming both lines) unless `on_duplicate = "skip"`, and duplicates
//! are counted where the operator looks (start notes, `status --json`).

use std::process::Command;

use crate::common::paced_sim;

const KEY: &str = "sk-or-v1-prompt-files-test-key-0000";

fn job(dir: &std::path::Path, base: &str, extra: &str) -> std::path::PathBuf {
    std::fs::write(
        dir.join("p.jsonl"),
        "{\"id\":\"1\",\"prompt\":\"one\"}\n{\"id\":\"2\",\"prompt\":\"two\"}\n\
         {\"id\":2,\"prompt\":\"two\"}\n{\"id\":\"1\",\"prompt\":\"not one\"}\n{\"id\":\"3\",\"prompt\":\"three\"}\n",
    )
    .expect("prompts");
    let cfg = dir.join("harvest.toml");
    std::fs::write(
        &cfg,
        format!(
            "base_url = \"{base}\"\napi_key_env = \"HARVEST_PF_KEY\"\nbudget_usd = 1.0\n{extra}\n\
             [[dataset]]\nname = \"P\"\nprompts = \"p.jsonl\"\n"
        ),
    )
    .expect("config");
    cfg
}

/// `harvest run --headless -c CFG` off the async runtime: its exit code and standard error.
async fn headless(cfg: std::path::PathBuf) -> (Option<i32>, String) {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_harvest"))
            .args(["run", "--headless", "-c"])
            .arg(cfg)
            .env("HARVEST_PF_KEY", KEY)
            .output()
            .expect("runs")
    })
    .await
    .expect("join");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_reused_with_other_content_is_an_error_unless_skipped() {
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = job(dir.path(), &sim.base_url(), "");
    let run = |cfg: std::path::PathBuf| {
        Command::new(env!("CARGO_BIN_EXE_harvest"))
            .args(["run", "--headless", "-c"])
            .arg(cfg)
            .env("HARVEST_PF_KEY", KEY)
            .output()
            .expect("runs")
    };
    let c = cfg.clone();
    let out = tokio::task::spawn_blocking(move || run(c))
        .await
        .expect("join");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("p.jsonl:4: id \"1\" is already the id of line 1"),
        "{err}"
    );
    assert!(sim.state.requests_since(0).is_empty(), "nothing was sent");

    let cfg = job(dir.path(), &sim.base_url(), "on_duplicate = \"skip\"");
    let out = tokio::task::spawn_blocking(move || run(cfg))
        .await
        .expect("join");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "dataset P: 2 duplicate ids skipped (1 with other content; first: lines 3, 4)"
        ),
        "{err}"
    );
    let status = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["status", "--json"])
        .arg(dir.path().join("out"))
        .output()
        .expect("status");
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
    assert_eq!(v["datasets"][0]["duplicates"], 2);
    assert_eq!(v["datasets"][0]["done"], 3, "each id once");
    let report = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["status", "--report"])
        .arg(dir.path().join("out"))
        .output()
        .expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("duplicate-ids×2"), "{text}");
    sim.stop().await;
}

/// A prompt far past every endpoint's context (here 12 MB, ~3 M tokens against the simulator's
/// 262,144) is rejected as `too-long` without being sent; the others are answered
/// (reliability-probe-3 D16: a 100 MB line was uploaded, then refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_far_past_every_context_is_rejected_without_being_sent() {
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = job(dir.path(), &sim.base_url(), "");
    let huge = format!(
        "{{\"id\":\"big\",\"prompt\":\"{}\"}}\n",
        "word ".repeat(12_000_000 / 5)
    );
    std::fs::write(
        dir.path().join("p.jsonl"),
        format!(
            "{{\"id\":\"1\",\"prompt\":\"one\"}}\n{huge}{{\"id\":\"3\",\"prompt\":\"three\"}}\n"
        ),
    )
    .expect("prompts");
    let (code, err) = headless(cfg).await;
    assert_eq!(code, Some(0), "{err}");
    let sent = sim.state.requests_since(0);
    assert_eq!(sent.len(), 2, "only the two that may fit are sent");
    let rejects: Vec<harvest::store::output::RejectRecord> =
        crate::common::read_jsonl(&dir.path().join("out/P.rejects.jsonl"));
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    let r = &rejects[0];
    assert_eq!(
        (r.id.as_str(), r.error_kind.as_str(), r.attempts),
        ("big", "too-long", 0)
    );
    assert!(
        r.error.starts_with("line 2: about 3000004 tokens") && r.error.contains("(262144)"),
        "{}",
        r.error
    );
    let rows: Vec<serde_json::Value> = crate::common::read_jsonl(&dir.path().join("out/P.jsonl"));
    assert_eq!(rows.len(), 2);
    sim.stop().await;
}

/// Prompt files as corpora ship them: Zstandard-compressed JSONL in Alpaca's shape
/// (`instruction`, `input`, `system`, `uid`) and gzip-compressed JSONL with turns under another
/// name, read through the dataset's field names. Every prompt is answered once, under its own
/// id, with the text the mapping makes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_files_with_their_own_field_names_run_as_jsonl_does() {
    use std::io::Write;
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let alpaca: String = (0..40)
        .map(|i| {
            format!(
                "{}\n",
                serde_json::json!({"uid": format!("a{i}"), "instruction": format!("Task {i}."),
                    "input": if i % 2 == 0 { format!("data {i}") } else { String::new() },
                    "system": "Be brief.", "output": "ignored"})
            )
        })
        .collect();
    std::fs::write(
        d.join("alpaca.jsonl.zst"),
        zstd::stream::encode_all(alpaca.as_bytes(), 3).expect("zst"),
    )
    .expect("zst");
    let dialog: String = (0..30)
        .map(|i| {
            format!(
                "{}\n",
                serde_json::json!({"id": i, "dialog": [{"from": "human", "value": format!("hello {i}")}]})
            )
        })
        .collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(dialog.as_bytes()).expect("gz");
    std::fs::write(d.join("dialog.jsonl.gz"), gz.finish().expect("gz")).expect("gz");
    let cfg = d.join("harvest.toml");
    std::fs::write(
        &cfg,
        format!(
            "base_url = \"{}\"\napi_key_env = \"HARVEST_PF_KEY\"\nbudget_usd = 1.0\n\
             [[dataset]]\nname = \"A\"\nprompts = \"alpaca.jsonl.zst\"\n\
             prompt_field = [\"instruction\", \"input\"]\nsystem_field = \"system\"\nid_field = \"uid\"\n\
             [[dataset]]\nname = \"D\"\nprompts = \"dialog.jsonl.gz\"\nmessages_field = \"dialog\"\n",
            sim.base_url()
        ),
    )
    .expect("config");
    let (code, err) = headless(cfg).await;
    assert_eq!(code, Some(0), "{err}");
    let rows = |name: &str| -> Vec<harvest::store::output::OutputRecord> {
        crate::common::read_jsonl(&d.join(format!("out/{name}.jsonl")))
    };
    let a = rows("A");
    assert_eq!(a.len(), 40);
    let ids: std::collections::HashSet<&str> = a.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        (0..40)
            .map(|i| format!("a{i}"))
            .collect::<std::collections::HashSet<_>>()
            .iter()
            .map(String::as_str)
            .collect()
    );
    let a2 = a.iter().find(|r| r.id == "a2").expect("a2");
    let turns: Vec<(&str, &str)> = a2
        .conversations
        .iter()
        .map(|t| (t.role.as_str(), t.content.as_str()))
        .take(2)
        .collect();
    assert_eq!(
        turns,
        [("system", "Be brief."), ("user", "Task 2.\n\ndata 2")]
    );
    let a3 = a.iter().find(|r| r.id == "a3").expect("a3");
    assert_eq!(
        a3.conversations[1].content, "Task 3.",
        "an empty input is left out"
    );
    let dd = rows("D");
    assert_eq!(dd.len(), 30);
    let d7 = dd.iter().find(|r| r.id == "7").expect("7");
    assert_eq!(d7.conversations[0].content, "hello 7");
    assert_eq!(
        sim.state.requests_since(0).len(),
        70,
        "each prompt sent once"
    );
    sim.stop().await;
}

/// Parquet files as the Hub ships them, flat (`question`, `uid`, a null) and chat
/// (`messages: list<struct<role, content>>`), in several row groups: read row for row as
/// JSONL is, with the row number as the line in errors, and run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_files_run_as_jsonl_does() {
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    // 150 rows over three row groups; row 100 has no question (a null): a bad line.
    let flat: Vec<Vec<Option<String>>> = (1..=150)
        .map(|i| {
            vec![
                Some(format!("u{i}")),
                (i != 100).then(|| format!("What is {i}?")),
                Some("ignored".to_string()),
            ]
        })
        .collect();
    crate::common::parquet::write_text(
        &d.join("qa.parquet"),
        &["uid", "question", "answer"],
        &flat,
    );
    let chat: Vec<(String, Vec<(String, String)>)> = (0..70)
        .map(|i| {
            (
                format!("c{i}"),
                vec![
                    ("system".to_string(), "Be brief.".to_string()),
                    ("user".to_string(), format!("hello {i}")),
                    (
                        "assistant".to_string(),
                        "dropped: the model answers".to_string(),
                    ),
                ],
            )
        })
        .collect();
    crate::common::parquet::write_chat(&d.join("chat.parquet"), &chat);
    let cfg = d.join("harvest.toml");
    let write_cfg = |extra: &str| {
        std::fs::write(
            &cfg,
            format!(
                "base_url = \"{}\"\napi_key_env = \"HARVEST_PF_KEY\"\nbudget_usd = 1.0\n{extra}\n\
                 [[dataset]]\nname = \"Q\"\nprompts = \"qa.parquet\"\nprompt_field = \"question\"\nid_field = \"uid\"\n\
                 [[dataset]]\nname = \"C\"\nprompts = \"chat.parquet\"\n",
                sim.base_url()
            ),
        )
        .expect("config");
    };
    write_cfg("");
    let (code, err) = headless(cfg.clone()).await;
    assert_eq!(
        code,
        Some(2),
        "a bad row stops the run before anything is sent: {err}"
    );
    assert!(
        err.contains(
            "qa.parquet:100: needs one of \"question\", \"messages\" or \"conversations\""
        ),
        "{err}"
    );
    assert!(sim.state.requests_since(0).is_empty());
    write_cfg("on_bad_line = \"skip\"");
    let (code, err) = headless(cfg.clone()).await;
    assert_eq!(code, Some(0), "{err}");
    let q: Vec<harvest::store::output::OutputRecord> =
        crate::common::read_jsonl(&d.join("out/Q.jsonl"));
    assert_eq!(q.len(), 149);
    let u7 = q.iter().find(|r| r.id == "u7").expect("u7");
    assert_eq!(u7.conversations[0].content, "What is 7?");
    let c: Vec<harvest::store::output::OutputRecord> =
        crate::common::read_jsonl(&d.join("out/C.jsonl"));
    assert_eq!(c.len(), 70);
    let c5 = c.iter().find(|r| r.id == "c5").expect("c5");
    let turns: Vec<(&str, &str)> = c5
        .conversations
        .iter()
        .map(|t| (t.role.as_str(), t.content.as_str()))
        .take(2)
        .collect();
    assert_eq!(turns, [("system", "Be brief."), ("user", "hello 5")]);
    // Each row sent, and answered once; the hard budget may send a few rows twice to check
    // that closing a stream stops a documented endpoint's bill (`core::cancel_check`).
    let sent = sim.state.requests_since(0);
    let rows: std::collections::HashSet<u64> = sent.iter().map(|r| r.prompt_hash).collect();
    assert_eq!(rows.len(), 149 + 70, "each row sent");
    assert!(sent.len() <= 149 + 70 + 10, "{} requests", sent.len());
    sim.stop().await;
}

/// A misspelt `id_field` (reliability-probe-4 N8): no row has it, so the run is refused before
/// anything is sent, naming the file and the field, instead of giving every prompt a
/// content-hash id that the fixed spelling would buy again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_field_no_row_has_is_refused_before_anything_is_sent() {
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let rows: String = (0..10)
        .map(|i| {
            format!(
                "{}\n",
                serde_json::json!({"uid": format!("u{i}"), "key": i, "prompt": format!("q {i}")})
            )
        })
        .collect();
    std::fs::write(d.join("p.jsonl"), rows).expect("prompts");
    let config = |id_field: &str| {
        format!(
            "base_url = \"{}\"\napi_key_env = \"HARVEST_PF_KEY\"\nbudget_usd = 1.0\n\
             [[dataset]]\nname = \"P\"\nprompts = \"p.jsonl\"\nid_field = \"{id_field}\"\n",
            sim.base_url()
        )
    };
    let cfg = d.join("harvest.toml");
    std::fs::write(&cfg, config("missing")).expect("config");
    let (code, err) = headless(cfg.clone()).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("id_field = \"missing\" names no field") && err.contains("p.jsonl"),
        "{err}"
    );
    assert_eq!(
        sim.state.billed_total(),
        harvest::domain::Usd::ZERO,
        "nothing sent"
    );
    assert!(
        !d.join("out").exists(),
        "a refused start leaves no output directory it made: no log, lock or manifest \
         (reliability-probe-4 N12)"
    );
    std::fs::write(&cfg, config("uid")).expect("config");
    let (code, err) = headless(cfg.clone()).await;
    assert_eq!(code, Some(0), "{err}");
    let done: Vec<harvest::store::output::OutputRecord> =
        crate::common::read_jsonl(&d.join("out/P.jsonl"));
    assert!(done.iter().all(|r| r.id.starts_with('u')), "its own ids");
    assert_eq!(done.len(), 10);
    // The manifest records the mapping: another id field over the same directory would read
    // other ids and buy every prompt again, so it is refused as other parameters are.
    let billed = sim.state.billed_total();
    std::fs::write(&cfg, config("key")).expect("config");
    let (code, err) = headless(cfg).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("the field names of dataset P (id_field \"uid\"; now id_field \"key\")"),
        "{err}"
    );
    assert_eq!(sim.state.billed_total(), billed, "nothing bought again");
    sim.stop().await;
}

/// A prompt file rewritten in place while a run reads it (reliability-probe-4 N5), cut short
/// or regenerated longer with other prompts: the run stops with exit 2 saying the file
/// changed, rejects nothing for it, and does not call the dataset done (before: `DONE`, exit
/// 0, one `input` reject, 10% sent; regenerated: `DONE`, rows of both files under one id set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_file_cut_during_the_run_stops_it_with_exit_2() {
    for regenerate in [false, true] {
        prompt_file_rewritten_during_the_run(regenerate).await;
    }
}

async fn prompt_file_rewritten_during_the_run(regenerate: bool) {
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_path_buf();
    let text: String = (0..20_000)
        .map(|i| format!("{{\"id\": \"p{i}\", \"prompt\": \"question number {i}\"}}\n"))
        .collect();
    let prompts = d.join("big.jsonl");
    std::fs::write(&prompts, &text).expect("prompts");
    let cfg = d.join("harvest.toml");
    std::fs::write(
        &cfg,
        format!(
            "base_url = \"{}\"\napi_key_env = \"HARVEST_PF_KEY\"\nbudget_usd = 50.0\n\
             concurrency = 16\n[request]\nmax_tokens = 16\n\
             [[dataset]]\nname = \"B\"\nprompts = \"big.jsonl\"\n",
            sim.base_url()
        ),
    )
    .expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .env("HARVEST_PF_KEY", "sk-or-v1-pf")
        .args(["run", "--headless", "-c"])
        .arg(&cfg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let out = d.join("out/B.jsonl");
    let lines = || std::fs::read_to_string(&out).map_or(0, |t| t.lines().count());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while lines() < 50 {
        assert!(std::time::Instant::now() < deadline, "run too slow");
        assert!(child.try_wait().expect("wait").is_none(), "ended early");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // A generator's `>`: the same file, a tenth of it, cut mid-line; or another generation of
    // it, longer.
    let new: String = if regenerate {
        (0..21_000)
            .map(|i| format!("{{\"id\": \"p{i}\", \"prompt\": \"another question {i}\"}}\n"))
            .collect()
    } else {
        text[..text.len() / 10 + 7].to_string()
    };
    std::fs::write(&prompts, &new).expect("rewrite");
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("run");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        output.status.code(),
        Some(2),
        "regenerate={regenerate}: {said}"
    );
    assert!(said.contains("changed"), "{said}");
    assert!(
        !d.join("out/B.rejects.jsonl").exists() || {
            let r = std::fs::read_to_string(d.join("out/B.rejects.jsonl")).expect("rejects");
            !r.contains("@line")
        },
        "nothing rejected for the change"
    );
    assert!(lines() < 20_000);
    sim.stop().await;
}

/// `harvest run --headless -c CFG ARGS...` off the async runtime: its exit code and what it
/// said.
async fn headless_with(cfg: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let (cfg, args) = (
        cfg.to_path_buf(),
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_harvest"))
            .args(["run", "--headless", "-c"])
            .arg(cfg)
            .args(args)
            .env("HARVEST_PF_KEY", KEY)
            .output()
            .expect("runs")
    })
    .await
    .expect("join");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), said)
}

/// A prompt file changed between two runs (reliability-probe-5 P10): the manifest records
/// the lines each start counted, and the next start refuses a file whose counted lines are
/// not its first lines any more (exit 2, naming the dataset, the file and what changed,
/// nothing sent), where it took the file and mixed the answers to both under one id set.
/// Lines appended are the next run's, as before; `--force` takes the file as it is; a
/// manifest written before the mark was recorded loads, and gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_file_changed_between_runs_is_refused_unless_only_appended_to() {
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let lines = |text: &str, ids: std::ops::Range<usize>| -> String {
        ids.map(|i| format!("{{\"id\": \"q{i}\", \"prompt\": \"{text} {i}\"}}\n"))
            .collect()
    };
    let prompts = d.join("p.jsonl");
    std::fs::write(&prompts, lines("original", 0..10)).expect("prompts");
    let cfg = d.join("harvest.toml");
    std::fs::write(
        &cfg,
        format!(
            "base_url = \"{}\"\napi_key_env = \"HARVEST_PF_KEY\"\nbudget_usd = 1.0\n\
             [[dataset]]\nname = \"P\"\nprompts = \"p.jsonl\"\n",
            sim.base_url()
        ),
    )
    .expect("config");
    let (code, said) = headless_with(&cfg, &[]).await;
    assert_eq!(code, Some(0), "{said}");
    let rows = || -> Vec<harvest::store::output::OutputRecord> {
        crate::common::read_jsonl(&d.join("out/P.jsonl"))
    };
    assert_eq!(rows().len(), 10);
    let manifest = d.join("out/manifest.json");
    let read_manifest = || -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(&manifest).expect("manifest")).expect("json")
    };
    assert_eq!(read_manifest()["prompt_files"]["P"]["lines"], 10);

    // A manifest from before the mark: loads, and the next start records it.
    let mut old = read_manifest();
    old.as_object_mut().expect("object").remove("prompt_files");
    std::fs::write(&manifest, old.to_string()).expect("manifest");
    let (code, said) = headless_with(&cfg, &[]).await;
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(read_manifest()["prompt_files"]["P"]["lines"], 10);

    // Same ids, new text: refused, by `run --check` too, and nothing is sent.
    let sent = sim.state.requests_since(0).len();
    std::fs::write(&prompts, lines("rewritten", 0..10)).expect("rewrite");
    for args in [&["--check"][..], &[]] {
        let (code, said) = headless_with(&cfg, args).await;
        assert_eq!(code, Some(2), "{args:?}: {said}");
        assert!(
            said.contains("dataset P:")
                && said.contains("p.jsonl changed since an earlier run")
                && said.contains("the 10 lines")
                && said.contains("are not its first lines now")
                && said.contains("--force"),
            "{said}"
        );
    }
    assert_eq!(sim.state.requests_since(0).len(), sent, "nothing sent");
    // Cut short: refused too.
    std::fs::write(&prompts, lines("original", 0..5)).expect("cut");
    let (code, said) = headless_with(&cfg, &[]).await;
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("it is shorter than the 10 lines"), "{said}");

    // The same lines and two appended: taken, the two sent.
    std::fs::write(&prompts, lines("original", 0..12)).expect("append");
    let (code, said) = headless_with(&cfg, &[]).await;
    assert_eq!(code, Some(0), "{said}");
    let done = rows();
    assert_eq!(done.len(), 12);
    assert!(
        done.iter()
            .all(|r| r.conversations[0].content.starts_with("original")),
        "no rewritten prompt answered"
    );
    assert_eq!(read_manifest()["prompt_files"]["P"]["lines"], 12);

    // Rewritten, with --force: taken as it is (its ids are done: nothing to send), and its
    // mark is the file's from then on.
    std::fs::write(&prompts, lines("rewritten", 0..12)).expect("rewrite");
    let (code, said) = headless_with(&cfg, &["--force"]).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("taken as it is now (--force)"), "{said}");
    let (code, said) = headless_with(&cfg, &[]).await;
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(rows().len(), 12);
    sim.stop().await;
}

/// Parquet strings written as plain BYTE_ARRAY (reliability-probe-4 N7): read as their text,
/// not sent base64-encoded; a value that is not UTF-8 is a bad row naming its row and field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_binary_string_columns_are_read_as_text() {
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let mut rows: Vec<Vec<Option<Vec<u8>>>> = (0..10)
        .map(|i| {
            vec![
                Some(format!("b{i}").into_bytes()),
                Some(format!("Explain topic {i} in detail.").into_bytes()),
            ]
        })
        .collect();
    crate::common::parquet::write_binary(&d.join("bin.parquet"), &["id", "prompt"], &rows);
    let cfg = d.join("harvest.toml");
    std::fs::write(
        &cfg,
        format!(
            "base_url = \"{}\"\napi_key_env = \"HARVEST_PF_KEY\"\nbudget_usd = 1.0\n\
             [[dataset]]\nname = \"Y\"\nprompts = \"bin.parquet\"\n",
            sim.base_url()
        ),
    )
    .expect("config");
    let (code, err) = headless(cfg.clone()).await;
    assert_eq!(code, Some(0), "{err}");
    let done: Vec<harvest::store::output::OutputRecord> =
        crate::common::read_jsonl(&d.join("out/Y.jsonl"));
    assert_eq!(done.len(), 10);
    for r in &done {
        let user = &r.conversations[0].content;
        assert!(user.starts_with("Explain topic "), "{}: {user}", r.id);
        assert!(r.id.starts_with('b'), "{}", r.id);
    }
    // A value that is not UTF-8: the row is bad, named, and nothing is sent.
    rows.push(vec![Some(b"b10".to_vec()), Some(vec![0xff, 0xfe, 0x41])]);
    crate::common::parquet::write_binary(&d.join("bin2.parquet"), &["id", "prompt"], &rows);
    std::fs::write(
        &cfg,
        format!(
            "base_url = \"{}\"\napi_key_env = \"HARVEST_PF_KEY\"\nbudget_usd = 1.0\n\
             output_dir = \"out2\"\n[[dataset]]\nname = \"Y\"\nprompts = \"bin2.parquet\"\n",
            sim.base_url()
        ),
    )
    .expect("config");
    let (code, err) = headless(cfg).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("bin2.parquet:11") && err.contains("\"prompt\""),
        "{err}"
    );
    sim.stop().await;
}

/// A Parquet row too long for any prompt (reliability-probe-4 N4: a 33 KB file whose one
/// string is 1 GB passed `--check` at 5.26 GB): the page headers say so before a page is
/// decompressed, and `init`, `run --check` and `run` refuse the file naming it, the row group
/// and the column, with nothing sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_value_longer_than_a_prompt_is_refused_before_it_is_read() {
    let sim = paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    // 64 rows a row group: the 65th, alone in the second, is 20 MiB of one letter. (Beside
    // other rows in its page it would be read and refused as a line longer than 16 MiB.)
    let mut rows: Vec<Vec<Option<String>>> = (0..65)
        .map(|i| vec![Some(format!("r{i}")), Some(format!("Explain topic {i}."))])
        .collect();
    rows[64][1] = Some("z".repeat(20 << 20));
    crate::common::parquet::write_text(&d.join("big.parquet"), &["id", "prompt"], &rows);
    assert!(
        std::fs::metadata(d.join("big.parquet"))
            .expect("file")
            .len()
            < 3 << 20,
        "the file is small; its value is not"
    );
    let cfg = d.join("harvest.toml");
    std::fs::write(
        &cfg,
        format!(
            "base_url = \"{}\"\napi_key_env = \"HARVEST_PF_KEY\"\nbudget_usd = 1.0\n\
             [[dataset]]\nname = \"Y\"\nprompts = \"big.parquet\"\n",
            sim.base_url()
        ),
    )
    .expect("config");
    let want = "row group 1 (rows from 65), column \"prompt\": a page of";
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["run", "--check", "-c"])
        .arg(&cfg)
        .env("HARVEST_PF_KEY", "sk-or-v1-pf")
        .output()
        .expect("check");
    let err = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(2), "{err}");
    assert!(err.contains("big.parquet") && err.contains(want), "{err}");
    assert!(err.contains("one is longer than 16 MiB"), "{err}");
    let (code, err) = headless(cfg).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(want), "{err}");
    let init = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
        .current_dir(d)
        .args(["init", "big.parquet", "-o", "init.toml", "--base-url"])
        .arg(sim.base_url())
        .output()
        .expect("init");
    let err = String::from_utf8_lossy(&init.stderr);
    assert_ne!(init.status.code(), Some(0), "{err}");
    assert!(err.contains(want), "{err}");
    assert!(sim.state.requests_since(0).is_empty(), "nothing sent");
    sim.stop().await;
}
