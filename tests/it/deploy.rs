//! The deploy files (`deploy/`, `.dockerignore`) hold together with the binary: a cluster's
//! stop signal leaves harvest its whole drain before the kill, a wrong input is not retried,
//! and the image's build context is the sources (the trainer issue's deploy item).

use std::path::Path;

/// What a run may still do after its drain's grace before it exits: the first pass of
/// look-ups of closed streams (at most 15 s, `CLOSED_DEADLINE` in src/engine/reconcile.rs) or
/// of a crash's leftovers (8 s), the state file, the control socket's last snapshots (2 s).
/// A drain that finished in time may take them all; a stop-now at the grace's end waits on none.
const END_TAIL_S: u64 = 30;

fn repo_file(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The number after `key` on the first line that holds it (`key: 90`, `key=B:TERM@120`).
fn number_after(text: &str, key: &str) -> u64 {
    let line = (text.lines())
        .find(|l| l.contains(key))
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"));
    let rest = &line[line.find(key).expect("found") + key.len()..];
    let digits: String = (rest.chars())
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {key:?}: {line}"))
}

/// The drain grace a command line passes, or the binary's default (`harvest run --help`).
fn drain_grace_of(command_line: &str) -> u64 {
    if command_line.contains("--drain-grace-s") {
        return number_after(command_line, "--drain-grace-s");
    }
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["run", "--help"])
        .output()
        .expect("harvest runs");
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    let at = help
        .find("--drain-grace-s")
        .expect("the flag in run --help");
    number_after(&help[at..], "[default: ")
}

#[test]
fn a_clusters_stop_signal_leaves_harvest_its_whole_drain() {
    let job = repo_file("deploy/kubernetes/harvest-job.yaml");
    // The harvest container's (the init container copies the key), exec'd by its shell so
    // that the pod's SIGTERM reaches harvest.
    let command = value_of(block(&job, "containers:"), "command:");
    assert!(command.contains("exec harvest run"), "{command}");
    let command = command.as_str();
    let pod_grace = number_after(&job, "terminationGracePeriodSeconds:");
    let drain = drain_grace_of(command);
    assert!(
        pod_grace >= drain + END_TAIL_S,
        "the pod's grace ({pod_grace} s) must cover harvest's drain ({drain} s) and its end \
         ({END_TAIL_S} s), or the kubelet's SIGKILL cuts the drain"
    );

    let sbatch = repo_file("deploy/slurm/harvest-array.sbatch");
    let run = (sbatch.lines())
        .find(|l| l.starts_with("\"$HARVEST\" run "))
        .expect("the script runs harvest");
    // The batch shell takes the warning and passes it on as SIGTERM (tested below).
    let warned = number_after(&sbatch, "#SBATCH --signal=B:USR1@");
    let drain = drain_grace_of(run);
    assert!(
        warned >= drain + END_TAIL_S,
        "Slurm's warning ({warned} s before --time) must cover harvest's drain ({drain} s) and \
         its end ({END_TAIL_S} s)"
    );
}

#[test]
fn a_wrong_input_is_not_retried_and_a_schedulers_stop_or_an_eviction_is_not_counted() {
    let job = repo_file("deploy/kubernetes/harvest-job.yaml");
    let policy = &job[job.find("podFailurePolicy:").expect("a podFailurePolicy")..];
    let rules: Vec<&str> = policy.split("- action:").skip(1).collect();
    let fail_on_2 = rules.iter().any(|r| {
        r.trim_start().starts_with("FailIndex") && r.contains("operator: In") && {
            let values = &r[r.find("values:").expect("values")..];
            values.lines().next().unwrap_or_default().contains("[2]")
        }
    });
    assert!(
        fail_on_2,
        "exit 2 (bad input) fails its index at once: {policy}"
    );
    assert!(
        (rules.iter())
            .any(|r| r.trim_start().starts_with("Ignore") && r.contains("DisruptionTarget")),
        "an evicted or preempted pod is retried without counting: {policy}"
    );
    // harvest's exit after a SIGTERM that stopped it before done (tests/it/sigterm.rs).
    let resumable = harvest::commands::exit::RESUMABLE;
    assert!(
        rules.iter().any(|r| r.trim_start().starts_with("Ignore")
            && r.contains("containerName: harvest")
            && r.contains(&format!("values: [{resumable}]"))),
        "a pod that drained on SIGTERM is retried without counting: {policy}"
    );
    assert!(
        job.contains("backoffLimitPerIndex:"),
        "FailIndex needs a per-index limit"
    );
    // The exit code the policy names is the one harvest gives for bad input.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_harvest"))
        .args(["run", "-c", "/nonexistent/harvest.toml"])
        .output()
        .expect("harvest runs");
    assert_eq!(out.status.code(), Some(2), "a missing config is bad input");
    // A pinned image, pulled once per node.
    let image = value_of(&job, "image:");
    assert!(
        !image.ends_with(":latest") && image.contains(':'),
        "a pinned tag: {image}"
    );
    assert_eq!(value_of(&job, "imagePullPolicy:"), "IfNotPresent");
}

