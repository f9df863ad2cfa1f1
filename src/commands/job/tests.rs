//! The job view's tests: shards found, missing, twice, of another config or unreadable, and
//! a run's admission into a job's directories.

use super::*;
use std::collections::HashMap;
use std::path::Path;

fn found(dir: &str, shard: Option<&str>, model: &str, done: u64, usd: f64) -> Found {
    let mut snapshot = crate::tui::testkit::kimi_snapshot();
    snapshot.state = RunState::Done;
    snapshot.done = done;
    snapshot.rejected = 1;
    snapshot.total = done + 1;
    Found {
        dir: dir.into(),
        manifest: Some(Manifest {
            model: model.into(),
            params: HashMap::new(),
            created_at: String::new(),
            harvest_version: String::new(),
            shard: shard.map(Into::into),
            fields: None,
            prompt_files: None,
            base_url: None,
            api_key_env: None,
        }),
        manifest_error: None,
        snapshot: Some(snapshot),
        spent: Usd::from_f64(usd),
        unreadable: Vec::new(),
    }
}

#[test]
fn a_run_beside_a_jobs_shards_stays_within_the_job() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("out");
    for k in 0..3 {
        let dir = out.join(format!("shard-{k}-of-3"));
        std::fs::create_dir_all(&dir).expect("dir");
        let m = found("", Some(&format!("{k}/3")), "m", 0, 0.0).manifest;
        std::fs::write(
            manifest_path(&dir),
            serde_json::to_string(&m).expect("json"),
        )
        .expect("manifest");
    }
    let whole = check_run_into(&out, &out, None).expect_err("a whole-job run");
    assert!(
        whole.contains(
            "holds the shard directories of a job (shard-0-of-3, shard-1-of-3, \
             shard-2-of-3), and is none of them"
        ),
        "{whole}"
    );
    assert!(
        whole.contains("Run one of its shards (--shard K/3"),
        "{whole}"
    );
    let other =
        check_run_into(&out, &out.join("shard-0-of-4"), Some((0, 4))).expect_err("another split");
    assert!(
        other.contains("holds shard 0/3 of this job: --shard 0/4"),
        "{other}"
    );
    // Given as its own directory, the parent is refused too.
    assert!(check_run_into(&out, &out, Some((1, 3))).is_err());
    let own = check_run_into(&out, &out.join("shard-1-of-3"), Some((1, 3))).expect("shard");
    assert_eq!(own.siblings, 2, "the other two shards count");
    // A shard elsewhere (--shard-dir) still counts the job's shards beside the parent.
    let away = tmp.path().join("scratch");
    let there = check_run_into(&out, &away, Some((1, 3))).expect("shard");
    assert_eq!(there.siblings, 2);
    // Nothing there yet: a first run.
    let fresh = tmp.path().join("new");
    assert_eq!(
        check_run_into(&fresh, &fresh, None)
            .expect("fresh")
            .siblings,
        0
    );
}

/// The other direction of N6 (reliability-probe-5 P5): a shard into its own directory
/// under a directory that holds a run's records would buy that run's ids again, unseen by
/// it; refused, naming the files. The directory itself (`--shard-dir`) sees them and may
/// take the shard; a manifest alone, or nothing, is no run.
#[test]
fn a_shard_under_a_directory_that_holds_a_run_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).expect("dir");
    let shard = out.join("shard-0-of-3");
    let write_manifest = |shard: Option<&str>| {
        let m = found("", shard, "m", 0, 0.0).manifest;
        std::fs::write(
            manifest_path(&out),
            serde_json::to_string(&m).expect("json"),
        )
        .expect("manifest");
    };
    write_manifest(None);
    assert!(
        check_run_into(&out, &shard, Some((0, 3))).is_ok(),
        "a manifest alone holds nothing to buy again"
    );
    std::fs::write(crate::store::output::ledger_path(&out), "{}\n").expect("ledger");
    let e = check_run_into(&out, &shard, Some((0, 3))).expect_err("beside a whole run");
    assert!(
        e.contains("holds the records of a run without --shard (spend.jsonl): --shard 0/3")
            && e.contains("--shard 0/3 --shard-dir"),
        "{e}"
    );
    // Elsewhere (--shard-dir) too: the ids are the same.
    let away = tmp.path().join("away");
    assert!(check_run_into(&out, &away, Some((0, 3))).is_err());
    // Into the run's own directory: it sees what that run did.
    assert!(check_run_into(&out, &out, Some((0, 3))).is_ok());
    write_manifest(Some("1/3"));
    let e = check_run_into(&out, &shard, Some((0, 3))).expect_err("beside a shard's run");
    assert!(
        e.contains("holds the records of a run of shard 1/3") && e.contains("Run shard 1/3 there"),
        "{e}"
    );
}

