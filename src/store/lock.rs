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

/// Takes the lock of `dir` (which must exist) without waiting.
pub fn lock_dir(dir: &Path) -> Result<DirLock, LockError> {
    let path = dir.join(FILE_NAME);
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    // Not truncated on open: until we hold the lock, the content is the holder's.
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
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