/// The value after `key` on its first line.
fn value_of(text: &str, key: &str) -> String {
    let line = (text.lines())
        .find(|l| l.trim_start().starts_with(key))
        .unwrap_or_else(|| panic!("no {key:?}"));
    line.trim_start()[key.len()..].trim().to_string()
}

#[test]
fn the_images_build_context_is_the_sources() {
    let ignore = repo_file(".dockerignore");
    let lines: Vec<&str> = ignore.lines().map(str::trim).collect();
    for must in ["target/", ".git/"] {
        assert!(lines.contains(&must), "{must} in .dockerignore: {ignore}");
    }
    let dockerfile = repo_file("deploy/Dockerfile");
    assert!(
        dockerfile.contains("COPY . ."),
        "the Dockerfile's context is the repository"
    );
}

/// The part of `text` from the line that is `start` (after indentation) to the next line as
/// indented or less.
fn block<'a>(text: &'a str, start: &str) -> &'a str {
    let at = (text.lines())
        .find(|l| l.trim_start() == start)
        .unwrap_or_else(|| panic!("no {start:?}"));
    let indent = at.len() - at.trim_start().len();
    let from = text.find(at).expect("found");
    let rest = &text[from + at.len()..];
    let end = (rest.lines())
        .filter(|l| !l.trim().is_empty())
        .find(|l| l.len() - l.trim_start().len() <= indent)
        .and_then(|l| rest.find(l))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The container's command in `section` (`command: [...]`, a JSON array as the file writes it).
fn command_of(section: &str) -> Vec<String> {
    let line = value_of(section, "command:");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// A `harvest` that says what it was given: `ulimit -c`, its environment, its arguments.
fn stub_harvest(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let stub = dir.join("harvest");
    std::fs::write(
        &stub,
        "#!/bin/sh\necho \"CORE $(ulimit -c)\"\nenv\necho \"ARGS $*\"\n",
    )
    .expect("stub");
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    stub
}

/// A Kubernetes secret's file holds the value with no newline, as `--from-env-file` stores it.
fn write_keys(dir: &Path, keys: &[&str]) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("keys dir");
    for (k, key) in keys.iter().enumerate() {
        let f = dir.join(format!("OPENROUTER_API_KEY_{k}"));
        std::fs::write(&f, key).expect("key");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
}

const KEYS: [&str; 4] = [
    "sk-or-v1-shard-zero",
    "sk-or-v1-shard-one",
    "sk-or-v1-shard-two",
    "sk-or-v1-shard-three",
];

/// reliability-probe-5 P18: each pod held every shard's key (`envFrom` the whole secret). Now
/// only the init container mounts the secret, and copies the index's key alone; the harvest
/// container mounts that copy. Both commands are run here with `sh` on files laid out as the
/// pod's, the secret's paths moved into a scratch directory: pod 1 gets key 1 and no other, in
/// the variable its config names; an index with no key fails with exit 2 (its index fails).
#[test]
fn each_pod_holds_only_its_own_shards_key() {
    let job = repo_file("deploy/kubernetes/harvest-job.yaml");
    for never in ["envFrom:", "secretRef:", "secretKeyRef:", "--from-literal"] {
        assert!(!job.contains(never), "{never} in the Job");
    }
    assert!(
        job.contains("--from-env-file="),
        "the secret is made from a file"
    );
    let init = block(&job, "initContainers:");
    let main = block(&job, "containers:");
    let secret_volume = block(block(&job, "volumes:"), "- name: all-keys");
    assert!(
        secret_volume.contains("secretName: harvest-keys"),
        "{secret_volume}"
    );
    assert!(
        init.contains("name: all-keys"),
        "the init container mounts the secret"
    );
    assert!(
        !main.contains("all-keys"),
        "the harvest container does not: {main}"
    );

    let dir = tempfile::tempdir().expect("tmp");
    let (secret, own) = (dir.path().join("secret"), dir.path().join("own"));
    write_keys(&secret, &KEYS);
    std::fs::create_dir_all(&own).expect("own");
    stub_harvest(dir.path());
    let moved = |cmd: Vec<String>| -> Vec<String> {
        (cmd.into_iter())
            .map(|a| {
                a.replace("/etc/harvest-keys", &secret.display().to_string())
                    .replace("/run/harvest-key", &own.display().to_string())
            })
            .collect()
    };
    let sh = |cmd: &[String], index: &str| {
        std::process::Command::new(&cmd[0])
            .args(&cmd[1..])
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
            .env("JOB_COMPLETION_INDEX", index)
            .output()
            .expect("sh runs")
    };
    let copy = moved(command_of(init));
    let done = sh(&copy, "1");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(own.join("key")).expect("copied"),
        KEYS[1]
    );
    let run = sh(&moved(command_of(main)), "1");
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(
        said.contains(&format!("OPENROUTER_API_KEY_1={}\n", KEYS[1])),
        "{said}"
    );
    for (k, key) in KEYS.iter().enumerate().filter(|(k, _)| *k != 1) {
        assert!(!said.contains(key), "key {k} in pod 1: {said}");
    }
    assert!(said.contains("ARGS run --headless --shard auto"), "{said}");
    // No key for the index: exit 2, which the podFailurePolicy fails at once.
    let none = sh(&copy, "7");
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("OPENROUTER_API_KEY_7"));
}

