//! What harvest keeps on disk: prompt readers, the output/rejects/ledger writer, the one reader
//! of an output directory (`scan`), the only changes made to it outside the writer (`repair`),
//! the lock that keeps one run per directory (`lock`), the probe's result file (`probe_file`),
//! the second chance of rejects and cut answers (`supersede`),
//! and the state needed to resume.

pub mod lock;
pub mod output;
pub(crate) mod prescan;
pub(crate) mod probe_file;
pub mod prompts;
pub(crate) mod repair;
pub mod scan;
pub(crate) mod supersede;
pub(crate) mod turns_file;

/// How every file of an output directory is opened. Opens never follow a symbolic link at the
/// last component (`O_NOFOLLOW`): a link planted in the output directory must not make harvest
/// write, append or truncate the file it points at (reliability-probe-3 D6); the open then
/// fails with ELOOP, naming the file. A file it creates is the operator's alone (0600): the
/// prompts, answers, ledger and log are not for every local user to read (probe 3, D16).
pub fn no_follow(o: &mut std::fs::OpenOptions) -> &mut std::fs::OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
        o.mode(0o600);
    }
    o
}

/// Creates `dir` (and its missing parents) for the operator alone (0700); an existing
/// directory keeps its mode.
pub fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}
