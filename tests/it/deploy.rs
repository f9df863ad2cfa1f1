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
    let command = (job.lines())
        .find(|l| l.trim_start().starts_with("command:"))
        .expect("the container's command");
    let pod_grace = number_after(&job, "terminationGracePeriodSeconds:");
    let drain = drain_grace_of(command);
    assert!(
        pod_grace >= drain + END_TAIL_S,
        "the pod's grace ({pod_grace} s) must cover harvest's drain ({drain} s) and its end \
         ({END_TAIL_S} s), or the kubelet's SIGKILL cuts the drain"
    );

    let sbatch = repo_file("deploy/slurm/harvest-array.sbatch");
    let exec = (sbatch.lines())
        .find(|l| l.starts_with("exec "))
        .expect("the script execs harvest (so that the batch shell's signal reaches it)");
    let warned = number_after(&sbatch, "#SBATCH --signal=B:TERM@");
    let drain = drain_grace_of(exec);
    assert!(
        warned >= drain + END_TAIL_S,
        "Slurm's warning ({warned} s before --time) must cover harvest's drain ({drain} s) and \
         its end ({END_TAIL_S} s)"
    );
}

#[test]
fn a_wrong_input_is_not_retried_and_an_eviction_is_not_counted() {
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
