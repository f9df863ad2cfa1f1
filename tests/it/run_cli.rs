//! `harvest run` and `harvest status` as a user runs them: bad input gets a clear error and
//! exit code 2 before anything is sent; a prompt too long for the model is a recorded reject;
//! the API key never lands in any file harvest writes (outputs, ledger, state, log).

use std::path::{Path, PathBuf};
use std::process::Command;

use harvest::sim::{self, ControlRequest, SimConfig};

const KEY: &str = "sk-or-v1-run-cli-SECRET-77aa55";

fn harvest() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harvest"));
    c.env("HARVEST_RUN_CLI_KEY", KEY);
    c
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `harvest run -c CFG` off the async runtime (the simulator serves on it meanwhile).
async fn run_config(cfg: &Path) -> (i32, String, String) {
    let cfg = cfg.to_path_buf();
    tokio::task::spawn_blocking(move || run(harvest().args(["run", "-c"]).arg(&cfg)))
        .await
        .expect("join")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

fn config(base: &str, extra: &str) -> String {
    format!(
        "base_url = \"{base}\"\napi_key_env = \"HARVEST_RUN_CLI_KEY\"\nbudget_usd = 5.0\nconcurrency = 16\n{extra}"
    )
}

#[test]
fn bad_input_is_refused_with_file_line_and_exit_2() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    write(d, "ok.jsonl", "{\"prompt\": \"hi\"}\n");
    let base = "http://127.0.0.1:9/api/v1";
    let cases: Vec<(String, &str)> = vec![
        (
            config(
                base,
                "[request]\nmax_tokens = 10\nbudget = 3\n[[dataset]]\nname = \"A\"\nprompts = \"ok.jsonl\"\n",
            ),
            "harvest.toml:7: unknown key `budget` in [request]",
        ),
        (
            config(
                base,
                "[[dataset]]\nname = \"A\"\nprompts = \"missing.jsonl\"\n",
            ),
            "dataset[0].prompts: prompt file of dataset A not found",
        ),
        (config(base, ""), "at least one [[dataset]]"),
        (
            config(
                base,
                "budget_usd = -1\n[[dataset]]\nname = \"A\"\nprompts = \"ok.jsonl\"\n",
            ),
            "duplicate key",
        ),
    ];
    for (text, want) in cases {
        let cfg = write(d, "harvest.toml", &text);
        let (code, _, err) = run(harvest().args(["run", "-c"]).arg(&cfg));
        assert_eq!(code, 2, "{want}: {err}");
        assert!(err.contains(want), "expected {want:?} in: {err}");
    }
    let (code, _, err) = run(harvest().args(["run", "-c"]).arg(d.join("nope.toml")));
    assert_eq!(code, 2);
    assert!(err.contains("cannot read"), "{err}");
    let (code, _, err) = run(harvest().args(["status"]).arg(d.join("nothing-here")));
    assert_eq!(code, 2);
    assert!(err.contains("no run state"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_prompt_lines_empty_datasets_and_long_prompts() {
    let s = sim::start(SimConfig::fast_no_faults(), 0)
        .await
        .expect("sim");
    s.state
        .control(&ControlRequest {
            output_tokens_mean: Some(50.0),
            ..Default::default()
        })
        .expect("control");
    let base = s.base_url();
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_path_buf();
    write(
        &d,
        "bad.jsonl",
        concat!(
            "{\"prompt\": \"fine\"}\n{\"prompt\": \"fine too\"}\n{\"promt\": \"typo\"}\n",
            // Roles export refuses (reliability-probe-5 P15): rejected unsent, not paid for.
            "{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}, ",
            "{\"role\": \"tool\", \"content\": \"21\"}, {\"role\": \"user\", \"content\": \"so?\"}]}\n",
            "{\"messages\": [{\"role\": \"developer\", \"content\": \"terse\"}, ",
            "{\"role\": \"user\", \"content\": \"hi\"}]}\n",
        ),
    );
    write(&d, "empty.jsonl", "\n\n");
    // ~300k tokens: longer than Kimi's 262k context.
    let long = "word ".repeat(240_000);
    write(
        &d,
        "long.jsonl",
        &format!(
            "{{\"id\": \"short\", \"prompt\": \"hello\"}}\n{{\"id\": \"huge\", \"prompt\": \"{long}\"}}\n"
        ),
    );

    let cfg = write(
        &d,
        "harvest.toml",
        &config(
            &base,
            "[[dataset]]\nname = \"A\"\nprompts = \"bad.jsonl\"\n",
        ),
    );
    let (code, _, err) = run_config(&cfg).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.jsonl:3: needs one of"), "{err}");
    assert!(
        err.contains("on_bad_line"),
        "the error says how to go on: {err}"
    );

    // Skip mode: the bad line is a recorded reject, the rest runs.
    write(
        &d,
        "harvest.toml",
        &config(
            &base,
            "on_bad_line = \"skip\"\n[[dataset]]\nname = \"A\"\nprompts = \"bad.jsonl\"\n",
        ),
    );
    // `run --check` says the bad lines apart: they are input rejects, not prompts to send
    // (reliability-probe-5 P17: the 3 bad lines were counted "to send").
    let check = || {
        let cfg = cfg.clone();
        tokio::task::spawn_blocking(move || run(harvest().args(["run", "--check", "-c"]).arg(&cfg)))
    };
    let (code, out, err) = check().await.expect("join");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(
            "dataset A: 2 prompts, 2 to send (0 finished or rejected by earlier runs); \
             3 bad lines rejected as input, never sent"
        ),
        "{out}"
    );
    let (code, out, err) = run_config(&cfg).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = check().await.expect("join");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("dataset A: 2 prompts, 0 to send (2 finished")
            && out.contains("3 of them by earlier runs"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("out/A.jsonl"))
            .expect("out")
            .lines()
            .count(),
        2
    );
    let rej = std::fs::read_to_string(d.join("out/A.rejects.jsonl")).expect("rejects");
    assert!(
        rej.contains("\"line\":3") && rej.contains("needs one of"),
        "{rej}"
    );
    let rejects: Vec<harvest::store::output::RejectRecord> =
        crate::common::read_jsonl(&d.join("out/A.rejects.jsonl"));
    for (line, role) in [(4, "tool"), (5, "developer")] {
        let r = (rejects.iter())
            .find(|r| r.line == Some(line))
            .unwrap_or_else(|| panic!("line {line} rejected: {rej}"));
        assert!(
            r.error.contains(&format!("role \"{role}\" is not one of")),
            "{r:?}"
        );
        assert_eq!((r.error_kind.as_str(), r.attempts), ("input", 0), "{r:?}");
    }

    write(
        &d,
        "harvest.toml",
        &config(
            &base,
            "output_dir = \"out2\"\n[[dataset]]\nname = \"E\"\nprompts = \"empty.jsonl\"\n",
        ),
    );
    let (code, _, err) = run_config(&cfg).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("dataset E") && err.contains("holds no prompts"),
        "{err}"
    );

    write(
        &d,
        "harvest.toml",
        &config(
            &base,
            "output_dir = \"out3\"\n[[dataset]]\nname = \"L\"\nprompts = \"long.jsonl\"\n",
        ),
    );
    let (code, out, err) = run_config(&cfg).await;
    assert_eq!(code, 0, "{out}{err}");
    let rej = std::fs::read_to_string(d.join("out3/L.rejects.jsonl")).expect("rejects");
    assert!(
        rej.contains("\"id\":\"huge\"") && rej.contains("maximum context length"),
        "{rej}"
    );
    assert!(rej.contains("\"attempts\":1"), "not retried: {rej}");
    assert!(
        std::fs::read_to_string(d.join("out3/L.jsonl"))
            .expect("out")
            .contains("\"id\":\"short\"")
    );

    // `harvest status` reads the state of that run.
    let (code, out, _) = run(harvest().args(["status"]).arg(d.join("out3")));
    assert_eq!(code, 0);
    assert!(out.contains("1 done, 1 rejected, 2 total"), "{out}");
    let (code, out, _) = run(harvest().args(["status", "--json"]).arg(d.join("out3")));
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["state"], "done");

    // The key is in no file harvest wrote, log included.
    let mut checked = 0;
    for sub in ["out", "out2", "out3"] {
        let Ok(rd) = std::fs::read_dir(d.join(sub)) else {
            continue;
        };
        for f in rd.flatten() {
            let bytes = std::fs::read(f.path()).expect("read");
            checked += 1;
            assert!(
                !String::from_utf8_lossy(&bytes).contains("SECRET"),
                "key found in {}",
                f.path().display()
            );
        }
    }
    assert!(
        checked >= 8,
        "outputs, rejects, ledger, state, manifest and log were checked"
    );
    assert!(d.join("out3/harvest.log").exists());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_allows_no_endpoint_is_refused_up_front() {
    let s = sim::start(SimConfig::fast_no_faults(), 0)
        .await
        .expect("sim");
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "p.jsonl", "{\"prompt\": \"hi\"}\n");
    // Claim the model ships in fp8: no endpoint of the table serves fp8.
    let cfg = write(
        dir.path(),
        "harvest.toml",
        &config(
            &s.base_url(),
            "[policy]\nnative_quantization = \"fp8\"\n[[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n",
        ),
    );
    let (code, _, err) = run_config(&cfg).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("allows none of the 11 endpoints"), "{err}");
    assert!(
        err.contains("policy.mode"),
        "the error says what to change: {err}"
    );
    assert!(s.state.requests_since(0).is_empty(), "nothing was sent");
    s.stop().await;
}

