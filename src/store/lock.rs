//! One run per output directory: an OS advisory lock (`flock` on Unix, `LockFileEx` on Windows,
//! through std's `File::try_lock`) on `<output_dir>/.harvest.lock`, held for the life of a run
//! or a probe and released by the kernel when the process ends, however it ends. The file
//! holds the holder's pid and start time so that a refused second run can name it; the content
//! is informative only (the lock is the kernel's, a stale file locks nothing).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const FILE_NAME: &str = ".harvest.lock";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "{dir} is in use by another harvest process (pid {pid}, started {started_at}): one run \
         per output directory. Wait for it to end, or use another output_dir"
    )]
    Busy {
        dir: PathBuf,
        pid: String,
        started_at: String,
    },
    #[error(
        "{dir}: {why}; another user could plant links or files in it that harvest would write \
         through. Use a directory of your own (chmod o-w, or another output_dir)"
    )]
    Unsafe { dir: PathBuf, why: String },
    #[error("cannot lock {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Who holds the lock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// RFC 3339.
    pub started_at: String,
}

/// The lock of an output directory; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DirLock {
    // Held only for its lock: closing the file releases it.
    _file: File,
    path: PathBuf,
}

impl DirLock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The process that holds `dir`'s lock, when one does: the pid its lock file names, if that
/// process is alive and the lock is really held (a stale file locks nothing). Read-only: the
/// lock is probed with a shared open of the file, never taken.
pub fn live_holder(dir: &Path) -> Option<Holder> {
    let path = dir.join(FILE_NAME);
    let file = super::no_follow(OpenOptions::new().read(true))
        .open(&path)
        .ok()?;
    // A shared lock fails while the run holds its exclusive one.
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            None
        }
        Err(_) => {
            let text = std::fs::read_to_string(&path).ok()?;
            serde_json::from_str(text.trim()).ok()
        }
    }
}

/// Refuses an output directory other users can write to (world-writable without the sticky
/// bit) or that another user owns: they could plant links or files harvest would write
/// through. Group-writable directories are allowed (a team's shared space).
#[cfg(unix)]
fn refuse_shared(dir: &Path) -> Result<(), LockError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).map_err(|source| LockError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let unsafe_dir = |why: String| LockError::Unsafe {
        dir: dir.to_path_buf(),
        why,
    };
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(unsafe_dir(format!(
            "owned by uid {}, not by you (uid {me})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o002 != 0 && meta.mode() & 0o1000 == 0 {
        return Err(unsafe_dir(format!(
            "writable by every user (mode {:o})",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn refuse_shared(_dir: &Path) -> Result<(), LockError> {
    Ok(())
}

/// Takes the lock of `dir` (which must exist) without waiting.
pub fn lock_dir(dir: &Path) -> Result<DirLock, LockError> {
    let path = dir.join(FILE_NAME);
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    refuse_shared(dir)?;
    // Not truncated on open: until we hold the lock, the content is the holder's. Never through
    // a link planted in the directory (reliability-probe-3 D6: a root run truncated the file it
    // pointed at).
    let mut file = super::no_follow(
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
    )
    .open(&path)
    .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder: Option<Holder> = serde_json::from_str(text.trim()).ok();
            return Err(LockError::Busy {
                dir: dir.to_path_buf(),
                pid: holder
                    .as_ref()
                    .map_or("unknown (it is starting)".into(), |h| h.pid.to_string()),
                started_at: holder.map_or("just now".into(), |h| h.started_at),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    let me = Holder {
        pid: std::process::id(),
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    let mut line = serde_json::to_vec(&me).map_err(|e| io(std::io::Error::other(e)))?;
    line.push(b'\n');
    file.set_len(0).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.write_all(&line).map_err(io)?;
    Ok(DirLock { _file: file, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link planted as the lock file is not followed: the lock is refused and the file it
    /// points at keeps its bytes. A directory every user can write to is refused; with the
    /// sticky bit (as /tmp) it is not.
    #[cfg(unix)]
    #[test]
    fn planted_links_and_shared_directories_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().expect("tmp");
        let victim = root.path().join("victim.txt");
        std::fs::write(&victim, "IMPORTANT").expect("victim");
        let out = root.path().join("out");
        std::fs::create_dir(&out).expect("out");
        std::os::unix::fs::symlink(&victim, out.join(FILE_NAME)).expect("link");
        let err = lock_dir(&out).expect_err("refused");
        assert!(matches!(err, LockError::Io { .. }), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "IMPORTANT");
        // The ledger and the outputs are opened the same way.
        std::os::unix::fs::symlink(&victim, out.join("spend.jsonl")).expect("link");
        assert!(crate::store::output::append_spend(&out, &[]).is_err());
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "IMPORTANT");

        let shared = root.path().join("shared");
        std::fs::create_dir(&shared).expect("dir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = lock_dir(&shared).expect_err("refused").to_string();
        assert!(err.contains("writable by every user (mode 777)"), "{err}");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        lock_dir(&shared).expect("sticky: as /tmp");
    }

    #[test]
    fn the_live_holder_is_named_only_while_the_lock_is_held() {
        let dir = tempfile::tempdir().expect("tmp");
        assert_eq!(live_holder(dir.path()), None, "no lock file");
        let lock = lock_dir(dir.path()).expect("lock");
        let h = live_holder(dir.path()).expect("held");
        assert_eq!(h.pid, std::process::id());
        drop(lock);
        assert_eq!(live_holder(dir.path()), None, "a stale file names nobody");
        // Probing took nothing: the directory can be locked again.
        lock_dir(dir.path()).expect("free");
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().expect("tmp");
        let first = lock_dir(dir.path()).expect("first");
        let text = std::fs::read_to_string(first.path()).expect("read");
        let h: Holder = serde_json::from_str(&text).expect("holder");
        assert_eq!(h.pid, std::process::id());
        assert!(chrono::DateTime::parse_from_rfc3339(&h.started_at).is_ok());
        let e = lock_dir(dir.path()).expect_err("busy");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.contains(&h.started_at), "{msg}");
        // The refused attempt did not wipe the holder's record.
        assert_eq!(std::fs::read_to_string(first.path()).expect("read"), text);
        drop(first);
        lock_dir(dir.path()).expect("free again");
    }
}
