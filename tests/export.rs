//! `harvest export` on a real run's output directory (the simulator on 127.0.0.1): the success
//! files pass SpecForge's own validator (vendored unchanged in tests/fixtures/specforge, run
//! with python3 and `--expect-reasoning --strict-think-markers`), the accounting adds up to
//! the prompt files' counts, and the output directory is not changed.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{fast_sim, write_job_with_ids};

const VAR: &str = "HARVEST_EXPORT_TEST_KEY";

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            (n, std::fs::read(e.path()).expect("read"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_rows_pass_specforge_and_the_accounting_adds_up() {
    let sim = fast_sim(60.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    // max_tokens 80 against answers of ~60 tokens: some are cut (skipped by default).
    write_job_with_ids(
        d,
        &sim.base_url(),
        VAR,
        60,
        "concurrency = 8\n[request]\nmax_tokens = 80",
    );
    let run = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .env(VAR, "sk-or-v1-export-test-key-0000000000")
        .args(["run", "--headless", "-c"])
        .arg(d.join("harvest.toml"))
        .output()
        .expect("run");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let out = d.join("out");
    let before = files(&out);

    let to = d.join("export");
    let export = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["export"])
        .arg(&out)
        .arg("--to")
        .arg(&to)
        .args(["--require-reasoning", "--json", "-c"])
        .arg(d.join("harvest.toml"))
        .output()
        .expect("export");
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let counts: serde_json::Value = serde_json::from_slice(&export.stdout).expect("json");
    let c = &counts[0];
    let n = |k: &str| c[k].as_u64().expect(k);
    assert_eq!(
        n("success") + n("error") + n("skipped") + n("not_run"),
        n("prompts"),
        "{c}"
    );
    assert_eq!(n("prompts"), 60);
    assert!(n("success") > 0 && n("skipped") > 0, "{c}");
    assert_eq!(files(&out), before, "the output directory is not changed");

    // SpecForge's own validator on the success file.
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/specforge/validate_regenerated_data.py");
    let v = Command::new("python3")
        .arg(&script)
        .arg("--data-path")
        .arg(to.join("A.jsonl"))
        .args(["--expect-reasoning", "--strict-think-markers"])
        .output()
        .expect("python3 runs SpecForge's validator");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
    assert!(v.status.success(), "{said}");
    assert!(said.contains(&format!("rows: {}", n("success"))), "{said}");
    assert!(said.contains("validation passed"), "{said}");
    sim.stop().await;
}