#[test]
fn more_datasets_than_the_open_files_limit_allows_are_refused_before_a_file_is_written() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let mut datasets = String::new();
    for i in 0..200 {
        write(d, &format!("p{i}.jsonl"), "{\"prompt\": \"hi\"}\n");
        datasets.push_str(&format!(
            "[[dataset]]\nname = \"d{i}\"\nprompts = \"p{i}.jsonl\"\n"
        ));
    }
    let cfg = write(
        d,
        "harvest.toml",
        &config(
            "http://127.0.0.1:9/api/v1",
            &format!("output_dir = \"out\"\n{datasets}"),
        ),
    );
    // 200 datasets need 728 files; a shell's `ulimit -n` sets the hard limit too, so harvest
    // cannot raise it.
    let (code, _, err) = run(Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 512 && exec \"$0\" run --headless -c \"$1\"")
        .arg(env!("CARGO_BIN_EXE_harvest"))
        .arg(&cfg)
        .env("HARVEST_RUN_CLI_KEY", KEY));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("200 datasets need about 728 open files"),
        "{err}"
    );
    assert!(err.contains("limit of 512"), "{err}");
    // Nothing written, as the message says: not even the log the run opened before the
    // engine started (reliability-probe-4 N12).
    let made: Vec<String> = std::fs::read_dir(d.join("out"))
        .map(|r| {
            r.map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(made.is_empty(), "nothing written: {made:?}");
}

/// `harvest run --check` against the simulator: what a run's start checks, with its exit codes,
/// and nothing sent to the chat API or written: a good job passes (exit 0) and says what the
/// run would do; a directory another run holds and a damaged one are refused (exit 2) and left
/// as they were; a key the API refuses is a runtime failure (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_check_sends_and_writes_nothing_and_exits_as_a_run_would() {
    let mut cfg = SimConfig::fast_no_faults();
    cfg.api_key = Some(KEY.to_string());
    let s = sim::start(cfg, 0).await.expect("sim");
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let prompts: String = (0..5)
        .map(|i| format!("{{\"prompt\": \"question {i}\"}}\n"))
        .collect();
    write(d, "a.jsonl", &prompts);
    let cfg = write(
        d,
        "harvest.toml",
        &config(
            &s.base_url(),
            "output_dir = \"out\"\n[[dataset]]\nname = \"A\"\nprompts = \"a.jsonl\"\n",
        ),
    );
    let check = |key: &'static str| {
        let cfg = cfg.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                run(harvest()
                    .env("HARVEST_RUN_CLI_KEY", key)
                    .args(["run", "--check", "-c"])
                    .arg(&cfg))
            })
            .await
            .expect("join")
        }
    };
    // A fresh job: passes, says what the run would do, leaves no directory behind.
    let (code, out, err) = check(KEY).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("dataset A: 5 prompts, 5 to send"), "{out}");
    assert!(out.contains("endpoints allowed by the policy"), "{out}");
    assert!(out.contains("check passed"), "{out}");
    assert!(!d.join("out").exists(), "nothing written");
    // The simulator logs chat requests only.
    let chats = |s: &sim::SimHandle| s.state.requests_since(0).len();
    assert_eq!(chats(&s), 0, "nothing sent to the chat API");
    // A key the API refuses: exit 1, as the run would stop on it.
    let (code, out, err) = check("sk-or-v1-not-the-right-key-0000").await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("the API refused the key"), "{err}");
    assert!(
        !err.contains("not-the-right"),
        "the key is never printed: {err}"
    );
    // A run's directory: the check passes beside its outputs, and changes nothing in them.
    let (code, _, err) = run_config(&cfg).await;
    assert_eq!(code, 0, "{err}");
    let out_dir = d.join("out");
    let before = |p: &Path| std::fs::read(p).expect("read");
    let outputs = before(&out_dir.join("A.jsonl"));
    let (code, out, err) = check(KEY).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("5 prompts, 0 to send (5 finished"), "{out}");
    // Damaged: refused as a run would be, and left as it was.
    let mut damaged = outputs.clone();
    damaged.extend_from_slice(b"{not json}\n{\"id\":\"x\"}\n");
    std::fs::write(out_dir.join("A.jsonl"), &damaged).expect("damage");
    let (code, _, err) = check(KEY).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--repair"), "{err}");
    assert_eq!(before(&out_dir.join("A.jsonl")), damaged, "left as it was");
    std::fs::write(out_dir.join("A.jsonl"), &outputs).expect("restore");
    // Held by another process: refused, naming it.
    let held = harvest::store::lock::lock_dir(&out_dir).expect("lock");
    let (code, _, err) = check(KEY).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is in use by another harvest process"),
        "{err}"
    );
    drop(held);
    assert_eq!(chats(&s), 5, "only the run's own five requests");
    s.stop().await;
}

