//! What harvest keeps on disk: prompt readers, the output/rejects/ledger writer, the one reader
//! of an output directory (`scan`), the only changes made to it outside the writer (`repair`),
//! the lock that keeps one run per directory (`lock`), the probe's result file (`probe_file`),
//! the second chance of rejects and cut answers (`supersede`),
//! and the state needed to resume.

pub(crate) mod kept_booking;
pub mod lock;
pub mod output;
pub(crate) mod prescan;
pub(crate) mod probe_file;
pub mod prompts;
pub(crate) mod repair;
pub mod scan;
pub(crate) mod supersede;
pub(crate) mod turns_file;
pub mod writer;

/// Whether the files and directories this process creates may be read by the operator's group
/// (`group_readable` in the config): one setting for the process, as a umask is, set by the
/// commands that write an output directory once their config is read.
static GROUP_READABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Lets the operator's group read what this process creates from now on (0640, 0750).
///
/// The modes harvest asks for are masked by the process's umask, and clusters often set 077,
/// under which 0640 silently became 0600 (reliability-probe-4 N10). So the group's read and
/// search bits are taken out of the umask here, and only those: what the umask forbids the
/// group's write or the world's anything stays forbidden.
pub fn share_with_group(on: bool) {
    GROUP_READABLE.store(on, std::sync::atomic::Ordering::Relaxed);
    #[cfg(unix)]
    if on {
        use rustix::fs::Mode;
        let old = rustix::process::umask(Mode::empty());
        rustix::process::umask(old & !Mode::from_raw_mode(0o050));
    }
}

/// The modes of a file and of a directory harvest creates.
fn modes() -> (u32, u32) {
    if GROUP_READABLE.load(std::sync::atomic::Ordering::Relaxed) {
        (0o640, 0o750)
    } else {
        (0o600, 0o700)
    }
}

/// How every file of an output directory is opened. Opens never follow a symbolic link at the
/// last component (`O_NOFOLLOW`): a link planted in the output directory must not make harvest
/// write, append or truncate the file it points at (reliability-probe-3 D6); the open then
/// fails with ELOOP, naming the file. A file it creates is the operator's alone (0600,
/// or 0640 with `group_readable`): the prompts, answers, ledger and log are not for every local
/// user to read (probe 3, D16).
pub fn no_follow(o: &mut std::fs::OpenOptions) -> &mut std::fs::OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
        o.mode(modes().0);
    }
    o
}

/// Creates the file that will replace another by a rename (a rewrite's temporary file, an
/// export's): never an entry that is already there. A stale one (a crash's leftover) is
/// removed first, and the new file is created exclusively (`O_CREAT | O_EXCL`, which follows no
/// link) with harvest's mode. In a shared sticky directory another user's planted symlink or
/// world-writable file cannot be removed by us, so the create fails naming it, instead of
/// harvest writing through the link or renaming a file that user owns over the dataset
/// (reliability-probe-4 N3).
pub fn create_replacement(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    // Missing, or not ours to remove: either way the exclusive create below decides.
    let _ = std::fs::remove_file(path);
    no_follow(std::fs::OpenOptions::new().write(true).create_new(true)).open(path)
}

/// Creates `dir` (and its missing parents) for the operator alone (0700, or 0750 with
/// `group_readable`); an existing directory keeps its mode.
pub fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(modes().1);
    }
    b.create(dir)
}
