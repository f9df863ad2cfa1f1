//! A job run as shards on the scheduler people already have: three processes started at once as
//! a Slurm job array starts them (`SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_COUNT`), each with
//! `--shard auto`, its own key (`api_key_env = "…_{shard}"`) and its share of the budget, into
//! its own directory. Then the job seen as one: `status` over the parent directory, the
//! summed spend against the simulator's bill, `export` with every id once, and a missing
//! shard named.

use std::collections::HashSet;
use std::process::Command;

use harvest::domain::Usd;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_at_once_make_one_job_each_id_once_and_the_bill_summed() {
    let sim = crate::common::fast_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_path_buf();
    let n = 240;
    crate::common::write_prompts(&d, "p", n as usize);
    std::fs::write(
        d.join("harvest.toml"),
        format!(
            "base_url = \"{}\"\napi_key_env = \"SHARD_KEY_{{shard}}\"\nbudget_usd = 30.0\n\
             concurrency = 16\noutput_dir = \"out\"\n[request]\nmax_tokens = 200\n\
             [[dataset]]\nname = \"A\"\nprompts = \"p.prompts.jsonl\"\n",
            sim.base_url()
        ),
    )
    .expect("config");
    let children: Vec<std::process::Child> = (0..3)
        .map(|k| {
            Command::new(env!("CARGO_BIN_EXE_harvest"))
                .current_dir(&d)
                .args(["run", "--headless", "--shard", "auto"])
                .env("SLURM_ARRAY_TASK_ID", k.to_string())
                .env("SLURM_ARRAY_TASK_COUNT", "3")
                .env(
                    format!("SHARD_KEY_{k}"),
                    format!("sk-or-v1-shard-{k}-000000000000"),
                )
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let outs = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().expect("wait"))
            .collect::<Vec<_>>()
    })
    .await
    .expect("join");
    for (k, o) in outs.iter().enumerate() {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "shard {k}: {err}");
        assert!(
            err.contains(&format!(
                "shard {k}/3: budget $10.00 (1/3 of the job's budget_usd $30.00)"
            )),
            "shard {k} says its budget: {err}"
        );
        assert!(
            err.contains(&format!("shard {k}/3: the key from SHARD_KEY_{k}")),
            "{err}"
        );
    }

    // The job as one: every shard, each id once, the summed ledger equal to the bill.
    let status =
        crate::common::harvest_json(&["status", d.join("out").to_str().expect("path"), "--json"]);
    let job = &status["job"];
    assert_eq!(job["of"], 3);
    assert_eq!(job["missing"], serde_json::json!([]));
    assert_eq!(job["duplicated"], serde_json::json!([]));
    assert_eq!(job["other_config"], serde_json::json!([]));
    assert_eq!(job["shards"].as_array().expect("rows").len(), 3);
    assert_eq!(
        job["done"].as_u64().expect("done") + job["rejected"].as_u64().expect("rej"),
        n
    );
    let spent: Usd = serde_json::from_value(job["spent"].clone()).expect("usd");
    assert_eq!(
        spent,
        sim.state.billed_total(),
        "the summed ledgers are the bill"
    );

    let to = d.join("train");
    let export = crate::common::harvest_json(&[
        "export",
        d.join("out").to_str().expect("path"),
        "--to",
        to.to_str().expect("path"),
        "--keep-truncated",
        "--json",
    ]);
    let c = &export["datasets"][0];
    let total = ["success", "error", "skipped"]
        .iter()
        .map(|k| c[*k].as_u64().expect(k))
        .sum::<u64>();
    assert_eq!(total, n, "{c}");
    let ids = crate::common::exported_ids(&to, "A");
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(
        (ids.len(), unique.len()),
        (n as usize, n as usize),
        "each id once"
    );

    // Two of the three shards given: the third is named missing.
    let two = crate::common::harvest_json(&[
        "status",
        d.join("out/shard-0-of-3").to_str().expect("path"),
        d.join("out/shard-2-of-3").to_str().expect("path"),
        "--json",
    ]);
    assert_eq!(two["job"]["missing"], serde_json::json!([1]));
    let text = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["status"])
        .arg(d.join("out/shard-0-of-3"))
        .arg(d.join("out/shard-2-of-3"))
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("missing: shard 1 of 3"), "{text}");

    // A shard's directory refuses another shard.
    let wrong = Command::new(env!("CARGO_BIN_EXE_harvest"))
        .current_dir(&d)
        .args([
            "run",
            "--headless",
            "--shard",
            "1/3",
            "--shard-dir",
            "out/shard-0-of-3",
        ])
        .env("SHARD_KEY_1", "sk-or-v1-shard-1-000000000000")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(wrong.status.code(), Some(2), "{err}");
    assert!(
        err.contains("holds the rows of shard 0/3, not of shard 1/3"),
        "{err}"
    );

    the_job_stays_one_job(&d, &sim, n).await;
    sim.stop().await;
}

