//! The `harvest` binary as a user runs it: `providers` (table and JSON) against the simulator,
//! `sim` and `demo`, and bad input with its exit code 2.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use harvest::sim::{self, SimConfig};

fn harvest() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harvest"));
    c.env_remove("OPENROUTER_API_KEY")
        .env_remove("HARVEST_BASE_URL");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_table_and_json_against_the_simulator() {
    let s = sim::start(SimConfig::fast_no_faults(), 0)
        .await
        .expect("sim");
    let base = s.base_url();
    let b = base.clone();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        run(harvest().args(["providers", "moonshotai/kimi-k2.5", "--base-url", &b]))
    })
    .await
    .expect("join");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(
            "moonshotai/kimi-k2.5: 11 endpoints, 5 allowed by policy faithful (native int4)"
        ),
        "{out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].starts_with("provider") && lines[1].contains("$/M out"));
    assert!(lines[2].starts_with("Chutes") && lines[2].contains("chutes/int4"));
    assert!(
        lines[12].starts_with("Venice"),
        "sorted by output price: {out}"
    );
    let baseten = lines
        .iter()
        .find(|l| l.starts_with("BaseTen"))
        .expect("baseten");
    assert!(baseten.contains("fp4 !") && baseten.contains("-5") && baseten.contains("29.8%"));
    assert!(
        baseten.ends_with("no: policy: fp4 re-quantized"),
        "{baseten}"
    );

    let b = base.clone();
    let (code, out, _) = tokio::task::spawn_blocking(move || {
        run(harvest().args([
            "providers",
            "moonshotai/kimi-k2.5",
            "--base-url",
            &b,
            "--json",
            "--mode",
            "any",
            "--exclude",
            "fireworks",
        ]))
    })
    .await
    .expect("join");
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["model"], "moonshotai/kimi-k2.5");
    assert_eq!(v["native_quantization"], "int4");
    let eps = v["endpoints"].as_array().expect("list");
    assert_eq!(eps.len(), 11);
    let by_tag = |t: &str| eps.iter().find(|e| e["tag"] == t).expect("tag").clone();
    assert_eq!(by_tag("fireworks")["excluded"]["kind"], "operator");
    assert_eq!(by_tag("baseten/fp4")["excluded"]["kind"], "down");
    assert_eq!(by_tag("deepinfra")["allowed"], true);
    assert_eq!(by_tag("venice")["price_out_per_m"], 3.75);
    assert_eq!(by_tag("venice")["pricing"]["completion"], "0.00000375");
    // 11 endpoints: fireworks excluded by the operator, baseten down.
    assert_eq!(v["allowed"], 9);

    // A model the server does not know is bad input.
    let b = base.clone();
    let (code, _, err) = tokio::task::spawn_blocking(move || {
        run(harvest().args(["providers", "moonshotai/kimi-k9", "--base-url", &b]))
    })
    .await
    .expect("join");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not found"), "{err}");
    s.stop().await;
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let (code, _, err) = run(harvest().args([
        "providers",
        "kimi",
        "--base-url",
        "http://127.0.0.1:9/api/v1",
    ]));
    assert_eq!(code, 2);
    assert!(err.contains("author/slug"), "{err}");
    let (code, _, err) = run(harvest().args(["providers", "a/b", "--base-url", "ftp://x"]));
    assert_eq!(code, 2);
    assert!(err.contains("http://"), "{err}");
    let (code, _, err) = run(harvest().args(["sim", "--faults", "bogus=1"]));
    assert_eq!(code, 2);
    assert!(err.contains("unknown fault \"bogus\""), "{err}");
    let dir = tempfile::tempdir().expect("tmp");
    let table = dir.path().join("table.json");
    std::fs::write(
        &table,
        "{\n  \"model\": {\"id\": \"m/x\"},\n  \"endpoints\": [\n    {\"tag\": \"a\",}\n  ]\n}\n",
    )
    .expect("write");
    let (code, _, err) = run(harvest().args(["sim", "--providers"]).arg(&table));
    assert_eq!(code, 2);
    assert!(err.contains("table.json, line 4"), "{err}");
    // Unknown flags: clap's usage error, also 2.
    let (code, _, _) = run(harvest().args(["providers", "a/b", "--frobnicate"]));
    assert_eq!(code, 2);
}

#[test]
fn unreachable_server_is_a_runtime_failure() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let (code, _, err) = run(harvest().args([
        "providers",
        "moonshotai/kimi-k2.5",
        "--base-url",
        &format!("http://{addr}/api/v1"),
    ]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("listing the endpoints"), "{err}");
}