/// What cannot be read is said, not counted as nothing (reliability-probe-4 N12): a
/// damaged manifest is not an absent one, a shard with no state.json has unknown counts,
/// and damaged ledger lines are not in the spend.
#[test]
fn a_shard_whose_records_cannot_all_be_read_is_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("out");
    let dirs: Vec<PathBuf> = (0..2)
        .map(|k| out.join(format!("shard-{k}-of-2")))
        .collect();
    for d in &dirs {
        std::fs::create_dir_all(d).expect("dir");
    }
    std::fs::write(manifest_path(&dirs[0]), "{\"model\": ").expect("damaged");
    let m = found("", Some("1/2"), "m", 0, 0.0).manifest;
    std::fs::write(
        manifest_path(&dirs[1]),
        serde_json::to_string(&m).expect("json"),
    )
    .expect("manifest");
    std::fs::write(
        crate::store::output::ledger_path(&dirs[1]),
        "not a ledger line\n",
    )
    .expect("ledger");
    let v = assemble(&read(&dirs).expect("read"));
    let text = render(&v);
    let path = manifest_path(&dirs[0]).display().to_string();
    assert!(
        text.contains(&format!("damaged manifest: {path}: EOF while parsing")),
        "{text}"
    );
    assert!(
        text.contains(
            "shard-1-of-2: no state.json (not started, or stopped before its first save)"
        ),
        "{text}"
    );
    assert!(
        text.contains("shard-1-of-2: 1 ledger lines cannot be read and are not in its spend"),
        "{text}"
    );
}

#[test]
fn the_job_names_what_is_missing_twice_or_from_another_config() {
    let k = "moonshotai/kimi-k2.5";
    let v = assemble(&[
        found("out/shard-2-of-4", Some("2/4"), k, 10, 1.5),
        found("out/shard-0-of-4", Some("0/4"), k, 20, 2.0),
        found("copy/shard-0-of-4", Some("0/4"), k, 20, 2.0),
        found("old/shard-1-of-3", Some("1/3"), k, 5, 0.5),
        found("other/shard-3-of-4", Some("3/4"), "other/model", 7, 0.7),
        found("whole", None, k, 100, 9.0),
    ]);
    assert_eq!(v.of, Some(4));
    assert_eq!(v.missing, vec![1], "shard 1 of 4 has no directory");
    assert_eq!(v.duplicated, vec!["0/4".to_string()]);
    assert_eq!(
        v.other_config,
        vec![
            (
                "old/shard-1-of-3".to_string(),
                "a shard of 3, the job has 4".to_string()
            ),
            (
                "other/shard-3-of-4".to_string(),
                "model other/model (the job's: moonshotai/kimi-k2.5)".to_string()
            ),
            (
                "whole".to_string(),
                "not a shard (run without --shard)".to_string()
            ),
        ]
    );
    assert_eq!((v.done, v.rejected, v.total), (162, 6, 168));
    assert_eq!(v.spent, Usd::from_f64(15.7));
    let order: Vec<Option<&str>> = v.shards.iter().map(|r| r.shard.as_deref()).collect();
    assert_eq!(
        order,
        [
            None,
            Some("0/4"),
            Some("0/4"),
            Some("1/3"),
            Some("2/4"),
            Some("3/4")
        ]
    );
    let text = render(&v);
    assert!(
        text.starts_with(
            "job: 6 shard directories of 4 shards; 162 done, 6 rejected, 168 total; spent $15.70\n"
        ),
        "{text}"
    );
    assert!(text.contains("missing: shard 1 of 4"), "{text}");
    assert!(
        text.contains("duplicated: shard 0/4 in more than one directory"),
        "{text}"
    );
}

/// A job of three shards under `root/out` whose shard 1 has a manifest that is no JSON: the
/// shard directories, in order.
pub(crate) fn job_with_a_damaged_manifest(root: &Path) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = (0..3)
        .map(|k| root.join(format!("out/shard-{k}-of-3")))
        .collect();
    for (k, d) in dirs.iter().enumerate() {
        std::fs::create_dir_all(d).expect("dir");
        let m = found("", Some(&format!("{k}/3")), "m", 0, 0.0).manifest;
        let text = if k == 1 {
            "garbage".to_string()
        } else {
            serde_json::to_string(&m).expect("json")
        };
        std::fs::write(manifest_path(d), text).expect("manifest");
    }
    dirs
}

/// reliability-probe-5 P17: a shard whose directory is there with a damaged manifest is not
/// "missing (no directory)": the status names the manifest by its path with the parse error,
/// once, and points nowhere else ("(below)").
#[test]
fn a_shard_with_a_damaged_manifest_is_named_not_missing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dirs = job_with_a_damaged_manifest(tmp.path());
    let listed = shard_dirs(&[tmp.path().join("out")]).expect("a job");
    assert_eq!(listed, dirs, "the damaged shard's directory is listed");
    let v = assemble(&read(&listed).expect("read"));
    assert_eq!(v.of, Some(3));
    assert!(v.missing.is_empty(), "{:?}", v.missing);
    let text = render(&v);
    assert!(!text.contains("missing"), "{text}");
    assert!(!text.contains("(below)"), "{text}");
    let path = manifest_path(&dirs[1]).display().to_string();
    assert!(
        text.contains(&format!(
            "damaged manifest: {path}: expected value at line 1 column 1 (its directory's name \
             says shard 1 of 3; its model and parameters are unknown)\n"
        )),
        "{text}"
    );
    assert_eq!(text.matches(&path).count(), 1, "said once: {text}");
}