/// After the job: nothing buys its prompts again (reliability-probe-4 N6, N9). A whole-job
/// run into its parent directory and a shard of another split are refused before any
/// request; `estimate` on the job's config reads the shards' records (nothing left, the
/// spend the bill); an export of a job with one shard in two directories is refused.
async fn the_job_stays_one_job(d: &std::path::Path, sim: &harvest::sim::SimHandle, n: u64) {
    let requests = sim.state.requests_since(0).len();
    let whole = std::fs::read_to_string(d.join("harvest.toml"))
        .expect("config")
        .replace("SHARD_KEY_{shard}", "WHOLE_KEY");
    std::fs::write(d.join("whole.toml"), whole).expect("config");
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_harvest"))
            .current_dir(d)
            .args(args)
            .env("WHOLE_KEY", "sk-or-v1-whole-000000000000")
            .output()
            .expect("run");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["run", "--headless", "-c", "whole.toml"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("holds the shard directories of a job (shard-0-of-3, shard-1-of-3, shard-2-of-3), and is none of them"),
        "{err}"
    );
    let (code, err) = run(&["run", "--headless", "-c", "whole.toml", "--shard", "0/4"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("holds shard 0/3 of this job: --shard 0/4 would split the ids another way"),
        "{err}"
    );
    assert!(
        !d.join("out/shard-0-of-4").exists(),
        "nothing written for the refused shard"
    );
    assert_eq!(sim.state.requests_since(0).len(), requests, "nothing sent");

    let (code, est) = {
        let o = Command::new(env!("CARGO_BIN_EXE_harvest"))
            .current_dir(d)
            .args(["estimate", "--json", "-c", "whole.toml"])
            .env("WHOLE_KEY", "sk-or-v1-whole-000000000000")
            .output()
            .expect("estimate");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    assert_eq!(code, Some(0), "{est}");
    let est: serde_json::Value = serde_json::from_str(&est).expect("JSON");
    let a = &est["datasets"][0];
    assert_eq!(
        a["done"].as_u64().expect("done") + a["rejected"].as_u64().expect("rejected"),
        n,
        "{a}"
    );
    assert_eq!(a["prompts_remaining"], 0, "{a}");
    assert!(
        est["assumptions"]
            .as_array()
            .expect("assumptions")
            .iter()
            .any(|s| s
                .as_str()
                .is_some_and(|s| s.contains("holds a job of 3 shard directories"))),
        "{est}"
    );

    // One shard in two directories: its rows would be written twice.
    let copy = d.join("out/shard-0-of-3-copy");
    std::fs::create_dir(&copy).expect("copy");
    for e in std::fs::read_dir(d.join("out/shard-0-of-3")).expect("dir") {
        let e = e.expect("entry");
        if e.file_type().expect("type").is_file() {
            std::fs::copy(e.path(), copy.join(e.file_name())).expect("copy");
        }
    }
    let to = d.join("train-mixed");
    let (code, err) = run(&["export", "out", "--to", to.to_str().expect("path")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("shard 0/3 is in more than one directory: its rows would be written twice"),
        "{err}"
    );
    assert!(!to.exists(), "nothing exported");
}

/// The `deploy/` files run the commands README documents: the Slurm array script, run as
/// Slurm runs each task (its environment, bash), completes its shards against the simulator,
/// each with its own key read from its own file;
/// the Kubernetes Job runs the same `harvest run` and tells it as many shards as it has
/// completions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_files_run_the_documented_shard_command() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("deploy/slurm/harvest-array.sbatch");
    let sim = crate::common::fast_sim(20.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_path_buf();
    crate::common::write_prompts(&d, "p", 40);
    std::fs::write(
        d.join("harvest.toml"),
        format!(
            "base_url = \"{}\"\napi_key_env = \"OPENROUTER_API_KEY_{{shard}}\"\n\
             budget_usd = 4.0\n[[dataset]]\nname = \"A\"\nprompts = \"p.prompts.jsonl\"\n",
            sim.base_url()
        ),
    )
    .expect("config");
    // Each task's own key, in its own file only the user may read (the script's way).
    let keys = d.join("keys");
    std::fs::create_dir_all(&keys).expect("keys");
    for k in [0, 1] {
        use std::os::unix::fs::PermissionsExt;
        let f = keys.join(format!("OPENROUTER_API_KEY_{k}"));
        std::fs::write(&f, format!("sk-or-v1-deploy-{k}\n")).expect("key");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    // An array that starts at 1, as `--array=1-2` makes it.
    for id in [1, 2] {
        let mut c = Command::new("bash");
        c.arg(&script)
            .current_dir(&d)
            .env("HARVEST", env!("CARGO_BIN_EXE_harvest"))
            .env("HARVEST_KEY_DIR", &keys)
            .env("SLURM_ARRAY_TASK_ID", id.to_string())
            .env("SLURM_ARRAY_TASK_MIN", "1")
            .env("SLURM_ARRAY_TASK_COUNT", "2");
        let out = tokio::task::spawn_blocking(move || c.output().expect("bash"))
            .await
            .expect("join");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "task {id}: {err}");
        assert!(
            err.contains(&format!("shard {}/2: budget $2.00", id - 1)),
            "{err}"
        );
    }
    let status =
        crate::common::harvest_json(&["status", d.join("out").to_str().expect("path"), "--json"]);
    assert_eq!(status["job"]["missing"], serde_json::json!([]));
    assert_eq!(
        status["job"]["done"].as_u64().expect("done")
            + status["job"]["rejected"].as_u64().expect("rej"),
        40
    );

    // The Job runs what the script runs, with HARVEST_SHARDS equal to its completions.
    let job =
        std::fs::read_to_string(root.join("deploy/kubernetes/harvest-job.yaml")).expect("job");
    let script_text = std::fs::read_to_string(&script).expect("script");
    // The script runs harvest in the background (not `exec`) so that its shell can take
    // Slurm's time-limit signal and requeue the task (deploy/slurm, issue 54).
    assert!(
        script_text.contains(
            "\"$HARVEST\" run --headless --shard auto --drain-grace-s 30 -c \"$CONFIG\" &"
        )
    );
    assert!(
        job.contains(
            "exec harvest run --headless --shard auto --drain-grace-s 30 -c /data/harvest.toml\"]"
        ),
        "{job}"
    );
    let value_after = |key: &str| -> String {
        let at = job.find(key).unwrap_or_else(|| panic!("{key} in the Job"));
        job[at + key.len()..]
            .lines()
            .next()
            .expect("line")
            .trim()
            .trim_matches('"')
            .to_string()
    };
    let shards_at = job.find("name: HARVEST_SHARDS").expect("HARVEST_SHARDS");
    let shards = job[shards_at..]
        .lines()
        .nth(1)
        .and_then(|l| l.trim().strip_prefix("value:"))
        .expect("its value")
        .trim()
        .trim_matches('"')
        .to_string();
    assert_eq!(
        value_after("completions:"),
        shards,
        "HARVEST_SHARDS is the completions"
    );
    assert_eq!(value_after("parallelism:"), shards, "all shards at once");
    assert_eq!(value_after("completionMode:"), "Indexed");
    sim.stop().await;
}

/// A shard into the directory of a finished run without `--shard` (reliability-probe-5 P5,
/// N6's other direction): `output_dir/shard-0-of-3` does not see that run's answers, and
/// bought its ids again (212 of 600 in the probe). Refused before any request, naming the
/// run's files; the shard run into the run's own directory (`--shard-dir`) sees them and
/// sends nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_beside_a_finished_whole_run_is_refused_before_any_request() {
    const VAR: &str = "SHARD_P5_KEY";
    const KEY: &str = "sk-or-v1-shard-p5-000000000000";
    let sim = crate::common::fast_sim(40.0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    crate::common::write_job(
        d,
        30,
        &sim.base_url(),
        VAR,
        "budget_usd = 5.0\noutput_dir = \"job2\"",
        "A",
    );
    let (code, text) = crate::common::run_headless(d, VAR, KEY, &[]).await;
    assert_eq!(code, 0, "{text}");
    let sent = sim.state.requests_since(0).len();
    assert!(sent >= 30, "{sent}");

    let (code, text) = crate::common::run_headless(d, VAR, KEY, &["--shard", "0/3"]).await;
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("job2 holds the records of a run without --shard (spend.jsonl, A.jsonl)")
            && text.contains("--shard 0/3 into")
            && text.contains("would send again the ids that run answered"),
        "{text}"
    );
    assert!(!d.join("job2/shard-0-of-3").exists(), "no directory made");
    assert_eq!(sim.state.requests_since(0).len(), sent, "nothing sent");

    let own = d.join("job2");
    let own = own.to_str().expect("path");
    let (code, text) =
        crate::common::run_headless(d, VAR, KEY, &["--shard", "0/3", "--shard-dir", own]).await;
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        sim.state.requests_since(0).len(),
        sent,
        "its ids were answered: nothing bought again"
    );
    sim.stop().await;
}