#[test]
fn sim_serves_until_stopped() {
    let mut child = harvest()
        .args(["sim", "--port", "0", "--speed-scale", "0", "--seed", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).expect("line");
    let base = first
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .expect("address printed")
        .to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let models: serde_json::Value = rt.block_on(async {
        reqwest::get(format!("{base}/models"))
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    });
    assert_eq!(models["data"][0]["id"], "moonshotai/kimi-k2.5");
    child.kill().expect("kill");
    let _ = child.wait();
}

#[test]
fn demo_runs_with_no_key_and_no_network() {
    let dir = tempfile::tempdir().expect("tmp");
    let out_dir = dir.path().join("demo");
    let mut child = harvest()
        .args([
            "demo",
            "--headless",
            "--speed-scale",
            "0.02",
            "--budget",
            "0.3",
            "--progress-every",
            "1",
            "--out",
        ])
        .arg(&out_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "demo took over 120 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The provider table with the policy's verdicts, progress lines, then the summary.
    assert!(
        stdout.contains("11 endpoints, 5 allowed by policy faithful"),
        "{stdout}"
    );
    assert!(stdout.contains("RUNNING"), "{stdout}");
    assert!(
        stdout.contains("STOPPED") && stdout.contains("dollar budget reached"),
        "{stdout}"
    );
    for d in ["B3", "B4", "B5"] {
        let text = std::fs::read_to_string(out_dir.join(format!("{d}.jsonl"))).unwrap_or_default();
        assert!(text.lines().count() > 5, "{d} has outputs");
    }
    // The demo's output, exported for SpecForge, passes its validator, and every answer and
    // reject is accounted for.
    let to = dir.path().join("train");
    let counts = crate::common::harvest_json(&[
        "export".as_ref(),
        out_dir.as_os_str(),
        "--to".as_ref(),
        to.as_os_str(),
        "--require-reasoning".as_ref(),
        "--json".as_ref(),
    ]);
    let lines =
        |p: std::path::PathBuf| std::fs::read_to_string(p).map_or(0, |t| t.lines().count() as u64);
    for c in counts["datasets"].as_array().expect("per dataset") {
        let d = c["dataset"].as_str().expect("name");
        let n = |k: &str| c[k].as_u64().expect(k);
        let out = &out_dir;
        assert_eq!(
            n("success") + n("error") + n("skipped"),
            lines(out.join(format!("{d}.jsonl"))) + lines(out.join(format!("{d}.rejects.jsonl"))),
            "{c}"
        );
        assert!(n("success") > 0, "{c}");
        crate::common::specforge_validates(&to.join(format!("{d}.jsonl")));
    }
    let _ = std::io::stdout().flush();
}

/// `harvest completions SHELL` prints a script that knows the subcommands and their flags.
#[test]
fn completion_scripts_know_the_commands() {
    for (shell, marker) in [
        ("bash", "_harvest()"),
        ("zsh", "#compdef harvest"),
        ("fish", "complete -c harvest"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
            .args(["completions", shell])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        for word in ["export", "chat-template", "retry-truncated", "replay"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["completions", "tcsh"])
        .output()
        .expect("runs");
    assert_eq!(bad.status.code(), Some(2));
}

/// `harvest man` prints harvest(1); `--dir` writes one page per command, each naming itself
/// `harvest <command>` and listing its flags, for `man harvest-run`.
#[test]
fn man_pages_cover_every_command() {
    let harvest = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
            .args(args)
            .output()
            .expect("runs")
    };
    let out = harvest(&["man"]);
    assert!(out.status.success());
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains(".TH harvest 1"), "{page}");
    for command in ["run", "export", "attach", "completions"] {
        assert!(page.contains(command), "harvest(1) lacks {command}");
    }
    let dir = tempfile::tempdir().expect("tmp");
    let out = harvest(&["man", "--dir", dir.path().to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = std::fs::read_to_string(dir.path().join("harvest-run.1")).expect("harvest-run.1");
    assert!(run.contains(".TH HARVEST-RUN 1"), "{run}");
    assert!(run.contains(r"\fBharvest run\fR"), "{run}");
    for flag in [r"\-\-check", r"\-\-retry\-truncated", r"\-\-detach"] {
        assert!(run.contains(flag), "harvest-run.1 lacks {flag}");
    }
    let pages = std::fs::read_dir(dir.path()).expect("dir").count();
    assert!(pages >= 12, "{pages} pages");
}

/// Every command that prints a result, with what it needs: a finished run's directory and
/// config in `d` (its key in `HARVEST_PIPE_KEY`), the simulator at `base`; `export` writes
/// into `d/export-<tag>`.
fn printing_commands(d: &std::path::Path, base: &str, tag: &str) -> Vec<Vec<String>> {
    let out = d.join("out").display().to_string();
    let cfg = d.join("harvest.toml").display().to_string();
    let to = d.join(format!("export-{tag}")).display().to_string();
    let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    vec![
        argv(&["status", &out]),
        argv(&["status", "--json", &out]),
        argv(&["status", "--report", &out]),
        argv(&[
            "providers",
            "moonshotai/kimi-k2.5",
            "--json",
            "--base-url",
            base,
        ]),
        argv(&["providers", "moonshotai/kimi-k2.5", "--base-url", base]),
        argv(&["estimate", "--json", "-c", &cfg]),
        argv(&["estimate", "-c", &cfg]),
        argv(&["template", "print", "kimi-k2.5-final-turn"]),
        argv(&["template", "list"]),
        argv(&["completions", "bash"]),
        argv(&["man"]),
        argv(&["export", &out, "--to", &to, "--json"]),
    ]
}

/// A finished run of 5 prompts against a fresh simulator in `d`, for [`printing_commands`].
async fn finished_run(d: &std::path::Path) -> sim::SimHandle {
    let s = sim::start(SimConfig::fast_no_faults(), 0)
        .await
        .expect("sim");
    crate::common::write_job_with_ids(d, &s.base_url(), "HARVEST_PIPE_KEY", 5, "");
    let (code, text) =
        crate::common::run_headless(d, "HARVEST_PIPE_KEY", "sk-or-v1-pipe", &[]).await;
    assert_eq!(code, 0, "{text}");
    s
}

/// Runs `args` with standard output on `stdout`; the exit code and stderr.
async fn printing_into(args: Vec<String>, stdout: Stdio) -> (i32, String) {
    tokio::task::spawn_blocking(move || {
        let out = harvest()
            .env("HARVEST_PIPE_KEY", "sk-or-v1-pipe")
            .args(&args)
            .stdout(stdout)
            .stderr(Stdio::piped())
            .output()
            .expect("runs");
        (
            out.status.code().unwrap_or(-1),
            format!("{args:?}: {}", String::from_utf8_lossy(&out.stderr)),
        )
    })
    .await
    .expect("join")
}

/// A reader that closes the pipe before harvest writes (`| head -c 1` at its worst): every
/// command that prints a result ends as it would have, exit 0, with no panic and no backtrace.
/// The read end is closed before the process starts, so every write meets the broken pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_printing_quietly() {
    let dir = tempfile::tempdir().expect("tmp");
    let s = finished_run(dir.path()).await;
    for args in printing_commands(dir.path(), &s.base_url(), "pipe") {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let (code, err) = printing_into(args, writer.into()).await;
        assert_eq!(code, 0, "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!err.contains("cannot write"), "{err}");
    }
    s.stop().await;
}

/// Standard output that cannot be written for another reason than a closed pipe (a full disk:
/// `/dev/full` fails every write with ENOSPC) fails every command that prints, exit 1, saying
/// so (reliability-probe-5 P12: `template print X > /dev/full` exited 0, so a script went on
/// with an empty template file). Before, each of these exited 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_every_printing_command() {
    let dir = tempfile::tempdir().expect("tmp");
    let s = finished_run(dir.path()).await;
    for args in printing_commands(dir.path(), &s.base_url(), "full") {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full (Linux)");
        let (code, err) = printing_into(args, full.into()).await;
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("harvest: cannot write standard output: No space left on device"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    s.stop().await;
}

/// `harvest template print NAME` writes the built-in template byte for byte as the repository
/// holds it (what vLLM's --chat-template reads for speculators, after a `cargo install` that
/// ships no templates/), `list` names them, an unknown name is a usage error, and the shell
/// completions offer the names.
#[test]
fn the_built_in_templates_print_as_shipped_and_complete_by_name() {
    let harvest = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
            .args(args)
            .output()
            .expect("harvest runs")
    };
    for name in ["kimi-k2.5-final-turn", "kimi-k2-thinking-final-turn"] {
        let out = harvest(&["template", "print", name]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("templates")
            .join(format!("{name}.jinja"));
        assert_eq!(
            out.stdout,
            std::fs::read(&file).expect("the template file"),
            "{name}"
        );
    }
    let list = harvest(&["template", "list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("kimi-k2.5-final-turn") && text.contains("moonshotai/kimi-k2.5"),
        "{text}"
    );
    let bad = harvest(&["template", "print", "kimi-k3"]);
    assert_eq!(bad.status.code(), Some(2));
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(
        said.contains("kimi-k2.5-final-turn"),
        "names the possible values: {said}"
    );
    let bash = harvest(&["completions", "bash"]);
    let script = String::from_utf8_lossy(&bash.stdout);
    assert!(
        script.contains("kimi-k2-thinking-final-turn"),
        "completions offer the names"
    );
}