/// A run's files are the operator's alone (0600, the directory it makes 0700) unless the
/// config lets the group read them (`group_readable = true`: 0640 and 0750).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_readable_lets_the_group_read_the_run_files_and_no_one_else() {
    use std::os::unix::fs::PermissionsExt;
    let s = sim::start(SimConfig::fast_no_faults(), 0)
        .await
        .expect("sim");
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_path_buf();
    write(
        &d,
        "p.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n",
    );
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    for (group, out, file_mode, dir_mode) in [
        (false, "alone", 0o600, 0o700),
        (true, "shared", 0o640, 0o750),
    ] {
        let cfg = write(
            &d,
            &format!("{out}.toml"),
            &config(
                &s.base_url(),
                &format!(
                    "group_readable = {group}\noutput_dir = \"{out}/run\"\n\
                     [[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n"
                ),
            ),
        );
        let (code, _, err) = tokio::task::spawn_blocking(move || {
            run(harvest().args(["run", "--headless", "-c"]).arg(&cfg))
        })
        .await
        .expect("join");
        assert_eq!(code, 0, "{err}");
        let run_dir = d.join(out).join("run");
        assert_eq!(mode(&d.join(out)), dir_mode, "{out}: a parent it made");
        assert_eq!(mode(&run_dir), dir_mode, "{out}: the output directory");
        let files: Vec<_> = std::fs::read_dir(&run_dir)
            .expect("out")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.is_file())
            .collect();
        assert!(files.len() >= 6, "{files:?}");
        for f in files {
            assert_eq!(mode(&f), file_mode, "{}", f.display());
        }
    }
    s.stop().await;
}

