//! The running binary dumps no core (reliability-probe-5 P6): its core file size limit is 0,
//! soft and hard, and the kernel holds it not dumpable, as `/proc/PID` shows from outside.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// `nobody`: a uid the test can run the binary as when it runs as root itself.
const NOBODY: u32 = 65534;

/// `harvest sim` (a command that runs until killed) is started as a user other than root, and
/// read from outside once it serves. The kernel gives the files in a process's `/proc/PID` to
/// root exactly when the process is not dumpable (`task_dump_owner` in fs/proc/base.c), so a
/// non-root process whose `/proc/PID/environ` (where the key is) is root's has
/// `PR_SET_DUMPABLE` 0; `/proc/PID/limits` has the limit as the kernel enforces it. Before the
/// fix, the limits were the parent's (here `0 unlimited`, which `ulimit -c unlimited` raises)
/// and `/proc/PID/environ` was the process's own user's.
#[cfg(target_os = "linux")]
#[test]
fn the_binary_starts_with_core_dumps_off() {
    let me = rustix::process::getuid().as_raw();
    // As root, run it as nobody: root's /proc/PID is root's whether dumpable or not.
    let uid = if me == 0 { NOBODY } else { me };
    // A copy nobody may run: the build's directory may be private to root (CI's target
    // directory is under /root).
    let dir = tempfile::tempdir().expect("tmp");
    let bin = dir.path().join("harvest");
    std::fs::copy(env!("CARGO_BIN_EXE_harvest"), &bin).expect("copy the binary");
    for (path, mode) in [(dir.path(), 0o755), (bin.as_path(), 0o755)] {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
    }
    let mut cmd = Command::new(&bin);
    cmd.args(["sim", "--port", "0", "--speed-scale", "0"])
        .env_remove("OPENROUTER_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if me == 0 {
        cmd.uid(uid).gid(NOBODY);
    }
    let mut child = cmd.spawn().expect("spawn harvest sim");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("the address line");
    assert!(first.contains("http://127.0.0.1:"), "sim serves: {first}");
    let pid = child.id();

    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let core = (limits.lines())
        .find(|l| l.starts_with("Max core file size"))
        .expect("the core line");
    let fields: Vec<&str> = core["Max core file size".len()..]
        .split_whitespace()
        .collect();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let environ_owner = std::fs::metadata(format!("/proc/{pid}/environ"))
        .expect("/proc/PID/environ")
        .uid();
    child.kill().expect("kill");
    let _ = child.wait();

    assert_eq!(fields[..2], ["0", "0"], "soft and hard limit 0: {core}");
    let real_uid = (status.lines())
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .expect("Uid line");
    assert_eq!(real_uid, uid.to_string(), "runs as {uid}: {status}");
    assert_eq!(
        environ_owner, 0,
        "a non-dumpable process's /proc/PID/environ is root's; this one's is {environ_owner}'s"
    );
}
