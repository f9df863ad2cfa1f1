//! `harvest init` as a new user meets it after the demo: two prompt files as datasets ship them
//! (Zstandard-compressed Alpaca rows with an `instruction` field, and a Parquet chat dataset as
//! the Hugging Face Hub has them), a config written against the simulator's listing, accepted
//! by `run --check`, and a run that completes every prompt. An existing file is never
//! overwritten.

use std::process::Command;

const KEY: &str = "sk-or-v1-init-test-key-000000000000";

fn harvest(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harvest"));
    c.current_dir(dir).env("HARVEST_INIT_KEY", KEY);
    c
}

async fn output(mut c: Command) -> (i32, String, String) {
    let out = tokio::task::spawn_blocking(move || c.output().expect("runs"))
        .await
        .expect("join");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_writes_a_config_that_checks_and_runs_on_compressed_files_with_other_field_names() {
    let sim = crate::common::paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir(d.join("data")).expect("data");
    let alpaca: String = (0..30)
        .map(|i| {
            format!(
                "{}\n",
                serde_json::json!({"instruction": format!("Task {i}."), "input": "",
                    "output": "not sent"})
            )
        })
        .collect();
    std::fs::write(
        d.join("data/alpaca.jsonl.zst"),
        zstd::stream::encode_all(alpaca.as_bytes(), 3).expect("zst"),
    )
    .expect("zst");
    // A chat dataset as the Hub ships it: Parquet, `messages: list<struct<role, content>>`.
    let chat: Vec<(String, Vec<(String, String)>)> = (0..20)
        .map(|i| {
            (
                format!("c{i}"),
                vec![("user".to_string(), format!("hi {i}"))],
            )
        })
        .collect();
    crate::common::parquet::write_chat(&d.join("data/chat.parquet"), &chat);

    let mut init = harvest(d);
    init.args(["init", "data/alpaca.jsonl.zst", "data/chat.parquet"])
        .args(["--base-url", &sim.base_url(), "--budget", "50"])
        .args(["--api-key-env", "HARVEST_INIT_KEY"]);
    let (code, text, err) = output(init).await;
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read_to_string(d.join("harvest.toml")).expect("written");
    assert_eq!(text, written, "what it wrote is what it showed");
    for want in [
        "model = \"moonshotai/kimi-k2.5\"",
        "budget_usd = 50.0",
        "native_quantization = \"int4\"",
        "chutes/int4",
        "allowed",
        "excluded: policy: fp4 re-quantized",
        "name = \"alpaca\"",
        "prompts = \"data/alpaca.jsonl.zst\"  # Zstandard-compressed JSONL, 30 prompts",
        "prompt_field = [\"instruction\", \"input\"]",
        "name = \"chat\"",
        "prompts = \"data/chat.parquet\"  # Parquet, 20 prompts",
        "# The estimate now",
        "budget $50.00 - $0.00 spent = $50.00 available: fits",
    ] {
        assert!(written.contains(want), "{want:?} in:\n{written}");
    }
    assert!(err.contains("then harvest run --check"), "{err}");

    // Never over a file: the second init changes nothing.
    let mut again = harvest(d);
    again.args([
        "init",
        "data/alpaca.jsonl.zst",
        "--base-url",
        &sim.base_url(),
    ]);
    let (code, _, err) = output(again).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("harvest.toml exists: harvest init never overwrites"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("harvest.toml")).expect("same"),
        written
    );

    let mut check = harvest(d);
    check.args(["run", "--check", "-c", "harvest.toml"]);
    let (code, text, err) = output(check).await;
    assert_eq!(code, 0, "{text}{err}");
    assert!(
        sim.state.requests_since(0).is_empty(),
        "the check sends nothing"
    );

    let mut run = harvest(d);
    run.args(["run", "--headless", "-c", "harvest.toml"]);
    let (code, text, err) = output(run).await;
    assert_eq!(code, 0, "{text}{err}");
    let rows = |name: &str| -> Vec<harvest::store::output::OutputRecord> {
        crate::common::read_jsonl(&d.join(format!("out/{name}.jsonl")))
    };
    let (a, c) = (rows("alpaca"), rows("chat"));
    assert_eq!((a.len(), c.len()), (30, 20));
    assert!(a.iter().any(|r| r.conversations[0].content == "Task 7."));
    assert!(
        c.iter()
            .any(|r| r.id == "c7" && r.conversations[0].content == "hi 7")
    );
    assert_eq!(sim.state.requests_since(0).len(), 50);
    sim.stop().await;
}

/// What `init` once called "a bug" (reliability-probe-4 N11): a config written into another
/// directory names its prompt files so that it loads from there; a file named like one of
/// harvest's own gets another dataset name; a budget past what harvest counts, a FIFO and a
/// missing `--out` directory are refused with exit 2, at once, naming what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_writes_elsewhere_renames_reserved_stems_and_refuses_what_it_cannot_read() {
    let sim = crate::common::paced_sim(0.0, 20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir(d.join("sub")).expect("sub");
    let rows: String = (0..5)
        .map(|i| format!("{{\"id\": \"r{i}\", \"prompt\": \"q {i}\"}}\n"))
        .collect();
    std::fs::write(d.join("spend.jsonl"), &rows).expect("prompts");
    let init = |args: &[&str]| {
        let mut c = harvest(d);
        c.arg("init")
            .args(args)
            .args(["--base-url", &sim.base_url()])
            .args(["--api-key-env", "HARVEST_INIT_KEY"]);
        output(c)
    };
    let (code, _, err) = init(&["spend.jsonl", "-o", "sub/h.toml"]).await;
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read_to_string(d.join("sub/h.toml")).expect("written");
    assert!(written.contains("name = \"spend_prompts\""), "{written}");
    let mut check = harvest(&d.join("sub"));
    check.args(["run", "--check", "-c", "h.toml"]);
    let (code, text, err) = output(check).await;
    assert_eq!(
        code, 0,
        "the config loads from its own directory: {text}{err}"
    );

    let (code, _, err) = init(&["spend.jsonl", "-o", "b.toml", "--budget", "9000001"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--budget must be at most"), "{err}");
    let (code, _, err) = init(&["spend.jsonl", "-o", "nowhere/h.toml"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nowhere is not a directory"), "{err}");
    let fifo = d.join("p.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let (code, _, err) = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        init(&["p.fifo", "-o", "f.toml"]),
    )
    .await
    .expect("a FIFO does not hang init");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("p.fifo is not a regular file"), "{err}");
    for f in ["b.toml", "f.toml"] {
        assert!(!d.join(f).exists(), "{f} is not written");
    }
    sim.stop().await;
}