/// `group_readable = true` holds under the umask clusters set (077), and through a
/// `--retry-truncated` rewrite, whose temporary file a planted symlink cannot redirect
/// (reliability-probe-4 N3, N10): every file 0640, the directory 0750, the link's target
/// untouched, the dataset's file a regular file of this run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_readable_holds_under_umask_077_and_through_a_rewrite_past_a_planted_link() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let s = sim::start(SimConfig::fast_no_faults(), 0)
        .await
        .expect("sim");
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_path_buf();
    let prompts: String = (0..20)
        .map(|i| format!("{{\"id\": \"p{i}\", \"prompt\": \"question {i}\"}}\n"))
        .collect();
    write(&d, "p.jsonl", &prompts);
    let cfg_text = |max_tokens: u32| {
        config(
            &s.base_url(),
            &format!(
                "group_readable = true\noutput_dir = \"out\"\n[request]\nmax_tokens = {max_tokens}\n\
                 [[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n"
            ),
        )
    };
    let cfg = write(&d, "h.toml", &cfg_text(8));
    let under_umask_077 = |extra: &'static [&'static str]| {
        let cfg = cfg.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = harvest();
            c.args(["run", "--headless", "-c"]).arg(&cfg).args(extra);
            // SAFETY: umask is async-signal-safe, and nothing else runs in the child yet.
            unsafe {
                c.pre_exec(|| {
                    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
                    Ok(())
                });
            }
            run(&mut c)
        })
    };
    let (code, _, err) = under_umask_077(&[]).await.expect("join");
    assert_eq!(code, 0, "{err}");
    let out = d.join("out");
    let victim = write(&d, "victim.txt", "the operator's own file\n");
    std::os::unix::fs::symlink(&victim, out.join(".A.jsonl.supersede.tmp")).expect("plant");
    write(&d, "h.toml", &cfg_text(4096));
    let (code, text, err) = under_umask_077(&["--retry-truncated"]).await.expect("join");
    assert_eq!(code, 0, "{text}{err}");
    assert!(
        out.join("A.superseded.jsonl").exists(),
        "a rewrite happened: {text}{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "the operator's own file\n",
        "nothing written through the planted link"
    );
    let a = std::fs::symlink_metadata(out.join("A.jsonl")).expect("A");
    assert!(a.file_type().is_file(), "A.jsonl is a regular file");
    let mode = |m: std::fs::Metadata| m.permissions().mode() & 0o777;
    assert_eq!(mode(std::fs::metadata(&out).expect("out")), 0o750);
    for e in std::fs::read_dir(&out).expect("out") {
        let p = e.expect("entry").path();
        let m = std::fs::symlink_metadata(&p).expect("meta");
        if m.file_type().is_file() {
            assert_eq!(mode(m), 0o640, "{}", p.display());
        }
    }
    s.stop().await;
}
