//! Process hardening done first thing at start, before any key is read: no core dumps.
//!
//! The API key lives in this process's memory (the environment, every request's
//! `Authorization` header): a SIGABRT core of a run held it 379 times (reliability-probe-5 P6),
//! and `ulimit -c unlimited` is common on HPC nodes. Two locks, because either alone can be
//! undone by the surroundings: `RLIMIT_CORE` 0 (soft and hard, so the process cannot raise it
//! again), and `PR_SET_DUMPABLE` 0, which also stops a core piped to a handler
//! (`core_pattern = |…`, which ignores the size limit) and keeps other processes of the same
//! user from attaching (ptrace) or reading `/proc/PID/environ` and `/proc/PID/mem`.
//! What it costs: `perf record -p`, `gdb -p` and `strace -p` no longer attach to a running
//! harvest (start it under them instead: the flag is set after they are attached), and
//! `/proc/PID/*` is owned by root.

/// Turns core dumps off for this process and what it executes. Returns what could not be
/// done, one line each (none on Linux: lowering a limit and clearing the flag are always
/// allowed); the caller warns and goes on, since a start refused over it helps no one.
pub fn no_core_dumps() -> Vec<String> {
    let mut failed = Vec::new();
    #[cfg(unix)]
    if let Err(e) = rlimit::setrlimit(rlimit::Resource::CORE, 0, 0) {
        failed.push(format!("cannot set the core file size limit to 0: {e}"));
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        failed.push(format!("cannot mark the process not dumpable: {e}"));
    }
    failed
}