/// The Slurm task reads its own key from its own file, and whatever key variables the
/// environment still has are gone before harvest starts (`--export` passes none; a task started
/// otherwise may have them). Run with bash as Slurm would, for task 2 of an array 1-3 (shard 1),
/// with a stub harvest. A key file others may read is refused with exit 2. Core files are off.
#[test]
fn a_slurm_task_holds_only_its_own_shards_key() {
    let sbatch = repo_file("deploy/slurm/harvest-array.sbatch");
    let export = value_of(&sbatch, "#SBATCH --export=");
    assert!(
        !export.starts_with("ALL") && !export.contains("OPENROUTER"),
        "--export passes only what harvest needs: {export}"
    );
    let dir = tempfile::tempdir().expect("tmp");
    let keys = dir.path().join("keys");
    write_keys(&keys, &KEYS[..3]);
    let stub = stub_harvest(dir.path());
    let task = || {
        std::process::Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/slurm/harvest-array.sbatch"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir.path())
            .env("SLURM_ARRAY_TASK_ID", "2")
            .env("SLURM_ARRAY_TASK_MIN", "1")
            .env("SLURM_ARRAY_TASK_COUNT", "3")
            .env("HARVEST", &stub)
            .env("HARVEST_KEY_DIR", &keys)
            // What an `--export=ALL` submit environment would have passed.
            .env("OPENROUTER_API_KEY_0", KEYS[0])
            .env("OPENROUTER_API_KEY_2", KEYS[2])
            .env("OPENROUTER_API_KEY", KEYS[3])
            .output()
            .expect("bash runs")
    };
    let done = task();
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(
        said.contains(&format!("OPENROUTER_API_KEY_1={}\n", KEYS[1])),
        "{said}"
    );
    for (k, key) in KEYS.iter().enumerate().filter(|(k, _)| *k != 1) {
        assert!(!said.contains(key), "key {k} in shard 1's task: {said}");
    }
    assert!(said.contains("CORE 0\n"), "{said}");
    assert!(said.contains("ARGS run --headless --shard auto"), "{said}");
    assert!(
        sbatch.contains("#SBATCH --requeue") && sbatch.contains("#SBATCH --open-mode=append"),
        "a task may requeue itself, and its log is kept across tries"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let f = keys.join("OPENROUTER_API_KEY_1");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let open = task();
    assert_eq!(open.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&open.stderr).contains("may be read by others"));
}

/// The image and the pods run as one non-root user (probe 5 P18: root 0600 files on the
/// shared volume), numeric so that runAsNonRoot can check it, with a group the trainer can
/// share; the Job says how (group_readable).
#[test]
fn the_image_and_the_pods_run_as_a_user_the_trainer_can_share_a_group_with() {
    let dockerfile = repo_file("deploy/Dockerfile");
    let user = value_of(&dockerfile, "USER ");
    let (uid, gid) = user.split_once(':').expect("USER uid:gid");
    let (uid, gid): (u32, u32) = (uid.parse().expect("numeric"), gid.parse().expect("numeric"));
    assert!(uid != 0 && gid != 0, "{user}");
    let job = repo_file("deploy/kubernetes/harvest-job.yaml");
    let pod = block(&job, "securityContext:");
    assert_eq!(value_of(pod, "runAsNonRoot:"), "true");
    assert_eq!(number_after(pod, "runAsUser:"), u64::from(uid));
    assert_eq!(number_after(pod, "fsGroup:"), u64::from(gid));
    assert!(
        job.contains("group_readable = true"),
        "the Job says how a trainer reads"
    );
}

