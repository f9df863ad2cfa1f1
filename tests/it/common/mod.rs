//! Helpers shared by the engine tests: prompt files, configs for the simulator, running the
//! engine bounded in time, reading outputs and the ledger.

pub mod http;
pub mod parquet;
pub mod tmux;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harvest::config::Config;
use harvest::domain::Usd;
use harvest::engine::{self, RunOptions, RunSummary};
use harvest::openrouter::ApiKey;
use harvest::sim::{self, ControlRequest, SimConfig, SimHandle};
use harvest::store::output::SpendEntry;

pub const KEY: &str = "sk-or-v1-engine-test-key-000000";

pub fn write_prompts(dir: &Path, name: &str, n: usize) -> PathBuf {
    let p = dir.join(format!("{name}.prompts.jsonl"));
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "{{\"prompt\": \"{name} question number {i}: explain something.\"}}\n"
        ));
    }
    std::fs::write(&p, text).expect("write prompts");
    p
}

pub struct Setup {
    _dir: tempfile::TempDir,
    pub dir: PathBuf,
    pub out: PathBuf,
}

pub fn setup() -> Setup {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().to_path_buf();
    Setup {
        out: dir.join("out"),
        dir,
        _dir: d,
    }
}

/// A config for the simulator at `base` with the given body (datasets etc.).
pub fn config(s: &Setup, base: &str, body: &str) -> Config {
    let text = format!(
        "base_url = \"{base}\"\napi_key_env = \"HARVEST_TEST_UNSET_KEY\"\noutput_dir = \"out\"\n{body}"
    );
    let path = s.dir.join("harvest.toml");
    std::fs::write(&path, &text).expect("write config");
    Config::load(&path).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

pub async fn run(cfg: Config) -> RunSummary {
    let opts = RunOptions {
        api_key: ApiKey::new(KEY),
        tick: Some(Duration::from_millis(50)),
        ..Default::default()
    };
    let h = engine::start(cfg, opts).await.expect("engine starts");
    tokio::time::timeout(Duration::from_secs(180), h.finish())
        .await
        .expect("run bounded in time")
        .expect("run finishes")
}

pub fn read_jsonl<T: serde::de::DeserializeOwned>(p: &Path) -> Vec<T> {
    match std::fs::read_to_string(p) {
        Ok(t) => t
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", p.display()))
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

pub fn ledger_total(out: &Path) -> Usd {
    read_jsonl::<SpendEntry>(&out.join("spend.jsonl"))
        .iter()
        .map(|e| e.usd)
        .sum()
}

pub async fn fast_sim(mean_tokens: f64) -> SimHandle {
    let s = sim::start(SimConfig::fast_no_faults(), 0)
        .await
        .expect("sim");
    s.state
        .control(&ControlRequest {
            output_tokens_mean: Some(mean_tokens),
            ..Default::default()
        })
        .expect("control");
    s
}

/// `n` prompts with ids `p00`.. in `dir/p.jsonl`, and `dir/harvest.toml` for the simulator at
/// `base` with the key in `key_var`, a $5 budget, `settings` (top-level keys, then tables) and
/// one dataset `A`.
pub fn write_job_with_ids(dir: &Path, base: &str, key_var: &str, n: usize, settings: &str) {
    std::fs::create_dir_all(dir).expect("dir");
    let prompts: String = (0..n)
        .map(|i| format!("{{\"id\": \"p{i:02}\", \"prompt\": \"question {i}\"}}\n"))
        .collect();
    std::fs::write(dir.join("p.jsonl"), prompts).expect("prompts");
    std::fs::write(
        dir.join("harvest.toml"),
        format!(
            "base_url = \"{base}\"\napi_key_env = \"{key_var}\"\nbudget_usd = 5.0\n{settings}\n\
             [[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n"
        ),
    )
    .expect("config");
}

/// Runs `harvest run --headless -c dir/harvest.toml <extra>` to its end with `key` in
/// `key_var`; returns the exit code and stdout then stderr.
pub async fn run_headless(dir: &Path, key_var: &str, key: &str, extra: &[&str]) -> (i32, String) {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"));
    c.env(key_var, key)
        .args(["run", "--headless", "-c"])
        .arg(dir.join("harvest.toml"))
        .args(extra);
    let out = tokio::task::spawn_blocking(move || c.output().expect("runs"))
        .await
        .expect("join");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Makes every chat request of the simulator fail with `f` (while its `remaining` lasts), or
/// stops that with `None`.
pub fn force_error(sim: &SimHandle, f: Option<harvest::sim::ForcedError>) {
    sim.state
        .control(&ControlRequest {
            clear_forced_error: f.is_none(),
            force_error: f,
            ..Default::default()
        })
        .expect("control");
}

/// Sets the simulator's speed scale (1 is real provider pace).
pub fn set_speed(sim: &SimHandle, scale: f64) {
    sim.state
        .control(&ControlRequest {
            speed_scale: Some(scale),
            ..Default::default()
        })
        .expect("control");
}

/// Takes an endpoint of the simulator out of the listing and routing, or brings it back.
pub fn set_down(sim: &SimHandle, tag: &str, down: bool) {
    let mut c = ControlRequest::default();
    c.endpoints.insert(
        tag.into(),
        harvest::sim::EndpointPatch {
            down: Some(down),
            ..Default::default()
        },
    );
    sim.state.control(&c).expect("control");
}

/// Starts the engine with the test key, publishing snapshots every `tick_ms`.
pub async fn start_engine(cfg: Config, tick_ms: u64) -> engine::EngineHandle {
    let opts = RunOptions {
        api_key: ApiKey::new(KEY),
        tick: Some(Duration::from_millis(tick_ms)),
        ..Default::default()
    };
    engine::start(cfg, opts).await.expect("engine starts")
}

/// A simulator without faults at `speed` (1 = real pace) answering `mean_tokens` on average.
pub async fn paced_sim(speed: f64, mean_tokens: f64) -> SimHandle {
    let sim = fast_sim(mean_tokens).await;
    set_speed(&sim, speed);
    sim
}

/// Writes `n` short prompts to `dir/p.jsonl` and a `dir/harvest.toml` for the simulator at
/// `base` (key from `key_env`), with `settings` (top-level keys, then tables) and one dataset
/// `dataset` over those prompts. Returns the config's path.
pub fn write_job(
    dir: &Path,
    n: usize,
    base: &str,
    key_env: &str,
    settings: &str,
    dataset: &str,
) -> PathBuf {
    let prompts: String = (0..n)
        .map(|i| format!("{{\"prompt\": \"question {i}\"}}\n"))
        .collect();
    std::fs::write(dir.join("p.jsonl"), prompts).expect("prompts");
    let config = dir.join("harvest.toml");
    std::fs::write(
        &config,
        format!(
            "base_url = \"{base}\"\napi_key_env = \"{key_env}\"\n{settings}\n\
             [[dataset]]\nname = \"{dataset}\"\nprompts = \"p.jsonl\"\n"
        ),
    )
    .expect("config");
    config
}

/// What `scripts/peers.sh env` says: the installed third-party peers' paths, by variable.
fn peer_env() -> HashMap<String, PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("bash")
        .arg(root.join("scripts/peers.sh"))
        .arg("env")
        .output()
        .expect("run scripts/peers.sh env");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
        .collect()
}

/// Whether this machine must have everything the suite needs: under a CI service (`CI` set, and
/// not `false` or `0`) or under `.ci/run` (`HARVEST_REQUIRE_PEERS=1`, exported once it has
/// installed tmux and the peers). There a test that cannot do its check fails.
pub fn prerequisites_required() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "false" | "0"));
    ci || std::env::var("HARVEST_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

/// A test that cannot do its check here (`why`: what is missing and what did not run): a failure where
/// [`prerequisites_required`]; else a `SKIPPED <test>: <why>` line written to the process's
/// own stderr, which `cargo test` shows even for a test that passes (the harness captures only
/// what `print!` and `eprint!` write). The caller returns without its check. Tests whose
/// prerequisite is a peer from `scripts/peers.sh install` do not come here: they are
/// `#[ignore]`d with that reason (`tests/it/peers/`).
pub fn cannot_check(why: &str) {
    let test = test_name();
    assert!(
        !prerequisites_required(),
        "{test} cannot do its check: {why} (CI and .ci/run require it)"
    );
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
}

/// The peers `scripts/peers.sh install` provides, by variable, each checked to be a file; a
/// missing one fails the test that needs it (those tests are `#[ignore]`d, so only a run that
/// asks for them gets here), naming the files and the command that installs them.
pub fn installed_peers(vars: &[&str]) -> HashMap<String, PathBuf> {
    let found = peer_env();
    let missing: Vec<String> = vars
        .iter()
        .filter(|v| !found.get(**v).is_some_and(|p| p.is_file()))
        .map(|v| match found.get(*v) {
            Some(p) => format!("{v}={}", p.display()),
            None => format!("{v} (not named by scripts/peers.sh env)"),
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} needs the peers of scripts/peers.sh install (about 15 minutes the first time on \
         2 cores); missing: {}",
        test_name(),
        missing.join(", ")
    );
    found
}

/// The running test's name: libtest runs each test on a thread named after it (a Tokio test's
/// body too, polled by `block_on` on that thread).
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string()
}

/// Runs `harvest ARGS` and reads its stdout as JSON, after checking it succeeded.
pub fn harvest_json<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(args)
        .output()
        .expect("harvest runs");
    assert!(
        out.status.success(),
        "harvest {:?}: {}",
        args.iter()
            .map(|a| a.as_ref().to_owned())
            .collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Runs SpecForge's own validator (vendored in tests/fixtures/specforge) on a success file with
/// `--expect-reasoning --strict-think-markers`; returns what it printed, after checking it
/// passed.
pub fn specforge_validates(file: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/specforge/validate_regenerated_data.py");
    let v = std::process::Command::new("python3")
        .arg(&script)
        .arg("--data-path")
        .arg(file)
        .args(["--expect-reasoning", "--strict-think-markers"])
        .output()
        .expect("python3 runs SpecForge's validator");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
    assert!(
        v.status.success() && said.contains("validation passed"),
        "{}: {said}",
        file.display()
    );
    said
}

/// Where the ledger and the simulator's bill differ, by generation: each generation whose
/// lines do not sum to its bill, with its lines (kind, estimated, note), and the lines with no
/// generation (key true-ups, requests that never streamed). For a failure's story.
pub fn ledger_against_bill(out: &Path, bill: &[harvest::sim::BillingEntry]) -> String {
    use harvest::store::output::SpendEntry;
    let lines = read_jsonl::<SpendEntry>(&out.join("spend.jsonl"));
    let mut by_gen: std::collections::BTreeMap<String, (f64, f64, Vec<String>)> =
        std::collections::BTreeMap::new();
    let mut loose = Vec::new();
    for e in &lines {
        let said = format!(
            "{:?} {:+.8}{} {}",
            e.kind,
            e.usd.as_f64(),
            if e.estimated { " (estimated)" } else { "" },
            e.note.as_deref().unwrap_or("")
        );
        match &e.generation_id {
            Some(g) => {
                let row = by_gen.entry(g.clone()).or_default();
                row.0 += e.usd.as_f64();
                row.2.push(said);
            }
            None if e.usd.as_f64() != 0.0 => loose.push(said),
            None => {}
        }
    }
    for b in bill {
        by_gen.entry(b.id.clone()).or_default().1 += b.cost_usd.as_f64();
    }
    let mut text = String::new();
    for (g, (booked, billed, said)) in &by_gen {
        if (booked - billed).abs() >= 1e-9 {
            text += &format!("  {g}: booked {booked:.8}, billed {billed:.8}: {said:?}\n");
        }
    }
    text += &format!("  lines with no generation: {loose:?}");
    text
}

/// The prompt ids an export of `dataset` wrote into `to`, across its rows, errors and skips (one
/// entry per line: an id exported twice is there twice).
pub fn exported_ids(to: &Path, dataset: &str) -> Vec<String> {
    ["jsonl", "error.ndjson", "skipped.ndjson"]
        .iter()
        .flat_map(|ext| {
            (std::fs::read_to_string(to.join(format!("{dataset}.{ext}"))).unwrap_or_default())
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).expect("row");
                    v["id"].as_str().expect("id").to_string()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}