/// A harvest that stands in for the real one in the Slurm script: it says it started, then
/// runs until SIGTERM and exits `STUB_ON_TERM` (or exits `STUB_EXIT` at once).
fn stub_harvest_waiting(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let stub = dir.join("harvest");
    std::fs::write(
        &stub,
        "#!/bin/sh\ntrap 'echo TERM >> \"$STUB_SAID\"; exit \"$STUB_ON_TERM\"' TERM\n\
         echo started >> \"$STUB_SAID\"\n\
         if [ -n \"$STUB_EXIT\" ]; then exit \"$STUB_EXIT\"; fi\n\
         while :; do sleep 0.05; done\n",
    )
    .expect("stub");
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    stub
}

/// What the Slurm script does with Slurm's signals and harvest's exit, run with bash as Slurm
/// would for task 2 of array job 7, with a stub harvest and a stub `scontrol` that records
/// what it is asked: Slurm's time-limit warning (USR1) reaches harvest as SIGTERM, and a
/// harvest that exits 75 (stopped before done) has its task requeued by its own id; a SIGTERM
/// (scancel) drains and is not requeued; a harvest done or failing is never requeued.
#[test]
fn a_slurm_task_requeues_itself_when_its_time_is_up_and_harvest_stopped_before_done() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().expect("tmp");
    let keys = dir.path().join("keys");
    write_keys(&keys, &KEYS[..3]);
    let stub = stub_harvest_waiting(dir.path());
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let scontrol = bin.join("scontrol");
    // (signal to the script, harvest's exit on SIGTERM or at once, scontrol's own exit,
    //  the script's exit, the requeue asked)
    type Case = (
        Option<&'static str>,
        (&'static str, &'static str),
        u8,
        i32,
        Option<&'static str>,
    );
    let cases: [Case; 6] = [
        (Some("-USR1"), ("75", ""), 0, 0, Some("requeue 7_2")),
        (Some("-TERM"), ("75", ""), 0, 75, None),
        // Done within the drain: nothing to resume.
        (Some("-USR1"), ("0", ""), 0, 0, None),
        (Some("-USR1"), ("1", ""), 0, 1, None),
        // The requeue refused: the task ends with 75 and says to resubmit.
        (Some("-USR1"), ("75", ""), 1, 75, Some("requeue 7_2")),
        (None, ("75", "2"), 0, 2, None),
    ];
    for (sig, (on_term, exit_at_once), scontrol_exit, want, requeue) in cases {
        let said = dir.path().join("said");
        let asked = dir.path().join("asked");
        let _ = std::fs::remove_file(&said);
        let _ = std::fs::remove_file(&asked);
        std::fs::write(
            &scontrol,
            format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\nexit {scontrol_exit}\n",
                asked.display()
            ),
        )
        .expect("scontrol");
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&scontrol, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        let mut task = std::process::Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/slurm/harvest-array.sbatch"))
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("HOME", dir.path())
            .env("SLURM_JOB_ID", "9")
            .env("SLURM_ARRAY_JOB_ID", "7")
            .env("SLURM_ARRAY_TASK_ID", "2")
            .env("SLURM_ARRAY_TASK_COUNT", "3")
            .env("HARVEST", &stub)
            .env("HARVEST_KEY_DIR", &keys)
            .env("STUB_SAID", &said)
            .env("STUB_ON_TERM", on_term)
            .env("STUB_EXIT", exit_at_once)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("bash runs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&said).is_ok_and(|s| s.contains("started")) {
            assert!(Instant::now() < deadline, "the stub did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(sig) = sig {
            let sent = std::process::Command::new("kill")
                .args([sig, &task.id().to_string()])
                .status()
                .expect("kill");
            assert!(sent.success());
        }
        let out = {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if task.try_wait().expect("wait").is_some() {
                    break task.wait_with_output().expect("output");
                }
                assert!(Instant::now() < deadline, "the task did not end: {sig:?}");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let err = String::from_utf8_lossy(&out.stderr);
        let case = format!("{sig:?}, harvest {on_term}/{exit_at_once:?}, scontrol {scontrol_exit}");
        assert_eq!(out.status.code(), Some(want), "{case}: {err}");
        let stub_said = std::fs::read_to_string(&said).unwrap_or_default();
        assert_eq!(
            stub_said.contains("TERM"),
            sig.is_some(),
            "{case}: harvest got SIGTERM for the script's signal: {stub_said}"
        );
        let asked = std::fs::read_to_string(&asked).unwrap_or_default();
        assert_eq!(asked.trim(), requeue.unwrap_or(""), "{case}: {err}");
        // Said before the requeue is asked: Slurm may end the script as it requeues the task.
        assert_eq!(
            err.contains("drained; requeueing task 7_2"),
            requeue.is_some(),
            "{case}: {err}"
        );
        if scontrol_exit != 0 {
            assert!(
                err.contains("sbatch the array again to resume"),
                "{case}: {err}"
            );
        }
    }
}
